"""The Kubernetes Lease backend, against the official client's real HTTP requests (no API server here).

A capture server (tests/k8s_capture.py) answers the coordination.k8s.io/v1 Lease calls from a one-object
store that does what the API server does with resourceVersion: a write based on an older version is 409.
"""

import time

from daemon.leader_k8s import KubernetesLease
from tests.k8s_capture import capture_server

BASE = "/apis/coordination.k8s.io/v1/namespaces/gpuas/leases"
NOT_FOUND = (404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
CONFLICT = (409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409})


class OneLease:
    def __init__(self):
        self.obj = None
        self.rv = 0

    def _store(self, body):
        self.rv += 1
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.obj = {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", **body}
        return self.obj

    def get(self, path, body):
        return (200, self.obj) if self.obj else NOT_FOUND

    def post(self, path, body):
        return CONFLICT if self.obj else (201, self._store(body))

    def put(self, path, body):
        if self.obj is None:
            return NOT_FOUND
        if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            return CONFLICT
        return 200, self._store(body)

    def routes(self):
        return {("GET", f"{BASE}/leader"): self.get, ("POST", BASE): self.post, ("PUT", f"{BASE}/leader"): self.put}


def test_kubernetes_lease_one_holder_tokens_grow_stale_token_refused():
    store = OneLease()
    with capture_server(store.routes()) as (api, cap):
        a = KubernetesLease(api, "gpuas", "leader", replica_id="a", ttl_s=1.0)
        b = KubernetesLease(api, "gpuas", "leader", replica_id="b", ttl_s=1.0)
        assert a.tick() and a.token == 1 and not b.tick()
        assert a.fence("apply plan 1") == (True, "")
        assert a.tick() and a.token == 1                                   # renewed: same term
        held = store.obj["spec"]
        assert held["holderIdentity"].startswith("a#") and held["leaseTransitions"] == 1
        assert held["leaseDurationSeconds"] == 1
        stale_copy = a._read()
        time.sleep(1.3)                                                   # a stops renewing past the duration
        assert b.tick() and b.token == 2                                  # takeover raises leaseTransitions
        a._valid_until = float("inf")                                     # a, paused, still believes it leads
        ok, why = a.fence("apply plan 2")
        assert not ok and "stale" in why
        assert a._write(stale_copy, stale_copy) is False                  # an old resourceVersion is refused (409)
        assert not a.tick() and a.token is None                           # a's renewal fails: it stands down
        b.stop(release=True)                                              # a clean stop frees the lease at once
        assert a.tick() and a.token == 3
    puts = [s for s in cap.sent if s["method"] == "PUT"]
    assert puts and all(p["body"]["metadata"].get("resourceVersion") for p in puts)
    assert [s["method"] for s in cap.sent[:2]] == ["GET", "POST"]          # created when absent


def test_config_backend_kubernetes_wires_the_lease_into_a_daemon(tmp_path):
    from daemon.config import parse_config
    from daemon.runtime import build_runtime
    from daemon.service import Daemon

    store = OneLease()
    with capture_server(store.routes()) as (api, _):
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: "
                              f"{api.configuration.host}\nusers:\n- name: u\n  user:\n    token: test\ncontexts:\n"
                              f"- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n")
        cfg = parse_config({"cluster": {"gpus": 128}, "source": {"kind": "simulator", "simulator": {"tenants": 8}},
                            "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                            "state": {"path": str(tmp_path / "s.db")},
                            "actuators": {"kubernetes": {"kubeconfig": str(kubeconfig)}},
                            "ha": {"enabled": True, "backend": "kubernetes", "namespace": "gpuas", "lease_name": "leader",
                                   "replica_id": "k1", "lease_ttl_s": 5}})
        d = Daemon(build_runtime(cfg), serve_http=False)
        try:
            assert d.runtime.lease.tick() and d.role() == "leader"
            d.cycle()
            assert d.last_result.acted and all(rep.ok for rep in d.last_result.reports)
            assert store.obj["spec"]["holderIdentity"].startswith("k1#")
        finally:
            d.runtime.lease.stop()
            d.runtime.close()
