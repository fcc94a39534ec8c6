"""Kueue Workloads that wait for admission: read as pending jobs for the start-time estimate, and given it back as
annotations (issue 39, item 3).

A Workload Kueue has not admitted has no pod (its Job is suspended, its pods are gated), so the pod view (view.py)
does not see it: a Kueue cluster's queue is invisible there. Here every Workload of a tenant namespace is listed
(``kueue.x-k8s.io/v1beta1``, a page at a time, never all held) and each one that waits becomes a pending job: its id
``<namespace>/workload/<name>`` (a pod's name has no ``/``, so it never meets a pod's id), its tenant the
namespace's, its GPUs the sum over its podSets of ``count`` x the GPU resource each pod asks for (requests, else
limits, of every container, init containers and sidecars counted as Kueue counts them), its shape its pods that ask
GPUs (``Jobs.nodes_asked``, ``Jobs.packed``: a gang whose pods may share a node; podSets whose pods ask different
GPUs: packed into parts of the largest pod's GPUs, workload_shape), on a mixed fleet the GPU types its podSets'
selectors accept (Workloads._types), its wait since its ``creationTimestamp``, its
tier its pod PriorityClass's (``gpu-autoscaler-<tier>``; not a WorkloadPriorityClass's, whose name a tenant picks:
tier_of), else low on the tenant's low LocalQueue, else normal (as a pod's). A Workload asking for no GPU is not a
job (as a pod). A malformed one (no podSets, a count or a GPU quantity that is not one) is skipped with one log line
naming it and the field, once while it is listed.

Two reads, one rule (Workloads._scan). The plan's (``Workloads.demand``, through the Kueue actuator's cluster_jobs,
beside the pods) and the estimate's (``Workloads.jobs``, queued_jobs, listed afresh after the plan's actions) both
take a Workload as waiting only while Kueue holds it back (not admitted, active, not finished, not being deleted) and
may ever admit it: not one naming no queue or that Kueue finds inadmissible (``QuotaReserved=False``, reason
``Inadmissible``, ``Misconfigured`` in later versions: its LocalQueue or ClusterQueue missing, stopped or inactive),
nor one whose pod asks more GPUs than any node has or whose GPUs in all are more than the cluster has (no quota the
daemon writes is ever more than the cluster's GPUs), nor one with a podSet whose pods no node takes (the pod view's
never_starts: its node selectors, spread keys and tolerations over the nodes). Such a Workload is no demand and no
pending job of the estimate, and an estimate it carries is cleared; it is said once per Workload, in one line.
Kueue's own "Pending ... > maximum capacity" is not taken as never: that capacity is the quotas the plan writes,
which grow with the holds the plan makes for this very demand. The plan alone also leaves out a Workload Kueue has
not looked at yet (no ``QuotaReserved`` condition: its controller and scheduler write one within a second; the
estimate gives it one at once) and one whose pods the pod view counts (their owner is the Workload's owner, the
requeued Workload of a Job whose pods still run; a JobSet's pods name it by label: pod_owners; counted once, as its
pods). Each read is bounded per tenant (one
namespace each), keeping those Kueue serves first (priority, then age): the plan's at
``actuators.kueue.max_workloads_per_tenant`` (what it holds and preempts for; the rest are no demand until fewer
wait), the estimate's at ``actuators.kueue.max_queued_per_namespace`` (which get an estimate): each said once per
change.

An admitted Workload's admission time is its start for the estimate's error metrics (what it was first told is
scored against it).

The estimate goes back on the Workload, where ``kubectl get workload -o yaml`` shows it, as annotations (one merge
patch, fenced like every write): ``gpu-autoscaler.io/eta-p50`` and ``eta-p90`` (RFC 3339, UTC, to the second;
absent while unknown) and ``eta-reason`` (what it rests on, or why it is unknown). Rewritten only when the p50 or
p90 moved 5 minutes or more or became (un)known, compared with what the Workload carries now (so a replica that
takes over does not rewrite them all); once Kueue admits the Workload (or it waits no more), they are removed.
Annotations rather than an Event: an Event per move would pile up beside the Workload and expire in an hour; an
annotation is the one current estimate.
"""

from __future__ import annotations

import datetime as dt
import heapq
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Callable

import numpy as np
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from daemon.actuators.base import in_turn
from daemon.actuators.k8s.flavors import MIG_PREFIX, pod_accepts
from daemon.actuators.k8s.objects import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    MAX_POD_GPUS,
    effective_request,
    priority_class_name,
)
from daemon.actuators.k8s.queue_types import QueueTypes
from daemon.config.fleet import ANY, TypeResolver
from daemon.policy.eta import moved as _moved
from daemon.policy.state import PRIORITY, Jobs

log = logging.getLogger("gpu_autoscaler.actuator.kueue.workloads")

GROUP, VERSION, PLURAL = KUEUE_GROUP, KUEUE_VERSION, "workloads"
# the version Kueue 0.17 stores Workloads in: a patch sent at v1beta1 is converted there and back, and the round trip
# changes priorityClassSource, which Kueue's CRD forbids while quota is reserved (a 422 on an admitted Workload)
STORED = "v1beta2"
P50, P90, REASON = "gpu-autoscaler.io/eta-p50", "gpu-autoscaler.io/eta-p90", "gpu-autoscaler.io/eta-reason"
OURS = (P50, P90, REASON)
PAGE = 500
# the most waiting Workloads of one tenant the plan counts as demand (actuators.kueue.max_workloads_per_tenant)
MAX_PER_TENANT = 1000
# the most waiting Workloads of one namespace read for the estimates (actuators.kueue.max_queued_per_namespace)
MAX_PER_NAMESPACE = 10_000
# the most estimate patches (annotations written or cleared) a cycle sends; the rest follow in later cycles
MAX_PATCHES = 200
TIER_OF_CLASS = {priority_class_name(t): t for t in PRIORITY}
_DECODE = k8s.ApiClient()   # reads a podSet's template as the client's V1Pod (no request is ever sent with it)
# spec.priorityClassSource at v1beta1 of a Workload whose class is a pod PriorityClass (v1beta2's priorityClassRef of
# group scheduling.k8s.io), the one the high-priority-class admission rule checks; a WorkloadPriorityClass
# (kueue.x-k8s.io/workloadpriorityclass) may carry any name, gpu-autoscaler-high too
POD_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
# QuotaReserved=False reasons for a Workload Kueue will not admit as it is: its LocalQueue or ClusterQueue missing,
# stopped or inactive (Inadmissible; Misconfigured in later versions)
NEVER_ADMITTED = frozenset({"Inadmissible", "Misconfigured"})
# the label the JobSet controller (sigs.k8s.io/jobset) puts on its child Jobs and their pod templates: the JobSet's
# UID, which owns the Workload Kueue makes for the JobSet; a pod's own owner is the child Job
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"


class Malformed(ValueError):
    """A Workload the daemon cannot read as a job: the message names the field."""


@dataclass(frozen=True)
class Queued:
    """A Workload that waits: where it is and the estimate it carries now (epoch seconds, None = absent)."""

    namespace: str
    name: str
    p50: float | None
    p90: float | None
    written: bool     # it carries an estimate of ours (the reason is always written)


def workload_id(namespace: str, name: str) -> str:
    return f"{namespace}/workload/{name}"


def _gpus_per_pod(template: dict, resource: str, where: str) -> int:
    """GPUs one pod of a podSet asks for, counted as Kubernetes and Kueue count a pod's request (its containers, its
    init containers and sidecars: objects.effective_request)."""
    spec = (template or {}).get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("containers"), list):
        raise Malformed(f"{where}.template.spec.containers is missing")
    inits = spec.get("initContainers") or []
    if not isinstance(inits, list):
        raise Malformed(f"{where}.template.spec.initContainers is not a list")

    def gpus(c) -> int:
        res = (c or {}).get("resources") or {}
        q = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        if q is None:
            return 0
        try:
            v = parse_quantity(q)
        except (ValueError, TypeError):
            raise Malformed(f"{where} container {c.get('name')!r} asks for {resource}={q!r}, not a quantity") from None
        if not v.is_finite() or v < 0 or (v <= MAX_POD_GPUS and v != int(v)):
            raise Malformed(f"{where} container {c.get('name')!r} asks for {resource}={q!r}, not a whole count")
        return MAX_POD_GPUS if v > MAX_POD_GPUS else int(v)   # as a pod's (objects.py; int() of 1e999999999 is huge)

    total = effective_request(spec["containers"], inits, gpus, lambda c: (c or {}).get("restartPolicy") == "Always")
    return min(total, MAX_POD_GPUS)


def workload_gpus(wl: dict, resource: str) -> int:
    """GPUs a Workload asks for: over its podSets, count x each pod's GPUs (where its pods ask different GPUs, those
    of the parts they are packed in: workload_shape). Raises Malformed naming the field."""
    return workload_shape(wl, resource)[0]


def workload_shape(wl: dict, resource: str) -> tuple[int, int, int]:
    """(GPUs, parts, GPUs per part) of a Workload: a gang of that many parts, which the scheduler may put several to a
    node. Where its pods ask the same GPUs (one podSet, or a master and workers alike), a part is a pod: a 4 x 8
    indexed Job is 4 parts of 8. Where its podSets' pods ask different GPUs, its pods are packed, largest first, into
    parts of the largest pod's GPUs (a launcher of 8 and four workers of 1: two parts of 8), and its GPUs are the
    parts' (16): room for the parts is room for every pod. Pods asking no GPU need no GPU room and are not counted.
    Raises Malformed naming the field."""
    sets = (wl.get("spec") or {}).get("podSets")
    if not isinstance(sets, list) or not sets:
        raise Malformed("spec.podSets is missing or empty")
    groups: list[tuple[int, int]] = []   # (GPUs per pod, pods) of each podSet that asks GPUs
    for i, ps in enumerate(sets):
        where = f"spec.podSets[{i}]"
        if not isinstance(ps, dict):
            raise Malformed(f"{where} is not an object")
        count = ps.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise Malformed(f"{where}.count is {count!r}, not a count of pods")
        g = _gpus_per_pod(ps.get("template"), resource, where)
        if g > 0 and count > 0:
            groups.append((g, count))
    if not groups:
        return 0, 0, 0
    most = max(g for g, _ in groups)
    parts = _parts(groups, most)
    cap = MAX_POD_GPUS << 20   # within the Jobs' int64 column, whatever the count
    return min(parts * most, cap), min(parts, cap), most


def _parts(groups: list[tuple[int, int]], size: int) -> int:
    """How many parts of ``size`` GPUs hold pods of these (GPUs per pod, pods), each pod whole in one part: the pods
    largest first, each group into the parts with the least room that takes them, then into new parts. A packing,
    not always the fewest parts: room for more never starts fewer pods. Counted per group, not per pod."""
    room: dict[int, int] = {}   # GPUs left in a part -> parts with that much left
    total = 0
    for g, c in sorted(groups, reverse=True):
        for r in sorted(k for k in room if k >= g):
            if c <= 0:
                break
            per, have = r // g, room[r]
            full = min(have, c // per)
            if full:
                room[r] -= full
                room[r - per * g] = room.get(r - per * g, 0) + full
                c -= full * per
            if 0 < c < per and room[r]:
                room[r] -= 1
                room[r - c * g] = room.get(r - c * g, 0) + 1
                c = 0
        if c > 0:
            per = size // g
            full, rest = divmod(c, per)
            total += full + (rest > 0)
            room[size - per * g] = room.get(size - per * g, 0) + full
            if rest:
                room[size - rest * g] = room.get(size - rest * g, 0) + 1
    return total


def quota_verdict(wl: dict) -> tuple[str, str] | None:
    """Kueue's last word on reserving quota for a waiting Workload: (reason, message) of its ``QuotaReserved=False``
    condition (``Inadmissible``: its queues do not let it in; ``Pending``: no room now), None while it has none
    (Kueue has not tried it yet). Written by Kueue's controller through workloads/status, which Kueue's roles give a
    tenant only to read."""
    for c in (wl.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "QuotaReserved" and c.get("status") == "False":
            return str(c.get("reason") or ""), " ".join(str(c.get("message") or "").split())[:300]
    return None


def pod_owners(pods: list, tenant_of_ns: dict[str, str]) -> set[tuple[str, str]]:
    """(namespace, UID) of the live tenant pods the pod view may count (Pending or Running, not being deleted, not
    gated) and of the objects that own them, the owners a Workload already counted as pods names: a Job's pods name
    their Job (ownerReferences); a JobSet's pods name their child Job, whose owner, the JobSet, owns the Workload
    Kueue made for it (Kueue's jobset integration), so they count through the ``jobset.sigs.k8s.io/jobset-uid`` label
    the JobSet controller puts on each child Job's pod template (JOBSET_UID). Each UID is bound to the pod's
    namespace: an owner, JobSet or Job, is in its pods' namespace (the garbage collector deletes a pod whose owner
    is not there), and a label is the tenant's to write, so a pod of one namespace naming another namespace's JobSet
    hides no one's waiting Workload; one naming its own tenant's hides only that tenant's demand."""
    out: set[tuple[str, str]] = set()
    for p in pods:
        m = p.metadata
        if m.namespace not in tenant_of_ns or m.deletion_timestamp is not None:
            continue
        if (p.status.phase if p.status else None) not in ("Pending", "Running"):
            continue
        if not p.spec.node_name and getattr(p.spec, "scheduling_gates", None):
            continue   # gated (Kueue's pod integration before admission): not counted as a pod, so not here
        out.add((m.namespace, m.uid))
        out.update((m.namespace, r.uid) for r in m.owner_references or [])
        jobset = (getattr(m, "labels", None) or {}).get(JOBSET_UID)
        if jobset:
            out.add((m.namespace, jobset))
    return out


def workload_live(wl: dict) -> bool:
    """Whether the Workload is still Kueue's to admit or run: active, not finished, not being deleted (the rule
    _held_back and podless.admitted_live share; they differ only in whether it is admitted)."""
    if (wl.get("metadata") or {}).get("deletionTimestamp") or (wl.get("spec") or {}).get("active") is False:
        return False
    return not any(isinstance(c, dict) and c.get("type") == "Finished" and c.get("status") == "True"
                   for c in (wl.get("status") or {}).get("conditions") or [])


def _held_back(wl: dict) -> bool:
    """Whether Kueue still holds the Workload back: not admitted (no quota reserved), and live (workload_live). One
    that is not waits no more: any estimate it carries is cleared."""
    return not (wl.get("status") or {}).get("admission") and workload_live(wl)


def kueue_refuses(wl: dict) -> str | None:
    """Why Kueue itself will never admit the Workload as it is, or None: it names no queue (Kueue leaves a Workload
    without one alone), or Kueue marked it ``QuotaReserved=False`` for a reason in NEVER_ADMITTED (its LocalQueue
    missing or stopped, its ClusterQueue missing or inactive). A tenant may create Workloads itself: one no quota can
    start was a pending job all the same, ahead of later work, given GPUs it will never take."""
    if not (wl.get("spec") or {}).get("queueName"):
        return "names no queue (Kueue leaves it alone)"
    verdict = quota_verdict(wl)
    if verdict is not None and verdict[0] in NEVER_ADMITTED:
        return f"is inadmissible to Kueue ({verdict[1] or 'no message'})"
    return None


def tier_of(spec: dict, low_queue: str) -> str:
    """A waiting Workload's tier: its pod PriorityClass's (``gpu-autoscaler-<tier>``), else low on the tenant's low
    LocalQueue, else normal (as a pod's). A WorkloadPriorityClass is not read: the high-priority-class admission
    rule refuses ``gpu-autoscaler-high`` outside the high tier only as a pod PriorityClass, and a Workload a normal
    tenant made on a WorkloadPriorityClass of that name (none need exist: Kueue's webhook does not look) read as
    high-tier work, served in the estimate before every other tenant's."""
    tier = None
    if spec.get("priorityClassSource") == POD_CLASS_SOURCE:
        tier = TIER_OF_CLASS.get(spec.get("priorityClassName") or "")
    if tier is None:
        tier = "low" if spec.get("queueName") == low_queue else "normal"
    return tier


def admitted_at(wl: dict) -> float | None:
    """When Kueue admitted the Workload (its Admitted condition's lastTransitionTime, epoch), or None."""
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Admitted" and c.get("status") == "True":
            return _epoch(c.get("lastTransitionTime"))
    return None


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None   # not ours to read: rewritten with a good one
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def _too_big(shape: tuple[int, int, int], largest: int, total: int) -> str | None:
    """Why a Workload of this shape never fits the cluster, or None: a pod larger than any node, or more GPUs in all
    than the cluster has (no quota the daemon writes is more, so Kueue never admits it; ``largest``, ``total``: 0
    with no node read, and then no rule)."""
    if largest and shape[2] > largest:
        return f"asks for pods of {shape[2]} GPUs, more than any node has ({largest})"
    if total and shape[0] > total:
        return f"asks for {shape[0]} GPUs in all, more than the cluster has ({total})"
    return None


def _may_name_type(spec: dict) -> bool:
    """Whether a podSet's pod spec may name a GPU type (flavors.pod_accepts): a node selector or affinity, or a
    container asking a MIG resource."""
    if spec.get("nodeSelector") or spec.get("affinity"):
        return True
    for c in spec.get("containers") or []:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        if any(str(k).startswith(MIG_PREFIX) for part in ("requests", "limits") for k in (res.get(part) or {})):
            return True
    return False


def _as_jobs(rows: list[tuple]) -> Jobs:
    """Rows of (id, tenant, GPUs, priority, wait, pods, accepted types) as pending Jobs, each a gang of its pods
    (Jobs.packed); accepts None where every row's is (a one-model cluster)."""
    if not rows:
        return Jobs.empty()
    ids, ten, gpus, prio, wait, pods, acc = zip(*rows)
    n = len(ids)
    asked = np.array(pods, dtype=np.int64)
    accepts = None
    if any(a is not None for a in acc):
        accepts = np.empty(n, dtype=object)
        accepts[:] = [ANY if a is None else a for a in acc]
    return Jobs(ids=np.array(ids, dtype=object), tenant=np.array(ten, dtype=np.int64),
                gpus=np.array(gpus, dtype=np.int64), priority=np.array(prio, dtype=np.int8),
                running=np.zeros(n, dtype=bool), runtime_s=np.zeros(n), wait_s=np.array(wait, dtype=float),
                node=np.array([""] * n, dtype=object), nodes_asked=asked, packed=asked > 1, accepts=accepts)


def _in_turn(cands: list, most: int) -> list:
    """Up to `most` of `cands` ((namespace, name), ...), one namespace's after another's in turn, each namespace's
    in their order."""
    by_ns: dict[str, list] = {}
    for c in cands:
        by_ns.setdefault(c[0][0], []).append(c)
    return in_turn(list(by_ns.values()), most)


class _FirstServed:
    """Of each group's (a tenant's, a namespace's) waiting Workloads, the `most` Kueue serves first (the higher
    ``spec.priority``, then the older; equal ones as listed), kept in a heap as the list is read a page at a time, so
    none of the rest is held; and how many of each were past the bound."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.heaps: dict[str, list] = {}
        self.over: dict[str, int] = {}
        self._seq = 0

    def add(self, group: str, wl: dict, item: object) -> None:
        prio = (wl.get("spec") or {}).get("priority")
        prio = prio if isinstance(prio, int) and not isinstance(prio, bool) else 0
        created = _epoch((wl.get("metadata") or {}).get("creationTimestamp"))
        self._seq += 1
        # the heap's top is the one Kueue serves last: the lowest priority, the newest, the last listed
        entry = (prio, -(created if created is not None else float("inf")), -self._seq, item)
        heap = self.heaps.setdefault(group, [])
        if len(heap) < self.most:
            heapq.heappush(heap, entry)
        else:
            self.over[group] = self.over.get(group, 0) + 1
            heapq.heappushpop(heap, entry)

    def kept(self) -> list:
        """The items kept, in the order they were listed."""
        return [e[3] for e in sorted((e for h in self.heaps.values() for e in h), key=lambda e: -e[2])]


def rfc3339(t: float | None) -> str | None:
    return None if t is None else dt.datetime.fromtimestamp(round(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Workloads:
    """The pending Workloads of the tenants' namespaces, read each cycle; the estimates written back on them."""

    def __init__(self, custom, tenant_of_ns: dict[str, str], resource: str, low_queue: str,
                 max_per_tenant: int = MAX_PER_TENANT, max_per_namespace: int = MAX_PER_NAMESPACE,
                 resolver: TypeResolver | None = None) -> None:
        self.custom = custom
        self.resolver = resolver   # a mixed fleet's [fleet] types: each waiting Workload's accepted types (_types)
        # and the types its queue's flavors select (read when a Workload waits on a mixed fleet)
        self.queues = QueueTypes(custom, resource, resolver) if resolver is not None and custom is not None else None
        self.tenant_of = tenant_of_ns
        self.resource = resource
        self.low_queue = low_queue
        self.max_per_tenant = max_per_tenant   # actuators.kueue.max_workloads_per_tenant: the plan's demand of each
        self.max_per_namespace = max_per_namespace   # actuators.kueue.max_queued_per_namespace: the estimate's queue
        self.over: dict[str, int] = {}          # namespace -> waiting Workloads past max_per_namespace, as last said
        self._never: dict[str, str] = {}        # Workloads that can never be admitted (uid -> line), as last said
        self._over: dict[str, int] = {}         # tenant -> its waiting Workloads past max_per_tenant, as last said
        self._pods: dict[tuple[str, int], object] = {}   # (uid, podSet) -> its template read as a V1Pod, while waiting
        self.queued: dict[str, Queued] = {}     # job id -> the Workload, as the last read found it
        self.admitted: list[tuple[str, str]] = []   # (namespace, name): waiting no more or never to be admitted,
        #                                            still carrying our estimate
        self.started: dict[str, float] = {}     # job id -> when Kueue admitted it (epoch), for the admitted ones
        self._said: set[str] = set()            # malformed Workloads logged and still listed (uid)
        self._write_version: str | None = None  # STORED where the API server serves it, else VERSION
        # a dry run writes nothing, so the Workloads never carry what it would have written: what it said it would
        # write is kept here instead, so that its reports do not list every waiting Workload every cycle
        self.told: dict[tuple[str, str], tuple[float | None, float | None] | None] = {}   # None: cleared

    def list(self) -> Iterator[dict]:
        """Every Workload of every namespace, a page at a time as it is read (an ApiException when the API does not
        answer): jobs() and demand() keep of each only what they read, so a tenant's many Workloads are never all held
        at once."""
        cont = None
        while True:
            page = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=PAGE, _continue=cont)
            items, cont = page.get("items") or [], (page.get("metadata") or {}).get("continue")
            del page
            yield from items
            del items   # let the page go before the next is asked for
            if not cont:
                return

    def _scan(self, items: Iterable[dict], tenants: tuple[str, ...], sizes: Iterable[int],
              starts: Callable[[object, int], str | None] | None) -> Iterator[tuple[str, dict, int, tuple | None]]:
        """Each tenant Workload among `items` (read as they come, a page at a time) as (what, Workload, tenant index,
        shape). The one never-admitted rule of both reads, the plan's demand and the estimate's queue: 'gone' (Kueue
        holds it back no more: admitted, finished, deactivated, being deleted), 'never' (Kueue will never admit it:
        kueue_refuses; _too_big for `sizes`, each node's GPUs, usable now or not, a cordoned node may come back; or a
        podSet no node takes, `starts`: _placed_nowhere), said once per Workload in one line, or 'waits' (asking
        GPUs, with its shape). A malformed one (said once while it is listed) and one asking no GPU are neither."""
        index = {t: i for i, t in enumerate(tenants)}
        if self.queues is not None:
            self.queues.reset()
        sizes = list(sizes)
        largest, total = max(sizes, default=0), sum(sizes)
        never: dict[str, str] = {}
        seen: dict[tuple[str, int], object] = {}
        malformed: set[str] = set()
        for wl in items:
            meta = wl.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            t = self.tenant_of.get(ns)
            if t not in index:
                continue
            if not _held_back(wl):
                yield "gone", wl, index[t], None
                continue
            key = meta.get("uid") or f"{ns}/{name}"
            why = kueue_refuses(wl)
            shape = None
            if why is None:
                try:
                    shape = workload_shape(wl, self.resource)
                except Malformed as exc:
                    malformed.add(key)
                    if key not in self._said:
                        log.warning("Kueue Workload %s/%s skipped (no demand, no start-time estimate): %s", ns, name,
                                    exc)
                    continue
                if shape[0] <= 0:
                    continue
                why = _too_big(shape, largest, total)
                if why is None and starts is not None:
                    why = self._placed_nowhere(wl, starts, seen)
            if why is not None:
                never[key] = f"Kueue Workload {ns}/{name} {why}"
                yield "never", wl, index[t], shape
                continue
            yield "waits", wl, index[t], (*shape, self._types(wl, seen))
        for key in sorted(never.keys() - self._never.keys()):
            log.warning("%s: it can never be admitted, so it is no demand (no hold, no preemption, no aging for it) "
                        "and has no start-time estimate", never[key])
        # only those still listed: a tenant creating a malformed one a second, each under a new uid, grew the set for
        # as long as the daemon ran
        self._never, self._pods, self._said = never, seen, malformed

    def jobs(self, items: Iterable[dict], tenants: tuple[str, ...], now: dt.datetime | None = None,
             sizes: Iterable[int] = (), starts: Callable[[object, int], str | None] | None = None) -> Jobs:
        """The waiting Workloads among `items` as pending Jobs for the estimate (module docstring), by the plan's
        never-admitted rule (_scan: a Workload Kueue will never admit is not estimated, and an estimate it carries is
        cleared), Kueue not having tried one yet or not; remembers them for changes(). Of one namespace at most
        ``max_per_namespace``, those Kueue serves first (_FirstServed): a tenant's 100,000 Workloads were as many
        jobs in every estimate, each cycle; the rest are said in one line when their number changes."""
        now = now or dt.datetime.now(dt.timezone.utc)
        first = _FirstServed(self.max_per_namespace)
        clear: list[tuple[str, str]] = []
        started: dict[str, float] = {}
        for what, wl, t, shape in self._scan(items, tenants, sizes, starts):
            meta = wl.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            notes = meta.get("annotations") or {}
            if what == "waits":
                first.add(ns, wl, (self._row(wl, t, shape, now),
                                   Queued(ns, name, _epoch(notes.get(P50)), _epoch(notes.get(P90)), REASON in notes)))
                continue
            if what == "gone" and (wl.get("status") or {}).get("admission"):
                at = admitted_at(wl)
                if at is not None:
                    started[workload_id(ns, name)] = at
            if any(k in notes for k in OURS) and not meta.get("deletionTimestamp"):
                clear.append((ns, name))   # admitted, waiting no more, or never to be admitted
        kept = first.kept()
        self.queued = {row[0]: q for row, q in kept}
        self.admitted, self.started = clear, started
        self._report_over(first.over)
        return _as_jobs([row for row, _ in kept])

    def _row(self, wl: dict, tenant: int, shape: tuple, now: dt.datetime) -> tuple:
        """A waiting Workload's row: (id, tenant, GPUs, priority, wait, pods, accepted types) (module docstring;
        `shape`: _scan's, its accepted types last)."""
        meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
        tier = tier_of(spec, self.low_queue)
        created = _epoch(meta.get("creationTimestamp"))
        wait = max(now.timestamp() - created, 0.0) if created is not None else 0.0
        return (workload_id(meta.get("namespace", ""), meta.get("name", "")), tenant, shape[0], PRIORITY[tier], wait,
                max(shape[1], 1), shape[3])

    def _template(self, wl: dict, i: int, seen: dict[tuple[str, int], object]) -> object | None:
        """PodSet `i`'s template read as the client's V1Pod (the official client's own reading of a pod), once per
        Workload while it waits (its podSets do not change: kept in `seen`, and in self._pods from cycle to cycle);
        None where it does not read as a pod."""
        key = (str((wl.get("metadata") or {}).get("uid") or ""), i)
        pod = seen.get(key) or self._pods.get(key)
        if pod is None:
            tpl = ((wl.get("spec") or {}).get("podSets") or [])[i].get("template") or {}
            try:
                pod = _DECODE._ApiClient__deserialize({"metadata": tpl.get("metadata") or {},
                                                       "spec": tpl.get("spec") or {}}, "V1Pod")
            except (ValueError, TypeError, AttributeError):
                return None
        seen[key] = pod
        return pod

    def _types(self, wl: dict, seen: dict[tuple[str, int], object]) -> tuple[str, ...] | None:
        """The GPU types a waiting Workload's gang can run on, in order of preference, on a mixed fleet (None on a
        one-model cluster): its pods' as a pending pod's are read (flavors.pod_accepts: a MIG resource, else a
        ``nodeSelector`` or required node affinity on the product label, ordered by the preferred affinity), over the
        podSets that ask GPUs. Kueue assigns a podSet a flavor whose ``nodeLabels`` its selectors accept (a flavor
        per type on a mixed fleet: fleet-schedulers.md), so a gang asking H100 is admitted on the H100 flavor only and
        its pods bind on H100 nodes: read as any type, the plan made its room on whichever type was cheaper to clear,
        where it never starts. Where podSets name different types, the types all of them accept (the plan places a
        gang on one type); none in common: those of the podSet asking the most GPUs. ANY where none names one. Then
        narrowed to the types its queue's flavors select (queue_types.QueueTypes: a site's queue whose only GPU flavor
        is H100's admits it on H100 only, whatever its pods select), where the two have a type in common."""
        if self.resolver is None:
            return None
        pods = self._pod_types(wl, seen)
        spec = wl.get("spec") or {}
        queue = self.queues(str((wl.get("metadata") or {}).get("namespace") or ""),
                            str(spec.get("queueName") or "")) if self.queues is not None else ANY
        if not queue or not pods:
            return queue or pods
        return tuple(t for t in pods if t in queue) or pods

    def _pod_types(self, wl: dict, seen: dict[tuple[str, int], object]) -> tuple[str, ...]:
        """The types the Workload's pods select (_types), ANY where none names one."""
        named: list[tuple[int, tuple[str, ...]]] = []
        for i, ps in enumerate((wl.get("spec") or {}).get("podSets") or []):
            if not _may_name_type(((ps.get("template") or {}).get("spec")) or {}):
                continue   # names no type: takes any (read as a pod only where it may name one)
            g = _gpus_per_pod(ps.get("template"), self.resource, f"spec.podSets[{i}]")
            pod = self._template(wl, i, seen) if g > 0 else None
            acc = pod_accepts(self.resolver, pod) if pod is not None else ANY
            if acc:
                named.append((g * int(ps.get("count") or 0), acc))
        if not named:
            return ANY
        common = [t for t in named[0][1] if all(t in acc for _, acc in named[1:])]
        return tuple(common) if common else max(named, key=lambda x: x[0])[1]

    def _placed_nowhere(self, wl: dict, starts: Callable[[object, int], str | None],
                        seen: dict[tuple[str, int], object]) -> str | None:
        """Why a podSet of the Workload starts on no node (`starts`, the pod view's never_starts: its nodeSelector and
        required node affinity, spread keys and tolerations against the nodes' labels and taints, as kube-scheduler
        filters the pods Kueue makes; Kueue itself finds no flavor for such a podSet on a mixed fleet, whose flavors
        select GPU types), or None. Only podSets that select nodes, tolerate or spread are judged (the rest start
        wherever their GPUs fit: _too_big). Each podSet's template is read as a pod once per Workload (its podSets
        do not change) and kept in `seen` while the Workload waits."""
        for i, ps in enumerate((wl.get("spec") or {}).get("podSets") or []):
            spec = ((ps.get("template") or {}).get("spec")) or {}
            if not any(spec.get(k) for k in ("nodeSelector", "affinity", "topologySpreadConstraints", "tolerations")):
                continue
            pod = self._template(wl, i, seen)
            if pod is None:
                continue   # not read as a pod: never judged, so never hidden
            g = _gpus_per_pod(ps.get("template"), self.resource, f"spec.podSets[{i}]")
            why = starts(pod, g) if g > 0 else None
            if why is not None:
                return f"has pods (podSet {ps.get('name') or i}) that no node takes: {why}"
        return None

    def demand(self, items: Iterable[dict], tenants: tuple[str, ...], sizes: list[int], owners: set[tuple[str, str]],
               now: dt.datetime | None = None, starts: Callable[[object, int], str | None] | None = None) -> Jobs:
        """The waiting Workloads among `items` the plan counts as pending jobs, each with its shape (module
        docstring): by the never-admitted rule (_scan), those Kueue has tried (a QuotaReserved condition: one it has
        not is demand within a second, if it may be admitted) and that are not counted as pods already (`owners`:
        pod_owners); per tenant at most max_per_tenant, those Kueue serves first (_FirstServed)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        first = _FirstServed(self.max_per_tenant)
        for what, wl, t, shape in self._scan(items, tenants, sizes, starts):
            if what != "waits" or quota_verdict(wl) is None:
                continue
            meta = wl.get("metadata") or {}
            refs = meta.get("ownerReferences") or []
            if owners and any(isinstance(r, dict) and (meta.get("namespace"), r.get("uid")) in owners for r in refs):
                continue   # its pods are in the pod view (a requeued Workload whose pods still run): counted there
            first.add(tenants[t], wl, self._row(wl, t, shape, now))
        for t in sorted(first.over):
            if self._over.get(t) != first.over[t]:
                log.warning("tenant %s has %d waiting Kueue Workloads beyond actuators.kueue.max_workloads_per_tenant "
                            "(%d): those, the last in Kueue's order, are no demand until fewer wait", t,
                            first.over[t], self.max_per_tenant)
        self._over = first.over
        return _as_jobs(first.kept())

    def _report_over(self, over: dict[str, int]) -> None:
        """One line when a namespace's waiting Workloads past the bound change (appear, move, go), not each cycle."""
        for ns in sorted(set(over) | set(self.over)):
            if over.get(ns, 0) != self.over.get(ns, 0):
                if over.get(ns):
                    log.warning("Kueue Workloads: %d waiting in namespace %s past the %d read for the start-time "
                                "estimates (those Kueue serves first are read: priority, then the longest waiting; "
                                "the rest have no estimate)", over[ns], ns, self.max_per_namespace)
                else:
                    log.info("Kueue Workloads: namespace %s has no more than %d waiting again", ns,
                             self.max_per_namespace)
        self.over = over

    def changes(self, rows: list[dict], made_at: float, dry_run: bool = False) -> list[tuple[str, str, dict]]:
        """The patches to send: (namespace, name, annotations; None removes one) for each waiting Workload whose
        estimate moved (daemon.policy.eta.moved: REWRITE_S or more, or became (un)known) against what it carries (or
        that carries none yet), and for each admitted one that still carries ours. In a dry run, against what it
        last said it would write. At most MAX_PATCHES a cycle, taken from the namespaces in turn (each in the
        scheduler's order): a tenant's 10,000 new Workloads were 10,000 fenced patches in one cycle, the cycle's
        thread busy with them and the other tenants' estimates behind them; the rest are sent in later cycles."""
        cands: list[tuple[tuple[str, str], dict, tuple[float | None, float | None] | None]] = []
        told: dict[tuple[str, str], tuple[float | None, float | None] | None] = {}
        for r in rows:
            q = self.queued.get(str(r.get("job_id")))
            if q is None:
                continue
            p50 = None if r.get("p50_s") is None else made_at + float(r["p50_s"])
            p90 = None if r.get("p90_s") is None else made_at + float(r["p90_s"])
            key = (q.namespace, q.name)
            prev = self.told.get(key) if dry_run else None
            if prev is not None:
                told[key] = prev
                if not _moved(prev, (p50, p90)):
                    continue
            elif q.written and not _moved((q.p50, q.p90), (p50, p90)):
                continue
            cands.append((key, {P50: rfc3339(p50), P90: rfc3339(p90), REASON: str(r.get("basis") or "")[:500]},
                          (p50, p90)))
        for key in self.admitted:
            if dry_run and key in self.told:
                told[key] = self.told[key]
                if self.told[key] is None:
                    continue
            cands.append((key, dict.fromkeys(OURS), None))
        out = []
        for key, notes, says in _in_turn(cands, MAX_PATCHES):
            told[key] = says
            out.append((*key, notes))
        if dry_run:
            self.told = told
        return out

    def patch(self, namespace: str, name: str, annotations: dict) -> None:
        """One merge patch of the Workload's annotations (None removes one), at the version Kueue stores Workloads
        in where served (STORED); an ApiException when refused."""
        if self._write_version is None:
            try:
                served = {r.name for r in self.custom.get_api_resources(GROUP, STORED).resources or []}
            except ApiException as exc:
                if exc.status != 404:
                    raise
                served = set()
            self._write_version = STORED if PLURAL in served else VERSION
        self.custom.patch_namespaced_custom_object(GROUP, self._write_version, namespace, PLURAL, name,
                                                   {"metadata": {"annotations": annotations}},
                                                   _content_type="application/merge-patch+json")

