"""A Kueue Workload of several pods (a gang: an indexed Job or a JobSet of 4 pods of 8 GPUs) made room for as its
pods can start, on the real control plane (tests/support/k8s_cluster.py, Kueue 0.17's manager and CRDs): the
waiting Workload is read with its shape (daemon/actuators/k8s/workloads.py: 4 pods of 8, which may share a node),
the plan made over the pods and nodes the view reads and that Workload (service/eta.with_queued, as the estimator's
state is made) clears four 8-GPU nodes for it, the Kubernetes actuator evicts their pods, and the gang's 4 pods,
created as Kueue creates them once it admits the Workload (a bare Workload has no Job for Kueue to unsuspend), are
bound by the real kube-scheduler on the nodes cleared. Read as one 32-GPU job (the old reading), it fit no node and
nothing was evicted for it."""

import dataclasses

import pandas as pd
import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import Config, KubernetesActuatorConfig, KueueActuatorConfig
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.policy.types import Plan
from daemon.service.eta import with_queued
from tests.policy.test_engine import AT, flat_forecast
from tests.support.k8s_cluster import gpu_pod, pod_gone, pod_running
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

EMPTY = Plan(at="2026-01-01T00:00:00+00:00", capacity=40, load=1.0, high_pool=0, reservations={}, quotas={},
             limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
             memory=PolicyMemory())


def _gang(ns, name, queue, pods, gpus):
    worker = {"restartPolicy": "Never", "containers": [{
        "name": "main", "image": "registry.invalid/train:1", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": queue, "priorityClassName": "gpu-autoscaler-high", "priority": 1_000_000,
                     "priorityClassSource": "scheduling.k8s.io/priorityclass",
                     "podSets": [{"name": "workers", "count": pods, "template": {"spec": worker}}]}}


KQ = ("kueue.x-k8s.io", "v1beta1")


def _zero_quota_queue(custom, ns: str, prefix: str = "zero", gpus: int = 0, node_labels: dict | None = None,
                      preemption: dict | None = None) -> str:
    """A LocalQueue in `ns` on a ClusterQueue of this test's own (named <prefix>-<ns>, one flavor of that name) with
    no GPU quota by default, active: a Workload in it waits for quota Kueue may give it later (QuotaReserved=False,
    reason Pending), one Kueue may admit. A Workload in a queue that does not exist is one Kueue will never admit,
    which neither the plan nor the estimate reads. `gpus`: its quota; `node_labels`: its flavor's (the nodes it
    admits on); `preemption`: the ClusterQueue's."""
    name = f"{prefix}-{ns}"
    custom.create_cluster_custom_object(*KQ, "resourceflavors", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": name},
        "spec": {"nodeLabels": node_labels} if node_labels else {}})
    spec: dict = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": name, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
    if preemption:
        spec["preemption"] = preemption
    custom.create_cluster_custom_object(*KQ, "clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})
    custom.create_namespaced_custom_object(*KQ, ns, "localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": name}})
    wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in custom.get_cluster_custom_object(
        *KQ, "clusterqueues", name).get("status", {}).get("conditions", [])), timeout=60, what=f"{name} active")
    return name


def _waits_for_quota(custom, ns: str, name: str) -> bool:
    """Kueue has tried the Workload and found no quota for it now (reason Pending), not that it may never admit it."""
    wl = custom.get_namespaced_custom_object(*KQ, ns, "workloads", name)
    return any(c.get("type") == "QuotaReserved" and c.get("reason") == "Pending"
               for c in (wl.get("status") or {}).get("conditions") or [])


def _drop_zero_quota_queue(custom, name: str) -> None:
    for plural in ("clusterqueues", "resourceflavors"):
        try:
            custom.delete_cluster_custom_object(*KQ, plural, name)
        except k8s.ApiException:
            pass


def test_the_plans_evictions_for_a_4_x_8_gang_let_its_four_pods_bind(kueue):
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"}, nodes=5)
    serving, batch = ns["team-high"], ns["batchy"]
    names = ("team-high", "batchy")
    core = k8s.CoreV1Api(kueue.api())
    try:
        act = KubernetesActuator(kueue.api(), KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False)
        rep = act.apply(EMPTY)                                          # the PriorityClasses the pods name
        assert rep.ok, rep.errors
        # each node full: one low 8-GPU pod, the older the further down the list (the younger cleared first)
        for i, node in enumerate(nodes):
            core.create_namespaced_pod(batch, gpu_pod(batch, f"low-{i}", 8, "gpu-autoscaler-low",
                                                      {"kubernetes.io/hostname": node}))
            wait_for(lambda i=i: pod_running(core, batch, f"low-{i}"), timeout=60, what=f"low-{i} Running")
        # the gang waits for admission: a queue with no quota, so Kueue leaves it waiting (one it may admit later)
        custom = k8s.CustomObjectsApi(kueue.api())
        zero = _zero_quota_queue(custom, serving)
        custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "workloads",
                                               _gang(serving, "trainer", zero, 4, 8))
        wait_for(lambda: _waits_for_quota(custom, serving, "trainer"), timeout=60, what="Kueue finds no quota now")
        queue = KueueActuator(kueue.api(), KueueActuatorConfig(), tenants, dry_run=True)
        waiting = queue.queued_jobs(names)
        assert waiting.ids.tolist() == [f"{serving}/workload/trainer"]
        assert waiting.gpus.tolist() == [32] and waiting.nodes_asked.tolist() == [4] and waiting.packed.all()
        state = ClusterState(at=AT, tenants=names, tiers=("high", "low"), capacity=40,
                             used=pd.Series([0.0, 40.0]).to_numpy(), pending=pd.Series([0.0, 0.0]).to_numpy(),
                             jobs=act.cluster_jobs(names), nodes=act.cluster_nodes(names))
        assert state.nodes.free.sum() == 0
        p = plan(flat_forecast(names, [0, 40]), with_queued(state, [waiting]), PolicyMemory(),
                 Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
        cleared = sorted(x.node for x in p.preemptions)
        assert len(cleared) == 4 and len(set(cleared)) == 4, p.notes    # four nodes' pods, one each
        rep = act.apply(dataclasses.replace(EMPTY, preemptions=p.preemptions))
        assert rep.ok, rep.errors
        evicted = [x.job_id.split("/")[1] for x in p.preemptions]
        for name in evicted:
            wait_for(lambda n=name: pod_gone(core, batch, n), timeout=60, what=f"{name} evicted and gone")
        # Kueue, once it admits the Workload, creates its 4 pods: the real scheduler binds them where room was made
        for i in range(4):
            core.create_namespaced_pod(serving, gpu_pod(serving, f"trainer-{i}", 8, "gpu-autoscaler-high"))
        for i in range(4):
            wait_for(lambda i=i: pod_running(core, serving, f"trainer-{i}"), timeout=60, what=f"trainer-{i} bound")
        bound = sorted(core.read_namespaced_pod(f"trainer-{i}", serving).spec.node_name for i in range(4))
        assert bound == cleared
        kept = [f"low-{i}" for i in range(5) if f"low-{i}" not in evicted]
        assert len(kept) == 1 and pod_running(core, batch, kept[0])     # the fifth node's pod runs on
    finally:
        kueue.delete_nodes(nodes)
        _drop_zero_quota_queue(k8s.CustomObjectsApi(kueue.api()), f"zero-{serving}")


def test_a_podset_of_no_pods_is_taken_by_kueue_and_read_as_asking_no_room(kueue):
    """Kueue 0.17 takes a podSet of count 0 (its CRD: minimum 0; a JobSet's replicated job scaled to none) and
    defaults an absent count to 1. A Workload of 0 launchers of 8 GPUs and 4 workers of 1 is read as 4 GPUs in 4
    parts of 1 (not parts of 8 for launchers that do not exist, nor skipped as malformed: no estimate); one whose
    launcher set names no count is that 1 launcher of 8 and the 4 workers, packed into one part of 8 beside a
    second of 8: 16 GPUs in 2 parts."""
    tenants, ns, nodes = kueue.tenants({"team-high": "high"}, nodes=0)
    serving = ns["team-high"]
    custom = k8s.CustomObjectsApi(kueue.api())

    def workload(name: str, launchers: int | None) -> dict:
        body = _gang(serving, name, zero, 4, 1)
        launcher = {"name": "launcher", "template": body["spec"]["podSets"][0]["template"]}
        launcher["template"] = {"spec": {**launcher["template"]["spec"], "containers": [{
            **launcher["template"]["spec"]["containers"][0], "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}
        if launchers is not None:
            launcher["count"] = launchers
        body["spec"]["podSets"].insert(0, launcher)
        return body

    zero = _zero_quota_queue(custom, serving)
    try:
        for name, launchers in (("no-launcher", 0), ("one-launcher", None)):
            custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "workloads",
                                                   workload(name, launchers))
            wait_for(lambda n=name: _waits_for_quota(custom, serving, n), timeout=60, what=f"{name} waits")
        stored = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "workloads",
                                                     "one-launcher")
        assert stored["spec"]["podSets"][0]["count"] == 1, stored["spec"]["podSets"]
        waiting = KueueActuator(kueue.api(), KueueActuatorConfig(), tenants, dry_run=True).queued_jobs(("team-high",))
    finally:
        _drop_zero_quota_queue(custom, zero)
    got = {i: (g, k, bool(p)) for i, g, k, p in zip(waiting.ids.tolist(), waiting.gpus.tolist(),
                                                  waiting.nodes_asked.tolist(), waiting.packed.tolist())}
    assert got == {f"{serving}/workload/no-launcher": (4, 4, True),
                   f"{serving}/workload/one-launcher": (16, 2, True)}, got
