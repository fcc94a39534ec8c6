"""A mixed fleet in the simulated cluster (issue 24): the type tables, and GPUs counted per type."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from daemon.sim.cluster_jobs import NOT_ACCEPTED, RUNNING


class FleetTypes:
    """SimCluster's type tables and per-type views; with no ``node_types`` there is one type and every
    path is the one-model cluster's."""

    # ---- a mixed fleet -----------------------------------------------------------------------
    def _init_types(self, node_types: Sequence[str] | None, caps: np.ndarray | None,
                    accepts: Sequence[tuple[str, ...]] | None,
                    streams: Sequence[tuple[int, tuple[str, ...]]] | None = None) -> None:
        """Type tables: ``type_names`` (sorted), ``node_type`` (index per node), ``acc_rank[tenant, type]`` (the
        type's place in the tenant's preference, 0 first; ``NOT_ACCEPTED`` where it may not run there).

        ``streams`` (a mixed fleet only): the demand streams, each (tenant index, accepted types), where a tenant's
        jobs ask different types (one stream per set of types its jobs accept, as a trace's per-job constraint);
        ``stream_rank[stream, type]`` is then each stream's preference and ``acc_rank`` a tenant's over its streams
        (a type any of its jobs accepts, at the best place any gives it: where a hold of the tenant can serve).
        Without them stream i is tenant i with its ``accepts`` (``stream_rank`` is ``acc_rank``)."""
        if streams is not None:
            if not self.typed:
                raise ValueError("streams: a tenant's jobs ask GPU types on a mixed fleet only (node_types)")
            if accepts is not None:
                raise ValueError("streams or accepts, not both: with streams each stream says what it accepts")
            owner = np.array([int(o) for o, _ in streams], dtype=np.int64)
            if owner.size == 0 or owner.min() < 0 or owner.max() >= self.n:
                raise ValueError("streams: each stream's tenant is an index into tenants")
        else:
            owner = np.arange(self.n, dtype=np.int64)
        self.stream_owner = owner
        self.streamed = streams is not None
        if not self.typed:
            self.type_names: tuple[str, ...] = ()
            self.node_type = np.zeros(self.n_nodes, dtype=np.int64)
            self.acc_rank = np.zeros((self.n, 1), dtype=np.int64)
            self.stream_rank = self.acc_rank
            self.tenant_accepts: list[tuple[str, ...]] = [()] * self.n
            self.stream_accepts = self.tenant_accepts
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
        if streams is not None:
            self.stream_accepts = [tuple(a) if a else () for _, a in streams]
            self.tenant_accepts = [()] * self.n   # a tenant's jobs ask per stream (stream_accepts)
        else:
            self.tenant_accepts = [tuple(a) if a else () for a in (accepts or [()] * self.n)]
            if len(self.tenant_accepts) != self.n:
                raise ValueError("accepts: one entry per tenant")
            self.stream_accepts = self.tenant_accepts
        rank = np.full((len(self.stream_accepts), T), NOT_ACCEPTED, dtype=np.int64)
        pos = {t: i for i, t in enumerate(self.type_names)}
        # work that accepts any type tries the largest pool first (most GPUs; ties by name), as an operator orders
        # a scheduler's node weights or a ClusterQueue's flavors so that untyped work fills the general-purpose
        # nodes before the scarce ones; best fit alone would send one-GPU jobs to the smallest nodes first
        gpus_of_type = np.bincount(self.node_type, weights=caps, minlength=T)
        any_rank = np.empty(T, dtype=np.int64)
        any_rank[np.lexsort((np.arange(T), -gpus_of_type))] = np.arange(T)
        for i, acc in enumerate(self.stream_accepts):
            if not acc:
                rank[i] = any_rank
            for r, t in enumerate(acc):
                if t in pos:  # a type no node has: accepted, never available (the job waits, and is counted)
                    rank[i, pos[t]] = min(rank[i, pos[t]], r)
        self.stream_rank = rank
        if streams is None:
            self.acc_rank = rank
        else:
            self.acc_rank = np.full((self.n, T), NOT_ACCEPTED, dtype=np.int64)
            np.minimum.at(self.acc_rank, owner, rank)
        self.pool_types = None
        self.normal_cap_by_type = None
        # the largest job each tenant can run at all: on the biggest node of a type it accepts
        best = np.array([caps[self.acc_rank[i, self.node_type] < NOT_ACCEPTED].max(initial=0) for i in range(self.n)])
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
