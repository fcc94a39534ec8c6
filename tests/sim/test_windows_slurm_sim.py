"""A window replayed as Slurm carries it out (issue 39, "the replay does no more than the real actuators"): its
reservation is made ahead, and slurmctld starts on its nodes no job whose time limit reaches into it (a simulated
job has none), of any account, until it is active; nor can it be made on the nodes of the high tier's pool hold (an
UNLIMITED reservation). tests/actuators/test_slurm_windows.py shows both on a real slurmctld. Replayed as
Kueue, a window is the tenant's hold from its lead time only: the GPUs are lent until then, and the hold is handed
the pool's nodes where its tenant runs."""

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.policy.engine import plan
from daemon.policy.state import PRIORITY
from daemon.policy.types import OperatorInputs, PolicyMemory
from daemon.sim.actuator import SimulatorActuator, replays_slurm, windows_at_lead_s
from daemon.sim.cluster import RUNNING, UNHELD, SimCluster

PARIS = dt.timezone(dt.timedelta(hours=1))   # Europe/Paris in December (CET)
TENANTS = ("batch", "lo")
STEP_S = 300


def _cfg(actuators: list[str], reserved: str = "ahead"):
    return parse_config({
        "cluster": {"gpus": 32, "gpus_per_node": 8},
        "tenants": [{"name": "batch", "tier": "normal"}, {"name": "lo", "tier": "low"}],
        "cycle": {"interval_s": STEP_S, "resolution_s": STEP_S},
        "source": {"simulator": {"drain_steps": 2}},
        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0},
        "actuators": {"enabled": actuators, "slurm": {"windows_reserved": reserved}},
        "windows": [{"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00",
                     "timezone": "Europe/Paris", "duration_minutes": 60, "reclaim_before_minutes": 30,
                     "borrowable_before": True}],
    })


def _wants(t: dt.datetime) -> list[float]:
    """The window's tenant wants its 16 GPUs from 14:00; the low tenant 16 GPUs until 12:30, then the whole cluster."""
    local = t.astimezone(PARIS).time()
    return [16.0 if dt.time(14, 0) <= local < dt.time(15, 0) else 0.0, 16.0 if local < dt.time(12, 30) else 32.0]


def _replay(actuators: list[str], reserved: str = "ahead") -> dict[str, dict[str, np.ndarray]]:
    """Plan and step from 12:00 to 15:30 Paris; per step (HH:MM) the GPUs running per tenant, the nodes' holders,
    their windows reserved ahead, their free GPUs and the low tenant's GPUs on each."""
    cfg = _cfg(actuators, reserved)
    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(list(TENANTS), prio, 32, np.array([8, 8]), gpus_per_node=8, drain_steps=2)
    act = SimulatorActuator(c, TENANTS, windows_ahead=replays_slurm(cfg.actuators.enabled),
                            at_lead_s=windows_at_lead_s(cfg))
    mem, last, out = PolicyMemory(), None, {}
    t = dt.datetime(2026, 12, 7, 12, 0, tzinfo=PARIS)
    c.step(np.array(_wants(t)))
    while t < dt.datetime(2026, 12, 7, 15, 30, tzinfo=PARIS):
        t += dt.timedelta(seconds=STEP_S)
        p = plan(None, c.state(TENANTS, ("normal", "low"), pd.Timestamp(t), STEP_S), mem, cfg, last, OperatorInputs())
        mem, last = p.memory, p
        act.apply(p)
        c.step(np.array(_wants(t)))
        c.check_invariants()
        run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        low = run[c.j_tenant[run] == 1]
        out[t.astimezone(PARIS).strftime("%H:%M")] = {
            "running": c.running_per_tenant(), "holder": c.node_holder.copy(), "ahead": c.node_ahead.copy(),
            "free": c.node_free.copy(), "low_on": np.bincount(c.j_node[low], weights=c.j_gpus[low], minlength=4)}
    return out


def test_on_slurm_at_lead_the_windows_nodes_are_lent_until_its_reservation_is_made_at_the_lead_time():
    """windows_reserved = at_lead: the reservation is made only two cycles (10 min) before the lead time (13:30),
    so until then its nodes are any job's, as on Kueue; ahead keeps them idle from the first plan."""
    ahead, at_lead = _replay(["slurm"], "ahead"), _replay(["slurm"], "at_lead")
    assert ahead["13:00"]["running"].tolist() == [0, 16] and (ahead["13:00"]["ahead"] >= 0).sum() == 2
    for t in ("12:30", "13:00", "13:15"):
        assert at_lead[t]["running"].tolist() == [0, 32] and not (at_lead[t]["ahead"] >= 0).any(), t
    # made at 13:20 (its lead time 13:30 is two cycles away) on two nodes, where the low work still runs
    assert (at_lead["13:20"]["ahead"] == 0).sum() == 2
    assert at_lead["14:05"]["running"][0] == 16
    # after the window: no reservation until the next day's lead time; the low tenant gets the nodes back
    assert not (at_lead["15:25"]["ahead"] >= 0).any() and at_lead["15:25"]["running"].tolist() == [0, 32]


def _running_on(c: SimCluster, nodes: np.ndarray, tenant: int) -> int:
    run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
    return int(c.j_gpus[run[(c.j_tenant[run] == tenant) & np.isin(c.j_node[run], nodes)]].sum())


def test_on_slurm_nothing_new_starts_on_a_windows_nodes_reserved_ahead_until_its_lead_time():
    kueue, slurm = _replay(["log"]), _replay(["slurm"])
    # Kueue lends the window's GPUs until its lead time (13:30): the low tenant runs on all 32
    assert kueue["13:00"]["running"].tolist() == [0, 32] and not (kueue["13:00"]["ahead"] >= 0).any()
    # Slurm: the reservation is made at the first plan, on the two free nodes; the low tenant's 16 GPUs that ran
    # before keep running, and nothing new starts on the reserved nodes: it runs 16 and waits for the rest
    s = slurm["13:00"]
    ahead = np.flatnonzero(s["ahead"] == 0)
    assert ahead.size == 2 and (s["holder"][ahead] == UNHELD).all()
    assert s["running"].tolist() == [0, 16] and s["low_on"][ahead].sum() == 0
    assert (s["free"][ahead] == 8).all()                      # reserved, idle: lent to no one
    # at the window's start both hold it for the tenant and it runs its 16 GPUs
    for by in (kueue, slurm):
        assert by["14:05"]["running"][0] == 16
    # while it is active the reservation is the tenant's hold, not reserved ahead; after it, reserved ahead again,
    # on the nodes it had (slurmctld moves a DAILY reservation on to the next day on the same nodes), and the low
    # tenant does not get them back as it does on Kueue
    assert not (slurm["14:30"]["ahead"] >= 0).any()
    held = np.flatnonzero(slurm["14:30"]["holder"] == 0)
    assert held.size == 2
    assert np.flatnonzero(slurm["15:25"]["ahead"] == 0).tolist() == held.tolist()
    assert slurm["15:25"]["running"][1] == 16 and kueue["15:25"]["running"][1] == 32


def _pooled_cluster() -> SimCluster:
    """Two pooled high tenants (8-GPU jobs) and a low one on 4 nodes of 8; the pool holds nodes 0 and 1, where
    tenant a runs 8 GPUs on each."""
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["a", "b", "lo"], prio, 32, np.array([8, 8, 8]), gpus_per_node=8)
    members = np.array([True, True, False])
    c.set_reservations(np.zeros(3), pool=(members, 16))
    c.step(np.array([16.0, 0.0, 16.0]))
    pool = np.flatnonzero(c.node_holder == 3)
    assert _running_on(c, pool, 0) == 16
    return c


def test_on_slurm_a_windows_reservation_takes_none_of_the_pools_nodes():
    members = np.array([True, True, False])
    # tenant a's window (8 GPUs) becomes its own hold; the pool shrinks by as much
    kueue, slurm = _pooled_cluster(), _pooled_cluster()
    pool = np.flatnonzero(kueue.node_holder == 3)
    kueue.set_reservations(np.array([8, 0, 0]), pool=(members, 8))
    slurm.set_reservations(np.array([8, 0, 0]), pool=(members, 8), ahead=np.zeros((3, 1)))
    # Kueue relabels one of the pool's nodes where a runs: its hold is in place, its jobs where they were
    assert np.isin(np.flatnonzero(kueue.node_holder == 0), pool).all()
    # Slurm cannot make the window's reservation on the pool's UNLIMITED one: a node outside it
    mine = np.flatnonzero(slurm.node_holder == 0)
    assert mine.size == 1 and not np.isin(mine, pool).any()
    assert (slurm.node_holder == 3).sum() == 1


def test_on_slurm_a_mixed_fleets_window_is_reserved_ahead_on_its_type_and_lent_to_no_one():
    # nodes 0, 1: a100; 2, 3: h100 (type_names sorted). The window asks 8 h100 GPUs for tenant w
    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["w", "lo"], prio, 0, np.array([8, 8]), node_types=["a100", "a100", "h100", "h100"],
                   node_gpus=[8, 8, 8, 8], accepts=[("h100",), ()])
    ahead = np.array([[0, 8], [0, 0]])
    c.set_reservations(np.zeros(2), by_type=np.zeros((3, 2)), ahead=ahead)
    assert np.flatnonzero(c.node_ahead == 0).size == 1 and c.node_type[c.node_ahead == 0].tolist() == [1]
    c.step(np.array([0.0, 32.0]))
    assert c.running_per_tenant().tolist() == [0, 24]            # the low tenant waits for the reserved node
    # the window active (its hold of 8 h100 GPUs, none ahead): its hold takes the node reserved for it
    mark = np.flatnonzero(c.node_ahead == 0)
    hold = np.zeros((3, 2))
    hold[0, 1] = 8
    c.set_reservations(np.array([8, 0]), by_type=hold, ahead=np.zeros((2, 2)))
    assert np.flatnonzero(c.node_holder == 0).tolist() == mark.tolist() and not (c.node_ahead >= 0).any()
    c.step(np.array([8.0, 32.0]))
    assert c.running_per_tenant().tolist() == [8, 24]


def test_on_slurm_a_windows_reservation_stays_on_its_nodes_all_or_none():
    """Constructed on 4 free nodes of 8, where every node ties but on the ones a window had: slurmctld moves a
    DAILY reservation on to its next occurrence on the same nodes, keeps it there while it covers the window, the
    window's hold at its lead time is on its reservation's nodes, and a reservation is made on all the nodes it
    needs or on none."""
    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["w", "lo"], prio, 32, np.array([8, 8]), gpus_per_node=8)
    none_ahead, ahead = np.zeros((2, 1), dtype=np.int64), np.array([[16], [0]])
    c.step(np.array([0.0, 16.0]))                        # the low tenant on nodes 0 and 1
    c.set_reservations(np.array([16, 0]), ahead=none_ahead)
    assert np.flatnonzero(c.node_holder == 0).tolist() == [2, 3]   # the window active: its hold on the free ones
    c.step(np.array([0.0, 0.0]))
    assert (c.node_free == 8).all()                      # everything ended: the nodes tie
    c.set_reservations(np.zeros(2), ahead=ahead)         # the window over: reserved ahead for the next occurrence
    assert np.flatnonzero(c.node_ahead == 0).tolist() == [2, 3] and (c.node_holder == UNHELD).all()
    c.set_reservations(np.zeros(2), ahead=ahead)         # kept while it covers the window
    assert np.flatnonzero(c.node_ahead == 0).tolist() == [2, 3]
    c.set_reservations(np.array([16, 0]), ahead=none_ahead)        # the lead time: the hold on its own nodes
    assert np.flatnonzero(c.node_holder == 0).tolist() == [2, 3] and not (c.node_ahead >= 0).any()
    # 8 GPUs outside any hold for a window of 16: scontrol refuses it, nothing is reserved (tried again later)
    full = SimCluster(["w", "lo"], prio, 32, np.array([8, 8]), gpus_per_node=8)
    full.set_reservations(np.array([0, 24]), ahead=none_ahead)
    full.set_reservations(np.array([0, 24]), ahead=ahead)
    assert (full.node_holder == 1).sum() == 3 and not (full.node_ahead >= 0).any()


def test_on_slurm_a_mixed_fleets_window_reservation_is_no_other_holds_and_becomes_its_own_hold():
    """Constructed: nodes 0, 1 a100, nodes 2, 3 h100; both tenants run on h100 only. The window's reservation ahead
    (8 h100 GPUs) lands on the free h100 node 3; another tenant's h100 hold of 16 gets node 2 only, never the
    reserved one; at the lead time the window's hold is on node 3, though node 2 ties with it by then."""
    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["w", "lo"], prio, 0, np.array([8, 8]), node_types=["a100", "a100", "h100", "h100"],
                   node_gpus=[8, 8, 8, 8], accepts=[("h100",), ("h100",)])
    ahead = np.array([[0, 8], [0, 0]])
    c.step(np.array([0.0, 8.0]))                                    # the low tenant on node 2
    c.set_reservations(np.zeros(2), by_type=np.zeros((3, 2)), ahead=ahead)
    assert np.flatnonzero(c.node_ahead == 0).tolist() == [3]
    lo_hold = np.zeros((3, 2))
    lo_hold[1, 1] = 16
    c.set_reservations(np.array([0, 16]), by_type=lo_hold, ahead=ahead)
    assert np.flatnonzero(c.node_holder == 1).tolist() == [2] and np.flatnonzero(c.node_ahead == 0).tolist() == [3]
    c.set_reservations(np.zeros(2), by_type=np.zeros((3, 2)), ahead=ahead)
    c.step(np.array([0.0, 0.0]))
    assert (c.node_free == 8).all()
    w_hold = np.zeros((3, 2))
    w_hold[0, 1] = 8
    c.set_reservations(np.array([8, 0]), by_type=w_hold, ahead=np.zeros((2, 2)))
    assert np.flatnonzero(c.node_holder == 0).tolist() == [3] and not (c.node_ahead >= 0).any()


def test_on_slurm_a_mixed_fleets_pooled_window_takes_none_of_the_pools_nodes():
    """The pooled case on a mixed fleet (the typed holds' own hand-over): Kueue hands tenant a's window one of the
    pool's h100 nodes where a runs, Slurm makes it on an h100 node outside the pool's reservation."""
    members, pool_types = np.array([True, True, False]), np.array([[False, True], [False, True], [False, False]])

    def pooled() -> SimCluster:
        prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
        c = SimCluster(["a", "b", "lo"], prio, 0, np.array([8, 8, 8]), node_types=["a100"] + ["h100"] * 4,
                       node_gpus=[8] * 5)
        pool = np.zeros((4, 2))
        pool[3, 1] = 16
        c.set_reservations(np.zeros(3), pool=(members, 16), by_type=pool, pool_types=pool_types)
        c.step(np.array([16.0, 0.0, 16.0]))
        return c

    window = np.zeros((4, 2))
    window[0, 1], window[3, 1] = 8, 8              # a's window in its own row, the pool the rest
    kueue, slurm = pooled(), pooled()
    pool = np.flatnonzero(kueue.node_holder == 3)
    assert pool.size == 2 and _running_on(kueue, pool, 0) == 16
    kueue.set_reservations(np.array([8, 0, 0]), pool=(members, 8), by_type=window, pool_types=pool_types)
    assert np.isin(np.flatnonzero(kueue.node_holder == 0), pool).all()
    slurm.set_reservations(np.array([8, 0, 0]), pool=(members, 8), by_type=window, pool_types=pool_types,
                           ahead=np.zeros((3, 2)))
    mine = np.flatnonzero(slurm.node_holder == 0)
    assert mine.size == 1 and not np.isin(mine, pool).any() and slurm.node_type[mine].tolist() == [1]
    assert (slurm.node_holder == 3).sum() == 1


def test_on_slurm_an_active_window_on_a_mixed_fleet_is_reserved_ahead_no_more():
    """At the lead time the plan holds the window's h100 GPUs (window_holds_by_type): what is reserved ahead is its
    GPUs less those, on their type (the first type, a100, has none to take them from)."""
    from daemon.policy.types import Plan, PolicyMemory

    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["w", "lo"], prio, 0, np.array([8, 8]), node_types=["a100", "a100", "h100", "h100"],
                   node_gpus=[8, 8, 8, 8], accepts=[("h100",), ()])
    act = SimulatorActuator(c, ("w", "lo"), windows_ahead=True)
    window = {"name": "eod", "tenant": "w", "gpus": {"h100": 8}, "every": "daily", "at": "14:00",
              "timezone": "Europe/Paris", "duration_minutes": 60}
    base = Plan(at="2026-12-07T13:00:00+00:00", capacity=32, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="m", notes=(),
                memory=PolicyMemory(), windows=(window,))
    assert act._ahead(base)[0].tolist() == [[0, 8], [0, 0]]
    held = dataclasses.replace(base, window_holds={"w": 8}, window_holds_by_type={"w": {"h100": 8}})
    assert act._ahead(held)[0].tolist() == [[0, 0], [0, 0]]


def test_on_slurm_at_lead_a_pooled_windows_reservation_takes_the_pools_nodes_where_its_tenant_runs():
    """windows_reserved = at_lead: two cycles before the lead time the reservation of pooled tenant a's window
    (8 GPUs) is made on one of the pool's nodes where a runs (the hand-over rule, as Kueue's hold takes them at the
    lead time; the Slurm actuator takes the node out of the pool's reservation first), and the pool, which gives
    those GPUs up when the window opens, does not take another node for them meanwhile. Before, the reservation
    went outside the pool, on the low tenant's nodes, and the pool kept both of a's nodes."""
    from daemon.policy.types import Plan, PolicyMemory

    c = _pooled_cluster()
    pool = np.flatnonzero(c.node_holder == 3)
    act = SimulatorActuator(c, ("a", "b", "lo"), windows_ahead=True, at_lead_s=600.0)
    window = {"name": "eod", "tenant": "a", "gpus": 8, "every": "daily", "at": "14:00", "timezone": "Europe/Paris",
              "duration_minutes": 60, "reclaim_before_minutes": 30}
    p = Plan(at="2026-12-07T12:25:00+00:00", capacity=32, load=1.0, high_pool=16, reservations={"a": 16},
             quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="m", notes=(),
             memory=PolicyMemory(), pooled=("a", "b"), windows=(window,), hold_job_gpus={"a": 8, "b": 8})
    act.apply(p)                                    # its lead time, 13:30 Paris (12:30 UTC), 5 min away
    mine = np.flatnonzero(c.node_ahead == 0)
    assert mine.size == 1 and np.isin(mine, pool).all()
    assert np.flatnonzero(c.node_holder == 3).tolist() == [n for n in pool.tolist() if n != mine[0]]
    assert _running_on(c, mine, 0) == 8             # a's job there keeps running, now in its window's reservation


def test_the_replays_slurm_reads_a_plans_windows_without_validating_them_again_each_step(monkeypatch):
    """A plan's windows are validated once per distinct window (daemon/config/windows.py window_of), not at every
    step of the replay (nor every cycle of the Slurm actuator): the same plan applied twice validates nothing more."""
    from daemon.config.windows import WindowConfig
    from daemon.policy.types import Plan, PolicyMemory

    calls = []
    real = WindowConfig.model_validate.__func__

    def counting(cls, *a, **kw):
        calls.append(1)
        return real(cls, *a, **kw)

    monkeypatch.setattr(WindowConfig, "model_validate", classmethod(counting))
    c = SimCluster(["w", "lo"], np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8), 32,
                   np.array([8, 8]), gpus_per_node=8)
    act = SimulatorActuator(c, ("w", "lo"), windows_ahead=True, at_lead_s=600.0)
    window = {"name": "once", "tenant": "w", "gpus": 8, "every": "daily", "at": "03:17", "timezone": "UTC",
              "duration_minutes": 60}
    p = Plan(at="2026-12-07T12:00:00+00:00", capacity=32, load=0.5, high_pool=0, reservations={}, quotas={},
             limits={}, preemptions=(), notifications=(), stale=False, forecast_model="m", notes=(),
             memory=PolicyMemory(), windows=(window,))
    act.apply(p)
    first = len(calls)
    act.apply(p)
    act.apply(dataclasses.replace(p, at="2026-12-07T12:01:00+00:00"))
    assert first <= 1 and len(calls) == first
