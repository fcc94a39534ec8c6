"""Replay a demand trace minute by minute through the daemon's own policy engine and the simulated actuator.

Every strategy sees the same trace on an identical simulated cluster (same physics: node placement, whole-node
holds, drains, lost work):

- static:     the seed's setup: one pool of `reserve_share` of the GPUs for the whole high tier (nobody else
              starts there), fixed rate limits, no preemption;
- reactive:   the policy engine with no forecast: it holds what is asked right now plus `headroom`, and
              preempts only once high-priority work is already waiting;
- predictive: the policy engine with the forecaster (the `quantile` peak over the lead time, plus `headroom`);
- perfect:    the same engine fed the true future demand (a perfect forecast). It is not a bound on what any
              policy can reach: the engine's other choices (lead time, budget, holds) stay as they are. With
              `foresight_steps` (a replay knob, not a policy one) it knows the true future only that many steps
              ahead and repeats the last of them beyond: how far ahead a forecast must see rises for the engine
              to meet the targets (0: it sees the demand now only). With `rises_seen` it sees only that share of
              the rises coming (each drawn once), and meets the others when they come. With `rates_only` it knows
              the inference services' future RATES only (what their arrivals are drawn from), not the draws:
              the most a forecast of the rate could do (daemon/sim/inference.py `rate_future`).

Each strategy can be run at several settings of its own knob (a sweep); the report compares them on their
Pareto frontiers (utilization against high-tier unmet demand), with every tier measured.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import Plan, PolicyMemory, plan
from daemon.policy.fleet import series_name
from daemon.policy.ratelimits import tenant_limits
from daemon.policy.state import PRIORITY, ClusterState
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster
from daemon.sim.flaps import FLAP_WINDOW_S, FlapCounter
from daemon.sim.inference import InferenceRun, rate_future
from daemon.sim.skill_gate import ReplayGate
from daemon.sim.workloads import Workload
from forecaster.baselines import Forecaster
from forecaster.types import Forecast

STRATEGIES = ("static", "reactive", "predictive", "perfect")
# the perfect forecast's knobs that are not policy fields: how many steps of the true future it knows, and the share
# of the rises in it that it sees (each rise of each tenant drawn once, the same draws for every setting)
FORESIGHT = "foresight_steps"
RISES_SEEN = "rises_seen"
RATES_ONLY = "rates_only"
PERFECT_KNOBS = (FORESIGHT, RISES_SEEN, RATES_ONLY)
RISES_SEED = 26
# predictive's replay knob that is not a flat policy field: the skill gate on (policy.skill_gate.enabled) at this
# policy.skill_gate.margin, so a sweep runs the gated and the ungated predictive beside each other on one forecast bank
GATE_MARGIN = "gate_margin"
# and "services": the plan acts on the forecast for the inference services only; the batch tenants are planned as
# the skill gate plans a tenant it does not trust (their holds the demand now, nothing preempted for their forecast)
FORECAST_FOR = "forecast_for"
REPLAY_KNOBS = (*PERFECT_KNOBS, GATE_MARGIN, FORECAST_FOR)


def perfect_knob_error(name: str, knobs: dict) -> str | None:
    """Why these knobs' replay part is invalid (None when it is valid): whole steps >= 0 for the foresight, a share
    in (0, 1] for the rises seen, and only on the perfect forecast; the gate's margin in [0, 1), only on
    predictive."""
    g = knobs.get(GATE_MARGIN)
    if GATE_MARGIN in knobs and name != "predictive":
        return f"{GATE_MARGIN}: the skill gate's margin acts on predictive's plans only, not {name}'s"
    if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g < 1):
        return f"{GATE_MARGIN} is the skill gate's margin in [0, 1), not {g!r}"
    if FORECAST_FOR in knobs and (name != "predictive" or knobs[FORECAST_FOR] != "services"):
        return f"{FORECAST_FOR}: 'services' on predictive only, not {knobs[FORECAST_FOR]!r} on {name}"
    given = [k for k in PERFECT_KNOBS if k in knobs]
    if not given:
        return None
    if name != "perfect":
        return f"{', '.join(given)}: the perfect forecast's knobs, not {name}'s"
    f = knobs.get(FORESIGHT)
    if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f < 0):
        return f"{FORESIGHT} is a whole number of steps >= 0, not {f!r}"
    r = knobs.get(RISES_SEEN)
    if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1):
        return f"{RISES_SEEN} is a share in (0, 1], not {r!r}"
    if RATES_ONLY in knobs and not isinstance(knobs[RATES_ONLY], bool):
        return f"{RATES_ONLY} is true or false, not {knobs[RATES_ONLY]!r}"
    return None


def rises(values: np.ndarray) -> np.ndarray:
    """[step, series] bool: a rise, a step whose value is above the step before, both observed (a gap is none). The
    one definition the rises_seen knob counts and bench/rises_bench.py scores, so the two shares compare."""
    v = np.asarray(values, dtype=float)
    out = np.zeros(v.shape, dtype=bool)
    out[1:] = (v[1:] > v[:-1]) & np.isfinite(v[1:]) & np.isfinite(v[:-1])
    return out


def seen_future(fut: np.ndarray, now: np.ndarray, foresight: int | None, seen: np.ndarray | None) -> np.ndarray:
    """The true future ``fut`` [tenant, step] as a forecast that knows only part of it: ``foresight`` steps of it,
    the last repeated beyond (0: the demand now ``now``, repeated); with ``seen`` [tenant, step] (bool), a rise at a
    step where it is False is not seen coming, so it is met when it comes, as reactive meets it.

    With ``seen``, the path starts at the demand now and at each step adds the rise the true future makes there
    (from its last known level: a gap is not a step) if that rise is seen, and never exceeds the true future: a fall
    is seen down to the true level, and what an unseen rise would have added is never taken off twice (once the
    truth falls back, the path meets it). Every rise seen, it is the true future; a tenant whose demand now is
    unknown keeps its true future."""
    h = fut.shape[1]
    if seen is not None:
        out = np.full(fut.shape, np.nan)
        path = now.astype(float).copy()          # the forecast's level so far
        level = now.astype(float).copy()         # the true future's last known level
        for j in range(h):
            f = fut[:, j]
            known = np.isfinite(f) & np.isfinite(level)
            rise = np.where(known & seen[:, j], np.maximum(f - level, 0.0), 0.0)
            step = np.fmin(f, path + rise)       # NaN in the future: the path carries on past the gap
            path = np.where(known, step, path)
            out[:, j] = np.where(np.isfinite(f), path, np.nan)
            level = np.where(np.isfinite(f), f, level)
        fut = np.where(np.isfinite(now)[:, None], out, fut)
    if foresight is not None and foresight < h:
        last = fut[:, foresight - 1] if foresight else now
        fut = np.concatenate([fut[:, :foresight], np.repeat(last[:, None], h - foresight, axis=1)], axis=1)
    return fut


TIERS = ("high", "normal", "low")


def _knob(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else v if isinstance(v, str) else f"{v:g}"


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
    # steps each job waited (one stint): jobs that started in the window, and those still queued at its end with
    # their wait so far (censored: else a tier whose jobs never start would show no wait at all)
    waits: dict[str, list[np.ndarray]] = field(default_factory=lambda: {t: [] for t in TIERS})
    waiting_at_end: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    high_reserved: list[float] = field(default_factory=list)
    preempted: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    # preemptions by the tier of the tenant they cleared GPUs for (high: the forecast or waiting high-tier work;
    # normal/low: tenants protected by aging or an operator's floor)
    preempted_for: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    lost: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    starvation: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    preempted_idle: float = 0.0                                # GPU-steps freed by preemption, left idle
    preempted_retaken: int = 0                                 # GPUs freed by preemption, taken by unprotected work
    # with RISES_SEEN: the high tier's rises in the measured window and those the perfect forecast saw coming (the
    # share asked for is a threshold on the draws; this is the share it came to)
    rises_high: dict[str, int] | None = None
    decision_s: list[float] = field(default_factory=list)
    # the cost-aware rule's decisions (policy.preempt_cost_aware, counted with ``count_rule``): at every measured
    # step the same plan is made again with the rule off, on the same state and memory; jobs that plan preempts and
    # this one does not (refused; a job refused at several steps counts at each), jobs this one preempts and that
    # one does not (another choice), the steps where the two differ, and the distinct jobs refused at least once
    rule: dict[str, int] | None = None
    throttled: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    requests: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # inference services (daemon/sim/inference.py): their requests per tier, counted one by one through the
    # gateway: arrivals = served (on time) + throttled (429) + late (served at a later step, or still waiting)
    inference: bool = False
    inf_requests: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_served: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_throttled: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_late: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # GPU-steps the services' replicas ran (cold ones included): what their requests cost, to compare strategies at
    # equal GPU-hours
    inf_gpu: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    step_min: float = 1.0
    wall_s: float = 0.0
    cpu_s: float = 0.0                                         # CPU of its process meanwhile (forecast thread too)
    # a typed workload (mixed fleet): demand and unmet GPU-minutes per accepted-type set ("a100|t4", "any"),
    # all tiers and the high tier's part (high_demand_gpu_min, high_unmet_gpu_min)
    by_spec: dict[str, dict[str, float]] | None = None
    # the plans' per-tenant holds over the measured window: moves, and moves that reverse the tenant's last one
    # within FLAP_WINDOW_S (daemon/sim/flaps.py)
    hold_changes: int = 0
    hold_flaps: int = 0
    # the skill gate (policy.skill_gate, predictive only): per measured step, the tenants acting on the forecast,
    # all of them and those whose verdict the run reads (``read``: the high tier, whose holds and preemptions are
    # the only ones the plan makes on the forecast, and the inference services that may start replicas ahead); a
    # normal or low tenant's verdict changes nothing, so counting it said the forecast was acted on where it was not
    forecast_acting: list[int] | None = None
    forecast_acting_read: list[int] | None = None
    tenants: int = 0
    tenants_read: int = 0

    def gate_counts(self) -> dict[str, int]:
        """The skill gate's tenant-steps on the forecast: of the tenants whose verdict the run reads (``read_*``,
        the figure that says how much the forecast was acted on) and of all tenants (``all_*``; before this split
        the JSON's ``tenant_steps_on_forecast`` and ``tenant_steps`` were these)."""
        steps = len(self.forecast_acting or [])
        return {"read_tenants": int(self.tenants_read),
                "read_tenant_steps_on_forecast": int(sum(self.forecast_acting_read or [])),
                "read_tenant_steps": int(steps * self.tenants_read),
                "all_tenant_steps_on_forecast": int(sum(self.forecast_acting or [])),
                "all_tenant_steps": int(steps * self.tenants)}

    @property
    def label(self) -> str:
        k = ",".join(f"{a}={_knob(b)}" for a, b in self.knobs.items())
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
            "jobs_waiting_at_end": int(self.waiting_at_end[t]),
            "longest_starvation_min": float(self.starvation[t]),
            "preemptions_suffered": int(self.preempted[t]),
            "work_lost_gpu_min": float(self.lost[t] * m),
            "throttled_share": self.throttled[t] / self.requests[t] if self.requests[t] else 0.0,
            **({"inf_requests": self.inf_requests[t], "inf_served": self.inf_served[t],
                "inf_throttled": self.inf_throttled[t], "inf_late": self.inf_late[t],
                "inf_gpu_min": float(self.inf_gpu[t] * m)} if self.inference else {}),
        }

    def summary(self) -> dict:
        m = self.step_min
        return {
            "strategy": self.name, "knobs": dict(self.knobs), "label": self.label, "steps": len(self.util),
            "utilization": float(np.mean(self.util)) if self.util else float("nan"),
            "idle_while_queued_gpu_min": float(self.idle_queued * m),
            "high_held_gpus_mean": float(np.mean(self.high_reserved)) if self.high_reserved else 0.0,
            "preemptions": int(sum(self.preempted.values())),
            "preemptions_for": dict(self.preempted_for),
            "work_lost_gpu_min": float(sum(self.lost.values()) * m),
            "preempted_idle_gpu_min": float(self.preempted_idle * m),
            "preempted_retaken_gpus": int(self.preempted_retaken),
            "hold_changes": int(self.hold_changes),
            "hold_flaps": int(self.hold_flaps),
            "tiers": {t: self.tier(t) for t in TIERS},
            "cost_rule": dict(self.rule) if self.rule is not None else None,
            "decision_ms_mean": float(np.mean(self.decision_s) * 1000) if self.decision_s else 0.0,
            "decision_ms_p99": float(np.percentile(self.decision_s, 99) * 1000) if self.decision_s else 0.0,
            "wall_s": float(self.wall_s),
            "cpu_s": float(self.cpu_s),
            **({"by_spec": self.by_spec} if self.by_spec is not None else {}),
            **({"rises_high": dict(self.rises_high)} if self.rises_high is not None else {}),
            **({"skill_gate": self.gate_counts()} if self.forecast_acting is not None else {}),
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
    reuses them (the horizon is shifted in between, as the daemon's last forecast ages between cycles).

    With ``keep=False`` only the newest forecast is kept (one setting: at 1,000 tenants a week of kept
    forecasts would be 3 GB). With ``prefetch`` the next forecast (the next `every` steps, up to `stop`) is made
    in a background thread while the simulator runs the steps in between; forecasts are made in the same
    order either way and depend only on the trace, so the results are the same."""

    def __init__(self, model: Forecaster, demand: pd.DataFrame, every: int, horizon: int, history: int, *,
                 keep: bool = True, prefetch: bool = False, stop: int | None = None) -> None:
        self.model, self.demand, self.every, self.horizon, self.history = model, demand, max(1, every), horizon, history
        self.keep, self.stop = keep, len(demand) if stop is None else stop
        self.made: dict[int, Forecast] = {}
        self.seconds = 0.0
        self._pool = None
        self._next: tuple[int, object] | None = None  # (base, future) being made in the background
        if prefetch:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="forecast-prefetch")

    def _make(self, base: int) -> Forecast:
        t0 = time.perf_counter()
        fc = self.model.predict(self.demand.iloc[max(0, base + 1 - self.history): base + 1], self.horizon)
        self.seconds += time.perf_counter() - t0
        return fc

    def _forecast(self, base: int) -> Forecast:
        fc = self.made.get(base)
        if fc is not None:
            return fc
        if self._next is not None and self._next[0] == base:
            fc = self._next[1].result()
        else:
            if self._next is not None:  # asked out of order: let the one in flight finish first
                other, fut = self._next
                if self.keep:
                    self.made[other] = fut.result()
                else:
                    fut.result()
            fc = self._make(base)
        self._next = None
        if not self.keep:
            self.made.clear()
        self.made[base] = fc
        nxt = base + self.every
        if self._pool is not None and nxt < self.stop and nxt not in self.made:
            # in a copy of this context: a scope the caller opened (forecaster/memo.py) holds for it too
            self._next = (nxt, self._pool.submit(contextvars.copy_context().run, self._make, nxt))
        return fc

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._next = None

    def at(self, k: int) -> Forecast:
        base = k - k % self.every
        fc = self._forecast(base)
        return fc.shifted(k - base)


def per_step_config(cfg: Config, step_s: int) -> Config:
    """The replay plans once per trace step, and its clock is the trace's: the budget's token bucket
    refills per simulated second. A bucket that holds one window would cap a step longer than the window
    at one window's budget, so the window is stretched to the step with the same rate (share per second).
    The cost-aware rule's drain and checkpoint interval, where the policy does not set them, are the simulated
    cluster's (its steps times the trace's step), so the policy weighs what the simulator does."""
    pc, sc = cfg.policy, cfg.source.simulator
    k = max(1.0, step_s / pc.preempt_budget_window_s)
    share = min(1.0, pc.preempt_budget_share * k)
    jobs = int(pc.preempt_budget_jobs * k)
    return cfg.model_copy(update={"policy": pc.model_copy(update={
        "preempt_budget_share": share,
        "preempt_budget_jobs": jobs,
        "preempt_budget_window_s": pc.preempt_budget_window_s * k,
        "preempt_drain_s": pc.preempt_drain_s if pc.preempt_drain_s is not None else float(sc.drain_steps * step_s),
        "checkpoint_interval_s": pc.checkpoint_interval_s if pc.checkpoint_interval_s is not None
        else float(sc.checkpoint_steps * step_s)})})


def run_strategy(name: str, w: Workload, cfg: Config, bank: ForecastBank | None = None, *, steps: int,
                 knobs: dict | None = None, progress: Callable[[int], None] | None = None,
                 check_invariants: bool = False, count_rule: bool = False, hook=None) -> Meter:
    """Replay `steps` measured steps of `w` (after a warm-up) under one strategy at one setting of its knobs
    (policy fields: reactive `headroom`; predictive `quantile`, `headroom`; static `reserve_share`).

    ``count_rule``: with a forecast and the cost-aware rule on, plan every measured step a second time with the
    rule off (same state, memory and forecast; that plan is not applied) and count the decisions the rule
    changed (``Meter.rule``).

    ``hook``: the job-health step (daemon/sim/health_replay.py `HealthHook`): it marks ``Jobs.idle`` before the plan
    and runs after the plan is applied, spending what the plan left of the preemption budget."""
    steps = min(steps, len(w.demand) - w.start)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose from {STRATEGIES}")
    knobs = dict(knobs or {})
    why = perfect_knob_error(name, knobs)
    if why is not None:
        raise ValueError(why)
    foresight, share = knobs.get(FORESIGHT), knobs.get(RISES_SEEN)
    if name == "predictive" and bank is None:
        raise ValueError("the predictive strategy needs a forecast bank (a model)")
    policy_knobs = {k: v for k, v in knobs.items() if k not in REPLAY_KNOBS}
    if knobs.get(GATE_MARGIN) is not None:
        policy_knobs["skill_gate"] = cfg.policy.skill_gate.model_copy(
            update={"enabled": True, "margin": float(knobs[GATE_MARGIN])})
    t_start, cpu_start = time.perf_counter(), time.process_time()
    demand = w.demand.to_numpy(dtype=float)
    # what the perfect forecast knows of the future: the trace, or with rates_only the services' need at their rates
    future = rate_future(w.demand, w.expected_rates, w.inference or {}) if knobs.get(RATES_ONLY) else demand
    step_s = int((w.demand.index[1] - w.demand.index[0]).total_seconds())
    if policy_knobs:   # before the per-step scaling: a budget knob is scaled to the step as the configured budget is
        cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update=policy_knobs)})
    cfg = per_step_config(cfg, step_s)
    tenants = tuple(map(str, w.demand.columns))
    prio = np.array([PRIORITY[t] for t in w.tiers], dtype=np.int8)
    tier_of = np.array(w.tiers)
    masks = {t: tier_of == t for t in TIERS}
    sc = cfg.source.simulator
    # a typed workload replays on its fleet, with the same physics as the fleet replay (daemon/sim/fleet_replay.py):
    # nodes of several types, jobs that run only on types they accept, forecasts per `tenant@accepted types`
    typed = w.accepts is not None
    c = SimCluster(list(tenants), prio, w.capacity, w.job_gpus, gpus_per_node=w.gpus_per_node,
                   drain_steps=sc.drain_steps, checkpoint_steps=sc.checkpoint_steps,
                   max_wait_steps=cfg.policy.max_wait_steps,
                   **(dict(node_types=w.node_types, node_gpus=w.node_gpus, accepts=w.accepts) if typed else {}))
    series = tuple(series_name(t, a) for t, a in zip(tenants, w.accepts)) if typed else tenants
    if typed:
        specs = ["|".join(a) or "any" for a in w.accepts]
        res_specs = sorted(set(specs))
        spec_of = np.array([res_specs.index(s) for s in specs])
        spec_wanted, spec_unmet = np.zeros(len(res_specs)), np.zeros(len(res_specs))
        spec_high_wanted, spec_high_unmet = np.zeros(len(res_specs)), np.zeros(len(res_specs))
    act = SimulatorActuator(c, tenants)
    index = {t: i for i, t in enumerate(tenants)}
    H = cfg.cycle.horizon_steps
    high = masks["high"]
    mem = PolicyMemory()
    last: Plan | None = None
    res = Meter(name, knobs, step_min=step_s / 60.0)
    inf = inference_run(w, cfg, name, tenants, step_s, c, foresight if name == "perfect" else None)
    inf_fc: Forecast | None = None   # the forecast the inference autoscalers read (made at the step before)
    inf_acting: frozenset[str] | None = None   # and the skill gate's verdict made with it (None: gate off)
    vol_masks = masks
    if inf is not None:
        res.inference = True
        batch = np.ones(len(tenants), dtype=bool)
        batch[inf.cols] = False      # the GPU-volume request account is the batch tenants' only
        vol_masks = {t: m & batch for t, m in masks.items()}
    # one draw per tenant and step of the trace: whether a rise there is seen coming (RISES_SEEN)
    draws = np.random.default_rng(RISES_SEED).random(demand.shape) if share is not None else None
    if draws is not None:
        win = slice(w.start, w.start + steps)
        up = rises(demand)[win][:, high]
        res.rises_high = {"rises": int(up.sum()), "seen": int((up & (draws[win][:, high] < share)).sum())}
    # the skill gate runs on the forecasts scored so far (daemon/sim/skill_gate.py), as in the daemon
    gate = ReplayGate(cfg, w.demand, series if typed else None) \
        if name == "predictive" and cfg.policy.skill_gate.enabled else None
    acting = None
    read: frozenset[str] = frozenset()   # the tenants whose verdict this run reads (Meter.forecast_acting_read)
    if gate is not None:
        read = frozenset(tenants[i] for i in np.flatnonzero(high)) | (inf.ahead if inf is not None else frozenset())
        res.forecast_acting, res.tenants = [], len(tenants)
        res.forecast_acting_read, res.tenants_read = [], len(read)
    only_services = None if FORECAST_FOR not in knobs else frozenset(inf.names if inf is not None else ())
    if only_services is not None and not only_services:
        raise ValueError(f"{FORECAST_FOR}=services: workload {w.name} has no inference services")
    off_cfg = None
    if count_rule and name in ("predictive", "perfect") and cfg.policy.preempt_cost_aware:
        off_cfg = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"preempt_cost_aware": False})})
        res.rule = {"refused": 0, "other_choice": 0, "steps_changed": 0, "jobs_refused": 0}
        refused_ids: set = set()
    warm = min(240, w.start)
    req_scale = w.requests_per_gpu_s * step_s
    pre0 = lost0 = None
    idle0 = ret0 = 0
    flaps = FlapCounter(max(1, FLAP_WINDOW_S // step_s))
    for k in range(w.start - warm, w.start + steps):
        measured = k >= w.start
        if measured and pre0 is None:  # count only what happens in the measured window
            pre0, lost0 = c.preempted_per_tenant.copy(), c.lost_per_tenant.copy()
            idle0, ret0 = c.preempted_idle, c.preempted_retaken
            c.starve_max[:] = 0
        stats = c.step(demand[k] if inf is None else inf.wanted(k, demand, inf_fc, inf_acting,
                                                                 future if name == "perfect" else None))
        if check_invariants:
            c.check_invariants()
        if inf is not None:
            # what a service needs is its need now: GPUs its autoscaler asked for beyond it are not unmet demand
            stats.wanted[inf.cols] = np.where(np.isfinite(demand[k, inf.cols]), demand[k, inf.cols],
                                              stats.served[inf.cols])
            inf.account(k, c, last, res if measured else None)
        if measured:
            res.util.append(stats.running_gpus / max(stats.capacity, 1))
            res.idle_queued += min(stats.free_gpus, int(stats.queued.sum()))
            served = np.minimum(stats.served, stats.wanted)
            unmet = np.maximum(stats.wanted - stats.served, 0)
            if typed:
                np.add.at(spec_wanted, spec_of, stats.wanted)
                np.add.at(spec_unmet, spec_of, unmet)
                np.add.at(spec_high_wanted, spec_of[high], stats.wanted[high])
                np.add.at(spec_high_unmet, spec_of[high], unmet[high])
            for t, m in masks.items():
                res.wanted[t].append(float(stats.wanted[m].sum()))
                res.served[t].append(float(served[m].sum()))
                res.unmet[t].append(float(unmet[m].sum()))
                if stats.started.size:
                    res.waits[t].append(stats.started[stats.started[:, 2] == PRIORITY[t], 0])
        state = c.state(tenants, w.tiers, w.demand.index[k], step_s)
        if hook is not None:
            state = hook.before_plan(c, k, state, measured)
        t0 = time.perf_counter()
        if name == "static":
            p = static_plan(state, cfg)
        elif name == "reactive":
            p = plan(None, state, mem, cfg, last)
        elif name == "perfect":
            fut = future[k + 1: k + 1 + H].T
            if fut.shape[1] == 0:  # the trace ends here: the future looks like now
                fut = future[k: k + 1].T
            if fut.shape[1] < H:
                fut = np.concatenate([fut, np.repeat(fut[:, -1:], H - fut.shape[1], axis=1)], axis=1)
            if foresight is not None or share is not None:
                seen = None if share is None else (draws[k + 1: k + 1 + H].T < share)
                if seen is not None and seen.shape[1] < H:
                    seen = np.concatenate([seen, np.ones((seen.shape[0], H - seen.shape[1]), dtype=bool)], axis=1)
                fut = seen_future(fut, future[k], foresight, seen)
            v = np.repeat(fut[:, :, None], 3, axis=2)
            fc = Forecast(series, (0.5, 0.9, 0.99), v, state.at, step_s, "perfect")
            p = plan(fc, state, mem, cfg, last)
        else:
            fc = bank.at(k)
            if typed:  # the model forecasts the tenants' columns; on a fleet each is its typed series
                fc = dataclasses.replace(fc, tenants=series)
            if gate is not None:
                acting = gate.at(k, fc, tenants)
                if measured:
                    res.forecast_acting.append(len(acting))
                    res.forecast_acting_read.append(len(acting & read))
            inf_fc, inf_acting = fc, acting
            if only_services is not None:    # FORECAST_FOR: the batch tenants' plan as the gate's reactive one
                acting = only_services if acting is None else acting & only_services
            if inf is not None:  # the services' holds and preemptions at their autoscaler's quantile
                fc = inf.plan_forecast(fc)
            p = plan(fc, state, mem, cfg, last, acting=acting)
        dt = time.perf_counter() - t0
        if off_cfg is not None and measured:
            on = {x.job_id for x in p.preemptions}
            off = {x.job_id for x in plan(fc, state, mem, off_cfg, last, acting=acting).preemptions}
            res.rule["refused"] += len(off - on)
            res.rule["other_choice"] += len(on - off)
            res.rule["steps_changed"] += int(on != off)
            refused_ids |= off - on
            res.rule["jobs_refused"] = len(refused_ids)
        if name == "static":  # no per-tenant holds, no preemption: the one pool only
            c.set_reservations(np.zeros(len(tenants), dtype=np.int64), None, pool=(high, p.high_pool))
        else:
            act.apply(p)
        mem, last = p.memory, p
        if hook is not None:
            mem = hook.after_plan(c, k, state, mem, cfg, measured)
        if measured:
            res.decision_s.append(dt)
            flaps.observe(k, p.reservations)
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
            for t, m in vol_masks.items():
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
        still = c.waiting_now()  # censored waits: the jobs the window ends on, with their wait so far
        for t in TIERS:
            mine = still[still[:, 1] == PRIORITY[t], 0]
            res.waits[t].append(mine)
            res.waiting_at_end[t] = int(mine.size)
    res.hold_changes, res.hold_flaps = flaps.changes, flaps.flaps
    if typed:
        m = step_s / 60.0
        res.by_spec = {s: {"demand_gpu_min": float(spec_wanted[j] * m), "unmet_gpu_min": float(spec_unmet[j] * m),
                           "high_demand_gpu_min": float(spec_high_wanted[j] * m),
                           "high_unmet_gpu_min": float(spec_high_unmet[j] * m)}
                       for j, s in enumerate(res_specs)}
    res.wall_s = time.perf_counter() - t_start
    res.cpu_s = time.process_time() - cpu_start
    return res


def replica_quantile(cfg: Config) -> float:
    """The forecast quantile the predictive replica autoscaler scales to: policy.replica_quantile, else the hold's."""
    q = cfg.policy.replica_quantile
    return cfg.policy.quantile if q is None else q


def inference_run(w: Workload, cfg: Config, name: str, tenants: tuple[str, ...], step_s: int,
                  c: SimCluster, foresight: int | None = None) -> InferenceRun | None:
    """The workload's inference services for one run (None when it has none): their replicas leave newest first,
    and the gateway admits at the last plan's per-tenant limits (before the first plan, the lowest load level's).
    ``foresight``: the perfect forecast's FORESIGHT knob, which its replica autoscaler keeps too."""
    if not w.inference:
        return None
    if w.rates is None:
        raise ValueError(f"workload {w.name}: inference tenants without request rates")
    overrides = {t.name: t for t in cfg.tenants}
    first = tenant_limits(tenants, w.tiers, 0, float("nan"), cfg.ratelimits, overrides)
    run = InferenceRun(w.inference, w.rates.reindex(w.demand.index), tenants, w.tiers, name, step_s=step_s,
                       drain_steps=cfg.source.simulator.drain_steps, quantile=replica_quantile(cfg),
                       burst_seconds=cfg.ratelimits.burst_seconds,
                       limit_now=lambda p: first if p is None else p.limits,
                       ahead_tiers=tuple(cfg.policy.replica_ahead_tiers), foresight=foresight)
    c.newest_first[run.cols] = True
    return run


# the cost-aware rule's worth weight the sweep also runs (beside 1, the default, and the rule off): a high-tier
# GPU-minute unmet weighs 4 in retrain's replay cost (retrain.replay_tier_weights), so weighing forecast high-tier
# demand as 4 against work lost is the same trade; with the perfect forecast it moved the rule toward the rule off
WORTH_WEIGHT = 4.0
# and jobs preempted for the hold's whole lead window, not only the next 3 steps: clearing further ahead for a
# forecast rise (the cost-aware rule off, since it caps the lead at the drain). p90 only: at p50 the hold is the
# demand now, and what is preempted for never exceeds the hold
LONG_PREEMPT_LEAD = 10


def default_sweep(strategies=STRATEGIES) -> list[tuple[str, dict]]:
    """Each strategy over its own knob: static the pool share, reactive the headroom, predictive the quantile
    and the headroom (and the lead time, what is preempted for, and the cost-aware rule switched off), perfect
    the headroom (and the same, but the quantiles: its forecast has no spread). Both also run the cost-aware rule
    at `WORTH_WEIGHT` over the headrooms, so that weight is measured with the fitted forecasters, not only with
    the perfect forecast. And p90 (and the perfect forecast) preempting for the whole lead window
    (`LONG_PREEMPT_LEAD`, the rule off), beside the shorter `preempt_lead_steps = 1`.

    Every strategy that has a headroom is swept over the same headroom values: reactive alone had 0.1, 0.25 and
    0.4 before, so the comparison at reactive's best point found predictive's nearest setting on a coarser grid
    than reactive's own."""
    hs = (0.0, 0.05, 0.1, 0.15, 0.25, 0.4)
    grid = {
        "static": [{"reserve_share": s} for s in (0.1, 0.2, 0.3, 0.4)],
        "reactive": [{"headroom": h} for h in hs],
        # and a longer lead time for the hold (an hour, the forecast's horizon): more time for held nodes to
        # empty as their jobs end, so fewer preemptions, for more GPUs held; a lower quantile or a shorter lead
        # for what is preempted (the hold keeps the high quantile); and the cost-aware rule off, to show what it
        # changes end to end
        "predictive": [{"quantile": q, "headroom": h} for q in (0.5, 0.9, 0.99) for h in hs]
        + [{"quantile": q, "headroom": 0.05, "lead_time_steps": 60} for q in (0.5, 0.9)]
        + [{"quantile": 0.9, "headroom": h, "preempt_quantile": 0.5} for h in hs]
        + [{"quantile": q, "headroom": 0.05, "preempt_lead_steps": 1} for q in (0.5, 0.9)]
        + [{"quantile": q, "headroom": h, "preempt_cost_aware": False} for q in (0.5, 0.9) for h in hs]
        + [{"quantile": q, "headroom": h, "preempt_worth_weight": WORTH_WEIGHT} for q in (0.5, 0.9) for h in hs]
        + [{"quantile": 0.9, "headroom": h, "preempt_lead_steps": LONG_PREEMPT_LEAD, "preempt_cost_aware": False}
           for h in hs],
        "perfect": [{"headroom": h} for h in hs] + [{"headroom": h, "lead_time_steps": 60} for h in (0.0, 0.05)]
        + [{"headroom": 0.05, "preempt_lead_steps": 1}]
        + [{"headroom": h, "preempt_cost_aware": False} for h in hs]
        + [{"headroom": h, "preempt_worth_weight": WORTH_WEIGHT} for h in hs]
        + [{"headroom": h, "preempt_lead_steps": LONG_PREEMPT_LEAD, "preempt_cost_aware": False} for h in hs],
    }
    return [(s, k) for s in strategies for k in grid[s]]


def _groups(runs: list[tuple[str, dict]], workers: int = 1) -> list[list[int]]:
    """Settings that run together in one process. The predictive settings share a forecast bank, so they form
    groups of their own (run first: forecasting makes them the longest): one group, or with ``workers > 1`` one
    per worker, each making its own bank (a forecast is made once per group, not once per setting: the sweep's 58
    predictive settings in one group kept one core busy long after the other had run out of work). Every other
    setting is a group of its own."""
    pred = [i for i, (s, _) in enumerate(runs) if s == "predictive"]
    parts = max(1, min(workers, len(pred)))
    return [pred[j::parts] for j in range(parts) if pred[j::parts]] + \
        [[i] for i, (s, _) in enumerate(runs) if s != "predictive"]


def _bank(model: Forecaster, w: Workload, cfg: Config, runs: list[tuple[str, dict]], every: int,
          steps: int) -> ForecastBank:
    """One bank for the predictive settings of `runs`: kept whole only when several settings reuse it."""
    n = sum(s == "predictive" for s, _ in runs)
    return ForecastBank(model, w.demand, every, cfg.cycle.horizon_steps, cfg.cycle.history_steps, keep=n > 1,
                        prefetch=True, stop=w.start + steps)


_JOB: dict = {}  # what a worker process needs, inherited through fork (a DataFrame and a model are not re-pickled)
PROGRESS_EVERY = 20  # a worker reports its steps to the parent's progress this often (a shared counter's lock)


def _run_group(group: list[int]) -> list[tuple[int, Meter]]:
    import torch

    torch.set_num_threads(1)  # one process per core: intra-op threads would only wait on each other
    j = _JOB
    runs = [j["runs"][i] for i in group]
    bank = _bank(j["model"], j["w"], j["cfg"], runs, j["forecast_every"], j["steps"]) \
        if any(s == "predictive" for s, _ in runs) else None
    done = j.get("done")

    def tick(i: int) -> None:
        if (i + 1) % PROGRESS_EVERY == 0:
            with done.get_lock():
                done.value += PROGRESS_EVERY

    try:
        out = []
        for i, (s, knobs) in zip(group, runs):
            out.append((i, run_strategy(s, j["w"], j["cfg"], bank if s == "predictive" else None, steps=j["steps"],
                                        knobs=knobs, check_invariants=j["check_invariants"],
                                        count_rule=j["count_rule"], progress=tick if done is not None else None)))
            if done is not None:
                with done.get_lock():
                    done.value += j["steps"] % PROGRESS_EVERY
        return out
    finally:
        if bank is not None:
            bank.close()


def replay_workers() -> int:
    """Worker processes for a sweep: the CPUs this process may run on (a sweep's settings are independent)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call (macOS)
        return max(1, os.cpu_count() or 1)


def replay_name(w: Workload, runs: list[tuple[str, dict]]) -> str:
    """The progress phase's name: the workload and what is replayed."""
    return f"replay {w.name} ({len(runs)} setting{'s' if len(runs) != 1 else ''})"


def run_replay(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int, strategies=STRATEGIES,
               settings: list[tuple[str, dict]] | None = None, forecast_every: int = 1, progress: bool = False,
               check_invariants: bool = False, workers: int = 1, count_rule: bool = False) -> list[Meter]:
    """Run each (strategy, knobs) setting; with no `settings`, each strategy once at the configured policy.

    ``workers > 1`` runs the settings in that many forked processes (each with one torch thread); every
    setting is computed exactly as in one process, so the meters are the same, only the wall time changes.
    ``count_rule``: count the cost-aware rule's decisions (``run_strategy``). ``progress``: one named phase over
    every setting's steps on stderr (forecaster.progress: a bar on a terminal, else a plain line every 30 s and
    every 10%, each with done/total and the ETA of the whole sweep)."""
    from forecaster.progress import Progress

    runs = settings if settings is not None else [(s, {}) for s in strategies]
    if model is None:
        runs = [(s, k) for s, k in runs if s != "predictive"]
    measured = min(steps, len(w.demand) - w.start)
    bar = Progress(replay_name(w, runs), measured * len(runs), unit="steps", enabled=progress)
    if workers > 1 and len(runs) > 1:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        done_steps = ctx.Value("q", 0) if progress else None
        _JOB.update(w=w, cfg=cfg, model=model, steps=measured, runs=runs, forecast_every=forecast_every,
                    check_invariants=check_invariants, count_rule=count_rule, done=done_steps)
        done: dict[int, Meter] = {}
        groups = _groups(runs, workers)
        try:
            with ctx.Pool(min(workers, len(groups))) as pool:
                it = pool.imap_unordered(_run_group, groups)
                left = len(groups)
                while left:
                    try:
                        part = it.next(timeout=1.0)
                    except mp.TimeoutError:
                        part = None
                    except StopIteration:
                        break
                    if done_steps is not None:
                        bar.update(done_steps.value - bar.n)
                    if part is None:
                        continue
                    left -= 1
                    for i, m in part:
                        done[i] = m
                        bar.set_phase(f"{len(done)}/{len(runs)} settings done, last {m.label}")
                pool.close()
                pool.join()  # reaped, so their CPU time shows in getrusage(RUSAGE_CHILDREN)
        finally:
            _JOB.clear()
            bar.close()
        return [done[i] for i in range(len(runs))]
    bank = _bank(model, w, cfg, runs, forecast_every, steps) if any(s == "predictive" for s, _ in runs) else None
    out = []
    try:
        for j, (s, knobs) in enumerate(runs):
            bar.set_phase(f"{j + 1}/{len(runs)} {Meter(s, knobs).label}")
            out.append(run_strategy(s, w, cfg, bank if s == "predictive" else None, steps=steps, knobs=knobs,
                                    progress=(lambda _i: bar.update(1)) if progress else None,
                                    check_invariants=check_invariants, count_rule=count_rule))
    finally:
        if bank is not None:
            bank.close()
        bar.close()
    return out
