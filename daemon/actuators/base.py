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

from collections.abc import MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Iterator, Protocol, Sequence, TypeVar, runtime_checkable

from daemon.policy.types import Notification, Plan

if TYPE_CHECKING:
    from daemon.policy.state import Jobs, Nodes


@dataclass
class ActionReport:
    actuator: str
    dry_run: bool
    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # what the actuator itself has to tell tenants (a preemption warning); the cycle sends it on every channel
    notifications: list[Notification] = field(default_factory=list)
    # True when the fence refused a command: this replica may not act, and nothing after the refusal was sent
    fenced: bool = False
    # jobs whose eviction the cluster refused (a PodDisruptionBudget's 429): their GPUs were not freed
    not_freed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class FencingLost(Exception):
    """This replica may not change the cluster any more (its fencing token is stale or about to expire)."""


class FenceGuard:
    """Asked right before every single command that changes the cluster (a requeue, a signal, a reservation
    change, a drain, an eviction, a quota write), not once per batch: one batch can run for minutes (three
    Slurm commands with a 10 s timeout each per preemption), far longer than the lease's safety margin, and a
    replica that lost its lease half-way through must not send the rest. This default allows everything
    (no leader lease: nothing to fence against); ``daemon/ha/fencing.py`` gives the lease's guard."""

    def check(self, what: str, jobs: Sequence[str] = ()) -> None:
        """Return when the command `what` (on `jobs`) may be sent now; raise FencingLost when it may not."""

    def term(self) -> int | None:
        """The fencing token this replica acts under now (None: no lease). An actuator that skips a write it
        already sent forgets what it sent when the term changes: another leader may have written since."""
        return None


NO_FENCE = FenceGuard()

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
_NO_TERM_YET = object()


class TermRecord(MutableMapping[K, V], Generic[K, V]):
    """What this replica last wrote (key -> value), kept for one fencing term only: a dict that empties itself
    whenever ``guard().term()`` is not the term it was filled in.

    Why: an actuator that skips a write because its record says it already sent that value is right only while
    no one else writes. A replica that leads again (paused past its lease, then elected again) was not the only
    writer meanwhile: the other leader may have changed or deleted the object (a quota raised, an estimate
    rewritten). So a new term starts with nothing recorded, and every object the plan wants is compared with
    the plan again and written. `guard` is a callable because actuators get their guard after they are built
    (``use_fence``); the term is asked on every access, a local read (the lease's token), no call to the lease."""

    def __init__(self, guard: Callable[[], FenceGuard]) -> None:
        self._guard = guard
        self._data: dict[K, V] = {}
        self._term: object = _NO_TERM_YET  # asked on first use: the owner may set its guard after building this

    def _now(self) -> dict[K, V]:
        term = self._guard().term()
        if term != self._term:
            self._data.clear()
            self._term = term
        return self._data

    def __getitem__(self, key: K) -> V:
        return self._now()[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._now()[key] = value

    def __delitem__(self, key: K) -> None:
        del self._now()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._now()))

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return f"TermRecord(term={self._term}, {self._data!r})"


@contextmanager
def stop_on_fence(rep: "ActionReport") -> Iterator[None]:
    """Around one batch of commands: a FencingLost ends the batch there (nothing after it is sent) and is
    reported as the batch's error instead of raised, with what was done before it kept in the report."""
    try:
        yield
    except FencingLost as exc:
        rep.errors.append(f"fenced: {exc}; the rest of this batch was not sent")
        rep.fenced = True


class FencedApply:
    """The `apply` of an actuator whose plan is one fenced batch: the report it returns is the actuator's own, and
    a FencingLost in `_apply` ends the batch there (stop_on_fence), so the cycle learns this replica may not act
    instead of seeing an exception. The actuator writes `_apply(rep, plan)`, the steps, in its order."""

    name: str
    dry_run: bool

    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            self._apply(rep, plan)
        return rep

    def _apply(self, rep: ActionReport, plan: Plan) -> None:
        raise NotImplementedError


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

    def lists_every_job(self) -> bool:
        """Whether cluster_jobs lists every job of the cluster, whoever runs it (Slurm: squeue lists every
        account's), so a name it lists no job for runs none here: its GPUs in the metrics are another cluster's or a
        stale series, and its demand is capped to 0 (PrometheusSource._covered). False where the view lists only the
        tenants' jobs (Kubernetes: their namespaces' pods), where another name's jobs are unknown, not absent."""
        ...


@runtime_checkable
class ReclaimsJobs(Protocol):
    """Can requeue (Slurm) or evict (Kubernetes, Eviction API) jobs the health policy reclaims (daemon/health/)."""

    def reclaim(self, job_ids: list[str], reason: str) -> ActionReport: ...


@runtime_checkable
class CommentsJobs(Protocol):
    """Can write a note on a job its owner sees (Slurm: the AdminComment, appended)."""

    def comment(self, job_ids: list[str], text: str) -> ActionReport: ...


@runtime_checkable
class ListsQueuedJobs(Protocol):
    """Knows pending jobs that have no pod or job of their own yet, for the start-time estimates (Kueue: the
    Workloads it has not admitted), as the policy's columnar Jobs (all pending). Where such an actuator also lists the
    cluster's jobs, its cluster_jobs has those the plan counts among them (Kueue: those it may admit), and the
    service takes the cluster's jobs from it (daemon/service/wiring.py)."""

    def queued_jobs(self, tenants: tuple[str, ...]) -> "Jobs": ...

    def queued_starts(self) -> dict[str, float]:
        """Of the jobs queued_jobs has listed (by id), those that have left the queue as this read found them, and
        when (epoch): their start, against which their first estimate is scored (Kueue: the admission)."""
        ...


@runtime_checkable
class ShowsEta(Protocol):
    """Can show pending jobs' start estimates where their owners look (Slurm: the AdminComment, beside squeue's
    own expected start; Kueue: annotations on the Workload). `rows` are daemon/service/eta.py's: job_id, p50_s,
    p90_s (None = unknown; seconds after `made_at`, epoch) and basis."""

    def show_eta(self, rows: list[dict], made_at: float) -> ActionReport: ...


@runtime_checkable
class KeepsClusterView(Protocol):
    """Keeps its view of the cluster by watching it (Kubernetes: list-then-watch, daemon/actuators/k8s/
    informer.py): the service starts the watches with the daemon and stops them with it."""

    def start_view(self) -> None: ...

    def stop_view(self) -> None: ...


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


@runtime_checkable
class ChecksFence(Protocol):
    """Checks a FenceGuard right before each command it sends (see FenceGuard); the fencing wrapper hands
    it the lease's guard. An actuator without it is fenced once per call, by the wrapper only."""

    def use_fence(self, guard: FenceGuard) -> None: ...


@runtime_checkable
class ReportsNodeHealth(Protocol):
    """Can say whether the scheduler itself sees a node as failed, so an alert alone does not requeue a
    healthy node's jobs: True (the scheduler agrees it is down, drained, failing or not responding), False
    (the scheduler sees it healthy), None (cannot tell: the daemon acts on the alert as it would without)."""

    def node_down_confirmed(self, node: str) -> bool | None: ...


def capable(actuators: list, capability: type) -> list:
    """The actuators that have `capability` (one of the Protocols above), in order."""
    return [a for a in actuators if isinstance(a, capability)]


@runtime_checkable
class NodeDirectory(Protocol):
    """Knows the cluster's node names (a scheduler, or a source): alerts may only name one of these."""

    def node_names(self) -> set[str]: ...


def in_turn(queues: Sequence[Sequence[T]], most: int) -> list[T]:
    """Up to `most` items, one from each queue in turn (the first of each, then the second of each, ...), each queue
    in its order: how a bounded write per cycle (start estimates on Slurm jobs or Kueue Workloads) is shared between
    tenants, so one tenant's flood costs another's items no more than one turn each."""
    out: list[T] = []
    for turn in range(max((len(q) for q in queues), default=0)):
        for q in queues:
            if len(out) >= most:
                return out
            if turn < len(q):
                out.append(q[turn])
    return out
