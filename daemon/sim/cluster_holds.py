"""Holds in the simulated cluster: whole-node reservations that only their holder's jobs may start on,
as a Slurm reservation or a Kueue quota on labelled nodes enforces them."""

from __future__ import annotations

import numpy as np

from daemon.policy.hand_over import hand_over
from daemon.policy.state import PRIORITY
from daemon.sim.cluster_jobs import NOT_ACCEPTED, RUNNING, UNHELD, lexorder


class Holds:
    """SimCluster's holds: which nodes each tenant (or the shared pool) holds, overall and per type."""

    # ---- holds -------------------------------------------------------------------------------
    def set_reservations(self, reservations: np.ndarray, normal_cap: int | None = None,
                         pool: tuple[np.ndarray, int] | None = None, by_type: np.ndarray | None = None,
                         pool_types: np.ndarray | None = None, normal_cap_by_type: np.ndarray | None = None,
                         ahead: np.ndarray | None = None, ahead_from_pool: np.ndarray | None = None) -> None:
        """Hold whole nodes: ceil(GPUs / gpus_per_node) per tenant, and optionally one pool of nodes for a set
        of tenants (``pool = (member mask, GPUs)``, held as floor(GPUs / gpus_per_node) nodes). Nodes already
        held are kept while still wanted (those where the holder runs least are let go first), except one its
        holder can never use; new ones are taken by the actuators' rule (``whole_nodes.rank``, see below).

        A mixed fleet: ``by_type`` ((n + 1) x types GPUs, row n the pool) holds per type, and ``pool_types``
        (n x types) says which pool members may start on the pool's nodes of each type (those the plan holds
        there: a pooled h100 hold is for the pooled tenants held on h100, not for pooled work that runs anywhere
        and would fill it first); None = every member on every type. ``normal_cap_by_type`` (GPUs per type) caps
        non-preemptible normal work per type, as ``normal_cap`` does in all (a QOS GRES limit per type, a Kueue
        flavor's quota).

        ``ahead`` (n x groups GPUs: one column on a one-model cluster, one per type on a mixed fleet) replays Slurm's
        windows (None: Kueue's, whose window is a hold from its lead time and nothing before): per tenant, the GPUs
        of its windows whose reservation is made ahead and not active now; ``ahead_from_pool`` (the same shape, or
        None) how many of those GPUs a pooled tenant's reservation made now may take from the pool's nodes (Slurm's
        windows made at the lead time, ``windows_reserved = "at_lead"``). See ``_ahead``."""
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
            self._set_typed(by_type, ahead, ahead_from_pool)
            return
        gpn, n, N = self.gpus_per_node, self.n, self.n_nodes
        want = np.zeros(n + 1, dtype=np.int64)
        want[:n] = -(-self.reservations // gpn)
        want[n] = self.pool_gpus // gpn if self.pool_members.any() else 0
        holder = self.node_holder
        holder[~self.node_ok] = UNHELD
        was = holder.copy()
        have = np.bincount(holder[holder >= 0], minlength=n + 1)
        if ahead is None and (want == have).all() and not (holder >= 0).any():
            return                                       # nothing held, nothing wanted
        # a held node its holder can never use is let go, so that the hold can move to one it can use; a hold
        # otherwise keeps its nodes
        r_ten, r_node, r_g, firm_j, firm_all, useless = self._running_and_useless(holder)
        if ahead is None and (want == have).all() and not useless.any():
            return
        if useless.any():
            holder[useless] = UNHELD
            have = np.bincount(holder[holder >= 0], minlength=n + 1)
        if self.pool_members.any() and have[n] > want[n] and ahead is None:   # Slurm: no hand-over (_ahead)
            self._hand_over(want, have, r_ten, r_node, r_g, firm_j)
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
        closed = self._ahead(ahead, was, np.zeros(N, dtype=np.int64), r_ten, r_node, r_g, firm_j, firm_all,
                             ahead_from_pool)
        have = np.bincount(holder[holder >= 0], minlength=n + 1)     # a window's reservation took pool nodes
        need = np.maximum(want - have, 0)
        if not need.any():
            self._ahead_done(ahead)
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
            cand = np.flatnonzero((holder == UNHELD) & self.node_ok & ~self._closed_to(closed, h, was))
            take = int(min(need[h], cand.size))
            if take <= 0:
                continue
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            own_firm = np.bincount(r_node[js], weights=r_g[js] * firm_j[js], minlength=N)
            firm = (firm_all - own_firm).astype(np.int64)
            score = (own + soon).astype(np.int64)
            k = (((firm * (4 * gpn + 1) + (2 * gpn - score)) * 2 + (self.node_ahead != h)) * N + idx)[cand]
            best = np.argpartition(k, take - 1)[:take] if take < cand.size else np.arange(cand.size)
            holder[cand[best]] = h
        self._ahead_done(ahead)

    def _running_and_useless(self, holder: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                  np.ndarray, np.ndarray]:
        """What both hold rules (one model, typed) start from: the running jobs on usable nodes (tenant, node,
        GPUs), which of them cannot be preempted (not the low tier), those firm GPUs per node, and the held nodes
        their holder can never use: other owners' firm work leaves no room for the holder's smallest job there,
        even with everything preemptible cleared (a pool's holder: its members' smallest job)."""
        n, N = self.n, self.n_nodes
        run = np.flatnonzero(self.j_state[: self.size] == RUNNING)
        r_ten, r_node, r_g = self.j_tenant[run], self.j_node[run], self.j_gpus[run]
        alive = self.node_ok[r_node]
        r_ten, r_node, r_g = r_ten[alive], r_node[alive], r_g[alive]
        firm_j = self.prio_of_tenant[r_ten] != PRIORITY["low"]           # work that cannot be preempted
        firm_all = np.bincount(r_node[firm_j], weights=r_g[firm_j], minlength=N)
        h_of_job = holder[r_node]
        mine_j = (h_of_job == r_ten) | ((h_of_job == n) & self.pool_members[r_ten])
        mine_firm = np.bincount(r_node[mine_j & firm_j], weights=r_g[mine_j & firm_j], minlength=N)
        smallest = np.r_[self.job_size, self.job_size[self.pool_members].min() if self.pool_members.any() else 1]
        useless = (holder >= 0) & (firm_all - mine_firm > self.node_cap - smallest[np.maximum(holder, 0)])
        return r_ten, r_node, r_g, firm_j, firm_all, useless

    def _hand_over(self, want: np.ndarray, have: np.ndarray, r_ten: np.ndarray, r_node: np.ndarray, r_g: np.ndarray,
                   firm_j: np.ndarray) -> None:
        """A pool member whose own hold grows (its window's, held apart from the pool) takes first the pool's nodes
        it runs on, of those the shrinking pool gives up: its work there stays where it is, and what the pool lets
        go of is where it was already running. Per member in index order, the nodes the one hand-over rule picks
        (daemon/policy/hand_over.py, which the Kubernetes node holds call too: NodeHolds._hand_over). Updates
        ``have`` (nodes)."""
        n, N, holder, cap = self.n, self.n_nodes, self.node_holder, self.node_cap
        for h in np.flatnonzero(self.pool_members & (want[:n] > have[:n])).tolist():
            if have[n] <= want[n]:
                return
            pool = np.flatnonzero(holder == n)            # all usable: a node that is not is unheld before
            js = r_ten == h
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            others_firm = np.bincount(r_node[~js & firm_j], weights=r_g[~js & firm_j], minlength=N)
            # in GPUs, as the actuator counts: the asks are whole nodes of gpus_per_node (the last node may be smaller)
            gpn = self.gpus_per_node
            grow = int(want[h]) * gpn - int(cap[holder == h].sum())
            spare = int(cap[pool].sum()) - int(want[n]) * gpn
            take = pool[hand_over(cap[pool], own[pool], others_firm[pool], grow=grow, spare=spare,
                                  job_gpus=int(self.job_size[h]))]
            holder[take] = h
            have[h] += take.size
            have[n] -= take.size

    def _set_typed(self, by_type: np.ndarray | None, ahead: np.ndarray | None = None,
                   ahead_from_pool: np.ndarray | None = None) -> None:
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
        was = holder.copy()
        if ahead is None and not want.any() and not (holder >= 0).any():
            return
        r_ten, r_node, r_g, firm_j, firm_all, useless = self._running_and_useless(holder)
        held = holder >= 0
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
        if aware and self.pool_members.any() and ahead is None:   # Slurm: no hand-over (_ahead)
            self._hand_over_typed(want, have, r_ten, r_node, r_g, firm_j)
            have = have_of()
        # release: per (holder, group) over its ask, the nodes where it runs least, while the rest still covers it
        for h, g in zip(*np.nonzero(have > want)):
            nodes = np.flatnonzero((holder == h) & (group == g))
            nodes = nodes[lexorder(own_node[nodes].astype(np.int64))]
            spare = int(have[h, g] - want[h, g])
            drop = np.cumsum(cap[nodes]) <= spare
            holder[nodes[drop]] = UNHELD
        closed = self._ahead(ahead, was, self.node_type, r_ten, r_node, r_g, firm_j, firm_all, ahead_from_pool)
        have = have_of()
        need = np.maximum(want - have, 0)
        if aware:  # never acquired where it would be let go at once (a type no holder of it can use)
            need[:n] = np.where(self.acc_rank < NOT_ACCEPTED, need[:n], 0)
            need[n] = np.where(ok_pool, need[n], 0)
        if not need.any():
            self._ahead_done(ahead)
            return
        soon = self.node_free + self.node_draining()
        idx = np.arange(N, dtype=np.int64)
        gpn = int(cap.max()) if N else 1
        for h, g in zip(*np.nonzero(need)):
            cand = np.flatnonzero((holder == UNHELD) & self.node_ok & (group == g) & ~self._closed_to(closed, h, was))
            if cand.size == 0:
                continue
            js = np.flatnonzero(self.pool_members[r_ten]) if h == n else np.flatnonzero(r_ten == h)
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            own_firm = np.bincount(r_node[js], weights=r_g[js] * firm_j[js], minlength=N)
            firm = (firm_all - own_firm).astype(np.int64)
            score = (own + soon).astype(np.int64)
            k = (((firm * (4 * gpn + 1) + (2 * gpn - score)) * 2 + (self.node_ahead != h)) * N + idx)[cand]
            cand = cand[np.argsort(k, kind="stable")]
            covered = np.cumsum(cap[cand])
            take = int(np.searchsorted(covered, need[h, g])) + 1   # nodes until the ask is covered
            holder[cand[:take]] = h
        self._ahead_done(ahead)

    def _hand_over_typed(self, want: np.ndarray, have: np.ndarray, r_ten: np.ndarray, r_node: np.ndarray,
                         r_g: np.ndarray, firm_j: np.ndarray) -> None:
        """``_hand_over`` per GPU type (a mixed fleet; ``want``/``have``: (n + 1) x types GPUs, row n the pool): a
        pool member whose own hold grows on a type (its window's there, held apart from the pool) takes first the
        pool's nodes of that type where it runs, of the GPUs the pool gives up on that type: its work stays where it
        is. Per member in index order, per type, the nodes the one hand-over rule picks (daemon/policy/hand_over.py;
        NodeHolds._hand_over on Kubernetes). Updates ``have``."""
        n, N, holder, cap = self.n, self.n_nodes, self.node_holder, self.node_cap
        for h in np.flatnonzero(self.pool_members).tolist():
            grows = np.flatnonzero((want[h] > have[h]) & (have[n] > want[n]))
            if grows.size == 0:
                continue
            js = r_ten == h
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            others_firm = np.bincount(r_node[~js & firm_j], weights=r_g[~js & firm_j], minlength=N)
            for g in grows.tolist():
                pool = np.flatnonzero((holder == n) & (self.node_type == g) & self.node_ok)
                take = pool[hand_over(cap[pool], own[pool], others_firm[pool], grow=int(want[h, g] - have[h, g]),
                                      spare=int(have[n, g] - want[n, g]), job_gpus=int(self.job_size[h]))]
                holder[take] = h
                got = int(cap[take].sum())
                have[h, g] += got
                have[n, g] -= got

    # ---- Slurm's windows, reserved ahead -----------------------------------------------------
    def _ahead(self, ahead: np.ndarray | None, was: np.ndarray, group: np.ndarray, r_ten: np.ndarray,
               r_node: np.ndarray, r_g: np.ndarray, firm_j: np.ndarray, firm_all: np.ndarray,
               from_pool: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """Slurm's windows (``ahead`` not None; None: Kueue's, nothing to do). On Slurm a window is a reservation
        made ahead (``IGNORE_JOBS``), which slurmctld moves on to the next occurrence on the same nodes
        (daemon/actuators/slurm/windows.py), and tests/actuators/test_slurm_windows.py shows on a real
        slurmctld what it does before it is active: it starts there no job, of any account, whose time limit reaches
        into it, and it cannot be made on, nor moved to, a node of another reservation (the pool's UNLIMITED hold).
        A simulated job has no time limit (its end is when its tenant's demand falls, which nothing knows at its
        start: Slurm's INFINITE, the partitions' default), so from the moment a window's reservation is made nothing
        new starts on its nodes (``node_ahead``, cluster_placement) until it is active (the tenant's hold); what
        runs there keeps running.

        Per tenant and group (GPU type) with GPUs reserved ahead: its reserved nodes are kept while they cover
        them; else they are made afresh, all or none as scontrol makes a reservation, from the nodes in no hold and
        no other window's reservation: first the nodes its hold has just let go (the occurrence that ended: the
        reservation keeps its nodes), then by the holds' acquire rule. A pooled tenant's reservation made at its
        lead time (``from_pool``: up to that many of its GPUs, what the pool gives up when the window opens) takes
        first the pool's nodes where the tenant runs, by the hand-over rule (daemon/policy/hand_over.py); they
        leave the pool (the Slurm actuator takes them out of the pool's reservation before it makes the window's,
        daemon/actuators/slurm/windows.py), and the pool's hold takes others by its own rule until the window
        opens. A tenant with none ahead (its window active,
        or gone) keeps its marks through this call's acquisition, so that its growing hold prefers them (the
        actuator's pick at the lead time: its own nodes win a tie); ``_ahead_done`` then clears them.

        Returns what ``_closed_to`` reads: the marks and which of them expire."""
        if ahead is None:
            return None
        want = np.asarray(ahead, dtype=np.int64).reshape(self.n, -1)
        mark, holder, cap, N = self.node_ahead, self.node_holder, self.node_cap, self.n_nodes
        mark[~self.node_ok | ((holder >= 0) & (mark != holder))] = UNHELD
        soon = self.node_free + self.node_draining()
        gpn = int(cap.max()) if N else 1
        idx = np.arange(N, dtype=np.int64)
        for t, g in zip(*np.nonzero(want)):
            mine = np.flatnonzero((mark == t) & (group == g))
            if int(cap[mine].sum()) >= want[t, g]:
                continue
            mark[mine] = UNHELD
            js = r_ten == t
            own = np.bincount(r_node[js], weights=r_g[js], minlength=N)
            firm = (firm_all - np.bincount(r_node[js], weights=r_g[js] * firm_j[js], minlength=N)).astype(np.int64)
            handed = np.zeros(0, dtype=np.int64)
            if from_pool is not None and from_pool[t, g] > 0 and self.pool_members[t]:
                pool = np.flatnonzero((holder == self.n) & (mark == UNHELD) & self.node_ok & (group == g))
                handed = pool[hand_over(cap[pool], own[pool], firm[pool], grow=int(want[t, g]),
                                        spare=int(from_pool[t, g]), job_gpus=int(self.job_size[t]))]
            rest = int(want[t, g]) - int(cap[handed].sum())
            cand = np.flatnonzero((holder == UNHELD) & (mark == UNHELD) & self.node_ok & (group == g))
            if int(cap[cand].sum()) < rest:
                continue                               # not reserved now (scontrol refuses); tried again next time
            k = (((was != t) * (4 * gpn + 1) * (gpn + 1) + firm * (4 * gpn + 1) + (2 * gpn - (own + soon)))
                 * N + idx)[cand].astype(np.int64)
            cand = cand[np.argsort(k, kind="stable")]
            take = int(np.searchsorted(np.cumsum(cap[cand]), rest)) + 1 if rest > 0 else 0
            holder[handed] = UNHELD                    # out of the pool's reservation, into the window's
            mark[handed] = t
            mark[cand[:take]] = t
        at = np.maximum(mark, 0)
        expiring = (mark >= 0) & (want[at, group] == 0)
        return mark.copy(), expiring

    def _closed_to(self, closed: tuple[np.ndarray, np.ndarray] | None, h: int, was: np.ndarray) -> np.ndarray:
        """The nodes holder `h` may not take (Slurm's windows; none on Kueue's): another reservation's, as they
        were before this call for a pooled tenant's own hold (its window's: on Slurm it is picked before the holds
        shrink, and never on the pool's nodes, so it is not handed the pool's), and every window's reserved ahead
        but its own that is now active."""
        if closed is None:
            return np.zeros(self.n_nodes, dtype=bool)
        mark, expiring = closed
        out = (mark >= 0) & ~((mark == h) & expiring)
        if h < self.n and self.pool_members[h]:
            out |= (was >= 0) & (was != h)
        return out

    def _ahead_done(self, ahead: np.ndarray | None) -> None:
        """After the acquisition: a window's reservation that is active now is the tenant's hold, no longer ahead."""
        if ahead is None:
            return
        want = np.asarray(ahead, dtype=np.int64).reshape(self.n, -1)
        mark = self.node_ahead
        group = self.node_type if want.shape[1] > 1 or self.typed else np.zeros(self.n_nodes, dtype=np.int64)
        mark[(mark >= 0) & (want[np.maximum(mark, 0), group] == 0)] = UNHELD
