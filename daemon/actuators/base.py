"""The actuator interfaces: apply a plan to one real system and say what was done.

Actuators are the only place with side effects on the cluster. Each one is
idempotent (applying the same plan twice changes nothing the second time) and
has a dry-run mode that reports the same actions without performing them.

What an actuator can do beyond applying plans is declared as small
``typing.Protocol`` capabilities, checked with ``isinstance`` (never by probing
attribute names in the daemon). Every capability is one or two methods, so a
wrapper (for example a fencing layer that refuses a stale leader) can forward
exactly the capabilities of the actuator it wraps: a wrapper that forwards
attributes with ``__getattr__`` has a capability exactly when the wrapped
actuator has it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from daemon.policy.types import Notification, Plan

if TYPE_CHECKING:
    from daemon.cluster import Jobs, Nodes


@dataclass
class ActionReport:
    actuator: str
    dry_run: bool
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # what the actuator itself has to tell tenants (a preemption warning); the cycle sends it on every channel
    notifications: list[Notification] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


@runtime_checkable
class Actuator(Protocol):
    """Every actuator: applies plans, requeues jobs off a failed node, tells tenants why."""

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
class FencesNodes(Protocol):
    """Can stop the scheduler from placing anything more on a node (drain, cordon)."""

    def fence_node(self, node: str, reason: str) -> ActionReport: ...


@runtime_checkable
class ListsNodeJobs(Protocol):
    """Knows which jobs run on a node: (job id, tenant) pairs."""

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]: ...


@runtime_checkable
class ListsClusterJobs(Protocol):
    """Knows every running and pending job of the cluster, as the policy's columnar Jobs."""

    def cluster_jobs(self, tenants: tuple[str, ...]) -> "Jobs": ...


@runtime_checkable
class ListsClusterNodes(Protocol):
    """Knows where the GPUs are, as the policy's Nodes: per node the healthy GPUs, the free ones, those still
    draining, and whose hold (reservation) the node is in (`held_by`: an index into `tenants`, HELD_BY_POOL,
    or CLOSED). Node names are spelled as the same actuator's `cluster_jobs` spells a job's node, so the
    policy can place jobs; with this the engine preempts only what makes room on one node for a protected job
    (preemption.choose_placed) instead of counting GPUs."""

    def cluster_nodes(self, tenants: tuple[str, ...]) -> "Nodes": ...


@runtime_checkable
class HoldsCapacity(Protocol):
    """Holds capacity on the scheduler itself (reservations, quotas) and can let all of it go.

    ``release_holds`` removes every hold this daemon made and nothing else; it never kills or
    requeues a job. The daemon calls it when it stops.
    """

    def release_holds(self) -> ActionReport: ...


def capable(actuators: list, capability: type) -> list:
    """The actuators that have `capability` (one of the Protocols above), in order."""
    return [a for a in actuators if isinstance(a, capability)]


@runtime_checkable
class NodeDirectory(Protocol):
    """Knows the cluster's node names (a scheduler, or a source): alerts may only name one of these."""

    def node_names(self) -> set[str]: ...
