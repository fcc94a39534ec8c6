"""What happens to a finding: tell the tenant, and at the action threshold, reclaim by policy. Pure.

Tiers: a low-priority job's tier is ``low``; any other job's is its tenant's (high or normal). Per tier the config
says what happens at the action threshold (``health.idle_actions``, ``health.hung_actions``): ``report`` only,
or ``requeue`` (Slurm requeue; Kubernetes Eviction API with the grace period). Leaks and XIDs are told, never
acted on here (a leak may still finish; a GPU error is the failover's, daemon/failover/).

Limits, as for preemptions: the job must have run ``policy.preempt_min_runtime_s``; each reclaim spends the
preemption budget (the GPUs and jobs the cycle's plan left in its token bucket, daemon/policy/budget.py), and
one the budget cannot pay waits for a later cycle. What stops a preemption stops a reclaim (``Restraints``): the
operator's pauses (cluster-wide or per tenant) and floors, and a plan that is stale or the safe default; the
job's tier is its tenant's effective one, an operator's change included (the caller's ``JobInfo.tier``). Such a
reclaim is ``held`` (the tenant is still told, with why it waits). Nothing acts on a job the scheduler does not
list (a job label that matches no job), on a job not running, on a job whose telemetry was refused, or on a job whose
telemetry does not cover exactly its allocated GPUs on its own nodes (``partial_telemetry``: half of an 8-GPU
job's series missing, or a GPU on a node the job does not run on, is not evidence that the job is idle; the job
is reported to operators and the tenant, never warned nor acted on).

What survives a takeover: the idle and hung minutes are recomputed each cycle from Prometheus' history (nothing
of them is kept in memory), so a new leader reclaims on the same evidence. Which warnings were sent is kept in
``HealthMemory`` in memory only; a new leader may send a warning once more.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Mapping

from daemon.config import Config, Tier
from daemon.health.detect import detect, mins
from daemon.health.types import Finding, JobStatus, Scheduler, Telemetry
from daemon.text import plural

Verdict = Literal["warn", "requeue", "report", "protected", "over_budget", "held", "unknown_job", "not_running",
                  "partial_telemetry"]


@dataclass(frozen=True)
class Restraints:
    """What, beyond the config, holds every reclaim back this cycle: the same inputs that hold the plan's
    preemptions back (daemon/policy/engine.py), handed in as plain data so that a console pause or floor and a
    stale snapshot stop a health requeue exactly as they stop a preemption (the caller builds it:
    daemon/service/health.py `restraints`).

    ``held``: why no job is reclaimed this cycle (the plan is stale or the safe default, every preemption is
    paused), or None. ``tenants``: tenant -> why its jobs are not reclaimed (its preemptions paused, an operator's
    floor). A held reclaim is warned about as usual and acted on at the first cycle nothing holds it."""

    held: str | None = None
    tenants: Mapping[str, str] = field(default_factory=dict)

    def why(self, tenant: str) -> str | None:
        return self.held if self.held is not None else self.tenants.get(tenant)


FREE = Restraints()


@dataclass(frozen=True)
class JobInfo:
    """What the scheduler says of a job this cycle."""

    tenant: str
    tier: Tier            # "low" for a low-priority job, else its tenant's tier
    gpus: int
    running: bool
    runtime_s: float
    nodes: tuple[str, ...] = ()   # the nodes the job runs on (empty: unknown, so no telemetry can be matched)


def coverage_gap(gpus: tuple[str, ...] | list[str], info: JobInfo) -> str | None:
    """Why the telemetry seen for a job ("host:gpu" names) is not exactly the job's allocation, or None when it is.

    The count of distinct GPUs seen must equal the GPUs the scheduler allocated, and every GPU must sit on one of
    the job's nodes: a missing exporter, an unscraped node or a stale/forged job mapping that attaches another
    node's GPU all make the evidence partial, and partial evidence never acts."""
    seen = set(gpus)
    hosts = {g.rsplit(":", 1)[0] for g in seen}
    foreign = sorted(hosts - set(info.nodes))
    if foreign:
        where = ", ".join(info.nodes) if info.nodes else "unknown nodes"
        return (f"telemetry names GPU(s) on {', '.join(foreign)}, not among the job's nodes ({where}): "
                "nothing is done")
    if len(seen) != info.gpus:
        return f"telemetry covers {len(seen)} of the job's {info.gpus} GPU(s): nothing is done"
    return None


@dataclass(frozen=True)
class Outcome:
    """What happens to one finding, and when: shown to the tenant with the evidence."""

    finding: Finding
    tenant: str | None
    tier: Tier | None
    verdict: Verdict
    action: str            # the configured action at the threshold: report | requeue | warn only
    due_in_minutes: float | None   # minutes until the action threshold (0: now; None: no action comes)
    message: str

    def to_dict(self) -> dict:
        return {**self.finding.to_dict(), "tenant": self.tenant, "tier": self.tier, "verdict": self.verdict,
                "action": self.action, "due_in_minutes": self.due_in_minutes, "message": self.message}


@dataclass(frozen=True)
class Reclaim:
    job: str
    scheduler: Scheduler
    tenant: str
    tier: Tier
    kind: str
    gpus: int
    reason: str
    # every job id the reclaim requeues: a Slurm heterogeneous job's components (each due), else the job alone
    jobs: tuple[str, ...] = ()

    @property
    def job_ids(self) -> list[str]:
        return list(self.jobs) or [self.job]


@dataclass(frozen=True)
class Warning_:
    job: str
    scheduler: Scheduler
    tenant: str
    kind: str
    message: str


@dataclass(frozen=True)
class HealthMemory:
    """(job, kind) -> when the tenant was first warned (unix seconds). In memory only (see the module doc)."""

    warned: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    outcomes: list[Outcome]
    warnings: list[Warning_]        # new this cycle: send them
    reclaims: list[Reclaim]         # act on these now
    budget_gpus: float              # budget left after the reclaims
    budget_jobs: float
    memory: HealthMemory


def hetjob(job: str) -> str | None:
    """The Slurm heterogeneous job a component id names ("123" for squeue's "123+1"), else None (a pod's
    "namespace/pod" never holds a '+')."""
    return job.split("+", 1)[0] if "+" in job and "/" not in job else None


def _threshold(kind: str, cfg: Config) -> tuple[float | None, dict[Tier, str] | None]:
    hc = cfg.health
    if kind == "idle":
        return hc.idle_action_minutes, hc.idle_actions
    if kind == "hung":
        return hc.hung_action_minutes, hc.hung_actions
    return None, None


def decide(findings: list[Finding], jobs: dict[str, JobInfo], cfg: Config,
           memory: HealthMemory, now: float, budget_gpus: float, budget_jobs: float,
           restraints: Restraints = FREE) -> Decision:
    """Outcomes for every finding, the warnings to send and the reclaims to make this cycle.

    Findings are taken longest-idle first so the budget goes to the GPUs idle longest; a reclaim `restraints`
    hold back spends none of it."""
    min_run = cfg.policy.preempt_min_runtime_s
    outcomes: list[Outcome] = []
    warnings: list[Warning_] = []
    reclaims: list[Reclaim] = []
    warned = dict(memory.warned)
    reclaimed: set[str] = set()
    # a Slurm heterogeneous job's components ("123+0", "123+1"): a requeue of one is a requeue of all (below)
    components: dict[str, list[str]] = {}
    for jid in sorted(jobs):
        if (het := hetjob(jid)) is not None:
            components.setdefault(het, []).append(jid)
    due_now: list[tuple[int, Finding, JobInfo, str, str]] = []   # (outcome index, finding, info, action, message)
    for f in sorted(findings, key=lambda f: (-f.minutes, f.job, f.kind)):
        info = jobs.get(f.job)
        if info is None:
            # no tenant: the finding's own label (a namespace on Kubernetes) is not a tenant, and a tenant that is
            # *named* like it must not read it; such rows are the operators' (daemon/web/health_view.py)
            outcomes.append(Outcome(f, None, None, "unknown_job", "none", None,
                                    f"{f.summary}; the scheduler lists no job {f.job!r} (a job label that matches "
                                    "no job): nothing is done"))
            continue
        if not info.running:
            outcomes.append(Outcome(f, info.tenant, info.tier, "not_running", "none", None,
                                    f"{f.summary}; the job is not running: nothing is done"))
            continue
        limit, actions = _threshold(f.kind, cfg)
        gap = coverage_gap(f.gpus, info) if limit is not None else None
        if gap is not None:
            # neither warned nor acted on: the numbers are of some of its GPUs only (or of GPUs it does not hold)
            outcomes.append(Outcome(f, info.tenant, info.tier, "partial_telemetry", "none", None,
                                    f"{f.summary}; {gap}"))
            continue
        action = actions[info.tier] if actions is not None else "warn only"
        due = None if limit is None or action == "report" else max(0.0, limit - f.minutes)
        key = (f.job, f.kind)
        first_warning = key not in warned
        if first_warning:
            warned[key] = now
        when = "" if due is None else (" now" if due == 0 else f" in {mins(due)} if it stays so")
        held = restraints.why(info.tenant) if action == "requeue" else None
        plan = {"report": "it is reported only", "warn only": "it is reported only",
                "requeue": f"it will be requeued{when}" if held is None
                else f"it would be requeued{when}, but not while {held}"}[action]
        het = hetjob(f.job) if f.scheduler == "slurm" else None
        if het is not None and action == "requeue" and len(components.get(het, ())) > 1:
            plan += (f" with every component of heterogeneous job {het}, so only once each of them is due to be "
                     "requeued too")
        msg = f"{f.summary}; tier {info.tier}: {plan}"
        if held is not None and due == 0:
            outcomes.append(Outcome(f, info.tenant, info.tier, "held", action, due, msg))
        elif first_warning and action == "requeue" and due == 0:
            # never requeued in the cycle that first tells the tenant (a restart or a takeover sees a job idle
            # past the threshold at once): the warning goes out now, the requeue at the next cycle
            msg = f"{f.summary}; tier {info.tier}: it will be requeued at the next cycle if it stays so"
            outcomes.append(Outcome(f, info.tenant, info.tier, "warn", action, due, msg))
        elif action != "requeue" or due is None or due > 0:
            outcomes.append(Outcome(f, info.tenant, info.tier, "warn" if action == "requeue" else "report",
                                    action, due, msg))
        elif info.runtime_s < min_run:
            outcomes.append(Outcome(f, info.tenant, info.tier, "protected", action, due,
                                    f"{f.summary}; ran {info.runtime_s:.0f} s, under policy.preempt_min_runtime_s "
                                    f"= {min_run:g}: not requeued yet"))
        else:   # due now: the budget, and a hetjob's other components, decide below (in the same order)
            due_now.append((len(outcomes), f, info, action, msg))
            outcomes.append(None)   # type: ignore[arg-type]
        if first_warning:
            warnings.append(Warning_(f.job, f.scheduler, info.tenant, f.kind, msg))
    # A component's requeue requeues its whole heterogeneous job (Slurm refuses one component's; the actuator sends
    # the job's id), each component another job to the health policy, of its own account, tier and GPUs: one is
    # requeued only when every component of its job with GPUs is due now by its own finding and its own tenant's
    # policy, and then the job is one reclaim of all their GPUs. Else an idle low component requeued a busy one
    # beside it, another tenant's where two accounts ran the job, while only the idle one's tenant was told.
    ready = {f.job for _, f, _, _, _ in due_now}
    for at, f, info, action, msg in due_now:
        het = hetjob(f.job) if f.scheduler == "slurm" else None
        group = components.get(het, [f.job]) if het is not None else [f.job]
        # a component with no GPUs has no finding (the policy watches GPUs): it goes with the job, as a plain job's
        # CPUs go with its idle GPUs; waited for, a tenant's idle GPUs beside a CPU component (sbatch ... : -n1) were
        # never requeued
        waiting = [c for c in group if c not in ready and jobs[c].gpus > 0]
        gpus = sum(jobs[c].gpus for c in group)
        if f.job in reclaimed:   # its other finding, or another component, was reclaimed this cycle
            with_ = "" if len(group) == 1 else f" with heterogeneous job {het}"
            outcomes[at] = Outcome(f, info.tenant, info.tier, "requeue" if with_ else "warn", action, 0.0,
                                   f"{f.summary}; tier {info.tier}: requeued now{with_}" if with_ else msg)
        elif waiting:
            outcomes[at] = Outcome(f, info.tenant, info.tier, "held", action, 0.0,
                                   f"{f.summary}; tier {info.tier}: it would be requeued now, but not while "
                                   f"{plural(len(waiting), 'other component')} of heterogeneous job {het} "
                                   f"({', '.join(waiting)}) {'is' if len(waiting) == 1 else 'are'} not due to be "
                                   "requeued: a requeue of one requeues every component")
        elif gpus > budget_gpus or budget_jobs < 1:
            outcomes[at] = Outcome(f, info.tenant, info.tier, "over_budget", action, 0.0,
                                   f"{f.summary}; the preemption budget is spent this cycle: requeued when it refills")
        else:
            budget_gpus -= gpus
            budget_jobs -= 1
            reclaimed.update(group)
            reason = f"health: {f.kind} for {mins(f.minutes)} ({f.summary})"
            if len(group) > 1:
                reason += f"; with every component of heterogeneous job {het} ({', '.join(group)}), each with GPUs due"
            reclaims.append(Reclaim(f.job, f.scheduler, info.tenant, info.tier, f.kind, gpus, reason, tuple(group)))
            with_ = "" if len(group) == 1 else f" with every component of heterogeneous job {het}"
            outcomes[at] = Outcome(f, info.tenant, info.tier, "requeue", action, 0.0,
                                   f"{f.summary}; tier {info.tier}: requeued now{with_}")
    # a warning is remembered while its finding lasts: a job that got busy again, or was requeued, is warned
    # afresh if it goes idle again
    current = {(f.job, f.kind) for f in findings}
    warned = {k: v for k, v in warned.items() if k in current and k[0] not in reclaimed}
    return Decision(outcomes, warnings, reclaims, budget_gpus, budget_jobs, HealthMemory(warned))


def covered(s: JobStatus, jobs: dict[str, JobInfo]) -> JobStatus:
    """A job whose telemetry is not exactly its allocation is `partial` (shown, never acted on)."""
    info = jobs.get(s.job)
    if s.state != "ok" or info is None:
        return s
    gap = coverage_gap(s.names, info)
    return s if gap is None else replace(s, state="partial", why=gap)


def assess(tel: Telemetry, jobs: dict[str, JobInfo], cfg: Config, memory: HealthMemory, now: float,
           budget_gpus: float, budget_jobs: float, restraints: Restraints = FREE) -> tuple[list[JobStatus], Decision]:
    """One health step on one window of telemetry: detect (each job's findings clipped to its current run), mark
    the jobs whose telemetry is not their allocation, and decide (warnings, reclaims within the budget left and
    not held back by `restraints`).

    The one place both the daemon (daemon/service/health.py `HealthRunner.run`) and the replay
    (daemon/sim/health_replay.py) take these decisions, so the replay measures the policy the daemon runs."""
    runtime = {k: v.runtime_s for k, v in jobs.items() if v.running}
    statuses, findings = detect(tel, cfg.health, cfg.cycle.stale_after_s, runtime)
    statuses = [covered(s, jobs) for s in statuses]
    return statuses, decide(findings, jobs, cfg, memory, now, budget_gpus, budget_jobs, restraints)
