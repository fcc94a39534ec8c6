"""A recurring window on a mixed fleet (issue 39 on issue 24's per-type holds): the window's GPUs of each type are
held apart from that type's pool share, its tenant's alone, and the tenant's hold beyond them stays in the high
tier's pool on each type, as on one model (tests/sim/test_windows_sim.py). Before, on a mixed fleet the tenant
left the pool for the window's lead and duration: all of its hold was its own, and the pool's idle GPUs on either
type were closed to it."""

import datetime as dt

import numpy as np

from daemon.config import parse_config
from daemon.policy.state import PRIORITY, UNHELD
from daemon.sim.cluster import RUNNING, SimCluster
from tests.sim.test_windows_sim import PARIS, STEP_S, steps

TENANTS = ("other", "win", "lo")
NODE_TYPES = ["a100"] * 3 + ["h100"] * 3     # 6 nodes of 8 GPUs: 24 a100, 24 h100
SERIES = ("other@*", "win@h100", "win@a100", "lo@*")


def _config() -> object:
    return parse_config({
        "tenants": [{"name": "other", "tier": "high"}, {"name": "win", "tier": "high"}, {"name": "lo", "tier": "low"}],
        "fleet": {"types": ["h100", "a100"], "pools": [{"type": "h100", "nodes": 3, "gpus_per_node": 8},
                                                        {"type": "a100", "nodes": 3, "gpus_per_node": 8}]},
        "cycle": {"interval_s": STEP_S, "resolution_s": STEP_S},
        "source": {"simulator": {"drain_steps": 2}},
        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0, "headroom": 0.0},
        "windows": [{"name": "eod", "tenant": "win", "gpus": {"h100": 8}, "every": "daily", "at": "14:00",
                     "timezone": "Europe/Paris", "duration_minutes": 60, "reclaim_before_minutes": 30}]})


def _run(wants) -> dict[str, tuple]:
    """13:00 to 14:10 Paris on the two-type fleet, planning each step with a flat typed forecast: `other` 16 on any
    type (a hold in the pool it does not use), `win` 12 on h100 and 12 on a100 (24 held, 8 of them its window's on
    h100 from 13:30), `lo` the rest. Per step (local HH:MM): the plan, the step's stats and the cluster."""
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(list(TENANTS), prio, 0, np.array([8, 8, 1]), drain_steps=2, node_types=NODE_TYPES,
                   node_gpus=[8] * len(NODE_TYPES))
    out = {}
    for hm, p, stats in steps(c, TENANTS, ("high", "high", "low"), _config(), wants,
                              lambda t: np.repeat(np.array([[16.0], [12.0], [12.0], [48.0]]), 12, axis=1), SERIES):
        out[hm] = (p, stats, c.held_per_type().copy(), _win_on_pool(c))
    return out


def _win_on_pool(c: SimCluster) -> dict[str, int]:
    """GPUs `win` runs on the pool's nodes, per type."""
    run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
    mine = run[(c.j_tenant[run] == 1) & (c.node_holder[c.j_node[run]] == c.n)]
    out: dict[str, int] = {}
    for j in mine.tolist():
        typ = c.type_names[c.node_type[c.j_node[j]]]
        out[typ] = out.get(typ, 0) + int(c.j_gpus[j])
    return out


def test_a_window_on_one_type_keeps_its_tenant_in_the_pool_on_both_types_and_borrowing_it():
    """`win`'s window holds 8 h100 GPUs its own; its forecast holds 16 more (8 per type) in the pool, and `other`'s
    16 idle a100 GPUs are there too. At 14:00 `win` asks 40: 8 on its window's node, the other 32 on the pool's
    nodes of both types. Before, `win` left the pool: its 24 GPUs were all its own (four nodes), the pool was
    `other`'s alone and closed to it, and 8 of its 40 waited."""
    def wants(t):
        in_window = dt.time(14, 0) <= t.astimezone(PARIS).time() < dt.time(15, 0)
        return [0.0, 40.0 if in_window else 0.0, 48.0]

    by = _run(wants)
    p, _s, held, _on = by["13:55"]
    assert "win" in p.pooled, p.pooled
    assert p.window_holds == {"win": 8} and p.window_holds_by_type == {"win": {"h100": 8}}
    assert p.holds_by_type["win"] == {"h100": 16, "a100": 8}, p.holds_by_type
    # the window's GPUs are not the pool's: `win` holds one h100 node of its own, the pool the rest of the holds
    a100, h100 = 0, 1                                     # held_per_type's columns: the sorted type names
    assert held[1].tolist() == [0, 8], held               # win's own: its window's 8 h100
    assert held[3].tolist() == [24, 8], held              # the pool: 8 + 16 a100 (win's, other's), 8 h100 (win's)
    assert held[3, h100] + held[1, h100] == p.holds_by_type["win"]["h100"] and held[3, a100] == 24
    _p, s, _held, on_pool = by["14:00"]
    assert int(s.served[1]) == 40 and int(s.queued[1]) == 0, (s.served, s.queued)
    assert on_pool == {"h100": 8, "a100": 24}, on_pool    # it borrows the pool on both types
    assert not by["13:05"][0].window_holds_by_type        # before the lead time: the pool only


def test_a_pooled_tenants_window_takes_the_pools_node_of_its_type_where_it_runs():
    """Per type, as on one model (tests/sim/test_holds.py): a pooled tenant whose window grows its own hold on h100
    takes first the pool's h100 node where its job runs, of those the pool gives up there; its job stays, and the
    pool keeps the node the other member runs on. Before, the typed holds had no hand-over: the pool let go of the
    first of two equally used nodes and the window took whatever h100 node scored best."""
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    members = np.array([True, True, False])
    pool_by = np.zeros((4, 2), dtype=np.int64)
    pool_by[3] = [0, 16]                                   # columns: a100, h100; the pool holds two h100 nodes
    for first in (0, 1):                                   # whichever member's node comes first, it is handed over
        c = SimCluster(["a", "b", "lo"], prio, 0, np.array([8, 8, 1]), node_types=["h100"] * 3 + ["a100"],
                        node_gpus=[8] * 4)
        c.set_reservations(np.zeros(3, dtype=np.int64), pool=(members, 16), by_type=pool_by)
        c.step(np.array([8.0, 8.0, 16.0]))
        on = {int(c.j_tenant[i]): int(c.j_node[i]) for i in np.flatnonzero(c.j_state[: c.size] == RUNNING)
              if c.j_tenant[i] < 2}
        assert set(np.flatnonzero(c.node_holder == 3).tolist()) == {on[0], on[1]} and on[0] != on[1]
        by = np.zeros((4, 2), dtype=np.int64)
        by[first] = [0, 8]                                 # the window of `first`: 8 h100 of its own
        by[3] = [0, 8]                                     # the pool: the other member's 8
        c.set_reservations(np.array([8 if i == first else 0 for i in range(3)]), pool=(members, 8), by_type=by)
        assert np.flatnonzero(c.node_holder == first).tolist() == [on[first]], (first, c.node_holder, on)
        assert np.flatnonzero(c.node_holder == 3).tolist() == [on[1 - first]]
        assert (c.node_holder == UNHELD).sum() == 2
        c.check_invariants()
