"""The cycle's job-health step: read per-job telemetry, detect, decide, tell and reclaim (docs/health.md).

Runs after the plan is applied, on every replica (the findings, metrics and the console's view are everyone's);
only the acting replica tells tenants and reclaims, through the actuators the cycle holds, which under HA are
fenced (daemon/ha/fencing.py: `notify`, `comment` and `reclaim` each check the lease first, and the Slurm and
Kubernetes actuators check it again before every command). Reclaims spend the preemption budget the plan left
(the cycle passes it in and takes back what is left).

A failed telemetry read is no data: no finding, no warning, no reclaim this cycle (the error is in the view and
`gpuas_health_telemetry_up` is 0).

The operator and the plan bind a reclaim as they bind a preemption: a job's tier is its tenant's effective tier
(an operator's change included, `job_infos`), and `restraints` turns the operator's pauses and floors and a stale
plan (or the safe default) into the reclaim policy's `Restraints` (daemon/health/reclaim.py), which holds the
requeue back.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge

from daemon.actuators.base import ActionReport, CommentsJobs, ReclaimsJobs
from daemon.actuators.slurm.holds import expand_hostlist
from daemon.config import Config
from daemon.health.reclaim import FREE, Decision, HealthMemory, JobInfo, Restraints, assess, hetjob
from daemon.health.types import JobStatus, Telemetry
from daemon.policy import budget
from daemon.policy.state import PRIORITY, ClusterState
from daemon.policy.types import Notification, OperatorInputs, Plan, PolicyMemory
from daemon.sources.base import SourceError
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.health")

ACTUATOR_OF = {"slurm": "slurm", "kubernetes": "kubernetes"}   # a job's scheduler -> the actuator that acts on it


class TelemetryReader(Protocol):
    def read(self, end: float | None = None) -> Telemetry: ...


def job_infos(state: ClusterState | None, cfg: Config, ops: OperatorInputs | None = None) -> dict[str, JobInfo]:
    """What the scheduler says of each job (tenant, tier, GPUs, running, runtime, nodes), keyed by the job id as a
    string: a low-priority job's tier is low, any other's its tenant's effective tier (an operator's change in
    `ops` over the config's, as the plan reads it). Shared by the daemon's health step and the replay
    (daemon/sim/health_replay.py)."""
    if state is None or len(state.jobs) == 0:
        return {}
    tiers = ops.tiers if ops is not None else {}
    j = state.jobs
    out = {}
    for i in range(len(j)):
        tenant = state.tenants[int(j.tenant[i])]
        tier = "low" if int(j.priority[i]) == PRIORITY["low"] else tiers.get(tenant) or cfg.tier_of(tenant)
        # a Slurm job on several nodes has a hostlist ("gn[1-2]"); a pod its one nodeName
        nodes = tuple(expand_hostlist(str(j.node[i]))) if j.node[i] else ()
        out[str(j.ids[i])] = JobInfo(tenant, tier, int(j.gpus[i]), bool(j.running[i]), float(j.runtime_s[i]),
                                     nodes)
    return out


def restraints(ops: OperatorInputs | None, plan: Plan | None, safe_default: bool = False) -> Restraints:
    """What holds every health reclaim back this cycle, from what holds the plan's preemptions back: a stale plan
    or the safe default (no new preemptions while the data cannot be trusted), a cluster-wide pause, and per
    tenant a pause or an operator's floor (docs/console-and-api.md: its jobs are not preempted). Each reason is
    worded to follow "not while" in the message the tenant reads."""
    held = None
    if plan is not None and plan.stale:
        note = f" ({plan.notes[0]})" if plan.notes else ""
        held = f"the safe default is in force{note}" if safe_default else f"the plan is stale{note}"
    elif ops is not None and ops.paused_all:
        held = "an operator has paused preemptions"
    if ops is None:
        return Restraints(held)
    tenants = {t: f"an operator's floor of {plural(n, 'GPU')} protects this tenant"
               for t, n in ops.floors.items() if n > 0}
    tenants.update({t: "an operator has paused this tenant's preemptions" for t in ops.paused})
    return Restraints(held, tenants)


def budget_left(memory: PolicyMemory, now: float, capacity: int, cfg: Config) -> tuple[float, float]:
    """(GPUs, jobs) the plan left of the preemption budget at `now` (the policy's token bucket,
    daemon/policy/budget.py): what the health step's reclaims may spend. The cycle and the replay both call it."""
    pc = cfg.policy
    return budget.refill(memory.budget_gpus, memory.budget_jobs, memory.budget_at, now, capacity,
                         pc.preempt_budget_share, pc.preempt_budget_jobs, pc.preempt_budget_window_s)


def after_reclaims(memory: PolicyMemory, avail: tuple[float, float], left: tuple[float, float],
                   now: float) -> PolicyMemory:
    """The policy's memory with what the reclaims left of the budget (the same memory when they spent none)."""
    if left == avail:
        return memory
    return dataclasses.replace(memory, budget_gpus=left[0], budget_jobs=left[1], budget_at=now)


class HealthMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.idle_gpus = Gauge("gpuas_job_idle_gpus", "GPUs allocated to a job and idle (under "
                               "health.idle_activity_max) for health.idle_warn_minutes or more", ["tenant", "tier"],
                               registry=r)
        self.idle_minutes = Counter("gpuas_idle_gpu_minutes", "GPU-minutes allocated to a job while idle (every "
                                    "sample under health.idle_activity_max; missing samples do not count)",
                                    ["tenant", "tier"], registry=r)
        self.findings = Gauge("gpuas_health_findings", "Jobs with a finding now, by kind (idle, hung, memory_leak, "
                              "gpu_error, app_xid) and tier", ["kind", "tier"], registry=r)
        self.warnings = Counter("gpuas_health_warnings", "Tenants told of a finding", ["kind", "tier"], registry=r)
        self.reclaims = Counter("gpuas_health_reclaims", "Jobs requeued or evicted by the health policy",
                                ["kind", "tier"], registry=r)
        self.jobs = Gauge("gpuas_health_jobs", "Jobs seen in per-job telemetry, by state (ok, no_data, rejected, "
                          "partial)", ["state"], registry=r)
        self.up = Gauge("gpuas_health_telemetry_up", "1 when the last per-job telemetry read succeeded", registry=r)

    def forget(self, tenants: Iterable[str]) -> None:
        """Drop `gpuas_idle_gpu_minutes{tenant, tier}` of tenants gone for `cycle.forget_tenant_after_s`, as the
        daemon's other per-tenant series go then (daemon/service/telemetry.py forget_tenants). The gauges by
        tenant (`gpuas_job_idle_gpus`) are rebuilt each cycle and need nothing."""
        gone = set(tenants)
        labels = {(s.labels["tenant"], s.labels["tier"]) for fam in self.idle_minutes.collect() for s in fam.samples
                  if s.labels.get("tenant") in gone}
        for tenant, tier in labels:
            self.idle_minutes.remove(tenant, tier)


@dataclass
class HealthResult:
    view: dict[str, Any]                 # what the Snapshot carries (JSON-like)
    reports: list[ActionReport] = field(default_factory=list)
    budget_gpus: float = 0.0
    budget_jobs: float = 0.0


class HealthRunner:
    def __init__(self, cfg: Config, telemetry: TelemetryReader, registry: CollectorRegistry,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.telemetry = telemetry
        self.metrics = HealthMetrics(registry)
        self.clock = clock
        self.memory = HealthMemory()
        self._counted_until: float | None = None   # idle GPU-minutes are counted once per sample

    def use_config(self, cfg: Config) -> None:
        """A reload: thresholds, actions and queries apply from the next cycle (the Prometheus connection stays)."""
        self.cfg = cfg
        if hasattr(self.telemetry, "use_config"):
            self.telemetry.use_config(cfg)

    def stop(self) -> None:
        """Health turned off (a reload with ``health.enabled = false``): the gauges no longer show findings that
        nobody checks, and the warnings sent are forgotten, so a job is warned afresh (and requeued a cycle after
        at the earliest) when health is turned on again."""
        self.memory = HealthMemory()
        self._counted_until = None
        for g in (self.metrics.idle_gpus, self.metrics.findings, self.metrics.jobs):
            g.clear()

    # ---- pieces ----------------------------------------------------------------------------------------------
    def _label(self, job: str, fallback: str | None, jobs: dict[str, JobInfo]) -> tuple[str, str]:
        """(tenant, tier) for metrics (operators' only): the scheduler's; a job it does not list counts as tenant
        'unknown'. Never used for the view: there an unlisted job has tenant None (see `run`)."""
        info = jobs.get(job)
        if info is not None:
            return info.tenant, info.tier
        return "unknown", self.cfg.tier_of(fallback) if fallback else "normal"

    def _count_idle_minutes(self, tel: Telemetry, jobs: dict[str, JobInfo]) -> None:
        t = tel.times()
        new = t > self._counted_until if self._counted_until is not None else t == t[-1]
        thr = self.cfg.health.idle_activity_max
        for g in tel.gpus:
            if g.job in tel.rejected:
                continue
            a = g.activity[new]
            n = int(np.count_nonzero(np.isfinite(a) & (a < thr)))
            if n:
                self.metrics.idle_minutes.labels(*self._label(g.job, g.tenant, jobs)).inc(n * tel.step_s / 60.0)
        self._counted_until = float(t[-1])

    def _publish(self, statuses: list[JobStatus], d: Decision, jobs: dict[str, JobInfo]) -> None:
        m = self.metrics
        idle: Tally = Tally()
        for s in statuses:
            if s.state == "ok" and s.idle_gpus:
                idle[self._label(s.job, s.tenant, jobs)] += s.idle_gpus
        m.idle_gpus.clear()
        for (tenant, tier), n in idle.items():
            m.idle_gpus.labels(tenant, tier).set(n)
        m.findings.clear()
        for (kind, tier), n in Tally((o.finding.kind, o.tier or "normal") for o in d.outcomes).items():
            m.findings.labels(kind, tier).set(n)
        m.jobs.clear()
        for state, n in Tally(s.state for s in statuses).items():
            m.jobs.labels(state).set(n)

    # ---- one cycle -------------------------------------------------------------------------------------------
    def run(self, state: ClusterState | None, actuators: list, acting: bool, budget: tuple[float, float],
            log_events: Callable[[str, list[tuple[str, dict]]], None] | None = None,
            ops: OperatorInputs | None = None, held: Restraints = FREE) -> HealthResult:
        """One health step: `ops` are the operator's inputs the cycle's plan read (its tiers name each job's tier),
        `held` what holds reclaims back (`restraints`)."""
        now = self.clock()
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
        try:
            tel = self.telemetry.read()
        except SourceError as exc:
            self.metrics.up.set(0)
            log.error("per-job telemetry unavailable (%s): no health finding, warning or reclaim this cycle", exc)
            return HealthResult({"at": at, "error": str(exc), "outcomes": [], "jobs": [], "idle": []},
                                budget_gpus=budget[0], budget_jobs=budget[1])
        self.metrics.up.set(1)
        jobs = job_infos(state, self.cfg, ops)
        statuses, d = assess(tel, jobs, self.cfg, self.memory, now, *budget, held)
        self._count_idle_minutes(tel, jobs)
        self._publish(statuses, d, jobs)
        reports: list[ActionReport] = []
        if acting:
            self.memory = d.memory   # a standby keeps none: the leader's warnings are the leader's
            reports = self._act(d, actuators)
            for w in d.warnings:
                self.metrics.warnings.labels(w.kind, jobs[w.job].tier).inc()
            for r in d.reclaims:
                named = {r.job, hetjob(r.job) or r.job}   # a hetjob's component is requeued by its job's id
                sent = any(rep.ok and any((a.startswith("scontrol requeue ") or a.startswith("evict "))
                                          and named & set(a.split()) for a in rep.actions) for rep in reports)
                if sent:
                    self.metrics.reclaims.labels(r.kind, r.tier).inc()
            if log_events is not None:   # "finding", not "kind": an event row's kind is the event's
                items = [("health_warning", {"tenant": w.tenant, "job_id": w.job, "finding": w.kind,
                                             "message": w.message}) for w in d.warnings]
                items += [("health_reclaim", {"tenant": r.tenant, "job_id": r.job, "finding": r.kind, "gpus": r.gpus,
                                              "reason": r.reason}) for r in d.reclaims]
                try:
                    log_events(at, items)
                except Exception as exc:  # a failing disk must not stop the cycle
                    log.error("health events not saved: %s", exc)
        # the view: a job the scheduler does not list has tenant None, which no tenant token matches (operators
        # only); the string the metrics use for it ("unknown") could be a tenant's name, None cannot
        idle_rows: Tally = Tally()
        for s in statuses:
            if s.state == "ok" and s.idle_gpus:
                tier = self._label(s.job, s.tenant, jobs)[1]
                idle_rows[(jobs[s.job].tenant if s.job in jobs else None, tier)] += s.idle_gpus
        view = {"at": at, "error": None, "window_minutes": self.cfg.health.window_minutes(),
                "outcomes": [o.to_dict() for o in d.outcomes],
                "jobs": [{"job": s.job, "tenant": jobs[s.job].tenant if s.job in jobs else None,
                          "scheduler": s.scheduler,
                          "gpus": s.gpus, "state": s.state, "why": s.why, "idle_gpus": s.idle_gpus,
                          "busy_share": s.busy_share} for s in statuses],
                "idle": [{"tenant": t, "tier": tier, "idle_gpus": n}
                         for (t, tier), n in sorted(idle_rows.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))]}
        return HealthResult(view, reports, d.budget_gpus, d.budget_jobs)

    def _act(self, d: Decision, actuators: list) -> list[ActionReport]:
        reports: list[ActionReport] = []
        notes = [Notification(w.tenant, f"health_{w.kind}", w.message) for w in d.warnings]
        for act in actuators:
            try:
                if notes:
                    reports.append(act.notify(notes))
                mine = [w for w in d.warnings if ACTUATOR_OF[w.scheduler] == act.name]
                if mine and isinstance(act, CommentsJobs):
                    for w in mine:
                        reports.append(act.comment([w.job], w.message))
                ours = [r for r in d.reclaims if ACTUATOR_OF[r.scheduler] == act.name]
                if ours and isinstance(act, ReclaimsJobs):
                    for r in ours:
                        reports.append(act.reclaim(r.job_ids, r.reason))
            except Exception as exc:  # one broken actuator must not stop the others
                reports.append(ActionReport(act.name, act.dry_run, errors=[f"health: {exc}"]))
        for rep in reports:
            if rep.errors:
                log.error("health: actuator %s: %s", rep.actuator, "; ".join(rep.errors))
        return reports
