"""Kueue Workloads that wait for admission: read as pending jobs for the start-time estimate, and given it back as
annotations (issue 39, item 3).

A Workload Kueue has not admitted has no pod (its Job is suspended, its pods are gated), so the pod view (view.py)
does not see it: a Kueue cluster's queue is invisible there. Here every Workload of a tenant namespace is listed
(``kueue.x-k8s.io/v1beta1``, in pages, each cycle) and each one that waits (no ``status.admission``, active, not
finished, not being deleted) becomes a pending job: its id ``<namespace>/workload/<name>`` (a pod's name has no
``/``, so it never meets a pod's id), its tenant the namespace's, its GPUs the sum over its podSets of
``count`` x the GPU resource each pod asks for (requests, else limits, of every container, init containers and sidecars
counted as Kueue counts them), its shape its pods that ask GPUs (``Jobs.nodes_asked``, ``Jobs.packed``: a gang whose
pods may share a node; podSets whose pods ask different GPUs: packed into parts of the largest pod's GPUs,
workload_shape), its wait since its
``creationTimestamp``, its tier its PriorityClass's (``gpu-autoscaler-<tier>``), else low on the tenant's low
LocalQueue, else normal (as a pod's). A Workload asking for no GPU is not a job (as a pod). A malformed one (no
podSets, a count or a GPU quantity that is not one) is skipped with one log line naming it and the field, once.

The plan reads them too (``Workloads.demand``, through the Kueue actuator's cluster_jobs, beside the pods), but only
those Kueue can admit: a Workload Kueue has not looked at yet (no ``QuotaReserved`` condition: its controller and
scheduler write one within a second) is not demand yet; one Kueue finds inadmissible (``QuotaReserved=False``, reason
``Inadmissible``: its LocalQueue or ClusterQueue missing, stopped or terminating) is never demand, nor one whose pod
asks more GPUs than any node has or whose GPUs in all are more than the cluster has (no quota the daemon writes is
ever more than the cluster's GPUs, so Kueue never admits it), nor one with a podSet whose pods no node takes (the pod
view's never_starts: its node selectors, spread keys and tolerations over the nodes): said once per Workload, in one
line. Kueue's own
"Pending ... > maximum capacity" is not taken as never: that capacity is the quotas the plan writes, which grow with
the holds the plan makes for this very demand. A waiting Workload whose pods the pod view counts (their owner is the
Workload's owner, the requeued Workload of a Job whose pods still run) is counted once, as its pods. A tenant's
waiting Workloads are read in Kueue's order (priority, then age) up to ``actuators.kueue.max_workloads_per_tenant``;
the rest are no demand until fewer wait (said once per tenant per change).

An admitted Workload's admission time is its start for the estimate's error metrics (what it was first told is
scored against it).

The estimate goes back on the Workload, where ``kubectl get workload -o yaml`` shows it, as annotations (one merge
patch, fenced like every write): ``gpu-autoscaler.io/eta-p50`` and ``eta-p90`` (RFC 3339, UTC, to the second;
absent while unknown) and ``eta-reason`` (what it rests on, or why it is unknown). Rewritten only when the p50 or
p90 moved 5 minutes or more or became (un)known, compared with what the Workload carries now (so a replica that
takes over does not rewrite them all); once Kueue admits the Workload, they are removed. Annotations rather than an
Event: an Event per move would pile up beside the Workload and expire in an hour; an annotation is the one current
estimate.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np
from kubernetes import client as k8s
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
TIER_OF_CLASS = {priority_class_name(t): t for t in PRIORITY}
_DECODE = k8s.ApiClient()   # reads a podSet's template as the client's V1Pod (no request is ever sent with it)


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


INADMISSIBLE = "Inadmissible"   # Kueue's reason (WorkloadInadmissible) on QuotaReserved=False: no queue to admit it


def quota_verdict(wl: dict) -> tuple[str, str] | None:
    """Kueue's last word on reserving quota for a waiting Workload: (reason, message) of its ``QuotaReserved=False``
    condition (``Inadmissible``: its queues do not let it in; ``Pending``: no room now), None while it has none
    (Kueue has not tried it yet). Written by Kueue's controller through workloads/status, which Kueue's roles give a
    tenant only to read."""
    for c in (wl.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "QuotaReserved" and c.get("status") == "False":
            return str(c.get("reason") or ""), " ".join(str(c.get("message") or "").split())[:300]
    return None


def pod_owners(pods: list, tenant_of_ns: dict[str, str]) -> set[str]:
    """UIDs of the live tenant pods the pod view may count (Pending or Running, not being deleted, not gated) and of
    their owners (a Job's pods: the Job), the UIDs a Workload already counted as pods names as its owner."""
    out: set[str] = set()
    for p in pods:
        m = p.metadata
        if m.namespace not in tenant_of_ns or m.deletion_timestamp is not None:
            continue
        if (p.status.phase if p.status else None) not in ("Pending", "Running"):
            continue
        if not p.spec.node_name and getattr(p.spec, "scheduling_gates", None):
            continue   # gated (Kueue's pod integration before admission): not counted as a pod, so not here
        out.add(m.uid)
        out.update(r.uid for r in m.owner_references or [])
    return out


def waits(wl: dict) -> bool:
    """Whether Kueue holds the Workload back: not admitted (no quota reserved), active, not finished, not going."""
    st = wl.get("status") or {}
    if st.get("admission") or (wl.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if (wl.get("spec") or {}).get("active") is False:
        return False
    return not any(c.get("type") == "Finished" and c.get("status") == "True" for c in st.get("conditions") or [])


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


def _never_why(verdict: tuple[str, str], shape: tuple[int, int, int], largest: int, total: int) -> str | None:
    """Why a waiting Workload Kueue has tried can never be admitted, or None: Kueue's own ``Inadmissible``, a pod
    larger than any node, or more GPUs in all than the cluster has (``largest``, ``total``: 0 with no node read)."""
    reason, message = verdict
    if reason == INADMISSIBLE:
        return f"is inadmissible to Kueue ({message or 'no message'})"
    if largest and shape[2] > largest:
        return f"asks for pods of {shape[2]} GPUs, more than any node has ({largest})"
    if total and shape[0] > total:
        return f"asks for {shape[0]} GPUs in all, more than the cluster has ({total})"
    return None


def _as_jobs(rows: list[tuple]) -> Jobs:
    """Rows of (id, tenant, GPUs, priority, wait, pods) as pending Jobs, each a gang of its pods (Jobs.packed)."""
    if not rows:
        return Jobs.empty()
    ids, ten, gpus, prio, wait, pods = zip(*rows)
    n = len(ids)
    asked = np.array(pods, dtype=np.int64)
    return Jobs(ids=np.array(ids, dtype=object), tenant=np.array(ten, dtype=np.int64),
                gpus=np.array(gpus, dtype=np.int64), priority=np.array(prio, dtype=np.int8),
                running=np.zeros(n, dtype=bool), runtime_s=np.zeros(n), wait_s=np.array(wait, dtype=float),
                node=np.array([""] * n, dtype=object), nodes_asked=asked, packed=asked > 1)


def rfc3339(t: float | None) -> str | None:
    return None if t is None else dt.datetime.fromtimestamp(round(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Workloads:
    """The pending Workloads of the tenants' namespaces, read each cycle; the estimates written back on them."""

    def __init__(self, custom, tenant_of_ns: dict[str, str], resource: str, low_queue: str,
                 max_per_tenant: int = 1000) -> None:
        self.custom = custom
        self.tenant_of = tenant_of_ns
        self.resource = resource
        self.low_queue = low_queue
        self.max_per_tenant = max_per_tenant   # actuators.kueue.max_workloads_per_tenant: the plan's read of each
        self._never: dict[str, str] = {}        # Workloads that can never be admitted (uid -> line), as last said
        self._over: dict[str, int] = {}         # tenant -> its waiting Workloads past max_per_tenant, as last said
        self._pods: dict[tuple[str, int], object] = {}   # (uid, podSet) -> its template read as a V1Pod, while waiting
        self.queued: dict[str, Queued] = {}     # job id -> the Workload, as the last read found it
        self.admitted: list[tuple[str, str]] = []   # (namespace, name): admitted, still carrying our estimate
        self.started: dict[str, float] = {}     # job id -> when Kueue admitted it (epoch), for the admitted ones
        self._said: set[str] = set()            # malformed Workloads already logged (uid)
        self._write_version: str | None = None  # STORED where the API server serves it, else VERSION
        # a dry run writes nothing, so the Workloads never carry what it would have written: what it said it would
        # write is kept here instead, so that its reports do not list every waiting Workload every cycle
        self.told: dict[tuple[str, str], tuple[float | None, float | None] | None] = {}   # None: cleared

    def list(self) -> list[dict]:
        """Every Workload of every namespace, in pages (an ApiException when the API does not answer)."""
        out: list[dict] = []
        cont = None
        while True:
            page = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=PAGE, _continue=cont)
            out += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return out

    def jobs(self, items: list[dict], tenants: tuple[str, ...], now: dt.datetime | None = None) -> Jobs:
        """The waiting Workloads among `items` as pending Jobs (module docstring); remembers them for write()."""
        now = now or dt.datetime.now(dt.timezone.utc)
        index = {t: i for i, t in enumerate(tenants)}
        rows = []
        queued: dict[str, Queued] = {}
        admitted = []
        started: dict[str, float] = {}
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
                    if any(k in notes for k in OURS):
                        admitted.append((ns, name))
                continue
            shape = self._shape(wl)
            if shape is None or shape[0] <= 0:
                continue
            jid = workload_id(ns, name)
            queued[jid] = Queued(ns, name, _epoch(notes.get(P50)), _epoch(notes.get(P90)), REASON in notes)
            rows.append(self._row(wl, index[t], shape, now))
        self.queued, self.admitted, self.started = queued, admitted, started
        return _as_jobs(rows)

    def _shape(self, wl: dict) -> tuple[int, int, int] | None:
        """workload_shape, or None for a malformed Workload (said once per Workload, naming the field)."""
        try:
            return workload_shape(wl, self.resource)
        except Malformed as exc:
            meta = wl.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            key = meta.get("uid") or f"{ns}/{name}"
            if key not in self._said:
                self._said.add(key)
                log.warning("Kueue Workload %s/%s skipped (no demand, no start-time estimate): %s", ns, name, exc)
            return None

    def _row(self, wl: dict, tenant: int, shape: tuple[int, int, int], now: dt.datetime) -> tuple:
        """A waiting Workload's row: (id, tenant, GPUs, priority, wait, pods) (module docstring)."""
        meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
        tier = TIER_OF_CLASS.get(spec.get("priorityClassName") or "")
        if tier is None:
            tier = "low" if spec.get("queueName") == self.low_queue else "normal"
        created = _epoch(meta.get("creationTimestamp"))
        wait = max(now.timestamp() - created, 0.0) if created is not None else 0.0
        return (workload_id(meta.get("namespace", ""), meta.get("name", "")), tenant, shape[0], PRIORITY[tier], wait,
                max(shape[1], 1))

    def _placed_nowhere(self, wl: dict, starts: Callable[[object, int], str | None],
                        seen: dict[tuple[str, int], object]) -> str | None:
        """Why a podSet of the Workload starts on no node (`starts`, the pod view's never_starts: its nodeSelector and
        required node affinity, spread keys and tolerations against the nodes' labels and taints, as kube-scheduler
        filters the pods Kueue makes; Kueue itself finds no flavor for such a podSet on a mixed fleet, whose flavors
        select GPU types), or None. Only podSets that select nodes, tolerate or spread are judged (the rest start
        wherever their GPUs fit: _never_why). Each podSet's template is read as a pod once per Workload (its podSets
        do not change) and kept in `seen` while the Workload waits."""
        uid = str((wl.get("metadata") or {}).get("uid") or "")
        for i, ps in enumerate((wl.get("spec") or {}).get("podSets") or []):
            spec = ((ps.get("template") or {}).get("spec")) or {}
            if not any(spec.get(k) for k in ("nodeSelector", "affinity", "topologySpreadConstraints", "tolerations")):
                continue
            key = (uid, i)
            pod = seen.get(key) or self._pods.get(key)
            if pod is None:
                try:
                    pod = _DECODE._ApiClient__deserialize(  # the official client's own reading of a pod
                        {"metadata": (ps.get("template") or {}).get("metadata") or {}, "spec": spec}, "V1Pod")
                except (ValueError, TypeError, AttributeError):
                    continue   # not read as a pod: never judged, so never hidden
            seen[key] = pod
            g = _gpus_per_pod(ps.get("template"), self.resource, f"spec.podSets[{i}]")
            why = starts(pod, g) if g > 0 else None
            if why is not None:
                return f"has pods (podSet {ps.get('name') or i}) that no node takes: {why}"
        return None

    def demand(self, items: list[dict], tenants: tuple[str, ...], sizes: list[int], owners: set[str],
               now: dt.datetime | None = None, starts: Callable[[object, int], str | None] | None = None) -> Jobs:
        """The waiting Workloads among `items` the plan counts as pending jobs, each with its shape (module
        docstring): only those Kueue has tried and does not find inadmissible, that fit the cluster (`sizes`: each
        node's GPUs, usable now or not: a cordoned node may come back), whose pods some node takes (`starts`: the
        pod view's never_starts over the nodes, asked of each podSet that selects nodes, keeps off taints or spreads),
        and that are not counted as pods already (`owners`: pod_owners); per tenant at most max_per_tenant, in
        Kueue's order (priority, then the oldest)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        index = {t: i for i, t in enumerate(tenants)}
        largest, total = max(sizes, default=0), sum(sizes)
        never: dict[str, str] = {}
        pods: dict[tuple[str, int], object] = {}
        per_tenant: dict[int, list[tuple[int, float, tuple]]] = {}
        for wl in items:
            meta = wl.get("metadata") or {}
            ns, name = meta.get("namespace", ""), meta.get("name", "")
            t = self.tenant_of.get(ns)
            if t not in index or not waits(wl):
                continue
            refs = meta.get("ownerReferences") or []
            if owners and any(isinstance(r, dict) and r.get("uid") in owners for r in refs):
                continue   # its pods are in the pod view (a requeued Workload whose pods still run): counted there
            shape = self._shape(wl)
            if shape is None or shape[0] <= 0:
                continue
            verdict = quota_verdict(wl)
            if verdict is None:
                continue   # Kueue has not tried it yet: demand once it has (within a second), if it may be admitted
            why = _never_why(verdict, shape, largest, total)
            if why is None and starts is not None:
                why = self._placed_nowhere(wl, starts, pods)
            if why is not None:
                never[meta.get("uid") or f"{ns}/{name}"] = f"Kueue Workload {ns}/{name} {why}"
                continue
            prio = (wl.get("spec") or {}).get("priority")
            prio = prio if isinstance(prio, int) and not isinstance(prio, bool) else 0
            created = _epoch(meta.get("creationTimestamp"))
            per_tenant.setdefault(index[t], []).append(
                (-prio, created if created is not None else float("inf"), self._row(wl, index[t], shape, now)))
        for key in sorted(never.keys() - self._never.keys()):
            log.warning("%s: it can never be admitted, so it is no demand (no hold, no preemption, no aging for it)",
                        never[key])
        self._never, self._pods = never, pods
        rows, over = [], {}
        for i, got in per_tenant.items():
            if len(got) > self.max_per_tenant:
                got.sort(key=lambda r: r[:2])
                over[tenants[i]] = len(got) - self.max_per_tenant
                got = got[:self.max_per_tenant]
            rows += [r[2] for r in got]
        for t in sorted(over):
            if self._over.get(t) != over[t]:
                log.warning("tenant %s has %d waiting Kueue Workloads beyond actuators.kueue.max_workloads_per_tenant "
                            "(%d): those, the last in Kueue's order, are no demand until fewer wait", t, over[t],
                            self.max_per_tenant)
        self._over = over
        return _as_jobs(rows)

    def changes(self, rows: list[dict], made_at: float, dry_run: bool = False) -> list[tuple[str, str, dict]]:
        """The patches to send: (namespace, name, annotations; None removes one) for each waiting Workload whose
        estimate moved (daemon.policy.eta.moved: REWRITE_S or more, or became (un)known) against what it carries (or
        that carries none yet), and for each admitted one that still carries ours. In a dry run, against what it
        last said it would write."""
        out = []
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
            told[key] = (p50, p90)
            out.append((q.namespace, q.name, {P50: rfc3339(p50), P90: rfc3339(p90),
                                              REASON: str(r.get("basis") or "")[:500]}))
        for key in self.admitted:
            told[key] = None
            if not (dry_run and key in self.told and self.told[key] is None):
                out.append((*key, dict.fromkeys(OURS)))
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

