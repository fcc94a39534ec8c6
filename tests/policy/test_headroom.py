"""The engine preempts for jobs (waiting now, or forecast within the drain window), never for the headroom:
the headroom is held where it is free, not cleared (README, replay section)."""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import PRIORITY
from daemon.sim.cluster import SimCluster
from forecaster.types import Forecast

TENANTS = ("hi", "lo")
TIERS = ("high", "low")
# a budget that allows clearing the whole cluster: only the rule under test can stop a preemption
CFG = Config(policy={"headroom": 0.5, "hysteresis": 0.0, "preempt_budget_share": 1.0})


def cluster_state(hi_wants: float):
    """Two 8-GPU nodes: the high tenant's 8-GPU job on one, eight 1-GPU low jobs on the other, run for 10
    steps (nothing is exempt for being young). ``hi_wants`` > 8 leaves a high-tier job queued."""
    c = SimCluster(list(TENANTS), np.array([PRIORITY["high"], PRIORITY["low"]]), 16, np.array([8, 1]),
                   gpus_per_node=8)
    for _ in range(10):
        c.step(np.array([8.0, 8.0]))
    c.step(np.array([hi_wants, 8.0]))
    return c.state(TENANTS, TIERS, pd.Timestamp("2026-01-06T12:00:00Z"), 60)


def forecast(hi: float, at) -> Forecast:
    v = np.zeros((2, 60, 3))
    v[0] = hi
    v[1] = 8.0
    return Forecast(TENANTS, (0.5, 0.9, 0.99), v, at, 60, "test")


def test_headroom_alone_is_held_but_never_cleared():
    cfg = CFG
    s = cluster_state(8.0)
    assert s.nodes is not None and int(s.nodes.free.sum()) == 0
    for fc in (None, forecast(8.0, s.at)):       # reactive, and a forecast that sees no more than now
        p = plan(fc, s, PolicyMemory(), cfg)
        # 8 GPUs asked + 50% headroom = 12, two whole 8-GPU jobs: the hold covers the low tenant's node ...
        assert p.reservations["hi"] == 16
        # ... but nothing is preempted to empty it: no high-tier job waits or is forecast
        assert p.preemptions == ()


def test_the_same_cluster_preempts_once_a_high_job_waits_or_is_forecast():
    # the control: what the headroom alone would have asked, a job asks, and the low node is cleared
    cfg = CFG
    waiting = cluster_state(16.0)
    p = plan(None, waiting, PolicyMemory(), cfg)
    assert len(p.preemptions) == 8 and {x.tenant for x in p.preemptions} == {"lo"}
    s = cluster_state(8.0)
    p = plan(forecast(16.0, s.at), s, PolicyMemory(), cfg)       # forecast within the drain window
    assert len(p.preemptions) == 8 and {x.tenant for x in p.preemptions} == {"lo"}
