"""What the daemon must never evict, and what it may, on the real API server (daemon/actuators/k8s/actuator.py,
objects.py: evictable, holds_gpus). A real DaemonSet's pod (the DaemonSet controller makes it, kwok runs it) and a
mirror pod (the ``kubernetes.io/config.mirror`` annotation and the Node as its owner, as the kubelet makes it; the
admin may create one) are never evicted by the preemption (apply), failover (jobs_on_node, requeue) or health
(reclaim) paths, nor is a pod outside the tenants' namespaces, by the apiserver's own count of eviction requests.
A pod bound to a node and still Pending (its node's kubelet never started it: a node kwok does not manage) holds
its GPUs there, so a preemption evicts it; an unbound Pending pod holds nothing and is skipped. The Eviction body
is pinned in tests/actuators/test_k8s_actuator.py."""

import ssl

import httpx
import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import KubernetesActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.support.k8s_cluster import KWOK_NODE, gpu_pod, pod_running, wait_unschedulable
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

LOW = "gpu-autoscaler-low"
MIRROR = "kubernetes.io/config.mirror"


def _plan(preemptions=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.9, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=tuple(preemptions), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def _evictions(kube) -> float:
    """Eviction requests the apiserver has served, any answer, by its own request counter (/metrics)."""
    tls = ssl.create_default_context(cafile=str(kube.tmp / "ca.crt"))
    tls.load_cert_chain(str(kube.tmp / "admin.crt"), str(kube.tmp / "admin.key"))
    text = httpx.get(f"{kube.server}/metrics", verify=tls, timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_request_total{") and 'subresource="eviction"' in line)


def _actuator(kube, ns):
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace=ns),
               TenantConfig(name="ops", tier="low", k8s_namespace="kube-system")]  # kube-*: never a tenant's
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False)
    rep = act.apply(_plan())                                             # the PriorityClasses the pods name
    assert rep.ok, rep.errors
    return act


def test_a_daemonsets_pod_a_mirror_pod_and_a_foreign_pod_are_never_evicted_by_preemption_failover_or_health(kube):
    core, apps = k8s.CoreV1Api(kube.api()), k8s.AppsV1Api(kube.api())
    ns = kube.namespace("ds")
    node = kube.gpu_node(f"{ns}-n1", "a100", gpus=8)
    wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
    act = _actuator(kube, ns)
    on = {"kubernetes.io/hostname": node}
    # a real DaemonSet, on this test's node only; its pod is in the preemptible class, so only its owner protects it
    spec = gpu_pod(ns, "x", 1, LOW, on)["spec"]
    apps.create_namespaced_daemon_set(ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dcgm"},
        "spec": {"selector": {"matchLabels": {"app": "dcgm"}},
                 "template": {"metadata": {"labels": {"app": "dcgm"}}, "spec": spec}}})

    def ds_pod():
        pods = core.list_namespaced_pod(ns, label_selector="app=dcgm").items
        return pods[0].metadata.name if len(pods) == 1 and pods[0].status.phase == "Running" else None
    wait_for(ds_pod, timeout=60, what="the DaemonSet's pod Running")
    ds = ds_pod()
    assert core.read_namespaced_pod(ds, ns).metadata.owner_references[0].kind == "DaemonSet"
    # a mirror pod as the kubelet makes it for a static pod: the annotation, bound, owned by its Node
    uid = core.read_node(node).metadata.uid
    mirror = gpu_pod(ns, f"static-{node}", 1, LOW)
    mirror["metadata"]["annotations"] = {MIRROR: "0123abcd"}
    mirror["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
                                              "controller": True}]
    mirror["spec"]["nodeName"] = node
    core.create_namespaced_pod(ns, mirror)
    static = mirror["metadata"]["name"]
    wait_for(lambda: pod_running(core, ns, static), timeout=60, what="the mirror pod Running")
    assert core.read_namespaced_pod(static, ns).metadata.annotations[MIRROR] == "0123abcd"
    core.create_namespaced_pod(ns, gpu_pod(ns, "train", 4, LOW, on))     # a tenant's job beside them
    wait_for(lambda: pod_running(core, ns, "train"), timeout=60, what="train Running")
    keep = [f"{ns}/{ds}", f"{ns}/{static}"]
    other = kube.namespace("other")                                      # no configured tenant's
    core.create_namespaced_pod(other, gpu_pod(other, "x", 1, LOW, on))
    wait_for(lambda: pod_running(core, other, "x"), timeout=60, what="other/x Running")
    before = _evictions(kube)

    # a pod outside the tenants' namespaces: refused, said so
    rep = act.apply(_plan([Preemption(f"{other}/x", "team-low", 1, node, "peak ahead"),
                           Preemption("kube-system/x", "ops", 1, node, "peak ahead")]))
    assert rep.errors == [f"refused to evict {other}/x: namespace {other!r} is not a tenant's",
                          "refused to evict kube-system/x: namespace 'kube-system' is not a tenant's"], rep

    # failover: the node's jobs are the tenant's pod only, and a requeue naming the others evicts nothing
    assert act.jobs_on_node(node) == [(f"{ns}/train", "team-low")]
    rep = act.requeue(keep, "node down")
    assert rep.ok and rep.actions == [f"skip {j}: DaemonSet or mirror pod" for j in keep], rep
    # preemption: a plan naming them
    rep = act.apply(_plan([Preemption(j, "team-low", 1, node, "peak ahead") for j in keep]))
    assert rep.ok and [a for a in rep.actions if a.startswith("skip")] == \
        [f"skip {j}: DaemonSet or mirror pod" for j in keep], rep
    # health: a reclaim naming them
    rep = act.reclaim(keep, "idle 60 min")
    assert rep.ok and rep.actions == [f"skip {j}: DaemonSet or mirror pod" for j in keep], rep
    assert _evictions(kube) == before                                     # no eviction request ever sent
    for n, name in ((ns, ds), (ns, static), (other, "x")):
        live = core.read_namespaced_pod(name, n)
        assert live.status.phase == "Running" and live.metadata.deletion_timestamp is None
    # the same paths do evict the tenant's pod (the test can see an eviction)
    rep = act.requeue([f"{ns}/train"], "node down")
    assert rep.actions == [f"evict {ns}/train (grace 5 s)"] and _evictions(kube) == before + 1, rep


def test_a_bound_pod_still_pending_is_evicted_for_room_and_an_unbound_one_is_not(kube):
    """The policy reads a bound pod as running on its node (view.py): it holds its GPUs while it pulls its image, so
    the plan may take it for room and the eviction is sent; a pod no node has taken holds nothing and is skipped."""
    core = k8s.CoreV1Api(kube.api())
    ns = kube.namespace("pend")
    # a node kwok does not manage: what is bound there is never started, as behind a stuck image pull
    node = f"{ns}-n1"
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": node, "annotations": {KWOK_NODE: "unmanaged"}}})
    kube.made["nodes"].append(node)
    act = _actuator(kube, ns)
    pulling = gpu_pod(ns, "pulling", 8, LOW)
    pulling["spec"]["nodeName"] = node
    core.create_namespaced_pod(ns, pulling)
    # an unbound one: no node has the label it asks for, so the scheduler leaves it Pending
    core.create_namespaced_pod(ns, gpu_pod(ns, "waiting", 8, LOW, {"kubernetes.io/hostname": f"{ns}-none"}))
    wait_unschedulable(core, ns, "waiting")

    def pending(name, bound):
        p = core.read_namespaced_pod(name, ns)
        return p.status.phase == "Pending" and bool(p.spec.node_name) == bound
    assert pending("pulling", True) and pending("waiting", False)
    before = _evictions(kube)
    rep = act.apply(_plan([Preemption(f"{ns}/pulling", "team-low", 8, node, "peak ahead"),
                           Preemption(f"{ns}/waiting", "team-low", 8, "", "peak ahead")]))
    assert rep.ok, rep.errors
    assert f"evict {ns}/pulling (grace 5 s)" in rep.actions and f"skip {ns}/waiting: Pending" in rep.actions, rep
    assert _evictions(kube) == before + 1                                 # the bound pod's, and that one only
    live = core.read_namespaced_pod("pulling", ns)                        # evicted with its grace period
    assert live.metadata.deletion_timestamp is not None and any(
        c.type == "DisruptionTarget" and c.reason == "EvictionByEvictionAPI" for c in live.status.conditions or [])
    live = core.read_namespaced_pod("waiting", ns)
    assert pending("waiting", False) and live.metadata.deletion_timestamp is None
