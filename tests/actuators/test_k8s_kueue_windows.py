"""A recurring window on Kueue (issue 39): the plan made before the lead time holds nothing for the window's tenant,
the plan made in it holds the window's GPUs, and the Kueue actuator turns that into whole held nodes and the
tenant's hold flavor quota (the official client against the capture server of tests/actuators/test_k8s_kueue.py)."""

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.policy.engine import plan
from daemon.policy.state import ClusterState
from daemon.policy.types import PolicyMemory
from tests.actuators.test_k8s_actuator import _capture_servers  # noqa: F401 (autouse fixture)
from tests.actuators.test_k8s_kueue import TENANTS, flavors, kueue, objects, validate


def _plan_at(cfg, hhmm: str):
    names = tuple(t.name for t in TENANTS)
    st = ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=names,
                      tiers=tuple(t.tier for t in TENANTS), capacity=32, used=np.zeros(len(names)),
                      pending=np.zeros(len(names)))
    return plan(None, st, PolicyMemory(), cfg)


def test_the_tenants_hold_flavor_quota_is_raised_at_the_windows_lead_time():
    cfg = parse_config({"tenants": [t.model_dump() for t in TENANTS],
                        "windows": [{"name": "eod", "tenant": "team-a", "gpus": 16, "every": "daily", "at": "14:00",
                                     "duration_minutes": 60, "reclaim_before_minutes": 30}]})
    act, _, c = kueue()
    before, during = _plan_at(cfg, "13:00"), _plan_at(cfg, "13:40")
    assert "team-a" not in before.reservations and during.reservations["team-a"] == 16
    assert act.apply(before).ok
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-a"])["gpuas-hold-team-a"]["nominalQuota"] == 0
    assert "team-a" not in c.held().values()
    rep = act.apply(during)
    assert rep.ok, rep.errors
    cq = objects(c, "ClusterQueue")["gpuas-tenant-team-a"]
    assert flavors(cq)["gpuas-hold-team-a"] == {"name": "nvidia.com/gpu", "nominalQuota": 16, "lendingLimit": 0}
    assert list(c.held().values()).count("team-a") == 2                # two whole 8-GPU nodes
    for o in c.objs.values():
        validate(o)


def test_a_pooled_tenants_window_is_its_own_hold_beside_the_pool_and_takes_the_pool_node_it_runs_on():
    """A pooled high tenant's window (Plan.window_holds) is held apart: its hold flavor's quota is the window's GPUs,
    the pool's is the pooled holds beyond them, and its queue still lists the pool flavor (it borrows the pool
    beyond its window). The window takes first the pool's node where the tenant's pods run (relabelled, its
    pods stay), as the simulator does. Before, a pooled tenant held nothing of its own: its window was the pool's."""
    import dataclasses

    from daemon.config import TenantConfig
    from tests.actuators.test_k8s_kueue import FakeCluster, plan as base_plan

    tenants = [*TENANTS, TenantConfig(name="team-high2", tier="high", k8s_namespace="serving2")]
    c = FakeCluster()
    c.run("serving", "h-0", "n3", 8)                      # team-high runs on n3
    c.run("serving2", "h2-0", "n4", 4)                    # team-high2 on n4
    c.run("research", "a-1", "n1", 1)                     # normal work (not evictable) on n1 and n2
    c.run("research", "a-2", "n2", 1)
    act, _, c = kueue(c, tenants=tenants)
    pooled = ("team-high", "team-high2")
    assert act.apply(dataclasses.replace(base_plan({"team-high": 8, "team-high2": 8}), pooled=pooled)).ok
    assert c.held() == {"n3": "gpu-autoscaler.pool", "n4": "gpu-autoscaler.pool"}
    during = dataclasses.replace(base_plan({"team-high": 8, "team-high2": 8}), pooled=pooled,
                                 window_holds={"team-high": 8})
    rep = act.apply(during)
    assert rep.ok, rep.errors
    assert c.held() == {"n3": "team-high", "n4": "gpu-autoscaler.pool"}, c.held()
    cq = objects(c, "ClusterQueue")["gpuas-tenant-team-high"]
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [
        "gpuas-hold-team-high", "gpuas-pool-hold", "default-flavor"]
    assert flavors(cq)["gpuas-hold-team-high"]["nominalQuota"] == 8
    assert objects(c, "Cohort")["gpuas-pool"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
        "nominalQuota"] == 8
    for o in c.objs.values():
        validate(o)


def test_on_a_mixed_fleet_a_pooled_tenants_window_is_its_hold_flavor_on_its_type_and_the_rest_the_pools():
    """A mixed fleet (a100 n1 n2, t4 n3 n4): team-high's window holds 8 t4 GPUs (Plan.window_holds_by_type), its
    hold beyond them (8 a100) and team-high2's (8 a100) are the pool's. Its hold flavor for t4 gets the window's
    8 on the t4 node its pod runs on (n3, handed over from the pool, its pod stays), the pool keeps both a100
    nodes, and team-high's queue still lists the pool's flavors. Before, a pooled tenant's window was held on any
    type (its per-type ask was not passed on) and the pool kept asking for its window's t4 GPUs too."""
    import dataclasses

    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.config import KueueActuatorConfig, TenantConfig
    from tests.actuators.test_k8s_actuator import served
    from tests.actuators.test_k8s_fleet import FLEET, plan as typed_plan, rg, typed_cluster
    from tests.actuators.test_k8s_kueue import Clock

    tenants = [*TENANTS, TenantConfig(name="team-high2", tier="high", k8s_namespace="serving2")]
    c = typed_cluster()
    c.run("serving", "h-0", "n3", 8)                      # team-high runs on the t4 n3
    c.run("serving2", "h2-0", "n1", 4)                    # team-high2 on the a100 n1
    api, _cap = served(c.routes())
    act = KueueActuator(api, KueueActuatorConfig(), tenants, dry_run=False, clock=Clock(), fleet=FLEET)
    pooled = ("team-high", "team-high2")
    before = typed_plan({"team-high": 8, "team-high2": 8}, {"team-high": {"t4": 8}, "team-high2": {"a100": 8}},
                        pooled=pooled)
    assert act.apply(before).ok
    assert c.held() == {"n1": "gpu-autoscaler.pool", "n3": "gpu-autoscaler.pool"}, c.held()
    during = dataclasses.replace(
        typed_plan({"team-high": 16, "team-high2": 8}, {"team-high": {"t4": 8, "a100": 8}, "team-high2": {"a100": 8}},
                   pooled=pooled),
        window_holds={"team-high": 8}, window_holds_by_type={"team-high": {"t4": 8}})
    rep = act.apply(during)
    assert rep.ok, rep.errors
    assert c.held() == {"n1": "gpu-autoscaler.pool", "n2": "gpu-autoscaler.pool", "n3": "team-high"}, c.held()
    own = dict(rg(objects(c, "ClusterQueue")["gpuas-tenant-team-high"]))
    assert own["gpuas-hold-team-high.t4"]["nominalQuota"] == 8 and own["gpuas-hold-team-high.a100"]["nominalQuota"] == 0
    assert {"gpuas-pool-hold.a100", "gpuas-pool-hold.t4"} <= set(own)          # it still borrows the pool
    pool = objects(c, "Cohort")["gpuas-pool"]["spec"]["resourceGroups"][0]["flavors"]
    assert {f["name"]: f["resources"][0]["nominalQuota"] for f in pool} == {"gpuas-pool-hold.a100": 16,
                                                                          "gpuas-pool-hold.t4": 0}
    for o in c.objs.values():
        validate(o)
