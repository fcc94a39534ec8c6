"""bench/gate_hours_bench.py: the hold losses it tabulates by hour are the skill gate's own scores (a hand-computed
case), filed under the hour the forecast was made."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.sim.workloads import Workload
from forecaster.types import Forecast
from tests.support.bench_script import load_bench


class _Bank:
    """Every forecast says 12 GPUs at every step and quantile, made at the step asked for."""

    def __init__(self, demand: pd.DataFrame, horizon: int, quantiles: tuple[float, ...]) -> None:
        self.demand, self.horizon, self.q = demand, horizon, quantiles

    def at(self, k: int) -> Forecast:
        return Forecast(tuple(self.demand.columns), self.q, np.full((1, self.horizon, len(self.q)), 12.0),
                        self.demand.index[k], 60, "twelve")


def test_hold_losses_are_the_gates_scores_by_the_forecasts_hour(monkeypatch):
    bench = load_bench(monkeypatch, "gate_hours_bench")
    cfg = Config()
    h = cfg.cycle.horizon_steps
    idx = pd.date_range("2026-01-05T13:00:00Z", periods=240, freq="60s")
    w = Workload("flat", pd.DataFrame({"a": np.full(240, 10.0)}, index=idx), ("high",), np.array([1]), 64, 0)
    bank = _Bank(w.demand, h, tuple(cfg.forecaster.quantiles))
    every = 30
    got = bench.hold_losses(w, bank, cfg, 240, every)["a"]
    # each window: the forecast's hold max(12, 10) * 1.15 = 13.8 and the reactive one 10 * 1.15 = 11.5 against a
    # realised peak of 10; the pinball loss at q of holding x over 10 is (1 - q) * (x - 10), summed over the two lead
    # windows
    made = list(range(0, 240 - h, every))
    by_hour = {hr: sum(1 for k in made if idx[k].hour == hr) for hr in (13, 14, 15)}
    for q in bench.QUANTILES:
        rows = got[f"{q:g}"]
        for hour in range(24):
            n = by_hour.get(hour, 0)
            assert rows[hour][0] == pytest.approx(n * 2 * (1 - q) * 3.8, abs=1e-6)
            assert rows[hour][1] == pytest.approx(n * 2 * (1 - q) * 1.5, abs=1e-6)
            assert rows[hour][2] == n
    assert by_hour[13] == 2 and sum(by_hour.values()) == len(made) > 2   # two an hour, the first two at 13:00
