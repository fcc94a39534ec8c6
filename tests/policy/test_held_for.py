"""Why the GPUs are held (issue 37): the plan splits its holds into the high tier's forecast, aged tenants
(anti-starvation) and operators' floors, so the console can say why the held GPUs exceed the high tier's pool."""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.policy.types import OperatorInputs, Plan
from forecaster.types import Forecast
from tests.policy.test_aging import jobs

T0 = pd.Timestamp("2026-01-06T12:00:00Z")
TENANTS = ("hi", "lo", "fl")


def _state() -> ClusterState:
    # hi (high) runs 8; lo (low) has one 8-GPU job queued for 2 hours (aged); fl (normal) runs 4, floored by an operator
    rows = [("h1", 0, 8, "high", True, 600.0, 0.0), ("l1", 1, 8, "low", False, 0.0, 7200.0),
            ("f1", 2, 4, "normal", True, 600.0, 0.0)]
    return ClusterState(T0, TENANTS, ("high", "low", "normal"), 128, np.array([8.0, 0.0, 4.0]),
                        np.array([0.0, 8.0, 0.0]), jobs(rows))


def test_the_held_gpus_are_split_by_why_they_are_held():
    st = _state()
    v = np.zeros((3, 30, 3))
    v[0] = 64.0                                                  # the high tier's forecast peak: 64 GPUs
    fc = Forecast(TENANTS, (0.5, 0.9, 0.99), v, T0, 60, "test")
    cfg = Config(policy={"max_wait_steps": 10, "headroom": 0, "reserve_share": 0.1})
    p = plan(fc, st, PolicyMemory(), cfg, ops=OperatorInputs(floors={"fl": 16}))
    assert p.held_for == {"high": p.reservations["hi"], "aged": p.reservations["lo"], "floor": 16}
    assert p.held_for["high"] >= 64 > p.high_pool                 # the forecast's hold is above the tier's guarantee
    assert p.held_for["aged"] == 8
    assert sum(p.held_for.values()) == sum(p.reservations.values())
    assert Plan.from_dict(p.to_dict()).held_for == p.held_for    # kept across a restart (the state store)
