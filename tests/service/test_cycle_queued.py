"""Pending jobs with no pod yet (Kueue's Workloads that wait: ListsQueuedJobs) are estimated by the cycle and shown
(daemon/service/cycle.py `_estimate`), without entering the plan; when they cannot be read, the cycle says so in one
line and makes no estimate (one without them would be too soon for everyone behind them); once one leaves the queue
(admitted), the estimate it was first given is scored against when."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import pytest

from daemon.actuators.base import ActionReport
from daemon.config import Config
from daemon.policy.state import PRIORITY, Jobs
from daemon.service.cycle import CycleRunner
from daemon.sources.base import Collected
from tests.policy.test_engine import AT, flat_forecast, make_state
from tests.support.actuators import QuietActuator


class Cluster:
    """One running 8-GPU job of t0 on a full 8-GPU cluster, the same each cycle."""

    def __init__(self) -> None:
        self.state = make_state(["normal"], [(0, 8, "normal", True, 60.0, 0.0)], capacity=8)

    def collect(self, history_steps: int) -> Collected:
        idx = pd.date_range(end=AT, periods=10, freq="60s")
        hist = pd.DataFrame(np.tile(self.state.used, (10, 1)), index=idx, columns=list(self.state.tenants))
        return Collected(hist, dataclasses.replace(self.state))


class Flat:
    name = "flat"

    def predict(self, history: pd.DataFrame, horizon: int):
        return flat_forecast(tuple(history.columns), [8], horizon)


class Queue(QuietActuator):
    """An actuator that knows one waiting Workload of t0 (4 GPUs) and records what it was asked to show."""

    name, dry_run = "queue", False

    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.admitted: float | None = None   # when the Workload was admitted (it leaves the queue)
        self.shown: list[list[dict]] = []
        self.plans = []

    def queued_jobs(self, tenants):
        if self.fail is not None:
            raise self.fail
        if self.admitted is not None:
            return Jobs.empty()
        return Jobs(np.array(["ns/workload/w"], dtype=object), np.array([0]), np.array([4]),
                    np.array([PRIORITY["normal"]], dtype=np.int8), np.array([False]), np.array([0.0]),
                    np.array([120.0]), np.array([""], dtype=object))

    def queued_starts(self):
        return {} if self.admitted is None else {"ns/workload/w": self.admitted}

    def show_eta(self, rows, made_at):
        self.shown.append(rows)
        return ActionReport(self.name, False)

    def apply(self, plan):
        self.plans.append(plan)
        return ActionReport(self.name, False)


def test_a_queued_workload_is_estimated_and_shown_but_not_planned_on_and_a_failed_read_is_one_line(caplog):
    q = Queue()
    r = CycleRunner(Config(), Cluster(), Flat(), [q])
    for _ in range(5):   # t0's history: its jobs run 10 minutes
        r.eta.runs.observe("t0", 600.0)
    res = r.run_once()
    assert res.outcome == "ok", res.error
    (row,) = r.last_eta["jobs"]
    assert row["job_id"] == "ns/workload/w" and row["p50_s"] == 540.0      # when the running job's 10 minutes end
    assert [x["job_id"] for x in q.shown[-1]] == ["ns/workload/w"]
    assert res.collected.state.pending.tolist() == [0.0] and len(res.collected.state.jobs) == 1   # the plan's state
    made = r.last_eta["made_at"]
    q.fail = RuntimeError("the API server gave no answer within 10 s")
    caplog.set_level(logging.WARNING)
    assert r.run_once().outcome == "ok"
    assert r.last_eta["made_at"] == made and len(q.shown) == 1              # no estimate, nothing shown
    lines = [x.getMessage() for x in caplog.records if "estimates" in x.getMessage()]
    assert lines == ["start-time estimates not made this cycle: the queued jobs could not be read (RuntimeError: "
                     "the API server gave no answer within 10 s)"]
    assert not any(x.exc_info for x in caplog.records)                    # one line, no traceback
    # Kueue admits it 600 s after the first estimate, which said 540 s: scored as its start (60 s late)
    q.fail, q.admitted = None, made + 600.0
    assert r.run_once().outcome == "ok" and r.last_eta["jobs"] == []
    reg = r.metrics.registry
    assert reg.get_sample_value("gpuas_eta_error_seconds_sum", {"tier": "normal"}) == pytest.approx(60.0)
    assert reg.get_sample_value("gpuas_eta_p90_covered_total", {"tier": "normal", "covered": "false"}) == 1.0
