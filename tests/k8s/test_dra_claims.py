"""A tenant's pods asking for GPUs through Dynamic Resource Allocation (resource.k8s.io/v1: a ResourceClaimTemplate
whose request names the NVIDIA DRA driver's DeviceClass), on the real apiserver and kube-scheduler: the view does not
count such GPUs (it reads neither claims nor ResourceSlices) and says so once per pod, so nothing is silently zero."""

from __future__ import annotations

import logging
import uuid

import pytest
from kubernetes import client as k8s

from tests.k8s.test_view_watch import tenant_view
from tests.support.k8s_cluster import gpu_pod
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def _dra_pod(ns: str, name: str, template: str, gpus: int = 0) -> dict:
    pod = gpu_pod(ns, name, gpus)
    main = pod["spec"]["containers"][0]
    if not gpus:
        del main["resources"]["limits"]
    main["resources"]["claims"] = [{"name": "gpus"}]
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return pod


def test_a_pod_asking_for_gpus_through_dra_is_said_once_not_silently_zero(kube, tmp_path, caplog):
    """The apiserver serves resource.k8s.io/v1 (DeviceClass, ResourceClaim, ResourceClaimTemplate). A tenant's pod
    whose only GPUs are two asked through a claim template of class gpu.nvidia.com read as 0 GPUs without a word: no
    demand, never preempted, its GPUs invisible. It is still no job (counting claims needs the nodes' ResourceSlices
    too), but said once: 'GPUs asked through DRA are not counted'; one asking for 1 nvidia.com/gpu beside its claim
    counts that one, and says the rest is not."""

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")
    api = kube.api()
    served = {r.name for r in k8s.ResourceV1Api(api).get_api_resources().resources}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served, served
    core = k8s.CoreV1Api(api)
    resource = k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    cls = f"gpu.nvidia.com-{uuid.uuid4().hex[:6]}"   # the driver's class name, unique for this run
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": cls}, "spec": {}})
    try:
        resource.create_namespaced_resource_claim_template(b, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "two-gpus"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 2}}]}}}})
        core.create_namespaced_pod(b, _dra_pod(b, "dra-only", "two-gpus"))
        core.create_namespaced_pod(b, _dra_pod(b, "dra-and-one", "two-gpus", gpus=1))
        wait_for(lambda: f"{b}/dra-and-one" in kub.cluster_jobs(names).ids.tolist(), timeout=60,
                 what="dra-and-one in the view")
        jobs = kub.cluster_jobs(names)
        kub.cluster_jobs(names)
        assert jobs.ids.tolist() == [f"{b}/dra-and-one"] and jobs.gpus.tolist() == [1], (jobs.ids, jobs.gpus)
        said = sorted(r.getMessage() for r in caplog.records if "through DRA" in r.getMessage())
        assert said == [
            f"pod {b}/dra-and-one asks for devices through DRA (spec.resourceClaims: gpus): GPUs asked through DRA "
            "are not counted, neither as demand nor as used; only its 1 nvidia.com/gpu are",
            f"pod {b}/dra-only asks for devices through DRA (spec.resourceClaims: gpus): GPUs asked through DRA are "
            "not counted, neither as demand nor as used; it asks for no nvidia.com/gpu, so it is no job"], said
    finally:
        rt.close()
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)
