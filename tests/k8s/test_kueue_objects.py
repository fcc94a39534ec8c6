"""The Kueue actuator's objects on a real Kueue (0.17's manager, its CRDs and webhooks, on the control plane of
tests/support/k8s_cluster.py): the ResourceFlavors, the ClusterQueues in their Cohorts and the LocalQueues a plan
asks for pass the real CRD validation, conversion and webhooks, and Kueue's controller reports every
ClusterQueue active; and Kueue admits as the plan intends: a high-tier Workload inside its held quota while the
low tier waits, then borrows once the plan lowers the hold. The shapes are pinned against recorded requests in
tests/actuators/test_k8s_kueue.py."""

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
        queues = [o["metadata"]["name"] for plural, o in act.objects(plan, *act._holds())
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


def _workload(ns, name, queue, gpus):
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.invalid/train:1",
                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]}}


def _admitted_on(custom, ns, name):
    """The flavor Kueue admitted the Workload's GPUs on; None while it has not."""
    wl = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", name)
    adm = wl.get("status", {}).get("admission")
    return adm["podSetAssignments"][0]["flavors"]["nvidia.com/gpu"] if adm else None


def _pending(custom, ns, name):
    """Kueue looked at the Workload and could not reserve quota for it (its QuotaReserved condition says so)."""
    wl = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads", name)
    assert not wl.get("status", {}).get("admission"), f"{name} was admitted"
    return any(c["type"] == "QuotaReserved" and c["status"] == "False" and c["reason"] == "Pending"
               for c in wl.get("status", {}).get("conditions", []))


def test_the_high_tier_is_admitted_inside_its_hold_the_low_tier_waits_and_borrows_once_the_hold_is_lowered(kueue):
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"})
    serving, batch = ns["team-high"], ns["batchy"]
    uid = serving[-8:]
    # its own Cohort (nothing of another test's queues to borrow); a hold shrinks at once (no shrink delay)
    cfg = KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}", hold_shrink_delay_s=0)
    act = KueueActuator(kueue.api(), cfg, tenants, dry_run=False)
    custom = k8s.CustomObjectsApi(kueue.api())

    def plan(held):
        return Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=held,
                    reservations={"team-high": held} if held else {}, quotas={"batchy": 0}, limits={},
                    preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                    memory=PolicyMemory())

    rep = act.apply(plan(8))                                             # one of the two 8-GPU nodes held
    assert rep.ok, rep.errors
    queues = [o["metadata"]["name"] for p, o in act.objects(plan(8), *act._holds()) if p == "clusterqueues"]
    wait_for(lambda: all(_active(custom, q) for q in queues), timeout=60, what="every ClusterQueue active")
    hold = act.hold_flavor("team-high")
    create = custom.create_namespaced_custom_object
    create("kueue.x-k8s.io", "v1beta1", batch, "workloads", _workload(batch, "low-1", act.queue_name("low"), 12))
    create("kueue.x-k8s.io", "v1beta1", serving, "workloads", _workload(serving, "high-1", act.cfg.queue_prefix, 8))
    wait_for(lambda: _admitted_on(custom, serving, "high-1") == hold, timeout=60, what="high-1 admitted on its hold")
    # the low tier may borrow only the 8 unheld GPUs, never the held ones: 12 wait, even once the hold is idle
    wait_for(lambda: _pending(custom, batch, "low-1"), timeout=60, what="low-1 pending")
    custom.delete_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", serving, "workloads", "high-1")
    tenant_cq = act.tenant_queue("team-high")
    wait_for(lambda: not _workloads(custom, serving) and _cq_status(custom, tenant_cq).get("admittedWorkloads") == 0,
             timeout=60, what="high-1 gone from its queue")
    wait_for(lambda: _cq_status(custom, act.queue_name("low")).get("pendingWorkloads") == 1, timeout=60,
             what="the low queue looked again")
    assert _pending(custom, batch, "low-1")
    rep = act.apply(plan(0))                                             # the plan lowers the hold to nothing
    assert rep.ok, rep.errors
    wait_for(lambda: _admitted_on(custom, batch, "low-1") == act.cfg.flavor, timeout=60,
             what="low-1 admitted once the hold is lowered")


def _workloads(custom, ns):
    return custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", ns, "workloads")["items"]


def _cq_status(custom, name):
    return custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", name).get("status", {})


def test_a_sites_own_kueue_object_of_one_of_our_names_is_left_alone_and_said_in_the_dry_run_too(kueue):
    """First-day walk (hday3): a Kueue site's own ResourceFlavor `default-flavor` (the name Kueue's docs give it and
    the daemon's default) was in the dry run's plan as "apply ResourceFlavor default-flavor": going live would have
    replaced its spec (the site's node labels gone from under its own ClusterQueue) and put our label on it, so a later
    start-up sweep could delete it. An object of our names without our label is now reported and never written, and
    the dry run says so before going live."""
    tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"})
    uid = ns["team-high"][-8:]
    custom = k8s.CustomObjectsApi(kueue.api())
    theirs = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": f"site-{uid}"},
              "spec": {"nodeLabels": {"site.example/pool": "gpu"}}}
    custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", theirs)
    cfg = KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}", flavor=f"site-{uid}")
    plan = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=8, reservations={"team-high": 8},
                quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())
    said = ("ResourceFlavor site-{} exists without the label app.kubernetes.io/managed-by=gpu-autoscaler: not the "
            "daemon's, left alone").format(uid)
    try:
        for dry in (True, False):
            act = KueueActuator(kueue.api(), cfg, tenants, dry_run=dry)
            rep = act.apply(plan)
            assert [e for e in rep.errors if e.startswith(said)] == [rep.errors[0]] and len(rep.errors) == 1, \
                rep.errors
            assert f"apply ResourceFlavor site-{uid}" not in rep.actions
            assert f"apply ClusterQueue {act.tenant_queue('team-high')}" in rep.actions   # the rest is written
            now = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", f"site-{uid}")
            assert now["spec"] == theirs["spec"] and "app.kubernetes.io/managed-by" not in \
                (now["metadata"].get("labels") or {})
        act.release_holds()
    finally:
        custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", f"site-{uid}")
        kueue.delete_nodes(nodes)
