"""Replay a demand trace minute by minute through the daemon's own policy engine and a simulated actuator.

Four strategies see the same trace on identical clusters:

- static:     the seed's setup: 20% of GPUs hard-reserved for the high tier (nobody borrows them),
              fixed rate limits, no preemption;
- reactive:   the policy engine with no forecast (reserves for what is asked right now, like an HPA
              reacting to current load), so it preempts only once high-priority work is already queued;
- predictive: the policy engine with the forecaster (p90 peak over the lead time), the daemon as shipped;
- oracle:     the policy engine fed the actual future demand: the bound on what forecasting can buy.
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
from daemon.sim.cluster import QUEUED, SimCluster
from daemon.sim.workloads import Workload
from forecaster.baselines import Forecaster
from forecaster.types import Forecast

STRATEGIES = ("static", "reactive", "predictive", "oracle")


@dataclass
class StrategyResult:
    name: str
    steps: int
    util: list[float] = field(default_factory=list)
    high_wanted: list[float] = field(default_factory=list)
    high_served: list[float] = field(default_factory=list)
    high_reserved: list[float] = field(default_factory=list)
    unmet_high: list[float] = field(default_factory=list)
    waits_low: list[np.ndarray] = field(default_factory=list)
    decision_s: list[float] = field(default_factory=list)
    throttled: dict[str, float] = field(default_factory=lambda: {"high": 0.0, "normal": 0.0, "low": 0.0})
    requests: dict[str, float] = field(default_factory=lambda: {"high": 0.0, "normal": 0.0, "low": 0.0})
    preemptions: int = 0
    lost_gpu_minutes: float = 0.0
    longest_wait: float = 0.0

    def summary(self) -> dict:
        waits = np.concatenate(self.waits_low) if self.waits_low else np.zeros(0)
        unmet = np.asarray(self.unmet_high)
        return {
            "strategy": self.name, "steps": self.steps,
            "mean_utilization": float(np.mean(self.util)) if self.util else float("nan"),
            "high_unmet_gpu_minutes": float(unmet.sum()),
            "high_unmet_minutes": int((unmet > 0.5).sum()),
            "high_demand_gpu_minutes": float(np.sum(self.high_wanted)),
            "low_wait_mean_min": float(waits.mean()) if waits.size else 0.0,
            "low_wait_p99_min": float(np.percentile(waits, 99)) if waits.size else 0.0,
            "longest_starvation_min": float(self.longest_wait),
            "preemptions": self.preemptions,
            "lost_gpu_minutes": self.lost_gpu_minutes,
            "throttled_requests": {k: float(v) for k, v in self.throttled.items()},
            "throttled_share": {k: (self.throttled[k] / self.requests[k] if self.requests[k] else 0.0)
                                for k in self.requests},
            "decision_ms_mean": float(np.mean(self.decision_s) * 1000) if self.decision_s else 0.0,
            "decision_ms_p99": float(np.percentile(self.decision_s, 99) * 1000) if self.decision_s else 0.0,
        }


def static_plan(state: ClusterState, cfg: Config) -> Plan:
    """The seed's fixed setup: one pool of `reserve_share` of the GPUs for the whole high tier (held as whole
    nodes by the simulated actuator, like one Slurm reservation for all high-tier accounts), no preemption."""
    pool = int(np.floor(cfg.policy.reserve_share * state.capacity))
    limits = tenant_limits(state.tenants, state.tiers, 0, state.load(), cfg.ratelimits, {})
    return Plan(at=state.at.isoformat(), capacity=state.capacity, load=state.load(), high_pool=pool,
                reservations={}, quotas={}, limits=limits, preemptions=(), notifications=(), stale=False,
                forecast_model="static", notes=(), memory=PolicyMemory())


class _ForecastCache:
    """Forecast every `every` steps and shift the horizon in between (the daemon runs 2 cycles a minute,
    the replay at 1,000 tenants cannot afford a forward pass per simulated minute)."""

    def __init__(self, model: Forecaster, every: int, horizon: int) -> None:
        self.model, self.every, self.horizon = model, max(1, every), horizon
        self.fc: Forecast | None = None
        self.age = 0

    def get(self, history: pd.DataFrame) -> Forecast:
        if self.fc is None or self.age >= self.every:
            self.fc = self.model.predict(history, self.horizon)
            self.age = 0
        fc = self.fc
        k = self.age
        self.age += 1
        if k == 0:
            return fc
        vals = np.concatenate([fc.values[:, k:], np.repeat(fc.values[:, -1:], k, axis=1)], axis=1)
        return Forecast(fc.tenants, fc.quantiles, vals, fc.issued_at, fc.step_s, fc.model)


def per_step_config(cfg: Config, step_s: int) -> Config:
    """The daemon plans every `interval_s`; the replay plans once per trace step, so the per-cycle
    preemption budget is scaled to what the daemon would clear in one step."""
    cycles = max(1.0, step_s / cfg.cycle.interval_s)
    share = min(1.0, cfg.policy.preempt_budget_share * cycles)
    jobs = int(cfg.policy.preempt_budget_jobs * cycles)
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"preempt_budget_share": share,
                                                                           "preempt_budget_jobs": jobs})})


def run_strategy(name: str, w: Workload, cfg: Config, model: Forecaster | None, *, steps: int,
                 forecast_every: int = 1, history_steps: int | None = None,
                 progress: Callable[[int], None] | None = None, check_books: bool = False) -> StrategyResult:
    demand = w.demand.to_numpy(dtype=float)
    step_s = int((w.demand.index[1] - w.demand.index[0]).total_seconds())
    cfg = per_step_config(cfg, step_s)
    tenants = tuple(map(str, w.demand.columns))
    prio = np.array([PRIORITY[t] for t in w.tiers], dtype=np.int8)
    sc = cfg.source.simulator
    c = SimCluster(list(tenants), prio, w.capacity, w.job_gpus, gpus_per_node=w.gpus_per_node,
                   drain_steps=sc.drain_steps, checkpoint_steps=sc.checkpoint_steps,
                   max_wait_steps=cfg.policy.max_wait_steps)
    act = SimulatorActuator(c, tenants)
    H = cfg.cycle.horizon_steps
    hist_n = history_steps or cfg.cycle.history_steps
    high = prio == PRIORITY["high"]
    low = prio == PRIORITY["low"]
    cache = _ForecastCache(model, forecast_every, H) if model is not None else None
    mem = PolicyMemory()
    last: Plan | None = None
    res = StrategyResult(name, steps)
    tier_names = np.array(w.tiers)
    warm = min(240, w.start)
    req_scale = w.requests_per_gpu_s * step_s
    for k in range(w.start - warm, w.start + steps):
        stats = c.step(demand[k])
        measured = k >= w.start
        if check_books:
            c.check_invariants()
        if measured:
            res.util.append(stats.running_gpus / max(stats.capacity, 1))
            wanted = stats.wanted
            res.high_wanted.append(float(wanted[high].sum()))
            res.high_served.append(float(np.minimum(stats.served, wanted)[high].sum()))
            res.unmet_high.append(float(np.maximum(wanted - stats.served, 0)[high].sum()))
            arr = stats.started
            if arr.size:
                res.waits_low.append(arr[arr[:, 2] == PRIORITY["low"], 0])
        state = c.state(tenants, w.tiers, w.demand.index[k], step_s)
        t0 = time.perf_counter()
        if name == "static":
            p = static_plan(state, cfg)
        elif name == "reactive":
            p = plan(None, state, mem, cfg, last)
        elif name == "oracle":
            fut = demand[k + 1: k + 1 + H].T
            if fut.shape[1] < H:
                fut = np.concatenate([fut, np.repeat(fut[:, -1:], H - fut.shape[1], axis=1)], axis=1)
            v = np.repeat(fut[:, :, None], 3, axis=2)
            p = plan(Forecast(tenants, (0.5, 0.9, 0.99), v, state.at, step_s, "oracle"), state, mem, cfg, last)
        else:
            hist = w.demand.iloc[max(0, k + 1 - hist_n): k + 1]
            p = plan(cache.get(hist), state, mem, cfg, last)
        dt = time.perf_counter() - t0
        before_pre, before_lost = c.total_preemptions, c.total_lost
        act.apply(p)
        if name == "static":
            c.set_reservations(np.zeros(len(tenants), dtype=np.int64), None, pool=(high, p.high_pool))
        mem, last = p.memory, p
        if measured:
            res.decision_s.append(dt)
            res.preemptions += c.total_preemptions - before_pre
            res.lost_gpu_minutes += (c.total_lost - before_lost) * step_s / 60.0
            res.high_reserved.append(float(sum(p.reservations.get(t, 0) for t in np.asarray(tenants)[high])))
            # requests: volume follows GPUs in use (and the trace's shape); limits come from the plan
            shape = 1.0 if w.request_shape is None else float(w.request_shape[k % len(w.request_shape)])
            vol = np.maximum(stats.wanted, 0) * req_scale * shape
            rate = np.array([p.limits[t].rate for t in tenants]) * step_s
            thr = np.maximum(vol - rate, 0)
            for tier in ("high", "normal", "low"):
                m = tier_names == tier
                res.requests[tier] += float(vol[m].sum())
                res.throttled[tier] += float(thr[m].sum())
        if progress and measured:
            progress(k - w.start)
    # starvation: the longest any low-priority job waited over all its queue stints, finished or still queued
    res.longest_wait = float(c.starvation()[PRIORITY["low"]] * step_s / 60.0)
    res.waits_low = [a * step_s / 60.0 for a in res.waits_low]
    return res


def run_replay(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int, strategies=STRATEGIES,
               forecast_every: int = 1, progress: bool = False, check_books: bool = False) -> dict[str, StrategyResult]:
    out = {}
    for s in strategies:
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=steps, desc=f"{w.name}/{s}", leave=False, disable=None)
        out[s] = run_strategy(s, w, cfg, model if s == "predictive" else None, steps=steps,
                              forecast_every=forecast_every, progress=(lambda _i, b=bar: b.update(1)) if bar else None,
                              check_books=check_books)
        if bar:
            bar.close()
    return out
