"""Slurm: hold capacity with a reservation, preempt by requeue (or suspend), read jobs with squeue, fence nodes.

Tenants map to Slurm accounts (``tenants[].slurm_account``, default: the
tenant's name); a job's priority class comes from its QOS or partition. The
actuator re-checks every job before touching it: only running low-priority
jobs are preempted, whatever the plan says. The plan's reserved GPUs are held as a
whole-node reservation for the protected tiers' accounts (see slurm_holds.py),
applied before any preemption so the GPUs a preemption frees cannot be backfilled
by low-priority work.

Every command that changes something is checked against the fence right before it is sent (``FenceGuard``,
see daemon/ha/fencing.py), and a batch stops at the first refusal.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass

import numpy as np

from daemon.actuators.base import NO_FENCE, ActionReport, FenceGuard, stop_on_fence
from daemon.actuators.slurm import gres
from daemon.actuators.slurm.holds import (
    Node,
    RunningJob,
    SlurmHolds,
    expand_hostlist,
    hold_name,
    parse_nodes,
    parse_reservations,
    pool_hold_name,
)
from daemon.actuators.slurm.windows import SlurmWindows, parse_window_reservations
from daemon.config import SlurmActuatorConfig, TenantConfig, Tier, WindowConfig
from daemon.config.fleet import FleetConfig, accepts_type
from daemon.policy.state import CLOSED, HELD_BY_POOL, PRIORITY, UNHELD, Jobs, Nodes
from daemon.policy.types import Notification, Plan, Preemption
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.actuator.slurm")
COMMENT_TAG = "gpu-autoscaler:"
# the start estimate's own part of the AdminComment (not COMMENT_TAG: a reason written later keeps it, and it
# replaces only its own earlier part): "gpu-autoscaler-eta: p50=2026-01-05T10:20Z p90=2026-01-05T11:05Z
# slurm=2026-01-05T10:40Z", each value a UTC time to the minute or "unknown"; slurm= only when squeue --start has one
ETA_TAG = "gpu-autoscaler-eta:"
ETA_REWRITE_S = 300.0   # an estimate is rewritten when its p50 or p90 moved this much (or became (un)known)
SQUEUE_FMT = "%i|%a|%P|%q|%T|%N|%M|%b|%r|%V|%v|%D|%S|%l"


class SlurmError(Exception):
    pass


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    account: str
    partition: str
    qos: str
    state: str
    nodes: str
    elapsed_s: float
    gpus: int                        # per node (squeue's %b is the GPUs asked per node)
    reason: str
    submitted: float = float("nan")  # epoch seconds (squeue prints the controller's local time)
    reservation: str = ""
    node_count: int = 1              # nodes the job runs on, or asks for while pending
    started: float = float("nan")    # a running job's start (%S; a requeued job that runs again starts anew)
    time_limit_s: float = float("nan")  # %l, its TimeLimit; NaN when UNLIMITED, not set or not read

    @property
    def total_gpus(self) -> int:
        return self.gpus * max(1, self.node_count)


def parse_elapsed(text: str) -> float:
    """squeue %M: [days-][hours:]minutes:seconds."""
    text = text.strip()
    if not text or text in ("INVALID", "NOT_SET"):
        return 0.0
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
    parts = [int(p) for p in text.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return float(days * 86400 + h * 3600 + m * 60 + s)


def parse_time_limit(text: str) -> float:
    """squeue %l: a TimeLimit in %M's form, or NaN when the job has none (UNLIMITED, INFINITE, NOT_SET, N/A, blank).
    Not parse_elapsed: a limit that is not set is no limit, where 0 would say the job ends now."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NOT_SET", "N/A", "INVALID"):
        return float("nan")
    return parse_elapsed(text)


def parse_gpus(tres: str) -> int:
    """'gres:gpu:2', 'gres/gpu:a100:4', 'gpu:8' -> GPU count (0 when none)."""
    total = 0
    for part in tres.split(","):
        m = re.search(r"gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)", part)
        if m:
            total += int(m.group(1))
    return total


def parse_submit(text: str) -> float:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return float("nan")


def admin_comments_of(squeue_json: str) -> dict[str, str]:
    """Job id -> AdminComment, from `squeue --json` (raises ValueError on output that is not its JSON).

    Not from `scontrol show job`: that prints ``Key=value`` text in which the job's name, working directory,
    command and Comment are the user's free text, so a job named ``x AdminComment=...`` reads as an
    AdminComment there (and the daemon would write it back over the admin's). JSON has one field for it.
    Slurm 22.05 ignores filters with --json and lists every job; a job is found under the id squeue's %i
    prints for it (an array task as ``<array job>_<task>``, a het component as ``<het job>+<offset>``) and
    under its own job id."""
    data = json.loads(squeue_json)
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ValueError("no 'jobs' list in squeue --json")
    out: dict[str, str] = {}
    for j in data["jobs"]:
        if not isinstance(j, dict) or j.get("job_id") is None:
            continue
        text = j.get("admin_comment") or ""
        out[str(j["job_id"])] = text
        if j.get("array_task_id") is not None and j.get("array_job_id"):
            out[f"{j['array_job_id']}_{j['array_task_id']}"] = text
        if j.get("het_job_id"):
            out[f"{j['het_job_id']}+{j.get('het_job_offset', 0)}"] = text
    return out


# pending reasons (squeue %r) that more free GPUs do not end (https://slurm.schedmd.com/job_reason_codes.html): a job
# held, waiting for another job, a license or a burst buffer, or stopped by an accounting or partition limit would not
# start on GPUs a preemption freed, so it is not demand now and drives no preemption nor aging. Reasons that free GPUs
# can end (Resources, Priority, ReqNodeNotAvail, Reservation, None, ...) keep the job as demand now; so does BeginTime
# when the job is eligible within BEGIN_SOON_S (a requeued job waits ~2 minutes under BeginTime: it is the same
# demand, and dropping it would drop the wait anti-starvation banked for it), not a job submitted --begin for later.
# %r prints a job's own description where it has one ("job requeued in held state"): any reason saying "held" is held
NOT_WAITING_FOR_GPUS = frozenset({
    "Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "JobHoldMaxRequeue",
    "AccountingPolicy", "AccountNotAllowed", "InvalidAccount", "InvalidQOS", "PartitionDown", "PartitionInactive",
    "PartitionTimeLimit", "PartitionNodeLimit", "PartitionConfig", "JobArrayTaskLimit", "BadConstraints", "Licenses",
    "ReservationDeleted", "DeadLine", "SchedDefer"})
# AssocGrp*, AssocMax*, QOSGrp*, QOSMax*, QOS*Limit, Max*PerAccount, BurstBuffer*
NOT_WAITING_PREFIXES = ("Assoc", "QOS", "Max", "BurstBuffer")
BEGIN_SOON_S = 300.0


def waits_for_gpus(job: "SlurmJob", eligible_at: float | None = None, now: float | None = None) -> bool:
    """A pending job that would start once GPUs are free (see NOT_WAITING_FOR_GPUS); False for any other state.
    ``eligible_at`` (epoch s, squeue's EligibleTime) decides a BeginTime job: demand if it is eligible within
    BEGIN_SOON_S of ``now``; without it, a BeginTime job is not demand."""
    if job.state != "PENDING":
        return False
    reason = job.reason.strip().strip("()")
    if reason == "BeginTime":
        now = time.time() if now is None else now
        return eligible_at is not None and bool(np.isfinite(eligible_at)) and eligible_at <= now + BEGIN_SOON_S
    return (reason not in NOT_WAITING_FOR_GPUS and not reason.startswith(NOT_WAITING_PREFIXES)
            and "held" not in reason.lower())


# node states (sinfo %T, lower case) in which Slurm itself sees a node as failed; a trailing '*' is NOT_RESPONDING
FAILED_NODE_STATES = ("down", "drain", "fail", "not_responding")


def parse_squeue(out: str) -> list[SlurmJob]:
    jobs = []
    for line in out.splitlines():
        f = line.split("|")
        if len(f) < 9:
            continue
        jobs.append(SlurmJob(f[0].strip(), f[1].strip(), f[2].strip(), f[3].strip(), f[4].strip(), f[5].strip(),
                             parse_elapsed(f[6]), parse_gpus(f[7]), f[8].strip(),
                             parse_submit(f[9]) if len(f) > 9 else float("nan"),
                             f[10].strip() if len(f) > 10 and f[10].strip() != "(null)" else "",
                             int(f[11]) if len(f) > 11 and f[11].strip().isdigit() else 1,
                             parse_submit(f[12]) if len(f) > 12 else float("nan"),
                             parse_time_limit(f[13]) if len(f) > 13 else float("nan")))
    return jobs


class SlurmActuator:
    name = "slurm"

    def __init__(self, cfg: SlurmActuatorConfig, tenants: list[TenantConfig], dry_run: bool = True,
                 min_runtime_s: float = 0.0, clock=time.monotonic, fleet: FleetConfig | None = None) -> None:
        self.cfg = cfg
        self.dry_run = dry_run
        self.min_runtime_s = min_runtime_s  # policy.preempt_min_runtime_s, re-checked on the live job
        self.clock = clock
        self._warned: dict[str, tuple[float, str]] = {}  # job id -> (when warned, reason)
        # job id -> (p50, p90) epoch times of the start estimate last written in its AdminComment (show_eta)
        self._eta_written: dict[str, tuple[float | None, float | None]] = {}
        # job id -> (submitted, started, tier) as the last cluster_jobs read it: what decisions were made on
        self._seen: dict[str, tuple[float, float, Tier]] = {}
        # job id -> (reason, entry number): a failed node's jobs whose requeue failed. The failover worker adds
        # while a cycle's retry pass reads and removes, so both hold the lock; the number tells a pass that an
        # entry was added again while it waited on Slurm (it is not the pass's to remove)
        self._requeue_retry: dict[str, tuple[str, int]] = {}
        self._retry_lock = threading.Lock()
        self._retry_seq = itertools.count()
        self.guard: FenceGuard = NO_FENCE
        self.account_of = {t.name: (t.slurm_account or t.name) for t in tenants}
        self.tenant_of = {acct: t for t, acct in self.account_of.items()}
        # a mixed fleet ([fleet] types): GPU types from typed GRES and node features (gres.py); None: one model
        self.resolver = fleet.resolver() if fleet is not None and fleet.typed else None
        self.holds = SlurmHolds(read=self._read, scontrol=self._scontrol, accounts=self.account_of,
                                tier_of={t.name: t.tier for t in tenants}, tiers=cfg.hold_tiers,
                                prefix=cfg.hold_name_prefix, shrink_delay_s=cfg.hold_shrink_delay_s,
                                node_type=self._node_type if self.resolver else None) if cfg.holds else None
        # recurring windows as Slurm's own recurring reservations (windows.py), with the holds' node rule
        self.windows = SlurmWindows(read=self._read, scontrol=self._scontrol, holds=self.holds,
                                    prefix=cfg.window_name_prefix, clock=time.time) if self.holds else None
        self._reported: set[str] = set()
        self.env = dict(os.environ)
        if cfg.slurm_conf is not None:
            self.env["SLURM_CONF"] = str(cfg.slurm_conf)

    def use_fence(self, guard: FenceGuard) -> None:
        """Check `guard` right before each command that changes something (ChecksFence)."""
        self.guard = guard

    def _fence_check(self, args: tuple[str, ...]) -> None:
        """Raises FencingLost when this replica may not send the changing command `args` (never in a dry run)."""
        if not self.dry_run:
            self.guard.check(" ".join(args)[:300])

    # ---- plumbing ---------------------------------------------------------------------------
    def _run(self, *args: str) -> subprocess.CompletedProcess:
        exe = str(self.cfg.bin_dir / args[0])
        try:
            return subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=self.cfg.timeout_s,
                                  env=self.env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{args[0]}: {exc}") from None

    def _read(self, *args: str) -> str:
        r = self._run(*args)
        if r.returncode != 0:
            raise SlurmError(f"{' '.join(args)}: {(r.stderr or r.stdout).strip()}")
        return r.stdout

    def _cmd(self, rep: ActionReport, *args: str) -> bool:
        """One changing command: fenced right before it is sent (FencingLost ends the batch), recorded as an
        action, skipped in dry run, a failure reported per action."""
        self._fence_check(args)
        rep.actions.append(" ".join(args))
        if self.dry_run:
            return True
        try:
            r = self._run(*args)
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return False
        if r.returncode != 0:
            rep.errors.append(f"{' '.join(args)}: {(r.stderr or r.stdout).strip()}")
            return False
        return True

    def _scontrol(self, rep: ActionReport, *args: str) -> bool:
        return self._cmd(rep, "scontrol", *args)

    def priority(self, job: SlurmJob) -> Tier:
        return self.cfg.priority_by_qos.get(job.qos) or self.cfg.priority_by_partition.get(job.partition) or "normal"

    def tenant(self, job: SlurmJob) -> str:
        return self.tenant_of.get(job.account, job.account)

    def jobs(self, job_ids: list[str] | None = None, node: str | None = None,
             states: str | None = None) -> list[SlurmJob]:
        args = ["squeue", "-h", "-o", SQUEUE_FMT]
        if job_ids:
            args += ["-j", ",".join(job_ids)]
        if node:
            args += ["-w", node]
        if states:
            args += ["-t", states]
        r = self._run(*args)
        if r.returncode != 0:
            if job_ids and "Invalid job id" in r.stderr:
                return []
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        return parse_squeue(r.stdout)

    def eligible_times(self) -> dict[str, float]:
        """Job id -> when each pending job became, or becomes, eligible to run (squeue's EligibleTime, the
        controller's local time; NaN where it prints none): a job held, or submitted with --begin, waits for GPUs
        only from then. One squeue call over the pending jobs (-O: squeue -o has no field for it)."""
        out = self._read("squeue", "-h", "-t", "PENDING", "-O", "JobID:0;,EligibleTime:0;")
        got: dict[str, float] = {}
        for line in out.splitlines():
            f = line.split(";")
            if len(f) >= 2 and f[0].strip():
                got[f[0].strip()] = parse_submit(f[1])
        return got

    # ---- GPU types (a mixed fleet) -------------------------------------------------------------
    def _node_type(self, node) -> str:
        assert self.resolver is not None
        return gres.node_type(self.resolver, node.gres, node.features)

    def job_types(self, job_ids: list[str] | None = None) -> dict[str, tuple[str, ...]]:
        """Job id -> the GPU types it accepts, in order of preference (gres.job_accepts), from squeue's
        tres-per-node / -job / -task (--gres or --gpus-per-node, --gpus, --gpus-per-task), Feature (--constraint)
        and Prefer (--prefer; only a pending job has it). One squeue call; ';' ends each field (a constraint holds
        '|' and '&'), and size 0 keeps squeue from cutting a field."""
        assert self.resolver is not None
        args = ["squeue", "-h", "-O", "JobID:0;,tres-per-node:0;,tres-per-job:0;,tres-per-task:0;,Prefer:0;,Feature:0"]
        if job_ids:
            args += ["-j", ",".join(job_ids)]
        r = self._run(*args)
        if r.returncode != 0:
            if job_ids and "Invalid job id" in r.stderr:
                return {}
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        out: dict[str, tuple[str, ...]] = {}
        for line in r.stdout.splitlines():
            f = line.split(";", 5)
            if len(f) < 6 or not f[0].strip():
                continue
            c = ["" if x.strip() in ("(null)", "N/A") else x.strip() for x in f]
            tres = ",".join(x for x in c[1:4] if x)
            out[c[0]] = gres.job_accepts(self.resolver, tres, c[5], c[4])
        self._report_unmatched()
        return out

    def _report_unmatched(self) -> None:
        """Model names no [fleet] type or alias matches: warned once each (they are kept as type unknown)."""
        if self.resolver is None:
            return
        new = self.resolver.unreported(self._reported)
        if new:
            log.warning("GPU types not in [fleet] types/aliases, counted as 'unknown': %s", new)

    @property
    def unknown_types(self) -> list[str]:
        """The model names seen that match no configured type (reported, never dropped)."""
        return sorted(self.resolver.unmatched) if self.resolver is not None else []

    # ---- for the daemon's state ---------------------------------------------------------------
    def cluster_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """Running jobs, and pending ones that wait for GPUs (``waits_for_gpus``: not held, not waiting for a begin
        time, another job or an accounting limit), as the policy's columnar Jobs (unknown tenants are dropped)."""
        index = {t: i for i, t in enumerate(tenants)}
        now = time.time()
        listed = self.jobs()
        eligible = self.eligible_times() if any(j.state == "PENDING" for j in listed) else {}
        rows = [j for j in listed if (j.state == "RUNNING" or waits_for_gpus(j, eligible.get(j.job_id), now))
                and self.tenant(j) in index]
        # what the plan and the health step decide on: each job's identity and tier as read now (_changed)
        self._seen = {j.job_id: (j.submitted, j.started, self.priority(j)) for j in rows}
        run = np.array([j.state == "RUNNING" for j in rows], dtype=bool)
        # a pending job's wait runs from when it became eligible, not from its submission: held, or submitted with
        # --begin, it waited for nothing meanwhile, and counting that time would let it jump the queue by aging
        # (policy/aging.py). Eligible time not set yet (N/A: just released, not yet evaluated), or still ahead (a
        # requeued job): no wait yet. A job squeue -O does not list under the id %i gives (an array's combined
        # pending line): its submission
        since = [j.submitted if j.job_id not in eligible else
                 (np.fmax(j.submitted, eligible[j.job_id]) if np.isfinite(eligible[j.job_id]) else now)
                 for j in rows]
        accepts = None
        if self.resolver is not None:
            types = self.job_types()
            accepts = np.empty(len(rows), dtype=object)
            accepts[:] = [types.get(j.job_id, ()) for j in rows]
        return Jobs(ids=np.array([j.job_id for j in rows], dtype=object),
                    tenant=np.array([index[self.tenant(j)] for j in rows], dtype=np.int64),
                    gpus=np.array([j.total_gpus for j in rows], dtype=np.int64),  # a 2-node job: both nodes' GPUs
                    priority=np.array([PRIORITY[self.priority(j)] for j in rows], dtype=np.int8),
                    running=run, runtime_s=np.array([j.elapsed_s if r else 0.0 for j, r in zip(rows, run)]),
                    # pending time drives anti-starvation; a requeued job's clock restarts at its requeue
                    wait_s=np.array([0.0 if r or not np.isfinite(t) else max(0.0, now - t)
                                     for t, r in zip(since, run)]),
                    node=np.array([j.nodes for j in rows], dtype=object), accepts=accepts,
                    # the start estimate ends a running job by its time limit (policy/eta.py)
                    time_limit_s=np.array([j.time_limit_s for j in rows], dtype=float))

    def cluster_nodes(self, tenants: tuple[str, ...]) -> Nodes:
        """Every node slurmctld knows, as the policy's Nodes (raises SlurmError when slurmctld does not answer).

        - names: ``NodeName`` of ``scontrol -d -o show nodes``, as squeue's %N spells a single-node job's node
          (cluster_jobs' node column). A job on several nodes has a hostlist there, which names no node: the
          policy does not pick it to clear one node, but its GPUs count as used on each of its nodes (below).
        - gpus: the configured GPUs (``Gres=gpu:N``); 0 when the node is DOWN, DRAIN(ING/ED), FAIL,
          NOT_RESPONDING (``*``), powered down, in maintenance or rebooting: it takes no new job.
        - free: configured minus allocated (``GresUsed``, Slurm's own count over every job on the node,
          multi-node jobs included) minus draining.
        - draining: GPUs of COMPLETING jobs on the node (a requeued job is COMPLETING until its processes are
          gone and its epilog has run). Slurm does not say why a job ends, so this is every completing job's
          GPUs, the daemon's preemptions and jobs that ended by themselves alike: all of them are free once they
          drain. Slurm takes a completing job's GPUs out of GresUsed at once (seen on 22.05), so they are not
          counted twice; were they still in GresUsed, free would be under-counted, never over-counted.
        - held_by: the daemon's own active reservations (slurm_holds.py names them): a tenant's hold gives the
          tenant's index into `tenants`, the pool's gives HELD_BY_POOL. Any other active reservation, a hold of
          ours for a tenant not in `tenants`, and an unhealthy node give CLOSED: not a place for any tenant, so
          nothing is preempted there (a drained node's jobs keep running, but nothing new starts there).
        """
        index = {hold_name(self.cfg.hold_name_prefix, t): i for i, t in enumerate(tenants)}
        index[pool_hold_name(self.cfg.hold_name_prefix)] = HELD_BY_POOL
        nodes = parse_nodes(self._read("scontrol", "-d", "-o", "show", "nodes"))
        holder: dict[str, int] = {}
        res_out = self._read("scontrol", "-o", "show", "reservation")
        # an active window's reservation holds its nodes for the window's tenant (windows.py)
        pos = {t: i for i, t in enumerate(tenants)}
        for w in parse_window_reservations(res_out, self.cfg.window_name_prefix):
            owners = {pos.get(self.tenant_of.get(a, ""), CLOSED) for a in w.accounts}
            index[w.name] = owners.pop() if len(owners) == 1 else CLOSED
        for r in parse_reservations(res_out):
            if r.state.upper() != "ACTIVE":
                continue
            who = index.get(r.name, CLOSED)
            for n in r.nodes:  # a node in someone else's reservation too is closed whatever else holds it
                holder[n] = CLOSED if CLOSED in (who, holder.get(n)) else who
        completing: dict[str, int] = {}
        for j in self.jobs(states="COMPLETING"):
            for n in expand_hostlist(j.nodes):
                completing[n] = completing.get(n, 0) + j.gpus
        ok = np.array([n.healthy for n in nodes], dtype=bool)
        gpus = np.array([n.gpus for n in nodes], dtype=np.int64) * ok
        room = np.maximum(gpus - np.array([n.gpus_used for n in nodes], dtype=np.int64), 0)
        draining = np.minimum(np.array([completing.get(n.name, 0) for n in nodes], dtype=np.int64), room)
        held = np.array([holder.get(n.name, UNHELD) for n in nodes], dtype=np.int64)
        types = None
        if self.resolver is not None:  # a mixed fleet: each node's GRES type (gres.py), unknown ones reported
            types = np.array([self._node_type(n) for n in nodes], dtype=object)
            self._report_unmatched()
        return Nodes(names=np.array([n.name for n in nodes], dtype=object), gpus=gpus, free=room - draining,
                     draining=draining, held_by=np.where(ok, held, CLOSED), gpu_type=types)

    def node_names(self) -> set[str]:
        """Every node slurmctld knows, one name each (sinfo -N never prints a range)."""
        r = self._run("sinfo", "-h", "-N", "-o", "%N")
        if r.returncode != 0:
            raise SlurmError(f"sinfo: {r.stderr.strip()}")
        return {line.strip() for line in r.stdout.splitlines() if line.strip()}

    def node_down_confirmed(self, node: str) -> bool | None:
        """Whether slurmctld itself sees `node` as failed (ReportsNodeHealth): DOWN, DRAIN(ED/ING), FAIL(ING) or
        NOT_RESPONDING ('*') is True, any other state False; None when Slurm does not answer or does not know
        the node (then the alert is acted on alone)."""
        try:
            r = self._run("sinfo", "-h", "-N", "-n", node, "-o", "%T")
        except SlurmError as exc:
            log.warning("cannot ask Slurm about node %s: %s", node, exc)
            return None
        states = {line.strip().lower() for line in r.stdout.splitlines() if line.strip()}
        if r.returncode != 0 or not states:
            return None
        return any(st.endswith("*") or any(bad in st for bad in FAILED_NODE_STATES) for st in states)

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        return [(j.job_id, self.tenant(j)) for j in self.jobs(node=node) if j.state in ("RUNNING", "SUSPENDED")]

    def _hold_jobs(self) -> list[RunningJob]:
        return [RunningJob(j.job_id, j.account, tuple(expand_hostlist(j.nodes)), j.gpus, j.reservation,
                           j.state == "RUNNING") for j in self.jobs() if j.state in ("RUNNING", "PENDING", "SUSPENDED")]

    # ---- actuator interface -------------------------------------------------------------------
    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            self._apply(rep, plan)
        return rep

    def _apply(self, rep: ActionReport, plan: Plan) -> None:
        with self._retry_lock:
            retry = dict(self._requeue_retry)
        if retry:
            self._retry_requeues(rep, retry)
        if self.holds is not None:  # first: freed GPUs must already be held when the preemptions free them
            try:
                jobs = self._hold_jobs()
                covered = self._apply_windows(rep, plan, jobs)
                self.holds.apply(plan, rep, jobs, covered)
            except SlurmError as exc:
                rep.errors.append(f"hold: {exc}")
        wanted = {p.job_id: p for p in plan.preemptions}
        if not wanted:
            if self._warned:
                rep.actions.append(f"forget {len(self._warned)} warnings: the plan preempts nothing now")
                self._warned.clear()
            return
        try:
            live = {j.job_id: j for j in self.jobs(sorted(set(wanted) | set(self._warned)))}
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return
        if self.resolver is not None:
            wanted = self._for_a_type_they_take(rep, plan, wanted, live)
        self._preempt_warned(rep, wanted, live, AdminComments(self._run, sorted(live)))

    def _apply_windows(self, rep: ActionReport, plan: Plan, jobs: list[RunningJob]) -> dict[str, int]:
        """The windows' reservations made ahead (windows.py); returns account -> GPUs its active windows' reservations
        hold now, which its hold need not hold again."""
        if self.windows is None:
            return {}
        ws = [WindowConfig.model_validate(w) for w in plan.windows]
        res_out = self._read("scontrol", "-o", "show", "reservation")
        if not ws and not parse_window_reservations(res_out, self.cfg.window_name_prefix):
            return {}
        nodes: list[Node] = parse_nodes(self._read("scontrol", "-d", "-o", "show", "nodes"))
        self.windows.apply(ws, rep, jobs, res_out, nodes)
        return self.windows.active_gpus(self._read("scontrol", "-o", "show", "reservation"), nodes)

    def _for_a_type_they_take(self, rep: ActionReport, plan: Plan, wanted: dict[str, Preemption],
                              live: dict[str, SlurmJob]) -> dict[str, Preemption]:
        """A mixed fleet: only the preemptions that free GPUs of a type the protected tenant can use. What the
        tenant takes: the types the plan holds for it (Plan.holds_by_type) and those its pending jobs accept
        (squeue, gres.job_accepts); a pending job that takes any type, or nothing saying which, lets it be. A
        t4 job is never requeued for a tenant whose jobs all ask for an a100: the freed GPUs would sit idle
        (the job could not start there) while the t4 job's work is lost. Checked on the live node the job runs
        on, not the plan's, whatever the policy decided; an unreadable Slurm skips every typed preemption."""
        protected = {p.for_tenant for p in wanted.values() if p.for_tenant}
        if not protected:
            return wanted
        try:
            node_type = {n.name: self._node_type(n) for n in parse_nodes(self._read("scontrol", "-d", "-o", "show",
                                                                                   "nodes"))}
            pending = [j for j in self.jobs(states="PENDING") if self.tenant(j) in protected]
            if pending:
                eligible = self.eligible_times()
                pending = [j for j in pending if waits_for_gpus(j, eligible.get(j.job_id))]
            accepts = self.job_types([j.job_id for j in pending]) if pending else {}
        except SlurmError as exc:
            rep.errors.append(f"GPU types: {exc}; no preemption for a protected tenant this cycle")
            return {jid: p for jid, p in wanted.items() if not p.for_tenant}
        takes: dict[str, set[str]] = {t: {k for k, v in plan.holds_by_type.get(t, {}).items() if v > 0}
                                      for t in protected}
        anything: set[str] = set()
        for j in pending:
            acc = accepts.get(j.job_id, ())
            if not acc:
                anything.add(self.tenant(j))
            takes[self.tenant(j)].update(acc)
        out: dict[str, Preemption] = {}
        for jid, p in wanted.items():
            job = live.get(jid)
            where = expand_hostlist(job.nodes) if job is not None and job.nodes else expand_hostlist(p.node)
            freed = {node_type.get(n, "") for n in where} - {""}
            t = p.for_tenant
            if not t or t in anything or not takes.get(t) or not freed or any(accepts_type(tuple(takes[t]), f)
                                                                              for f in freed):
                out[jid] = p
                continue
            rep.actions.append(f"skip {jid}: it frees {'/'.join(sorted(freed))} GPUs and {t} takes only "
                               f"{'/'.join(sorted(takes[t]))}")
        return out

    def _preempt_warned(self, rep: ActionReport, wanted: dict[str, Preemption], live: dict[str, SlurmJob],
                        comments: "AdminComments") -> None:
        """Warn first, preempt after the lead: a job the plan names is signalled (warn_signal) and its tenant
        told; once warn_lead_s has passed it is requeued (or suspended). While warned jobs cover the GPUs the
        plan asks for, no new job is warned, so a plan that picks other jobs next cycle does not warn them all."""
        now = self.clock()
        lead = self.cfg.warn_lead_s
        for jid in [j for j in self._warned if j not in live or live[j].state != "RUNNING"]:
            del self._warned[jid]  # finished, cancelled or requeued by someone else
        need = sum(p.gpus for p in wanted.values())
        done = 0
        for jid, (since, reason) in sorted(self._warned.items(), key=lambda kv: kv[1][0]):
            if now - since < lead:
                continue
            if done >= need:
                del self._warned[jid]
                rep.actions.append(f"forget warning of {jid}: the plan needs no more GPUs")
                continue
            if not self._preemptible(rep, live[jid], wanted.get(jid)):
                del self._warned[jid]
            elif self._preempt(rep, live[jid], reason, comments):
                del self._warned[jid]
                done += live[jid].total_gpus
            # else: the requeue failed (reported); it stays warned, so the next cycle retries the requeue
            # instead of signalling the job a second time and waiting out another lead
        cover = done + sum(live[j].total_gpus for j in self._warned)
        for jid, p in wanted.items():
            job = live.get(jid)
            if job is None:
                rep.actions.append(f"skip {jid}: no longer in the queue")
                continue
            if jid in self._warned:
                rep.actions.append(f"wait {jid}: warned {now - self._warned[jid][0]:.0f} s ago, lead {lead:g} s")
                continue
            if not self._preemptible(rep, job, p):
                continue
            if lead <= 0:
                self._preempt(rep, job, p.reason, comments)
            elif cover < need:
                self._warn(rep, job, p.reason)
                cover += job.total_gpus
            else:
                rep.actions.append(f"skip {jid}: jobs already warned cover the {plural(need, 'GPU')} the plan clears")

    def _changed(self, job: SlurmJob) -> str | None:
        """Why the live `job` is not the one the cycle read (cluster_jobs) and decided on, or None when it is (or
        the cycle did not read it): the same id with another submit or start time is another job, or the same
        job requeued and started again since; a QOS or partition that gives another tier changes what may be
        done to it. Checked right before a requeue, so a decision on one job never lands on another."""
        seen = self._seen.get(job.job_id)
        if seen is None:
            return None
        submitted, started, tier = seen

        def same(a: float, b: float) -> bool:
            return a == b or (np.isnan(a) and np.isnan(b))

        if not (same(submitted, job.submitted) and same(started, job.started)):
            return "not the job the cycle read (submitted or started at another time since): left alone"
        if self.priority(job) != tier:
            return f"its tier is {self.priority(job)} now, {tier} when the cycle read it: left alone"
        return None

    def _preemptible(self, rep: ActionReport, job: SlurmJob, p: Preemption | None) -> bool:
        if job.state != "RUNNING":
            rep.actions.append(f"skip {job.job_id}: {job.state.lower()}, not running")  # already done: idempotent
            return False
        if self.priority(job) != "low":
            rep.errors.append(f"refused to preempt {job.job_id}: priority {self.priority(job)} is not preemptible")
            return False
        why = self._changed(job)
        if why is not None:
            rep.actions.append(f"skip {job.job_id}: {why}")
            return False
        if job.elapsed_s < self.min_runtime_s:
            rep.actions.append(f"skip {job.job_id}: ran {job.elapsed_s:.0f} s, under "
                               f"policy.preempt_min_runtime_s = {self.min_runtime_s:g}")
            return False
        return True

    def _warn(self, rep: ActionReport, job: SlurmJob, reason: str) -> None:
        ok = self._cmd(rep, "scancel", f"--signal={self.cfg.warn_signal}", "--batch", job.job_id)
        if not ok:
            return  # reported; the next cycle tries again
        self._warned[job.job_id] = (self.clock(), reason)
        verb = "requeued" if self.cfg.mode == "requeue" else "suspended"
        rep.notifications.append(Notification(
            self.tenant(job), "preempt_warning",
            f"job {job.job_id} will be {verb} in {self.cfg.warn_lead_s:g} s (SIG{self.cfg.warn_signal} sent to its "
            f"batch script: checkpoint now): {reason}"))

    def _preempt(self, rep: ActionReport, job: SlurmJob, reason: str, comments: "AdminComments") -> bool:
        self._annotate(rep, job.job_id, reason, comments)
        return self._scontrol(rep, self.cfg.mode, job.job_id)

    def _annotate(self, rep: ActionReport, jid: str, reason: str, comments: "AdminComments") -> bool:
        """Say why in the job's AdminComment; the user's Comment is never touched. An AdminComment someone
        else wrote is kept, ours is appended (replacing an earlier one of ours). False when slurmctld did not
        answer (then the error is in the report: an unreachable controller never raises out of an act)."""
        ours = f"{COMMENT_TAG} {reason}".replace('"', "'")
        prev = ""
        if not self.dry_run:
            try:
                prev = comments.of(jid)
            except SlurmError as exc:
                rep.errors.append(str(exc))
                return False
        prev = prev.split(COMMENT_TAG)[0].rstrip(" |")
        text = f"{prev} | {ours}" if prev else ours
        return self._scontrol(rep, "update", f"JobId={jid}", f"AdminComment={text[:900]}")

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        """Node failure: every job on the node is requeued, whatever its priority (it is not running anyway).
        When the requeue fails (reported), the jobs are requeued by the next cycle that can."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        with stop_on_fence(rep):  # a refusal stops the batch: no annotation, no requeue after it
            comments = AdminComments(self._run, job_ids)
            for jid in job_ids:
                if not self._annotate(rep, jid, reason, comments) and rep.errors and "timed out" in rep.errors[-1]:
                    break  # slurmctld is not answering: do not wait out a timeout per job before the requeue
            if not self._scontrol(rep, "requeue", ",".join(job_ids)):
                with self._retry_lock:
                    self._requeue_retry.update({j: (reason, next(self._retry_seq)) for j in job_ids})
        return rep

    # ---- job health (daemon/health/, daemon/service/health.py) ----------------------------------------------
    def comment(self, job_ids: list[str], text: str) -> ActionReport:
        """Tell a job's owner in its AdminComment (appended after an admin's, replacing an earlier one of ours;
        the user's Comment is never touched). Each `scontrol update` is fenced."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        with stop_on_fence(rep):
            comments = AdminComments(self._run, job_ids)
            for jid in job_ids:
                self._annotate(rep, jid, text, comments)
        return rep

    def show_eta(self, rows: list[dict], made_at: float) -> ActionReport:
        """Each pending job's start estimate in its AdminComment (ETA_TAG's part, beside anything else there), with
        Slurm's own expected start (squeue %S, set by the backfill scheduler) when it has one. Written only when
        it moved by ETA_REWRITE_S or more since this replica last wrote it: a queue of thousands is not rewritten
        every cycle. Each `scontrol update` is fenced."""
        rep = ActionReport(self.name, self.dry_run)
        if not rows:
            return rep

        def at(s: float | None) -> float | None:
            return None if s is None else made_at + float(s)

        want = {str(r["job_id"]): (at(r.get("p50_s")), at(r.get("p90_s"))) for r in rows}
        changed = [j for j, v in want.items() if _moved(self._eta_written.get(j), v)]
        self._eta_written = {j: v for j, v in self._eta_written.items() if j in want}
        if not changed:
            return rep
        try:
            own = {j.job_id: j.started for j in self.jobs(changed) if j.state == "PENDING"}
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return rep
        with stop_on_fence(rep):
            comments = AdminComments(self._run, changed)
            for jid in changed:
                if jid not in own:
                    continue      # started or gone since the cycle read it
                p50, p90 = want[jid]
                part = f"{ETA_TAG} p50={_utc(p50)} p90={_utc(p90)}"
                if np.isfinite(own[jid]):
                    part += f" slurm={_utc(own[jid])}"
                try:
                    prev = "" if self.dry_run else comments.of(jid)
                except SlurmError as exc:
                    rep.errors.append(str(exc))
                    break
                text = with_eta(prev, part)
                if self._scontrol(rep, "update", f"JobId={jid}", f"AdminComment={text[:900]}"):
                    self._eta_written[jid] = want[jid]
        return rep

    def reclaim(self, job_ids: list[str], reason: str) -> ActionReport:
        """Requeue jobs the health policy found idle or hung: each re-read live first, and only a running job
        past policy.preempt_min_runtime_s, still the job the cycle read in the tier it read (_changed), is
        requeued, its reason in the AdminComment. Nothing is retried: the
        next cycle decides again on fresh telemetry."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        try:
            live = {j.job_id: j for j in self.jobs(job_ids)}
        except SlurmError as exc:
            rep.errors.append(f"reclaim: {exc}")
            return rep
        with stop_on_fence(rep):
            comments = AdminComments(self._run, job_ids)
            for jid in job_ids:
                job = live.get(jid)
                if job is None or job.state != "RUNNING":
                    rep.actions.append(f"skip {jid}: {'gone' if job is None else job.state.lower()}, not running")
                    continue
                if job.elapsed_s < self.min_runtime_s:
                    rep.actions.append(f"skip {jid}: ran {job.elapsed_s:.0f} s, under "
                                       f"policy.preempt_min_runtime_s = {self.min_runtime_s:g}")
                    continue
                why = self._changed(job)
                if why is not None:
                    rep.actions.append(f"skip {jid}: {why}")
                    continue
                self._annotate(rep, jid, reason, comments)
                self._scontrol(rep, "requeue", jid)
        return rep

    def _retry_requeues(self, rep: ActionReport, entries: dict[str, tuple[str, int]]) -> None:
        """Requeue the failed node's jobs an earlier requeue did not move (`entries`: the retry map as this
        pass found it): those still running or suspended on a node that is still down, drained or not
        responding. A job requeued by Slurm itself, finished, or on a node that is healthy again (the failure
        was not one) is dropped. Kept while slurmctld does not answer. Only the entries this pass handled are
        removed: the failover worker may add new ones while the pass waits on Slurm."""
        try:
            live = {j.job_id: j for j in self.jobs(sorted(entries))}
            healthy = {n.name for n in parse_nodes(self._read("scontrol", "-d", "-o", "show", "nodes")) if n.healthy}
        except SlurmError as exc:
            rep.errors.append(f"retry requeue: {exc}")
            return
        todo = sorted(j for j in entries if j in live and live[j].state in ("RUNNING", "SUSPENDED")
                      and not set(expand_hostlist(live[j].nodes)) <= healthy)
        failed: set[str] = set()
        if todo:
            rep.actions.append(f"retry the requeue of {plural(len(todo), 'job')} of a failed node")
            if not self._scontrol(rep, "requeue", ",".join(todo)):
                failed = set(todo)  # kept for the next pass
        with self._retry_lock:
            for j, entry in entries.items():
                if j not in failed and self._requeue_retry.get(j) == entry:
                    del self._requeue_retry[j]

    def release_holds(self) -> ActionReport:
        """Delete this daemon's reservations (jobs in them keep running)."""
        rep = ActionReport(self.name, self.dry_run)
        if self.holds is not None:
            with stop_on_fence(rep):
                try:
                    self.holds.release(rep, self._hold_jobs())
                except SlurmError as exc:
                    rep.errors.append(f"release holds: {exc}")
        return rep

    def fence_node(self, node: str, reason: str) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        if self.cfg.drain_failed_nodes:
            with stop_on_fence(rep):
                self._scontrol(rep, "update", f"NodeName={node}", "State=DRAIN",
                               f"Reason=gpu-autoscaler: {reason}"[:200])
        return rep

    def notify(self, notes: list[Notification]) -> ActionReport:
        # preempted and requeued jobs carry their reason in the job comment (squeue -o %k shows it)
        return ActionReport(self.name, self.dry_run)


def with_eta(comment: str, part: str) -> str:
    """`comment` (an AdminComment, parts joined by " | ") with its estimate part replaced by `part`, placed before
    our reason (COMMENT_TAG's part, which _annotate rewrites with everything after it) so that a reason written
    later keeps it."""
    parts = [p.strip() for p in comment.split("|")]
    keep = [p for p in parts if p and not p.startswith(ETA_TAG)]
    at = next((i for i, p in enumerate(keep) if p.startswith(COMMENT_TAG)), len(keep))
    return " | ".join([*keep[:at], part, *keep[at:]])


def _utc(t: float | None) -> str:
    """An epoch time as the AdminComment's compact UTC minute, or "unknown"."""
    return "unknown" if t is None else time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(t))


def _moved(old: tuple[float | None, float | None] | None, new: tuple[float | None, float | None]) -> bool:
    """Whether an estimate is worth rewriting: never written, a side became known or unknown, or moved
    ETA_REWRITE_S or more."""
    if old is None:
        return True
    for a, b in zip(old, new):
        if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) >= ETA_REWRITE_S):
            return True
    return False


class AdminComments:
    """The AdminComment of a batch's jobs, read once per batch (on first need) with `squeue --json` (see
    admin_comments_of); a failed read is remembered for the batch, so a controller that does not answer is
    not asked again per job. A job Slurm does not list has none."""

    def __init__(self, run, job_ids: list[str]) -> None:
        self.run = run  # run(*args) -> CompletedProcess, raises SlurmError
        self.job_ids = list(job_ids)
        self._known: dict[str, str] | None = None
        self._failed: SlurmError | None = None

    def of(self, job_id: str) -> str:
        if self._failed is not None:
            raise self._failed
        if self._known is None:
            try:
                r = self.run("squeue", "--json", "-j", ",".join(self.job_ids or [job_id]))
                if r.returncode != 0 and "Invalid job id" in r.stderr:
                    self._known = {}  # a Slurm that honours -j with --json: none of them is queued any more
                elif r.returncode != 0:
                    raise SlurmError(f"squeue --json: {(r.stderr or r.stdout).strip()}")
                else:
                    self._known = admin_comments_of(r.stdout)
            except ValueError as exc:
                self._failed = SlurmError(f"squeue --json: unreadable output: {exc}")
                raise self._failed from None
            except SlurmError as exc:
                self._failed = exc
                raise
        return self._known.get(job_id, "")
