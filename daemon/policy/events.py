"""What changed between two plans, as events for the store: preemptions, notifications, plan changes.

Pure: the cycle writes what this returns; the console and /api/v1/events read it back.
"""

from __future__ import annotations

from daemon.policy.types import Plan
from daemon.text import plural


def plan_events(previous: Plan | None, plan: Plan) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    for p in plan.preemptions:
        out.append(("preemption", {"tenant": p.tenant, "job_id": p.job_id, "gpus": p.gpus, "node": p.node,
                                   "reason": p.reason}))
    for n in plan.notifications:
        if n.kind != "preempted":  # the preemption event already carries the reason
            out.append(("notification", {"tenant": n.tenant, "type": n.kind, "message": n.message}))
    before = previous.memory.rate_level if previous is not None else None
    if before is not None and before != plan.memory.rate_level:
        out.append(("plan_change", {"what": "rate_level", "from": before, "to": plan.memory.rate_level,
                                    "load": round(plan.load, 4),
                                    "message": f"rate level {before} -> {plan.memory.rate_level} "
                                               f"at load {plan.load:.0%}"}))
    old = previous.reservations if previous is not None else {}
    for t in sorted(set(old) | set(plan.reservations)):
        a, b = int(old.get(t, 0)), int(plan.reservations.get(t, 0))
        if a != b:
            # its cause, where the plan says one (Plan.hold_why): a number alone gives the tenant nothing to act on
            why = plan.hold_why.get(t, "")
            out.append(("plan_change", {"what": "held", "tenant": t, "from": a, "to": b, "why": why,
                                        "message": f"held capacity for {t}: {a} -> {plural(b, 'GPU')}"
                                                   + (f": {why}" if why else "")}))
    return out
