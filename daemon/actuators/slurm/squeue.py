"""What squeue says about Slurm's jobs: its output format parsed into SlurmJob, Slurm's durations, times and
GPU counts, and whether a pending job waits for GPUs (and not for a limit GPUs cannot lift)."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass

import numpy as np

from daemon.actuators.slurm.gres import SHARING_KINDS, gres_entries, gres_gpus

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
    """A pending reason (%r) that free GPUs can end (BeginTime too: waits_for_gpus decides it by its time)."""
    reason = reason.strip().strip("()")
    return (reason not in NOT_WAITING_FOR_GPUS and not reason.startswith(NOT_WAITING_PREFIXES)
            and "held" not in reason.lower())


# squeue -r's id of one task of a job array: <array job id>_<task id> (without -r a pending array's tasks are one
# line, 1_[3-10%3], which read as one job was one task's GPUs where all of them wait)
ARRAY_TASK = re.compile(r"^(\d+)_(\d+)$")
THROTTLED = "JobArrayTaskLimit"   # Slurm's reason for an array's tasks waiting on its %N (NOT_WAITING_FOR_GPUS)


def _number(v) -> int | None:
    """A count in squeue --json: a number (22.05) or {"set": .., "number": ..} (later versions)."""
    if isinstance(v, dict):
        v = v.get("number") if v.get("set", True) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_array_throttles(out: str) -> dict[str, int]:
    """``squeue --json``'s records as {array job id: the most of its tasks Slurm runs at once (--array=..%N), 0 for
    no limit}. Every record of an array carries it (array_max_tasks); where they differ the largest counts and 0
    (none) above all, and an array none names is left out (no limit known): a throttle read too low would drop
    demand that is there. Output that is not squeue's JSON raises SlurmError naming it."""
    try:
        recs = json.loads(out).get("jobs")
    except (ValueError, AttributeError, RecursionError):   # nested past the parser's depth: not squeue's either
        recs = None
    if not isinstance(recs, list):
        raise SlurmError(f"squeue --json: not a list of jobs: {out[:120]!r}")
    got: dict[str, int] = {}
    for rec in recs:
        aid = _number(rec.get("array_job_id")) if isinstance(rec, dict) else None
        if not aid:
            continue
        n = max(0, _number(rec.get("array_max_tasks")) or 0)
        prev = got.get(str(aid))
        got[str(aid)] = n if prev is None else (0 if 0 in (prev, n) else max(prev, n))
    return got


# squeue's one line for the pending tasks of an array that share its record: 1_[3-10%3], 2_[0,4,8,40-42]
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


def expand_arrays(jobs: list[SlurmJob], owner, limit: int = MAX_ARRAY_TASKS) -> tuple[list[SlurmJob], dict[str, int]]:
    """Jobs as squeue lists them without -r, each array's combined pending record (1_[3-10%3]) one job per task
    (1_3, 1_4, ..: what -r prints, `record` the combined id), lowest task ids first (Slurm starts an array's tasks in
    order): of a throttled one (%N) the first N (no more start while GPUs free up: throttle_arrays), and of one
    tenant's (`owner`) records together no more than `limit` tasks; the others' count is returned ({record: tasks
    left out}). squeue -r printed every task, a line each: a tenant's --array=0-999999 (MaxArraySize goes to
    4,000,001) was 119 MB from each of squeue's reads, 4.7 s of squeue and 33 s of parsing at 10^6 tasks per read
    on the test box, past the command timeout from about 2*10^6: every tenant's view stalled or failed for one
    tenant's array. Past `limit` a tenant's pending tasks are more GPUs than its share of a cluster's can hold."""
    out: list[SlurmJob] = []
    used: dict[str, int] = {}
    cut: dict[str, int] = {}
    for j in jobs:
        m = ARRAY_RECORD.match(j.job_id)
        if not m:
            out.append(j)
            continue
        who = owner(j)
        ranges = _task_ranges(m.group(2))
        throttle = int(m.group(3)) if m.group(3) else 0
        room = max(0, limit - used.get(who, 0))
        want = min(throttle, room) if throttle else room
        ids: list[int] = []
        for r in ranges:
            if len(ids) >= want:
                break
            ids.extend(r[:want - len(ids)])
        used[who] = used.get(who, 0) + len(ids)
        total = sum(max(0, (r.stop - r.start + r.step - 1) // r.step) for r in ranges)   # (len(): past 2**63)
        if len(ids) < min(total, throttle or total):
            cut[j.job_id] = min(total, throttle or total) - len(ids)
        out.extend(dataclasses.replace(j, job_id=f"{m.group(1)}_{k}", record=j.job_id) for k in ids)
    return out, cut


def by_id(got: dict, job: SlurmJob, default=None):
    """A per-job value read by squeue -O (without -r): under the job's id, or a pending array task's under its
    array's combined record (expand_arrays)."""
    if job.job_id in got:
        return got[job.job_id]
    return got.get(job.record, default) if job.record else default


def throttle_arrays(jobs: list[SlurmJob], throttles: dict[str, int]) -> list[SlurmJob]:
    """Jobs as jobs() lists them (each array task a job: expand_arrays), each pending task of an array past what
    Slurm starts at once given the reason JobArrayTaskLimit (not demand): of an array run at most N at a time
    (``throttles``: parse_array_throttles), N less its tasks not pending (running, suspended, completing) may
    start when GPUs free up, the lowest task ids first (Slurm starts an array's tasks in order); the others wait for
    the array's own tasks to end, not for GPUs.
    Slurm says so itself once N run; until then it gives every pending task Resources or Priority, and read as
    such, a 100-task %10 array was demand for 100 tasks where free GPUs start 10."""
    pending: dict[str, list[tuple[int, int]]] = {}
    busy: dict[str, int] = {}
    for i, j in enumerate(jobs):
        m = ARRAY_TASK.match(j.job_id)
        if not m:
            continue
        if j.state != "PENDING":
            busy[m.group(1)] = busy.get(m.group(1), 0) + 1
        elif reason_may_wait_for_gpus(j.reason):
            pending.setdefault(m.group(1), []).append((int(m.group(2)), i))
    out = list(jobs)
    for aid, tasks in pending.items():
        n = throttles.get(aid, 0)
        if n:
            for _, i in sorted(tasks)[max(0, n - busy.get(aid, 0)):]:
                out[i] = dataclasses.replace(out[i], reason=THROTTLED)
    return out


def arrays_to_throttle(jobs: list[SlurmJob]) -> list[str]:
    """The arrays whose throttle counts (throttle_arrays): those with two pending tasks or more that free GPUs could
    start (one pending task starts whenever any may: Slurm gives it JobArrayTaskLimit otherwise)."""
    count: dict[str, int] = {}
    for j in jobs:
        m = ARRAY_TASK.match(j.job_id)
        if m and j.state == "PENDING" and reason_may_wait_for_gpus(j.reason):
            count[m.group(1)] = count.get(m.group(1), 0) + 1
    return sorted((a for a, c in count.items() if c > 1), key=int)


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
