"""The perfect forecast's ``rates_only`` knob (issue 40, the ceiling of a forecast of the rate): it knows the
services' future RATES, what their per-minute arrivals are drawn from, never the draws themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.sim.inference import InferenceSpec, need_frame
from daemon.sim.replay import FORESIGHT, RATES_ONLY, perfect_knob_error, run_strategy
from daemon.sim.workloads import Workload

N, START, END = 60, 10, 30        # measured steps START..END (END included): the runs stop at END
SPEC = {"svc": InferenceSpec(1, 10.0, 180.0, headroom=0.0)}   # 1-GPU replicas of 10 req/s, 3 min cold start
RATES_ONLY_ON = {RATES_ONLY: True}


def _frame(values: np.ndarray) -> pd.DataFrame:
    idx = pd.date_range("2026-01-05", periods=N, freq="min", tz="UTC", name="time")
    return pd.DataFrame({"svc": values.astype(float)}, index=idx)


def _workload(drawn: np.ndarray, expected: np.ndarray | None) -> Workload:
    """One high-tier service whose arrivals per minute are ``drawn`` (req/s) and were drawn from ``expected``, on a
    cluster with room for every replica (no contention: only the autoscaler's asks differ)."""
    rates = _frame(drawn)
    return Workload("rate-ceiling", need_frame(rates, SPEC), ("high",), np.array([1]), 64, START, gpus_per_node=8,
                    inference=SPEC, rates=rates, expected_rates=None if expected is None else _frame(expected))


def _run(w: Workload, knobs: dict | None = None) -> dict:
    return run_strategy("perfect", w, Config(), steps=END - START + 1, knobs=knobs).summary()["tiers"]["high"]


def _spike_at(step: int, base: float = 10.0, to: float = 50.0) -> np.ndarray:
    v = np.full(N, base)
    v[step] = to
    return v


def test_the_rate_ceiling_never_reads_the_draws():
    """Two traces drawn from the same flat 10 req/s, identical up to the end of the run (step 30), one with a
    50 req/s minute at step 32: the true-future perfect forecast sees that draw coming (its replicas start a cold
    start + drain ahead, so the runs ending at step 30 differ in GPU-minutes); the rates-only one cannot, and every
    figure of its two runs is the same."""
    flat = np.full(N, 10.0)
    quiet, spiky = _workload(flat, flat), _workload(_spike_at(32), flat)
    assert _run(spiky)["inf_gpu_min"] > _run(quiet)["inf_gpu_min"]       # the draw is visible to the true future
    assert _run(spiky, RATES_ONLY_ON) == _run(quiet, RATES_ONLY_ON)


def test_the_rate_ceiling_reads_the_rates_ahead():
    """The same draws (a flat 10 req/s) drawn from rates that differ after the end of the run: one flat, one at
    40 req/s from step 32. The rates-only autoscaler starts the 3 more replicas that rise needs a cold start + drain
    ahead: they run the last minutes of the window (hand-computed: 3 replicas from step 32 - 3 - 2 = 27 to 30, 12
    GPU-minutes more), and it throttles nothing either way."""
    flat = np.full(N, 10.0)
    rising = np.where(np.arange(N) >= 32, 40.0, 10.0)
    base, ahead = _run(_workload(flat, flat), RATES_ONLY_ON), _run(_workload(flat, rising), RATES_ONLY_ON)
    # the need at a step is the previous step's rate: 40 req/s at step 32 is asked for from step 33; its lead is the
    # 3-step cold start + the 2-step drain, so the replicas are asked for from step 33 - 5 = 28: 3 x 3 steps
    assert ahead["inf_gpu_min"] - base["inf_gpu_min"] == 3 * 3
    assert base["inf_throttled"] == ahead["inf_throttled"] == 0.0
    # and it never starts replicas for a minute's draw its rate does not have: a 50 req/s minute at step 20 is
    # throttled as reactive throttles it (the replicas start when the HPA sees it, a cold start late)
    spike = _workload(_spike_at(20), flat)
    assert _run(spike, RATES_ONLY_ON)["inf_throttled"] == \
        run_strategy("reactive", spike, Config(), steps=END - START + 1).summary()["tiers"]["high"]["inf_throttled"] > 0
    assert _run(spike)["inf_throttled"] == 0.0                           # the true future serves it


def test_the_rate_nowcast_knows_the_rate_now_not_ahead():
    """With foresight_steps 0 the rates-only autoscaler knows the rate of the minute before only (a nowcast of the
    rate, as the perfect forecast's plan already did): the rise at step 32 is not seen from steps 28-30, so the run
    ending at step 30 asks for no more replicas than under the flat rate; with 2 steps of foresight it sees the
    rise from step 33 - 2 = 31 on, after the run: also none; with 4, from step 29: 3 replicas x 2 steps."""
    flat = np.full(N, 10.0)
    rising = np.where(np.arange(N) >= 32, 40.0, 10.0)
    gpu = {f: _run(_workload(flat, rising), {**RATES_ONLY_ON, FORESIGHT: f})["inf_gpu_min"] for f in (0, 2, 4)}
    base = _run(_workload(flat, flat), RATES_ONLY_ON)["inf_gpu_min"]
    assert (gpu[0] - base, gpu[2] - base, gpu[4] - base) == (0, 0, 3 * 2)


def test_the_rate_ceiling_without_expected_rates_is_one_line():
    """A workload with observed rates only (a user's own --data) has no rates to know: one line, no traceback; and
    the knob is a bool on the perfect forecast only."""
    flat = np.full(N, 10.0)
    with pytest.raises(ValueError, match="^rates_only: the workload has no expected rates"):
        _run(_workload(flat, None), RATES_ONLY_ON)
    assert perfect_knob_error("perfect", {RATES_ONLY: 1}) == "rates_only is true or false, not 1"
    assert "the perfect forecast's knobs" in perfect_knob_error("reactive", RATES_ONLY_ON)
