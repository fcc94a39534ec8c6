"""Applies plans to the embedded simulated cluster (the 'real system' of `run --sim` and of the replay).

A window is carried out as the replay's scheduler would: by default as on Kueue (the tenant's hold from the window's
lead time, nothing before: the GPUs are lent until then, and the hold is handed the pool's nodes where the tenant
runs); with ``windows_ahead`` (a replay whose config enables the Slurm actuator: ``replays_slurm``) as on Slurm, a
reservation on which nothing new starts until it is active, and never on the pool's nodes (SimCluster ``_ahead``):
made at the first plan (``actuators.slurm.windows_reserved = "ahead"``), or with ``at_lead_s`` (``"at_lead"``, the
default: ``windows_at_lead_s``) only once the occurrence's lead time is that close, as the Slurm actuator makes it
(daemon/actuators/slurm/windows.py), so that before then its nodes are lent to any job."""

from __future__ import annotations

import contextlib
import datetime as dt

import numpy as np

from daemon.actuators.base import ActionReport
from daemon.config import Config
from daemon.config.windows import window_of
from daemon.policy.types import Notification, Plan
from daemon.policy.windows import pool_spare, reserve_margin_s
from daemon.sim.cluster import SimCluster
from daemon.text import plural


def _sim_id(job_id: str) -> int | None:
    try:
        return int(str(job_id).removeprefix("sim-"))
    except ValueError:
        return None


def replays_slurm(actuators_enabled: list[str]) -> bool:
    """Whether a replay carries windows out as Slurm does (its config enables the Slurm actuator), not as Kueue."""
    return "slurm" in actuators_enabled


def windows_at_lead_s(cfg: Config) -> float | None:
    """How close a window's lead time is when the replay's Slurm makes its reservation: None when it is made ahead
    (``windows_reserved = "ahead"``); else the Slurm actuator's margin, two cycle intervals
    (daemon/policy/windows.py ``reserve_margin_s``)."""
    if cfg.actuators.slurm.windows_reserved == "ahead":
        return None
    return reserve_margin_s(cfg.cycle.interval_s)


class SimulatorActuator:
    name = "simulator"

    def __init__(self, cluster: SimCluster, tenants: tuple[str, ...], dry_run: bool = False,
                 node_index=None, lock=None, windows_ahead: bool = False, at_lead_s: float | None = None,
                 min_lead_s: float = 0.0) -> None:
        self.cluster = cluster
        self.min_lead_s = min_lead_s         # Config.window_min_lead_s: the Slurm actuator's reservation starts then
        self.windows_ahead = windows_ahead   # Slurm's windows: reservations made ahead (module docstring)
        self.at_lead_s = at_lead_s           # made only this close to the lead time (None: at the first plan)
        self.lock = lock or contextlib.nullcontext()  # shared with the simulated source when one drives it
        self.node_index = node_index or (lambda name: None)
        self.index = {t: i for i, t in enumerate(tenants)}
        self.dry_run = dry_run
        self.notified: list[Notification] = []

    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        res = np.zeros(self.cluster.n, dtype=np.int64)
        for t, r in plan.reservations.items():
            i = self.index.get(t)
            if i is not None:
                res[i] = r
        normal_cap = min(plan.quotas.values()) if plan.quotas else None
        ahead, from_pool = self._ahead(plan) if self.windows_ahead else (None, None)
        # a pooled hold: the pooled tenants' reservations held together, as whole nodes (one Slurm reservation
        # with all their accounts); a plan without a pool after one with it lets the pool go
        pool = None
        if plan.pooled or self.cluster.pool_members.any():
            members = np.zeros(self.cluster.n, dtype=bool)
            for t in plan.pooled:
                i = self.index.get(t)
                if i is not None:
                    members[i] = True
            # a pooled tenant's window is its own hold (its reservation, only its account); the rest is the pool's
            own = np.zeros(self.cluster.n, dtype=np.int64)
            for t, g in plan.window_holds.items():
                i = self.index.get(t)
                if i is not None and members[i]:
                    own[i] = min(int(g), int(res[i]))
            # a window's reservation made at its lead time, not active yet, covers its tenant's share of the pool
            # already (the Slurm actuator's ``covered``), so that the pool does not take other nodes for it
            pre = np.minimum(from_pool.sum(axis=1), res - own) if from_pool is not None else 0
            gpn_ = self.cluster.gpus_per_node
            pool = (members, int(-(-int((res - own - pre)[members].sum()) // gpn_) * gpn_))
            res[members] = own[members]
        by_type = self._by_type(plan, from_pool)
        pool_types = self._pool_types(plan) if by_type is not None and plan.pooled else None
        cap_t = None
        if by_type is not None and plan.shared_cap_by_type:
            cap_t = np.array([plan.shared_cap_by_type.get(t, 0) for t in self.cluster.type_names], dtype=np.int64)
        ids = [i for i in (_sim_id(p.job_id) for p in plan.preemptions) if i is not None]
        gpn = self.cluster.gpus_per_node
        rep.actions.append(f"hold {plural(int((-(-res // gpn)).sum()), 'whole node')} ({plural(int(res.sum()), 'GPU')} "
                           f"asked) for {plural(int((res > 0).sum()), 'tenant')}")
        if pool is not None and pool[1] > 0:
            rep.actions.append(f"hold {plural(pool[1] // gpn, 'whole node')} as one pool for "
                               f"{plural(int(pool[0].sum()), 'tenant')}")
        if ids:
            rep.actions.append(f"preempt {plural(len(ids), 'job')}")
        if not self.dry_run:
            # preempt first: the holds then prefer the nodes the preemptions are draining
            with self.lock:
                done, _ = self.cluster.preempt(np.array(ids)) if ids else (0, 0.0)
                self.cluster.set_reservations(res, normal_cap, pool=pool, by_type=by_type,
                                              pool_types=pool_types, normal_cap_by_type=cap_t,
                                              ahead=ahead, ahead_from_pool=from_pool)
            if done < len(ids):
                rep.actions.append(f"{plural(len(ids) - done, 'job')} had already left the running set")
        return rep

    def _by_type(self, plan: Plan, from_pool: np.ndarray | None = None) -> np.ndarray | None:
        """A type-aware plan's holds per (tenant, type) on a mixed fleet, pooled tenants' summed in the pool's row
        (index n), except what a pooled tenant's windows hold on each type (Plan.window_holds_by_type): that stays
        in its own row, its alone, as a Kueue hold flavor's quota per type or a Slurm window reservation's nodes of
        each type hold it; None for a type-blind plan (holds then land by the node rule alone). `from_pool`
        (``_ahead``): what a Slurm window's reservation made at its lead time covers of its tenant's pool share per
        type before it is active, left out of the pool's row."""
        c = self.cluster
        if not c.typed or not plan.holds_by_type:
            return None
        pos = {t: k for k, t in enumerate(c.type_names)}
        out = np.zeros((c.n + 1, len(c.type_names)), dtype=np.int64)
        pooled = set(plan.pooled)
        for tenant, by in plan.holds_by_type.items():
            i = self.index.get(tenant)
            if i is None:
                continue
            win = plan.window_holds_by_type.get(tenant, {}) if tenant in pooled else {}
            for typ, g in by.items():
                if typ in pos:
                    own = min(int(win.get(typ, 0)), int(g))
                    out[i, pos[typ]] += own if tenant in pooled else int(g)
                    if tenant in pooled:
                        pre = min(int(from_pool[i, pos[typ]]), int(g) - own) if from_pool is not None else 0
                        out[c.n, pos[typ]] += int(g) - own - pre
        return out

    def _ahead(self, plan: Plan) -> tuple[np.ndarray, np.ndarray | None]:
        """Per tenant (and GPU type on a mixed fleet: one column per ``type_names``, else one), the GPUs of its
        windows whose Slurm reservation is made ahead and not active now: all its windows' GPUs (a window's
        reservation is made when it is declared, and slurmctld moves it on to the next occurrence by itself; with
        ``at_lead_s``, only a window whose next lead time is at most that far: the reservation is made then) less
        what the plan holds for them now (``window_holds``, from the lead time). And, with ``at_lead_s`` (else
        None), how many of them a pooled tenant's reservation may take from the pool's nodes: what the pool gives
        up when the window opens, its window's GPUs up to the tenant's hold in the plan now (the actuator's rule,
        daemon/policy/windows.py ``pool_spare``, which the Slurm actuator uses)."""
        c = self.cluster
        names = list(c.type_names) if c.typed else ["gpu"]
        pos = {t: k for k, t in enumerate(names)}
        out = np.zeros((c.n, len(names)), dtype=np.int64)
        from_pool = np.zeros((c.n, len(names)), dtype=np.int64) if self.at_lead_s is not None else None
        pooled = set(plan.pooled)
        now = dt.datetime.fromisoformat(plan.at)
        now = now if now.tzinfo is not None else now.replace(tzinfo=dt.timezone.utc)   # a naive replay index: UTC
        for d in plan.windows:
            w = window_of(d)
            if self.at_lead_s is not None:
                lead = w.next_lead(now, self.min_lead_s)
                if lead is None or (lead - now).total_seconds() > self.at_lead_s:
                    continue
            i = self.index.get(w.tenant)
            for typ, g in w.gpus_by_type(names[0]).items():
                if i is not None and typ in pos:
                    out[i, pos[typ]] += g
                    if from_pool is not None and w.tenant in pooled:
                        from_pool[i, pos[typ]] += pool_spare(plan, w.tenant, typ if c.typed else None, g)
        for t, g in plan.window_holds.items():
            i = self.index.get(t)
            if i is None:
                continue
            by = plan.window_holds_by_type.get(t) if c.typed else None
            for typ, held in (by or {names[0]: g}).items():
                if typ in pos:
                    out[i, pos[typ]] = max(out[i, pos[typ]] - int(held), 0)
        return out, from_pool

    def _pool_types(self, plan: Plan) -> np.ndarray:
        """Which pooled tenants may start on the pool's nodes of each type: those the plan holds on that type."""
        c = self.cluster
        pos = {t: k for k, t in enumerate(c.type_names)}
        out = np.zeros((c.n, len(c.type_names)), dtype=bool)
        for tenant in plan.pooled:
            i = self.index.get(tenant)
            for typ, g in plan.holds_by_type.get(tenant, {}).items():
                if i is not None and typ in pos and g > 0:
                    out[i, pos[typ]] = True
        return out

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run, [f"requeue {j}: {reason}" for j in job_ids])
        ids = [i for i in (_sim_id(j) for j in job_ids) if i is not None]
        if ids and not self.dry_run:
            with self.lock:
                done, _ = self.cluster.preempt(np.array(ids))
            if done < len(ids):
                rep.actions.append(f"{plural(len(ids) - done, 'job')} had already left the running set")
        return rep

    def reclaim(self, job_ids: list[str], reason: str) -> ActionReport:
        """The health policy's reclaim (daemon/actuators/base.py `ReclaimsJobs`): on the simulator, as on Slurm, a
        requeue, which is the cluster's preemption (drain, work since the checkpoint lost)."""
        return self.requeue(job_ids, reason)

    def fence_node(self, node: str, reason: str) -> ActionReport:
        """The node is gone: make sure the simulated cluster schedules nothing more on it."""
        rep = ActionReport(self.name, self.dry_run, [f"fence {node}"])
        idx = self.node_index(node)
        if idx is not None and not self.dry_run:
            with self.lock:
                if self.cluster.node_ok[idx]:
                    self.cluster.fail_node(idx, requeue=True)
        return rep

    def notify(self, notes: list[Notification]) -> ActionReport:
        self.notified.extend(notes)
        return ActionReport(self.name, self.dry_run, [f"notify {n.tenant}" for n in notes])
