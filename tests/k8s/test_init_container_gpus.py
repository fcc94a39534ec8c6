"""A tenant's pod that asks for its GPUs in an init container or a sidecar (an init container with
``restartPolicy: Always``), on the real control plane: the scheduler gives the pod its effective request (the
containers' sum plus the sidecars', or the largest init container's), and the daemon's view must count the same."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.k8s.test_view_watch import tenant_view
from tests.support.k8s_cluster import gpu_pod, unschedulable_because
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def _pod(ns: str, name: str, gpus: int, sidecar: bool) -> dict:
    body = gpu_pod(ns, name, 0)
    body["spec"]["containers"][0]["resources"] = {}
    init = {"name": "gpu", "image": "registry.invalid/train:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    if sidecar:
        init["restartPolicy"] = "Always"
    body["spec"]["initContainers"] = [init]
    return body


def test_gpus_asked_in_an_init_container_or_a_sidecar_are_a_job_and_not_free(kube, tmp_path):
    """A low tenant fills an 8-GPU node with two pods whose GPUs are asked by a sidecar (6) and an init container (2).
    The scheduler counts them (the high tenant's 1-GPU pod finds no node). The view read the containers only: no job
    (nothing of theirs to preempt for the high tier) and 8 GPUs free on the node, so the plan saw room where there was
    none. Now they are the low tenant's running jobs, with their GPUs, and the node has none free."""
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "low"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    try:
        core.create_namespaced_pod(ns["team-b"], _pod(ns["team-b"], "side", 6, sidecar=True))
        core.create_namespaced_pod(ns["team-b"], _pod(ns["team-b"], "init", 2, sidecar=False))
        for name in ("side", "init"):
            wait_for(lambda n=name: bool(core.read_namespaced_pod(n, ns["team-b"]).spec.node_name), timeout=60,
                     what=f"pod {name} bound")
        core.create_namespaced_pod(ns["team-a"], gpu_pod(ns["team-a"], "want", 1))
        wait_for(lambda: unschedulable_because(core, ns["team-a"], "want") is not None, timeout=60,
                 what="the scheduler finding no GPU for the high tenant's pod")
        side, init = f"{ns['team-b']}/side", f"{ns['team-b']}/init"
        wait_for(lambda: {side, init} <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60,
                 what="both pods in the view")
        jobs = kub.cluster_jobs(names)
        got = {i: (g, bool(r)) for i, g, r in zip(jobs.ids.tolist(), jobs.gpus.tolist(), jobs.running.tolist())}
        assert got[side] == (6, True) and got[init] == (2, True)
        view = kub.cluster_nodes(names)
        at = view.names.tolist().index(nodes[0])
        assert (int(view.gpus[at]), int(view.free[at])) == (8, 0)
    finally:
        rt.close()
        kube.delete_nodes(nodes)
