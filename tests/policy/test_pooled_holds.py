"""The high tier's pooled hold, and holds that land where they can be cleared (hand-computed cases)."""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.preemption import choose_placed
from daemon.policy.state import HELD_BY_POOL, PRIORITY, ClusterState
from daemon.policy.types import Plan
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster
from forecaster.types import Forecast
from tests.policy.test_engine import flat_forecast
from tests.policy.test_preemption import jobs_on, nodes_of

AT = pd.Timestamp("2026-01-06T13:50:00Z")


def test_a_pool_node_is_a_place_for_every_pooled_tenant_and_is_cleared_first():
    # n0 is held by the high tier's pool and carries 8 low 1-GPU jobs (500 s each); n1 is open with 8 cheaper
    # ones (100 s). Tenant 0 (pooled) needs one 8-GPU job: n0 is cleared although n1 is cheaper, because GPUs
    # freed on a held node wait there for the job while they drain (on n1 anyone could take them).
    spec = [(2, 1, "low", "n0", 500.0)] * 8 + [(2, 1, "low", "n1", 100.0)] * 8
    jobs = jobs_on(spec)
    nodes = nodes_of(jobs, held=[HELD_BY_POOL, -1])
    need, size, prot = np.array([1, 0, 0]), np.array([8, 8, 1]), np.array([True, True, False])
    why: list[int] = []
    chosen, placed, left = choose_placed(jobs, nodes, need, size, prot, 100, 100, pooled=np.array([True, True, False]),
                                         cleared_for=why)
    assert placed == 1 and left == 0 and set(jobs.node[chosen]) == {"n0"} and len(chosen) == 8
    assert why == [0] * 8                              # every job was preempted for tenant 0
    # not in the pool: the pool's node is someone else's hold, so only the open node can be cleared
    chosen, _, left = choose_placed(jobs, nodes, need, size, prot, 100, 100, pooled=np.array([False, True, False]))
    assert left == 0 and set(jobs.node[chosen]) == {"n1"}


def test_plan_names_the_high_tier_as_one_pool_unless_switched_off():
    used = np.array([8.0, 0.0, 8.0])
    st = ClusterState(AT, ("a", "b", "c"), ("high", "high", "low"), 32, used, np.zeros(3))
    fc = flat_forecast(st.tenants, [8, 8, 0])
    assert plan(fc, st, PolicyMemory(), Config()).pooled == ("a", "b")
    assert plan(fc, st, PolicyMemory(), Config(policy={"pool_high_tier": False})).pooled == ()
    p = plan(fc, st, PolicyMemory(), Config())
    assert Plan.from_dict(p.to_dict()).pooled == ("a", "b")


def _two_high_one_normal():
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["normal"]])
    c = SimCluster(["h0", "h1", "n"], prio, 16, np.array([8, 8, 8]), gpus_per_node=8)
    c.step(np.array([0.0, 0.0, 8.0]))                 # the normal tenant runs on one node
    return c, SimulatorActuator(c, ("h0", "h1", "n"))


def _hold_for_h0(pooled):
    return Plan(at=AT.isoformat(), capacity=16, load=0.5, high_pool=0, reservations={"h0": 8}, quotas={}, limits={},
                preemptions=(), notifications=(), stale=False, forecast_model="t", notes=(), memory=PolicyMemory(),
                pooled=pooled)


def test_in_the_simulator_one_tenants_idle_reserve_serves_another_when_pooled():
    # 8 GPUs are reserved for h0, which is idle; h1 then asks for an 8-GPU job and the normal tenant for a
    # second one. Pooled: the held node is the tier's, so h1 starts there and the normal job does not.
    c, act = _two_high_one_normal()
    act.apply(_hold_for_h0(("h0", "h1")))
    assert int(c.held_gpus()[-1]) == 8                # one node, held by the pool
    st = c.step(np.array([0.0, 8.0, 16.0]))
    c.check_invariants()
    assert st.served.tolist() == [0, 8, 8]
    # one hold each: the node is h0's alone, so h1 waits next to it (and the normal job cannot take it either)
    c, act = _two_high_one_normal()
    act.apply(_hold_for_h0(()))
    st = c.step(np.array([0.0, 8.0, 16.0]))
    assert st.served.tolist() == [0, 0, 8]
    # a plan without the pool after one with it lets the pool's node go
    c, act = _two_high_one_normal()
    act.apply(_hold_for_h0(("h0", "h1")))
    act.apply(_hold_for_h0(()))
    assert int(c.held_gpus()[-1]) == 0 and int(c.held_gpus()[0]) == 8


def test_a_new_hold_lands_on_a_node_it_can_clear_not_on_one_with_work_that_cannot_be_preempted():
    # node 0: a normal tenant's 4-GPU job and 4 free GPUs; node 1: 8 low 1-GPU jobs, nothing free. A hold for
    # the 8-GPU high tenant takes node 1: as its low jobs end or are preempted it becomes whole, while node 0
    # stays split until the normal job ends by itself.
    prio = np.array([PRIORITY["high"], PRIORITY["normal"], PRIORITY["low"]])
    c = SimCluster(["h", "n", "l"], prio, 16, np.array([8, 4, 1]), gpus_per_node=8)
    c.step(np.array([0.0, 0.0, 8.0]))
    c.step(np.array([0.0, 4.0, 8.0]))
    assert c.node_free.tolist() == [0, 4] or c.node_free.tolist() == [4, 0]
    low_node = int(np.flatnonzero(c.node_free == 0)[0])
    c.set_reservations(np.array([8, 0, 0]))
    assert c.node_holder.tolist().index(0) == low_node
    c.check_invariants()


def test_preempt_quantile_preempts_for_the_likely_demand_and_holds_for_the_high_quantile():
    # high tenant t0 runs one 8-GPU job; its forecast: p50 stays at 8, p90 and p99 rise to 16 within the lead
    # time. n0 carries 8 cheap low jobs, n1 the high job. By default (preempt at the hold's quantile, p90)
    # n0 is cleared for the second job; with preempt_quantile = 0.5 the hold still grows to 16 GPUs (two whole
    # nodes) but nothing is preempted: the likely demand fits what runs.
    spec = [(1, 1, "low", "n0", 60.0)] * 8 + [(0, 8, "high", "n1", 600.0)]
    jobs = jobs_on(spec)
    st = ClusterState(AT, ("t0", "t1"), ("high", "low"), 16, np.array([8.0, 8.0]), np.zeros(2), jobs,
                      nodes=nodes_of(jobs))
    v = np.zeros((2, 60, 3))
    v[0, :, 0], v[0, :, 1:] = 8.0, 16.0
    fc = Forecast(st.tenants, (0.5, 0.9, 0.99), v, AT, 60, "t")
    base = {"preempt_budget_share": 1.0, "headroom": 0.0, "quantile": 0.9}
    p = plan(fc, st, PolicyMemory(), Config(policy=base))
    assert p.reservations["t0"] == 16 and len(p.preemptions) == 8 and {x.node for x in p.preemptions} == {"n0"}
    assert {x.for_tenant for x in p.preemptions} == {"t0"}
    p = plan(fc, st, PolicyMemory(), Config(policy={**base, "preempt_quantile": 0.5}))
    assert p.reservations["t0"] == 16 and p.preemptions == ()
