"""Slurm: hold capacity with a reservation, preempt by requeue (or suspend), read jobs with squeue, fence nodes.

Tenants map to Slurm accounts (``tenants[].slurm_account``, default: the
tenant's name); a job's priority class comes from its QOS or partition. The
actuator re-checks every job before touching it: only running low-priority
jobs are preempted, whatever the plan says. The plan's reserved GPUs are held as a
whole-node reservation for the protected tiers' accounts (see slurm_holds.py),
applied before any preemption so the GPUs a preemption frees cannot be backfilled
by low-priority work.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass

import numpy as np

from daemon.actuators.base import ActionReport
from daemon.actuators.slurm_holds import RunningJob, SlurmHolds, expand_hostlist
from daemon.cluster import PRIORITY, Jobs
from daemon.config import SlurmActuatorConfig, TenantConfig, Tier
from daemon.policy.types import Notification, Plan

log = logging.getLogger("gpu_autoscaler.actuator.slurm")
SQUEUE_FMT = "%i|%a|%P|%q|%T|%N|%M|%b|%r|%V|%v"


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
    gpus: int
    reason: str
    submitted: float = float("nan")  # epoch seconds (squeue prints the controller's local time)
    reservation: str = ""


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


def parse_squeue(out: str) -> list[SlurmJob]:
    jobs = []
    for line in out.splitlines():
        f = line.split("|")
        if len(f) < 9:
            continue
        jobs.append(SlurmJob(f[0].strip(), f[1].strip(), f[2].strip(), f[3].strip(), f[4].strip(), f[5].strip(),
                             parse_elapsed(f[6]), parse_gpus(f[7]), f[8].strip(),
                             parse_submit(f[9]) if len(f) > 9 else float("nan"),
                             f[10].strip() if len(f) > 10 and f[10].strip() != "(null)" else ""))
    return jobs


class SlurmActuator:
    name = "slurm"

    def __init__(self, cfg: SlurmActuatorConfig, tenants: list[TenantConfig], dry_run: bool = True) -> None:
        self.cfg = cfg
        self.dry_run = dry_run
        self.account_of = {t.name: (t.slurm_account or t.name) for t in tenants}
        self.tenant_of = {acct: t for t, acct in self.account_of.items()}
        self.holds = SlurmHolds(read=self._read, scontrol=self._scontrol, accounts=self.account_of,
                                tier_of={t.name: t.tier for t in tenants}, tiers=cfg.hold_tiers,
                                prefix=cfg.hold_name_prefix, shrink_delay_s=cfg.hold_shrink_delay_s) if cfg.holds else None
        self.env = dict(os.environ)
        if cfg.slurm_conf is not None:
            self.env["SLURM_CONF"] = str(cfg.slurm_conf)

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

    def _scontrol(self, rep: ActionReport, *args: str) -> bool:
        rep.actions.append("scontrol " + " ".join(args))
        if self.dry_run:
            return True
        try:
            r = self._run("scontrol", *args)
        except SlurmError as exc:  # slurmctld down or hung: say so in the report, never raise out of an act
            rep.errors.append(str(exc))
            return False
        if r.returncode != 0:
            rep.errors.append(f"scontrol {' '.join(args)}: {(r.stderr or r.stdout).strip()}")
            return False
        return True

    def priority(self, job: SlurmJob) -> Tier:
        return self.cfg.priority_by_qos.get(job.qos) or self.cfg.priority_by_partition.get(job.partition) or "normal"

    def tenant(self, job: SlurmJob) -> str:
        return self.tenant_of.get(job.account, job.account)

    def jobs(self, job_ids: list[str] | None = None, node: str | None = None) -> list[SlurmJob]:
        args = ["squeue", "-h", "-o", SQUEUE_FMT]
        if job_ids:
            args += ["-j", ",".join(job_ids)]
        if node:
            args += ["-w", node]
        r = self._run(*args)
        if r.returncode != 0:
            if job_ids and "Invalid job id" in r.stderr:
                return []
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        return parse_squeue(r.stdout)

    # ---- for the daemon's state ---------------------------------------------------------------
    def cluster_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """All pending and running jobs as the policy's columnar Jobs (unknown tenants are dropped)."""
        index = {t: i for i, t in enumerate(tenants)}
        now = time.time()
        rows = [j for j in self.jobs() if j.state in ("RUNNING", "PENDING") and self.tenant(j) in index]
        run = np.array([j.state == "RUNNING" for j in rows], dtype=bool)
        return Jobs(ids=np.array([j.job_id for j in rows], dtype=object),
                    tenant=np.array([index[self.tenant(j)] for j in rows], dtype=np.int64),
                    gpus=np.array([j.gpus for j in rows], dtype=np.int64),
                    priority=np.array([PRIORITY[self.priority(j)] for j in rows], dtype=np.int8),
                    running=run, runtime_s=np.array([j.elapsed_s if r else 0.0 for j, r in zip(rows, run)]),
                    # pending time drives anti-starvation; a requeued job's clock restarts at its requeue
                    wait_s=np.array([0.0 if r or not np.isfinite(j.submitted) else max(0.0, now - j.submitted)
                                     for j, r in zip(rows, run)]),
                    node=np.array([j.nodes for j in rows], dtype=object))

    def node_names(self) -> set[str]:
        """Every node slurmctld knows, one name each (sinfo -N never prints a range)."""
        r = self._run("sinfo", "-h", "-N", "-o", "%N")
        if r.returncode != 0:
            raise SlurmError(f"sinfo: {r.stderr.strip()}")
        return {line.strip() for line in r.stdout.splitlines() if line.strip()}

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        return [(j.job_id, self.tenant(j)) for j in self.jobs(node=node) if j.state in ("RUNNING", "SUSPENDED")]

    def _hold_jobs(self) -> list[RunningJob]:
        return [RunningJob(j.job_id, j.account, tuple(expand_hostlist(j.nodes)), j.gpus, j.reservation,
                           j.state == "RUNNING") for j in self.jobs() if j.state in ("RUNNING", "PENDING", "SUSPENDED")]

    # ---- actuator interface -------------------------------------------------------------------
    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        if self.holds is not None:  # first: freed GPUs must already be held when the preemptions free them
            try:
                self.holds.apply(plan, rep, self._hold_jobs())
            except SlurmError as exc:
                rep.errors.append(f"hold: {exc}")
        if not plan.preemptions:
            return rep
        wanted = {p.job_id: p for p in plan.preemptions}
        try:
            live = {j.job_id: j for j in self.jobs(list(wanted))}
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return rep
        for jid, p in wanted.items():
            job = live.get(jid)
            if job is None:
                rep.actions.append(f"skip {jid}: no longer in the queue")
                continue
            if job.state != "RUNNING":
                rep.actions.append(f"skip {jid}: {job.state.lower()}, not running")  # already done: idempotent
                continue
            if self.priority(job) != "low":
                rep.errors.append(f"refused to preempt {jid}: priority {self.priority(job)} is not preemptible")
                continue
            comment = f"gpu-autoscaler: {p.reason}"[:250].replace('"', "'")
            self._scontrol(rep, "update", f"JobId={jid}", f"Comment={comment}")
            self._scontrol(rep, self.cfg.mode, jid)
        return rep

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        """Node failure: every job on the node is requeued, whatever its priority (it is not running anyway)."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        comment = f"gpu-autoscaler: {reason}"[:250].replace('"', "'")
        for jid in job_ids:
            self._scontrol(rep, "update", f"JobId={jid}", f"Comment={comment}")
        self._scontrol(rep, "requeue", ",".join(job_ids))
        return rep

    def release_holds(self) -> ActionReport:
        """Delete this daemon's reservations (jobs in them keep running)."""
        rep = ActionReport(self.name, self.dry_run)
        if self.holds is not None:
            try:
                self.holds.release(rep, self._hold_jobs())
            except SlurmError as exc:
                rep.errors.append(f"release holds: {exc}")
        return rep

    def fence_node(self, node: str, reason: str) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        if self.cfg.drain_failed_nodes:
            self._scontrol(rep, "update", f"NodeName={node}", "State=DRAIN", f"Reason=gpu-autoscaler: {reason}"[:200])
        return rep

    def notify(self, notes: list[Notification]) -> ActionReport:
        # preempted and requeued jobs carry their reason in the job comment (squeue -o %k shows it)
        return ActionReport(self.name, self.dry_run)
