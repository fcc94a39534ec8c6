"""GPU types on the real Kueue (daemon/actuators/k8s/kueue.py, a mixed fleet): the actuator's ResourceFlavors per
type select their nodes by NVIDIA's product label, so a Workload that accepts only A100s (a nodeSelector on
``nvidia.com/gpu.product``) waits for the A100 flavor and is never admitted on a T4, though T4 quota is free; a
Workload that names no type takes the T4s meanwhile. The flavors' shapes are pinned in
tests/actuators/test_k8s_fleet.py."""

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig
from daemon.config.fleet import FleetConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.k8s.test_kueue_objects import _active, _admitted_on, _pending, _workload
from tests.support.k8s_cluster import GPU_MODELS, PRODUCT_LABEL
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

FLEET = FleetConfig(types=["a100", "t4"], aliases={"NVIDIA A100-SXM4-80GB": "a100", "Tesla T4": "t4"})
KUEUE = ("kueue.x-k8s.io", "v1beta1")


def test_a_workload_that_accepts_only_a100_waits_for_the_a100_flavor_and_never_takes_a_free_t4(kueue):
    tenants, ns, nodes = kueue.tenants({"batchy": "low"}, nodes=1, model="a100")
    nodes.append(kueue.gpu_node(f"{ns['batchy']}-t4", "t4", gpus=8))
    wait_for(lambda: kueue.node_ready(nodes[-1]), timeout=60, what="the T4 node Ready")
    batch, uid = ns["batchy"], ns["batchy"][-8:]
    cfg = KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}", flavor=f"f{uid}", hold_shrink_delay_s=0)
    act = KueueActuator(kueue.api(), cfg, tenants, dry_run=False, fleet=FLEET)
    custom = k8s.CustomObjectsApi(kueue.api())
    plan = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=0, reservations={},
                quotas={"batchy": 0}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory(), capacity_by_type={"a100": 8, "t4": 8})
    rep = act.apply(plan)
    assert rep.ok, rep.errors
    a100, t4 = act.type_flavor("a100"), act.type_flavor("t4")
    flavor = custom.get_cluster_custom_object(*KUEUE, "resourceflavors", a100)
    assert flavor["spec"]["nodeLabels"] == {PRODUCT_LABEL: GPU_MODELS["a100"]}   # read from the node's label
    queues = [o["metadata"]["name"] for p, o in act.objects(plan, {}, 0) if p == "clusterqueues"]
    wait_for(lambda: all(_active(custom, q) for q in queues), timeout=60, what="every ClusterQueue active")
    low = act.queue_name("low")
    create = custom.create_namespaced_custom_object

    def workload(name, selector=None):
        body = _workload(batch, name, low, 8)
        if selector:
            body["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = selector
        create(*KUEUE, batch, "workloads", body)

    workload("filler")                                                     # no type named: the first flavor
    wait_for(lambda: _admitted_on(custom, batch, "filler") == a100, timeout=60, what="filler admitted on A100")
    workload("a100-only", {PRODUCT_LABEL: GPU_MODELS["a100"]})
    wait_for(lambda: _pending(custom, batch, "a100-only"), timeout=60, what="a100-only pending")
    # the T4 quota was free all along: a Workload that names no type is admitted on it while a100-only waits
    workload("any")
    wait_for(lambda: _admitted_on(custom, batch, "any") == t4, timeout=60, what="any admitted on T4")
    assert _pending(custom, batch, "a100-only")
    custom.delete_namespaced_custom_object(*KUEUE, batch, "workloads", "filler")
    wait_for(lambda: _admitted_on(custom, batch, "a100-only") == a100, timeout=60,
             what="a100-only admitted on the A100 flavor once it is free")
