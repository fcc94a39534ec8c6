"""Which low-priority jobs to preempt to clear capacity ahead of a predicted peak."""

from __future__ import annotations

import numpy as np

from daemon.cluster import PRIORITY, Jobs


def choose(jobs: Jobs, shortfall: int, protected_tenants: np.ndarray, budget_gpus: int,
           budget_jobs: int) -> np.ndarray:
    """Indices of the jobs to preempt, cheapest first, within both budgets.

    Cost is GPU-seconds of progress since the job (re)started, so a job that
    just started is taken before one that has been running for hours. Only
    running low-priority jobs of unprotected tenants are candidates: high and
    normal priority work is never touched.
    """
    if shortfall <= 0 or budget_gpus <= 0 or budget_jobs <= 0 or len(jobs) == 0:
        return np.empty(0, dtype=np.int64)
    cand = jobs.running & (jobs.priority == PRIORITY["low"])
    if protected_tenants.size:
        cand &= ~protected_tenants[jobs.tenant]
    idx = np.flatnonzero(cand)
    if idx.size == 0:
        return idx
    cost = jobs.gpus[idx] * jobs.runtime_s[idx]
    order = idx[np.lexsort((jobs.runtime_s[idx], cost))]
    gpus = jobs.gpus[order]
    cum = np.cumsum(gpus)
    take = ((cum - gpus) < shortfall) & (cum <= budget_gpus)
    take[budget_jobs:] = False
    # a prefix: stop at the first job that does not fit in the budget
    stop = np.flatnonzero(~take)
    n = int(stop[0]) if stop.size else take.size
    return order[:n]
