"""What squeue says about Slurm's jobs: its output format parsed into SlurmJob, Slurm's durations, times and
GPU counts, and whether a pending job waits for GPUs (and not for a limit GPUs cannot lift)."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import re
import time
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from daemon.actuators.slurm.gres import SHARING_KINDS, gres_entries, gres_gpus
from daemon.actuators.slurm.json_stream import array_items

JSON_IDS_MAX = 100_000   # characters of job ids named on squeue --json's command line (one argument: 128 KiB at most)
SQUEUE_FMT = "%i|%a|%P|%q|%T|%N|%M|%b|%r|%V|%v|%D|%S|%l"
# %b is only the GPUs asked per node (--gres, --gpus-per-node); a job asking per job (--gpus), per task
# (--gpus-per-task) or per socket (--gpus-per-socket, which Slurm takes only with --sockets-per-node: squeue's
# Sockets) prints N/A there, and squeue -o has no field for those: they are read with -O (job_gpus)
JOB_GPUS_FMT = "JobArrayID:0;,tres-per-job:0;,tres-per-task:0;,NumTasks:0;,tres-per-socket:0;,Sockets:0;,NumNodes:0;"


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
    job_gpus: int = 0                # GPUs asked for the whole job (--gpus, --gpus-per-task) when none per node; then
    #                                  `gpus` is that spread evenly over its nodes
    spread: bool = False             # `job_gpus` is its --gpus (tres-per-job): Slurm fills its nodes at least one
    #                                  each and as many as free on the first, not evenly (Jobs.spread)
    record: str = ""                 # a pending array task's combined record as squeue prints it (1_[3-10%3]):
    #                                  the id the -O reads list it under (expand_arrays, by_id)

    @property
    def total_gpus(self) -> int:
        return self.job_gpus or self.gpus * max(1, self.node_count)


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
    """'gres:gpu:2', 'gres/gpu:a100:4', 'gpu:8', 'gres:gpu' -> GPU count (0 when none; gres.gres_entries, the one
    GRES parser). A GRES whose name only ends in 'gpu' (gres:vgpu:2) is none: searched for 'gpu:<n>' anywhere, a
    tenant's job asking a site's vgpu GRES was that many GPUs (held for, made room for)."""
    return gres_gpus(tres)


def parse_node_gpus(tres: str) -> int:
    """A job's GPUs per node from its tres-per-node (%b): its GPUs (parse_gpus), and one GPU for a shard or MPS
    request (``gres:shard:2``, ``gres:mps:50``): the GPU its share sits on, which no job asking GPUs gets while it
    runs, and which it waits for while pending. Read as 0, such a job was never preempted for the high tier and its
    pending work no demand."""
    entries = gres_entries(tres)   # by default one job's shards or MPS share on a node come from one GPU
    shared = any(e.count > 0 for e in entries if e.name in SHARING_KINDS)
    return sum(e.count for e in entries if e.name == "gpu") + (1 if shared else 0)


def parse_submit(text: str) -> float:
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return float("nan")


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
    return reason_may_wait_for_gpus(reason)


def reason_may_wait_for_gpus(reason: str) -> bool:
    """A pending reason (%r) that free GPUs can end (BeginTime too: waits_for_gpus decides it by its time). An
    array's record line with a task split off it gives the reasons of both, joined by ',' (Resources,JobHeldAdmin:
    one task held): some of its tasks wait when any of them may (split_records tells which)."""
    return any(r not in NOT_WAITING_FOR_GPUS and not r.startswith(NOT_WAITING_PREFIXES) and "held" not in r.lower()
               for r in (p.strip() for p in reason.strip().strip("()").split(",")))


# the id of one task of a job array as squeue prints it: <array job id>_<task id> (a running task, a pending one split
# off the array's record); a pending array's other tasks are its one record line (ARRAY_RECORD)
ARRAY_TASK = re.compile(r"^(\d+)_(\d+)$")
THROTTLED = "JobArrayTaskLimit"   # Slurm's reason for an array's tasks waiting on its %N (NOT_WAITING_FOR_GPUS)


def _number(v) -> int | None:
    """A count in squeue --json: a number (22.05) or {"set": .., "number": ..} (later versions)."""
    if isinstance(v, dict):
        v = v.get("number") if v.get("set", True) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class ArrayRecords:
    """What ``squeue --json`` says of one job array: the most of its tasks Slurm runs at once (--array=..%N; 0 for
    no limit) and its pending records, each (task ids, reason): the array's own record ('1-4,6-10') and each task
    split off it ('5', by an scontrol update or hold of that task)."""
    throttle: int
    pending: tuple[tuple[str, str], ...] = ()


def _state(v) -> str:
    """job_state in squeue --json: 'PENDING' (22.05) or ['PENDING'] (later versions)."""
    if isinstance(v, list):
        v = v[0] if len(v) == 1 else None
    return v if isinstance(v, str) else ""


def parse_arrays(out: str | Iterable[str]) -> dict[str, ArrayRecords]:
    """``squeue --json``'s records as {array job id: ArrayRecords}. Every record of an array carries its throttle
    (array_max_tasks); where they differ the largest counts and 0 (none) above all: a throttle read too low would
    drop demand that is there. Output that is not squeue's JSON raises SlurmError naming it.

    `out`: the text, or its pieces as they come (the command's pipe: ClusterView._array_jobs): each job's record is
    decoded alone and dropped once read (json_stream), so a tenant's many arrays are never all held at once."""
    try:
        got, pending = _array_records(array_items((out,) if isinstance(out, str) else out, "jobs"))
    except (ValueError, RecursionError) as exc:   # nested past the parser's depth: not squeue's either
        raise SlurmError(f"squeue --json: not a list of jobs: {str(exc)[-200:]}") from None
    return {a: ArrayRecords(n, tuple(pending.get(a, ()))) for a, n in got.items()}


def _array_records(recs: Iterable) -> tuple[dict[str, int], dict[str, list[tuple[str, str]]]]:
    got: dict[str, int] = {}
    pending: dict[str, list[tuple[str, str]]] = {}
    for rec in recs:
        aid = _number(rec.get("array_job_id")) if isinstance(rec, dict) else None
        if not aid:
            continue
        n = max(0, _number(rec.get("array_max_tasks")) or 0)
        prev = got.get(str(aid))
        got[str(aid)] = n if prev is None else (0 if 0 in (prev, n) else max(prev, n))
        if _state(rec.get("job_state")) != "PENDING":
            continue
        task, spec = _number(rec.get("array_task_id")), rec.get("array_task_string")
        ids = str(task) if task is not None else (spec.split("%")[0] if isinstance(spec, str) else "")
        reason = rec.get("state_reason")
        if re.fullmatch(r"[0-9,:-]+", ids) and isinstance(reason, str):
            pending.setdefault(str(aid), []).append((ids, reason))
    return got, pending


# squeue's one line for the pending tasks of an array that share its record: 1_[3-10%3], 2_[0,4,8,40-42]. A task
# split off the record (an scontrol update or hold of one task) is printed in the same line (22.05): its reason joins
# the record's (Resources,JobHeldAdmin) and the %N is dropped (1_[1-10]); squeue --json tells them apart
# (split_records)
ARRAY_RECORD = re.compile(r"^(\d+)_\[([0-9,:-]+)(?:%(\d+))?\]$")
# the most pending array tasks of one tenant read as jobs each cycle (expand_arrays): the default of
# actuators.slurm.max_array_tasks
MAX_ARRAY_TASKS = 10_000


def _task_ranges(spec: str) -> list[range]:
    """An array record's task ids (1-5,7,9-20:2) as ranges, lowest first; a part that is none, none."""
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part)
        if m:
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) else lo
            out.append(range(lo, hi + 1, max(1, int(m.group(3) or 1))))
    return sorted(out, key=lambda r: r.start)


def _count(ranges: list[range]) -> int:
    return sum(max(0, (r.stop - r.start + r.step - 1) // r.step) for r in ranges)   # (len(): past 2**63)


def arrays_to_throttle(jobs: list[SlurmJob]) -> list[str]:
    """The arrays whose squeue --json the view reads (split_records, expand_arrays), from squeue's lines without -r:
    those whose record line has a task split off it (a reason of several, joined by ','), and those with two
    pending tasks or more that free GPUs could start and no throttle on their line (%N: none, or dropped when a task
    was split off). One pending task starts whenever any may (Slurm gives it JobArrayTaskLimit otherwise); a line
    with its %N needs nothing more."""
    count: dict[str, int] = {}
    known: set[str] = set()
    for j in jobs:
        if j.state != "PENDING":
            continue
        if m := ARRAY_RECORD.match(j.job_id):
            aid = m.group(1)
            if "," in j.reason:
                count[aid] = 2
            elif m.group(3):
                known.add(aid)
            elif reason_may_wait_for_gpus(j.reason):
                count[aid] = count.get(aid, 0) + min(2, _count(_task_ranges(m.group(2))))
        elif (m := ARRAY_TASK.match(j.job_id)) and reason_may_wait_for_gpus(j.reason):
            count[m.group(1)] = count.get(m.group(1), 0) + 1
    return sorted((a for a, c in count.items() if c > 1 and a not in known), key=int)


def split_records(jobs: list[SlurmJob], arrays: dict[str, ArrayRecords]) -> list[SlurmJob]:
    """squeue's record lines of the arrays squeue --json read (``arrays``: parse_arrays) as the records it names:
    the array's own (1_[1-4,6-10%3], its reason and its throttle) and each task split off it (1_5, its own reason),
    each keeping the line's id as `record` (the -O reads list them under it: by_id). squeue without -r prints them
    as one line (1_[1-10], Resources,JobHeldAdmin): one task held read as the whole array held, no demand, and the
    throttle lost. An array --json did not list pending is left as its line."""
    out: list[SlurmJob] = []
    done: set[str] = set()
    for j in jobs:
        m = ARRAY_RECORD.match(j.job_id)
        a = arrays.get(m.group(1)) if m else None
        if m is None or a is None or not a.pending:
            out.append(j)
            continue
        aid = m.group(1)
        if aid in done:   # (one line per array; were there more, --json's records are the array's all)
            continue
        done.add(aid)
        for ids, reason in a.pending:
            jid = f"{aid}_{ids}" if ids.isdigit() else f"{aid}_[{ids}" + (f"%{a.throttle}]" if a.throttle else "]")
            out.append(dataclasses.replace(j, job_id=jid, reason=reason, record=j.record or j.job_id))
    return out


def expand_arrays(jobs: list[SlurmJob], owner, limit: int = MAX_ARRAY_TASKS,
                  throttles: dict[str, int] | None = None) -> tuple[list[SlurmJob], dict[str, int]]:
    """The one rule for a job array's pending tasks. Jobs as squeue lists them without -r (after split_records):
    each array's pending record (1_[3-10%3]) becomes a job per task (1_3, 1_4, ..: what -r prints, `record` the
    line's id), and of an array throttled to N (%N on its line, else ``throttles``: squeue --json) at most N less
    its tasks not pending (running, suspended, completing) wait for GPUs, lowest ids first, its record's and its
    split-off tasks' (1_5) together (Slurm starts an array's tasks in order); a split-off task past that is given
    THROTTLED (waiting for the array's own tasks to end, not for GPUs: Slurm says so itself once N run, and gives
    every pending task Resources or Priority until then), a record's tasks past it are not made jobs. Of one tenant's
    (`owner`) records together no more than `limit` tasks are made jobs, its tasks waiting for GPUs first (a held
    array does not take its waiting one's place), and the waiting ones left out are returned ({record line: tasks
    left out}). squeue -r printed every task, a line each: a tenant's --array=0-999999 (MaxArraySize goes to
    4,000,001) was 119 MB from each of squeue's reads, 4.7 s of squeue and 33 s of parsing at 10^6 tasks per read on
    the test box, past the command timeout from about 2*10^6: every tenant's view stalled or failed for one tenant's
    array. Past `limit` a tenant's pending tasks are more GPUs than its share of a cluster's can hold."""
    throttle = dict(throttles or {})
    busy: dict[str, int] = {}
    split: dict[str, list[int]] = {}        # array -> its split-off pending tasks that may wait for GPUs
    records: dict[str, list[int]] = {}      # array -> the indices of its record lines that may wait
    idle: list[int] = []                    # record lines that do not wait for GPUs
    for i, j in enumerate(jobs):
        if m := ARRAY_RECORD.match(j.job_id):
            if m.group(3):
                throttle[m.group(1)] = int(m.group(3))
            (records.setdefault(m.group(1), []) if reason_may_wait_for_gpus(j.reason) else idle).append(i)
        elif m := ARRAY_TASK.match(j.job_id):
            if j.state != "PENDING":
                busy[m.group(1)] = busy.get(m.group(1), 0) + 1
            elif reason_may_wait_for_gpus(j.reason):
                split.setdefault(m.group(1), []).append(int(m.group(2)))
    used: dict[str, int] = {}
    made: dict[int, list[int]] = {}         # record line -> its task ids made jobs
    kept: set[tuple[str, int]] = set()      # split-off tasks within the throttle
    cut: dict[str, int] = {}
    for aid in dict.fromkeys([*(ARRAY_RECORD.match(jobs[i].job_id).group(1) for i in sorted(
            i for ix in records.values() for i in ix)), *split]):
        n = throttle.get(aid, 0)
        room = max(0, n - busy.get(aid, 0)) if n else None   # None: no throttle
        lines = records.get(aid, [])
        who = owner(jobs[lines[0]]) if lines else None
        ranges = {i: _task_ranges(ARRAY_RECORD.match(jobs[i].job_id).group(2)) for i in lines}
        own = sorted(split.get(aid, []))
        budget = max(0, limit - used.get(who, 0)) if lines else 0
        # lowest first: a line's ranges in order (squeue prints them sorted, apart), its lines and split tasks merged
        stream = heapq.merge(*(((k, i) for k in itertools.chain.from_iterable(ranges[i])) for i in lines),
                             ((k, -1) for k in own))
        taken = took = 0
        for k, i in stream:
            if room is not None and taken >= room:
                break
            if i >= 0 and took >= budget:   # the tenant's bound: its split-off tasks still count, they are listed
                rest = [x for x in own if x > k]
                kept.update((aid, x) for x in rest[:None if room is None else room - taken])
                break
            if i < 0:
                kept.add((aid, k))
            else:
                made.setdefault(i, []).append(k)
                took += 1
            taken += 1
        if lines:
            used[who] = used.get(who, 0) + took
            total = sum(_count(r) for r in ranges.values())
            want = total if room is None else min(total, max(0, room - sum(1 for x in own if (aid, x) in kept)))
            if want > took:
                cut[jobs[lines[0]].record or jobs[lines[0]].job_id] = want - took
    for i in idle:   # tasks that do not wait for GPUs (held, a dependency, ...): what the bound leaves, up to %N
        m = ARRAY_RECORD.match(jobs[i].job_id)
        who, n = owner(jobs[i]), throttle.get(m.group(1), 0)
        want = max(0, limit - used.get(who, 0)) if not n else min(n, max(0, limit - used.get(who, 0)))
        ids: list[int] = []
        for r in _task_ranges(m.group(2)):
            if len(ids) >= want:
                break
            ids.extend(r[:want - len(ids)])
        made[i] = ids
        used[who] = used.get(who, 0) + len(ids)
    out: list[SlurmJob] = []
    for i, j in enumerate(jobs):
        if m := ARRAY_RECORD.match(j.job_id):
            out.extend(dataclasses.replace(j, job_id=f"{m.group(1)}_{k}", record=j.record or j.job_id)
                       for k in made.get(i, []))
        elif (m := ARRAY_TASK.match(j.job_id)) and j.state == "PENDING" and reason_may_wait_for_gpus(j.reason) \
                and (m.group(1), int(m.group(2))) not in kept:
            out.append(dataclasses.replace(j, reason=THROTTLED))
        else:
            out.append(j)
    return out, cut


def whole_job(jid: str) -> str:
    """The id Slurm requeues or suspends a job by: a heterogeneous job's component (123+1, as squeue prints it) by
    its job's (123), which acts on every component. slurmctld refuses the component's own ('Invalid job id
    specified' for a requeue, 'Operation not permitted on individual component of heterogeneous job' for a
    suspend; 22.05), so a tenant's low work submitted as a hetjob was never preempted: refused every cycle."""
    return jid.split("+", 1)[0]


def whole_jobs(job_ids) -> str:
    """`job_ids` as one scontrol list of whole jobs (whole_job), each once."""
    return ",".join(dict.fromkeys(whole_job(j) for j in job_ids))


def by_id(got: dict, job: SlurmJob, default=None):
    """A per-job value read by squeue -O (without -r): under the job's id, or a pending array task's under its
    array's record line (expand_arrays)."""
    if job.job_id in got:
        return got[job.job_id]
    return got.get(job.record, default) if job.record else default


# node states (sinfo %T, lower case) in which Slurm itself sees a node as failed; a trailing '*' is NOT_RESPONDING
FAILED_NODE_STATES = ("down", "drain", "fail", "not_responding")


def parse_squeue(out: str) -> list[SlurmJob]:
    """squeue -h -o SQUEUE_FMT's lines as jobs (lines of 9 fields or more: older callers ask for fewer). A line that is
    not one (a wrapper's message on stdout, a cut line, a field that is not its kind) raises SlurmError naming the
    line and the field: skipped, it was a job missing from the view, and the view bounds every tenant's demand, so
    output that was all garbage read as no job at all, every tenant's demand capped to 0."""
    jobs = []
    width = len(SQUEUE_FMT.split("|"))
    for n, line in enumerate(out.splitlines(), 1):
        if not line.strip():
            continue
        f = line.split("|")
        if not 9 <= len(f) <= width:
            raise SlurmError(f"squeue: line {n} has {len(f)} fields, not {width} ({SQUEUE_FMT}): {line[:120]!r}")
        try:
            elapsed = parse_elapsed(f[6])
        except ValueError:
            raise SlurmError(f"squeue: line {n}: %M (elapsed) is {f[6][:40]!r}, "
                             "not [days-][hours:]minutes:seconds") from None
        try:
            limit = parse_time_limit(f[13]) if len(f) > 13 else float("nan")
        except ValueError:
            raise SlurmError(f"squeue: line {n}: %l (time limit) is {f[13][:40]!r}, not a duration") from None
        jobs.append(SlurmJob(f[0].strip(), f[1].strip(), f[2].strip(), f[3].strip(), f[4].strip(), f[5].strip(),
                             elapsed, parse_node_gpus(f[7]), f[8].strip(),
                             parse_submit(f[9]) if len(f) > 9 else float("nan"),
                             f[10].strip() if len(f) > 10 and f[10].strip() != "(null)" else "",
                             int(f[11]) if len(f) > 11 and f[11].strip().isdigit() else 1,
                             parse_submit(f[12]) if len(f) > 12 else float("nan"),
                             limit))
    return jobs


def parse_job_gpus(out: str) -> dict[str, int]:
    """squeue -h -O JOB_GPUS_FMT's lines as {job id as %i prints it: GPUs the whole job asks for}: its tres-per-job
    (--gpus), else its tres-per-task (--gpus-per-task) times its tasks, else its tres-per-socket (--gpus-per-socket)
    times its sockets per node times its nodes (lines of the first four fields only: no per-socket). Jobs asking for
    none are left out. A line that is not its format raises SlurmError naming it (as parse_squeue): read as 0, such a
    job's GPUs were nobody's."""
    got: dict[str, int] = {}
    for n, line in enumerate(out.splitlines(), 1):
        if not line.strip():
            continue
        f = [x.strip() for x in line.split(";")]
        if len(f) < 4 or not f[0]:
            raise SlurmError(f"squeue: line {n} is not {JOB_GPUS_FMT}: {line[:120]!r}")
        per_job, per_task = parse_gpus(f[1]), parse_gpus(f[2])
        if per_task and not f[3].isdigit():
            raise SlurmError(f"squeue: line {n}: NumTasks is {f[3][:40]!r}, not a count of tasks")
        total = max(per_job, per_task * int(f[3]) if per_task else 0)
        per_socket = parse_gpus(f[4]) if len(f) > 4 else 0
        if per_socket and not total:
            if len(f) < 7 or not f[5].isdigit() or not f[6].isdigit():
                raise SlurmError(f"squeue: line {n}: --gpus-per-socket with Sockets {f[5:6]!r} and NumNodes "
                                 f"{f[6:7]!r}, not counts")
            total = per_socket * int(f[5]) * max(1, int(f[6]))
        if total:
            got[f[0]] = total
    return got


def spread_jobs(out: str) -> set[str]:
    """The ids of squeue -h -O JOB_GPUS_FMT's lines (parse_job_gpus read them first) whose GPUs are asked for the
    whole job (--gpus, tres-per-job): Slurm spreads those over the job's nodes at least one each, as many as free on
    the first (cons_tres' gres_select_filter), where --gpus-per-task and --gpus-per-socket follow tasks and sockets."""
    return {f[0] for f in (x.split(";") for x in out.splitlines()) if len(f) > 1 and f[0].strip()
            and parse_gpus(f[1].strip())}
