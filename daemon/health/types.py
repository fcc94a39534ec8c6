"""What the health detectors read and what they find.

Telemetry arrives per GPU on the cycle's step grid (`GpuTrace`): one row per (job, node, GPU) with the DCGM
exporter's activity, framebuffer used/free and last-XID gauges, NaN where Prometheus had no sample. A `Finding`
is one job's problem with its evidence (the job, its GPUs, the window and the numbers), so what is told to the
tenant, shown on the console and acted on can be checked by a person against Prometheus.

Pure data: numpy only, no I/O; the source (daemon/sources/job_telemetry.py) builds these, the detectors
(daemon/health/detect.py) read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

Kind = Literal["idle", "memory_leak", "hung", "gpu_error", "app_xid"]
Scheduler = Literal["slurm", "kubernetes"]


@dataclass(frozen=True, eq=False)
class GpuTrace:
    """One GPU of one job on the step grid. Activity is a share (0..1); framebuffer in MiB; xid the last XID
    the exporter saw (0: none). NaN: no sample at that step (missing, never zero)."""

    job: str                 # Slurm job id (hpc_job label) or "namespace/pod" (Kubernetes)
    scheduler: Scheduler
    tenant: str | None       # the namespace on Kubernetes; on Slurm the scheduler knows (None here)
    host: str
    gpu: str
    activity: np.ndarray
    fb_used: np.ndarray
    fb_free: np.ndarray
    xid: np.ndarray

    @property
    def key(self) -> tuple[str, str]:
        return self.host, self.gpu


@dataclass(frozen=True, eq=False)
class Telemetry:
    """Every job's GPUs over one window: `n` steps of `step_s` seconds, the last at `end` (unix seconds).

    `rejected` maps a job to why its telemetry cannot be trusted (NaN or negative activity, a GPU claimed by
    two jobs): such a job gets no finding and nothing acts on it; the reason is reported instead.
    """

    end: float
    step_s: float
    n: int
    gpus: tuple[GpuTrace, ...]
    rejected: dict[str, str] = field(default_factory=dict)
    activity_field: str = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

    def times(self) -> np.ndarray:
        return self.end - self.step_s * np.arange(self.n - 1, -1, -1, dtype=float)

    def by_job(self) -> dict[str, list[GpuTrace]]:
        out: dict[str, list[GpuTrace]] = {}
        for g in self.gpus:
            out.setdefault(g.job, []).append(g)
        return out


@dataclass(frozen=True)
class Finding:
    """One job's problem, with the evidence a person can check.

    `since` and `until` are the window the numbers were measured over (unix seconds); `minutes` how long the
    condition has held (idle, hung) or the window a leak was fitted on; `numbers` the measured values (mean
    activity, framebuffer share, slope, XID, ...), all plain floats so they go to JSON and the console as is.
    """

    kind: Kind
    job: str
    scheduler: Scheduler
    tenant: str | None
    gpus: tuple[str, ...]          # "host:gpu" of each GPU the finding covers
    since: float
    until: float
    minutes: float
    numbers: dict[str, float]
    summary: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "job": self.job, "scheduler": self.scheduler, "tenant": self.tenant,
                "gpus": list(self.gpus), "since": self.since, "until": self.until, "minutes": self.minutes,
                "numbers": dict(self.numbers), "summary": self.summary}


@dataclass(frozen=True)
class JobStatus:
    """Every job seen this cycle, found or not: `state` is ok | no_data | rejected | partial (its telemetry does
    not cover exactly its allocated GPUs on its nodes: reported, never acted on), with why."""

    job: str
    scheduler: Scheduler
    tenant: str | None
    gpus: int
    state: Literal["ok", "no_data", "rejected", "partial"]
    why: str = ""
    idle_gpus: int = 0             # GPUs of this job idle past the idle threshold now
    busy_share: float | None = None  # mean activity over its GPUs at the newest step (None: no data)
    names: tuple[str, ...] = ()    # "host:gpu" of every GPU seen for the job
