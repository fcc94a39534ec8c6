"""An actuator that only logs: every decision is written out, nothing is changed anywhere."""

from __future__ import annotations

import logging

from daemon.actuators.base import ActionReport
from daemon.policy.types import Notification, Plan
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.actuator.log")


class LogActuator:
    name = "log"
    dry_run = True

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self._last_limits: dict[str, tuple[float, float]] = {}
        self._last_res: dict[str, int] = {}

    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, True)
        for t, r in sorted(plan.reservations.items()):
            if self._last_res.get(t) != r:
                rep.actions.append(f"reserve {plural(r, 'GPU')} for {t}")
        for t in sorted(set(self._last_res) - set(plan.reservations)):
            rep.actions.append(f"release reservation of {t}")
        self._last_res = dict(plan.reservations)
        for t, lim in plan.limits.items():
            key = (lim.rate, lim.burst)
            if self._last_limits.get(t) != key:
                rep.actions.append(f"limit {t} to {lim.rate:g} req/s burst {lim.burst:g} ({lim.reason})")
                self._last_limits[t] = key
        for p in plan.preemptions:
            rep.actions.append(f"preempt {p.job_id} of {p.tenant} ({plural(p.gpus, 'GPU')} on {p.node or '-'}): "
                               f"{p.reason}")
        if self.verbose:
            for a in rep.actions:
                log.info("decision: %s", a)
        elif plan.preemptions:
            # one line per cycle: which jobs, and their reasons (each job's says what its GPUs were cleared for: a
            # plan that clears for the high tier's forecast and for an aged tenant's waiting job has two)
            jobs = ", ".join(f"{p.job_id} ({p.tenant}, {plural(p.gpus, 'GPU')})" for p in plan.preemptions[:8])
            more = f" and {len(plan.preemptions) - 8} more" if len(plan.preemptions) > 8 else ""
            log.info("decision: preempt %s: %s%s; %s", plural(len(plan.preemptions), "job"), jobs, more,
                     "; ".join(dict.fromkeys(p.reason for p in plan.preemptions)))
        return rep

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        rep = ActionReport(self.name, True, [f"requeue {j}: {reason}" for j in job_ids])
        for a in rep.actions:
            log.info("decision: %s", a)
        return rep

    def notify(self, notes: list[Notification]) -> ActionReport:
        rep = ActionReport(self.name, True, [f"notify {n.tenant} [{n.kind}]: {n.message}" for n in notes])
        if self.verbose:
            for a in rep.actions:
                log.info("%s", a)
        return rep
