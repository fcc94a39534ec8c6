"""Why a windowed tenant waits while its window holds (daemon/sim/windows_breakdown.py, the windows bench's
evidence): each step's queued GPUs go to one cause, from what the window's nodes carry and where else a job fits."""

import numpy as np
import pandas as pd

from daemon.config import WindowConfig
from daemon.policy.state import HELD_BY_POOL, UNHELD, ClusterState, Jobs, Nodes
from daemon.sim.windows_breakdown import WindowBreakdown

WIN = WindowConfig.model_validate({"name": "w", "tenant": "a", "gpus": 16, "every": "daily", "at": "14:00",
                                   "timezone": "UTC", "duration_minutes": 60, "reclaim_before_minutes": 30})


def _state(hhmm, running, held_by, free, queued=8, draining=(0, 0, 0, 0)):
    """Tenants a (the window's, 8-GPU jobs), b (normal), c (low); 4 nodes of 8 GPUs; `running`: (tenant, GPUs, node)."""
    rows = [*running, (0, queued, -1)]
    t, g, node = (np.array(x) for x in zip(*rows))
    jobs = Jobs(ids=np.arange(len(rows)), tenant=t, gpus=g, priority=np.array([(2, 1, 0)[x] for x in t], dtype=np.int8),
                running=node >= 0, runtime_s=np.zeros(len(rows)), wait_s=np.zeros(len(rows)), node=node)
    nodes = Nodes(names=np.arange(4), gpus=np.full(4, 8), free=np.array(free), draining=np.array(draining),
                  held_by=np.array(held_by))
    used = np.bincount(t[node >= 0], weights=g[node >= 0], minlength=3)
    return ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=("a", "b", "c"),
                        tiers=("high", "normal", "low"), capacity=32, used=used, pending=np.array([queued, 0, 0.0]),
                        jobs=jobs, nodes=nodes)


def _cause(st):
    look = WindowBreakdown(3, ["a", "b", "c"], [WIN], ["a"])
    look._look(st)
    return [r["cause"] for r in look.rows], look


def test_each_cause_of_a_wait_while_the_window_holds():
    held = [0, 0, HELD_BY_POOL, UNHELD]
    full = [(0, 8, 0), (0, 8, 1), (1, 8, 2), (1, 8, 3)]
    assert _cause(_state("14:10", full, held, [0, 0, 0, 0]))[0] == ["demand_above_window"]
    # its own nodes are full, but the pool had a place: not the window's doing
    assert _cause(_state("14:10", full[:3], held, [0, 0, 0, 8]))[0] == ["other"]
    assert _cause(_state("13:40", [(0, 8, 0), (2, 4, 1), (1, 8, 2)], held, [0, 4, 0, 8]))[0] == ["low_not_cleared"]
    assert _cause(_state("13:40", [(0, 8, 0), (1, 2, 1), (1, 8, 2)], held, [0, 6, 0, 8]))[0] == ["others_firm"]
    # low work beside work that cannot be preempted: clearing it would make no place for an 8-GPU job
    rows, look = _cause(_state("13:40", [(0, 8, 0), (1, 4, 1), (2, 2, 1), (1, 8, 2)], held, [0, 2, 0, 8]))
    assert rows == ["others_firm"]
    assert look.rows[0]["window_nodes_not_all_its_own"] == [{"gpus": 8, "own": 0, "low": 2, "firm": 4, "draining": 0,
                                                             "free": 2}]
    assert _cause(_state("13:40", [(0, 8, 0), (1, 8, 2)], held, [0, 4, 0, 8], draining=(0, 4, 0, 0)))[0] == [
        "draining"]
    # before the lead time (13:30) and after the window (15:00) nothing is counted: no window is in place
    assert _cause(_state("13:20", full, held, [0, 0, 0, 0]))[0] == []
    assert _cause(_state("15:00", full, held, [0, 0, 0, 0]))[0] == []
    rows, look = _cause(_state("14:10", full, held, [0, 0, 0, 0]))
    s = look.summary(1.0)
    assert s["gpu_min_by_cause"]["demand_above_window"] == 8.0 and s["gpu_min_by_tenant"] == {
        "a": {"demand_above_window": 8.0}}
    assert s["steps"][0]["phase"] == "open" and s["steps"][0]["own_on_held"] == 16


def test_a_window_is_in_place_from_the_plans_held_lead_not_reclaim_before():
    """With reclaim_before 0 the plan still holds a window a drain and a cycle ahead (WindowConfig.held_lead): a
    wait at 13:55 is in the window's lead, not outside it."""
    import datetime as dt

    from daemon.sim.windows_breakdown import window_in_place

    w = WindowConfig.model_validate({**WIN.model_dump(), "reclaim_before_minutes": 0})
    at = dt.datetime(2026, 12, 7, 13, 55, tzinfo=dt.timezone.utc)
    assert window_in_place([w], at) is None
    assert window_in_place([w], at, min_lead_s=600)[1] == "lead"
    look = WindowBreakdown(3, ["a", "b", "c"], [w], ["a"], min_lead_s=600)
    look._look(_state("13:55", [(0, 8, 0), (0, 8, 1), (1, 8, 2), (1, 8, 3)], [0, 0, HELD_BY_POOL, UNHELD],
                      [0, 0, 0, 0]))
    assert [r["phase"] for r in look.rows] == ["lead"]


def test_what_the_windows_nodes_carry_when_its_hold_is_first_in_place_and_where_else_its_jobs_could_fit():
    """Whether or not the tenant waits then: at the first step of its lead with nodes held and at its first open
    step, the window's nodes, others' work that cannot be preempted there, and where in the whole cluster a job of
    the tenant fits once the preemptible work is cleared (the most any choice of nodes could hold for it)."""
    held = [0, 0, UNHELD, UNHELD]
    # node 0 its own; node 1 normal work (2) beside low (2); node 2 low alone; node 3 normal alone
    running = [(0, 8, 0), (1, 2, 1), (2, 2, 1), (2, 8, 2), (1, 8, 3)]
    look = WindowBreakdown(3, ["a", "b", "c"], [WIN], ["a"])
    look._look(_state("13:20", running, held, [0, 4, 0, 0], queued=0))     # before the lead time: nothing
    for hhmm in ("13:40", "13:45", "14:05"):
        look._look(_state(hhmm, running, held, [0, 4, 0, 0], queued=0))
    got = look.summary(1.0)["window_nodes"]
    assert [(x["at"], x["phase"]) for x in got] == [("13:40", "lead"), ("14:05", "open")]
    assert got[0] == {"window": "w", "tenant": "a", "at": "13:40", "phase": "lead", "window_gpus": 16, "job_gpus": 8,
                      "held_gpus": 16, "held_nodes": 2, "held_nodes_with_others_firm": 1,
                      "others_firm_on_held_gpus": 2, "low_on_held_gpus": 2, "its_jobs_fit_on_held_gpus": 8,
                      "its_jobs_fit_in_cluster_gpus": 16, "nodes_free_of_others_firm_in_cluster": 2,
                      "its_jobs_fit_elsewhere_gpus": {"pool": 0, "unheld": 8, "other_holds": 0},
                      "others_firm_on_held_gpus_by_tier": {"normal": 2}, "others_firm_on_held_run_minutes_median": 0.0}
    assert look.rows == []   # it waited for nothing: no step's cause
