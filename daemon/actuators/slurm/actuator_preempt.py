"""Preemption on Slurm: each job re-checked before it is touched (only running low-priority jobs, for a GPU
type the protected work takes), warned with a signal first, requeued (or suspended), its reason written in its
AdminComment; and reclaim, which requeues a job the health checks found, retrying a requeue Slurm refused."""

from __future__ import annotations

import numpy as np

from daemon.actuators.base import ActionReport, stop_on_fence
from daemon.actuators.slurm.comments import COMMENT_TAG, AdminComments
from daemon.actuators.slurm.holds import expand_hostlist, parse_nodes
from daemon.actuators.slurm.squeue import SlurmError, SlurmJob, by_id, waits_for_gpus, whole_job, whole_jobs
from daemon.actuators.slurm.visibility import ALL_NODES
from daemon.config.fleet import accepts_type
from daemon.policy.types import Notification, Plan, Preemption
from daemon.text import plural


class Requeue:
    """SlurmActuator's preemption and reclaim."""

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
                pending = [j for j in pending if waits_for_gpus(j, by_id(eligible, j))]
            # an array's pending tasks by the array's id: squeue lists them under its record (by_id), one id not
            # thousands on the command line
            ids = list(dict.fromkeys(j.record.split("_")[0] if j.record else j.job_id for j in pending))
            accepts = self.job_types(ids) if pending else {}
        except SlurmError as exc:
            rep.errors.append(f"GPU types: {exc}; no preemption for a protected tenant this cycle")
            return {jid: p for jid, p in wanted.items() if not p.for_tenant}
        takes: dict[str, set[str]] = {t: {k for k, v in plan.holds_by_type.get(t, {}).items() if v > 0}
                                      for t in protected}
        anything: set[str] = set()
        for j in pending:
            acc = by_id(accepts, j, ())
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
        return self._scontrol(rep, self.cfg.mode, whole_job(job.job_id))   # a hetjob: all of its components

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
            comments = AdminComments(self._read_streamed, job_ids)
            for jid in job_ids:
                if not self._annotate(rep, jid, reason, comments) and rep.errors and "timed out" in rep.errors[-1]:
                    break  # slurmctld is not answering: do not wait out a timeout per job before the requeue
            if not self._scontrol(rep, "requeue", whole_jobs(job_ids)):
                with self._retry_lock:
                    self._requeue_retry.update({j: (reason, next(self._retry_seq)) for j in job_ids})
        return rep

    def reclaim(self, job_ids: list[str], reason: str) -> ActionReport:
        """Requeue jobs the health policy found idle or hung: each re-read live first, and only a running job
        past policy.preempt_min_runtime_s, still the job the cycle read in the tier it read (_changed), is
        requeued, its reason in the AdminComment. A heterogeneous job's component is requeued with every other
        (by the job's id, whole_job): only when `job_ids` names every component with GPUs Slurm lists for the job
        (the health policy names them all when each is due, daemon/health/reclaim.py) and each passes those checks;
        else none is, in one line (one idle component, beside a busy one of another account's, requeued both).
        Nothing is retried: the next cycle decides again on fresh telemetry."""
        rep = ActionReport(self.name, self.dry_run)
        if not job_ids:
            return rep
        hets = sorted({whole_job(j) for j in job_ids if "+" in j})
        try:   # a hetjob's id lists every component (123+0, 123+1)
            live = {j.job_id: j for j in self.jobs(list(dict.fromkeys([*job_ids, *hets])))}
        except SlurmError as exc:
            rep.errors.append(f"reclaim: {exc}")
            return rep
        ok: list[str] = []
        for jid in dict.fromkeys(job_ids):
            job = live.get(jid)
            if job is None or job.state != "RUNNING":
                rep.actions.append(f"skip {jid}: {'gone' if job is None else job.state.lower()}, not running")
            elif job.elapsed_s < self.min_runtime_s:
                rep.actions.append(f"skip {jid}: ran {job.elapsed_s:.0f} s, under "
                                   f"policy.preempt_min_runtime_s = {self.min_runtime_s:g}")
            elif (why := self._changed(job)) is not None:
                rep.actions.append(f"skip {jid}: {why}")
            else:
                ok.append(jid)
        for het in hets:
            comps = sorted(j for j in live if "+" in j and whole_job(j) == het)
            # a component with no GPUs goes with the job (the health policy watches GPUs only: it has no finding,
            # and is named only where its account is a tenant's); waited for, idle GPUs beside one were never requeued
            left = [c for c in comps if c not in ok and live[c].total_gpus > 0]
            if left:
                rep.actions.append(f"skip heterogeneous job {het}: a requeue requeues every component, and "
                                   f"{', '.join(left)} {'is' if len(left) == 1 else 'are'} not to be reclaimed")
                ok = [j for j in ok if whole_job(j) != het]
        with stop_on_fence(rep):
            comments = AdminComments(self._read_streamed, ok)
            for jid in ok:
                self._annotate(rep, jid, reason, comments)
            for target in dict.fromkeys(whole_job(j) for j in ok):
                self._scontrol(rep, "requeue", target)
        return rep

    def _retry_requeues(self, rep: ActionReport, entries: dict[str, tuple[str, int]]) -> None:
        """Requeue the failed node's jobs an earlier requeue did not move (`entries`: the retry map as this
        pass found it): those still running or suspended on a node that is still down, drained or not
        responding. A job requeued by Slurm itself, finished, or on a node that is healthy again (the failure
        was not one) is dropped. Kept while slurmctld does not answer. Only the entries this pass handled are
        removed: the failover worker may add new ones while the pass waits on Slurm."""
        try:
            live = {j.job_id: j for j in self.jobs(sorted(entries))}
            shown = self._read("scontrol", ALL_NODES, "-d", "-o", "show", "nodes")
            healthy = {n.name for n in parse_nodes(shown) if n.healthy}
        except SlurmError as exc:
            rep.errors.append(f"retry requeue: {exc}")
            return
        todo = sorted(j for j in entries if j in live and live[j].state in ("RUNNING", "SUSPENDED")
                      and not set(expand_hostlist(live[j].nodes)) <= healthy)
        failed: set[str] = set()
        if todo:
            rep.actions.append(f"retry the requeue of {plural(len(todo), 'job')} of a failed node")
            if not self._scontrol(rep, "requeue", whole_jobs(todo)):
                failed = set(todo)  # kept for the next pass
        with self._retry_lock:
            for j, entry in entries.items():
                if j not in failed and self._requeue_retry.get(j) == entry:
                    del self._requeue_retry[j]
