"""A tenant's pending pods that need a PersistentVolumeClaim which cannot bind, on the real apiserver and
kube-scheduler: the scheduler rejects them before trying any node (VolumeBinding's PreFilter) and says so on the pod;
the daemon's view must read that as no demand (holds and preemptions for work that cannot run), and never hide a pod
whose claim will bind once it is placed (WaitForFirstConsumer)."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from tests.k8s.test_hostile_quantities import _read_twice
from tests.k8s.test_view_watch import tenant_view
from tests.support.k8s_cluster import gpu_pod, kubeconfig, unschedulable_because
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def _with_claim(ns: str, name: str, claim: str) -> dict:
    pod = gpu_pod(ns, name, 8)
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return pod


def _claim(name: str, storage_class: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                     "resources": {"requests": {"storage": "1Gi"}}}}


def test_a_pod_whose_claim_is_absent_or_can_never_bind_is_no_demand(kube, tmp_path, caplog):
    """A normal tenant's 8-GPU pod naming a PVC that does not exist, and one whose PVC names a StorageClass that does
    not exist (nothing provisions it; the scheduler reads it as Immediate binding, unbound), wait forever: the
    scheduler rejects both before trying a node ('persistentvolumeclaim "..." not found', 'pod has unbound immediate
    PersistentVolumeClaims') and writes so on the pod. They were demand: holds of whole nodes, idle. Now each is no
    job, said once with the scheduler's words; a pod whose claim is of a WaitForFirstConsumer class (bound once the
    scheduler picks its node, by the provisioner) stays demand, as does the same pod once its missing claim is made."""

    storage = k8s.StorageV1Api(kube.api())
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    later = f"wffc-{uuid.uuid4().hex[:6]}"
    storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                  "metadata": {"name": later}, "provisioner": "example.com/fake",
                                  "volumeBindingMode": "WaitForFirstConsumer"})
    try:
        core.create_namespaced_persistent_volume_claim(b, _claim("orphan", "no-such-class"))
        core.create_namespaced_persistent_volume_claim(b, _claim("late", later))
        core.create_namespaced_pod(b, _with_claim(b, "absent", "nope"))
        core.create_namespaced_pod(b, _with_claim(b, "classless", "orphan"))
        core.create_namespaced_pod(b, _with_claim(b, "later", "late"))
        # the scheduler's word on each
        wait_for(lambda: 'persistentvolumeclaim "nope" not found' in (unschedulable_because(core, b, "absent") or ""),
                 timeout=60, what="absent unschedulable for its claim")
        wait_for(lambda: "pod has unbound immediate PersistentVolumeClaims" in
                 (unschedulable_because(core, b, "classless") or ""), timeout=60, what="classless unschedulable")
        # later: placed (its claim's selected-node set, for the provisioner), then waiting for the claim to bind
        wait_for(lambda: (core.read_namespaced_persistent_volume_claim("late", b).metadata.annotations or {})
                 .get("volume.kubernetes.io/selected-node") == nodes[0], timeout=60, what="late's node selected")
        assert not core.read_namespaced_pod("later", b).spec.node_name
        wait_for(lambda: f"{b}/later" in kub.cluster_jobs(names).ids.tolist(), timeout=60, what="later in the view")
        wait_for(lambda: f"{b}/absent" not in kub.cluster_jobs(names).ids.tolist(), timeout=60,
                 what="the verdicts in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert jobs.ids.tolist() == [f"{b}/later"] and not jobs.running.any(), jobs.ids
        assert said == [f'pod {b}/absent the scheduler finds no node for it: persistentvolumeclaim "nope" not found: '
                        "it can never start, so it is no demand (no hold, no preemption, no aging for it)",
                        f"pod {b}/classless the scheduler finds no node for it: pod has unbound immediate "
                        "PersistentVolumeClaims: it can never start, so it is no demand (no hold, no preemption, no "
                        "aging for it)"], said
        # the tenant makes the missing claim (of the class that binds on placing): the scheduler tries again, and the
        # pod is demand once more
        core.create_namespaced_persistent_volume_claim(b, _claim("nope", later))
        wait_for(lambda: f"{b}/absent" in kub.cluster_jobs(names).ids.tolist(), timeout=60,
                 what="absent demand again")
    finally:
        rt.close()
        storage.delete_storage_class(later)
        kube.delete_nodes(nodes)


def test_a_tenant_cannot_write_its_pods_scheduling_verdict(kube, tmp_path):
    """The view reads the scheduler's PodScheduled condition as the pod's verdict: a tenant with the default edit and
    admin roles in its namespace cannot write it (pods/status is in neither: 403), and the status it sends with a
    create or an update of the pod is dropped by the apiserver."""

    core = k8s.CoreV1Api(kube.api())
    rbac = k8s.RbacAuthorizationV1Api(kube.api())
    ns = kube.namespace("tenant")
    core.create_namespaced_service_account(ns, {"metadata": {"name": "me"}})
    for role in ("edit", "admin"):
        rbac.create_namespaced_role_binding(ns, {
            "metadata": {"name": f"me-{role}"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                           "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "me", "namespace": ns}]})
    token = core.create_namespaced_service_account_token("me", ns, {"spec": {"expirationSeconds": 600}}).status.token
    me = k8s.CoreV1Api(kube.api(kubeconfig(tmp_path / "me.kubeconfig", kube.server, kube.tmp / "ca.crt",
                                           token=token)))
    verdict = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": '0/1 nodes are available: persistentvolumeclaim "x" not found.'}
    pod = gpu_pod(ns, "mine", 1)
    pod["status"] = {"conditions": [verdict]}
    # the edit role's rules come from the cluster role aggregation controller
    wait_for(lambda: me.list_namespaced_pod(ns) is not None, timeout=60, what="the tenant's roles bound")
    me.create_namespaced_pod(ns, pod)

    def forged() -> bool:   # the scheduler's own verdict on the pod (no node here) may be there: not the tenant's
        return any("persistentvolumeclaim" in (c.message or "")
                   for c in core.read_namespaced_pod("mine", ns).status.conditions or [])
    assert not forged()
    with pytest.raises(ApiException) as denied:
        me.patch_namespaced_pod_status("mine", ns, {"status": {"conditions": [verdict]}})
    assert denied.value.status == 403, denied.value
    me.patch_namespaced_pod("mine", ns, {"status": {"conditions": [verdict]}})
    assert not forged()
