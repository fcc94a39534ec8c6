"""RBAC refusals: one log line per missing permission, naming it and the manifest that grants it.

Every caller of the Kubernetes API reports a failed call as that action's error (an ActionReport's errors, the
lease's transient failure, the overrides store's OverridesUnavailable), which keeps the plan and crashes nothing,
but says only "403 Forbidden", and says it again every cycle. What the operator needs is which permission the
daemon's ServiceAccount lacks: so the API client (actuator.TimedApiClient) hands every 403 answer to
``RbacRefusals.seen``, which derives the verb, resource and API group from the request itself (method and URL,
as the API server's authorizer does) and logs, once per (verb, group, resource) for the life of the process::

    RBAC: gpu-autoscaler may not patch nodes (403 from the API server); grant it in deploy/kubernetes/clusterrole.yaml

The namespaced objects the daemon keeps in its own namespace (its Lease objects, the overrides ConfigMap) are
granted by deploy/kubernetes/role.yaml; everything else by the ClusterRole.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger("gpu_autoscaler.rbac")

# what the daemon keeps in its own namespace (ha.namespace): granted by the namespaced Role
ROLE_RESOURCES = {("coordination.k8s.io", "leases"), ("", "configmaps")}
ROLE_FILE = "deploy/kubernetes/role.yaml"
CLUSTERROLE_FILE = "deploy/kubernetes/clusterrole.yaml"


@dataclass(frozen=True)
class Permission:
    """What the API server's authorizer checks for one request (its RBAC attributes)."""
    verb: str
    group: str         # "" for the core API
    resource: str      # with its subresource: "pods/eviction"
    namespace: str     # "" for a cluster-scoped or all-namespaces request

    @property
    def qualified(self) -> str:
        """The resource as RBAC and kubectl name it: ``nodes``, ``leases.coordination.k8s.io``."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def manifest(self) -> str:
        return ROLE_FILE if (self.group, self.resource) in ROLE_RESOURCES else CLUSTERROLE_FILE


def permission(method: str, url: str) -> Permission | None:
    """The RBAC verb, group, resource and namespace of a request to the API server (the authorizer's own rules:
    GET of a name is get, of a collection list, or watch with ``?watch=true``; POST create, PUT update, PATCH
    patch, DELETE of a name delete, of a collection deletecollection); None for a path that is no resource."""
    parts = urlsplit(url)
    segs = [s for s in parts.path.split("/") if s]
    if segs[:1] == ["api"] and len(segs) >= 2:
        group, rest = "", segs[2:]
    elif segs[:1] == ["apis"] and len(segs) >= 3:
        group, rest = segs[1], segs[3:]
    else:
        return None
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:   # namespaces/<ns>/<resource>...; namespaces/<ns>: the object
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
    m = method.upper()
    if m == "GET":
        watch = parse_qs(parts.query).get("watch", [""])[0].lower() in ("true", "1")  # the client sends True
        verb = ("watch" if watch else "list") if not name else "get"
    elif m == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(m, m.lower())
    return Permission(verb, group, f"{resource}/{sub}" if sub else resource, namespace)


class RbacRefusals:
    """The permissions the API server refused this process (403), each logged once (module docstring)."""

    def __init__(self, who: str = "gpu-autoscaler") -> None:
        self.who = who
        self._lock = threading.Lock()
        self._logged: set[tuple[str, str, str]] = set()

    def seen(self, method: str, url: str) -> Permission | None:
        """A request answered 403: log its missing permission unless that (verb, group, resource) was logged."""
        p = permission(method, url)
        if p is None:
            log.warning("RBAC: %s was refused %s %s (403 from the API server)", self.who, method,
                        urlsplit(url).path)
            return None
        key = (p.verb, p.group, p.resource)
        with self._lock:
            if key in self._logged:
                return p
            self._logged.add(key)
        where = f" in namespace {p.namespace}" if p.namespace else ""
        log.error("RBAC: %s may not %s %s%s (403 from the API server); grant it in %s", self.who, p.verb,
                  p.qualified, where, p.manifest)
        return p

    def logged(self) -> set[tuple[str, str, str]]:
        with self._lock:
            return set(self._logged)


REFUSALS = RbacRefusals()  # the process's one record: every API client of the daemon reports to it
