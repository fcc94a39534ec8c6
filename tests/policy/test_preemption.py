"""Placement-aware preemption: only what makes room, on one node, for a protected tenant's job."""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.preemption import choose_placed
from daemon.policy.state import PRIORITY, ClusterState, Jobs, Nodes
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster
from tests.policy.test_engine import flat_forecast

AT = pd.Timestamp("2026-01-06T13:50:00Z")


def jobs_on(spec):
    """spec: (tenant, gpus, priority, node, runtime_s) of running jobs."""
    return Jobs(np.array([f"j{i}" for i in range(len(spec))], dtype=object),
                np.array([s[0] for s in spec], dtype=np.int64), np.array([s[1] for s in spec], dtype=np.int64),
                np.array([PRIORITY[s[2]] for s in spec], dtype=np.int8), np.ones(len(spec), dtype=bool),
                np.array([s[4] for s in spec], dtype=float), np.zeros(len(spec)),
                np.array([s[3] for s in spec], dtype=object))


def nodes_of(jobs, names=("n0", "n1"), gpn=8, held=None):
    used = np.array([jobs.gpus[jobs.node == n].sum() for n in names])
    return Nodes(np.array(names, dtype=object), np.full(len(names), gpn), gpn - used, np.zeros(len(names), dtype=int),
                 np.full(len(names), -1) if held is None else np.asarray(held))


def test_clears_the_cheapest_node_that_then_fits_an_8_gpu_job():
    # n0: 4 low 1-GPU jobs (400 s each) + 4 free; n1: 8 low 1-GPU jobs (300 s each, the cheapest one by one).
    # Counting GPUs would preempt the 4 cheapest jobs (on n1) and leave no 8-GPU hole anywhere; clearing n0
    # loses 1,600 GPU-s, clearing n1 2,400.
    spec = [(1, 1, "low", "n0", 400.0)] * 4 + [(1, 1, "low", "n1", 300.0)] * 8
    jobs = jobs_on(spec)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0]), np.array([8, 1]),
                                         np.array([True, False]), 100, 100)
    assert placed == 1 and left == 0
    assert set(jobs.node[chosen]) == {"n0"} and len(chosen) == 4


def test_free_room_is_used_before_anything_is_preempted():
    jobs = jobs_on([(1, 1, "low", "n1", 60.0)] * 8)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0]), np.array([8, 1]),
                                         np.array([True, False]), 100, 100)
    assert chosen.size == 0 and placed == 1 and left == 0


def test_nothing_is_preempted_when_no_node_can_be_made_to_fit():
    # every node has one non-preemptible normal job: no node can ever hold an 8-GPU job
    spec = ([(2, 1, "normal", "n0", 60.0), (2, 1, "normal", "n1", 60.0)]
            + [(1, 1, "low", n, 60.0) for n in ("n0", "n1")] * 7)
    jobs = jobs_on(spec)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0, 0]), np.array([8, 1, 1]),
                                         np.array([True, False, False]), 100, 100)
    assert chosen.size == 0 and placed == 0 and left == 1


def test_a_node_held_for_another_tenant_is_not_cleared():
    spec = [(2, 1, "low", "n0", 60.0)] * 8 + [(2, 1, "low", "n1", 6000.0)] * 8
    jobs = jobs_on(spec)
    chosen, _, left = choose_placed(jobs, nodes_of(jobs, held=[1, -1]), np.array([1, 0, 0]), np.array([8, 8, 1]),
                                    np.array([True, True, False]), 100, 100)
    assert left == 0 and set(jobs.node[chosen]) == {"n1"}    # n0 is cheaper but held for tenant 1


def test_budget_stops_a_clearing_it_cannot_finish():
    jobs = jobs_on([(1, 1, "low", "n0", 60.0)] * 8 + [(1, 1, "low", "n1", 60.0)] * 8)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0]), np.array([8, 1]),
                                         np.array([True, False]), 7, 100)
    assert chosen.size == 0 and left == 1                   # 7 GPUs of budget cannot make an 8-GPU hole


def test_the_job_budget_stops_a_clearing_it_cannot_finish():
    # GPUs enough (100), jobs not: an 8-GPU hole needs 8 one-GPU jobs preempted, 7 are allowed
    jobs = jobs_on([(1, 1, "low", "n0", 60.0)] * 8 + [(1, 1, "low", "n1", 60.0)] * 8)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0]), np.array([8, 1]),
                                         np.array([True, False]), 100, 7)
    assert chosen.size == 0 and left == 1
    chosen, _, left = choose_placed(jobs, nodes_of(jobs), np.array([1, 0]), np.array([8, 1]),
                                    np.array([True, False]), 100, 8)
    assert chosen.size == 8 and left == 0


def test_a_need_below_min_preempt_gpus_preempts_nothing():
    jobs = jobs_on([(1, 1, "low", "n0", 60.0)] * 8 + [(1, 1, "low", "n1", 60.0)] * 8)
    args = (np.array([1, 0]), np.array([1, 1]), np.array([True, False]), 100, 100)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), *args, min_gpus=2)
    assert chosen.size == 0 and placed == 0 and left == 1
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs), *args, min_gpus=1)
    assert chosen.size == 1 and placed == 1 and left == 0


def test_a_down_node_has_no_room_whatever_its_free_column_says():
    # n0 is down (0 healthy GPUs) and its last reading still says 8 free: nothing can start there, so the job's
    # room is made on n1
    jobs = jobs_on([(1, 1, "low", "n1", 60.0)] * 8)
    nodes = Nodes(np.array(["n0", "n1"], dtype=object), np.array([0, 8]), np.array([8, 0]), np.zeros(2, dtype=int),
                  np.full(2, -1))
    chosen, placed, left = choose_placed(jobs, nodes, np.array([1, 0]), np.array([8, 1]), np.array([True, False]),
                                         100, 100)
    assert placed == 1 and left == 0 and chosen.size == 8 and set(jobs.node[chosen]) == {"n1"}


def test_plan_with_a_node_view_preempts_one_whole_node():
    spec = [(1, 1, "low", "n0", 400.0)] * 4 + [(1, 1, "low", "n1", 300.0)] * 8 + [(0, 8, "high", "n2", 600.0)]
    jobs = jobs_on(spec)
    names = ("n0", "n1", "n2")
    used = np.bincount(jobs.tenant, weights=jobs.gpus, minlength=2)
    st = ClusterState(AT, ("t0", "t1"), ("high", "low"), 24, used.astype(float), np.array([8.0, 0.0]), jobs,
                      nodes=nodes_of(jobs, names))
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    p = plan(flat_forecast(st.tenants, [16 / 1.1, 0]), st, PolicyMemory(), cfg)
    assert {x.node for x in p.preemptions} == {"n0"} and len(p.preemptions) == 4


def test_in_the_simulator_the_high_job_starts_on_the_node_that_was_cleared():
    prio = np.array([PRIORITY["high"], PRIORITY["low"]])
    c = SimCluster(["hi", "lo"], prio, 16, np.array([8, 1]), gpus_per_node=8, drain_steps=1)
    act = SimulatorActuator(c, ("hi", "lo"))
    c.step(np.array([0.0, 16.0]))
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    served = []
    for k in range(4):
        st = c.state(("hi", "lo"), ("high", "low"), AT + pd.Timedelta(minutes=k), 60)
        act.apply(plan(flat_forecast(st.tenants, [8 / 1.1, 0]), st, PolicyMemory(), cfg))
        served.append(c.step(np.array([8.0, 16.0])).served[0])
        c.check_invariants()
    assert served[-1] == 8 and c.total_preemptions == 8      # exactly one node's worth, then the job ran
    assert c.preempted_retaken == 0                          # the freed node went to the high job, not back to low


def test_without_a_node_view_a_waiting_job_larger_than_the_cluster_preempts_nothing():
    # one GPU model and no nodes (GPU counts only): t0 (high) waits with a 128-GPU job on a 64-GPU cluster full of
    # t1's low jobs. No preemption can ever let it start; the old plan preempted for it all the same
    from tests.policy.test_engine import make_state

    spec = [(1, 1, "low", True, 3600.0, 0.0)] * 64 + [(0, 128, "high", False, 0.0, 600.0)]
    s = make_state(["high", "low"], spec, capacity=64)
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    for fc in (None, flat_forecast(s.tenants, [128, 64])):
        p = plan(fc, s, PolicyMemory(), cfg)
        assert p.preemptions == (), fc
        assert ("1 waiting protected job larger than the whole cluster (64 GPUs): t0's 128-GPU job; it can never "
                "start, so nothing is preempted for it") in p.notes
    # a job that fits (64 GPUs: the whole cluster) is still cleared for, and no such note is made
    fits = make_state(["high", "low"], spec[:-1] + [(0, 64, "high", False, 0.0, 600.0)], capacity=64)
    p = plan(None, fits, PolicyMemory(), cfg)
    assert sum(x.gpus for x in p.preemptions) == 64
    assert not any("larger than the whole cluster" in x for x in p.notes)
