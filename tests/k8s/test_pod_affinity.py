"""A tenant's pending pods whose required pod affinity or anti-affinity no node meets, on the real apiserver and
kube-scheduler: the daemon's view must count them as the scheduler places them, no demand where no node passes (holds
and preemptions for work that cannot run), and never hide a pod that will start (the scheduler's exception for the
first pod of a group, pods of another namespace it names, a key no node has for anti-affinity)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.view import never_starts
from tests.k8s.test_hostile_placement import _bound
from tests.k8s.test_hostile_quantities import _read_twice
from tests.k8s.test_view_watch import tenant_view
from tests.support.k8s_cluster import gpu_pod, unschedulable_because
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]
HOST = "kubernetes.io/hostname"


def _term(labels: dict, key: str = HOST, namespaces: list | None = None, any_namespace: bool = False) -> dict:
    term = {"labelSelector": {"matchLabels": labels}, "topologyKey": key}
    if namespaces:
        term["namespaces"] = namespaces
    if any_namespace:
        term["namespaceSelector"] = {}
    return term


def _pod(ns: str, name: str, gpus: int, labels: dict | None = None, near: dict | None = None,
         away: dict | None = None) -> dict:
    pod = gpu_pod(ns, name, gpus, labels=labels)
    aff = {}
    if near:
        aff["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [near]}
    if away:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [away]}
    pod["spec"]["affinity"] = aff
    return pod


def test_a_pod_whose_required_pod_affinity_or_anti_affinity_no_node_meets_is_no_demand(kube, tmp_path, caplog):
    """On two 8-GPU nodes, each running a pod of team-a labelled app=web, team-b's pods: one requiring affinity to
    app=ghost (no pod has it, nor does it), one requiring affinity to its own label by a topology key no node has,
    and one requiring anti-affinity (by hostname) to team-a's web pods, at their priority, wait forever (the scheduler:
    'didn't match pod affinity rules' / 'pod anti-affinity rules') and were demand: holds of whole nodes, idle. Now
    each is no job, said once. Those the scheduler places stay demand and are bound: the first pod of a group (it
    matches its own term and no pod matches it yet), affinity to team-a's web pods naming team-a's namespace or any
    namespace (an empty namespaceSelector), and anti-affinity by a key no node has."""

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    a, b = ns["team-a"], ns["team-b"]
    try:
        for i, node in enumerate(nodes):
            core.create_namespaced_pod(a, gpu_pod(a, f"web-{i}", 1, labels={"app": "web"},
                                                  node_selector={HOST: node}))
        for i in range(len(nodes)):
            wait_for(lambda: _bound(core, a, f"web-{i}"), timeout=60, what=f"web-{i} bound")
        never = {
            "ghost": _pod(b, "ghost", 4, near=_term({"app": "ghost"})),
            "no-key": _pod(b, "no-key", 2, labels={"app": "grp2"}, near=_term({"app": "grp2"}, "example.com/rack")),
            "apart": _pod(b, "apart", 2, away=_term({"app": "web"}, namespaces=[a])),
        }
        starts = {
            "first": _pod(b, "first", 2, labels={"app": "grp"}, near=_term({"app": "grp"})),
            "near": _pod(b, "near", 2, near=_term({"app": "web"}, namespaces=[a])),
            "near-any": _pod(b, "near-any", 2, near=_term({"app": "web"}, any_namespace=True)),
            "apart-rack": _pod(b, "apart-rack", 2, away=_term({"app": "web"}, "example.com/rack", namespaces=[a])),
        }
        for pod in [*never.values(), *starts.values()]:
            core.create_namespaced_pod(b, pod)
        for name, words in (("ghost", "didn't match pod affinity rules"), ("no-key", "didn't match pod affinity"),
                            ("apart", "didn't match pod anti-affinity rules")):   # the scheduler's word
            wait_for(lambda: words in (unschedulable_because(core, b, name) or ""), timeout=60,
                     what=f"{name} unschedulable")
        for name in starts:
            wait_for(lambda: _bound(core, b, name), timeout=60, what=f"{name} bound")
        kept = {f"{a}/web-0", f"{a}/web-1", *(f"{b}/{n}" for n in starts)}
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == len(kept), timeout=60, what="the bound in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        assert len(said) == 3, said
        assert f"pod {b}/apart requires pod anti-affinity (app=web by {HOST}) (podAntiAffinity, required) that " \
               "every node it fits otherwise breaks" in said[0], said
        assert f"pod {b}/ghost requires pod affinity (app=ghost by {HOST}) (podAffinity, required) that none of the " \
               "nodes it fits otherwise meets" in said[1], said
        assert f"pod {b}/no-key requires pod affinity (app=grp2 by example.com/rack)" in said[2], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


ZONE = "topology.kubernetes.io/zone"


def test_a_pod_kept_off_every_node_by_a_bound_pods_anti_affinity_is_no_demand_until_that_pod_goes(kube, tmp_path,
                                                                                                   caplog):
    """kube-scheduler also keeps a pod off a node where a bound pod's required anti-affinity term matches it, in that
    pod's domain of the term's key (symmetric anti-affinity): team-a's one pod with anti-affinity by a zone both GPU
    nodes share, matching team-b's app=victim pods, keeps them off both ('didn't satisfy existing pods anti-affinity
    rules'), and they were demand (holds and preemptions for another tenant's pods that never start). Now such a pod
    is no job, said once; team-b's other pods, and one the term would match but for its matchLabelKeys (the apiserver
    merges them into the selector), are bound. Once team-a's pod is deleted the kept bound pods judge as a fresh read:
    the victim is demand again (the nodes cordoned meanwhile, so the scheduler does not race the reads), and it is
    bound once they are uncordoned."""
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    for node in nodes:
        core.patch_node(node, {"metadata": {"labels": {ZONE: "z1"}}})
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    a, b = ns["team-a"], ns["team-b"]
    try:
        wall = gpu_pod(a, "wall", 1, labels={"ver": "v1"}, node_selector={HOST: nodes[0]})
        wall["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            _term({"app": "victim"}, ZONE, namespaces=[b]),
            {**_term({"app": "versioned"}, ZONE, namespaces=[b]), "matchLabelKeys": ["ver"]}]}}
        core.create_namespaced_pod(a, wall)
        wait_for(lambda: _bound(core, a, "wall"), timeout=60, what="wall bound")
        core.create_namespaced_pod(b, gpu_pod(b, "victim", 2, labels={"app": "victim"}))
        core.create_namespaced_pod(b, gpu_pod(b, "other", 2, labels={"app": "other"}))
        core.create_namespaced_pod(b, gpu_pod(b, "versioned", 2, labels={"app": "versioned", "ver": "v2"}))
        wait_for(lambda: "didn't satisfy existing pods anti-affinity rules" in (
            unschedulable_because(core, b, "victim") or ""), timeout=60, what="victim unschedulable")   # the scheduler
        for name in ("other", "versioned"):
            wait_for(lambda: _bound(core, b, name), timeout=60, what=f"{name} bound")
        kept = {f"{a}/wall", f"{b}/other", f"{b}/versioned"}
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == len(kept), timeout=60, what="the bound in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        assert len(said) == 1, said
        assert f"pod {b}/victim is kept off every node it fits otherwise by bound pods' required anti-affinity " \
               f"(podAntiAffinity), at its priority or above" in said[0], said
        assert f"until those end, 1 pod: {a}/wall (app=victim by {ZONE})" in said[0], said

        def judged(name: str, bound=None) -> str | None:
            """The view's verdict on team-b's pod `name` over the view's snapshot (as pending: the view judges only
            pods not bound), with the actuator's kept bound pods and the pods with anti-affinity the view keeps (as
            the cycle reads them), or read afresh from every pod."""
            snap = kub.view.snapshot()
            pod = next(p for p in snap.pods if p.metadata.namespace == b and p.metadata.name == name)
            anti = snap.anti_pods if bound is not None else None
            return never_starts(snap.nodes, "nvidia.com/gpu", pods=snap.pods, bound=bound, anti_pods=anti)(pod, 2)

        def anti_pods() -> list[str]:
            return sorted(f"{p.metadata.namespace}/{p.metadata.name}" for p in kub.view.snapshot().anti_pods)

        assert anti_pods() == [f"{a}/wall"]   # the view keeps them as the watch goes: no cycle looks at every pod

        # the apiserver merged matchLabelKeys into the stored selector (ver In [v1]): the view honours it as it is
        assert judged("versioned") is None and judged("versioned", kub._bound) is None
        assert judged("victim") is not None and judged("victim", kub._bound) is not None

        for node in nodes:   # the scheduler places nothing now: the view's reads below race nothing
            core.patch_node(node, {"spec": {"unschedulable": True}})
        core.delete_namespaced_pod("wall", a, grace_period_seconds=0)
        wait_for(lambda: not anti_pods(), timeout=60, what="the wall gone from the view")
        assert f"{b}/victim" in kub.cluster_jobs(names).ids.tolist()
        assert judged("victim") is None and judged("victim", kub._bound) is None   # read afresh, and kept
        for node in nodes:
            core.patch_node(node, {"spec": {"unschedulable": False}})
        wait_for(lambda: _bound(core, b, "victim"), timeout=60, what="victim bound")
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_a_bound_pods_anti_affinity_selecting_a_namespace_by_its_name_label_keeps_its_pods_off(kube, tmp_path,
                                                                                              caplog):
    """The apiserver labels every namespace kubernetes.io/metadata.name=<its name>: team-a's pod whose anti-affinity
    term selects team-b's namespace by that label (namespaceSelector, no namespaces list) keeps team-b's app=victim
    pods off both nodes of the zone, as the scheduler says, while the view read a namespaceSelector by labels as
    naming no namespace surely: the victim was demand (held and preempted for). Now it is no job, said once."""
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    for node in nodes:
        core.patch_node(node, {"metadata": {"labels": {ZONE: "z1"}}})
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    a, b = ns["team-a"], ns["team-b"]
    try:
        wall = gpu_pod(a, "wall", 1, node_selector={HOST: nodes[0]})
        wall["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {**_term({"app": "victim"}, ZONE), "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": b}}}]}}
        core.create_namespaced_pod(a, wall)
        wait_for(lambda: _bound(core, a, "wall"), timeout=60, what="wall bound")
        core.create_namespaced_pod(b, gpu_pod(b, "victim", 2, labels={"app": "victim"}))
        wait_for(lambda: "didn't satisfy existing pods anti-affinity rules" in (
            unschedulable_because(core, b, "victim") or ""), timeout=60, what="victim unschedulable")   # the scheduler
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == 1, timeout=60, what="the wall in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert jobs.ids.tolist() == [f"{a}/wall"], jobs.ids
        assert len(said) == 1 and f"pod {b}/victim is kept off every node" in said[0], said
        assert f"1 pod: {a}/wall (app=victim by {ZONE})" in said[0], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)
