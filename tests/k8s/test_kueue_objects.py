"""The Kueue actuator's objects on a real Kueue (0.17's manager, its CRDs and webhooks, on the control plane of
tests/support/k8s_cluster.py): the ResourceFlavors, the ClusterQueues in their Cohorts and the LocalQueues a plan
asks for pass the real CRD validation, conversion and webhooks, and Kueue's controller reports every
ClusterQueue active. The shapes are pinned against recorded requests in tests/actuators/test_k8s_kueue.py."""

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")


def _active(custom, name):
    cq = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", name)
    return any(c["type"] == "Active" and c["status"] == "True" for c in cq.get("status", {}).get("conditions", []))


def test_the_plans_queues_are_accepted_by_the_real_kueue_and_active(kueue):
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "team-a": "normal"})
    serving = ns["team-high"]
    try:
        act = KueueActuator(kueue.api(), KueueActuatorConfig(queue_prefix=f"q{serving[-8:]}"),
                            tenants, dry_run=False)
        plan = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=8,
                    reservations={"team-high": 8}, quotas={"team-a": 4}, limits={}, preemptions=(),
                    notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())
        rep = act.apply(plan)
        assert rep.ok, rep.errors
        custom = k8s.CustomObjectsApi(kueue.api())
        queues = [o["metadata"]["name"] for plural, o in act.objects(plan, act._held, act._pool_held)
                  if plural == "clusterqueues"]
        assert act.tenant_queue("team-high") in queues
        wait_for(lambda: all(_active(custom, q) for q in queues), timeout=60, what="every ClusterQueue active")
        lq = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "localqueues",
                                                 act.cfg.queue_prefix)
        assert lq["spec"]["clusterQueue"] == act.tenant_queue("team-high")
        rep = act.release_holds()
        assert rep.ok, rep.errors
    finally:
        kueue.delete_nodes(nodes)
