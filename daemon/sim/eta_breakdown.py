"""Where the start estimate's error comes from, on the replay (issue 39's ETA target; bench/eta_bench.py --breakdown).

The scored jobs' errors broken down by what the job was (tier, GPUs asked, its place in the scheduler's order at
its estimate: ``position``, how long it waited) and by what happened while it waited that the estimate could not
see when it was made:

- ``overtaken``: jobs first seen waiting after the estimate that started before the job (new work of a higher
  class, or work that fit a hold the job may not use): demand the estimate does not know of;
- ``ahead_withdrawn``: jobs ahead of it in the scheduler's order at the estimate that left the queue without
  starting (their tenant's demand fell): the estimate counts them as GPUs to be served first;
- ``running_end_error_min``: for the jobs running at the estimate, their actual remaining run less the p50 the
  run-length model gave them (median over those that ended within the replay; positive: they ran longer), and
  the share the model had no basis for (``running_end_unknown_share``: they never end in the estimate).

And, as evidence rather than as an estimator, the same replay scored again with what was unknown made known from
a first run (``hindsight``): the running jobs' true ends, the withdrawals ahead, or both. It reads the future by
design; it tells which unknown the error is made of, and it is never what the daemon or the scored estimate uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from daemon.policy.eta import Eta, RunLengths
from daemon.policy.state import ClusterState
from daemon.sim.eta_replay import EtaHook

WAIT_EDGES_MIN = (0, 5, 15, 30, 60, 120, float("inf"))
# the job's place in the scheduler's order at its estimate (0: next to start): the head of the queue waits for the
# first few releases, the rest for many (the p50's release levels, daemon/policy/eta.py P50_LEVELS)
POSITION_EDGES = (0, 5, 20, float("inf"))


@dataclasses.dataclass
class Fates:
    """What became of every job the replay saw (steps): when first seen, first running, gone."""

    seen: dict[int, int] = dataclasses.field(default_factory=dict)
    started: dict[int, int] = dataclasses.field(default_factory=dict)
    ended: dict[int, int] = dataclasses.field(default_factory=dict)   # left the table (finished or withdrawn)
    tier: dict[int, str] = dataclasses.field(default_factory=dict)

    def note(self, k: int, ids: Iterable[int], running: Iterable[int], gone: Iterable[int]) -> None:
        for j in ids:
            self.seen.setdefault(j, k)
        for j in running:
            self.started.setdefault(j, k)
        for j in gone:
            self.ended.setdefault(j, k)


class BreakdownHook(EtaHook):
    """``EtaHook`` that also records, per estimate, what it needs for the breakdown (the jobs ahead, the running
    jobs' p50 ends) and every job's fate. The estimates are the hook's own: nothing here changes them."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.fates = Fates()
        self._live: set[int] = set()
        self.context: dict[int, dict] = {}   # job -> what was known at its estimate

    def before_plan(self, c, k: int, state: ClusterState, measured: bool) -> ClusterState:
        ids = state.jobs.ids.astype(np.int64)
        live = set(ids.tolist())
        self.fates.note(k, ids.tolist(), ids[state.jobs.running].tolist(), self._live - live)
        for i, j in enumerate(ids.tolist()):
            if j not in self.fates.tier:
                self.fates.tier[j] = self.tier_of[self.tenants[int(state.jobs.tenant[i])]]
        self._live = live
        return super().before_plan(c, k, state, measured)

    def record(self, k: int, state: ClusterState, etas: list[Eta], new: set[int]) -> None:
        jobs = state.jobs
        run = np.flatnonzero(jobs.running)
        ends = {}
        for j in run.tolist():
            r = self.runs.remaining(self.tenants[int(jobs.tenant[j])], float(jobs.runtime_s[j]), 0.5)
            ends[int(jobs.ids[j])] = r
        order = [int(e.job_id) for e in etas]
        for pos, e in enumerate(etas):
            j = int(e.job_id)
            if j in new:
                self.context[j] = {"k": k, "gpus": e.gpus, "ahead": order[:pos], "ends": ends}


def _group(rows: list[dict], key: str, labels: list[str] | None = None) -> dict:
    out: dict[str, dict] = {}
    keys = labels if labels is not None else sorted({str(r[key]) for r in rows})
    for lab in keys:
        sel = [r for r in rows if str(r[key]) == lab]
        if not sel:
            continue
        err = np.array([r["err"] for r in sel], dtype=float)
        nerr = np.array([r["naive_err"] for r in sel if r["naive_err"] is not None], dtype=float)
        out[lab] = {"jobs": len(sel), "p50_median_abs_error_min": float(np.median(np.abs(err))),
                    "p50_median_signed_error_min": float(np.median(err)),
                    "naive_median_abs_error_min": float(np.median(np.abs(nerr))) if nerr.size else None,
                    "median_wait_min": float(np.median([r["wait"] for r in sel]))}
    return out


def _bucket(x: float, edges: tuple[float, ...]) -> str:
    if x == 0:
        return "0"
    for lo, hi in zip(edges, edges[1:]):
        if lo < x <= hi:
            return f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">{lo:g}"
    return f">{edges[-2]:g}"


def breakdown(h: BreakdownHook) -> dict:
    """The scored jobs' errors, grouped (see the module's docstring). Signed error: actual start less the p50
    (positive: it started later than said), in minutes."""
    m = h.step_s / 60.0
    f = h.fates
    rows = []
    run_err, unknown, n_run = [], 0, 0
    overtakers: dict[str, dict[str, int]] = {}   # the overtaken job's tier -> the overtaking jobs' tiers -> count
    for j, s in h.score.started.items():
        e, ctx = h.score.made.get(j), h.context.get(j)
        if e is None or ctx is None or e.p50 is None:
            continue
        k = ctx["k"]
        overtaken = [o for o, sk in f.started.items() if o != j and f.seen.get(o, -1) > k and sk <= s]
        by = overtakers.setdefault(h.tier_of[e.tenant], {})
        for o in overtaken:
            by[f.tier.get(o, "?")] = by.get(f.tier.get(o, "?"), 0) + 1
        withdrawn = sum(1 for o in ctx["ahead"] if o not in f.started and f.ended.get(o, 1 << 60) <= s)
        errs = []
        for rid, r in ctx["ends"].items():
            n_run += 1
            if r is None:
                unknown += 1
            elif rid in f.ended:
                errs.append((f.ended[rid] - k) * m - r / 60.0)
        run_err.extend(errs)
        rows.append({"tier": h.tier_of[e.tenant], "gpus": ctx["gpus"], "wait": (s - e.at) * m,
                     "err": (s - e.p50) * m, "naive_err": None if e.naive is None else (s - e.naive) * m,
                     "overtaken": len(overtaken), "ahead_withdrawn": withdrawn, "position": len(ctx["ahead"])})
    for r in rows:
        r["wait_bucket"] = _bucket(r["wait"], WAIT_EDGES_MIN)
        r["overtaken_bucket"] = _bucket(r["overtaken"], (0, 2, 5, 20, float("inf")))
        r["withdrawn_bucket"] = _bucket(r["ahead_withdrawn"], (0, 2, 5, 20, float("inf")))
        r["position_bucket"] = _bucket(r["position"], POSITION_EDGES)
    wait_labels = [_bucket(hi, WAIT_EDGES_MIN) for hi in WAIT_EDGES_MIN[1:-1]] + [f">{WAIT_EDGES_MIN[-2]:g}"]
    n_lab = ["0", "0-2", "2-5", "5-20", ">20"]
    return {
        "jobs": len(rows),
        "share_started_later_than_p50": float(np.mean([r["err"] > 0 for r in rows])) if rows else None,
        "by_tier": _group(rows, "tier"), "by_gpus": _group(rows, "gpus"),
        "by_wait_min": _group(rows, "wait_bucket", wait_labels),
        "by_overtaken_by_later_arrivals": _group(rows, "overtaken_bucket", n_lab),
        "by_jobs_ahead_withdrawn": _group(rows, "withdrawn_bucket", n_lab),
        "by_position": _group(rows, "position_bucket", ["0", "0-5", "5-20", ">20"]),
        "overtaking_jobs_by_tier": overtakers,
        "running_end_error_min": {"median": float(np.median(run_err)) if run_err else None,
                                  "p10": float(np.quantile(run_err, 0.1)) if run_err else None,
                                  "p90": float(np.quantile(run_err, 0.9)) if run_err else None,
                                  "ends_scored": len(run_err)},
        "running_end_unknown_share": unknown / n_run if n_run else None,
    }


class HindsightHook(EtaHook):
    """The estimate given what it could not know, from a first replay's `fates` (reads the future: evidence only).
    `known`: "ends" (each running job's true end as its time limit), "withdrawals" (jobs that will leave the
    queue without starting are not in it), or both. Its p50 is the release model's alone (no blend with the naive
    estimate): what is measured is the model with the unknowns known."""

    def __init__(self, *a, fates: Fates, known: frozenset[str], **kw) -> None:
        super().__init__(*a, **kw)
        self.cal.min_blend = 1 << 60
        self.fates, self.known = fates, known
        self._k = 0

    def after_plan(self, c, k, state, mem, cfg, measured):
        self._k = k
        return super().after_plan(c, k, state, mem, cfg, measured)

    def model_inputs(self, state: ClusterState) -> tuple[ClusterState, RunLengths, dict[str, float]]:
        jobs, f, k = state.jobs, self.fates, self._k
        limits: dict[str, float] = {}
        runs: RunLengths = self.runs
        if "ends" in self.known:
            for j in np.flatnonzero(jobs.running).tolist():
                jid = int(jobs.ids[j])
                # a job still running when the replay ends runs past it: no end known
                end = f.ended.get(jid)
                limits[str(jid)] = float("inf") if end is None else \
                    float(jobs.runtime_s[j]) + (end - k) * self.step_s - 1e-6
            runs = _NoRunningHistory(self.runs)
        if "withdrawals" in self.known:
            keep = jobs.running | np.array([int(x) in f.started for x in jobs.ids], dtype=bool)
            state = dataclasses.replace(state, jobs=jobs.select(keep))
        return state, runs, limits


class _NoRunningHistory(RunLengths):
    """The run-length history with nothing to say about a job already running (its end is given instead)."""

    def __init__(self, base: RunLengths) -> None:
        self.__dict__.update(base.__dict__)

    def remaining_many(self, tenant: str, elapsed_s: np.ndarray, q: float) -> np.ndarray:
        e = np.asarray(elapsed_s, dtype=float)
        return np.where(e > 0, np.nan, super().remaining_many(tenant, e, q))
