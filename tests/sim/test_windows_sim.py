"""A recurring window on the simulator (issue 39): the plan holds the window's GPUs from its lead time and drains
the low-priority work on them, so at the window's start the hold is in place, nothing low runs or drains on the
held nodes, and the tenant's work starts at once; before the lead time the GPUs are lent out."""

import datetime as dt

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.policy.engine import plan
from daemon.policy.state import PRIORITY
from daemon.policy.types import OperatorInputs, PolicyMemory
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import RUNNING, SimCluster
from forecaster.types import Forecast

PARIS = dt.timezone(dt.timedelta(hours=1))   # Europe/Paris in December (CET)
TENANTS = ("batch", "lo")
STEP_S = 300


def _config(borrowable: bool = True, in_config: bool = True) -> tuple:
    window = {"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00",
              "timezone": "Europe/Paris", "duration_minutes": 60, "reclaim_before_minutes": 30,
              "borrowable_before": borrowable}
    cfg = parse_config({
        "cluster": {"gpus": 32, "gpus_per_node": 8},
        "tenants": [{"name": "batch", "tier": "normal"}, {"name": "lo", "tier": "low"}],
        "cycle": {"interval_s": STEP_S, "resolution_s": STEP_S},
        "source": {"simulator": {"drain_steps": 2}},
        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0},
        "windows": [window] if in_config else [],
    })
    ops = OperatorInputs() if in_config else OperatorInputs(windows=(type(cfg).model_validate(
        {**cfg.model_dump(), "windows": [window]}).windows[0],))
    return cfg, ops


def _run(cfg, ops, start: dt.datetime, end: dt.datetime, wants) -> list[tuple]:
    """Step the simulator from `start` to `end`, planning each step; per step (time, plan, cluster, stats)."""
    prio = np.array([PRIORITY["normal"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(list(TENANTS), prio, 32, np.array([8, 1]), gpus_per_node=8, drain_steps=2)
    act = SimulatorActuator(c, TENANTS)
    mem, last, out = PolicyMemory(), None, []
    t = start
    c.step(np.array(wants(t), dtype=float))
    while t < end:
        t += dt.timedelta(seconds=STEP_S)
        st = c.state(TENANTS, ("normal", "low"), pd.Timestamp(t), STEP_S)
        p = plan(None, st, mem, cfg, last, ops)
        mem, last = p.memory, p
        act.apply(p)
        stats = c.step(np.array(wants(t), dtype=float))
        c.check_invariants()
        out.append((t, p, c, stats, _low_on_held(c)))
    return out


def _low_on_held(c: SimCluster) -> tuple[int, int]:
    """(low GPUs running, GPUs draining) on the nodes held for the window's tenant."""
    held = np.flatnonzero(c.node_holder == 0)
    run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
    low = run[(c.j_tenant[run] == 1) & np.isin(c.j_node[run], held)]
    return int(c.j_gpus[low].sum()), int(c.node_draining()[held].sum())


def _wants(t: dt.datetime) -> list[float]:
    local = t.astimezone(PARIS)
    in_window = dt.time(14, 0) <= local.time() < dt.time(15, 0)
    return [16.0 if in_window else 0.0, 32.0]           # the low tenant would fill the whole cluster


def test_the_hold_is_in_place_and_low_work_drained_at_the_windows_start():
    for in_config in (True, False):   # declared in the config, or by an operator through the API
        cfg, ops = _config(in_config=in_config)
        steps = _run(cfg, ops, dt.datetime(2026, 12, 7, 12, 0, tzinfo=PARIS), dt.datetime(2026, 12, 7, 14, 30,
                                                                                            tzinfo=PARIS), _wants)
        by = {t.astimezone(PARIS).strftime("%H:%M"): (p, c, s, low) for t, p, c, s, low in steps}
        # before the lead time the GPUs are borrowed: no hold, the low tenant runs on all 32
        p, _c, s, _low = by["13:00"]
        assert "batch" not in p.reservations and int(s.served[1]) == 32
        # from 13:30 (30 min ahead) the hold is there and says why
        p, _c, _s, _low = by["13:30"]
        assert p.reservations.get("batch", 0) >= 16
        assert any("window eod opens 14:00 Europe/Paris" in n for n in p.notes), p.notes
        # the drain is spread over the lead: a quarter of the 16 GPUs a plan (30 min less the 10-min drain, in
        # 5-min cycles), all of them by 13:45 (a drain and a cycle before the start)
        drained = [sum(x.gpus for x in by[hm][0].preemptions) for hm in ("13:30", "13:35", "13:40", "13:45")]
        assert drained == [4, 4, 4, 4], drained
        # by the start (the plan made at 13:55, applied before 14:00) the held nodes run no low work and nothing
        # drains there: the window's 16 GPUs start in the 14:00 step
        p, c, s, low = by["13:55"]
        assert p.reservations.get("batch", 0) >= 16 and low == (0, 0)
        assert int((c.node_holder == 0).sum()) * 8 >= 16
        p, _c, s, _low = by["14:00"]
        assert int(s.served[0]) == 16 and int(s.queued[0]) == 0, (s.served, s.queued)


def test_a_window_not_borrowable_before_is_held_from_creation_but_cleared_only_at_its_lead_time():
    cfg, ops = _config(borrowable=False)
    steps = _run(cfg, ops, dt.datetime(2026, 12, 7, 11, 0, tzinfo=PARIS), dt.datetime(2026, 12, 7, 14, 0,
                                                                                        tzinfo=PARIS), _wants)
    early = [p for t, p, *_ in steps if t.astimezone(PARIS).time() < dt.time(13, 30)]
    assert early and all(p.reservations.get("batch", 0) >= 16 for p in early)
    assert all(not p.preemptions for p in early)                 # held by attrition, not cleared, until 13:30
    assert any(p.preemptions for t, p, *_ in steps if t.astimezone(PARIS).time() >= dt.time(13, 30))


# ---- two high tenants and a low one: the window's hold is its tenant's alone, its drain its own -------------------
TRIO = ("other", "win", "lo")       # `other` first: at a tie its queued jobs are placed first


def _trio_config(share: float, gpus: int = 32, **policy) -> object:
    return parse_config({
        "cluster": {"gpus": gpus, "gpus_per_node": 8},
        "tenants": [{"name": "other", "tier": "high"}, {"name": "win", "tier": "high"}, {"name": "lo", "tier": "low"}],
        "cycle": {"interval_s": STEP_S, "resolution_s": STEP_S},
        "source": {"simulator": {"drain_steps": 2}},
        "policy": {"preempt_budget_share": share, "preempt_min_runtime_s": 0, **policy},
        "windows": [{"name": "eod", "tenant": "win", "gpus": 16, "every": "daily", "at": "14:00",
                     "timezone": "Europe/Paris", "duration_minutes": 60, "reclaim_before_minutes": 30}]})


def steps(c: SimCluster, tenants: tuple, tiers: tuple, cfg, wants, forecast=None, series: tuple | None = None):
    """13:00 to 14:10 Paris, planning and applying each step on `c`; yields (local HH:MM, plan, the step's stats).
    `forecast(t)`: each series' forecast per step ahead (None: no forecast); `series`: its names (the tenants')."""
    act = SimulatorActuator(c, tenants)
    mem, last = PolicyMemory(), None
    t = dt.datetime(2026, 12, 7, 13, 0, tzinfo=PARIS)
    c.step(np.array(wants(t), dtype=float))
    while t < dt.datetime(2026, 12, 7, 14, 10, tzinfo=PARIS):
        t += dt.timedelta(seconds=STEP_S)
        st = c.state(tenants, tiers, pd.Timestamp(t), STEP_S)
        fc = None
        if forecast is not None:
            v = np.repeat(np.asarray(forecast(t), dtype=float)[:, :, None], 3, axis=2)
            fc = Forecast(series or tenants, (0.5, 0.9, 0.99), v, st.at, STEP_S, "test")
        p = plan(fc, st, mem, cfg, last)
        mem, last = p.memory, p
        act.apply(p)
        stats = c.step(np.array(wants(t), dtype=float))
        c.check_invariants()
        yield t.astimezone(PARIS).strftime("%H:%M"), p, stats


def _trio(cfg, wants, forecast=None) -> dict[str, tuple]:
    """13:00 to 14:10 Paris; per step (local HH:MM) the plan, the step's stats and the GPUs `other` runs on the
    nodes held for `win`. `forecast(t)`: each tenant's forecast per step ahead (None: no forecast)."""
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(list(TRIO), prio, cfg.cluster.gpus, np.array([8, 8, 1]), gpus_per_node=8, drain_steps=2)
    out = {}
    for hm, p, stats in steps(c, TRIO, ("high", "high", "low"), cfg, wants, forecast):
        run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        mine = run[(c.j_tenant[run] == 0) & np.isin(c.j_node[run], np.flatnonzero(c.node_holder == 1))]
        out[hm] = (p, stats, int(c.j_gpus[mine].sum()))
    return out


def test_a_windows_hold_serves_only_its_tenant_not_the_high_tiers_pool():
    """The high tier's holds are one pool (policy.pool_high_tier), but a window's is its tenant's alone, as a Slurm
    reservation for its account: another high tenant whose jobs queue at the same time does not take it. Before,
    the window was folded into the pool and `other`'s burst, queued first, took the GPUs cleared for `win`."""
    def wants(t):
        in_window = dt.time(14, 0) <= t.astimezone(PARIS).time() < dt.time(15, 0)
        return [24.0 if in_window else 8.0, 16.0 if in_window else 0.0, 32.0]

    by = _trio(_trio_config(1.0), wants)
    p, _s, _on = by["13:45"]
    assert p.window_holds == {"win": 16} and p.reservations["win"] >= 16     # its window held apart from the pool
    assert "win" in by["13:05"][0].pooled and not by["13:05"][0].window_holds  # before its lead time: the pool only
    _p, s, on_win = by["14:00"]
    assert int(s.served[1]) == 16 and int(s.queued[1]) == 0, (s.served, s.queued)
    assert all(on == 0 for _p, _s, on in by.values())      # `other` never runs on the window's nodes


def test_a_windows_hold_adds_to_what_its_tenant_may_use_the_pool_and_free_gpus_stay_open_to_it():
    """The window is held apart for its tenant, and beyond it the tenant still borrows the high tier's pool, as a
    Slurm account may run outside its reservation and a Kueue queue borrows in its cohort. `other`'s forecast
    holds two nodes in the pool that it does not use yet; `win` asks 24 GPUs at 14:00 against its window's 16: the
    8 more start at once on the pool's idle node. Before, the window's tenant left the pool for the window's lead
    and duration: its third job waited while the pool's GPUs sat idle."""
    def wants(t):
        in_window = dt.time(14, 0) <= t.astimezone(PARIS).time() < dt.time(15, 0)
        return [0.0, 24.0 if in_window else 0.0, 32.0]

    def forecast(t):   # `other` forecast at 16 throughout (its hold), `win` at nothing beyond its window
        return np.repeat(np.array([[16.0], [0.0], [32.0]]), 12, axis=1)

    by = _trio(_trio_config(1.0), wants, forecast)
    p, _s, _on = by["13:55"]
    assert "win" in p.pooled and p.window_holds == {"win": 16}, (p.pooled, p.window_holds)
    _p, s, _on = by["14:00"]
    assert int(s.served[1]) == 24 and int(s.queued[1]) == 0, (s.served, s.queued)


def test_a_windows_drain_has_its_own_budget_spread_over_the_lead_and_is_not_weighed_as_a_forecast():
    """The forecast's preemption budget (2% of 32 GPUs: none) and the cost-aware rule (the forecast sees no demand
    of `win` ahead: clearing for it would be worth nothing) both kept the window's GPUs from being cleared, so its
    jobs waited at the start. The window's drain is known demand with its own budget: 4 GPUs a plan over the lead,
    all 16 by 13:45, and its jobs start at 14:00."""
    def wants(t):
        in_window = dt.time(14, 0) <= t.astimezone(PARIS).time() < dt.time(15, 0)
        return [8.0, 16.0 if in_window else 0.0, 32.0]

    def forecast(t):   # every tenant flat at its demand now: the window is not in the forecast
        return np.repeat(np.array([[8.0], [0.0], [32.0]]), 12, axis=1)

    by = _trio(_trio_config(0.02), wants, forecast)
    drained = [sum(x.gpus for x in by[hm][0].preemptions if x.for_tenant == "win")
               for hm in ("13:30", "13:35", "13:40", "13:45")]
    assert drained == [4, 4, 4, 4], drained
    assert all(not by[hm][0].preemptions for hm in ("13:05", "13:15", "13:25"))   # nothing before the lead
    _p, s, _on = by["14:00"]
    assert int(s.served[1]) == 16 and int(s.queued[1]) == 0, (s.served, s.queued)


def test_a_window_whose_jobs_take_whole_nodes_is_cleared_whole_from_its_lead_time():
    """`win`'s jobs take a whole 8-GPU node. Spread over the lead, its window cleared a quarter of its 16 GPUs a
    plan, and with its one running job counted nothing at 13:30: a node cleared in part holds none of its jobs, and
    the lead is the time the work there has to end. Now all of it is asked for at the lead time: the 8 GPUs beyond
    its running job are cleared as soon as the window's nodes are held (the 13:30 plan's hold, taken from the pool
    the whole cluster is), a whole node. A tenant of 1-GPU jobs still spreads its drain
    (test_the_hold_is_in_place_and_low_work_drained_at_the_windows_start)."""
    def wants(t):
        in_window = dt.time(14, 0) <= t.astimezone(PARIS).time() < dt.time(15, 0)
        return [8.0, 16.0 if in_window else 8.0, 32.0]

    by = _trio(_trio_config(1.0), wants)
    cleared = [x for hm in ("13:30", "13:35") for x in by[hm][0].preemptions if x.for_tenant == "win"]
    assert sum(x.gpus for x in cleared) == 8 and len({x.node for x in cleared}) == 1, cleared
    # one note says it, the window's own: not also that a quarter is cleared now (make run's plan said both)
    said = [n for n in by["13:30"][0].notes if n.startswith("window ")]
    assert len(said) == 1 and "all 16 cleared from then, as its jobs take whole nodes" in said[0], said
    assert " cleared now" not in said[0], said
    _p, s, _on = by["14:00"]
    assert int(s.served[1]) == 16 and int(s.queued[1]) == 0, (s.served, s.queued)
