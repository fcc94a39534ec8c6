"""A job-level model of a GPU cluster with node placement, driven by a per-tenant demand trace.

It is the one cluster model behind the embedded simulated source (``run --sim``), ``simulate`` and every
replay bench, so they all see the same physics:

- the cluster is a set of nodes (``gpus_per_node`` GPUs each); a job runs on one node, so a job that fits on
  no node waits even when the cluster has enough free GPUs in total (fragmentation is real);
- jobs queue, start on free GPUs, finish when demand falls, are requeued when preempted (their GPUs stay busy
  for ``drain_steps`` while they checkpoint, and work since the last checkpoint is lost), and die with a node;
- holds are whole-node reservations, as a Slurm reservation (IGNORE_JOBS, MAGNETIC) or a Kueue quota on
  labelled nodes enforces them: only the holder's jobs may start on a held node (jobs already running there
  keep running), and the holder's jobs try its held nodes first. A hold is either one tenant's or one pool
  shared by a set of tenants (the static baseline's tier-wide pool);
- nothing is ever placed on GPUs that are not free: every start goes through a node's free count;
- a mixed fleet (issue 24; ``node_types``): nodes carry a GPU type and their own GPU count, each tenant's jobs
  accept an ordered set of types (``accepts``; () = any, tried largest type first), a job never starts on a type
  it does not accept and tries its preferred types first, and holds may be asked per type
  (``set_reservations(..., by_type=)``). With no ``node_types`` every path is the one-model cluster's, step for step.

Jobs live in numpy arrays because the replay scale case has tens of thousands of them per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import numpy as np

from daemon.policy.state import HELD_BY_POOL, PRIORITY, ClusterState, Jobs, Nodes

QUEUED, RUNNING, DONE = 1, 2, 3
UNHELD = -1
NOT_ACCEPTED = 1 << 20   # acc_rank of a type a tenant's jobs may not run on
_COLS = ("j_id", "j_tenant", "j_gpus", "j_state", "j_queued_at", "j_started_at", "j_node", "j_wait")


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """The same permutation as ``np.lexsort(keys)`` (the last key sorts first; ties keep their order), faster:
    one stable sort per key, from the last-sorting key up, and a radix sort for a key that spans fewer than 2**16
    integer values (a tier, a tenant, a step number, GPUs on a node)."""
    order = None
    for key in keys:
        k = np.asarray(key)
        if order is not None:
            k = k[order]
        if k.dtype.kind == "b":
            k = k.view(np.uint8)
        elif k.dtype.kind in "iu" and k.size:
            lo = k.min()
            if int(k.max()) - int(lo) < 1 << 16:
                k = (k - lo).astype(np.uint16)
        o = np.argsort(k, kind="stable")
        order = o if order is None else order[o]
    return order if order is not None else np.zeros(0, dtype=np.int64)


@dataclass
class StepStats:
    """What one step did; the replay's meter sums these into its report."""

    running_gpus: int
    draining_gpus: int
    capacity: int
    free_gpus: int                # healthy GPUs neither running nor draining (held or not)
    served: np.ndarray            # GPUs running per tenant
    wanted: np.ndarray            # GPUs each tenant asked for this step
    queued: np.ndarray            # GPUs queued per tenant after scheduling
    started: np.ndarray           # (k, 3): steps this stint waited, steps waited in all stints, priority


class SimCluster:
    def __init__(self, tenants: list[str], tier_priority: np.ndarray, capacity: int, job_gpus: np.ndarray,
                 *, gpus_per_node: int = 8, drain_steps: int = 2, checkpoint_steps: int = 30,
                 max_wait_steps: int = 120, node_types: Sequence[str] | None = None,
                 node_gpus: Sequence[int] | None = None, accepts: Sequence[tuple[str, ...]] | None = None) -> None:
        """``node_types`` (one GPU type per node) with ``node_gpus`` (GPUs per node) builds a mixed fleet and
        replaces ``capacity`` / ``gpus_per_node``; ``accepts`` gives per tenant the types its jobs accept, in order
        of preference (() or None = any type)."""
        self.tenants = list(tenants)
        self.n = len(self.tenants)
        self.prio_of_tenant = np.asarray(tier_priority, dtype=np.int8)
        self.typed = node_types is not None
        if self.typed:
            caps = np.asarray(node_gpus if node_gpus is not None else [gpus_per_node] * len(node_types),
                              dtype=np.int64)
            if caps.shape[0] != len(node_types) or (caps <= 0).any():
                raise ValueError("node_gpus: one positive GPU count per node of node_types")
            gpus_per_node, capacity = int(caps.max()), int(caps.sum())
        self.gpus_per_node = int(gpus_per_node)
        gpn = self.gpus_per_node
        self.job_size = np.asarray(job_gpus, dtype=np.int64)
        if (self.job_size > gpn).any():
            raise ValueError(f"a job asks for more GPUs ({int(self.job_size.max())}) than a node has ({gpn})")
        self.job_size = np.maximum(self.job_size, 1)
        self.total_capacity = int(capacity)
        self.n_nodes = int(np.ceil(capacity / gpn))
        self.node_cap = np.full(self.n_nodes, gpn, dtype=np.int64)
        self.node_cap[-1] = capacity - gpn * (self.n_nodes - 1)
        self._init_types(node_types, caps if self.typed else None, accepts)
        self.node_free = self.node_cap.copy()
        self.node_ok = np.ones(self.n_nodes, dtype=bool)
        self.node_holder = np.full(self.n_nodes, UNHELD, dtype=np.int64)  # tenant index, n = the shared pool
        self.node_pre = np.zeros(self.n_nodes, dtype=np.int64)  # free GPUs freed by a preemption, not reused yet
        self.drain_steps = int(drain_steps)
        self.checkpoint_steps = int(checkpoint_steps)
        self.max_wait_steps = int(max_wait_steps)
        self.step_no = 0
        self.next_id = 0
        cap = 1024
        for name in _COLS:
            setattr(self, name, np.full(cap, -1 if name == "j_node" else 0,
                                        dtype=np.int8 if name == "j_state" else np.int64))
        self.size = 0
        self.n_done = 0  # slots of finished jobs not yet compacted away
        # draining GPUs of preempted jobs: release step, node, GPUs
        self.d_until = np.zeros(0, dtype=np.int64)
        self.d_node = np.zeros(0, dtype=np.int64)
        self.d_gpus = np.zeros(0, dtype=np.int64)
        self.reservations = np.zeros(self.n, dtype=np.int64)
        self.pool_members = np.zeros(self.n, dtype=bool)
        self.pool_gpus = 0
        self.normal_cap: int | None = None
        # per tenant: when its demand falls, its NEWEST running jobs go first (an inference service's replicas: the
        # ones still cold-starting, then the last started), not the oldest (a batch tenant's work that is done)
        self.newest_first = np.zeros(self.n, dtype=bool)
        # meters
        self.total_preemptions = 0
        self.total_lost = 0.0
        self.preempted_per_tenant = np.zeros(self.n, dtype=np.int64)
        self.lost_per_tenant = np.zeros(self.n)               # GPU-steps of work lost
        self.starve_max = np.zeros(3, dtype=np.int64)          # longest cumulative wait per priority, steps
        self.preempted_idle = 0                                # GPU-steps freed by preemption and left idle
        self.preempted_retaken = 0                             # GPUs freed by preemption then taken by unprotected work

    # ---- a mixed fleet -----------------------------------------------------------------------
    def _init_types(self, node_types: Sequence[str] | None, caps: np.ndarray | None,
                    accepts: Sequence[tuple[str, ...]] | None) -> None:
        """Type tables: ``type_names`` (sorted), ``node_type`` (index per node), ``acc_rank[tenant, type]`` (the
        type's place in the tenant's preference, 0 first; ``NOT_ACCEPTED`` where it may not run there)."""
        if not self.typed:
            self.type_names: tuple[str, ...] = ()
            self.node_type = np.zeros(self.n_nodes, dtype=np.int64)
            self.acc_rank = np.zeros((self.n, 1), dtype=np.int64)
            self.tenant_accepts: list[tuple[str, ...]] = [()] * self.n
            self.runnable = np.ones(self.n, dtype=bool)
            self.pool_types: np.ndarray | None = None
            self.normal_cap_by_type: np.ndarray | None = None
            return
        assert node_types is not None and caps is not None
        self.n_nodes = len(node_types)
        self.node_cap = caps.copy()
        self.type_names = tuple(sorted(set(node_types)))
        self.node_type = np.searchsorted(np.array(self.type_names), np.asarray(node_types)).astype(np.int64)
        T = len(self.type_names)
        self.tenant_accepts = [tuple(a) if a else () for a in (accepts or [()] * self.n)]
        if len(self.tenant_accepts) != self.n:
            raise ValueError("accepts: one entry per tenant")
        rank = np.full((self.n, T), NOT_ACCEPTED, dtype=np.int64)
        pos = {t: i for i, t in enumerate(self.type_names)}
        # work that accepts any type tries the largest pool first (most GPUs; ties by name), as an operator orders
        # a scheduler's node weights or a ClusterQueue's flavors so that untyped work fills the general-purpose
        # nodes before the scarce ones; best fit alone would send one-GPU jobs to the smallest nodes first
        gpus_of_type = np.bincount(self.node_type, weights=caps, minlength=T)
        any_rank = np.empty(T, dtype=np.int64)
        any_rank[np.lexsort((np.arange(T), -gpus_of_type))] = np.arange(T)
        for i, acc in enumerate(self.tenant_accepts):
            if not acc:
                rank[i] = any_rank
            for r, t in enumerate(acc):
                if t in pos:  # a type no node has: accepted, never available (the job waits, and is counted)
                    rank[i, pos[t]] = min(rank[i, pos[t]], r)
        self.acc_rank = rank
        self.pool_types = None
        self.normal_cap_by_type = None
        # the largest job each tenant can run at all: on the biggest node of a type it accepts
        best = np.array([caps[rank[i, self.node_type] < NOT_ACCEPTED].max(initial=0) for i in range(self.n)])
        self.runnable = self.job_size <= best

    def type_capacity(self) -> np.ndarray:
        """Healthy GPUs per type (index into ``type_names``)."""
        return np.bincount(self.node_type[self.node_ok], weights=self.node_cap[self.node_ok],
                           minlength=max(len(self.type_names), 1)).astype(np.int64)

    def running_per_type(self) -> np.ndarray:
        """GPUs running per (tenant, type) on healthy nodes."""
        T = max(len(self.type_names), 1)
        r = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r = r[self.node_ok[self.j_node[r]]]
        key = self.j_tenant[r] * T + self.node_type[self.j_node[r]]
        return np.bincount(key, weights=self.j_gpus[r], minlength=self.n * T).reshape(self.n, T).astype(np.int64)

    def held_per_type(self) -> np.ndarray:
        """GPUs on healthy held nodes per (holder, type); holder n = the shared pool."""
        T = max(len(self.type_names), 1)
        h = self.node_ok & (self.node_holder >= 0)
        key = self.node_holder[h] * T + self.node_type[h]
        return np.bincount(key, weights=self.node_cap[h], minlength=(self.n + 1) * T).reshape(self.n + 1, T) \
            .astype(np.int64)

    def useless_held(self) -> np.ndarray:
        """GPUs held per holder on nodes of a type the holder's jobs do not accept (a hold that protects nothing:
        what a type-blind plan's holds cost on a mixed fleet). The pool's column counts nodes no member accepts."""
        out = np.zeros(self.n + 1, dtype=np.int64)
        if not self.typed:
            return out
        h = np.flatnonzero(self.node_ok & (self.node_holder >= 0))
        holder = self.node_holder[h]
        t = self.node_type[h]
        own = holder < self.n
        bad = np.zeros(h.size, dtype=bool)
        bad[own] = self.acc_rank[holder[own], t[own]] >= NOT_ACCEPTED
        if (~own).any():
            members = self.pool_members
            ok_any = (self.acc_rank[members] < NOT_ACCEPTED).any(axis=0) if members.any() else \
                np.zeros(len(self.type_names), dtype=bool)
            bad[~own] = ~ok_any[t[~own]]
        np.add.at(out, holder[bad], self.node_cap[h[bad]])
        return out

    # ---- bookkeeping -------------------------------------------------------------------------
    def _grow(self, extra: int) -> None:
        need = self.size + extra
        cap = self.j_id.shape[0]
        if need <= cap:
            return
        if np.count_nonzero(self.j_state[: self.size] == DONE) > self.size // 2:
            self._compact()
            if self.size + extra <= cap:
                return
        new = max(need, cap * 2)
        for name in _COLS:
            arr = getattr(self, name)
            grown = np.full(new, -1 if name == "j_node" else 0, dtype=arr.dtype)
            grown[:cap] = arr
            setattr(self, name, grown)

    def _compact(self) -> None:
        keep = np.flatnonzero(self.j_state[: self.size] != DONE)
        k = keep.size
        for name in _COLS:
            arr = getattr(self, name)
            arr[:k] = arr[keep]
            arr[k: self.size] = -1 if name == "j_node" else 0
        self.size = k
        self.n_done = 0

    @property
    def capacity(self) -> int:
        return int(self.node_cap[self.node_ok].sum())

    def node_draining(self) -> np.ndarray:
        return np.bincount(self.d_node, weights=self.d_gpus, minlength=self.n_nodes).astype(np.int64)

    def draining_gpus(self) -> int:
        return int(self.d_gpus.sum())

    def active(self) -> np.ndarray:
        st = self.j_state[: self.size]
        return np.flatnonzero((st == QUEUED) | (st == RUNNING))

    def running_per_tenant(self) -> np.ndarray:
        r = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r = r[self.node_ok[self.j_node[r]]]  # stranded jobs on a dead node serve nothing
        return np.bincount(self.j_tenant[r], weights=self.j_gpus[r], minlength=self.n).astype(np.int64)

    def ready_per_tenant(self, warm_steps: np.ndarray) -> np.ndarray:
        """Jobs per tenant running on a healthy node for at least ``warm_steps[tenant]`` steps: an inference
        service's replicas past their cold start. A replica preempted or requeued restarts cold (its start step is
        reset when it is placed again)."""
        r = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r = r[self.node_ok[self.j_node[r]]]
        ten = self.j_tenant[r]
        warm = (self.step_no - self.j_started_at[r]) >= np.asarray(warm_steps, dtype=np.int64)[ten]
        return np.bincount(ten[warm], minlength=self.n).astype(np.int64)

    def queued_per_tenant(self) -> np.ndarray:
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        return np.bincount(self.j_tenant[q], weights=self.j_gpus[q], minlength=self.n).astype(np.int64)

    def waiting_now(self) -> np.ndarray:
        """(k, 2) for each job queued now: steps its current stint has waited so far, and its tier's priority. The
        replay counts these at the end of its window as censored waits (a job that never started still waited)."""
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        return np.stack([self.step_no - self.j_queued_at[q], self.prio_of_tenant[self.j_tenant[q]]],
                        axis=1).astype(float)

    def held_gpus(self) -> np.ndarray:
        """GPUs on healthy nodes held per holder (tenant index; index n = the shared pool)."""
        h = self.node_ok & (self.node_holder >= 0)
        return np.bincount(self.node_holder[h], weights=self.node_cap[h], minlength=self.n + 1).astype(np.int64)

    # ---- holds -------------------------------------------------------------------------------
    def set_reservations(self, reservations: np.ndarray, normal_cap: int | None = None,
                         pool: tuple[np.ndarray, int] | None = None, by_type: np.ndarray | None = None,
                         pool_types: np.ndarray | None = None, normal_cap_by_type: np.ndarray | None = None) -> None:
        """Hold whole nodes: ceil(GPUs / gpus_per_node) per tenant, and optionally one pool of nodes for a set
        of tenants (``pool = (member mask, GPUs)``, held as floor(GPUs / gpus_per_node) nodes). Nodes already
        held are kept while still wanted (those where the holder runs least are let go first), except one its
        holder can never use; new ones are taken by the actuators' rule (``whole_nodes.rank``, see below).

        A mixed fleet: ``by_type`` ((n + 1) x types GPUs, row n the pool) holds per type, and ``pool_types``
        (n x types) says which pool members may start on the pool's nodes of each type (those the plan holds
        there: a pooled h100 hold is for the pooled tenants held on h100, not for pooled work that runs anywhere
        and would fill it first); None = every member on every type. ``normal_cap_by_type`` (GPUs per type) caps
        non-preemptible normal work per type, as ``normal_cap`` does in all (a QOS GRES limit per type, a Kueue
        flavor's quota)."""
        self.reservations = np.maximum(np.asarray(reservations, dtype=np.int64), 0)
        if self.typed:
            self.pool_types = None if pool_types is None else np.asarray(pool_types, dtype=bool)
            self.normal_cap_by_type = None if normal_cap_by_type is None else \
                np.asarray(normal_cap_by_type, dtype=np.int64)
        self.normal_cap = normal_cap
        if pool is not None:
            self.pool_members = np.asarray(pool[0], dtype=bool)
            self.pool_gpus = int(pool[1])
        if self.typed:  # a mixed fleet: holds in GPUs, per type when the plan says (by_type: (n + 1) x types)
            self._set_typed(by_type)
            return
        gpn, n, N = self.gpus_per_node, self.n, self.n_nodes
        want = np.zeros(n + 1, dtype=np.int64)
        want[:n] = -(-self.reservations // gpn)
        want[n] = self.pool_gpus // gpn if self.pool_members.any() else 0
        holder = self.node_holder
        holder[~self.node_ok] = UNHELD
        have = np.bincount(holder[holder >= 0], minlength=n + 1)
        if (want == have).all() and not (holder >= 0).any():
            return                                       # nothing held, nothing wanted
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r_ten, r_node, r_g = self.j_tenant[run], self.j_node[run], self.j_gpus[run]
        alive = self.node_ok[r_node]
        r_ten, r_node, r_g = r_ten[alive], r_node[alive], r_g[alive]
        firm_j = self.prio_of_tenant[r_ten] != PRIORITY["low"]           # work that cannot be preempted
        firm_all = np.bincount(r_node[firm_j], weights=r_g[firm_j], minlength=N)
        # a held node its holder can never use (other owners' work that cannot be preempted leaves no room for
        # the holder's job, even with everything preemptible cleared) is let go, so that the hold can move to
        # one it can use; a hold otherwise keeps its nodes
        h_of_job = holder[r_node]
        mine_j = (h_of_job == r_ten) | ((h_of_job == n) & self.pool_members[r_ten])
        mine_firm = np.bincount(r_node[mine_j & firm_j], weights=r_g[mine_j & firm_j], minlength=N)
        smallest = np.r_[self.job_size, self.job_size[self.pool_members].min() if self.pool_members.any() else 1]
        held_ok = holder >= 0
        useless = held_ok & (firm_all - mine_firm > self.node_cap - smallest[np.maximum(holder, 0)])
        if (want == have).all() and not useless.any():
            return
        if useless.any():
            holder[useless] = UNHELD
            have = np.bincount(holder[holder >= 0], minlength=n + 1)
        # release: per shrinking holder, the held nodes where it runs least
        shrink = want < have
        if shrink.any():
            h_of_job = holder[r_node]
            mine = (h_of_job == r_ten) | ((h_of_job == n) & self.pool_members[r_ten])
            own_node = np.bincount(r_node[mine], weights=r_g[mine], minlength=N)
            cand = np.flatnonzero((holder >= 0) & shrink[np.maximum(holder, 0)])
            o = lexorder(own_node[cand].astype(np.int64), holder[cand])
            cand = cand[o]
            hc = holder[cand]
            first = np.r_[0, np.flatnonzero(np.diff(hc)) + 1]
            rank = np.arange(cand.size) - np.repeat(first, np.diff(np.r_[first, cand.size]))
            holder[cand[rank < (have - want)[hc]]] = UNHELD
            have = np.bincount(holder[holder >= 0], minlength=n + 1)
        need = np.maximum(want - have, 0)
        if not need.any():
            return
        # acquire: by the rule the actuators use (daemon/actuators/whole_nodes.rank), one growing holder at a time,
        # tenants in index order and the pool last: nodes that can be cleared (no work of another owner that cannot
        # be preempted) first, then those with the least such work; among equals the highest score (the holder's
        # GPUs there + free GPUs + GPUs draining, which includes what this plan's preemptions free); then the index
        soon = self.node_free + self.node_draining()
        idx = np.arange(N, dtype=np.int64)
        by_t = np.argsort(r_ten, kind="stable")
        t_start = np.searchsorted(r_ten[by_t], np.arange(n + 1))
        for h in np.flatnonzero(need).tolist():
            js = np.flatnonzero(self.pool_members[r_ten]) if h == n else by_t[t_start[h]: t_start[h + 1]]
            cand = np.flatnonzero((holder == UNHELD) & self.node_ok)
            take = int(min(need[h], cand.size))
            if take <= 0:
                continue
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            own_firm = np.bincount(r_node[js], weights=r_g[js] * firm_j[js], minlength=N)
            firm = (firm_all - own_firm).astype(np.int64)
            score = (own + soon).astype(np.int64)
            k = ((firm * (4 * gpn + 1) + (2 * gpn - score)) * N + idx)[cand]
            best = np.argpartition(k, take - 1)[:take] if take < cand.size else np.arange(cand.size)
            holder[cand[best]] = h

    def _set_typed(self, by_type: np.ndarray | None) -> None:
        """Holds on a mixed fleet, in GPUs: per (holder, type) when ``by_type`` is given (a type-aware plan; row n
        the pool), else per holder on any type (a type-blind plan: the hold lands where the actuators' rule puts
        it, whether or not the holder's jobs can run there). Whole nodes, taken until the GPUs asked are covered;
        the same rule as the one-model path otherwise (keep what is still wanted, let go of what the holder can
        never use, release where it runs least, acquire clearable nodes with the highest score first)."""
        n, N = self.n, self.n_nodes
        T = max(len(self.type_names), 1)
        aware = by_type is not None
        want = np.zeros((n + 1, T if aware else 1), dtype=np.int64)
        if aware:
            want[:] = np.maximum(np.asarray(by_type, dtype=np.int64), 0)
        else:
            want[:n, 0] = self.reservations
            want[n, 0] = self.pool_gpus if self.pool_members.any() else 0
        group = self.node_type if aware else np.zeros(N, dtype=np.int64)
        G = want.shape[1]
        holder = self.node_holder
        holder[~self.node_ok] = UNHELD
        if not want.any() and not (holder >= 0).any():
            return
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r_ten, r_node, r_g = self.j_tenant[run], self.j_node[run], self.j_gpus[run]
        alive = self.node_ok[r_node]
        r_ten, r_node, r_g = r_ten[alive], r_node[alive], r_g[alive]
        firm_j = self.prio_of_tenant[r_ten] != PRIORITY["low"]
        firm_all = np.bincount(r_node[firm_j], weights=r_g[firm_j], minlength=N)
        h_of_job = holder[r_node]
        mine_j = (h_of_job == r_ten) | ((h_of_job == n) & self.pool_members[r_ten])
        mine_firm = np.bincount(r_node[mine_j & firm_j], weights=r_g[mine_j & firm_j], minlength=N)
        smallest = np.r_[self.job_size, self.job_size[self.pool_members].min() if self.pool_members.any() else 1]
        held = holder >= 0
        useless = held & (firm_all - mine_firm > self.node_cap - smallest[np.maximum(holder, 0)])
        if aware:  # a type-aware hold never keeps a node of a type its holder cannot use
            ok_pool = (self.acc_rank[self.pool_members] < NOT_ACCEPTED).any(axis=0) if self.pool_members.any() \
                else np.zeros(T, dtype=bool)
            hh = np.maximum(holder, 0)
            usable = np.where(holder < n, self.acc_rank[np.minimum(hh, n - 1), self.node_type] < NOT_ACCEPTED,
                              ok_pool[self.node_type]) if n else np.zeros(N, dtype=bool)
            useless |= held & ~usable
        holder[useless] = UNHELD
        mine = (holder[r_node] == r_ten) | ((holder[r_node] == n) & self.pool_members[r_ten])
        own_node = np.bincount(r_node[mine], weights=r_g[mine], minlength=N)
        cap = self.node_cap

        def have_of() -> np.ndarray:
            h = holder >= 0
            return np.bincount(holder[h] * G + group[h], weights=cap[h], minlength=(n + 1) * G) \
                .reshape(n + 1, G).astype(np.int64)

        have = have_of()
        # release: per (holder, group) over its ask, the nodes where it runs least, while the rest still covers it
        for h, g in zip(*np.nonzero(have > want)):
            nodes = np.flatnonzero((holder == h) & (group == g))
            nodes = nodes[lexorder(own_node[nodes].astype(np.int64))]
            spare = int(have[h, g] - want[h, g])
            drop = np.cumsum(cap[nodes]) <= spare
            holder[nodes[drop]] = UNHELD
        have = have_of()
        need = np.maximum(want - have, 0)
        if aware:  # never acquired where it would be let go at once (a type no holder of it can use)
            need[:n] = np.where(self.acc_rank < NOT_ACCEPTED, need[:n], 0)
            need[n] = np.where(ok_pool, need[n], 0)
        if not need.any():
            return
        soon = self.node_free + self.node_draining()
        idx = np.arange(N, dtype=np.int64)
        gpn = int(cap.max()) if N else 1
        for h, g in zip(*np.nonzero(need)):
            cand = np.flatnonzero((holder == UNHELD) & self.node_ok & (group == g))
            if cand.size == 0:
                continue
            js = np.flatnonzero(self.pool_members[r_ten]) if h == n else np.flatnonzero(r_ten == h)
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            own_firm = np.bincount(r_node[js], weights=r_g[js] * firm_j[js], minlength=N)
            firm = (firm_all - own_firm).astype(np.int64)
            score = (own + soon).astype(np.int64)
            k = ((firm * (4 * gpn + 1) + (2 * gpn - score)) * N + idx)[cand]
            cand = cand[np.argsort(k, kind="stable")]
            covered = np.cumsum(cap[cand])
            take = int(np.searchsorted(covered, need[h, g])) + 1   # nodes until the ask is covered
            holder[cand[:take]] = h

    # ---- actions -----------------------------------------------------------------------------
    def preempt(self, job_ids: np.ndarray) -> tuple[int, float]:
        """Requeue running jobs: their GPUs drain for `drain_steps`, progress since checkpoint is lost."""
        if len(job_ids) == 0:
            return 0, 0.0
        ids = np.asarray(job_ids, dtype=np.int64)
        pos = np.flatnonzero(np.isin(self.j_id[: self.size], ids) & (self.j_state[: self.size] == RUNNING))
        if pos.size == 0:
            return 0, 0.0
        g, node, ten = self.j_gpus[pos], self.j_node[pos], self.j_tenant[pos]
        lost_each = g * ((self.step_no - self.j_started_at[pos]) % self.checkpoint_steps)
        lost = float(lost_each.sum())
        alive = self.node_ok[node]
        if self.drain_steps > 0:
            self.d_until = np.r_[self.d_until, np.full(int(alive.sum()), self.step_no + self.drain_steps)]
            self.d_node = np.r_[self.d_node, node[alive]]
            self.d_gpus = np.r_[self.d_gpus, g[alive]]
        else:
            np.add.at(self.node_free, node[alive], g[alive])
            np.add.at(self.node_pre, node[alive], g[alive])
        self.j_state[pos] = QUEUED
        self.j_queued_at[pos] = self.step_no
        self.j_node[pos] = -1
        self.total_preemptions += int(pos.size)
        self.total_lost += lost
        self.preempted_per_tenant += np.bincount(ten, minlength=self.n)
        self.lost_per_tenant += np.bincount(ten, weights=lost_each, minlength=self.n)
        return int(pos.size), lost

    def running_on(self, node: int) -> np.ndarray:
        """Positions of the jobs running (or stranded) on `node`."""
        return np.flatnonzero((self.j_node[: self.size] == node) & (self.j_state[: self.size] == RUNNING))

    def fail_node(self, node: int, requeue: bool = True) -> list[int]:
        """Mark a node down and return the ids of the jobs that were on it.

        With ``requeue=False`` the jobs are left stranded (still 'running' on a
        dead node, serving nothing), as on a real cluster before anyone reacts;
        the daemon's node-failure handler then requeues them.
        """
        self.node_ok[node] = False
        on = self.running_on(node)
        if requeue:
            self.j_state[on] = QUEUED
            self.j_queued_at[on] = self.step_no
            self.j_node[on] = -1
        self.node_free[node] = 0
        self.node_pre[node] = 0
        self.node_holder[node] = UNHELD
        keep = self.d_node != node
        self.d_until, self.d_node, self.d_gpus = self.d_until[keep], self.d_node[keep], self.d_gpus[keep]
        return [int(self.j_id[p]) for p in on]

    def stranded(self) -> np.ndarray:
        """Positions of jobs 'running' on a node that is down."""
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        return run[~self.node_ok[self.j_node[run]]]

    def restore_node(self, node: int) -> list[int]:
        """Bring a failed node back, empty; return the ids of the jobs still stranded on it, now requeued.

        A node that comes back has lost the processes it ran (Slurm requeues such jobs as NODE_FAIL), so a job
        nobody requeued while the node was down goes back to the queue here. Marking the node fully free while
        those jobs still counted as running on it booked its GPUs twice.
        """
        if self.node_ok[node]:
            return []
        on = self.running_on(node)
        self.j_state[on] = QUEUED
        self.j_queued_at[on] = self.step_no
        self.j_node[on] = -1
        self.node_ok[node] = True
        self.node_free[node] = self.node_cap[node]
        return [int(self.j_id[p]) for p in on]

    # ---- one step ----------------------------------------------------------------------------
    def step(self, wanted_gpus: np.ndarray) -> StepStats:
        """Advance one step: drains finish, demand is reconciled into jobs, the queue is scheduled."""
        self.step_no += 1
        # finished jobs are dropped from the table once they are a third of it: every scan of the table per step
        # then reads about live jobs only (order kept, so nothing else changes)
        if self.n_done > 512 and 3 * self.n_done > self.size:
            self._compact()
        # 1. drained GPUs come back (failed nodes' drains were dropped when the node failed)
        if self.d_until.size:
            done = self.d_until <= self.step_no
            if done.any():
                np.add.at(self.node_free, self.d_node[done], self.d_gpus[done])
                np.add.at(self.node_pre, self.d_node[done], self.d_gpus[done])
                keep = ~done
                self.d_until, self.d_node, self.d_gpus = self.d_until[keep], self.d_node[keep], self.d_gpus[keep]
        # 2. demand -> jobs (NaN demand = no change: a gap in the trace is not a drop to zero)
        wanted = np.asarray(wanted_gpus, dtype=float)
        want_jobs = np.where(np.isfinite(wanted), np.ceil(np.maximum(wanted, 0) / self.job_size), -1).astype(np.int64)
        act = self.active()
        have = np.bincount(self.j_tenant[act], minlength=self.n)
        want_jobs = np.where(want_jobs < 0, have, want_jobs)
        add = np.maximum(want_jobs - have, 0)
        drop = np.maximum(have - want_jobs, 0)
        if drop.any():
            self._finish(act, drop)
        if add.any():
            self._submit(add)
        # 3. schedule
        started = self._schedule()
        self.preempted_idle += int(self.node_pre[self.node_ok].sum())
        run = self.running_per_tenant()
        free = int(self.node_free[self.node_ok].sum())
        return StepStats(running_gpus=int(run.sum()), draining_gpus=self.draining_gpus(), capacity=self.capacity,
                         free_gpus=free, served=run, wanted=np.where(np.isfinite(wanted), wanted, run),
                         queued=self.queued_per_tenant(), started=started)

    def _submit(self, add: np.ndarray) -> None:
        tenants = np.repeat(np.arange(self.n), add)
        k = tenants.size
        self._grow(k)
        s = slice(self.size, self.size + k)
        self.j_id[s] = np.arange(self.next_id, self.next_id + k)
        self.next_id += k
        self.j_tenant[s] = tenants
        self.j_gpus[s] = self.job_size[tenants]
        self.j_state[s] = QUEUED
        self.j_queued_at[s] = self.step_no
        self.j_started_at[s] = 0
        self.j_node[s] = -1
        self.j_wait[s] = 0
        self.size += k

    def _finish(self, act: np.ndarray, drop: np.ndarray) -> None:
        """Tenants whose demand fell lose queued jobs first (newest), then running ones (oldest: done; for a
        `newest_first` tenant the newest, so an inference service keeps its warm replicas)."""
        sel = act[drop[self.j_tenant[act]] > 0]
        if sel.size == 0:
            return
        queued = self.j_state[sel] == QUEUED
        # queued (newest first) before running (oldest first, or newest first for a `newest_first` tenant); all are
        # step numbers, so the key stays small
        started = self.j_started_at[sel]
        run_key = np.where(self.newest_first[self.j_tenant[sel]], self.step_no - started, started)
        key = np.where(queued, -self.j_queued_at[sel], self.step_no + 1 + run_key)
        order = lexorder(key, self.j_tenant[sel])
        sel = sel[order]
        ten = self.j_tenant[sel]
        first = np.r_[0, np.flatnonzero(np.diff(ten)) + 1]
        rank = np.arange(sel.size) - np.repeat(first, np.diff(np.r_[first, sel.size]))
        gone = sel[rank < drop[ten]]
        q = gone[self.j_state[gone] == QUEUED]
        if q.size:  # a job withdrawn while queued still waited: it counts towards starvation
            self._note_starvation(q, self.j_wait[q] + self.step_no - self.j_queued_at[q])
        r = gone[self.j_state[gone] == RUNNING]
        if r.size:
            nodes = self.j_node[r]
            ok = self.node_ok[nodes]
            np.add.at(self.node_free, nodes[ok], self.j_gpus[r][ok])
        self.j_node[gone] = -1
        self.j_state[gone] = DONE
        self.n_done += int(gone.size)

    def _note_starvation(self, pos: np.ndarray, waited: np.ndarray) -> None:
        prio = self.prio_of_tenant[self.j_tenant[pos]]
        for p in range(3):
            m = prio == p
            if m.any():
                self.starve_max[p] = max(self.starve_max[p], int(waited[m].max()))

    def starvation(self) -> np.ndarray:
        """Longest cumulative wait (all queue stints of a job) per priority so far, in steps."""
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        out = self.starve_max.copy()
        if q.size:
            waited = self.j_wait[q] + self.step_no - self.j_queued_at[q]
            prio = self.prio_of_tenant[self.j_tenant[q]]
            for p in range(3):
                m = prio == p
                if m.any():
                    out[p] = max(out[p], int(waited[m].max()))
        return out

    def _schedule(self) -> np.ndarray:
        empty = np.empty((0, 3))
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        if q.size == 0:
            return empty
        free = np.where(self.node_ok, self.node_free, 0)
        if not free.any():
            return empty
        ten = self.j_tenant[q]
        prio = self.prio_of_tenant[ten]
        wait = self.step_no - self.j_queued_at[q]
        # class 0 first: high, then normal and aged low work, then low
        cls = np.where(prio == PRIORITY["high"], 0,
                       np.where((prio == PRIORITY["normal"]) | (wait >= self.max_wait_steps), 1, 2))
        order = lexorder(self.j_queued_at[q], cls)
        q, ten, prio, cls = q[order], ten[order], prio[order], cls[order]
        gpus = self.j_gpus[q]
        node_of = np.full(q.size, -1, dtype=np.int64)
        if self.typed:
            node_of = self._place_typed(q, ten, prio, cls, gpus, free)
        else:
            self._place(q, ten, prio, cls, gpus, free, node_of)
        placed = node_of >= 0
        if not placed.any():
            return empty
        idx, nodes = q[placed], node_of[placed]
        self.node_free = np.where(self.node_ok, free, self.node_free)
        if self.node_pre.any():  # GPUs freed by preemption: used by protected work, or retaken by others
            g = gpus[placed]
            protected = (cls[placed] == 0) | ((cls[placed] == 1) & (prio[placed] == PRIORITY["low"]))
            by_prot = np.bincount(nodes[protected], weights=g[protected], minlength=self.n_nodes).astype(np.int64)
            by_other = np.bincount(nodes[~protected], weights=g[~protected], minlength=self.n_nodes).astype(np.int64)
            used = np.minimum(self.node_pre, by_prot)
            self.node_pre -= used
            retaken = np.minimum(self.node_pre, by_other)
            self.node_pre -= retaken
            self.preempted_retaken += int(retaken.sum())
            self.node_pre = np.minimum(self.node_pre, self.node_free)
        self.j_node[idx] = nodes
        self.j_state[idx] = RUNNING
        self.j_started_at[idx] = self.step_no
        stint = self.step_no - self.j_queued_at[idx]
        self.j_wait[idx] += stint
        self._note_starvation(idx, self.j_wait[idx])
        return np.stack([stint, self.j_wait[idx], self.prio_of_tenant[self.j_tenant[idx]]], axis=1).astype(float)

    def _place(self, q: np.ndarray, ten: np.ndarray, prio: np.ndarray, cls: np.ndarray, gpus: np.ndarray,
               free: np.ndarray, node_of: np.ndarray) -> None:
        """The one-model cluster's placement (fills ``node_of``, updates ``free``)."""
        holder = self.node_holder
        # phase A: each holder's jobs go to its held nodes first (MAGNETIC). One tenant per hold and one job
        # size per tenant, so this is vectorised over holders: per holder, fullest fitting node first.
        n = self.n
        held_free = self.node_ok & (holder >= 0) & (free > 0)
        hn = np.flatnonzero(held_free & (holder < n))
        if hn.size:
            hh = holder[hn]
            o = lexorder(free[hn], hh)
            hn, hh = hn[o], hh[o]
            self._fill_held(hn, hh, ten, gpus, free, node_of)
        if (held_free & (holder == n)).any():  # the shared pool: several tenants, several job sizes
            mine = self.pool_members[ten] & (node_of < 0)
            if mine.any():
                nodes = np.flatnonzero(held_free & (holder == n) & (free > 0))
                jobs = np.flatnonzero(mine)
                node_of[jobs] = self._fit(gpus[jobs], cls[jobs], nodes, free)
        # phase B: everything else on unheld nodes, in class order; non-preemptible normal work is capped
        rest = np.flatnonzero(node_of < 0)
        open_nodes = np.flatnonzero(self.node_ok & (holder == UNHELD) & (free > 0))
        if rest.size and open_nodes.size:
            rest = self._under_normal_cap(rest, prio, gpus)
            if rest.size:
                node_of[rest] = self._fit(gpus[rest], cls[rest], open_nodes, free)

    def _under_normal_cap(self, rest: np.ndarray, prio: np.ndarray, gpus: np.ndarray) -> np.ndarray:
        """The queued jobs ``rest`` (in start order) less the non-preemptible normal work that would take the
        normal tier over its cap (the GPUs the high tier's guarantee keeps it out of)."""
        if self.normal_cap is None:
            return rest
        run = self.running_per_tenant()
        room = self.normal_cap - int(run[self.prio_of_tenant == PRIORITY["normal"]].sum())
        is_norm = prio[rest] == PRIORITY["normal"]
        over = is_norm & (np.cumsum(np.where(is_norm, gpus[rest], 0)) > room)
        return rest[~over]

    def _fill_held(self, hn: np.ndarray, hh: np.ndarray, ten: np.ndarray, gpus: np.ndarray, free: np.ndarray,
                   node_of: np.ndarray) -> None:
        """Each holder's queued jobs onto its held nodes ``hn`` (holder ``hh``, grouped by holder, each group in
        the order its nodes fill), as many as fit there; vectorised over holders (one job size per tenant)."""
        n = self.n
        slots = free[hn] // self.job_size[hh]
        cum = np.cumsum(slots)
        first = np.r_[0, np.flatnonzero(np.diff(hh)) + 1]
        start = np.zeros(n, dtype=np.int64)
        start[hh[first]] = cum[first] - slots[first]
        total = np.bincount(hh, weights=slots, minlength=n).astype(np.int64)
        jq = np.flatnonzero(total[ten] > 0)
        if jq.size:
            jq = jq[np.argsort(ten[jq], kind="stable")]
            tj = ten[jq]
            f2 = np.r_[0, np.flatnonzero(np.diff(tj)) + 1]
            rank = np.arange(jq.size) - np.repeat(f2, np.diff(np.r_[f2, jq.size]))
            ok = rank < total[tj]
            jq, tj, rank = jq[ok], tj[ok], rank[ok]
            where = hn[np.searchsorted(cum, start[tj] + rank, side="right")]
            node_of[jq] = where
            np.subtract.at(free, where, gpus[jq])

    def _place_typed(self, q: np.ndarray, ten: np.ndarray, prio: np.ndarray, cls: np.ndarray, gpus: np.ndarray,
                     free: np.ndarray) -> np.ndarray:
        """A mixed fleet's placement: as ``_place``, but a job only goes to nodes of a type its tenant accepts, and
        its preferred types first (every class's first choices before anyone's second)."""
        node_of = np.full(q.size, -1, dtype=np.int64)
        holder, n, rank = self.node_holder, self.n, self.acc_rank
        held_free = self.node_ok & (holder >= 0) & (free > 0)
        own = held_free & (holder < n)
        own[own] = rank[holder[own], self.node_type[own]] < NOT_ACCEPTED
        hn = np.flatnonzero(own)
        if hn.size:  # the holder's jobs on its held nodes, preferred types first, fullest node first
            hh = holder[hn]
            o = lexorder(free[hn], rank[hh, self.node_type[hn]], hh)
            hn, hh = hn[o], hh[o]
            self._fill_held(hn, hh, ten, gpus, free, node_of)
        if (held_free & (holder == n)).any():
            nodes = np.flatnonzero(held_free & (holder == n) & (free > 0))
            if self.pool_types is None:
                jobs = np.flatnonzero(self.pool_members[ten] & (node_of < 0))
                if jobs.size:
                    node_of[jobs] = self._fit_typed(gpus[jobs], cls[jobs], ten[jobs], nodes, free)
            else:  # per type, the members the plan holds there
                for t in np.unique(self.node_type[nodes]).tolist():
                    jobs = np.flatnonzero(self.pool_members[ten] & self.pool_types[ten, t] & (node_of < 0))
                    if jobs.size:
                        on_t = nodes[self.node_type[nodes] == t]
                        node_of[jobs] = self._fit_typed(gpus[jobs], cls[jobs], ten[jobs], on_t, free)
        rest = np.flatnonzero(node_of < 0)
        open_nodes = np.flatnonzero(self.node_ok & (holder == UNHELD) & (free > 0))
        if rest.size and open_nodes.size:
            rest = self._under_normal_cap(rest, prio, gpus)
            room = None
            if self.normal_cap_by_type is not None:   # the high tier's guarantee per type: normal work kept out
                run_t = self.running_per_type()[self.prio_of_tenant == PRIORITY["normal"]].sum(axis=0)
                room = np.maximum(self.normal_cap_by_type - run_t, 0)
            if rest.size:
                node_of[rest] = self._fit_typed(gpus[rest], cls[rest], ten[rest], open_nodes, free, room)
        return node_of

    def _fit_typed(self, gpus: np.ndarray, cls: np.ndarray, ten: np.ndarray, nodes: np.ndarray,
                   free: np.ndarray, room: np.ndarray | None = None) -> np.ndarray:
        """``_fit`` on a mixed fleet: class by class, preference rank by rank, per set of accepted types, only on
        nodes of the types at that rank of the set. ``room`` (GPUs per type, updated in place) caps what
        non-preemptible normal work may start on each type (the plan's ``shared_cap_by_type``)."""
        out = np.full(gpus.size, -1, dtype=np.int64)
        if nodes.size == 0:
            return out
        rows, set_of = np.unique(self.acc_rank[ten], axis=0, return_inverse=True)
        set_of = set_of.reshape(-1)
        nt = self.node_type[nodes]
        for c in np.unique(cls):
            in_c = cls == c
            sets = np.unique(set_of[in_c])
            top = int(rows[sets][rows[sets] < NOT_ACCEPTED].max(initial=0))
            for r in range(top + 1):
                for s_i in sets.tolist():
                    at_r = rows[s_i][nt] == r
                    if not at_r.any():
                        continue
                    jobs = np.flatnonzero(in_c & (set_of == s_i) & (out < 0))
                    if not jobs.size:
                        continue
                    if room is None:
                        out[jobs] = self._fit(gpus[jobs], cls[jobs], nodes[at_r], free)
                        continue
                    normal = self.prio_of_tenant[ten] == PRIORITY["normal"]
                    for tt in np.unique(nt[at_r]).tolist():   # type by type, normal work within its room there
                        jj = jobs[out[jobs] < 0]
                        if not jj.size:
                            break
                        nj = normal[jj]
                        jj = jj[~(nj & (np.cumsum(np.where(nj, gpus[jj], 0)) > room[tt]))]
                        got = self._fit(gpus[jj], cls[jj], nodes[at_r & (nt == tt)], free)
                        out[jj] = got
                        room[tt] -= int(gpus[jj][(got >= 0) & normal[jj]].sum())
        return out

    @staticmethod
    def _fit(gpus: np.ndarray, cls: np.ndarray, nodes: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Place jobs (already in queue order) on `nodes`, updating `free` in place; -1 = did not fit.

        Class by class; within a class, largest jobs first, each size best-fit (fullest node that still
        fits) so whole nodes stay free for whole-node jobs. Vectorised per (class, size)."""
        out = np.full(gpus.size, -1, dtype=np.int64)
        for c in np.unique(cls):
            in_c = cls == c
            for g in np.unique(gpus[in_c])[::-1]:
                jobs = np.flatnonzero(in_c & (gpus == g))
                f = free[nodes]
                slots = f // g
                ok = slots > 0
                if not ok.any():
                    continue
                cand = nodes[ok]
                o = lexorder(f[ok])
                cand, slots = cand[o], slots[ok][o]
                cum = np.cumsum(slots)
                k = min(jobs.size, int(cum[-1]))
                where = cand[np.searchsorted(cum, np.arange(k), side="right")]
                out[jobs[:k]] = where
                np.subtract.at(free, where, g)
        return out

    # ---- views -------------------------------------------------------------------------------
    def nodes_view(self, node_name: Callable[[np.ndarray], np.ndarray] | None = None) -> Nodes:
        idx = np.arange(self.n_nodes)
        holder = np.where(self.node_holder == self.n, HELD_BY_POOL, self.node_holder)  # the shared pool
        return Nodes(names=node_name(idx) if node_name else idx, gpus=np.where(self.node_ok, self.node_cap, 0),
                     free=np.where(self.node_ok, self.node_free, 0),
                     draining=np.where(self.node_ok, self.node_draining(), 0), held_by=holder,
                     gpu_type=np.array(self.type_names, dtype=object)[self.node_type] if self.typed else None)

    def state(self, tenants: tuple[str, ...], tiers: tuple, at, step_s: int,
              job_id: Callable[[np.ndarray], np.ndarray] | None = None,
              node_name: Callable[[np.ndarray], np.ndarray] | None = None) -> ClusterState:
        """The cluster as the daemon would see it. Ids and node names stay integers unless formatters are
        given (the replay at 50,000 jobs cannot afford strings every step; the live demo wants names)."""
        st = self.j_state[: self.size]
        live = np.flatnonzero((st == QUEUED) | (st == RUNNING))
        running = st[live] == RUNNING
        ids, nodes = self.j_id[live], self.j_node[live]
        jobs = Jobs(ids=job_id(ids) if job_id else ids, tenant=self.j_tenant[live], gpus=self.j_gpus[live],
                    priority=self.prio_of_tenant[self.j_tenant[live]], running=running,
                    runtime_s=np.where(running, (self.step_no - self.j_started_at[live]) * step_s, 0.0),
                    wait_s=np.where(~running, (self.step_no - self.j_queued_at[live]) * step_s, 0.0),
                    node=node_name(nodes) if node_name else nodes,
                    accepts=self._accepts_obj()[self.j_tenant[live]] if self.typed else None)
        failed = np.flatnonzero(~self.node_ok)
        used = np.bincount(jobs.tenant[running], weights=jobs.gpus[running], minlength=self.n)
        pending = np.bincount(jobs.tenant[~running], weights=jobs.gpus[~running], minlength=self.n)
        return ClusterState(at=at, tenants=tenants, tiers=tiers, capacity=self.capacity,
                            used=used.astype(float), pending=pending.astype(float),
                            jobs=jobs, draining=self.draining_gpus(),
                            failed_nodes=tuple(node_name(failed)) if node_name is not None else (),
                            nodes=self.nodes_view(node_name))

    def _accepts_obj(self) -> np.ndarray:
        out = np.empty(self.n, dtype=object)
        out[:] = [tuple(a) for a in self.tenant_accepts]
        return out

    # ---- invariants --------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError unless: every healthy node's GPUs are running, draining or free (never
        over-filled, never negative); running + draining <= healthy capacity; every job is in exactly one
        state (running <=> placed on a node); no job is counted twice; holds sit on healthy nodes."""
        st = self.j_state[: self.size]
        node = self.j_node[: self.size]
        if not np.isin(st, (QUEUED, RUNNING, DONE)).all():
            raise AssertionError("a job slot is in no state")
        if ((st == RUNNING) != (node >= 0)).any():
            raise AssertionError("a job is running without a node, or placed without running")
        ids = self.j_id[: self.size]
        if np.unique(ids).size != ids.size:
            raise AssertionError("a job is counted twice")
        run = np.flatnonzero(st == RUNNING)
        on = np.bincount(node[run], weights=self.j_gpus[run], minlength=self.n_nodes).astype(np.int64)
        drain = self.node_draining()
        ok = self.node_ok
        if (self.node_free < 0).any():
            raise AssertionError(f"negative free GPUs on nodes {np.flatnonzero(self.node_free < 0)[:5].tolist()}")
        books = on + drain + self.node_free
        bad = ok & (books != self.node_cap)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise AssertionError(f"node {i} books off: running {on[i]} + draining {drain[i]} + free "
                                 f"{self.node_free[i]} != {self.node_cap[i]}")
        if (self.node_free[~ok] != 0).any() or (drain[~ok] != 0).any():
            raise AssertionError("a failed node has free or draining GPUs")
        if int(on[ok].sum()) + int(drain[ok].sum()) > self.capacity:
            raise AssertionError("running + draining exceed healthy capacity")
        if (self.node_holder[~ok] != UNHELD).any():
            raise AssertionError("a hold sits on a failed node")
        if (self.node_pre > self.node_free).any():
            raise AssertionError("more preempted-idle GPUs than free GPUs on a node")
        if self.typed:
            self._check_types(run, on, drain)

    def _check_types(self, run: np.ndarray, on: np.ndarray, drain: np.ndarray) -> None:
        """Per type: no job runs on a type its tenant does not accept; running + draining + free = that type's
        healthy GPUs; the per-type views sum to the cluster's."""
        bad = self.acc_rank[self.j_tenant[run], self.node_type[self.j_node[run]]] >= NOT_ACCEPTED
        if bad.any():
            p = int(run[np.flatnonzero(bad)[0]])
            raise AssertionError(f"job {int(self.j_id[p])} of tenant {int(self.j_tenant[p])} runs on type "
                                 f"{self.type_names[self.node_type[self.j_node[p]]]!r}, which it does not accept")
        T = len(self.type_names)
        ok = self.node_ok
        per = [np.bincount(self.node_type[ok], weights=x[ok], minlength=T).astype(np.int64)
               for x in (on, drain, self.node_free)]
        cap_t = self.type_capacity()
        if ((per[0] + per[1] + per[2]) != cap_t).any():
            raise AssertionError(f"per-type books off: running {per[0]} + draining {per[1]} + free {per[2]} "
                                 f"!= capacity {cap_t}")
        if int(cap_t.sum()) != self.capacity or int(self.running_per_type().sum()) != int(per[0].sum()):
            raise AssertionError("per-type views do not sum to the cluster's")

    check_conservation = check_invariants

    def idle_hold_misses(self) -> np.ndarray:
        """Queued high-tier jobs that a free held node would take: one of their tenant's own held nodes, or of the
        shared pool's nodes where a member may start, of a type they accept, with room for the job. Empty after
        every step (the property tests check it): a hold's free GPUs always start its protected work that cycle.
        A hold whose nodes are full of other tenants' work that cannot be preempted is no such miss: its GPUs
        are not idle, and only preemption or the work ending frees them."""
        q = np.flatnonzero((self.j_state[: self.size] == QUEUED)
                           & (self.prio_of_tenant[self.j_tenant[: self.size]] == PRIORITY["high"]))
        if q.size == 0:
            return q
        ten, need = self.j_tenant[q], self.j_gpus[q]
        holder, n = self.node_holder, self.n
        ok = self.node_ok[None, :] & (self.node_free[None, :] >= need[:, None])
        ok &= self.acc_rank[ten][:, self.node_type] < NOT_ACCEPTED
        own = holder[None, :] == ten[:, None]
        pool = (holder[None, :] == n) & self.pool_members[ten][:, None]
        if self.typed and self.pool_types is not None:
            pool &= self.pool_types[ten][:, self.node_type]
        return self.j_id[q[(ok & (own | pool)).any(axis=1)]]
