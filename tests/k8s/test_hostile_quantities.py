"""A tenant's pod asking for a GPU quantity no node has, on the real apiserver: the apiserver takes it (a whole
quantity), and the daemon's view must still read every tenant's jobs."""

from __future__ import annotations

import dataclasses

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.objects import MAX_POD_GPUS
from tests.k8s.test_view_watch import tenant_view
from tests.support.k8s_cluster import gpu_pod, unschedulable_because
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]


def test_a_pod_asking_for_1e19_gpus_is_taken_and_leaves_the_view_readable(kube, tmp_path):
    """`nvidia.com/gpu: 1e19` is accepted (it waits, unschedulable). The view read it as 10^19 GPUs, past int64:
    every cycle's read of the jobs raised (the cycle's source failed: no new plan, for any tenant, while the pod
    existed; after policy.max_plan_age_s, the safe default). Now it is MAX_POD_GPUS, more than any node has."""
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
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


def test_a_pending_pod_larger_than_any_node_is_no_demand_and_ages_into_no_hold(kube, tmp_path, caplog):
    """A normal tenant's pod asking 9 GPUs where nodes have 8 waits forever (a pod runs on one node). Read as demand,
    it aged (anti-starvation) into a hold of every GPU beyond the high tier's guarantee, kept from everyone else for
    as long as it waited. Now it is no job (said once in the log), and the plan holds nothing for it; a pod that fits a
    node still waits as demand."""

    import numpy as np
    import pandas as pd

    from daemon.config import Config
    from daemon.policy import PolicyMemory, plan
    from daemon.policy.state import ClusterState
    from forecaster.types import Forecast

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    try:
        core.create_namespaced_pod(ns["team-b"], gpu_pod(ns["team-b"], "nine", 9))
        core.create_namespaced_pod(ns["team-b"], gpu_pod(ns["team-b"], "busy", 8))
        core.create_namespaced_pod(ns["team-a"], gpu_pod(ns["team-a"], "eight", 8))   # waits: the node is full
        # a nodeSelector no node matches can never start either; one on the node hold's label is Kueue's (with the
        # hold's toleration, as Kueue admits it on the hold's flavor), kept
        core.create_namespaced_pod(ns["team-b"], gpu_pod(ns["team-b"], "nowhere", 8,
                                                         node_selector={"gpu-autoscaler.io/nowhere": "x"}))
        core.create_namespaced_pod(ns["team-b"], gpu_pod(ns["team-b"], "held", 1,
                                                         node_selector={kub.hold_label: "team-b", "type": "kwok"},
                                                         tolerations=[hold_toleration(kub.hold_label, "team-b")]))
        busy, eight, held = f"{ns['team-b']}/busy", f"{ns['team-a']}/eight", f"{ns['team-b']}/held"
        wait_for(lambda: {busy, eight, held} <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60,
                 what="the pods in the view")
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == 1, timeout=60, what="one pod bound")
        jobs, said = _read_twice(kub, names, caplog)
        assert f"{ns['team-b']}/nine" not in jobs.ids.tolist() and f"{ns['team-b']}/nowhere" not in jobs.ids.tolist()
        assert len(said) == 2, said
        assert f"pod {ns['team-b']}/nine asks for 9 GPUs, more than any node has (8)" in said[0]
        assert f"pod {ns['team-b']}/nowhere selects nodes by gpu-autoscaler.io/nowhere=x, which no node has" in said[1]
        jobs = jobs.select(jobs.ids != held)   # a pod that may start once its hold is back: demand, not this test's
        view = kub.cluster_nodes(names)
        used = np.bincount(jobs.tenant[jobs.running], weights=jobs.gpus[jobs.running], minlength=2)
        pending = np.bincount(jobs.tenant[~jobs.running], weights=jobs.gpus[~jobs.running], minlength=2)
        # hours later for the policy: every waiting pod has aged (wait_s counts from its creation)
        jobs = dataclasses.replace(jobs, wait_s=np.where(jobs.running, 0.0, 6 * 3600.0))
        at = pd.Timestamp.now(tz="UTC").floor("min")
        st = ClusterState(at, names, ("high", "normal"), 8, used, pending, jobs, nodes=view)
        fc = Forecast(names, (0.5, 0.9, 0.99), np.zeros((2, 60, 3)), at, 60, "test")
        p = plan(fc, st, PolicyMemory(), Config(tenants=[{"name": t.name, "tier": t.tier} for t in tenants]))
        assert "team-b" not in p.reservations, p.reservations
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def _read_twice(kub, names: tuple[str, ...], caplog) -> tuple:
    """The view's jobs, read twice, and the sorted "can never start" lines logged meanwhile: each such pod is said
    once, not at every read."""
    import logging

    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes"):
        jobs = kub.cluster_jobs(names)
        kub.cluster_jobs(names)
    return jobs, sorted(r.getMessage() for r in caplog.records if "can never start" in r.getMessage())


def hold_toleration(key: str, value: str) -> dict:
    """The toleration of a node hold's taint that Kueue injects, with the hold's nodeSelector, into what it admits."""
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def _affinity(*terms: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": exprs} for exprs in terms]}}}


def test_a_pending_pod_whose_required_node_affinity_no_node_matches_is_no_demand(kube, tmp_path, caplog):
    """A normal tenant's 8-GPU pod requiring (node affinity) a label no node has waits forever, as one selecting it
    with a nodeSelector (which never_starts already judged): read as demand, it aged into a hold of a whole node,
    idle. Now it is no job, said once; a pod whose affinity a node matches (NotIn a value the node has not,
    DoesNotExist of a label it has not, one term of two), or whose only unmatched expression is on the node hold's
    label, stays demand."""

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    nowhere = [{"key": "gpu-autoscaler.io/nowhere", "operator": "In", "values": ["x"]}]
    absent = [{"key": "type", "operator": "DoesNotExist"}]                # the kwok node has label type=kwok
    fits = [{"key": "type", "operator": "NotIn", "values": ["other"]},
            {"key": "gpu-autoscaler.io/nowhere", "operator": "DoesNotExist"}]
    held = [{"key": kub.hold_label, "operator": "In", "values": ["team-b"]}, {"key": "type", "operator": "Exists"}]
    try:
        for name, aff in (("nowhere", _affinity(nowhere)), ("absent", _affinity(absent, nowhere)),
                          ("fits", _affinity(fits)), ("either", _affinity(nowhere, fits)), ("held", _affinity(held))):
            pod = gpu_pod(b, name, 8, tolerations=[hold_toleration(kub.hold_label, "team-b")] if name == "held"
                          else None)
            pod["spec"]["affinity"] = aff
            core.create_namespaced_pod(b, pod)
        core.create_namespaced_pod(b, gpu_pod(b, "busy", 8))
        kept = {f"{b}/fits", f"{b}/either", f"{b}/held", f"{b}/busy"}
        wait_for(lambda: kept <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60, what="the pods in the view")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        # the scheduler's word: no node matches their affinity (the kept ones wait for the node's GPUs)
        for name in ("nowhere", "absent"):
            wait_for(lambda: "node affinity" in (unschedulable_because(core, b, name) or ""), timeout=60,
                     what=f"{name} unschedulable for its affinity")
        assert len(said) == 2, said
        assert f"pod {b}/absent requires node affinity (type DoesNotExist) or (gpu-autoscaler.io/nowhere In x), " \
               "which no node matches" in said[0], said
        assert f"pod {b}/nowhere requires node affinity (gpu-autoscaler.io/nowhere In x), which no node matches" \
            in said[1], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_required_node_affinity_the_scheduler_cannot_parse_matches_no_node(kube, tmp_path, caplog):
    """A term the scheduler cannot read matches no node (component-helpers' nodeaffinity: a term with a parse error,
    or an empty one, selects nothing), while never_starts read it more leniently: an empty term as every node, a
    Gt/Lt value Python's int() takes and Go's ParseInt refuses ('0_0', past int64) as a number. A normal tenant's
    8-GPU pod so written waits forever (the apiserver takes it, a valid label value; the scheduler says its affinity
    matches no node) and was demand: it aged into a hold of a whole node, idle. Now each is no job, said once; a Gt
    the node's label meets stays demand. (A value with a space, or a NotIn value that is no label value, the
    apiserver refuses.)"""

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    core.patch_node(nodes[0], {"metadata": {"labels": {"example.com/gpus": "8"}}})
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    b = ns["team-b"]
    gpus = "example.com/gpus"
    cases = {
        "empty": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}},
        "underscore": _affinity([{"key": gpus, "operator": "Gt", "values": ["0_0"]}]),
        "huge": _affinity([{"key": gpus, "operator": "Lt", "values": ["99999999999999999999"]}]),
        "fits": _affinity([{"key": gpus, "operator": "Gt", "values": ["1"]},
                           {"key": "type", "operator": "NotIn", "values": ["other"]}]),
    }
    try:
        for name, aff in cases.items():
            pod = gpu_pod(b, name, 8)
            pod["spec"]["affinity"] = aff
            core.create_namespaced_pod(b, pod)
        core.create_namespaced_pod(b, gpu_pod(b, "busy", 8))
        kept = {f"{b}/fits", f"{b}/busy"}
        wait_for(lambda: kept <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60, what="the pods in the view")
        # the scheduler's word: none of the others matches the node (the kept ones wait for its GPUs, or run)
        for name in set(cases) - {"fits"}:
            wait_for(lambda: "node affinity" in (unschedulable_because(core, b, name) or ""), timeout=60,
                     what=f"{name} unschedulable for its affinity")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        assert len(said) == 3, said
        assert f"pod {b}/empty requires node affinity of empty terms only, which no node matches" in said[0], said
        assert f"pod {b}/huge requires node affinity ({gpus} Lt 99999999999999999999)" in said[1], said
        assert f"pod {b}/underscore requires node affinity ({gpus} Gt 0_0)" in said[2], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_a_pod_selecting_a_hold_whose_taint_it_does_not_tolerate_is_no_demand(kube, tmp_path, caplog):
    """The node hold's label was left out of a pod's nodeSelector and affinity (Kueue puts it on what it admits on a
    hold, with the hold taint's toleration), whatever the pod tolerated. A normal tenant's pod selecting another
    tenant's hold (nodeSelector, affinity In, or Exists of any hold) without tolerating its taint (the admission
    policies refuse that toleration) starts on no node: the held node has the taint, the others not the label, and
    the scheduler says so. Read as demand it aged into a hold of a whole node for its tenant, on which it cannot start
    either. Now such a pod is no job, said once; one selecting its own hold with the toleration (as Kueue admits it),
    or avoiding the holds (DoesNotExist), stays demand."""

    from daemon.actuators.k8s.objects import name_part

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=2)
    names, rt, kub = tenant_view(kube, tmp_path, tenants)
    key, a_hold, b_hold = kub.hold_label, name_part("team-a"), name_part("team-b")
    core.patch_node(nodes[0], {"metadata": {"labels": {key: a_hold}},
                               "spec": {"taints": [{"key": key, "value": a_hold, "effect": "NoSchedule"}]}})
    b = ns["team-b"]
    cases = {
        "theirs": gpu_pod(b, "theirs", 8, node_selector={key: a_hold}),
        "theirs-aff": gpu_pod(b, "theirs-aff", 8),
        "any-hold": gpu_pod(b, "any-hold", 8),
        "own": gpu_pod(b, "own", 8, node_selector={key: b_hold}, tolerations=[hold_toleration(key, b_hold)]),
        "unheld": gpu_pod(b, "unheld", 8),
    }
    cases["theirs-aff"]["spec"]["affinity"] = _affinity([{"key": key, "operator": "In", "values": [a_hold]}])
    cases["any-hold"]["spec"]["affinity"] = _affinity([{"key": key, "operator": "Exists"}])
    cases["unheld"]["spec"]["affinity"] = _affinity([{"key": key, "operator": "DoesNotExist"}])
    try:
        for pod in cases.values():
            core.create_namespaced_pod(b, pod)
        kept = {f"{b}/own", f"{b}/unheld"}
        wait_for(lambda: kept <= set(kub.cluster_jobs(names).ids.tolist()), timeout=60, what="the pods in the view")
        for name in ("theirs", "theirs-aff", "any-hold"):   # the scheduler's word: no node for them
            wait_for(lambda: unschedulable_because(core, b, name), timeout=60, what=f"{name} unschedulable")
        jobs, said = _read_twice(kub, names, caplog)
        assert set(jobs.ids.tolist()) == kept, jobs.ids
        assert len(said) == 3, said
        assert f"pod {b}/theirs selects the node hold {key}={a_hold}, whose taint ({key}={a_hold}:NoSchedule) it " \
               "does not tolerate" in said[1], said
        assert f"pod {b}/theirs-aff requires node affinity ({key} In {a_hold}), which no node matches" in said[2], said
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_mig_pods_are_judged_per_instance_profile(kube, tmp_path, caplog):
    """On a fleet with MIG, a pod fits a node only where each resource it asks for is there (the scheduler's fit),
    where never_starts compared its GPUs and MIG instances summed with each node's GPUs plus its most numerous
    profile's instances. On a node of 7 mig-1g.10gb and 2 mig-3g.40gb, a normal tenant's pod asking 4 mig-3g.40gb
    (4 <= 7) never starts and was demand (aged into a hold of the node, idle), and one asking 6 mig-1g.10gb and 2
    mig-3g.40gb (8 > 7) fits but was no demand. Now the first is no job, said once, and the second is demand."""

    from daemon.service.wiring import build_runtime
    from tests.k8s.test_view_watch import parse_config

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, _ = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=0)
    name = f"{ns['team-a']}-mig"
    cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"}
    core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"},
                                                          labels={"type": "kwok", "kubernetes.io/hostname": name}),
                                spec=k8s.V1NodeSpec(taints=[]), status=k8s.V1NodeStatus(capacity=cap, allocatable=cap)))
    kube.made["nodes"].append(name)
    wait_for(lambda: kube.node_ready(name), timeout=60, what="the MIG node Ready")
    names = tuple(t.name for t in tenants)
    cfg = parse_config({"cluster": {"gpus": 9}, "source": {"kind": "prometheus"},
                        "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                        "state": {"path": str(tmp_path / "s.db")}, "fleet": {"types": ["mig-1g.10gb", "mig-3g.40gb"]},
                        "tenants": [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                    for t in tenants],
                        "actuators": {"enabled": ["kubernetes", "kueue"], "dry_run": True,
                                      "kubernetes": {"kubeconfig": str(kube.admin_kubeconfig)}}})
    rt = build_runtime(cfg, with_store=False)
    kub = rt.actuators[-2]
    b = ns["team-b"]

    def mig_pod(pod_name: str, limits: dict, namespace: str = b) -> dict:
        pod = gpu_pod(namespace, pod_name, 1)
        pod["spec"]["containers"][0]["resources"] = {"limits": limits}
        return pod

    try:
        core.create_namespaced_pod(b, mig_pod("four-3g", {"nvidia.com/mig-3g.40gb": "4"}))
        core.create_namespaced_pod(b, mig_pod("six-and-two", {"nvidia.com/mig-1g.10gb": "6",
                                                              "nvidia.com/mig-3g.40gb": "2"}))
        core.create_namespaced_pod(b, mig_pod("eight-1g", {"nvidia.com/mig-1g.10gb": "8"}))
        wait_for(lambda: unschedulable_because(core, b, "four-3g"), timeout=60, what="four-3g unschedulable")
        wait_for(lambda: unschedulable_because(core, b, "eight-1g"), timeout=60, what="eight-1g unschedulable")
        wait_for(lambda: core.read_namespaced_pod("six-and-two", b).spec.node_name == name, timeout=60,
                 what="six-and-two bound")
        core.delete_namespaced_pod("six-and-two", b, grace_period_seconds=0)
        wait_for(lambda: not any(p.metadata.name == "six-and-two" for p in core.list_namespaced_pod(b).items),
                 timeout=60, what="six-and-two gone")
        # the same pod while the node is full (the others of team-a hold its instances): it waits, as demand
        core.create_namespaced_pod(ns["team-a"], mig_pod("all", {"nvidia.com/mig-1g.10gb": "7"}, ns["team-a"]))
        wait_for(lambda: core.read_namespaced_pod("all", ns["team-a"]).spec.node_name == name, timeout=60,
                 what="team-a's pod bound")
        core.create_namespaced_pod(b, mig_pod("six-and-two", {"nvidia.com/mig-1g.10gb": "6",
                                                              "nvidia.com/mig-3g.40gb": "2"}))
        wait_for(lambda: unschedulable_because(core, b, "six-and-two"), timeout=60, what="six-and-two waits")
        wait_for(lambda: kub.cluster_jobs(names).running.sum() == 1, timeout=60, what="team-a's pod in the view")
        jobs, said = _read_twice(kub, names, caplog)
        got = dict(zip(jobs.ids.tolist(), jobs.gpus.tolist()))
        assert got == {f"{ns['team-a']}/all": 7, f"{b}/six-and-two": 8}, got
        assert len(said) == 2, said
        assert f"pod {b}/eight-1g asks for 8 nvidia.com/mig-1g.10gb, more than any node has (7)" in said[0], said
        assert f"pod {b}/four-3g asks for 4 nvidia.com/mig-3g.40gb, more than any node has (2)" in said[1], said
    finally:
        rt.close()
        kube.delete_nodes([name])
