"""Kueue Workloads that wait for admission: read as pending jobs for the start-time estimate, and given it back as
annotations (issue 39, item 3).

A Workload Kueue has not admitted has no pod (its Job is suspended, its pods are gated), so the pod view (view.py)
does not see it: a Kueue cluster's queue is invisible there. Here every Workload of a tenant namespace is listed
(``kueue.x-k8s.io/v1beta1``, in pages, each cycle) and each one that waits (no ``status.admission``, active, not
finished, not being deleted, in a queue Kueue has not found inadmissible: waits) becomes a pending job: its id
``<namespace>/workload/<name>`` (a pod's name has no ``/``, so it never meets a pod's id), its tenant the
namespace's, its GPUs the sum over its podSets of ``count`` x the GPU resource each pod asks for (requests, else
limits, of every container, init containers and sidecars counted as Kueue counts them), its shape its pods that ask
GPUs (``Jobs.nodes_asked``, ``Jobs.packed``: a gang whose pods may share a node; podSets whose pods ask different
GPUs: packed into parts of the largest pod's GPUs, workload_shape), its wait since its ``creationTimestamp``, its
tier its pod PriorityClass's (``gpu-autoscaler-<tier>``; not a WorkloadPriorityClass's: tier_of), else low on the
tenant's low LocalQueue, else normal (as a pod's). A Workload asking for no GPU is not a job (as a pod). A malformed
one (no podSets, a count or a GPU quantity that is not one) is skipped with one log line naming it and the field,
once while it is listed.

Only the estimator reads these: the plan does not (it plans on pods, as before). An admitted Workload's admission
time is its start for the estimate's error metrics (what it was first told is scored against it).

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

import numpy as np
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from daemon.actuators.k8s.objects import MAX_POD_GPUS, effective_request, priority_class_name
from daemon.policy.eta import moved as _moved
from daemon.policy.state import PRIORITY, Jobs

log = logging.getLogger("gpu_autoscaler.actuator.kueue.workloads")

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta1", "workloads"
# the version Kueue 0.17 stores Workloads in: a patch sent at v1beta1 is converted there and back, and the round trip
# changes priorityClassSource, which Kueue's CRD forbids while quota is reserved (a 422 on an admitted Workload)
STORED = "v1beta2"
P50, P90, REASON = "gpu-autoscaler.io/eta-p50", "gpu-autoscaler.io/eta-p90", "gpu-autoscaler.io/eta-reason"
OURS = (P50, P90, REASON)
PAGE = 500
# the most waiting Workloads of one namespace read for the estimates (actuators.kueue.max_queued_per_namespace)
MAX_PER_NAMESPACE = 10_000
# the most estimate patches (annotations written or cleared) a cycle sends; the rest follow in later cycles
MAX_PATCHES = 200
TIER_OF_CLASS = {priority_class_name(t): t for t in PRIORITY}
# spec.priorityClassSource at v1beta1 of a Workload whose class is a pod PriorityClass (v1beta2's priorityClassRef of
# group scheduling.k8s.io), the one the high-priority-class admission rule checks; a WorkloadPriorityClass
# (kueue.x-k8s.io/workloadpriorityclass) may carry any name, gpu-autoscaler-high too
POD_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
# QuotaReserved=False reasons for a Workload Kueue will not admit as it is: its LocalQueue or ClusterQueue missing,
# stopped or inactive (Inadmissible; Misconfigured in later versions)
NEVER_ADMITTED = frozenset({"Inadmissible", "Misconfigured"})


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


def waits(wl: dict) -> bool:
    """Whether Kueue holds the Workload back for quota: not admitted (no quota reserved), active, not finished, not
    going, and one Kueue may admit: it names a queue (Kueue leaves a Workload without one alone) and Kueue has not
    found it inadmissible (NEVER_ADMITTED: its LocalQueue missing or stopped, its ClusterQueue missing or inactive).
    A tenant may create Workloads itself: one that no quota can start was a pending job all the same, in the
    scheduler's order ahead of later work, and the estimate gave it GPUs it will never take."""
    st = wl.get("status") or {}
    if st.get("admission") or (wl.get("metadata") or {}).get("deletionTimestamp"):
        return False
    spec = wl.get("spec") or {}
    if spec.get("active") is False or not spec.get("queueName"):
        return False
    for c in st.get("conditions") or []:
        if c.get("type") == "Finished" and c.get("status") == "True":
            return False
        if c.get("type") == "QuotaReserved" and c.get("status") == "False" and c.get("reason") in NEVER_ADMITTED:
            return False
    return True


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


def _in_turn(cands: list, most: int) -> list:
    """Up to `most` of `cands` ((namespace, name), ...), one namespace's after another's in turn, each namespace's
    in their order."""
    by_ns: dict[str, list] = {}
    for c in cands:
        by_ns.setdefault(c[0][0], []).append(c)
    out: list = []
    queues = [iter(v) for v in by_ns.values()]
    while queues and len(out) < most:
        for it in list(queues):
            nxt = next(it, None)
            if nxt is None:
                queues.remove(it)
            elif len(out) < most:
                out.append(nxt)
    return out


def rfc3339(t: float | None) -> str | None:
    return None if t is None else dt.datetime.fromtimestamp(round(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Workloads:
    """The pending Workloads of the tenants' namespaces, read each cycle; the estimates written back on them."""

    def __init__(self, custom, tenant_of_ns: dict[str, str], resource: str, low_queue: str,
                 max_per_namespace: int = MAX_PER_NAMESPACE) -> None:
        self.custom = custom
        self.max_per_namespace = max_per_namespace
        self.over: dict[str, int] = {}          # namespace -> waiting Workloads past max_per_namespace, as last said
        self.tenant_of = tenant_of_ns
        self.resource = resource
        self.low_queue = low_queue
        self.queued: dict[str, Queued] = {}     # job id -> the Workload, as the last read found it
        self.admitted: list[tuple[str, str]] = []   # (namespace, name): waiting no more, still carrying our estimate
        self.started: dict[str, float] = {}     # job id -> when Kueue admitted it (epoch), for the admitted ones
        self._said: set[str] = set()            # malformed Workloads logged and still listed (uid)
        self._write_version: str | None = None  # STORED where the API server serves it, else VERSION
        # a dry run writes nothing, so the Workloads never carry what it would have written: what it said it would
        # write is kept here instead, so that its reports do not list every waiting Workload every cycle
        self.told: dict[tuple[str, str], tuple[float | None, float | None] | None] = {}   # None: cleared

    def list(self) -> Iterator[dict]:
        """Every Workload of every namespace, a page at a time as it is read (an ApiException when the API does not
        answer): jobs() keeps of each only what it reads, so a tenant's many Workloads are never all held at once."""
        cont = None
        while True:
            page = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=PAGE, _continue=cont)
            items, cont = page.get("items") or [], (page.get("metadata") or {}).get("continue")
            del page
            yield from items
            del items   # let the page go before the next is asked for
            if not cont:
                return

    def jobs(self, items: Iterable[dict], tenants: tuple[str, ...], now: dt.datetime | None = None) -> Jobs:
        """The waiting Workloads among `items` as pending Jobs (module docstring); remembers them for write(). Of
        one namespace at most ``max_per_namespace``, the longest waiting (the first Kueue serves): a tenant's 100,000
        Workloads were as many jobs in every estimate, each cycle; the rest are said in one line when their number
        changes."""
        now = now or dt.datetime.now(dt.timezone.utc)
        index = {t: i for i, t in enumerate(tenants)}
        rows: dict[str, list] = {}   # namespace -> a heap of its waiting ones: (wait, -seq, row), the newest on top
        over: dict[str, int] = {}
        seq = 0
        admitted = []
        started: dict[str, float] = {}
        malformed: set[str] = set()
        for wl in items:
            meta = wl.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            t = self.tenant_of.get(ns)
            if t not in index:
                continue
            notes = meta.get("annotations") or {}
            if not waits(wl):
                if (wl.get("status") or {}).get("admission"):
                    at = admitted_at(wl)
                    if at is not None:
                        started[workload_id(ns, name)] = at
                if any(k in notes for k in OURS) and not meta.get("deletionTimestamp"):
                    admitted.append((ns, name))   # admitted, or waiting no more (inadmissible, deactivated)
                continue
            try:
                g, pods, _ = workload_shape(wl, self.resource)
            except Malformed as exc:
                key = meta.get("uid") or f"{ns}/{name}"
                malformed.add(key)
                if key not in self._said:
                    log.warning("Kueue Workload %s/%s skipped for the start-time estimates: %s", ns, name, exc)
                continue
            if g <= 0:
                continue
            jid = workload_id(ns, name)
            tier = tier_of(wl.get("spec") or {}, self.low_queue)
            created = _epoch(meta.get("creationTimestamp"))
            wait = max(now.timestamp() - created, 0.0) if created is not None else 0.0
            row = ((jid, index[t], g, PRIORITY[tier], wait, max(pods, 1)),
                   Queued(ns, name, _epoch(notes.get(P50)), _epoch(notes.get(P90)), REASON in notes))
            heap = rows.setdefault(ns, [])
            seq += 1
            if len(heap) < self.max_per_namespace:
                heapq.heappush(heap, (wait, -seq, row))
            else:
                over[ns] = over.get(ns, 0) + 1
                heapq.heappushpop(heap, (wait, -seq, row))
        kept = [row for _, _, row in sorted((x for heap in rows.values() for x in heap), key=lambda x: -x[1])]
        queued = {r[0][0]: r[1] for r in kept}
        self.queued, self.admitted, self.started = queued, admitted, started
        self._report_over(over)
        # only the malformed ones still listed: a tenant creating one a second, each under a new uid, grew the set
        # for as long as the daemon ran
        self._said = malformed
        if not kept:
            return Jobs.empty()
        ids, ten, gpus, prio, wait, pods = zip(*(r[0] for r in kept))
        n = len(ids)
        asked = np.array(pods, dtype=np.int64)
        return Jobs(ids=np.array(ids, dtype=object), tenant=np.array(ten, dtype=np.int64),
                    gpus=np.array(gpus, dtype=np.int64), priority=np.array(prio, dtype=np.int8),
                    running=np.zeros(n, dtype=bool), runtime_s=np.zeros(n), wait_s=np.array(wait, dtype=float),
                    node=np.array([""] * n, dtype=object), nodes_asked=asked, packed=asked > 1)

    def _report_over(self, over: dict[str, int]) -> None:
        """One line when a namespace's waiting Workloads past the bound change (appear, move, go), not each cycle."""
        for ns in sorted(set(over) | set(self.over)):
            if over.get(ns, 0) != self.over.get(ns, 0):
                if over.get(ns):
                    log.warning("Kueue Workloads: %d waiting in namespace %s past the %d read for the start-time "
                                "estimates (the longest waiting are read; the rest have no estimate)", over[ns], ns,
                                self.max_per_namespace)
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

