"""How many GPUs to hold for each protected tenant, and the high tier's guaranteed pool."""

from __future__ import annotations

import numpy as np

from daemon.policy.state import Jobs, Nodes

FOOTPRINT_MAX = 2   # a multi-node job's hold is counted at its whole nodes up to this many times its GPUs


def targets(peak: np.ndarray, demand: np.ndarray, previous: np.ndarray, headroom: float) -> np.ndarray:
    """What each tenant should hold by the end of the lead time.

    The forecast's peak is never allowed to undercut what the tenant asks for
    right now (running + queued): a forecast can add capacity, not take away a
    live request. A tenant with neither a forecast nor a reading keeps its
    previous reservation, because missing data is not zero demand.
    """
    known_demand = np.isfinite(demand)
    base = np.where(np.isfinite(peak), peak, np.where(known_demand, demand, np.nan))
    base = np.where(known_demand, np.fmax(base, demand), base)
    want = np.ceil(base * (1.0 + headroom) - 1e-9)
    return np.where(np.isfinite(want), want, previous)


def with_hysteresis(target: np.ndarray, previous: np.ndarray, band: float,
                    quantum: np.ndarray | float = 1.0) -> np.ndarray:
    """Grow at once (safety first); shrink only when the target is `band` below the next smaller hold in whole
    jobs of `quantum` GPUs (what is held, rounded up to whole jobs, less one job).

    Holds are rounded up to whole jobs after this (the engine), so a band on the GPUs alone lets a hold flap by a
    job each cycle: held 152 in jobs of 8, a target of 144 is 5.3% below and shrinks the hold to 144, a target of
    145 grows it back to 152 (issue 37). Measured against the next smaller whole-job hold, a shrink needs the
    target `band` below where the hold lands, so growing back needs the target to rise by that band again, as
    with 1-GPU jobs. This needs no memory beyond the hold itself (a shrink that waits K cycles would have to
    persist a count per tenant); it holds at most one job more than the band alone would. A band of 0 turns
    hysteresis off: the hold follows the target.
    """
    if band <= 0:
        return np.asarray(target, dtype=float).copy()
    q = np.maximum(np.asarray(quantum, dtype=float), 1.0)
    step_down = (np.ceil(previous / q - 1e-9) - 1.0) * q
    shrink = target < step_down * (1.0 - band)
    return np.where(target >= previous, target, np.where(shrink, target, previous))


def fit_to_capacity(res: np.ndarray, first: np.ndarray, capacity: int) -> np.ndarray:
    """Scale reservations so they fit: tenants in `first` are served before the others.

    Proportional shares, rounded by largest remainder, keep the sum at or below capacity in both groups
    and lose no GPU to rounding (a pool of 1 GPU for two high tenants asking 1 each still holds 1).
    """
    res = np.maximum(res, 0).astype(np.int64)
    out = res.copy()
    for group, room in ((first, capacity), (~first, None)):
        if room is None:
            room = capacity - int(out[first].sum())
        total = int(res[group].sum())
        if total > room:
            scale = max(room, 0) / total
            exact = res[group] * scale
            share = np.floor(exact).astype(np.int64)
            # largest remainder: what flooring lost goes back, one GPU each, to the largest fractions
            left = max(room, 0) - int(share.sum())
            if left > 0:
                share[np.argsort(-(exact - share), kind="stable")[:left]] += 1
            out[group] = share
    return out


def high_pool(capacity: int, reserve_share: float) -> int:
    return int(np.floor(capacity * reserve_share))


def largest_jobs(jobs: Jobs, mine: np.ndarray | None, n: int
                 ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Per tenant (of ``n``), the GPUs in all of its largest job among ``mine`` (1 without one): holds come in whole
    jobs of it; and the nodes that job asks (Slurm -N; the most, among its largest jobs), where one asks several
    (None: every job runs on one node): a place for it is that many nodes (preemption.choose_placed); and whether
    those are pods that may share a node (``Jobs.packed``: a Kubernetes gang; None where no such job is chosen). A
    job that asks no GPUs (a CPU job) is no size for a hold: a tenant with only those holds in GPUs (1), not in jobs
    of 0."""
    quantum, nodes, packed = np.ones(n), None, None
    if mine is None or not (mine := mine & (jobs.gpus > 0)).any():
        return quantum, nodes, packed
    t, g = jobs.tenant[mine], jobs.gpus[mine]
    k = None if jobs.nodes_asked is None else jobs.nodes_asked[mine]
    order = np.lexsort((g, t) if k is None else (k, g, t))   # a sort is far quicker than np.maximum.at here
    ts = t[order]
    last = np.r_[ts[1:] != ts[:-1], True]
    quantum[ts[last]] = g[order][last]
    if k is not None and (k > 1).any():
        nodes = np.ones(n, dtype=np.int64)
        nodes[ts[last]] = k[order][last]
        if jobs.packed is not None:
            p = np.asarray(jobs.packed[mine], dtype=bool)[order][last]
            if p.any():
                packed = np.zeros(n, dtype=bool)
                packed[ts[last]] = p
    return quantum, nodes, packed


def hold_footprint(quantum: np.ndarray, jobs: Jobs, mine: np.ndarray | None, nodes: Nodes | None) -> np.ndarray:
    """Per tenant, the GPUs a hold takes per job: its largest job's GPUs (``quantum``), or, for a job on several
    nodes (Slurm -N; not a Kubernetes gang, whose pods may share nodes: ``Jobs.packed``), a whole node per node it
    asks, the smallest node that has room for its GPUs per node. The scheduler's hold is whole nodes (Slurm reserves
    nodes): counted at its jobs' GPUs in all, a -N 2 x 4 job's hold was one 8-GPU node, where it cannot start, and a
    -N 16 x 1 job's sixteen nodes were counted as 16 GPUs, past the capacity fitting, the pool and aging_max_share
    (the actuator holds no more than the plan counts: ba3e553). A job whose whole nodes are more than
    ``FOOTPRINT_MAX`` times its GPUs (-N 16 --gres=gpu:1: 128 GPUs of nodes for 16) is counted at its GPUs: rounding
    a hold up to its nodes would hold eight times what it runs on; the actuator then holds whole nodes for those GPUs
    and says its shape does not fit."""
    out = quantum.copy()
    if mine is None or not mine.any():
        return out
    foot = job_footprint(jobs, nodes)
    np.maximum.at(out, jobs.tenant[mine], foot[mine].astype(float))
    return out


def job_footprint(jobs: Jobs, nodes: Nodes | None) -> np.ndarray:
    """Per job, the GPUs a hold for it takes (hold_footprint's rule, job by job): its GPUs, or for a job on several
    nodes (Slurm -N; not a Kubernetes gang) a whole node per node it asks, the smallest with room for its GPUs per
    node, up to ``FOOTPRINT_MAX`` times its GPUs. Aging's bound counts an admitted job so (aging.admit)."""
    out = jobs.gpus.astype(np.int64).copy()
    if jobs.nodes_asked is None or nodes is None or not len(nodes):
        return out
    multi = (jobs.nodes_asked > 1) & (jobs.gpus > 0)
    if jobs.packed is not None:   # a gang's pods may share nodes (Kubernetes): held at its GPUs, as a one-node job
        multi &= ~np.asarray(jobs.packed, dtype=bool)
    sizes = np.unique(nodes.gpus[nodes.gpus > 0])
    if not multi.any() or not sizes.size:
        return out
    asked = jobs.nodes_asked[multi]
    per = -(-jobs.gpus[multi] // asked)
    at = np.searchsorted(sizes, per)
    node = np.where(at < sizes.size, sizes[np.minimum(at, sizes.size - 1)], per)
    foot = asked * node
    out[multi] = np.where(foot <= FOOTPRINT_MAX * jobs.gpus[multi], foot, jobs.gpus[multi])
    return out
