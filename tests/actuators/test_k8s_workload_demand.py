"""Kueue's waiting Workloads as the plan's demand (daemon/actuators/k8s/workloads.py Workloads.demand): only those Kueue
may admit, each once, bounded per tenant. On Workload objects as the API server returns them; on the real control
plane with Kueue: tests/k8s/test_kueue_waiting_demand.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from types import SimpleNamespace

import numpy as np
import pandas as pd

from daemon.actuators.k8s.workloads import Workloads, pod_owners, workload_id
from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import PRIORITY, UNHELD, ClusterState, Jobs, Nodes
from daemon.service.eta import with_queued
from tests.actuators.test_k8s_actuator import _capture_servers  # noqa: F401 (autouse fixture: the capture servers)
from tests.policy.test_engine import AT, flat_forecast

NOW = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.timezone.utc)
PENDING = {"type": "QuotaReserved", "status": "False", "reason": "Pending",
           "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
                      "default-flavor, 16 more needed"}
SIZES = [8, 8, 8]   # three 8-GPU nodes


def wl(name, ns="ns-a", gpus="8", count=2, verdict=PENDING, owner=None, priority=None, created="2026-01-05T09:50:00Z",
       pclass="gpu-autoscaler-high"):
    body = {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "creationTimestamp": created},
            "spec": {"queueName": "gpuas", "priorityClassName": pclass, "podSets": [{"name": "main", "count": count,
                     "template": {"spec": {"containers": [{"name": "c", "resources": {
                         "limits": {"nvidia.com/gpu": gpus}}}]}}}]},
            "status": {"conditions": [verdict] if verdict else []}}
    if pclass:   # a pod PriorityClass, as the API serves v1beta2's priorityClassRef at v1beta1
        body["spec"]["priorityClassSource"] = "scheduling.k8s.io/priorityclass"
    if owner:
        body["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": owner}]
    if priority is not None:
        body["spec"]["priority"] = priority
    return body


def reader(cap=1000):
    return Workloads(None, {"ns-a": "team-a", "ns-b": "team-b"}, "nvidia.com/gpu", "gpuas-low", cap)


def inadmissible(message):
    return {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible", "message": message}


def test_only_workloads_kueue_may_admit_are_demand_each_with_its_shape(caplog):
    r = reader()
    items = [wl("gang"),                                                             # 2 x 8, waits for room
             wl("max-capacity", verdict={**PENDING, "message": "couldn't assign flavors to pod set main: insufficient "
                                         "quota for nvidia.com/gpu in flavor default-flavor, previously considered "
                                         "podsets requests (0) + current podset request (16) > maximum capacity "
                                         "(8)"}),                                     # the plan's quota: may grow
             wl("no-queue", verdict=inadmissible("LocalQueue gpuas doesn't exist")),
             wl("cq-stopped", verdict=inadmissible("ClusterQueue gpuas-tenant-team-a is inactive")),
             wl("unseen", verdict=None),                                              # Kueue has not tried it yet
             wl("huge-pod", count=1, gpus="16"),                                      # no node has 16
             wl("past-cluster", count=4, gpus="8")]                                   # 32 of the cluster's 24
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        jobs = r.demand(items, ("team-a", "team-b"), SIZES, set(), now=NOW)
        assert jobs.ids.tolist() == [workload_id("ns-a", "gang"), workload_id("ns-a", "max-capacity")]
        assert jobs.gpus.tolist() == [16, 16] and jobs.nodes_asked.tolist() == [2, 2] and jobs.packed.all()
        assert jobs.priority.tolist() == [PRIORITY["high"]] * 2 and not jobs.running.any()
        assert jobs.wait_s.tolist() == [600.0, 600.0]
    lines = sorted(x.getMessage() for x in caplog.records)   # once per Workload, one line each
    tail = (": it can never be admitted, so it is no demand (no hold, no preemption, no aging for it) and has no "
            "start-time estimate")
    assert lines == sorted([
        "Kueue Workload ns-a/no-queue is inadmissible to Kueue (LocalQueue gpuas doesn't exist)" + tail,
        "Kueue Workload ns-a/cq-stopped is inadmissible to Kueue (ClusterQueue gpuas-tenant-team-a is inactive)"
        + tail,
        "Kueue Workload ns-a/huge-pod asks for pods of 16 GPUs, more than any node has (8)" + tail,
        "Kueue Workload ns-a/past-cluster asks for 32 GPUs in all, more than the cluster has (24)" + tail])


def test_a_workload_becomes_demand_once_kueue_has_tried_it_and_not_when_its_queue_goes():
    r = reader()
    assert len(r.demand([wl("w", verdict=None)], ("team-a",), SIZES, set(), now=NOW)) == 0
    assert r.demand([wl("w")], ("team-a",), SIZES, set(), now=NOW).ids.tolist() == ["ns-a/workload/w"]
    gone = wl("w", verdict=inadmissible("LocalQueue gpuas is terminating or missing"))
    assert len(r.demand([gone], ("team-a",), SIZES, set(), now=NOW)) == 0


def test_a_finished_going_or_misconfigured_workload_waits_no_more_and_one_not_finished_still_does():
    """Kueue holds back only a Workload not finished, not being deleted and not misconfigured (Kueue 0.17's later
    reason for a missing ClusterQueue): neither read takes the rest as waiting (mutation testing: each of these rules
    could be dropped, or Finished=False read as finished, with every test passing)."""
    done = wl("done")
    done["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    not_done = wl("not-done")
    not_done["status"]["conditions"].append({"type": "Finished", "status": "False", "reason": "Pending"})
    going = wl("going")
    going["metadata"]["deletionTimestamp"] = "2026-01-05T09:59:00Z"
    misconfigured = wl("misconfigured", verdict={"type": "QuotaReserved", "status": "False", "reason": "Misconfigured",
                                                 "message": "ClusterQueue gpuas-tenant-team-a doesn't exist"})
    items = [done, not_done, going, misconfigured]
    r = reader()
    assert r.demand(items, ("team-a",), SIZES, set(), now=NOW).ids.tolist() == [workload_id("ns-a", "not-done")]
    assert r.jobs(items, ("team-a",), now=NOW, sizes=SIZES).ids.tolist() == [workload_id("ns-a", "not-done")]


def test_a_workload_stamped_ahead_of_the_daemons_clock_has_waited_nothing_not_less():
    """The apiserver's clock may run ahead of the daemon's: a wait is never negative (mutation testing)."""
    jobs = reader().demand([wl("ahead", created="2026-01-05T10:05:00Z")], ("team-a",), SIZES, set(), now=NOW)
    assert jobs.wait_s.tolist() == [0.0]


def test_a_waiting_workloads_pod_template_is_read_once_while_it_waits():
    """Each cycle judges the podSets of every waiting Workload that select nodes (starts: never_starts); the template
    is read as the client's V1Pod once and kept while the Workload waits, not decoded again each cycle for each of a
    tenant's thousand Workloads (mutation testing: the kept pod unused passed every test)."""
    judged = []

    def starts(pod, gpus):
        judged.append(pod)
        return None

    body = wl("selects")
    body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"zone": "a"}
    r = reader()
    for _ in range(2):
        assert r.demand([body], ("team-a",), SIZES, set(), now=NOW, starts=starts).ids.tolist() == [
            workload_id("ns-a", "selects")]
    assert len(judged) == 2 and judged[0] is judged[1]


def _pod(ns, uid, owner, phase="Running", node="n1", deleting=False, gates=None, labels=None):
    return SimpleNamespace(
        metadata=SimpleNamespace(namespace=ns, uid=uid, deletion_timestamp=NOW if deleting else None,
                                 owner_references=[SimpleNamespace(uid=owner)] if owner else None, labels=labels),
        status=SimpleNamespace(phase=phase), spec=SimpleNamespace(node_name=node, scheduling_gates=gates))


def test_a_waiting_workload_whose_pods_the_pod_view_counts_is_counted_once_as_its_pods():
    """A Job's Workload requeued while its pods still run (Kueue evicted it, the Job controller has not deleted them
    yet): its pods are jobs already, so the Workload is not added; once they are being deleted it is demand again."""
    tenant_of = {"ns-a": "team-a"}
    live = [_pod("ns-a", "p1", "job-1"), _pod("ns-a", "p2", "job-1", phase="Pending", node="")]
    owners = pod_owners(live, tenant_of)
    assert {("ns-a", "job-1"), ("ns-a", "p1"), ("ns-a", "p2")} <= owners
    r = reader()
    jobs = r.demand([wl("requeued", owner="job-1"), wl("other", owner="job-2")], ("team-a",), SIZES, owners,
                    now=NOW)
    assert jobs.ids.tolist() == ["ns-a/workload/other"]
    going = [_pod("ns-a", "p1", "job-1", deleting=True), _pod("ns-a", "p3", "job-1", phase="Succeeded"),
             _pod("ns-a", "p4", "job-1", node="", gates=[{"name": "kueue.x-k8s.io/admission"}]),
             _pod("ns-z", "p5", "job-1")]                                   # not a tenant's namespace
    assert ("ns-a", "job-1") not in pod_owners(going, tenant_of)


def jobset_wl(name, ns="ns-a", uid="js-1"):
    """A Workload as Kueue's jobset integration makes it: its owner the JobSet, a podSet per replicated job."""
    body = wl(name, ns=ns)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                            "name": "trainer", "uid": uid, "controller": True}]
    return body


def test_a_requeued_jobsets_workload_is_counted_once_as_its_pods_which_name_their_child_job():
    """A JobSet's pods are owned by its child Jobs (the JobSet controller makes them), while Kueue's Workload is owned
    by the JobSet: matching owners alone, a requeued JobSet whose pods still ran was counted twice, as its pods and as
    a waiting gang. Its pods carry the JobSet's UID (label jobset.sigs.k8s.io/jobset-uid), bound to their namespace:
    a pod of another tenant naming that UID hides nothing."""
    tenant_of = {"ns-a": "team-a", "ns-b": "team-b"}
    label = {"jobset.sigs.k8s.io/jobset-uid": "js-1", "jobset.sigs.k8s.io/jobset-name": "trainer"}
    mine = [_pod("ns-a", "p1", "child-job-0", labels=label), _pod("ns-a", "p2", "child-job-1", labels=label)]
    r = reader()
    tenants = ("team-a", "team-b")
    jobs = r.demand([jobset_wl("jobset-trainer")], tenants, SIZES, pod_owners(mine, tenant_of), now=NOW)
    assert len(jobs) == 0                                                    # counted as its two pods
    forged = [_pod("ns-b", "p9", None, labels=label)]                        # another tenant's pod claims it
    jobs = r.demand([jobset_wl("jobset-trainer")], tenants, SIZES, pod_owners(forged, tenant_of), now=NOW)
    assert jobs.ids.tolist() == ["ns-a/workload/jobset-trainer"]
    assert (jobs.gpus.tolist(), jobs.nodes_asked.tolist()) == ([16], [2])  # the gang's shape
    # an owner UID of another namespace (a Job of ns-b with the JobSet's UID) does not match either
    jobs = r.demand([jobset_wl("jobset-trainer")], tenants, SIZES, pod_owners([_pod("ns-b", "p8", "js-1")],
                                                                              tenant_of), now=NOW)
    assert len(jobs) == 1


def test_the_estimator_does_not_add_a_workload_the_plan_already_reads():
    r = reader()
    waiting = r.demand([wl("gang")], ("team-a",), SIZES, set(), now=NOW)
    state = ClusterState(at=AT, tenants=("team-a",), tiers=("high",), capacity=24, used=np.array([0.0]),
                         pending=np.array([16.0]), jobs=waiting)
    queued = r.jobs([wl("gang"), wl("unseen", verdict=None)], ("team-a",), now=NOW)
    both = with_queued(state, [queued])
    assert both.jobs.ids.tolist() == ["ns-a/workload/gang", "ns-a/workload/unseen"]
    assert both.pending.tolist() == [32.0]                       # 16 of the plan's + 16 of the one it did not read


def _nodes(n, gpus=8):
    names = np.array([f"n{i}" for i in range(n)], dtype=object)
    return Nodes(names=names, gpus=np.full(n, gpus), free=np.zeros(n, dtype=np.int64),
                 draining=np.zeros(n, dtype=np.int64), held_by=np.full(n, UNHELD))


def _low_pods(tenant, n, gpus=8):
    return Jobs(ids=np.array([f"b/low-{i}" for i in range(n)], dtype=object), tenant=np.full(n, tenant),
                gpus=np.full(n, gpus), priority=np.full(n, PRIORITY["low"], dtype=np.int8),
                running=np.ones(n, dtype=bool), runtime_s=np.full(n, 600.0), wait_s=np.zeros(n),
                node=np.array([f"n{i}" for i in range(n)], dtype=object))


def test_one_tenants_10000_workloads_are_read_in_kueues_order_up_to_the_cap_and_starve_no_one(caplog):
    """A normal tenant's 10,000 waiting Workloads: read up to max_workloads_per_tenant, highest priority then oldest
    first (those Kueue admits first), said once; the high tenant's 2 x 8 gang beside them still gets its two nodes
    cleared by the plan. (How long the read takes is bench/k8s_scale_bench.py's to measure, not a timed test's.)"""
    r = reader(cap=1000)
    flood = [wl(f"f{i:05d}", ns="ns-b", count=1, gpus="1", pclass="", priority=i % 3,
                created=f"2026-01-05T09:5{i % 9}:00Z") for i in range(10_000)]
    items = [*flood, wl("gang")]
    caplog.set_level(logging.WARNING)
    jobs = r.demand(items, ("team-a", "team-b"), [8] * 4, set(), now=NOW)
    assert (jobs.tenant == 1).sum() == 1000 and "ns-a/workload/gang" in jobs.ids.tolist()
    kept = {i.rsplit("/", 1)[1] for i in jobs.ids[jobs.tenant == 1].tolist()}
    best = sorted(flood, key=lambda w: (-w["spec"]["priority"], w["metadata"]["creationTimestamp"]))[:1000]
    assert kept == {w["metadata"]["name"] for w in best}
    r.demand(items, ("team-a", "team-b"), [8] * 4, set(), now=NOW)
    assert [x.getMessage() for x in caplog.records] == [
        "tenant team-b has 9000 waiting Kueue Workloads beyond actuators.kueue.max_workloads_per_tenant (1000): "
        "those, the last in Kueue's order, are no demand until fewer wait"]
    names = ("team-a", "team-b", "batch")
    low = _low_pods(2, 4)
    all_jobs = Jobs.concat([low, jobs])
    pending = np.bincount(all_jobs.tenant[~all_jobs.running], weights=all_jobs.gpus[~all_jobs.running], minlength=3)
    state = ClusterState(at=AT, tenants=names, tiers=("high", "normal", "low"), capacity=32,
                         used=pd.Series([0.0, 0.0, 32.0]).to_numpy(), pending=pending.astype(float),
                         jobs=all_jobs, nodes=_nodes(4))
    p = plan(flat_forecast(names, [0, 0, 32]), state, PolicyMemory(),
             Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
    assert len({x.node for x in p.preemptions}) == 2, p.notes


def _served_cluster(workloads_route=None):
    from tests.actuators.test_k8s_actuator import served
    from tests.actuators.test_k8s_kueue import API, TENANTS, FakeCluster

    c = FakeCluster()   # n1..n7, 8 GPUs each (n5 cordoned, n6 tainted, n7 NotReady)
    c.run("batch", "low-1", "n1", 8, "gpu-autoscaler-low")
    routes = c.routes()
    if workloads_route is not None:
        routes[("GET", API + r"/workloads")] = workloads_route
    api, _ = served(routes)
    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.config import KueueActuatorConfig

    return c, KueueActuator(api, KueueActuatorConfig(), TENANTS, dry_run=True), tuple(t.name for t in TENANTS)


def test_the_kueue_actuators_jobs_are_the_pods_and_the_workloads_kueue_may_admit():
    c, act, names = _served_cluster()
    c.workloads += [wl("gang", ns="serving"), wl("no-queue", ns="serving", verdict=inadmissible("LocalQueue x "
                                                                                             "doesn't exist"))]
    jobs = act.cluster_jobs(names)
    assert jobs.ids.tolist() == ["batch/low-1", "serving/workload/gang"]
    assert jobs.running.tolist() == [True, False] and jobs.nodes_asked.tolist() == [1, 2]
    # the estimator reads them by the same rule: the one Kueue will never admit has no estimate either
    assert act.queued_jobs(names).ids.tolist() == ["serving/workload/gang"]


def test_the_kueue_actuator_counts_a_requeued_workload_whose_pods_still_run_once_as_its_pods():
    """The actuator hands its pod read's owners to the Workloads' read (pod_owners): a Job's Workload requeued while
    its pods still run is those pods, not a second, waiting, 16 GPUs (mutation testing: owners not handed passed)."""
    c, act, names = _served_cluster()
    c.pods[-1]["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                  "uid": "job-1", "controller": True}]
    c.workloads.append(wl("requeued", ns="batch", owner="job-1"))
    assert act.cluster_jobs(names).ids.tolist() == ["batch/low-1"]

def test_workloads_kueue_does_not_serve_are_none_said_once_and_a_refused_list_fails_the_read(caplog):
    import pytest

    from daemon.actuators.k8s.kueue import QueueUnreadable

    _, act, names = _served_cluster((404, {"kind": "Status", "code": 404}))
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue")
    for _ in range(2):
        assert act.cluster_jobs(names).ids.tolist() == ["batch/low-1"]
    assert [x.getMessage() for x in caplog.records if x.name == "gpu_autoscaler.actuator.kueue"] == [
        "Kueue serves no Workloads (kueue.x-k8s.io/v1beta1 workloads: 404): the plan reads the pods only"]
    _, act, names = _served_cluster((503, {"kind": "Status", "code": 503}))
    with pytest.raises(QueueUnreadable, match="cannot list Kueue Workloads .*503"):
        act.cluster_jobs(names)


def test_beside_kueue_the_source_reads_the_jobs_from_the_kueue_actuator():
    from daemon.actuators.base import ListsQueuedJobs
    from daemon.service.wiring import jobs_lister

    class Pods:
        def cluster_jobs(self, tenants):
            return Jobs.empty()

        def lists_every_job(self):
            return False

    class Queue(Pods):
        def queued_jobs(self, tenants):
            return Jobs.empty()

        def queued_starts(self):
            return {}

    pods, queue = Pods(), Queue()
    assert isinstance(queue, ListsQueuedJobs)
    assert jobs_lister([pods, queue]) is queue and jobs_lister([pods]) is pods and jobs_lister([]) is None


def test_a_workload_whose_pods_no_node_takes_is_never_demand(caplog):
    """A podSet selecting a GPU model no node has, or a label no node has, starts nowhere (the pod view's never_starts
    over the nodes, as kube-scheduler filters the pods Kueue would make), nor one selecting a node hold whose taint it
    does not tolerate (another tenant's: Kueue adds both only on that tenant's hold flavor): said once; one selecting
    the nodes' model, or a hold it tolerates, is demand."""
    from kubernetes import client as k8s

    from daemon.actuators.k8s.view import never_starts

    def node(name):
        cap = {"nvidia.com/gpu": "8"}
        return k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.product": "A100"}),
                          spec=k8s.V1NodeSpec(taints=[]), status=k8s.V1NodeStatus(capacity=cap, allocatable=cap))

    def selecting(name, selector, tolerations=None):
        body = wl(name)
        body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = selector
        if tolerations:
            body["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = tolerations
        return body

    KEY = "gpu-autoscaler.io/hold"
    starts = never_starts([node("n1"), node("n2")], "nvidia.com/gpu", None, KEY)
    items = [selecting("h100", {"nvidia.com/gpu.product": "H100"}), selecting("zone", {"zone": "moon"}),
             selecting("a100", {"nvidia.com/gpu.product": "A100"}), selecting("other-hold", {KEY: "x"}),
             selecting("own-hold", {KEY: "x"}, [{"key": KEY, "operator": "Equal", "value": "x",
                                                 "effect": "NoSchedule"}]), wl("plain")]
    r = reader()
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        jobs = r.demand(items, ("team-a",), [8, 8], set(), now=NOW, starts=starts)
        assert jobs.ids.tolist() == ["ns-a/workload/a100", "ns-a/workload/own-hold", "ns-a/workload/plain"]
    tail = (": it can never be admitted, so it is no demand (no hold, no preemption, no aging for it) and has no "
            "start-time estimate")
    assert sorted(x.getMessage() for x in caplog.records) == [
        "Kueue Workload ns-a/h100 has pods (podSet main) that no node takes: selects nodes by "
        "nvidia.com/gpu.product=H100, which no node has" + tail,
        "Kueue Workload ns-a/other-hold has pods (podSet main) that no node takes: selects the node hold "
        f"{KEY}=x, whose taint ({KEY}=x:NoSchedule) it does not tolerate" + tail,
        "Kueue Workload ns-a/zone has pods (podSet main) that no node takes: selects nodes by zone=moon, which no "
        "node has" + tail]


# --- one rule for both reads: the plan's demand and the start-time estimate's queue


def test_a_workload_kueue_will_never_admit_is_neither_demand_nor_estimated_and_loses_its_estimate(caplog):
    """One never-admitted rule for the plan's read (cluster_jobs) and the estimate's (queued_jobs, listed afresh):
    a pod of 16 GPUs on 8-GPU nodes, 64 GPUs of the cluster's 56, a podSet selecting a label no node has, and a
    Workload Kueue found inadmissible are neither demand nor pending jobs of the estimate, and the estimate each
    carries is cleared; each is said once for both reads, cycle after cycle. Before, the estimate read every one but
    the inadmissible (main: that one too) as a pending job ahead of later work and left their estimates on them. One
    Kueue has not tried yet is estimated at once, and demand once Kueue has tried it."""
    from daemon.actuators.k8s.workloads import OURS, P50, P90, REASON

    c, act, names = _served_cluster()   # seven 8-GPU nodes: 56 GPUs

    def carrying(body):
        body["metadata"]["annotations"] = {P50: "2026-01-05T11:00:00Z", P90: "2026-01-05T12:00:00Z", REASON: "x"}
        return body

    zone = wl("zone", ns="serving")
    zone["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"zone": "moon"}
    c.workloads += [wl("gang", ns="serving"), carrying(wl("huge-pod", ns="serving", count=1, gpus="16")),
                    carrying(wl("past-cluster", ns="serving", count=8, gpus="8")), carrying(zone),
                    carrying(wl("no-queue", ns="serving", verdict=inadmissible("LocalQueue x doesn't exist"))),
                    wl("unseen", ns="serving", count=1, verdict=None)]
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
    for _ in range(2):
        jobs = act.cluster_jobs(names)
        assert jobs.ids[~jobs.running].tolist() == ["serving/workload/gang"]
        assert act.queued_jobs(names).ids.tolist() == ["serving/workload/gang", "serving/workload/unseen"]
        assert sorted(act.workloads.changes([], NOW.timestamp())) == sorted(
            ("serving", n, dict.fromkeys(OURS)) for n in ("huge-pod", "past-cluster", "zone", "no-queue"))
    said = [x.getMessage().split(":")[0] for x in caplog.records if x.name.endswith(".workloads")]
    assert sorted(said) == [
        "Kueue Workload serving/huge-pod asks for pods of 16 GPUs, more than any node has (8)",
        "Kueue Workload serving/no-queue is inadmissible to Kueue (LocalQueue x doesn't exist)",
        "Kueue Workload serving/past-cluster asks for 64 GPUs in all, more than the cluster has (56)",
        "Kueue Workload serving/zone has pods (podSet main) that no node takes"]


def test_the_plan_reads_a_workloads_tier_from_its_pod_priority_class_only():
    """A normal tenant's Workload on a WorkloadPriorityClass named gpu-autoscaler-high was high-tier demand (the
    plan cleared and held nodes for it ahead of every other tenant's work); the plan now reads the tier as the
    estimate does, from the pod PriorityClass only."""
    forged = wl("jump")
    forged["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    jobs = reader().demand([forged, wl("real")], ("team-a",), SIZES, set(), now=NOW)
    assert jobs.priority.tolist() == [PRIORITY["normal"], PRIORITY["high"]]


def test_both_bounds_keep_the_workloads_kueue_serves_first():
    """The plan's bound (max_workloads_per_tenant) and the estimate's (max_queued_per_namespace) are two sizes of
    one choice: those Kueue serves first, the higher priority, then the older. The estimate's kept the longest
    waiting whatever their priority (the Workload Kueue admits next had no estimate)."""
    r = Workloads(None, {"ns-a": "team-a"}, "nvidia.com/gpu", "gpuas-low", 2, 2)
    items = [wl("old", count=1, created="2026-01-05T09:00:00Z"), wl("mid", count=1, created="2026-01-05T09:30:00Z"),
             wl("urgent", count=1, priority=100, created="2026-01-05T09:55:00Z")]
    want = ["ns-a/workload/old", "ns-a/workload/urgent"]
    assert r.demand(items, ("team-a",), SIZES, set(), now=NOW).ids.tolist() == want
    assert r.jobs(items, ("team-a",), now=NOW).ids.tolist() == want


def test_the_plans_read_takes_the_workloads_a_page_at_a_time():
    """The plan's read held every page of every namespace before reading one (Workloads.list returned them all);
    it takes them a page at a time as the estimate's does, each page let go before the next is asked for, and a
    page refused midway fails the read in one line (the last plan kept)."""
    import pytest

    from daemon.actuators.k8s.kueue import QueueUnreadable
    from tests.actuators.test_k8s_workloads import Paged

    _, act, names = _served_cluster()
    act.workloads.custom = paged = Paged("serving")
    with pytest.raises(QueueUnreadable, match="410 Gone"):
        act.cluster_jobs(names)
    assert paged.pages == [None, "1", "2", "3"]
    assert paged.alive[1:] == [1, 1, 1]   # the Workload being read, not the pages before (old: 50, 100, 150)


H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


def typed_reader():
    from daemon.config.fleet import FleetConfig
    fleet = FleetConfig(types=["h100", "a100"], aliases={H100: "h100", A100: "a100"})
    return Workloads(None, {"ns-a": "team-a", "ns-b": "team-b"}, "nvidia.com/gpu", "gpuas-low",
                     resolver=fleet.resolver())


def _select(body, selector=None, affinity=None, podset=0):
    spec = body["spec"]["podSets"][podset]["template"]["spec"]
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": affinity}]}]}}}
    return body


def test_a_waiting_workloads_gang_accepts_the_gpu_types_its_podsets_select():
    """On a mixed fleet a waiting Workload is planned on the types its pods can run on (its podSets' nodeSelector or
    required node affinity on the product label, as Kueue picks a flavor by its nodeLabels): it was read as any type.
    A launcher naming no type and workers naming H100: the gang is H100's; podSets naming no common type: those of
    the one asking the most GPUs. A one-model cluster reads no types."""
    r = typed_reader()
    two = wl("two-sets")
    two["spec"]["podSets"].insert(0, {"name": "launcher", "count": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}})
    split = wl("split", count=1)
    split["spec"]["podSets"].append({"name": "big", "count": 2, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}})
    items = [_select(wl("h100"), {"nvidia.com/gpu.product": H100}), wl("any"),
             _select(wl("either"), affinity=[A100, H100]), _select(two, {"nvidia.com/gpu.product": H100}, podset=1),
             _select(_select(split, {"nvidia.com/gpu.product": A100}), {"nvidia.com/gpu.product": H100}, podset=1)]
    jobs = r.demand(items, ("team-a",), [8] * 6, set(), now=NOW)
    assert dict(zip(jobs.ids.tolist(), jobs.accepts.tolist())) == {
        "ns-a/workload/h100": ("h100",), "ns-a/workload/any": (), "ns-a/workload/either": ("a100", "h100"),
        "ns-a/workload/two-sets": ("h100",), "ns-a/workload/split": ("h100",)}
    assert r.jobs(items, ("team-a",), now=NOW).accepts.tolist()[0] == ("h100",)   # the estimate reads the same
    assert reader().demand(items, ("team-a",), [8] * 6, set(), now=NOW).accepts is None


def test_the_plan_makes_room_for_an_h100_gang_on_h100_nodes_only():
    """Three A100 nodes and two H100 nodes full of low pods (the A100 ones younger: cheaper to preempt), a high-tier
    2 x 8 gang asking H100 waits: the plan preempts on the two H100 nodes. Read as any type, it cleared A100 nodes,
    where its pods never start."""
    r = typed_reader()
    gang = r.demand([_select(wl("gang"), {"nvidia.com/gpu.product": H100})], ("team-a", "team-b", "batch"),
                    [8] * 5, set(), now=NOW)
    low = dataclasses.replace(_low_pods(2, 5), runtime_s=np.array([60.0, 60.0, 60.0, 7200.0, 7200.0]))
    jobs = Jobs.concat([low, gang])
    nodes = dataclasses.replace(_nodes(5), gpu_type=np.array(["a100", "a100", "a100", "h100", "h100"], dtype=object))
    names = ("team-a", "team-b", "batch")
    state = ClusterState(at=AT, tenants=names, tiers=("high", "normal", "low"), capacity=40,
                         used=np.array([0.0, 0.0, 40.0]), pending=np.array([16.0, 0.0, 0.0]), jobs=jobs, nodes=nodes)
    p = plan(flat_forecast(names, [0, 0, 40]), state, PolicyMemory(),
             Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
    assert sorted(x.node for x in p.preemptions) == ["n3", "n4"], (p.preemptions, p.notes)


class _Queues:
    """Kueue's queue objects as the API server lists them (list_cluster_custom_object), or a refusal."""

    def __init__(self, flavors: dict[str, dict | None], queues: dict[str, list[str]], fail: bool = False):
        self.fail, self.lists = fail, 0
        self.items = {
            "resourceflavors": [{"metadata": {"name": f}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": p}}
                                 if p else {}} for f, p in flavors.items()],
            "clusterqueues": [{"metadata": {"name": q}, "spec": {"resourceGroups": [
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": f} for f in fl]}]}}
                for q, fl in queues.items()],
            "localqueues": [{"metadata": {"name": q, "namespace": "ns-a"}, "spec": {"clusterQueue": q}}
                            for q in queues]}

    def list_cluster_custom_object(self, group, version, plural, **kw):
        from kubernetes.client.exceptions import ApiException
        self.lists += 1
        if self.fail:
            raise ApiException(status=403, reason="Forbidden")
        return {"items": self.items[plural]}


def test_a_waiting_workload_is_narrowed_to_the_types_its_queues_flavors_select(caplog):
    """A site's queue whose only GPU flavor is H100's admits a Workload naming no type on H100 only; the daemon's own
    queues (a flavor per type) and a flavor without a product label narrow nothing; pods selecting a type the queue
    lacks keep their own. The queues are read once per read of the Workloads; a refused read narrows nothing, said
    once."""
    from daemon.config.fleet import FleetConfig
    fleet = FleetConfig(types=["h100", "a100"], aliases={H100: "h100", A100: "a100"})
    api = _Queues({"site-h100": H100, "t.h100": H100, "t.a100": A100, "plain": None},
                  {"site": ["site-h100"], "daemon": ["t.h100", "t.a100"], "any": ["plain"]})
    r = Workloads(api, {"ns-a": "team-a"}, "nvidia.com/gpu", "gpuas-low", resolver=fleet.resolver())

    def queued(name, queue, selector=None):
        body = _select(wl(name), {"nvidia.com/gpu.product": selector} if selector else None)
        body["spec"]["queueName"] = queue
        return body
    items = [queued("site", "site"), queued("daemon", "daemon"), queued("any", "any"), queued("gone", "no-such"),
             queued("a100-in-site", "site", A100)]
    jobs = r.demand(items, ("team-a",), [8] * 6, set(), now=NOW)
    assert dict(zip(jobs.ids.tolist(), jobs.accepts.tolist())) == {
        "ns-a/workload/site": ("h100",), "ns-a/workload/daemon": (), "ns-a/workload/any": (),
        "ns-a/workload/gone": (), "ns-a/workload/a100-in-site": ("a100",)}
    assert api.lists == 3                                            # one read of the three kinds
    api.fail = True
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        jobs = r.demand(items, ("team-a",), [8] * 6, set(), now=NOW)
        assert jobs.accepts.tolist()[0] == ()
    assert [x.getMessage() for x in caplog.records] == [
        "Kueue queues unread (kueue.x-k8s.io/v1beta1: 403 Forbidden): the waiting Workloads' GPU types are read from "
        "their pods' selectors only, not from their queues' flavors"]
