"""The job-health config section: which telemetry marks a job idle, hung or leaking, and what is done about
it per tier."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from daemon.config.models_base import Tier
from gateway.configfile import Strict as _Strict

HealthAction = Literal["report", "requeue"]


HEALTH_QUERIES = ("activity", "fb_used", "fb_free", "xid")
HEALTH_MAX_STEPS = 11_000   # points Prometheus returns per series in one range query


def _default_idle_actions() -> dict[Tier, HealthAction]:
    return {"high": "report", "normal": "report", "low": "requeue"}


class HealthConfig(_Strict):
    """Per-job GPU health (daemon/health/, docs/health.md): idle, hung, leaking and erroring jobs found from the
    DCGM exporter's per-GPU series with their job labels, told to the tenant, and reclaimed by policy."""

    enabled: bool = Field(False, description="read per-job GPU telemetry each cycle, publish findings (metrics, "
                          "console, API) and act on them as configured; needs source.kind = prometheus")
    activity_query: str = Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE{$exporter} or DCGM_FI_DEV_GPU_UTIL{$exporter} / 100",
                                description="PromQL: per-GPU activity as a share 0..1 with the exporter's job "
                                "labels (graphics engine active, falling back to GPU_UTIL in percent / 100); "
                                "$exporter is replaced by source.prometheus.exporter_selector; with the recording "
                                "rules: "
                                "gpuas:job_gpu_activity:ratio{$exporter}")
    fb_used_query: str = Field("DCGM_FI_DEV_FB_USED{$exporter}", description="PromQL: per-GPU framebuffer used (MiB)")
    fb_free_query: str = Field("DCGM_FI_DEV_FB_FREE{$exporter}", description="PromQL: per-GPU framebuffer free (MiB)")
    xid_query: str = Field("DCGM_FI_DEV_XID_ERRORS{$exporter}", description="PromQL: per-GPU last XID (a gauge "
                           "holding the last XID code, not a count)")
    slurm_job_label: str = Field("hpc_job", min_length=1, description="label naming the Slurm job (the exporter's "
                                 "--hpc-job-mapping-dir)")
    pod_label: str = Field("pod", min_length=1, description="label naming the Kubernetes pod")
    namespace_label: str = Field("namespace", min_length=1, description="label naming the pod's namespace")
    host_label: str = Field("Hostname", min_length=1, description="label naming the GPU's node")
    gpu_label: str = Field("gpu", min_length=1, description="label naming the GPU on its node (index)")
    max_gap_s: float = Field(120.0, ge=0, description="missing samples add no idle time; a gap longer than this "
                             "ends an idle (or hung) run")
    idle_activity_max: float = Field(0.05, gt=0, le=1, description="a GPU under this activity share is idle")
    idle_warn_minutes: float = Field(30.0, gt=0, description="idle this long: a finding, and the tenant is warned")
    idle_action_minutes: float = Field(60.0, gt=0, description="idle this long: the tier's idle_actions applies")
    idle_actions: dict[Tier, HealthAction] = Field(default_factory=_default_idle_actions,
                                                   description="what happens to a job idle past "
                                                   "idle_action_minutes, by tier (a low-priority job's tier is "
                                                   "low, others their tenant's): report, or requeue (Slurm "
                                                   "requeue; Kubernetes Eviction API with the grace period)")
    hung_activity_max: float = Field(0.01, gt=0, le=1, description="activity under this on every GPU ...")
    hung_fb_min_share: float = Field(0.5, gt=0, le=1, description="... with at least this share of each GPU's "
                                     "framebuffer in use is a hung job")
    hung_warn_minutes: float = Field(30.0, gt=0, description="hung this long: a finding, and the tenant is warned")
    hung_action_minutes: float = Field(60.0, gt=0, description="hung this long: the tier's hung_actions applies")
    hung_actions: dict[Tier, HealthAction] = Field(default_factory=_default_idle_actions,
                                                   description="what happens to a hung job, by tier: report, or "
                                                   "requeue (a restart)")
    leak_window_minutes: float = Field(60.0, gt=0, description="window a framebuffer trend is fitted on")
    leak_min_rise_share: float = Field(0.1, gt=0, le=1, description="a leak rose by at least this share of the "
                                       "framebuffer over the window")
    leak_monotone_share: float = Field(0.9, gt=0, le=1, description="and did not fall in at least this share of "
                                       "its steps")
    leak_full_within_minutes: float = Field(120.0, gt=0, description="and is projected to fill the framebuffer "
                                            "within this many minutes (leaks are reported, never acted on)")
    xid_critical: list[int] = Field(default_factory=lambda: [48, 63, 64, 74, 79, 92, 94, 95, 119, 120],
                                    description="XIDs that are a GPU error (hardware, driver): reported as "
                                    "gpu_error")
    xid_application: list[int] = Field(default_factory=lambda: [13, 31, 43, 45, 68, 109],
                                       description="XIDs that are the application's own fault (the device plugin "
                                       "ignores these): reported apart, as app_xid")

    @field_validator("idle_actions", "hung_actions")
    @classmethod
    def _every_tier(cls, v: dict[Tier, HealthAction]) -> dict[Tier, HealthAction]:
        """A partial table (`idle_actions = {low = "requeue"}`) keeps the defaults for the tiers it leaves out,
        so every tier has an action (a missing one would fail the whole health step each cycle)."""
        return {**_default_idle_actions(), **v}

    @model_validator(mode="after")
    def _consistent(self) -> "HealthConfig":
        if self.idle_action_minutes < self.idle_warn_minutes:
            raise ValueError("idle_action_minutes must be >= idle_warn_minutes (the tenant is warned first)")
        if self.hung_action_minutes < self.hung_warn_minutes:
            raise ValueError("hung_action_minutes must be >= hung_warn_minutes (the tenant is warned first)")
        if self.hung_activity_max > self.idle_activity_max:
            raise ValueError("hung_activity_max must be <= idle_activity_max (a hung job is an idle one)")
        both = sorted(set(self.xid_critical) & set(self.xid_application))
        if both:
            raise ValueError(f"XIDs {both} are in both xid_critical and xid_application")
        if any(x <= 0 for x in self.xid_critical + self.xid_application):
            raise ValueError("XIDs are positive codes")
        return self   # the queries' selector is checked by Config, which knows source.prometheus.exporter_selector

    def window_minutes(self) -> float:
        """How much history each cycle reads: enough to see the longest threshold, plus a margin."""
        return max(self.idle_action_minutes, self.hung_action_minutes, self.leak_window_minutes) + 10.0
