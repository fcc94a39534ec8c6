"""A tenant's pending pods whose required pod affinity or anti-affinity no node meets, on the real apiserver and
kube-scheduler: the daemon's view must count them as the scheduler places them, no demand where no node passes (holds
and preemptions for work that cannot run), and never hide a pod that will start (the scheduler's exception for the
first pod of a group, pods of another namespace it names, a key no node has for anti-affinity)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

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
