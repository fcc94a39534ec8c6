"""A recurring window in the pure plan (issue 39): on a mixed fleet its GPUs are held on the types it names; an
operator's (API) window replaces the config's of the same name; the plan carries the windows in force."""

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd

from daemon.config import WindowConfig, parse_config
from daemon.policy.engine import plan
from daemon.policy.state import UNHELD, ClusterState, Nodes
from daemon.policy.types import OperatorInputs, Plan, PolicyMemory

WIN = {"name": "eod", "tenant": "win", "every": "daily", "at": "14:00", "duration_minutes": 60,
       "reclaim_before_minutes": 30}


def _state(hhmm: str, typed: bool) -> ClusterState:
    names = np.array(["h0", "h1", "a0", "a1"], dtype=object)
    nodes = Nodes(names=names, gpus=np.full(4, 8), free=np.full(4, 8), draining=np.zeros(4, dtype=np.int64),
                  held_by=np.full(4, UNHELD), gpu_type=np.array(["h100", "h100", "a100", "a100"], dtype=object)
                  if typed else None)
    return ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=("win", "other"),
                        tiers=("normal", "low"), capacity=32, used=np.zeros(2), pending=np.zeros(2), nodes=nodes)


def test_a_typed_window_is_held_on_the_types_it_names():
    cfg = parse_config({"tenants": [{"name": "win"}, {"name": "other", "tier": "low"}],
                        "fleet": {"types": ["h100", "a100"], "pools": [{"type": "h100", "nodes": 2},
                                                                        {"type": "a100", "nodes": 2}]},
                        "windows": [{**WIN, "gpus": {"h100": 8, "a100": 8}}]})
    p = plan(None, _state("13:45", True), PolicyMemory(), cfg)
    assert p.reservations["win"] == 16 and p.holds_by_type["win"] == {"h100": 8, "a100": 8}
    assert "win" not in plan(None, _state("13:00", True), PolicyMemory(), cfg).reservations


def test_an_operators_window_replaces_the_configs_and_the_plan_carries_them():
    cfg = parse_config({"tenants": [{"name": "win"}, {"name": "other", "tier": "low"}],
                        "windows": [{**WIN, "gpus": 8}]})
    ops = OperatorInputs(windows=(WindowConfig.model_validate({**WIN, "gpus": 16}),))
    p = plan(None, _state("13:45", False), PolicyMemory(), cfg, ops=ops)
    assert p.reservations["win"] == 16 and [w["gpus"] for w in p.windows] == [16]
    assert Plan.from_dict(p.to_dict()).windows == p.windows
    assert p.window_holds == {"win": 16} and Plan.from_dict(p.to_dict()).window_holds == {"win": 16}
    # a stale snapshot keeps the last good plan, the window's own hold with it (not folded into a pool)
    stale = dataclasses.replace(_state("13:50", False), used=np.full(2, np.nan))
    kept = plan(None, stale, PolicyMemory(), cfg, p, ops=ops)
    assert kept.stale and kept.window_holds == {"win": 16}
    assert "windows" not in plan(None, _state("13:45", False), PolicyMemory(),
                                 parse_config({"tenants": [{"name": "win"}]})).to_dict()


def test_a_windows_drain_takes_an_aged_tenants_low_work_off_the_windows_nodes():
    """An aged tenant (a job of its waited max_wait) is protected: its running jobs are not preempted for others.
    On the nodes a window holds they were never cleared, so the window opened with them still there (on synthetic,
    32 of tenant-0002's 136 held GPUs). The window's drain takes low work there whoever's it is; a job started
    through aging keeps its grace (aging_min_run_s), and nothing of the aged tenant elsewhere is touched."""
    from daemon.sim.cluster import SimCluster

    cfg = parse_config({"cluster": {"gpus": 16, "gpus_per_node": 8},
                        "tenants": [{"name": "win", "tier": "high"}, {"name": "lo", "tier": "low"}],
                        "cycle": {"interval_s": 60, "resolution_s": 60},
                        "policy": {"max_wait_steps": 1, "preempt_budget_share": 1.0, "preempt_min_runtime_s": 0},
                        "windows": [{**WIN, "gpus": 8}]})
    c = SimCluster(["win", "lo"], np.array([2, 0], dtype=np.int8), 16, np.array([8, 1]), gpus_per_node=8)
    for _ in range(5):                    # lo runs on both nodes, and its 4 queued GPUs wait past max_wait
        c.step(np.array([0.0, 20.0]))
    c.node_holder[0] = 0                  # the window's node, held for win since the lead time
    st = c.state(("win", "lo"), ("high", "low"), pd.Timestamp("2026-12-07T13:55:00+00:00"), 60)
    p = plan(None, st, PolicyMemory(), cfg)
    assert p.held_for["aged"] > 0 and p.reservations.get("lo", 0) > 0, p    # lo is aged, so protected
    on_node = {str(j) for j, n in zip(st.jobs.ids, st.jobs.node) if n == 0}
    taken = [x for x in p.preemptions if x.for_tenant == "win"]
    assert sum(x.gpus for x in taken) == 8 and {x.job_id for x in taken} <= on_node, p.preemptions


def test_a_window_is_held_whole_before_other_holds_are_fitted_to_the_capacity():
    """Holds above the capacity are scaled down in proportion; a window's hold was scaled with them (16 GPUs
    declared, 9 held while another high tenant's demand filled the cluster). A window is declared and checked
    against the capacity, so it is held whole and the other holds share what it leaves."""
    cfg = parse_config({"tenants": [{"name": "win", "tier": "high"}, {"name": "other", "tier": "high"}],
                        "windows": [{**WIN, "gpus": 16}]})
    st = ClusterState(at=pd.Timestamp("2026-12-07T13:45:00+00:00"), tenants=("win", "other"), tiers=("high", "high"),
                      capacity=32, used=np.array([0.0, 24.0]), pending=np.array([0.0, 16.0]))
    p = plan(None, st, PolicyMemory(), cfg)
    assert p.reservations["win"] == 16 and p.reservations["other"] == 16, p.reservations


def test_a_pooled_tenants_window_is_drained_on_its_own_nodes_whatever_it_runs_in_the_pool():
    """A window's GPUs are its tenant's own nodes; what the tenant runs in the high tier's pool is not the window's.
    The drain counted all the tenant ran: win ran 8 GPUs on its window's node and 8 in the pool, so with a 16-GPU
    window it asked nothing cleared, and low work stayed on the window's second node into the window (on synthetic
    seed 12, tenant-0000 waited beside it while its demand rose past its window). It now clears that node."""
    from daemon.sim.cluster import SimCluster

    cfg = parse_config({"cluster": {"gpus": 32, "gpus_per_node": 8},
                        "tenants": [{"name": "win", "tier": "high"}, {"name": "hi", "tier": "high"},
                                    {"name": "lo", "tier": "low"}],
                        "cycle": {"interval_s": 60, "resolution_s": 60},
                        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0},
                        "windows": [{**WIN, "gpus": 16}]})
    c = SimCluster(["win", "hi", "lo"], np.array([2, 2, 0], dtype=np.int8), 32, np.array([8, 8, 8]),
                   gpus_per_node=8)
    for _ in range(3):
        c.step(np.array([16.0, 0.0, 16.0]))                    # win and lo run two 8-GPU jobs each, a node each
    node_of = {int(t): [int(n) for n in c.j_node[: c.size][(c.j_tenant[: c.size] == t) & (c.j_state[: c.size] == 2)]]
               for t in (0, 2)}
    own, pooled = node_of[0]
    low_own, _ = node_of[2]
    c.node_holder[[own, low_own]] = 0              # the window's two nodes: win runs on one, lo on the other
    c.node_holder[pooled] = c.n                    # win's other job runs in the high tier's pool
    st = c.state(("win", "hi", "lo"), ("high", "high", "low"), pd.Timestamp("2026-12-07T13:45:00+00:00"), 60)
    p = plan(None, st, PolicyMemory(), cfg)
    assert p.window_holds == {"win": 16}
    taken = [(x.for_tenant, int(x.node)) for x in p.preemptions]
    assert taken == [("win", low_own)], p.preemptions


def test_on_a_mixed_fleet_a_window_is_held_per_type_apart_from_the_pool_and_its_tenant_stays_pooled():
    """Two types, two high tenants and a low one; `t0`'s window holds 8 h100 GPUs, its forecast asks 16 a100. The
    window's 8 are its own on h100 (window_holds_by_type), its 8 beyond them stay in the pool on a100 (`t0` stays
    pooled), and the window's drain clears 8 h100 GPUs of low work on an h100 node that is not the pool's: the
    pool's idle h100 node (h0) is not counted as the window's, the pool's other members may start there first.
    Before, on a mixed fleet `t0` left the pool for the window: its whole hold was its own."""
    from daemon.policy.state import HELD_BY_POOL
    from forecaster.types import Forecast
    from tests.policy.test_fleet_policy import typed_state

    cfg = parse_config({"tenants": [{"name": "t0", "tier": "high"}, {"name": "t1", "tier": "high"},
                                    {"name": "t2", "tier": "low"}],
                        "fleet": {"types": ["h100", "a100"], "pools": [{"type": "h100", "nodes": 2},
                                                                        {"type": "a100", "nodes": 2}]},
                        "policy": {"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_min_runtime_s": 0},
                        "windows": [{**WIN, "tenant": "t0", "gpus": {"h100": 8}}]})
    nodes = [("h0", "h100", 8), ("h1", "h100", 8), ("a0", "a100", 8), ("a1", "a100", 8)]
    low = [(2, 1, "low", node, 600, ()) for node in ("h1", "a0", "a1") for _ in range(8)]
    st = typed_state(["high", "high", "low"], nodes, [(0, 8, "high", "", 0, ()), *low])
    st = dataclasses.replace(st, at=pd.Timestamp("2026-12-07T13:59:00+00:00"),
                             nodes=dataclasses.replace(st.nodes, held_by=np.array([HELD_BY_POOL, UNHELD, UNHELD,
                                                                                   UNHELD])))
    v = np.array([[0.0], [16.0], [8.0], [24.0]])[:, :, None].repeat(12, axis=1).repeat(3, axis=2)
    fc = Forecast(("t0@h100", "t0@a100", "t1@*", "t2@*"), (0.5, 0.9, 0.99), v, st.at, 300, "test")
    p = plan(fc, st, PolicyMemory(), cfg)
    assert "t0" in p.pooled, p.pooled
    assert p.window_holds == {"t0": 8} and p.window_holds_by_type == {"t0": {"h100": 8}}
    assert p.holds_by_type["t0"] == {"h100": 8, "a100": 8}, p.holds_by_type   # 8 its window's, 8 the pool's
    assert Plan.from_dict(p.to_dict()).window_holds_by_type == {"t0": {"h100": 8}}
    on_h100 = [x for x in p.preemptions if x.for_tenant == "t0" and x.node.startswith("h")]
    assert sum(x.gpus for x in on_h100) == 8 and {x.node for x in on_h100} == {"h1"}, p.preemptions
    # what t0 runs in the pool (8 GPUs on the pool's h0) is not its window's: the window's 8 are still cleared on
    # h1, as on one model (test_a_pooled_tenants_window_is_drained_on_its_own_nodes_whatever_it_runs_in_the_pool)
    st = typed_state(["high", "high", "low"], nodes, [(0, 8, "high", "h0", 600, ()), *low])
    st = dataclasses.replace(st, at=pd.Timestamp("2026-12-07T13:59:00+00:00"),
                             nodes=dataclasses.replace(st.nodes, held_by=np.array([HELD_BY_POOL, UNHELD, UNHELD,
                                                                                   UNHELD])))
    p = plan(fc, st, PolicyMemory(), cfg)
    on_h100 = [x for x in p.preemptions if x.for_tenant == "t0" and x.node.startswith("h")]
    assert sum(x.gpus for x in on_h100) == 8 and {x.node for x in on_h100} == {"h1"}, p.preemptions


def test_a_lead_shorter_than_a_drain_is_lengthened_so_the_gpus_are_free_by_the_start():
    """reclaim_before 5 min, a drain of 10 and a cycle of 1: the hold and the clearing start 11 min ahead (a
    preemption made 5 min ahead would still be draining at the start): all of it at 13:49."""
    from daemon.policy.windows import demands

    w = WindowConfig.model_validate({**WIN, "gpus": 8, "reclaim_before_minutes": 5, "timezone": "UTC"})

    def at(hhmm: str):
        return demands([w], dt.datetime.fromisoformat(f"2026-12-07T{hhmm}:00+00:00"), 600.0, 60.0)

    assert at("13:48") == []
    first = at("13:49")
    assert len(first) == 1 and first[0].gpus == 8 and first[0].clear_gpus == 8
    assert "held from 13:49" in first[0].reason and "all by 13:49" in first[0].reason


def test_a_window_open_now_asks_all_its_gpus_cleared_and_nothing_once_it_has_ended():
    """An operator adds a window while it is open (or the daemon starts during one): its GPUs are to be free for
    its tenant now, not spread over a lead already past. Low work on them is preempted at the first plan; at the
    end the window asks nothing more until its next lead time."""
    from daemon.policy.windows import demands
    from daemon.sim.cluster import SimCluster

    w = WindowConfig.model_validate({**WIN, "gpus": 8})

    def at(hhmm: str):
        return demands([w], dt.datetime.fromisoformat(f"2026-12-07T{hhmm}:00+00:00"), 120.0, 60.0)

    for hhmm in ("14:00", "14:30", "14:59"):
        (d,) = at(hhmm)
        assert (d.gpus, d.clear_gpus) == (8, 8) and d.reason.endswith("open until 15:00"), (hhmm, d)
    assert at("15:00") == []
    cfg = parse_config({"cluster": {"gpus": 16, "gpus_per_node": 8},
                        "tenants": [{"name": "win", "tier": "high"}, {"name": "lo", "tier": "low"}],
                        "cycle": {"interval_s": 60, "resolution_s": 60},
                        "policy": {"preempt_budget_share": 0.0, "preempt_min_runtime_s": 0},
                        "windows": [{**WIN, "gpus": 8}]})
    c = SimCluster(["win", "lo"], np.array([2, 0], dtype=np.int8), 16, np.array([8, 8]), gpus_per_node=8)
    for _ in range(3):
        c.step(np.array([0.0, 16.0]))          # lo runs on both nodes; win asks nothing yet
    st = c.state(("win", "lo"), ("high", "low"), pd.Timestamp("2026-12-07T14:10:00+00:00"), 60)
    p = plan(None, st, PolicyMemory(), cfg)
    taken = [x for x in p.preemptions if x.for_tenant == "win"]
    assert p.window_holds == {"win": 8} and sum(x.gpus for x in taken) == 8, p.preemptions


def test_the_clearing_rises_by_one_cycles_share_each_cycle_of_the_lead():
    """25 GPUs, a lead of 30 min, a drain of 5 and a cycle of 1: 25 cycles to clear them in, one GPU each, from one
    at the lead time to all 25 a drain and a cycle before the start (no GPU a cycle early from rounding)."""
    from daemon.policy.windows import demands

    w = WindowConfig.model_validate({**WIN, "gpus": 25})
    t0 = dt.datetime.fromisoformat("2026-12-07T13:30:00+00:00")
    got = [demands([w], t0 + dt.timedelta(minutes=k), 300.0, 60.0)[0].clear_gpus for k in range(30)]
    assert got == [*range(1, 26), 25, 25, 25, 25, 25], got


def test_a_tenants_windows_that_overlap_are_held_and_cleared_together():
    """Two windows of one tenant may overlap (the config refuses only those above the capacity): the tenant holds
    both, per type too, and both are cleared, not the last one read."""
    from daemon.policy.windows import demands, per_tenant

    a = WindowConfig.model_validate({**WIN, "name": "a", "gpus": {"h100": 8}})
    b = WindowConfig.model_validate({**WIN, "name": "b", "at": "14:30", "gpus": {"h100": 4, "a100": 8}})
    ds = demands([a, b], dt.datetime.fromisoformat("2026-12-07T14:20:00+00:00"), 120.0, 60.0)
    assert [(d.window, d.gpus, d.clear_gpus) for d in ds] == [("a", 8, 8), ("b", 12, 9)], ds
    hold, clear, typed = per_tenant(ds)
    assert hold == {"win": 20} and clear == {"win": 17} and typed == {"win": {"h100": 12, "a100": 8}}
    cfg = parse_config({"tenants": [{"name": "win"}, {"name": "other", "tier": "low"}],
                        "windows": [{**WIN, "name": "a", "gpus": 8}, {**WIN, "name": "b", "at": "14:30", "gpus": 4}]})
    p = plan(None, _state("14:20", False), PolicyMemory(), cfg)
    assert p.reservations["win"] == 12 and p.window_holds == {"win": 12}, p.reservations


def test_a_snapshot_time_without_a_zone_is_read_as_utc():
    from daemon.policy.windows import demands

    w = WindowConfig.model_validate({**WIN, "gpus": 8, "timezone": "Europe/Paris"})   # 14:00 Paris: 13:00 UTC
    naive, aware = dt.datetime(2026, 12, 7, 12, 45), dt.datetime(2026, 12, 7, 12, 45, tzinfo=dt.timezone.utc)
    assert demands([w], naive, 120.0, 60.0) == demands([w], aware, 120.0, 60.0) != []


def test_the_pool_gives_up_at_most_a_pooled_tenants_hold_for_its_window_and_nothing_for_others():
    from daemon.policy.windows import pool_spare

    p = Plan(at="2026-12-07T13:45:00+00:00", capacity=32, load=1.0, high_pool=12,
             reservations={"pooled": 6, "apart": 8}, quotas={}, limits={}, preemptions=(), notifications=(),
             stale=False, forecast_model="none", notes=(), memory=PolicyMemory(), pooled=("pooled",),
             holds_by_type={"pooled": {"h100": 6}, "apart": {"h100": 8}})
    assert pool_spare(p, "pooled", None, 8) == 6 and pool_spare(p, "pooled", None, 4) == 4
    assert pool_spare(p, "pooled", "h100", 8) == 6 and pool_spare(p, "pooled", "a100", 8) == 0
    assert pool_spare(p, "apart", None, 8) == 0 and pool_spare(p, "apart", "h100", 8) == 0


def test_a_windows_drain_never_preempts_its_own_tenants_work_on_the_windows_nodes():
    """A run --sim with a low-tier tenant's window: its own low-priority job, running on a node held for that
    window, was preempted "to clear GPUs for protected tenants' recurring windows", its own, while another tenant's
    low work sat on the window's other node. The drain now takes the other tenant's job."""
    from daemon.sim.cluster import SimCluster

    cfg = parse_config({"cluster": {"gpus": 32, "gpus_per_node": 8},
                        "tenants": [{"name": "win", "tier": "low"}, {"name": "lo", "tier": "low"}],
                        "cycle": {"interval_s": 60, "resolution_s": 60},
                        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0},
                        "windows": [{**WIN, "gpus": 16}]})
    c = SimCluster(["win", "lo"], np.array([0, 0], dtype=np.int8), 32, np.array([8, 8]), gpus_per_node=8)
    for _ in range(3):
        c.step(np.array([16.0, 16.0]))                          # two 8-GPU low jobs each, a node per job
    running = c.j_state[: c.size] == 2
    node_of = {t: [int(n) for n in c.j_node[: c.size][(c.j_tenant[: c.size] == t) & running]] for t in (0, 1)}
    own, others = node_of[0][0], node_of[1][0]
    c.node_holder[[own, others]] = 0             # the window's two nodes: win runs on one, lo on the other
    st = c.state(("win", "lo"), ("low", "low"), pd.Timestamp("2026-12-07T13:45:00+00:00"), 60)
    p = plan(None, st, PolicyMemory(), cfg)
    assert p.window_holds == {"win": 16} and p.preemptions, p.notes
    assert {(x.tenant, int(x.node), x.for_tenant) for x in p.preemptions} == {("lo", others, "win")}, p.preemptions
