"""The predictive replay's ``forecast_for = services`` knob (issue 40, where ServeGen's batch unmet above reactive's
comes from): the plan acts on the forecast for the inference services only, and plans the batch tenants as the skill
gate plans a tenant it does not trust; the services' autoscalers are unchanged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.sim.inference import InferenceSpec, need_frame
from daemon.sim.replay import FORECAST_FOR, ForecastBank, perfect_knob_error, run_strategy
from daemon.sim.workloads import Workload
from forecaster.types import Forecast

N, START = 160, 100
CFG = Config(policy={"replica_quantile": 0.5})
SERVICES = {FORECAST_FOR: "services"}


def _workload(services: bool = True) -> Workload:
    """A high-tier service at a flat 20 req/s (1-GPU replicas of 10 req/s, no headroom: 2 GPUs), a high-tier batch
    tenant at a flat 4 GPUs and a low-tier batch tenant asking for 10 GPUs for 20 minutes of every 30 (none in between),
    in 1-GPU jobs, on 16 GPUs (two 8-GPU nodes): all of it fits, so whatever the low tier loses it loses to holds for
    forecasts (held nodes take no new starts of others)."""
    idx = pd.date_range("2026-01-05", periods=N, freq="min", tz="UTC", name="time")
    rates = pd.DataFrame({"svc": np.full(N, 20.0)}, index=idx)
    specs = {"svc": InferenceSpec(1, 10.0, 60.0, headroom=0.0)}
    demand = need_frame(rates, specs)
    demand["hb"] = 4.0
    demand["low"] = np.where(np.arange(N) % 30 < 20, 10.0, 0.0)
    if not services:
        return Workload("forecast-for-test", demand[["hb", "low"]], ("high", "low"), np.array([1, 1]), 16, START)
    return Workload("forecast-for-test", demand, ("high", "high", "low"), np.array([1, 1, 1]), 16, START,
                    gpus_per_node=8, inference=specs, rates=rates)


class TooHighForBatch:
    """Right for the service (2 GPUs at every quantile), three times too high for the high-tier batch tenant (12)."""

    name = "too-high-for-batch"

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        per = {"svc": 2.0, "hb": 12.0, "low": 0.0}
        v = np.array([[[per[c]] * 3] * horizon for c in history.columns], dtype=float)
        return Forecast(tuple(history.columns), (0.5, 0.9, 0.99), v, history.index[-1], 60, self.name)


def _run(w: Workload, knobs: dict | None = None) -> dict:
    bank = ForecastBank(TooHighForBatch(), w.demand, 1, CFG.cycle.horizon_steps, CFG.cycle.history_steps)
    return run_strategy("predictive", w, CFG, bank, steps=N - START - 1, knobs=knobs).summary()


def test_the_batch_tenants_are_planned_reactively_and_the_services_on_the_forecast():
    """Acting on the batch tenant's forecast, the plan holds ceil(12 x 1.05) = 13 GPUs for it on top of the
    service's 2 (the high tier's holds are one pool of whole nodes: both nodes), so the low tier's jobs cannot start
    again after each pause; with forecast_for = services it holds the batch tenant's demand now, as reactive does
    (one node: the low tier loses what it loses beside reactive), and the service's replicas and requests are the
    same."""
    w = _workload()
    acted, services = _run(w), _run(w, SERVICES)
    reactive = run_strategy("reactive", w, CFG, steps=N - START - 1).summary()
    assert acted["high_held_gpus_mean"] == 16
    assert services["high_held_gpus_mean"] == reactive["high_held_gpus_mean"] == 8
    assert services["tiers"]["low"]["unmet_gpu_min"] == reactive["tiers"]["low"]["unmet_gpu_min"] \
        < acted["tiers"]["low"]["unmet_gpu_min"]
    for k in ("inf_gpu_min", "inf_throttled", "inf_requests"):
        assert services["tiers"]["high"][k] == acted["tiers"]["high"][k]


def test_the_knob_is_predictives_and_needs_services():
    assert perfect_knob_error("predictive", SERVICES) is None
    assert perfect_knob_error("reactive", SERVICES) == "forecast_for: 'services' on predictive only, not 'services' " \
                                                       "on reactive"
    assert "not 'batch'" in perfect_knob_error("predictive", {FORECAST_FOR: "batch"})
    with pytest.raises(ValueError, match="^forecast_for=services: workload forecast-for-test has no inference"):
        _run(_workload(services=False), SERVICES)
