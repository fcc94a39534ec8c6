"""The preemption budget as a token bucket in time, not per cycle.

``preempt_budget_share`` of the cluster's GPUs and ``preempt_budget_jobs`` jobs refill every
``preempt_budget_window_s`` seconds; the bucket holds at most one window's worth. However cycles are
triggered (the schedule, alerts, an operator), no more is preempted than the budget allows per unit of
time. The clock is an input: wall-clock seconds in the daemon, the snapshot's (simulated) time in the
replay. Pure: the bucket's level and time come in from the memory and go out with the plan.
"""

from __future__ import annotations

import math


def refill(level_gpus: float | None, level_jobs: float | None, at: float | None, now: float, capacity: int,
           share: float, jobs: int, window_s: float) -> tuple[float, float]:
    """(GPUs, jobs) available now. A bucket never used starts full; a clock that went back refills nothing."""
    cap_g, cap_j = share * capacity, float(jobs)
    if level_gpus is None or level_jobs is None or at is None or not math.isfinite(at):
        return cap_g, cap_j
    if now <= at:
        return min(cap_g, level_gpus), min(cap_j, level_jobs)
    frac = (now - at) / window_s
    return min(cap_g, level_gpus + frac * cap_g), min(cap_j, level_jobs + frac * cap_j)
