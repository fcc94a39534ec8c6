"""The actuator interface: apply a plan to one real system and say what was done.

Actuators are the only place with side effects on the cluster. Each one is
idempotent (applying the same plan twice changes nothing the second time) and
has a dry-run mode that reports the same actions without performing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from daemon.policy.types import Notification, Plan


@dataclass
class ActionReport:
    actuator: str
    dry_run: bool
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class Actuator(Protocol):
    name: str
    dry_run: bool

    def apply(self, plan: Plan) -> ActionReport:
        """Make the system match the plan (limits, reservations, preemptions)."""
        ...

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        """Move jobs off a failed node now, outside the cycle."""
        ...

    def notify(self, notes: list[Notification]) -> ActionReport:
        """Tell tenants why (throttled, preempted, node failed)."""
        ...


@runtime_checkable
class NodeDirectory(Protocol):
    """Knows the cluster's node names (a scheduler, or a source): alerts may only name one of these."""

    def node_names(self) -> set[str]:
        ...
