"""The cluster as the Kubernetes API shows it: pods as the policy's Jobs, nodes as its Nodes.

Pods of all namespaces and nodes, from the daemon's watched view (informer.py: listed once, then watched; one
snapshot per cycle), or listed through the official client where no view is given; read by both the plain
Kubernetes actuator and the Kueue one (which holds nodes with a label and taint, node_holds.py):

- a job is a pod of a tenant namespace that asks for GPUs (``requests``, else ``limits``, of the GPU resource,
  counted as the scheduler counts a pod's request: init containers and sidecars too, objects.effective_request),
  Pending or Running and not being deleted; its id is ``namespace/pod``, its tier its PriorityClass
  (``gpu-autoscaler-<tier>``, any other class: normal), its node ``spec.nodeName`` once bound. A bound pod runs
  (it holds its GPUs, even while Pending pulling its image); an unbound one waits, unless it has scheduling gates
  (``spec.schedulingGates``: the scheduler will not place it, so it is not demand now), names a scheduler nobody
  here runs (``spec.schedulerName``), or can never start (no node passes the scheduler's filters for it: room for
  its GPUs, its nodeSelector and required node affinity, its DoNotSchedule spread keys, its required pod affinity
  and anti-affinity over the bound pods and theirs against it (pod_affinity.py), the taints it must tolerate:
  never_starts), or the
  scheduler rejected it for its volumes (a claim absent or that cannot bind: scheduler_verdict). A pod bound to a
  node the cluster does not have is neither running nor waiting. A Kueue workload that is not admitted has no pod
  yet and so is not a job here (the Kueue actuator reads it beside these: workloads.py, Workloads.demand).
- a node's GPUs are its allocatable GPU resource; 0, and a place for no tenant (CLOSED), when it is cordoned,
  not Ready, or tainted NoSchedule/NoExecute by someone else. Used: the GPU requests of the pods bound to it
  (``spec.nodeName``) that have not ended (the scheduler's own accounting), every namespace. Draining: those of
  such pods being deleted (an eviction's grace period: ``metadata.deletionTimestamp`` set) and due to end within
  the daemon's own evictions' grace (drains_soon), free once they end; one due later still uses its GPUs.
  Held: our hold label's value (a tenant's ``name_part``: that tenant; the pool's value: HELD_BY_POOL; any
  other: CLOSED).
- a mixed fleet (a ``resolver`` of [fleet] types): each node's GPU type and each pod's accepted types
  (flavors.py: the product label, MIG resources, node selector and affinity); MIG instances count as GPUs.
- GPUs asked through Dynamic Resource Allocation, as dra.py counts them (given here as plain maps): a DRA node's
  whole GPUs are its GPUs (typed by its DRA type), its claims' allocated devices used, a pod's claims' GPUs added to
  its own (``dra_gpus``), so the plan preempts DRA pods and makes room for DRA demand as for device-plugin pods.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from daemon.actuators.k8s import flavors, pod_affinity
from daemon.actuators.k8s.objects import (
    BLOCKING,
    POOL_VALUE,
    gpu_quantity,
    name_part,
    node_usable,
    pod_gpus,
    priority_class_name,
)
from daemon.config.fleet import TypeResolver
from daemon.policy.state import CLOSED, HELD_BY_POOL, PRIORITY, UNHELD, Jobs, Nodes

TIER_OF_CLASS = {priority_class_name(t): t for t in PRIORITY}
ENDED = ("Succeeded", "Failed")


def _seconds_since(when, now: dt.datetime) -> float:
    return max(0.0, (now - when).total_seconds()) if when is not None else 0.0


def largest_node(nodes: list, resource: str, resolver: TypeResolver | None = None) -> int:
    """The most GPUs any node has (allocatable, usable now or not: a cordoned node may come back); 0 with none."""
    if resolver is not None:
        return max((flavors.node_gpus(n, resource, flavors.node_type(resolver, n)) for n in nodes), default=0)
    return max((gpu_quantity((n.status.allocatable or {}).get(resource, 0)) for n in nodes if n.status), default=0)


def _requirement_holds(e, labels: dict, name: str) -> bool:
    """One matchExpressions (or matchFields: the node's metadata.name) requirement on a node, as the scheduler reads
    it; an operator it does not know is taken as met (never judged: a pod is left out only when it surely fits no
    node)."""
    if isinstance(e, _Untolerated):
        return False
    have = labels.get(e.key) if labels is not None else name
    values = e.values or []
    if e.operator == "In":
        return have is not None and have in values
    if e.operator == "NotIn":
        return have is None or have not in values
    if e.operator == "Exists":
        return have is not None
    if e.operator == "DoesNotExist":
        return have is None
    if e.operator in ("Gt", "Lt") and len(values) == 1:
        a, b = _go_int(have), _go_int(values[0])
        if a is None or b is None:
            return False
        return a > b if e.operator == "Gt" else a < b
    return True


_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _go_int(text: str | None) -> int | None:
    """`text` as Go's strconv.ParseInt(text, 10, 64) reads a Gt / Lt value and the node's label (the scheduler's
    labels.Requirement), None where it refuses it. Not int(): Python takes '0_0', ' 1' and numbers past int64,
    which the scheduler refuses, and a term it cannot parse matches no node."""
    if text is None or not _GO_INT.fullmatch(text):
        return None
    n = int(text)
    return n if -2**63 <= n < 2**63 else None


def tolerates_hold(pod, hold_label: str, value: str | None) -> bool:
    """Whether the pod tolerates the node hold's taint ``<hold_label>=<value>:NoSchedule`` (node_holds.py), as the
    scheduler matches a toleration (an empty key with Exists: every taint); `value` None: some hold's."""
    for t in pod.spec.tolerations or []:
        op = t.operator or "Equal"
        if t.effect not in (None, "", "NoSchedule") or (t.key or "") not in ("", hold_label):
            continue
        if op == "Exists" or (t.key and (value is None or (t.value or "") == value)):
            return True
    return False


@dataclass(frozen=True)
class _Untolerated:
    """A requirement on the hold label that only held nodes meet, whose hold taint the pod does not tolerate: met by
    no node, whatever the holds are now."""
    key: str
    operator: str
    values: tuple[str, ...]


def _hold_requirement(pod, e, hold_label: str):
    """An expression on the hold label: left out (the holds come and go) where a node the pod may start on can meet
    it (NotIn, DoesNotExist, or In / Exists of a hold whose taint it tolerates), else _Untolerated."""
    if e.operator == "In" and not any(tolerates_hold(pod, hold_label, v) for v in e.values or []) or \
            e.operator == "Exists" and not tolerates_hold(pod, hold_label, None):
        return _Untolerated(e.key, e.operator, tuple(e.values or ()))
    return None


def required_terms(pod, hold_label: str | None) -> list | None:
    """The pod's required node affinity as [(matchExpressions, matchFields)] per term (ORed), the hold label's
    expressions left out (as in its nodeSelector) but where the pod could not start on the hold they select
    (_hold_requirement); None when it has none."""
    aff = pod.spec.affinity.node_affinity if pod.spec.affinity and pod.spec.affinity.node_affinity else None
    req = aff.required_during_scheduling_ignored_during_execution if aff else None
    if req is None or not req.node_selector_terms:
        return None
    out = []
    for t in req.node_selector_terms:
        if not (t.match_expressions or t.match_fields):
            continue   # an empty term selects no node (the scheduler skips it): all() of nothing read it as every one
        exprs = [e if e.key != hold_label else _hold_requirement(pod, e, hold_label) for e in t.match_expressions or []]
        out.append(([e for e in exprs if e is not None], list(t.match_fields or [])))
    return out


def _affinity_holds(terms: list | None, labels: dict, name: str) -> bool:
    if terms is None:
        return True
    return any(all(_requirement_holds(e, labels, name) for e in exprs)
               and all(f.key != "metadata.name" or _requirement_holds(f, None, name) for f in fields)
               for exprs, fields in terms)


def _shown_terms(terms: list) -> str:
    if not terms:
        return "of empty terms only"
    return " or ".join("(" + ", ".join(f"{e.key} {e.operator} {','.join(e.values or [])}".rstrip()
                                       for e in [*exprs, *fields]) + ")" for exprs, fields in terms)[:200]


# taints a node's condition puts and lifts (the node lifecycle controller's not-ready, unreachable and pressure
# taints, a cordon's unschedulable, a cloud provider's uninitialized and shutdown): a node with only these takes the
# pod once it is back, so they never make a pod "never start"
PASSING_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
_DECIMAL = re.compile(r"0|-?[1-9][0-9]*", re.ASCII)


def _decimal(text: str | None) -> int | None:
    """A taint or toleration value as the scheduler reads it for Gt / Lt (content.IsDecimalInteger, then an int64),
    None where it refuses it."""
    if text is None or not _DECIMAL.fullmatch(text):
        return None
    n = int(text)
    return n if -2**63 <= n < 2**63 else None


def tolerates(tol, taint) -> bool:
    """Whether toleration `tol` tolerates `taint`, as the scheduler matches them (core/v1 Toleration.ToleratesTaint):
    an empty effect matches every effect, an empty key (with Exists) every key; Equal (or no operator) compares the
    values, Exists matches any; Gt / Lt (alpha, TaintTolerationComparisonOperators) compare them as integers.
    tolerationSeconds plays no part in scheduling. An operator the scheduler does not know is taken as tolerating
    (never judged: a pod is left out only when it surely starts nowhere)."""
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    op = tol.operator or "Equal"
    if op == "Equal":
        return (tol.value or "") == (taint.value or "")
    if op in ("Gt", "Lt"):
        want, have = _decimal(tol.value), _decimal(taint.value)
        if want is None or have is None:
            return False
        return have > want if op == "Gt" else have < want
    return True


def _untolerated(pod, taints: list):
    """The first of a node's standing taints the pod tolerates with none of its tolerations (the scheduler's
    TaintToleration filter: NoSchedule and NoExecute; PreferNoSchedule only scores), or None."""
    tols = pod.spec.tolerations or []
    return next((t for t in taints if not any(tolerates(tol, t) for tol in tols)), None)


def _shown_taint(t) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def never_starts(nodes: list, resource: str, resolver: TypeResolver | None = None,
                 hold_label: str | None = None, pods: list | None = None,
                 bound: pod_affinity.BoundPods | None = None,
                 anti_pods: list | None = None, dra=None) -> Callable[[object, int], str | None]:
    """Why an unbound pod asking for `g` GPUs can never start on these nodes (usable now or not: a cordoned node may
    come back), or None. The scheduler places a pod on one node that passes every filter, so each node is judged
    whole: the pod can start on none that has the GPUs it asks for (a pod runs on one node: largest_node; on a mixed
    fleet, each GPU or MIG resource it asks for) and labels that both its nodeSelector and its required node affinity
    (a term of In / NotIn / Exists / DoesNotExist / Gt / Lt over the node's labels, or its name) match. The node
    hold's label is left out of both: Kueue puts it on the pods it admits on a hold's flavor, and it comes and goes
    with the holds; but only where the pod tolerates the hold taint that comes with that label (Kueue injects both): a
    pod selecting a hold whose taint it does not tolerate (another tenant's: the admission policies refuse its
    toleration) starts on no node. Of those, the pod needs one with every topology key of its DoNotSchedule spread
    constraints, one its required pod affinity and anti-affinity, and the bound pods' required anti-affinity, let it
    start on, over `pods` (pod_affinity.py: the pods bound to nodes; not judged without them; `bound`: the
    actuator's BoundPods, kept from cycle to cycle, else read afresh; `anti_pods`: those of `pods` with pod
    anti-affinity, as the watched view keeps them, else looked for), and one whose standing taints (NoSchedule /
    NoExecute, not the hold's nor the node condition's, which go when the node is back) it all tolerates (tolerates:
    the TaintToleration filter). With no node at all, nothing is judged. The reason names the first filter no node
    passes (size, labels, spread keys, pod affinity, pod anti-affinity, bound pods' anti-affinity, taints). `dra`
    (dra.DraGpus): a pending pod's GPUs asked through DRA need a node whose slices publish them (DraGpus.fits), judged
    with the same filters: a DRA pod selecting a node without its devices, or kept by a taint off every node with
    them, never starts (judged by its device-plugin GPUs alone, a node without a GPU of either kind passed for it)."""
    largest = largest_node(nodes, resource, resolver)
    named = [(n.metadata.labels or {}, n.metadata.name) for n in nodes]
    named_by_name = [(name, lb) for lb, name in named]
    # a fleet with MIG: each node's allocatable GPUs and MIG instances per resource, for the scheduler's fit (every
    # resource the pod asks for, on one node); summed, 4 mig-3g.40gb read as fitting a node of 7 mig-1g.10gb
    sizes = [{r: gpu_quantity(q) for r, q in ((n.status.allocatable or {}) if n.status else {}).items()
              if r == resource or r.startswith(flavors.MIG_PREFIX)} for n in nodes] if resolver is not None else []
    plain = [gpu_quantity(((n.status.allocatable or {}) if n.status else {}).get(resource, 0)) for n in nodes]
    placed: list[pod_affinity.Placed] = []   # the bound pods, indexed on the first pod with pod affinity
    # each node's taints that keep a pod off it for good unless tolerated: NoSchedule / NoExecute, but the node hold's
    # (it comes and goes with the holds; judged with the pod's hold selector) and those of the node's condition
    standing = [[t for t in ((n.spec.taints if n.spec else None) or []) if t.effect in BLOCKING and t.key != hold_label
                 and not (t.key or "").startswith(PASSING_TAINTS)] for n in nodes]

    def asked_of(pod, g: int) -> dict[str, int]:
        if resolver is None:
            return {resource: g}
        return {r: q for r, q in {resource: pod_gpus(pod, resource), **flavors.pod_mig_requests(pod)}.items() if q}

    def room(asked: dict[str, int]) -> list[bool]:
        """Per node: whether it has every GPU and MIG resource the pod asks for (all True where nothing is judged:
        no GPU on any node, or a pod asking none)."""
        if resolver is None:
            return [largest == 0 or have >= asked[resource] for have in plain]
        if not sizes or not asked:
            return [True] * len(nodes)
        return [all(sz.get(r, 0) >= q for r, q in asked.items()) for sz in sizes]

    def too_big(asked: dict[str, int], fits: list[bool]) -> str | None:
        if any(fits):
            return None
        if resolver is None:
            return f"asks for {asked[resource]} GPUs, more than any node has ({largest})"
        if len(asked) == 1:
            (r, q), = asked.items()
            most = max(sz.get(r, 0) for sz in sizes)
            return f"asks for {q} GPUs, more than any node has ({most})" if r == resource else \
                f"asks for {q} {r}, more than any node has ({most})"
        return "asks for " + ", ".join(f"{q} {r}" for r, q in sorted(asked.items())) + ", which no one node has"

    def why(pod, g: int) -> str | None:
        if not named:
            return None
        asked = asked_of(pod, g)
        fits = room(asked)
        big = too_big(asked, fits)
        if big is not None:
            return big[:300]
        pid = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if dra is not None and dra.asks.get(pid):
            fits = [f and dra.fits(pid, name) for f, (_, name) in zip(fits, named)]
            if not any(fits):
                return (f"asks for GPUs through DRA ({dra.asked(pid)}) that no node's slices publish"
                        + (f" beside its {g} {resource}" if g else "") + " (its devices are all on its one node)")[:300]
        held = (pod.spec.node_selector or {}).get(hold_label) if hold_label else None
        if held is not None and not tolerates_hold(pod, hold_label, held):
            return (f"selects the node hold {hold_label}={held}, whose taint ({hold_label}={held}:NoSchedule) it does "
                    "not tolerate")[:300]
        sel = {k: v for k, v in (pod.spec.node_selector or {}).items() if k != hold_label}
        terms = required_terms(pod, hold_label)
        match = [all(lb.get(k) == v for k, v in sel.items()) and _affinity_holds(terms, lb, name)
                 for lb, name in named] if sel or terms is not None else [True] * len(named)
        if any(m and f for m, f in zip(match, fits)):
            # a DoNotSchedule topology spread constraint: the scheduler keeps the pod off a node without its key
            keys = sorted({c.topology_key for c in getattr(pod.spec, "topology_spread_constraints", None) or []
                           if c.when_unsatisfiable == "DoNotSchedule" and c.topology_key != hold_label})
            ok = [m and f and all(k in lb for k in keys) for m, f, (lb, _) in zip(match, fits, named)] if keys else \
                [m and f for m, f in zip(match, fits)]
            if not any(ok):
                return (f"spreads over {', '.join(keys)} (topologySpreadConstraints, DoNotSchedule), a node label "
                        "none of the nodes it fits otherwise has")[:300]
            if pods is not None:   # its own pod affinity, and bound pods' anti-affinity against it
                if not placed:
                    placed.append(pod_affinity.Placed(bound or pod_affinity.BoundPods(), dict(named_by_name), pods,
                                                      anti_pods))
                ok, near = pod_affinity.why_not(pod, ok, placed[0], named)
                if near is not None:
                    return near[:300]
            return _taints_why(pod, [st for st, o in zip(standing, ok) if o])
        # no node both matches and has room: where some node matches, only ones too small for it do
        small = any(match)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(sel.items()))[:200]
        if terms is None:
            return f"selects nodes by {shown}, " + ("which only nodes too small for it have" if small else
                                                    "which no node has")
        return ((f"selects nodes by {shown} and " if sel else "") + "requires node affinity "
                f"{_shown_terms(terms)}, " + ("which only nodes too small for it match" if small else
                                               "which no node matches"))
    return why


def _taints_why(pod, taints_of: list[list]) -> str | None:
    """Why the pod starts on none of the nodes it fits otherwise (their standing taints), or None: one of them has no
    taint it does not tolerate."""
    firsts = []
    for taints in taints_of:   # most often the first node has none the pod does not tolerate
        first = _untolerated(pod, taints)
        if first is None:
            return None
        firsts.append(first)
    count: dict[str, int] = {}
    for t in firsts:
        count[_shown_taint(t)] = count.get(_shown_taint(t), 0) + 1
    shown = ", ".join(f"{k} ({n} node{'s' if n > 1 else ''})" for k, n in sorted(count.items(), key=lambda kv:
                                                                                    (-kv[1], kv[0])))
    return ("is kept off every node it fits otherwise by a taint it does not tolerate: " + shown)[:300]


# kube-scheduler's verdicts at PreFilter on a pod's volumes (VolumeBinding, UnschedulableAndUnresolvable: no node is
# tried), in the message of its PodScheduled=False condition, 'framework.FitError': "0/<n> nodes are available:
# <PreFilter's message>. preemption: ...". Each holds until the tenant's own claim changes (the scheduler tries the
# pod again on that event): a claim that does not exist, one being deleted, one whose volume is gone (Lost), and an
# unbound claim of Immediate binding (its StorageClass absent: the scheduler reads a missing class as Immediate and
# nothing provisions it; or present, while its provisioner is still at work). A claim of WaitForFirstConsumer is
# bound after the scheduler picks a node: it passes PreFilter and is never said here, so such a pod stays demand.
_VOLUME_VERDICT = re.compile(
    r'0/[0-9]+ nodes are available: (persistentvolumeclaim "[^"]{1,253}" (?:not found|is being deleted|bound to '
    r'non-existent persistentvolume "[^"]{0,253}")|pod has unbound immediate PersistentVolumeClaims)\.', re.ASCII)


def scheduler_verdict(pod) -> str | None:
    """Why kube-scheduler said it finds no node for an unbound pod for good, or None: its PodScheduled condition False
    with reason Unschedulable and a volume verdict (_VOLUME_VERDICT) as the message's start.

    Why the scheduler's word and not the view's own judgement (as never_starts judges node filters): whether a pod's
    claims let it start is the VolumeBinding plugin's read of the tenant's PVCs, their StorageClasses, PVs and
    ephemeral volumes, which the daemon would have to list and watch (an informer per kind, more RBAC, the
    scheduler's rules copied) to say what the scheduler already wrote on the pod, in the same pod list the view keeps
    (the informer keeps just this condition: informer.keep_verdict). It rejects such a pod before trying any node, so
    the verdict holds however full the nodes are (a node's own filters, pod affinity among them, are said behind
    'Insufficient nvidia.com/gpu' on a full node, which is why never_starts judges those itself). Stale: from the
    change that fixes it (the tenant creates the claim, a class appears, the claim binds) until the scheduler tries
    again, which it does on that very event (its queueing hints for PVCs, PVs and StorageClasses), at the latest
    after 5 minutes; meanwhile the pod reads as no demand, as it cannot start then either. Forged: a tenant cannot
    write its pod's status (pods/status is in neither the edit nor the admin role; on create and update the apiserver
    drops the status it is sent: tests/k8s/test_pod_volumes.py checks both), and a verdict it could forge would only
    hide its own demand. Another scheduler's condition (spec.schedulerName) is read only where its message has the
    same words."""
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            m = _VOLUME_VERDICT.match(c.message or "")
            if m:
                return f"the scheduler finds no node for it: {m.group(1)}"
    return None


def dra_line(pod, g: int, resource: str) -> str:
    """What the view makes of a pod asking for devices through DRA (``spec.resourceClaims``, a ResourceClaim or a
    ResourceClaimTemplate whose requests name a DeviceClass, ``gpu.nvidia.com`` for NVIDIA's DRA driver) where the
    DRA kinds are not read (actuators.kubernetes.dra_device_classes empty; else dra.py reads them): nothing. Its DRA
    devices are neither demand nor use, and said once so nothing is silently zero."""
    claims = ", ".join(c.name for c in pod.spec.resource_claims)[:200]
    counted = f"only its {g} {resource} are" if g > 0 else f"it asks for no {resource}, so it is no job"
    return (f"asks for devices through DRA (spec.resourceClaims: {claims}): GPUs asked through DRA are not counted "
            f"(actuators.kubernetes.dra_device_classes is empty), neither as demand nor as used; {counted}")


def pods_as_jobs(pods: list, tenant_of_ns: dict[str, str], resource: str, tenants: tuple[str, ...],
                 now: dt.datetime | None = None, resolver: TypeResolver | None = None,
                 never: Callable[[object, int], str | None] | None = None,
                 left_out: dict[str, str] | None = None, node_names: set[str] | None = None,
                 schedulers: tuple[str, ...] | None = None, uncounted: dict[str, str] | None = None,
                 dra_gpus: dict[str, int] | None = None, dra_accepts: dict[str, tuple[str, ...]] | None = None,
                 plugin_types: tuple[str, ...] | None = None) -> Jobs:
    """The pods as Jobs (module docstring). ``never`` (never_starts): an unbound pod it gives a reason for can never
    start and is no demand. Read as demand, one such pod of a normal tenant (9 GPUs where nodes have 8) aged into a
    hold of every GPU beyond the high tier's guarantee, held for it and kept from everyone else for as long as it
    waited. ``node_names``: the nodes the cluster has; a pod bound (``spec.nodeName``, set by its tenant at creation)
    to another never runs (no kubelet has it, and the scheduler leaves a bound pod alone: it stays Pending until the
    pod garbage collector deletes it) and is neither running nor demand. ``schedulers``: the schedulers that place
    pods here (actuators.kubernetes.scheduler_names); an unbound pod naming another (``spec.schedulerName``) is placed
    by none (kube-scheduler leaves it alone: Pending, no condition) and is no demand. Each pod so left out is put in
    ``left_out`` (id -> what is wrong with it and what the view makes of it). ``uncounted``: each pod asking for
    devices through Dynamic Resource Allocation (``spec.resourceClaims``) -> a line saying its DRA devices are not
    counted (dra_line). ``dra_gpus``: pod id -> the GPUs dra.py counts for it through DRA (its claims' allocation when
    bound, what they ask when pending), added to its device-plugin GPUs (the scheduler needs both); with a mixed fleet,
    a pod asking DRA GPUs accepts ``dra_accepts``' types (its classes' DRA types) and one asking none accepts only
    ``plugin_types`` where it names no type (None: any), so neither kind's demand preempts the other's pods. The
    never-starts judgement of a DRA pod's size is dra.py's (no node's slices): here only its device-plugin GPUs are
    judged against the nodes, with its selectors, affinity and taints."""
    now = now or dt.datetime.now(dt.timezone.utc)
    index = {t: i for i, t in enumerate(tenants)}
    rows = []
    for p in pods:
        t = tenant_of_ns.get(p.metadata.namespace)
        phase = p.status.phase if p.status else None
        if t not in index or phase not in ("Pending", "Running") or p.metadata.deletion_timestamp is not None:
            continue
        bound = bool(p.spec.node_name)
        if not bound and getattr(p.spec, "scheduling_gates", None):
            continue   # gated: the scheduler will not place it, so free GPUs would not start it (not demand now)
        plugin = pod_gpus(p, resource) + (flavors.pod_mig_gpus(p) if resolver is not None else 0)
        dra = (dra_gpus or {}).get(f"{p.metadata.namespace}/{p.metadata.name}", 0)
        g = plugin + dra
        if uncounted is not None and getattr(p.spec, "resource_claims", None):
            uncounted[f"{p.metadata.namespace}/{p.metadata.name}"] = dra_line(p, g, resource)
        if g <= 0:
            continue
        if bound and node_names is not None and p.spec.node_name not in node_names:
            if left_out is not None:
                left_out[f"{p.metadata.namespace}/{p.metadata.name}"] = (
                    f"is bound (spec.nodeName) to node {p.spec.node_name}, which the cluster does not have: no kubelet "
                    "runs it and the scheduler leaves a bound pod alone, so it is neither running (its GPUs are used "
                    "nowhere) nor demand")
            continue
        by = getattr(p.spec, "scheduler_name", None) or "default-scheduler"
        if not bound and schedulers is not None and by not in schedulers:
            if left_out is not None:
                left_out[f"{p.metadata.namespace}/{p.metadata.name}"] = (
                    f"names scheduler {by} (spec.schedulerName), not one of actuators.kubernetes.scheduler_names "
                    f"({', '.join(schedulers)[:200]}): none places it, so it is no demand (if a scheduler of yours "
                    "has that name, add it)")
            continue
        why = None if bound else scheduler_verdict(p) or (never(p, plugin) if never is not None else None)
        if why is not None:
            if left_out is not None:
                left_out[f"{p.metadata.namespace}/{p.metadata.name}"] = (
                    f"{why}: it can never start, so it is no demand (no hold, no preemption, no aging for it)")
            continue
        # a pod bound to a node has its GPUs there (the scheduler counted them), Running or still Pending (pulling
        # its image): it waits for no GPU, and making room for it would preempt for what it already has
        run = bound
        rows.append((_accepts(resolver, p, dra, dra_accepts, plugin_types),
                     f"{p.metadata.namespace}/{p.metadata.name}", index[t], g,
                     PRIORITY[TIER_OF_CLASS.get(p.spec.priority_class_name or "", "normal")], run,
                     _seconds_since(p.status.start_time, now) if run else 0.0,
                     0.0 if run else _seconds_since(p.metadata.creation_timestamp, now),
                     p.spec.node_name if run else ""))
    if not rows:
        return Jobs.empty()
    acc, ids, ten, gpus, prio, run, rt, wait, node = zip(*rows)
    accepts = None
    if resolver is not None:
        accepts = np.empty(len(acc), dtype=object)
        accepts[:] = list(acc)
    return Jobs(ids=np.array(ids, dtype=object), tenant=np.array(ten, dtype=np.int64),
                gpus=np.array(gpus, dtype=np.int64), priority=np.array(prio, dtype=np.int8),
                running=np.array(run, dtype=bool), runtime_s=np.array(rt, dtype=float),
                wait_s=np.array(wait, dtype=float), node=np.array(node, dtype=object), accepts=accepts)


def _accepts(resolver: TypeResolver | None, pod, dra: int, dra_accepts: dict[str, tuple[str, ...]] | None,
             plugin_types: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The GPU types a job accepts (pods_as_jobs): None on a one-model cluster."""
    if resolver is None:
        return None
    if dra:
        return (dra_accepts or {}).get(f"{pod.metadata.namespace}/{pod.metadata.name}", ())
    named = flavors.pod_accepts(resolver, pod)
    return named if named or plugin_types is None else plugin_types


# the apiserver's clock, which sets a deletion's due time, may run ahead of the daemon's
CLOCK_SLACK_S = 60.0


def drains_soon(pod, drain_s: float | None, now: dt.datetime) -> bool:
    """Whether a bound pod's GPUs are draining: it is being deleted and due to be gone (``deletionTimestamp``: when its
    grace period ends) within ``drain_s`` (+ CLOCK_SLACK_S). The grace period is the deleter's: a tenant deleting its
    own pod with a day's grace (or a pod whose terminationGracePeriodSeconds is a day) keeps its GPUs that long, and
    read as draining they counted as room the preemptions need not make. None: every pod being deleted."""
    when = pod.metadata.deletion_timestamp
    if when is None:
        return False
    return drain_s is None or (when - now).total_seconds() <= drain_s + CLOCK_SLACK_S


def nodes_view(nodes: list, pods: list, resource: str, tenants: tuple[str, ...], hold_label: str | None,
               resolver: TypeResolver | None = None, drain_s: float | None = None,
               now: dt.datetime | None = None, dra_nodes: dict[str, tuple[str, int, int, int]] | None = None) -> Nodes:
    """Every node as the policy's Nodes (module docstring); ``drain_s``: the longest a drain may take and still count
    as one (draining). ``dra_nodes``: node -> (DRA type, whole GPUs, allocated, of those draining) as dra.py reads
    its ResourceSlices and claims (DraGpus.node_rows), added to what its device plugin publishes, typed by its DRA
    type (dra.py leaves out the nodes whose device plugin publishes GPUs)."""
    dra_nodes = dra_nodes or {}
    now = now or dt.datetime.now(dt.timezone.utc)
    used: dict[str, int] = {}
    going: dict[str, int] = {}
    for p in pods:
        node = p.spec.node_name
        if not node or (p.status and p.status.phase in ENDED):
            continue
        book = going if drains_soon(p, drain_s, now) else used
        book[node] = book.get(node, 0) + pod_gpus(p, resource) + (flavors.pod_mig_gpus(p) if resolver else 0)
    holder = {name_part(t): i for i, t in enumerate(tenants)} | {POOL_VALUE: HELD_BY_POOL}
    names, gpus, draining, free, held, types = [], [], [], [], [], []
    for n in nodes:
        name = n.metadata.name
        ok = node_usable(n, hold_label)
        dra_type, dra_g, dra_used, dra_going = dra_nodes.get(name, ("", 0, 0, 0))
        if resolver is not None:
            types.append(dra_type if dra_g else flavors.node_type(resolver, n))
            g = flavors.node_gpus(n, resource, types[-1]) if ok else 0
        else:
            g = gpu_quantity((n.status.allocatable or {}).get(resource, 0)) if ok else 0
        g += dra_g if ok else 0
        room = max(g - used.get(name, 0) - (dra_used - dra_going), 0)
        d = min(going.get(name, 0) + dra_going, room)
        value = (n.metadata.labels or {}).get(hold_label) if hold_label else None
        names.append(name)
        gpus.append(g)
        draining.append(d)
        free.append(room - d)
        held.append(CLOSED if not ok else UNHELD if value is None else holder.get(value, CLOSED))
    return Nodes(names=np.array(names, dtype=object), gpus=np.array(gpus, dtype=np.int64),
                 free=np.array(free, dtype=np.int64), draining=np.array(draining, dtype=np.int64),
                 held_by=np.array(held, dtype=np.int64),
                 gpu_type=np.array(types, dtype=object) if resolver is not None else None)
