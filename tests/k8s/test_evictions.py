"""Preemption by eviction on the real API server (daemon/actuators/k8s/actuator.py): a pod under a
PodDisruptionBudget with no disruption left is refused (429) and keeps running and its GPUs are still used in the
next cycle's view; an evicted pod goes (kwok ends it) and its GPUs are free on the node in the next cycle. A
refused eviction is sent again once a cycle, never in a tight loop (the apiserver's own request count). The
request shapes are pinned against recorded requests in tests/actuators/test_k8s_actuator.py."""

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import KubernetesActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.support.k8s_cluster import gpu_pod, pod_gone, pod_running
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")


def _plan(preemptions=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.9, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=tuple(preemptions), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def test_a_pdb_refuses_an_eviction_429_its_gpus_stay_used_and_an_evicted_pods_gpus_are_free_next_cycle(kube):
    core, policy = k8s.CoreV1Api(kube.api()), k8s.PolicyV1Api(kube.api())
    ns = kube.namespace("batch")
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace=ns)]
    node = kube.gpu_node(f"{ns}-n1", "a100", gpus=8)
    try:
        wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
        act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False)
        rep = act.apply(_plan())                                        # the PriorityClasses the pods name
        assert rep.ok, rep.errors
        on = {"kubernetes.io/hostname": node}
        for name, app in (("guarded", "serve-cache"), ("plain", "train")):
            core.create_namespaced_pod(ns, gpu_pod(ns, name, 4, "gpu-autoscaler-low", on, labels={"app": app}))
        for name in ("guarded", "plain"):
            wait_for(lambda n=name: pod_running(core, ns, n), timeout=60, what=f"{name} Running")
        policy.create_namespaced_pod_disruption_budget(ns, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "cache"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve-cache"}}}})

        def pdb_counted():
            st = policy.read_namespaced_pod_disruption_budget("cache", ns).status
            return st.observed_generation == 1 and st.current_healthy == 1 and st.disruptions_allowed == 0
        wait_for(pdb_counted, timeout=60, what="the disruption controller's PDB status")
        view = act.cluster_nodes(("team-low",))
        assert view.free.tolist() == [0] and view.names.tolist() == [node]
        rep = act.apply(_plan([Preemption(f"{ns}/guarded", "team-low", 4, node, "peak ahead"),
                               Preemption(f"{ns}/plain", "team-low", 4, node, "peak ahead")]))
        assert f"evict {ns}/guarded (grace 5 s)" in rep.actions and f"evict {ns}/plain (grace 5 s)" in rep.actions
        assert rep.errors == [f"evict {ns}/guarded: 429 a PodDisruptionBudget refused it, retried next cycle"]
        assert rep.not_freed == [f"{ns}/guarded"]                        # counted as not freed (cycle.py)
        # the refused pod runs on, never deleted; the evicted one goes
        wait_for(lambda: pod_gone(core, ns, "plain"), timeout=60, what="the evicted pod gone")
        live = core.read_namespaced_pod("guarded", ns)
        assert live.status.phase == "Running" and live.metadata.deletion_timestamp is None
        # the next cycle's view: the evicted pod's 4 GPUs are free, the refused one's are not
        view = act.cluster_nodes(("team-low",))
        assert view.free.tolist() == [4] and view.draining.tolist() == [0]
    finally:
        kube.delete_nodes([node])


def _evictions_refused(kube):
    """Eviction requests the apiserver answered 429, by its own request counter (/metrics)."""
    import ssl

    import httpx

    tls = ssl.create_default_context(cafile=str(kube.tmp / "ca.crt"))
    tls.load_cert_chain(str(kube.tmp / "admin.crt"), str(kube.tmp / "admin.key"))
    text = httpx.get(f"{kube.server}/metrics", verify=tls, timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_request_total{") and 'subresource="eviction"' in line
               and 'code="429"' in line)


def test_an_eviction_a_pdb_refuses_is_sent_once_a_cycle_never_in_a_tight_loop(kube):
    """The refused pod is asked for again at the next cycle only: a plan's preemption once per cycle, a failed
    node's pod (kept for retry) once per cycle, each counted as not freed; by the apiserver's own count."""
    core, policy = k8s.CoreV1Api(kube.api()), k8s.PolicyV1Api(kube.api())
    ns = kube.namespace("pdb")
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace=ns)]
    node = kube.gpu_node(f"{ns}-n1", "a100", gpus=8)
    wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False)
    assert act.apply(_plan()).ok
    core.create_namespaced_pod(ns, gpu_pod(ns, "guarded", 4, "gpu-autoscaler-low", {"kubernetes.io/hostname": node},
                                           labels={"app": "cache"}))
    wait_for(lambda: pod_running(core, ns, "guarded"), timeout=60, what="guarded Running")
    policy.create_namespaced_pod_disruption_budget(ns, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "cache"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "cache"}}}})
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget("cache", ns).status.observed_generation == 1,
             timeout=60, what="the disruption controller's PDB status")
    job = f"{ns}/guarded"
    before = _evictions_refused(kube)
    for cycle in range(1, 4):                                            # a plan preempting it, three cycles
        rep = act.apply(_plan([Preemption(job, "team-low", 4, node, "peak ahead")]))
        assert rep.not_freed == [job]
        assert _evictions_refused(kube) - before == cycle
    rep = act.requeue([job], "node failed")                              # a failed node's pod: kept for retry
    assert rep.not_freed == [job] and _evictions_refused(kube) - before == 4
    for cycle in range(1, 4):                                            # retried once a cycle, no more
        rep = act.apply(_plan())
        assert rep.not_freed == [job], rep
        assert _evictions_refused(kube) - before == 4 + cycle
    live = core.read_namespaced_pod("guarded", ns)
    assert live.status.phase == "Running" and live.metadata.deletion_timestamp is None


def test_a_pod_younger_than_the_minimum_run_time_is_not_evicted_an_older_one_is(kube):
    """policy.preempt_min_runtime_s against the pod's real startTime (kwok's, when it started it)."""
    core = k8s.CoreV1Api(kube.api())
    ns = kube.namespace("young")
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace=ns)]
    node = kube.gpu_node(f"{ns}-n1", "a100", gpus=8)
    wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(grace_period_s=5), tenants, dry_run=False,
                             min_runtime_s=600)
    assert act.apply(_plan()).ok
    core.create_namespaced_pod(ns, gpu_pod(ns, "young", 4, "gpu-autoscaler-low", {"kubernetes.io/hostname": node}))
    wait_for(lambda: pod_running(core, ns, "young"), timeout=60, what="young Running")
    preempt = _plan([Preemption(f"{ns}/young", "team-low", 4, node, "peak ahead")])
    rep = act.apply(preempt)
    assert rep.ok and any(a.startswith(f"skip {ns}/young: ran ") and "policy.preempt_min_runtime_s = 600" in a
                          for a in rep.actions), rep.actions
    assert core.read_namespaced_pod("young", ns).metadata.deletion_timestamp is None
    act.min_runtime_s = 0
    rep = act.apply(preempt)
    assert f"evict {ns}/young (grace 5 s)" in rep.actions, rep.actions
    wait_for(lambda: pod_gone(core, ns, "young"), timeout=60, what="the pod evicted")
