"""The noise of one replay (pure): the workload changed by next to nothing, to replay a setting once more on it.

A replay is chaotic: where a job lands, which job a preemption picks and when decide what the rest of the window
does, so a change that asks for next to nothing still moves every figure, and how far is how far apart two replays
of the same setting can land for reasons that have nothing to do with the setting (bench/windows_bench.py measures
the same with a "null window"). On a user's history (3 tenants, 160 GPUs, 3 days of 1-minute steps) one value held
at one step, or one `n/a` in the file, moved reactive's high-tier unmet from 245 to 297 GPU-minutes (+21%): a
history is only known to within such a change, so a difference between two settings smaller than what one such
change moves is not one this history can tell.

The change here (``nudged``): one more job of one tenant, for one step, at the replayed window's first step. It is
in the input, so every strategy sees it alike, and it changes no physics and reads no future: the forecaster sees
that step as any other once it is history. Its own weight is one job's GPUs for one step; the tenant is the one of
the lowest tier with the most demand at that step (a job of it asks the least of the high tier, and of a tenant
with running jobs the one the next step ends is its oldest, not the new one: the jobs and their nodes differ from
there on). Inference services' columns are left alone (their replicas follow their request rates).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from daemon.sim.workloads import Workload

_TIER_RANK = {"low": 0, "normal": 1, "high": 2}


@dataclass(frozen=True)
class Nudge:
    """What ``nudged`` changed: ``gpus`` more GPUs of ``tenant`` at step ``step`` (the window's first), ``at``."""
    tenant: str
    tier: str
    gpus: int
    step: int
    at: str

    def text(self) -> str:
        return (f"one more {self.gpus}-GPU job of {self.tenant} ({self.tier} tier) for one step, at the window's "
                f"first step ({self.at})")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "text": self.text()}


def nudged(w: Workload) -> tuple[Workload, Nudge] | None:
    """The workload with one more job of one tenant at the replayed window's first step (the module docstring), and
    what changed; None where no tenant's demand is known at that step (every column a service or a gap there)."""
    t = w.start
    row = w.demand.iloc[t].to_numpy(dtype=float)
    services = set(w.inference or ())
    cols = [str(c) for c in w.demand.columns]
    ok = [i for i, c in enumerate(cols) if c not in services and np.isfinite(row[i])]
    if not ok:
        return None
    i = min(ok, key=lambda j: (row[j] <= 0, _TIER_RANK.get(str(w.tiers[j]), 1), -row[j], j))
    gpus = int(w.job_gpus[i])
    demand = w.demand.copy()
    # ceil((d + g) / g) = ceil(d / g) + 1: exactly one more job of the tenant's size, whatever its demand was
    demand.iloc[t, i] = row[i] + gpus
    return (dataclasses.replace(w, demand=demand),
            Nudge(tenant=cols[i], tier=str(w.tiers[i]), gpus=gpus, step=int(t), at=str(w.demand.index[t])))


__all__ = ["Nudge", "nudged"]
