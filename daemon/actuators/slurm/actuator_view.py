"""What the Slurm actuator reads for the daemon's state: jobs and nodes as the policy sees them, each job's
and node's GPU type (a mixed fleet), and whether a node is really down."""

from __future__ import annotations

import logging
import os
import pwd
import time

import numpy as np

from daemon.actuators.slurm import gres
from daemon.actuators.slurm.holds import (
    RunningJob,
    expand_hostlist,
    hold_name,
    parse_nodes,
    parse_reservations,
    pool_hold_name,
)
from daemon.actuators.slurm.squeue import (
    FAILED_NODE_STATES,
    JSON_IDS_MAX,
    SlurmError,
    SlurmJob,
    arrays_to_throttle,
    by_id,
    parse_arrays,
    split_records,
    waits_for_gpus,
    whole_job,
)
from daemon.actuators.slurm.visibility import (
    ALL_JOBS,
    ALL_NODES,
    CtldConfig,
    hides,
    parse_admin_level,
    parse_config,
    privileged,
    sees_all_line,
)
from daemon.actuators.slurm.windows import parse_window_reservations
from daemon.policy.state import CLOSED, HELD_BY_POOL, PRIORITY, UNHELD, Jobs, Nodes

log = logging.getLogger("gpu_autoscaler.actuator.slurm")   # the actuator's logger (same name as actuator.py's)


def job_shapes(rows: list[SlurmJob]) -> dict[str, tuple[int, int]]:
    """Account -> (nodes, GPUs per node) of its largest job (most GPUs in all, then most nodes), where that job runs
    on, or asks for, several nodes: a hold sized for it takes whole nodes per node asked (SlurmHolds.choose). The
    plan sizes a hold by a job's GPUs in all (Plan.hold_job_gpus): -N 2 --gres=gpu:4 is a job of 8 GPUs to it."""
    best: dict[str, SlurmJob] = {}
    for j in rows:
        b = best.get(j.account)
        if b is None or (j.total_gpus, j.node_count) > (b.total_gpus, b.node_count):
            best[j.account] = j
    return {a: (j.node_count, j.gpus) for a, j in best.items() if j.node_count > 1 and j.gpus > 0}


class ClusterView:
    """SlurmActuator's reads: squeue and scontrol turned into Jobs and Nodes."""

    # ---- GPU types (a mixed fleet) -------------------------------------------------------------
    def _node_type(self, node) -> str:
        assert self.resolver is not None
        return gres.node_type(self.resolver, node.gres, node.features)

    def job_types(self, job_ids: list[str] | None = None) -> dict[str, tuple[str, ...] | None]:
        """Job id -> the GPU types it accepts, in order of preference (gres.job_accepts; None: it never starts, as a
        job naming several GPU types at once where no node has them all), from squeue's
        tres-per-node / -job / -task / -socket (--gres or --gpus-per-node, --gpus, --gpus-per-task,
        --gpus-per-socket), Feature (--constraint) and Prefer (--prefer; only a pending job has it). One squeue call;
        ';' ends each field (a constraint holds '|' and '&'; Slurm refuses ';' in one), and size 0 keeps squeue from
        cutting a field. Without tres-per-socket a job asking --gpus-per-socket=t4:1 took any type: held for, and
        made room for, on a100 nodes it cannot run on. Jobs under the id %i gives (JobArrayID; an array's pending
        tasks under their record, 1_[3-10]: squeue.by_id): under JobID, an array's tasks (1_3, running as job 7)
        were found under no id and took any type."""
        assert self.resolver is not None
        args = ["squeue", ALL_JOBS, "-h", "-O", "JobArrayID:0;,tres-per-node:0;,tres-per-job:0;,tres-per-task:0;,"
                "tres-per-socket:0;,Prefer:0;,Feature:0"]
        if job_ids:
            args += ["-j", ",".join(job_ids)]
        r = self._run(*args)
        if r.returncode != 0:
            if job_ids and "Invalid job id" in r.stderr:
                return {}
            raise SlurmError(f"squeue: {r.stderr.strip()}")
        rows = []
        for line in r.stdout.splitlines():
            f = line.split(";", 6)
            if len(f) < 7 or not f[0].strip():
                continue
            c = ["" if x.strip() in ("(null)", "N/A") else x.strip() for x in f]
            rows.append((c[0], ",".join(x for x in c[1:5] if x), c[6], c[5]))
        # an untyped shard or MPS request runs only on the nodes with that GRES, a request naming several types only
        # on a node that has them all: the nodes' types (one more scontrol call, only when such a job is listed);
        # read as any type, or either, the plan made room for it where it cannot run
        shares = nodes = None
        if any(gres.gres_shares(tres) or len(gres.job_gres_types(tres)) > 1 for _, tres, _, _ in rows):
            shares, nodes = {}, []
            for n in parse_nodes(self._read("scontrol", ALL_NODES, "-d", "-o", "show", "nodes")):
                t = self._node_type(n)
                nodes.append((n.gres, t))
                for kind in gres.gres_shares(n.gres):
                    if t not in shares.setdefault(kind, []):
                        shares[kind].append(t)
        out = {jid: gres.job_accepts(self.resolver, tres, feat, pref, shares, nodes) for jid, tres, feat, pref in rows}
        # the types of each job that asks several at once, for its hold (cluster_jobs: together)
        self._several = {jid: frozenset(t.casefold() for t in named) for jid, tres, _, _ in rows
                         if len(named := gres.job_gres_types(tres)) > 1}
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
    def lists_every_job(self) -> bool:
        """Yes: squeue lists every account's jobs, so an account with no job listed runs none on this cluster. A
        failed read raises SlurmError, never an empty queue; a hidden partition's jobs are read (--all); and where
        slurmctld would show the daemon's user only its own (PrivateData=jobs), cluster_jobs refuses the read
        (check_sees_all)."""
        return True

    _ctld: CtldConfig | None = None   # scontrol show config, as last read (check_sees_all)

    def check_sees_all(self) -> None:
        """Raises SlurmError, one line naming the setting and the fix (visibility.sees_all_line), where slurmctld
        shows the daemon's user only its own jobs or reservations (PrivateData): every other tenant would read as
        idle and its nodes as free. root sees everything and is asked nothing; another user costs one
        ``scontrol show config`` a cycle, and where PrivateData hides something from a user that is not SlurmUser,
        one ``scontrol show assoc_mgr`` (its AdminLevel as slurmctld holds it: what slurmctld decides by). Where the
        config cannot be read, the last read decides; never read, the jobs are not read either."""
        uid = os.geteuid()
        if uid == 0:
            return
        try:
            self._ctld = parse_config(self._read("scontrol", "show", "config"))
        except SlurmError as exc:
            if self._ctld is None:
                raise SlurmError(f"cannot tell whether slurmctld shows this user every job ({exc}): the jobs are not "
                                 "read") from None
        cfg = self._ctld
        if not hides(cfg) or privileged(cfg, uid):
            return
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:   # a uid with no name here (a container): Slurm knows it by its number
            user = str(uid)
        level = parse_admin_level(self._read("scontrol", "show", "assoc_mgr", "flags=users", f"users={user}"), user)
        if (line := sees_all_line(cfg, uid, user, level)) is not None:
            raise SlurmError(line)

    def cluster_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """Running jobs, and pending ones that wait for GPUs (``waits_for_gpus``: not held, not waiting for a begin
        time, another job or an accounting limit), as the policy's columnar Jobs (unknown tenants are dropped).
        Refused (SlurmError) where slurmctld would not show the daemon's user every job (check_sees_all)."""
        self.check_sees_all()
        index = {t: i for i, t in enumerate(tenants)}
        now = time.time()
        listed = self._array_jobs()
        eligible = self.eligible_times() if any(j.state == "PENDING" for j in listed) else {}
        rows = [j for j in listed if (j.state == "RUNNING" or waits_for_gpus(j, by_id(eligible, j), now))
                and self.tenant(j) in index]
        types: dict[str, tuple[str, ...] | None] = {}
        if self.resolver is not None:
            types = self.job_types()
            # a pending job naming several GPU types at once that no node has all of never starts (job_accepts),
            # whatever its reason says (slurmctld gives it BadConstraints once it has looked at it)
            never = {j.job_id for j in listed if j.state == "PENDING" and self.tenant(j) in index
                     and by_id(types, j, ()) is None}
            for jid in sorted(never - self._never):   # once per job
                log.warning("job %s asks several GPU types at once and no node has them all, so it never starts: "
                            "no demand (no hold, no preemption, no aging for it)", jid)
            self._never = never
            rows = [j for j in rows if j.job_id not in never]
            # the pending jobs that ask several GPU types at once, per account: their holds go where they start
            # (SlurmHolds.choose_typed: a node with them all)
            together: dict[str, list[tuple[frozenset[str], int]]] = {}
            for j in rows:
                if j.state == "PENDING" and (need := by_id(self._several, j)):
                    together.setdefault(j.account, []).append((need, j.total_gpus))
            self.together = {a: tuple(v) for a, v in together.items()}
        self.shapes = job_shapes(rows)
        # what the plan and the health step decide on: each job's identity and tier as read now (_changed)
        self._het = self.hetjob_tiers(listed)
        self._seen = {j.job_id: (j.submitted, j.started, self.priority(j)) for j in rows}
        run = np.array([j.state == "RUNNING" for j in rows], dtype=bool)
        # a pending job's wait runs from when it became eligible, not from its submission: held, or submitted with
        # --begin, it waited for nothing meanwhile, and counting that time would let it jump the queue by aging
        # (policy/aging.py). Eligible time not set yet (N/A: just released, not yet evaluated), or still ahead (a
        # requeued job): no wait yet. A job squeue -O does not list: its submission
        since = [j.submitted if (e := by_id(eligible, j)) is None else
                 (np.fmax(j.submitted, e) if np.isfinite(e) else now)
                 for j in rows]
        # a running job on several nodes: its nodes, where its GPUs are given back (the start estimate) and freed
        # by its requeue (the plan's preemption); `node` keeps squeue's hostlist, which names no node
        on_nodes = np.empty(len(rows), dtype=object)
        for i, (j, r) in enumerate(zip(rows, run)):   # one by one: numpy reads a list of equal tuples as 2-D
            on_nodes[i] = tuple(expand_hostlist(j.nodes)) if r and j.node_count > 1 else ()
        accepts = None
        if self.resolver is not None:
            accepts = np.empty(len(rows), dtype=object)
            accepts[:] = [by_id(types, j) or () for j in rows]
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
                    time_limit_s=np.array([j.time_limit_s for j in rows], dtype=float),
                    # the plan rounds a hold for a job on several nodes up to a node per node asked
                    nodes_asked=np.array([max(1, j.node_count) for j in rows], dtype=np.int64),
                    # --gpus -N k: at least one on each of k nodes, not evenly (the start estimate's placement)
                    spread=np.array([j.spread for j in rows], dtype=bool) if any(j.spread for j in rows) else None,
                    on_nodes=on_nodes if any(on_nodes) else None)   # none on several nodes: no column to scan

    def hetjob_tiers(self, listed: list[SlurmJob]) -> dict[str, str]:
        """Heterogeneous job id -> the tier each of its components is read at (self.priority: het_tier): the highest
        of its components' (each has its own partition, QOS and account), and at least normal where they run
        under two accounts or more. A component is requeued or suspended with its job's every component (whole_job):
        read at its own tier, a hetjob of a high component (partition high) and a low one (partition low) was a low
        job to the plan, and its preemption requeued the high component too, and another tenant's where an account
        of each ran it."""
        comps: dict[str, list[SlurmJob]] = {}
        for j in listed:
            if "+" in j.job_id:
                comps.setdefault(whole_job(j.job_id), []).append(j)
        out: dict[str, str] = {}
        for het, js in comps.items():
            tier = max((self.own_priority(j) for j in js), key=PRIORITY.__getitem__)
            if len({j.account for j in js}) > 1:
                tier = max(tier, "normal", key=PRIORITY.__getitem__)
            out[het] = tier
        return out

    def _array_jobs(self) -> list[SlurmJob]:
        """jobs(), each array's pending tasks read by the one rule (squeue.expand_arrays) from the source that has
        its throttle: its record line's %N, else squeue --json, one call over the arrays that need it
        (arrays_to_throttle: squeue -o has no field for the throttle, and the line drops its %N, and joins the
        reasons, once a task is split off the array's record, as an update or hold of one task does): its
        records, split apart (split_records), and its throttle. Not read: every pending task is counted (a warning
        says why), never none."""
        listed = self._listed()
        arrays = arrays_to_throttle(listed)
        if not arrays:
            return self._expanded(listed, False)
        ids = ",".join(arrays)
        try:
            # -j is one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN): a tenant's 20,000 arrays made it an
            # OSError (E2BIG) that failed every tenant's view. Past JSON_IDS_MAX every job's (22.05 lists every job
            # whatever -j says anyway)
            # read as it comes (parse_arrays over the pipe, a record at a time): held whole, the JSON of a tenant's
            # 10^5 pending arrays (310 MB of 22.05's text) took one read to 1.05 GiB peak RSS, 0.2 without it
            got = self._read_streamed(parse_arrays, "squeue", "--json", ALL_JOBS,
                                      *(("-j", ids) if len(ids) <= JSON_IDS_MAX else ()))
        except SlurmError as exc:
            log.warning("job arrays' throttles (%%N) not read, every pending task of %s counted: %s",
                        ",".join(arrays)[:200], exc)
            return self._expanded(listed, False)
        return self._expanded(split_records(listed, got), False, {a: v.throttle for a, v in got.items()})

    def cluster_nodes(self, tenants: tuple[str, ...]) -> Nodes:
        """Every node slurmctld knows, as the policy's Nodes (raises SlurmError when slurmctld does not answer).

        - names: ``NodeName`` of ``scontrol -d -o show nodes``, as squeue's %N spells a single-node job's node
          (cluster_jobs' node column). A job on several nodes has a hostlist there, which names no node: its
          nodes are in Jobs.on_nodes (Jobs.parts), and its GPUs count as used on each of them (below).
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
        nodes = parse_nodes(self._read("scontrol", ALL_NODES, "-d", "-o", "show", "nodes"))
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
        r = self._run("sinfo", ALL_NODES, "-h", "-N", "-o", "%N")
        if r.returncode != 0:
            raise SlurmError(f"sinfo: {r.stderr.strip()}")
        return {line.strip() for line in r.stdout.splitlines() if line.strip()}

    def node_down_confirmed(self, node: str) -> bool | None:
        """Whether slurmctld itself sees `node` as failed (ReportsNodeHealth): DOWN, DRAIN(ED/ING), FAIL(ING) or
        NOT_RESPONDING ('*') is True, any other state False; None when Slurm does not answer or does not know
        the node (then the alert is acted on alone)."""
        try:
            r = self._run("sinfo", ALL_NODES, "-h", "-N", "-n", node, "-o", "%T")
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
