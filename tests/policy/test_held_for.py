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
    assert p.held_for == {"high": p.reservations["hi"], "window": 0, "aged": p.reservations["lo"], "floor": 16}
    assert p.held_for["high"] >= 64 > p.high_pool                 # the forecast's hold is above the tier's guarantee
    assert p.held_for["aged"] == 8
    assert sum(p.held_for.values()) == sum(p.reservations.values())
    assert Plan.from_dict(p.to_dict()).held_for == p.held_for    # kept across a restart (the state store)


def test_a_windows_gpus_are_held_for_the_window_not_for_the_forecast_or_a_floor():
    """make run with a window of a high-tier tenant (64 GPUs) and one of a low-tier tenant (32): the console said
    the first were held "for the high tier's forecast peak" and the second "for operators' floors" (floor_gpus set
    on a tenant), though no floor was set: a window protects its tenant as a floor does, and held_for had no word
    for it."""
    from daemon.config import parse_config

    st = _state()
    v = np.zeros((3, 30, 3))
    v[0] = 16.0                                                  # hi's forecast alone would hold 16
    fc = Forecast(TENANTS, (0.5, 0.9, 0.99), v, T0, 60, "test")
    win = {"every": "daily", "at": "12:15", "duration_minutes": 60, "reclaim_before_minutes": 30}
    cfg = parse_config({"policy": {"max_wait_steps": 1000, "headroom": 0, "reserve_share": 0.1},
                        "tenants": [{"name": "hi", "tier": "high"}, {"name": "lo", "tier": "low"},
                                    {"name": "fl", "tier": "normal"}],
                        "windows": [{**win, "name": "hi-peak", "tenant": "hi", "gpus": 64},
                                    {**win, "name": "fl-batch", "tenant": "fl", "gpus": 32}]})
    p = plan(fc, st, PolicyMemory(), cfg)
    assert p.window_holds == {"hi": 64, "fl": 32}, p.notes
    assert p.held_for["window"] == 96
    assert p.held_for["floor"] == 0                              # no operator set a floor
    assert p.held_for["high"] == p.reservations["hi"] - 64        # what the forecast holds beyond the window
    assert sum(p.held_for.values()) == sum(p.reservations.values())
    assert Plan.from_dict(p.to_dict()).held_for == p.held_for
