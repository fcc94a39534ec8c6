"""The p90 start estimate calibrated on the jobs that already started (issue 39's ETA target: the p90 covers 85-95%).

The release model (daemon/policy/eta.py) cannot see work that arrives after the estimate (a higher-priority job, a
hold that grows, a job that is withdrawn ahead), so its own p90 is too sure on one trace and too wide on another.
What it missed on the jobs that have started says how far off it is. Online split-conformal, scaled:

- each job that started gives one ratio, its actual wait over the wait its model p90 said, both from the moment
  of its first estimate and at least ``floor_s`` (one cycle: a job that "fits now" still starts at the next one);
- a new estimate's p90 is its model p90 wait (at least ``floor_s``) times the 90th percentile of the ratios of its
  tier's last ``keep`` started jobs, or of every tier's together while its tier has fewer than ``min_tier``; the
  model's own p90 while all tiers together have fewer than ``min_all``. Never below the p50; where the p50 is the
  model's own (not blended, below), never below it (at least one cycle, ``floor_s``) times the model's own
  p90-to-p50 ratio: on make run the jobs start far sooner than the model's p90 (it serves the high tier's whole
  forecast growth first), the scale fell to 0.03, and more than half the p90s were clamped to their p50 (a p90
  equal to the p50 tells a user nothing). Not where the p50 is blended: there the bound raised the Helios unseen
  window's coverage from 90% to 98% (and its p90 stays above the p50 on make run without it).

An estimate made later in a job's wait (its age: 10, 30, 60 minutes or more since the first, ``AGE_BUCKETS_S``)
is scaled the same way by the ratios of the started jobs' estimates made that far into their wait
(``observe_aged``), or, with fewer than ``min_tier`` / ``min_all`` of them, by every later age's together, else by
the first estimates'. The first estimates' scale held at the start and missed later (the model's p90 of the wait
left is not as far off as that of a whole wait): on the replay the later p90s' coverage moved toward 90%
(bench/out/eta_*.json, ``at_ages``; synthetic 86/87/92% -> 89/93/93% at 10/30/60 min, Helios' unseen window
65/56/85% -> 72/71/95%), the first estimates' unchanged.

The p50's blend weight is learned per age bucket too (``Factors.weight``, the same fallbacks, from the rows
``observe_aged`` keeps) but only measured (``calibrate(aged_blend=True)``), off in the daemon: on the replay it
lowered the later estimates' error on one trace at one age and raised it elsewhere (bench/out/eta_*.json,
``at_ages``, ``p50_aged_blend_error_vs_naive``; docs/eta.md). A later estimate's p50 blends by the first estimates'
weight.

A ratio, not a shift: the misses grow with the wait (a 2-minute estimate is a few minutes off, a 2-hour one an hour),
and the tiers differ (the low tier waits behind everyone's new work at a median of well over 1, the others near 1).
On the replay (bench/eta_bench.py, docs/eta.md) the scaled p90 came within the target on synthetic and Helios
where the p50 plus a fixed margin was under on one and over on the other; buckets by queue position or by the
model's wait did no better than the tier.

The same for the p50 (its wait times the median of actual / model p50 wait) is there to be measured, and off: on
the replay (``p50_scaled`` in bench/out/eta_*.json) it made synthetic's error larger and Helios's barely smaller:
the p50's misses are spread both ways around 1 rather than biased.

The p50 is blended with the naive estimate (the GPUs needed ahead in the queue over the recent rate at which GPUs
free up, ``naive_waits`` in daemon/policy/eta.py): ``w x model + (1 - w) x naive``, `w` the one of
``BLEND_WEIGHTS`` whose blend had the least median absolute error on the started jobs (ties: the larger `w`), and
1 (the model alone) unless that error is at most ``BLEND_GAIN`` of the model's own: the tier's once it has
``min_blend`` started jobs with both, else every tier's together once they have, else 1. Why: the release model
errs from what it cannot see when it is made (bench/out/eta_helios*.json, ``breakdown``: high-tier work that
arrives and starts first, jobs ahead that leave the queue, running jobs that end hours from their tenant's
run-length history); where those dominate, the queue's aggregate rate of GPUs freed is the better guide (Helios'
second window, where the model alone erred 1.9x the naive estimate's), and where they do not the model stays.

Never reads ahead: an observation carries the time its job started, and ``factors(now)`` uses only those that
started by `now`. Pure: the caller says which jobs started and when.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from daemon.policy.eta import Eta


@dataclass(frozen=True)
class Factors:
    """The scales per tier at one moment, from the jobs started by then; "" is every tier's together, and a tier
    absent reads it (no scale at all while "" is absent too)."""

    by_tier: Mapping[str, tuple[float, float, str]]    # (p90 scale, p50 scale, what it rests on)
    floor_s: float
    blend: Mapping[str, float] = dataclasses.field(default_factory=dict)   # tier ("" every tier) -> the p50's w
    # an estimate's age bucket (AGE_BUCKETS_S, past 0) -> tier ("" every tier) -> its scales, as by_tier, from the
    # started jobs' estimates made that far into their wait; a bucket or tier absent reads by_tier
    by_age: Mapping[int, Mapping[str, tuple[float, float, str]]] = dataclasses.field(default_factory=dict)
    # the same for the p50's blend weight: age bucket -> tier -> w; a bucket or tier absent reads blend
    blend_by_age: Mapping[int, Mapping[str, float]] = dataclasses.field(default_factory=dict)

    def scale(self, tier: str, age_s: float = 0.0) -> tuple[float, float, str] | None:
        """The scale of an estimate of a `tier` job made `age_s` after it began to wait: its age bucket's (the
        tier's, else every tier's), else every later age's together (the same), else the first estimates' (the
        tier's, else every tier's), else None."""
        return _aged_lookup(self.by_age, self.by_tier, tier, age_s)

    def weight(self, tier: str, age_s: float = 0.0) -> float:
        """The model's share in the p50 of a `tier` job estimated `age_s` into its wait, looked up as ``scale``;
        1 (the model alone) where nothing is learned yet."""
        w = _aged_lookup(self.blend_by_age, self.blend, tier, age_s)
        return 1.0 if w is None else w


def _aged_lookup(by_age, first, tier: str, age_s: float):
    b = age_bucket(age_s)
    aged = by_age.get(b, {}) if b else {}
    later = by_age.get(LATER, {}) if b else {}
    for m in (aged, later, first):
        v = m.get(tier, m.get(""))
        if v is not None:
            return v
    return None


# the ages (seconds since a job began to wait) from which an estimate's p90 is scaled by the estimates made that far
# into the wait: the first, 10, 30 and 60 minutes and later
AGE_BUCKETS_S = (0, 600, 1800, 3600)
LATER = -1   # Factors.by_age's key of every bucket past the first together (a bucket with too few reads it)


def age_bucket(age_s: float) -> int:
    """The bucket of AGE_BUCKETS_S an estimate made `age_s` into its job's wait falls in (the last one at most)."""
    return max((b for b in AGE_BUCKETS_S if age_s >= b - 1e-9), default=0)


BLEND_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)   # the model's share in the p50 (the rest is the naive estimate)
# a blend replaces the model's p50 only where it cut the model's own median absolute error on the started jobs to at
# most this share: a blend that barely wins on past batches of starts is noise, and the model stays
BLEND_GAIN = 0.8


class Calibration:
    """The ratios (actual wait / model p90 wait, and / model p50 wait) of started jobs, per tier, with the time
    each started."""

    def __init__(self, q: float = 0.9, keep: int = 500, min_tier: int = 50, min_all: int = 20,
                 floor_s: float = 60.0, min_blend: int = 100) -> None:
        if not 0 < q < 1 or floor_s <= 0:
            raise ValueError(f"Calibration: q must be in (0, 1) and floor_s > 0, got q={q}, floor_s={floor_s}")
        self.q, self.keep, self.min_tier, self.min_all = q, int(keep), int(min_tier), int(min_all)
        self.floor_s = float(floor_s)
        self.min_blend = int(min_blend)
        # tier -> (started_at, p90 ratio, p50 ratio, waited, model p50 wait, naive wait), oldest first (NaN: unknown)
        self._obs: dict[str, deque[tuple[float, float, float, float, float, float]]] = {}
        # age bucket (past 0) -> tier -> the same, of the estimates made that far into the wait
        self._aged: dict[int, dict[str, deque[tuple[float, float, float, float, float, float]]]] = {}

    def observe(self, tier: str, made_at: float, started_at: float, p90_model_s: float | None,
                p50_model_s: float | None = None, naive_s: float | None = None) -> None:
        """A job of `tier` first estimated at `made_at` (its model p90 `p90_model_s` seconds after that, its p50
        `p50_model_s`, the naive estimate `naive_s`) started at `started_at` (same clock). Unknown p90s and starts
        before the estimate teach nothing; an unknown p50 gives the p50 no ratio (NaN, skipped) and no blend, as an
        unknown naive estimate gives no blend."""
        o = self._row(made_at, started_at, p90_model_s, p50_model_s, naive_s)
        if o is not None:
            self._obs.setdefault(tier, deque(maxlen=self.keep)).append(o)

    def observe_aged(self, tier: str, age_s: float, made_at: float, started_at: float,
                     p90_model_s: float | None, p50_model_s: float | None = None,
                     naive_s: float | None = None) -> None:
        """A job of `tier` estimated `age_s` after it began to wait (at `made_at`, model p90 `p90_model_s` after
        that, its p50 `p50_model_s`, the naive estimate `naive_s`) started at `started_at`: one row for its age
        bucket's scales and blend. The first estimate (bucket 0) goes to ``observe``; here it is ignored."""
        b = age_bucket(age_s)
        o = self._row(made_at, started_at, p90_model_s, p50_model_s, naive_s) if b else None
        if o is not None:
            self._aged.setdefault(b, {}).setdefault(tier, deque(maxlen=self.keep)).append(o)

    def _row(self, made_at: float, started_at: float, p90_model_s: float | None, p50_model_s: float | None,
             naive_s: float | None) -> tuple[float, float, float, float, float, float] | None:
        """(started_at, p90 ratio, p50 ratio, waited, model p50 wait, naive wait); None where it teaches nothing."""
        if p90_model_s is None or not np.isfinite(p90_model_s) or not np.isfinite(started_at) \
                or started_at < made_at:
            return None
        waited = max(started_at - made_at, self.floor_s)
        r50 = float("nan") if p50_model_s is None else waited / max(float(p50_model_s), self.floor_s)
        nan = float("nan")
        return (float(started_at), waited / max(float(p90_model_s), self.floor_s), r50, float(started_at - made_at),
                nan if p50_model_s is None else float(p50_model_s), nan if naive_s is None else float(naive_s))

    def factors(self, now: float) -> Factors:
        """Each tier's p90 scale and p50 blend from the jobs that started by `now` only (see the module's
        docstring), for the first estimates and per age bucket."""
        out, blend = self._fit(self._obs, now, "started jobs")
        by_age: dict[int, dict[str, tuple[float, float, str]]] = {}
        blend_by_age: dict[int, dict[str, float]] = {}
        pooled: dict[str, list] = {}
        for tiers in self._aged.values():
            for t, d in tiers.items():
                pooled.setdefault(t, []).extend(d)
        for b, tiers in [*self._aged.items(), (LATER, pooled)]:
            at = "10 min or more into their wait" if b == LATER else f"{b // 60} min into their wait"
            sc, bl = self._fit(tiers, now, f"started jobs' estimates {at}")
            if sc:
                by_age[b] = sc
            if bl:
                blend_by_age[b] = bl
        return Factors(out, self.floor_s, blend, by_age, blend_by_age)

    def _fit(self, rows: Mapping[str, Sequence[tuple]], now: float,
             what: str) -> tuple[dict[str, tuple[float, float, str]], dict[str, float]]:
        """Per tier ("" every tier's together) the scales (with ``min_tier`` / ``min_all`` rows) and the blend
        weight (``min_blend``) from the `rows` of jobs started by `now`."""
        seen = {t: np.array([o[1:] for o in d if o[0] <= now], dtype=float).reshape(-1, 5)
                for t, d in rows.items()}
        everyone = np.concatenate([*seen.values()]) if seen else np.empty((0, 5))
        out: dict[str, tuple[float, float, str]] = {}
        blend: dict[str, float] = {}
        if len(everyone) >= self.min_all:
            out[""] = (*self._scales(everyone), f"every tier's {len(everyone)} {what}")
        for t, r in seen.items():
            if len(r) >= self.min_tier:
                out[t] = (*self._scales(r), f"the tier's {len(r)} {what}")
        for t, r in [("", everyone), *seen.items()]:
            w = self._blend(r)
            if w is not None:
                blend[t] = w
        return out, blend

    def _blend(self, r: np.ndarray) -> float | None:
        """The model's weight in the p50 (BLEND_WEIGHTS) whose blend with the naive estimate erred least (median
        absolute error) on the started jobs that have both; None with fewer than ``min_blend`` of them (jobs start
        in batches after one release, so a few dozen are a few events: a weight learned on them swings)."""
        ok = np.isfinite(r[:, 3]) & np.isfinite(r[:, 4])
        if ok.sum() < self.min_blend:
            return None
        waited, model, naive = r[ok, 2], r[ok, 3], r[ok, 4]
        errs = [float(np.median(np.abs(waited - (w * model + (1.0 - w) * naive)))) for w in BLEND_WEIGHTS]
        best = min(errs)
        if best > BLEND_GAIN * errs[BLEND_WEIGHTS.index(1.0)]:
            return 1.0
        return max(w for w, e in zip(BLEND_WEIGHTS, errs) if e <= best + 1e-9)

    def _scales(self, r: np.ndarray) -> tuple[float, float]:
        """The p90 scale (q-quantile of the p90 ratios) and the p50 scale (median of the p50 ratios; 1 without)."""
        r50 = r[:, 1][np.isfinite(r[:, 1])]
        return float(np.quantile(r[:, 0], self.q)), float(np.median(r50)) if r50.size else 1.0


def calibrate(etas: Sequence[Eta], tier_of: Mapping[str, str], factors: Factors, *,
              p50: bool = False, naive: Mapping[str, float | None] | None = None,
              age_s: Mapping[str, float] | None = None, aged_blend: bool = False) -> list[Eta]:
    """The estimates with each p90 scaled by its tier's factor (or every tier's) for its age (`age_s`: job id ->
    seconds since its first estimate; absent: 0), the model's own p90 kept in ``p90_model_s``; with `naive` (job id
    -> the naive estimate's wait, ``naive_waits``) each p50 blended with it by its tier's weight, the first
    estimates' (the model's own p50 kept in ``p50_model_s``), or with `aged_blend` its age bucket's; with `p50`, the
    p50 scaled by its age's median ratio too. `p50` and `aged_blend` are measured in the replay and off in the
    daemon (docs/eta.md). An unknown p50 or p90 stays unknown, as does a p50 with no naive estimate to blend with;
    with no factor the model's estimate stands."""
    out = []
    for e in etas:
        tier = tier_of.get(e.tenant, "")
        age = 0.0 if age_s is None else float(age_s.get(e.job_id, 0.0))
        f = factors.scale(tier, age)
        if e.p50_s is None or e.p90_s is None or f is None:
            out.append(dataclasses.replace(e, p90_model_s=e.p90_s, p50_model_s=e.p50_s))
            continue
        w = factors.weight(tier, age if aged_blend else 0.0)
        nv = None if naive is None else naive.get(e.job_id)
        p50_s = max(e.p50_s, factors.floor_s) * f[1] if p50 else e.p50_s
        blended = nv is not None and w < 1.0
        if blended:
            p50_s = w * p50_s + (1.0 - w) * float(nv)
        p90 = max(max(e.p90_s, factors.floor_s) * f[0], p50_s)
        if not blended:   # never below the model's own p90-to-p50 ratio over its p50 ("now" counts one cycle)
            p90 = max(p90, max(p50_s, factors.floor_s) * max(e.p90_s, factors.floor_s) / max(e.p50_s, factors.floor_s))
        what = f"p90 scaled x{f[0]:.2f}" + (f", p50 x{f[1]:.2f}" if p50 else "") + \
            (f", p50 {w:.2f} of the model's and {1 - w:.2f} of the queue's rate" if blended else "")
        out.append(dataclasses.replace(e, p50_s=p50_s, p90_s=p90, p90_model_s=e.p90_s, p50_model_s=e.p50_s,
                                       basis=f"{e.basis}; {what} by how late {f[2]} came"))
    return out
