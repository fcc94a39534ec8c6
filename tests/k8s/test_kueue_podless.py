"""A Kueue Workload admitted with no pod, on the real control plane with Kueue 0.17's manager (tests/support/
k8s_cluster.py): a tenant's batch Job naming a ServiceAccount that does not exist is admitted by Kueue (its quota
reserved), unsuspended, and the Job controller can make none of its pods (the ServiceAccount admission refuses each).
Kueue holds the quota for good (no waitForPodsReady), and the plan reads no pod of it: the daemon says it, once."""

from __future__ import annotations

import logging

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]

KQ = ("kueue.x-k8s.io", "v1beta1")


def _empty(capacity: int) -> Plan:
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=capacity, load=1.0, high_pool=0, reservations={},
                quotas={"batchy": 0}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def _job(ns: str, name: str, queue: str, gpus: int, account: str | None = None) -> dict:
    spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.invalid/train:1",
                            "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                          "limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if account:
        spec["serviceAccountName"] = account
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"parallelism": 1, "completions": 1, "suspend": True, "backoffLimit": 0,
                     "template": {"spec": spec}}}


def _admitted(custom, ns: str, job: str) -> bool:
    for wl in custom.list_namespaced_custom_object(*KQ, ns, "workloads")["items"]:
        if any(o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return bool(wl.get("status", {}).get("admission"))
    return False


def test_an_admitted_workload_whose_pods_cannot_be_made_is_said_once(kueue, caplog):
    """Beside a low Job that runs (its pod bound, its Workload admitted: not said), the tenant's Job naming a
    ServiceAccount that does not exist is admitted on the low queue's borrowed quota and has no pod; once it has had
    none for podless.after_s (0 here), one line names it and its 8 GPUs, over two cycles. The old code said
    nothing: the quota Kueue held for it was invisible to the plan and the log."""
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
    api = kueue.api()
    core, custom, jobs = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"}, nodes=2)
    b = ns["batchy"]
    uid = b[-8:]
    names = tuple(t.name for t in tenants)
    try:
        assert KubernetesActuator(api, KubernetesActuatorConfig(), tenants, dry_run=False,
                                  enforce_plan=False).apply(_empty(16)).ok     # the PriorityClasses
        act = KueueActuator(api, KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}"), tenants,
                            dry_run=False)
        assert act.apply(_empty(16)).ok
        queues = [o["metadata"]["name"] for p, o in act.objects(_empty(16), *act._holds()) if p == "clusterqueues"]

        def active(q: str) -> bool:
            conds = custom.get_cluster_custom_object(*KQ, "clusterqueues", q).get("status", {}).get("conditions", [])
            return any(c["type"] == "Active" and c["status"] == "True" for c in conds)
        wait_for(lambda: all(active(q) for q in queues), timeout=60, what="every ClusterQueue active")
        act.podless.after_s = 0.0
        jobs.create_namespaced_job(b, _job(b, "runs", act.queue_name("low"), 8))
        jobs.create_namespaced_job(b, _job(b, "ghost", act.queue_name("low"), 8, account="no-such-account"))
        wait_for(lambda: _admitted(custom, b, "runs") and _admitted(custom, b, "ghost"), timeout=60,
                 what="both Jobs admitted by Kueue")
        wait_for(lambda: any(p.spec.node_name for p in core.list_namespaced_pod(b).items), timeout=60,
                 what="the runs Job's pod bound")
        events = core.list_namespaced_event(b, field_selector="involvedObject.name=ghost").items
        wait_for(lambda: any(e.reason == "FailedCreate" for e in
                             core.list_namespaced_event(b, field_selector="involvedObject.name=ghost").items),
                 timeout=60, what="the Job controller refused the ghost's pod")
        assert not [p for p in core.list_namespaced_pod(b).items if p.metadata.name.startswith("ghost")], events
        for _ in range(2):
            act.cluster_jobs(names)
        ghost = next(wl["metadata"]["name"] for wl in custom.list_namespaced_custom_object(*KQ, b, "workloads")["items"]
                     if wl["metadata"]["ownerReferences"][0]["name"] == "ghost")
        said = [r.getMessage() for r in caplog.records if "no live pod" in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(
            f"Kueue Workload {b}/{ghost} is admitted and has had no live pod for "), said
        assert "Kueue holds its quota (8 nvidia.com/gpu) for nothing" in said[0], said
    finally:
        kueue.delete_nodes(nodes)
