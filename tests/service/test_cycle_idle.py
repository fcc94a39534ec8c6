"""A health finding reaches the plan (daemon/service/cycle.py `with_idle`): the job the health step found idle is
the first low-priority job a hold takes, in the next cycle; a job whose telemetry is missing is not idle.

The cluster is a fixed snapshot (one high tenant short of one 10-GPU job, three low jobs on a full cluster), the
telemetry made by hand as in tests/service/test_cycle_health.py, the detectors and the policy the real ones."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry

from daemon.config import Config
from daemon.health.types import GpuTrace, Telemetry
from daemon.service.cycle import CycleRunner
from daemon.service.health import HealthRunner
from daemon.sources.base import Collected
from tests.policy.test_engine import AT, flat_forecast, make_state

N = 30   # telemetry steps of 60 s: 30 idle minutes, over the 5-minute warning threshold set below


class FixedCluster:
    """The same jobs every cycle, an hour apart (the budget refills in between)."""

    def __init__(self) -> None:
        # j0: high, t0 needs a second 10-GPU job. Low: j1 idle (5,000 s, the most work lost), j2 with no
        # telemetry (4,000 s), j3 busy (3,000 s, the least). Two must go (t0's hold is 30 GPUs, 20 short).
        self.state = make_state(["high", "low", "low", "low"],
                                [(0, 10, "high", True, 3600, 0), (1, 10, "low", True, 5000, 0),
                                 (2, 10, "low", True, 4000, 0), (3, 10, "low", True, 3000, 0)], capacity=40)
        self.calls = 0

    def collect(self, history_steps: int) -> Collected:
        at = AT + pd.Timedelta(hours=self.calls)
        self.calls += 1
        idx = pd.date_range(end=at, periods=10, freq="60s")
        hist = pd.DataFrame(np.tile(self.state.used, (10, 1)), index=idx, columns=list(self.state.tenants))
        return Collected(hist, dataclasses.replace(self.state, at=at))


class Flat:
    name = "flat"

    def predict(self, history: pd.DataFrame, horizon: int):
        return flat_forecast(tuple(history.columns), [25, 0, 0, 0], horizon)   # p90 27.5: 30 held


def trace(job: str, activity: float) -> GpuTrace:
    return GpuTrace(job, "slurm", None, f"node-{job}", "0", np.full(N, activity), np.full(N, 1e3),
                    np.full(N, 79e3), np.zeros(N))


class Telem:
    """j1 idle, j2's samples all missing (its exporter stopped), j3 busy."""

    def read(self, end=None) -> Telemetry:
        return Telemetry(time.time(), 60.0, N, (trace("j1", 0.0), trace("j2", float("nan")), trace("j3", 0.8)))


def runner() -> CycleRunner:
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0},
                 health={"idle_warn_minutes": 5, "idle_action_minutes": 600})
    r = CycleRunner(cfg, FixedCluster(), Flat(), [])
    r.health = HealthRunner(cfg, Telem(), CollectorRegistry())
    return r


def test_a_health_finding_reaches_the_next_plan_and_missing_telemetry_is_not_idle():
    r = runner()
    first = r.run_once().plan
    assert sorted(x.job_id for x in first.preemptions) == ["j2", "j3"]   # no finding yet: the least work lost
    states = {j["job"]: j["state"] for j in r.snapshot.health["jobs"]}
    assert states["j2"] == "no_data" and [o["job"] for o in r.snapshot.health["outcomes"]] == ["j1"]
    second = r.run_once().plan
    by = {x.job_id: x for x in second.preemptions}
    # the idle j1 first, then the cheapest busy one; j2 (no telemetry) is not idle, so it is dearer than j3
    assert sorted(by) == ["j1", "j3"]
    assert "idle" in by["j1"].reason and "idle" not in by["j3"].reason
    assert not any(t in by["j1"].reason for t in ("t0", "t2", "t3"))


def test_a_failed_or_old_health_step_marks_nothing():
    r = runner()
    r.run_once()
    r.health = None          # the step stops running: its last findings are a cycle old by the plan after next
    assert sorted(x.job_id for x in r.run_once().plan.preemptions) == ["j1", "j3"]
    third = r.run_once().plan
    assert sorted(x.job_id for x in third.preemptions) == ["j2", "j3"]
