"""The skill gate on the services' replica autoscaler (issue 40): a service whose forecast has shown no skill scales
reactively; one whose forecast has skill scales ahead of its rises."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.sim.inference import InferenceSpec, need_frame
from daemon.sim.replay import ForecastBank, run_strategy
from daemon.sim.workloads import Workload
from forecaster.baselines import SeasonalNaive
from forecaster.types import Forecast

N, START = 900, 300
CFG = Config(policy={"skill_gate": {"enabled": True, "window": 12, "min_scored": 6}})
OFF = Config(policy={"skill_gate": {"enabled": False}})


def _workload() -> Workload:
    """Two services of 1-GPU replicas at 10 req/s with a 3-min cold start, on a cluster with room for both: "daily"
    (high tier) runs 40 req/s for 15 of every 60 minutes (an hourly seasonal forecast sees each rise coming),
    "noisy" (normal tier) runs a flat 20 req/s that its forecast (``Overcast``) puts at three times that: no skill,
    the demand now is the better estimate."""
    t = np.arange(N)
    daily = np.where(t % 60 >= 45, 40.0, 0.0)
    noisy = np.full(N, 20.0)
    idx = pd.date_range("2026-01-05", periods=N, freq="min", tz="UTC", name="time")
    rates = pd.DataFrame({"daily": daily, "noisy": noisy}, index=idx)
    specs = {c: InferenceSpec(1, 10.0, 180.0, headroom=0.0) for c in rates.columns}
    need = need_frame(rates, specs)
    return Workload("gate-test", need, ("high", "normal"), np.array([1, 1]), 64, START, inference=specs, rates=rates)


class Overcast:
    """An hourly seasonal forecast, except for "noisy": three times its seasonal forecast at every quantile."""

    name = "overcast"

    def __init__(self) -> None:
        self.inner = SeasonalNaive(60)

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        fc = self.inner.predict(history, horizon)
        v = fc.values.copy()
        v[list(fc.tenants).index("noisy")] *= 3.0
        return dataclasses.replace(fc, values=v, model=self.name, peaks=None)


def _predictive(w: Workload, cfg: Config):
    bank = ForecastBank(Overcast(), w.demand, 1, cfg.cycle.horizon_steps, cfg.cycle.history_steps)
    return run_strategy("predictive", w, cfg, bank, steps=N - START - 1)


def test_a_service_with_no_skill_scales_as_reactive_and_one_with_skill_scales_ahead():
    w = _workload()
    gated, ungated = _predictive(w, CFG), _predictive(w, OFF)
    reactive = run_strategy("reactive", w, CFG, steps=N - START - 1)
    g, u, r = (x.summary()["tiers"] for x in (gated, ungated, reactive))
    # no skill: the gate keeps "noisy" on its HPA, replica for replica as reactive (same GPU-minutes, same 429s)
    assert g["normal"]["inf_gpu_min"] == r["normal"]["inf_gpu_min"]
    assert g["normal"]["inf_throttled"] == r["normal"]["inf_throttled"]
    # (without the gate the forecast's wrong rises start replicas that are not needed)
    assert u["normal"]["inf_gpu_min"] > r["normal"]["inf_gpu_min"]
    # skill: "daily" acts on the forecast, its replicas start ahead of the rises and it throttles far less
    assert g["high"]["inf_throttled"] < 0.5 * r["high"]["inf_throttled"]
    assert g["high"]["inf_gpu_min"] > r["high"]["inf_gpu_min"]


def test_the_gate_count_reads_a_normal_tier_service_only_where_its_autoscaler_may_act_ahead():
    """A service's verdict is read by its replica autoscaler, whatever its tier: "noisy" (normal) counts among the
    tenants whose verdict the run reads while policy.replica_ahead_tiers names its tier, and not once it does not
    (its autoscaler then scales on its need now, and the plan holds for the high tier only)."""
    w = _workload()
    both = _predictive(w, CFG).summary()["skill_gate"]
    high_only = Config(policy={"skill_gate": {"enabled": True, "window": 12, "min_scored": 6},
                               "replica_ahead_tiers": ["high"]})
    one = _predictive(w, high_only).summary()["skill_gate"]
    steps = N - START - 1
    assert both["read_tenants"] == 2 and both["read_tenant_steps"] == 2 * steps
    assert one["read_tenants"] == 1 and one["read_tenant_steps"] == steps
    # "noisy" has no skill and is never on the forecast: the read tenant-steps on it are "daily"'s in both runs
    assert 0 < one["read_tenant_steps_on_forecast"] == both["read_tenant_steps_on_forecast"]


def test_each_service_and_each_tenants_verdict_is_counted_and_adds_up_to_the_tiers():
    """The replay opens the tiers up (bench/inference_breakdown_bench.py): per service its requests, throttled
    requests and GPU-minutes, adding up to its tier's; per tenant the measured steps on the forecast, adding up to
    the gate's count, and the verdict the window ended on."""
    w = _workload()
    s = _predictive(w, CFG).summary()
    svc, by, tiers = s["services"], s["skill_gate_by_tenant"], s["tiers"]
    assert set(svc) == {"daily", "noisy"} and svc["daily"]["tier"] == "high" and svc["noisy"]["tier"] == "normal"
    for name, tier in (("daily", "high"), ("noisy", "normal")):
        assert svc[name]["requests"] == tiers[tier]["inf_requests"]
        assert svc[name]["throttled"] == tiers[tier]["inf_throttled"]
        assert abs(svc[name]["gpu_min"] - tiers[tier]["inf_gpu_min"]) < 1e-6
    steps = s["steps"]
    assert sum(v["steps_on_forecast"] for v in by.values()) == s["skill_gate"]["all_tenant_steps_on_forecast"]
    # "daily" has skill: on the forecast most of the window, and its window ends there; "noisy" never is
    assert by["daily"]["steps_on_forecast"] > steps // 2 and by["daily"]["verdict"]["acting"]
    assert by["noisy"]["steps_on_forecast"] == 0 and not by["noisy"]["verdict"]["acting"]
    assert by["noisy"]["verdict"]["why"].startswith("reactive")
    # gate off: no per-tenant verdicts, the services still counted
    off = _predictive(w, OFF).summary()
    assert "skill_gate_by_tenant" not in off and set(off["services"]) == {"daily", "noisy"}
