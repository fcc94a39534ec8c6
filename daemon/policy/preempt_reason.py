"""What a preemption's reason says the GPUs were cleared for (daemon/policy/engine.py).

The preempted tenant reads the reason (notices, Slurm comments, Kubernetes Events), so it must not claim a forecast
where none was read: a protected tenant's need (the GPUs it asks to have cleared now) is its jobs waiting now, a
recurring window's GPUs, an operator's floor, or, for a high-tier tenant the plan acts on the forecast for, the
forecast beyond its waiting jobs. A tenant the skill gate plans reactively, an aged tenant, a floor and a window ask
only for what is known now. The split is the one the cost-aware rule weighs (engine._gate): only the high tier's
need beyond its waiting jobs is forecast. Each job's reason is the need of the tenant it was cleared for (per_job),
not the plan's: a low tenant whose job made room for another's starving job (aging) reads that, not "forecast
peak" because the same plan also cleared for the high tier's forecast. Pure.
"""

from __future__ import annotations

import math

import numpy as np

from daemon.text import agree, plural

NEEDS = ("waiting", "aged", "window", "floor", "forecast")
# "aged": a tenant aging protects, its job waiting past policy.max_wait_steps; the preempted tenant learns its job made
# room for starving work (anti-starvation), not for the high tier
_WORDS = {"waiting": "jobs waiting now", "aged": "jobs waiting past max_wait (anti-starvation)",
          "window": "recurring windows", "floor": "floors an operator set"}


def needs(need: np.ndarray, pending: np.ndarray, quantum: np.ndarray, high: np.ndarray, aged: np.ndarray,
          floored: np.ndarray, window: np.ndarray | None, of: np.ndarray) -> tuple[str, ...]:
    """Which kinds of need (NEEDS, in that order) the tenants `of` (a mask) asked GPUs cleared for. `need`: GPUs per
    tenant to clear now, in whole jobs of `quantum` GPUs; `pending`: GPUs of its jobs waiting now (NaN: unknown,
    none); `window`: GPUs a window asks cleared now beyond what its tenant runs on its own nodes (None: no window)."""
    need = np.where(of, np.maximum(np.nan_to_num(need, nan=0.0), 0.0), 0.0)
    pending = np.nan_to_num(np.asarray(pending, dtype=float), nan=0.0)
    waits = np.ceil(pending / quantum - 1e-9) * quantum          # the waiting jobs, whole (as the need is rounded)
    win = np.zeros_like(need) if window is None else np.minimum(need, np.maximum(window, 0.0))
    rest = need - win
    starving = np.where(aged, rest, 0.0)                        # an aged tenant's hold is for its waiting jobs
    waiting = np.where(aged, 0.0, np.minimum(rest, waits))
    beyond = rest - waiting - starving
    floor = np.where(floored & ~aged, beyond, 0.0)
    forecast = np.where(high & ~aged & ~floored, beyond, 0.0)
    got = {"waiting": waiting, "aged": starving, "window": win, "floor": floor, "forecast": forecast}
    return tuple(k for k in NEEDS if float(got[k].sum()) > 0)


def cleared_for(kinds: tuple[str, ...], gpus_short: str | None, ahead: str) -> str:
    """The reason's 'what': `gpus_short` (e.g. '235 GPUs'; None when the free GPUs cover the GPUs short but are not
    on a node the protected job fits) cleared for `kinds` (needs()); `ahead`: 'ahead of forecast peak (p90 within 3
    steps)'. A need of the forecast alone (or none known) reads as it always did."""
    if set(kinds) <= {"forecast"}:
        return (f"to clear {gpus_short} {ahead} for protected tenants" if gpus_short is not None else
                f"to make room on one node for a protected tenant's job {ahead}: the free GPUs are not on a node it "
                "fits")
    words = [_WORDS.get(k) or ahead.replace("ahead of forecast peak", "forecast peak") for k in kinds]
    said = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    return (f"to clear {gpus_short} for protected tenants' {said}" if gpus_short is not None else
            f"to make room on one node for a protected tenant's job (for its {said}): the free GPUs are not on a "
            "node it fits")


def per_job(need: np.ndarray, pending: np.ndarray, quantum: np.ndarray, high: np.ndarray, aged: np.ndarray,
            floored: np.ndarray, window: np.ndarray | None, beneficiary: list[int] | None, protected: np.ndarray,
            short: int, ahead: str, n_jobs: int) -> list[str]:
    """The 'what' (cleared_for()) of each of `n_jobs` preempted jobs: of the tenant it was cleared for
    (`beneficiary`, one per job, from the placement-aware choice), so that a job cleared for an aged tenant's
    waiting job does not read "and forecast peak" because another job of the same plan was cleared for the high
    tier's forecast, nor the plan's GPUs short (`short`, 246 of them for the high tier) as if its 2-GPU job needed
    them: it says the GPUs that tenant asked cleared. Without `beneficiary` (a choice by GPU counts), the needs of all
    `protected` tenants and the plan's GPUs short, one 'what' for every job. `short` <= 0: the free GPUs cover the
    GPUs short but not on a node the job fits, said as such."""
    def what(of: np.ndarray, gpus: float) -> str:
        n = int(math.ceil(gpus - 1e-9))
        return cleared_for(needs(need, pending, quantum, high, aged, floored, window, of),
                           (f"{n} GPU" + ("" if n == 1 else "s")) if short > 0 and n > 0 else None, ahead)

    if beneficiary is None or len(beneficiary) != n_jobs:
        return [what(protected, short)] * n_jobs
    said: dict[int, str] = {}
    for t in set(beneficiary):
        of = np.zeros(len(protected), dtype=bool)
        of[t] = True
        said[t] = what(of, float(np.nan_to_num(need[t])))
    return [said[t] for t in beneficiary]


def no_place(left: int, smallest_job: int, share: float, capacity: int, window_s: float) -> str:
    """The note for protected jobs the placement found no room for. Where the preemption budget's whole bucket
    (``share`` of ``capacity`` GPUs, whole GPUs) is smaller than the smallest job needing room, that is why, and
    nothing else will change it: on a 32-GPU cluster 2% is 0 GPUs, so no 8-GPU job was ever preempted for, and the
    note said only "budget, candidates or topology" (a first-day walk on a small Kubernetes cluster)."""
    head = f"{plural(left, 'protected job')} {agree(left, 'has', 'have')} no place yet"
    bucket = int(math.floor(share * capacity + 1e-9))
    if 0 < smallest_job and bucket < smallest_job:
        need = math.ceil(smallest_job / max(capacity, 1) * 100)
        return (f"{head}: the preemption budget ({share:.0%} of {plural(capacity, 'GPU')}, policy.preempt_budget_share:"
                f" {plural(bucket, 'GPU')} per {window_s:g} s) is less than one {smallest_job}-GPU job, so nothing is "
                f"preempted for it; at least {need}% lets one through")
    return f"{head} (budget, candidates or topology)"
