"""A tenant's pods placed where they never start, or bound where they never run, on the real apiserver and
kube-scheduler: the daemon's view must count them as the scheduler and the kubelet treat them, neither demand (holds,
preemptions and aging for work that cannot run) nor running, and never hide a pod that will start."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.k8s.test_hostile_quantities import _affinity, _read_twice
from tests.k8s.test_view_watch import _runtime
from tests.support.k8s_cluster import gpu_pod, unschedulable_because
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def _bound(core, ns: str, name: str) -> bool:
    return bool(core.read_namespaced_pod(name, ns).spec.node_name)


def test_a_pod_whose_selector_only_nodes_too_small_for_it_match_is_no_demand(kube, tmp_path, caplog):
    """The scheduler places a pod on one node that passes every filter; never_starts asked whether any node had room
    and, apart, whether any node matched its selector or affinity. On an 8-GPU node and a 4-GPU node labelled
    pool=small, a normal tenant's 8-GPU pod selecting pool=small (nodeSelector, or affinity In) waits forever (the
    scheduler: the small node lacks the GPUs, the large one the label) and was demand: it aged into a hold of a whole
    node, idle. Now each is no job, said once; a 4-GPU pod selecting the small node is bound."""

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    small = kube.gpu_node(f"{ns['team-a']}-small", gpus=4, labels={"pool": "small"})
    wait_for(lambda: kube.node_ready(small), timeout=60, what="the small node Ready")
    names = tuple(t.name for t in tenants)
    rt = _runtime(kube, tmp_path, [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                   for t in tenants])
    kub = rt.actuators[-2]
    b = ns["team-b"]
    try:
        core.create_namespaced_pod(b, gpu_pod(b, "eight-small", 8, node_selector={"pool": "small"}))
        aff = gpu_pod(b, "eight-small-aff", 8)
        aff["spec"]["affinity"] = _affinity([{"key": "pool", "operator": "In", "values": ["small"]}])
        core.create_namespaced_pod(b, aff)
        core.create_namespaced_pod(b, gpu_pod(b, "four-small", 4, node_selector={"pool": "small"}))
        for name in ("eight-small", "eight-small-aff"):   # the scheduler's word: no node for them
            wait_for(lambda: unschedulable_because(core, b, name), timeout=60, what=f"{name} unschedulable")
        wait_for(lambda: _bound(core, b, "four-small"), timeout=60, what="four-small bound")
        wait_for(lambda: f"{b}/four-small" in kub.cluster_jobs(names).ids.tolist(), timeout=60,
                 what="four-small in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert jobs.ids.tolist() == [f"{b}/four-small"], jobs.ids
        assert len(said) == 2, said
        assert f"pod {b}/eight-small selects nodes by pool=small, which only nodes too small for it have" in said[0], \
            said
        assert f"pod {b}/eight-small-aff requires node affinity (pool In small), which only nodes too small for " \
               "it match" in said[1], said
    finally:
        rt.close()
        kube.delete_nodes([*nodes, small])
