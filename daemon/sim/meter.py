"""What one replayed setting measures (`Meter`), per tier and for the cluster, and its summary for the report."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

TIERS = ("high", "normal", "low")


def _knob(v) -> str:
    return ("on" if v else "off") if isinstance(v, bool) else v if isinstance(v, str) else f"{v:g}"


@dataclass
class Meter:
    """Everything the replay measures, per tier (high, normal, low) and for the cluster."""

    name: str
    knobs: dict
    util: list[float] = field(default_factory=list)
    idle_queued: float = 0.0                                   # GPU-steps idle while work was queued
    wanted: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    served: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    unmet: dict[str, list[float]] = field(default_factory=lambda: {t: [] for t in TIERS})
    # steps each job waited (one stint): jobs that started in the window, and those still queued at its end with
    # their wait so far (censored: else a tier whose jobs never start would show no wait at all)
    waits: dict[str, list[np.ndarray]] = field(default_factory=lambda: {t: [] for t in TIERS})
    waiting_at_end: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    high_reserved: list[float] = field(default_factory=list)
    preempted: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    # preemptions by the tier of the tenant they cleared GPUs for (high: the forecast or waiting high-tier work;
    # normal/low: tenants protected by aging or an operator's floor)
    preempted_for: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    lost: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    starvation: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    preempted_idle: float = 0.0                                # GPU-steps freed by preemption, left idle
    preempted_retaken: int = 0                                 # GPUs freed by preemption, taken by unprotected work
    # with RISES_SEEN: the high tier's rises in the measured window and those the perfect forecast saw coming (the
    # share asked for is a threshold on the draws; this is the share it came to)
    rises_high: dict[str, int] | None = None
    decision_s: list[float] = field(default_factory=list)
    # the cost-aware rule's decisions (policy.preempt_cost_aware, counted with ``count_rule``): at every measured
    # step the same plan is made again with the rule off, on the same state and memory; jobs that plan preempts and
    # this one does not (refused; a job refused at several steps counts at each), jobs this one preempts and that
    # one does not (another choice), the steps where the two differ, and the distinct jobs refused at least once
    rule: dict[str, int] | None = None
    throttled: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    requests: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # inference services (daemon/sim/inference.py): their requests per tier, counted one by one through the
    # gateway: arrivals = served (on time) + throttled (429) + late (served at a later step, or still waiting)
    inference: bool = False
    inf_requests: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_served: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_throttled: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    inf_late: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # GPU-steps the services' replicas ran (cold ones included): what their requests cost, to compare strategies at
    # equal GPU-hours
    inf_gpu: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    # GPU-steps of the services' need their running replicas did not cover: the part of each tier's unmet that is
    # the services' (the rest is its batch jobs'), so a tier's unmet can be read as the batch's and the services'
    inf_unmet: dict[str, float] = field(default_factory=lambda: {t: 0.0 for t in TIERS})
    step_min: float = 1.0
    wall_s: float = 0.0
    cpu_s: float = 0.0                                         # CPU of its process meanwhile (forecast thread too)
    # a typed workload (mixed fleet): demand and unmet GPU-minutes per accepted-type set ("a100|t4", "any"),
    # all tiers and the high tier's part (high_demand_gpu_min, high_unmet_gpu_min)
    by_spec: dict[str, dict[str, float]] | None = None
    # the plans' per-tenant holds over the measured window: moves, and moves that reverse the tenant's last one
    # within FLAP_WINDOW_S (daemon/sim/flaps.py)
    hold_changes: int = 0
    hold_flaps: int = 0
    # the skill gate (policy.skill_gate, predictive only): per measured step, the tenants acting on the forecast,
    # all of them and those whose verdict the run reads (``read``: the high tier, whose holds and preemptions are
    # the only ones the plan makes on the forecast, and the inference services that may start replicas ahead); a
    # normal or low tenant's verdict changes nothing, so counting it said the forecast was acted on where it was not
    forecast_acting: list[int] | None = None
    forecast_acting_read: list[int] | None = None
    tenants: int = 0
    tenants_read: int = 0
    # per tenant (gate on): measured steps on the forecast, and the verdict the window ended on (skill.Verdict's
    # dict): which tenants the gate trusted, and why, beside what acting on them cost or bought
    gate_by_tenant: dict[str, dict] | None = None
    # per typed series (``tenant@spec``: a mixed fleet's tenant per set of GPU types its jobs accept; gate on):
    # measured steps on the forecast, so the gate's per-type decisions are counted, not only its tenants'
    gate_by_series: dict[str, int] | None = None
    # per inference service: tier, requests arrived and throttled, GPU-minutes of its replicas over the measured
    # window (the tiers' figures above, not summed): where a strategy's throttled requests come from
    inf_by_service: dict[str, dict] | None = None

    def gate_counts(self) -> dict[str, int]:
        """The skill gate's tenant-steps on the forecast: of the tenants whose verdict the run reads (``read_*``,
        the figure that says how much the forecast was acted on) and of all tenants (``all_*``; before this split
        the JSON's ``tenant_steps_on_forecast`` and ``tenant_steps`` were these)."""
        steps = len(self.forecast_acting or [])
        return {"read_tenants": int(self.tenants_read),
                "read_tenant_steps_on_forecast": int(sum(self.forecast_acting_read or [])),
                "read_tenant_steps": int(steps * self.tenants_read),
                "all_tenant_steps_on_forecast": int(sum(self.forecast_acting or [])),
                "all_tenant_steps": int(steps * self.tenants)}

    @property
    def label(self) -> str:
        k = ",".join(f"{a}={_knob(b)}" for a, b in self.knobs.items())
        return f"{self.name}({k})" if k else self.name

    def tier(self, t: str) -> dict:
        m = self.step_min
        un = np.asarray(self.unmet[t])
        w = np.concatenate(self.waits[t]) * m if self.waits[t] else np.zeros(0)
        return {
            "demand_gpu_min": float(np.sum(self.wanted[t]) * m),
            "served_gpu_min": float(np.sum(self.served[t]) * m),
            "unmet_gpu_min": float(un.sum() * m),
            "minutes_with_unmet": float((un > 0.5).sum() * m),
            "wait_mean_min": float(w.mean()) if w.size else 0.0,
            "wait_p99_min": float(np.percentile(w, 99)) if w.size else 0.0,
            "jobs_waiting_at_end": int(self.waiting_at_end[t]),
            "longest_starvation_min": float(self.starvation[t]),
            "preemptions_suffered": int(self.preempted[t]),
            "work_lost_gpu_min": float(self.lost[t] * m),
            "throttled_share": self.throttled[t] / self.requests[t] if self.requests[t] else 0.0,
            **({"inf_requests": self.inf_requests[t], "inf_served": self.inf_served[t],
                "inf_throttled": self.inf_throttled[t], "inf_late": self.inf_late[t],
                "inf_gpu_min": float(self.inf_gpu[t] * m), "inf_unmet_gpu_min": float(self.inf_unmet[t] * m)}
               if self.inference else {}),
        }

    def summary(self) -> dict:
        m = self.step_min
        return {
            "strategy": self.name, "knobs": dict(self.knobs), "label": self.label, "steps": len(self.util),
            "utilization": float(np.mean(self.util)) if self.util else float("nan"),
            "idle_while_queued_gpu_min": float(self.idle_queued * m),
            "high_held_gpus_mean": float(np.mean(self.high_reserved)) if self.high_reserved else 0.0,
            "preemptions": int(sum(self.preempted.values())),
            "preemptions_for": dict(self.preempted_for),
            "work_lost_gpu_min": float(sum(self.lost.values()) * m),
            "preempted_idle_gpu_min": float(self.preempted_idle * m),
            "preempted_retaken_gpus": int(self.preempted_retaken),
            "hold_changes": int(self.hold_changes),
            "hold_flaps": int(self.hold_flaps),
            "tiers": {t: self.tier(t) for t in TIERS},
            "cost_rule": dict(self.rule) if self.rule is not None else None,
            "decision_ms_mean": float(np.mean(self.decision_s) * 1000) if self.decision_s else 0.0,
            "decision_ms_p99": float(np.percentile(self.decision_s, 99) * 1000) if self.decision_s else 0.0,
            "wall_s": float(self.wall_s),
            "cpu_s": float(self.cpu_s),
            **({"by_spec": self.by_spec} if self.by_spec is not None else {}),
            **({"rises_high": dict(self.rises_high)} if self.rises_high is not None else {}),
            **({"skill_gate": self.gate_counts()} if self.forecast_acting is not None else {}),
            **({"skill_gate_by_tenant": self.gate_by_tenant} if self.gate_by_tenant is not None else {}),
            **({"skill_gate_by_series": self.gate_by_series} if self.gate_by_series is not None else {}),
            **({"services": self.inf_by_service} if self.inf_by_service is not None else {}),
        }
