"""Kueue's waiting Workloads in the plan, end to end on the real control plane (tests/support/k8s_cluster.py: kube-
apiserver, kube-scheduler, the Job controller, KWOK nodes, Kueue 0.17's manager): every GPU job goes through Kueue's
batch/job integration, so the low Jobs take the queues' quota and a high-tier 2 x 8 Job's Workload waits with no pod.
The Kueue actuator reads it beside the pods (KueueActuator.cluster_jobs: workloads.Workloads.demand), the plan clears
two nodes for the gang and holds them, the actuator (dry run off) taints them and evicts their low pods, Kueue admits
the Workload on the hold, and the Job's two pods bind where room was made. A Workload Kueue finds inadmissible (its
LocalQueue missing), that asks more than the cluster has, or whose pods select a GPU model no node has is no demand:
beside an admissible 1 x 8 Workload, only its node is cleared. The old reading (pods only) cleared nothing in either."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.workloads import workload_id
from daemon.config import Config, KubernetesActuatorConfig, KueueActuatorConfig
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.policy.types import Plan
from tests.policy.test_engine import AT, flat_forecast
from tests.support.k8s_cluster import pod_gone, pod_running
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

KQ = ("kueue.x-k8s.io", "v1beta1")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _empty(capacity: int) -> Plan:
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=capacity, load=1.0, high_pool=0, reservations={},
                quotas={"batchy": 0}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def _job(ns: str, name: str, queue: str, pods: int, gpus: int, tier: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: queue}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True, "backoffLimit": 100, "template": {
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         "priorityClassName": f"gpu-autoscaler-{tier}",
                         "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                         "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                       "limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def _workload(ns: str, name: str, queue: str, pods: int, gpus: int, selector: dict | None = None) -> dict:
    """A Workload made by hand (as an integration Kueue runs would make one), high tier."""
    spec: dict = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": queue, "priorityClassName": "gpu-autoscaler-high", "priority": 1_000_000,
                     "priorityClassSource": "scheduling.k8s.io/priorityclass",
                     "podSets": [{"name": "main", "count": pods, "template": {"spec": spec}}]}}


def _workload_of(custom, ns: str, job: str) -> dict | None:
    """The Workload Kueue made for the Job (its owner), or None yet."""
    for wl in custom.list_namespaced_custom_object(*KQ, ns, "workloads")["items"]:
        if any(o.get("kind") == "Job" and o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _verdict(wl: dict | None) -> str | None:
    """The reason of the Workload's QuotaReserved=False condition (Kueue tried it and did not admit it), or None."""
    if wl is None or wl.get("status", {}).get("admission"):
        return None
    return next((c["reason"] for c in wl.get("status", {}).get("conditions", [])
                 if c["type"] == "QuotaReserved" and c["status"] == "False"), None)


def _admitted(custom, ns: str, name: str) -> bool:
    return bool(custom.get_namespaced_custom_object(*KQ, ns, "workloads", name).get("status", {}).get("admission"))


class _Cluster:
    """A high tenant and a low one, `nodes` 8-GPU KWOK nodes, the daemon's Kueue objects (a Cohort and queue names
    of this test's own), and the low tier's 8-GPU Jobs through Kueue filling every node."""

    def __init__(self, kueue, nodes: int) -> None:
        self.kueue = kueue
        self.tenants, ns, self.nodes = kueue.tenants({"team-high": "high", "batchy": "low"}, nodes=nodes)
        self.serving, self.batch = ns["team-high"], ns["batchy"]
        self.names = ("team-high", "batchy")
        uid = self.serving[-8:]
        api = kueue.api()
        self.core, self.custom, self.jobs_api = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
        assert KubernetesActuator(api, KubernetesActuatorConfig(), self.tenants, dry_run=False,
                                  enforce_plan=False).apply(_empty(8 * nodes)).ok     # the PriorityClasses
        self.act = KueueActuator(api, KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}",
                                                          hold_shrink_delay_s=0), self.tenants, dry_run=False,
                                 conn=KubernetesActuatorConfig(grace_period_s=5))
        rep = self.act.apply(_empty(8 * nodes))
        assert rep.ok, rep.errors
        queues = [o["metadata"]["name"] for p, o in self.act.objects(_empty(8 * nodes), *self.act._holds())
                  if p == "clusterqueues"]
        wait_for(lambda: all(any(c["type"] == "Active" and c["status"] == "True" for c in self.custom.
                                 get_cluster_custom_object(*KQ, "clusterqueues", q).get("status", {}).get(
                                     "conditions", [])) for q in queues), timeout=60, what="every ClusterQueue active")
        for i in range(nodes):   # one low 8-GPU Job per node, admitted by Kueue on the quota it lends the low queue
            self.jobs_api.create_namespaced_job(self.batch, _job(self.batch, f"low-{i}", self.act.queue_name("low"),
                                                                 1, 8, "low"))
        wait_for(lambda: len(self.running(self.batch)) == nodes, timeout=90, what="the low Jobs' pods Running")
        self.low = {p.metadata.name: p.spec.node_name for p in self.running(self.batch)}
        assert sorted(self.low.values()) == sorted(self.nodes)

    def running(self, ns: str) -> list:
        return [p for p in self.core.list_namespaced_pod(ns).items
                if p.status.phase == "Running" and p.spec.node_name and not p.metadata.deletion_timestamp]

    def plan(self) -> Plan:
        """One cycle's plan over what the Kueue actuator reads (pods, nodes and the waiting Workloads)."""
        jobs, nodes = self.act.cluster_jobs(self.names), self.act.cluster_nodes(self.names)
        used = np.bincount(jobs.tenant[jobs.running], weights=jobs.gpus[jobs.running], minlength=2)
        pending = np.bincount(jobs.tenant[~jobs.running], weights=jobs.gpus[~jobs.running], minlength=2)
        self.read = jobs
        state = ClusterState(at=AT, tenants=self.names, tiers=("high", "low"), capacity=int(nodes.gpus.sum()),
                             used=pd.Series(used).to_numpy(float), pending=pd.Series(pending).to_numpy(float),
                             jobs=jobs, nodes=nodes)
        return plan(flat_forecast(self.names, [0, float(used[1])]), state, PolicyMemory(),
                    Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))


def test_a_waiting_2_x_8_gang_gets_two_nodes_cleared_and_held_and_binds_there_once_kueue_admits_it(kueue):
    c = _Cluster(kueue, nodes=3)
    try:
        c.jobs_api.create_namespaced_job(c.serving, _job(c.serving, "trainer", c.act.cfg.queue_prefix, 2, 8, "high"))
        wait_for(lambda: _verdict(_workload_of(c.custom, c.serving, "trainer")) == "Pending", timeout=60,
                 what="the gang waits for quota")
        name = _workload_of(c.custom, c.serving, "trainer")["metadata"]["name"]
        assert not [p for p in c.core.list_namespaced_pod(c.serving).items]          # no pod while it waits
        p = c.plan()
        gang = workload_id(c.serving, name)
        assert gang in c.read.ids.tolist()
        row = c.read.ids.tolist().index(gang)
        assert (c.read.gpus[row], c.read.nodes_asked[row], bool(c.read.packed[row])) == (16, 2, True)
        cleared = sorted(x.node for x in p.preemptions)
        assert len(cleared) == 2 and len(set(cleared)) == 2, p.notes                  # two nodes, one pod each
        assert sum(p.reservations.values()) >= 16, p.reservations                     # the hold sees the gang
        rep = c.act.apply(p)                                                          # dry run off: holds, evictions
        assert rep.ok, rep.errors
        evicted = [x.job_id.split("/")[1] for x in p.preemptions]
        for pod in evicted:
            wait_for(lambda n=pod: pod_gone(c.core, c.batch, n), timeout=60, what=f"{pod} evicted and gone")
        wait_for(lambda: _admitted(c.custom, c.serving, name), timeout=60, what="Kueue admits the gang on the hold")
        wait_for(lambda: len(c.running(c.serving)) == 2, timeout=90, what="the gang's two pods Running")
        assert sorted(q.spec.node_name for q in c.running(c.serving)) == cleared
        kept = [n for n in c.low if n not in evicted]
        assert len(kept) == 1 and pod_running(c.core, c.batch, kept[0])               # the third node's runs on
        # admitted, the gang is its pods: the next read counts them, not the Workload as well
        again = c.act.cluster_jobs(c.names)
        assert gang not in again.ids.tolist()
        assert int(again.gpus[again.running & (again.tenant == 0)].sum()) == 16
    finally:
        c.act.release_holds()
        kueue.delete_nodes(c.nodes)


def test_inadmissible_workloads_cause_no_eviction_beside_one_kueue_may_admit(kueue, caplog):
    c = _Cluster(kueue, nodes=3)
    try:
        caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
        create = c.custom.create_namespaced_custom_object
        # Kueue finds it inadmissible: its LocalQueue does not exist (a tenant's forged demand)
        create(*KQ, c.serving, "workloads", _workload(c.serving, "no-queue", "no-such-queue", 2, 8))
        # in the tenant's own queue, but 4 x 8 where the cluster has 24 GPUs: no quota the daemon writes admits it
        create(*KQ, c.serving, "workloads", _workload(c.serving, "past-cluster", c.act.cfg.queue_prefix, 4, 8))
        # and one Kueue may admit: 1 x 8, waiting for quota
        create(*KQ, c.serving, "workloads", _workload(c.serving, "one", c.act.cfg.queue_prefix, 1, 8))
        # 2 x 8 whose pods select a GPU model no node has (the nodes are A100s): kube-scheduler places them nowhere
        create(*KQ, c.serving, "workloads", _workload(c.serving, "h100", c.act.cfg.queue_prefix, 2, 8,
                                                      {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
        for name, why in (("no-queue", "Inadmissible"), ("past-cluster", "Pending"), ("one", "Pending"),
                          ("h100", "Pending")):
            wait_for(lambda n=name, w=why: _verdict(c.custom.get_namespaced_custom_object(*KQ, c.serving, "workloads",
                                                                                        n)) == w,
                     timeout=60, what=f"Kueue's verdict on {name}: {why}")
        p = c.plan()
        assert [i for i in c.read.ids.tolist() if "/workload/" in i] == [workload_id(c.serving, "one")]
        assert len(p.preemptions) == 1, p.notes                                       # the one node for `one`
        assert sum(p.reservations.values()) == 8, p.reservations                      # a hold of one 8-GPU job
        rep = c.act.apply(p)
        assert rep.ok, rep.errors
        (evicted,) = [x.job_id.split("/")[1] for x in p.preemptions]
        wait_for(lambda: pod_gone(c.core, c.batch, evicted), timeout=60, what=f"{evicted} evicted and gone")
        for pod in c.low:
            if pod != evicted:
                assert pod_running(c.core, c.batch, pod)                              # nothing evicted for the rest
        lines = [r.getMessage() for r in caplog.records]
        assert any(f"{c.serving}/no-queue is inadmissible to Kueue (LocalQueue no-such-queue doesn't exist)" in x
                   for x in lines), lines
        assert any(f"{c.serving}/past-cluster asks for 32 GPUs in all, more than the cluster has (24)" in x
                   for x in lines), lines
        assert any(f"{c.serving}/h100 has pods (podSet main) that no node takes: selects nodes by "
                   "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3, which no node has" in x for x in lines), lines
        assert len(lines) == 3, lines
    finally:
        c.act.release_holds()
        kueue.delete_nodes(c.nodes)
