"""A JobSet (sigs.k8s.io/jobset, the common way to run multi-node training on Kueue) read as one job of its tenant,
on the real control plane (tests/support/k8s_cluster.py: kube-apiserver, the Job controller, KWOK nodes, Kueue 0.17's
manager with its jobset integration and the JobSet CRD of the release Kueue's go.sum pins, v0.11.1).

Kueue makes the JobSet's Workload (owner: the JobSet; a podSet per replicated job, count = replicas x pods each: a
CPU launcher and 2 x 8-GPU workers are one gang of 16 GPUs in 2 parts of 8). The JobSet controller's child Jobs own
the pods, not the JobSet, so a pod's owner never matched the Workload's: a requeued JobSet whose pods had not gone
yet was counted twice, as its running pods and as a waiting gang of 16 more GPUs. Its pods carry the JobSet's UID
(label jobset.sigs.k8s.io/jobset-uid), which the read now matches, in the pods' namespace only: another tenant's pod
labelled with that UID hides nothing.

No JobSet controller runs here (building it is a module tree of its own beside Kueue's): its child Jobs are made as
its constructJob makes them (ownerReferences to the JobSet as controller, its labels on the Job and the pod template),
and the real Job controller makes their pods, which kwok runs."""

from __future__ import annotations

import os
import signal

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.workloads import workload_id
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig
from daemon.policy.state import PRIORITY
from tests.k8s.test_kueue_gang import EMPTY, KQ, _drop_zero_quota_queue, _waits_for_quota, _zero_quota_queue
from tests.support.k8s_cluster import gpu_pod, pod_running
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

JS = ("jobset.x-k8s.io", "v1alpha2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _pod_template(gpus: int) -> dict:
    main: dict = {"name": "main", "image": "registry.invalid/train:1"}
    if gpus:
        main["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "priorityClassName": "gpu-autoscaler-normal", "containers": [main]}}


def _replicated(name: str, replicas: int, gpus: int) -> dict:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": 1, "completions": 1, "backoffLimit": 0, "template": _pod_template(gpus)}}}


def _jobset(ns: str, name: str, queue: str) -> dict:
    """A training JobSet as a tenant submits it to Kueue: a CPU launcher and two 8-GPU workers."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: queue}},
            "spec": {"replicatedJobs": [_replicated("launcher", 1, 0), _replicated("workers", 2, 8)]}}


def _child_job(js: dict, rjob: dict, index: int) -> dict:
    """The Job the JobSet controller makes for replica `index` of `rjob` (jobset v0.11.1 constructJob and
    labelAndAnnotateObject: named <jobset>-<replicated job>-<index>, owned by the JobSet as its controller, the
    JobSet's labels on the Job and on its pod template, so on every pod), not suspended: the JobSet's pods running."""
    meta = js["metadata"]
    labels = {"jobset.sigs.k8s.io/jobset-name": meta["name"], "jobset.sigs.k8s.io/jobset-uid": meta["uid"],
              "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"], "jobset.sigs.k8s.io/job-index": str(index)}
    spec = {**rjob["template"]["spec"], "suspend": False}
    spec["template"] = {**spec["template"], "metadata": {"labels": labels}}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{meta['name']}-{rjob['name']}-{index}", "namespace": meta["namespace"],
                         "labels": labels,
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                              "name": meta["name"], "uid": meta["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec}


def _workload_of(custom, ns: str, jobset: str) -> dict | None:
    for wl in custom.list_namespaced_custom_object(*KQ, ns, "workloads")["items"]:
        if any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in wl["metadata"].get("ownerReferences",
                                                                                                  [])):
            return wl
    return None


def _urgent(ns: str, queue: str) -> dict:
    """A high-priority 2 x 8 Workload in the same ClusterQueue: Kueue preempts the JobSet for it."""
    spec = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                                      "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "urgent", "namespace": ns},
            "spec": {"queueName": queue, "priorityClassName": "gpu-autoscaler-high", "priority": 1_000_000,
                     "priorityClassSource": "scheduling.k8s.io/priorityclass",
                     "podSets": [{"name": "main", "count": 2, "template": {"spec": spec}}]}}


def _wl(custom, ns: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(*KQ, ns, "workloads", name)


def test_a_requeued_jobsets_pods_are_not_counted_again_as_its_waiting_gang_of_the_same_tenant(kueue):
    """Kueue admits the JobSet, its child Jobs' pods run (16 GPUs of the tenant); Kueue preempts it for a higher
    Workload: its Workload waits again while its pods have not gone yet (the Job controller, which deletes the pods
    of a Job Kueue suspends, is paused for the read: the window a cycle's read may fall into, held open). Counted
    once, as its pods; the old reading added a waiting 16-GPU gang beside them. Once the pods are gone, the Workload
    is one waiting gang of its tenant with the JobSet's shape, which another tenant's pod labelled with the JobSet's
    UID does not hide."""
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"}, nodes=3)
    serving, batch = ns["team-high"], ns["batchy"]
    names = ("team-high", "batchy")
    api = kueue.api()
    core, custom, batch_api = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
    manager = kueue.procs["kube-controller-manager"]
    queue = None
    try:
        assert KubernetesActuator(api, KubernetesActuatorConfig(), tenants, dry_run=False,
                                  enforce_plan=False).apply(EMPTY).ok                   # the PriorityClasses
        queue = _zero_quota_queue(custom, serving, "js", gpus=16,   # Kueue may preempt in it for higher priority
                                  preemption={"withinClusterQueue": "LowerPriority"})
        js = custom.create_namespaced_custom_object(*JS, serving, "jobsets", _jobset(serving, "trainer", queue))
        wait_for(lambda: _workload_of(custom, serving, "trainer") is not None, timeout=60,
                 what="Kueue makes the JobSet's Workload")
        name = _workload_of(custom, serving, "trainer")["metadata"]["name"]
        assert [(p["name"], p["count"]) for p in _wl(custom, serving, name)["spec"]["podSets"]] == [
            ("launcher", 1), ("workers", 2)]
        wait_for(lambda: _wl(custom, serving, name).get("status", {}).get("admission"), timeout=60,
                 what="Kueue admits the JobSet")
        wait_for(lambda: custom.get_namespaced_custom_object(*JS, serving, "jobsets", "trainer")["spec"].get(
            "suspend") is False, timeout=60, what="Kueue resumes the JobSet")
        # another tenant's pod naming the JobSet's UID
        core.create_namespaced_pod(batch, gpu_pod(batch, "forged", 1, "gpu-autoscaler-low", labels={
            "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"], "jobset.sigs.k8s.io/jobset-name": "trainer"}))
        # the resumed JobSet's child Jobs, as its controller makes them; the Job controller makes their pods
        for rjob in js["spec"]["replicatedJobs"]:
            for i in range(rjob["replicas"]):
                batch_api.create_namespaced_job(serving, _child_job(js, rjob, i))

        def running() -> list:
            return [p for p in core.list_namespaced_pod(serving).items
                    if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        wait_for(lambda: len(running()) == 3 and pod_running(core, batch, "forged"), timeout=90,
                 what="the JobSet's 3 pods and the forged one Running")
        assert all(p.metadata.owner_references[0].kind == "Job" for p in running())   # owned by the child Jobs
        act = KueueActuator(api, KueueActuatorConfig(), tenants, dry_run=True)
        gang = workload_id(serving, name)
        read = act.cluster_jobs(names)
        assert gang not in read.ids.tolist() and int(read.gpus[(read.tenant == 0) & read.running].sum()) == 16

        os.kill(manager.pid, signal.SIGSTOP)    # the Job controller: it would delete the suspended Jobs' pods
        try:
            custom.create_namespaced_custom_object(*KQ, serving, "workloads", _urgent(serving, queue))
            wait_for(lambda: _waits_for_quota(custom, serving, name) and not _wl(custom, serving, name).get(
                "status", {}).get("admission"), timeout=60, what="Kueue preempts the JobSet and requeues it")
            wait_for(lambda: _wl(custom, serving, "urgent").get("status", {}).get("admission"), timeout=60,
                     what="Kueue admits the higher Workload in its place")
            assert len(running()) == 3                                          # its pods have not gone yet
            again = act.cluster_jobs(names)
            assert gang not in again.ids.tolist()                               # counted once: as its pods
            mine = again.tenant == 0
            assert int(again.gpus[mine & again.running].sum()) == 16 and not (mine & ~again.running).any()
        finally:
            os.kill(manager.pid, signal.SIGCONT)
        wait_for(lambda: not running(), timeout=90, what="the suspended Jobs' pods deleted")
        after = act.cluster_jobs(names)                                          # the pods gone: the gang waits
        assert gang in after.ids.tolist()
        row = after.ids.tolist().index(gang)
        assert (after.tenant[row], after.gpus[row], after.nodes_asked[row], bool(after.packed[row]),
                after.priority[row], bool(after.running[row])) == (0, 16, 2, True, PRIORITY["normal"], False)
    finally:
        if manager.poll() is None:
            os.kill(manager.pid, signal.SIGCONT)
        try:
            custom.delete_namespaced_custom_object(*JS, serving, "jobsets", "trainer", propagation_policy="Background")
        except k8s.ApiException:
            pass
        kueue.delete_nodes(nodes)
        if queue:
            _drop_zero_quota_queue(custom, queue)
