"""The predictive autoscaler's replicas for a forecast rise leave as soon as the forecast no longer asks for them
(daemon/sim/inference.py, Autoscaler.wanted): the HPA's scale-down window holds the need the service was measured
to need, not the forecast's peak. Stabilizing the forecast's p90 peak too kept replicas a whole window past every
forecast rise that did not come, on GPUs the low tier's batch was queued for (issue 40, ServeGen)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from daemon.sim.inference import Autoscaler, InferenceSpec
from forecaster.types import Forecast

QS = (0.5, 0.9, 0.99)
H = 6


def _fc(level: float) -> Forecast:
    """A constructed forecast of one service flat at ``level`` GPUs over the horizon, every quantile alike."""
    values = np.full((1, H, len(QS)), float(level))
    return Forecast(("svc",), QS, values, pd.Timestamp("2026-01-05", tz="UTC"), 60, "constructed")


def _asked(need: list[float], forecast: list[float | None], strategy: str = "predictive") -> list[float]:
    """What one 1-GPU-replica service's autoscaler (cold start 2 min, no drain, 300 s window: 5 steps) asks for at
    every step, its need ``need`` and the forecast it reads at each step flat at ``forecast[k]`` (None: none)."""
    spec = InferenceSpec(1, 10.0, 120.0, headroom=0.0, scale_down_stabilization_s=300.0)
    a = Autoscaler(strategy, np.array([0]), [spec], 60, drain_steps=0, quantile=0.9)
    demand = np.array(need, dtype=float).reshape(-1, 1)
    return [float(a.wanted(k, demand, None if f is None else _fc(f))[0]) for k, f in enumerate(forecast)]


def test_replicas_for_a_rise_that_does_not_come_leave_when_the_forecast_falls_hand_computed():
    """Need 1 throughout. The forecast says 4 at steps 0 and 1, then 1: the rise does not come. Replicas follow
    the forecast down at step 2 (1 from there). Before, the 4 recommended at step 1 stayed the 5-step window,
    to step 5: [4, 4, 4, 4, 4, 4, 1, 1], 12 GPU-minutes of replicas for nothing."""
    got = _asked([1] * 8, [4, 4, 1, 1, 1, 1, 1, 1])
    assert got == [4, 4, 1, 1, 1, 1, 1, 1]


def test_the_need_measured_is_still_held_the_window_hand_computed():
    """The forecast says 4 at steps 0 and 1, then 1; the need bursts to 3 at step 2 only. The need's 3 is held
    the window (steps 2..6) as an HPA holds it, the forecast's 4 is not: [4, 4, 3, 3, 3, 3, 3, 1]. Before:
    [4, 4, 4, 4, 4, 4, 3, 1]. A flat forecast at the need leaves the HPA's count: the burst held 5 steps."""
    assert _asked([1, 1, 3, 1, 1, 1, 1, 1], [4, 4, 1, 1, 1, 1, 1, 1]) == [4, 4, 3, 3, 3, 3, 3, 1]
    assert _asked([1, 1, 3, 1, 1, 1, 1, 1], [1] * 8) == [1, 1, 3, 3, 3, 3, 3, 1]
    # reactive reads no forecast: the HPA's count, whatever forecast is offered
    assert _asked([1, 1, 3, 1, 1, 1, 1, 1], [4, 4, 1, 1, 1, 1, 1, 1], "reactive") == [1, 1, 3, 3, 3, 3, 3, 1]


def test_no_forecast_yet_is_the_hpa_count_and_missing_need_is_not_zero():
    """Before the first forecast the predictive autoscaler is the HPA; a missing need keeps the window's count
    (missing data is not zero load) and a forecast with the need unknown asks for the forecast's replicas."""
    assert _asked([2, 1, 1], [None, None, None]) == [2, 2, 2]
    assert _asked([2, np.nan, 1], [None, None, 1]) == [2, 2, 2]
    got = _asked([np.nan, np.nan], [None, 3])
    assert np.isnan(got[0]) and got[1] == 3.0
