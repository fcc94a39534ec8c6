"""Windows in the replay (issue 39, item 4): the replay hands cfg.windows to the plan and the window opens at the
trace's time (a day of 2020, far from the wall clock), so the tenant's daily peak is met at once with the window
and queued without it; the per-tenant meter counts the hold's idle GPU-minutes."""

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.sim.windows_evidence import replay, with_windows
from daemon.sim.workloads import Workload

STEP = 60


def _workload() -> Workload:
    idx = pd.date_range("2020-03-02", periods=2 * 1440, freq="min", tz="UTC", name="time")
    minute = idx.hour * 60 + idx.minute
    batch = np.where((minute >= 14 * 60) & (minute < 15 * 60), 16.0, 0.0)
    frame = pd.DataFrame({"batch": batch, "lo": np.full(len(idx), 32.0)}, index=idx)
    return Workload("windows", frame, ("normal", "low"), np.array([8, 1]), 32, 1440)


def _cfg():
    return parse_config({"cluster": {"gpus": 32, "gpus_per_node": 8},
                         "tenants": [{"name": "batch", "tier": "normal"}, {"name": "lo", "tier": "low"}],
                         "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0}})


WINDOW = {"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00", "timezone": "UTC",
          "duration_minutes": 60, "reclaim_before_minutes": 30}


def test_the_replay_opens_a_window_at_the_traces_time_and_meets_the_peak():
    w, cfg = _workload(), _cfg()
    without = replay(w, cfg, "reactive", steps=1440)
    with_ = replay(w, with_windows(cfg, [WINDOW]), "reactive", steps=1440)
    assert without.unmet_gpu_min["batch"] > 16 * 5          # reactive: the peak waits for the low work to drain
    assert with_.unmet_gpu_min["batch"] < without.unmet_gpu_min["batch"] / 5
    # the hold from 13:30 (and the drains ahead of it) leaves GPUs idle that the window's tenant does not use yet
    assert with_.held_idle_gpu_min["batch"] > without.held_idle_gpu_min["batch"]
