"""HA on a real coordination.k8s.io Lease (the control plane of tests/support/k8s_cluster.py): one holder at a
time, a takeover when the holder stops renewing, a stale holder's write refused by the API server (409), and the
operator's overrides in a real ConfigMap that survive a kill -9 of the leader. The same paths against recorded
requests are in tests/ha/test_lease_k8s.py."""

import json
import signal
import time

import httpx
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.ha.lease_k8s import KubernetesLease
from tests.conftest import free_port
from tests.ha.test_lease_k8s import OPH, _overrides, _replica_toml
from tests.integration.test_ha_redis import Replica
from tests.support.services import wait_for

# one control plane for all of them: the tests of this package run on one worker
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


def test_two_override_writers_on_a_real_configmap_the_older_version_is_refused_and_reapplied(kube, tmp_path):
    """Two replicas change one tenant at once: the API server refuses the write based on the older
    resourceVersion (409) and it is re-applied on the newer ConfigMap; neither change is lost."""
    from daemon.state.overrides import ConfigMapOverrideStore

    ns = kube.namespace("ov")
    api = kube.api()

    class Interleaved(ConfigMapOverrideStore):
        then = None
        runs = 0

        def update(self, mutate, at):
            def racing(doc):
                out = mutate(doc)
                self.runs += 1
                if self.runs == 1:
                    self.then()
                return out
            return super().update(racing, at)

    b = _overrides(api, tmp_path, "b", namespace=ns)
    b.change_global("ops", {"preemption_paused": True})                 # creates the ConfigMap
    a = _overrides(api, tmp_path, "a", Interleaved, namespace=ns)
    a.shared.then = lambda: b.change_tenant("bob", "t1", {"floor_gpus": 4})
    out = a.change_tenant("alice", "t1", {"rate_override": 5})
    assert a.shared.runs == 2                                           # refused once (409), applied again
    assert out["override"] == {"floor_gpus": 4, "rate_override": 5.0}
    cm = k8s.CoreV1Api(api).read_namespaced_config_map("leader-overrides", ns).data
    assert json.loads(cm["overrides.json"]) == {"tenants": {"t1": {"floor_gpus": 4, "rate_override": 5.0}},
                                                "global": {"preemption_paused": True}}
    assert [e["detail"]["who"] for e in json.loads(cm["audit.json"])] == ["ops", "bob", "alice"]


@pytest.mark.services
def test_two_daemons_on_a_real_lease_kill_9_the_leader_the_standby_takes_over_and_overrides_survive(kube, tmp_path):
    """Two daemon processes whose lease and overrides are in the real API server. The leader is killed (SIGKILL):
    the standby takes the Lease over, the dead leader's last Lease write is refused (409), and the pause set on
    the old leader holds: the new leader plans no preemption and shows the pause and its audit event."""
    ns = kube.namespace("ha2")
    coord = k8s.CoordinationV1Api(kube.api())
    p1, p2 = free_port(), free_port()
    b1, b2 = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"

    def get(base, path):
        return httpx.get(f"{base}{path}", headers=OPH, timeout=10).json()

    def holder():
        try:
            return coord.read_namespaced_lease("leader", ns).spec.holder_identity or ""
        except ApiException:
            return ""

    reps = []
    try:
        r1 = Replica(tmp_path, "r1", _replica_toml(tmp_path, "r1", kube.admin_kubeconfig, p1, namespace=ns))
        reps.append(r1)
        wait_for(lambda: holder().startswith("r1#") and get(b1, "/healthz")["role"] == "leader", timeout=120,
                 what="r1 leading")
        r2 = Replica(tmp_path, "r2", _replica_toml(tmp_path, "r2", kube.admin_kubeconfig, p2, namespace=ns))
        reps.append(r2)
        wait_for(lambda: get(b2, "/healthz")["role"] == "standby" and get(b2, "/healthz")["cycles"] >= 2,
                 timeout=120, what="r2 standing by")
        # the control: in this cluster the leader's plans do preempt
        wait_for(lambda: get(b1, "/api/v1/plan")["preemptions"], timeout=60, what="r1 preempting")
        resp = httpx.patch(f"{b1}/api/v1/overrides", json={"preemption_paused": True}, headers=OPH)
        assert resp.status_code == 200, resp.text
        assert resp.json()["stored"] == f"the Kubernetes API (ConfigMap {ns}/leader-overrides)"
        c2 = get(b2, "/healthz")["cycles"]  # every cycle r2 starts after these began after the pause
        wait_for(lambda: get(b2, "/healthz")["cycles"] >= c2 + 2, timeout=30, what="r2 cycling")
        r1_lease = coord.read_namespaced_lease("leader", ns)            # the Lease as r1 last wrote it
        assert r1_lease.spec.holder_identity.startswith("r1#")
        r1.proc.send_signal(signal.SIGKILL)
        r1.proc.wait()
        wait_for(lambda: holder().startswith("r2#") and get(b2, "/healthz")["role"] == "leader", timeout=60,
                 what="r2 taking over")
        taken = coord.read_namespaced_lease("leader", ns).spec
        assert taken.lease_transitions == r1_lease.spec.lease_transitions + 1
        # r1's renewal, had it woken: based on the version it read, the API server refuses it
        r1_lease.spec.renew_time = taken.renew_time
        with pytest.raises(ApiException) as refused:
            coord.replace_namespaced_lease("leader", ns, r1_lease)
        assert refused.value.status == 409
        assert holder().startswith("r2#")
        plans = {}
        deadline = time.monotonic() + 60
        while len(plans) < 5 and time.monotonic() < deadline:    # five plans the new leader made
            p = get(b2, "/api/v1/plan")
            plans[p["at"]] = p["preemptions"]
            time.sleep(0.3)
        overrides = get(b2, "/api/v1/overrides")
        audit = get(b2, "/api/v1/events?kind=operator_change")["events"]
    finally:
        for rep in reps:
            rep.close()
    assert len(plans) == 5 and all(v == [] for v in plans.values()), plans
    assert overrides["global"] == {"preemption_paused": True}
    assert [(e["who"], e["scope"], e["replica"]) for e in audit] == [("ops", "global", "r1")]
    cm = k8s.CoreV1Api(kube.api()).read_namespaced_config_map("leader-overrides", ns).data
    assert json.loads(cm["overrides.json"])["global"] == {"preemption_paused": True}
