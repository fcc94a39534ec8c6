"""Kueue: the plan becomes whole-node holds and ClusterQueue quotas in one cohort tree; Kueue admits and borrows.

The simulator (and a Slurm reservation) holds whole nodes for a tenant: only that tenant's work may start
on them. A GPU-count quota alone does not: kube-scheduler may place the quota's GPUs on fragmented
nodes, so a Kueue-admitted 8-GPU job can find no node. So for every tenant the plan reserves GPUs for
(the high tier's forecast holds, and any tier's aged or floored holds), the daemon holds whole nodes
(daemon/actuators/k8s/node_holds.py: label and NoSchedule taint ``<hold_label>=<tenant>``) and gives the tenant
a ResourceFlavor for exactly those nodes.

A flavor's quota in a ClusterQueue is open to every namespace of that queue, so a hold flavor can only sit
in a queue of its tenant alone: every tenant has its own ClusterQueue. The cap on normal work, shared by
all normal-tier tenants, is then a Cohort's quota (hierarchical cohorts) that their queues borrow from;
so is a pooled hold (``Plan.pooled``, the high tier's holds as one pool, as one Slurm reservation for all
their accounts): nodes labelled with the pool's value, a pool flavor whose quota is a Cohort's that only
the pooled tenants' queues are in and list.

Objects (API ``kueue.x-k8s.io/v1beta1``), all labelled ``app.kubernetes.io/managed-by: gpu-autoscaler``:

- ResourceFlavor ``<flavor>`` (default ``default-flavor``): the nodes nobody holds (no node labels; pods
  admitted on it get no toleration, so they never start on a held node).
- ResourceFlavor ``<prefix>-hold-<tenant>`` per tenant: ``nodeLabels`` = the hold label,
  ``tolerations`` = the hold taint; Kueue injects both into the pods it admits on this flavor.
- ClusterQueue ``<prefix>-tenant-<tenant>`` per tenant, flavors in this order: its hold flavor
  (``nominalQuota`` = GPUs of its held nodes, ``lendingLimit: 0``), then the default flavor
  (``nominalQuota: 0``, borrows). Kueue tries the hold first (Slurm's MAGNETIC). A normal-tier tenant's
  queue is in cohort ``<prefix>-normal``, every other one in ``<cohort>``.
- ResourceFlavor ``<prefix>-pool-hold`` (the pool's nodes, label value ``gpu-autoscaler.pool``, which no
  tenant's value can be) and Cohort ``<prefix>-pool`` (parent ``<cohort>``): pool-flavor ``nominalQuota`` =
  GPUs of the pool's nodes, ``lendingLimit: 0``. The pooled tenants' queues are in it and list the pool
  flavor (``nominalQuota: 0``, so they borrow it) between their own hold and the default flavor.
- Cohort ``<prefix>-normal`` (parent ``<cohort>``): default-flavor ``nominalQuota`` = the plan's cap on
  non-preemptible work outside the high tier (the simulator's ``normal_cap``), ``borrowingLimit: 0``: the
  normal tenants together use at most that much of the unheld GPUs; what they leave idle is lent upwards.
- ClusterQueues ``<prefix>-high`` and ``<prefix>-low`` on the default flavor, in cohort ``<cohort>``: high =
  the rest of the unheld GPUs (lent to the cohort: every tenant's queue and the low queue borrow it); low
  ``nominalQuota: 0`` (borrows).
- LocalQueue ``<prefix>`` (the tenant's own ClusterQueue) and ``<prefix>-low`` (the low queue) in each
  tenant namespace.

A mixed fleet ([fleet] types; docs/fleet-schedulers.md): every GPU flavor above exists once per GPU type
instead, selecting that type's nodes by NVIDIA's product label (``nvidia.com/gpu.product``): ``<flavor>.<type>``,
``<prefix>-hold-<tenant>.<type>`` (hold label and product label) and ``<prefix>-pool-hold.<type>``. A tenant's
queue lists its hold flavors (types in [fleet] order), then the pool's, then the unheld type flavors: Kueue
tries them in that order and a pod's own node selector or affinity on the product label rules out the flavors of
types it does not take. Each type's flavor has its own nominalQuota/lendingLimit: a hold flavor the GPUs held
on that type's nodes (Plan.holds_by_type), the high queue and the normal Cohort the type's unheld GPUs (the
normal cap split over the types in proportion to them). A MIG profile is an extended resource of its own
(``nvidia.com/mig-1g.10gb``): each profile gets its own resource group in every queue and Cohort, with the same
flavors per type (its instances counted as GPUs; its flavors select no product label).

Preemption is the plan's, as in the simulator: every ClusterQueue has ``reclaimWithinCohort: Never``, and
the plan's preemptions are evictions (Eviction API, grace period, PDBs honoured) of low-priority pods,
done after the holds so their nodes are already tainted. Objects with our label that the configuration
no longer asks for (a tenant removed) are deleted at start-up. Only namespaces mapped to a configured
tenant are touched, never ``kube-*``. Every write (an object, a node hold, an eviction) is checked against
the fence right before it is sent (``FenceGuard``, see daemon/ha/fencing.py); a batch stops at the
first refusal.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import NO_FENCE, ActionReport, FencedApply, FenceGuard, TermRecord, stop_on_fence
from daemon.actuators.k8s.actuator import KubernetesActuator, api_client, tenant_namespaces
from daemon.actuators.k8s.flavors import MIG_PREFIX, PRODUCT_LABEL
from daemon.actuators.k8s.informer import ClusterView
from daemon.actuators.k8s.node_holds import NodeHolds
from daemon.actuators.k8s.objects import KUEUE_GROUP, KUEUE_VERSION, POOL_VALUE, gpu_quantity, name_part
from daemon.actuators.k8s.podless import Podless
from daemon.actuators.k8s.view import never_starts
from daemon.actuators.k8s.workloads import Workloads, pod_owners
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig, TenantConfig
from daemon.config.fleet import FleetConfig
from daemon.policy.state import Jobs, Nodes
from daemon.policy.types import Notification, Plan

log = logging.getLogger("gpu_autoscaler.actuator.kueue")

CONFLICT_TRIES = 3  # reads and writes of one Kueue object per cycle when the API answers 409 Conflict
GROUP, VERSION = KUEUE_GROUP, KUEUE_VERSION
MANAGED = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
MANAGED_KEY = "app.kubernetes.io/managed-by"


class NotOurs(Exception):
    """An object of one of the daemon's names that it did not make (no managed-by label): a site's own Kueue setup
    (Kueue's own docs name their flavor ``default-flavor``, the daemon's default). Replacing it would drop its spec
    (node labels, taints) from under the site's queues, and our label on it would let a later start-up sweep delete
    it: it is left alone and reported."""


def not_ours(kind: str, where: str) -> str:
    return (f"{kind} {where} exists without the label app.kubernetes.io/managed-by=gpu-autoscaler: not the daemon's, "
            f"left alone (your own Kueue objects keep their names: give the daemon's others with "
            f"actuators.kueue.flavor, queue_prefix or cohort; or label it to hand it over)")
TIERS = ("high", "normal", "low")
PLURALS = ("localqueues", "clusterqueues", "cohorts", "resourceflavors")  # deletion order: users first
QUOTAS = ("clusterqueues", "cohorts")  # the objects whose quotas follow the GPUs on held nodes
KINDS = {"localqueues": "LocalQueue", "clusterqueues": "ClusterQueue", "cohorts": "Cohort",
         "resourceflavors": "ResourceFlavor"}


class QueueUnreadable(RuntimeError):
    """The Workloads that wait could not be read: no start-time estimate this cycle (one line says why)."""


class KueueActuator(FencedApply):
    name = "kueue"

    def __init__(self, api_client: k8s.ApiClient, cfg: KueueActuatorConfig, tenants: list[TenantConfig],
                 dry_run: bool = True, conn: KubernetesActuatorConfig | None = None, min_runtime_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, fleet: FleetConfig | None = None,
                 view: ClusterView | None = None) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        # a mixed fleet: flavors per GPU type; a MIG profile is a resource of its own (a resource group each)
        typed = fleet is not None and fleet.typed
        self.fleet = fleet if typed else None
        self.types = [t for t in fleet.types if not t.startswith("mig-")] if typed else []
        self.mig_types = [t for t in fleet.types if t.startswith("mig-")] if typed else []
        self.cfg = cfg
        self.dry_run = dry_run
        self.ns_of = tenant_namespaces(tenants)
        self.tier_of = {t.name: t.tier for t in tenants}
        # every tenant may be held: the high tier by forecast, any tier by aging or an operator's floor
        self.holders = sorted(self.ns_of)
        self.nodes = NodeHolds(api_client, label=cfg.hold_label, gpu_resource=cfg.gpu_resource,
                               tenants_ns=self.ns_of, shrink_delay_s=cfg.hold_shrink_delay_s, dry_run=dry_run,
                               clock=clock, resolver=fleet.resolver() if typed else None, view=view)
        # evictions only (Eviction API, grace period, min run time); PriorityClasses and failover stay with
        # the kubernetes actuator
        self.pods = KubernetesActuator(api_client, conn or KubernetesActuatorConfig(), tenants, dry_run,
                                       enforce_plan=False, min_runtime_s=min_runtime_s, hold_label=cfg.hold_label,
                                       fleet=fleet, view=view)
        self.nodes.dra = lambda: self.pods.dra   # the DRA GPUs its cluster_jobs read: DRA nodes are held too
        # hold label value (name_part of a tenant, or POOL_VALUE) -> GPUs on its nodes, and -> {type: GPUs}, as read
        # in this fencing term only (TermRecord): the quotas are written from these. Another term's figures (a
        # replica that leads again) or none (a new process) are guesses: until the nodes are read in this term no
        # quota is written (_holds)
        self._held: TermRecord[str, int] = TermRecord(lambda: self.guard)
        self._held_by_type: TermRecord[str, dict[str, int]] = TermRecord(lambda: self.guard)
        self._told_unread: TermRecord[str, bool] = TermRecord(lambda: self.guard)  # said once per term
        # (plural, namespace, name) -> spec last applied, in this fencing term only (TermRecord): a replica that
        # leads again after another led must not skip a write because it once sent that spec; the other leader
        # may have written another one since (a window's quota)
        self._sent: TermRecord[tuple[str, str, str], dict] = TermRecord(lambda: self.guard)
        self._foreign_read: dict[tuple[str, str, str], bool] = {}   # a dry run's reads of our names (_foreign)
        self._swept = False
        self._api_ok = False  # discovery said Kueue's CRDs are served (api_problem); asked until it does
        self._last: Plan | None = None
        self.guard: FenceGuard = NO_FENCE
        # the Workloads that wait for admission: the plan's demand beside the pods (those Kueue may admit), and the
        # start-time estimates, which go back on them
        self.workloads = Workloads(self.custom, {ns: t for t, ns in self.ns_of.items()}, cfg.gpu_resource,
                                   self.queue_name("low"), cfg.max_workloads_per_tenant, cfg.max_queued_per_namespace,
                                   resolver=self.pods.resolver)
        self._no_workloads = ""                  # why Workloads are not served (said once), "" while they are
        # admitted Workloads with no live pod: quota Kueue holds for nothing, said (podless.py)
        self.podless = Podless(self.workloads.tenant_of, cfg.gpu_resource)

    def use_fence(self, guard: FenceGuard) -> None:
        """Check `guard` right before each write (ChecksFence): the Kueue objects, the node holds, the evictions."""
        self.guard = guard
        self.nodes.guard = guard
        self.pods.use_fence(guard)

    def _may(self, what: str) -> None:
        if not self.dry_run:
            self.guard.check(what)

    @staticmethod
    def from_config(conn: KubernetesActuatorConfig, cfg: KueueActuatorConfig, tenants: list[TenantConfig],
                    dry_run: bool = True, min_runtime_s: float = 0.0,
                    fleet: FleetConfig | None = None, view: ClusterView | None = None) -> "KueueActuator":
        return KueueActuator(api_client(conn), cfg, tenants, dry_run, conn, min_runtime_s, fleet=fleet, view=view)

    def start_view(self) -> None:
        """The service starts: the watches of the view begin (KeepsClusterView)."""
        self.pods.start_view()

    def stop_view(self) -> None:
        self.pods.stop_view()

    def queue_name(self, tier: str) -> str:
        return f"{self.cfg.queue_prefix}-{tier}"

    def tenant_queue(self, tenant: str) -> str:
        return f"{self.cfg.queue_prefix}-tenant-{name_part(tenant)}"

    def hold_flavor(self, tenant: str) -> str:
        return f"{self.cfg.queue_prefix}-hold-{name_part(tenant)}"

    @property
    def pool_flavor(self) -> str:
        return f"{self.cfg.queue_prefix}-pool-hold"

    def pooled(self, plan: Plan) -> set[str]:
        """The tenants whose holds the plan pools: configured high-tier ones (the policy pools only the high
        tier; a normal tenant in the pool would escape the normal cap)."""
        return {t for t in plan.pooled if t in self.ns_of and self.tier_of.get(t) == "high"}

    # ---- objects ------------------------------------------------------------------------------
    def quotas(self, plan: Plan, held: dict[str, int], pool_held: int = 0) -> dict[str, int]:
        """Default-flavor nominalQuota of the high and low queues and the normal Cohort, given the GPUs on
        held nodes (the tenants' and the pool's)."""
        unheld = max(int(plan.capacity) - sum(held.values()) - int(pool_held), 0)
        # the simulator caps non-preemptible work outside the high tier at min(plan.quotas) (shared_cap)
        normal = min(max(int(min(plan.quotas.values())), 0), unheld) if plan.quotas else unheld
        return {"high": unheld - normal, "normal": normal, "low": 0}

    def _cluster_queue(self, name: str, namespaces: list[str], flavors: list[dict], cohort: str | None = None) -> dict:
        return {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": dict(MANAGED)},
            "spec": {
                "cohort": cohort or self.cfg.cohort,
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In",
                     "values": sorted(namespaces) or ["gpu-autoscaler-none"]}]},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
                "resourceGroups": [{"coveredResources": [self.cfg.gpu_resource], "flavors": flavors}],
            },
        }

    def _flavor_quota(self, flavor: str, nominal: int, **limits: int) -> dict:
        return {"name": flavor, "resources": [{"name": self.cfg.gpu_resource, "nominalQuota": int(nominal), **limits}]}

    def cluster_queue(self, tier: str, nominal: int) -> dict:
        """The high queue (lends the unheld GPUs nobody else has quota for) or the low one (borrows)."""
        nss = [ns for t, ns in self.ns_of.items() if tier == "low" or self.tier_of.get(t) == tier]
        return self._cluster_queue(self.queue_name(tier), nss, [self._flavor_quota(self.cfg.flavor, nominal)])

    def normal_cohort(self, nominal: int) -> dict:
        """The normal tier's cap as a Cohort's quota, shared by the normal tenants' own queues: they may not
        borrow beyond it from the rest of the tree (borrowingLimit 0); what they leave idle is lent upwards."""
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cohort",
                "metadata": {"name": self.queue_name("normal"), "labels": dict(MANAGED)},
                "spec": {"parentName": self.cfg.cohort, "resourceGroups": [{
                    "coveredResources": [self.cfg.gpu_resource],
                    "flavors": [self._flavor_quota(self.cfg.flavor, nominal, borrowingLimit=0)]}]}}

    def pool_cohort(self, pool_held: int) -> dict:
        """The pooled hold's quota: only the queues in this Cohort (the pooled tenants') may borrow it, and it
        is lent to nobody outside (lendingLimit 0)."""
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cohort",
                "metadata": {"name": self.queue_name("pool"), "labels": dict(MANAGED)},
                "spec": {"parentName": self.cfg.cohort, "resourceGroups": [{
                    "coveredResources": [self.cfg.gpu_resource],
                    "flavors": [self._flavor_quota(self.pool_flavor, pool_held, lendingLimit=0)]}]}}

    def tenant_cluster_queue(self, tenant: str, held: int, pooled: bool = False) -> dict:
        if pooled:
            cohort = self.queue_name("pool")
        else:
            cohort = self.queue_name("normal") if self.tier_of.get(tenant) == "normal" else self.cfg.cohort
        return self._cluster_queue(self.tenant_queue(tenant), [self.ns_of[tenant]], [
            self._flavor_quota(self.hold_flavor(tenant), held, lendingLimit=0),   # its own nodes first
            *([self._flavor_quota(self.pool_flavor, 0)] if pooled else []),         # then the pool's
            self._flavor_quota(self.cfg.flavor, 0)], cohort)                        # then borrow unheld GPUs

    def resource_flavors(self) -> list[dict]:
        out = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                "metadata": {"name": self.cfg.flavor, "labels": dict(MANAGED)}, "spec": {}}]
        for name, v in [*((self.hold_flavor(t), name_part(t)) for t in self.holders), (self.pool_flavor, POOL_VALUE)]:
            out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                        "metadata": {"name": name, "labels": dict(MANAGED)},
                        "spec": {"nodeLabels": {self.cfg.hold_label: v},
                                 "tolerations": [{"key": self.cfg.hold_label, "operator": "Equal", "value": v,
                                                  "effect": "NoSchedule"}]}})
        return out

    def local_queues(self) -> list[dict]:
        out = []
        for t, ns in sorted(self.ns_of.items()):
            for name, cq in ((self.cfg.queue_prefix, self.tenant_queue(t)),
                             (self.queue_name("low"), self.queue_name("low"))):
                out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                            "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED)},
                            "spec": {"clusterQueue": cq}})
        return out

    # ---- a mixed fleet: flavors per GPU type ------------------------------------------------------
    @property
    def all_types(self) -> list[str]:
        """The GPU types with flavors: the models (the GPU resource), then the MIG profiles (their own)."""
        return self.types + self.mig_types

    def resource_of(self, typ: str) -> str:
        """The extended resource a type is asked for as: a MIG profile's own (``nvidia.com/mig-1g.10gb``), else
        the GPU resource."""
        return MIG_PREFIX + typ[len("mig-"):] if typ in self.mig_types else self.cfg.gpu_resource

    def type_flavor(self, typ: str) -> str:
        return f"{self.cfg.flavor}.{name_part(typ)}"

    def typed_hold_flavor(self, value: str, typ: str) -> str:
        """The hold flavor of a hold label value (a tenant's name_part, or the pool's) on one GPU type."""
        if value == POOL_VALUE:
            return f"{self.pool_flavor}.{name_part(typ)}"
        return f"{self.cfg.queue_prefix}-hold-{value}.{name_part(typ)}"   # '.': no tenant's name_part has one

    def product(self, typ: str) -> str:
        """The product label value of a type's nodes: as read from them, else an alias of the type spelt as the
        label spells it (dashes for spaces), else the type's own name."""
        seen = self.nodes.products.get(typ)
        if seen:
            return seen
        assert self.fleet is not None
        alias = sorted(raw for raw, t in self.fleet.aliases.items() if t == typ)
        return alias[0].replace(" ", "-") if alias else typ

    def typed_quotas(self, plan: Plan) -> dict[str, dict[str, int]]:
        """Per tier, per GPU type: the default flavors' nominalQuota (as quotas(), on each type's unheld GPUs; a
        MIG profile's are its instances). The normal cap covers every type together; Kueue has no quota across
        flavors, so it is split over the types in proportion to their unheld GPUs (largest remainder, ties in
        [fleet] order)."""
        types = self.all_types
        cap = {t: int(plan.capacity_by_type.get(t, self.nodes.capacity_by_type.get(t, 0))) for t in types}
        held = {t: sum(h.get(t, 0) for h in self._held_by_type.values()) for t in types}
        unheld = {t: max(cap[t] - held[t], 0) for t in types}
        total = sum(unheld.values())
        normal_total = min(max(int(min(plan.quotas.values())), 0), total) if plan.quotas else total
        share = {t: (normal_total * unheld[t] // total if total else 0) for t in types}
        rest = normal_total - sum(share.values())
        order = sorted(types, key=lambda t: (-((normal_total * unheld[t]) % total if total else 0), types.index(t)))
        for t in order[:rest]:
            share[t] += 1
        return {"high": {t: unheld[t] - share[t] for t in types}, "normal": share, "low": {t: 0 for t in types}}

    def typed_resource_flavors(self) -> list[dict]:
        """A flavor per type and per (hold, type). A model's select its nodes by the product label; a MIG
        profile's need none (only nodes that have the profile's resource can run the pod)."""
        out = []
        values = [name_part(t) for t in self.holders] + [POOL_VALUE]
        for typ in self.all_types:
            select = {} if typ in self.mig_types else {PRODUCT_LABEL: self.product(typ)}
            out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                        "metadata": {"name": self.type_flavor(typ), "labels": dict(MANAGED)},
                        "spec": {"nodeLabels": select} if select else {}})
            for value in values:
                out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                            "metadata": {"name": self.typed_hold_flavor(value, typ), "labels": dict(MANAGED)},
                            "spec": {"nodeLabels": {self.cfg.hold_label: value, **select},
                                     "tolerations": [{"key": self.cfg.hold_label, "operator": "Equal",
                                                      "value": value, "effect": "NoSchedule"}]}})
        return out

    def _groups(self, flavors: Callable[[str], list[dict]]) -> list[dict]:
        """The resource groups of a queue or Cohort: one for the GPU resource over the models' flavors
        (`flavors(type)`: that type's entries, in order), then one per MIG profile (its own resource)."""
        out = []
        if self.types:
            out.append({"coveredResources": [self.cfg.gpu_resource],
                        "flavors": [f for t in self.types for f in flavors(t)]})
        for t in self.mig_types:
            out.append({"coveredResources": [self.resource_of(t)], "flavors": flavors(t)})
        return out

    def _typed_quota(self, flavor: str, typ: str, nominal: int, **limits: int) -> dict:
        return {"name": flavor, "resources": [{"name": self.resource_of(typ), "nominalQuota": int(nominal),
                                               **limits}]}

    def typed_objects(self, plan: Plan) -> list[tuple[str, dict]]:
        """objects() for a mixed fleet: every GPU flavor once per type (module docstring)."""
        q = self.typed_quotas(plan)
        pooled = self.pooled(plan)

        def cohort(name: str, groups: list[dict]) -> dict:
            return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Cohort",
                    "metadata": {"name": name, "labels": dict(MANAGED)},
                    "spec": {"parentName": self.cfg.cohort, "resourceGroups": groups}}

        def queue(name: str, nss: list[str], groups: list[dict], where: str | None = None) -> dict:
            body = self._cluster_queue(name, nss, [], where)
            body["spec"]["resourceGroups"] = groups
            return body

        pool = self._held_by_type.get(POOL_VALUE, {})
        out: list[tuple[str, dict]] = [("resourceflavors", rf) for rf in self.typed_resource_flavors()]
        out.append(("cohorts", cohort(self.queue_name("normal"), self._groups(lambda t: [
            self._typed_quota(self.type_flavor(t), t, q["normal"][t], borrowingLimit=0)]))))
        out.append(("cohorts", cohort(self.queue_name("pool"), self._groups(lambda t: [
            self._typed_quota(self.typed_hold_flavor(POOL_VALUE, t), t, pool.get(t, 0), lendingLimit=0)]))))
        for tier in ("high", "low"):
            nss = [ns for t, ns in self.ns_of.items() if tier == "low" or self.tier_of.get(t) == tier]
            out.append(("clusterqueues", queue(self.queue_name(tier), nss, self._groups(lambda t: [
                self._typed_quota(self.type_flavor(t), t, q[tier][t])]))))
        for tenant in self.holders:
            value = name_part(tenant)
            mine = self._held_by_type.get(value, {})
            is_pooled = tenant in pooled
            if is_pooled:
                where = self.queue_name("pool")
            else:
                where = self.queue_name("normal") if self.tier_of.get(tenant) == "normal" else self.cfg.cohort

            def order(kind: str, ts: list[str]) -> list[dict]:
                out_: list[dict] = []
                for t in ts:
                    if kind == "hold":
                        out_.append(self._typed_quota(self.typed_hold_flavor(value, t), t, mine.get(t, 0),
                                                      lendingLimit=0))
                    elif kind == "pool" and is_pooled:
                        out_.append(self._typed_quota(self.typed_hold_flavor(POOL_VALUE, t), t, 0))
                    elif kind == "unheld":
                        out_.append(self._typed_quota(self.type_flavor(t), t, 0))
                return out_

            # per group: its holds first (types in [fleet] order), then the pool's, then the unheld flavors
            groups = []
            if self.types:
                groups.append({"coveredResources": [self.cfg.gpu_resource], "flavors": [
                    *order("hold", self.types), *order("pool", self.types), *order("unheld", self.types)]})
            for t in self.mig_types:
                groups.append({"coveredResources": [self.resource_of(t)], "flavors": [
                    *order("hold", [t]), *order("pool", [t]), *order("unheld", [t])]})
            out.append(("clusterqueues", queue(self.tenant_queue(tenant), [self.ns_of[tenant]], groups, where)))
        out += [("localqueues", lq) for lq in self.local_queues()]
        return out

    def objects(self, plan: Plan, held: dict[str, int], pool_held: int = 0) -> list[tuple[str, dict]]:
        """Every object the plan asks for, as (plural, body), in the order they must exist."""
        if self.all_types:
            return self.typed_objects(plan)
        q = self.quotas(plan, held, pool_held)
        pooled = self.pooled(plan)
        return ([("resourceflavors", rf) for rf in self.resource_flavors()]
                + [("cohorts", self.normal_cohort(q["normal"])), ("cohorts", self.pool_cohort(pool_held))]
                + [("clusterqueues", self.cluster_queue(tier, q[tier])) for tier in ("high", "low")]
                + [("clusterqueues", self.tenant_cluster_queue(t, held.get(t, 0), t in pooled)) for t in self.holders]
                + [("localqueues", lq) for lq in self.local_queues()])

    # ---- writing ------------------------------------------------------------------------------
    def _ensure(self, rep: ActionReport, plural: str, body: dict) -> None:
        """Create the object, or replace its spec when it differs from what was last applied. A LocalQueue
        whose clusterQueue must change (immutable in Kueue) is deleted and created again. One of that name without
        our label is not ours (NotOurs): reported, never written, in a dry run too."""
        meta = body["metadata"]
        key = (plural, meta.get("namespace", ""), meta["name"])
        if self._sent.get(key) == body["spec"]:
            return
        where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        ns = meta.get("namespace")
        if self.dry_run and self._foreign(key, plural, ns, meta["name"]):
            rep.errors.append(not_ours(body["kind"], where))   # what going live would refuse, said in the dry run
            return
        self._may(f"apply {body['kind']} {where}")
        rep.actions.append(f"apply {body['kind']} {where}")
        if self.dry_run:
            return
        # a 409 is the object moving under us between the read and the write (Kueue's controller adds its
        # finalizer to a new flavor or queue and updates their status): read again and write again, a few times
        for attempt in range(CONFLICT_TRIES):
            try:
                self._write(rep, plural, ns, body, where)
                self._sent[key] = body["spec"]
                return
            except NotOurs:
                rep.actions.remove(f"apply {body['kind']} {where}")
                rep.errors.append(not_ours(body["kind"], where))
                return
            except ApiException as exc:  # reported; the next cycle tries again
                if exc.status == 409 and attempt + 1 < CONFLICT_TRIES:
                    continue
                rep.errors.append(f"{body['kind']} {where}: {exc.status} {exc.reason}")
                return

    def _write(self, rep: ActionReport, plural: str, ns: str | None, body: dict, where: str) -> None:
        """One read and one create or replace of ``body``. A replace keeps what others put on the object's
        metadata (Kueue's finalizer, annotations, owners): it replaces our spec and labels, not theirs."""
        meta = body["metadata"]
        try:
            cur = (self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"]) if ns else
                   self.custom.get_cluster_custom_object(GROUP, VERSION, plural, meta["name"]))
        except ApiException as exc:
            if exc.status != 404:
                raise
            cur = None
        if cur is not None and ((cur.get("metadata") or {}).get("labels") or {}).get(MANAGED_KEY) != \
                MANAGED[MANAGED_KEY]:
            raise NotOurs(where)
        if cur is not None and plural == "localqueues" and \
                (cur.get("spec") or {}).get("clusterQueue") != body["spec"]["clusterQueue"]:
            self._may(f"re-create LocalQueue {where}")
            rep.actions.append(f"re-create LocalQueue {where}: its clusterQueue is immutable")
            self._delete(plural, ns, meta["name"])
            cur = None
        if cur is None:
            if ns:
                self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
            else:
                self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
            return
        theirs = {k: v for k, v in (cur.get("metadata") or {}).items()
                  if k in ("finalizers", "annotations", "ownerReferences") and k not in meta}
        new = {**body, "metadata": {**meta, **theirs, "resourceVersion": cur["metadata"]["resourceVersion"]}}
        if ns:
            self.custom.replace_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"], new)
        else:
            self.custom.replace_cluster_custom_object(GROUP, VERSION, plural, meta["name"], new)

    def _foreign(self, key: tuple[str, str, str], plural: str, ns: str | None, name: str) -> bool:
        """In a dry run: whether an object of this name exists without our label (read once per object: the dry
        run writes nothing, so what it found stays true enough to say; a failed read says nothing)."""
        if key not in self._foreign_read:
            try:
                cur = (self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name) if ns else
                       self.custom.get_cluster_custom_object(GROUP, VERSION, plural, name))
                labels = (cur.get("metadata") or {}).get("labels") or {}
                self._foreign_read[key] = labels.get(MANAGED_KEY) != MANAGED[MANAGED_KEY]
            except ApiException:
                self._foreign_read[key] = False
        return self._foreign_read[key]

    def _delete(self, plural: str, ns: str | None, name: str) -> None:
        try:
            if ns:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def sweep(self, rep: ActionReport, wanted: list[tuple[str, dict]]) -> None:
        """Delete the objects with our label that `wanted` does not name (a tenant no longer configured):
        LocalQueues first, then ClusterQueues, then ResourceFlavors. Done at start-up, retried until it
        succeeds once. Objects without our label are never listed, so never touched."""
        keep = {(p, b["metadata"].get("namespace", ""), b["metadata"]["name"]) for p, b in wanted}
        selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
        try:
            for plural in PLURALS:
                items = self.custom.list_cluster_custom_object(GROUP, VERSION, plural, label_selector=selector)
                for it in items.get("items", []):
                    meta = it.get("metadata", {})
                    if (meta.get("labels", {}).get("app.kubernetes.io/managed-by")
                            != MANAGED["app.kubernetes.io/managed-by"]):
                        continue
                    ns, name = meta.get("namespace", ""), meta["name"]
                    if (plural, ns, name) in keep:
                        continue
                    self._may(f"delete {it.get('kind', KINDS[plural])} {ns + '/' if ns else ''}{name}")
                    rep.actions.append(f"delete {it.get('kind', KINDS[plural])} {ns + '/' if ns else ''}{name}: "
                                       "not asked for by the configuration")
                    if not self.dry_run:
                        self._delete(plural, ns or None, name)
                        self._sent.pop((plural, ns, name), None)
        except ApiException as exc:
            rep.errors.append(f"Kueue objects: cannot list or delete stale ones: {exc.status} {exc.reason}")
            return
        self._swept = True

    # ---- actuator interface (apply: FencedApply) ----------------------------------------------
    def api_problem(self) -> str | None:
        """Why this API server cannot take the Kueue objects, in one line naming what is missing, or None (it can,
        or discovery failed: then the writes say what failed). Asked each cycle until it once finds no problem: the
        group and version (``kueue.x-k8s.io/v1beta1``) served, and each kind's CRD in it."""
        want = ", ".join(f"{p}.{GROUP}" for p in PLURALS)
        try:
            served = {r.name for r in self.custom.get_api_resources(GROUP, VERSION).resources or []
                      if "/" not in r.name}                              # not the subresources (status)
        except ApiException as exc:
            if exc.status != 404:
                return None
            try:
                groups = k8s.ApisApi(self.custom.api_client).get_api_versions().groups or []
            except ApiException:
                return None
            other = [v.group_version for g in groups if g.name == GROUP for v in g.versions or []]
            if not other:
                return (f"Kueue's CRDs are not installed: the API server serves no {GROUP} API (needed at {VERSION}: "
                        f"{want}); install Kueue (docs/kubernetes.md); no Kueue object or node hold is written")
            return (f"Kueue's API {GROUP}/{VERSION} is not served: the API server has {', '.join(other)} only (a "
                    f"Kueue of another version); install one that serves {VERSION} (docs/kubernetes.md); no Kueue "
                    "object or node hold is written")
        missing = [f"{p}.{GROUP}" for p in PLURALS if p not in served]
        if missing:
            return (f"Kueue's CRD {', '.join(missing)} is missing at {VERSION} (the API server serves "
                    f"{', '.join(sorted(served)) or 'none'} of {GROUP}/{VERSION}); install Kueue's CRDs "
                    "(docs/kubernetes.md); no Kueue object or node hold is written")
        return None

    def _apply(self, rep: ActionReport, plan: Plan) -> None:
        self._last = plan
        if not self._api_ok and not self.dry_run:
            problem = self.api_problem()
            if problem is not None:
                rep.errors.append(problem)
                return
            self._api_ok = True
        freed: dict[str, int] = {}
        for p in plan.preemptions:
            if p.node:
                freed[p.node] = freed.get(p.node, 0) + int(p.gpus)
        pooled = self.pooled(plan)
        # per hold label value: a tenant's own hold (for a pooled one only what its windows hold now, its alone:
        # Plan.window_holds), and the pool (the pooled tenants' holds beyond that)
        own = {t: min(int(plan.window_holds.get(t, 0)), int(plan.reservations.get(t, 0))) if t in pooled
               else int(plan.reservations.get(t, 0)) for t in self.holders}
        wanted = {name_part(t): own[t] for t in self.holders}
        wanted[POOL_VALUE] = sum(int(plan.reservations.get(t, 0)) - own[t] for t in pooled)
        members = {name_part(t): {t} for t in self.holders} | {POOL_VALUE: pooled}
        job_gpus = {name_part(t): plan.job_gpus((t,)) for t in self.holders} | {POOL_VALUE: plan.job_gpus(pooled)}
        by_type = None
        if self.all_types and plan.holds_by_type:  # a mixed fleet: each hold's GPUs on nodes of each type
            by_type = {name_part(t): {k: int(v) for k, v in plan.holds_by_type.get(t, {}).items()}
                       for t in self.holders if t not in pooled and t in plan.holds_by_type}
            # a pooled tenant's windows on each type are its own hold there (its hold flavor's quota per type,
            # Plan.window_holds_by_type), the rest of its hold on that type the pool's
            pool: dict[str, int] = {}
            for t in pooled:
                win = plan.window_holds_by_type.get(t, {})
                mine: dict[str, int] = {}
                for k, v in plan.holds_by_type.get(t, {}).items():
                    own_k = min(int(win.get(k, 0)), int(v))
                    if own_k > 0:
                        mine[k] = own_k
                    pool[k] = pool.get(k, 0) + int(v) - own_k
                if mine and t in self.holders:
                    by_type[name_part(t)] = mine
            if pool:
                by_type[POOL_VALUE] = pool
        held = self.nodes.apply(rep, wanted, freed, members, job_gpus, by_type=by_type)
        if held is not None:  # None: nodes unreadable, nothing changed; the queues keep this term's last read
            self._read(held, self.nodes.held_by_type)
        known = self._holds()
        objs = self.objects(plan, *(known or ({}, 0)))   # unknown: for the names and the quota-free objects only
        if not self._swept:
            self.sweep(rep, objs)
        for plural, body in objs:
            if known is not None or plural not in QUOTAS:
                self._ensure(rep, plural, body)
        if known is None and not self._told_unread.get("nodes"):
            self._told_unread["nodes"] = True
            why = next((e for e in rep.errors if e.startswith("node holds:")), "")
            log.warning("kueue: no ClusterQueue or Cohort quota is written until this replica reads the nodes: it has "
                        "not since it %s (%s), and the GPUs its holds had before are a guess; the quotas in the API "
                        "stay", "began to lead" if self.guard.term() is not None else "started", why)
        for p in plan.preemptions:  # after the holds: the nodes they clear are already tainted
            self.pods.evict(rep, p.job_id, p.reason)

    def release_holds(self) -> ActionReport:
        """The daemon stops: every node it holds is un-held (no pod stops) and the hold flavors' quota goes
        to 0; the high queue and the normal Cohort keep the last plan's numbers over all unheld GPUs."""
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            self._release(rep)
        return rep

    def _read(self, held: dict[str, int], by_type: dict[str, dict[str, int]]) -> None:
        """The GPUs each hold's nodes have now (per label value; and per type), as read in this term."""
        self._held.clear()
        self._held.update(held)
        self._held_by_type.clear()
        self._held_by_type.update(by_type)

    def _holds(self) -> tuple[dict[str, int], int] | None:
        """GPUs on each holder's nodes and on the pool's, as read in this fencing term; None when the nodes have
        not been read in it (every read includes the pool's value)."""
        if POOL_VALUE not in self._held:
            return None
        return {t: self._held.get(name_part(t), 0) for t in self.holders}, self._held[POOL_VALUE]

    def _release(self, rep: ActionReport) -> None:
        # also nodes an earlier run held, when this one never applied a plan
        if not self.nodes.release_all(rep):
            return   # the nodes could not be read: still held, so the quotas in the API still fit them
        self._read({v: 0 for v in [*map(name_part, self.holders), POOL_VALUE]}, {})
        if self._last is None:
            return
        plan = dataclasses.replace(self._last, reservations={}, preemptions=())
        for plural, body in self.objects(plan, {}, 0):
            if plural in QUOTAS:
                self._ensure(rep, plural, body)

    def lists_every_job(self) -> bool:
        """No: the tenant namespaces' pods and Workloads only; another namespace's are unknown, not absent."""
        return False

    def cluster_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """The pods (view.py) and, beside them, the waiting Workloads Kueue may admit (workloads.Workloads.demand:
        they have no pod yet), each a pending job of its tenant and tier with its shape, so the plan makes room and
        holds for a gang before Kueue admits it; an admitted one with no live pod is said (podless.py). Raises what the
        pods' read raises, and QueueUnreadable when the Workloads cannot be listed, a page refused midway too (the cycle
        keeps its last plan: a queue unread is not an empty one); where Kueue serves no Workloads at all (404) there are
        none, said once."""
        jobs = self.pods.cluster_jobs(tenants)
        pods, sizes, starts = self._fleet()
        owners = pod_owners(pods, self.workloads.tenant_of)
        try:   # a page at a time (Workloads.list): a page refused midway raises here too
            waiting = self.workloads.demand(self.podless.watch(self.workloads.list(), owners), tenants, sizes,
                                            owners, starts=starts)
        except ApiException as exc:
            if exc.status != 404:
                raise QueueUnreadable(f"cannot list Kueue Workloads ({GROUP}/{VERSION}): {exc.status} "
                                      f"{exc.reason}") from None
            if not self._no_workloads:
                log.warning("Kueue serves no Workloads (%s/%s workloads: 404): the plan reads the pods only", GROUP,
                            VERSION)
            self._no_workloads = "404"
            return jobs
        self._no_workloads = ""
        return Jobs.concat([jobs, waiting]) if len(waiting) else jobs

    def _fleet(self) -> tuple[list, list[int], Callable[[object, int], str | None]]:
        """What the Workloads are judged against, from this cycle's pod read: the live pods (whose owners' Workloads
        are counted as them), each node's GPUs, usable now or not (a cordoned node may come back: what a Workload
        must fit in), and where their pods could start (the pod view's rule for a pending pod: nodeSelector, required
        node affinity, spread keys, taints, with Kueue's hold label and taint left out as the view leaves them). No
        nodes read: no size rule (workloads._too_big)."""
        pods, nodes = self.pods.last_read or ([], [])
        sizes = [gpu_quantity((n.status.allocatable or {}).get(self.cfg.gpu_resource, 0)) if n.status else 0
                 for n in nodes]
        return pods, sizes, never_starts(nodes, self.cfg.gpu_resource, self.pods.resolver, self.cfg.hold_label)

    @property
    def dra(self):
        """The DRA GPUs the pods' read took (dra.py, in its Jobs and Nodes), which the cycle exports: this actuator's
        read is the cycle's beside Kueue (cluster_jobs)."""
        return self.pods.dra

    def queued_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """The Workloads Kueue has not admitted, as pending jobs for the start-time estimates (workloads.py; they
        have no pod, so the pods' read does not see them), by the plan's never-admitted rule (a Workload Kueue will
        never admit has no estimate, and the one it carries is cleared), judged against this cycle's nodes (_fleet).
        Listed afresh: the estimate comes after the plan and its actions, and a Workload made since the plan's read
        waits too. Raises QueueUnreadable, in one line, when the API does not answer or refuses, a page midway too
        (an ApiException's text holds the whole answer, headers and body)."""
        _, sizes, starts = self._fleet()
        try:   # read a page at a time (Workloads.list), so a page refused midway raises here too
            return self.workloads.jobs(self.workloads.list(), tenants, sizes=sizes, starts=starts)
        except ApiException as exc:
            raise QueueUnreadable(f"cannot list Kueue Workloads ({GROUP}/{VERSION}): {exc.status} {exc.reason}") \
                from None

    def queued_starts(self) -> dict[str, float]:
        """The admitted Workloads as the last queued_jobs read found them: job id -> when admitted (epoch)."""
        return dict(self.workloads.started)

    def show_eta(self, rows: list[dict], made_at: float) -> ActionReport:
        """The estimates of the Workloads queued_jobs read, as annotations on them (workloads.py): only where they
        moved 5 minutes or more; removed from a Workload once admitted. Each patch is fenced."""
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            for ns, name, notes in self.workloads.changes(rows, made_at, self.dry_run):
                what = "clear the estimate of" if all(v is None for v in notes.values()) else "annotate"
                self._may(f"{what} Workload {ns}/{name}")
                rep.actions.append(f"{what} Workload {ns}/{name}")
                if self.dry_run:
                    continue
                try:
                    self.workloads.patch(ns, name, notes)
                except ApiException as exc:
                    if exc.status != 404:   # gone since the read: nothing to show it on
                        rep.errors.append(f"Workload {ns}/{name}: {exc.status} {exc.reason}: {str(exc.body)[:300]}")
        return rep

    @property
    def unknown_types(self) -> list[str]:
        """Model names (product labels, MIG resources) that match no [fleet] type or alias: kept as unknown."""
        names = set(self.pods.resolver.unmatched) if self.pods.resolver is not None else set()
        if self.nodes.resolver is not None:
            names |= self.nodes.resolver.unmatched
        return sorted(names)

    def cluster_nodes(self, tenants: tuple[str, ...]) -> Nodes:
        """The nodes with this actuator's holds (hold_label) read back; see view.py."""
        return self.pods.cluster_nodes(tenants)

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        # a failed node's pods are the Kubernetes actuator's (Eviction API); Kueue re-admits their workloads
        return ActionReport(self.name, self.dry_run)

    def notify(self, notes: list[Notification]) -> ActionReport:
        return ActionReport(self.name, self.dry_run)
