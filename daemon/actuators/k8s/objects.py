"""Helpers on plain Kubernetes objects (pods, nodes, names, labels) that the Kubernetes modules share.

This is the one leaf of the package: it imports nothing of the daemon but the names (daemon.config.names),
so ``actuator``, ``node_holds``, ``view`` and ``kueue`` can all import it at the top and never have to import
each other in a circle (before, ``view`` and ``node_holds`` imported ``actuator`` for these helpers while
``actuator`` imported ``view`` inside its methods). The imports between the other modules go one way: ``view``
and ``node_holds`` use only this module, ``actuator`` uses this and ``view``, ``kueue`` uses all of them.
"""

from __future__ import annotations

from kubernetes.utils import parse_quantity

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


# more GPUs than one pod (or node) can have: a larger quantity is read as this many. The API server takes a tenant's pod
# asking `nvidia.com/gpu: 1e19` (a whole quantity): read as it was, it overflowed the view's int64 columns, and every
# cycle's read of the jobs failed (no plan from then on, for every tenant) while that pod waited
MAX_POD_GPUS = 1 << 20


def gpu_quantity(q) -> int:
    """A Kubernetes quantity of GPUs as a whole count: '8', 8, '8.0', '1e3', '1Ki' (GPU counts are whole: a fraction
    is cut); at most MAX_POD_GPUS; anything else (not a quantity, negative, NaN) 0."""
    text = str(q).strip()
    if text.isdigit() and len(text) < 16:   # the usual '8', without a Decimal
        return min(int(text), MAX_POD_GPUS)
    try:
        v = parse_quantity(text)
    except (TypeError, ValueError, ArithmeticError):
        return 0
    if not v.is_finite() or v < 0:
        return 0
    return MAX_POD_GPUS if v > MAX_POD_GPUS else int(v)   # compared first: int() of 1e999999999 is a huge number


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
    return min(total, MAX_POD_GPUS)   # one pod is on one node


def holds_gpus(pod) -> bool:
    """Whether a pod has GPUs on a node: Running, or bound (``spec.nodeName``) and still Pending, e.g. pulling its
    image; the policy reads both as running jobs (view.py), so both may be evicted for room or reclaimed (an
    eviction frees what a pod stuck in its image pull holds)."""
    phase = pod.status.phase if pod.status else None
    return phase == "Running" or (phase == "Pending" and bool(pod.spec.node_name))
