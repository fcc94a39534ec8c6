"""Kueue: the plan becomes ClusterQueue quotas in one cohort; Kueue itself admits, borrows and reclaims.

Objects (API ``kueue.x-k8s.io/v1beta1``), all labelled ``app.kubernetes.io/managed-by: gpu-autoscaler``:

- ResourceFlavor ``<flavor>`` (default ``default-flavor``), no node labels.
- ClusterQueue ``<prefix>-high``, ``<prefix>-normal``, ``<prefix>-low`` in cohort ``<cohort>``, each with one
  resource group covering the GPU resource (``nvidia.com/gpu``):
  - high: ``nominalQuota`` = max(the high tier's guaranteed pool, the GPUs the plan reserves for it);
    ``lendingLimit`` = nominalQuota minus those reserved GPUs, so what the forecast says the tier
    needs is never lent; ``reclaimWithinCohort: Any``: a high workload that fits its nominal quota
    preempts borrowers to get lent quota back.
  - normal: ``nominalQuota`` = the rest of the cluster, ``borrowingLimit: 0`` (its work is never
    preempted, so it never runs on borrowed quota); ``reclaimWithinCohort: LowerPriority``.
  - low: ``nominalQuota: 0`` and no borrowing limit: preemptible work runs only on borrowed quota and
    is what Kueue reclaims. ``reclaimWithinCohort: Never``.
- LocalQueue ``<prefix>`` (the tenant's tier queue) and ``<prefix>-low`` in each tenant namespace.

Reclaim is left to Kueue (``reclaimWithinCohort``): this actuator never evicts. Only namespaces mapped
to a configured tenant are touched, never ``kube-*``.
"""

from __future__ import annotations

import logging

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import ActionReport
from daemon.actuators.kubernetes import api_client, tenant_namespaces
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig, TenantConfig
from daemon.policy.types import Notification, Plan, PolicyMemory

log = logging.getLogger("gpu_autoscaler.actuator.kueue")

GROUP, VERSION = "kueue.x-k8s.io", "v1beta1"
MANAGED = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
TIERS = ("high", "normal", "low")


class KueueActuator:
    name = "kueue"

    def __init__(self, api_client: k8s.ApiClient, cfg: KueueActuatorConfig, tenants: list[TenantConfig],
                 dry_run: bool = True) -> None:
        self.custom = k8s.CustomObjectsApi(api_client)
        self.cfg = cfg
        self.dry_run = dry_run
        self.ns_of = tenant_namespaces(tenants)
        self.tier_of = {t.name: t.tier for t in tenants}
        self._sent: dict[tuple[str, str, str], dict] = {}
        self._last_pool: tuple[int, int] | None = None  # (capacity, guaranteed pool) of the last plan applied  # (plural, namespace, name) -> spec last applied

    @staticmethod
    def from_config(conn: KubernetesActuatorConfig, cfg: KueueActuatorConfig, tenants: list[TenantConfig],
                    dry_run: bool = True) -> "KueueActuator":
        return KueueActuator(api_client(conn), cfg, tenants, dry_run)

    def queue_name(self, tier: str) -> str:
        return f"{self.cfg.queue_prefix}-{tier}"

    # ---- objects ------------------------------------------------------------------------------
    def quotas(self, plan: Plan) -> dict[str, dict[str, int | None]]:
        """GPU quota per tier queue: nominalQuota, lendingLimit, borrowingLimit (None = no limit)."""
        cap = max(int(plan.capacity), 0)
        held = sum(int(g) for t, g in plan.reservations.items() if self.tier_of.get(t) == "high")
        high = min(max(int(plan.high_pool), held), cap)
        return {"high": {"nominalQuota": high, "lendingLimit": max(high - held, 0), "borrowingLimit": None},
                "normal": {"nominalQuota": cap - high, "lendingLimit": None, "borrowingLimit": 0},
                "low": {"nominalQuota": 0, "lendingLimit": None, "borrowingLimit": None}}

    def cluster_queue(self, tier: str, q: dict[str, int | None]) -> dict:
        res = {"name": self.cfg.gpu_resource, "nominalQuota": q["nominalQuota"]}
        for k in ("borrowingLimit", "lendingLimit"):
            if q[k] is not None:
                res[k] = q[k]
        nss = sorted(ns for t, ns in self.ns_of.items() if tier == "low" or self.tier_of.get(t) == tier)
        reclaim = {"high": "Any", "normal": "LowerPriority", "low": "Never"}[tier]
        return {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterQueue",
            "metadata": {"name": self.queue_name(tier), "labels": dict(MANAGED)},
            "spec": {
                "cohort": self.cfg.cohort,
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": nss or ["gpu-autoscaler-none"]}]},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"reclaimWithinCohort": reclaim, "withinClusterQueue": "Never"},
                "resourceGroups": [{"coveredResources": [self.cfg.gpu_resource],
                                    "flavors": [{"name": self.cfg.flavor, "resources": [res]}]}],
            },
        }

    def resource_flavor(self) -> dict:
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
                "metadata": {"name": self.cfg.flavor, "labels": dict(MANAGED)}, "spec": {}}

    def local_queues(self) -> list[dict]:
        out = []
        for t, ns in sorted(self.ns_of.items()):
            tier = self.tier_of.get(t, "normal")
            for name, cq in ((self.cfg.queue_prefix, self.queue_name(tier)),
                             (self.queue_name("low"), self.queue_name("low"))):
                out.append({"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                            "metadata": {"name": name, "namespace": ns, "labels": dict(MANAGED)},
                            "spec": {"clusterQueue": cq}})
        return out

    # ---- writing ------------------------------------------------------------------------------
    def _ensure(self, rep: ActionReport, plural: str, body: dict) -> None:
        """Create the object, or replace its spec when it differs from what was last applied."""
        meta = body["metadata"]
        key = (plural, meta.get("namespace", ""), meta["name"])
        if self._sent.get(key) == body["spec"]:
            return
        where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
        rep.actions.append(f"apply {body['kind']} {where}")
        if self.dry_run:
            return
        ns = meta.get("namespace")
        try:
            try:
                cur = (self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"]) if ns else
                       self.custom.get_cluster_custom_object(GROUP, VERSION, plural, meta["name"]))
            except ApiException as exc:
                if exc.status != 404:
                    raise
                if ns:
                    self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
                else:
                    self.custom.create_cluster_custom_object(GROUP, VERSION, plural, body)
            else:
                new = {**body, "metadata": {**meta, "resourceVersion": cur["metadata"]["resourceVersion"]}}
                if ns:
                    self.custom.replace_namespaced_custom_object(GROUP, VERSION, ns, plural, meta["name"], new)
                else:
                    self.custom.replace_cluster_custom_object(GROUP, VERSION, plural, meta["name"], new)
            self._sent[key] = body["spec"]
        except ApiException as exc:  # reported; the next cycle tries again
            rep.errors.append(f"{body['kind']} {where}: {exc.status} {exc.reason}")

    # ---- actuator interface -------------------------------------------------------------------
    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        self._last_pool = (int(plan.capacity), int(plan.high_pool))
        self._ensure(rep, "resourceflavors", self.resource_flavor())
        for tier, q in self.quotas(plan).items():
            self._ensure(rep, "clusterqueues", self.cluster_queue(tier, q))
        for lq in self.local_queues():
            self._ensure(rep, "localqueues", lq)
        if plan.preemptions:
            rep.actions.append(f"leave {len(plan.preemptions)} preemptions to Kueue (reclaimWithinCohort)")
        return rep

    def release_holds(self) -> ActionReport:
        """The daemon stops: nothing stays held for a forecast. The high queue keeps its guaranteed pool as
        nominal quota but may lend all of it (lendingLimit = nominalQuota)."""
        rep = ActionReport(self.name, self.dry_run)
        if self._last_pool is None:
            return rep
        cap, pool = self._last_pool
        q = self.quotas(Plan(at="", capacity=cap, load=float("nan"), high_pool=pool, reservations={}, quotas={},
                             limits={}, preemptions=(), notifications=(), stale=False, forecast_model="",
                             notes=(), memory=PolicyMemory()))
        self._ensure(rep, "clusterqueues", self.cluster_queue("high", q["high"]))
        return rep

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        # a failed node's pods are the Kubernetes actuator's (Eviction API); Kueue re-admits their workloads
        return ActionReport(self.name, self.dry_run)

    def notify(self, notes: list[Notification]) -> ActionReport:
        return ActionReport(self.name, self.dry_run)
