"""The start-time estimate on the Kueue Workload (issue 39, item 3), on the real control plane with Kueue 0.17's
manager (tests/support/k8s_cluster.py): batch Jobs go through Kueue's own job integration (suspended, a Workload
made, admitted, unsuspended, their pods bound to KWOK nodes and Running). A Job that waits for quota has a Workload
and no pod: the Kueue actuator reads it as a pending job, the estimator gives it a start, and the estimate is written
on the Workload as annotations; not rewritten while it moves under 5 minutes; removed once Kueue admits it, when the
estimate it was first given is scored against the admission. A Workload the daemon cannot read (a fractional GPU) is
one log line and skipped."""

from __future__ import annotations

import datetime as dt
import logging
import time

import numpy as np
import pandas as pd
import pytest
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.workloads import OURS, P50, P90, REASON, workload_id
from daemon.config import KueueActuatorConfig
from daemon.policy.state import PRIORITY, ClusterState
from daemon.policy.types import Plan, PolicyMemory
from daemon.service.eta import EtaTracker, with_queued
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

KQ = ("kueue.x-k8s.io", "v1beta1")


def _job(ns: str, name: str, queue: str, gpus: str, pods: int = 1) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": queue}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": True, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                "resources": {"requests": {"nvidia.com/gpu": gpus},
                                              "limits": {"nvidia.com/gpu": gpus}}}]}}}}


def _workload_of(custom, ns: str, job: str) -> dict | None:
    """The Workload Kueue made for the Job (its owner), or None yet."""
    for wl in custom.list_namespaced_custom_object(*KQ, ns, "workloads")["items"]:
        if any(o.get("kind") == "Job" and o.get("name") == job for o in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def _quota_pending(wl: dict | None) -> bool:
    return wl is not None and not wl.get("status", {}).get("admission") and any(
        c["type"] == "QuotaReserved" and c["status"] == "False" for c in wl.get("status", {}).get("conditions", []))


def _plan() -> Plan:
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=0, reservations={},
                quotas={"batchy": 0}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def _rfc3339(text: str) -> float:
    assert text.endswith("Z"), text
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_waiting_workload_carries_its_start_estimate_until_kueue_admits_it(kueue, caplog):
    tenants, ns, nodes = kueue.tenants({"batchy": "low"})
    batch = ns["batchy"]
    uid = batch[-8:]
    act = KueueActuator(kueue.api(), KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}",
                                                         hold_shrink_delay_s=0), tenants, dry_run=False)
    custom, core = k8s.CustomObjectsApi(kueue.api()), k8s.CoreV1Api(kueue.api())
    batch_api = k8s.BatchV1Api(kueue.api())
    names = ("batchy",)
    assert act.apply(_plan()).ok
    low = act.queue_name("low")
    wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in custom.get_cluster_custom_object(
        *KQ, "clusterqueues", low).get("status", {}).get("conditions", [])), timeout=60, what="low queue active")
    # the 16 GPUs Kueue lends the low queue, all taken by a running 2-pod Job; a third 8-GPU Job waits for quota
    batch_api.create_namespaced_job(batch, _job(batch, "first", low, "8", pods=2))
    wait_for(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod(batch).items) == 2,
             timeout=90, what="first's two pods Running")
    batch_api.create_namespaced_job(batch, _job(batch, "second", low, "8"))
    wait_for(lambda: _quota_pending(_workload_of(custom, batch, "second")), timeout=60, what="second waits for quota")
    second = _workload_of(custom, batch, "second")["metadata"]["name"]
    # and one the daemon cannot read: a Workload made by hand asking for half a GPU per pod (the API server refuses
    # that in a Job, but Workload's CRD schema and Kueue's webhook take it; a Workload without podSets they refuse)
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
    halves = "halves"
    custom.create_namespaced_custom_object(*KQ, batch, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": halves, "namespace": batch},
        "spec": {"queueName": low, "podSets": [{"name": "main", "count": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                                      "resources": {"requests": {"nvidia.com/gpu": "500m"}}}]}}}]}})
    wait_for(lambda: custom.get_namespaced_custom_object(*KQ, batch, "workloads", halves).get("status", {}).get(
        "conditions"), timeout=60, what="Kueue saw halves")

    reg = CollectorRegistry()
    tracker = EtaTracker(reg, time.time)
    for _ in range(5):   # the tenant's history: its jobs ran 10 minutes (what the tracker learns as jobs end)
        tracker.runs.observe("batchy", 600.0)

    def cycle():
        jobs, view = act.cluster_jobs(names), act.cluster_nodes(names)
        used = np.array([float(jobs.gpus[jobs.running].sum())])
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=names, tiers=("low",), capacity=int(view.gpus.sum()),
                          used=used, pending=np.array([float(jobs.gpus[~jobs.running].sum())]), jobs=jobs, nodes=view)
        queued = act.queued_jobs(names)
        return tracker.update(with_queued(st, [queued]), None, None, started=act.queued_starts()), queued

    view, queued = cycle()
    sid = workload_id(batch, second)
    assert queued.ids.tolist() == [sid] and queued.gpus.tolist() == [8]       # halves skipped, first admitted
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and halves in lines[0] and "500m" in lines[0] and "spec.podSets[0]" in lines[0], lines
    row = next(r for r in view["jobs"] if r["job_id"] == sid)
    assert row["p50_s"] == pytest.approx(600.0, abs=90.0), row                 # when first's pods end, by history
    rep = act.show_eta(view["jobs"], view["made_at"])
    assert rep.ok and rep.actions == [f"annotate Workload {batch}/{second}"], (rep.actions, rep.errors)
    notes = custom.get_namespaced_custom_object(*KQ, batch, "workloads", second)["metadata"]["annotations"]
    assert _rfc3339(notes[P50]) == pytest.approx(view["made_at"] + row["p50_s"], abs=1.0)
    assert _rfc3339(notes[P90]) == pytest.approx(view["made_at"] + row["p90_s"], abs=1.0)
    assert notes[REASON] == row["basis"] and "run-length history" in notes[REASON]

    # a later cycle: the estimate moved under 5 minutes, nothing is written (no write storm)
    view, _ = cycle()
    assert act.show_eta(view["jobs"], view["made_at"]).actions == []
    # moved 10 minutes (the history says the jobs run longer now): rewritten in place
    for _ in range(20):
        tracker.runs.observe("batchy", 1200.0)
    view, _ = cycle()
    row = next(r for r in view["jobs"] if r["job_id"] == sid)
    rep = act.show_eta(view["jobs"], view["made_at"])
    assert rep.ok and rep.actions == [f"annotate Workload {batch}/{second}"], (rep.actions, rep.errors)
    notes = custom.get_namespaced_custom_object(*KQ, batch, "workloads", second)["metadata"]["annotations"]
    assert _rfc3339(notes[P50]) == pytest.approx(view["made_at"] + row["p50_s"], abs=1.0)

    # first ends: Kueue admits second, which is no job of the estimate any more and loses the annotations, once
    freed = time.time()
    batch_api.delete_namespaced_job("first", batch, propagation_policy="Background")
    wait_for(lambda: (_workload_of(custom, batch, "second") or {}).get("status", {}).get("admission"), timeout=90,
             what="second admitted")
    view, queued = cycle()
    assert sid not in queued.ids.tolist() and sid not in [r["job_id"] for r in view["jobs"]]
    # its admission (Kueue's Admitted condition, to the second) is its start: the first estimate is scored against it
    admitted = act.queued_starts()[sid]
    assert freed - 1.0 <= admitted <= time.time()
    assert reg.get_sample_value("gpuas_eta_error_seconds_count", {"tier": "low"}) == 1.0
    rep = act.show_eta(view["jobs"], view["made_at"])
    assert rep.ok and rep.actions == [f"clear the estimate of Workload {batch}/{second}"], (rep.actions, rep.errors)
    notes = custom.get_namespaced_custom_object(*KQ, batch, "workloads", second)["metadata"].get("annotations") or {}
    assert not set(notes) & set(OURS), notes
    view, _ = cycle()
    assert act.show_eta(view["jobs"], view["made_at"]).actions == []
    assert len(caplog.records) == 1                                       # the bad Workload was said once
    kueue.delete_nodes(nodes)


def _gpu_podset(gpus: int) -> list[dict]:
    return [{"name": "main", "count": 1, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                                  "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]


def test_a_tenants_own_workloads_are_read_as_kueue_treats_them(kueue):
    """A tenant with edit creates Workloads itself (no Job owns them). One on a WorkloadPriorityClass named
    gpu-autoscaler-high: the high-priority-class rule checks only a pod PriorityClass of that name, Kueue's webhook
    does not look for the class, and read at v1beta1 it is priorityClassName gpu-autoscaler-high (its source
    kueue.x-k8s.io/workloadpriorityclass): it was high-tier work to the estimate, served before every other tenant's;
    it is its queue's tier now. One on a LocalQueue that does not exist: Kueue marks it Inadmissible and never admits
    it, where the estimate read it as a pending job ahead of later work; it is none now."""
    tenants, ns, nodes = kueue.tenants({"batchy": "low"}, nodes=1)
    batch = ns["batchy"]
    uid = batch[-8:]
    act = KueueActuator(kueue.api(), KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}",
                                                         hold_shrink_delay_s=0), tenants, dry_run=False)
    custom = k8s.CustomObjectsApi(kueue.api())
    assert act.apply(_plan()).ok
    low = act.queue_name("low")
    wait_for(lambda: any(c["type"] == "Active" and c["status"] == "True" for c in custom.get_cluster_custom_object(
        *KQ, "clusterqueues", low).get("status", {}).get("conditions", [])), timeout=60, what="low queue active")
    # 64 GPUs: more than the queue may ever have, so it waits for quota for as long as the test runs
    custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", batch, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "jump", "namespace": batch},
        "spec": {"queueName": low, "priority": 1000000, "podSets": _gpu_podset(64),
                 "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                      "name": "gpu-autoscaler-high"}}})
    custom.create_namespaced_custom_object(*KQ, batch, "workloads", {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "lost", "namespace": batch},
        "spec": {"queueName": "no-such-queue", "podSets": _gpu_podset(8)}})

    def reason(name: str) -> str | None:
        conds = custom.get_namespaced_custom_object(*KQ, batch, "workloads", name).get("status", {}).get(
            "conditions") or []
        return next((c.get("reason") for c in conds if c["type"] == "QuotaReserved" and c["status"] == "False"), None)
    wait_for(lambda: reason("lost") == "Inadmissible" and reason("jump") is not None, timeout=60,
             what="Kueue judged both Workloads")
    spec = custom.get_namespaced_custom_object(*KQ, batch, "workloads", "jump")["spec"]
    assert (spec.get("priorityClassName"), spec.get("priorityClassSource")) == (
        "gpu-autoscaler-high", "kueue.x-k8s.io/workloadpriorityclass"), spec
    queued = act.queued_jobs(("batchy",))
    assert queued.ids.tolist() == [workload_id(batch, "jump")]
    assert queued.priority.tolist() == [PRIORITY["low"]] and queued.gpus.tolist() == [64]
    kueue.delete_nodes(nodes)
