"""HA on a real coordination.k8s.io Lease (the control plane of tests/support/k8s_cluster.py): one holder at a
time, a takeover when the holder stops renewing, a stale holder's write refused by the API server (409), and the
operator's overrides in a real ConfigMap that survive a kill -9 of the leader. The same paths against recorded
requests are in tests/ha/test_lease_k8s.py."""

import datetime as dt
import json

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.ha.lease_k8s import KubernetesLease
from tests.ha.test_lease_k8s import _overrides, assert_the_pause_held, interleaved, kill_9_takeover
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")


def test_one_holder_on_a_real_lease_takeover_raises_the_token_and_a_stale_write_is_refused(kube):
    ns = kube.namespace("ha")
    api = kube.api()
    coord = k8s.CoordinationV1Api(api)
    a = KubernetesLease(api, ns, "leader", replica_id="a", ttl_s=1.0)
    b = KubernetesLease(api, ns, "leader", replica_id="b", ttl_s=1.0)
    assert a.tick() and a.token == 1 and not b.tick()
    assert a.fence("apply plan 1") == (True, "")
    stale = a._read()                                                   # a's last view of its lease
    held = coord.read_namespaced_lease("leader", ns).spec
    assert held.holder_identity == a.holder and held.lease_transitions == 1 and held.lease_duration_seconds == 1
    # a stops renewing (paused): once its lease lapsed on the server's record, b takes over with the next token
    wait_for(b.tick, timeout=30, interval=0.2, what="b taking over a's lapsed lease")
    assert b.token == 2
    held = coord.read_namespaced_lease("leader", ns).spec
    assert held.holder_identity == b.holder and held.lease_transitions == 2
    a._valid_until = float("inf")                                       # a, woken, still believes it leads
    ok, why = a.fence("apply plan 2")
    assert not ok and "stale" in why
    with pytest.raises(ApiException) as refused:                         # the API server refuses the old version
        coord.replace_namespaced_lease("leader", ns, stale)
    assert refused.value.status == 409
    assert a._write(stale, stale) is False                              # ... and the backend reads that as "no"
    assert not a.tick() and a.token is None                             # a stands down
    assert coord.read_namespaced_lease("leader", ns).spec.holder_identity == b.holder
    b.stop(release=True)                                                # a clean stop frees the lease at once
    assert a.tick() and a.token == 3
    a.stop()


def test_a_real_lease_with_too_little_time_left_does_not_act(kube):
    """The fence refuses an act when the lease, as the API server holds it, has less than the safety margin left
    (a renewal that went astray: the act could outlast the lease), like the Redis backend's PTTL check."""
    ns = kube.namespace("ha-margin")
    coord = k8s.CoordinationV1Api(kube.api())
    a = KubernetesLease(kube.api(), ns, "leader", replica_id="a", ttl_s=10.0, safety_margin=0.5)
    assert a.tick() and a.fence("apply plan 1") == (True, "")
    held = coord.read_namespaced_lease("leader", ns)
    held.spec.renew_time = held.spec.renew_time - dt.timedelta(seconds=7)   # 3 s of 10 s left on the server (< 50%)
    coord.replace_namespaced_lease("leader", ns, held)
    a._valid_until = float("inf")                                          # a's own clock would still let it act
    ok, why = a.fence("apply plan 2")
    assert not ok and "about to expire" in why
    a.stop()


def test_two_override_writers_on_a_real_configmap_the_older_version_is_refused_and_reapplied(kube, tmp_path):
    """Two replicas change one tenant at once: the API server refuses the write based on the older
    resourceVersion (409) and it is re-applied on the newer ConfigMap; neither change is lost."""
    ns = kube.namespace("ov")
    api = kube.api()
    b = _overrides(api, tmp_path, "b", namespace=ns)
    b.change_global("ops", {"preemption_paused": True})                 # creates the ConfigMap
    a = _overrides(api, tmp_path, "a", interleaved(), namespace=ns)
    a.shared.then = lambda: b.change_tenant("bob", "t1", {"floor_gpus": 4})
    out = a.change_tenant("alice", "t1", {"rate_override": 5})
    assert a.shared.runs == 2                                           # refused once (409), applied again
    assert out["override"] == {"floor_gpus": 4, "rate_override": 5.0}
    cm = k8s.CoreV1Api(api).read_namespaced_config_map("leader-overrides", ns).data
    assert json.loads(cm["overrides.json"]) == {"tenants": {"t1": {"floor_gpus": 4, "rate_override": 5.0}},
                                                "global": {"preemption_paused": True}}
    assert [e["detail"]["who"] for e in json.loads(cm["audit.json"])] == ["ops", "bob", "alice"]
    for ov in (a, b):                       # both replicas read the result, and each audit event is copied once
        assert ov.refresh() and ov.inputs().paused_all and ov.for_tenant("t1")["floor_gpus"] == 4
        assert [e["who"] for e in ov.store.events("operator_change")] == ["ops", "bob", "alice"]
        assert ov.refresh() and len(ov.store.events("operator_change")) == 3


def test_a_window_set_on_one_replica_is_the_successors_on_a_real_configmap(kube, tmp_path):
    """With the Kubernetes lease backend the operator's windows live in the overrides ConfigMap (as in Redis): a
    window set through one replica is in a new replica's inputs, beside the tenants' overrides, and it deletes it."""
    from daemon.config import WindowConfig
    from daemon.config.windows import problems

    ns = kube.namespace("ov")
    api = kube.api()
    check = lambda ws: problems(ws.values(), {"gpu": 32}, False)  # noqa: E731
    win = WindowConfig.model_validate({"name": "eod", "tenant": "t1", "gpus": 16, "every": "daily", "at": "14:00",
                                       "timezone": "UTC", "duration_minutes": 60})
    a = _overrides(api, tmp_path, "a", namespace=ns)
    a.change_tenant("ops", "t1", {"floor_gpus": 4})
    a.change_window("ops", "eod", win, check)
    b = _overrides(api, tmp_path, "b", namespace=ns)      # a new replica: its own SQLite, never told of either
    assert b.refresh() and [w.model_dump() for w in b.cycle_inputs().windows] == [win.model_dump()]
    assert b.for_tenant("t1") == {"floor_gpus": 4}
    b.change_window("ops", "eod", None, check)
    assert a.refresh() and a.cycle_inputs().windows == () and a.for_tenant("t1") == {"floor_gpus": 4}


@pytest.mark.services
def test_two_daemons_on_a_real_lease_kill_9_the_leader_the_standby_takes_over_and_overrides_survive(kube, tmp_path):
    """Two daemon processes whose lease and overrides are in the real API server. The leader is killed (SIGKILL):
    the standby takes the Lease over, the dead leader's last Lease write is refused (409), and the pause set on
    the old leader holds: the new leader plans no preemption and shows the pause and its audit event."""
    ns = kube.namespace("ha2")
    coord = k8s.CoordinationV1Api(kube.api())
    seen = {}

    def holder():
        try:
            return coord.read_namespaced_lease("leader", ns).spec.holder_identity or ""
        except ApiException:
            return ""

    def before_kill():
        seen["r1"] = coord.read_namespaced_lease("leader", ns)           # the Lease as r1 last wrote it
        assert seen["r1"].spec.holder_identity.startswith("r1#")

    def after_takeover():
        r1_lease, taken = seen["r1"], coord.read_namespaced_lease("leader", ns).spec
        assert taken.lease_transitions == r1_lease.spec.lease_transitions + 1
        # r1's renewal, had it woken: based on the version it read, the API server refuses it
        r1_lease.spec.renew_time = taken.renew_time
        with pytest.raises(ApiException) as refused:
            coord.replace_namespaced_lease("leader", ns, r1_lease)
        assert refused.value.status == 409
        assert holder().startswith("r2#")

    out = kill_9_takeover(tmp_path, kube.admin_kubeconfig, holder, ns, before_kill, after_takeover)
    assert_the_pause_held(*out, namespace=ns)
    cm = k8s.CoreV1Api(kube.api()).read_namespaced_config_map("leader-overrides", ns).data
    assert json.loads(cm["overrides.json"])["global"] == {"preemption_paused": True}
