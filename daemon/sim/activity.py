"""How busy each simulated job's GPUs are: a busy share per job that varies over time, with idle stretches and
hangs, beside the one cluster model (daemon/sim/cluster.py, unchanged: this module only reads its job table and
reclaims through its `preempt`, the same requeue a preemption is).

Where the shares come from: they are a model, not data. No trace we hold records GPU activity per job or per
tenant. Helios' per-VC `gpu_utilization` column is *not* a busy share: in every row of all 16 VCs it equals
`running_gpu_num / total_gpu_num` (GPUs allocated over the VC's quota) to the 3 decimals it is written with (checked
by tests/sim/test_activity.py on the data when present). So the model is parameterised and every number the replay
reports is given for the parameters it ran with:

- a running job is busy, idle or hung. Busy: its share is drawn once per run from N(busy_level, busy_spread),
  clipped to [0.05, 1]; idle: `idle_level` (under the detectors' 5% threshold); hung: 0 (framebuffer held);
- busy -> idle with a per-step probability chosen so that a tenant's jobs are idle `idle_share[t]` of their running
  time in the long run, idle -> busy after `mean_idle_steps` on average (geometric); busy -> hung with
  `hang_per_step`; a hung job stays hung until it is requeued;
- a requeued job restarts busy (it resumes from its checkpoint; with `restart_clears_idle=False` it resumes in the
  state it was requeued in).

Framebuffer (what the hung and memory-leak detectors read beside activity): each job holds a share of its GPUs'
framebuffer, drawn once per job from N(fb_level, fb_spread) clipped to [fb_min, 0.95] (a training job's caching
allocator keeps most of the memory it ever used, so the share is steady, and fb_min over the hung detector's 50%
keeps a hung job's memory "held" as a real deadlocked job's is). Busy and idle jobs keep it steady; a hung job
holds it (nothing runs, nothing is freed). A share `leak_share` of jobs leak (default 0: none): while busy their
share rises by a per-job rate drawn from U(leak_rate_min, leak_rate_max) per step (per training step in reality;
an idle or hung job allocates nothing new), from a steady level of at most `leak_from_max`: a job that starts near
full runs out of memory before any trend can be fitted (the detectors need an hour and a 10% rise), an OOM loop a
person sees from its restarts, not a leak to find here.

At full the job runs out of memory and *restarts in place*: its share falls back to its steady level and the leak
starts again (a sawtooth), rather than staying at full (a real job does not keep running with a full framebuffer
and a failed allocation). In place, not through the cluster's requeue, because that is what an OOM does under the
usual launchers (torchrun --max-restarts restarts the workers, a Kubernetes container restart keeps the pod and
its GPUs) and because it keeps the cluster model and every capacity number a replay reports the same whatever
`leak_share` is (leaks are reported, never acted on: the detectors' job is to find them). `oom_restarts` counts
them per job. A requeue (a new process) also resets the share to the steady level.

Deterministic per seed, and common random numbers: a job's draw at a step is a function of (seed, job id, step)
only (`uniform`), not of which other jobs run, so two replays that differ in a few jobs (with and without idle
reclaim, daemon/sim/health_replay.py) draw alike for every other job and their difference is the reclaims', not
a reshuffled random stream. A job's busy level is drawn once, in job-id order. The framebuffer model draws from its
own generator (seeded from the same seed), so the busy/idle/hung states are the same with or without it and
whatever its parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daemon.policy.state import Jobs
from daemon.sim.cluster import RUNNING, SimCluster

BUSY, IDLE, HUNG = 0, 1, 2


@dataclass(frozen=True)
class ActivityParams:
    idle_share: float = 0.25          # long-run share of a job's running time spent idle (per tenant: an array)
    mean_idle_steps: float = 90.0     # mean length of an idle stretch, steps
    busy_level: float = 0.8           # mean busy share while busy
    busy_spread: float = 0.1
    idle_level: float = 0.01
    hang_per_step: float = 1e-4       # chance per running step that a busy job hangs
    restart_clears_idle: bool = True
    fb_level: float = 0.75            # mean framebuffer share a job holds (steady)
    fb_spread: float = 0.1
    fb_min: float = 0.55              # lowest steady share: over the hung detector's 50%, so a hung job holds it
    leak_share: float = 0.0           # share of jobs that leak framebuffer (0: none, the default)
    leak_rate_min: float = 0.002      # framebuffer share a leaking job adds per busy step, drawn per job
    leak_rate_max: float = 0.004
    leak_from_max: float = 0.7        # a leaking job's steady share is at most this (room for a visible trend)


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def uniform(seed: int, ids: np.ndarray, step: int) -> np.ndarray:
    """One uniform number in [0, 1) per job id at `step`, a function of (seed, id, step) alone: the SplitMix64
    finalizer over a mix of the three (counter-based, so a job's draws do not depend on the other jobs)."""
    with np.errstate(over="ignore"):
        x = (np.asarray(ids, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
             + np.uint64(step & 0xFFFFFFFFFFFFFFFF) * np.uint64(0xBF58476D1CE4E5B9)
             + np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * np.uint64(0x94D049BB133111EB)) & _M64
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


class Activity:
    def __init__(self, n_tenants: int, params: ActivityParams = ActivityParams(), seed: int = 0,
                 idle_share: np.ndarray | None = None) -> None:
        self.p = params
        self.seed = int(seed)
        self.rng = np.random.default_rng(seed)     # the busy levels, once per job in id order
        share = np.full(n_tenants, params.idle_share) if idle_share is None else np.asarray(idle_share, float)
        if ((share < 0) | (share >= 1)).any():
            raise ValueError("idle_share must be in [0, 1)")
        p_out = 1.0 / params.mean_idle_steps
        # stationary idle share s = p_in / (p_in + p_out)  =>  p_in = p_out * s / (1 - s)
        self.p_in = np.clip(p_out * share / (1 - share), 0, 1)
        self.p_out = p_out
        if not 0 <= params.leak_share <= 1:
            raise ValueError("leak_share must be in [0, 1]")
        if not 0 < params.leak_rate_min <= params.leak_rate_max < 1:
            raise ValueError("need 0 < leak_rate_min <= leak_rate_max < 1")
        if not 0 < params.fb_min <= params.leak_from_max < 1:
            raise ValueError("need 0 < fb_min <= leak_from_max < 1")
        # own generator: the states' draws (self.rng) are the same whatever the framebuffer model does
        self.fb_rng = np.random.default_rng([seed, 0xFB])
        self.fb_base = np.zeros(0)                      # steady framebuffer share per job
        self.fb = np.zeros(0)                           # framebuffer share now
        self.leak_rate = np.zeros(0)                    # share per busy step; 0: not leaking
        self.oom_restarts = np.zeros(0, dtype=np.int64)
        self.state = np.zeros(0, dtype=np.int8)
        self.level = np.zeros(0)
        self.idle_steps = np.zeros(0, dtype=np.int64)   # consecutive steps idle or hung, while running
        self.started = np.full(0, -1, dtype=np.int64)  # the run each state belongs to (the cluster's start step)

    def _grow(self, n: int) -> None:
        k = n - self.state.size
        if k <= 0:
            return
        lv = np.clip(self.rng.normal(self.p.busy_level, self.p.busy_spread, k), 0.05, 1.0)
        self.state = np.r_[self.state, np.zeros(k, dtype=np.int8)]
        self.level = np.r_[self.level, lv]
        self.idle_steps = np.r_[self.idle_steps, np.zeros(k, dtype=np.int64)]
        self.started = np.r_[self.started, np.full(k, -1, dtype=np.int64)]
        base = np.clip(self.fb_rng.normal(self.p.fb_level, self.p.fb_spread, k), self.p.fb_min, 0.95)
        leaks = self.fb_rng.random(k) < self.p.leak_share
        rate = self.fb_rng.uniform(self.p.leak_rate_min, self.p.leak_rate_max, k)
        base = np.where(leaks, np.minimum(base, self.p.leak_from_max), base)
        self.fb_base = np.r_[self.fb_base, base]
        self.fb = np.r_[self.fb, base]
        self.leak_rate = np.r_[self.leak_rate, np.where(leaks, rate, 0.0)]
        self.oom_restarts = np.r_[self.oom_restarts, np.zeros(k, dtype=np.int64)]

    def running(self, c: SimCluster) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(job ids, tenants, GPUs) of the running jobs."""
        live = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        return c.j_id[live], c.j_tenant[live], c.j_gpus[live]

    def _started_at(self, c: SimCluster, ids: np.ndarray) -> np.ndarray:
        live = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        return c.j_started_at[live]

    def step(self, c: SimCluster) -> None:
        """Advance every running job's state by one step (after the cluster's own step)."""
        self._grow(c.next_id)
        ids, ten, _ = self.running(c)
        began = self._started_at(c, ids)
        new_run = self.started[ids] != began          # first start, or a restart after a requeue
        first = self.started[ids] < 0
        self.started[ids] = began
        restarted = ids[new_run & ~first]
        self.fb[restarted] = self.fb_base[restarted]    # a requeue is a new process: its memory starts afresh
        if restarted.size and self.p.restart_clears_idle:
            self.state[restarted] = BUSY
            self.idle_steps[restarted] = 0
        u = uniform(self.seed, ids, int(c.step_no))
        st = self.state[ids]
        go_idle = (st == BUSY) & (u < self.p_in[ten])
        go_hung = (st == BUSY) & ~go_idle & (u > 1 - self.p.hang_per_step)
        wake = (st == IDLE) & (u < self.p_out)
        st = st.copy()
        st[go_idle] = IDLE
        st[go_hung] = HUNG
        st[wake] = BUSY
        self.state[ids] = st
        quiet = st != BUSY
        self.idle_steps[ids] = np.where(quiet, self.idle_steps[ids] + 1, 0)
        leak = ids[(st == BUSY) & (self.leak_rate[ids] > 0)]
        if leak.size:
            fb = self.fb[leak] + self.leak_rate[leak]
            oom = fb >= 1.0                              # out of memory: restarts in place at its steady level
            self.oom_restarts[leak[oom]] += 1
            self.fb[leak] = np.where(oom, self.fb_base[leak], fb)

    def fb_share(self, ids: np.ndarray) -> np.ndarray:
        """Framebuffer used / total of each job's GPUs now (every GPU of a job alike)."""
        return self.fb[ids]

    def leaking(self) -> np.ndarray:
        """Ids of the jobs the model made leak (seen so far)."""
        return np.flatnonzero(self.leak_rate > 0)

    def share(self, ids: np.ndarray) -> np.ndarray:
        st = self.state[ids]
        return np.where(st == BUSY, self.level[ids], np.where(st == IDLE, self.p.idle_level, 0.0))

    def busy_gpus(self, c: SimCluster) -> float:
        """Allocation weighted by activity: sum over running jobs of GPUs x busy share."""
        ids, _, g = self.running(c)
        return float((g * self.share(ids)).sum()) if ids.size else 0.0

    def idle_jobs(self, c: SimCluster, min_steps: int, tenants: np.ndarray | None = None) -> np.ndarray:
        """Running jobs idle or hung for `min_steps` or more (of `tenants` when given), longest first: what the
        health detectors would find in the daemon (the simulator has no missing samples)."""
        ids, ten, _ = self.running(c)
        ok = self.idle_steps[ids] >= min_steps
        if tenants is not None:
            ok &= np.isin(ten, tenants)
        sel = ids[ok]
        return sel[np.argsort(-self.idle_steps[sel], kind="stable")]

    def idle_mask(self, jobs: Jobs, min_steps: int) -> np.ndarray:
        """``Jobs.idle`` for a snapshot of the cluster (``SimCluster.state`` without id formatters: integer ids):
        running jobs idle or hung for ``min_steps`` or more, as `idle_jobs` finds them, so that a replay's holds
        take their GPUs first as the daemon's do from its health findings (daemon/service/cycle.py `with_idle`)."""
        ids = np.asarray(jobs.ids, dtype=np.int64)
        known = ids < self.idle_steps.size
        quiet = np.zeros(ids.size, dtype=bool)
        quiet[known] = self.idle_steps[ids[known]] >= min_steps
        return quiet & jobs.running
