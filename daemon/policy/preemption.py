"""Which low-priority jobs to preempt to clear capacity ahead of a predicted peak, and whether a preemption made
for forecast demand is worth what it loses (the cost-aware rule, ``policy.preempt_cost_aware``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daemon.policy.state import HELD_BY_POOL, PRIORITY, UNHELD, Jobs, Nodes


def loss_gpu_min(jobs: Jobs, drain_s: float, checkpoint_s: float, idx: np.ndarray | None = None) -> np.ndarray:
    """What preempting each job (or the jobs at ``idx``) costs, in GPU-minutes: its work since its last checkpoint
    (checkpoints every ``checkpoint_s`` from its (re)start, as the simulator books them) plus the drain, during
    which its GPUs serve nobody."""
    rt = jobs.runtime_s if idx is None else jobs.runtime_s[idx]
    g = jobs.gpus if idx is None else jobs.gpus[idx]
    since_ckpt = rt - checkpoint_s * np.floor(rt / checkpoint_s)   # np.mod, a few times faster on floats
    return g * (since_ckpt + drain_s) / 60.0


def worth_gpu_min(excess: np.ndarray, window: int, drain_steps: int, step_min: float) -> np.ndarray:
    """What clearing room for each forecast job is worth: the GPU-minutes of its demand the cleared GPUs serve.

    ``excess[r, i]``: GPUs the job of row ``r`` is forecast to use at step ``i + 1`` (0 to its size; NaN counts
    as 0: a step the forecast does not know cannot justify a preemption). The demand must arrive within
    ``window`` steps (no later than the drain of a preemption started now ends: ``window <= drain_steps``) and
    last, without a break, until the drain ends; it then counts for as long as it lasts without a break, from the
    step the drain ends (the cleared GPUs are free from step ``drain_steps``). A job forecast further ahead, or
    one whose rise falls back before the drain ends, is worth 0. Vectorised over rows (one per forecast job of
    every protected tenant).
    """
    y = np.asarray(excess, dtype=float)
    if np.isnan(y).any():
        y = np.nan_to_num(y, nan=0.0)
    rows, h = y.shape
    d = max(drain_steps, 1) - 1                          # index of the step the drain ends
    if rows == 0 or window <= 0 or d >= h:
        return np.zeros(rows)
    pos = y > 0
    # arrives at some step i < window and stays up from there to the drain's end: the last step without demand
    # up to the drain's end (-1: none) comes before the window's last step
    down = ~pos[:, : d + 1]
    last_down = np.where(down.any(axis=1), d - np.argmax(down[:, ::-1], axis=1), -1)
    arrives = last_down <= min(window, d + 1) - 2
    # from the drain's end, while it lasts: up to the first step without demand
    gone = ~pos[:, d:]
    end = np.where(gone.any(axis=1), np.argmax(gone, axis=1), h - d)
    served = np.arange(h - d)[None, :] < end[:, None]
    return np.where(arrives, np.einsum("ij,ij->i", y[:, d:], served) * step_min, 0.0)


def idle_of(jobs: Jobs, idx: np.ndarray) -> np.ndarray | None:
    """Which of the jobs at ``idx`` the job health step found idle or hung (``Jobs.idle``), or None when none is:
    then the order is the cost's alone, exactly as without health data."""
    if jobs.idle is None:
        return None
    m = np.asarray(jobs.idle[idx], dtype=bool)
    return m if m.any() else None


@dataclass(frozen=True)
class Gate:
    """The cost-aware rule's inputs for one plan. Per protected tenant, ``now_jobs`` of the jobs it needs room for
    are waiting now (never subject to the rule); each job beyond those is forecast, and room for tenant t's k-th
    forecast job is worth ``worth[first[t] + k]`` GPU-minutes (``worth_gpu_min``). Preempting a job costs
    ``loss_gpu_min`` with this drain and checkpoint interval. A node is cleared for a forecast job only when what
    its jobs lose is less than what that job is worth."""

    now_jobs: np.ndarray
    worth: np.ndarray       # per forecast job, tenant by tenant (``first[t]`` is where tenant t's start)
    first: np.ndarray
    drain_s: float
    checkpoint_s: float

    def loss(self, jobs: Jobs, idx: np.ndarray) -> np.ndarray:
        """GPU-minutes that preempting the jobs at ``idx`` loses (computed for the candidates only: a plan at
        50,000 jobs cannot spend a millisecond on the others)."""
        return loss_gpu_min(jobs, self.drain_s, self.checkpoint_s, idx)

    def worth_of(self, t: int, k: int) -> float:
        """What room for tenant t's k-th job (0-based, the waiting ones first) is worth; inf for a waiting job."""
        j = k - int(self.now_jobs[t])
        if j < 0:
            return float("inf")
        end = self.first[t + 1] if t + 1 < self.first.size else self.worth.size
        return float(self.worth[self.first[t] + j]) if self.first[t] + j < end else 0.0


def choose(jobs: Jobs, shortfall: int, protected_tenants: np.ndarray, budget_gpus: int,
           budget_jobs: int, gated: int = 0, worth_per_gpu: float = float("inf"),
           gate: Gate | None = None) -> np.ndarray:
    """Indices of the jobs to preempt, cheapest first, within both budgets.

    Cost is GPU-seconds of progress since the job (re)started, so a job that
    just started is taken before one that has been running for hours. Only
    running low-priority jobs of unprotected tenants are candidates: high and
    normal priority work is never touched. A candidate the health step found idle
    or hung (``Jobs.idle``) comes before every busy one (cheapest first among
    them): its GPUs do no work, so taking them loses the least; the budgets and
    the minimum run time (exempt jobs are not passed in) bind it as any other.

    The cost-aware rule without a per-node view: the last ``gated`` GPUs of the shortfall are for forecast demand
    worth ``worth_per_gpu`` GPU-minutes per GPU cleared; once the rest is covered, only jobs whose loss per GPU
    (``gate.loss``) is below that are taken for them.
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
    idle = idle_of(jobs, idx)
    order = idx[np.lexsort((jobs.runtime_s[idx], cost) if idle is None else (jobs.runtime_s[idx], cost, ~idle))]
    gpus = jobs.gpus[order]
    if gated > 0 and gate is not None:
        # the waiting demand first, from every candidate; the forecast's only from jobs that lose less than it is
        # worth. The candidates are weighed in chunks, cheapest first, until enough are kept to end the prefix taken
        # below (the shortfall or the job budget): at 50,000 jobs the rest need not be weighed
        cum = np.cumsum(gpus)
        first = int(np.searchsorted(cum - gpus, shortfall - gated, side="left"))
        parts, got_g, got_n = [order[:first]], int(gpus[:first].sum()), first
        for lo in range(first, order.size, 4096):
            if got_g >= shortfall or got_n >= budget_jobs:
                break
            chunk = order[lo:lo + 4096]
            g = jobs.gpus[chunk]
            chunk = chunk[gate.loss(jobs, chunk) < worth_per_gpu * g]
            parts.append(chunk)
            got_g += int(jobs.gpus[chunk].sum())
            got_n += chunk.size
        order = np.concatenate(parts)
        gpus = jobs.gpus[order]
    cum = np.cumsum(gpus)
    take = ((cum - gpus) < shortfall) & (cum <= budget_gpus)
    take[budget_jobs:] = False
    # a prefix: stop at the first job that does not fit in the budget
    stop = np.flatnonzero(~take)
    n = int(stop[0]) if stop.size else take.size
    return order[:n]


def never_fit(jobs: Jobs, protected: np.ndarray, capacity: int) -> np.ndarray:
    """Indices of the waiting jobs of ``protected`` tenants that ask more GPUs than ``capacity``, the whole cluster.
    Without a per-node view the cluster's GPUs are the only room there is, and such a job can never start in them:
    preempting for it loses work and helps nobody (with a node view, ``choose_placed`` finds no node it fits)."""
    if len(jobs) == 0 or not protected.any():
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(~jobs.running & protected[jobs.tenant] & (jobs.gpus > capacity))


def room(nodes: Nodes) -> np.ndarray:
    """GPUs per node free now or once what drains there has drained (0 on a node that is down)."""
    avail = (nodes.free + nodes.draining).astype(np.int64)
    avail[nodes.gpus <= 0] = 0
    return avail


def choose_placed(jobs: Jobs, nodes: Nodes, need_jobs: np.ndarray, job_gpus: np.ndarray, protected: np.ndarray,
                  budget_gpus: int, budget_jobs: int, min_gpus: int = 1, pooled: np.ndarray | None = None,
                  cleared_for: list[int] | None = None, gate: Gate | None = None,
                  refused: list[int] | None = None, takeable: np.ndarray | None = None,
                  avail: np.ndarray | None = None, job_nodes: np.ndarray | None = None,
                  job_packed: np.ndarray | None = None) -> tuple[np.ndarray, int, int]:
    """Placement-aware choice: preempt only what makes room, on one node, for a protected tenant's job.

    ``need_jobs[t]`` jobs of ``job_gpus[t]`` GPUs each must find a place for protected tenant ``t`` (waiting
    now, or predicted). A place is a node held by nobody, by ``t``, or by the tier's pool when ``pooled[t]``;
    GPUs free or draining count first (no preemption), best fit, so whole nodes stay whole. For each job
    still without a place, a node is cleared: its cheapest low-priority jobs of unprotected tenants until the
    job fits there; nodes held for ``t`` (or its pool) first, because there the freed GPUs cannot be taken by
    anyone else while they drain and wait for the job; among those, the cheapest. Jobs the health step found
    idle or hung (``Jobs.idle``) are the cheapest: on a node they are taken first, and the node chosen is the one
    whose clearing loses the fewest GPU-seconds of busy jobs (then the fewest in all). GPUs freed on nodes where
    no waiting job fits are never preempted. Nothing is preempted when the jobs without a place ask fewer
    than ``min_gpus`` GPUs. Returns (job indices, jobs placed, jobs left without a place); ``cleared_for``, when
    given, receives the protected tenant each chosen job was preempted for, in the same order.

    With a ``gate`` (the cost-aware rule), each tenant's jobs waiting now are placed first, and a node is cleared
    for one of its forecast jobs only where what the node's preempted jobs lose is less than that job is worth;
    where no node is, that job and the tenant's further forecast jobs (each worth no more) are refused, and
    ``refused`` receives the tenant once per job refused.

    ``takeable`` (per job): low-priority jobs that are candidates even though their tenant is protected: those on
    the nodes a window holds (its drain clears them, daemon/policy/windows.py; only the window's tenant may use
    those nodes, so only it gains from them).

    ``avail`` (per node, GPUs free or draining; ``room(nodes)``): the room to start from, updated in place with what
    this call places and frees, so that a second call for other jobs sees what the first took.

    ``job_nodes`` (per tenant, None: 1 each): the nodes each of its jobs asks (Slurm -N); such a job's place is that
    many distinct nodes with room for its GPUs per node (``job_gpus`` spread evenly, rounded up), all in one of the
    node sets a job may span (``_spans``), found whole or not at all (``_free_multi_all``, ``_clear_multi``): GPUs
    cleared on one node for a 2 x 4 job start nothing.

    ``job_packed`` (per tenant, None: none): its ``job_nodes`` are pods that may share a node (a Kubernetes gang: a
    Kueue Workload of k pods), not distinct nodes: its place is room for k pods of its GPUs per pod, bin-packed
    (fullest nodes first, several on one node where they fit), all in one of the node sets (``_spans``: Kueue
    gives a podSet's pods one flavor, and a hold is a flavor of its own), found whole or not at all
    (``_free_packed``, ``_clear_packed``): room cleared for 3 of a 4 x 8 gang's pods starts none of them.
    """
    empty = np.empty(0, dtype=np.int64)
    need = np.asarray(need_jobs, dtype=np.int64).copy()
    if len(nodes) == 0 or not need.any():
        return empty, 0, int(need.sum())
    avail = room(nodes) if avail is None else avail
    held = nodes.held_by
    pooled = np.zeros(need.size, dtype=bool) if pooled is None else np.asarray(pooled, dtype=bool)

    def mine(h: np.ndarray, t: int) -> np.ndarray:
        """Held for tenant t: its own hold, or the pool it belongs to."""
        return (h == t) | ((h == HELD_BY_POOL) & pooled[t])

    gpus_of = np.asarray(job_gpus, dtype=np.int64)
    k_of = np.maximum(np.ones(need.size, dtype=np.int64) if job_nodes is None else np.asarray(job_nodes, np.int64), 1)
    per_of = -(-gpus_of // k_of)              # GPUs per node asked: a one-node job's all
    packs = np.zeros(need.size, dtype=bool) if job_packed is None else np.asarray(job_packed, dtype=bool)
    placed = 0
    done = np.zeros(need.size, dtype=np.int64)  # jobs placed per tenant so far (the waiting ones come first)
    # 1. free room first, tenant by tenant (largest jobs first): the tenant's own held nodes, then open ones
    for t in np.flatnonzero(need > 0)[np.argsort(-gpus_of[need > 0], kind="stable")]:
        g = gpus_of[t]
        if k_of[t] > 1:   # jobs on several nodes: k nodes with room in one set each (a gang: room for k pods), or none
            spans = _spans(held, int(t), pooled[t])
            if packs[t]:
                got = 0
                while got < need[t] and _free_packed(avail, spans, int(per_of[t]), int(k_of[t])) is not None:
                    got += 1
            else:
                got = _free_multi_all(avail, spans, int(per_of[t]), int(k_of[t]), int(need[t]))
            need[t] -= got
            done[t] += got
            placed += got
            continue
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
            done[t] += k
            placed += k
    left = int(need.sum())
    if left == 0 or budget_gpus <= 0 or budget_jobs <= 0 or int((need * gpus_of).sum()) < min_gpus:
        return empty, placed, left
    # 2. preemption candidates: running low-priority jobs of unprotected tenants, by node, cheapest first. A job on
    # several nodes is a candidate on each (a part per node, Jobs.parts), at its whole cost: taken on one, it is
    # requeued whole and frees its GPUs on all of them (`clear`), counted once in the budgets
    cand = jobs.running & (jobs.priority == PRIORITY["low"])
    if protected.size:
        cand &= ~protected[jobs.tenant] | (False if takeable is None else np.asarray(takeable, dtype=bool))
    idx = np.flatnonzero(cand)
    p_pos, node_of, part_g = jobs.parts(nodes, idx)
    on = node_of >= 0
    idx, node_of, part_g = idx[p_pos[on]], node_of[on], part_g[on]
    if idx.size == 0:
        return empty, placed, left
    multi = jobs.on_nodes is not None and np.unique(idx).size < idx.size   # a job has parts on several nodes
    cost = jobs.gpus[idx] * jobs.runtime_s[idx]
    idle = idle_of(jobs, idx)
    o = np.lexsort((jobs.runtime_s[idx], cost, node_of) if idle is None
                   else (jobs.runtime_s[idx], cost, ~idle, node_of))
    idx = idx[o]
    c_idle = None if idle is None else np.asarray(jobs.idle[idx], dtype=bool)
    c_node = node_of[o]
    c_g = part_g[o].astype(np.int64)      # GPUs freed on its node; the budget counts the job's in all (c_all)
    c_all = jobs.gpus[idx].astype(np.int64)
    c_cost = (jobs.gpus[idx] * jobs.runtime_s[idx]).astype(float)
    c_loss = gate.loss(jobs, idx) if gate is not None else None
    starts = np.r_[0, np.flatnonzero(np.diff(c_node)) + 1]
    ends = np.r_[starts[1:], idx.size]
    g_nodes = c_node[starts]
    taken = np.zeros(idx.size, dtype=bool)
    chosen: list[np.ndarray] = []
    used_gpus = used_jobs = 0

    def clear(b: int, last: int, t: int, g: int) -> tuple[int, int]:
        """Preempt, for tenant t, the candidates not yet taken on node ``b`` (of ``g_nodes``) up to ``last``, where
        a part of ``g`` GPUs then starts; (GPUs, jobs) taken."""
        sl = np.arange(starts[b], last + 1)
        sl = sl[~taken[sl]]
        taken[sl] = True
        chosen.append(idx[sl])
        if cleared_for is not None:
            cleared_for.extend([t] * int(sl.size))
        freed = int(c_g[sl].sum())
        avail[g_nodes[b]] += freed - g
        if multi:   # the same jobs' parts on their other nodes: freed there too, candidates no more
            sib = np.flatnonzero(~taken & np.isin(idx, idx[sl]))
            taken[sib] = True
            np.add.at(avail, c_node[sib], c_g[sib])
            freed += int(c_g[sib].sum())
        return freed, int(sl.size)

    # one waiting job at a time (largest first); each round clears the cheapest node that then fits it
    order = np.flatnonzero(need > 0)[np.argsort(-gpus_of[need > 0], kind="stable")]
    for t in order:
        g = int(gpus_of[t])
        if k_of[t] > 1:   # a job on several nodes: all its nodes found, or none cleared
            g, spans = int(per_of[t]), _spans(held, int(t), pooled[t])
        while need[t] > 0 and k_of[t] > 1 and packs[t]:   # a gang's k pods: room for all, or none cleared
            if _free_packed(avail, spans, g, int(k_of[t])) is None:
                worth = float("inf") if c_loss is None else gate.worth_of(int(t), int(done[t]))
                after, parts, no = _clear_packed(avail, spans, g, int(k_of[t]), (starts, ends, g_nodes), taken,
                                                 (c_g, c_cost, c_loss, c_idle), (budget_gpus - used_gpus,
                                                                                 budget_jobs - used_jobs), worth)
                if after is None:
                    if no and refused is not None:
                        refused.extend([int(t)] * int(need[t]))
                    break
                avail[:] = after
                for sl in parts:
                    taken[sl] = True
                    chosen.append(idx[sl])
                    if cleared_for is not None:
                        cleared_for.extend([int(t)] * int(sl.size))
                    used_gpus, used_jobs = used_gpus + int(c_g[sl].sum()), used_jobs + int(sl.size)
            need[t] -= 1
            done[t] += 1
            placed += 1
        while need[t] > 0 and k_of[t] > 1 and not packs[t]:
            if _free_multi(avail, spans, g, int(k_of[t])) is None:
                worth = float("inf") if c_loss is None else gate.worth_of(int(t), int(done[t]))
                fit, pick, at, no = _clear_multi(avail, spans, g, int(k_of[t]), (starts, ends, g_nodes), taken,
                                                 (c_g, c_cost, c_loss, c_idle), (budget_gpus - used_gpus,
                                                                                 budget_jobs - used_jobs), worth,
                                                 (idx, c_all) if multi else None)
                if fit is None:
                    if no and refused is not None:  # not worth it on any nodes (nor the further forecast jobs)
                        refused.extend([int(t)] * int(need[t]))
                    break
                avail[fit] -= g
                for b, p in zip(pick.tolist(), at.tolist()):
                    gpus, n_taken = clear(b, p, int(t), g)
                    used_gpus, used_jobs = used_gpus + gpus, used_jobs + n_taken
            need[t] -= 1
            done[t] += 1
            placed += 1
        while need[t] > 0 and k_of[t] == 1:
            fits = np.flatnonzero(((held == UNHELD) | mine(held, t)) & (avail >= g))  # room left by earlier rounds
            if fits.size:
                avail[fits[np.argmin(avail[fits])]] -= g
                need[t] -= 1
                done[t] += 1
                placed += 1
                continue
            if used_gpus >= budget_gpus or used_jobs >= budget_jobs:
                break   # no node can be cleared within the budgets: no pass over the candidates per tenant
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
            if multi:   # the budget: a job on several nodes frees its GPUs on all of them
                freed = np.where(ok, _upto(c_all, taken, starts, np.minimum(pos, idx.size - 1)), 0)
            n_jobs = np.where(ok, pos - starts + 1, 0)       # upper bound (taken ones inside count too)
            ok &= (used_gpus + freed <= budget_gpus) & (used_jobs + n_jobs <= budget_jobs)
            if not ok.any():
                break
            if c_loss is not None and (worth := gate.worth_of(int(t), int(done[t]))) < np.inf:
                lost = np.where(taken, 0.0, c_loss)
                cum_l = np.cumsum(lost)
                node_loss = cum_l[np.minimum(pos, idx.size - 1)] - (cum_l[starts] - lost[starts])
                ok &= node_loss < worth
                if not ok.any():  # not worth it here, nor for the tenant's further forecast jobs (worth no more)
                    if refused is not None:
                        refused.extend([int(t)] * int(need[t]))
                    break
            last = np.minimum(pos, idx.size - 1)
            c = np.where(ok, cum_c[last] - base_c, np.inf)
            if (ok & own).any():  # a node held for t first: what it frees waits there for t's job
                # and its own hold (a window's, held apart from its pool) before the pool's, which the pool's
                # other tenants may take first
                alone = held[g_nodes] == t
                c = np.where(alone if (ok & alone).any() else own, c, np.inf)
            if c_idle is None:
                best = int(np.argmin(c))
            else:  # the fewest GPU-seconds of busy jobs lost first; then the fewest in all
                busy = np.where(taken | c_idle, 0.0, c_cost)
                cum_b = np.cumsum(busy)
                cb = np.where(np.isfinite(c), cum_b[last] - (cum_b[starts] - busy[starts]), np.inf)
                best = int(np.lexsort((c, cb))[0])
            gpus, n_taken = clear(best, int(pos[best]), int(t), g)
            used_gpus, used_jobs = used_gpus + gpus, used_jobs + n_taken
            need[t] -= 1
            done[t] += 1
            placed += 1
    out = np.concatenate(chosen) if chosen else empty
    return out, placed, int(need.sum())


def _spans(held: np.ndarray, t: int, pooled_t: bool) -> list[np.ndarray]:
    """The sets of nodes one job on several nodes may span, in the order they are tried: those held for tenant t
    alone, its pool's (when it is pooled), those nobody holds. Slurm starts a job inside one reservation or outside
    all of them, never across: one node of t's hold and one unheld node start no -N 2 job."""
    out = [held == t]
    if pooled_t:
        out.append(held == HELD_BY_POOL)
    return out + [held == UNHELD]


def _free_multi(avail: np.ndarray, spans: list[np.ndarray], g: int, k: int) -> np.ndarray | None:
    """Place one job of ``k`` nodes of ``g`` GPUs each in free room (no preemption): the first of ``spans`` with k
    nodes that have room, the k fullest of them (best fit, so whole nodes stay whole); ``avail`` is updated. None
    where no span has k such nodes (nothing is taken)."""
    for span in spans:
        fit = np.flatnonzero(span & (avail >= g))
        if fit.size >= k:
            fit = fit[np.argsort(avail[fit], kind="stable")[:k]]
            avail[fit] -= g
            return fit
    return None


def _free_multi_all(avail: np.ndarray, spans: list[np.ndarray], g: int, k: int, need: int) -> int:
    """``_free_multi`` for up to ``need`` jobs, one after another, as that places them (the same nodes), without a
    pass over every node per job: a tenant's 20,000 waiting -N 2 jobs in free room took 2 s over 10,000 nodes, one
    of a single node none. A span's nodes with room, by (room, index), are taken k at a time from the front: the k
    taken keep their order and stay before every other (each loses g), so the front k are taken again until one
    has no room left, and a set whose nodes run out before k is never tried again (room only shrinks here).
    ``avail`` is updated; returns the jobs placed."""
    got = 0
    for span in spans:
        fit = np.flatnonzero(span & (avail >= g))
        if fit.size < k:
            continue
        if g <= 0:                  # a job of no GPUs takes no room: all of them fit here
            return need
        order = fit[np.argsort(avail[fit], kind="stable")]
        front, at = order[:k], k
        while got < need:
            r = min(int((avail[front] // g).min()), need - got)   # rounds until the first of the k runs out
            avail[front] -= r * g
            got += r
            front = front[avail[front] >= g]
            add = k - front.size
            if at + add > order.size:
                break
            front, at = np.r_[front, order[at:at + add]], at + add
        if got >= need:
            break
    return got


def _clear_multi(avail: np.ndarray, spans: list[np.ndarray], g: int, k: int, groups: tuple, taken: np.ndarray,
                 cols: tuple, left: tuple[int, int], worth: float, whole: tuple | None = None
                 ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, bool]:
    """Where to clear room for one job of ``k`` nodes of ``g`` GPUs each: in the first of ``spans`` where it can
    be, its nodes with room as they are and ``m`` more (k less those) cleared, each of its cheapest candidates until
    the part fits (choose_placed's rule for one node, per node). The m nodes are the cheapest (the fewest
    GPU-seconds of busy jobs, then in all) whose clearing together fits the GPUs and jobs left of the budgets
    (``left``) and loses less than the job is worth (``worth``; the loss of all the nodes it clears); where the m
    cheapest do not, the m freeing the fewest GPUs, then jobs, then losing the least. ``groups``: the candidate
    nodes' (starts, ends, node); ``cols``: per candidate (GPUs, GPU-seconds, loss or None, idle or None).

    Returns (nodes placed on as they are, positions in ``groups`` of the nodes to clear, the last candidate taken on
    each, False); (None, .., .., refused) where no span has all k: nothing is cleared for it, and ``refused`` says
    that a span had them within the budgets but even its least-losing m lose what the job is worth or more."""
    starts, ends, g_nodes = groups
    c_g, c_cost, c_loss, c_idle = cols
    none = None, np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), False
    d = g - avail[g_nodes]                                  # GPUs to clear on each node
    # no span with nodes enough to clear (-N 20,000 on 10,000 nodes), or no budget left: no pass over the
    # candidates (a plan of 1,000 such tenants spent seconds on them)
    if min(left) <= 0 or not any(np.count_nonzero(span[g_nodes] & (d > 0)) >= k - np.count_nonzero(span & (avail >= g))
                                 for span in spans):
        return none
    n = taken.size
    cg = np.where(taken, 0, c_g)
    cum_g = np.cumsum(cg)
    pos = np.searchsorted(cum_g, cum_g[starts] - cg[starts] + d, side="left")
    last = np.minimum(pos, n - 1)

    def upto(v: np.ndarray) -> np.ndarray:   # per node, the sum of v over its untaken candidates up to the last
        return _upto(v, taken, starts, last)

    freed, jobs = upto(c_g), upto(np.ones(n, dtype=np.int64))
    cost = upto(c_cost)
    busy = cost if c_idle is None else upto(np.where(c_idle, 0.0, c_cost))
    loss = np.zeros(g_nodes.size) if c_loss is None else upto(c_loss)
    refused = False
    for span in spans:
        fit = np.flatnonzero(span & (avail >= g))
        m = k - fit.size
        at = np.flatnonzero(span[g_nodes] & (d > 0) & (pos < ends) & (freed <= left[0]) & (jobs <= left[1]))
        if m <= 0 or at.size < m:   # m <= 0: placed in free room before this is called
            continue
        if np.sort(freed[at])[:m].sum() > left[0] or np.sort(jobs[at])[:m].sum() > left[1]:
            continue                # no m of them fit the budgets
        if np.sort(loss[at])[:m].sum() >= worth:
            refused = True          # no m of them lose less than the job is worth
            continue
        for key in ((cost, busy), (cost, jobs, freed), (cost, freed, jobs), (cost, loss)):
            pick = at[np.lexsort(tuple(x[at] for x in key))[:m]]
            if _in_all(pick, freed, jobs, loss, (starts, last, taken, c_loss), whole, left, worth):
                return fit, pick, pos[pick], False
        if whole is not None:   # a low job on several of them frees them together: its nodes first (a few tries)
            for b0 in at[np.lexsort((cost[at], busy[at]))][:8].tolist():
                sel = np.arange(starts[b0], last[b0] + 1)
                same = np.flatnonzero(np.isin(whole[0], whole[0][sel[~taken[sel]]]) & ~taken)
                with_it = np.isin(at, np.searchsorted(starts, same, side="right") - 1)
                rest = at[np.lexsort((cost[at], busy[at], ~with_it, at != b0))]
                pick = rest[:m]
                if _in_all(pick, freed, jobs, loss, (starts, last, taken, c_loss), whole, left, worth):
                    return fit, pick, pos[pick], False
    return none[:3] + (refused,)


def _in_all(pick: np.ndarray, freed: np.ndarray, jobs: np.ndarray, loss: np.ndarray, at: tuple,
            whole: tuple | None, left: tuple[int, int], worth: float) -> bool:
    """Whether clearing the nodes ``pick`` (of _clear_multi's) fits the budgets left and loses less than ``worth``.
    Per node sums where every candidate is a job on one node; with ``whole`` (per candidate, its job's index and
    GPUs in all: a job on several nodes has a part on each), each job once, at its GPUs in all: a low -N 2 job
    cleared on one node frees its other node too, and counted at its part there a pick took past the budget."""
    if whole is None:
        return bool(freed[pick].sum() <= left[0] and jobs[pick].sum() <= left[1] and loss[pick].sum() < worth)
    starts, last, taken, c_loss = at
    sel = np.concatenate([np.arange(starts[b], last[b] + 1) for b in pick.tolist()])
    sel = sel[~taken[sel]]
    _, one = np.unique(whole[0][sel], return_index=True)
    sel = sel[one]
    lost = 0.0 if c_loss is None else float(c_loss[sel].sum())
    return bool(whole[1][sel].sum() <= left[0] and sel.size <= left[1] and lost < worth)


def _free_packed(avail: np.ndarray, spans: list[np.ndarray], g: int, k: int) -> np.ndarray | None:
    """Place one gang of ``k`` pods of ``g`` GPUs each in free room (no preemption), several on one node where they
    fit: the first of ``spans`` with room for all k, its fullest nodes first (best fit, so whole nodes stay whole);
    ``avail`` is updated. None where no span has room for k (nothing is taken)."""
    for span in spans:
        fit = np.flatnonzero(span & (avail >= g))
        fit = fit[np.argsort(avail[fit], kind="stable")]
        cum = np.cumsum(avail[fit] // g)
        if cum.size and cum[-1] >= k:
            where = fit[np.searchsorted(cum, np.arange(k), side="right")]
            np.subtract.at(avail, where, g)
            return where
    return None


def _clear_packed(avail: np.ndarray, spans: list[np.ndarray], g: int, k: int, groups: tuple, taken: np.ndarray,
                  cols: tuple, left: tuple[int, int], worth: float
                  ) -> tuple[np.ndarray | None, list[np.ndarray], bool]:
    """Where to clear room for one gang of ``k`` pods of ``g`` GPUs each (several may share a node): in the first
    of ``spans`` where all k find room, pod by pod, each in room as it is (the fullest node with room) or else on
    the node whose cheapest candidates, cleared until the pod fits, lose the fewest GPU-seconds of busy jobs (then
    in all): choose_placed's rule for a one-node job, per pod, so a node cleared for one pod takes the next where
    it fits. Within the GPUs and jobs left of the budgets (``left``), and losing less in all than the gang is worth
    (``worth``). ``groups`` and ``cols`` as _clear_multi's.

    Returns (the room per node once the gang is placed, the candidates to preempt (positions, one array per node
    cleared), False); (None, [], refused) where no span has room for all k: nothing is cleared for it, and
    ``refused`` says that a span had it within the budgets but what it loses is what the gang is worth or more."""
    starts, ends, g_nodes = groups
    c_g, c_cost, c_loss, c_idle = cols
    n = taken.size
    refused = False
    for span in spans:
        room, tk = avail.copy(), taken.copy()
        parts: list[np.ndarray] = []
        got_g = got_j = 0
        lost = 0.0
        for _ in range(k):
            fits = np.flatnonzero(span & (room >= g))
            if fits.size:
                room[fits[np.argmin(room[fits])]] -= g
                continue
            cg = np.where(tk, 0, c_g)
            cum_g = np.cumsum(cg)
            d = g - room[g_nodes]
            pos = np.searchsorted(cum_g, cum_g[starts] - cg[starts] + d, side="left")
            last = np.minimum(pos, n - 1)
            freed, jobs = _upto(c_g, tk, starts, last), _upto(np.ones(n, dtype=np.int64), tk, starts, last)
            ok = span[g_nodes] & (d > 0) & (pos < ends) & (got_g + freed <= left[0]) & (got_j + jobs <= left[1])
            if not ok.any():
                break
            cost = np.where(ok, _upto(c_cost, tk, starts, last), np.inf)
            busy = cost if c_idle is None else np.where(ok, _upto(np.where(c_idle, 0.0, c_cost), tk, starts, last),
                                                        np.inf)
            b = int(np.lexsort((cost, busy))[0])
            sl = np.arange(starts[b], int(pos[b]) + 1)
            sl = sl[~tk[sl]]
            tk[sl] = True
            parts.append(sl)
            got_g, got_j = got_g + int(freed[b]), got_j + int(jobs[b])
            lost += 0.0 if c_loss is None else float(c_loss[sl].sum())
            room[g_nodes[b]] += int(freed[b]) - g
        else:
            if lost < worth:
                return room, parts, False
            refused = True
    return None, [], refused


def _upto(v: np.ndarray, taken: np.ndarray, starts: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Per candidate node (its candidates from ``starts``), ``v`` summed over those not ``taken`` up to ``last``."""
    v = np.where(taken, 0, v)
    cum = np.cumsum(v)
    return cum[last] - (cum[starts] - v[starts])
