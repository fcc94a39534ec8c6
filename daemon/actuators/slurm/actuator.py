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

The actuator's parts live beside this file, one concern per module, and every name is importable from here
as before: squeue (reading jobs: SlurmJob, parse_squeue, waits_for_gpus), comments (the AdminComment the daemon
writes: reasons and start estimates), actuator_view (the jobs and nodes the daemon's state is built from) and
actuator_preempt (preemption by requeue, its warning, and reclaim); SlurmActuator inherits the last two.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import subprocess
import tempfile
import threading
import time
from typing import Callable, Iterable, TypeVar

import numpy as np

from daemon.actuators.base import NO_FENCE, ActionReport, FencedApply, FenceGuard, TermRecord, stop_on_fence
from daemon.actuators.slurm.actuator_preempt import Requeue
from daemon.actuators.slurm.actuator_view import ClusterView
from daemon.actuators.slurm.comments import (  # re-exported: the old import path keeps working
    COMMENT_TAG,
    ETA_TAG,
    AdminComments,
    _utc,
    admin_comments_of,
    eta_writes_in_turn,
    with_eta,
)
from daemon.actuators.slurm.holds import (
    Node,
    RunningJob,
    SlurmHolds,
    freed_by,
    parse_nodes,
)
from daemon.actuators.slurm.squeue import (  # re-exported: the old import path keeps working
    ARRAY_TASK,
    BEGIN_SOON_S,
    FAILED_NODE_STATES,
    JOB_GPUS_FMT,
    NOT_WAITING_FOR_GPUS,
    NOT_WAITING_PREFIXES,
    SQUEUE_FMT,
    SlurmError,
    SlurmJob,
    expand_arrays,
    parse_elapsed,
    parse_gpus,
    parse_job_gpus,
    parse_squeue,
    parse_submit,
    parse_time_limit,
    spread_jobs,
    waits_for_gpus,
    whole_job,
)
from daemon.actuators.slurm.visibility import ALL_JOBS, ALL_NODES
from daemon.actuators.slurm.windows import SlurmWindows, parse_window_reservations
from daemon.config import SlurmActuatorConfig, TenantConfig, Tier
from daemon.config.fleet import FleetConfig
from daemon.config.names import named_tenant, tenant_accounts
from daemon.config.windows import window_of
from daemon.policy.eta import moved
from daemon.policy.state import PRIORITY
from daemon.policy.types import Notification, Plan
from daemon.policy.windows import reserve_margin_s

log = logging.getLogger("gpu_autoscaler.actuator.slurm")
T = TypeVar("T")
CUT_NAMED = 5   # array record lines past the bound named in the log, each once; more are counted in one line


class SlurmActuator(FencedApply, ClusterView, Requeue):
    name = "slurm"

    def __init__(self, cfg: SlurmActuatorConfig, tenants: list[TenantConfig], dry_run: bool = True,
                 min_runtime_s: float = 0.0, clock=time.monotonic, fleet: FleetConfig | None = None,
                 cycle_s: float = 30.0, window_min_lead_s: float = 0.0) -> None:
        self.cfg = cfg
        self.dry_run = dry_run
        self.min_runtime_s = min_runtime_s  # policy.preempt_min_runtime_s, re-checked on the live job
        self.clock = clock
        # job id -> (when warned, reason), in this fencing term only (TermRecord): a replica leading again did not
        # see the plans of the leader between (which may have spared the job); it warns afresh, not on an old signal
        self._warned: TermRecord[str, tuple[float, str]] = TermRecord(lambda: self.guard)
        # job id -> (p50, p90, Slurm's own) epoch times of the start estimate last written in its AdminComment, in
        # this fencing term only (TermRecord): another leader may have rewritten the comment since this one led
        self._eta_written: TermRecord[str, tuple[float | None, ...]] = TermRecord(lambda: self.guard)
        # job id -> (submitted, started, tier) as the last cluster_jobs read it: what decisions were made on
        self._seen: dict[str, tuple[float, float, Tier]] = {}
        self._het: dict[str, str] = {}   # hetjob id -> its components' tier, as last read (hetjob_tiers)
        # job id -> (reason, entry number): a failed node's jobs whose requeue failed. The failover worker adds
        # while a cycle's retry pass reads and removes, so both hold the lock; the number tells a pass that an
        # entry was added again while it waited on Slurm (it is not the pass's to remove)
        self._requeue_retry: dict[str, tuple[str, int]] = {}
        self._retry_lock = threading.Lock()
        self._retry_seq = itertools.count()
        self.guard: FenceGuard = NO_FENCE
        self.account_of = tenant_accounts(tenants)
        self.tenant_of = {acct: t for t, acct in self.account_of.items()}
        # a mixed fleet ([fleet] types): GPU types from typed GRES and node features (gres.py); None: one model
        self.resolver = fleet.resolver() if fleet is not None and fleet.typed else None
        self.holds = SlurmHolds(read=self._read, scontrol=self._scontrol, accounts=self.account_of,
                                tier_of={t.name: t.tier for t in tenants}, tiers=cfg.hold_tiers,
                                prefix=cfg.hold_name_prefix, shrink_delay_s=cfg.hold_shrink_delay_s,
                                node_type=self._node_type if self.resolver else None,
                                guard=lambda: self.guard) if cfg.holds else None
        # recurring windows as Slurm's own recurring reservations (windows.py), with the holds' node rule; their
        # nodes picked again at each lead time, caught by one of the last two cycles (cycle_s: cycle.interval_s)
        self.windows = SlurmWindows(read=self._read, scontrol=self._scontrol, holds=self.holds,
                                    prefix=cfg.window_name_prefix, clock=time.time,
                                    repick_within_s=reserve_margin_s(cycle_s),
                                    guard=lambda: self.guard, at_lead=cfg.windows_reserved == "at_lead",
                                    min_lead_s=window_min_lead_s) if self.holds else None
        self._reported: set[str] = set()
        self._never: set[str] = set()   # pending jobs that never start (cluster_jobs), as last logged
        # account -> (GPU types, GPUs) of its pending jobs asking several types at once, as cluster_jobs last read
        # them: their holds go to nodes with them all (SlurmHolds.choose_typed)
        self.together: dict[str, tuple[tuple[frozenset[str], int], ...]] = {}
        self._several: dict[str, frozenset[str]] = {}
        # account -> (nodes, GPUs per node) of its largest job where it asks several nodes, as cluster_jobs last read
        # it: its hold takes whole nodes per node asked (SlurmHolds.choose)
        self.shapes: dict[str, tuple[int, int]] = {}
        self._eta_cut = False           # whether max_eta_writes left estimates for later cycles, as last logged
        self._cut: set[str] = set()     # array records whose pending tasks are not all read (jobs), as last logged
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
            # errors="replace": a tenant's job name or comment is printed as the bytes it gave; one that is not
            # UTF-8 must not make the whole output unreadable (every tenant's jobs) but be that one field's U+FFFD
            return subprocess.run([exe, *args[1:]], capture_output=True, encoding="utf-8", errors="replace",
                                  timeout=self.cfg.timeout_s, env=self.env)
        except subprocess.TimeoutExpired:
            # not the exception's own text: it quotes the whole command line, up to 100,000 characters of job ids
            # (squeue --json -j), in a line logged each cycle
            raise SlurmError(f"{args[0]}: {' '.join(args)[:200]!r} timed out after {self.cfg.timeout_s:g} seconds") \
                from None
        except OSError as exc:
            raise SlurmError(f"{args[0]}: {exc}") from None

    def _read_streamed(self, parse: Callable[[Iterable[str]], T], *args: str) -> T:
        """`parse` over a read command's stdout as it comes, in pieces of 256 KiB (never all of it held at once: squeue
        --json prints ~3 KB per job, every job's), within the command's timeout. SlurmError where it times out, exits
        non-zero (its stderr's first 200 characters) or `parse` raises one."""
        exe = str(self.cfg.bin_dir / args[0])
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
            try:
                proc = subprocess.Popen([exe, *args[1:]], stdout=subprocess.PIPE, stderr=err, encoding="utf-8",
                                        errors="replace", env=self.env)   # as _run: a tenant's bytes, one field
            except OSError as exc:
                raise SlurmError(f"{args[0]}: {exc}") from None
            late = threading.Event()

            def kill() -> None:
                late.set()
                proc.kill()

            timer = threading.Timer(self.cfg.timeout_s, kill)
            timer.start()
            failed: SlurmError | None = None
            try:
                assert proc.stdout is not None
                chunks = iter(lambda: proc.stdout.read(1 << 18), "")
                try:
                    got = parse(chunks)
                except SlurmError as exc:
                    failed = exc
                for _ in chunks:   # the rest (a parse that stopped early): read and dropped, for the exit status
                    pass
                rc = proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                proc.stdout.close()   # type: ignore[union-attr]
            if late.is_set():
                raise SlurmError(f"{args[0]}: {' '.join(args)[:200]!r} timed out after {self.cfg.timeout_s:g} seconds")
            if rc != 0:
                err.seek(0)
                raise SlurmError(f"{' '.join(args[:2])}: {err.read(4096).strip()[:200]}")
            if failed is not None:
                raise failed
            return got

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
        """The job's tier; a heterogeneous job's component's: its whole job's as last read (hetjob_tiers), where
        higher than its own."""
        own = self.own_priority(job)
        het = self._het.get(whole_job(job.job_id)) if "+" in job.job_id else None
        return het if het is not None and PRIORITY[het] > PRIORITY[own] else own

    def own_priority(self, job: SlurmJob) -> Tier:
        return self.cfg.priority_by_qos.get(job.qos) or self.cfg.priority_by_partition.get(job.partition) or "normal"

    def tenant(self, job: SlurmJob) -> str:
        """The tenant whose slurm_account the job runs under. An account no tenant has is named as itself, unless it
        is a tenant's name (that tenant's jobs run under another account): then ``@account:<account>``, which no
        tenant is called ('@' is refused in a tenant's name). Named as itself, a job a user submitted under an
        account called like tenant 'ml' (whose account is 'ml-prod') was ml's: its GPUs ml's demand (holds, and
        preemptions for them), its warnings ml's notices."""
        return named_tenant(job.account, self.tenant_of, self.account_of, "account")

    def jobs(self, job_ids: list[str] | None = None, node: str | None = None,
             states: str | None = None) -> list[SlurmJob]:
        """squeue's jobs, each array's pending tasks a job up to its throttle and the bound (expand_arrays)."""
        return self._expanded(self._listed(job_ids, node, states), bool(job_ids or node or states))

    def _listed(self, job_ids: list[str] | None = None, node: str | None = None,
                states: str | None = None) -> list[SlurmJob]:
        # without -r: an array's pending tasks are its one combined line (1_[3-10%3]), expanded by _expanded
        # --all: a hidden partition's jobs too (visibility.ALL_JOBS), which read as absent were its account idle
        filters = [ALL_JOBS]
        if job_ids:
            filters += ["-j", ",".join(job_ids)]
        if node:
            filters += ["-w", node]
        if states:
            filters += ["-t", states]
        r = self._run("squeue", "-h", "-o", SQUEUE_FMT, *filters)
        if r.returncode != 0:
            if job_ids and "Invalid job id" in r.stderr:
                return []
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        jobs = parse_squeue(r.stdout)
        if any(j.gpus == 0 for j in jobs):
            jobs = self._with_job_gpus(jobs, filters)
        return jobs

    def _expanded(self, listed: list[SlurmJob], filtered: bool, throttles: dict[str, int] | None = None
                  ) -> list[SlurmJob]:
        """`listed` (_listed) with each array's pending tasks made jobs (expand_arrays: the one rule for its throttle
        and the bound), saying once per record line how many the bound left out: the first CUT_NAMED such lines by
        name, the rest in one line (a tenant's 10^5 arrays past the bound were 10^5 lines of warning)."""
        jobs, cut = expand_arrays(listed, self.tenant, self.cfg.max_array_tasks, throttles)
        new = sorted(cut.keys() - self._cut)   # once per record
        for rec in new[:CUT_NAMED]:
            log.warning("job array %s: %d of its pending tasks are not read (a tenant's first %d pending array tasks "
                        "are, each cycle; actuators.slurm.max_array_tasks): no demand for them until fewer wait", rec,
                        cut[rec], self.cfg.max_array_tasks)
        if rest := new[CUT_NAMED:]:
            log.warning("%d more job arrays: %d of their pending tasks are not read (as above): no demand for them "
                        "until fewer wait", len(rest), sum(cut[r] for r in rest))
        self._cut = (self._cut | set(cut)) if filtered else set(cut)
        return jobs

    def _with_job_gpus(self, jobs: list[SlurmJob], filters: list[str]) -> list[SlurmJob]:
        """Jobs with no GPUs per node (%b) given the GPUs they ask per job or per task (parse_job_gpus; per node:
        spread evenly over their nodes). One more squeue call, with the same filters. Read from %b alone, a job
        asking --gpus=8 was a job of 0 GPUs: never preempted (it frees nothing), its pending GPUs no demand, and
        its tenant's metered demand capped to 0 (scheduler_bounds.cap_demand)."""
        r = self._run("squeue", "-h", "-O", JOB_GPUS_FMT, *filters)
        if r.returncode != 0:
            if "Invalid job id" in r.stderr:
                return jobs
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        asked, spread = parse_job_gpus(r.stdout), spread_jobs(r.stdout)
        return [dataclasses.replace(j, gpus=-(-asked[j.job_id] // max(1, j.node_count)), job_gpus=asked[j.job_id],
                                    spread=j.job_id in spread)
                if j.gpus == 0 and j.job_id in asked else j for j in jobs]

    def eligible_times(self) -> dict[str, float]:
        """Job id -> when each pending job became, or becomes, eligible to run (squeue's EligibleTime, the
        controller's local time; NaN where it prints none): a job held, or submitted with --begin, waits for GPUs
        only from then. One squeue call over the pending jobs (-O: squeue -o has no field for it), under the id %i
        gives (JobArrayID: an array's task 1_3, its pending tasks' record 1_[3-10]: squeue.by_id; JobID is the
        array's own id for its pending tasks)."""
        out = self._read("squeue", ALL_JOBS, "-h", "-t", "PENDING", "-O", "JobArrayID:0;,EligibleTime:0;")
        got: dict[str, float] = {}
        for line in out.splitlines():
            f = line.split(";")
            if len(f) >= 2 and f[0].strip():
                got[f[0].strip()] = parse_submit(f[1])
        return got

    # ---- actuator interface (apply: FencedApply) ----------------------------------------------
    def _apply(self, rep: ActionReport, plan: Plan) -> None:
        with self._retry_lock:
            retry = dict(self._requeue_retry)
        if retry:
            self._retry_requeues(rep, retry)
        if self.holds is not None:  # first: freed GPUs must already be held when the preemptions free them
            try:
                jobs = self._hold_jobs()
                covered, covered_by_type = self._apply_windows(rep, plan, jobs)
                self.holds.apply(plan, rep, jobs, covered, covered_by_type, self.together, self.shapes)
            except SlurmError as exc:
                rep.errors.append(f"hold: {exc}")
        wanted = {p.job_id: p for p in plan.preemptions}
        if not wanted:
            if self._warned:
                rep.actions.append(f"forget {len(self._warned)} warnings: the plan preempts nothing now")
                self._warned.clear()
            return
        try:
            named = set(wanted) | set(self._warned)
            # a hetjob's component: its job's every component too (squeue -j 123), whose tiers its requeue takes
            hets = {whole_job(j) for j in named if "+" in j}
            listed = self.jobs(sorted(named | hets))
            self._het = {**self._het, **self.hetjob_tiers(listed)} if hets else self._het
            live = {j.job_id: j for j in listed}
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return
        if self.resolver is not None:
            wanted = self._for_a_type_they_take(rep, plan, wanted, live)
        self._preempt_warned(rep, wanted, live, AdminComments(self._read_streamed, sorted(live)))

    def _apply_windows(self, rep: ActionReport, plan: Plan, jobs: list[RunningJob]
                       ) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
        """The windows' reservations, made at the lead time or ahead (windows.py); returns account -> GPUs its
        active windows' reservations hold now, which its hold need not hold again, and the same per GPU type (a
        mixed fleet; else empty)."""
        if self.windows is None:
            return {}, {}
        ws = [window_of(w) for w in plan.windows]
        res_out = self._read("scontrol", "-o", "show", "reservation")
        if not ws and not parse_window_reservations(res_out, self.cfg.window_name_prefix):
            return {}, {}
        nodes: list[Node] = parse_nodes(self._read("scontrol", ALL_NODES, "-d", "-o", "show", "nodes"))
        self.windows.apply(ws, rep, jobs, res_out, nodes, freed_by(plan), plan, self.shapes)
        return self.windows.active_gpus(self._read("scontrol", "-o", "show", "reservation"), nodes, plan)

    # ---- job health (daemon/health/, daemon/service/health.py) ----------------------------------------------
    def comment(self, job_ids: list[str], text: str) -> ActionReport:
        """Tell a job's owner in its AdminComment (appended after an admin's, replacing an earlier one of ours;
        the user's Comment is never touched). Each `scontrol update` is fenced."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        with stop_on_fence(rep):
            comments = AdminComments(self._read_streamed, job_ids)
            for jid in job_ids:
                self._annotate(rep, jid, text, comments)
        return rep

    def show_eta(self, rows: list[dict], made_at: float) -> ActionReport:
        """Each pending job's start estimate in its AdminComment (ETA_TAG's part, beside anything else there), with
        Slurm's own expected start (squeue %S, set by the backfill scheduler) when it has one. Written only when
        one of the three moved by eta.REWRITE_S or more (or became known or unknown) since this replica last wrote
        it: a queue of thousands is not rewritten every cycle, and Slurm's start appears once its backfill pass sets
        it. One squeue of the pending jobs per call; each `scontrol update` is fenced. Not on an array's pending
        tasks (1_3): updating one task splits it off its array's record in slurmctld, each a job record of its own
        (MaxJobCount counts them), so a tenant's arrays would have the daemon multiply its records by their tasks;
        their estimates are in the API. At most `max_eta_writes` a cycle, the accounts in turn (eta_writes_in_turn):
        a tenant's 10,000 new pending jobs were 10,000 updates in the cycle's thread, ahead of the other tenants'
        estimates; the AdminComments are read for those written only."""
        rep = ActionReport(self.name, self.dry_run)
        if not rows:
            return rep

        def at(s: float | None) -> float | None:
            return None if s is None else made_at + float(s)

        try:   # one squeue: Slurm's own start of each, which backfill may set after ours was written
            pending = self.jobs(states="PENDING")
        except SlurmError as exc:
            rep.errors.append(str(exc))
            return rep
        own = {j.job_id: (float(j.started) if np.isfinite(j.started) else None) for j in pending}
        account = {j.job_id: j.account for j in pending}
        # a job started or gone since the cycle read it has nothing to show
        want = {str(r["job_id"]): (at(r.get("p50_s")), at(r.get("p90_s")), own[str(r["job_id"])]) for r in rows
                if str(r["job_id"]) in own and not ARRAY_TASK.match(str(r["job_id"]))}
        changed = [j for j, v in want.items() if moved(self._eta_written.get(j), v)]
        for j in [j for j in self._eta_written if j not in want]:
            del self._eta_written[j]
        # at most max_eta_writes, the accounts in turn; the rest keep their record (still changed: next cycle's)
        chosen = eta_writes_in_turn(changed, want, self._eta_written, account, self.cfg.max_eta_writes)
        self._say_eta_cut(len(changed) - len(chosen))
        if not chosen:
            return rep
        with stop_on_fence(rep):
            comments = AdminComments(self._read_streamed, chosen)   # read for the jobs written only
            for jid in chosen:
                p50, p90, slurm = want[jid]
                part = f"{ETA_TAG} p50={_utc(p50)} p90={_utc(p90)}"
                if slurm is not None:
                    part += f" slurm={_utc(slurm)}"
                try:
                    prev = "" if self.dry_run else comments.of(jid)
                except SlurmError as exc:
                    rep.errors.append(str(exc))
                    break
                text = with_eta(prev, part)
                if self._scontrol(rep, "update", f"JobId={jid}", f"AdminComment={text[:900]}"):
                    self._eta_written[jid] = want[jid]
        return rep

    def _say_eta_cut(self, left: int) -> None:
        """One log line when max_eta_writes starts to leave estimates for later cycles, one when it no longer does:
        not a line per cycle while a tenant's flood keeps it cut."""
        if left and not self._eta_cut:
            log.warning("%d pending jobs' start estimates left for the next cycles: at most %d are written into "
                        "AdminComments a cycle (actuators.slurm.max_eta_writes), the accounts in turn", left,
                        self.cfg.max_eta_writes)
        elif not left and self._eta_cut:
            log.info("every pending job's start estimate is written again (actuators.slurm.max_eta_writes)")
        self._eta_cut = bool(left)

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


__all__ = [  # what the modules above hold, importable from here as before
    "AdminComments",
    "BEGIN_SOON_S",
    "COMMENT_TAG",
    "ETA_TAG",
    "FAILED_NODE_STATES",
    "NOT_WAITING_FOR_GPUS",
    "NOT_WAITING_PREFIXES",
    "SQUEUE_FMT",
    "SlurmActuator",
    "SlurmError",
    "SlurmJob",
    "admin_comments_of",
    "parse_elapsed",
    "parse_gpus",
    "parse_squeue",
    "parse_submit",
    "parse_time_limit",
    "waits_for_gpus",
    "with_eta",
]
