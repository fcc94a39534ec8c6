"""The AdminComment the daemon writes on a Slurm job: its reason (COMMENT_TAG) and its start estimate
(ETA_TAG), each replacing only its own earlier part, and the comments read back from squeue --json."""

from __future__ import annotations

import json
import math
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from daemon.actuators.base import in_turn
from daemon.actuators.slurm.json_stream import array_items
from daemon.actuators.slurm.squeue import JSON_IDS_MAX, SlurmError
from daemon.actuators.slurm.visibility import ALL_JOBS

COMMENT_TAG = "gpu-autoscaler:"
# the start estimate's own part of the AdminComment (not COMMENT_TAG: a reason written later keeps it, and it
# replaces only its own earlier part): "gpu-autoscaler-eta: p50=2026-01-05T10:20Z p90=2026-01-05T11:05Z
# slurm=2026-01-05T10:40Z", each value a UTC time to the minute or "unknown"; slurm= only when squeue --start has one
ETA_TAG = "gpu-autoscaler-eta:"


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
    return _comments_of(data["jobs"], None)


def _comments_of(jobs: Iterable, wanted: set[str] | None) -> dict[str, str]:
    """Job id -> AdminComment of squeue --json's `jobs` (admin_comments_of's ids), only those in `wanted` (None:
    all)."""
    out: dict[str, str] = {}
    for j in jobs:
        if not isinstance(j, dict) or j.get("job_id") is None:
            continue
        text = j.get("admin_comment") or ""
        ids = [str(j["job_id"])]
        if j.get("array_task_id") is not None and j.get("array_job_id"):
            ids.append(f"{j['array_job_id']}_{j['array_task_id']}")
        if j.get("het_job_id"):
            ids.append(f"{j['het_job_id']}+{j.get('het_job_offset', 0)}")
        for k in ids:
            if wanted is None or k in wanted:
                out[k] = text
    return out


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


class AdminComments:
    """The AdminComment of a batch's jobs, read once per batch (on first need) with `squeue --json` (see
    admin_comments_of); a failed read is remembered for the batch, so a controller that does not answer is
    not asked again per job. A job Slurm does not list has none.

    Read as it comes (`read_streamed`: SlurmActuator._read_streamed, json_stream), each job's record decoded alone
    and only the batch's comments kept: Slurm 22.05 prints every job's JSON (~3 KB each) whatever -j names, and a
    batch of two jobs held all of it, text and parsed, beside a tenant's 10^5 pending jobs. -j names the batch while
    its ids fit one argument (JSON_IDS_MAX; Linux's cap is 128 KiB), else every job is read."""

    def __init__(self, read_streamed: Callable[..., Any], job_ids: list[str]) -> None:
        self.read_streamed = read_streamed   # read_streamed(parse, *args) -> parse(stdout's pieces); SlurmError
        self.job_ids = list(job_ids)
        self._known: dict[str, str] | None = None
        self._failed: SlurmError | None = None

    def of(self, job_id: str) -> str:
        if self._failed is not None:
            raise self._failed
        if self._known is None:
            try:
                self._known = self._read(self.job_ids or [job_id])
            except SlurmError as exc:
                self._failed = exc
                raise
        return self._known.get(job_id, "")

    def _read(self, job_ids: list[str]) -> dict[str, str]:
        wanted = set(job_ids)

        def parse(chunks: Iterable[str]) -> dict[str, str]:
            try:
                return _comments_of(array_items(chunks, "jobs"), wanted)
            except (ValueError, RecursionError) as exc:   # nested past the parser's depth: not squeue's either
                raise SlurmError(f"squeue --json: unreadable output: {str(exc)[-200:]}") from None

        ids = ",".join(job_ids)
        try:
            return self.read_streamed(parse, "squeue", "--json", ALL_JOBS,
                                      *(("-j", ids) if len(ids) <= JSON_IDS_MAX else ()))
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return {}   # a Slurm that honours -j with --json: none of them is queued any more
            raise


Estimate = Sequence[float | None]   # (p50, p90, Slurm's own) epoch times of a job's start estimate


def _off_by(old: Estimate | None, new: Estimate) -> float:
    """How far the estimate a job shows is from the new one: inf where it shows none of ours (never written by
    this replica in this term) or a side became known or unknown, else the largest move of a side, in seconds."""
    if old is None:
        return math.inf
    worst = 0.0
    for a, b in zip(old, new):
        if (a is None) != (b is None):
            return math.inf
        if a is not None and b is not None:
            worst = max(worst, abs(a - b))
    return worst


def eta_writes_in_turn(changed: Sequence[str], want: Mapping[str, Estimate], written: Mapping[str, Estimate],
                       account_of: Mapping[str, str], most: int) -> list[str]:
    """Up to `most` of the `changed` jobs' estimates to write this cycle (each one fenced `scontrol update`), the
    accounts taken in turn: one job of each account, then a second of each, ...; so a tenant's flood of pending jobs
    costs the other tenants' jobs no more than one turn each. Within an account the furthest off first (_off_by: a
    job that shows none of ours, or a side that became known or unknown, then the most moved), then the soonest
    p50 (the estimate its owner needs first), then the lowest job id (the longest waiting). The accounts go in the
    order of their first job by the same key. The rest stay changed (their written estimate untouched) and are
    taken in later cycles."""
    def key(jid: str) -> tuple:
        p50 = want[jid][0]
        return (-_off_by(written.get(jid), want[jid]), math.inf if p50 is None else p50, len(jid), jid)

    by_account: dict[str, list[str]] = {}
    for jid in sorted(changed, key=key):
        by_account.setdefault(account_of.get(jid, ""), []).append(jid)
    return in_turn(sorted(by_account.values(), key=lambda q: key(q[0])), most)
