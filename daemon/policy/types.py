"""The plan the policy hands to actuators, and the small memory it carries between cycles."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from daemon.config.windows import WindowConfig


@dataclass(frozen=True)
class RateLimit:
    rate: float       # tokens (requests) per second
    burst: float      # bucket size
    level: int        # index into the configured load levels
    reason: str       # told to the user with every 429

    def to_dict(self) -> dict[str, Any]:
        # what asdict gives, written out: asdict recurses and deep-copies every field, and a plan saves one of
        # these per tenant every cycle (10,000 tenants: 330 ms a cycle)
        return {"rate": self.rate, "burst": self.burst, "level": self.level, "reason": self.reason}


@dataclass(frozen=True)
class Preemption:
    job_id: str
    tenant: str
    gpus: int
    node: str
    reason: str
    for_tenant: str = ""     # the protected tenant whose (waiting or forecast) job the GPUs are cleared for


@dataclass(frozen=True)
class Notification:
    tenant: str
    kind: str          # "preempted" | "throttled" | "relaxed" | "node_failed" | "protected"
    message: str


RATE_KINDS = ("throttled", "relaxed")   # the notifications of a rate-limit change (engine.py): true only where a
                                        # gateway applies the limits (ActuatorsConfig.gateway_limits)


@dataclass(frozen=True)
class PolicyMemory:
    """What the policy must remember: it is persisted so a restart does not reset hysteresis or aging."""

    reservations: dict[str, int] = field(default_factory=dict)
    rate_level: int = 0
    aged_since: dict[str, str] = field(default_factory=dict)  # tenant -> ISO time it became protected
    # aging across requeues (daemon/policy/aging.py): banked wait, current stint, jobs that went over max_wait
    waited: dict[str, float] = field(default_factory=dict)
    stint: dict[str, float] = field(default_factory=dict)
    aged_jobs: dict[str, str] = field(default_factory=dict)
    # the preemption budget's token bucket (daemon/policy/budget.py): level after the last plan, and when
    budget_gpus: float | None = None
    budget_jobs: float | None = None
    budget_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"reservations": dict(self.reservations), "rate_level": self.rate_level,
                "aged_since": dict(self.aged_since), "waited": dict(self.waited), "stint": dict(self.stint),
                "aged_jobs": dict(self.aged_jobs), "budget_gpus": self.budget_gpus,
                "budget_jobs": self.budget_jobs, "budget_at": self.budget_at}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "PolicyMemory":
        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return PolicyMemory({str(k): int(v) for k, v in d.get("reservations", {}).items()},
                            int(d.get("rate_level", 0)),
                            {str(k): str(v) for k, v in d.get("aged_since", {}).items()},
                            {str(k): float(v) for k, v in d.get("waited", {}).items()},
                            {str(k): float(v) for k, v in d.get("stint", {}).items()},
                            {str(k): str(v) for k, v in d.get("aged_jobs", {}).items()},
                            opt("budget_gpus"), opt("budget_jobs"), opt("budget_at"))


@dataclass(frozen=True)
class Plan:
    at: str                                   # ISO time of the snapshot the plan was made from
    capacity: int
    load: float
    high_pool: int                            # GPUs guaranteed to the high tier
    reservations: dict[str, int]              # GPUs held for a tenant (high tier and aged tenants)
    quotas: dict[str, int]                    # GPU cap for tenants outside the high tier
    limits: dict[str, RateLimit]
    preemptions: tuple[Preemption, ...]
    notifications: tuple[Notification, ...]
    stale: bool
    forecast_model: str
    notes: tuple[str, ...]
    memory: PolicyMemory
    safe_default: bool = False                # the last good plan was too old: static pool only, no preemptions
    # tenants whose reservations are held together as one pool (sum of theirs) by actuators that can (one Slurm
    # reservation with every pooled account); empty = one hold per tenant
    pooled: tuple[str, ...] = ()
    # per held tenant, the GPUs of the job its hold is sized for: an actuator lets go of a held node where other
    # owners' work that cannot be preempted leaves less room than that (the holder could never use it), as the
    # simulator does, so that the hold moves to a node it can use
    hold_job_gpus: dict[str, int] = field(default_factory=dict)
    # A mixed fleet (issue 24, [fleet]; docs/fleet.md). All four are empty in a one-model cluster (no node carries a
    # type), so an untyped plan is exactly what it was before.
    # tenant -> {GPU type: GPUs held on nodes of that type}; per tenant the values sum to reservations[tenant]. An
    # actuator puts a tenant's hold on nodes of each named type (a hold on a type the tenant's work cannot use
    # would protect nothing).
    holds_by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    capacity_by_type: dict[str, int] = field(default_factory=dict)      # healthy GPUs per type
    high_pool_by_type: dict[str, int] = field(default_factory=dict)     # high tier's guaranteed GPUs per type
    # GPU type -> GPUs of that type that non-preemptible work outside the high tier may use in all (the type's GPUs
    # less the high tier's guarantee or holds there and aged/floored holds): "20% of the h100s for the high tier"
    # keeps normal work out of those 20%, as `quotas` does for the cluster
    shared_cap_by_type: dict[str, int] = field(default_factory=dict)
    # GPU type -> what the plan did on that type and why (holds sized, work asking for a type no node has, ...)
    notes_by_type: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Not backed by the scheduler (issue 36; daemon/sources/scheduler_bounds.py), as the source left it out of the
    # snapshot: tenant -> GPUs of its reported demand above its running jobs' GPUs; GPUs reported on nodes the
    # scheduler does not list. Both empty or 0 without a scheduler view.
    demand_capped: dict[str, int] = field(default_factory=dict)
    capacity_dropped: int = 0
    # why the GPUs are held (issue 37): GPUs of `reservations` per reason, "high" (the high tier's forecast peak;
    # it may exceed `high_pool`, the tier's guarantee, while GPUs are free to borrow), "aged" (tenants outside the
    # high tier whose job waited max_wait: anti-starvation) and "floor" (an operator's floor_gpus); a tenant both
    # aged and floored counts as aged. Sums to the held GPUs; empty in a plan from before it was recorded
    held_for: dict[str, int] = field(default_factory=dict)
    # The skill gate (policy.skill_gate; daemon/forecasting/skill.py), empty while it is off: tenant -> {"acting":
    # whether its holds and preemptions act on the forecast, "why", "forecast_loss", "reactive_loss", "scored"}, and
    # on a mixed fleet "by_type": GPU type -> the same for that type's series, each decided alone
    forecast_acting: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the recurring windows in force (issue 39; the config's and the operator's, as their config dicts): what a
    # scheduler that can hold ahead reserves by itself (Slurm's recurring reservations)
    windows: tuple[dict[str, Any], ...] = ()
    # tenant -> GPUs of its reservation its windows hold now: its alone (only its account), also when the tenant is
    # pooled; a pooled tenant's hold beyond them is in the pool, so the window adds to what it may use
    window_holds: dict[str, int] = field(default_factory=dict)
    # a mixed fleet: tenant -> {GPU type: GPUs of its window_holds on that type} (each at most its holds_by_type
    # there); a pooled tenant's holds_by_type beyond them is the pool's on that type. Empty on a one-model cluster
    window_holds_by_type: dict[str, dict[str, int]] = field(default_factory=dict)
    # tenant -> the main cause of its hold's change in this plan, in a few words (daemon/policy/hold_reason.py),
    # for each tenant whose hold differs from the last plan's: what the `held` plan_change event tells it
    hold_why: dict[str, str] = field(default_factory=dict)

    def job_gpus(self, tenants: Iterable[str]) -> int:
        """GPUs of the smallest job the holds of `tenants` are sized for (one tenant's hold, or a pool's), 1 when
        the plan does not say: what an actuator needs room for on a node it keeps in that hold."""
        return min((int(self.hold_job_gpus.get(t, 1)) for t in tenants), default=1)

    def summary(self) -> dict[str, Any]:
        return {
            "at": self.at, "capacity": self.capacity, "load": round(self.load, 4) if self.load == self.load else None,
            "high_pool": self.high_pool, "reserved": int(sum(self.reservations.values())),
            "reserved_tenants": len(self.reservations), "preemptions": len(self.preemptions),
            "preempted_gpus": int(sum(p.gpus for p in self.preemptions)),
            "rate_level": self.memory.rate_level, "stale": self.stale, "model": self.forecast_model,
            "notes": list(self.notes), "safe_default": self.safe_default,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at, "capacity": self.capacity, "load": self.load, "high_pool": self.high_pool,
            "reservations": dict(self.reservations), "quotas": dict(self.quotas),
            "limits": {k: v.to_dict() for k, v in self.limits.items()},
            "preemptions": [asdict(p) for p in self.preemptions],
            "notifications": [asdict(n) for n in self.notifications],
            "stale": self.stale, "forecast_model": self.forecast_model, "notes": list(self.notes),
            "memory": self.memory.to_dict(), "safe_default": self.safe_default, "pooled": list(self.pooled),
            "hold_job_gpus": dict(self.hold_job_gpus),
            "holds_by_type": {t: dict(v) for t, v in self.holds_by_type.items()},
            "capacity_by_type": dict(self.capacity_by_type), "high_pool_by_type": dict(self.high_pool_by_type),
            "notes_by_type": {k: list(v) for k, v in self.notes_by_type.items()},
            "shared_cap_by_type": dict(self.shared_cap_by_type),
            "demand_capped": dict(self.demand_capped), "capacity_dropped": self.capacity_dropped,
            "held_for": dict(self.held_for),
            "forecast_acting": {t: dict(v) for t, v in self.forecast_acting.items()},
            # only when there are some: a plan without windows is the dict it was before windows existed
            **({"windows": [dict(w) for w in self.windows]} if self.windows else {}),
            **({"window_holds": dict(self.window_holds)} if self.window_holds else {}),
            **({"window_holds_by_type": {t: dict(v) for t, v in self.window_holds_by_type.items()}}
               if self.window_holds_by_type else {}),
            **({"hold_why": dict(self.hold_why)} if self.hold_why else {}),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Plan":
        return Plan(
            at=str(d["at"]), capacity=int(d["capacity"]),
            load=float(d["load"]) if d["load"] is not None else float("nan"),
            high_pool=int(d["high_pool"]),
            reservations={str(k): int(v) for k, v in d["reservations"].items()},
            quotas={str(k): int(v) for k, v in d.get("quotas", {}).items()},
            limits={str(k): RateLimit(**v) for k, v in d["limits"].items()},
            preemptions=tuple(Preemption(**p) for p in d.get("preemptions", [])),
            notifications=tuple(Notification(**n) for n in d.get("notifications", [])),
            stale=bool(d["stale"]), forecast_model=str(d.get("forecast_model", "")),
            notes=tuple(d.get("notes", [])), memory=PolicyMemory.from_dict(d.get("memory", {})),
            safe_default=bool(d.get("safe_default", False)), pooled=tuple(str(t) for t in d.get("pooled", ())),
            hold_job_gpus={str(k): int(v) for k, v in d.get("hold_job_gpus", {}).items()},
            holds_by_type={str(t): {str(k): int(v) for k, v in h.items()}
                           for t, h in d.get("holds_by_type", {}).items()},
            capacity_by_type={str(k): int(v) for k, v in d.get("capacity_by_type", {}).items()},
            high_pool_by_type={str(k): int(v) for k, v in d.get("high_pool_by_type", {}).items()},
            notes_by_type={str(k): tuple(str(x) for x in v) for k, v in d.get("notes_by_type", {}).items()},
            shared_cap_by_type={str(k): int(v) for k, v in d.get("shared_cap_by_type", {}).items()},
            demand_capped={str(k): int(v) for k, v in d.get("demand_capped", {}).items()},
            capacity_dropped=int(d.get("capacity_dropped", 0)),
            held_for={str(k): int(v) for k, v in d.get("held_for", {}).items()},
            forecast_acting={str(k): dict(v) for k, v in d.get("forecast_acting", {}).items()},
            windows=tuple(dict(w) for w in d.get("windows", ())),
            window_holds={str(k): int(v) for k, v in d.get("window_holds", {}).items()},
            window_holds_by_type={str(t): {str(k): int(v) for k, v in h.items()}
                                  for t, h in d.get("window_holds_by_type", {}).items()},
            hold_why={str(k): str(v) for k, v in d.get("hold_why", {}).items()},
        )


@dataclass(frozen=True)
class OperatorInputs:
    """Changes an operator made at runtime (daemon/state/overrides.py), handed to plan() as plain data."""

    tiers: dict[str, str] = field(default_factory=dict)         # tenant -> high | normal | low
    rates: dict[str, float] = field(default_factory=dict)       # tenant -> fixed req/s
    floors: dict[str, int] = field(default_factory=dict)        # tenant -> GPUs held at least
    paused: frozenset[str] = frozenset()                        # tenants whose jobs are not preempted
    paused_all: bool = False                                    # no preemptions at all
    # recurring windows operators declared through the API (the config's are cfg.windows); one of the same
    # name replaces the config's
    windows: tuple[WindowConfig, ...] = ()
