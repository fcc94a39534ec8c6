"""Why a windowed tenant waits while its window holds (issue 39, the windows bench): per replayed step, for each
tenant asked about that has jobs queued while one of its windows is in place (from ``start - lead`` to its end),
what its window's nodes carried and where else a job of it could have gone.

A window's GPUs are its tenant's own held nodes. A job of the tenant waits there when they are full of its own work
(its demand above the window's GPUs: then the pool and the unheld nodes had no room for a job either), or when part
of them carries something else: another tenant's low-priority work not cleared yet, another tenant's work that
cannot be preempted (it ends by attrition), GPUs still draining from a preemption, or free GPUs in pieces smaller
than the tenant's job. Each step's queued GPU-minutes go to one cause, the first of these that applies:

- ``demand_above_window``: the window's nodes hold no room for one more job of the tenant (nothing but its own work,
  or less than a job of anything else), and neither the pool nor the unheld nodes had a free place for one;
- ``draining``: a place for a job on the window's nodes once the drains there are done;
- ``low_not_cleared``: a place once another tenant's low-priority work there is cleared too (the plan did not);
- ``others_firm``: no place even then: another tenant's work that cannot be preempted takes part of each node
  with room (it ends by attrition);
- ``free_in_pieces``: free GPUs on the window's nodes, none a place for a whole job, and nothing else there;
- ``other``: anything else (a place existed after the step: the scheduler's order).

Per window occurrence it also keeps what its nodes carried when its hold was first in place (``nodes_at``: the
first step of its lead with nodes held, and its first open step), whether or not the tenant waited then: the GPUs
held, those where a job of the tenant fits once everything preemptible there is cleared (others' work that cannot
be preempted leaves room for it), and the same over the whole cluster, any holder's nodes: the most that any choice
of nodes could have held for the tenant's jobs then, while the work that cannot be preempted keeps running.

It reads the snapshot the plan reads (ClusterState: jobs, nodes, holders), after the step's scheduling, and changes
nothing the replay does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import numpy as np

from daemon.config.windows import WindowConfig
from daemon.policy.state import HELD_BY_POOL, PRIORITY, UNHELD
from daemon.sim.windows_evidence import TenantMeter

CAUSES = ("demand_above_window", "draining", "low_not_cleared", "others_firm", "free_in_pieces", "other")


def window_in_place(ws: list[WindowConfig], now: dt.datetime,
                    min_lead_s: float = 0.0) -> tuple[WindowConfig, str] | None:
    """The window of `ws` in place at `now` and its phase ("lead": held, not open yet; "open"), or None. Held from
    the plan's lead (WindowConfig.held_lead with `min_lead_s`, Config.window_min_lead_s), as the plan holds it."""
    for w in ws:
        start = w.occurrence(now)
        if start is not None and start - w.held_lead(min_lead_s) <= now < start + w.duration:
            return w, ("open" if now >= start else "lead")
    return None


class WindowBreakdown(TenantMeter):
    """A replay hook (TenantMeter's counts, plus per step the cause of each asked tenant's queued GPUs)."""

    def __init__(self, n: int, tenants: list[str], windows: Iterable[WindowConfig], ask: Iterable[str],
                 min_lead_s: float = 0.0) -> None:
        super().__init__(n)
        self.min_lead_s = min_lead_s
        self.tenants = tenants
        ask = set(ask)
        self.windows = {t: [w for w in windows if w.tenant == t] for t in ask}
        self.rows: list[dict] = []
        self.nodes_at: dict[tuple[str, str, str], dict] = {}   # (window, its start, "lead"/"open") -> _nodes_row

    def before_plan(self, c, k, state, measured):
        state = super().before_plan(c, k, state, measured)
        if measured and state.nodes is not None and state.jobs is not None:
            self._look(state)
        return state

    def _look(self, state) -> None:
        now = state.at.to_pydatetime()
        if now.tzinfo is None:
            now = now.replace(tzinfo=dt.timezone.utc)
        jobs, nodes = state.jobs, state.nodes
        pending = np.nan_to_num(np.asarray(state.pending, dtype=float))
        at = nodes.index_of(jobs.node)
        held = np.asarray(nodes.held_by)
        run = jobs.running & (at >= 0)
        on = np.where(at >= 0, held[np.maximum(at, 0)], -1)
        free = np.asarray(nodes.free, dtype=np.int64)
        for t, ws in self.windows.items():
            i = self.tenants.index(t)
            got = window_in_place(ws, now, self.min_lead_s) if ws else None
            if got is None:
                continue
            w, phase = got
            mine = held == i
            size = int(jobs.gpus[jobs.tenant == i].max()) if (jobs.tenant == i).any() else 1
            key = (w.name, f"{w.occurrence(now):%Y-%m-%d %H:%M}", phase)
            if key not in self.nodes_at and mine.any():
                self.nodes_at[key] = self._nodes_row(state, i, w, phase, size, at, run, mine)
            if pending[i] <= 0:
                continue
            theirs = run & (on == i) & (jobs.tenant != i)
            low = int(jobs.gpus[theirs & (jobs.priority == PRIORITY["low"])].sum())
            firm = int(jobs.gpus[theirs & (jobs.priority != PRIORITY["low"])].sum())
            draining = int(np.asarray(nodes.draining)[mine].sum())
            free_mine = int(free[mine].sum())
            places = int((free[mine] // size).sum())
            pool_places = int((free[held == HELD_BY_POOL] // size).sum())
            unheld_places = int((free[held == UNHELD] // size).sum())
            own = int(jobs.gpus[run & (on == i) & (jobs.tenant == i)].sum())
            held_gpus = int(np.asarray(nodes.gpus)[mine].sum())
            # per window node: what would be free were the low work there cleared and the drains done
            m = np.flatnonzero(mine)
            low_at = np.bincount(at[theirs & (jobs.priority == PRIORITY["low"])],
                                 weights=jobs.gpus[theirs & (jobs.priority == PRIORITY["low"])],
                                 minlength=len(held)).astype(np.int64)
            drain_at = np.asarray(nodes.draining, dtype=np.int64)
            after_drain = int(((free[m] + drain_at[m]) // size).sum())
            after_clear = int(((free[m] + drain_at[m] + low_at[m]) // size).sum())
            if held_gpus - own < size:  # nothing but its own work there, or less than one job of anything else
                cause = "demand_above_window" if pool_places == 0 and unheld_places == 0 else "other"
            elif places:
                cause = "other"
            elif after_drain:
                cause = "draining"
            elif after_clear:
                cause = "low_not_cleared"
            elif firm:
                cause = "others_firm"
            elif free_mine:
                cause = "free_in_pieces"
            else:
                cause = "other"
            cap = np.asarray(nodes.gpus, dtype=np.int64)
            busy = [{"gpus": int(cap[j]), "own": int(jobs.gpus[run & (at == j) & (jobs.tenant == i)].sum()),
                     "low": int(low_at[j]),
                     "firm": int(jobs.gpus[theirs & (at == j) & (jobs.priority != PRIORITY["low"])].sum()),
                     "draining": int(drain_at[j]), "free": int(free[j])} for j in m]
            shared = [b for b in busy if b["own"] < b["gpus"]]
            self.rows.append({"at": now.strftime("%H:%M"), "tenant": t, "window": w.name, "phase": phase,
                              "window_gpus": w.total_gpus(), "job_gpus": size,
                              "running": int(np.asarray(state.used)[i]), "queued": int(pending[i]),
                              "held": held_gpus, "own_on_held": own, "low_on_held": low, "others_firm_on_held": firm,
                              "draining_on_held": draining, "free_on_held": free_mine, "places_on_held": places,
                              "places_in_pool": pool_places, "places_unheld": unheld_places,
                              "window_nodes_not_all_its_own": shared, "cause": cause})

    @staticmethod
    def _nodes_row(state, i: int, w: WindowConfig, phase: str, size: int, at: np.ndarray, run: np.ndarray,
                   mine: np.ndarray) -> dict:
        """What window `w`'s nodes (`mine`) carry now, and where in the cluster a job of `size` GPUs of tenant `i`
        could run were everything preemptible cleared (per node: its GPUs less others' work that cannot be
        preempted, in whole jobs), of which on the pool's, unheld and other holders' nodes; and the others' work
        that cannot be preempted on its nodes, per tier, with the median of how long it has run."""
        jobs, nodes = state.jobs, state.nodes
        cap = np.asarray(nodes.gpus, dtype=np.int64)
        firm_j = run & (jobs.tenant != i) & (jobs.priority != PRIORITY["low"])
        low_j = run & (jobs.tenant != i) & (jobs.priority == PRIORITY["low"])
        firm = np.bincount(at[firm_j], weights=jobs.gpus[firm_j], minlength=cap.size).astype(np.int64)
        low = np.bincount(at[low_j], weights=jobs.gpus[low_j], minlength=cap.size).astype(np.int64)
        reach = np.maximum(cap - firm, 0) // size * size
        held = np.asarray(nodes.held_by)
        tier_of = np.asarray(state.tiers)[jobs.tenant[firm_j]]
        on_held = mine[at[firm_j]]
        mins = jobs.runtime_s[firm_j][on_held] / 60.0
        g_held = jobs.gpus[firm_j][on_held]
        return {"window": w.name, "tenant": state.tenants[i], "at": state.at.strftime("%H:%M"), "phase": phase,
                "window_gpus": w.total_gpus(), "job_gpus": size, "held_gpus": int(cap[mine].sum()),
                "held_nodes": int(mine.sum()), "held_nodes_with_others_firm": int((mine & (firm > 0)).sum()),
                "others_firm_on_held_gpus": int(firm[mine].sum()), "low_on_held_gpus": int(low[mine].sum()),
                "its_jobs_fit_on_held_gpus": int(reach[mine].sum()),
                "its_jobs_fit_in_cluster_gpus": int(reach.sum()),
                "its_jobs_fit_elsewhere_gpus": {"pool": int(reach[held == HELD_BY_POOL].sum()),
                                                "unheld": int(reach[held == UNHELD].sum()),
                                                "other_holds": int(reach[(held >= 0) & ~mine].sum())},
                "others_firm_on_held_gpus_by_tier": {str(t): int(g_held[tier_of[on_held] == t].sum())
                                                     for t in sorted(set(tier_of[on_held].tolist()))},
                "others_firm_on_held_run_minutes_median": round(float(np.median(mins)), 1) if mins.size else None,
                "nodes_free_of_others_firm_in_cluster": int(((firm == 0) & (cap > 0)).sum())}

    def summary(self, step_min: float) -> dict:
        """GPU-minutes queued per cause (all tenants asked), per tenant and cause, what each window's nodes carried
        when its hold was first in place and when it opened (``window_nodes``), and the steps."""
        by: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
        per: dict[str, dict[str, float]] = {}
        for r in self.rows:
            g = r["queued"] * step_min
            by[r["cause"]] += g
            per.setdefault(r["tenant"], {}).setdefault(r["cause"], 0.0)
            per[r["tenant"]][r["cause"]] += g
        return {"causes": CAUSES, "gpu_min_by_cause": {k: round(v, 1) for k, v in by.items()},
                "gpu_min_by_tenant": {t: {k: round(v, 1) for k, v in d.items()} for t, d in sorted(per.items())},
                "window_nodes": list(self.nodes_at.values()), "steps": self.rows}
