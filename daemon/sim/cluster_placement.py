"""Where the simulated cluster starts queued jobs: by priority, on their holder's held nodes first, on one
node each (so fragmentation is real), on a type they accept, never on GPUs that are not free, nor on a Slurm
window's reservation made ahead (cluster_holds ``_ahead``)."""

from __future__ import annotations

import numpy as np

from daemon.policy.state import PRIORITY
from daemon.sim.cluster_jobs import NOT_ACCEPTED, QUEUED, RUNNING, UNHELD, lexorder


class Placement:
    """SimCluster's scheduler: one pass over the queue, placing what fits."""

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
            node_of = self._place_typed(q, ten, prio, cls, gpus, free, self.j_stream[q])
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
        # phase B: everything else on unheld nodes, in class order; non-preemptible normal work is capped. Not on a
        # node of a Slurm window's reservation made ahead (node_ahead): no job, whose time limit is none, starts there
        rest = np.flatnonzero(node_of < 0)
        open_nodes = np.flatnonzero(self.node_ok & (holder == UNHELD) & (self.node_ahead == UNHELD) & (free > 0))
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
                     free: np.ndarray, strm: np.ndarray) -> np.ndarray:
        """A mixed fleet's placement: as ``_place``, but a job only goes to nodes of a type its stream (its tenant,
        without ``streams``) accepts, and its preferred types first (every class's first choices before anyone's
        second). A tenant whose jobs ask different types (several streams) fills its held nodes job by job, each
        on a type it accepts, as a reservation for the account serves any of its jobs that can run there."""
        node_of = np.full(q.size, -1, dtype=np.int64)
        holder, n, rank = self.node_holder, self.n, self.acc_rank
        held_free = self.node_ok & (holder >= 0) & (free > 0)
        own = held_free & (holder < n)
        own[own] = rank[holder[own], self.node_type[own]] < NOT_ACCEPTED
        multi = np.bincount(self.stream_owner, minlength=n) > 1 if self.streamed else np.zeros(n, dtype=bool)
        mixed = own & multi[np.minimum(np.maximum(holder, 0), max(n - 1, 0))] if multi.any() else None
        if mixed is not None:
            own &= ~mixed
        hn = np.flatnonzero(own)
        if hn.size:  # the holder's jobs on its held nodes, preferred types first, fullest node first
            hh = holder[hn]
            o = lexorder(free[hn], rank[hh, self.node_type[hn]], hh)
            hn, hh = hn[o], hh[o]
            self._fill_held(hn, hh, ten, gpus, free, node_of)   # a mixed holder's total is 0: none of its jobs
        if mixed is not None and mixed.any():
            for h in np.unique(holder[mixed]).tolist():
                jobs = np.flatnonzero((ten == h) & (node_of < 0))
                if jobs.size:
                    mine = np.flatnonzero(mixed & (holder == h))
                    node_of[jobs] = self._fit_typed(gpus[jobs], cls[jobs], ten[jobs], mine, free, strm=strm[jobs])
        if (held_free & (holder == n)).any():
            nodes = np.flatnonzero(held_free & (holder == n) & (free > 0))
            if self.pool_types is None:
                jobs = np.flatnonzero(self.pool_members[ten] & (node_of < 0))
                if jobs.size:
                    node_of[jobs] = self._fit_typed(gpus[jobs], cls[jobs], ten[jobs], nodes, free, strm=strm[jobs])
            else:  # per type, the members the plan holds there
                for t in np.unique(self.node_type[nodes]).tolist():
                    jobs = np.flatnonzero(self.pool_members[ten] & self.pool_types[ten, t] & (node_of < 0))
                    if jobs.size:
                        on_t = nodes[self.node_type[nodes] == t]
                        node_of[jobs] = self._fit_typed(gpus[jobs], cls[jobs], ten[jobs], on_t, free,
                                                        strm=strm[jobs])
        rest = np.flatnonzero(node_of < 0)
        open_nodes = np.flatnonzero(self.node_ok & (holder == UNHELD) & (self.node_ahead == UNHELD) & (free > 0))
        if rest.size and open_nodes.size:
            rest = self._under_normal_cap(rest, prio, gpus)
            room = None
            if self.normal_cap_by_type is not None:   # the high tier's guarantee per type: normal work kept out
                run_t = self.running_per_type()[self.prio_of_tenant == PRIORITY["normal"]].sum(axis=0)
                room = np.maximum(self.normal_cap_by_type - run_t, 0)
            if rest.size:
                node_of[rest] = self._fit_typed(gpus[rest], cls[rest], ten[rest], open_nodes, free, room,
                                                strm=strm[rest])
        return node_of

    def _fit_typed(self, gpus: np.ndarray, cls: np.ndarray, ten: np.ndarray, nodes: np.ndarray,
                   free: np.ndarray, room: np.ndarray | None = None, *, strm: np.ndarray) -> np.ndarray:
        """``_fit`` on a mixed fleet: class by class, preference rank by rank, per set of accepted types (each job's
        stream's: ``strm``), only on nodes of the types at that rank of the set. ``room`` (GPUs per type, updated
        in place) caps what non-preemptible normal work may start on each type (the plan's ``shared_cap_by_type``)."""
        out = np.full(gpus.size, -1, dtype=np.int64)
        if nodes.size == 0:
            return out
        rows, set_of = np.unique(self.stream_rank[strm], axis=0, return_inverse=True)
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
