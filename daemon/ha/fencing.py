"""Fencing: an actuator wrapper that acts only while this replica holds the current fencing token.

Every call that changes something (apply, requeue, notify, fence_node, release_holds) first asks
the lease (``daemon/ha/lease.py``) to check the token in Redis and write the act into the ledger, in
one atomic step; a stale or expiring token is refused with an error in the report and nothing is
done. One call can send many commands and run for minutes (a plan with 20 preemptions is 60
``scontrol`` calls, each with a 10 s timeout), longer than the lease's safety margin; so an actuator
that can (``ChecksFence``) gets a guard that asks the lease again right before each command it sends,
and the call stops at the first refusal (reported as its error; nothing more is sent). Read-only
capabilities (jobs_on_node, cluster_jobs, cluster_nodes, node_names) pass straight through, and the
wrapper has a capability exactly when the wrapped actuator has it (see ``daemon/actuators/base.py``).

The capabilities are found by ``isinstance`` against runtime-checkable Protocols (FencesNodes for the failover,
ReclaimsJobs and CommentsJobs for job health, ...). Since Python 3.12 that check looks attributes up with
``inspect.getattr_static``, which does not see ``__getattr__``: a wrapper that only forwarded through
``__getattr__`` would have no capability there, and the failover would silently stop fencing nodes and job
health stop acting. So each method of the wrapped actuator is set on the wrapper itself when it is built.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable, Protocol, runtime_checkable

from daemon.actuators.base import ActionReport, Actuator, ChecksFence, FenceGuard, FencingLost
from daemon.policy.types import Notification, Plan
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.actuator.fenced")

# optional capabilities that change the cluster (show_eta writes AdminComments / Workload annotations)
MUTATING = ("fence_node", "release_holds", "reclaim", "comment", "show_eta")


@runtime_checkable
class Fence(Protocol):
    """The leader lease as the wrapper sees it (daemon/ha/lease.py's backends)."""

    def fence(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
        """May the act `what` (on `jobs`) happen now? (ok, why not)."""
        ...

    def term(self) -> int | None:
        """The fencing token of the term this replica leads, None while it does not lead. The actuators' records
        of what they wrote (TermRecord) are kept per term: a fence that could not say would keep them across a
        takeover, so it is declared here, not read from an attribute by convention."""
        ...


class LeaseGuard(FenceGuard):
    """The FenceGuard of a FencedActuator: each command is checked against the lease (and written into its
    ledger) like a whole call is; a refusal raises FencingLost (and counts as a refusal)."""

    def __init__(self, owner: "FencedActuator") -> None:
        self.owner = owner

    def check(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> None:
        err = self.owner._check(what, list(jobs))
        if err:
            raise FencingLost(err.removeprefix("fenced: "))

    def term(self) -> int | None:
        return self.owner._fence.term()


class FencedActuator:
    def __init__(self, inner: Actuator, fence: Fence, on_refused: Callable[[], None] | None = None) -> None:
        if not isinstance(fence, Fence):   # its term() too: without it every term would look alike
            raise TypeError(f"{type(fence).__name__} is no Fence: it needs fence() and term()")
        self.inner = inner
        self._fence = fence
        self.name = inner.name
        self.refused = 0
        self.on_refused = on_refused
        if isinstance(inner, ChecksFence):
            inner.use_fence(LeaseGuard(self))
        for attr in dir(inner):
            if attr.startswith("_") or hasattr(type(self), attr) or attr in self.__dict__:
                continue
            try:
                static = inspect.getattr_static(inner, attr)
            except AttributeError:
                continue
            if callable(static) or isinstance(static, (staticmethod, classmethod)):
                self.__dict__[attr] = self._forward(attr)   # visible to getattr_static (Python >= 3.12)

    @property
    def dry_run(self) -> bool:
        return self.inner.dry_run

    def _check(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> str | None:
        ok, why = self._fence.fence(f"{self.name}: {what}", jobs)
        if ok:
            return None
        self.refused += 1
        if self.on_refused is not None:
            self.on_refused()
        log.error("fenced: %s refused %s: %s", self.name, what, why)
        return f"fenced: {why}"

    def apply(self, plan: Plan) -> ActionReport:
        err = self._check(f"apply plan {plan.at}", [p.job_id for p in plan.preemptions])
        if err:
            return ActionReport(self.name, self.dry_run, errors=[err], fenced=True)
        return self.inner.apply(plan)

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        err = self._check(f"requeue: {reason}", job_ids)
        if err:
            return ActionReport(self.name, self.dry_run, errors=[err], fenced=True)
        return self.inner.requeue(job_ids, reason)

    def notify(self, notes: list[Notification]) -> ActionReport:
        if not notes:
            return self.inner.notify(notes)
        err = self._check(f"notify {plural(len(notes), 'tenant')}")
        if err:
            return ActionReport(self.name, self.dry_run, errors=[err], fenced=True)
        return self.inner.notify(notes)

    def _forward(self, attr: str) -> Callable[..., Any]:
        """The wrapped actuator's method `attr`: fenced first when it changes something (MUTATING)."""
        if attr not in MUTATING:
            def passed(*args, **kwargs) -> Any:
                return getattr(self.inner, attr)(*args, **kwargs)

            return passed

        def fenced(*args, **kwargs) -> ActionReport:
            target = getattr(self.inner, attr)
            if attr == "show_eta":   # rows of pending jobs: the ledger gets their ids, not the rows' text
                rows = args[0] if args else kwargs.get("rows", [])
                err = self._check(f"show_eta {plural(len(rows), 'pending job')}", [str(r["job_id"]) for r in rows])
            else:
                err = self._check(f"{attr} {' '.join(map(str, args))}".strip())
            if err:
                return ActionReport(self.name, self.dry_run, errors=[err], fenced=True)
            return target(*args, **kwargs)

        return fenced

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self.inner, attr)  # AttributeError when the wrapped actuator lacks it
        return self._forward(attr) if attr in MUTATING else target


def fence_all(actuators: list[Actuator], fence: Fence, on_refused: Callable[[], None] | None = None) -> list[Actuator]:
    """Wrap every actuator that can change something (dry-run ones change nothing and stay as they are)."""
    return [a if a.dry_run else FencedActuator(a, fence, on_refused) for a in actuators]
