"""Anti-starvation that holds: cumulative wait across requeues, and a grace period for what aging started.

Schedulers report how long a job has waited since it was last queued; a requeue (a preemption, a node
failure) restarts that clock. Aging here adds up every queue stint of a job instead, carried in the
policy's memory from cycle to cycle (state in, state out, no I/O): the wait of the stint a job just
left is banked when it is seen running, and added back if it is queued again.

A job that was over ``max_wait`` while it waited (it "started through aging") is exempt from
preemption until it has run ``aging_min_run_s``: otherwise it is the next cycle's cheapest victim and
the requeue resets its wait, so the tenant starves anyway. Once it has run that long it has had its
due: its banked wait is cleared, so aging buys progress, not a permanent place ahead of the high tier.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from daemon.policy.state import PRIORITY, Jobs
from daemon.policy.types import Notification
from daemon.text import plural


@dataclass(frozen=True)
class Aging:
    total_wait_s: np.ndarray   # per job: all its queue stints so far (pending low-priority jobs; 0 otherwise)
    exempt: np.ndarray         # per job: started through aging and younger than aging_min_run_s
    waited: dict[str, float]   # memory out: banked wait of earlier stints, per live low-priority job
    stint: dict[str, float]    # memory out: wait of the current stint, per pending low-priority job
    aged_jobs: dict[str, str]  # memory out: job id -> when it first went over max_wait


def age(jobs: Jobs, waited: dict[str, float], stint: dict[str, float], aged_jobs: dict[str, str],
        max_wait_s: float, min_run_s: float, now_iso: str, since_s: float = float("inf")) -> Aging:
    """``since_s``: seconds since the previous plan (inf when unknown). Only jobs that started within it can
    have left a queue stint to bank, and only jobs younger than ``min_run_s`` can be in their grace period, so
    the per-job lookups touch those few jobs, not every running one."""
    n = len(jobs)
    total = np.zeros(n)
    exempt = np.zeros(n, dtype=bool)
    low = np.flatnonzero(jobs.priority != PRIORITY["high"]) if n else np.zeros(0, dtype=np.int64)
    if low.size == 0:
        return Aging(total, exempt, {}, {}, {})
    run = jobs.running[low]
    rt = jobs.runtime_s[low]
    pend = np.flatnonzero(~run)
    pend_ids = jobs.ids[low[pend]].tolist()
    wait_now = jobs.wait_s[low[pend]].astype(float)
    banked_p = np.array([waited.get(j, 0.0) for j in pend_ids]) if waited else np.zeros(pend.size)
    tot = banked_p + wait_now
    total[low[pend]] = tot
    out_waited: dict[str, float] = {}
    if waited:  # carry the banked wait of live jobs (a later requeue adds to it)
        alive = set(jobs.ids[low].tolist())
        out_waited = {j: v for j, v in waited.items() if j in alive}
    # started since the last plan: bank the stint it left
    fresh = np.flatnonzero(run & (rt <= since_s + 120.0)) if stint else np.zeros(0, dtype=np.int64)
    for j in jobs.ids[low[fresh]].tolist():
        if j in stint:
            out_waited[j] = out_waited.get(j, 0.0) + stint[j]
    new_aged = {j: aged_jobs.get(j, now_iso) for j, o in zip(pend_ids, (tot >= max_wait_s).tolist()) if o}
    # started through aging: exempt while younger than min_run_s; after that it has had its due and its
    # wait starts from zero again
    if aged_jobs:
        young = np.flatnonzero(run & (rt < min_run_s))
        young_pos = dict(zip(jobs.ids[low[young]].tolist(), low[young].tolist()))
        for j, since in aged_jobs.items():
            if j in young_pos:
                exempt[young_pos[j]] = True
                new_aged[j] = since
            elif j not in new_aged:      # not queued: it ran its grace period (or is gone)
                out_waited.pop(j, None)
    return Aging(total, exempt, out_waited, dict(zip(pend_ids, wait_now.tolist())), new_aged)


@dataclass(frozen=True)
class Admission:
    gpus: np.ndarray      # per tenant: GPUs of the aged job admitted for it this cycle (0: none)
    job: np.ndarray       # per tenant: index of that job in ``jobs`` (-1: none)
    in_grace: np.ndarray  # per tenant: GPUs of its running jobs that aging started (still in their grace period)
    waiting: int          # tenants with a job over max_wait that were not admitted (the bound held them back)


def admit(ag: Aging, jobs: Jobs, n_tenants: int, eligible: np.ndarray, max_wait_s: float, room: int,
          size: np.ndarray | None = None) -> Admission:
    """Bounded aged admission: which waiting jobs go ahead of the high tier's borrowing and of normal work.

    At most one job per starving tenant at a time: a tenant whose aged job is still running its grace period
    gets no second one, so one tenant's backlog cannot take the cluster. Across tenants, the longest wait
    goes first, and aged work (running in its grace period plus admitted) stays within ``room`` GPUs; the
    longest waiter is admitted even when its job alone is larger, so the bound delays nobody for ever.
    ``eligible``: per tenant, may age (not the high tier). ``size`` (per job; default its GPUs): what admitting a
    waiting job takes, counted against ``room`` and returned in ``gpus``: the whole nodes of its hold for a Slurm -N
    job (reservation.job_footprint), which a -N 4 --gres=gpu:4 job's 16 GPUs alone put at half of what is held (32).
    """
    n = n_tenants
    gpus, job = np.zeros(n), np.full(n, -1, dtype=np.int64)
    in_grace = np.bincount(jobs.tenant[ag.exempt], weights=jobs.gpus[ag.exempt], minlength=n) if ag.exempt.any() \
        else np.zeros(n)
    over = np.flatnonzero((ag.total_wait_s >= max_wait_s) & eligible[jobs.tenant]) if len(jobs) else \
        np.zeros(0, dtype=np.int64)
    over = over[in_grace[jobs.tenant[over]] == 0]
    if over.size == 0:
        return Admission(gpus, job, in_grace, 0)
    # each tenant's longest-waiting job, then tenants by that wait (longest first)
    o = over[np.lexsort((-ag.total_wait_s[over], jobs.tenant[over]))]
    ten = jobs.tenant[o]
    first = o[np.r_[True, ten[1:] != ten[:-1]]]
    first = first[np.argsort(-ag.total_wait_s[first], kind="stable")]
    g = (jobs.gpus if size is None else size)[first].astype(float)
    left = room - float(in_grace.sum())
    fits = np.cumsum(g) <= left
    if not in_grace.any():
        fits[0] = True                   # nothing aged runs: the longest waiter goes, whatever its size
    stop = np.flatnonzero(~fits)         # a prefix: nobody overtakes a longer waiter that does not fit yet
    k = int(stop[0]) if stop.size else first.size
    took = first[:k]
    job[jobs.tenant[took]] = took
    gpus[jobs.tenant[took]] = g[:k]
    return Admission(gpus, job, in_grace, int(first.size - k))


def protected_notices(aged_since: dict[str, str], told: dict[str, str], max_wait_steps: int,
                      min_run_s: float) -> list[Notification]:
    """Tell a tenant once, when aging starts protecting it (`aged_since`: the tenants aging protects now; `told`:
    those it already protected last cycle, PolicyMemory.aged_since), and for how long: the hold lasts until the job
    starts and the grace period covers that job alone (its other jobs may be preempted the next minute, and were on
    `make run`)."""
    return [Notification(t, "protected", f"a job waited over {plural(max_wait_steps, 'step')}: it is held for "
                                         "ahead of normal work and of the high tier beyond its "
                                         f"guarantee, and once started not preempted for {min_run_s:g}s (that job "
                                         "only: other jobs of the tenant stay preemptible)")
            for t in aged_since if t not in told]
