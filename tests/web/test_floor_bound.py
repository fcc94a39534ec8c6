"""An operator's floor_gpus larger than the cluster is refused, as a window that large is (docs/console-and-api.md).

Found on a run --sim (1,024 GPUs): PATCH {"floor_gpus": 100000} (a typo for 100) was stored with a 200, and the plan
then held 496 GPUs for that tenant, everything its other holds left, with "467 protected jobs have no place yet" and
no word of the typo."""

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens

T0 = pd.Timestamp("2026-01-12T14:10:00Z")
TENANTS = ("tenant-0001", "tenant-0002")


def _backend() -> SnapshotBackend:
    cfg = with_tokens(Config(cluster={"gpus": 256}))
    st = ClusterState(T0, TENANTS, ("low", "normal"), 256, np.array([8.0, 8.0]), np.zeros(2))
    return SnapshotBackend(Snapshot(cfg=cfg, plan=plan(None, st, PolicyMemory(), cfg), state=st, cycle=1))


def test_a_floor_larger_than_the_cluster_is_refused_in_the_api_and_the_console_and_nothing_is_stored():
    backend = _backend()
    client = TestClient(build_app(backend))
    r = client.patch("/api/v1/tenants/tenant-0001", json={"floor_gpus": 100000}, headers=h(OP))
    assert r.status_code == 400, r.text
    assert r.json() == {"error": "floor_gpus: 100000 is more than the 256 GPUs the cluster has", "field": "floor_gpus"}
    client.cookies.set("gpuas_token", OP)
    r = client.post("/ui/tenants/tenant-0001/override", data={"floor_gpus": "100000", "tier": ""},
                    headers={"origin": "http://testserver"})
    assert r.status_code == 400 and "floor_gpus: 100000 is more than the 256 GPUs the cluster has" in r.text
    assert backend.overrides().for_tenant("tenant-0001") == {}           # nothing stored, nothing audited
    ok = client.patch("/api/v1/tenants/tenant-0001", json={"floor_gpus": 256}, headers=h(OP))
    assert ok.status_code == 200 and backend.overrides().for_tenant("tenant-0001") == {"floor_gpus": 256}
