"""What a preemption's reason says the GPUs were cleared for (daemon/policy/engine.py).

The preempted tenant reads the reason (notices, Slurm comments, Kubernetes Events), so it must not claim a forecast
where none was read: a protected tenant's need (the GPUs it asks to have cleared now) is its jobs waiting now, a
recurring window's GPUs, an operator's floor, or, for a high-tier tenant the plan acts on the forecast for, the
forecast beyond its waiting jobs. A tenant the skill gate plans reactively, an aged tenant, a floor and a window ask
only for what is known now. The split is the one the cost-aware rule weighs (engine._gate): only the high tier's
need beyond its waiting jobs is forecast. Pure.
"""

from __future__ import annotations

import numpy as np

NEEDS = ("waiting", "window", "floor", "forecast")
_WORDS = {"waiting": "jobs waiting now", "window": "recurring windows", "floor": "floors an operator set"}


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
    waiting = np.where(aged, rest, np.minimum(rest, waits))     # an aged tenant's hold is for its waiting jobs
    beyond = rest - waiting
    floor = np.where(floored & ~aged, beyond, 0.0)
    forecast = np.where(high & ~aged & ~floored, beyond, 0.0)
    got = {"waiting": waiting, "window": win, "floor": floor, "forecast": forecast}
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
