"""Node failover on the real control plane (daemon/failover/handler.py through daemon/actuators/k8s/actuator.py): a
KWOK node goes NotReady (kwok stops managing it and its Ready condition is set Unknown, as the node controller
does for a kubelet that stopped reporting), the webhook gets the ``GPUNodeDown`` post that the shipped rule
(deploy/prometheus/gpu-autoscaler-rules.yml) and route (deploy/alertmanager/gpu-autoscaler.yml) send, and within
the 30 s of the seed the daemon has evicted the node's pods through the Eviction API, their Job's replacement runs
on a healthy node, the node is cordoned and the tenant is told by an Event in its namespace. The daemon is a real
one (its HTTP server, its failover worker) on the embedded simulator with the Kubernetes actuator on; the
webhook's own checks are tested in tests/failover. Before it fails, the same alert for the node still Ready moves
nothing (failover.confirm_with_scheduler)."""

import time

import httpx
import pytest
from kubernetes import client as k8s

from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import TOKEN, alert, payload, sim_cfg
from tests.support.k8s_cluster import KWOK_NODE, gpu_pod
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

SEED_S = 30.0


def _job(ns, name, node_selector):
    spec = gpu_pod(ns, "x", 4, "gpu-autoscaler-low", node_selector)["spec"]
    spec["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 3, "template": {"metadata": {"labels": {"job": name}}, "spec": spec}}}


def test_a_notready_node_reported_by_the_alert_gets_its_pods_evicted_requeued_and_the_tenant_told_within_30s(
        kube, tmp_path):
    core, batch = k8s.CoreV1Api(kube.api()), k8s.BatchV1Api(kube.api())
    ns = kube.namespace("fo")
    pool = {"gpu-pool": ns}                                 # the test's two nodes: the pods may run on either
    bad, good = (kube.gpu_node(f"{ns}-{s}", "a100", gpus=8, labels=pool) for s in ("bad", "good"))
    wait_for(lambda: kube.node_ready(bad) and kube.node_ready(good), timeout=60, what="KWOK nodes Ready")
    core.patch_node(good, {"spec": {"unschedulable": True}})            # both pods start on `bad`
    port = free_port()
    cfg = sim_cfg(tmp_path, port)
    cfg = type(cfg).model_validate({
        **cfg.model_dump(mode="json", exclude_unset=True), "cycle": {"interval_s": 3600},
        "tenants": [{"name": "team-low", "tier": "low", "k8s_namespace": ns}],
        "actuators": {"enabled": ["kubernetes"], "dry_run": False,
                      "kubernetes": {"kubeconfig": str(kube.admin_kubeconfig), "grace_period_s": 30}}})
    d = Daemon(build_runtime(cfg))
    d.start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).status_code == 200, timeout=60, what="daemon")
        # the daemon's first cycle made the PriorityClasses the pods name
        wait_for(lambda: k8s.SchedulingV1Api(kube.api()).read_priority_class("gpu-autoscaler-low"), timeout=60,
                 what="the PriorityClasses")
        for name in ("train-a", "train-b"):
            batch.create_namespaced_job(ns, _job(ns, name, pool))

        def running_on(node):
            return sorted(p.metadata.labels["job"] for p in core.list_namespaced_pod(ns).items
                          if p.spec.node_name == node and p.status.phase == "Running"
                          and p.metadata.deletion_timestamp is None)
        wait_for(lambda: running_on(bad) == ["train-a", "train-b"], timeout=60, what="both pods Running on bad")
        first = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
        core.patch_node(good, {"spec": {"unschedulable": False}})
        auth = {"Authorization": f"Bearer {TOKEN}"}
        # an alert for a node the API still shows Ready (failover.confirm_with_scheduler): nothing moves
        a = alert("GPUNodeDown", node=bad, severity="critical", gpu_autoscaler="node")
        r = httpx.post(f"{base}/alerts", json=payload([a]), headers=auth, timeout=30)
        act = r.json()["actions"][0]
        assert act["requeued"] == [] and f"the scheduler does not see {bad} as failed (kubernetes: healthy)" in \
            act["skipped"], act
        assert [e["node"] for e in d.runtime.store.events("node_down_unconfirmed")] == [bad]
        assert running_on(bad) == ["train-a", "train-b"] and not core.read_node(bad).spec.unschedulable

        # the node fails: kwok no longer keeps it Ready, and its Ready condition goes Unknown, as the node
        # controller sets it for a kubelet that stopped posting
        t0 = time.monotonic()
        core.patch_node(bad, {"metadata": {"annotations": {KWOK_NODE: "failed"}}})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_node_status(bad, {"status": {"conditions": [{
            "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now,
            "lastTransitionTime": now}]}})
        wait_for(lambda: not kube.node_ready(bad), timeout=30, what="bad NotReady")
        # the shipped route's post: alertname and the node label the rule's label_replace gives
        a = alert("GPUNodeDown", node=bad, severity="critical", gpu_autoscaler="node")
        r = httpx.post(f"{base}/alerts", json=payload([a]), headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        act = r.json()["actions"][0]
        assert act["action"] == "node_down" and sorted(act["requeued"]) == sorted(f"{ns}/{p}" for p in first), act
        assert act["errors"] == []

        def evicted():
            pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
            return all(n not in pods or (pods[n].metadata.deletion_timestamp is not None and any(
                c.type == "DisruptionTarget" and c.reason == "EvictionByEvictionAPI"
                for c in pods[n].status.conditions or [])) for n in first)
        wait_for(evicted, timeout=SEED_S, what="the failed node's pods evicted")

        def told():
            return [e for e in core.list_namespaced_event(ns).items
                    if e.source.component == "gpu-autoscaler" and e.reason == "NodeFailed"]
        wait_for(told, timeout=SEED_S, what="the tenant told")
        assert bad in told()[0].message and "2 jobs" in told()[0].message
        wait_for(lambda: running_on(good) == ["train-a", "train-b"], timeout=SEED_S,
                 what="both Jobs' replacements Running on the healthy node")
        took = time.monotonic() - t0
        assert took < SEED_S, f"the failed node's jobs moved in {took:.1f} s, over the seed's {SEED_S:g} s"
        assert core.read_node(bad).spec.unschedulable is True                # fenced: nothing lands there again
    finally:
        d.stop()
