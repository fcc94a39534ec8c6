"""GPUs asked through Dynamic Resource Allocation (resource.k8s.io/v1, GA since Kubernetes 1.34), for the plan.

A DRA driver (NVIDIA's: ``gpu.nvidia.com``) publishes each node's devices in ResourceSlices; a pod asks for them
through ``spec.resourceClaims``, each naming a ResourceClaim or a ResourceClaimTemplate (the resourceclaim controller
makes a claim per pod from it) whose requests name a DeviceClass; the scheduler allocates devices to the claim
(``status.allocation.devices.results``) and binds the pod. Such a node has no allocatable ``nvidia.com/gpu`` and
such a pod asks for none, so the device-plugin view (view.py) sees neither. Here, per the GPU DeviceClasses the
config names (actuators.kubernetes.dra_device_classes: class -> the driver whose ResourceSlices publish its
devices):

- supply: per node, the devices of those drivers' ResourceSlices (the newest generation of each pool; a device
  whose ``type`` attribute says it is no whole GPU, such as a MIG device, is not one), typed by their
  ``productName`` attribute through [fleet] as the nodes' product labels are, under the DRA kind (``dra:<type>``:
  never the same type as a device-plugin node's);
- used: per node, the devices of those drivers allocated to claims, each device once (a device several claims share,
  or one a claim of admin access also names, is one in use); per bound pod of a tenant, those of its claims;
- demand: per pending pod of a tenant (not bound, not gated), the GPUs its claims ask: each request of exactly
  ``count`` devices (allocationMode ExactCount, the default) of a GPU class. A request the daemon cannot judge (of
  allocationMode All, with CEL selectors, a prioritized list ``firstAvailable``, of a class that is no configured GPU
  class, or a claim or template that does not exist, or a claim being deleted: a tenant's own finalizer keeps it
  so, and the scheduler allocates it nothing) makes the pod's DRA GPUs uncounted, said once per pod
  (``uncounted``); so does asking for more GPUs than any node's slices publish (a pod's devices are all on its one
  node: it never starts, as view.never_starts says of a device-plugin pod; the apiserver takes any count up to
  2^63-1, so one tenant's pod would otherwise be demand beyond any cluster). With no DRA node, nothing is judged.
  Beyond that, where a pending pod may start is view.never_starts's, with its node filters (selectors, affinity,
  taints) over the nodes whose slices publish what it asks of each driver (``devices``, ``asks``) and, for each
  constraint of its claims (``matchAttribute``), as many GPUs sharing one value of that attribute (``groups``,
  ``matches``: DraGpus.fits; a device without the attribute shares none, as the scheduler's allocator has it; a
  ``distinctAttribute`` is not judged); one that can start nowhere is dropped from the counts (DraGpus.drop).

The plan reads them (actuator.py, view.py): a DRA node is a node of its slices' whole GPUs, typed by its most
numerous DRA type; a bound pod's claims' GPUs are its running GPUs there, a pending pod's its demand, accepting the DRA
types of the drivers of the classes it asks; a bound pod being deleted and due to end soon (``drains``) frees its
claims' GPUs as a drain. A node whose device plugin also publishes GPUs (``plugin_nodes``) is read as the device
plugin has it: its slices and the DRA GPUs of pods bound there are not counted (said once per pod), as NVIDIA's DRA
driver wants the device plugin off for the GPUs it manages. Pure: reads the official client's objects, sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from daemon.config.fleet import TypeResolver

DRA_KIND = "dra:"   # the type key's mark: a DRA GPU type is never a device-plugin node's type
PRODUCT_ATTRIBUTE = "productName"
ATTRIBUTE_FIELDS = ("bool", "int", "string", "version", "bools", "ints", "strings", "versions")   # a value's kinds
TYPE_ATTRIBUTE = "type"


@dataclass
class DraGpus:
    """What the DRA objects say of GPUs at one instant."""

    supply: dict[str, dict[str, int]] = field(default_factory=dict)   # node -> DRA type -> devices
    used: dict[str, int] = field(default_factory=dict)                # node -> devices allocated
    running: dict[str, tuple[str, int]] = field(default_factory=dict)  # bound pod id -> (node, its claims' GPUs)
    pending: dict[str, int] = field(default_factory=dict)             # pending pod id -> GPUs its claims ask
    tenant_of: dict[str, str] = field(default_factory=dict)           # pod id (running or pending) -> tenant
    uncounted: dict[str, str] = field(default_factory=dict)           # pod id -> why its DRA GPUs are not counted
    accepts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # pending pod id -> the DRA types it may get
    draining: dict[str, int] = field(default_factory=dict)            # node -> GPUs of pods being deleted, due soon
    # where a pending pod's devices may be allocated (the scheduler allocates a pod's claims on the one node it picks):
    devices: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> driver -> whole GPUs its slices publish
    asks: dict[str, dict[str, int]] = field(default_factory=dict)     # pending pod id -> driver -> GPUs it asks
    unplaced: set[str] = field(default_factory=set)                   # drivers with slices of no one node: not judged
    matches: dict[str, list[tuple[str, int]]] = field(default_factory=dict)   # pending pod -> (attribute, GPUs)
    whole: dict[str, list[tuple[str, object]]] = field(default_factory=dict, repr=False)   # node -> (driver, device)
    # node -> qualified attribute -> the most whole GPUs there sharing one value of it (a claim's matchAttribute),
    # counted when a pending pod's constraint first asks (most attributes no claim names)
    groups: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    def group(self, node: str, attribute: str) -> int:
        """The most whole GPUs of `node` sharing one value of `attribute` (qualified: ``<domain>/<name>``); a device
        without it shares none, as kube-scheduler's allocator has it."""
        per = self.groups.setdefault(node, {})
        if attribute not in per:
            count: dict[tuple, int] = {}
            for driver, d in self.whole.get(node, ()):
                attrs = d.attributes or {}
                short = attribute.split("/", 1)[1] if attribute.startswith(f"{driver}/") else None
                v = attrs.get(attribute) or (attrs.get(short) if short else None)
                if v is not None:
                    key = tuple(getattr(v, f, None) if not isinstance(getattr(v, f, None), list)
                                else tuple(getattr(v, f)) for f in ATTRIBUTE_FIELDS)
                    count[key] = count.get(key, 0) + 1
            per[attribute] = max(count.values(), default=0)
        return per[attribute]

    def fits(self, pod: str, node: str) -> bool:
        """Whether `node`'s slices publish as many whole GPUs of each driver as the pending pod asks (view.never_starts
        judges them with the pod's node filters; usable now or not). A node whose device plugin publishes GPUs too is
        judged by its slices all the same: the scheduler allocates there. A pod asking nothing counted fits anywhere,
        and so does a driver that publishes devices of several nodes (a slice of no nodeName: not judged)."""
        have = self.devices.get(node, {})
        if self.unplaced & set(self.asks.get(pod, {})):
            return True
        return all(have.get(d, 0) >= n for d, n in self.asks.get(pod, {}).items()) and \
            all(self.group(node, a) >= n for a, n in self.matches.get(pod, ()))

    def asked(self, pod: str) -> str:
        """What the pending pod asks, in words (view.never_starts's line)."""
        out = ", ".join(f"{n} of {d}" for d, n in sorted(self.asks.get(pod, {}).items()))
        return out + "".join(f", {n} sharing one value of {a}" for a, n in self.matches.get(pod, ()))

    def drop(self, pods) -> None:
        """These pending pods are no demand (view.never_starts found no node for them): out of the counts too."""
        for pid in pods:
            if self.pending.pop(pid, None) is not None:
                self.tenant_of.pop(pid, None)
                self.accepts.pop(pid, None)
                self.asks.pop(pid, None)
                self.matches.pop(pid, None)

    def node_rows(self) -> dict[str, tuple[str, int, int, int]]:
        """Node -> (its DRA type, whole GPUs, allocated, of those draining): what a node's row in the plan's Nodes
        is made of. A node of several DRA types is typed by its most numerous (the plan knows one type per node)."""
        out = {}
        for node, per in self.supply.items():
            typ = min(per, key=lambda t: (-per[t], t))
            used = self.used.get(node, 0)
            out[node] = (typ, sum(per.values()), used, min(self.draining.get(node, 0), used))
        return out

    def job_gpus(self) -> dict[str, int]:
        """Pod id -> the DRA GPUs counted for it: its claims' allocated GPUs when bound, those asked when pending."""
        return {pid: g for pid, (_, g) in self.running.items()} | dict(self.pending)

    def pending_by_tenant(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pod, g in self.pending.items():
            out[self.tenant_of[pod]] = out.get(self.tenant_of[pod], 0) + g
        return out

    def summary(self) -> str:
        """One line: supply, used and pending demand (what the log says when it changes)."""
        types: dict[str, int] = {}
        for per in self.supply.values():
            for t, n in per.items():
                types[t] = types.get(t, 0) + n
        shown = ", ".join(f"{n} {t}" for t, n in sorted(types.items())) or "none"
        pend = ", ".join(f"{t} {g}" for t, g in sorted(self.pending_by_tenant().items())) or "none"
        return (f"DRA GPUs: {sum(types.values())} on {len(self.supply)} nodes ({shown}), "
                f"{sum(self.used.values())} allocated, pending per tenant: {pend}")


def _attr(device, name: str, driver: str) -> str | None:
    """A device's string attribute by its short name, or qualified by the driver's domain."""
    attrs = device.attributes or {}
    a = attrs.get(name) or attrs.get(f"{driver}/{name}")
    return a.string if a is not None else None


def _whole_gpu(device, driver: str) -> bool:
    kind = _attr(device, TYPE_ATTRIBUTE, driver)
    return kind is None or kind == "gpu"


def dra_type(resolver: TypeResolver | None, product: str | None, node: str) -> str:
    """The DRA kind's type key of a device: ``dra:`` and its [fleet] type (``dra:gpu`` on a one-model cluster)."""
    if resolver is None:
        return DRA_KIND + "gpu"
    return DRA_KIND + resolver(product if product else f"node {node}: a DRA GPU without {PRODUCT_ATTRIBUTE}")


def newest_slices(slices: list, drivers: set[str]) -> list:
    """The slices of `drivers` with a node, of each pool's newest generation only (a driver replacing a pool's
    slices leaves the old generation behind for a while; the scheduler ignores it)."""
    newest: dict[tuple[str, str], int] = {}
    mine = [s for s in slices if s.spec.driver in drivers and s.spec.pool is not None]
    for s in mine:
        k = (s.spec.driver, s.spec.pool.name)
        newest[k] = max(newest.get(k, 0), int(s.spec.pool.generation or 0))
    return [s for s in mine if int(s.spec.pool.generation or 0) == newest[(s.spec.driver, s.spec.pool.name)]]


def _request_why(req, classes: dict[str, str]) -> tuple[int, str | None]:
    """(GPUs, None) a claim's request asks for, or (0, why it is not judged). A class the config does not name is
    said too: the daemon cannot tell a GPU class it was not told of from another kind of device."""
    if req.exactly is None:
        return 0, f"request {req.name} asks for the first available of a list (firstAvailable), not judged"
    ex = req.exactly
    if ex.device_class_name not in classes:
        return 0, (f"request {req.name} names DeviceClass {ex.device_class_name}, not one of the GPU classes "
                   "(actuators.kubernetes.dra_device_classes)")
    if (ex.allocation_mode or "ExactCount") != "ExactCount":
        return 0, f"request {req.name} asks for {ex.allocation_mode} devices of {ex.device_class_name}, not a count"
    if ex.selectors:
        return 0, f"request {req.name} selects devices of {ex.device_class_name} by CEL, which the daemon cannot judge"
    return int(ex.count or 1), None


def asked_classes(requests: list) -> set[str]:
    """The DeviceClasses a claim's requests name (of those asking exactly a class)."""
    return {r.exactly.device_class_name for r in requests or [] if r.exactly is not None}


def claim_asks(requests: list, classes: dict[str, str]) -> dict[str, int]:
    """Driver -> the GPUs a claim's judged requests ask of it (those claim_gpus counts)."""
    out: dict[str, int] = {}
    for req in requests or []:
        g, why = _request_why(req, classes)
        if why is None and g:
            d = classes[req.exactly.device_class_name]
            out[d] = out.get(d, 0) + g
    return out


def claim_matches(devices, classes: dict[str, str]) -> tuple[list[tuple[str, int]], list[str]]:
    """A claim's constraints (``spec.devices.constraints``) as (attribute, GPUs that must share one value of it):
    kube-scheduler allocates the devices of the requests a matchAttribute names (all, where it names none) only
    where that many share a value, and a device without the attribute shares none; and why any is not judged (a
    distinctAttribute)."""
    out, why = [], []
    reqs = {r.name: r for r in (devices.requests if devices else None) or []}
    for c in (devices.constraints if devices else None) or []:
        if c.distinct_attribute:
            why.append(f"a constraint asks devices of distinct {c.distinct_attribute}, which the daemon cannot judge")
        elif c.match_attribute:
            named = [reqs[n] for n in c.requests or reqs if n in reqs]
            n = sum(_request_why(r, classes)[0] for r in named)
            if n > 1:
                out.append((c.match_attribute, n))
    return out, why


def claim_gpus(requests: list, classes: dict[str, str]) -> tuple[int, list[str]]:
    """The GPUs a claim's requests ask for, and why any of them is not judged."""
    total, why = 0, []
    for req in requests or []:
        g, w = _request_why(req, classes)
        total += g
        if w is not None:
            why.append(w)
    return total, why


SHOWN_NAMESPACES = 10   # the partial line names at most this many namespaces, those with the most objects beyond


def partial_namespaces(over_ns: dict[str, dict[str, int]] | None) -> dict[str, set[str]]:
    """Namespace -> the kinds of which the view keeps not all its objects (informer.Reflector.over_ns)."""
    out: dict[str, set[str]] = {}
    for kind, per in (over_ns or {}).items():
        for ns in per:
            if ns:
                out.setdefault(ns, set()).add(kind)
    return out


def _missing(what: str, name: str, kind: str, partial: set[str]) -> str:
    """Why a pod's claim or template is not there: beyond the view's caps (not read), or gone."""
    if kind in partial:
        return (f"{what} {name} is not read (its namespace has more {kind} than the view keeps: "
                "actuators.kubernetes.dra_max_objects_per_namespace)")
    return f"{what} {name} does not exist"


def _deleting(name: str) -> str:
    """Why a pending pod's claim being deleted is not counted: a tenant's own finalizer keeps it so for as long as the
    tenant likes, and kube-scheduler allocates no device to a claim being deleted."""
    return f"claim {name} is being deleted (the scheduler allocates no device to it: the pod never starts while it is)"


def over_by_namespace(over_ns: dict[str, dict[str, int]]) -> str:
    """The namespaces with the most objects beyond the caps, and how many (a bounded part of one line)."""
    tot: dict[str, int] = {}
    for per in over_ns.values():
        for ns, n in per.items():
            tot[ns or "(cluster)"] = tot.get(ns or "(cluster)", 0) + n
    top = sorted(tot.items(), key=lambda x: (-x[1], x[0]))
    shown = ", ".join(f"{ns} {n}" for ns, n in top[:SHOWN_NAMESPACES])
    return shown + (f" and {len(top) - SHOWN_NAMESPACES} more namespaces" if len(top) > SHOWN_NAMESPACES else "")


def read_dra(pods: list, slices: list, claims: list, templates: list, classes: dict[str, str],
             tenant_of_ns: dict[str, str], resolver: TypeResolver | None = None,
             partial_ns: dict[str, set[str]] | None = None, plugin_nodes: set[str] | frozenset = frozenset(),
             drains: Callable[[object], bool] | None = None) -> DraGpus:
    """The DRA GPUs of the cluster (module docstring): `pods` as the view keeps them (live ones), the ResourceSlices,
    ResourceClaims and ResourceClaimTemplates of every namespace. `partial_ns`: namespace -> the kinds of which the
    view keeps not all its objects (beyond its caps): a claim or template missing there is not read, not gone, so
    the pod is said not counted, bound or not. `plugin_nodes`: the nodes whose device plugin publishes GPUs (read as it
    has them, module docstring). `drains`: whether a bound pod being deleted is due to end soon (view.drains_soon);
    None: none is."""
    partial_ns = partial_ns or {}
    out = DraGpus()
    drivers = set(classes.values())
    where: dict[tuple[str, str, str], str] = {}   # (driver, pool, device) -> node
    driver_types: dict[str, set[str]] = {}        # driver -> the DRA types of its devices
    for s in newest_slices(slices, drivers):
        node = s.spec.node_name
        if not node:
            out.unplaced.add(s.spec.driver)
        else:
            whole = [d for d in s.spec.devices or [] if _whole_gpu(d, s.spec.driver)]
            per_driver = out.devices.setdefault(node, {})
            per_driver[s.spec.driver] = per_driver.get(s.spec.driver, 0) + len(whole)
            out.whole.setdefault(node, []).extend((s.spec.driver, d) for d in whole)
        if not node or node in plugin_nodes:
            continue   # devices of several nodes (a nodeSelector, allNodes): no node of the view's to count them on
        for d in s.spec.devices or []:
            if not _whole_gpu(d, s.spec.driver):
                continue
            where[(s.spec.driver, s.spec.pool.name, d.name)] = node
            t = dra_type(resolver, _attr(d, PRODUCT_ATTRIBUTE, s.spec.driver), node)
            per = out.supply.setdefault(node, {})
            per[t] = per.get(t, 0) + 1
            driver_types.setdefault(s.spec.driver, set()).add(t)
    largest = max((sum(per.values()) for per in out.supply.values()), default=0)   # a pod's GPUs are on one node
    alloc: dict[str, int] = {}   # claim ns/name -> GPUs allocated to it
    taken: set[tuple[str, str, str]] = set()   # the devices counted in `used`
    by_name = {f"{c.metadata.namespace}/{c.metadata.name}": c for c in claims}
    for key, c in by_name.items():
        results = (c.status.allocation.devices.results or []) if c.status and c.status.allocation and \
            c.status.allocation.devices else []
        n = 0
        for r in results:
            # a result of admin access (a monitoring claim, in a namespace the cluster admin labelled for it) is a
            # device another claim holds, not one more in use
            if r.driver in drivers and not getattr(r, "admin_access", None):
                n += 1
                dev = (r.driver, r.pool, r.device)
                node = where.get(dev)
                if node is not None and dev not in taken:   # a device in use is one, however many claims share it
                    taken.add(dev)
                    out.used[node] = out.used.get(node, 0) + 1
        alloc[key] = n
    tmpl = {f"{t.metadata.namespace}/{t.metadata.name}": t for t in templates}
    # a claim named by several pods (resourceClaimName: shared; or made from one pod's template and named by
    # another) holds or asks for its devices once: counted on the first of its pods (by id) and on no other, so a
    # tenant's N pods of one claim are not N times its GPUs
    counted: set[str] = set()
    # first: most pods have no resourceClaims, and this loop sees every pod each cycle
    dra_pods = sorted((p for p in pods if p.spec.resource_claims),
                      key=lambda p: (p.metadata.namespace, p.metadata.name))
    for p in dra_pods:
        refs = p.spec.resource_claims
        tenant = tenant_of_ns.get(p.metadata.namespace)
        phase = p.status.phase if p.status else None
        deleting = p.metadata.deletion_timestamp is not None
        if tenant is None or phase not in ("Pending", "Running") or (deleting and not p.spec.node_name):
            continue
        pid = f"{p.metadata.namespace}/{p.metadata.name}"
        made = {s.name: s.resource_claim_name for s in (getattr(p.status, "resource_claim_statuses", None) or [])}
        kept_not_all = partial_ns.get(p.metadata.namespace, set())
        if p.spec.node_name:   # bound: its claims are allocated; its GPUs are theirs
            keys = {f"{p.metadata.namespace}/{made.get(r.name) or r.resource_claim_name}"
                    for r in refs if made.get(r.name) or r.resource_claim_name} - counted
            if "resourceclaims" in kept_not_all and any(k not in by_name for k in keys):
                out.uncounted[pid] = ("its ResourceClaims are not all read: its namespace has more resourceclaims "
                                      "than the view keeps (actuators.kubernetes.dra_max_objects_per_namespace)")
                continue
            counted |= keys
            g = sum(alloc.get(k, 0) for k in keys)
            if p.spec.node_name in plugin_nodes:
                if g and not deleting:
                    out.uncounted[pid] = (f"is bound to node {p.spec.node_name}, whose device plugin publishes GPUs "
                                          "too: the node is read as the device plugin has it, its DRA GPUs are not "
                                          "counted")
            elif deleting:   # not running: its GPUs are in use until it ends, draining if it is due to end soon
                if g and drains is not None and drains(p):
                    out.draining[p.spec.node_name] = out.draining.get(p.spec.node_name, 0) + g
            elif g:
                out.running[pid] = (p.spec.node_name, g)
                out.tenant_of[pid] = tenant
            continue
        if getattr(p.spec, "scheduling_gates", None):
            continue   # gated: not placed, so not demand now (as view.pods_as_jobs)
        total, why, mine, kinds, asks, matches = 0, [], set(), set(), {}, []
        for r in refs:
            # a template's claim, once the resourceclaim controller made it (status.resourceClaimStatuses), is read as
            # a claim: another pod may name it (resourceClaimName), and one claim asks for its devices once
            name = r.resource_claim_name or (made.get(r.name) if r.resource_claim_template_name and
                                             f"{p.metadata.namespace}/{made.get(r.name)}" in by_name else None)
            if name:
                key = f"{p.metadata.namespace}/{name}"
                c = by_name.get(key)
                if c is None:
                    why.append(_missing("claim", name, "resourceclaims", kept_not_all))
                    continue
                if alloc.get(key) or key in counted or key in mine:
                    continue   # allocated already (a claim shared with a running pod), or counted on another pod
                if c.metadata.deletion_timestamp is not None:
                    why.append(_deleting(name))
                    continue
                mine.add(key)
                devs = c.spec.devices if c.spec else None
                reqs = devs.requests if devs else []
                g, w = claim_gpus(reqs, classes)
                m, mw = claim_matches(devs, classes)
                matches += m
                w += mw
            elif r.resource_claim_template_name:
                t = tmpl.get(f"{p.metadata.namespace}/{r.resource_claim_template_name}")
                if t is None:
                    why.append(_missing("template", r.resource_claim_template_name, "resourceclaimtemplates",
                                        kept_not_all))
                    continue
                spec = t.spec.spec if t.spec else None
                reqs = spec.devices.requests if spec and spec.devices else []
                g, w = claim_gpus(reqs, classes)
                m, mw = claim_matches(spec.devices if spec else None, classes)
                matches += m
                w += mw
            else:
                continue
            total += g
            why += w
            kinds |= {classes[k] for k in asked_classes(reqs) if k in classes}
            for d, n in claim_asks(reqs, classes).items():
                asks[d] = asks.get(d, 0) + n
        if why:
            out.uncounted[pid] = ("asks for devices through DRA that the daemon does not count: "
                                  + "; ".join(why))[:400]
        elif largest and total > largest:
            out.uncounted[pid] = (f"asks for {total} GPUs through DRA, more than any node's slices publish "
                                  f"({largest}): it never starts, not counted")
        elif total:
            types = tuple(sorted(set().union(*(driver_types.get(d, set()) for d in kinds))))
            if not types:   # demand no node can take: read as any type's, the plan would preempt other GPUs for it
                out.uncounted[pid] = (f"asks for {total} GPUs through DRA of drivers ({', '.join(sorted(kinds))}) that "
                                      "publish no GPU on any node: it never starts, not counted")
                continue
            out.pending[pid] = total
            out.tenant_of[pid] = tenant
            out.accepts[pid] = types
            out.asks[pid] = asks
            if matches:
                out.matches[pid] = matches
            counted |= mine
    return out
