"""Plain-namespace mode's GPU quotas on the real API server (daemon/actuators/k8s/actuator.py): the plan's cap is a
ResourceQuota that the apiserver's quota admission enforces on non-preemptible pods only (a normal pod over the
cap is refused, a low one is not); at start-up our quota in a namespace no configured tenant has is deleted, at
stop our quotas go from the tenants' namespaces, and a quota without our label is never touched. The quota's body
is pinned in tests/actuators/test_k8s_actuator.py."""

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import KubernetesActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.support.k8s_cluster import gpu_pod
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

OURS = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}


def _plan(quotas):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=0, reservations={}, quotas=quotas,
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


def _quota(core, ns, labels, gpus=2):
    core.create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {
        "name": "gpu-autoscaler", "labels": labels}, "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}}})


def _quotas(core, ns):
    return [q.metadata.name for q in core.list_namespaced_resource_quota(ns).items]


def test_the_cap_refuses_a_normal_pod_over_it_never_a_low_one_and_the_sweeps_touch_only_ours(kube):
    core = k8s.CoreV1Api(kube.api())
    team, gone, theirs = kube.namespace("team"), kube.namespace("gone"), kube.namespace("theirs")
    _quota(core, gone, OURS)                     # an earlier run's, for a tenant no longer configured
    _quota(core, theirs, {})                     # somebody else's, same name, not our label
    tenants = [TenantConfig(name="team-a", tier="normal", k8s_namespace=team),
               TenantConfig(name="other", tier="normal", k8s_namespace=theirs)]
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(), tenants, dry_run=False)
    rep = act.apply(_plan({"team-a": 4}))
    assert rep.ok, rep.errors
    assert f"delete ResourceQuota {gone}/gpu-autoscaler: not a configured tenant's namespace" in " ".join(
        rep.actions), rep.actions
    assert _quotas(core, gone) == [] and _quotas(core, theirs) == ["gpu-autoscaler"]

    def counted():
        st = core.read_namespaced_resource_quota("gpu-autoscaler", team).status
        return st is not None and (st.hard or {}).get("requests.nvidia.com/gpu") == "4"
    wait_for(counted, timeout=60, what="the quota controller's status")

    def create(name, gpus, pclass):
        core.create_namespaced_pod(team, gpu_pod(team, name, gpus, pclass))
    with pytest.raises(ApiException) as refused:                         # a normal pod over the cap
        create("big-normal", 8, "gpu-autoscaler-normal")
    assert refused.value.status == 403 and "exceeded quota: gpu-autoscaler" in refused.value.body
    create("big-low", 8, "gpu-autoscaler-low")                           # preemptible: not capped
    create("small-normal", 4, "gpu-autoscaler-normal")                   # within the cap
    rep = act.release_holds()                                            # the daemon stops
    assert rep.ok and rep.actions == [f"delete ResourceQuota {team}/gpu-autoscaler: the daemon stops"], rep
    assert _quotas(core, team) == [] and _quotas(core, theirs) == ["gpu-autoscaler"]


def _replica(kube, tenants, redis_url, name):
    """A replica: its own actuator (a new process: no quota written yet), fenced by its own real Redis lease."""
    import redis

    from daemon.ha.fencing import FencedActuator
    from daemon.ha.lease import RedisLease

    lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
    return lease, FencedActuator(KubernetesActuator(kube.api(), KubernetesActuatorConfig(), tenants, dry_run=False),
                                 lease)


def _cap(core, ns):
    """The GPUs our quota in `ns` caps, None when there is none."""
    try:
        return int(core.read_namespaced_resource_quota("gpu-autoscaler", ns).spec.hard["requests.nvidia.com/gpu"])
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


@pytest.mark.services
def test_a_replica_leading_again_rewrites_the_caps_another_leader_changed_since_it_led(kube, r, redis_url):
    """The stale record: a caps team-a at 10 and has no cap on team-b, is paused past its lease; b leads and caps
    team-a at 40 and team-b at 6, then dies; a leads again with its first plan. Before, a skipped both writes
    (its record said 10 and none) and the caps stayed 40 and 6: team-a's real cap was lost."""
    core = k8s.CoreV1Api(kube.api())
    ns_a, ns_b = kube.namespace("team-a"), kube.namespace("team-b")
    tenants = [TenantConfig(name="team-a", tier="normal", k8s_namespace=ns_a),
               TenantConfig(name="team-b", tier="normal", k8s_namespace=ns_b)]
    lease_a, a = _replica(kube, tenants, redis_url, "a")
    assert lease_a.tick() and lease_a.token == 1
    rep = a.apply(_plan({"team-a": 10}))
    assert rep.ok, rep.errors
    assert (_cap(core, ns_a), _cap(core, ns_b)) == (10, None)
    r.delete("gpuas:leader")                                    # a paused past its lease (its key lapsed)
    assert not lease_a.tick()                                   # it notices: it stands by
    lease_b, b = _replica(kube, tenants, redis_url, "b")
    assert lease_b.tick() and lease_b.token == 2
    rep = b.apply(_plan({"team-a": 40, "team-b": 6}))
    assert rep.ok, rep.errors
    assert (_cap(core, ns_a), _cap(core, ns_b)) == (40, 6)
    r.delete("gpuas:leader")                                    # b dies
    assert lease_a.tick() and lease_a.token == 3                # a leads again
    rep = a.apply(_plan({"team-a": 10}))
    assert rep.ok, rep.errors
    assert (_cap(core, ns_a), _cap(core, ns_b)) == (10, None), "another leader's caps stayed"
    assert {e["token"] for e in lease_a.ledger() if e["holder"] == "a"} == {1, 3}   # every write of a's fenced
