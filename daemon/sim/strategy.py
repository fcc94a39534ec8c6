"""One strategy at one setting replayed step by step (`run_strategy`): the simulated cluster steps, the policy plans
(or the static pool stands), the simulated actuator applies the plan, and the `Meter` counts what happened.

Also what that loop needs of its own: the static strategy's plan, the policy scaled to the trace's step
(`per_step_config`) and the workload's inference services for the run (`inference_run`). The strategies and their
knobs: daemon/sim/replay.py and daemon/sim/replay_knobs.py.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from daemon.config import Config
from daemon.forecasting.skill import acting_tenants, restrict
from daemon.policy import Plan, PolicyMemory, plan
from daemon.policy.fleet import series_name
from daemon.policy.ratelimits import tenant_limits
from daemon.policy.state import PRIORITY, ClusterState
from daemon.sim.actuator import SimulatorActuator, replays_slurm, windows_at_lead_s
from daemon.sim.cluster import SimCluster
from daemon.sim.flaps import FLAP_WINDOW_S, FlapCounter
from daemon.sim.forecast_bank import ForecastBank
from daemon.sim.inference import InferenceRun, rate_future
from daemon.sim.meter import TIERS, Meter
from daemon.sim.replay_knobs import (
    FORECAST_FOR,
    FORESIGHT,
    GATE_MARGIN,
    RATES_ONLY,
    REPLAY_KNOBS,
    RISES_SEED,
    RISES_SEEN,
    STRATEGIES,
    perfect_knob_error,
    rises,
    seen_future,
)
from daemon.sim.skill_gate import ReplayGate
from daemon.sim.workloads import Workload
from forecaster.types import Forecast


def static_plan(state: ClusterState, cfg: Config) -> Plan:
    """The seed's fixed setup: one pool of `reserve_share` of the GPUs for the whole high tier (held as whole
    nodes by the simulated actuator, like one Slurm reservation for all high-tier accounts), no preemption."""
    pool = int(np.floor(cfg.policy.reserve_share * state.capacity))
    limits = tenant_limits(state.tenants, state.tiers, 0, state.load(), cfg.ratelimits, {})
    return Plan(at=state.at.isoformat(), capacity=state.capacity, load=state.load(), high_pool=pool,
                reservations={}, quotas={}, limits=limits, preemptions=(), notifications=(), stale=False,
                forecast_model="static", notes=(), memory=PolicyMemory())


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
    # a typed workload replays on its fleet, with the same physics as the fleet replay (daemon/sim/fleet_replay.py):
    # nodes of several types, jobs that run only on types they accept, forecasts per `tenant@accepted types`; with
    # `owners` a tenant's jobs ask different types, one demand column (stream) per (tenant, types): the meters count
    # per column, the plan, holds and preemption counts per tenant (`tenants`, `tiers`, `own`: each column's tenant)
    typed = w.accepts is not None
    tenants, tiers, own, job = streams_of(w)
    cols = tuple(map(str, w.demand.columns))
    prio = np.array([PRIORITY[t] for t in tiers], dtype=np.int8)
    tier_of = np.array(w.tiers)
    masks = {t: tier_of == t for t in TIERS}
    own_masks = {t: np.array(tiers) == t for t in TIERS}
    sc = cfg.source.simulator
    fleet = {}
    if typed:
        fleet = dict(node_types=w.node_types, node_gpus=w.node_gpus)
        fleet.update(dict(streams=list(zip(own.tolist(), w.accepts))) if w.owners is not None
                     else dict(accepts=w.accepts))
    c = SimCluster(list(tenants), prio, w.capacity, job, gpus_per_node=w.gpus_per_node,
                   drain_steps=sc.drain_steps, checkpoint_steps=sc.checkpoint_steps,
                   max_wait_steps=cfg.policy.max_wait_steps, **fleet)
    series = tuple(series_name(tenants[o], a) for o, a in zip(own.tolist(), w.accepts)) if typed else cols
    if typed:
        specs = ["|".join(a) or "any" for a in w.accepts]
        res_specs = sorted(set(specs))
        spec_of = np.array([res_specs.index(s) for s in specs])
        spec_wanted, spec_unmet = np.zeros(len(res_specs)), np.zeros(len(res_specs))
        spec_high_wanted, spec_high_unmet = np.zeros(len(res_specs)), np.zeros(len(res_specs))
    act = SimulatorActuator(c, tenants, windows_ahead=replays_slurm(cfg.actuators.enabled),
                            at_lead_s=windows_at_lead_s(cfg), min_lead_s=cfg.window_min_lead_s())
    index = {t: i for i, t in enumerate(tenants)}
    H = cfg.cycle.horizon_steps
    high = masks["high"]
    own_high = own_masks["high"]
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
    gate = ReplayGate(cfg, w.demand, series if typed else None,
                      services=[(t, tiers[i]) for i, t in enumerate(tenants) if t in (w.inference or {})],
                      batch=[(t, tiers[i]) for i, t in enumerate(tenants) if t not in (w.inference or {})]) \
        if name == "predictive" and cfg.policy.skill_gate.enabled else None
    acting = None
    read: frozenset[str] = frozenset()   # the tenants whose verdict this run reads (Meter.forecast_acting_read)
    if gate is not None:
        read = frozenset(tenants[i] for i in np.flatnonzero(own_high)) \
            | (inf.ahead if inf is not None else frozenset())
        res.forecast_acting, res.tenants = [], len(tenants)
        res.gate_by_tenant = {t: {"steps_on_forecast": 0} for t in tenants}
        if typed:
            res.gate_by_series = dict.fromkeys(series, 0)
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
                if inf is not None:   # the services' part of the tier's unmet (the rest is its batch jobs')
                    res.inf_unmet[t] += float(unmet[m & ~batch].sum())
                if stats.started.size:
                    res.waits[t].append(stats.started[stats.started[:, 2] == PRIORITY[t], 0])
        state = c.state(tenants, tiers, w.demand.index[k], step_s)
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
                acting = gate.at(k, fc, tenants)   # tenants, or on a mixed fleet typed series (skill.acting_set)
                if measured:
                    on = acting_tenants(acting, index)   # counted per tenant: those acting for at least one type
                    res.forecast_acting.append(len(on))
                    res.forecast_acting_read.append(len(on & read))
                    for t in on:
                        res.gate_by_tenant[t]["steps_on_forecast"] += 1
                    if res.gate_by_series is not None:   # a series acts when named, or when its tenant is
                        for j, s_ in enumerate(series):
                            if s_ in acting or tenants[own[j]] in acting:
                                res.gate_by_series[s_] += 1
            inf_fc, inf_acting = fc, None if acting is None else acting_tenants(acting, index)
            if only_services is not None:    # FORECAST_FOR: the batch tenants' plan as the gate's reactive one
                acting = only_services if acting is None else restrict(acting, only_services)
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
            c.set_reservations(np.zeros(len(tenants), dtype=np.int64), None, pool=(own_high, p.high_pool))
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
                    res.preempted_for[tiers[i]] += 1
            res.high_reserved.append(float(c.held_gpus()[np.r_[own_high, True]].sum()))
            # requests: volume follows GPUs asked for (and the trace's shape); limits come from the plan
            shape = 1.0 if w.request_shape is None else float(w.request_shape[k % len(w.request_shape)])
            vol = np.maximum(stats.wanted, 0) * req_scale * shape
            rate = np.array([p.limits[tenants[o]].rate for o in own.tolist()]) * step_s
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
        for t, m in own_masks.items():
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
    if gate is not None:   # the verdict each tenant's window ended on
        for t, v in gate.verdicts.items():
            res.gate_by_tenant.setdefault(t, {"steps_on_forecast": 0})["verdict"] = v.to_dict()
    if typed:
        m = step_s / 60.0
        res.by_spec = {s: {"demand_gpu_min": float(spec_wanted[j] * m), "unmet_gpu_min": float(spec_unmet[j] * m),
                           "high_demand_gpu_min": float(spec_high_wanted[j] * m),
                           "high_unmet_gpu_min": float(spec_high_unmet[j] * m)}
                       for j, s in enumerate(res_specs)}
    res.wall_s = time.perf_counter() - t_start
    res.cpu_s = time.process_time() - cpu_start
    return res


def streams_of(w: Workload) -> tuple[tuple[str, ...], tuple, np.ndarray, np.ndarray]:
    """The replay's tenants, their tiers, each demand column's tenant (index) and each tenant's job size: the
    columns themselves without ``Workload.owners``; with it the owners in order of their first column, each with
    its first column's tier and job size (a tenant's columns must agree on its tier)."""
    cols = tuple(map(str, w.demand.columns))
    if w.owners is None:
        return cols, tuple(w.tiers), np.arange(len(cols)), np.asarray(w.job_gpus)
    if w.accepts is None or w.inference:
        raise ValueError(f"workload {w.name}: owners (a tenant's jobs asking several types) need a mixed fleet's "
                         "accepts per column and no inference services")
    if len(w.owners) != len(cols):
        raise ValueError(f"workload {w.name}: owners: one tenant per demand column")
    tenants = tuple(dict.fromkeys(map(str, w.owners)))
    pos = {t: i for i, t in enumerate(tenants)}
    own = np.array([pos[str(o)] for o in w.owners], dtype=np.int64)
    first = np.array([int(np.flatnonzero(own == i)[0]) for i in range(len(tenants))])
    tiers = tuple(w.tiers[j] for j in first.tolist())
    for j, o in enumerate(own.tolist()):
        if w.tiers[j] != tiers[o]:
            raise ValueError(f"workload {w.name}: tenant {tenants[o]!r} has columns of tiers {tiers[o]!r} and "
                             f"{w.tiers[j]!r}")
    return tenants, tiers, own, np.asarray(w.job_gpus)[first]


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

