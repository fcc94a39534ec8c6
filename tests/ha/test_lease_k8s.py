"""The Kubernetes Lease backend, against the official client's real HTTP requests: what a real API server cannot
be made to do on cue (docs/kubernetes.md, "What stays on the capture server").

A capture server (tests/support/k8s_capture.py) answers the coordination.k8s.io/v1 Lease and v1 ConfigMap calls from
an object store that does what the API server does with resourceVersion, and can stop answering (``down``). The
one-holder, takeover, 409 and two-writer paths and the kill -9 takeover of two daemons run on the real control
plane (tests/k8s/test_ha_lease.py, which uses the helpers here).
"""

import signal
import threading
import time
import uuid

import httpx
import pytest

from daemon.ha.lease_k8s import KubernetesLease
from tests.support.daemons import ha_replica_toml
from tests.support.k8s_capture import capture_server
from tests.support.overrides import interleaved as interleaved_store

LEASES = "/apis/coordination.k8s.io/v1/namespaces/gpuas/leases"
CONFIGMAPS = "/api/v1/namespaces/gpuas/configmaps"
NOT_FOUND = (404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
CONFLICT = (409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409})


class FakeApi:
    """Leases and ConfigMaps in one namespace, kept as the API server keeps them: every write stores a new
    resourceVersion, a create of an existing name and a replace based on an older resourceVersion are 409."""

    KINDS = {"leases": ("Lease", "coordination.k8s.io/v1", LEASES), "configmaps": ("ConfigMap", "v1", CONFIGMAPS)}

    def __init__(self):
        self.objs: dict[tuple[str, str], dict] = {}
        self.rv = 0
        self.conflicts = 0
        self.down = False  # answer 503 to everything (an API server that cannot be reached)
        self.lock = threading.Lock()

    def obj(self, plural, name):
        return self.objs.get((plural, name))

    def _store(self, plural, body):
        kind, version, _ = self.KINDS[plural]
        self.rv += 1
        meta = body["metadata"]
        meta["resourceVersion"] = str(self.rv)
        old = self.objs.get((plural, meta["name"]))
        meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        self.objs[(plural, meta["name"])] = {**body, "kind": kind, "apiVersion": version}
        return self.objs[(plural, meta["name"])]

    def routes(self):
        out = {}
        for plural, (kind, version, base) in self.KINDS.items():
            def handler(method, plural=plural, kind=kind, version=version):
                def answer(path, body):
                    with self.lock:
                        return self._answer(method, plural, kind, version, path, body)
                return answer
            out[("GET", base)] = handler("LIST")
            out[("POST", base)] = handler("POST")
            for m in ("GET", "PUT", "DELETE"):
                out[(m, base + "/[^/]+")] = handler(m)
        return out

    def _answer(self, method, plural, kind, version, path, body):
        if self.down:
            return 503, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "ServiceUnavailable",
                         "code": 503}
        if method == "LIST":
            items = [o for (p, _), o in sorted(self.objs.items()) if p == plural]
            return 200, {"kind": f"{kind}List", "apiVersion": version, "metadata": {"resourceVersion": str(self.rv)},
                         "items": items}
        if method == "POST":
            if (plural, body["metadata"]["name"]) in self.objs:
                self.conflicts += 1
                return CONFLICT
            return 201, self._store(plural, body)
        name = path.rsplit("/", 1)[1]
        cur = self.objs.get((plural, name))
        if cur is None:
            return NOT_FOUND
        if method == "GET":
            return 200, cur
        if method == "DELETE":
            del self.objs[(plural, name)]
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if body["metadata"].get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            self.conflicts += 1
            return CONFLICT
        return 200, self._store(plural, body)


def test_config_backend_kubernetes_wires_the_lease_into_a_daemon(tmp_path):
    from daemon.config import parse_config
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    store = FakeApi()
    with capture_server(store.routes()) as (api, _):
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
                              f"{api.configuration.host}\nusers:\n- name: u\n  user:\n    token: test\ncontexts:\n"
                              f"- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")
        cfg = parse_config({"cluster": {"gpus": 128}, "source": {"kind": "simulator", "simulator": {"tenants": 8}},
                            "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                            "state": {"path": str(tmp_path / "s.db")},
                            "actuators": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
                            "ha": {"enabled": True, "backend": "kubernetes", "namespace": "gpuas",
                                   "lease_name": "leader", "replica_id": "k1", "lease_ttl_s": 5}})
        d = Daemon(build_runtime(cfg), serve_http=False)
        try:
            assert d.runtime.lease.tick() and d.role() == "leader"
            d.cycle()
            assert d.last_result.acted and all(rep.ok for rep in d.last_result.reports)
            assert store.obj("leases", "leader")["spec"]["holderIdentity"].startswith("k1#")
        finally:
            d.runtime.lease.stop()
            d.runtime.close()


# ---- liveness of the other replicas (a clean leader stop keeps holds while one is alive) -------------------

def test_kubernetes_liveness_leases_name_the_other_replicas_and_go_with_them():
    store = FakeApi()
    with capture_server(store.routes()) as (api, cap):
        # a TTL far longer than the test: a loaded machine must not let a's lease lapse between two ticks (it did at
        # 1 s under CI-like load, and d took the lead); c's lapse below is written into its renewTime, not waited for
        a = KubernetesLease(api, "gpuas", "leader", replica_id="a", ttl_s=30.0)
        b = KubernetesLease(api, "gpuas", "leader", replica_id="b", ttl_s=30.0)
        assert a.tick() and not b.tick()
        assert a.peers() == ["b"] and b.peers() == ["a"]
        beats = sorted(n for p, n in store.objs if p == "leases" and n != "leader")
        assert beats == sorted([a.beat_name, b.beat_name]) and all(n.startswith("leader-replica-") for n in beats)
        assert store.obj("leases", b.beat_name)["spec"]["holderIdentity"] == b.holder
        b.stop()                                                           # a clean stop deletes its beat
        assert store.obj("leases", b.beat_name) is None and a.peers() == []
        c = KubernetesLease(api, "gpuas", "leader", replica_id="c", ttl_s=30.0)
        assert not c.tick() and a.peers() == ["c"]
        # c is killed: its beat lapses at once and, once long gone, the next replica to start deletes it
        store.obj("leases", c.beat_name)["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
        assert a.peers() == []
        d = KubernetesLease(api, "gpuas", "leader", replica_id="d", ttl_s=30.0)
        assert not d.tick()
        assert store.obj("leases", c.beat_name) is None and a.peers() == ["d"]
        a.stop()
        d.stop()
    deletes = [s["path"].rsplit("/", 1)[1] for s in cap.sent if s["method"] == "DELETE"]
    assert deletes == [b.beat_name, c.beat_name, a.beat_name, d.beat_name]


# ---- operator overrides in a ConfigMap ---------------------------------------------------------------------

def _overrides(api, tmp_path, name, store_cls=None, namespace="gpuas", **kw):
    from daemon.state.overrides import ConfigMapOverrideStore, Overrides
    from daemon.state.store import StateStore

    shared = (store_cls or ConfigMapOverrideStore)(api, namespace, "leader-overrides", **kw)
    return Overrides(StateStore(tmp_path / f"{name}.db"), shared, replica=name)


def interleaved():
    """A ConfigMap override store that runs `then` (another replica's write) between its first read and its
    write; `runs`: how many times it applied its change."""
    from daemon.state.overrides import ConfigMapOverrideStore

    return interleaved_store(ConfigMapOverrideStore)


def test_kubernetes_overrides_api_down_refuses_changes_and_keeps_the_last_read(tmp_path):
    from daemon.state.overrides import OverridesUnavailable

    fake = FakeApi()
    with capture_server(fake.routes()) as (api, _):
        ov = _overrides(api, tmp_path, "a")
        ov.change_global("ops", {"preemption_paused": True})
        fake.down = True
        with pytest.raises(OverridesUnavailable, match=r"cannot read the Kubernetes API \(ConfigMap "
                                                       r"gpuas/leader-overrides\): 503"):
            ov.change_tenant("ops", "t1", {"floor_gpus": 3})
        assert not ov.refresh() and ov.inputs().paused_all and ov.for_tenant("t1") == {}
        assert "planning with those last read" in ov.problem()
        assert len(ov.store.events("operator_change")) == 1
        fake.down = False
        assert ov.refresh() and ov.problem() is None


OP = "operator-token-0123456789"
OPH = {"Authorization": f"Bearer {OP}"}


def _replica_toml(tmp_path, name, kubeconfig, port, namespace="gpuas"):
    return ha_replica_toml(tmp_path, name, port, f'backend = "kubernetes"\nnamespace = "{namespace}"\n'
                           'lease_name = "leader"\n', f'[actuators.kubernetes]\nkubeconfig = "{kubeconfig}"\n')


def kill_9_takeover(tmp_path, kubeconfig, holder, namespace="gpuas", before_kill=None, after_takeover=None):
    """Two daemon processes whose lease and overrides are in the Kubernetes API at `kubeconfig` (`holder()`: the
    Lease's holderIdentity there). r1 leads, r2 stands by, a pause is set on r1's API, r1 is killed (SIGKILL)
    and r2 takes over. Returns the PATCH's answer and r2's next five plans' preemptions, its overrides and its
    operator_change events. `before_kill`/`after_takeover`: run at those moments (the real-apiserver test's
    checks). The capture server's version is below; the real apiserver's is tests/k8s/test_ha_lease.py."""
    from tests.conftest import free_port
    from tests.integration.test_ha_redis import Replica
    from tests.support.services import wait_for

    p1, p2 = free_port(), free_port()
    b1, b2 = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"

    def get(base, path):
        return httpx.get(f"{base}{path}", headers=OPH, timeout=10).json()

    reps = []
    try:
        r1 = Replica(tmp_path, "r1", _replica_toml(tmp_path, "r1", kubeconfig, p1, namespace))
        reps.append(r1)
        wait_for(lambda: holder().startswith("r1#") and get(b1, "/healthz")["role"] == "leader", timeout=120,
                 what="r1 leading")
        r2 = Replica(tmp_path, "r2", _replica_toml(tmp_path, "r2", kubeconfig, p2, namespace))
        reps.append(r2)
        wait_for(lambda: get(b2, "/healthz")["role"] == "standby" and get(b2, "/healthz")["cycles"] >= 2,
                 timeout=120, what="r2 standing by")
        # the control: in this cluster the leader's plans do preempt
        wait_for(lambda: get(b1, "/api/v1/plan")["preemptions"], timeout=60, what="r1 preempting")
        resp = httpx.patch(f"{b1}/api/v1/overrides", json={"preemption_paused": True}, headers=OPH)
        assert resp.status_code == 200, resp.text
        c2 = get(b2, "/healthz")["cycles"]  # every cycle r2 starts after these began after the pause
        wait_for(lambda: get(b2, "/healthz")["cycles"] >= c2 + 2, timeout=30, what="r2 cycling")
        if before_kill:
            before_kill()
        r1.proc.send_signal(signal.SIGKILL)
        r1.proc.wait()
        wait_for(lambda: holder().startswith("r2#") and get(b2, "/healthz")["role"] == "leader", timeout=60,
                 what="r2 taking over")
        if after_takeover:
            after_takeover()
        plans = {}
        deadline = time.monotonic() + 60
        while len(plans) < 5 and time.monotonic() < deadline:    # five plans the new leader made
            p = get(b2, "/api/v1/plan")
            plans[p["at"]] = p["preemptions"]
            time.sleep(0.3)
        return resp, plans, get(b2, "/api/v1/overrides"), get(b2, "/api/v1/events?kind=operator_change")["events"]
    finally:
        for rep in reps:
            rep.close()


def assert_the_pause_held(resp, plans, overrides, audit, namespace="gpuas"):
    """After the takeover: five plans of the new leader without a preemption, the pause and its audit event."""
    assert len(plans) == 5 and all(v == [] for v in plans.values()), plans
    assert overrides["global"] == {"preemption_paused": True}
    assert [(e["who"], e["scope"], e["replica"]) for e in audit] == [("ops", "global", "r1")]
    assert resp.json()["stored"] == f"the Kubernetes API (ConfigMap {namespace}/leader-overrides)"

