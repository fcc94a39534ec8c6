"""The parameters of the admission policies (deploy/kubernetes/admission/): one cluster-scoped ``AdmissionParams``
object (group ``gpu-autoscaler.io``, its CRD in params-crd.yaml) that the daemon writes, so that the apiserver itself
refuses what a tenant must not do: use the high PriorityClass, tolerate another tenant's node hold, run GPU pods past
Kueue, or name a GPU pod's node (past the holds' taints).

Why a cluster-scoped object of our own kind: only a ClusterRole can grant writing it, and a tenant's rights are
namespace-scoped; a namespace label could be forged by a tenant whose RoleBinding grants updating its own Namespace
(``*`` on ``*`` does). Why not a ConfigMap: kube-apiserver 1.36.1 stops the informer of a built-in paramKind for
good once no binding names that kind (kubernetes/kubernetes#130887, #133827), and then reads stale parameters or none.
The daemon writes it because it alone knows the tenants, their tiers and the hold values (``name_part``), which
change with its config.

``spec``:

- ``namespaces``: each configured tenant's namespace -> ``tier`` (several tenants in one namespace: the highest of
  their tiers, as their pods cannot be told apart) and ``holds``: the hold values its pods may tolerate (its
  tenants' ``name_part``; for a high-tier tenant also the pool's value, as the high tier's pooled hold is theirs);
- ``gpuResource``: ``actuators.kubernetes.gpu_resource``;
- ``kueue``: true beside Kueue (node holds on), with ``holdKey``: the hold label, which is the taint key too, and
  ``jobsetController``: the JobSet controller's user (``actuators.kubernetes.jobset_controller``), whose child Jobs
  of a JobSet need no queue name of their own (the JobSet carries it; a user is what a tenant cannot forge, an
  ownerReference it can).

Written when it differs from what the API shows (one read a cycle, so a deleted or edited object is put back); each
write is checked against the fence right before it is sent. An object of that name without our managed-by label is
not ours: it is reported and left alone.
"""

from __future__ import annotations

from typing import Callable

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import ActionReport
from daemon.actuators.k8s.objects import POOL_VALUE, name_part
from daemon.config import TenantConfig

GROUP, VERSION, PLURAL, KIND = "gpu-autoscaler.io", "v1alpha1", "admissionparams", "AdmissionParams"
MANAGED = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
RANK = {"low": 0, "normal": 1, "high": 2}


def params_spec(tenants: list[TenantConfig], ns_of: dict[str, str], gpu_resource: str,
                hold_label: str | None, jobset_controller: str) -> dict:
    """The object's spec for these tenants (`ns_of`: tenant -> namespace, configured ones only); `hold_label` None:
    no node holds and no Kueue (plain namespaces)."""
    tier_of = {t.name: t.tier for t in tenants}
    namespaces: dict[str, dict] = {}
    for tenant, ns in sorted(ns_of.items()):
        tier = tier_of.get(tenant, "normal")
        entry = namespaces.setdefault(ns, {"tier": tier, "holds": []})
        if RANK[tier] > RANK[entry["tier"]]:
            entry["tier"] = tier
        entry["holds"] = sorted({*entry["holds"], name_part(tenant), *((POOL_VALUE,) if tier == "high" else ())})
    spec: dict = {"gpuResource": gpu_resource, "kueue": hold_label is not None, "namespaces": namespaces}
    if hold_label is None:
        for entry in namespaces.values():
            del entry["holds"]
    else:
        spec["holdKey"] = hold_label
        spec["jobsetController"] = jobset_controller
    return spec


class AdmissionParams:
    """Keeps the AdmissionParams object `name` equal to `spec`."""

    def __init__(self, api_client: k8s.ApiClient, name: str, spec: dict, dry_run: bool) -> None:
        self.api = k8s.CustomObjectsApi(api_client)
        self.name = name
        self.spec = spec
        self.dry_run = dry_run

    def sync(self, rep: ActionReport, may: Callable[[str], None]) -> None:
        """Read it; create or replace it when it differs. `may(what)` raises FencingLost when this replica may not
        write. Errors are the report's; the next cycle reads again."""
        where = f"admission params {KIND} {self.name}"
        try:
            cur = self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, self.name)
        except ApiException as exc:
            if exc.status != 404:
                rep.errors.append(f"{where}: cannot read it: {exc.status} {exc.reason}")
                return
            cur = None
        if cur is not None:
            if not MANAGED.items() <= (cur["metadata"].get("labels") or {}).items():
                rep.errors.append(f"{where} exists without the label app.kubernetes.io/managed-by=gpu-autoscaler: not "
                                  f"the daemon's, left alone (delete it, or name another in "
                                  f"actuators.kubernetes.admission_params)")
                return
            if cur.get("spec") == self.spec:
                return
        verb = "create" if cur is None else "update"
        may(f"{verb} {where}")
        rep.actions.append(f"{verb} {where}: {len(self.spec['namespaces'])} tenant namespaces")
        if self.dry_run:
            return
        meta: dict = {"name": self.name, "labels": dict(MANAGED)}
        if cur is not None:  # the resourceVersion read: a concurrent change makes this a 409, tried again next cycle
            meta["resourceVersion"] = cur["metadata"]["resourceVersion"]
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": meta, "spec": self.spec}
        try:
            if cur is None:
                self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
            else:
                self.api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, self.name, body)
        except ApiException as exc:
            hint = (" (is its CRD, deploy/kubernetes/admission/params-crd.yaml, installed?)"
                    if exc.status == 404 else "")
            rep.errors.append(f"{where}: {verb} failed: {exc.status} {exc.reason}{hint}")
