"""GPU types on Kubernetes: a node's type from its labels and MIG resources, a pod's accepted types from its
node selector and node affinity on the product label.

NVIDIA's GPU feature discovery labels every GPU node with ``nvidia.com/gpu.product`` (``NVIDIA-A100-SXM4-80GB``,
the model name with dashes for spaces); with MIG's "mixed" strategy the node advertises each MIG profile as a
resource of its own (``nvidia.com/mig-1g.10gb: 7``). So:

- a node's type: a MIG resource it has (allocatable > 0) is the type (``mig-1g.10gb``, a MIG profile is a type
  of its own in [fleet]); else its product label through [fleet] types and aliases; a node with neither is
  ``unknown`` (reported with its name, never dropped). Its GPUs: the GPU resource, plus the MIG instances of
  its type (a MIG type counts instances, as fleet.pools does).
- a pod's accepted types, in order of preference: a MIG resource it asks for (that profile only); else
  ``nodeSelector[product label]`` (that one); else the required node affinity's ``In`` values on the product
  label (the terms are ORed, so the union, in the order written), reordered by the preferred affinity on the
  label (highest weight first); ``NotIn``: every configured type but those; nothing on the label: any type.

Pure: reads the official client's objects, sends nothing.
"""

from __future__ import annotations

from daemon.actuators.k8s.objects import container_request, effective_request, gpu_quantity, is_sidecar
from daemon.config.fleet import ANY, TypeResolver

PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_PREFIX = "nvidia.com/mig-"


def _mig_resources(resources: dict | None) -> dict[str, int]:
    return {k: gpu_quantity(v) for k, v in (resources or {}).items()
            if k.startswith(MIG_PREFIX) and gpu_quantity(v) > 0}


def node_type(resolver: TypeResolver, node, label: str = PRODUCT_LABEL) -> str:
    """The node's GPU type (module docstring)."""
    mig = _mig_resources(node.status.allocatable if node.status else None)
    if mig:
        return resolver(max(sorted(mig), key=lambda k: mig[k]))
    product = (node.metadata.labels or {}).get(label)
    if product:
        return resolver(product)
    return resolver(f"node {node.metadata.name}: no {label} label")


def node_gpus(node, resource: str, gpu_type: str) -> int:
    """Allocatable GPUs of `node`: the GPU resource, plus its MIG instances when its type is a MIG profile."""
    alloc = (node.status.allocatable or {}) if node.status else {}
    mig = gpu_quantity(alloc.get(MIG_PREFIX + gpu_type[len("mig-"):], 0)) if gpu_type.startswith("mig-") else 0
    return gpu_quantity(alloc.get(resource, 0)) + mig


def pod_mig_requests(pod) -> dict[str, int]:
    """The MIG instances a pod asks for per ``nvidia.com/mig-*`` resource (requests, else limits), each counted as
    Kubernetes counts a pod's request (objects.effective_request: init containers and sidecars too); none: {}."""
    spec = pod.spec
    containers, inits = spec.containers or [], getattr(spec, "init_containers", None) or []
    kinds = set()
    for c in [*containers, *inits]:
        res = c.resources
        kinds |= {k for k in (*((res.requests or {}) if res else {}), *((res.limits or {}) if res else {}))
                  if k.startswith(MIG_PREFIX)}
    out = {k: effective_request(containers, inits, lambda c, k=k: container_request(c, k), is_sidecar)
           for k in sorted(kinds)}
    return {k: v for k, v in out.items() if v > 0}


def pod_mig_gpus(pod) -> int:
    """MIG instances a pod asks for, all profiles together (pod_mig_requests)."""
    return sum(pod_mig_requests(pod).values())


def pod_accepts(resolver: TypeResolver, pod, label: str = PRODUCT_LABEL) -> tuple[str, ...]:
    """The GPU types a pod accepts, in order of preference (module docstring); ``ANY`` when it names none."""
    spec = pod.spec
    for c in spec.containers or []:
        res = c.resources
        mig = _mig_resources((res.requests or res.limits) if res else None)
        if mig:
            return tuple(dict.fromkeys(resolver(k) for k in sorted(mig)))
    selected = (spec.node_selector or {}).get(label)
    if selected:
        return (resolver(selected),)
    aff = spec.affinity.node_affinity if spec.affinity and spec.affinity.node_affinity else None
    if aff is None:
        return ANY
    allowed: list[str] = []
    excluded: set[str] = set()
    named = False
    req = aff.required_during_scheduling_ignored_during_execution
    for term in (req.node_selector_terms or []) if req else []:
        for e in term.match_expressions or []:
            if e.key != label:
                continue
            named = True
            if e.operator == "In":
                allowed += [resolver(v) for v in e.values or []]
            elif e.operator == "NotIn":
                excluded |= {resolver(v) for v in e.values or []}
    pool = list(dict.fromkeys(allowed)) if allowed else (
        [t for t in resolver.types if t not in excluded] if named else list(resolver.types))
    weight: dict[str, int] = {}
    for pref in aff.preferred_during_scheduling_ignored_during_execution or []:
        for e in (pref.preference.match_expressions or []) if pref.preference else []:
            if e.key == label and e.operator == "In":
                for v in e.values or []:
                    t = resolver(v)
                    weight[t] = weight.get(t, 0) + int(pref.weight or 0)
    if not named and not weight:
        return ANY
    order = sorted(range(len(pool)), key=lambda i: (-weight.get(pool[i], 0), i))
    return tuple(pool[i] for i in order)
