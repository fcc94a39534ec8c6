"""When will a pending job start? A p50 and a p90 start time for every pending job (issue 39, item 3).

Kueue's visibility API gives a queue position and no wait; Slurm's ``squeue --start`` only what the backfill
scheduler derives from time limits. The daemon also knows the holds its plan places and the forecast of
higher-priority demand, so it can say more, and say how sure it is.

The model is meant to be explained in one paragraph to a tenant:

1. GPUs sit in pools: per GPU type, per holder (nobody, a tenant's hold, the high tier's pooled hold). GPUs held
   for another tenant are never free for this job.
2. Each running job releases its GPUs into its node's pool at its expected end: the time limit less the time run
   (Slurm) when known, or else the quantile of the remaining run of its tenant's finished jobs that ran at least
   as long (``RunLengths``, learned from history). The p50 estimate has every job give back its GPUs in five equal
   parts at its remaining run's 10th to 90th percentiles (P50_LEVELS: its expected release curve), the p90
   estimate every job's 90th-percentile end.
3. Higher tiers' forecast growth (GPUs above what they ask now and hold) is served first: it eats free unheld GPUs
   as they appear before any pending job of a lower tier.
4. Pending jobs are served in the scheduler's order (high; normal and aged low; low; then longest-waiting first,
   as the simulator and Slurm's priority order), each taking the first accepted type with room, at the first
   release after which it fits. A job started in this simulation releases its GPUs again after its tenant's
   unconditional run-length quantile. A job that asks k nodes (Slurm -N k) fits only where k distinct nodes it
   may use each have its GPUs per node free (4 + 4 on two nodes starts a -N 2 --gres=gpu:4 job; 8 on one does
   not; Slurm's --gpus=6 -N 4 fits where 4 nodes have one free each and 6 together, as Slurm fills them); one-node
   jobs fit in their pools' free GPUs, as always.

The p90 this model gives is then calibrated on how late the jobs that already started came against theirs
(daemon/policy/eta_calibration.py): the model cannot see work that arrives after the estimate.

A job that never fits within what is known is ``unknown`` (with why), never a guess: running jobs with neither a
time limit nor a tenant history give no release time.

Pure: plain data in, plain data out; the service feeds ``RunLengths`` each cycle and shows the result.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from daemon.policy.state import HELD_BY_POOL, PRIORITY, UNHELD, ClusterState

QUANTILES = (0.5, 0.9)
# an estimate written on a job (Slurm's AdminComment, a Kueue Workload's annotations) is rewritten only when a side
# moved this much or became known or unknown: a user sees a stable promise, and the scheduler is not written to
# every cycle
REWRITE_S = 300.0
# On a big cluster, releases this close together are taken as one, at the last of them: the queue is rescanned
# once per minute of simulated time, not once per running job's end. Estimates are shown to the minute and a job
# starts at a cycle (60 s) anyway; a start is at most this much late, never early. Without it, 1,000 tenants with
# 38,000 running jobs and 5,000 pending took 58 s per estimate (bench/eta_scale_bench.py). Below EXACT_BELOW running
# jobs the releases are taken one by one (cheap there): on the synthetic replay (a few hundred jobs) the minute's
# batching made the p50 a minute later and its error 0.60 of the naive estimate's instead of 0.50
RESOLUTION_S = 60.0
EXACT_BELOW = 2000
# the p50's releases: each running job gives back its GPUs in equal parts at these quantiles of its remaining run
# (its expected release curve), not all of them at its median end. Why: a job waits for the first few of many ends,
# and the first of N ends comes well before any one's median (with N jobs of one tenant alike, every median end is
# the same minute, and the model's p50 said all N end then); on the Helios replay the jobs at the head of the queue
# started a median 10-28 min before that p50 (docs/eta.md). The p90 keeps each job's 90th-percentile end
P50_LEVELS = (0.1, 0.3, 0.5, 0.7, 0.9)
RATE_WINDOW_S = 3600.0   # the naive estimate's "recent" (FreedRate): the GPUs freed over the last hour
ANY = ""   # the GPU type of every node in a one-model cluster


class RunLengths:
    """Per tenant, the run lengths (seconds) of its last ``keep`` finished jobs: the basis of a running job's
    expected end where no time limit gives one. Small and pure: the caller says which jobs finished."""

    def __init__(self, keep: int = 500, min_samples: int = 5) -> None:
        self.keep, self.min_samples = int(keep), int(min_samples)
        self._runs: dict[str, deque[float]] = {}
        self._sorted: dict[str, np.ndarray] = {}

    def observe(self, tenant: str, run_s: float) -> None:
        """One finished job of `tenant` ran `run_s` seconds (a preempted or requeued job is not finished)."""
        if not np.isfinite(run_s) or run_s < 0:
            return
        self._runs.setdefault(tenant, deque(maxlen=self.keep)).append(float(run_s))
        self._sorted.pop(tenant, None)

    def samples(self, tenant: str) -> int:
        return len(self._runs.get(tenant, ()))

    def _arr(self, tenant: str) -> np.ndarray | None:
        runs = self._runs.get(tenant)
        if runs is None or len(runs) < self.min_samples:
            return None
        a = self._sorted.get(tenant)
        if a is None:
            a = self._sorted[tenant] = np.sort(np.fromiter(runs, dtype=float))
        return a

    def remaining(self, tenant: str, elapsed_s: float, q: float) -> float | None:
        """The q-quantile of the rest of a run that has lasted `elapsed_s`: among the tenant's finished runs that
        lasted at least as long, q of them ended within this much more. None without ``min_samples`` runs, or when
        no finished run lasted that long (the job is past anything seen: no basis)."""
        v = float(self.remaining_many(tenant, np.array([float(elapsed_s)]), q)[0])
        return None if np.isnan(v) else v

    def usual(self, tenant: str, q: float) -> float | None:
        """`remaining` of a run not started yet (the q-quantile of all its tenant's runs), without array overhead:
        asked once per tenant per estimate, for the jobs the estimate starts."""
        a = self._arr(tenant)
        if a is None:
            return None
        pos = q * (a.shape[0] - 1)
        i = int(pos)
        v = float(a[i]) if i + 1 >= a.shape[0] else float(a[i]) + (pos - i) * float(a[i + 1] - a[i])
        return max(v, 0.0)

    def remaining_many(self, tenant: str, elapsed_s: np.ndarray, q: float | np.ndarray) -> np.ndarray:
        """`remaining` for many runs of one tenant at once (NaN where it is None): a big cluster has tens of
        thousands of running jobs, each asked every cycle for each quantile. `q` an array of quantiles: one row each
        (the p50's levels, P50_LEVELS, in one pass)."""
        e = np.asarray(elapsed_s, dtype=float)
        a = self._arr(tenant)
        q = np.asarray(q, dtype=float).reshape(-1, *([1] * e.ndim)) if np.ndim(q) else q
        if a is None:
            return np.full(np.broadcast_shapes(np.shape(q), e.shape), np.nan)
        lo = np.searchsorted(a, e, side="left")
        n = a.shape[0] - lo
        ok = n > 0
        # np.quantile's default (linear) on a[lo:], written out per run
        pos = q * np.maximum(n - 1, 0)
        i = pos.astype(np.int64)
        at = np.minimum(lo + i, a.shape[0] - 1)
        nxt = np.minimum(at + 1, a.shape[0] - 1)
        v = np.where(i + 1 >= n, a[at], a[at] + (pos - i) * (a[nxt] - a[at]))
        return np.where(ok, np.maximum(v - e, 0.0), np.nan)

    def to_dict(self) -> dict[str, list[float]]:
        return {t: list(r) for t, r in self._runs.items()}


@dataclass(frozen=True)
class Eta:
    """A pending job's start estimate: seconds after the snapshot (None = unknown) and why."""

    job_id: str
    tenant: str
    gpus: int
    position: int            # 0-based place in the scheduler's order among pending jobs
    p50_s: float | None
    p90_s: float | None
    basis: str               # what the estimate rests on, or why it is unknown
    p90_model_s: float | None = None   # the release model's own p90 before calibration (eta_calibration.py)
    p50_model_s: float | None = None   # and its own p50, before the blend with the naive estimate

    def to_dict(self) -> dict:
        return {"job_id": self.job_id, "tenant": self.tenant, "gpus": self.gpus, "position": self.position,
                "p50_s": self.p50_s, "p90_s": self.p90_s, "basis": self.basis}


def scheduler_order(priority: np.ndarray, wait_s: np.ndarray, max_wait_s: float | None = None) -> np.ndarray:
    """Indices of pending jobs in the order the scheduler serves them: high first, then normal and low work that
    waited `max_wait_s` (aging), then low; within a class, the longest waiting first (the simulator's order)."""
    prio = np.asarray(priority)
    wait = np.asarray(wait_s, dtype=float)
    aged = np.zeros(prio.shape, dtype=bool) if max_wait_s is None else wait >= max_wait_s
    cls = np.where(prio == PRIORITY["high"], 0, np.where((prio == PRIORITY["normal"]) | aged, 1, 2))
    return np.lexsort((-wait, cls))


def forecast_growth(peaks: Mapping[str, Sequence[float]], state: ClusterState,
                    reservations: Mapping[str, int]) -> dict[str, tuple[float, ...]]:
    """Per tenant and quantile, the GPUs its forecast peak over the horizon adds above what it asks now (running +
    queued) and above its hold (a hold already keeps those GPUs from others): what will want unheld GPUs soon.
    `peaks`: tenant -> peak per quantile of QUANTILES. Unknown demand adds nothing (no basis to add)."""
    out: dict[str, tuple[float, ...]] = {}
    dem = state.demand
    for i, t in enumerate(state.tenants):
        pk = peaks.get(t)
        if pk is None or not np.isfinite(dem[i]):
            continue
        base = max(float(dem[i]), float(reservations.get(t, 0)))
        out[t] = tuple(max(float(p) - base, 0.0) if np.isfinite(p) else 0.0 for p in pk)
    return out


def estimate(state: ClusterState, run_lengths: RunLengths, *, reservations: Mapping[str, int] | None = None,
             pooled: Sequence[str] = (), time_limit_s: Mapping[str, float] | None = None,
             growth: Mapping[str, Sequence[float]] | None = None, max_wait_s: float | None = None,
             drain_s: float = 120.0, quantiles: Sequence[float] = QUANTILES,
             windows: Sequence[tuple[float, str, float]] = (), resolution_s: float = RESOLUTION_S,
             exact_below: int = EXACT_BELOW) -> list[Eta]:
    """The start estimate of every pending job of `state` (see the module's docstring for the model).

    `reservations` (tenant -> GPUs held) is used only without a node view (``state.nodes``), where holds have no
    place: a tenant's unused hold is then its own pool. `pooled`: tenants sharing the high tier's pooled hold.
    `time_limit_s`: job id -> its time limit (Slurm). `growth`: tenant -> forecast GPUs above its demand and hold,
    per quantile (``forecast_growth``), served before lower tiers' pending jobs. `windows`: holds a recurring
    window will place later, as (seconds from now its hold begins, tenant, GPUs): from then on they take free
    unheld GPUs before any other tenant's pending job, for the window's tenant alone."""
    jobs = state.jobs
    pend = np.flatnonzero(~jobs.running)
    if pend.size == 0:
        return []
    order = pend[scheduler_order(jobs.priority[pend], jobs.wait_s[pend], max_wait_s)]
    if int(jobs.running.sum()) < exact_below:
        resolution_s = 0.0
    types_all, accepts_type = _accepted_types(state, order, windows)
    results = [_run(state, run_lengths, order, q, dict(reservations or {}), set(pooled), dict(time_limit_s or {}),
                    dict(growth or {}), qi, drain_s, tuple(windows), resolution_s, types_all, accepts_type)
               for qi, q in enumerate(quantiles)]
    out = []
    for pos, j in enumerate(order):
        starts = [r[0].get(int(j)) for r in results]
        p50, p90 = starts[0], starts[-1]
        if p50 is None:
            p90, basis = None, results[0][1]
        else:
            basis = results[0][2][int(j)]
            if p90 is None:
                basis += f"; p90 {results[-1][1]}"
            else:
                p90 = max(p90, p50)
        out.append(Eta(str(jobs.ids[j]), state.tenants[int(jobs.tenant[j])], int(jobs.gpus[j]), pos, p50, p90,
                       basis))
    return out


def _types_of(state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
    """Per node its GPU type and holder (or one pseudo-node per holder without a node view)."""
    n = state.nodes
    assert n is not None
    types = np.full(len(n), ANY, dtype=object) if n.gpu_type is None else np.asarray(n.gpu_type, dtype=object)
    return types, np.asarray(n.held_by)


def _accepted_types(state: ClusterState, order: np.ndarray,
                    windows: Sequence[tuple[float, str, float]]) -> tuple[list[str], np.ndarray]:
    """The GPU types the scan knows (every node's type; ``ANY`` without a node view, or when a window's hold is to
    come: its release is typeless), sorted, and per job which of them it accepts (rows of the pending jobs in
    `order` filled; a job that names none accepts all). The same for every quantile: made once per estimate."""
    types = {ANY} if state.nodes is None else {str(t) for t in _types_of(state)[0]}
    if any(tn in state.tenants and t > 0 for t, tn, _ in windows):
        types.add(ANY)
    types_all = sorted(types)
    jobs = state.jobs
    accepts_type = np.ones((len(jobs), len(types_all)), dtype=bool)
    if jobs.accepts is not None:
        for j in order.tolist():
            acc = tuple(jobs.accepts[j] or ())
            if acc:
                accepts_type[j] = [t in acc for t in types_all]
    return types_all, accepts_type


def _ends(jobs, running: np.ndarray, tenants: tuple[str, ...], rl: RunLengths, q: float | np.ndarray,
          limits: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Each running job's expected end (seconds from now; NaN: no basis) at quantile q (an array: a row per
    quantile), and whether its time limit gave it: the limit less the time run, the sooner of that and its tenant's
    history when both say, else the history's quantile of the remaining run."""
    elapsed = jobs.runtime_s[running].astype(float)
    tn = jobs.tenant[running]
    ends = np.full((*np.shape(q), running.shape[0]), np.nan)
    by_tenant = np.argsort(tn, kind="stable")     # each tenant's jobs in one slice, not a mask per tenant
    cuts = np.flatnonzero(np.diff(tn[by_tenant])) + 1
    for part in np.split(by_tenant, cuts) if by_tenant.size else ():
        ends[..., part] = rl.remaining_many(tenants[int(tn[part[0]])], elapsed[part], q)
    by_limit = np.zeros(running.shape[0], dtype=bool)
    if limits:
        lim = np.array([limits.get(str(x), np.nan) for x in jobs.ids[running]], dtype=float)
        by_limit = np.isfinite(lim)
        left = np.maximum(lim - elapsed, 0.0)
        ends = np.where(by_limit, np.fmin(ends, left), ends)
    return ends, by_limit


def _could_fit(free: dict[tuple[str, int], float], waiting: np.ndarray, jobs, t_ix: dict[str, int],
               accepts_type: np.ndarray, in_pool: np.ndarray, shapes: "_Shapes | None" = None,
               node_free: np.ndarray | None = None) -> np.ndarray:
    """Per waiting job, whether it fits in the GPUs it may use (its own hold, unheld, the pooled hold if it shares
    it) on some type it accepts, all free now: a bound the scan checks first, in one pass, since placing other jobs
    only takes GPUs away. A big queue then costs one array operation per release, not a Python loop over it. With
    `shapes` (a queue with jobs on several nodes), such a job must also find its parts' room on the nodes
    (``node_free``): _Shapes."""
    w = np.asarray(waiting, dtype=np.int64)
    n_types = len(t_ix)
    own = np.zeros((n_types, in_pool.shape[0]))
    unheld = np.zeros(n_types)
    pool = np.zeros(n_types)
    for (t, h), f in free.items():
        k = t_ix.get(t)
        if k is None:
            continue
        if h >= 0:
            own[k, h] = f
        elif h == UNHELD:
            unheld[k] = f
        elif h == HELD_BY_POOL:
            pool[k] = f
    tn = jobs.tenant[w]
    room = own[:, tn] + unheld[:, None] + np.where(in_pool[tn][None, :], pool[:, None], 0.0)
    room = np.where(accepts_type[w].T, room, -np.inf).max(axis=0) if n_types else np.full(w.shape[0], -np.inf)
    fits = jobs.gpus[w] <= room + 1e-9
    if shapes is not None and fits.any():   # of those, the jobs on several nodes: their parts' room on the nodes
        at = np.flatnonzero(fits)
        fits[at] = shapes.could_fit(node_free, w[at], accepts_type, in_pool)
    return fits


class _Shapes:
    """_on_nodes' test for every waiting job on several nodes at once, on the nodes' free GPUs now: k nodes with its
    GPUs per node (`per`) free, or, for a gang (``packed``), room for k pods of `per`, several to a node, on the
    nodes it may use (its own hold, unheld, the pool where it shares it) of a type it accepts. The pools' bound
    (_could_fit) counts GPUs only, and a queue of jobs whose GPUs fit the pools but whose parts fit no node was
    tried one by one at each release: one tenant's 10,000 gangs, each of its own shape, took minutes per estimate
    (bench/eta_shapes_bench.py). Made once per estimate; each call costs an array pass per distinct `per` waiting."""

    def __init__(self, jobs, node_type: np.ndarray, node_h: np.ndarray, t_ix: dict[str, int], n_tenants: int) -> None:
        self.k = np.maximum(np.asarray(jobs.nodes_asked, dtype=np.int64), 1)
        # a --gpus job's parts need one GPU a node at least (_on_nodes); the pools' bound counts the rest
        spread = np.zeros(len(jobs), dtype=bool) if jobs.spread is None else np.asarray(jobs.spread, dtype=bool)
        self.per = np.where(spread, 1.0, np.ceil(jobs.gpus / self.k - 1e-9))
        self.packed = np.zeros(len(jobs), dtype=bool) if jobs.packed is None else np.asarray(jobs.packed, dtype=bool)
        self.tenant = np.asarray(jobs.tenant, dtype=np.int64)
        self.n_types, self.n_slots = len(t_ix), n_tenants + 2
        # each node's (type, holder) cell: slot 0 unheld, 1 the pool, 2 + t tenant t's hold; closed nodes none
        slot = np.where(node_h == UNHELD, 0, np.where(node_h == HELD_BY_POOL, 1, np.where(node_h >= 0, node_h + 2, -1)))
        tix = np.array([t_ix.get(str(t), -1) for t in node_type.tolist()], dtype=np.int64)
        self.ok = (slot >= 0) & (tix >= 0)
        self.cell = np.where(self.ok, tix * self.n_slots + slot, 0)

    def could_fit(self, node_free: np.ndarray, w: np.ndarray, accepts_type: np.ndarray,
                  in_pool: np.ndarray) -> np.ndarray:
        out = np.ones(w.shape[0], dtype=bool)
        multi = np.flatnonzero(self.k[w] > 1)
        if not multi.size or not self.n_types:
            return out
        wm = w[multi]
        pers, inv = np.unique(self.per[wm], return_inverse=True)
        size = self.n_types * self.n_slots
        cells = np.empty((pers.shape[0], 2, size))
        for i, per in enumerate(pers.tolist()):
            has = self.ok & (node_free > 1e-9) & (node_free + 1e-9 >= per)
            cells[i, 0] = np.bincount(self.cell[has], minlength=size)   # nodes with `per` free
            cells[i, 1] = np.bincount(self.cell[has], weights=np.floor((node_free[has] + 1e-9) / per), minlength=size)
        cells = cells.reshape(pers.shape[0], 2, self.n_types, self.n_slots)
        tn, pk = self.tenant[wm], self.packed[wm].astype(np.int64)
        room = cells[inv, pk, :, 0] + cells[inv, pk, :, tn + 2] + np.where(in_pool[tn][:, None], cells[inv, pk, :, 1],
                                                                             0.0)
        out[multi] = ((room >= self.k[wm][:, None]) & accepts_type[wm]).any(axis=1)
        return out


# the basis of a start after GPUs that are draining now (preempted jobs' GPUs) come back, at the drain time
_DRAINING = "GPUs draining now"


def _add_bases(bases: set[str], by_limit: np.ndarray) -> None:
    if by_limit.any():
        bases.add("time limit")
    if (~by_limit).any():
        bases.add("run-length history")


def _run(state: ClusterState, rl: RunLengths, order: np.ndarray, q: float, res: dict[str, int], pooled: set[str],
         limits: dict[str, float], growth: dict[str, Sequence[float]], qi: int, drain_s: float,
         windows: tuple[tuple[float, str, float], ...], resolution_s: float, types_all: list[str],
         accepts_type: np.ndarray) -> tuple[dict[int, float], str, dict[int, str]]:
    """One quantile's simulation: job index -> start seconds, the reason for the unplaced, and each job's basis.
    `types_all`, `accepts_type`: ``_accepted_types``."""
    jobs, tenants = state.jobs, state.tenants
    tix = {t: i for i, t in enumerate(tenants)}
    pool_ids = {tix[t] for t in pooled if t in tix}
    free: dict[tuple[str, int], float] = {}
    # (time, seq, type, holder, gpus, per node: ((node, gpus), ...) where the scan follows nodes, see `track`)
    events: list[tuple[float, int, str, int, float, tuple]] = []
    seq = 0
    running = np.flatnonzero(jobs.running)

    ends, by_limit = _ends(jobs, running, tenants, rl, q, limits)
    known = np.isfinite(ends)
    # the end per running job of each part it gives back (P50_LEVELS); one whole at q for the other passes.
    # Where one level is known they all are (the same finished runs, or the time limit)
    levels = list(_ends(jobs, running, tenants, rl, np.array(P50_LEVELS), limits)[0]) if q == 0.5 else [ends]
    share = 1.0 / len(levels)

    bases: set[str] = set()
    # a pending job on several nodes needs its GPUs per node on that many distinct nodes: only then the scan follows
    # each node's free GPUs beside the pools' (one-node jobs fit in their pools, as without it)
    track = state.nodes is not None and jobs.nodes_asked is not None and bool((jobs.nodes_asked[order] > 1).any())
    node_free = np.zeros(0)
    if state.nodes is not None:
        types, holders = _types_of(state)
        nodes = state.nodes
        if track:
            node_free = np.asarray(nodes.free, dtype=float).copy()
            node_t = types.astype(str)
            node_h = holders.astype(np.int64)
            drains: dict[tuple[str, int], list[tuple[int, float]]] = {}
            for ni in np.flatnonzero(np.asarray(nodes.draining) > 0).tolist():
                drains.setdefault((str(node_t[ni]), int(node_h[ni])), []).append(
                    (ni, float(nodes.draining[ni])))
        by_pool = pd.DataFrame({"t": types.astype(str), "h": holders.astype(np.int64),
                                "free": np.asarray(nodes.free, dtype=float),
                                "drain": np.asarray(nodes.draining, dtype=float)}).groupby(["t", "h"], sort=False).sum()
        for (t, h), f, d in zip(by_pool.index.tolist(), by_pool["free"].tolist(), by_pool["drain"].tolist()):
            free[(str(t), int(h))] = float(f)
            if d > 0:
                events.append((drain_s, seq, str(t), int(h), float(d),
                               tuple(drains.get((str(t), int(h)), ())) if track else ()))
                seq += 1
                bases.add(_DRAINING)
        # a part per job and node: a job on several nodes gives back its GPUs on each (Jobs.parts)
        p_pos, p_ix, p_g = jobs.parts(nodes, running)
        placed = np.zeros(running.size, dtype=bool)   # a job on no node the view has gives back nothing known
        placed[p_pos[p_ix >= 0]] = True
        unknown_ends = int((placed & ~known).sum())
        use = placed & known
        _add_bases(bases, by_limit[use])
        p_use = (p_ix >= 0) & use[p_pos]
        rel = _Releases([e[p_pos[p_use]] for e in levels], p_ix[p_use], p_g[p_use] * share, types, holders, track)
    else:
        # no placement: one pool per holder; a tenant's unused hold is its own, the rest unheld
        used = np.nan_to_num(state.used)
        held = {tix[t]: max(float(g) - float(used[tix[t]]), 0.0) for t, g in res.items() if t in tix}
        total_free = float(state.capacity) - float(used.sum()) - float(state.draining)
        for h, g in held.items():
            free[(ANY, h)] = g
        free[(ANY, UNHELD)] = max(total_free - sum(held.values()), 0.0)
        if state.draining:
            events.append((drain_s, seq, ANY, UNHELD, float(state.draining), ()))
            seq += 1
            bases.add(_DRAINING)
        unknown_ends = int((~known).sum())
        _add_bases(bases, by_limit[known])
        rel = _Releases([e[known] for e in levels], np.full(int(known.sum()), -1),
                        jobs.gpus[running][known] * share, np.array([ANY]), np.array([UNHELD]), False)
    # windows' holds to come: a release of nothing at each, so that the simulation stops there
    pending_windows = sorted((float(t), tix[tn], float(g)) for t, tn, g in windows if tn in tix and t > 0)
    for t_w, _, _ in pending_windows:
        events.append((t_w, seq, ANY, UNHELD, 0.0, ()))
        seq += 1
    debt: dict[int, float] = {}        # tenant -> window GPUs still to take from unheld pools
    heapq.heapify(events)
    rel.heap = events
    # higher tiers' forecast growth: per priority, GPUs still to be eaten from unheld pools
    ahead = {p: 0.0 for p in PRIORITY.values()}
    for t, g in growth.items():
        if t in tix and qi < len(g):
            ahead[PRIORITY[state.tiers[tix[t]]]] += float(g[qi])
    waiting = [int(j) for j in order]
    # plain lists: the scan below reads them per job and per release, where numpy scalars cost more than the work
    cols_tenant, cols_prio, cols_gpus = jobs.tenant.tolist(), jobs.priority.tolist(), jobs.gpus.tolist()
    cols_nodes = jobs.nodes_asked.tolist() if track else None
    # a Kubernetes gang's k pods may share a node (Jobs.packed), Slurm's k parts may not
    cols_packed = jobs.packed.tolist() if track and jobs.packed is not None else None
    cols_spread = jobs.spread.tolist() if track and jobs.spread is not None else None   # Slurm --gpus -N k
    if track:   # a job on several nodes asking more per node than any node has never starts: not tried per release
        most = float(np.max(state.nodes.gpus)) if len(state.nodes) else 0.0
        waiting = [j for j in waiting if cols_nodes[j] <= 1 or np.ceil(cols_gpus[j] / cols_nodes[j] - 1e-9) <= most]
    min_gpus = min((float(cols_gpus[j]) for j in waiting), default=0.0)
    starts: dict[int, float] = {}
    job_basis: dict[int, str] = {}
    usual: dict[int, float | None] = {}   # tenant -> its run length's quantile, for the jobs started here
    # for the scan's bound: the types' columns of accepts_type, and who shares the pool
    t_ix = {t: i for i, t in enumerate(types_all)}
    in_pool = np.zeros(len(tenants), dtype=bool)
    in_pool[list(pool_ids)] = True
    shapes = _Shapes(jobs, node_t, node_h, t_ix, len(tenants)) if track else None
    now = 0.0
    while True:
        while pending_windows and pending_windows[0][0] <= now + 1e-9:
            _, tw, gw = pending_windows.pop(0)
            debt[tw] = debt.get(tw, 0.0) + gw
        # a window's hold takes unheld GPUs into its tenant's pool before anyone's pending job
        for tw in debt:
            for t in types_all:
                take = min(debt[tw], free.get((t, UNHELD), 0.0))
                if take > 0:
                    free[(t, UNHELD)] -= take
                    free[(t, tw)] = free.get((t, tw), 0.0) + take
                    debt[tw] -= take
        # the growth of each tier eats unheld GPUs first (highest tier first)
        for p in sorted(ahead, reverse=True):
            for t in types_all:
                k = (t, UNHELD)
                take = min(ahead[p], free.get(k, 0.0))
                if take > 0:
                    free[k] -= take
                    ahead[p] -= take
        # the highest tier whose growth is still unserved: pending jobs of lower tiers wait for it
        blocking = max((p for p, g in ahead.items() if g > 1e-9), default=-1)
        total = sum(free.values())
        # (tenant, types) -> the jobs that found no room in this scan (_NoRoom): a job they dominate has none either
        no_room: dict[tuple[int, tuple], _NoRoom] = {}
        w_arr = np.asarray(waiting, dtype=np.int64)
        keep = np.ones(w_arr.shape[0], dtype=bool)       # still waiting after this scan
        # only the jobs that fit in all the GPUs they may use are checked (placing others only takes from those);
        # after a placement the bound is out of date, and made again for the rest at the next job that fails
        cands = np.flatnonzero(_could_fit(free, w_arr, jobs, t_ix, accepts_type, in_pool, shapes,
                                          node_free)).tolist()
        placed_since = False
        k = 0
        while k < len(cands):
            i = cands[k]
            k += 1
            j = waiting[i]
            if total < min_gpus - 1e-9:     # no GPU left that any job could use: the rest wait for a release
                break
            tn = int(cols_tenant[j])
            if int(cols_prio[j]) < blocking:
                continue           # a higher tier's forecast growth is still unserved: it comes first
            acc = () if jobs.accepts is None else tuple(jobs.accepts[j] or ())
            g = float(cols_gpus[j])
            k_nodes = max(int(cols_nodes[j]), 1) if cols_nodes is not None else 1
            packed = bool(cols_packed[j]) if cols_packed is not None else False
            spread = bool(cols_spread[j]) if cols_spread is not None else False
            per = float(np.ceil(g / k_nodes - 1e-9))
            seen = no_room.get((tn, acc))
            if seen is not None and seen.dominates(k_nodes, per, g, packed, spread):
                continue           # a job no larger, of the same tenant and types, did not fit in this scan
            owners = [tn, UNHELD] + ([HELD_BY_POOL] if tn in pool_ids else [])
            cand = [t for t in (acc or types_all) if t in types_all] if acc else types_all
            placed = False
            for t in cand:
                room = sum(free.get((t, o), 0.0) for o in owners)
                if room + 1e-9 < g:
                    continue
                parts: tuple = ()
                if track:   # the nodes it takes: k distinct with its GPUs per node, or room for a one-node job
                    parts = _on_nodes(node_free, node_t == t, node_h, owners, g, k_nodes, packed, spread)
                    if k_nodes > 1 and not parts:
                        continue
                    for ni, a in parts:
                        node_free[ni] -= a
                took_from: int | None = None
                for o in owners:    # own hold first, then unheld GPUs, then the pooled hold
                    take = min(g, free.get((t, o), 0.0))
                    if take > 0:
                        free[(t, o)] -= take
                        total -= take
                        g -= take
                        took_from = o if took_from is None else took_from
                    if g <= 1e-9:
                        break
                starts[j] = now
                job_basis[j] = "fits the GPUs free now" if now == 0 else ", ".join(sorted(bases))
                if tn not in usual:
                    usual[tn] = rl.usual(tenants[tn], q)
                run = usual[tn]
                if run is not None:   # it runs its tenant's usual length, then frees its GPUs where it took them
                    heapq.heappush(events, (now + run, seq, t, UNHELD if took_from is None else took_from,
                                            float(cols_gpus[j]), parts))
                    seq += 1
                    bases.add("run-length history")
                placed = True
                break
            if placed:
                keep[i] = False
                placed_since = True
            else:
                no_room.setdefault((tn, acc), _NoRoom()).add(k_nodes, per, float(cols_gpus[j]), packed, spread)
                if placed_since:
                    rest = _could_fit(free, w_arr[i + 1:], jobs, t_ix, accepts_type, in_pool, shapes, node_free)
                    cands, k, placed_since = (i + 1 + np.flatnonzero(rest)).tolist(), 0, False
        waiting = w_arr[keep].tolist()
        first = rel.first()
        if not waiting or first is None:
            break
        # the next release, and every other within resolution_s of it (not past a window's hold to come): all
        # at the last of them
        until = first + max(resolution_s, 0.0)
        if pending_windows:
            until = min(until, max(pending_windows[0][0], first))
        now = first
        while (first := rel.first()) is not None and first <= until + 1e-9:
            t_e, t, h, g, parts = rel.pop()
            now = max(now, t_e)
            free[(t, h)] = free.get((t, h), 0.0) + g
            for ni, a in parts:
                node_free[ni] += a
    if unknown_ends:
        why = f"unknown: {unknown_ends} running job(s) have neither a time limit nor a run-length history"
    else:
        why = "unknown: not enough GPUs this job may use free up within the running jobs' known ends"
    return starts, why, job_basis


class _Releases:
    """The releases to come, soonest first: the running jobs' (`ends`: per level, an array over the parts; sorted
    once by numpy, read by index) and the heap of the rest (drains, windows' holds, the jobs the scan starts, as
    (time, seq, type, holder, GPUs, parts)). The p50 gives back every running job's GPUs at five levels
    (P50_LEVELS): a heap of tuples for them all cost 3 s per estimate on the big cluster (bench/eta_scale_bench.py),
    where the scan reaches a fraction of them."""

    def __init__(self, ends: list[np.ndarray], node: np.ndarray, gpus: np.ndarray, types: np.ndarray,
                 holders: np.ndarray, track: bool) -> None:
        t = np.concatenate(ends) if ends else np.zeros(0)
        o = np.argsort(t, kind="stable")
        n = len(ends)
        self.t, self.node = t[o].tolist(), np.tile(np.asarray(node), n)[o].tolist()
        self.g = np.tile(np.asarray(gpus, dtype=float), n)[o].tolist()
        self.types, self.holders, self.track = types.astype(str).tolist(), holders.astype(int).tolist(), track
        self.i, self.heap = 0, []

    def first(self) -> float | None:
        a = self.t[self.i] if self.i < len(self.t) else None
        b = self.heap[0][0] if self.heap else None
        return a if b is None or (a is not None and a <= b) else b

    def pop(self) -> tuple[float, str, int, float, tuple]:
        """The soonest release as (time, type, holder, GPUs, parts); a running job's before the heap's at a tie."""
        if self.i < len(self.t) and (not self.heap or self.t[self.i] <= self.heap[0][0]):
            i, self.i = self.i, self.i + 1
            ni, g = self.node[i], self.g[i]
            return self.t[i], self.types[ni], self.holders[ni], g, ((ni, g),) if self.track else ()
        t, _, typ, h, g, parts = heapq.heappop(self.heap)
        return t, typ, h, g, parts


class _NoRoom:
    """The jobs of one tenant and accepted types that found no room in one scan of the queue (placing others there
    only takes room away, so what did not fit will not fit later in the scan): a job dominated by one of them is not
    tried. A one-node job fails on its pools' GPUs alone (fewer than it asks), which fails every job asking as many or
    more; a job on k nodes of `per` GPUs each (Slurm -N) fails where fewer than k nodes have `per` free, which fails
    one asking at least k nodes of at least `per` (and at least its GPUs in all: the pools come first); a gang of k
    pods (``packed``) where k pods of `per` do not fit, several to a node, which fails such a gang and such a -N job
    too. Kept as a frontier of the shapes not dominated by another: for one `per` a larger k asks more GPUs, so there
    are at most as many as the distinct `per` that fit a node (the scan drops the others first), and a queue of one
    tenant's jobs each of its own shape costs one node search per shape kept, not one per job per release (10,000
    gangs of 64 shapes took minutes per estimate: bench/eta_shapes_bench.py)."""

    __slots__ = ("pool", "shapes", "spread")

    def __init__(self) -> None:
        self.pool = float("inf")                          # the smallest one-node job that did not fit its pools
        self.shapes: list[tuple[int, float, float, bool]] = []   # (k, per, GPUs, packed) of jobs on several nodes
        # k -> the fewest GPUs a --gpus job on k nodes did not fit (the k fullest nodes hold fewer, or fewer than k
        # have one free): one asking more on as many nodes does not fit either; on more nodes it may
        self.spread: dict[int, float] = {}

    def dominates(self, k: int, per: float, g: float, packed: bool, spread: bool = False) -> bool:
        if g >= self.pool:
            return True
        if spread:
            return g >= self.spread.get(k, float("inf"))
        return k > 1 and any(k0 <= k and p0 <= per and g0 <= g and (p_0 or not packed)
                             for k0, p0, g0, p_0 in self.shapes)

    def add(self, k: int, per: float, g: float, packed: bool, spread: bool = False) -> None:
        if k <= 1:
            self.pool = min(self.pool, g)
            return
        if spread:
            self.spread[k] = min(self.spread.get(k, float("inf")), g)
            return
        self.shapes = [s for s in self.shapes if not (k <= s[0] and per <= s[1] and g <= s[2] and (packed or not s[3]))]
        self.shapes.append((k, per, g, packed))


def _on_nodes(node_free: np.ndarray, of_type: np.ndarray, node_h: np.ndarray, owners: list[int], gpus: float,
              k: int, packed: bool = False, spread: bool = False) -> tuple[tuple[int, float], ...]:
    """The nodes a job the scan starts takes, as ((node, GPUs), ...); () where it does not fit. `of_type`: the
    nodes of the type it starts on; `owners`: the holders whose GPUs it may use, in the order it takes them (its
    own hold, unheld, the pool). A job on k > 1 nodes takes its GPUs per node on k distinct nodes that each have
    them free, the holders' order first, then the fullest of those (the best fit leaves the larger holes for
    others). A Kubernetes gang of k pods (``packed``) takes its GPUs per pod where they are free, several pods to a
    node, the same order. A one-node job has fit its pools' room already (the pools decide, as without nodes): it
    takes the fullest node with room for all of it, or else the GPUs free node by node, emptiest first. A Slurm
    --gpus job on k nodes (``spread``) takes the k nodes with the most free (the holders' order on ties), if they
    hold its GPUs, as Slurm's cons_tres fills them: as many as free on each in turn, one left for each node after."""
    rank = np.full(node_h.shape[0], len(owners), dtype=np.int64)
    for r, o in enumerate(owners):
        rank[node_h == o] = r
    ok = of_type & (rank < len(owners)) & (node_free > 1e-9)
    if k > 1 and spread:
        cand = np.flatnonzero(ok & (node_free + 1e-9 >= 1.0))
        pick = cand[np.lexsort((cand, rank[cand], -node_free[cand]))[:k]]
        if pick.shape[0] < k or float(node_free[pick].sum()) + 1e-9 < gpus:
            return ()
        out, left = [], float(gpus)
        for i, ni in enumerate(pick.tolist()):
            a = min(float(node_free[ni]), left - (k - 1 - i))
            out.append((int(ni), a))
            left -= a
        return tuple(out)
    if k > 1:
        per = float(np.ceil(gpus / k - 1e-9))
        cand = np.flatnonzero(ok & (node_free + 1e-9 >= per))
        if packed:
            cand = cand[np.lexsort((cand, node_free[cand], rank[cand]))]
            pods = np.minimum(np.floor((node_free[cand] + 1e-9) / per), k).astype(np.int64)
            got = np.cumsum(pods)
            if not got.shape[0] or got[-1] < k:
                return ()
            n = int(np.searchsorted(got, k)) + 1
            pods[n - 1] -= int(got[n - 1]) - k
            return tuple((int(ni), per * int(c)) for ni, c in zip(cand[:n].tolist(), pods[:n].tolist()))
        if cand.shape[0] < k:
            return ()
        pick = cand[np.lexsort((cand, node_free[cand], rank[cand]))[:k]]
        return tuple((int(ni), per) for ni in pick.tolist())
    cand = np.flatnonzero(ok)
    whole = cand[node_free[cand] + 1e-9 >= gpus]
    if whole.shape[0]:
        ni = int(whole[np.lexsort((whole, node_free[whole], rank[whole]))[0]])
        return ((ni, float(gpus)),)
    out, left = [], float(gpus)
    for ni in cand[np.lexsort((cand, -node_free[cand], rank[cand]))].tolist():
        a = min(left, float(node_free[ni]))
        out.append((int(ni), a))
        left -= a
        if left <= 1e-9:
            break
    # the pools had room; the nodes may have less where a window's hold moved GPUs between pools (not nodes)
    return tuple(out)


def free_to_pending(state: ClusterState, reservations: Mapping[str, int] | None = None) -> float:
    """GPUs free now that no hold keeps from pending work: on the nodes no one holds, or without a node view the
    capacity less what runs, drains and every hold's unused GPUs."""
    n = state.nodes
    if n is not None:
        return float(np.asarray(n.free)[np.asarray(n.held_by) == UNHELD].sum())
    used = np.nan_to_num(state.used)
    tix = {t: i for i, t in enumerate(state.tenants)}
    held = sum(max(float(g) - float(used[tix[t]]), 0.0) for t, g in (reservations or {}).items() if t in tix)
    return max(float(state.capacity) - float(used.sum()) - float(state.draining) - held, 0.0)


class FreedRate:
    """The naive estimate's "recent rate at which GPUs free up": the GPUs of the jobs seen ending over the last
    `window_s`, over that window (or over the time since the first observation, before a whole window has passed).
    One definition for the daemon (daemon/service/eta.py, per cycle) and the replay (daemon/sim/eta_replay.py, per
    step), so that what the replay scores is what the daemon serves. The caller says what ended and when."""

    def __init__(self, window_s: float = RATE_WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError(f"FreedRate: window_s must be > 0, got {window_s}")
        self.window_s = float(window_s)
        self._freed: deque[tuple[float, float]] = deque()   # (when seen ended, GPUs), oldest first
        self._since: float | None = None                    # the first observation: the span before a window

    def observe(self, at: float, gpus: float) -> None:
        """`gpus` GPUs were seen freed at `at` (one call per job, or per cycle with their sum; 0 starts the
        clock without freeing anything)."""
        self._since = at if self._since is None else self._since
        if gpus:
            self._freed.append((float(at), float(gpus)))

    def rate(self, now: float) -> float:
        """GPUs per second freed over the `window_s` before `now` (the end of the window counted, its start not:
        an hour of 60 s cycles is 60 of them); 0 at the first observation (no time over which to count yet)."""
        while self._freed and self._freed[0][0] <= now - self.window_s:
            self._freed.popleft()
        span = 0.0 if self._since is None else min(now - self._since, self.window_s)
        return sum(g for _, g in self._freed) / span if span > 0 else 0.0


def naive_waits(etas: Sequence[Eta], free_gpus: float, rate_gpus_per_s: float,
                capacity: float | None = None) -> dict[str, float | None]:
    """The naive estimate issue 39 compares with, per pending job: the GPUs needed ahead of it in the scheduler's
    order (its own included, `etas` in that order) less `free_gpus` (free to pending work now), over the recent rate
    at which GPUs freed up. 0 when they fit now; None (unknown) when nothing freed up lately. A job asking more than
    the `capacity` never starts: it is unknown and ahead of nobody. A tenant's one Kueue Workload of a million pods
    (the apiserver takes any count) was millions of GPUs ahead of every later job, whose p50, blended with this where
    the blend erred least, became centuries."""
    out: dict[str, float | None] = {}
    ahead = 0.0
    for e in etas:
        if capacity is not None and e.gpus > capacity:
            out[e.job_id] = None
            continue
        ahead += e.gpus
        need = max(ahead - float(free_gpus), 0.0)
        out[e.job_id] = 0.0 if need <= 0 else (need / rate_gpus_per_s if rate_gpus_per_s > 0 else None)
    return out


def moved(old: Sequence[float | None] | None, new: Sequence[float | None]) -> bool:
    """Whether an estimate written on a job is worth rewriting (REWRITE_S): never written, a side became known
    or unknown, or moved REWRITE_S or more. Sides are times or durations, in seconds."""
    if old is None:
        return True
    for a, b in zip(old, new):
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) >= REWRITE_S):
            return True
    return False

