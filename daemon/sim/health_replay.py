"""The job-health step on the one simulator: the daemon's own decisions, each step, beside the replay's plan.

`run_strategy` (daemon/sim/strategy.py) replays a trace through the policy's `plan()` on `SimCluster`; this module is
its ``hook`` and adds what the daemon's cycle does around the plan when ``health.enabled`` (daemon/service/cycle.py):

- before the plan: the jobs' GPUs advance one step of the activity model (daemon/sim/activity.py: busy, idle, hung,
  framebuffer) and the step is recorded as the DCGM exporter's samples would be; the snapshot gets ``Jobs.idle``
  from the last health step's idle and hung findings through the cycle's own `with_idle`, so a hold takes idle
  low-priority jobs first (daemon/policy/preemption.py);
- after the plan is applied: per-job telemetry of the running jobs over the health window (`Telemetry`, one
  `GpuTrace` per GPU, on the job's node), then `assess` (daemon/health/reclaim.py: `detect`, coverage, `decide`:
  the same function `HealthRunner.run` calls) with the jobs as the daemon sees them (`job_infos`,
  daemon/service/health.py) and the preemption budget the plan left (`budget_left` at the snapshot's time, as
  the cycle's `_health` calls it); the reclaims go through the simulator's actuator (`SimulatorActuator.reclaim`: a
  requeue, which is the cluster's preemption, drain and work since the checkpoint lost) and what they leave of the
  budget goes back into the policy's memory (`after_reclaims`, as in the cycle).

Modes: ``off`` (no health step: the activity model runs only to measure busy utilization, and the plan is exactly
the plain replay's), ``report`` (the health step runs and marks idle jobs for the plan, every tier's action is
report: nothing is requeued), ``requeue`` (the configured actions; by default low-tier jobs idle or hung for
``health.idle_action_minutes`` are requeued, high and normal reported only).

Cost: the detectors read a window (``health.window_minutes()``) of samples per GPU. Telemetry is built for the
running jobs only, from a ring buffer of per-job samples (every GPU of a simulated job reads alike, as the activity
model makes them); ``every`` runs the health step every that many steps (default 1: every cycle, as the daemon);
with more, the idle marks of the last health step are carried to the plans in between (the daemon, which runs it
every cycle, carries none).

Missing telemetry: ``missing_share`` of the jobs (drawn per job, from their own generator) have their exporter
series present but no sample (NaN), as an unscraped node: the detectors call them ``no_data``, never idle.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from daemon.config import Config
from daemon.config.models import TenantConfig
from daemon.health.reclaim import HealthMemory, assess
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.state import ClusterState
from daemon.policy.types import PolicyMemory
from daemon.service.cycle import with_idle
from daemon.service.health import after_reclaims, budget_left, job_infos
from daemon.sim.activity import BUSY, Activity, ActivityParams
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import RUNNING, SimCluster
from daemon.sim.replay import TIERS, Meter, run_strategy
from daemon.sim.workloads import Workload

MODES = ("off", "report", "requeue")
GPU_MIB = 81920.0   # framebuffer per GPU (an 80 GB part): the detectors read used/(used+free), a share


class SimTelemetry:
    """The DCGM exporter's per-GPU series for the simulator's jobs: a ring buffer of the last `n` steps' activity
    and framebuffer share per job id; NaN where the job was not running (or is unscraped)."""

    def __init__(self, n: int, step_s: float, missing_share: float = 0.0, seed: int = 0) -> None:
        if not 0 <= missing_share <= 1:
            raise ValueError("missing_share must be in [0, 1]")
        self.n, self.step_s, self.missing_share = n, step_s, missing_share
        self.rng = np.random.default_rng([seed, 0x7E1])
        self.act = np.full((n, 0), np.nan, dtype=np.float32)
        self.fb = np.full((n, 0), np.nan, dtype=np.float32)
        self.blind = np.zeros(0, dtype=bool)   # per job id: its exporter has no sample (missing telemetry)
        self.steps = 0

    def _grow(self, size: int) -> None:
        have = self.act.shape[1]
        if size <= have:
            return
        new = max(size, 2 * have, 1024)
        pad = np.full((self.n, new - have), np.nan, dtype=np.float32)
        self.act, self.fb = np.hstack([self.act, pad]), np.hstack([self.fb, pad.copy()])

    def record(self, c: SimCluster, a: Activity) -> None:
        """This step's samples: every running job's busy share and framebuffer share."""
        self._grow(c.next_id)
        if self.blind.size < c.next_id:   # new jobs: unscraped or not, drawn once each in id order
            k = c.next_id - self.blind.size
            self.blind = np.r_[self.blind, self.rng.random(k) < self.missing_share] if self.missing_share else \
                np.r_[self.blind, np.zeros(k, dtype=bool)]
        row = self.steps % self.n
        self.act[row].fill(np.nan)
        self.fb[row].fill(np.nan)
        ids, _, _ = a.running(c)
        ids = ids[~self.blind[ids]]
        self.act[row, ids] = a.share(ids)
        self.fb[row, ids] = a.fb_share(ids)
        self.steps += 1

    def read(self, c: SimCluster, end: float) -> Telemetry:
        """The window ending now, for the running jobs: one `GpuTrace` per GPU, host "n<node>" (as the snapshot
        given to `job_infos` names the node), GPUs numbered per node."""
        live = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        ids, node, g = c.j_id[live], c.j_node[live], c.j_gpus[live]
        order = np.lexsort((ids, node))
        ids, node, g = ids[order], node[order], g[order]
        # each job's first GPU index on its node: the GPUs before it of jobs on the same node
        before = np.cumsum(g) - g
        first_of_node = np.r_[True, node[1:] != node[:-1]] if node.size else np.zeros(0, dtype=bool)
        base = np.maximum.accumulate(np.where(first_of_node, before, 0)) if node.size else before
        off = before - base
        rows = (np.arange(self.n) + self.steps) % self.n     # oldest first
        act = self.act[rows][:, ids].T.astype(float)
        fb = self.fb[rows][:, ids].T.astype(float)
        used, free = fb * GPU_MIB, (1.0 - fb) * GPU_MIB
        xid = np.zeros(self.n)
        gpus = []
        for j in range(ids.size):
            job, host = str(int(ids[j])), f"n{int(node[j])}"
            a_j, u_j, f_j = act[j], used[j], free[j]
            for m in range(int(g[j])):
                gpus.append(GpuTrace(job, "slurm", None, host, str(int(off[j]) + m), a_j, u_j, f_j, xid))
        return Telemetry(end=end, step_s=self.step_s, n=self.n, gpus=tuple(gpus))


def named_nodes(state: ClusterState) -> ClusterState:
    """The snapshot with node names "n<index>" ("" for a pending job), as a live source gives them: the replay's
    snapshot keeps integer node indexes, where node 0 would read as "no node"."""
    j = state.jobs
    node = np.asarray(j.node, dtype=np.int64)
    names = np.where(j.running & (node >= 0), np.char.add("n", node.astype(str)), "").astype(object)
    return dataclasses.replace(state, jobs=dataclasses.replace(j, node=names))


@dataclass
class HealthMeter:
    """What the health hook measures over the replay's measured steps (GPU-steps; per tier where it says)."""

    alloc: float = 0.0                 # GPUs allocated (running), summed over steps
    busy: float = 0.0                  # allocation weighted by the jobs' busy share
    idle_alloc: float = 0.0            # GPUs allocated to jobs idle or hung
    capacity: float = 0.0
    reclaimed: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    reclaimed_gpus: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    reclaim_lost: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # outcome verdicts per tier summed over health steps (a job idle for 90 steps is counted at each of them)
    verdicts: dict[str, dict[str, int]] = field(default_factory=lambda: {t: {} for t in TIERS})
    no_data_jobs: int = 0              # job-steps the detectors found with no data
    partial_jobs: int = 0              # job-steps whose telemetry did not cover the allocation (none expected)
    health_steps: int = 0
    health_s: float = 0.0              # wall seconds in the health step (telemetry, assess, reclaims)


class HealthHook:
    """`run_strategy`'s hook: the activity model and, unless ``mode`` is off, the daemon's health step."""

    def __init__(self, w: Workload, cfg: Config, mode: str = "requeue", params: ActivityParams = ActivityParams(),
                 seed: int = 0, every: int = 1, missing_share: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {MODES}")
        if every < 1:
            raise ValueError("every must be >= 1")
        self.mode, self.every = mode, every
        self.tenants = tuple(map(str, w.demand.columns))
        self.tier_of_tenant = np.array(w.tiers)
        self.activity = Activity(len(self.tenants), params, seed=seed)
        self.step_s = float((w.demand.index[1] - w.demand.index[0]).total_seconds())
        n = max(2, int(np.ceil(cfg.health.window_minutes() * 60.0 / self.step_s)))
        self.telemetry = SimTelemetry(n, self.step_s, missing_share, seed)
        self.memory = HealthMemory()
        self.view: dict | None = None
        self.view_k = -10**9
        self.meter = HealthMeter()
        self._cfg_in: Config | None = None
        self._cfg: Config | None = None
        self._act: SimulatorActuator | None = None

    def _config(self, cfg: Config) -> Config:
        """The replay's config with the workload's tenants listed at their tiers (the daemon's config lists its
        tenants; `job_infos` reads a job's tier from it), and every action `report` in report mode."""
        if cfg is not self._cfg_in:
            listed = {t.name for t in cfg.tenants}
            extra = [TenantConfig(name=t, tier=tier) for t, tier in zip(self.tenants, self.tier_of_tenant)
                     if t not in listed]
            upd: dict = {"tenants": list(cfg.tenants) + extra}
            if self.mode == "report":
                h = cfg.health
                upd["health"] = h.model_copy(update={"idle_actions": {t: "report" for t in h.idle_actions},
                                                     "hung_actions": {t: "report" for t in h.hung_actions}})
            self._cfg_in, self._cfg = cfg, cfg.model_copy(update=upd)
        assert self._cfg is not None
        return self._cfg

    def before_plan(self, c: SimCluster, k: int, state: ClusterState, measured: bool) -> ClusterState:
        a = self.activity
        a.step(c)
        if self.mode != "off":
            self.telemetry.record(c, a)
        if measured:
            ids, _, g = a.running(c)
            m = self.meter
            m.alloc += float(g.sum())
            m.busy += float((g * a.share(ids)).sum())
            m.idle_alloc += float(g[a.state[ids] != BUSY].sum())
            m.capacity += float(c.capacity)
        if self.mode == "off":
            return state
        # the cycle's rule: a plan reads the findings of the health step just before it (with `every` > 1, the
        # last one's, while no newer exists)
        view = self.view if k - self.view_k <= self.every else None
        return with_idle(state, view)

    def after_plan(self, c: SimCluster, k: int, state: ClusterState, memory: PolicyMemory, cfg: Config,
                   measured: bool) -> PolicyMemory:
        if self.mode == "off" or k % self.every:
            return memory
        t0 = time.perf_counter()
        hc = self._config(cfg)
        if self._act is None or self._act.cluster is not c:
            self._act = SimulatorActuator(c, self.tenants)
        now = float(state.at.timestamp())
        tel = self.telemetry.read(c, now)
        jobs = job_infos(named_nodes(state), hc)
        avail = budget_left(memory, now, state.capacity, hc)
        statuses, d = assess(tel, jobs, hc, self.memory, now, *avail)
        self.memory = d.memory
        self.view = {"error": None, "outcomes": [{"job": o.finding.job, "kind": o.finding.kind} for o in d.outcomes]}
        self.view_k = k
        m = self.meter
        if d.reclaims:
            pre0, lost0 = c.preempted_per_tenant.copy(), c.lost_per_tenant.copy()
            for r in d.reclaims:
                self._act.reclaim(r.job_ids, r.reason)
            if measured:
                pre, lost = c.preempted_per_tenant - pre0, c.lost_per_tenant - lost0
                for t in TIERS:
                    mk = self.tier_of_tenant == t
                    m.reclaimed[t] += int(pre[mk].sum())
                    m.reclaim_lost[t] += float(lost[mk].sum())
                for r in d.reclaims:
                    m.reclaimed_gpus[r.tier] += r.gpus
        if measured:
            m.health_steps += 1
            for o in d.outcomes:
                v = m.verdicts.setdefault(o.tier or "unknown", {})
                v[o.verdict] = v.get(o.verdict, 0) + 1
            m.no_data_jobs += sum(s.state == "no_data" for s in statuses)
            m.partial_jobs += sum(s.state == "partial" for s in statuses)
        m.health_s += time.perf_counter() - t0
        return after_reclaims(memory, avail, (d.budget_gpus, d.budget_jobs), now)   # as the cycle


def summary(m: Meter, h: HealthMeter) -> dict:
    """Per tier: demand and unmet GPU-minutes, jobs preempted by the plan and reclaimed by health (and the work
    each lost, GPU-minutes); for the cluster: allocated and busy utilization (allocation weighted by activity)."""
    sm = m.step_min
    tiers = {}
    for t in TIERS:
        lost_all = m.lost[t] * sm
        lost_rec = h.reclaim_lost[t] * sm
        tiers[t] = {"demand_gpu_min": float(sum(m.wanted[t])) * sm, "unmet_gpu_min": float(sum(m.unmet[t])) * sm,
                    "preempted_by_plan": int(m.preempted[t] - h.reclaimed[t]), "reclaimed": int(h.reclaimed[t]),
                    "reclaimed_gpus": int(h.reclaimed_gpus[t]),
                    "lost_gpu_min_plan": lost_all - lost_rec, "lost_gpu_min_reclaim": lost_rec}
        tiers[t]["unmet_share"] = tiers[t]["unmet_gpu_min"] / tiers[t]["demand_gpu_min"] \
            if tiers[t]["demand_gpu_min"] else 0.0
    cap = max(h.capacity, 1.0)
    return {"tiers": tiers, "alloc_util": h.alloc / cap, "busy_util": h.busy / cap,
            "idle_allocated_share": h.idle_alloc / max(h.alloc, 1.0),
            "verdicts": {t: dict(sorted(v.items())) for t, v in h.verdicts.items()},
            "no_data_job_steps": h.no_data_jobs, "partial_job_steps": h.partial_jobs, "health_steps": h.health_steps,
            "health_s": round(h.health_s, 2), "wall_s": round(m.wall_s, 2)}


def run_health(strategy: str, w: Workload, cfg: Config, mode: str, *, steps: int,
               params: ActivityParams = ActivityParams(), seed: int = 0, every: int = 1, missing_share: float = 0.0,
               bank=None, knobs: dict | None = None) -> tuple[Meter, HealthHook]:
    """One replay of `strategy` with the health step in `mode`; the replay's meter and the hook (its meter,
    `summary`)."""
    hook = HealthHook(w, cfg, mode, params, seed=seed, every=every, missing_share=missing_share)
    m = run_strategy(strategy, w, cfg, bank, steps=steps, knobs=knobs, hook=hook)
    return m, hook
