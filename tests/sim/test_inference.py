"""Inference services in the replay (daemon/sim/inference.py): cold starts, the gateway's count of requests per
tier, and which replicas go on scale-down."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, TenantConfig
from daemon.policy.state import PRIORITY
from daemon.sim.cluster import SimCluster
from daemon.sim.inference import Gateway, InferenceSpec, need_frame
from daemon.sim.replay import run_strategy
from daemon.sim.workloads import Workload

STEP_S = 60


def _workload(rates: pd.DataFrame, specs: dict[str, InferenceSpec], tiers: tuple[str, ...], start: int,
              capacity: int = 32) -> Workload:
    need = need_frame(rates, specs)
    return Workload("inference-test", need, tiers, np.array([specs[c].gpus_per_replica for c in rates.columns]),
                    capacity, start, inference=specs, rates=rates)


def _step_rise(n: int, rise: int, rate: float) -> pd.DataFrame:
    idx = pd.date_range("2026-01-05", periods=n, freq=f"{STEP_S}s", tz="UTC", name="time")
    return pd.DataFrame({"svc": np.where(np.arange(n) >= rise, rate, 0.0)}, index=idx)


@pytest.mark.parametrize("cold_min", [3, 5])
def test_the_cold_start_delays_service_hand_computed(cold_min):
    """One service, 20 req/s from step 12 on, replicas of 10 req/s (no headroom), a cold start of `cold_min`
    steps. The HPA sees the rise one step late (step 13: 2 replicas placed at once on the idle cluster); they serve
    from step 13 + cold_min. So the 1 + cold_min steps from the rise on are throttled whole (no replica ready: the
    bucket's rate is 0), every later request is served on time. Measured: steps 10..39."""
    rates = _step_rise(40, 12, 20.0)
    spec = {"svc": InferenceSpec(1, 10.0, cold_min * 60.0, headroom=0.0)}
    m = run_strategy("reactive", _workload(rates, spec, ("high",), start=10), Config(), steps=30)
    per_step = 20.0 * STEP_S
    dark = 1 + cold_min
    assert m.inf_requests["high"] == 28 * per_step              # steps 12..39 have arrivals
    assert m.inf_throttled["high"] == dark * per_step
    assert m.inf_served["high"] == (28 - dark) * per_step
    assert m.inf_late["high"] == 0.0
    t = m.summary()["tiers"]["high"]
    assert (t["inf_requests"], t["inf_throttled"]) == (28 * per_step, dark * per_step)
    assert t["inf_gpu_min"] == 2 * 27                   # 2 one-GPU replicas ran from step 13 to 39, cold or not


def test_the_perfect_autoscaler_places_replicas_a_cold_start_ahead():
    """The true future over the cold start + drain steps: the replicas are placed early enough to be ready at the
    rise, so nothing is throttled; reactive on the same trace loses the 1 + 3 steps above."""
    rates = _step_rise(40, 20, 20.0)
    spec = {"svc": InferenceSpec(1, 10.0, 180.0, headroom=0.0)}
    w = _workload(rates, spec, ("high",), start=10)
    perfect = run_strategy("perfect", w, Config(), steps=30)
    reactive = run_strategy("reactive", w, Config(), steps=30)
    assert perfect.inf_requests["high"] == reactive.inf_requests["high"] == 20 * 20.0 * STEP_S
    assert perfect.inf_throttled["high"] == 0.0 and perfect.inf_served["high"] == perfect.inf_requests["high"]
    assert reactive.inf_throttled["high"] == 4 * 20.0 * STEP_S


def test_the_gateway_hand_computed():
    """Two services: one with 2 ready replicas of 10 req/s under a limit of 5 req/s (the limit binds: 300 of 600
    admitted, the bucket starts empty), one with 1 replica and no binding limit (all 600 served). Next step the
    first one's bucket has no tokens left over; the second's 2 s of burst let 20 requests in beyond what its
    replica serves: late, served first the step after."""
    g = Gateway(2, burst_seconds=2.0)
    r = g.step(np.array([600.0, 600.0]), np.array([20.0, 10.0]), np.array([5.0, 1000.0]), 60)
    assert r.served.tolist() == [300.0, 600.0] and r.throttled.tolist() == [300.0, 0.0]
    assert r.late.tolist() == [0.0, 0.0]
    r = g.step(np.array([600.0, 0.0]), np.array([20.0, 10.0]), np.array([5.0, 1000.0]), 60)
    assert r.served.tolist() == [300.0, 0.0] and g.tokens[1] == 20.0
    r = g.step(np.array([0.0, 700.0]), np.array([20.0, 10.0]), np.array([5.0, 1000.0]), 60)
    assert r.throttled.tolist() == [0.0, 80.0]          # 20 tokens + 600 refill admitted of 700
    assert r.served.tolist() == [0.0, 600.0] and r.late.tolist() == [0.0, 20.0]
    r = g.step(np.array([0.0, 600.0]), np.array([20.0, 10.0]), np.array([5.0, 1000.0]), 60)
    assert r.served[1] == 580.0 and r.late[1] == 20.0    # the 20 late ones took their place


def test_throttled_is_counted_per_tier_and_never_exceeds_arrivals():
    """Bursty arrivals for a high and a normal service; the normal one's limit (rate_override 8 req/s) is below
    its rate, the high one's is not. Per tier: served + throttled + late == arrivals, throttled <= arrivals, and
    the normal tier's throttling is its limit's (at least the arrivals above 8 req/s x the measured minutes)."""
    n, start = 200, 40
    rng = np.random.default_rng(3)
    idx = pd.date_range("2026-01-05", periods=n, freq=f"{STEP_S}s", tz="UTC", name="time")
    base = 10 + 6 * np.sin(np.arange(n) / 15.0)
    rates = pd.DataFrame({"hi": rng.gamma(4.0, base / 4.0), "lo": rng.gamma(4.0, base / 4.0)}, index=idx)
    specs = {c: InferenceSpec(1, 4.0, 120.0, headroom=0.2) for c in rates.columns}
    cfg = Config(tenants=[TenantConfig(name="lo", tier="normal", rate_override=8.0)])
    m = run_strategy("reactive", _workload(rates, specs, ("high", "normal"), start=start), cfg, steps=n - start)
    arrivals = rates.iloc[start:].sum() * STEP_S
    for tier, col in (("high", "hi"), ("normal", "lo")):
        assert m.inf_requests[tier] == pytest.approx(arrivals[col])
        total = m.inf_served[tier] + m.inf_throttled[tier] + m.inf_late[tier]
        assert total == pytest.approx(m.inf_requests[tier], rel=1e-12)
        assert 0 <= m.inf_throttled[tier] <= m.inf_requests[tier]
    over = np.maximum(rates["lo"].iloc[start:] - 8.0, 0).sum() * STEP_S
    assert m.inf_throttled["normal"] >= over * 0.9
    assert m.inf_throttled["high"] < m.inf_throttled["normal"]
    assert m.inf_requests["low"] == 0.0


def test_scale_down_removes_cold_and_newest_replicas_first():
    """A service with 2 replicas started at step 1 and 2 more at step 4: down to 2, the two of step 4 (the newest,
    still cold with a 5-step cold start) go and the warm ones stay. A batch tenant in the same spot loses its
    oldest jobs (done work), as before."""
    c = SimCluster(["svc", "batch"], np.array([PRIORITY["high"], PRIORITY["normal"]]), 32, np.array([1, 1]))
    c.newest_first[0] = True
    c.step(np.array([2.0, 2.0]))
    c.step(np.array([2.0, 2.0]))
    c.step(np.array([2.0, 2.0]))
    c.step(np.array([4.0, 4.0]))
    warm = np.array([5, 5])
    c.step(np.array([4.0, 4.0]))
    c.step(np.array([4.0, 4.0]))
    assert c.ready_per_tenant(warm).tolist() == [2, 2]   # step 6: the step-1 jobs are 5 steps old
    c.step(np.array([2.0, 2.0]))
    run = np.flatnonzero(c.j_state[: c.size] == 2)
    started = {t: sorted(c.j_started_at[run][c.j_tenant[run] == t].tolist()) for t in (0, 1)}
    assert started == {0: [1, 1], 1: [4, 4]}
    assert c.ready_per_tenant(warm).tolist() == [2, 0]


def test_a_preempted_replica_cold_starts_again():
    c = SimCluster(["svc"], np.array([PRIORITY["high"]]), 8, np.array([1]), drain_steps=0)
    for _ in range(4):
        c.step(np.array([1.0]))
    assert c.ready_per_tenant(np.array([3])).tolist() == [1]
    c.preempt(c.j_id[:1])
    c.step(np.array([1.0]))                             # placed again at once: cold for 3 steps
    assert c.ready_per_tenant(np.array([3])).tolist() == [0]
    for _ in range(3):
        c.step(np.array([1.0]))
    assert c.ready_per_tenant(np.array([3])).tolist() == [1]


def test_need_is_the_previous_steps_rate_in_whole_replicas():
    idx = pd.date_range("2026-01-05", periods=4, freq="60s", tz="UTC")
    rates = pd.DataFrame({"svc": [10.0, 10.0, 31.0, np.nan]}, index=idx)
    need = need_frame(rates, {"svc": InferenceSpec(2, 10.0, 60.0, headroom=0.1)})
    # 10 x 1.1 / 10 = 1.1 -> 2 replicas = 4 GPUs; 31 x 1.1 / 10 = 3.41 -> 4 replicas = 8 GPUs; a gap stays a gap
    assert need["svc"].iloc[:3].tolist() == [4.0, 4.0, 4.0] and need["svc"].iloc[3] == 8.0
    assert np.isnan(need_frame(rates.shift(1), {"svc": InferenceSpec(1, 1.0, 0.0)})["svc"].iloc[1])


def test_a_tiers_unmet_is_split_into_its_services_and_its_batch_jobs():
    """A 4-GPU cluster full of a normal batch tenant's four 1-GPU jobs from the first step; a normal service
    needs 2 replicas from step 13 (20 req/s from step 12, seen a step late, replicas of 10 req/s) and a low batch
    tenant 1 GPU from the first step. Nothing is ever preempted for them (neither is protected; 30 measured
    steps are short of aging), so over steps 10..39 the service's need is unmet 2 x 27 GPU-min and the low
    job's 30: the normal tier's unmet is all its service's (inf_unmet_gpu_min), the low tier's all its batch's."""
    rates = _step_rise(40, 12, 20.0)
    spec = {"svc": InferenceSpec(1, 10.0, 180.0, headroom=0.0)}
    demand = need_frame(rates, spec).assign(batch=4.0, low=1.0)
    w = Workload("split-test", demand, ("normal", "normal", "low"), np.array([1, 1, 1]), 4, 10, inference=spec,
                 rates=rates)
    t = run_strategy("reactive", w, Config(), steps=30).summary()["tiers"]
    assert (t["normal"]["unmet_gpu_min"], t["normal"]["inf_unmet_gpu_min"]) == (54.0, 54.0)
    assert (t["low"]["unmet_gpu_min"], t["low"]["inf_unmet_gpu_min"]) == (30.0, 0.0)
    assert t["high"]["inf_unmet_gpu_min"] == 0.0
