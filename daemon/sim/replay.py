"""Replay a demand trace minute by minute through the daemon's own policy engine and the simulated actuator.

Every strategy sees the same trace on an identical simulated cluster (same physics: node placement, whole-node
holds, drains, lost work):

- static:     the seed's setup: one pool of `reserve_share` of the GPUs for the whole high tier (nobody else
              starts there), fixed rate limits, no preemption;
- reactive:   the policy engine with no forecast: it holds what is asked right now plus `headroom`, and
              preempts only once high-priority work is already waiting;
- predictive: the policy engine with the forecaster (the `quantile` peak over the lead time, plus `headroom`);
- perfect:    the same engine fed the true future demand (a perfect forecast). It is not a bound on what any
              policy can reach: the engine's other choices (lead time, budget, holds) stay as they are.

Each strategy can be run at several settings of its own knob (a sweep); the report compares them on their
Pareto frontiers (utilization against high-tier unmet demand), with every tier measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from daemon.cluster import PRIORITY, ClusterState
from daemon.config import Config
from daemon.policy import Plan, PolicyMemory, plan
from daemon.policy.ratelimits import tenant_limits
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster
from daemon.sim.workloads import Workload
from forecaster.baselines import Forecaster
from forecaster.types import Forecast

STRATEGIES = ("static", "reactive", "predictive", "perfect")
TIERS = ("high", "normal", "low")


@dataclass
class Meter:
    """Everything the replay measures, per tier (high, normal, low) and for the cluster."""

    name: str
    knobs: dict
    util: list[float] = field(default_factory=list)
    idle_queued: float = 0.0                                   # GPU-steps idle while work was queued
    wanted: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    served: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    unmet: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    waits: dict[str, list[np.ndarray]] = field(default_factory=lambda: {t: [] for t in TIERS})
    high_reserved: list[float] = field(default_factory=list)
    preempted: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    # preemptions by the tier of the tenant they cleared GPUs for (high: the forecast or waiting high-tier work;
    # normal/low: tenants protected by aging or an operator's floor)
    preempted_for: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    lost: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    starvation: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    preempted_idle: float = 0.0                                # GPU-steps freed by preemption, left idle
    preempted_retaken: int = 0                                 # GPUs freed by preemption, taken by unprotected work
    decision_s: list[float] = field(default_factory=list)
    throttled: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    requests: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    step_min: float = 1.0
    wall_s: float = 0.0

    @property
    def label(self) -> str:
        k = ",".join(f"{a}={b:g}" for a, b in self.knobs.items())
        return f"{self.name}({k})" if k else self.name

    def tier(self, t: str) -> dict:
        m = self.step_min
        un = np.asarray(self.unmet[t])
        w = np.concatenate(self.waits[t]) * m if self.waits[t] else np.zeros(0)
        return {
            "demand_gpu_min": float(np.sum(self.wanted[t]) * m),
            "served_gpu_min": float(np.sum(self.served[t]) * m),
            "unmet_gpu_min": float(un.sum() * m),
            "minutes_with_unmet": float((un > 0.5).sum() * m),
            "wait_mean_min": float(w.mean()) if w.size else 0.0,
            "wait_p99_min": float(np.percentile(w, 99)) if w.size else 0.0,
            "longest_starvation_min": float(self.starvation[t]),
            "preemptions_suffered": int(self.preempted[t]),
            "work_lost_gpu_min": float(self.lost[t] * m),
            "throttled_share": self.throttled[t] / self.requests[t] if self.requests[t] else 0.0,
        }

    def summary(self) -> dict:
        m = self.step_min
        return {
            "strategy": self.name, "knobs": dict(self.knobs), "label": self.label, "steps": len(self.util),
            "utilization": float(np.mean(self.util)) if self.util else float("nan"),
            "idle_while_queued_gpu_min": float(self.idle_queued * m),
            "preemptions": int(sum(self.preempted.values())),
            "preemptions_for": dict(self.preempted_for),
            "work_lost_gpu_min": float(sum(self.lost.values()) * m),
            "preempted_idle_gpu_min": float(self.preempted_idle * m),
            "preempted_retaken_gpus": int(self.preempted_retaken),
            "tiers": {t: self.tier(t) for t in TIERS},
            "decision_ms_mean": float(np.mean(self.decision_s) * 1000) if self.decision_s else 0.0,
            "decision_ms_p99": float(np.percentile(self.decision_s, 99) * 1000) if self.decision_s else 0.0,
            "wall_s": float(self.wall_s),
        }


def static_plan(state: ClusterState, cfg: Config) -> Plan:
    """The seed's fixed setup: one pool of `reserve_share` of the GPUs for the whole high tier (held as whole
    nodes by the simulated actuator, like one Slurm reservation for all high-tier accounts), no preemption."""
    pool = int(np.floor(cfg.policy.reserve_share * state.capacity))
    limits = tenant_limits(state.tenants, state.tiers, 0, state.load(), cfg.ratelimits, {})
    return Plan(at=state.at.isoformat(), capacity=state.capacity, load=state.load(), high_pool=pool,
                reservations={}, quotas={}, limits=limits, preemptions=(), notifications=(), stale=False,
                forecast_model="static", notes=(), memory=PolicyMemory())


class ForecastBank:
    """Forecasts of one model on one trace, made every `every` steps and kept, so every setting of a sweep
    reuses them (the horizon is shifted in between, as the daemon's last forecast ages between cycles)."""

    def __init__(self, model: Forecaster, demand: pd.DataFrame, every: int, horizon: int, history: int) -> None:
        self.model, self.demand, self.every, self.horizon, self.history = model, demand, max(1, every), horizon, history
        self.made: dict[int, Forecast] = {}
        self.seconds = 0.0

    def at(self, k: int) -> Forecast:
        base = k - k % self.every
        fc = self.made.get(base)
        if fc is None:
            t0 = time.perf_counter()
            fc = self.model.predict(self.demand.iloc[max(0, base + 1 - self.history): base + 1], self.horizon)
            self.seconds += time.perf_counter() - t0
            self.made[base] = fc
        s = k - base
        if s == 0:
            return fc
        vals = np.concatenate([fc.values[:, s:], np.repeat(fc.values[:, -1:], s, axis=1)], axis=1)
        return Forecast(fc.tenants, fc.quantiles, vals, fc.issued_at, fc.step_s, fc.model)


def per_step_config(cfg: Config, step_s: int) -> Config:
    """The replay plans once per trace step, and its clock is the trace's: the budget's token bucket
    refills per simulated second. A bucket that holds one window would cap a step longer than the window
    at one window's budget, so the window is stretched to the step with the same rate (share per second)."""
    pc = cfg.policy
    k = max(1.0, step_s / pc.preempt_budget_window_s)
    share = min(1.0, pc.preempt_budget_share * k)
    jobs = int(pc.preempt_budget_jobs * k)
    return cfg.model_copy(update={"policy": pc.model_copy(update={"preempt_budget_share": share,
                                                                   "preempt_budget_jobs": jobs,
                                                                   "preempt_budget_window_s": pc.preempt_budget_window_s * k})})


def run_strategy(name: str, w: Workload, cfg: Config, bank: ForecastBank | None = None, *, steps: int,
                 knobs: dict | None = None, progress: Callable[[int], None] | None = None,
                 check_invariants: bool = False) -> Meter:
    """Replay `steps` measured steps of `w` (after a warm-up) under one strategy at one setting of its knobs
    (policy fields: reactive `headroom`; predictive `quantile`, `headroom`; static `reserve_share`)."""
    steps = min(steps, len(w.demand) - w.start)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {STRATEGIES}")
    if name == "predictive" and bank is None:
        raise ValueError("the predictive strategy needs a forecast bank (a model)")
    knobs = dict(knobs or {})
    t_start = time.perf_counter()
    demand = w.demand.to_numpy(dtype=float)
    step_s = int((w.demand.index[1] - w.demand.index[0]).total_seconds())
    cfg = per_step_config(cfg, step_s)
    if knobs:
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update=knobs)})
    tenants = tuple(map(str, w.demand.columns))
    prio = np.array([PRIORITY[t] for t in w.tiers], dtype=np.int8)
    tier_of = np.array(w.tiers)
    masks = {t: tier_of == t for t in TIERS}
    sc = cfg.source.simulator
    c = SimCluster(list(tenants), prio, w.capacity, w.job_gpus, gpus_per_node=w.gpus_per_node,
                   drain_steps=sc.drain_steps, checkpoint_steps=sc.checkpoint_steps,
                   max_wait_steps=cfg.policy.max_wait_steps)
    act = SimulatorActuator(c, tenants)
    index = {t: i for i, t in enumerate(tenants)}
    H = cfg.cycle.horizon_steps
    high = masks["high"]
    mem = PolicyMemory()
    last: Plan | None = None
    res = Meter(name, knobs, step_min=step_s / 60.0)
    warm = min(240, w.start)
    req_scale = w.requests_per_gpu_s * step_s
    pre0 = lost0 = None
    idle0 = ret0 = 0
    for k in range(w.start - warm, w.start + steps):
        measured = k >= w.start
        if measured and pre0 is None:  # count only what happens in the measured window
            pre0, lost0 = c.preempted_per_tenant.copy(), c.lost_per_tenant.copy()
            idle0, ret0 = c.preempted_idle, c.preempted_retaken
            c.starve_max[:] = 0
        stats = c.step(demand[k])
        if check_invariants:
            c.check_invariants()
        if measured:
            res.util.append(stats.running_gpus / max(stats.capacity, 1))
            res.idle_queued += min(stats.free_gpus, int(stats.queued.sum()))
            served = np.minimum(stats.served, stats.wanted)
            unmet = np.maximum(stats.wanted - stats.served, 0)
            for t, m in masks.items():
                res.wanted[t].append(float(stats.wanted[m].sum()))
                res.served[t].append(float(served[m].sum()))
                res.unmet[t].append(float(unmet[m].sum()))
                if stats.started.size:
                    res.waits[t].append(stats.started[stats.started[:, 2] == PRIORITY[t], 0])
        state = c.state(tenants, w.tiers, w.demand.index[k], step_s)
        t0 = time.perf_counter()
        if name == "static":
            p = static_plan(state, cfg)
        elif name == "reactive":
            p = plan(None, state, mem, cfg, last)
        elif name == "perfect":
            fut = demand[k + 1: k + 1 + H].T
            if fut.shape[1] == 0:  # the trace ends here: the future looks like now
                fut = demand[k: k + 1].T
            if fut.shape[1] < H:
                fut = np.concatenate([fut, np.repeat(fut[:, -1:], H - fut.shape[1], axis=1)], axis=1)
            v = np.repeat(fut[:, :, None], 3, axis=2)
            p = plan(Forecast(tenants, (0.5, 0.9, 0.99), v, state.at, step_s, "perfect"), state, mem, cfg, last)
        else:
            p = plan(bank.at(k), state, mem, cfg, last)
        dt = time.perf_counter() - t0
        if name == "static":  # no per-tenant holds, no preemption: the one pool only
            c.set_reservations(np.zeros(len(tenants), dtype=np.int64), None, pool=(high, p.high_pool))
        else:
            act.apply(p)
        mem, last = p.memory, p
        if measured:
            res.decision_s.append(dt)
            for x in p.preemptions:
                i = index.get(x.for_tenant)
                if i is not None:
                    res.preempted_for[w.tiers[i]] += 1
            res.high_reserved.append(float(c.held_gpus()[np.r_[high, True]].sum()))
            # requests: volume follows GPUs asked for (and the trace's shape); limits come from the plan
            shape = 1.0 if w.request_shape is None else float(w.request_shape[k % len(w.request_shape)])
            vol = np.maximum(stats.wanted, 0) * req_scale * shape
            rate = np.array([p.limits[t].rate for t in tenants]) * step_s
            thr = np.maximum(vol - rate, 0)
            for t, m in masks.items():
                res.requests[t] += float(vol[m].sum())
                res.throttled[t] += float(thr[m].sum())
        if progress and measured:
            progress(k - w.start)
    if pre0 is not None:
        pre = c.preempted_per_tenant - pre0
        lost = c.lost_per_tenant - lost0
        starve = c.starvation()
        for t, m in masks.items():
            res.preempted[t] = int(pre[m].sum())
            res.lost[t] = float(lost[m].sum())
            res.starvation[t] = float(starve[PRIORITY[t]] * step_s / 60.0)
        res.preempted_idle = float(c.preempted_idle - idle0)
        res.preempted_retaken = int(c.preempted_retaken - ret0)
    res.wall_s = time.perf_counter() - t_start
    return res


def default_sweep(strategies=STRATEGIES) -> list[tuple[str, dict]]:
    """Each strategy over its own knob: static the pool share, reactive the headroom, predictive the quantile
    and the headroom, perfect the headroom."""
    grid = {
        "static": [{"reserve_share": s} for s in (0.1, 0.2, 0.3, 0.4)],
        "reactive": [{"headroom": h} for h in (0.0, 0.05, 0.1, 0.15, 0.25, 0.4)],
        "predictive": [{"quantile": q, "headroom": h} for q in (0.5, 0.9, 0.99) for h in (0.0, 0.05, 0.15)],
        "perfect": [{"headroom": h} for h in (0.0, 0.05, 0.15)],
    }
    return [(s, k) for s in strategies for k in grid[s]]


def run_replay(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int, strategies=STRATEGIES,
               settings: list[tuple[str, dict]] | None = None, forecast_every: int = 1, progress: bool = False,
               check_invariants: bool = False) -> list[Meter]:
    """Run each (strategy, knobs) setting; with no `settings`, each strategy once at the configured policy."""
    runs = settings if settings is not None else [(s, {}) for s in strategies]
    bank = None
    if model is not None and any(s == "predictive" for s, _ in runs):
        bank = ForecastBank(model, w.demand, forecast_every, cfg.cycle.horizon_steps, cfg.cycle.history_steps)
    out = []
    for s, knobs in runs:
        if s == "predictive" and bank is None:
            continue
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=steps, desc=f"{w.name}/{s}{knobs or ''}", leave=False, disable=None)
        out.append(run_strategy(s, w, cfg, bank if s == "predictive" else None, steps=steps, knobs=knobs,
                                progress=(lambda _i, b=bar: b.update(1)) if bar else None,
                                check_invariants=check_invariants))
        if bar:
            bar.close()
    return out
