"""The simulated cluster's invariants, checked by the property tests after every step: the GPU books
balance (overall and per type), and no held node's free GPUs are left idle while its protected work waits."""

from __future__ import annotations

import numpy as np

from daemon.policy.state import PRIORITY
from daemon.sim.cluster_jobs import DONE, NOT_ACCEPTED, QUEUED, RUNNING, UNHELD


class Invariants:
    """SimCluster's self-checks."""

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
        bad = self.stream_rank[self.j_stream[run], self.node_type[self.j_node[run]]] >= NOT_ACCEPTED
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
        ok &= self.stream_rank[self.j_stream[q]][:, self.node_type] < NOT_ACCEPTED
        own = holder[None, :] == ten[:, None]
        pool = (holder[None, :] == n) & self.pool_members[ten][:, None]
        if self.typed and self.pool_types is not None:
            pool &= self.pool_types[ten][:, self.node_type]
        return self.j_id[q[(ok & (own | pool)).any(axis=1)]]
