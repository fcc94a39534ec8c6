"""plan(): forecast + cluster state + memory + config in, Plan out. No I/O, no clock, no randomness."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from daemon.config import Config, TenantConfig
from daemon.policy import aging, budget, fleet, hold_reason, preempt_reason, preemption, reservation, windows
from daemon.policy.ratelimits import rate_level, tenant_limits
from daemon.policy.state import PRIORITY, ClusterState
from daemon.policy.types import Notification, OperatorInputs, Plan, PolicyMemory, Preemption
from daemon.text import agree, plural
from forecaster.types import Forecast


def staleness_reason(state: ClusterState, cfg: Config) -> str | None:
    """Why this snapshot must not drive new preemptions, or None when it is fit to act on."""
    n = max(len(state.tenants), 1)
    if state.capacity <= 0:
        return "source reports no healthy GPUs"
    if state.staleness_s > cfg.cycle.stale_after_s:
        return f"newest sample is {state.staleness_s:.0f}s old (> {cfg.cycle.stale_after_s:.0f}s)"
    if len(state.missing) / n > cfg.cycle.max_missing_share:
        return f"{len(state.missing)} of {plural(n, 'tenant')} {agree(len(state.missing), 'has', 'have')} no fresh " \
            "sample"
    if not math.isfinite(state.load()):
        return "GPU usage unknown"
    return None


def _stale_plan(state: ClusterState, memory: PolicyMemory, last: Plan | None, why: str, cfg: Config) -> Plan:
    note = f"stale data ({why}): keeping last good plan, no new preemptions"
    if last is not None:
        return Plan(at=state.at.isoformat(), capacity=last.capacity, load=last.load, high_pool=last.high_pool,
                    reservations=dict(last.reservations), quotas=dict(last.quotas), limits=dict(last.limits),
                    preemptions=(), notifications=(), stale=True, forecast_model=last.forecast_model,
                    notes=(note, f"last good plan from {last.at}"), memory=memory, pooled=last.pooled,
                    hold_job_gpus=dict(last.hold_job_gpus), holds_by_type=dict(last.holds_by_type),
                    capacity_by_type=dict(last.capacity_by_type), high_pool_by_type=dict(last.high_pool_by_type),
                    notes_by_type=dict(last.notes_by_type), shared_cap_by_type=dict(last.shared_cap_by_type),
                    held_for=dict(last.held_for), window_holds=dict(last.window_holds),
                    window_holds_by_type={t: dict(v) for t, v in last.window_holds_by_type.items()})
    limits = tenant_limits(state.tenants, state.tiers, memory.rate_level, float("nan"), cfg.ratelimits,
                           {t.name: t for t in cfg.tenants})
    return Plan(at=state.at.isoformat(), capacity=max(state.capacity, 0), load=float("nan"),
                high_pool=reservation.high_pool(max(state.capacity, 0), cfg.policy.reserve_share),
                reservations=dict(memory.reservations), quotas={}, limits=limits, preemptions=(),
                notifications=(), stale=True, forecast_model="none", notes=(note, "no good plan yet"),
                memory=memory)


def drain_and_checkpoint_s(cfg: Config) -> tuple[float, float]:
    """The drain of a preempted job and its checkpoint interval, in seconds, as the cost-aware rule assumes them:
    ``policy.preempt_drain_s`` and ``policy.checkpoint_interval_s``, by default the simulator's steps times the
    cycle's resolution (so the replay and the daemon assume the same)."""
    pc, sc, res = cfg.policy, cfg.source.simulator, cfg.cycle.resolution_s
    ckpt = pc.checkpoint_interval_s if pc.checkpoint_interval_s is not None else float(sc.checkpoint_steps * res)
    return cfg.preempt_drain_s(), float(ckpt)


def _rate_overrides(cfg: Config, ops: OperatorInputs) -> dict[str, TenantConfig]:
    out = {t.name: t for t in cfg.tenants}
    for name, rate in ops.rates.items():
        base = out.get(name) or TenantConfig(name=name)
        out[name] = base.model_copy(update={"rate_override": float(rate)})
    return out


@dataclasses.dataclass(frozen=True)
class _View:
    """The snapshot as arrays, read once per plan."""

    tenants: tuple[str, ...]
    high: np.ndarray        # bool per tenant
    capacity: int
    used: np.ndarray        # GPUs in use (unknown read as 0 for sums; `known` says which are real)
    known: np.ndarray       # bool: a fresh reading exists
    demand: np.ndarray

    @classmethod
    def of(cls, state: ClusterState) -> "_View":
        raw = state.used.astype(float)
        return cls(state.tenants, state.tier_array() == PRIORITY["high"], int(state.capacity),
                   np.nan_to_num(raw, nan=0.0), np.isfinite(raw), state.demand.astype(float))

    @property
    def n(self) -> int:
        return len(self.tenants)


@dataclasses.dataclass(frozen=True)
class _Holds:
    """What the plan holds, and how much of it must be free soon (what preemption may clear)."""

    res: np.ndarray         # GPUs held per tenant
    soon: np.ndarray        # of which needed within the drain window
    quantum: np.ndarray     # GPUs of the largest job of each protected tenant (holds come in whole jobs)
    aged: np.ndarray        # bool: a job of this tenant waited max_wait and is admitted
    floored: np.ndarray     # bool: an operator's floor protects this tenant (outside the high tier)
    pooled: np.ndarray      # bool: held together as the high tier's pool
    pool: int               # GPUs guaranteed to the high tier
    model: str              # the forecast's model name ("none" without one)
    # the cost-aware rule (policy.preempt_cost_aware; None when off or without a forecast): the forecast at the
    # preemption quantile, per tenant and step, the steps jobs are preempted for (those that end no later than
    # a drain started now), the drain in steps, and a step in minutes
    path: np.ndarray | None = None
    window: int = 0
    drain_steps: int = 0
    step_min: float = 1.0
    # GPUs the recurring windows ask to have cleared now per tenant (known demand; None without windows): neither
    # weighed by the cost-aware rule nor paid from the forecast's preemption budget
    known: np.ndarray | None = None
    # GPUs per tenant its windows hold now, its alone (a Slurm reservation for its account); a pooled tenant's
    # hold beyond them stays in the high tier's pool (None without windows)
    own: np.ndarray | None = None
    # per tenant, the nodes its largest job (``quantum``) asks (Slurm -N): its place is that many nodes (None: one)
    nodes: np.ndarray | None = None
    # per tenant, whether those are pods that may share a node (a Kubernetes gang, Jobs.packed; None: none is)
    packed: np.ndarray | None = None
    basis: hold_reason.HoldBasis | None = None   # what each hold was sized on: why it changed (Plan.hold_why)


@dataclasses.dataclass(frozen=True)
class _Cleared:
    """The preemptions chosen, what they tell tenants, and the budget left."""

    chosen: np.ndarray      # job positions
    preemptions: tuple[Preemption, ...]
    notifications: tuple[Notification, ...]
    budget_gpus: float
    budget_jobs: float


def plan(forecast: Forecast | None, state: ClusterState, memory: PolicyMemory, cfg: Config,
         last: Plan | None = None, ops: OperatorInputs | None = None, now: float | None = None,
         acting: frozenset[str] | None = None) -> Plan:
    """``now`` (epoch seconds) drives the preemption budget; by default the snapshot's own time.

    ``acting``: the tenants whose holds and preemptions act on the forecast (the skill gate's choice,
    daemon/forecasting/skill.py, made outside the policy); every other tenant is planned reactively, as without a
    forecast (its current demand with headroom). None: every tenant acts on the forecast. On a mixed fleet it may
    name typed series (``tenant@spec``): the tenant acts on the forecast for those types only, and its other
    types are held for their demand now (fleet.gate_series).

    In order: operator tier changes, the staleness check (a stale snapshot keeps the last good plan), aging,
    the holds, the preemptions that clear room for them, the rate limits, then the plan as a whole.
    """
    ops = ops or OperatorInputs()
    state = state.with_tiers(ops.tiers)  # type: ignore[arg-type]
    in_force = tuple(w.model_dump(mode="json") for w in _windows_in_force(cfg, ops).values())
    why = staleness_reason(state, cfg)
    if why is not None:
        return dataclasses.replace(_stale_plan(state, memory, last, why, cfg), windows=in_force)
    view = _View.of(state)
    notes: list[str] = []
    clock = state.at.timestamp() if now is None else float(now)
    ag, adm, aged_since = _aging(state, view, memory, cfg, clock, notes)
    forecast, reactive = _reactive_mask(state, view.tenants, acting, forecast, notes, view.high)
    win = _window_demand(state, view, cfg, ops, notes)
    holds = _holds(forecast, state, view, memory, cfg, ops, adm, notes, reactive, win)
    typed = None
    if fleet.is_typed(state):  # a mixed fleet: the holds said per type (daemon/policy/fleet.py)
        peaks = _typed_peaks(forecast, view.tenants, cfg)
        if peaks is not None and reactive is not None:  # a reactive tenant's types follow its demand
            peaks = {i: v for i, v in peaks.items() if not reactive[i]}
        # a window's GPUs are held first on the types it names, its tenant's alone; a pooled tenant's hold beyond
        # them stays in the pool on each type, as on one model
        typed = fleet.split(state, holds.res, view.high | holds.aged | holds.floored, cfg,
                            peaks, last.holds_by_type if last else None, win[2] if win is not None else None)
        res = typed.res
        holds = dataclasses.replace(holds, res=res, soon=np.minimum(holds.soon, res), pool=int(typed.pool.sum()))
        if holds.own is not None and typed.window is not None:
            holds = dataclasses.replace(holds, own=typed.window.sum(axis=1).astype(np.int64))
    cleared = _preemptions(state, view, holds, ag, memory, cfg, ops, clock, notes, typed)
    notifs = list(cleared.notifications) + aging.protected_notices(aged_since, memory.aged_since,
                                                                   cfg.policy.max_wait_steps,
                                                                   cfg.policy.aging_min_run_s)
    # --- rate limits follow load with hysteresis
    load = float(view.used.sum()) / view.capacity
    level = rate_level(load, memory.rate_level, cfg.ratelimits)
    limits = tenant_limits(view.tenants, state.tiers, level, load, cfg.ratelimits, _rate_overrides(cfg, ops))
    if level != memory.rate_level:
        kind = "throttled" if level > memory.rate_level else "relaxed"
        notes.append(f"rate level {memory.rate_level} -> {level} at load {load:.0%}")
        notifs += [Notification(t, kind, lim.reason) for t, lim in limits.items()]
    mem = PolicyMemory(reservations={}, rate_level=level, aged_since=aged_since, waited=ag.waited, stint=ag.stint,
                       aged_jobs=ag.aged_jobs, budget_gpus=cleared.budget_gpus, budget_jobs=cleared.budget_jobs,
                       budget_at=clock)
    why = hold_reason.hold_why(view.tenants, memory.reservations, holds.res, holds.basis, memory.aged_since,
                               memory.aged_jobs, state.jobs, last.window_holds if last else {})
    return dataclasses.replace(_assemble(state, view, holds, cleared, tuple(notifs), limits, load, mem, notes, typed),
                               windows=in_force, hold_why=why)


def _windows_in_force(cfg: Config, ops: OperatorInputs) -> dict:
    """The config's windows, with the operator's (API) ones added or replacing those of the same name."""
    ws = {w.name: w for w in cfg.windows}
    ws.update({w.name: w for w in ops.windows})
    return ws


def _window_demand(state: ClusterState, view: _View, cfg: Config, ops: OperatorInputs, notes: list[str]
                   ) -> tuple[np.ndarray, np.ndarray, dict[int, dict[str, int]]] | None:
    """The recurring windows' demand now (daemon/policy/windows.py): GPUs held at least and GPUs to clear per
    tenant, and per tenant index the GPUs per type; None without windows. The config's windows, with the
    operator's (API) ones replacing those of the same name; each that asks for something says why in the notes."""
    ws = _windows_in_force(cfg, ops)
    if not ws:
        return None
    drain_s, _ = drain_and_checkpoint_s(cfg)
    ds = windows.demands(ws.values(), state.at, drain_s, cfg.cycle.interval_s)
    if not ds:
        return None
    pos = {t: i for i, t in enumerate(view.tenants)}
    hold, clear, by_type = windows.per_tenant(ds)
    h, c = np.zeros(view.n), np.zeros(view.n)
    typed: dict[int, dict[str, int]] = {}
    for d in ds:
        if d.tenant not in pos:
            notes.append(f"{d.reason}, but tenant {d.tenant} is not in the snapshot: nothing held for it")
            continue
        notes.append(f"{d.reason}: {plural(d.gpus, 'GPU')} held for {d.tenant}")
    for t, g in hold.items():
        if t in pos:
            h[pos[t]], c[pos[t]] = g, clear.get(t, 0)
            if cfg.fleet.typed:
                typed[pos[t]] = by_type[t]
    return h, c, typed


# why the skill gate's note says a tenant is planned reactively: the plan knows only whom it acts for; the daemon's
# cycle, which knows each tenant's scores, says how many of each (daemon/forecasting/skill.py reactive_why)
GATE_WHY = "too few forecasts scored yet, or no skill shown"


def _reactive_mask(state: ClusterState, tenants: tuple[str, ...], acting: frozenset[str] | None,
                   forecast: Forecast | None, notes: list[str], high: np.ndarray
                   ) -> tuple[Forecast | None, np.ndarray | None]:
    """Which tenants the skill gate plans reactively (None: none of them), said in the notes, with the high tier's
    own count: only its holds and preemptions are made on the forecast, so a verdict elsewhere changes no plan.
    On a mixed fleet the gate decides per typed series (fleet.gate_series): the forecast returned reads a tenant's
    series that do not act as their demand now."""
    if acting is None or forecast is None:
        return forecast, None
    forecast, on, series, of = fleet.gate_series(forecast, state, tenants, acting)
    mask = ~on
    if mask.any():
        notes.append(f"skill gate: {plural(int(mask.sum()), 'tenant')} planned reactively ({GATE_WHY}), "
                     + f"{plural(int((~mask).sum()), 'tenant')} on the forecast; the "
                     f"high tier, whose holds and preemptions it decides: {int((~mask & high).sum())} of "
                     f"{int(high.sum())} on the forecast")
    if series:
        notes.append(f"skill gate: {plural(series, 'GPU-type series')} of {plural(of, 'tenant')} on the forecast "
                     "planned on their demand now (no skill shown for those types)")
    return forecast, mask


def _typed_peaks(forecast: Forecast | None, tenants: tuple[str, ...],
                 cfg: Config) -> dict[int, dict[tuple[str, ...], float]] | None:
    """Per tenant, the forecast peak over the lead time of each set of types its work accepts (typed series)."""
    if forecast is None or not any(fleet.SERIES_SEP in t for t in forecast.tenants):
        return None
    steps = max(1, min(cfg.policy.lead_time_steps, forecast.horizon))
    peak = np.fmax.reduce(forecast.values[:, :steps, forecast.quantile_index(cfg.policy.quantile)], axis=1)
    return fleet.typed_peaks(forecast.tenants, peak, tenants)[1]


def _aging(state: ClusterState, view: _View, memory: PolicyMemory, cfg: Config, clock: float,
           notes: list[str]) -> tuple[aging.Aging, aging.Admission, dict[str, str]]:
    """Anti-starvation (daemon/policy/aging.py): a job's wait is summed over its queue stints (requeues
    included). A job that waited max_wait is admitted ahead of the high tier's borrowing beyond its guarantee
    and of all normal work, one job per starving tenant at a time and within aging_max_share of the GPUs, and
    is not preempted before it has run aging_min_run_s. Returns the aging state, the jobs admitted (per tenant:
    their GPUs and index) and since when each admitted tenant has been protected."""
    pc = cfg.policy
    jobs = state.jobs
    now_iso = state.at.isoformat()
    max_wait_s = pc.max_wait_steps * cfg.cycle.resolution_s
    since = clock - memory.budget_at if memory.budget_at is not None and clock >= memory.budget_at else float("inf")
    if pc.aging_cumulative:
        ag = aging.age(jobs, memory.waited, memory.stint, memory.aged_jobs, max_wait_s, pc.aging_min_run_s, now_iso,
                       since)
    else:  # the current queue stint only (the scheduler's own clock), no grace period, nothing remembered
        ag = aging.age(jobs, {}, {}, {}, max_wait_s, 0.0, now_iso)
        ag = dataclasses.replace(ag, waited={}, stint={}, aged_jobs={})
    adm = aging.admit(ag, jobs, view.n, ~view.high, max_wait_s, int(math.floor(pc.aging_max_share * view.capacity)),
                      reservation.job_footprint(jobs, state.nodes))   # a -N job's hold: its whole nodes
    if adm.waiting:
        notes.append(f"aging: {plural(adm.waiting, 'tenant')} waited over {plural(pc.max_wait_steps, 'step')} and "
                     f"{agree(adm.waiting, 'waits', 'wait')} for a slot (one job per tenant, "
                     f"{pc.aging_max_share:.0%} of the GPUs)")
    aged_since = {view.tenants[i]: memory.aged_since.get(view.tenants[i], now_iso)
                  for i in np.flatnonzero(adm.gpus > 0)}
    return ag, adm, aged_since


def _holds(forecast: Forecast | None, state: ClusterState, view: _View, memory: PolicyMemory, cfg: Config,
           ops: OperatorInputs, adm: aging.Admission, notes: list[str],
           reactive: np.ndarray | None = None,
           win: tuple[np.ndarray, np.ndarray, dict] | None = None) -> _Holds:
    """Reservations for the high tier (its forecast peak over the lead time), aged tenants and operator floors,
    in whole jobs, fitted to the capacity. A `reactive` tenant's forecast is read as unknown: its hold is its
    demand with headroom and nothing is preempted for its forecast (the skill gate)."""
    pc = cfg.policy
    tenants, n, high, used = view.tenants, view.n, view.high, view.used
    aged_gpus = adm.gpus
    aged = aged_gpus > 0
    prev = np.array([memory.reservations.get(t, 0) for t in tenants], dtype=float)
    path, drain_steps, step_min = None, 0, 1.0
    if forecast is not None:
        # a mixed fleet's typed series are summed per tenant and read per step; a plain forecast serves its own
        # peak quantiles where it carries them (Forecast.peak_over)
        typed = any(fleet.SERIES_SEP in t for t in forecast.tenants)
        peak_all = fleet.tenant_values(forecast, tenants) if typed else None

        def peak_over(k: int, j: int) -> np.ndarray:
            if peak_all is None:
                return forecast.peak_over(k, forecast.quantiles[j], tenants)
            return np.fmax.reduce(peak_all[:, :k, j], axis=1)  # NaN only if all NaN

        qidx = forecast.quantile_index(pc.quantile)
        steps = max(1, min(pc.lead_time_steps, forecast.horizon))
        peak = peak_over(steps, qidx) if n else np.zeros(0)
        soon_steps = max(1, min(pc.preempt_lead_steps, steps))
        # with a lower preempt_quantile, jobs are preempted only for the likely demand and the hold covers the
        # rest: what the high quantile adds is held by attrition (no new starts on held nodes), not cleared
        pidx = forecast.quantile_index(pc.preempt_quantile) if pc.preempt_quantile is not None else qidx
        if pc.preempt_cost_aware:
            # the cost-aware rule: jobs are preempted only for demand that arrives before a drain started now
            # ends; what comes later is cleared by a later cycle, when it is that close (or by the hold's attrition)
            drain_s, _ = drain_and_checkpoint_s(cfg)
            drain_steps = int(math.ceil(drain_s / forecast.step_s - 1e-9))
            soon_steps = min(soon_steps, drain_steps)
            path = (peak_all if peak_all is not None else forecast.for_tenants(tenants))[:, :, pidx]
            step_min = forecast.step_s / 60.0
        peak_soon = peak_over(soon_steps, pidx) if n and soon_steps else np.full(n, np.nan)
        if reactive is not None and reactive.any():
            peak, peak_soon = np.where(reactive, np.nan, peak), np.where(reactive, np.nan, peak_soon)
            if path is not None:
                path = np.where(reactive[:, None], np.nan, path)
        model = forecast.model
    else:
        peak = peak_soon = np.full(n, np.nan)
        soon_steps = steps = 0
        model = "none"
        notes.append("no forecast: reserving for current demand only")
    # reservations come in whole jobs: holding 6 GPUs for a tenant whose jobs take 8 holds nothing usable
    jobs = state.jobs
    # only protected tenants hold reservations, in whole jobs of the high tier's jobs and of an aged tenant's admitted
    # one: its others' shape (a 2 x 8 job queued beside its aged 1-GPU one) made its hold and preemptions 16 GPUs
    mine = None if not len(jobs) else high[jobs.tenant] | np.isin(np.arange(len(jobs)), adm.job[aged])
    quantum, job_nodes, job_packed = reservation.largest_jobs(jobs, mine, n)
    # what the hold is rounded up to: a whole node per node a job on several nodes asks (the actuators still size
    # a hold's jobs by `quantum`, their GPUs in all: Plan.hold_job_gpus)
    hold_q = reservation.hold_footprint(quantum, jobs, mine, state.nodes)
    if win is not None and state.nodes is not None and len(state.nodes):
        # a window whose tenant's jobs take whole nodes is cleared whole from its lead time, not spread over the
        # lead (daemon/policy/windows.py): a node cleared in part holds none of its jobs, and the lead is the time
        # the work there that cannot be preempted has to end
        whole = (quantum >= int(np.max(state.nodes.gpus))) & (win[1] > 0)
        for i in np.flatnonzero(whole & (win[1] < win[0])):
            # the window's own note said its drain spread over the lead: it now says all of it, once
            mine = f" held for {tenants[i]}"
            notes[:] = [windows.cleared_whole(n) if n.startswith("window ") and n.endswith(mine) else n
                        for n in notes]
        win = (win[0], np.where(whole, win[0], win[1]), win[2])
    tgt = reservation.targets(peak, view.demand, prev, pc.headroom)
    # the band in whole jobs, since the hold is rounded to them below (a band under one job lets it flap)
    res = reservation.with_hysteresis(tgt, prev, pc.hysteresis, quantum)
    res = np.where(high, res, 0.0)
    res = np.where(aged, used + aged_gpus, res)
    # what must be free by the time a preemption started now has drained: preempting for the rest of
    # the lead time would only lose work for a peak the next forecasts may take back. Jobs are preempted
    # only for jobs (waiting now, or forecast within the drain window), never for the headroom: the
    # headroom is held where it is free, not cleared
    soon = np.minimum(res, reservation.targets(peak_soon, view.demand, prev, 0.0))
    soon = np.where(aged, res, soon)
    if len(jobs):
        res = np.ceil(res / hold_q - 1e-9) * hold_q
        soon = np.ceil(soon / quantum - 1e-9) * quantum
    # an operator's floor: held at least this much, needed now (not only at the forecast peak)
    floor = np.array([ops.floors.get(t, 0) for t in tenants], dtype=float) if ops.floors else np.zeros(n)
    floored = (floor > 0) & ~high
    res = np.maximum(res, floor)
    soon = np.maximum(soon, floor)
    if win is not None:  # a recurring window: held at least its GPUs from its lead time, cleared by its start
        res = np.maximum(res, win[0])
        soon = np.maximum(soon, win[1])
        floored = floored | ((win[0] > 0) & ~high)
    capacity = view.capacity
    pool = reservation.high_pool(capacity, pc.reserve_share)
    # aged jobs are held for first, from everything but the high tier's guarantee (its static pool, or its own
    # hold if smaller), so that under sustained high-tier pressure a peak above the pool does not crowd out
    # work that waited max_wait; admission is bounded (aging.admit), so this costs the high tier at most
    # aging_max_share of the GPUs beyond its guarantee
    # (policy.aging_before_high, default on; off: the high tier is served first and aged jobs get what is left)
    # a window's GPUs are held first, whole: declared, and checked against the capacity when declared
    # (daemon/config/windows.py); the rest (the forecast, aged jobs, floors) is fitted into what they leave
    want, wheld = res, np.zeros(n) if win is None else np.minimum(win[0], res)
    res, room = res - wheld, max(capacity - int(wheld.sum()), 0)
    if pc.aging_before_high:
        aged_room = max(room - min(pool, int(np.where(high, res, 0.0).sum())), 0)
        aged_res = reservation.fit_to_capacity(np.where(aged, res, 0.0), aged, aged_room)
        res = aged_res + reservation.fit_to_capacity(np.where(aged, 0.0, res), high, room - int(aged_res.sum()))
    else:
        res = reservation.fit_to_capacity(res, high, room)
    res = res + wheld.astype(np.int64)
    soon = np.minimum(soon, res)
    # the high tier's holds as one pool (policy.pool_high_tier): one tenant's idle reserve serves another's peak
    pooled = high.copy() if pc.pool_high_tier else np.zeros(n, dtype=bool)
    return _Holds(res, soon, quantum, aged, floored, pooled, pool, model, path, soon_steps, drain_steps, step_min,
                  known=None if win is None else win[1], own=None if win is None else wheld.astype(np.int64),
                  nodes=job_nodes, packed=job_packed, basis=hold_reason.HoldBasis(
                      high, aged, floor, wheld, peak, view.demand, want, pc.quantile, steps, pc.headroom,
                      hold_q if len(jobs) else None))


def _preemptions(state: ClusterState, view: _View, holds: _Holds, ag: aging.Aging, memory: PolicyMemory,
                 cfg: Config, ops: OperatorInputs, clock: float, notes: list[str],
                 typed: fleet.TypedHolds | None = None) -> _Cleared:
    """Clear, just in time, what protected tenants will need and free GPUs cannot cover: within the budget,
    never for a tenant without a fresh reading, never a paused tenant's job, never an exempt one."""
    pc = cfg.policy
    tenants, n, used, capacity = view.tenants, view.n, view.used, view.capacity
    jobs = state.jobs
    protected = view.high | holds.aged | holds.floored
    paused = np.array([t in ops.paused for t in tenants], dtype=bool) if ops.paused else np.zeros(n, dtype=bool)
    # a tenant with no fresh reading is not a tenant using nothing: it drives no preemption
    need_gpus = np.where(protected & view.known, np.maximum(holds.soon - used, 0), 0.0)
    # a window's GPUs are its tenant's own nodes: what it runs in the pool or on unheld nodes is not the window's,
    # so its drain is counted against what the tenant runs on its own nodes (_on_own_nodes)
    win_used = used if holds.known is None else _on_own_nodes(state, n, used)
    if holds.known is not None:
        need_gpus = np.where(protected & view.known & (holds.known > 0),
                             np.maximum(need_gpus, holds.known - win_used), need_gpus)
    # the budget is a token bucket in time (daemon/policy/budget.py): alert-triggered cycles do not multiply it
    avail_gpus, avail_jobs = budget.refill(memory.budget_gpus, memory.budget_jobs, memory.budget_at, clock,
                                           capacity, pc.preempt_budget_share, pc.preempt_budget_jobs,
                                           pc.preempt_budget_window_s)
    budget_gpus, budget_jobs = int(math.floor(avail_gpus + 1e-9)), int(math.floor(avail_jobs + 1e-9))
    # a window's drain has its own budget: the whole jobs it asks to clear now (spread over its lead time by
    # daemon/policy/windows.py); the bucket pays only what is preempted beyond it
    win_gpus = 0
    if holds.known is not None:
        win_need = np.minimum(need_gpus, np.maximum(holds.known - win_used, 0))
        win_gpus = int((np.ceil(win_need / holds.quantum - 1e-9) * holds.quantum).sum())
        budget_gpus, budget_jobs = budget_gpus + win_gpus, budget_jobs + win_gpus
    chosen = np.empty(0, dtype=np.int64)
    cleared_for: list[int] = []  # per chosen job (placement-aware choice): the tenant it is preempted for
    placed_view = state.nodes is not None and len(state.nodes) > 0
    if not placed_view:  # GPU counts only: what a job larger than the whole cluster adds to the need is not cleared
        big = preemption.never_fit(jobs, protected & view.known, capacity)
        if big.size:
            need_gpus = np.maximum(need_gpus - np.bincount(jobs.tenant[big], jobs.gpus[big], minlength=n), 0.0)
            who = ", ".join(f"{tenants[t]}'s {g}-GPU job" for t, g in zip(jobs.tenant[big][:3], jobs.gpus[big][:3]))
            notes.append(f"{plural(big.size, 'waiting protected job')} larger than the whole cluster "
                         f"({plural(capacity, 'GPU')}): {who}{f' and {big.size - 3} more' if big.size > 3 else ''}; "
                         f"{agree(big.size, 'it', 'they')} can never start, so nothing is preempted for "
                         f"{agree(big.size, 'it', 'them')}")
    shortfall = int(need_gpus.sum()) - max(capacity - int(used.sum()) - int(state.draining), 0)
    # a job that started less than preempt_min_runtime_s ago is exempt (Slurm's PreemptExemptTime)
    # and a job started through aging is exempt until it has run aging_min_run_s
    exempt = (jobs.running & (jobs.runtime_s < pc.preempt_min_runtime_s)) | ag.exempt
    cand_jobs, cand_index = (jobs.select(~exempt), np.flatnonzero(~exempt)) if exempt.any() else \
        (jobs, np.arange(len(jobs)))
    need_jobs = np.ceil(need_gpus / holds.quantum - 1e-9).astype(np.int64)
    gate = _gate(state, view, holds, need_gpus, need_jobs, cfg) \
        if holds.path is not None and not ops.paused_all and need_jobs.any() else None
    if ops.paused_all and shortfall >= pc.min_preempt_gpus:
        notes.append(f"preemptions paused by an operator: {plural(shortfall, 'GPU')} not cleared")
    elif typed is not None and state.nodes is not None:
        own_t = None if holds.known is None else _on_own_nodes_typed(state, typed, n)
        chosen = cand_index[_preempt_typed(cand_jobs, state.nodes, typed, holds, need_gpus, protected | paused,
                                           budget_gpus, budget_jobs, pc.min_preempt_gpus, cleared_for, notes, own_t)]
    elif placed_view:
        # placement-aware: preempt only what makes room, on one node (or each it asks), for a protected tenant's job
        refused: list[int] = []
        chosen, unplaced = _choose_placed(cand_jobs, state.nodes, holds, win_used, need_jobs, protected | paused,
                                          budget_gpus, budget_jobs, pc.min_preempt_gpus, cleared_for, gate, refused,
                                          _on_window_nodes(cand_jobs, state.nodes, holds, paused))
        chosen = cand_index[chosen]
        if refused:
            wt = pc.preempt_worth_weight
            notes.append(f"cost-aware preemption: {plural(len(refused), 'forecast job')} of "
                         f"{plural(len(set(refused)), 'tenant')} not cleared for (their demand would use the GPUs "
                         "for less than a preemption loses: the work since the last checkpoint plus the drain"
                         + (f"; demand weighted x{wt:g}, policy.preempt_worth_weight)" if wt != 1 else ")"))
        if unplaced > len(refused):
            left = unplaced - len(refused)
            sizes = holds.quantum[(need_jobs > 0) & protected]
            notes.append(preempt_reason.no_place(left, int(sizes.min()) if sizes.size else 0, pc.preempt_budget_share,
                                                 capacity, pc.preempt_budget_window_s))
    elif shortfall >= pc.min_preempt_gpus:  # no per-node view from this source: GPU counts only
        gated, worth = 0, float("inf")
        if gate is not None:
            # free GPUs go to the waiting jobs first; what is short beyond their share is the forecast's
            now_gpus = int(np.minimum(gate.now_jobs * holds.quantum, need_gpus).sum())
            free = int(need_gpus.sum()) - shortfall
            gated = shortfall - max(now_gpus - free, 0)
            fc_gpus = float(((need_jobs - gate.now_jobs) * holds.quantum).sum())
            worth = float(gate.worth.sum()) / fc_gpus if fc_gpus > 0 else 0.0
        chosen = cand_index[preemption.choose(cand_jobs, shortfall, protected | paused, budget_gpus,
                                              budget_jobs, gated, worth, gate)]
        got = int(jobs.gpus[chosen].sum()) if chosen.size else 0
        if got < shortfall:
            wt = pc.preempt_worth_weight   # the demand itself, unweighted, and the weight the rule applied
            why = (f" (cost-aware preemption: forecast demand worth {worth / wt:.1f} GPU-minutes per GPU cleared"
                   + (f", weighted x{wt:g}" if wt != 1 else "") + ")" if gated else "")
            notes.append(f"preemption budget or candidates short: {got} of {plural(shortfall, 'GPU')} cleared{why}")
    preempts: list[Preemption] = []
    notifs: list[Notification] = []
    if chosen.size:
        # the preempted tenant reads this (notices, Slurm comments, Kubernetes Events in its namespace): it names
        # no other tenant; whom each job made room for is the operator's, in Preemption.for_tenant
        ahead = f"ahead of forecast peak (p{int(pc.quantile * 100)} within {plural(pc.preempt_lead_steps, 'step')})"
        # for what: the forecast only where the need of the tenant each job was cleared for is the forecast's
        # (daemon/policy/preempt_reason.py: per_job); the cluster's free GPUs may cover the GPUs short and a protected
        # job still not fit on one node: the placement-aware choice then clears room on one, and a count of GPUs
        # short (0 or below) would say nothing
        whats = preempt_reason.per_job(need_gpus, state.pending, holds.quantum, view.high, holds.aged, holds.floored,
                                       None if holds.known is None else holds.known - win_used, cleared_for,
                                       protected & view.known, shortfall, ahead, chosen.size)
        idle = jobs.idle[chosen].tolist() if jobs.idle is not None else [False] * chosen.size
        beneficiary = [tenants[i] for i in cleared_for] if len(cleared_for) == chosen.size else [""] * chosen.size
        for jid, ti, g, node, who, was_idle, what in zip(jobs.ids[chosen].tolist(), jobs.tenant[chosen].tolist(),
                                                         jobs.gpus[chosen].tolist(), jobs.node[chosen].tolist(),
                                                         beneficiary, idle, whats):
            t = tenants[ti]
            # a job the health step found idle or hung was taken before busy ones (preemption.choose): it says so
            why = ("low-priority job found idle by the job health check (its GPUs doing no work), so preempted "
                   f"before busy jobs, {what}") if was_idle else f"low-priority job preempted {what}"
            preempts.append(Preemption(str(jid), t, int(g), str(node), why, who))
            notifs.append(Notification(t, "preempted", f"job {jid} preempted and requeued: {why}"))
    spent = float(jobs.gpus[chosen].sum()) if chosen.size else 0.0
    return _Cleared(chosen, tuple(preempts), tuple(notifs), avail_gpus - max(spent - win_gpus, 0.0),
                    avail_jobs - max(float(chosen.size) - win_gpus, 0.0))


def _choose_placed(jobs, nodes, holds: _Holds, used: np.ndarray, need_jobs: np.ndarray, protected: np.ndarray,
                   budget_gpus: int, budget_jobs: int, min_gpus: int, cleared_for: list[int],
                   gate: preemption.Gate | None, refused: list[int],
                   takeable: np.ndarray | None) -> tuple[np.ndarray, int]:
    """preemption.choose_placed: (jobs chosen, jobs left without a place). When a pooled tenant's window is being
    cleared, its own need (the GPUs it asks to have cleared now beyond what its tenant uses, in whole jobs) is
    placed first, apart from the pool (_window_first); then the rest, the tenant's need beyond its window
    included, which may use the pool as before."""
    win_jobs = np.zeros(len(need_jobs), dtype=np.int64)
    if holds.known is not None:
        apart = holds.pooled & (holds.known > 0)
        known = np.asarray(holds.known, dtype=float)
        win_jobs = np.where(apart, np.minimum(need_jobs, np.ceil(np.maximum(known - used, 0) / holds.quantum - 1e-9)),
                            0).astype(np.int64)
    return _window_first(jobs, nodes, win_jobs, need_jobs, holds.quantum.astype(np.int64), protected, budget_gpus,
                         budget_jobs, min_gpus, holds.pooled, cleared_for, gate, refused, takeable, holds.nodes,
                         holds.packed)


def _window_first(jobs, nodes, win_jobs: np.ndarray, need_jobs: np.ndarray, q: np.ndarray, protected: np.ndarray,
                  budget_gpus: int, budget_jobs: int, min_gpus: int, pooled: np.ndarray, cleared_for: list[int],
                  gate: preemption.Gate | None = None, refused: list[int] | None = None,
                  takeable: np.ndarray | None = None, job_nodes: np.ndarray | None = None,
                  job_packed: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """preemption.choose_placed in two passes over one view of the room and one budget: first each window's jobs
    (``win_jobs``, at most ``need_jobs``) on its tenant's own nodes or unheld ones, never the pool's (what is free
    or cleared there goes to whichever pooled tenant starts first: it is not the window's); then the rest of
    ``need_jobs``, which may use the pool. One pass, as before windows, when no window is being cleared. Returns
    (jobs chosen, jobs left without a place); shared by one model (_choose_placed) and each type of a mixed fleet
    (_preempt_typed)."""
    avail = preemption.room(nodes)
    first = np.empty(0, dtype=np.int64)
    left1 = 0
    if win_jobs.any():
        first, _, left1 = preemption.choose_placed(jobs, nodes, win_jobs, q, protected, budget_gpus, budget_jobs,
                                                   min_gpus, pooled=pooled & (win_jobs <= 0),
                                                   cleared_for=cleared_for, takeable=takeable, avail=avail,
                                                   job_nodes=job_nodes, job_packed=job_packed)
        if gate is not None:  # the window's jobs were the first of the tenant's jobs waiting now
            gate = dataclasses.replace(gate, now_jobs=np.maximum(gate.now_jobs - win_jobs, 0))
    rest_jobs, rest_at = jobs, np.arange(len(jobs))
    if first.size:
        keep = np.ones(len(jobs), dtype=bool)
        keep[first] = False
        rest_jobs, rest_at = jobs.select(keep), np.flatnonzero(keep)
        takeable = None if takeable is None else takeable[keep]
    second, _, left2 = preemption.choose_placed(
        rest_jobs, nodes, need_jobs - win_jobs, q, protected, budget_gpus - int(jobs.gpus[first].sum()),
        budget_jobs - int(first.size), min_gpus, pooled=pooled, cleared_for=cleared_for, gate=gate, refused=refused,
        takeable=takeable, avail=avail, job_nodes=job_nodes, job_packed=job_packed)
    return np.concatenate([first, rest_at[second]]).astype(np.int64), left1 + left2


def _on_own_nodes(state: ClusterState, n: int, used: np.ndarray) -> np.ndarray:
    """GPUs each tenant runs on the nodes it holds itself (not the pool's, not unheld ones); `used` where the source
    gives no per-node view."""
    mine = _running_on_own_node(state)
    if mine is None:
        return used
    ten, g, _ = mine
    return np.bincount(ten, weights=g, minlength=n).astype(float)


def _running_on_own_node(state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The running jobs' parts on nodes their own tenant holds (a job on several nodes has a part on each,
    Jobs.parts): each one's tenant, GPUs there and node index; None without a per-node view or jobs. The one test
    behind _on_own_nodes and _on_own_nodes_typed."""
    jobs, nodes = state.jobs, state.nodes
    if nodes is None or not len(nodes) or not len(jobs):
        return None
    run = np.flatnonzero(jobs.running)
    pos, at, g = jobs.parts(nodes, run)
    ten = jobs.tenant[run[pos]]
    own = (at >= 0) & (np.where(at >= 0, np.asarray(nodes.held_by)[np.maximum(at, 0)], -1) == ten)
    return ten[own], g[own], at[own]


def _on_window_nodes(jobs, nodes, holds: _Holds, paused: np.ndarray) -> np.ndarray | None:
    """Per job: low-priority work (of a tenant not paused) on the nodes held for a tenant whose window is being
    cleared. A window's nodes are its tenant's alone from the lead time and drained by the start, whoever's
    preemptible work is there (an aged tenant's too: only a job started through aging is exempt, and those are not
    among the candidates), but the window's own tenant's: that work already runs on the window's GPUs, and
    preempting it cleared them for the same tenant (a low-tier tenant's job preempted "for protected tenants'
    recurring windows", its own). None without windows."""
    if holds.known is None or not (holds.known > 0).any():
        return None
    held = np.asarray(nodes.held_by)
    win_node = (held >= 0) & (holds.known[np.clip(held, 0, holds.known.size - 1)] > 0)
    pos, at, _ = jobs.parts(nodes, np.arange(len(jobs)))   # a job on several nodes: on any of them
    at_ok = np.maximum(at, 0)
    part = (at >= 0) & win_node[at_ok] & (held[at_ok] != jobs.tenant[pos])
    on = np.zeros(len(jobs), dtype=bool)
    on[pos[part]] = True
    return on & (jobs.priority == PRIORITY["low"]) & ~paused[jobs.tenant]


def _preempt_typed(jobs, nodes, typed: fleet.TypedHolds, holds: _Holds, need_gpus: np.ndarray,
                   keep: np.ndarray, budget_gpus: int, budget_jobs: int, min_gpus: int, cleared_for: list[int],
                   notes: list[str], own_t: np.ndarray | None = None) -> np.ndarray:
    """Preemption on a mixed fleet: type by type, room is made only on nodes of a type the protected tenant is
    held on (so only for work that accepts it), by the placement-aware rule (a whole job of the tenant on one
    node of that type; whole nodes for whole-node jobs), within one budget shared by the types. A tenant's need
    on a type is what its hold there is short of what it runs there, bounded by its need in all. The cost-aware
    rule's gate is not applied per type (a mixed fleet preempts for what is held there and needed soon). A
    window's drain on a type is counted against what its tenant runs on its own nodes of that type (``own_t``,
    as _on_own_nodes on one model) and placed first (see the loop)."""
    n, T = typed.hold.shape
    short = np.maximum(typed.hold - typed.used, 0).astype(float)
    total = short.sum(axis=1)
    scale = np.divide(need_gpus, total, out=np.zeros(n), where=total > 0)
    need_t = np.floor(short * np.minimum(scale, 1.0)[:, None] + 1e-9)
    q = holds.quantum
    win_jobs = _window_jobs_typed(typed, holds, own_t, need_gpus > 0)
    out: list[np.ndarray] = []
    unplaced = 0
    wanted = need_t.sum(axis=0) + (0 if win_jobs is None else win_jobs.sum(axis=0))
    for t in np.flatnonzero(wanted > 0).tolist():
        wj = np.zeros(n, dtype=np.int64) if win_jobs is None else win_jobs[:, t]
        need_jobs = np.maximum(np.ceil(need_t[:, t] / q - 1e-9).astype(np.int64), wj)
        if not need_jobs.any() or budget_gpus <= 0 or budget_jobs <= 0:
            unplaced += int(need_jobs.sum())
            continue
        who: list[int] = []
        # the pool's nodes of this type are for the pooled tenants held on this type; a window there is cleared
        # first on its tenant's own nodes or unheld ones, never counting the pool's room as the window's, then the
        # rest of its need may use the pool as before (_window_first, as on one model)
        got, left = _window_first(jobs, typed.nodes_of(nodes, t), wj, need_jobs, q.astype(np.int64), keep,
                                  budget_gpus, budget_jobs, min_gpus, holds.pooled & (typed.hold[:, t] > 0), who,
                                  job_nodes=holds.nodes, job_packed=holds.packed)
        if got.size:
            out.append(got)
            cleared_for.extend(who)
            budget_gpus -= int(jobs.gpus[got].sum())
            budget_jobs -= int(got.size)
        unplaced += left
    if unplaced:
        notes.append(f"{unplaced} protected jobs have no place yet on the types they accept (budget, candidates "
                     "or topology)")
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


def _window_jobs_typed(typed: fleet.TypedHolds, holds: _Holds, own_t: np.ndarray | None, needs: np.ndarray
                       ) -> np.ndarray | None:
    """(tenants x types) whole jobs the windows ask to have cleared now on each type: the drain so far
    (``holds.known``) shared over the window's types as its GPUs are, less what the tenant runs on its own nodes of
    that type (what it runs in the pool is not the window's), for tenants that drive preemption (``needs``: a
    fresh reading, protected); None when no window is being cleared."""
    if typed.window is None or holds.known is None or own_t is None:
        return None
    w = typed.window.astype(float)
    tot = w.sum(axis=1, keepdims=True)
    known_t = np.minimum(w, np.ceil(np.divide(w * holds.known[:, None], tot, out=np.zeros_like(w), where=tot > 0)
                                    - 1e-9))
    jobs = np.ceil(np.maximum(known_t - own_t, 0) / holds.quantum[:, None] - 1e-9).astype(np.int64)
    jobs[~needs] = 0
    return jobs if jobs.any() else None


def _on_own_nodes_typed(state: ClusterState, typed: fleet.TypedHolds, n: int) -> np.ndarray:
    """(tenants x types) GPUs each tenant runs on the nodes it holds itself (_on_own_nodes per GPU type)."""
    out = np.zeros((n, len(typed.types)))
    mine = _running_on_own_node(state)
    if mine is None:
        return out
    ten, g, at = mine
    np.add.at(out, (ten, typed.node_type[at]), g)
    return out


def _gate(state: ClusterState, view: _View, holds: _Holds, need_gpus: np.ndarray, need_jobs: np.ndarray,
          cfg: Config) -> preemption.Gate | None:
    """The cost-aware rule's inputs (daemon/policy/preemption.py): which of each protected tenant's jobs wait now,
    what room for each forecast job beyond them is worth, and the drain and checkpoint interval a preemption's loss
    is counted with.

    Only the high tier's need beyond its waiting jobs is forecast; aged jobs and operators' floors wait now. The
    k-th forecast job of tenant t (size q_t) is forecast to use clip(f_t,s - B_t - k q_t, 0, q_t) GPUs at step s,
    with f_t the forecast at the preemption quantile and B_t the GPUs the tenant uses once its waiting jobs run;
    it is worth the GPU-minutes of that use from the end of the drain for as long as it lasts without a break
    (preemption.worth_gpu_min), provided it arrives before the drain ends. None when no job needing room is a
    forecast one."""
    q = holds.quantum
    pending = np.nan_to_num(state.pending.astype(float), nan=0.0)
    forecast_only = view.high & ~holds.aged & ~holds.floored
    now_gpus = np.where(forecast_only, np.minimum(need_gpus, pending), need_gpus)
    if holds.known is not None:  # what a window asks to clear is known demand, not the forecast's
        now_gpus = np.maximum(now_gpus, np.minimum(need_gpus, np.maximum(holds.known - view.used, 0)))
    now_jobs = np.minimum(np.ceil(now_gpus / q - 1e-9).astype(np.int64), need_jobs)
    fc_jobs = need_jobs - now_jobs
    who = np.flatnonzero(fc_jobs > 0)
    if who.size == 0:  # every job needing room waits now: nothing for the rule to weigh
        return None
    first = np.cumsum(fc_jobs) - fc_jobs                 # where each tenant's forecast jobs start among the rows
    rows = np.repeat(who, fc_jobs[who])
    k = np.arange(rows.size) - first[rows]
    base = view.used[rows] + now_jobs[rows] * q[rows] + k * q[rows]
    excess = np.minimum(np.fmax(holds.path[rows] - base[:, None], 0.0), q[rows][:, None])  # NaN (unknown): 0
    worth = preemption.worth_gpu_min(excess, holds.window, holds.drain_steps, holds.step_min)
    worth = worth * cfg.policy.preempt_worth_weight
    drain_s, ckpt_s = drain_and_checkpoint_s(cfg)
    return preemption.Gate(now_jobs, worth, first, drain_s, ckpt_s)


def _assemble(state: ClusterState, view: _View, holds: _Holds, cleared: _Cleared, notifs: tuple[Notification, ...],
              limits: dict, load: float, mem: PolicyMemory, notes: list[str],
              typed: fleet.TypedHolds | None = None) -> Plan:
    """The plan: holds, the quotas that keep other work out of them, limits, preemptions, and the memory."""
    tenants, high, res = view.tenants, view.high, holds.res
    res_list = res.tolist()
    reserved = {tenants[i]: res_list[i] for i in np.flatnonzero(res > 0)}
    # non-preemptible work outside the high tier may not eat into the high tier's guarantee;
    # low-priority work may still borrow idle GPUs because it can be preempted
    shared_cap = max(view.capacity - max(holds.pool, int(res[high].sum()))
                     - int(res[holds.aged | holds.floored].sum()), 0)
    quotas = {tenants[i]: shared_cap + res_list[i] for i in np.flatnonzero(~high)}
    mem = dataclasses.replace(mem, reservations=reserved)
    return Plan(at=state.at.isoformat(), capacity=view.capacity, load=load, high_pool=holds.pool,
                reservations=reserved, quotas=quotas, limits=limits, preemptions=cleared.preemptions,
                notifications=notifs, stale=False, forecast_model=holds.model, notes=tuple(notes), memory=mem,
                pooled=tuple(tenants[i] for i in np.flatnonzero(holds.pooled)),
                hold_job_gpus={tenants[i]: int(holds.quantum[i]) for i in np.flatnonzero((res > 0) | holds.pooled)},
                demand_capped=dict(state.capped), capacity_dropped=int(state.capacity_dropped),
                held_for=held_for(res, high, holds.aged, holds.floored, holds.own),
                window_holds={} if holds.own is None else
                {tenants[i]: int(holds.own[i]) for i in np.flatnonzero(holds.own > 0)},
                window_holds_by_type={} if typed is None or typed.window is None else
                {tenants[i]: {typed.types[k]: int(typed.window[i, k]) for k in np.flatnonzero(typed.window[i])}
                 for i in np.flatnonzero(typed.window.sum(axis=1) > 0)},
                **(_typed_fields(tenants, typed, high, holds.aged | holds.floored) if typed is not None else {}))


def held_for(res: np.ndarray, high: np.ndarray, aged: np.ndarray, floored: np.ndarray,
             window: np.ndarray | None = None) -> dict[str, int]:
    """The held GPUs split by why they are held (Plan.held_for): the high tier's forecast, recurring windows (the
    GPUs a window holds now, `window`: Plan.window_holds), aged tenants (anti-starvation), operators' floors. The
    console shows it beside the high tier's pool, which the holds exceed whenever the high tier borrows beyond its
    guarantee or other tenants are protected. A window's GPUs are said as the window's, not as the forecast's (a
    high-tier tenant's) nor as a floor (a tenant with a window is protected as a floored one is)."""
    win = np.zeros(len(res)) if window is None else np.minimum(window, res)
    rest = res - win
    is_aged = aged & ~high
    return {"high": int(rest[high].sum()), "window": int(win.sum()), "aged": int(rest[is_aged].sum()),
            "floor": int(rest[floored & ~high & ~is_aged].sum())}


def _typed_fields(tenants: tuple[str, ...], typed: fleet.TypedHolds, high: np.ndarray, other: np.ndarray) -> dict:
    """The plan's per-type fields (empty on a one-model cluster); the shared cap per type as `quotas` is for the
    cluster: a type's GPUs less the high tier's guarantee there (or its holds there, if more) and other holds."""
    by = {tenants[i]: {typed.types[k]: int(typed.hold[i, k]) for k in np.flatnonzero(typed.hold[i])}
          for i in np.flatnonzero(typed.hold.sum(axis=1) > 0)}
    shared = np.maximum(typed.cap - np.maximum(typed.pool, typed.hold[high].sum(axis=0))
                        - typed.hold[other & ~high].sum(axis=0), 0)
    return {"holds_by_type": by, "capacity_by_type": dict(zip(typed.types, typed.cap.tolist())),
            "high_pool_by_type": dict(zip(typed.types, typed.pool.tolist())), "notes_by_type": dict(typed.notes),
            "shared_cap_by_type": dict(zip(typed.types, shared.tolist()))}
