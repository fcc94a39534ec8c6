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

# Kueue's API group and version, for every module that reads or writes its objects (one place to move it)
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta1"

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


def effective_request(containers, init_containers, amount, sidecar) -> int:
    """A pod's request of one resource as Kubernetes counts it (the scheduler's, quota's and Kueue's: the pod's
    effective request, k8s.io/component-helpers resource.PodRequests): its containers' sum plus every sidecar's (an
    init container with ``restartPolicy: Always``, which runs as long as the pod), or, if more, the largest init
    container's with the sidecars started before it. ``amount(c)`` is a container's request, ``sidecar(c)`` whether
    it is a sidecar. Counting the containers alone read a pod asking for its GPUs in an init container as none: the
    scheduler gave it the GPUs, the view called them free, and the pod was no job to preempt."""
    total = sum(amount(c) for c in containers)
    sidecars = peak = 0
    for c in init_containers:
        a = amount(c)
        if sidecar(c):
            total += a
            sidecars += a
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + a)
    return max(total, peak)


def is_sidecar(container) -> bool:
    """An init container that runs as long as the pod (``restartPolicy: Always``)."""
    return getattr(container, "restart_policy", None) == "Always"


def container_request(container, resource: str) -> int:
    """A container's request of `resource` as a whole count: its request, else its limit (gpu_quantity)."""
    res = container.resources
    req = (res.requests or {}) if res else {}
    lim = (res.limits or {}) if res else {}
    return gpu_quantity(req.get(resource, lim.get(resource, 0)))


def pod_gpus(pod, resource: str) -> int:
    """The GPUs a pod asks for: each container's request of the GPU resource, else its limit, counted as Kubernetes
    counts a pod's request (effective_request: init containers and sidecars too)."""
    spec = pod.spec
    total = effective_request(spec.containers or [], getattr(spec, "init_containers", None) or [],
                              lambda c: container_request(c, resource), is_sidecar)
    return min(total, MAX_POD_GPUS)   # one pod is on one node


def holds_gpus(pod) -> bool:
    """Whether a pod has GPUs on a node: Running, or bound (``spec.nodeName``) and still Pending, e.g. pulling its
    image; the policy reads both as running jobs (view.py), so both may be evicted for room or reclaimed (an
    eviction frees what a pod stuck in its image pull holds)."""
    phase = pod.status.phase if pod.status else None
    return phase == "Running" or (phase == "Pending" and bool(pod.spec.node_name))
