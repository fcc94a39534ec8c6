"""The simulator's busy shares (daemon/sim/activity.py): the long-run idle share is the parameter, busy GPUs are
allocation weighted by activity, idle jobs are found longest first; and why Helios cannot supply the shares."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from daemon.policy.preemption import choose
from daemon.sim.activity import BUSY, IDLE, Activity, ActivityParams
from daemon.sim.cluster import SimCluster
from tests.conftest import REPO

DATA = REPO.parent / "shared" / "data" / "helios-earth-2020"


def cluster(jobs_per_tenant: int = 40) -> SimCluster:
    c = SimCluster(["a", "b"], np.array([1, 0], dtype=np.int8), 160, np.array([1, 1]), gpus_per_node=8)
    c.step(np.array([jobs_per_tenant, jobs_per_tenant], dtype=float))
    return c


def test_the_long_run_idle_share_is_the_parameter_per_tenant():
    c = cluster()
    a = Activity(2, ActivityParams(mean_idle_steps=20, hang_per_step=0.0), seed=1, idle_share=np.array([0.1, 0.4]))
    idle = np.zeros(2)
    steps = 4000
    for _ in range(steps):
        c.step(np.array([40.0, 40.0]))
        a.step(c)
        ids, ten, _ = a.running(c)
        idle += np.bincount(ten, weights=(a.state[ids] == IDLE), minlength=2)
    share = idle / (40 * steps)
    assert share == pytest.approx([0.1, 0.4], abs=0.03)


def test_busy_gpus_are_allocation_weighted_by_activity_and_idle_jobs_come_longest_first():
    c = cluster(4)
    a = Activity(2, ActivityParams(busy_level=0.8, busy_spread=0.0, idle_share=0.0), seed=0)
    a.step(c)
    assert a.busy_gpus(c) == pytest.approx(8 * 0.8)
    ids, _, _ = a.running(c)
    a.state[ids[:3]] = IDLE
    a.idle_steps[ids[:3]] = [70, 90, 10]
    assert list(a.idle_jobs(c, 60)) == [ids[1], ids[0]]
    assert a.busy_gpus(c) == pytest.approx(5 * 0.8 + 3 * 0.01)
    c.preempt(ids[:1])                       # requeued: restarts busy (restart_clears_idle)
    for _ in range(4):
        c.step(np.array([4.0, 4.0]))
        a.step(c)
    assert a.state[ids[0]] == BUSY or a.idle_steps[ids[0]] < 70


def test_the_idle_mask_feeds_the_policy_so_a_hold_takes_the_idle_job_first():
    c = cluster(4)
    a = Activity(2, ActivityParams(idle_share=0.0, hang_per_step=0.0), seed=0)
    a.step(c)
    state = c.state(("a", "b"), ("normal", "low"), pd.Timestamp("2026-01-06T12:00:00Z"), 60)
    low = state.jobs.ids[state.jobs.running & (state.jobs.tenant == 1)]
    a.state[low[-1]] = IDLE
    a.idle_steps[low[-1]] = 70
    a.idle_steps[low[0]] = 10                 # idle, but not for long enough
    mask = a.idle_mask(state.jobs, 60)
    assert list(state.jobs.ids[mask]) == [low[-1]]
    keep = np.array([True, False])            # tenant a protected; b's jobs all started together (same cost)
    assert list(choose(state.jobs, 1, keep, 100, 100)) != [int(np.flatnonzero(state.jobs.ids == low[-1])[0])]
    jobs = dataclasses.replace(state.jobs, idle=mask)
    assert list(jobs.ids[choose(jobs, 1, keep, 100, 100)]) == [low[-1]]


@pytest.mark.skipif(not DATA.exists(), reason="the Helios trace is not here")
def test_helios_gpu_utilization_is_allocated_over_quota_not_a_busy_share():
    for f in sorted(DATA.glob("vc*/cluster_sequence_vc.csv")):
        d = pd.read_csv(f, usecols=["running_gpu_num", "total_gpu_num", "gpu_utilization"])
        assert np.abs(d.gpu_utilization - d.running_gpu_num / d.total_gpu_num).max() < 0.001, f
