"""A tenant's pod asking for a GPU quantity no node has, on the real apiserver: the apiserver takes it (a whole
quantity), and the daemon's view must still read every tenant's jobs."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.objects import MAX_POD_GPUS
from tests.k8s.test_view_watch import _runtime
from tests.support.k8s_cluster import gpu_pod
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def test_a_pod_asking_for_1e19_gpus_is_taken_and_leaves_the_view_readable(kube, tmp_path):
    """`nvidia.com/gpu: 1e19` is accepted (it waits, unschedulable). The view read it as 10^19 GPUs, past int64:
    every cycle's read of the jobs raised (the cycle's source failed: no new plan, for any tenant, while the pod
    existed; after policy.max_plan_age_s, the safe default). Now it is MAX_POD_GPUS, more than any node has."""
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names = tuple(t.name for t in tenants)
    rt = _runtime(kube, tmp_path, [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                   for t in tenants])
    kub = rt.actuators[-2]
    try:
        huge = gpu_pod(ns["team-b"], "huge", 1)
        huge["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1e19"
        core.create_namespaced_pod(ns["team-b"], huge)
        core.create_namespaced_pod(ns["team-a"], gpu_pod(ns["team-a"], "fine", 2))
        # taken, written in its canonical form
        assert core.read_namespaced_pod("huge", ns["team-b"]).spec.containers[0].resources.limits == \
            {"nvidia.com/gpu": "10e18"}
        want = {f"{ns['team-b']}/huge", f"{ns['team-a']}/fine"}
        wait_for(lambda: want <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60, what="both pods in the view")
        jobs = kub.cluster_jobs(names)
        got = dict(zip(jobs.ids.tolist(), jobs.gpus.tolist()))
        assert got[f"{ns['team-b']}/huge"] == MAX_POD_GPUS and got[f"{ns['team-a']}/fine"] == 2
    finally:
        rt.close()
        kube.delete_nodes(nodes)
