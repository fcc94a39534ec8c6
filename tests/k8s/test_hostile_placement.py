"""A tenant's pods placed where they never start, or bound where they never run, on the real apiserver and
kube-scheduler: the daemon's view must count them as the scheduler and the kubelet treat them, neither demand (holds,
preemptions and aging for work that cannot run) nor running, and never hide a pod that will start."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.k8s.test_hostile_quantities import _affinity, _read_twice
from tests.k8s.test_view_watch import tenant_view
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
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
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


def test_a_pod_kept_off_every_node_it_fits_by_taints_it_does_not_tolerate_is_no_demand(kube, tmp_path, caplog):
    """never_starts read no taint but the node hold's. On two nodes labelled pool=gpu, one tainted
    dedicated=ml:NoSchedule (a site's) and one nvidia.com/gpu=present:NoExecute (the GPU operator's), a normal tenant's
    pod selecting pool=gpu that tolerates neither (none; the wrong value and the wrong effect; PreferNoSchedule only)
    waits forever (the scheduler: untolerated taint) and was demand: holds and preemptions for work that cannot run.
    Now each is no job, said once. The scheduler's matching is kept: an empty key with Exists, a key with Exists and
    no effect, Equal with tolerationSeconds, and Equal with no operator all tolerate (each is bound). A pod that only
    a cordoned, NotReady node would take (its taints node.kubernetes.io/...) stays demand: it is bound once that
    node is back."""

    from tests.support.k8s_cluster import KWOK_NODE

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    site, operator = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}, \
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}
    for node, taint in zip(nodes, (site, operator)):
        core.patch_node(node, {"metadata": {"labels": {"pool": "gpu"}}, "spec": {"taints": [taint]}})
    # a third node, cordoned and not Ready (kwok does not manage it yet): the scheduler places nothing there now
    back = f"{ns['team-a']}-back"
    cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=back, annotations={KWOK_NODE: "later"},
                                                          labels={"type": "kwok", "kubernetes.io/hostname": back}),
                                spec=k8s.V1NodeSpec(unschedulable=True),
                                status=k8s.V1NodeStatus(capacity=cap, allocatable=cap)))
    kube.made["nodes"].append(back)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    never = {
        "none": None,
        "wrong": [{"key": "dedicated", "operator": "Equal", "value": "other", "effect": "NoSchedule"},
                  {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "prefer": [{"operator": "Exists", "effect": "PreferNoSchedule"}],
    }
    starts = {
        "wildcard": [{"operator": "Exists"}],
        "key-any-effect": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "equal-seconds": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoExecute",
                           "tolerationSeconds": 3600}],
        "no-operator": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
    }
    try:
        for name, tols in {**never, **starts}.items():
            core.create_namespaced_pod(b, gpu_pod(b, name, 1, node_selector={"pool": "gpu"}, tolerations=tols))
        core.create_namespaced_pod(b, gpu_pod(b, "returns", 1))
        for name in [*never, "returns"]:   # the scheduler's word: a taint keeps each off every node
            wait_for(lambda: "untolerated taint" in (unschedulable_because(core, b, name) or ""), timeout=60,
                     what=f"{name} unschedulable for a taint")
        for name in starts:
            wait_for(lambda: _bound(core, b, name), timeout=60, what=f"{name} bound")
        kept = {f"{b}/{n}" for n in [*starts, "returns"]}
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == len(starts), timeout=60, what="the bound in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        assert len(said) == 3, said
        both = "dedicated=ml:NoSchedule (1 node), nvidia.com/gpu=present:NoExecute (1 node)"
        for line, name in zip(said, sorted(never)):
            assert f"pod {b}/{name} is kept off every node it fits otherwise by a taint it does not tolerate: {both}" \
                in line, said
        # the node comes back (uncordoned, Ready: its node.kubernetes.io taints lifted): the waiting pod starts
        core.patch_node(back, {"metadata": {"annotations": {KWOK_NODE: "fake"}}, "spec": {"unschedulable": False}})
        wait_for(lambda: core.read_namespaced_pod("returns", b).spec.node_name == back, timeout=120,
                 what="returns bound on the node back")
    finally:
        rt.close()
        kube.delete_nodes([*nodes, back])


def test_a_pod_bound_to_a_node_the_cluster_does_not_have_is_neither_running_nor_demand(kube, tmp_path, caplog):
    """A tenant names its pod's node (spec.nodeName at creation) with a node that does not exist. The apiserver
    takes it; it stays Pending with no condition (the scheduler leaves a bound pod alone, no kubelet runs it) until
    the pod garbage collector deletes it. The view read it as running, its 8 GPUs used: the tenant's usage counted
    work that runs nowhere. Now it is no job (neither running nor demand), said once; a pod bound by the scheduler
    runs as before. (With Kueue's node holds the node-name admission policy refuses such a pod; this cluster has
    none.)"""

    import logging

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    gone = f"{b}-gone"
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")   # every read's lines: said once
    try:
        pod = gpu_pod(b, "nowhere", 8)
        pod["spec"]["nodeName"] = gone
        core.create_namespaced_pod(b, pod)
        core.create_namespaced_pod(b, gpu_pod(b, "fine", 8))
        wait_for(lambda: _bound(core, b, "fine"), timeout=60, what="fine bound")
        # the watch gives a namespace's pods in order: with fine in the view, nowhere was read too
        wait_for(lambda: f"{b}/fine" in kub.cluster_jobs(names).ids.tolist(), timeout=60, what="fine in the view")
        jobs = kub.cluster_jobs(names)
        kub.cluster_jobs(names)
        live = core.read_namespaced_pod("nowhere", b)
        assert live.spec.node_name == gone and live.status.phase == "Pending", live.status
        assert not live.status.conditions, live.status
        assert live.metadata.deletion_timestamp is None
        assert jobs.ids.tolist() == [f"{b}/fine"] and jobs.running.tolist() == [True], jobs.ids
        said = [r.getMessage() for r in caplog.records if "nowhere" in r.getMessage()]
        assert said == [f"pod {b}/nowhere is bound (spec.nodeName) to node {gone}, which the cluster does not have: "
                        "no kubelet runs it and the scheduler leaves a bound pod alone, so it is neither running (its "
                        "GPUs are used nowhere) nor demand"], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_a_pending_pod_naming_a_scheduler_nobody_runs_is_no_demand(kube, tmp_path, caplog):
    """A tenant's pod naming a scheduler (spec.schedulerName) that no one runs is taken by the apiserver and left
    alone by kube-scheduler: it stays Pending, unbound, with no condition, for ever. The view read it as demand: it
    aged into a hold of a whole node, idle. Now a pending pod naming a scheduler not in
    actuators.kubernetes.scheduler_names (default: default-scheduler) is no job, said once; one naming
    default-scheduler itself is bound and runs as before."""

    import logging

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")   # every read's lines: said once
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    try:
        for name, scheduler in (("nobody", "nobody-runs-this"), ("named", "default-scheduler")):
            pod = gpu_pod(b, name, 8)
            pod["spec"]["schedulerName"] = scheduler
            core.create_namespaced_pod(b, pod)
        wait_for(lambda: _bound(core, b, "named"), timeout=60, what="named bound")
        wait_for(lambda: f"{b}/named" in kub.cluster_jobs(names).ids.tolist(), timeout=60, what="named in the view")
        jobs, _ = _read_twice(kub, names, caplog)
        live = core.read_namespaced_pod("nobody", b)   # created first, and still untouched by kube-scheduler
        assert not live.spec.node_name and live.status.phase == "Pending" and not live.status.conditions, live.status
        assert jobs.ids.tolist() == [f"{b}/named"], jobs.ids
        said = [r.getMessage() for r in caplog.records if f"{b}/nobody" in r.getMessage()]
        assert said == [f"pod {b}/nobody names scheduler nobody-runs-this (spec.schedulerName), not one of "
                        "actuators.kubernetes.scheduler_names (default-scheduler): none places it, so it is no demand "
                        "(if a scheduler of yours has that name, add it)"], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_a_pod_spreading_over_a_topology_key_no_node_has_is_no_demand(kube, tmp_path, caplog):
    """A topology spread constraint with whenUnsatisfiable: DoNotSchedule keeps a pod off every node without its
    topologyKey label (PodTopologySpread's filter: 'missing required label'). A normal tenant's 8-GPU pod spreading
    over a key no node has waits forever and was demand: it aged into a hold of a whole node, idle. Now it is no job,
    said once; one spreading over kubernetes.io/hostname, or over the missing key with ScheduleAnyway, is bound."""

    import logging

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]

    def spread(key: str, when: str) -> list[dict]:
        return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
                 "labelSelector": {"matchLabels": {"app": "train"}}}]
    cases = {"rack": spread("example.com/rack", "DoNotSchedule"),
             "host": spread("kubernetes.io/hostname", "DoNotSchedule"),
             "anyway": spread("example.com/rack", "ScheduleAnyway")}
    try:
        for name, constraints in cases.items():
            pod = gpu_pod(b, name, 8, labels={"app": "train"})
            pod["spec"]["topologySpreadConstraints"] = constraints
            core.create_namespaced_pod(b, pod)
            if name == "rack":   # its verdict while the nodes are empty (a full node is said first: Insufficient)
                wait_for(lambda: "missing required label" in (unschedulable_because(core, b, "rack") or ""),
                         timeout=60, what="rack unschedulable for its spread key")
        for name in ("host", "anyway"):
            wait_for(lambda: _bound(core, b, name), timeout=60, what=f"{name} bound")
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == 2, timeout=60, what="the bound in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == {f"{b}/host", f"{b}/anyway"}, jobs.ids
        assert len(said) == 1 and f"pod {b}/rack spreads over example.com/rack (topologySpreadConstraints, " \
            "DoNotSchedule), a node label none of the nodes it fits otherwise has" in said[0], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)
