"""Where the GPUs are on Kubernetes: pods as Jobs and nodes as Nodes, read through the official client's real
HTTP requests against the capture server (no API server here), and the plan they give: placement-aware."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from daemon.actuators.base import ListsClusterJobs, ListsClusterNodes
from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.objects import POOL_VALUE, name_part
from daemon.config import Config, KubernetesActuatorConfig, KueueActuatorConfig
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import CLOSED, HELD_BY_POOL, PRIORITY, UNHELD, ClusterState
from tests.actuators.test_k8s_actuator import _capture_servers, served  # noqa: F401 (autouse fixture)
from tests.actuators.test_k8s_kueue import KEY, TENANTS, Clock, FakeCluster

NAMES = tuple(t.name for t in TENANTS)  # team-high (serving), team-a (research), batchy (batch), ops (kube-system)
NOW = dt.datetime.now(dt.timezone.utc)


@pytest.fixture(autouse=True)
def _now():
    """Pod times are written relative to the test's start (the suite may import this module minutes earlier)."""
    global NOW
    NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def ago(s):
    return (NOW - dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def since_start():
    return (dt.datetime.now(dt.timezone.utc) - NOW).total_seconds()


def started(c, seconds_ago):
    c.pods[-1]["status"]["startTime"] = ago(seconds_ago)


def view(nodes):
    return {str(n): (int(g), int(f), int(d), int(h))
            for n, g, f, d, h in zip(nodes.names, nodes.gpus, nodes.free, nodes.draining, nodes.held_by)}


def pod_routes(c):
    """The pod reads and evictions an eviction sends, answered from the fake cluster's pods."""
    def get(path, body):
        ns, name = path.split("/")[4], path.split("/")[6]
        p = next((p for p in c.pods if p["metadata"]["namespace"] == ns and p["metadata"]["name"] == name), None)
        return (200, p) if p else (404, {"kind": "Status", "code": 404})
    return {("GET", r"/api/v1/namespaces/[^/]+/pods/[^/]+"): get,
            ("POST", r"/api/v1/namespaces/[^/]+/pods/[^/]+/eviction"): (201, {})}


def test_pods_are_jobs_and_nodes_are_where_their_gpus_are():
    c = FakeCluster()   # n1..n7, 8 GPUs; n5 cordoned, n6 tainted by someone else, n7 NotReady
    c.run("batch", "low-1", "n1", 4, "gpu-autoscaler-low")
    started(c, 300)
    c.run("batch", "low-2", "n1", 2, "gpu-autoscaler-low")
    c.pods[-1]["metadata"]["deletionTimestamp"] = ago(5)       # being evicted: draining, not a job
    c.run("kube-system", "ops-1", "n2", 1)                      # not a tenant's: not a job, but its GPU is used
    c.run("serving", "infer-1", "n3", 8, "gpu-autoscaler-high")
    started(c, 60)
    c.run("research", "prep", "n4", 0)                          # no GPU: not a job
    c.run("research", "done", "n4", 8)
    c.pods[-1]["status"]["phase"] = "Succeeded"                 # ended: neither
    c.pods.append({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "wait-1", "namespace": "serving", "creationTimestamp": ago(40)},
                   "spec": {"priorityClassName": "gpu-autoscaler-high", "containers": [{"name": "c", "resources": {
                       "limits": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Pending"}})
    c.pods.append({"apiVersion": "v1", "kind": "Pod",                # gated: not placed, so not demand now
                   "metadata": {"name": "gated-1", "namespace": "serving", "creationTimestamp": ago(40)},
                   "spec": {"priorityClassName": "gpu-autoscaler-high", "schedulingGates": [{"name": "x.io/wait"}],
                            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                   "status": {"phase": "Pending"}})
    c.run("research", "pulling", "n4", 2)                       # bound, still Pending (its image): holds its GPUs
    c.pods[-1]["status"]["phase"] = "Pending"
    c.add_node("n8")
    c.nodes["n8"]["metadata"]["labels"][KEY] = name_part("team-high")
    c.nodes["n8"]["spec"]["taints"] = [{"key": KEY, "value": name_part("team-high"), "effect": "NoSchedule"}]
    c.add_node("n9")
    c.nodes["n9"]["metadata"]["labels"][KEY] = POOL_VALUE
    c.add_node("n10")
    c.nodes["n10"]["metadata"]["labels"][KEY] = "someone-else"
    api, cap = served(c.routes())
    k = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=True, hold_label=KEY)
    assert isinstance(k, ListsClusterJobs) and isinstance(k, ListsClusterNodes)

    jobs = k.cluster_jobs(NAMES)
    got = {i: (NAMES[t], g, p, bool(r), n) for i, t, g, p, r, n in
           zip(jobs.ids, jobs.tenant, jobs.gpus, jobs.priority, jobs.running, jobs.node)}
    assert got == {"batch/low-1": ("batchy", 4, PRIORITY["low"], True, "n1"),
                   "serving/infer-1": ("team-high", 8, PRIORITY["high"], True, "n3"),
                   "serving/wait-1": ("team-high", 8, PRIORITY["high"], False, ""),
                   "research/pulling": ("team-a", 2, PRIORITY["normal"], True, "n4")}
    runtime = dict(zip(jobs.ids, jobs.runtime_s))
    wait = dict(zip(jobs.ids, jobs.wait_s))
    late = since_start() + 1
    assert 300 <= runtime["batch/low-1"] <= 300 + late and 40 <= wait["serving/wait-1"] <= 40 + late
    lists = [r for r in cap.sent if r["path"] == "/api/v1/pods"]
    assert lists and "fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed" in lists[-1]["query"]

    v = view(k.cluster_nodes(NAMES))
    assert v["n1"] == (8, 2, 2, UNHELD)          # 4 used, 2 draining (an eviction's grace period), 2 free
    assert v["n2"] == (8, 7, 0, UNHELD)          # a pod of no tenant still uses its GPU (PreferNoSchedule: usable)
    assert v["n3"] == (8, 0, 0, UNHELD) and v["n4"] == (8, 6, 0, UNHELD)   # an ended pod uses nothing; a bound one does
    assert v["n5"] == v["n6"] == v["n7"] == (0, 0, 0, CLOSED)             # cordoned, foreign taint, NotReady
    assert v["n8"] == (8, 8, 0, NAMES.index("team-high"))                 # our hold (its taint is ours)
    assert v["n9"] == (8, 8, 0, HELD_BY_POOL) and v["n10"][3] == CLOSED
    # without the hold label (the plain mode holds nothing), a node carrying that taint is someone else's
    plain = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=True)
    assert view(plain.cluster_nodes(NAMES))["n8"] == (0, 0, 0, CLOSED)


def test_kueue_plan_clears_one_whole_node_for_an_8_gpu_job_and_holds_it():
    """Four usable 8-GPU nodes, each with an old and a young 4-GPU low pod; a high-tier 8-GPU pod waits. The
    plan from what the API shows preempts both pods of ONE node (counting GPUs would take the two youngest,
    on two nodes), and the Kueue actuator holds that node and evicts exactly them."""
    c = FakeCluster()
    for i, n in enumerate(("n1", "n2", "n3", "n4")):
        c.run("batch", f"old-{n}", n, 4, "gpu-autoscaler-low")
        started(c, 3600 + 60 * i)
        c.run("batch", f"young-{n}", n, 4, "gpu-autoscaler-low")
        started(c, 60 + 5 * i)
    c.pods.append({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "big", "namespace": "serving", "creationTimestamp": ago(30)},
                   "spec": {"priorityClassName": "gpu-autoscaler-high", "containers": [{"name": "c", "resources": {
                       "requests": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Pending"}})
    api, cap = served(c.routes() | pod_routes(c))
    act = KueueActuator(api, KueueActuatorConfig(), TENANTS, dry_run=False, clock=Clock())
    jobs, nodes = act.cluster_jobs(NAMES), act.cluster_nodes(NAMES)
    p = _plan_on(jobs, nodes)
    assert not p.stale, p.notes
    cleared = {q.node for q in p.preemptions}
    assert len(cleared) == 1 and sum(q.gpus for q in p.preemptions) == 8, (p.preemptions, p.notes)
    (node,) = cleared
    assert {q.job_id for q in p.preemptions} == {f"batch/old-{node}", f"batch/young-{node}"}
    rep = act.apply(p)
    assert rep.ok, rep.errors
    assert c.held() == {node: name_part("team-high")} or c.held() == {node: POOL_VALUE}
    evicted = sorted(r["path"].split("/")[6] for r in cap.sent if r["path"].endswith("/eviction"))
    assert evicted == sorted([f"old-{node}", f"young-{node}"])
    # and read back: the cleared node is held for the high tier
    assert act.cluster_nodes(NAMES).held_by[list(nodes.names).index(node)] in (NAMES.index("team-high"),
                                                                               HELD_BY_POOL)


def _plan_on(jobs, nodes):
    """The policy's plan on the cluster as the view read it (no forecast, no headroom, the whole budget)."""
    used = np.bincount(jobs.tenant[jobs.running], weights=jobs.gpus[jobs.running], minlength=len(NAMES))
    pending = np.bincount(jobs.tenant[~jobs.running], weights=jobs.gpus[~jobs.running], minlength=len(NAMES))
    state = ClusterState(at=pd.Timestamp(NOW), tenants=NAMES, tiers=tuple(t.tier for t in TENANTS),
                         capacity=int(nodes.gpus.sum()), used=used, pending=pending, jobs=jobs, nodes=nodes)
    cfg = Config(tenants=[t.model_dump() for t in TENANTS], policy={"headroom": 0.0, "preempt_budget_share": 1.0})
    return plan(None, state, PolicyMemory(), cfg)


def ahead(s):
    return (NOW + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_pod_deleted_with_a_long_grace_period_still_uses_its_gpus():
    """A pod being deleted is due to be gone at its deletionTimestamp, which the apiserver sets to the delete's time
    plus the deleter's grace period (the real apiserver, a tenant's delete with grace_period_seconds=86400: a day
    ahead, deletionGracePeriodSeconds 86400); the kubelet lets it run until then. Its GPUs read as draining, and
    preemption counts draining GPUs as room (free or draining first, no preemption): a low tenant deleting its own
    8-GPU pod with a day's grace kept a waiting high-tier 8-GPU job from any preemption for that day. Now a pod due
    later than the daemon's own evictions' grace (actuators.kubernetes.grace_period_s) still uses its GPUs and the
    plan preempts a whole node for the job; one due within it drains as before."""
    c = FakeCluster()   # n1..n4 usable
    c.run("batch", "slow", "n1", 8, "gpu-autoscaler-low")
    started(c, 3600)
    c.pods[-1]["metadata"]["deletionTimestamp"] = ahead(86400)
    c.run("batch", "soon", "n2", 4, "gpu-autoscaler-low")
    c.pods[-1]["metadata"]["deletionTimestamp"] = ahead(20)      # the default 30 s grace, 10 s in
    c.run("batch", "half", "n2", 4, "gpu-autoscaler-low")
    started(c, 600)
    for n in ("n3", "n4"):
        c.run("batch", f"busy-{n}", n, 8, "gpu-autoscaler-low")
        started(c, 600)
    c.pods.append({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "big", "namespace": "serving", "creationTimestamp": ago(30)},
                   "spec": {"priorityClassName": "gpu-autoscaler-high", "containers": [{"name": "c", "resources": {
                       "requests": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Pending"}})
    api, _ = served(c.routes())
    k = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=True, hold_label=KEY)
    jobs, nodes = k.cluster_jobs(NAMES), k.cluster_nodes(NAMES)
    v = view(nodes)
    assert v["n1"] == (8, 0, 0, UNHELD) and v["n2"] == (8, 0, 4, UNHELD), v
    p = _plan_on(jobs, nodes)
    assert not p.stale, p.notes
    assert {q.job_id for q in p.preemptions} == {"batch/half"}, (p.preemptions, p.notes)
