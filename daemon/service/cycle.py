"""One cycle: collect -> forecast -> plan -> act, with every failure mode turned into 'keep the last plan'."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from daemon import policy
from daemon.actuators.base import ActionReport, Actuator, ListsQueuedJobs, ShowsEta
from daemon.config import Config
from daemon.forecasting.choose import WithFallback, baseline
from daemon.forecasting.quality import ForecastQuality
from daemon.forecasting.skill import Verdict, acting_set, decide, previous_of, reactive_why, score_quantiles
from daemon.policy.events import plan_events
from daemon.policy.safe import safe_default
from daemon.policy.state import ClusterState
from daemon.policy.types import OperatorInputs, Plan, PolicyMemory
from daemon.service.eta import EtaTracker, with_queued
from daemon.service.telemetry import DaemonMetrics
from daemon.sources.base import Collected, Source, SourceError
from daemon.state.store import StateStore
from daemon.web.backend import HISTORY_STEPS, Snapshot
from forecaster.baselines import Forecaster
from forecaster.calibration import start_pending_refreshes
from forecaster.composite import ServicesComposite
from forecaster.types import Forecast

log = logging.getLogger("gpu_autoscaler.cycle")
DRY_SAID_MAX = 30   # a dry run's new actions said in one log line per actuator and cycle; the rest are counted


IDLE_KINDS = ("idle", "hung")   # health findings whose job's GPUs do no work (docs/health.md)


def with_idle(state: ClusterState, health: dict | None) -> ClusterState:
    """The snapshot with ``Jobs.idle`` set from the last health step's findings, so that a hold takes the GPUs of
    idle (or hung) low-priority jobs before those of busy ones (daemon/policy/preemption.py).

    Only a finding makes a job idle: a job with no telemetry, or refused telemetry, has none and stays busy, and
    a health step that failed (``error``) or did not run marks nothing. Unchanged (``idle`` None) when no running
    job of the snapshot has such a finding, so the plan is then exactly what it is without the health step."""
    if not health or health.get("error") or len(state.jobs) == 0:
        return state
    found = {str(o.get("job")) for o in health.get("outcomes") or () if o.get("kind") in IDLE_KINDS}
    if not found:
        return state
    jobs = state.jobs
    idle = np.asarray(pd.Index(jobs.ids).astype(str).isin(list(found)), dtype=bool) & jobs.running   # hashed
    if not idle.any():
        return state
    return dataclasses.replace(state, jobs=dataclasses.replace(jobs, idle=idle))


def main_fell_back(f) -> bool:
    """Whether the main model (an LSTM behind WithFallback, also behind the services' composite) fell back to its
    baseline this cycle: the fallback metric. The services' own model handing them to the main one (a young
    history, forecaster.services) is said in ``fallback_error`` only: it is the rule until a day of windows."""
    main = f.main if isinstance(f, ServicesComposite) else f
    return isinstance(main, WithFallback) and main.last_error is not None


def fallback_error(f) -> str | None:
    """Why the forecast fell back this cycle (the main model's and the services' reasons), for the API."""
    main = f.main if isinstance(f, ServicesComposite) else f
    errs = [main.last_error if isinstance(main, WithFallback) else None,
            f.last_error if isinstance(f, ServicesComposite) else None]
    return "; ".join(e for e in errs if e) or None


@dataclass
class CycleResult:
    plan: Plan | None
    outcome: str                       # ok | stale | source_error | error
    seconds: float
    acted: bool                        # whether this replica acts (False on a standby: planned or kept, not applied)
    forecast: Forecast | None = None
    collected: Collected | None = None
    reports: list[ActionReport] = field(default_factory=list)
    error: str | None = None


class CycleRunner:
    """Owns the cross-cycle memory; a lock keeps alert-triggered and scheduled cycles from overlapping.

    `cfg` is the daemon's one reference to the config in force (Runtime.cfg and Daemon.cfg read it); only
    `Daemon.use_config` replaces it (through `use_config`, which turns the health step on or off), under `lock`.
    `snapshot` is what the web layer reads (daemon/web/backend.py): replaced whole by `publish` at the end of each
    cycle.
    """

    def __init__(self, cfg: Config, source: Source, forecaster: Forecaster, actuators: list[Actuator],
                 store: StateStore | None = None, metrics: DaemonMetrics | None = None,
                 clock: Callable[[], float] = time.time, *, forecaster_note: str = "",
                 history: pd.DataFrame | None = None) -> None:
        self.cfg = cfg
        self.source = source
        self.forecaster = forecaster
        self.fallback = baseline(cfg)
        self.actuators = actuators
        self.store = store
        self.metrics = metrics or DaemonMetrics()
        q = cfg.forecaster.quality
        self.quality = ForecastQuality(tuple(cfg.forecaster.quantiles), cfg.cycle.horizon_steps, window=q.window,
                                       coverage_min=q.coverage_min, coverage_max=q.coverage_max,
                                       fallback_after_cycles=q.fallback_after_cycles, min_scored=q.min_scored,
                                       registry=self.metrics.registry,
                                       peak_windows={"lead": cfg.policy.lead_time_steps,
                                                     "preempt": cfg.policy.preempt_lead_steps},
                                       peak_min_observed=q.peak_min_observed, act_quantile=cfg.policy.quantile,
                                       headroom=cfg.policy.headroom, skill_window=cfg.policy.skill_gate.window)
        # the skill gate's last decisions (policy.skill_gate; daemon/forecasting/skill.py), beside the scores they
        # come from: both in memory only, so a restart or an HA takeover starts every tenant reactive until
        # min_scored windows are scored again (the safe side)
        self.skill: dict[str, Verdict] = {}
        self.lock = threading.Lock()
        self.memory: PolicyMemory = store.load_memory() if store else PolicyMemory()
        self.last_plan: Plan | None = store.load_plan() if store else None
        self.clock = clock
        # wall-clock time the last good plan was made: its age decides when the safe default takes over
        self.last_good_at: float | None = store.load_plan_made_at() if store and self.last_plan else None
        self.safe_active = False
        self.last_state = None
        self.last_forecast: Forecast | None = None
        # what the forecaster read last cycle; before the first, a rolling history restored from disk (wiring)
        self.last_history: pd.DataFrame | None = history
        self.forecaster_note = forecaster_note  # which forecaster is in use and why (a model reload replaces it)
        self.operator_inputs: Callable[[], OperatorInputs] | None = None  # daemon/state/overrides.py
        self.plan_tiers: dict[str, str] | None = None   # the operators' tiers the plan in force was made with
        self.may_act: Callable[[], bool] | None = None  # the leader lease (daemon/ha/lease.py); None: always
        self.acting = True  # whether the last cycle's plan went to the actuators (False on a standby)
        # where dry-run cycles' shadow records go (daemon/shadow/log.py); None: the state store, if any
        self.shadow_log = None
        self.cycles = 0
        self._dry_said: dict[str, frozenset[str]] = {}   # per actuator, the dry-run actions said last (_say_dry_run)
        self.health = None  # daemon/service/health.py HealthRunner; wiring sets it when health.enabled
        # builds the HealthRunner when a reload turns health on and none was built yet (wiring sets it)
        self.health_factory: Callable[[Config], object] | None = None
        self._health_off = None   # the HealthRunner a reload turned off: its metrics stay registered, it is reused
        self.last_health: dict | None = None   # its last view, published in the Snapshot
        self.last_health_cycle = -1   # the cycle that made last_health: the next plan reads its idle findings
        # start-time estimates of pending jobs (daemon/service/eta.py): made after each good plan, served by the API
        self.eta = EtaTracker(self.metrics.registry, clock,
                              max_wait_s=cfg.policy.max_wait_steps * cfg.cycle.resolution_s,
                              floor_s=cfg.cycle.interval_s, window_min_lead_s=cfg.window_min_lead_s(),
                              drain_s=cfg.preempt_drain_s())
        self.last_eta: dict | None = None
        if self.last_plan is not None:
            log.info("restored last good plan from %s (%d reservations, rate level %d)", self.last_plan.at,
                     len(self.last_plan.reservations), self.memory.rate_level)
            if self.plan_too_old():
                age = self.plan_age_s()
                log.warning("restored plan is %s old (> cycle.max_plan_age_s = %gs): it is not enforced; the safe "
                            "default applies until a fresh plan is made",
                            "of unknown age" if age == float("inf") else f"{age:.0f}s", cfg.cycle.max_plan_age_s)
        self.snapshot: Snapshot
        self.publish()

    def use_config(self, cfg: Config) -> str | None:
        """Swap `cfg` in (the caller holds `lock`: between cycles) and turn the health step on or off when its
        ``health.enabled`` changed: the kill switch a reload gives an operator. Returns a line saying what
        happened to the health step, or None when it did not change."""
        was, self.cfg = self.cfg.health.enabled, cfg
        # the skill gate scores holds as the policy in force makes them
        self.quality.act_quantile, self.quality.headroom = cfg.policy.quantile, cfg.policy.headroom
        # the estimates count windows' holds and the GPUs draining now as the plan does
        self.eta.window_min_lead_s, self.eta.drain_s = cfg.window_min_lead_s(), cfg.preempt_drain_s()
        if cfg.health.enabled == was:
            return None
        if not cfg.health.enabled:
            if self.health is not None:
                self.health.stop()
                self._health_off, self.health = self.health, None
            self.last_health = None   # no findings shown that nobody checks now; the next plan marks no job idle
            return "job health turned off: no finding, warning or reclaim until health.enabled = true"
        if self.health is None and self._health_off is not None:
            self.health, self._health_off = self._health_off, None
            self.health.use_config(cfg)
        elif self.health is None and self.health_factory is not None:
            try:
                self.health = self.health_factory(cfg)
            except Exception as exc:  # the reload itself stands; the line says health did not start
                return f"job health stays off: it could not start ({exc}); restart the daemon to turn it on"
        if self.health is None:
            return "job health stays off: this daemon cannot start it on a reload; restart it to turn health on"
        return "job health turned on: findings from this cycle, reclaims from the cycle after its first warning"

    def plan_age_s(self) -> float:
        """Seconds since the last good plan was made (inf when there is none or its time is unknown)."""
        return float("inf") if self.last_good_at is None else max(0.0, self.clock() - self.last_good_at)

    def plan_too_old(self) -> bool:
        return self.plan_age_s() > self.cfg.cycle.max_plan_age_s

    def _safe_default(self, state, why: str) -> Plan:
        """Static pool only, no preemptions; said in the log (once), the metric and the plan's notes."""
        last = self.last_plan
        if state is not None and state.capacity > 0:
            at, capacity, tenants, tiers = state.at.isoformat(), state.capacity, state.tenants, state.tiers
        else:
            names = tuple(sorted(set(last.limits) if last else {t.name for t in self.cfg.tenants}))
            at = pd.Timestamp(self.clock(), unit="s", tz="UTC").floor("s").isoformat()
            # no snapshot and no plan: the size the config says, if it says one (its default, 1024, describes
            # no cluster: a static pool and quotas sized from it would be a plan the daemon does not have)
            configured = self.cfg.cluster.gpus if "gpus" in self.cfg.cluster.model_fields_set else 0
            capacity = last.capacity if last and last.capacity > 0 else configured
            tenants, tiers = names, tuple(self.cfg.tier_of(t) for t in names)
        age = self.plan_age_s()
        old = "no good plan yet" if last is None else \
            (f"last good plan is {age:.0f}s old" if age != float("inf") else "last good plan of unknown age") \
            + f" (> max {self.cfg.cycle.max_plan_age_s:g}s)"
        plan = safe_default(at, capacity, tenants, tiers, self.memory, self.cfg, f"{why}; {old}")
        if not self.safe_active:
            log.warning("%s", plan.notes[0])
        self.safe_active = True
        self.metrics.safe_default.set(1)
        return plan

    def _check_acting(self) -> bool:
        """Whether this replica acts now (the leader lease; always without HA), kept in ``acting`` and the metric."""
        self.acting = self.may_act is None or self.may_act()
        self.metrics.leader.set(1 if self.acting else 0)
        return self.acting

    def _record_shadow(self, plan: Plan, state, fc: Forecast | None, history: pd.DataFrame | None) -> None:
        """Actuators in dry run: what this cycle would have done, in the state store for the shadow report
        (daemon/shadow). Only the acting replica records (a standby's plan is not the one that stands); a failed
        write never stops the cycle."""
        if (self.shadow_log is None and self.store is None) or not self.acting or not self.cfg.actuators.dry_run \
                or plan.stale or not self.cfg.state.shadow_records:
            return
        try:
            from daemon.shadow.record import make_record

            rec = make_record(plan, state, fc, history, self.cfg, self.cycles)
            # the lease again, right before the write: a replica deposed since the cycle began (paused, then woken
            # after a takeover) must not add a second record for the period (the report would count it twice);
            # the Redis log also checks the fencing token in the same step as the append
            if self.may_act is not None and not self.may_act():
                log.info("shadow record not written: this replica no longer holds the leader lease")
                return
            if self.shadow_log is not None:
                if not self.shadow_log.append(rec):
                    log.info("shadow record not written: the fencing token is no longer the lease's")
            else:
                self.store.save_shadow(rec)
        except Exception as exc:  # a full disk or a Redis blip: the cycle goes on, the record is lost (counted)
            self.metrics.state_write_errors.inc()
            log.warning("shadow record not saved: %s", exc)

    def _observe_dra(self) -> None:
        """The DRA GPUs a Kubernetes actuator's view read in this cycle's collect (dra.py), exported: the
        one whose pods the source read (beside Kueue, the Kueue actuator's), absent where none read them."""
        from daemon.actuators.k8s.dra import DraGpus

        d = next((x for x in (getattr(a, "dra", None) for a in self.actuators) if isinstance(x, DraGpus)), None)
        if d is not None:
            self.metrics.observe_dra(sum(sum(t.values()) for t in d.supply.values()), sum(d.used.values()),
                                     sum(d.pending.values()), len(d.uncounted))
        elif any(getattr(a, "name", None) in ("kubernetes", "kueue") for a in self.actuators):
            self.metrics.observe_dra(None)

    def _apply(self, plan: Plan) -> list[ActionReport]:
        m = self.metrics
        reports: list[ActionReport] = []
        if not self._check_acting():  # a standby plans (and stays warm) but never acts
            return reports
        if plan.safe_default and not plan.capacity:  # the cluster's size unknown (no snapshot, no plan): nothing
            return reports                            # sized from it reaches an actuator (a zero quota blocks all)
        notes = list(plan.notifications)
        for act in self.actuators:
            try:
                rep = act.apply(plan)
            except Exception as exc:  # one broken actuator must not stop the others
                rep = ActionReport(act.name, act.dry_run, errors=[str(exc)])
            if notes:  # what notify did (or why it failed) joins the apply's report, never replaces it
                try:
                    told = act.notify(notes)
                    extra, errs = told.actions, [f"notify: {e}" for e in told.errors]
                except Exception as exc:
                    extra, errs = [], [f"notify: {exc}"]
                rep = dataclasses.replace(rep, actions=rep.actions + extra, errors=rep.errors + errs)
            if rep.errors:
                m.actuator_errors.labels(rep.actuator).inc(len(rep.errors))
                # one line, whatever the errors quote (squeue's stderr is several "squeue: error: ..." lines)
                log.error("actuator %s: %s", rep.actuator, "; ".join(" ".join(e.split()) for e in rep.errors))
            self._say_dry_run(rep)
            if rep.not_freed:
                m.not_freed.labels(rep.actuator).inc(len(rep.not_freed))
                log.warning("actuator %s: %d eviction(s) refused, their GPUs not freed: %s", rep.actuator,
                            len(rep.not_freed), ", ".join(rep.not_freed))
            reports.append(rep)
        # what an actuator itself tells tenants (a Slurm preemption warning) goes out on every channel
        told = [n for r in reports for n in r.notifications]
        if told:
            for act in self.actuators:
                try:
                    act.notify(told)
                except Exception as exc:
                    log.error("actuator %s: notify: %s", act.name, exc)
        return reports

    def _say_dry_run(self, rep: ActionReport) -> None:
        """In a dry run, what an actuator would have done and did not do last cycle, in one log line: the node holds,
        the Kueue objects, the evictions, the Events and PriorityClasses (the log actuator's own decisions are its
        lines). "Flip dry_run once the logged decisions look right" needs them logged, and a dry run's report was
        dropped; each action is said when it first appears, not every cycle it stays the same."""
        if not rep.dry_run or rep.actuator == "log":
            return
        said = self._dry_said.get(rep.actuator, frozenset())
        new = list(dict.fromkeys(a for a in rep.actions if a not in said))
        self._dry_said[rep.actuator] = frozenset(rep.actions)
        if new:
            more = f"; and {len(new) - DRY_SAID_MAX} more" if len(new) > DRY_SAID_MAX else ""
            log.info("dry run: %s would: %s%s", rep.actuator, "; ".join(new[:DRY_SAID_MAX]), more)

    def _health(self, state, plan: Plan, ops: OperatorInputs | None) -> list[ActionReport]:
        """Job health after the plan (daemon/service/health.py): its reclaims spend what the plan left of the
        preemption budget, and what they leave goes back into the policy's memory. The operator's inputs the plan
        read bind them too (effective tiers, pauses, floors), and a stale plan or the safe default holds them
        back as it holds preemptions back (`restraints`)."""
        if self.health is None:
            return []
        from daemon.service.health import after_reclaims, budget_left, restraints

        if self.health.cfg is not self.cfg:   # a reload replaced the config between cycles
            self.health.use_config(self.cfg)
        now = self.clock()
        avail = budget_left(self.memory, now, state.capacity, self.cfg)
        try:
            res = self.health.run(state, self.actuators, self.acting, avail,
                                  self.store.log_events if self.store is not None else None,
                                  ops, restraints(ops, plan, self.safe_active))
        except Exception:  # health must never stop the cycle
            log.exception("job health step failed")
            return []
        self.last_health = res.view
        self.last_health_cycle = self.cycles
        if self.acting:
            self.memory = after_reclaims(self.memory, avail, (res.budget_gpus, res.budget_jobs), now)
        return res.reports

    def _forecast(self, history: pd.DataFrame) -> tuple[Forecast | None, bool]:
        h = self.cfg.cycle.horizon_steps
        try:
            fc = self.forecaster.predict(history, h)
            return fc, main_fell_back(self.forecaster)
        except Exception as exc:
            log.warning("forecast failed (%s); using %s", exc, self.fallback.name)
            try:
                return self.fallback.predict(history, h), True
            except Exception as exc2:
                log.error("baseline forecast failed too (%s): planning on current demand only", exc2)
                return None, True

    def _score_at(self, state) -> None:
        """The configured inference services of this cycle's tiers that the skill gate scores at their tier's
        policy.skill_gate.service_quantile (a shortfall there refuses requests); the others at policy.quantile."""
        from daemon.forecasting.services import service_tenants

        svc = set(service_tenants(self.cfg))
        pairs = list(zip(state.tenants, state.tiers))
        self.quality.score_quantile = score_quantiles(
            ((t, tier) for t, tier in pairs if t in svc), self.cfg.policy.skill_gate,
            ((t, tier) for t, tier in pairs if t not in svc))

    def _score_forecasts(self, fc: Forecast | None, history: pd.DataFrame) -> None:
        """Live quality (daemon/forecasting/quality.py); when it stays degraded, the best baseline takes over."""
        try:
            self.quality.observe(fc, history)
        except Exception:  # scoring must never stop the cycle
            log.exception("live forecast scoring failed")
            return
        why = self.quality.fallback_due()
        if why:
            from forecaster.selection import StartupSelection

            log.warning("live forecast quality degraded: %s; %s is replaced by the best baseline on the current "
                        "history until the model is reloaded", why, self.forecaster.name)
            from daemon.forecasting.services import service_tenants, with_services

            # the services keep their own model on their windows (forecaster.services): only the main one is replaced
            self.forecaster, _ = with_services(
                self.cfg, StartupSelection(self.cfg.forecaster.season_steps, tuple(self.cfg.forecaster.quantiles)),
                service_tenants(self.cfg), background=True)
            self.quality.reset()

    def _skill_gate(self, tenants) -> frozenset[str] | None:
        """The tenants this plan acts on the forecast for (None: all, the gate being off), from the live scores; on a
        mixed fleet the typed series (``tenant@spec``) acting, each decided alone (skill.acting_set)."""
        gate = self.cfg.policy.skill_gate
        if not gate.enabled:
            self.skill = {}
            return None
        try:
            self.skill = decide(self.quality.skill(), tenants, previous_of(self.skill), gate,
                                self.quality.score_quantile, self.cfg.policy.quantile)
        except Exception:  # never stops the cycle: every tenant is planned reactively
            log.exception("skill gate failed: every tenant planned reactively this cycle")
            self.skill = {t: Verdict(False, "reactive: the skill gate failed (see the log)") for t in tenants}
        return acting_set(self.skill)

    def _estimate(self, state, plan: Plan, fc: Forecast | None) -> list[ActionReport]:
        """The pending jobs' start estimates for this plan, shown by the actuators that can (the Slurm job's
        AdminComment) when this replica acts. What goes wrong here is logged and shows as no fresh estimate (its
        age grows); it never stops the cycle that already acted. Pending jobs with no pod yet (Kueue's Workloads
        that wait) are read from the actuators that know them and estimated too; when that read fails, no estimate
        is made this cycle (one without that queue would be too soon for everyone behind it)."""
        starts: dict[str, float] = {}
        try:
            queued = []
            for a in self.actuators:
                if isinstance(a, ListsQueuedJobs):
                    queued.append(a.queued_jobs(state.tenants))
                    starts.update(a.queued_starts())
        except Exception as exc:   # noqa: BLE001 - an API that does not answer: said in one line, no estimate
            log.warning("start-time estimates not made this cycle: the queued jobs could not be read (%s: %s)",
                        type(exc).__name__, exc)
            return []
        try:
            self.last_eta = view = self.eta.update(with_queued(state, queued), plan, fc, started=starts)
        except Exception:   # noqa: BLE001 - an estimate is advice: the cycle goes on without it
            log.exception("start-time estimates not made this cycle")
            return []
        if not self.acting:
            return []
        return [a.show_eta(view["jobs"], view["made_at"]) for a in self.actuators if isinstance(a, ShowsEta)]

    def publish(self) -> None:
        """Make what the last cycle left the web layer's read model: one new Snapshot, one reference assignment.

        Called at the end of every cycle that ran to its end (and once at start), under the cycle's lock, so a
        reader sees either the whole of one cycle or the whole of the one before; a cycle that crashed
        publishes nothing and the last snapshot stays.
        """
        q = self.quality
        f = self.forecaster
        hist = self.last_history
        self.snapshot = Snapshot(
            cfg=self.cfg, plan=self.last_plan, state=self.last_state, forecast=self.last_forecast,
            # a copy: the rolling history's frame is a view whose overlap rows the next cycle refreshes
            history=hist.iloc[-HISTORY_STEPS:].copy() if hist is not None else None,
            quality=q.current().to_dict(), quality_summary=q.summary(), forecaster_note=self.forecaster_note,
            fallback_error=fallback_error(f), cycle=self.cycles,
            health=self.last_health, eta=self.last_eta, plan_tiers=self.plan_tiers)

    def run_once(self) -> CycleResult:
        try:
            with self.lock:
                res = self._run()
                self.publish()
                return res
        finally:
            # a spread refresh the forecast found due starts now, in the time between cycles, not inside this
            # cycle's forecast, plan and act (it only starts a thread: the next cycle never waits for it)
            start_pending_refreshes()

    def _run(self) -> CycleResult:
        t0 = time.perf_counter()
        m = self.metrics
        self.cycles += 1
        try:
            collected = self.source.collect(self.cfg.cycle.history_steps)
        except SourceError as exc:
            m.source_up.set(0)
            m.plan_stale.set(1)
            m.cycles.labels("source_error").inc()
            if self.plan_too_old():
                log.error("source unavailable: %s", exc)
                plan = self._safe_default(None, "source unavailable")
                reports = self._apply(plan)
                return CycleResult(plan, "source_error", time.perf_counter() - t0, self.acting, reports=reports,
                                   error=str(exc))
            held = f"keeping last good plan from {self.last_plan.at}" if self.last_plan else "no plan yet"
            log.error("source unavailable: %s; %s, no new preemptions", exc, held)
            # nothing is applied this cycle; whether this replica is the one whose plan stands is still asked
            return CycleResult(self.last_plan, "source_error", time.perf_counter() - t0, self._check_acting(),
                               error=str(exc))
        m.source_up.set(1)
        state = collected.state
        self.last_state = state
        m.staleness.set(state.staleness_s)
        self._observe_dra()
        fc, fell_back = self._forecast(collected.history)
        self.last_forecast, self.last_history = fc, collected.history
        self._score_at(state)
        self._score_forecasts(fc, collected.history)
        fell_back = fell_back or self.quality.fallback
        ops = self.operator_inputs() if self.operator_inputs is not None else None
        # the preemption budget runs on wall-clock time; the embedded simulator's clock is its own (simulated)
        now = None if self.cfg.source.kind == "simulator" else self.clock()
        # the health step runs after the plan: this plan reads the findings of the cycle before (none older)
        health = self.last_health if self.last_health_cycle == self.cycles - 1 else None
        acting = self._skill_gate(state.tenants)
        plan = policy.plan(fc, with_idle(state, health), self.memory, self.cfg, self.last_plan, ops, now=now,
                           acting=acting)
        if self.skill:
            plan = dataclasses.replace(plan, forecast_acting={t: v.to_dict() for t, v in self.skill.items()},
                                       notes=reactive_why(plan.notes, self.skill,
                                                          self.cfg.policy.skill_gate.min_scored))
        if plan.stale and self.plan_too_old():
            plan = self._safe_default(state, "stale data")
        elif plan.stale:
            log.warning("%s", "; ".join(plan.notes))
        reports = self._apply(plan)
        # the tiers the plan was made with: a tenant an operator moved to high is counted with the high tier
        self._record_shadow(plan, state.with_tiers(ops.tiers if ops else {}), fc, collected.history)
        outcome = "stale" if plan.stale else "ok"
        if not plan.stale:
            previous = self.last_plan
            self.memory = plan.memory
            self.last_plan = plan
            self.plan_tiers = dict(ops.tiers) if ops is not None else {}
            self.last_good_at = self.clock()
            if self.safe_active:
                log.warning("fresh plan made: safe default lifted")
            self.safe_active = False
            m.safe_default.set(0)
            if self.store is not None:
                try:
                    self.store.save_cycle(plan, fc.model if fc else "none", self.last_good_at)
                    self.store.log_events(plan.at, plan_events(previous, plan))
                except sqlite3.Error as exc:  # a full or failing disk must not stop the loop
                    m.state_write_errors.inc()
                    log.error("state not saved (%s): the plan is applied and kept in memory; the last saved plan "
                              "stays on disk", exc)
            m.last_good.set(pd.Timestamp(plan.at).timestamp())
            reports += self._estimate(state, plan, fc)
        reports += self._health(state, plan, ops)
        gone = m.observe_plan(plan, fc, self.cfg.policy.lead_time_steps, fell_back,
                              self.cfg.cycle.forget_tenant_after_s)
        if gone:  # their series outside DaemonMetrics go with the rest: forecast quality, job health
            self.quality.forget(gone)
            if self.health is not None:
                self.health.metrics.forget(gone)
        dt = time.perf_counter() - t0
        m.cycle_seconds.observe(dt)
        m.cycles.labels(outcome).inc()
        return CycleResult(plan, outcome, dt, self.acting, fc, collected, reports)
