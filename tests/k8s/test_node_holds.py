"""Node holds on the real kube-scheduler: the daemon's label and taint on a held node (daemon/actuators/k8s/
node_holds.py) keep every pod without the hold's toleration off it, while the holder's pod, carrying what its hold
ResourceFlavor makes Kueue inject (the flavor's nodeLabels and tolerations), is bound there and runs. The request
shapes are pinned against recorded requests in tests/actuators/test_k8s_kueue.py."""

import pytest
from kubernetes import client as k8s

from daemon.actuators.base import ActionReport
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig
from tests.support.k8s_cluster import gpu_pod, pod_running, unschedulable_because, wait_unschedulable
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")


def test_a_held_node_takes_the_holders_pod_and_the_real_scheduler_never_binds_another_tenants_there(kube):
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-high": "high", "team-low": "low"})
    serving, batch = ns["team-high"], ns["team-low"]
    try:
        act = KueueActuator(kube.api(), KueueActuatorConfig(), tenants, dry_run=False)
        rep = ActionReport("kueue", False)
        assert act.nodes.apply(rep, {"team-high": 8, "team-low": 0}, {}) == {"team-high": 8, "team-low": 0}
        assert rep.ok, rep.errors
        label = KueueActuatorConfig().hold_label
        held = [n for n in nodes if (core.read_node(n).metadata.labels or {}).get(label) == "team-high"]
        assert len(held) == 1
        held, free = held[0], next(n for n in nodes if n != held[0])
        # another tenant's pod aimed at the held node: the scheduler refuses it for the hold's taint
        core.create_namespaced_pod(batch, gpu_pod(batch, "aimed", 1, node_selector={"kubernetes.io/hostname": held}))
        assert "untolerated taint" in wait_unschedulable(core, batch, "aimed")
        # another tenant's pods free to go anywhere: the first fills the free node, the second finds no node
        core.create_namespaced_pod(batch, gpu_pod(batch, "fill", 8))
        wait_for(lambda: pod_running(core, batch, "fill"), timeout=60, what="fill Running")
        assert core.read_namespaced_pod("fill", batch).spec.node_name == free
        core.create_namespaced_pod(batch, gpu_pod(batch, "spill", 8))
        wait_unschedulable(core, batch, "spill")
        # the holder's pod, with what Kueue injects on admission on the tenant's hold flavor: bound to the held node
        flavor = next(f for f in act.resource_flavors() if f["metadata"]["name"] == act.hold_flavor("team-high"))
        core.create_namespaced_pod(serving, gpu_pod(serving, "infer", 4, node_selector=flavor["spec"]["nodeLabels"],
                                                    tolerations=flavor["spec"]["tolerations"]))
        wait_for(lambda: pod_running(core, serving, "infer"), timeout=60, what="holder's pod Running")
        assert core.read_namespaced_pod("infer", serving).spec.node_name == held
        # still refused, both (each raises if it was bound meanwhile)
        assert unschedulable_because(core, batch, "aimed") and unschedulable_because(core, batch, "spill")
        # the control: the hold released, the scheduler binds the aimed pod to that node at once
        rep = ActionReport("kueue", False)
        act.nodes.release_all(rep)
        assert rep.ok, rep.errors
        wait_for(lambda: pod_running(core, batch, "aimed"), timeout=60, what="aimed pod Running once released")
        assert core.read_namespaced_pod("aimed", batch).spec.node_name == held
    finally:
        kube.delete_nodes(nodes)


@pytest.mark.services
def test_a_replica_leading_again_waits_the_shrink_delay_afresh(kube, r, redis_url):
    """HA with a real redis-server lease: a holds both nodes for team-high and starts wanting one (the 300 s delay
    runs), is paused past its lease; b leads and wants both again, then dies; a leads again 900 s on and wants
    one. Before, a released a node at once, on the wish it saw start 900 s ago and not since (b's plans between
    wanted both); now the delay starts again."""
    import redis

    from daemon.ha.fencing import FencedActuator
    from daemon.ha.lease import RedisLease

    core = k8s.CoreV1Api(kube.api())
    tenants, _, nodes = kube.tenants({"team-high": "high", "team-low": "low"})
    cfg = KueueActuatorConfig(hold_shrink_delay_s=300)
    now = [1000.0]

    def replica(name):
        lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
        inner = KueueActuator(kube.api(), cfg, tenants, dry_run=False)
        inner.nodes.clock = lambda: now[0]
        return lease, FencedActuator(inner, lease), inner.nodes

    def hold(holds, gpus):
        rep = ActionReport("kueue", False)
        holds.apply(rep, {"team-high": gpus, "team-low": 0}, {})
        assert rep.ok, rep.errors
        return sum((core.read_node(n).metadata.labels or {}).get(cfg.hold_label) == "team-high" for n in nodes)

    try:
        lease_a, _, a = replica("a")
        assert lease_a.tick() and lease_a.token == 1
        assert hold(a, 16) == 2
        now[0] += 100
        assert hold(a, 8) == 2                                    # wants one: the delay runs
        r.delete("gpuas:leader")                                  # a paused past its lease
        assert not lease_a.tick()
        lease_b, _, b = replica("b")
        assert lease_b.tick() and lease_b.token == 2
        assert hold(b, 16) == 2                                   # b's plans want both
        r.delete("gpuas:leader")                                  # b dies
        now[0] += 900
        assert lease_a.tick() and lease_a.token == 3              # a leads again
        assert hold(a, 8) == 2, "released on a wish for fewer seen in an earlier term"
        now[0] += 300
        assert hold(a, 8) == 1                                    # its own 300 s: shrinks
    finally:
        kube.delete_nodes(nodes)
