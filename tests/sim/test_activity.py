"""The simulator's busy shares (daemon/sim/activity.py): the long-run idle share is the parameter, busy GPUs are
allocation weighted by activity, idle jobs are found longest first; and why Helios cannot supply the shares."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from daemon.config.models import HealthConfig
from daemon.health.detect import detect
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.preemption import choose
from daemon.sim.activity import BUSY, HUNG, IDLE, Activity, ActivityParams
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


STEP_S = 60.0
FB_MIB = 81920.0   # an 80 GB GPU's framebuffer


def telemetry(act: np.ndarray, fb: np.ndarray, ids: np.ndarray, gpus: np.ndarray, end_step: int) -> Telemetry:
    """The simulator's per-job series (steps x jobs) as the exporter would give them: one trace per GPU, every GPU
    of a job alike, framebuffer in MiB (used + free = the GPU's total)."""
    traces = []
    for k, (j, g) in enumerate(zip(ids, gpus)):
        for i in range(int(g)):
            traces.append(GpuTrace(job=str(j), scheduler="slurm", tenant=None, host=f"n{j}", gpu=str(i),
                                   activity=act[:, k].copy(), fb_used=fb[:, k] * FB_MIB,
                                   fb_free=(1 - fb[:, k]) * FB_MIB, xid=np.zeros(act.shape[0])))
    return Telemetry(end=end_step * STEP_S, step_s=STEP_S, n=act.shape[0], gpus=tuple(traces))


def simulate(params: ActivityParams, steps: int, seed: int, every: int = 10):
    """Run the simulator `steps` steps (80 jobs that start together and keep running) and feed its series through
    the real detectors every `every` steps, on the window up to there: (activity, findings per evaluation, job
    ids, states per step)."""
    c = cluster()
    a = Activity(2, params, seed=seed)
    a.step(c)
    ids, _, g = a.running(c)
    act, fb, states = [], [], []
    found: list[tuple[int, list]] = []
    cfg = HealthConfig()
    for s in range(1, steps + 1):
        c.step(np.array([40.0, 40.0]))
        a.step(c)
        assert np.array_equal(a.running(c)[0], ids)      # no job ends or restarts in this test
        act.append(a.share(ids))
        fb.append(a.fb_share(ids))
        states.append(a.state[ids].copy())
        if s >= 90 and s % every == 0:
            tel = telemetry(np.array(act), np.array(fb), ids, g, s)
            found.append((s, detect(tel, cfg, stale_after_s=300)[1]))
    return a, found, ids, np.array(states)


def test_the_detectors_find_exactly_the_simulated_leaks_and_hangs_and_no_busy_job():
    params = ActivityParams(idle_share=0.1, mean_idle_steps=30, hang_per_step=5e-4, leak_share=0.15)
    a, found, ids, states = simulate(params, 360, seed=9)
    cfg = HealthConfig()
    leaking = {int(j) for j in a.leaking()}
    hung_min = int(cfg.hung_warn_minutes * 60 / STEP_S)
    # ground truth at the end: hung (the model's state) for at least hung_warn_minutes
    hung = {int(j) for j in ids[(a.state[ids] == HUNG) & (a.idle_steps[ids] >= hung_min)]}
    assert leaking and hung, "the seed must make some leaks and some hangs for the test to mean anything"
    assert not leaking & hung, "a leaking job that hangs stops leaking: pick a seed without one"
    assert (a.oom_restarts[list(leaking)] > 0).any(), "some leak must run the GPU full (the restart in place)"
    by_kind: dict[str, set[int]] = {"memory_leak": set(), "hung": set(), "idle": set()}
    for s, fs in found:
        st = dict(zip(map(int, ids), states[s - 1]))
        for f in fs:
            j = int(f.job)
            by_kind.setdefault(f.kind, set()).add(j)
            if f.kind in ("hung", "idle"):
                assert st[j] != BUSY, (s, f.summary)          # no busy job is ever called idle or hung
            if f.kind == "idle":
                assert st[j] == IDLE, (s, f.summary)
    assert by_kind["memory_leak"] == leaking
    assert by_kind["hung"] == hung
    assert set(by_kind) <= {"memory_leak", "hung", "idle"}
    busy_steady = set(map(int, ids)) - leaking - hung - by_kind["idle"]
    assert busy_steady and not busy_steady & (by_kind["memory_leak"] | by_kind["hung"])


def test_the_framebuffer_model_is_deterministic_for_a_seed_and_changes_no_state_draw():
    params = ActivityParams(idle_share=0.2, mean_idle_steps=20, hang_per_step=1e-3, leak_share=0.3)
    runs = []
    for p in (params, params, ActivityParams(idle_share=0.2, mean_idle_steps=20, hang_per_step=1e-3)):
        c = cluster()
        a = Activity(2, p, seed=7)
        st, fb = [], []
        for _ in range(200):
            c.step(np.array([40.0, 40.0]))
            a.step(c)
            ids, _, _ = a.running(c)
            st.append(a.state[ids].copy())
            fb.append(a.fb_share(ids).copy())
        runs.append((np.array(st), np.array(fb), a.leaking()))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    assert np.array_equal(runs[0][2], runs[1][2]) and runs[0][2].size
    assert np.array_equal(runs[0][0], runs[2][0])        # leaks on or off: the same busy/idle/hung states
    assert runs[2][2].size == 0 and np.ptp(runs[2][1], axis=0).max() == 0   # no leak: every share steady


def test_a_jobs_draws_do_not_depend_on_which_other_jobs_run():
    # common random numbers: two replays that differ in a few jobs (with and without idle reclaim) must draw alike
    # for every other job, or their difference is a reshuffled random stream, not the reclaims
    def states(skip: set[int]) -> dict[int, list[int]]:
        c = cluster(10)
        a = Activity(2, ActivityParams(idle_share=0.3, mean_idle_steps=5), seed=4)
        out: dict[int, list[int]] = {}
        for s in range(60):
            c.step(np.array([10.0, 10.0]))
            if s == 5 and skip:
                c.preempt(np.array(sorted(skip)))   # these leave; nobody else's states may change
            a.step(c)
            ids, _, _ = a.running(c)
            for j in ids:
                out.setdefault(int(j), []).append(int(a.state[j]))
        return out
    full, cut = states(set()), states({0, 1})
    others = [j for j in full if j not in (0, 1)]
    assert others and all(full[j][:len(cut[j])] == cut[j] for j in others)
    assert any(len(set(v)) > 1 for v in full.values())      # states do change
