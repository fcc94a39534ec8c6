"""What occupies a tenant's held GPUs (issue 37, item 2): a high-tier job waited beside its own hold because other
tenants' high-tier jobs, which are never preempted, ran on the hold's nodes. The split is computed from the
snapshot's nodes and jobs (daemon/web/hold_use.py) and shown on the tenant page and in /api/v1/tenants/<t>."""

import dataclasses

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.policy.state import HELD_BY_POOL, PRIORITY, UNHELD, ClusterState, Jobs, Nodes
from daemon.policy.types import Plan, PolicyMemory
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from daemon.web.hold_use import hold_use
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens

AT = pd.Timestamp("2026-01-06T13:50:00Z")
TENANTS = ("tenant-0001", "other-high", "other-low", "floored-low")


def _state() -> ClusterState:
    """tenant-0001 (high, accepts g2 only) is held n1, n2 (g2) and n3 (t4); its 8-GPU job waits. On n2 run
    other-high's 4-GPU job (never preempted), other-low's 2-GPU job (preemptible) and 2 GPUs drain; floored-low's
    low job on n1 is protected by its floor; n3 is free; n4 (g2) is not held."""
    nodes = Nodes(names=np.array(["n1", "n2", "n3", "n4"], dtype=object), gpus=np.array([8, 8, 8, 8]),
                  free=np.array([0, 0, 8, 8]), draining=np.array([0, 2, 0, 0]),
                  held_by=np.array([0, 0, 0, UNHELD]), gpu_type=np.array(["g2", "g2", "t4", "g2"], dtype=object))
    rows = [("a1", 0, 6, "high", True, "n1"), ("f1", 3, 2, "low", True, "n1"), ("h1", 1, 4, "high", True, "n2"),
            ("l1", 2, 2, "low", True, "n2"), ("a2", 0, 8, "high", False, "")]
    ids, ten, g, pr, run, node = zip(*rows)
    accepts = np.empty(len(rows), dtype=object)
    accepts[:] = [("g2",)] * len(rows)
    jobs = Jobs(np.array(ids, dtype=object), np.array(ten), np.array(g),
                np.array([PRIORITY[p] for p in pr], dtype=np.int8), np.array(run),
                np.array([600.0 if r else 0.0 for r in run]), np.array([0.0 if r else 300.0 for r in run]),
                np.array(node, dtype=object), accepts=accepts)
    return ClusterState(AT, TENANTS, ("high", "high", "low", "low"), 32, np.array([6.0, 4.0, 2.0, 2.0]),
                        np.array([8.0, 0.0, 0.0, 0.0]), jobs, draining=2, nodes=nodes)


def test_the_split_of_a_hold_on_a_hand_made_state():
    st = _state()
    protected = np.array([True, True, False, True])           # held, high, unprotected, floored
    use = hold_use(st, 0, False, protected)
    assert use == {"g2": {"gpus": 16, "own": 6, "others_protected": 4 + 2, "others_preemptible": 2, "draining": 2,
                          "free": 0},
                   "t4": {"gpus": 8, "own": 0, "others_protected": 0, "others_preemptible": 0, "draining": 0,
                          "free": 8}}
    assert hold_use(st, 1, False, protected) == {}              # nothing held for other-high
    pooled = st.nodes.held_by.copy()
    pooled[1] = HELD_BY_POOL                                   # n2 held for the high tier's pool

    st2 = dataclasses.replace(st, nodes=dataclasses.replace(st.nodes, held_by=pooled))
    assert hold_use(st2, 0, True, protected)["g2"]["gpus"] == 16
    assert hold_use(st2, 0, False, protected)["g2"]["gpus"] == 8   # not pooled: its own nodes only


def _snapshot() -> Snapshot:
    st = _state()
    p = Plan(at=AT.isoformat(), capacity=32, load=0.5, high_pool=8, reservations={"tenant-0001": 24},
             quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="m", notes=(),
             memory=PolicyMemory(), holds_by_type={"tenant-0001": {"g2": 16, "t4": 8}},
             capacity_by_type={"g2": 24, "t4": 8}, high_pool_by_type={"g2": 8, "t4": 0})
    cfg = with_tokens(Config(fleet={"types": ["g2", "t4"]}))
    return Snapshot(cfg=cfg, plan=p, state=st, cycle=1)


def test_the_tenant_page_and_the_api_say_what_occupies_the_hold():
    """Before: the page showed 16 GPUs held on g2, 6 used, and a job waiting, with no word of why."""
    from tests.support.daemons import T1

    backend = SnapshotBackend(_snapshot())
    backend.overrides().change_tenant("op", "floored-low", {"floor_gpus": 2})   # an operator's floor protects it
    client = TestClient(build_app(backend))
    body = client.get("/api/v1/tenants/tenant-0001", headers=h(T1)).json()   # the tenant's own token
    rows = {r["type"]: r for r in body["hold_use"]}
    assert rows["g2"] == {"type": "g2", "planned": 16, "gpus": 16, "own": 6, "others_protected": 6,
                          "others_preemptible": 2, "draining": 2, "free": 0}
    assert rows["t4"]["free"] == 8
    assert "other-high" not in str(body["hold_use"])            # GPU counts only, no other tenant's name
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/tenants/tenant-0001").text
    row = text[text.index('id="hold-use-g2"'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num others-protected">6</td>' in row and '<td class="num others-preemptible">2</td>' in row
    assert "6 of your held g2 GPUs run other tenants' work that is never preempted" in text
    assert 'id="hold-occupied-t4"' not in text
