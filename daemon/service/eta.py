"""The start-time estimates the daemon shows (issue 39, item 3): made each cycle by the pure estimator
(daemon/policy/eta.py) from the cycle's state, plan and forecast; scored when a job starts.

What it keeps between cycles, in memory only (a restart relearns; no estimate is better than a wrong one): the
tenants' finished run lengths (a job running last cycle and gone now finished; one requeued is still live), the
first estimate of each pending job, so that when it starts the error of what it was told first is measured, and
the p90's calibration (daemon/policy/eta_calibration.py), fed with each started job's first estimate and the ones it
was given when its wait first reached 10, 30 and 60 minutes (the p90 of a job waiting that long is scaled by those:
the first estimates' scale held at the start and missed later, docs/eta.md). Every replica
updates them every good cycle, the standby too (only the acting one shows the estimates on Slurm), so a takeover
keeps them; a replica that starts has all three empty: the p90 is the model's own until 20 jobs have started under
it (the first estimates are not stored, so the calibration cannot be rebuilt from the history).

Metrics: ``gpuas_eta_age_seconds`` (how old the estimates served are, read at scrape time),
``gpuas_eta_error_seconds`` (per tier, the absolute error of the p50 first given, observed when the job starts) and
``gpuas_eta_p90_covered`` (per tier, whether the start came by the p90 first given).

Clocks: estimates and scores are on the wall clock, the time the jobs' run and wait times are counted in on a
real cluster. The embedded simulator (`run --sim`) runs a minute of cluster time per cycle, so its job times are
on the snapshot's clock: there (``state_time``) the estimates are made on ``state.at``, and only their age is read
on the wall clock. Mixed, a job's start was scored as wall time minus simulated run time, and the console showed
today's date beside the simulation's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import Any, Callable

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from daemon.config.windows import window_of
from daemon.policy.eta import QUANTILES, FreedRate, RunLengths, estimate, forecast_growth, free_to_pending, naive_waits
from daemon.policy.eta_calibration import Calibration, age_bucket, calibrate
from daemon.policy.state import ClusterState, Jobs
from daemon.policy.types import Plan
from daemon.web.eta_view import iso
from forecaster.types import Forecast

log = logging.getLogger(__name__)

KEEP_FIRST = 100_000   # pending jobs whose first estimate is remembered (the oldest go first)


def peaks_of(fc: Forecast | None, quantiles=QUANTILES) -> dict[str, tuple[float, ...]]:
    """tenant -> its forecast peak over the horizon at each quantile (a typed series ``tenant@types`` adds to its
    tenant)."""
    if fc is None:
        return {}
    # one array operation per quantile (a Python loop over 1,000 tenants here was 49 ms of every cycle)
    cols = []
    for q in quantiles:
        a = fc.quantile(q)
        m = np.where(np.isfinite(a), a, -np.inf).max(axis=1) if a.shape[1] else np.full(a.shape[0], -np.inf)
        cols.append(np.where(np.isfinite(m), m, np.nan))
    pk = np.stack(cols, axis=1) if cols else np.empty((len(fc.tenants), 0))
    out: dict[str, np.ndarray] = {}
    for i, s in enumerate(fc.tenants):
        t = s.rsplit("@", 1)[0]   # the last "@" splits, as daemon/policy/fleet.split_series reads a series
        prev = out.get(t)
        out[t] = pk[i] if prev is None else prev + pk[i]
    return {t: tuple(float(x) for x in v) for t, v in out.items()}


def with_queued(state: ClusterState, queued: list[Jobs]) -> ClusterState:
    """`state` with pending jobs that have no pod yet (Kueue's Workloads that wait: ListsQueuedJobs) added to its
    jobs and to its tenants' pending GPUs, for the estimator only: the plan was made on `state` as it was. Those
    `state` has already (the Workloads the plan read as demand: same ids) are not added again."""
    have = set(state.jobs.ids.tolist()) if any(len(q) for q in queued) else set()
    # a job the plan's state has already (a waiting Workload the Kueue actuator read as demand) is not added twice
    extra = [q.select(~np.isin(q.ids, list(have))) if have else q for q in queued if len(q)]
    extra = [q for q in extra if len(q)]
    if not extra:
        return state
    jobs = Jobs.concat([state.jobs, *extra])
    pending = np.array(state.pending, dtype=float, copy=True)
    for q in extra:
        np.add.at(pending, q.tenant[~q.running], q.gpus[~q.running])
    return dataclasses.replace(state, jobs=jobs, pending=pending)


WINDOW_AHEAD_S = 86400.0   # windows whose hold begins within this much are counted


def windows_ahead(plan: Plan, at: pd.Timestamp, min_lead_s: float = 0.0) -> list[tuple[float, str, float]]:
    """The plan's recurring windows whose hold has not begun yet (one in force is already among the holds), as
    (seconds after `at` the hold begins: the next start less the lead the plan holds it from, reclaim_before or
    `min_lead_s` where that is longer: Config.window_min_lead_s, tenant, GPUs)."""
    now = at.to_pydatetime()
    if now.tzinfo is None:
        now = now.replace(tzinfo=dt.timezone.utc)
    out = []
    for d in plan.windows:
        w = window_of(d)
        start = w.occurrence(now)
        if start is None:
            continue
        t = (start - w.held_lead(min_lead_s) - now).total_seconds()
        if 0 < t <= WINDOW_AHEAD_S:
            out.append((t, w.tenant, float(w.total_gpus())))
    return out


class EtaTracker:
    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float], *, max_wait_s: float | None = None,
                 keep: int = 500, min_samples: int = 5, floor_s: float = 60.0, state_time: bool = False,
                 resolution_s: float | None = None, window_min_lead_s: float = 0.0, drain_s: float = 120.0) -> None:
        self.clock = clock
        self.drain_s = drain_s   # Config.preempt_drain_s: when GPUs draining now come back (estimate's drain_s)
        self.window_min_lead_s = window_min_lead_s   # Config.window_min_lead_s (windows_ahead)
        # releases within one cycle are one step of the estimate (daemon.policy.eta.RESOLUTION_S): a job starts at a
        # cycle, so finer is no truer, and a big cluster's queue is rescanned once a cycle of its future, not per job
        self.resolution_s = floor_s if resolution_s is None else float(resolution_s)
        self.state_time = state_time   # estimate on state.at (the embedded simulator's clock), not the wall's
        self.max_wait_s = max_wait_s
        self.runs = RunLengths(keep=keep, min_samples=min_samples)
        self.cal = Calibration(floor_s=floor_s)   # floor_s: a job that fits now starts at the next cycle
        self._running: dict[str, tuple[str, float, float]] = {}     # job -> (tenant, seconds run, GPUs)
        # job -> (tier, made at, p50, p90 wall times, the model's p90, its p50 and the naive estimate, seconds after
        # `made at`)
        self._first: dict[str, tuple[str, float, float | None, float | None, float | None, float | None,
                                     float | None]] = {}
        # job -> age bucket (eta_calibration.AGE_BUCKETS_S past 0) -> (made at, the model's p90 seconds after it): the
        # estimate it was given when its wait first reached that age, scored against its start as the first is
        self._aged: dict[str, dict[int, tuple[float, float | None]]] = {}
        self.freed = FreedRate()   # the naive estimate's rate: GPUs of the jobs seen ending, over the last hour
        self.made_at: float | None = None      # on the estimates' clock
        self.made_wall: float | None = None    # on the wall clock: the estimates' age
        self.view: dict[str, Any] | None = None
        self.age = Gauge("gpuas_eta_age_seconds", "Age of the start-time estimates served (absent before the first)",
                         registry=registry)
        self.age.set_function(lambda: float("nan") if self.made_wall is None else self.clock() - self.made_wall)
        self.error = Histogram("gpuas_eta_error_seconds", "Absolute error of the p50 start estimate a job was first "
                               "given, observed when it starts", ["tier"], registry=registry,
                               buckets=(60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400))
        self.covered = Counter("gpuas_eta_p90_covered", "Jobs started, by whether they started by the p90 estimate "
                               "they were first given", ["tier", "covered"], registry=registry)

    def on_snapshot_clock(self, step_s: float) -> None:
        """Estimate on the snapshot's clock (``state_time``: the embedded simulator), where a cycle is `step_s` of
        it (cycle.resolution_s) whatever the wall interval: the calibration's floor (a job that fits now starts at
        the next cycle) and the releases' resolution are that step. Called before the first update (the
        calibration is made anew). make run's demo cycles every 2 s of wall time, a minute of the simulation's."""
        self.state_time = True
        self.resolution_s = float(step_s)
        self.cal = Calibration(floor_s=float(step_s))

    def update(self, state: ClusterState, plan: Plan | None, fc: Forecast | None,
               started: dict[str, float] | None = None) -> dict[str, Any]:
        """Learn from what finished and started since last cycle, estimate every pending job; returns the view the
        API and console show. `started`: jobs that left the queue without running in `state` (a Kueue Workload
        admitted: its pods are other jobs), id -> when (epoch): their first estimate is scored against it."""
        wall = self.clock()
        now = float(state.at.timestamp()) if self.state_time else wall
        jobs = state.jobs
        ids = [str(x) for x in jobs.ids]
        live = set(ids)
        since = 0.0 if self.made_at is None else max(now - self.made_at, 0.0)
        freed = 0.0
        for j, (t, run, g) in self._running.items():
            if j not in live:   # it ended since the last cycle: counted as run to now (at most a cycle long)
                self.runs.observe(t, run + since)
                freed += g
        self.freed.observe(now, freed)
        tier_of = dict(zip(state.tenants, state.tiers))
        self._running = {}
        for j, i, run, r, g in zip(ids, jobs.tenant, jobs.runtime_s, jobs.running, jobs.gpus):
            if not r:
                continue
            self._running[j] = (state.tenants[int(i)], float(run), float(g))
            first = self._first.pop(j, None)
            if first is not None:
                self._score(first, now - float(run), self._aged.pop(j, {}))
        for j, t in (started or {}).items():
            first = self._first.pop(j, None)
            if first is not None:
                self._score(first, float(t), self._aged.pop(j, {}))
        res = dict(plan.reservations) if plan is not None else {}
        # the growth is read only for pending jobs: none waiting, none computed
        growth = forecast_growth(peaks_of(fc), state, res) if fc is not None and (~jobs.running).any() else None
        lim = jobs.time_limit_s
        limits = {} if lim is None else {j: float(v) for j, v in zip(ids, lim) if np.isfinite(v)}
        etas = estimate(state, self.runs, reservations=res, pooled=plan.pooled if plan is not None else (),
                        time_limit_s=limits,
                        growth=growth, max_wait_s=self.max_wait_s,
                        windows=windows_ahead(plan, state.at, self.window_min_lead_s) if plan is not None else (),
                        resolution_s=self.resolution_s, drain_s=self.drain_s)
        naive = naive_waits(etas, free_to_pending(state, res), self.freed.rate(now), state.capacity)
        # how long each job has waited since its first estimate: its p90 is scaled by estimates made that far in
        ages = {e.job_id: now - self._first[e.job_id][1] for e in etas if e.job_id in self._first}
        etas = calibrate(etas, tier_of, self.cal.factors(now), naive=naive, age_s=ages)
        rows = []
        for e in etas:
            p50 = None if e.p50_s is None else now + e.p50_s
            p90 = None if e.p90_s is None else now + e.p90_s
            if e.job_id not in self._first:
                self._first[e.job_id] = (tier_of.get(e.tenant, "normal"), now, p50, p90, e.p90_model_s,
                                         e.p50_model_s, naive.get(e.job_id))
            else:
                b = age_bucket(ages.get(e.job_id, 0.0))
                if b and b not in self._aged.get(e.job_id, {}):
                    self._aged.setdefault(e.job_id, {})[b] = (now, e.p90_model_s)
            rows.append({**e.to_dict(), "p50_at": iso(p50), "p90_at": iso(p90)})
        pending = {e.job_id for e in etas}
        for j in [j for j in self._first if j not in pending and j not in live]:
            del self._first[j]          # withdrawn while waiting: never started, nothing to score
            self._aged.pop(j, None)
        while len(self._first) > KEEP_FIRST:
            self._aged.pop(next(iter(self._first)), None)
            del self._first[next(iter(self._first))]
        self.made_at, self.made_wall = now, wall
        self.view = {"made_at": now, "made_wall": wall, "jobs": rows}
        return self.view

    def _score(self, first: tuple[str, float, float | None, float | None, float | None, float | None, float | None],
               started: float, aged: dict[int, tuple[float, float | None]]) -> None:
        tier, made_at, p50, p90, p90_model_s, p50_model_s, naive_s = first
        self.cal.observe(tier, made_at, started, p90_model_s, p50_model_s, naive_s)
        for b, (at, p90_m) in aged.items():
            self.cal.observe_aged(tier, float(b), at, started, p90_m)
        if p50 is not None:
            self.error.labels(tier).observe(abs(started - p50))
        if p90 is not None:
            self.covered.labels(tier, "true" if started <= p90 else "false").inc()

