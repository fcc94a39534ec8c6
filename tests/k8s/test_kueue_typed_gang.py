"""A waiting Kueue gang planned on the GPU type it can run on, on the real control plane (tests/support/k8s_cluster.py:
kube-apiserver, kube-scheduler, KWOK nodes of two models, Kueue 0.17's manager) with a mixed fleet ([fleet] types
h100 and a100). Three A100 nodes and two H100 nodes are full of low pods, the A100 ones younger (cheaper to
preempt); a high-tier 2 x 8 Workload that can run on H100 only waits: its pods select H100 (nodeSelector on
nvidia.com/gpu.product), or they name no type and its queue's only GPU flavor is H100's (a ResourceFlavor whose
nodeLabels select H100 nodes: Kueue admits it there only). The Kueue actuator reads it as a gang that accepts h100
(workloads.Workloads._types, queue_types.QueueTypes), the plan clears the two H100 nodes, and the Kubernetes actuator
evicts exactly their pods through the Eviction API while every A100 pod runs on. Read as any type (the old reading),
the plan cleared two A100 nodes, where the gang's pods never start."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd
import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.workloads import workload_id
from daemon.config import Config, KubernetesActuatorConfig, KueueActuatorConfig
from daemon.config.fleet import FleetConfig
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from tests.k8s.test_kueue_gang import EMPTY, _drop_zero_quota_queue, _gang, _waits_for_quota, _zero_quota_queue
from tests.policy.test_engine import AT, flat_forecast
from tests.support.k8s_cluster import GPU_MODELS, PRODUCT_LABEL, gpu_pod, pod_gone, pod_running
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

FLEET = FleetConfig(types=["h100", "a100"], aliases={GPU_MODELS["h100"]: "h100", GPU_MODELS["a100"]: "a100"})


@pytest.mark.parametrize("asks", ["selector", "flavor"])
def test_a_waiting_h100_gang_gets_room_made_on_h100_nodes_only(kueue, asks):
    """`selector`: the gang's pods select H100 (nodeSelector), in a queue of any type. `flavor`: its pods name no
    type, in a site's queue whose only GPU flavor is H100's (Kueue admits it there only and adds the flavor's node
    labels to its pods)."""
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"}, nodes=2, model="h100")
    serving, batch = ns["team-high"], ns["batchy"]
    names = ("team-high", "batchy")
    a100 = [kueue.gpu_node(f"{serving}-a{i}", "a100") for i in range(3)]
    nodes += a100
    api = kueue.api()
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    try:
        wait_for(lambda: all(kueue.node_ready(n) for n in a100), timeout=60, what="the A100 nodes Ready")
        act = KubernetesActuator(api, KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False,
                                 fleet=FLEET)
        assert act.apply(EMPTY).ok                                          # the PriorityClasses
        # every node full of low work: the H100 pods first (older), the A100 ones a second later (younger, cheaper)
        for i, node in enumerate(nodes):
            if node == a100[0]:
                time.sleep(1.1)   # startTime is to the second
            core.create_namespaced_pod(batch, gpu_pod(batch, f"low-{i}", 8, "gpu-autoscaler-low",
                                                      {"kubernetes.io/hostname": node}))
            wait_for(lambda i=i: pod_running(core, batch, f"low-{i}"), timeout=60, what=f"low-{i} Running")
        queue = _zero_quota_queue(custom, serving) if asks == "selector" else _zero_quota_queue(
            custom, serving, "h100", node_labels={PRODUCT_LABEL: GPU_MODELS["h100"]})   # a site's H100-only queue
        body = _gang(serving, "trainer", queue, 2, 8)
        if asks == "selector":
            body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {PRODUCT_LABEL: GPU_MODELS["h100"]}
        custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "workloads", body)
        wait_for(lambda: _waits_for_quota(custom, serving, "trainer"), timeout=60, what="the H100 gang waits")

        queue = KueueActuator(api, KueueActuatorConfig(), tenants, dry_run=True, fleet=FLEET)
        jobs, typed = queue.cluster_jobs(names), queue.cluster_nodes(names)
        assert sorted(zip(typed.names.tolist(), typed.gpu_type.tolist())) == sorted(
            [(n, "h100") for n in nodes[:2]] + [(n, "a100") for n in a100])
        used = np.bincount(jobs.tenant[jobs.running], weights=jobs.gpus[jobs.running], minlength=2)
        pending = np.bincount(jobs.tenant[~jobs.running], weights=jobs.gpus[~jobs.running], minlength=2)
        state = ClusterState(at=AT, tenants=names, tiers=("high", "low"), capacity=40,
                             used=pd.Series(used).to_numpy(float), pending=pd.Series(pending).to_numpy(float),
                             jobs=jobs, nodes=typed)
        p = plan(flat_forecast(names, [0, 40]), state, PolicyMemory(),
                 Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
        assert sorted(x.node for x in p.preemptions) == sorted(nodes[:2]), (p.preemptions, p.notes)
        gang = jobs.ids.tolist().index(workload_id(serving, "trainer"))
        assert (jobs.gpus[gang], jobs.nodes_asked[gang], jobs.accepts[gang]) == (16, 2, ("h100",))
        rep = act.apply(dataclasses.replace(EMPTY, preemptions=p.preemptions))   # dry run off: the evictions
        assert rep.ok, rep.errors
        for i in (0, 1):
            wait_for(lambda i=i: pod_gone(core, batch, f"low-{i}"), timeout=60, what=f"low-{i} (H100) evicted")
        for i in (2, 3, 4):
            assert pod_running(core, batch, f"low-{i}")                     # every A100 pod runs on
    finally:
        kueue.delete_nodes(nodes)
        for name in (f"zero-{serving}", f"h100-{serving}"):
            _drop_zero_quota_queue(custom, name)
