"""Why a tenant's hold changed, in a few words (Plan.hold_why; the `held` plan_change event says it).

A tenant whose hold went 12 -> 0 GPUs with no word of why cannot act on it: was its job started, did its
forecast fall, is the cluster full? The plan already knows, per tenant, what it held for (the high tier's
forecast peak or its demand now, aging, a window, an operator's floor) and whether the capacity capped it; this
names the main cause of each change from those, once, in the plan that changed the hold (no event when it does
not change). Pure: arrays in, strings out. Every phrase is about the tenant's own work or the cluster as a whole,
never another tenant's name or job: a tenant reads its own events (daemon/web/views.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daemon.policy.state import Jobs
from daemon.text import plural


@dataclass(frozen=True)
class HoldBasis:
    """What the engine sized each tenant's hold on (per tenant arrays; see engine._holds)."""

    high: np.ndarray        # bool: high tier (held for its forecast peak or demand now)
    aged: np.ndarray        # bool: aging protects a job of it that waited past max_wait
    floor: np.ndarray       # an operator's floor_gpus (0: none)
    window: np.ndarray      # GPUs its recurring windows hold now (0: none)
    peak: np.ndarray        # the forecast's peak at `quantile` within `steps` (NaN: none, or the tenant is reactive)
    demand: np.ndarray      # running + queued GPUs now (NaN: no reading)
    want: np.ndarray        # the hold before it was fitted to the capacity
    quantile: float
    steps: int
    headroom: float = 0.0   # policy.headroom, added over the larger of peak and demand
    whole: np.ndarray | None = None   # GPUs of the whole jobs (or nodes) a hold is rounded up to (None: 1)


def _sizing(i: int, b: HoldBasis, grew: bool, after: int) -> str:
    """The high tier's hold follows the larger of its forecast peak and its demand now (reservation.targets), with
    the headroom, rounded up to whole jobs: where that lands above the figure named, the line says so (a forecast
    of one 8-GPU job read "rose to 8 GPUs" over a hold of 16, 5% headroom being a whole job more)."""
    peak, demand = float(b.peak[i]), float(b.demand[i])
    way = "rose" if grew else "fell"
    if np.isfinite(peak) and not (np.isfinite(demand) and demand > peak):
        why, base = (f"its forecast peak {way} to {peak:.3g} GPUs "
                     f"(p{round(b.quantile * 100)} within {plural(b.steps, 'step')})"), peak
    elif np.isfinite(demand):   # the plan knows the demand now, not what it was: no "rose" or "fell" here
        why, base = f"its demand now: {plural(int(round(demand)), 'GPU')} (running + queued)", demand
    else:
        return ""
    whole = 1 if b.whole is None else int(b.whole[i])
    extra = ([f"{b.headroom:.0%} headroom (policy.headroom)"] if b.headroom > 0 else []) + \
        ([f"in whole jobs of {plural(whole, 'GPU')}"] if whole > 1 else [])
    if after > np.ceil(base - 1e-9) and extra:
        why += f"; held {after}: {', '.join(extra)}"
    return why


AGED_JOB = {"started": "its aged job started (aging no longer protects it)",
            "queued": "its aged job waits for an aging slot (aged work is bounded: aging_max_share)",
            "gone": "its aged job left the queue (aging no longer protects it)"}


def cause(i: int, before: int, after: int, b: HoldBasis, was_aged: bool, aged_job: str,
          had_window: bool) -> str:
    """The main cause of tenant `i`'s hold going from `before` to `after` GPUs ("" when the plan cannot say).
    `aged_job`: where the jobs that had waited past max_wait by the last plan are now: "started" (one runs),
    "queued" (still waiting, not admitted this cycle) or "gone"."""
    grew = after > before
    if after > 0:
        if b.aged[i] and not b.high[i]:
            why = "aging protects its job that waited past max_wait"
        elif b.window[i] > 0 and not had_window:
            why = "its window's lead time began"
        elif b.window[i] > 0 and not b.high[i]:
            why = f"its window holds {plural(int(b.window[i]), 'GPU')}"
        elif b.high[i]:
            why = _sizing(i, b, grew, after)
        elif b.floor[i] > 0:
            why = f"an operator's floor of {plural(int(b.floor[i]), 'GPU')}"
        else:
            why = ""
        if after < b.want[i]:
            capped = f"the cluster is full (capped at {after} of {int(b.want[i])})"
            why = f"{why}; {capped}" if why and grew else capped
        return why
    if was_aged and not b.aged[i]:
        return AGED_JOB[aged_job]
    if had_window and b.window[i] <= 0:
        return "its window ended"
    if b.want[i] > 0:
        return "the cluster is full (capped at 0)"
    if b.high[i]:
        return _sizing(i, b, grew, after)
    return "it is no longer protected (not in the high tier, aged or under a floor)"


def hold_why(tenants: tuple[str, ...], prev: dict[str, int], res: np.ndarray, b: HoldBasis | None,
             aged_before: dict[str, str], aged_jobs: dict[str, str], jobs: Jobs,
             windows_before: dict[str, int]) -> dict[str, str]:
    """Per tenant whose hold differs from `prev` (the last plan's reservations), its main cause.

    `aged_before`: the tenants aging protected last cycle (PolicyMemory.aged_since); `aged_jobs`: the jobs that
    had gone over max_wait by then (PolicyMemory.aged_jobs): one of them running now is an aged job that started;
    `windows_before`: the GPUs each tenant's windows held in the last plan (Plan.window_holds)."""
    out: dict[str, str] = {}
    changed = [i for i, t in enumerate(tenants) if int(prev.get(t, 0)) != int(res[i])]
    if not changed or b is None:
        return out
    started: set[int] = set()
    queued: set[int] = set()
    if aged_jobs and len(jobs):
        was = np.isin(jobs.ids, list(aged_jobs))
        started = set(jobs.tenant[was & jobs.running].tolist())
        queued = set(jobs.tenant[was & ~jobs.running].tolist())
    for i in changed:
        t = tenants[i]
        where = "started" if i in started else "queued" if i in queued else "gone"
        why = cause(i, int(prev.get(t, 0)), int(res[i]), b, t in aged_before, where, windows_before.get(t, 0) > 0)
        if why:
            out[t] = why
    return out
