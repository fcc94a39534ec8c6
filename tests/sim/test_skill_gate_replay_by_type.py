"""The skill gate per (tenant, GPU type) in the replay (issue 40 item 2, 'per tenant (and per GPU type)'): a tenant
whose jobs ask different types has one demand stream per type (Workload.owners, SimCluster ``streams``), so its
forecast and the gate run per typed series, on the forecasts scored so far, and the plan acts per type."""

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.sim import strategy
from daemon.sim.cluster import RUNNING, SimCluster
from daemon.sim.replay import ForecastBank, run_strategy
from daemon.sim.workloads import Workload
from forecaster.baselines import SeasonalNaive

N, START = 900, 300
WARM = 240                      # run_strategy's warm-up: its first plan is at trace step START - WARM
CFG = Config(policy={"headroom": 0.0, "preempt_budget_share": 0.5,
                     "skill_gate": {"enabled": True, "window": 200, "min_scored": 6}})
OFF = Config(policy={"headroom": 0.0, "preempt_budget_share": 0.5})


def _workload() -> Workload:
    """High tenant `t`: its jobs on type a come for 15 of every 60 minutes (a seasonal forecast sees them coming),
    its jobs on type b come at random minutes (noise: last hour's bursts say nothing of the next); low work on any
    type fills the 32 GPUs (two 8-GPU nodes of each type)."""
    t = np.arange(N)
    a = np.where(t % 60 >= 45, 8.0, 0.0)
    b = np.where(np.random.default_rng(3).random(N) < 0.1, 8.0, 0.0)
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    demand = pd.DataFrame({"t/a": a, "t/b": b, "lo": np.full(N, 32.0)}, index=idx).rename_axis(columns="tenant")
    return Workload("typed", demand, ("high", "high", "low"), np.array([8, 8, 1]), 32, start=START,
                    node_types=["a", "a", "b", "b"], node_gpus=np.array([8, 8, 8, 8]),
                    accepts=[("a",), ("b",), ()], owners=["t", "t", "lo"])


def _run(cfg: Config, monkeypatch) -> tuple[object, list]:
    """The predictive replay (SeasonalNaive(60)), with every plan it made: (state, acting set, plan)."""
    plans = []
    orig = strategy.plan

    def spy(fc, state, mem, cfg_, last, acting=None):
        p = orig(fc, state, mem, cfg_, last, acting=acting)
        plans.append((state, acting, p))
        return p

    monkeypatch.setattr(strategy, "plan", spy)
    w = _workload()
    bank = ForecastBank(SeasonalNaive(60), w.demand, 1, cfg.cycle.horizon_steps, cfg.cycle.history_steps)
    r = run_strategy("predictive", w, cfg, bank, steps=N - START - 1, check_invariants=True)
    monkeypatch.setattr(strategy, "plan", orig)
    return r, plans


def _now(state, spec: tuple[str, ...]) -> int:
    """Tenant t's GPUs now (running and waiting) of its jobs that accept `spec`."""
    j = state.jobs
    return int(sum(g for te, a, g in zip(j.tenant, j.accepts, j.gpus) if te == 0 and tuple(a) == spec))


def test_the_gate_acts_on_the_type_with_skill_and_the_plan_holds_the_other_at_its_demand_now(monkeypatch):
    r, plans = _run(CFG, monkeypatch)
    verdict = r.gate_by_tenant["t"]["verdict"]
    assert verdict["by_type"]["a"]["acting"] and not verdict["by_type"]["b"]["acting"]
    assert verdict["why"] == "forecast for a; reactive for b"
    measured = range(WARM, len(plans))
    assert all("t@a" in plans[i][1] and "t@b" not in plans[i][1] for i in measured)
    # counted per series: a on the forecast at every measured step, b at none
    assert r.gate_by_series == {"t@a": N - START - 1, "t@b": 0, "lo@*": 0}
    # the 10 minutes before each rise of a (lead_time_steps): a is held ahead on its forecast while none of its
    # jobs is there yet; b is held no more than its jobs' GPUs now (nothing held for its forecast)
    before = [i for i in measured if 35 <= (START - WARM + i) % 60 < 45]
    assert len(before) == 100                          # ten hours measured, ten minutes before each rise
    for i in before:
        state, _, p = plans[i]
        held = p.holds_by_type.get("t", {})
        assert _now(state, ("a",)) == 0 < held.get("a", 0)
        assert held.get("b", 0) <= _now(state, ("b",))
    # ungated, the same plan holds b on its forecast of last hour's bursts: above its demand now
    _, ungated = _run(OFF, monkeypatch)
    assert any(ungated[i][2].holds_by_type.get("t", {}).get("b", 0) > _now(ungated[i][0], ("b",)) for i in before)


def test_a_tenants_hold_on_one_type_serves_its_jobs_that_accept_that_type_only():
    """Physics of a tenant whose jobs ask two types: its hold on a node of type a starts its a-jobs there (ahead of
    the low tenant), never its b-jobs, and the state shows each job with its own accepted types."""
    c = SimCluster(["t", "lo"], np.array([2, 0], dtype=np.int8), 0, np.array([4, 4]),
                   node_types=["a", "b"], node_gpus=[8, 8], streams=[(0, ("a",)), (0, ("b",)), (1, ())])
    holds = np.zeros((3, 2), dtype=np.int64)
    holds[0, 0] = 8                                    # t holds its type-a node
    c.set_reservations(np.array([8, 0]), by_type=holds)
    st = c.step(np.array([4.0, 12.0, 8.0]))            # t: one a-job, three b-jobs; lo: two jobs
    c.check_invariants()
    run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
    on = {(int(c.j_stream[j]), c.type_names[c.node_type[c.j_node[j]]]) for j in run}
    assert (0, "a") in on and (1, "a") not in on and (2, "a") not in on   # the held a node: t's a-jobs only
    assert st.served.tolist() == [4, 8, 0] and st.queued.tolist() == [0, 4, 8]
    state = c.state(("t", "lo"), ("high", "low"), pd.Timestamp("2026-01-01", tz="UTC"), 60)
    assert sorted({(int(te), tuple(a)) for te, a in zip(state.jobs.tenant, state.jobs.accepts)}) == \
        [(0, ("a",)), (0, ("b",)), (1, ())]
    assert state.used.tolist() == [12.0, 0.0]


def test_a_tenants_columns_must_share_its_tier():
    w = _workload()
    bad = Workload(w.name, w.demand, ("high", "normal", "low"), w.job_gpus, w.capacity, w.start,
                   node_types=w.node_types, node_gpus=w.node_gpus, accepts=w.accepts, owners=w.owners)
    with pytest.raises(ValueError, match="tenant 't' has columns of tiers"):
        run_strategy("reactive", bad, OFF, steps=5)
