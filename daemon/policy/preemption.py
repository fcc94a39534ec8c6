"""Which low-priority jobs to preempt to clear capacity ahead of a predicted peak."""

from __future__ import annotations

import numpy as np

from daemon.policy.state import HELD_BY_POOL, PRIORITY, UNHELD, Jobs, Nodes


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


def choose_placed(jobs: Jobs, nodes: Nodes, need_jobs: np.ndarray, job_gpus: np.ndarray, protected: np.ndarray,
                  budget_gpus: int, budget_jobs: int, min_gpus: int = 1, pooled: np.ndarray | None = None,
                  cleared_for: list[int] | None = None) -> tuple[np.ndarray, int, int]:
    """Placement-aware choice: preempt only what makes room, on one node, for a protected tenant's job.

    ``need_jobs[t]`` jobs of ``job_gpus[t]`` GPUs each must find a place for protected tenant ``t`` (waiting
    now, or predicted). A place is a node held by nobody, by ``t``, or by the tier's pool when ``pooled[t]``;
    GPUs free or draining count first (no preemption), best fit, so whole nodes stay whole. For each job
    still without a place, a node is cleared: its cheapest low-priority jobs of unprotected tenants until the
    job fits there; nodes held for ``t`` (or its pool) first, because there the freed GPUs cannot be taken by
    anyone else while they drain and wait for the job; among those, the cheapest. GPUs freed on nodes where
    no waiting job fits are never preempted. Nothing is preempted when the jobs without a place ask fewer
    than ``min_gpus`` GPUs. Returns (job indices, jobs placed, jobs left without a place); ``cleared_for``, when
    given, receives the protected tenant each chosen job was preempted for, in the same order.
    """
    empty = np.empty(0, dtype=np.int64)
    need = np.asarray(need_jobs, dtype=np.int64).copy()
    if len(nodes) == 0 or not need.any():
        return empty, 0, int(need.sum())
    avail = (nodes.free + nodes.draining).astype(np.int64)
    avail[nodes.gpus <= 0] = 0
    held = nodes.held_by
    pooled = np.zeros(need.size, dtype=bool) if pooled is None else np.asarray(pooled, dtype=bool)

    def mine(h: np.ndarray, t: int) -> np.ndarray:
        """Held for tenant t: its own hold, or the pool it belongs to."""
        return (h == t) | ((h == HELD_BY_POOL) & pooled[t])

    gpus_of = np.asarray(job_gpus, dtype=np.int64)
    placed = 0
    # 1. free room first, tenant by tenant (largest jobs first): the tenant's own held nodes, then open ones
    for t in np.flatnonzero(need > 0)[np.argsort(-gpus_of[need > 0], kind="stable")]:
        g = gpus_of[t]
        elig = np.flatnonzero(((held == UNHELD) | mine(held, t)) & (avail >= g))
        if elig.size == 0:
            continue
        o = np.lexsort((avail[elig], ~mine(held[elig], t)))
        elig = elig[o]
        slots = avail[elig] // g
        cum = np.cumsum(slots)
        k = int(min(need[t], cum[-1]))
        if k:
            where = elig[np.searchsorted(cum, np.arange(k), side="right")]
            np.subtract.at(avail, where, g)
            need[t] -= k
            placed += k
    left = int(need.sum())
    if left == 0 or budget_gpus <= 0 or budget_jobs <= 0 or int((need * gpus_of).sum()) < min_gpus:
        return empty, placed, left
    # 2. preemption candidates: running low-priority jobs of unprotected tenants, by node, cheapest first
    node_of = nodes.index_of(jobs.node)
    cand = jobs.running & (jobs.priority == PRIORITY["low"]) & (node_of >= 0)
    if protected.size:
        cand &= ~protected[jobs.tenant]
    idx = np.flatnonzero(cand)
    if idx.size == 0:
        return empty, placed, left
    cost = jobs.gpus[idx] * jobs.runtime_s[idx]
    idx = idx[np.lexsort((jobs.runtime_s[idx], cost, node_of[idx]))]
    c_node = node_of[idx]
    c_g = jobs.gpus[idx].astype(np.int64)
    c_cost = (jobs.gpus[idx] * jobs.runtime_s[idx]).astype(float)
    starts = np.r_[0, np.flatnonzero(np.diff(c_node)) + 1]
    ends = np.r_[starts[1:], idx.size]
    g_nodes = c_node[starts]
    taken = np.zeros(idx.size, dtype=bool)
    chosen: list[np.ndarray] = []
    used_gpus = used_jobs = 0
    # one waiting job at a time (largest first); each round clears the cheapest node that then fits it
    order = np.flatnonzero(need > 0)[np.argsort(-gpus_of[need > 0], kind="stable")]
    for t in order:
        g = int(gpus_of[t])
        while need[t] > 0:
            fits = np.flatnonzero(((held == UNHELD) | mine(held, t)) & (avail >= g))  # room left by earlier rounds
            if fits.size:
                avail[fits[np.argmin(avail[fits])]] -= g
                need[t] -= 1
                placed += 1
                continue
            own = mine(held[g_nodes], t)
            elig = (held[g_nodes] == UNHELD) | own
            d = g - avail[g_nodes]                     # GPUs to clear on each node (> 0 here)
            cg = np.where(taken, 0, c_g)
            cum_g = np.cumsum(cg)
            cum_c = np.cumsum(np.where(taken, 0.0, c_cost))
            base_g = cum_g[starts] - cg[starts]
            base_c = cum_c[starts] - np.where(taken, 0.0, c_cost)[starts]
            pos = np.searchsorted(cum_g, base_g + d, side="left")   # last job to take on each node
            ok = elig & (d > 0) & (pos < ends)
            if not ok.any():
                break
            freed = np.where(ok, cum_g[np.minimum(pos, idx.size - 1)] - base_g, 0)
            n_jobs = np.where(ok, pos - starts + 1, 0)       # upper bound (taken ones inside count too)
            ok &= (used_gpus + freed <= budget_gpus) & (used_jobs + n_jobs <= budget_jobs)
            if not ok.any():
                break
            c = np.where(ok, cum_c[np.minimum(pos, idx.size - 1)] - base_c, np.inf)
            if (ok & own).any():  # a node held for t first: what it frees waits there for t's job
                c = np.where(own, c, np.inf)
            best = int(np.argmin(c))
            sl = np.arange(starts[best], pos[best] + 1)
            sl = sl[~taken[sl]]
            taken[sl] = True
            chosen.append(idx[sl])
            if cleared_for is not None:
                cleared_for.extend([int(t)] * int(sl.size))
            used_gpus += int(c_g[sl].sum())
            used_jobs += int(sl.size)
            avail[g_nodes[best]] += int(c_g[sl].sum()) - g
            need[t] -= 1
            placed += 1
    out = np.concatenate(chosen) if chosen else empty
    return out, placed, int(need.sum())
