"""Holds take the GPUs of idle low-priority jobs before those of busy ones (issue #25): ``Jobs.idle``, filled by the
cycle from the job health step's idle and hung findings, makes a candidate the cheapest; without it (None, or no
job idle) the order is the cost's alone, as the golden plans pin."""

import dataclasses

import numpy as np

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.preemption import choose_placed
from tests.policy.test_engine import flat_forecast, make_state
from tests.policy.test_preemption import jobs_on, nodes_of

CFG = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_min_runtime_s": 600.0})


def idle_state(idle_ids):
    """t0 (high) runs one 10-GPU job and is forecast to need a second; t1 and t2 (low) run one 10-GPU job each
    and t3 (low) one that started 300 s ago (under the minimum run time), on a full cluster: one low job must go.
    The old rule takes j1 (600 s, the least work lost)."""
    jobs = [(0, 10, "high", True, 3600, 0), (1, 10, "low", True, 600, 0), (2, 10, "low", True, 3000, 0),
            (3, 10, "low", True, 300, 0)]
    s = make_state(["high", "low", "low", "low"], jobs, capacity=40)
    idle = np.isin(s.jobs.ids, list(idle_ids)) if idle_ids is not None else None
    return dataclasses.replace(s, jobs=dataclasses.replace(s.jobs, idle=idle))


def preempted(s):
    p = plan(flat_forecast(s.tenants, [18, 0, 0, 0]), s, PolicyMemory(), CFG)   # p90 19.8: 20 held, 10 short
    return p, [x.job_id for x in p.preemptions]


def test_the_idle_low_job_is_preempted_before_a_busy_one_that_loses_less():
    p, ids = preempted(idle_state({"j2", "j3"}))
    assert ids == ["j2"]                       # idle and 3,000 s old, before the busy 600-s j1
    assert "idle" in p.preemptions[0].reason   # and the tenant is told why
    assert not any(t in p.preemptions[0].reason for t in ("t0", "t1", "t3"))   # naming no other tenant
    told = [n.message for n in p.notifications if n.kind == "preempted"]
    assert len(told) == 1 and "idle" in told[0]


def test_an_idle_job_under_the_minimum_run_time_stays_exempt_and_no_idle_job_changes_nothing():
    # j3 is idle and the cheapest, but younger than preempt_min_runtime_s: never a candidate
    _, ids = preempted(idle_state({"j3"}))
    assert ids == ["j1"]
    # unknown (None) and known-busy (all False) plan exactly like the old rule
    p_none, ids_none = preempted(idle_state(None))
    p_busy, ids_busy = preempted(idle_state(set()))
    assert ids_none == ids_busy == ["j1"] and p_none.to_dict() == p_busy.to_dict()
    assert "idle" not in p_none.preemptions[0].reason


def test_placement_aware_choice_clears_the_node_of_idle_jobs_first():
    # n0: 4 low 1-GPU jobs (400 s, idle) + 4 free; n1: 4 low 1-GPU jobs (100 s, busy) + 4 free. Room for one 8-GPU
    # job: clearing n1 loses 400 GPU-s, n0 1,600 GPU-s of jobs doing no work; n0 is cleared
    spec = [(1, 1, "low", "n0", 400.0)] * 4 + [(1, 1, "low", "n1", 100.0)] * 4
    jobs = jobs_on(spec)
    args = (np.array([1, 0]), np.array([8, 1]), np.array([True, False]), 100, 100)
    old, _, _ = choose_placed(jobs, nodes_of(jobs), *args)
    assert set(jobs.node[old]) == {"n1"}          # without health data: the cheaper node
    idle = dataclasses.replace(jobs, idle=jobs.node == "n0")
    chosen, placed, left = choose_placed(idle, nodes_of(idle), *args)
    assert placed == 1 and left == 0
    assert set(jobs.node[chosen]) == {"n0"} and len(chosen) == 4


def test_placement_aware_choice_takes_the_idle_job_first_on_a_node():
    # one node, 2 free GPUs; three low 2-GPU jobs: 100 s and 200 s busy, 900 s idle; a 4-GPU job needs one gone
    spec = [(1, 2, "low", "n0", 100.0), (1, 2, "low", "n0", 200.0), (1, 2, "low", "n0", 900.0)]
    jobs = dataclasses.replace(jobs_on(spec), idle=np.array([False, False, True]))
    chosen, placed, _ = choose_placed(jobs, nodes_of(jobs, names=("n0",)), np.array([1, 0]), np.array([4, 2]),
                                      np.array([True, False]), 100, 100)
    assert placed == 1 and list(jobs.ids[chosen]) == ["j2"]
