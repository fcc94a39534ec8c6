"""The start-time estimate (daemon/policy/eta.py) scored in the replay (issue 39, item 4).

Each measured step, after the plan is applied (its holds are on the simulated nodes), every job seen pending for
the first time gets the estimate the daemon would give it then, from what the cluster shows at that step only:
the running jobs, the holds, and the run lengths of the jobs that finished so far, its p90 calibrated as the
daemon's on the scored jobs that started so far (daemon/policy/eta_calibration.py). When the job starts, the
estimate is scored: the p50's absolute error and whether the start came by the p90. Beside it, the naive estimate
the issue compares with: the GPUs needed ahead in the queue (this job's included, less the GPUs free to it now)
divided by the recent rate at which GPUs freed up. The estimate a job still waiting is given at fixed times after
it began to wait (AGES_MIN: 10, 30 and 60 minutes) is scored the same way, against the same start (the issue's "at
fixed times after"); the p90's calibration learns from the first estimates and, per age, from these, as the
daemon's does (an estimate made that far into a wait is scaled by the started jobs' estimates made as far in).
Measured beside, not shown: the p50 scaled by its age's median ratio (``p50_scaled``) and, for the later estimates,
the p50 blended with the naive estimate by the weight learned from the started jobs' estimates made that far in
(``p50_aged_blend``) rather than from their first.

Nothing here reads the trace: the hook sees the simulated cluster after step k, which the replay built from the
demand up to k (tests/sim/test_eta_replay.py changes the trace after k and checks the estimates up to k).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from daemon.config import Config
from daemon.policy.eta import FreedRate, RunLengths, estimate, free_to_pending, naive_waits
from daemon.policy.eta_calibration import Calibration, calibrate
from daemon.policy.state import ClusterState
from daemon.policy.types import PolicyMemory
from daemon.sim.cluster import SimCluster
from daemon.sim.replay import ForecastBank, Meter, run_strategy
from daemon.sim.workloads import Workload

AGES_MIN = (10, 30, 60)   # the fixed times after a job began to wait at which its estimate is scored again


@dataclass(frozen=True)
class Made:
    """One job's estimates, made at step `at` when it was first seen waiting: predicted start steps (None =
    unknown)."""

    at: int
    tenant: str
    p50: int | None
    p90: int | None
    naive: int | None
    p90_model_s: float | None = None   # the release model's p90 (seconds after step `at`), before calibration
    p50_model_s: float | None = None   # and its p50
    p50_scaled: int | None = None      # the p50 scaled by the median ratio too (measured, not what is shown)
    naive_s: float | None = None       # the naive estimate in seconds after step `at` (the p50's blend learns from it)
    # an estimate made later in the wait: its p50 blended by its age bucket's weight, not the first estimates'
    # (measured, not what is shown)
    p50_aged_blend: int | None = None


@dataclass
class EtaScore:
    """The scored estimates: per job that waited and started, (made, actual start step)."""

    step_s: int
    made: dict[int, Made] = field(default_factory=dict)
    started: dict[int, int] = field(default_factory=dict)
    # minutes after the job began to wait -> job id -> the estimate it was given then (it was still waiting)
    later: dict[int, dict[int, Made]] = field(default_factory=dict)

    def summary(self) -> dict:
        """p50 absolute error (median, minutes), p90 coverage, the naive estimate's error; unknowns counted; and the
        same for the estimates made at fixed times after the wait began (``at_ages``, by minutes)."""
        done = [(self.made[j], s) for j, s in self.started.items() if j in self.made]
        out = {"jobs_waited_and_started": len(done), "still_waiting_or_withdrawn": len(self.made) - len(done),
               **self._scored(done)}
        out["at_ages"] = {}
        for age, made in sorted(self.later.items()):
            pairs = [(e, self.started[j]) for j, e in made.items() if j in self.started]
            got = out["at_ages"][str(age)] = {"jobs_waited_and_started": len(pairs), **self._scored(pairs)}
            blended = np.array([abs(s - e.p50_aged_blend) * self.step_s / 60.0 for e, s in pairs
                                if e.p50_aged_blend is not None])
            bmed, nmed = (float(np.median(blended)) if blended.size else None), got["naive_median_abs_error_min"]
            got.update({"p50_aged_blend_median_abs_error_min": bmed,
                        "p50_aged_blend_error_vs_naive": (bmed / nmed) if bmed is not None and nmed else None})
        return out

    def _scored(self, done: list[tuple[Made, int]]) -> dict:
        """The p50's and the naive estimate's absolute errors and the p90's coverage of (estimate, start) pairs."""
        m = self.step_s / 60.0
        known = [(e, s) for e, s in done if e.p50 is not None]
        err = np.array([abs(s - e.p50) * m for e, s in known])
        p90 = [(e, s) for e, s in done if e.p90 is not None]
        cov = np.array([s <= e.p90 for e, s in p90], dtype=bool)
        naive = np.array([abs(s - e.naive) * m for e, s in done if e.naive is not None])
        wait = np.array([(s - e.at) * m for e, s in done])
        med = float(np.median(err)) if err.size else None
        nmed = float(np.median(naive)) if naive.size else None
        scaled = np.array([abs(s - e.p50_scaled) * m for e, s in done if e.p50_scaled is not None])
        smed = float(np.median(scaled)) if scaled.size else None
        return {
            "p50_known": len(known), "p90_known": len(p90), "naive_known": int(naive.size),
            "median_wait_min": float(np.median(wait)) if wait.size else None,
            "p50_median_abs_error_min": med, "p50_mean_abs_error_min": float(err.mean()) if err.size else None,
            "p90_coverage": float(cov.mean()) if cov.size else None,
            "naive_median_abs_error_min": nmed,
            "error_vs_naive": (med / nmed) if med is not None and nmed else None,
            "p50_scaled_median_abs_error_min": smed,
            "p50_scaled_error_vs_naive": (smed / nmed) if smed is not None and nmed else None,
        }


class EtaHook:
    """`run_strategy`'s hook: estimates each job when it first waits, scores it when it starts."""

    def __init__(self, tenants: tuple[str, ...], step_s: int, *, tiers: tuple[str, ...] | None = None,
                 keep: int = 500, min_samples: int = 5, calibration: Calibration | None = None) -> None:
        self.tenants = tenants
        self.tier_of = dict(zip(tenants, tiers or ("normal",) * len(tenants)))
        self.step_s = int(step_s)
        self.cal = Calibration(floor_s=self.step_s) if calibration is None else calibration
        self.runs = RunLengths(keep=keep, min_samples=min_samples)
        self.score = EtaScore(self.step_s)
        self._running: dict[int, tuple[int, float]] = {}    # job id -> (tenant, runtime_s) at the last step
        self.freed = FreedRate()   # the naive estimate's rate, as the daemon's (daemon/service/eta.py)
        self._seen: set[int] = set()
        self._ages = {float(a) for a in AGES_MIN}

    def before_plan(self, c: SimCluster, k: int, state: ClusterState, measured: bool) -> ClusterState:
        jobs = state.jobs
        ids = jobs.ids.astype(np.int64)
        live = set(ids.tolist())
        freed = 0
        for j, (t, run) in self._running.items():
            if j not in live:           # finished (a preempted job is queued again, so still live)
                self.runs.observe(self.tenants[t], run + self.step_s)
                freed += int(c.job_size[t])
        self.freed.observe(k * self.step_s, freed)
        run_mask = jobs.running
        self._running = dict(zip(ids[run_mask].tolist(), zip(jobs.tenant[run_mask].tolist(),
                                                             jobs.runtime_s[run_mask].tolist())))
        for j in ids[run_mask].tolist():
            if j in self.score.made and j not in self.score.started:
                self.score.started[j] = k
                made = self.score.made[j]   # how late it came against its model p90: the p90's scale from now on
                self.cal.observe(self.tier_of[made.tenant], made.at * self.step_s, k * self.step_s,
                                 made.p90_model_s, made.p50_model_s, made.naive_s)
                for age, later in self.score.later.items():   # and the ones made later in its wait, per age
                    e = later.get(j)
                    if e is not None:
                        self.cal.observe_aged(self.tier_of[made.tenant], age * 60.0, e.at * self.step_s,
                                              k * self.step_s, e.p90_model_s, e.p50_model_s, e.naive_s)
        return state

    def after_plan(self, c: SimCluster, k: int, state: ClusterState, mem: PolicyMemory, cfg: Config,
                   measured: bool) -> PolicyMemory:
        jobs = state.jobs
        ids = jobs.ids.astype(np.int64)
        pending = ids[~jobs.running].tolist()
        new = [j for j in pending if j not in self._seen]
        self._seen.update(new)
        due = {}   # job -> the minutes since it began to wait, where that is one of AGES_MIN (measured jobs only)
        for j in pending:
            e = self.score.made.get(j)
            if e is not None and j not in self.score.started:
                age = (k - e.at) * self.step_s / 60.0
                if age in self._ages:
                    due[j] = int(age)
        if not measured or not (new or due):
            return mem
        now = dataclasses.replace(state, nodes=c.nodes_view())     # the holds the plan just placed
        pooled = tuple(t for t, m in zip(self.tenants, c.pool_members) if m)
        seen_now, runs, limits = self.model_inputs(now)
        model = estimate(seen_now, runs, pooled=pooled, time_limit_s=limits,
                         max_wait_s=cfg.policy.max_wait_steps * self.step_s, resolution_s=self.step_s,
                         drain_s=cfg.preempt_drain_s())
        factors = self.cal.factors(k * self.step_s)
        naive = naive_waits(model, free_to_pending(now), self.freed.rate(k * self.step_s))
        ages = {str(j): a * 60.0 for j, a in due.items()}   # new jobs: 0, their first estimate
        etas = calibrate(model, self.tier_of, factors, naive=naive, age_s=ages)
        p50_scaled = {e.job_id: e.p50_s for e in calibrate(model, self.tier_of, factors, p50=True, age_s=ages)}
        aged_blend = {e.job_id: e.p50_s for e in calibrate(model, self.tier_of, factors, naive=naive, age_s=ages,
                                                           aged_blend=True)} if due else {}
        new_set = set(new)
        for e in etas:
            j = int(e.job_id)
            if j in new_set:
                self.score.made[j] = Made(k, e.tenant, self._step(k, e.p50_s), self._step(k, e.p90_s),
                                          self._step(k, naive[e.job_id]), e.p90_model_s, e.p50_model_s,
                                          self._step(k, p50_scaled[e.job_id]), naive[e.job_id])
            elif j in due:
                self.score.later.setdefault(due[j], {})[j] = Made(
                    k, e.tenant, self._step(k, e.p50_s), self._step(k, e.p90_s), self._step(k, naive[e.job_id]),
                    e.p90_model_s, e.p50_model_s, self._step(k, p50_scaled[e.job_id]), naive[e.job_id],
                    self._step(k, aged_blend[e.job_id]))
        if new_set:
            self.record(k, seen_now, etas, new_set)
        return mem

    def model_inputs(self, state: ClusterState) -> tuple[ClusterState, RunLengths, dict[str, float]]:
        """What the estimate is made from: the cluster as seen now, the run lengths learned so far, no time limits
        (the simulator has none). daemon/sim/eta_breakdown.py's hindsight replaces them; nothing else does."""
        return state, self.runs, {}

    def record(self, k: int, state: ClusterState, etas: list, new: set[int]) -> None:
        """Called with each step's estimates (daemon/sim/eta_breakdown.py records what it needs); nothing here."""

    def _step(self, k: int, s: float | None) -> int | None:
        """The step a start `s` seconds after step k's snapshot falls on (the next schedule at the earliest)."""
        return None if s is None else k + max(math.ceil(s / self.step_s - 1e-9), 1)


def run_eta(w: Workload, cfg: Config, *, steps: int, strategy: str = "reactive", bank: ForecastBank | None = None,
            knobs: dict | None = None, calibration: Calibration | None = None,
            hook_class: type[EtaHook] | None = None, **hook_kw) -> tuple[Meter, EtaHook]:
    """Replay `steps` measured steps of `w` under `strategy` with the estimate scored (``hook.score.summary()``).
    `calibration`: the p90's (default: the daemon's settings, one step the shortest wait). `hook_class` (and its
    extra arguments `hook_kw`): an ``EtaHook`` that records more (daemon/sim/eta_breakdown.py).
    Not the perfect forecast: its holds read the future, and so would the estimates made from them."""
    if strategy == "perfect":
        raise ValueError("the ETA replay does not run the perfect forecast: its holds read the trace's future")
    step_s = int((w.demand.index[1] - w.demand.index[0]).total_seconds())
    hook = (hook_class or EtaHook)(tuple(map(str, w.demand.columns)), step_s, tiers=tuple(w.tiers),
                                   calibration=calibration, **hook_kw)
    m = run_strategy(strategy, w, cfg, bank, steps=steps, knobs=knobs, hook=hook)
    return m, hook
