"""The control plane the Kubernetes tests run on (tests/support/k8s_cluster.py) does what they rely on: KWOK GPU
nodes of several models report Ready with their GPUs allocatable, kube-scheduler binds a GPU pod to a node with
room and kwok makes it Running, and the disruption controller sets a PodDisruptionBudget's status."""

import pytest
from kubernetes import client as k8s

from tests.support.k8s_cluster import (
    GPU_MODELS,
    PRODUCT_LABEL,
    gpu_pod,
    pod_running,
    wait_unschedulable,
)
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")


def test_kwok_gpu_nodes_of_several_models_take_pods_through_the_real_scheduler(kube):
    core = k8s.CoreV1Api(kube.api())
    ns = kube.namespace("smoke")
    nodes = [kube.gpu_node(f"{ns}-{m}", m, gpus=4) for m in ("a100", "h100", "t4")]
    try:
        wait_for(lambda: all(kube.node_ready(n) for n in nodes), timeout=60, what="KWOK nodes Ready")
        for n, m in zip(nodes, ("a100", "h100", "t4")):
            live = core.read_node(n)
            assert live.status.allocatable["nvidia.com/gpu"] == "4"
            assert live.metadata.labels[PRODUCT_LABEL] == GPU_MODELS[m]
        core.create_namespaced_pod(ns, gpu_pod(ns, "on-h100", 4, node_selector={PRODUCT_LABEL: GPU_MODELS["h100"]}))
        wait_for(lambda: pod_running(core, ns, "on-h100"), timeout=60, what="pod Running")
        assert core.read_namespaced_pod("on-h100", ns).spec.node_name == f"{ns}-h100"
        # the h100 node's 4 GPUs are taken: a second such pod finds no node, and the scheduler says why
        core.create_namespaced_pod(ns, gpu_pod(ns, "no-room", 1, node_selector={PRODUCT_LABEL: GPU_MODELS["h100"]}))
        assert "Insufficient nvidia.com/gpu" in wait_unschedulable(core, ns, "no-room")
        # the disruption controller counts the healthy pods a PDB covers
        policy = k8s.PolicyV1Api(kube.api())
        core.patch_namespaced_pod("on-h100", ns, {"metadata": {"labels": {"app": "train"}}})
        policy.create_namespaced_pod_disruption_budget(ns, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "train"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}})
        wait_for(lambda: policy.read_namespaced_pod_disruption_budget("train", ns).status.current_healthy == 1,
                 timeout=60, what="PDB status")
        assert policy.read_namespaced_pod_disruption_budget("train", ns).status.disruptions_allowed == 0
    finally:
        kube.delete_nodes(nodes)
