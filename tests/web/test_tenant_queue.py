"""A tenant's place in the queue on its page and in /api/v1/tenants/{tenant}: its next job in the scheduler's order
with that job's p50 start estimate. Before, the page said "#4 of 4 by wait time" for a high-tier job the scheduler
starts first, and "expected start: not reported" above the table of estimates that gave it a start."""

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from forecaster.types import Forecast
from tests.policy.test_aging import jobs
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens

T0 = pd.Timestamp("2026-01-06T12:00:00Z")
TENANTS = ("hi", "lo")
START = "2026-01-06T12:05:00+00:00"


def _snapshot() -> Snapshot:
    """The cluster full of lo's work; lo has three jobs queued 2 hours, hi (high tier) one queued a minute, which
    the scheduler serves first (high before low, whatever the wait); the estimates give hi's job a start."""
    rows = [("l1", 1, 64, "low", True, 600.0, 0.0), ("l2", 1, 8, "low", False, 0.0, 7200.0),
            ("l3", 1, 8, "low", False, 0.0, 7100.0), ("l4", 1, 8, "low", False, 0.0, 7000.0),
            ("h1", 0, 8, "high", False, 0.0, 60.0)]
    st = ClusterState(T0, TENANTS, ("high", "low"), 64, np.array([0.0, 64.0]), np.array([8.0, 24.0]), jobs(rows))
    fc = Forecast(TENANTS, (0.5, 0.9, 0.99), np.full((2, 30, 3), 8.0), T0, 60, "test")
    cfg = with_tokens(Config(policy={"max_wait_steps": 10}))
    eta = {"made_at": T0.timestamp(), "jobs": [
        {"job_id": "h1", "tenant": "hi", "gpus": 8, "position": 0, "p50_s": 300.0, "p90_s": 600.0,
         "basis": "run-length history", "p50_at": START, "p90_at": "2026-01-06T12:10:00+00:00"}]}
    return Snapshot(cfg=cfg, plan=plan(fc, st, PolicyMemory(), cfg), state=st, forecast=fc, cycle=1, eta=eta)


def test_the_queue_position_is_the_schedulers_and_the_expected_start_is_the_estimate():
    client = TestClient(build_app(SnapshotBackend(_snapshot())))
    q = client.get("/api/v1/tenants/hi", headers=h(OP)).json()["queue"]
    assert (q["position"], q["queue_length"], q["expected_start"]) == (1, 4, START)
    assert q["longest_wait_s"] == 60.0
    lo = client.get("/api/v1/tenants/lo", headers=h(OP)).json()["queue"]
    assert (lo["position"], lo["expected_start"], lo["longest_wait_s"]) == (2, None, 7200.0)  # no estimate: None
    client.cookies.set("gpuas_token", OP)
    page = client.get("/ui/tenants/hi").text
    assert "#1 of 4" in page and f'id="next-start">{START}<' in page
    assert "not reported" not in page and "by wait time" not in page
    assert "your requests get a 429" in page
    assert 'id="next-start">unknown<' in client.get("/ui/tenants/lo").text
