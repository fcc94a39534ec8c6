"""GPUs asked through Dynamic Resource Allocation made room for by the plan, on the real control plane (kube-apiserver,
kube-scheduler and kube-controller-manager with DRA; KWOK nodes with no nvidia.com/gpu; ResourceSlices published by the
test as a driver would, tests/k8s/test_dra_claims.py): the DRA nodes are the plan's Nodes (their slices' whole GPUs),
the low-tier DRA pods bound there its running Jobs (their claims' GPUs), a high-tier pod asking 8 through a
ResourceClaimTemplate its pending Job; one plan with dry run off evicts the low pods of ONE node (the Eviction API) and
the real scheduler allocates the freed devices to the high pod's claim and binds it there. The old code read DRA only
beside the plan (no Job, no GPU on a DRA node): the plan preempted nothing and the high pod waited."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import Config, KubernetesActuatorConfig
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from tests.k8s.test_dra_claims import A100, _dra_pod, _slice, _template
from tests.k8s.test_kueue_gang import EMPTY
from tests.policy.test_engine import AT, flat_forecast
from tests.support.k8s_cluster import pod_gone, pod_running, wait_unschedulable
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")


def _pod(ns: str, name: str, template: str, tier: str) -> dict:
    pod = _dra_pod(ns, name, template)
    pod["spec"]["priorityClassName"] = f"gpu-autoscaler-{tier}"
    return pod


def test_one_plan_evicts_the_low_dra_pods_of_one_node_and_the_high_dra_pod_binds_there(kube):
    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-high": "high", "batchy": "low"}, nodes=2, gpus=0)
    serving, batch = ns["team-high"], ns["batchy"]
    names = ("team-high", "batchy")
    uid = uuid.uuid4().hex[:6]
    driver, cls = f"gpu-{uid}.example.com", f"gpu-{uid}.nvidia.com"   # unique: slices and classes are cluster-wide
    whole = f'device.driver == "{driver}" && device.attributes["{driver}"].type == "gpu"'
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": cls},
                                  "spec": {"selectors": [{"cel": {"expression": whole}}]}})
    slices = [f"{n}-{uid}" for n in nodes]
    try:
        act = KubernetesActuator(api, KubernetesActuatorConfig(grace_period_s=5, dra_device_classes={cls: driver}),
                                 tenants, dry_run=False)
        rep = act.apply(EMPTY)                                         # the PriorityClasses the pods name
        assert rep.ok, rep.errors
        for name, node in zip(slices, nodes):
            resource.create_resource_slice(_slice(name, driver, node, A100, devices=8))
        resource.create_namespaced_resource_claim_template(batch, _template("four", {"deviceClassName": cls,
                                                                                     "count": 4}))
        resource.create_namespaced_resource_claim_template(serving, _template("eight", {"deviceClassName": cls,
                                                                                        "count": 8}))
        # both nodes full: two low pods of 4 DRA GPUs each
        low = [f"low-{i}" for i in range(4)]
        for name in low:
            core.create_namespaced_pod(batch, _pod(batch, name, "four", "low"))
        wait_for(lambda: all(pod_running(core, batch, n) for n in low), timeout=90, what="the low DRA pods Running")
        on = {n: core.read_namespaced_pod(n, batch).spec.node_name for n in low}
        assert sorted(on.values()) == sorted(nodes * 2), on
        core.create_namespaced_pod(serving, _pod(serving, "serve", "eight", "high"))
        wait_unschedulable(core, serving, "serve")
        assert all(pod_running(core, batch, n) for n in low)           # the scheduler did not make room itself

        jobs, view = act.cluster_jobs(names), act.cluster_nodes(names)
        rows = dict(zip(jobs.ids.tolist(), zip(jobs.gpus.tolist(), jobs.running.tolist(), jobs.node.tolist())))
        assert rows == {f"{batch}/{n}": (4, True, on[n]) for n in low} | {f"{serving}/serve": (8, False, "")}, rows
        got = {n: (int(g), int(f)) for n, g, f in zip(view.names, view.gpus, view.free) if n in nodes}
        assert got == {nodes[0]: (8, 0), nodes[1]: (8, 0)}, got
        state = ClusterState(at=AT, tenants=names, tiers=("high", "low"), capacity=16,
                             used=np.array([0.0, 16.0]), pending=np.array([8.0, 0.0]), jobs=jobs, nodes=view)
        p = plan(flat_forecast(names, [0, 16]), state, PolicyMemory(),
                 Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
        cleared = {x.node for x in p.preemptions}
        evicted = sorted(x.job_id.split("/")[1] for x in p.preemptions)
        assert len(cleared) == 1 and evicted == sorted(n for n in low if on[n] in cleared), (p.preemptions, p.notes)
        rep = act.apply(dataclasses.replace(EMPTY, preemptions=p.preemptions))
        assert rep.ok, rep.errors
        for name in evicted:
            wait_for(lambda n=name: pod_gone(core, batch, n), timeout=60, what=f"{name} evicted and gone")
        # the scheduler allocates the freed devices to the high pod's claim and binds it on the node cleared
        wait_for(lambda: pod_running(core, serving, "serve"), timeout=90, what="the high DRA pod bound")
        assert {core.read_namespaced_pod("serve", serving).spec.node_name} == cleared
        assert all(pod_running(core, batch, n) for n in low if n not in evicted)   # the other node's pods run on
    finally:
        for name in slices:
            resource.delete_resource_slice(name)
        resource.delete_device_class(cls)


def test_a_node_hold_takes_a_dra_node_and_the_real_scheduler_keeps_another_tenants_dra_pod_off_it(kube):
    """Beside Kueue, a hold of 8 GPUs for the high tenant takes one DRA node whole (its slices' 8 GPUs: label and
    NoSchedule taint) and the real scheduler allocates another tenant's DRA pods only on the other node: the first
    binds there, the second (8 more) finds no node. The old code read a DRA node as 0 GPUs: no node to hold."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.config import KueueActuatorConfig

    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-high": "high", "batchy": "low"}, nodes=2, gpus=0)
    batch = ns["batchy"]
    uid = uuid.uuid4().hex[:6]
    driver, cls = f"gpu-{uid}.example.com", f"gpu-{uid}.nvidia.com"
    whole = f'device.driver == "{driver}" && device.attributes["{driver}"].type == "gpu"'
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": cls},
                                  "spec": {"selectors": [{"cel": {"expression": whole}}]}})
    slices = [f"{n}-{uid}" for n in nodes]
    try:
        for name, node in zip(slices, nodes):
            resource.create_resource_slice(_slice(name, driver, node, A100, devices=8))
        act = KueueActuator(api, KueueActuatorConfig(), tenants, dry_run=False,
                            conn=KubernetesActuatorConfig(dra_device_classes={cls: driver}))
        act.cluster_jobs(("team-high", "batchy"))                       # the cycle's read: the DRA GPUs
        assert act.cluster_nodes(("team-high", "batchy")).gpus.tolist() == [8, 8]
        rep = ActionReport("kueue", False)
        act.pods.ensure_priority_classes(rep)            # the classes the pods name: this test may run first
        assert act.nodes.apply(rep, {"team-high": 8, "batchy": 0}, {}) == {"team-high": 8, "batchy": 0}
        assert rep.ok, rep.errors
        label = KueueActuatorConfig().hold_label
        held = [n for n in nodes if (core.read_node(n).metadata.labels or {}).get(label) == "team-high"]
        assert len(held) == 1, held
        free = next(n for n in nodes if n != held[0])
        resource.create_namespaced_resource_claim_template(batch, _template("eight", {"deviceClassName": cls,
                                                                                      "count": 8}))
        core.create_namespaced_pod(batch, _pod(batch, "fill", "eight", "low"))
        wait_for(lambda: pod_running(core, batch, "fill"), timeout=90, what="fill Running")
        assert core.read_namespaced_pod("fill", batch).spec.node_name == free
        core.create_namespaced_pod(batch, _pod(batch, "spill", "eight", "low"))
        wait_unschedulable(core, batch, "spill")
    finally:
        for name in slices:
            resource.delete_resource_slice(name)
        resource.delete_device_class(cls)
