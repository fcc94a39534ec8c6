"""Helpers on plain Kubernetes objects (pods, nodes, names, labels) that the Kubernetes modules share.

This is the one leaf of the package: it imports nothing of the daemon but the names (daemon.config.names),
so ``actuator``, ``node_holds``, ``view`` and ``kueue`` can all import it at the top and never have to import
each other in a circle (before, ``view`` and ``node_holds`` imported ``actuator`` for these helpers while
``actuator`` imported ``view`` inside its methods). The imports between the other modules go one way: ``view``
and ``node_holds`` use only this module, ``actuator`` uses this and ``view``, ``kueue`` uses all of them.
"""

from __future__ import annotations

from daemon.config.names import k8s_name_part

BLOCKING = ("NoSchedule", "NoExecute")  # taint effects that keep new pods off a node
POOL_VALUE = "gpu-autoscaler.pool"  # the pool's hold label value: has a '.', which name_part never gives


def priority_class_name(tier: str) -> str:
    return f"gpu-autoscaler-{tier}"


def evictable(pod) -> bool:
    """Not a DaemonSet's pod (it would come straight back on the same node) nor a mirror/static pod. Such a pod is
    never preempted and counts as firm work, so a tenant's GPU DaemonSet is refused at admission
    (deploy/kubernetes/admission/gpu-daemonsets.yaml)."""
    meta = pod.metadata
    if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
        return False
    return not any(o.kind == "DaemonSet" for o in (meta.owner_references or []))


def name_part(tenant: str) -> str:
    """A tenant name as a label value and DNS-1123 name part (daemon.config.names: plain, or hashed so that two
    tenants never map to the same part)."""
    return k8s_name_part(tenant)


def gpu_quantity(q) -> int:
    """'8', 8, '8.0' -> 8 (GPU counts are whole); anything else 0."""
    try:
        return int(float(str(q)))
    except (TypeError, ValueError):
        return 0


def node_usable(node, hold_label: str | None) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint but our hold's: new pods may start there."""
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    foreign = any(t.key != hold_label and t.effect in BLOCKING for t in (node.spec.taints or []))
    return ready and not node.spec.unschedulable and not foreign


def pod_gpus(pod, resource: str) -> int:
    """The GPUs a pod asks for: each container's request of the GPU resource, else its limit."""
    total = 0
    for c in pod.spec.containers or []:
        res = c.resources
        req = (res.requests or {}) if res else {}
        lim = (res.limits or {}) if res else {}
        total += gpu_quantity(req.get(resource, lim.get(resource, 0)))
    return total


def holds_gpus(pod) -> bool:
    """Whether a pod has GPUs on a node: Running, or bound (``spec.nodeName``) and still Pending, e.g. pulling its
    image; the policy reads both as running jobs (view.py), so both may be evicted for room or reclaimed (an
    eviction frees what a pod stuck in its image pull holds)."""
    phase = pod.status.phase if pod.status else None
    return phase == "Running" or (phase == "Pending" and bool(pod.spec.node_name))
