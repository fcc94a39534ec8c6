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
  shared by a set of tenants (the static baseline's tier-wide pool). A window replayed as on Slurm is also a
  reservation made ahead, on whose nodes nothing new starts until it is active (cluster_holds ``_ahead``);
- nothing is ever placed on GPUs that are not free: every start goes through a node's free count;
- a mixed fleet (issue 24; ``node_types``): nodes carry a GPU type and their own GPU count, each tenant's jobs
  accept an ordered set of types (``accepts``; () = any, tried largest type first), a job never starts on a type
  it does not accept and tries its preferred types first, and holds may be asked per type
  (``set_reservations(..., by_type=)``). With no ``node_types`` every path is the one-model cluster's, step for step.

Jobs live in numpy arrays because the replay scale case has tens of thousands of them per step.

SimCluster's state, its bookkeeping, one step and its views are here; the rest of its physics lives beside
it, one concern per module, as classes it inherits (the text of each method unchanged): cluster_fleet (a
mixed fleet's type tables), cluster_holds (holds), cluster_preempt (preemption, node failure and restore),
cluster_placement (where queued jobs start) and cluster_invariants (the checks the property tests run);
cluster_jobs has the job states and the step's record they share. Every name is importable from here as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np

from daemon.policy.state import HELD_BY_POOL, ClusterState, Jobs, Nodes
from daemon.sim.cluster_fleet import FleetTypes
from daemon.sim.cluster_holds import Holds
from daemon.sim.cluster_invariants import Invariants
from daemon.sim.cluster_jobs import (  # re-exported: the old import path keeps working
    _COLS,
    DONE,
    NOT_ACCEPTED,
    QUEUED,
    RUNNING,
    UNHELD,
    StepStats,
    lexorder,
)
from daemon.sim.cluster_placement import Placement
from daemon.sim.cluster_preempt import Preemption


class SimCluster(FleetTypes, Holds, Preemption, Placement, Invariants):
    """The cluster: its nodes, its job table and the step that moves them; holds, preemption, placement and
    the invariants come from the classes it inherits (one module each, beside this one)."""

    def __init__(self, tenants: list[str], tier_priority: np.ndarray, capacity: int, job_gpus: np.ndarray,
                 *, gpus_per_node: int = 8, drain_steps: int = 2, checkpoint_steps: int = 30,
                 max_wait_steps: int = 120, node_types: Sequence[str] | None = None,
                 node_gpus: Sequence[int] | None = None, accepts: Sequence[tuple[str, ...]] | None = None,
                 streams: Sequence[tuple[int, tuple[str, ...]]] | None = None) -> None:
        """``node_types`` (one GPU type per node) with ``node_gpus`` (GPUs per node) builds a mixed fleet and
        replaces ``capacity`` / ``gpus_per_node``; ``accepts`` gives per tenant the types its jobs accept, in order
        of preference (() or None = any type). ``streams`` instead (a mixed fleet): the demand's columns, each
        (tenant index, accepted types), so that one tenant's jobs ask different types (``step`` then takes and
        reports demand per stream; holds, the state's tenants and the meters per tenant stay the tenant's)."""
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
        self._init_types(node_types, caps if self.typed else None, accepts, streams)
        self.n_streams = int(self.stream_owner.size)
        self.node_free = self.node_cap.copy()
        self.node_ok = np.ones(self.n_nodes, dtype=bool)
        self.node_holder = np.full(self.n_nodes, UNHELD, dtype=np.int64)  # tenant index, n = the shared pool
        self.node_pre = np.zeros(self.n_nodes, dtype=np.int64)  # free GPUs freed by a preemption, not reused yet
        # Slurm's windows (set_reservations(ahead=...), Holds._ahead): the tenant whose window's reservation, made
        # ahead and not active yet, is on the node (UNHELD: none). Nothing new starts there (cluster_placement)
        self.node_ahead = np.full(self.n_nodes, UNHELD, dtype=np.int64)
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

    def running_per_stream(self) -> np.ndarray:
        """GPUs running per demand stream on healthy nodes (per tenant where the cluster has no ``streams``)."""
        r = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r = r[self.node_ok[self.j_node[r]]]
        return np.bincount(self.j_stream[r], weights=self.j_gpus[r], minlength=self.n_streams).astype(np.int64)

    def queued_per_stream(self) -> np.ndarray:
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        return np.bincount(self.j_stream[q], weights=self.j_gpus[q], minlength=self.n_streams).astype(np.int64)

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

    # ---- one step ----------------------------------------------------------------------------
    def step(self, wanted_gpus: np.ndarray) -> StepStats:
        """Advance one step: drains finish, demand is reconciled into jobs, the queue is scheduled. ``wanted_gpus``
        and the StepStats' served, wanted and queued are per demand stream (per tenant without ``streams``)."""
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
        size = self.job_size[self.stream_owner] if self.streamed else self.job_size
        want_jobs = np.where(np.isfinite(wanted), np.ceil(np.maximum(wanted, 0) / size), -1).astype(np.int64)
        act = self.active()
        have = np.bincount(self.j_stream[act], minlength=self.n_streams)
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
        run = self.running_per_stream() if self.streamed else self.running_per_tenant()
        free = int(self.node_free[self.node_ok].sum())
        return StepStats(running_gpus=int(run.sum()), draining_gpus=self.draining_gpus(), capacity=self.capacity,
                         free_gpus=free, served=run, wanted=np.where(np.isfinite(wanted), wanted, run),
                         queued=self.queued_per_stream() if self.streamed else self.queued_per_tenant(),
                         started=started)

    def _submit(self, add: np.ndarray) -> None:
        streams = np.repeat(np.arange(self.n_streams), add)
        tenants = self.stream_owner[streams]
        k = tenants.size
        self._grow(k)
        s = slice(self.size, self.size + k)
        self.j_id[s] = np.arange(self.next_id, self.next_id + k)
        self.next_id += k
        self.j_tenant[s] = tenants
        self.j_stream[s] = streams
        self.j_gpus[s] = self.job_size[tenants]
        self.j_state[s] = QUEUED
        self.j_queued_at[s] = self.step_no
        self.j_started_at[s] = 0
        self.j_node[s] = -1
        self.j_wait[s] = 0
        self.size += k

    def _finish(self, act: np.ndarray, drop: np.ndarray) -> None:
        """Tenants whose demand fell lose queued jobs first (newest), then running ones (oldest: done; for a
        `newest_first` tenant the newest, so an inference service keeps its warm replicas); `drop` is per demand
        stream (a tenant's jobs that ask the types whose demand fell)."""
        sel = act[drop[self.j_stream[act]] > 0]
        if sel.size == 0:
            return
        queued = self.j_state[sel] == QUEUED
        # queued (newest first) before running (oldest first, or newest first for a `newest_first` tenant); all are
        # step numbers, so the key stays small
        started = self.j_started_at[sel]
        run_key = np.where(self.newest_first[self.j_tenant[sel]], self.step_no - started, started)
        key = np.where(queued, -self.j_queued_at[sel], self.step_no + 1 + run_key)
        order = lexorder(key, self.j_stream[sel])
        sel = sel[order]
        ten = self.j_stream[sel]
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
                    accepts=self._accepts_obj()[self.j_stream[live]] if self.typed else None)
        failed = np.flatnonzero(~self.node_ok)
        used = np.bincount(jobs.tenant[running], weights=jobs.gpus[running], minlength=self.n)
        pending = np.bincount(jobs.tenant[~running], weights=jobs.gpus[~running], minlength=self.n)
        return ClusterState(at=at, tenants=tenants, tiers=tiers, capacity=self.capacity,
                            used=used.astype(float), pending=pending.astype(float),
                            jobs=jobs, draining=self.draining_gpus(),
                            failed_nodes=tuple(node_name(failed)) if node_name is not None else (),
                            nodes=self.nodes_view(node_name))

    def _accepts_obj(self) -> np.ndarray:
        out = np.empty(len(self.stream_accepts), dtype=object)
        out[:] = [tuple(a) for a in self.stream_accepts]
        return out


__all__ = [  # what the modules above hold, importable from here as before
    "DONE",
    "NOT_ACCEPTED",
    "QUEUED",
    "RUNNING",
    "SimCluster",
    "StepStats",
    "UNHELD",
    "lexorder",
]
