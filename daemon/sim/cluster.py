"""A job-level model of a GPU cluster, driven by a per-tenant demand trace.

It is the one cluster model behind both the embedded simulated source (``run
--sim``) and the replay benchmark, so the daemon and the benchmark see the same
physics: jobs queue, start on free GPUs, finish when demand falls, are requeued
when preempted (their GPUs stay busy for ``drain_steps`` while they checkpoint,
and work since the last checkpoint is lost), and die with a failed node.

Jobs live in numpy arrays because the replay scale case has tens of thousands
of them per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from daemon.cluster import PRIORITY, ClusterState, Jobs

QUEUED, RUNNING, DONE = 1, 2, 3


@dataclass
class StepStats:
    """What one step did; the replay sums these into its report."""

    running_gpus: int = 0
    draining_gpus: int = 0
    capacity: int = 0
    served: np.ndarray | None = None          # GPUs running per tenant
    wanted: np.ndarray | None = None          # GPUs each tenant asked for this step
    started_waits: list[np.ndarray] = field(default_factory=list)  # (wait steps, priority) of jobs that started
    preempted_jobs: int = 0
    lost_gpu_steps: float = 0.0


class SimCluster:
    def __init__(self, tenants: list[str], tier_priority: np.ndarray, capacity: int, job_gpus: np.ndarray,
                 *, gpus_per_node: int = 8, drain_steps: int = 2, checkpoint_steps: int = 30,
                 max_wait_steps: int = 120, track_nodes: bool = True) -> None:
        self.tenants = list(tenants)
        self.n = len(self.tenants)
        self.prio_of_tenant = np.asarray(tier_priority, dtype=np.int8)
        self.job_size = np.maximum(np.asarray(job_gpus, dtype=np.int64), 1)
        self.total_capacity = int(capacity)
        # without node tracking the cluster is one big pool (replay at scale); placement is then vectorised
        self.gpus_per_node = int(gpus_per_node) if track_nodes else int(capacity)
        gpus_per_node = self.gpus_per_node
        self.n_nodes = int(np.ceil(capacity / gpus_per_node))
        self.node_cap = np.full(self.n_nodes, gpus_per_node, dtype=np.int64)
        self.node_cap[-1] = capacity - gpus_per_node * (self.n_nodes - 1)
        self.node_free = self.node_cap.copy()
        self.node_ok = np.ones(self.n_nodes, dtype=bool)
        self.drain_steps = int(drain_steps)
        self.checkpoint_steps = int(checkpoint_steps)
        self.max_wait_steps = int(max_wait_steps)
        self.track_nodes = track_nodes
        self.step_no = 0
        self.next_id = 0
        cap = 1024
        self.j_id = np.zeros(cap, dtype=np.int64)
        self.j_tenant = np.zeros(cap, dtype=np.int64)
        self.j_gpus = np.zeros(cap, dtype=np.int64)
        self.j_state = np.zeros(cap, dtype=np.int8)  # 0 = empty slot
        self.j_queued_at = np.zeros(cap, dtype=np.int64)
        self.j_started_at = np.zeros(cap, dtype=np.int64)
        self.j_node = np.full(cap, -1, dtype=np.int64)
        self.size = 0
        # draining holds: (release step, node, gpus)
        self.drains: list[tuple[int, int, int]] = []
        self.reservations = np.zeros(self.n, dtype=np.int64)
        self.normal_cap: int | None = None
        self.total_preemptions = 0
        self.total_lost = 0.0

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
        for name in ("j_id", "j_tenant", "j_gpus", "j_state", "j_queued_at", "j_started_at", "j_node"):
            arr = getattr(self, name)
            fill = -1 if name == "j_node" else 0
            grown = np.full(new, fill, dtype=arr.dtype)
            grown[:cap] = arr
            setattr(self, name, grown)

    def _compact(self) -> None:
        keep = np.flatnonzero(self.j_state[: self.size] != DONE)
        k = keep.size
        for name in ("j_id", "j_tenant", "j_gpus", "j_state", "j_queued_at", "j_started_at", "j_node"):
            arr = getattr(self, name)
            arr[:k] = arr[keep]
            arr[k: self.size] = -1 if name == "j_node" else 0
        self.size = k

    @property
    def capacity(self) -> int:
        return int(self.node_cap[self.node_ok].sum())

    def draining_gpus(self) -> int:
        return int(sum(g for _, node, g in self.drains if node < 0 or self.node_ok[node]))

    def active(self) -> np.ndarray:
        st = self.j_state[: self.size]
        return np.flatnonzero((st == QUEUED) | (st == RUNNING))

    def running_per_tenant(self) -> np.ndarray:
        r = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        return np.bincount(self.j_tenant[r], weights=self.j_gpus[r], minlength=self.n).astype(np.int64)

    def queued_per_tenant(self) -> np.ndarray:
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        return np.bincount(self.j_tenant[q], weights=self.j_gpus[q], minlength=self.n).astype(np.int64)

    # ---- actions ----------------------------------------------------------------------------
    def set_reservations(self, reservations: np.ndarray, normal_cap: int | None = None) -> None:
        self.reservations = np.maximum(np.asarray(reservations, dtype=np.int64), 0)
        self.normal_cap = normal_cap

    def preempt(self, job_ids: np.ndarray) -> tuple[int, float]:
        """Requeue running jobs: their GPUs drain for `drain_steps`, progress since checkpoint is lost."""
        if len(job_ids) == 0:
            return 0, 0.0
        ids = np.asarray(job_ids, dtype=np.int64)
        pos = np.flatnonzero(np.isin(self.j_id[: self.size], ids) & (self.j_state[: self.size] == RUNNING))
        lost = 0.0
        for p in pos:
            ran = self.step_no - self.j_started_at[p]
            lost += float(self.j_gpus[p] * (ran % self.checkpoint_steps))
            self._release(p, drain=True)
            self.j_state[p] = QUEUED
            self.j_queued_at[p] = self.step_no
        self.total_preemptions += int(pos.size)
        self.total_lost += lost
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
            for p in on:
                self.j_state[p] = QUEUED
                self.j_queued_at[p] = self.step_no
                self.j_node[p] = -1
        self.node_free[node] = 0
        self.drains = [d for d in self.drains if d[1] != node]
        return [int(self.j_id[p]) for p in on]

    def stranded(self) -> np.ndarray:
        """Positions of jobs 'running' on a node that is down."""
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        nodes = self.j_node[run]
        return run[(nodes >= 0) & ~self.node_ok[np.maximum(nodes, 0)]]

    def restore_node(self, node: int) -> None:
        if not self.node_ok[node]:
            self.node_ok[node] = True
            self.node_free[node] = self.node_cap[node]

    def _release(self, p: int, drain: bool) -> None:
        g = int(self.j_gpus[p])
        node = int(self.j_node[p])
        if node >= 0 and not self.node_ok[node]:
            pass  # the node is gone: nothing to free or drain
        elif drain and self.drain_steps > 0:
            self.drains.append((self.step_no + self.drain_steps, node, g))
        elif node >= 0 and self.node_ok[node]:
            self.node_free[node] += g
        self.j_node[p] = -1

    # ---- one step ---------------------------------------------------------------------------
    def step(self, wanted_gpus: np.ndarray) -> StepStats:
        """Advance one step: drains finish, demand is reconciled into jobs, the queue is scheduled."""
        self.step_no += 1
        stats = StepStats()
        # 1. drained GPUs come back
        if self.drains:
            keep = []
            for until, node, g in self.drains:
                if until <= self.step_no:
                    if node >= 0 and self.node_ok[node]:
                        self.node_free[node] += g
                else:
                    keep.append((until, node, g))
            self.drains = keep
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
        stats.started_waits.append(started)
        run = self.running_per_tenant()
        stats.served = run
        stats.wanted = np.where(np.isfinite(wanted), wanted, run)
        stats.running_gpus = int(run.sum())
        stats.draining_gpus = self.draining_gpus()
        stats.capacity = self.capacity
        return stats

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
        self.size += k

    def _finish(self, act: np.ndarray, drop: np.ndarray) -> None:
        """Tenants whose demand fell lose queued jobs first (newest), then running ones (oldest: done)."""
        sel = act[drop[self.j_tenant[act]] > 0]
        if sel.size == 0:
            return
        queued = self.j_state[sel] == QUEUED
        key = np.where(queued, -self.j_queued_at[sel].astype(float), 1e12 + self.j_started_at[sel])
        order = np.lexsort((key, self.j_tenant[sel]))
        sel = sel[order]
        ten = self.j_tenant[sel]
        first = np.r_[0, np.flatnonzero(np.diff(ten)) + 1]
        rank = np.arange(sel.size) - np.repeat(first, np.diff(np.r_[first, sel.size]))
        gone = sel[rank < drop[ten]]
        for p in gone[self.j_state[gone] == RUNNING]:
            self._release(int(p), drain=False)
        self.j_state[gone] = DONE

    def _schedule(self) -> np.ndarray:
        q = np.flatnonzero(self.j_state[: self.size] == QUEUED)
        if q.size == 0:
            return np.empty((0, 2))
        free = int(self.node_free[self.node_ok].sum())
        if free <= 0:
            return np.empty((0, 2))
        prio = self.prio_of_tenant[self.j_tenant[q]]
        wait = self.step_no - self.j_queued_at[q]
        # class 0 first: high, then normal and aged low work, then low
        cls = np.where(prio == PRIORITY["high"], 0, np.where((prio == PRIORITY["normal"]) | (wait >= self.max_wait_steps), 1, 2))
        order = np.lexsort((self.j_queued_at[q], cls))
        q = q[order]
        gpus = self.j_gpus[q]
        ten = self.j_tenant[q]
        run = self.running_per_tenant()
        held = np.maximum(self.reservations - run, 0)
        placed = np.zeros(q.size, dtype=bool)
        # phase A: each tenant fills its own held GPUs
        if held.any():
            has_hold = held[ten] > 0
            if has_hold.any():
                idx = np.flatnonzero(has_hold)
                o = idx[np.argsort(ten[idx], kind="stable")]
                t_o = ten[o]
                cs = np.cumsum(gpus[o])
                first = np.r_[0, np.flatnonzero(np.diff(t_o)) + 1]
                base = np.repeat(np.r_[0, cs[first[1:] - 1]] if first.size else [], np.diff(np.r_[first, o.size]))
                within = cs - base
                ok = within <= held[t_o]
                placed[o[ok]] = True
                used_hold = np.bincount(t_o[ok], weights=gpus[o[ok]], minlength=self.n)
                free_after_a = free - int(used_hold.sum())
                held_left = int(np.maximum(held - used_hold, 0).sum())
            else:
                free_after_a, held_left = free, int(held.sum())
        else:
            free_after_a, held_left = free, 0
        general = max(free_after_a - held_left, 0)
        # phase B: the rest, in class order: a strict prefix, then up to two backfill passes for jobs that
        # fit in what is left; non-preemptible normal work is capped by its quota
        rest = np.flatnonzero(~placed)
        if rest.size and general > 0:
            g = gpus[rest]
            is_norm = self.prio_of_tenant[ten[rest]] == PRIORITY["normal"]
            norm_room = None
            if self.normal_cap is not None:
                norm_room = self.normal_cap - int(run[self.prio_of_tenant == PRIORITY["normal"]].sum())
            left = general
            for _ in range(3):
                cand = ~placed[rest] & (g <= left)
                if norm_room is not None:
                    cand &= ~is_norm | (np.cumsum(np.where(cand & is_norm, g, 0)) <= norm_room)
                if not cand.any():
                    break
                ok = cand & (np.cumsum(np.where(cand, g, 0)) <= left)
                placed[rest[ok]] = True
                left -= int(g[ok].sum())
                if norm_room is not None:
                    norm_room -= int(g[ok & is_norm].sum())
                if left <= 0:
                    break
        idx = q[placed]
        if idx.size == 0:
            return np.empty((0, 2))
        if self.track_nodes:
            idx = self._place_on_nodes(idx)
        else:
            self.j_node[idx] = 0
            self.node_free[0] -= int(self.j_gpus[idx].sum())
        self.j_state[idx] = RUNNING
        self.j_started_at[idx] = self.step_no
        waits = self.step_no - self.j_queued_at[idx]
        return np.stack([waits, self.prio_of_tenant[self.j_tenant[idx]]], axis=1).astype(float)

    def _place_on_nodes(self, idx: np.ndarray) -> np.ndarray:
        """First-fit onto healthy nodes; a job that fits nowhere stays queued (fragmentation is real)."""
        ok_jobs = []
        free = np.where(self.node_ok, self.node_free, 0)
        for p in idx:
            g = self.j_gpus[p]
            fits = np.flatnonzero(free >= g)
            if fits.size == 0:
                continue
            node = int(fits[0])
            free[node] -= g
            self.j_node[p] = node
            ok_jobs.append(p)
        self.node_free = np.where(self.node_ok, free, self.node_free)
        return np.asarray(ok_jobs, dtype=np.int64)

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
                    node=node_name(nodes) if node_name else nodes)
        failed = np.flatnonzero(~self.node_ok)
        used = np.bincount(jobs.tenant[running], weights=jobs.gpus[running], minlength=self.n)
        pending = np.bincount(jobs.tenant[~running], weights=jobs.gpus[~running], minlength=self.n)
        return ClusterState(at=at, tenants=tenants, tiers=tiers, capacity=self.capacity,
                            used=used.astype(float), pending=pending.astype(float),
                            jobs=jobs, draining=self.draining_gpus(),
                            failed_nodes=tuple(node_name(failed)) if node_name is not None else ())

    def check_conservation(self) -> None:
        """Every healthy GPU is running a job, draining, or free; raises if the books do not balance."""
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        run = np.setdiff1d(run, self.stranded())
        running = int(self.j_gpus[run].sum())
        free = int(self.node_free[self.node_ok].sum())
        if running + self.draining_gpus() + free != self.capacity:
            raise AssertionError(f"GPU books off: running {running} + draining {self.draining_gpus()} + free {free}"
                                 f" != capacity {self.capacity}")
        ids = self.j_id[: self.size][self.j_state[: self.size] != 0]
        if np.unique(ids).size != ids.size:
            raise AssertionError("a job is counted twice")
