"""Placement-feasible preemption for a protected Kubernetes gang (a Kueue Workload of k pods, Jobs.packed): its
place is room for k pods of its GPUs per pod, several on one node where they fit, all in one node set, found whole
or nothing preempted for it."""

import dataclasses

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.preemption import Gate, choose_placed
from daemon.policy.state import PRIORITY, ClusterState, Jobs
from tests.policy.test_engine import flat_forecast
from tests.policy.test_preemption import jobs_on, nodes_of

AT = pd.Timestamp("2026-01-06T13:50:00Z")
FIVE = ("n0", "n1", "n2", "n3", "n4")
# five 8-GPU nodes, each full of one low 8-GPU job, older node by node
WHOLE = [(1, 8, "low", n, 100.0 * (i + 1)) for i, n in enumerate(FIVE)]
# three 8-GPU nodes, each full of two low 4-GPU jobs; the younger job per node is the cheaper one
HALVES = [(1, 4, "low", "n0", 900.0), (1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 800.0),
          (1, 4, "low", "n1", 200.0), (1, 4, "low", "n2", 700.0), (1, 4, "low", "n2", 300.0)]


def gang(spec, pods, per_pod, names=FIVE, budget_gpus=100, budget_jobs=100, held=None, gate=None, refused=None,
         packed=True):
    """choose_placed for one waiting gang of tenant 0: `pods` pods of `per_pod` GPUs (packed: they may share a
    node; not packed: Slurm's distinct nodes)."""
    jobs = jobs_on(spec)
    return jobs, choose_placed(jobs, nodes_of(jobs, names, held=held), np.array([1, 0]),
                               np.array([pods * per_pod, 1]), np.array([True, False]), budget_gpus, budget_jobs,
                               gate=gate, refused=refused, job_nodes=np.array([pods, 1]),
                               job_packed=np.array([packed, False]))


def test_a_4_x_8_gang_on_full_8_gpu_nodes_gets_four_nodes_cleared_or_none():
    """Read as one 32-GPU job it fit no 8-GPU node and nothing was ever cleared for it; as 4 pods of 8: the four
    cheapest nodes. With the budget for three only: none (three pods' room starts no pod of a gang)."""
    jobs, (chosen, placed, left) = gang(WHOLE, 4, 8)
    assert placed == 1 and left == 0
    assert sorted(jobs.node[chosen].tolist()) == ["n0", "n1", "n2", "n3"]
    jobs, (chosen, placed, left) = gang(WHOLE, 4, 8, budget_gpus=24)
    assert chosen.size == 0 and placed == 0 and left == 1
    jobs, (chosen, placed, left) = gang(WHOLE, 4, 8, budget_jobs=3)
    assert chosen.size == 0 and left == 1


def test_a_gangs_pods_share_a_node_where_slurms_parts_may_not():
    """A 2 x 4 gang where n0 has 8 free: both pods there, nothing preempted; Slurm's -N 2 x 4 job needs a second
    node and clears one. On nodes full of 4-GPU jobs, pod by pod where each fits: the cheapest job (n0's young
    one), then the next cheapest (n1's); a node cleared for one pod takes the next where it has room."""
    spec = [(1, 8, "low", "n1", 100.0), (1, 8, "low", "n2", 100.0)]
    jobs, (chosen, placed, left) = gang(spec, 2, 4, names=("n0", "n1", "n2"))
    assert chosen.size == 0 and placed == 1 and left == 0
    _, (chosen, placed, _) = gang(spec, 2, 4, names=("n0", "n1", "n2"), packed=False)
    assert chosen.size == 1 and placed == 1                                  # as b6afa79: a second node cleared
    jobs, (chosen, placed, _) = gang(HALVES, 2, 4, names=("n0", "n1", "n2"))
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"]
    # 3 x 4 where the cheapest node frees 8: two pods on it, the third beside n1's
    spec = [(1, 8, "low", "n0", 10.0), (1, 4, "low", "n1", 500.0), (1, 4, "low", "n1", 600.0)]
    jobs, (chosen, placed, _) = gang(spec, 3, 4, names=("n0", "n1"))
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j0", "j1"]


def test_a_gangs_pods_are_in_one_node_set():
    """Kueue gives a podSet's pods one flavor, and a hold is a flavor of its own: the tenant's held n0 (8 free)
    and unheld room are no place for one 2 x 8 gang; the two cheapest unheld nodes are cleared."""
    spec = WHOLE[1:3] + [(1, 8, "low", "n3", 50.0)]
    jobs, (chosen, placed, _) = gang(spec, 2, 8, names=("n0", "n1", "n2", "n3"), held=[0, -1, -1, -1])
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n1", "n3"]


def test_the_cost_aware_gate_weighs_the_loss_of_all_the_pods_room():
    """A forecast 2 x 4 gang worth 300 GPU-minutes: the two cheapest 4-GPU jobs lose 6.7 + 13.3 = 20 GPU-min in
    all; worth 15 (each alone less, together more): refused, nothing preempted."""
    gate = Gate(now_jobs=np.array([0, 0]), worth=np.array([300.0]), first=np.array([0, 1]), drain_s=0.0,
                checkpoint_s=1e9)
    refused: list[int] = []
    jobs, (chosen, placed, _) = gang(HALVES, 2, 4, names=("n0", "n1", "n2"), gate=gate, refused=refused)
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"] and refused == []
    cheap = dataclasses.replace(gate, worth=np.array([15.0]))
    jobs, (chosen, placed, left) = gang(HALVES, 2, 4, names=("n0", "n1", "n2"), gate=cheap, refused=refused)
    assert chosen.size == 0 and left == 1 and refused == [0]


def _waiting(shaped: bool) -> ClusterState:
    """WHOLE's low jobs of t1 and t0's 4 x 8 Workload waiting (with its shape, or read as one 32-GPU job)."""
    run = jobs_on(WHOLE)

    def obj(a, v):
        return np.concatenate([a, np.array([v], dtype=object)])

    shape = dict(nodes_asked=np.r_[np.ones(len(run), dtype=np.int64), 4],
                 packed=np.r_[np.zeros(len(run), dtype=bool), True]) if shaped else {}
    jobs = Jobs(obj(run.ids, "ns-a/workload/w"), np.r_[run.tenant, 0], np.r_[run.gpus, 32],
                np.r_[run.priority, PRIORITY["high"]].astype(np.int8), np.r_[run.running, False],
                np.r_[run.runtime_s, 0.0], np.r_[run.wait_s, 60.0], obj(run.node, ""), **shape)
    return ClusterState(AT, ("t0", "t1"), ("high", "low"), 40, np.array([0.0, 40.0]), np.array([32.0, 0.0]), jobs,
                        nodes=nodes_of(run, FIVE))


def test_the_plan_preempts_four_nodes_for_a_waiting_4_x_8_gang_or_none():
    """The engine carries the gang's shape (Jobs.nodes_asked and packed of the tenant's largest job) to the
    choice: the four cheapest nodes' jobs; read as one 32-GPU job, nothing; within a budget of 24 GPUs, nothing."""
    fc = flat_forecast(("t0", "t1"), [0, 40])
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    p = plan(fc, _waiting(True), PolicyMemory(), cfg)
    assert sorted((x.job_id, x.node) for x in p.preemptions) == [("j0", "n0"), ("j1", "n1"), ("j2", "n2"),
                                                                   ("j3", "n3")]
    assert plan(fc, _waiting(False), PolicyMemory(), cfg).preemptions == ()
    three = Config(policy={"preempt_budget_share": 0.6, "headroom": 0.0})
    assert plan(fc, _waiting(True), PolicyMemory(), three).preemptions == ()


def test_a_gangs_hold_is_its_gpus_not_a_whole_node_per_pod():
    """Slurm's -N 4 x 4 job holds four whole 8-GPU nodes (32); a 4 x 4 gang's pods share nodes: 16."""
    from daemon.policy.reservation import hold_footprint, largest_jobs

    st = _waiting(True)
    jobs = dataclasses.replace(st.jobs, gpus=np.r_[st.jobs.gpus[:-1], 16])
    mine = jobs.tenant == 0
    quantum, k, packed = largest_jobs(jobs, mine, 2)
    assert quantum.tolist() == [16, 1] and k.tolist() == [4, 1] and packed.tolist() == [True, False]
    assert hold_footprint(quantum, jobs, mine, st.nodes).tolist() == [16, 1]
    slurm = dataclasses.replace(jobs, packed=None)
    assert hold_footprint(quantum, slurm, mine, st.nodes).tolist() == [32, 1]
    assert largest_jobs(slurm, mine, 2)[2] is None
