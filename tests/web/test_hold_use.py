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
from tests.conftest import REPO
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens

AT = pd.Timestamp("2026-01-06T13:50:00Z")
REPO_REPORTS = REPO / "reports" / "browser"
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
    alone = np.zeros(4, dtype=bool)                            # no pool
    use = hold_use(st, 0, alone, protected)
    assert use == {"g2": {"gpus": 16, "own": 6, "pool_others": 0, "others_protected": 4 + 2, "others_preemptible": 2,
                          "draining": 2, "free": 0},
                   "t4": {"gpus": 8, "own": 0, "pool_others": 0, "others_protected": 0, "others_preemptible": 0,
                          "draining": 0, "free": 8}}
    assert hold_use(st, 1, alone, protected) == {}              # nothing held for other-high
    pooled = st.nodes.held_by.copy()
    pooled[1] = HELD_BY_POOL                                   # n2 held for the high tier's pool

    st2 = dataclasses.replace(st, nodes=dataclasses.replace(st.nodes, held_by=pooled))
    pool = np.array([True, True, False, False])                # held for tenant-0001 and other-high together
    g2 = hold_use(st2, 0, pool, protected)["g2"]
    assert g2["gpus"] == 16
    # other-high's job on the pool is the pool's other tenant's work, not work that "started there before the plan
    # held the nodes"; floored-low's on tenant-0001's own n1 still is
    assert (g2["pool_others"], g2["others_protected"], g2["others_preemptible"]) == (4, 2, 2)
    assert hold_use(st2, 0, alone, protected)["g2"]["gpus"] == 8   # not pooled: its own nodes only


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
    assert rows["g2"] == {"type": "g2", "planned": 16, "pooled": False, "gpus": 16, "own": 6, "pool_others": 0,
                          "others_protected": 6, "others_preemptible": 2, "draining": 2, "free": 0}
    assert rows["t4"]["free"] == 8
    assert "other-high" not in str(body["hold_use"])            # GPU counts only, no other tenant's name
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/tenants/tenant-0001").text
    row = text[text.index('id="hold-use-g2"'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num others-protected">6</td>' in row and '<td class="num others-preemptible">2</td>' in row
    assert "6 of your held g2 GPUs run other tenants' work that is never preempted" in text
    assert 'id="hold-occupied-t4"' not in text


def test_on_the_high_tiers_pool_the_page_counts_the_pools_other_tenants_apart():
    """Before: on `run --sim` a high-tier tenant held 18 GPUs of the 600-GPU pool read "GPUs held for you: 18" and
    "481 of your held gpu GPUs run other tenants' work that is never preempted (... that started there before the
    plan held these nodes for you)": the other high-tier tenants' work, on the pool held for them too."""
    st = _state()
    pool_nodes = st.nodes.held_by.copy()
    pool_nodes[:3] = HELD_BY_POOL                              # n1..n3 are the high tier's pool
    snap = _snapshot()
    snap = dataclasses.replace(snap, state=dataclasses.replace(st, nodes=dataclasses.replace(st.nodes,
                                                                                             held_by=pool_nodes)),
                               plan=dataclasses.replace(snap.plan, pooled=("tenant-0001", "other-high")))
    backend = SnapshotBackend(snap)
    backend.overrides().change_tenant("op", "floored-low", {"floor_gpus": 2})
    client = TestClient(build_app(backend))
    rows = {r["type"]: r for r in client.get("/api/v1/tenants/tenant-0001", headers=h(OP)).json()["hold_use"]}
    assert rows["g2"]["pooled"] and (rows["g2"]["pool_others"], rows["g2"]["others_protected"]) == (4, 2)
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/tenants/tenant-0001").text
    assert "held together for every high-tier tenant" in text
    row = text[text.index('id="hold-use-g2"'):]
    row = row[:row.index("</tr>")]
    assert '<td class="num pool-others">4</td>' in row and '<td class="num others-protected">2</td>' in row
    assert "2 of the pool's g2 GPUs run other tenants' work that is never preempted" in text
    assert "of your held g2 GPUs" not in text


def test_in_the_browser_a_pooled_tenant_sees_the_pool_counted_as_a_pool(tmp_path):
    """`run --sim` (the high tier held as one pool) in headless Chromium, as the tenant and as an operator: the page
    says the nodes are the pool and counts the pool's other tenants apart, so no count of "your held GPUs" exceeds
    the GPUs held."""
    import httpx

    from tests.support.browser import chromium, logged_in
    from tests.support.daemons import T1, sim_process
    from tests.web.test_console import BROWSER_SETTINGS

    def pool_in_use(base: str) -> bool:
        r = httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers=h(OP))
        rows = r.json().get("hold_use") if r.status_code == 200 else None
        return bool(rows) and all(x["pooled"] for x in rows) and sum(x["pool_others"] for x in rows) > 0

    with sim_process(tmp_path, BROWSER_SETTINGS, pool_in_use, "a pooled tenant with others on the pool") as base, \
            chromium() as new_page:
        for token in (T1, OP):
            page = logged_in(new_page, base, token)
            assert page.goto(f"{base}/ui/tenants/tenant-0001") == 200
            assert "held together for every high-tier tenant" in page.eval("document.querySelector('#hold-pooled')"
                                                                            ".textContent")
            cells = page.eval("Array.from(document.querySelectorAll('#hold-use tr[id^=hold-use-]')).map(r => "
                              "Array.from(r.cells).map(c => c.textContent))")
            for _type, planned, gpus, own, pool_others, protected, preemptible, draining, free in cells:
                assert int(gpus) == sum(map(int, (own, pool_others, protected, preemptible, draining, free)))
            assert sum(int(c[4]) for c in cells) > 0
            text = page.eval("document.querySelector('#hold-use').innerText")
            assert "of your held" not in text, text
            page.screenshot(REPO_REPORTS / f"tenant-pool-{'tenant' if token == T1 else 'operator'}.png")


def test_on_a_one_model_cluster_the_page_does_not_name_the_default_type():
    """`make run`'s tenant page (no [fleet] types, every GPU of the default type "gpu") read "98 of the pool's gpu
    GPUs run other tenants' work ...": the type is named only where there are types to tell apart."""
    st = _state()
    one = dataclasses.replace(st, nodes=dataclasses.replace(st.nodes, gpu_type=None),
                              jobs=dataclasses.replace(st.jobs, accepts=None))
    snap = _snapshot()
    snap = dataclasses.replace(snap, cfg=with_tokens(Config()), state=one,
                               plan=dataclasses.replace(snap.plan, holds_by_type={}, capacity_by_type={},
                                                        high_pool_by_type={}))
    client = TestClient(build_app(SnapshotBackend(snap)))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/tenants/tenant-0001").text
    assert "of your held GPUs run other tenants' work that is never preempted" in text, text[-3000:]
    assert "gpu GPUs" not in text


def test_a_job_on_several_nodes_occupies_its_gpus_on_each_of_its_nodes():
    """other-low's -N 2 --gres=gpu:4 job runs on n3 (t4, held for tenant-0001) and n4 (g2, not held): squeue's node
    is the hostlist 'n[3-4]'. By hand: 4 of n3's 8 are other tenants' preemptible work, 4 free; the GPUs in use per
    type count it on both (t4: 4, g2: 22 + 4). The old code found it on no node: n3 read 0 in use."""
    from daemon.web.views import _in_use_by_type

    st = _state()
    j = st.jobs
    on = np.empty(len(j) + 1, dtype=object)
    on[:] = [()] * (len(j) + 1)
    on[-1] = ("n3", "n4")

    def add(a, v):
        return np.concatenate([a, np.array([v], dtype=a.dtype)])

    jobs = Jobs(add(j.ids, "l2"), add(j.tenant, 2), add(j.gpus, 8), add(j.priority, PRIORITY["low"]),
                add(j.running, True), add(j.runtime_s, 600.0), add(j.wait_s, 0.0), add(j.node, "n[3-4]"),
                accepts=np.concatenate([j.accepts, np.array([None], dtype=object)]), on_nodes=on)
    jobs.accepts[-1] = ()
    st = dataclasses.replace(st, jobs=jobs, nodes=dataclasses.replace(st.nodes, free=np.array([0, 0, 4, 4])))
    protected = np.array([True, True, False, True])
    t4 = hold_use(st, 0, np.zeros(4, dtype=bool), protected)["t4"]
    assert (t4["others_preemptible"], t4["free"]) == (4, 4)
    snap = dataclasses.replace(_snapshot(), state=st)
    assert _in_use_by_type(snap) == {"g2": 6 + 2 + 4 + 2 + 4, "t4": 4}
