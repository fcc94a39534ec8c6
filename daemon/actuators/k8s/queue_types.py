"""The GPU types a Kueue queue's flavors let a Workload run on, on a mixed fleet: read for the waiting Workloads
(workloads.Workloads._types), whose pods may name no type while their queue admits them on one only.

Kueue admits a podSet on a flavor of its ClusterQueue (through the LocalQueue the Workload names) whose resource group
covers what it asks, and adds that flavor's ``nodeLabels`` to its pods: a site's ClusterQueue whose only GPU flavor
has ``nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}`` runs every Workload of its queues on H100 nodes,
whatever their pods select. So a queue's types are those of the flavors in its GPU resource's group, in the queue's
order, each flavor's product label read through [fleet] types and aliases; a flavor without one (``default-flavor``
of a one-model layout) lets a podSet run on any type, and so does a queue whose flavors cover every configured type
(the daemon's own queues list a flavor of each: those read as any type, as before). A queue the read does not find
(its LocalQueue or ClusterQueue missing, which Kueue reports as inadmissible anyway) narrows nothing.

Read at most once per read of the Workloads and only when one waits on a mixed fleet: three lists, LocalQueues,
ClusterQueues and ResourceFlavors (the service role's get and list on them: deploy/kubernetes/clusterrole.yaml). A
list that fails narrows nothing (the pods' own selectors still do) and is said once until it reads again.
"""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.flavors import PRODUCT_LABEL
from daemon.actuators.k8s.objects import KUEUE_GROUP, KUEUE_VERSION
from daemon.config.fleet import ANY, TypeResolver

log = logging.getLogger("gpu_autoscaler.actuator.kueue.workloads")

GROUP, VERSION = KUEUE_GROUP, KUEUE_VERSION


class QueueTypes:
    """(namespace, LocalQueue name) -> the GPU types its ClusterQueue's flavors select (module docstring)."""

    def __init__(self, custom, resource: str, resolver: TypeResolver) -> None:
        self.custom = custom
        self.resource = resource
        self.resolver = resolver
        self._by_queue: dict[tuple[str, str], tuple[str, ...]] | None = None   # this read's, None: not read yet
        self._failed = ""   # why the last read failed, as said

    def reset(self) -> None:
        """A new read of the Workloads: the queues are read again when a waiting one needs them."""
        self._by_queue = None

    def __call__(self, namespace: str, queue: str) -> tuple[str, ...]:
        """The types the queue's flavors select, in its order; ANY where they do not narrow."""
        if self._by_queue is None:
            self._by_queue = self._read()
        return self._by_queue.get((namespace, queue), ANY)

    def _read(self) -> dict[tuple[str, str], tuple[str, ...]]:
        try:
            local = self._list("localqueues")
            cluster = {o["metadata"]["name"]: o for o in self._list("clusterqueues")}
            flavors = {o["metadata"]["name"]: o for o in self._list("resourceflavors")}
        except ApiException as exc:
            why = f"{exc.status} {exc.reason}"
            if why != self._failed:
                log.warning("Kueue queues unread (%s/%s: %s): the waiting Workloads' GPU types are read from their "
                            "pods' selectors only, not from their queues' flavors", GROUP, VERSION, why)
            self._failed = why
            return {}
        if self._failed:
            log.info("Kueue queues read again: the waiting Workloads' GPU types include their queues' flavors")
        self._failed = ""
        of_cq = {name: self._types(cq, flavors) for name, cq in cluster.items()}
        out = {}
        for lq in local:
            meta, spec = lq.get("metadata") or {}, lq.get("spec") or {}
            types = of_cq.get(str(spec.get("clusterQueue") or ""), ANY)
            if types:
                out[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = types
        return out

    def _list(self, plural: str) -> list[dict]:
        return self.custom.list_cluster_custom_object(GROUP, VERSION, plural).get("items") or []

    def _types(self, cq: dict, flavors: dict[str, dict]) -> tuple[str, ...]:
        """The types of the flavors in the ClusterQueue's resource group of the GPU resource, in order; ANY where one
        of them has no product label, none covers the resource, or they cover every configured type."""
        names = [f.get("name") for g in (cq.get("spec") or {}).get("resourceGroups") or []
                 if self.resource in (g.get("coveredResources") or []) for f in g.get("flavors") or []]
        types: list[str] = []
        for name in names:
            labels = ((flavors.get(str(name)) or {}).get("spec") or {}).get("nodeLabels") or {}
            product = labels.get(PRODUCT_LABEL)
            if not product:
                return ANY   # a flavor of any node: any type
            types.append(self.resolver(str(product)))
        found = tuple(dict.fromkeys(types))
        return ANY if set(self.resolver.types) <= set(found) else found
