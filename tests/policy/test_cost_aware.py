"""The cost-aware preemption rule (policy.preempt_cost_aware): a job is preempted for forecast demand only when that
demand arrives before the drain of a preemption started now ends, and the GPU-minutes it then uses the cleared GPUs
for exceed what the preemption loses (the work since the job's last checkpoint plus the drain). Jobs waiting now are
not subject to it.

Hand-computed numbers, with the defaults the rule takes from the simulator (drain 2 steps, checkpoints every 30
steps, 60-second steps): clearing a node of eight 1-GPU low jobs that ran 600 s since their (re)start loses
8 x (10 + 2) = 96 GPU-minutes. An 8-GPU high job forecast to arrive at the next step and to last L steps uses the
cleared node from step 2 (when the drain ends) to step L: 8 x (L - 1) GPU-minutes.
"""

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.engine import drain_and_checkpoint_s
from daemon.policy.preemption import loss_gpu_min, worth_gpu_min
from daemon.policy.state import PRIORITY, ClusterState, Jobs, Nodes
from forecaster.types import Forecast

AT = pd.Timestamp("2026-01-06T13:50:00Z")
CFG = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_cost_aware": True})
OFF = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_cost_aware": False})


def cluster(low_runtime_s: float = 600.0, high_pending: int = 0, nodes: bool = True) -> ClusterState:
    """n0: the high tenant's 8-GPU job; n1: eight 1-GPU low jobs; the high tenant may have an 8-GPU job queued."""
    spec = [(0, 8, "high", "n0", 3600.0)] + [(1, 1, "low", "n1", low_runtime_s)] * 8
    pend = [(0, 8, "high", "", 0.0)] * high_pending
    rows = spec + pend
    jobs = Jobs(np.array([f"j{i}" for i in range(len(rows))], dtype=object),
                np.array([r[0] for r in rows], dtype=np.int64), np.array([r[1] for r in rows], dtype=np.int64),
                np.array([PRIORITY[r[2]] for r in rows], dtype=np.int8),
                np.array([True] * len(spec) + [False] * len(pend)), np.array([r[4] for r in rows]),
                np.zeros(len(rows)), np.array([r[3] for r in rows], dtype=object))
    used = np.array([8.0, 8.0])
    view = Nodes(np.array(["n0", "n1"], dtype=object), np.array([8, 8]), np.array([0, 0]), np.array([0, 0]),
                 np.array([-1, -1])) if nodes else None
    return ClusterState(AT, ("t0", "t1"), ("high", "low"), 16, used, np.array([8.0 * high_pending, 0.0]), jobs,
                        nodes=view)


def rise(at: int, steps: int, base: float = 8.0, top: float = 16.0, horizon: int = 60) -> Forecast:
    """t0 forecast at `top` GPUs from step `at` (1 = the next step) for `steps` steps, `base` otherwise (every
    quantile); t1 flat."""
    v = np.zeros((2, horizon, 3))
    v[0] = base
    v[0, at - 1: at - 1 + steps] = top
    v[1] = 8.0
    return Forecast(("t0", "t1"), (0.5, 0.9, 0.99), v, AT, 60, "test")


def preempted(fc: Forecast, cfg: Config = CFG, **kw) -> int:
    return sum(x.gpus for x in plan(fc, cluster(**kw), PolicyMemory(), cfg).preemptions)


def test_the_cost_aware_rule_refuses_a_blip_shorter_than_the_drain_plus_the_work_lost_and_accepts_a_sustained_rise():
    # what the preemption loses: 10 minutes since the last checkpoint plus the 2-minute drain, per GPU
    assert drain_and_checkpoint_s(CFG) == (120.0, 1800.0)
    # a 10-minute blip, shorter than the drain plus the work lost: refused
    blip = rise(at=1, steps=10)
    assert preempted(blip) == 0
    p = plan(blip, cluster(), PolicyMemory(), CFG)
    assert any(n.startswith("cost-aware preemption: 1 forecast job of") for n in p.notes)
    assert p.reservations["t0"] == 16               # the hold is the forecast's as before: only preemption is weighed
    # a sustained rise: the node is cleared
    assert preempted(rise(at=1, steps=60)) == 8
    # without the rule the blip clears the node too (what the rule changes)
    assert preempted(blip, OFF) == 8


def test_the_rule_weighs_exactly_the_work_lost_plus_the_drain():
    # 8 x (L - 1) against 96: a 13-step blip is worth 96 (not more: refused), a 14-step one 104 (cleared)
    assert preempted(rise(at=1, steps=13)) == 0
    assert preempted(rise(at=1, steps=14)) == 8
    # jobs that checkpointed 5 s ago lose only the drain (8 x 2 = 16 GPU-min, plus 8 x 5 s): a 4-step blip
    # (8 x 3 = 24) is worth it
    assert preempted(rise(at=1, steps=4), low_runtime_s=1805.0) == 8
    assert preempted(rise(at=1, steps=4), low_runtime_s=1700.0) == 0
    # a drain and a checkpoint interval set for the cluster are the ones weighed: with a 20-minute checkpoint
    # interval the jobs at 1,500 s lost 5 minutes (8 x 7 = 56): a 9-step blip (64) is worth it, an 8-step one not
    short = CFG.model_copy(update={"policy": CFG.policy.model_copy(update={"checkpoint_interval_s": 1200})})
    assert preempted(rise(at=1, steps=9), short, low_runtime_s=1500.0) == 8
    assert preempted(rise(at=1, steps=8), short, low_runtime_s=1500.0) == 0


def test_the_worth_weight_scales_what_the_forecast_demand_is_worth_against_the_work_lost():
    # a 5-step blip is worth 8 x 4 = 32 against the 96 lost: refused at weight 1 and 2.9, cleared at 3.1
    # (3.1 x 32 = 99.2 > 96), and a 13-step one (96, refused at 1) is cleared at any weight above 1
    def weighted(w):
        return CFG.model_copy(update={"policy": CFG.policy.model_copy(update={"preempt_worth_weight": w})})

    assert preempted(rise(at=1, steps=5)) == 0
    assert preempted(rise(at=1, steps=5), weighted(2.9)) == 0
    notes = plan(rise(at=1, steps=5), cluster(), PolicyMemory(), weighted(2.9)).notes
    assert any("not cleared for" in x and "weighted x2.9" in x for x in notes), notes     # says it was weighted
    assert preempted(rise(at=1, steps=5), weighted(3.1)) == 8
    assert preempted(rise(at=1, steps=13), weighted(1.01)) == 8
    # the weight does not move when demand must arrive: a rise after the drain is still left for later
    assert preempted(rise(at=3, steps=58), weighted(100)) == 0


def test_demand_forecast_after_the_drain_ends_is_preempted_for_later_not_now():
    # a sustained rise from step 3: a preemption now would drain by step 2 and leave the node idle a step
    assert preempted(rise(at=3, steps=58)) == 0
    assert preempted(rise(at=2, steps=59)) == 8
    # without the rule: anything within preempt_lead_steps (3)
    assert preempted(rise(at=3, steps=58), OFF) == 8
    # no drain at all: preempting ahead saves nothing, so only jobs waiting now are preempted for
    no_drain = CFG.model_copy(update={"policy": CFG.policy.model_copy(update={"preempt_drain_s": 0})})
    assert preempted(rise(at=1, steps=60), no_drain) == 0
    assert preempted(rise(at=1, steps=60), no_drain, high_pending=1) == 8


def test_jobs_waiting_now_are_not_subject_to_the_rule():
    # the high tenant's 8-GPU job waits now; the forecast says it ends in 2 minutes: it is cleared for anyway
    assert preempted(rise(at=1, steps=2), high_pending=1) == 8
    assert preempted(rise(at=1, steps=2, top=8.0), high_pending=1) == 8


def test_without_a_node_view_the_rule_weighs_the_gpus_cleared():
    # the same cluster from a source that knows no placement: GPU counts only
    assert preempted(rise(at=1, steps=10), nodes=False) == 0
    assert preempted(rise(at=1, steps=60), nodes=False) == 8
    assert preempted(rise(at=1, steps=10), OFF, nodes=False) == 8
    assert preempted(rise(at=1, steps=2), nodes=False, high_pending=1) == 8


def test_worth_is_the_demand_served_from_the_end_of_the_drain_while_it_lasts():
    y = np.array([
        [4, 4, 4, 0, 4, 4],          # arrives at step 1, falls back after step 3: steps 2-3 count (the drain is 2)
        [0, 2, 2, 2, 2, 2],          # arrives at step 2 (the drain's end): steps 2-6
        [0, 0, 8, 8, 8, 8],          # arrives at step 3, after the drain: worth nothing now
        [np.nan, 8, 8, np.nan, 8, 8],  # a step the forecast does not know is not demand
    ], dtype=float)
    w = worth_gpu_min(y, window=2, drain_steps=2, step_min=1.0)
    assert w.tolist() == [8.0, 10.0, 0.0, 16.0]
    assert worth_gpu_min(y, window=2, drain_steps=2, step_min=5.0)[1] == 50.0
    assert worth_gpu_min(y, window=0, drain_steps=0, step_min=1.0).tolist() == [0.0] * 4


def test_loss_is_the_work_since_the_last_checkpoint_plus_the_drain():
    jobs = cluster(low_runtime_s=2000.0).jobs                 # 200 s past the checkpoint at 1,800 s
    loss = loss_gpu_min(jobs, drain_s=120.0, checkpoint_s=1800.0)
    assert loss[1] == pytest.approx((200 + 120) / 60)
    assert loss[0] == pytest.approx(8 * (0 + 120) / 60)      # the 8-GPU job at exactly 3,600 s: the drain only


def test_weighing_the_candidates_in_chunks_takes_what_weighing_them_all_would():
    # the GPU-count path weighs candidates cheapest first, 4,096 at a time, only until the prefix it takes is
    # settled: the same choice as filtering every candidate first
    from daemon.policy.preemption import Gate, choose

    rng = np.random.default_rng(5)
    n = 20_000
    jobs = Jobs(np.array([f"j{i}" for i in range(n)], dtype=object), rng.integers(1, 50, n),
                rng.integers(1, 9, n), np.full(n, PRIORITY["low"], dtype=np.int8), np.ones(n, dtype=bool),
                rng.uniform(0, 20_000, n), np.zeros(n), np.array(["n"] * n, dtype=object))
    gate = Gate(np.zeros(1, dtype=np.int64), np.zeros(0), np.zeros(1, dtype=np.int64), 120.0, 1800.0)
    protected = np.zeros(50, dtype=bool)
    for shortfall, gated, worth, budget_g, budget_j in [(3000, 2500, 12.0, 10_000, 5000), (30_000, 29_000, 9.0,
                                                        100_000, 50_000), (500, 400, 40.0, 300, 30),
                                                       (60_000, 100, 5.0, 100_000, 50_000)]:
        got = choose(jobs, shortfall, protected, budget_g, budget_j, gated, worth, gate)
        # reference: every candidate weighed, then the same prefix rule
        idx = np.arange(n)
        order = idx[np.lexsort((jobs.runtime_s, jobs.gpus * jobs.runtime_s))]
        g = jobs.gpus[order]
        keep = (np.cumsum(g) - g) < shortfall - gated
        keep |= loss_gpu_min(jobs, 120.0, 1800.0)[order] < worth * g
        order, g = order[keep], g[keep]
        cum = np.cumsum(g)
        take = ((cum - g) < shortfall) & (cum <= budget_g)
        take[budget_j:] = False
        stop = np.flatnonzero(~take)
        want = order[:int(stop[0]) if stop.size else take.size]
        assert got.tolist() == want.tolist() and got.size > 0


def _worth_by_hand(row, window, drain_steps, step_min):
    """The rule as the docs state it, one row at a time: arrives at some step i < window and stays up to the drain's
    end d; then counts from d while it lasts."""
    y = [0.0 if np.isnan(v) else float(v) for v in row]
    d = max(drain_steps, 1) - 1
    if window <= 0 or d >= len(y):
        return 0.0
    if not any(all(v > 0 for v in y[i: d + 1]) for i in range(min(window, d + 1))):
        return 0.0
    total = 0.0
    for v in y[d:]:
        if v <= 0:
            break
        total += v
    return total * step_min


def test_worth_matches_the_rule_as_written_on_random_rows():
    rng = np.random.default_rng(0)
    for _ in range(200):
        r, h = rng.integers(1, 30), rng.integers(1, 12)
        y = rng.integers(0, 3, (r, h)).astype(float) * (rng.uniform(size=(r, h)) < 0.8)
        y[rng.uniform(size=(r, h)) < 0.05] = np.nan
        for window in range(4):
            for drain in range(4):
                got = worth_gpu_min(y, window, drain, 1.5)
                assert got.tolist() == pytest.approx([_worth_by_hand(row, window, drain, 1.5) for row in y])
