"""Placement-feasible preemption for a protected job on several nodes (Slurm -N): its place is a node per node it
asks, each with room for its GPUs per node, all found or nothing preempted for it."""

import dataclasses

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.preemption import Gate, choose_placed
from daemon.policy.state import HELD_BY_POOL, PRIORITY, ClusterState, Jobs
from tests.policy.test_engine import flat_forecast
from tests.policy.test_preemption import jobs_on, nodes_of

AT = pd.Timestamp("2026-01-06T13:50:00Z")
NAMES = ("n0", "n1", "n2")
CFG = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})

# three 8-GPU nodes, each full of two low 4-GPU jobs; the younger job per node is the cheaper one
FULL = [(1, 4, "low", "n0", 900.0), (1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 800.0),
        (1, 4, "low", "n1", 200.0), (1, 4, "low", "n2", 700.0), (1, 4, "low", "n2", 300.0)]


def place(spec, k, budget_gpus=100, budget_jobs=100, held=None, pooled=None, gate=None, refused=None):
    """choose_placed for one waiting job of tenant 0 of 8 GPUs over `k` nodes (per tenant nodes asked: k, 1)."""
    jobs = jobs_on(spec)
    return jobs, choose_placed(jobs, nodes_of(jobs, NAMES, held=held), np.array([1, 0]), np.array([8, 1]),
                               np.array([True, False]), budget_gpus, budget_jobs, pooled=pooled, gate=gate,
                               refused=refused, job_nodes=np.array([k, 1]))


def test_a_2_x_4_job_is_made_room_for_on_two_nodes_not_8_gpus_on_one():
    """Cleared as one job of 8 GPUs, one node (two jobs) was preempted where a -N 2 --gres=gpu:4 job cannot start;
    now the cheapest job on each of two nodes: 4 free on each."""
    jobs, (chosen, placed, left) = place(FULL, 2)
    assert placed == 1 and left == 0
    assert sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"]          # the younger job of n0 and of n1
    assert sorted(jobs.node[chosen].tolist()) == ["n0", "n1"]
    # one node each: as before (one whole node cleared)
    jobs, (chosen, placed, _) = place(FULL, 1)
    assert placed == 1 and set(jobs.node[chosen]) == {"n0"} and len(chosen) == 2


def test_nothing_is_preempted_when_the_budget_clears_one_of_the_two_nodes():
    """n0 has 4 free beside a low 4-GPU job, n1 one low 8-GPU job: within 6 GPUs of budget only n0's job can go.
    One node of 8 would then be free, where a 2 x 4 job does not start; n1 is past the budget: nothing preempted,
    and the job has no place."""
    spec = [(1, 4, "low", "n0", 100.0), (1, 8, "low", "n1", 100.0), (0, 8, "high", "n2", 100.0)]
    jobs, (chosen, placed, left) = place(spec, 2, budget_gpus=6)
    assert chosen.size == 0 and placed == 0 and left == 1
    jobs, (chosen, placed, left) = place(spec, 2, budget_gpus=12)        # n1 fits the budget too: its job goes
    assert jobs.ids[chosen].tolist() == ["j1"] and placed == 1          # (n0's 4 free are its other part)
    # the job budget: n1 of four 1-GPU jobs needs all four cleared; 3 jobs of budget clear n0 alone: nothing
    ones = spec[:1] + [(1, 1, "low", "n1", 100.0)] * 4 + [(1, 4, "low", "n1", 100.0), spec[2]]
    jobs, (chosen, placed, left) = place(ones, 2, budget_jobs=3)
    assert chosen.size == 0 and left == 1
    jobs, (chosen, placed, left) = place(ones, 2, budget_jobs=4)
    assert sorted(jobs.ids[chosen].tolist()) == ["j1", "j2", "j3", "j4"] and placed == 1


def test_free_room_on_two_nodes_places_the_job_without_preempting():
    """Two nodes with 4 free each: the job's place as they are (one node of 8 free is not needed)."""
    spec = [(1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 100.0), (1, 8, "low", "n2", 100.0)]
    jobs, (chosen, placed, left) = place(spec, 2)
    assert chosen.size == 0 and placed == 1 and left == 0
    _, (chosen, placed, _) = place(spec, 1)                             # 8 on one node: n0's job goes, as before
    assert placed == 1 and jobs.ids[chosen].tolist() == ["j0"]


def test_its_nodes_are_in_one_reservation_or_none():
    """Slurm starts a job in one reservation or outside all: a node held for the tenant and an unheld one are no
    place for one -N 2 job. Held n0 (4 free once its young job goes) and unheld n1, n2: the two unheld are
    cleared."""
    jobs, (chosen, placed, _) = place(FULL, 2, held=[0, -1, -1])
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n1", "n2"]
    # all three held for it (its own hold): the two cheapest of them
    jobs, (chosen, _, _) = place(FULL, 2, held=[0, 0, 0])
    assert sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"]
    # the pool's node with the tenant's own: neither set has two, the unheld one alone: no place
    jobs, (chosen, placed, left) = place(FULL, 2, held=[0, HELD_BY_POOL, -1], pooled=np.array([True, False]))
    assert chosen.size == 0 and left == 1


def test_the_cost_aware_gate_weighs_the_loss_of_all_the_nodes_it_clears():
    """A forecast 2 x 4 job worth 300 GPU-minutes: each node's cheapest job loses 4 GPUs x (its work since its
    checkpoint + the drain); two of them together must lose less than it is worth, not each one."""
    gate = Gate(now_jobs=np.array([0, 0]), worth=np.array([300.0]), first=np.array([0, 1]), drain_s=0.0,
                checkpoint_s=1e9)
    # the cheapest per node lose 4 x 100 s and 4 x 200 s: 6.7 + 13.3 = 20 GPU-min in all
    refused: list[int] = []
    jobs, (chosen, placed, _) = place(FULL, 2, gate=gate, refused=refused)
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"] and refused == []
    # worth 15: each node alone loses less (6.7 or 13.3), both together more: refused, nothing preempted
    cheap = dataclasses.replace(gate, worth=np.array([15.0]))
    jobs, (chosen, placed, left) = place(FULL, 2, gate=cheap, refused=refused)
    assert chosen.size == 0 and left == 1 and refused == [0]


def _waiting(k: int) -> ClusterState:
    """FULL's low jobs of t1 and t0's 8-GPU job waiting over `k` nodes (Slurm's nodes asked)."""
    run = jobs_on(FULL)
    def obj(a, v):
        return np.concatenate([a, np.array([v], dtype=object)])

    jobs = Jobs(obj(run.ids, "hi"), np.r_[run.tenant, 0], np.r_[run.gpus, 8],
                np.r_[run.priority, PRIORITY["high"]].astype(np.int8), np.r_[run.running, False],
                np.r_[run.runtime_s, 0.0], np.r_[run.wait_s, 60.0], obj(run.node, ""),
                nodes_asked=np.r_[np.ones(len(run), dtype=np.int64), k])
    return ClusterState(AT, ("t0", "t1"), ("high", "low"), 24, np.array([0.0, 24.0]), np.array([8.0, 0.0]), jobs,
                        nodes=nodes_of(run, NAMES))


def test_the_plan_preempts_for_a_waiting_2_x_4_job_on_two_nodes():
    """The engine carries the job's shape (Jobs.nodes_asked of the tenant's largest job) to the choice: two
    preemptions of 4 GPUs on two nodes, where it cleared one node of 8."""
    p = plan(flat_forecast(("t0", "t1"), [0, 24]), _waiting(2), PolicyMemory(), CFG)
    assert sorted((x.job_id, x.node, x.gpus) for x in p.preemptions) == [("j1", "n0", 4), ("j3", "n1", 4)]
    one = plan(flat_forecast(("t0", "t1"), [0, 24]), _waiting(1), PolicyMemory(), CFG)
    assert sorted(x.job_id for x in one.preemptions) == ["j0", "j1"]   # one node of 8: as before


def _low_on_two_nodes():
    """L: a low -N 2 --gres=gpu:8 job of t1 on n0 and n1 (16 GPUs, squeue's node 'n[0-1]'), 100 s old; n2 full with
    a low 8-GPU job of t1, 300 s old (2,400 GPU-s against L's 1,600)."""
    on = np.empty(2, dtype=object)
    on[0], on[1] = ("n0", "n1"), ()
    jobs = dataclasses.replace(jobs_on([(1, 16, "low", "n[0-1]", 100.0), (1, 8, "low", "n2", 300.0)]),
                               nodes_asked=np.array([2, 1]), on_nodes=on)
    nodes = nodes_of(jobs, NAMES)
    return jobs, dataclasses.replace(nodes, free=np.array([0, 0, 0]))


def test_a_low_job_on_several_nodes_is_a_candidate_and_its_requeue_frees_all_its_nodes():
    """By hand: one 8-GPU high job: L is the cheapest candidate (1,600 GPU-s on n0, and on n1), requeued; the old
    code took only jobs whose node is a node name, so it cleared n2. Two 8-GPU high jobs: L alone makes room for
    both (8 freed on n0 and 8 on n1), counted once: one job and 16 GPUs of the budgets. Within 8 GPUs of budget L
    (16 in all) is not taken: n2's job is."""
    jobs, nodes = _low_on_two_nodes()
    chosen, placed, left = choose_placed(jobs, nodes, np.array([1, 0]), np.array([8, 1]), np.array([True, False]),
                                         100, 100)
    assert jobs.ids[chosen].tolist() == ["j0"] and (placed, left) == (1, 0)
    chosen, placed, left = choose_placed(jobs, nodes, np.array([2, 0]), np.array([8, 1]), np.array([True, False]),
                                         16, 1)
    assert jobs.ids[chosen].tolist() == ["j0"] and (placed, left) == (2, 0)
    chosen, placed, left = choose_placed(jobs, nodes, np.array([1, 0]), np.array([8, 1]), np.array([True, False]),
                                         8, 100)
    assert jobs.ids[chosen].tolist() == ["j1"] and (placed, left) == (1, 0)


def test_the_plan_requeues_a_low_job_on_two_nodes_for_a_waiting_high_job():
    """The same through the engine: t0's 8-GPU job waits, three full nodes; the plan requeues L (its node is
    squeue's hostlist, which the actuator expands), not n2's older job."""
    run, nodes = _low_on_two_nodes()

    def obj(a, v):
        return np.concatenate([a, np.array([v], dtype=object)])

    jobs = Jobs(obj(run.ids, "hi"), np.r_[run.tenant, 0], np.r_[run.gpus, 8],
                np.r_[run.priority, PRIORITY["high"]].astype(np.int8), np.r_[run.running, False],
                np.r_[run.runtime_s, 0.0], np.r_[run.wait_s, 60.0], obj(run.node, ""),
                nodes_asked=np.r_[run.nodes_asked, 1], on_nodes=np.r_[run.on_nodes, None])
    jobs.on_nodes[-1] = ()
    st = ClusterState(AT, ("t0", "t1"), ("high", "low"), 24, np.array([0.0, 24.0]), np.array([8.0, 0.0]), jobs,
                      nodes=nodes)
    p = plan(flat_forecast(("t0", "t1"), [8, 24]), st, PolicyMemory(), CFG)
    assert [(x.job_id, x.node, x.gpus) for x in p.preemptions] == [("j0", "n[0-1]", 16)]


def test_a_job_on_several_nodes_counts_on_each_of_its_nodes_where_the_plan_maps_jobs_to_nodes():
    """n0 held by t0 (a window of t0's), n1 and n2 unheld, 8 GPUs each. t0 runs A, -N 2 x 4 on n0 and n2, and B,
    4 GPUs on n0; t1 (low) runs L, -N 2 x 4 on n0 and n1. By hand: t0 runs 8 GPUs on its own node n0 (A's 4 and
    B's; the old code found A on no node: 4), and L is low work on a window's node of another tenant's (takeable by
    the window's drain; the old code: not)."""
    from types import SimpleNamespace

    from daemon.policy.engine import _on_own_nodes, _on_window_nodes

    on = np.empty(3, dtype=object)
    on[0], on[1], on[2] = ("n0", "n2"), (), ("n0", "n1")
    jobs = dataclasses.replace(jobs_on([(0, 8, "high", "n[0,2]", 100.0), (0, 4, "high", "n0", 100.0),
                                        (1, 8, "low", "n[0-1]", 100.0)]), on_nodes=on)
    nodes = dataclasses.replace(nodes_of(jobs, NAMES), free=np.array([0, 4, 4]), held_by=np.array([0, -1, -1]))
    st = ClusterState(AT, ("t0", "t1"), ("high", "low"), 24, np.array([12.0, 8.0]), np.array([0.0, 0.0]), jobs,
                      nodes=nodes)
    assert _on_own_nodes(st, 2, st.used).tolist() == [8.0, 0.0]
    take = _on_window_nodes(jobs, nodes, SimpleNamespace(known=np.array([4, 0])), np.zeros(2, dtype=bool))
    assert take.tolist() == [False, False, True]


def test_a_job_on_several_nodes_runs_its_gpus_on_each_of_its_nodes_types():
    """A mixed fleet: n0 and n1 a100, n2 t4. t0 (high) runs -N 2 x 4 on n1 and n2 (squeue's 'n[1-2]'): by hand 4
    on a100 and 4 on t4 (fleet.split's used per type, what its hold per type is short of); the old code found it on
    no node: none on either."""
    from daemon.policy import fleet

    on = np.empty(1, dtype=object)
    on[0] = ("n1", "n2")
    jobs = dataclasses.replace(jobs_on([(0, 8, "high", "n[1-2]", 100.0)]), on_nodes=on)
    nodes = dataclasses.replace(nodes_of(jobs, NAMES), free=np.array([8, 4, 4]),
                                gpu_type=np.array(["a100", "a100", "t4"], dtype=object))
    st = ClusterState(AT, ("t0", "t1"), ("high", "low"), 24, np.array([8.0, 0.0]), np.array([0.0, 0.0]), jobs,
                      nodes=nodes)
    typed = fleet.split(st, np.array([8, 0]), np.array([True, False]), Config(fleet={"types": ["a100", "t4"]}))
    assert typed.types == ("a100", "t4") and typed.used.tolist() == [[4, 4], [0, 0]]


def test_a_protected_tenant_whose_jobs_ask_no_gpus_does_not_stop_the_plan():
    """A high-tier tenant's only job asks no GPUs (a CPU job, -N 1 with no --gres: Slurm lists it, running or
    pending, with 0 GPUs). Read as its largest job, its hold came in jobs of 0 GPUs: the hold divided by 0 and
    the plan raised (cannot convert float NaN to integer) every cycle that job ran, for every tenant. A job without
    GPUs is no size for a hold: the tenant's holds come in GPUs (1), and the low tenant's work is left alone."""
    run = jobs_on([(1, 4, "low", "n0", 900.0), (1, 4, "low", "n0", 100.0), (0, 0, "high", "n1", 100.0)])
    for k in (1, 2):
        jobs = dataclasses.replace(run, nodes_asked=np.array([1, 1, k]))
        state = ClusterState(AT, ("t0", "t1"), ("high", "low"), 16, np.array([0.0, 8.0]), np.array([0.0, 0.0]),
                             jobs, nodes=nodes_of(jobs, ("n0", "n1")))
        p = plan(flat_forecast(("t0", "t1"), [4, 8]), state, PolicyMemory(), CFG)
        assert p.hold_job_gpus["t0"] == 1 and p.reservations["t0"] >= 4 and not p.preemptions


def _one_at_a_time(avail, held, g, k, need):
    """The rule for jobs on several nodes in free room, one job after another: the tenant's own nodes, then
    unheld ones, the first with k nodes of room; there the k with the least room (then the lowest index)."""
    avail, got = avail.copy(), 0
    for span in (held == 0, held == -1):
        while got < need:
            fit = np.flatnonzero(span & (avail >= g))
            if fit.size < k:
                break
            avail[fit[np.lexsort((fit, avail[fit]))[:k]]] -= g
            got += 1
    return got, avail


def test_jobs_on_several_nodes_in_free_room_are_placed_as_one_at_a_time_and_too_wide_ones_never():
    """choose_placed places a tenant's jobs on several nodes in free room in one pass per set of nodes, not a pass
    over every node per job (20,000 waiting -N 2 jobs took 2 s over 10,000 nodes); the nodes each takes are those
    the one-at-a-time rule takes. A job asking more nodes than the cluster has is never placed, and nothing is
    preempted for it."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        free = rng.integers(0, 9, n)
        held = rng.choice([-1, 0, 1], n, p=[0.6, 0.3, 0.1])
        names = tuple(f"n{i}" for i in range(n))
        spec = [(1, 8 - int(f), "low", names[i], 100.0) for i, f in enumerate(free) if f < 8]
        jobs = jobs_on(spec)
        g, k, need = int(rng.integers(1, 5)), int(rng.integers(2, 5)), int(rng.integers(1, 30))
        nodes = nodes_of(jobs, names, held=held)
        avail = nodes.free.astype(np.int64)
        chosen, placed, left = choose_placed(jobs, nodes, np.array([need, 0]), np.array([g * k, 1]),
                                             np.array([True, False]), 0, 0, avail=avail, job_nodes=np.array([k, 1]))
        want, room = _one_at_a_time(nodes.free.astype(np.int64), held, g, k, need)
        assert (placed, left) == (want, need - want) and chosen.size == 0
        assert avail.tolist() == room.tolist()
    # -N 4 on three nodes, one of them empty, within any budget: no place, nothing preempted
    jobs, (chosen, placed, left) = place(FULL[:4], 4)
    assert chosen.size == 0 and placed == 0 and left == 1


# mutants of b6afa79 no test caught (hmut3); each test below fails with its mutant and passes on main


def test_one_empty_node_is_no_place_for_a_2_x_4_job_without_a_second():
    """n0 empty (8 free), n1 and n2 full: one node of 8 free is one node, where a -N 2 x 4 job does not start
    (read as 8 GPUs on one node in the free-room pass, it was placed there and nothing was cleared). A second node
    is cleared: the younger job of n1."""
    jobs, (chosen, placed, left) = place(FULL[2:], 2)
    assert placed == 1 and left == 0 and jobs.ids[chosen].tolist() == ["j1"]


def test_gpus_not_divisible_by_the_nodes_asked_are_rounded_up_per_node():
    """--gpus=9 -N 2: a node of 4 free and another of 4 free are 8 GPUs, where 9 do not start; its place is two
    nodes of 5 (9 spread evenly, rounded up): the 4-GPU low job on each of n0 and n1 is cleared."""
    jobs = jobs_on([(1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 200.0), (0, 8, "high", "n2", 100.0)])
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs, NAMES), np.array([1, 0]), np.array([9, 1]),
                                         np.array([True, False]), 100, 100, job_nodes=np.array([2, 1]))
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j0", "j1"]


def test_a_job_on_several_nodes_takes_the_fullest_nodes_with_room_and_leaves_an_empty_one_whole():
    """Best fit, as for one-node jobs: n0 and n1 with 4 free each take a 2 x 4 job, and n2 stays empty for an
    8-GPU job (taking the emptiest, n2 and n0, left 4 on two nodes: no 8-GPU job starts anywhere)."""
    jobs = jobs_on([(1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 100.0)])
    nodes = nodes_of(jobs, NAMES)
    avail = nodes.free.astype(np.int64)
    chosen, placed, _ = choose_placed(jobs, nodes, np.array([1, 0]), np.array([8, 1]), np.array([True, False]),
                                      100, 100, avail=avail, job_nodes=np.array([2, 1]))
    assert placed == 1 and chosen.size == 0 and avail.tolist() == [0, 0, 8]


def test_a_second_job_on_several_nodes_does_not_reuse_the_free_room_the_first_took():
    """Two 2 x 4 jobs: n0 and n1 with 4 free each are the first one's place; the second needs room cleared, on
    two distinct nodes (counted again, the same 4 free placed both and nothing was cleared)."""
    spec = [(1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 100.0), (1, 4, "low", "n2", 500.0),
            (1, 4, "low", "n2", 600.0)]
    jobs = jobs_on(spec)
    chosen, placed, left = choose_placed(jobs, nodes_of(jobs, NAMES), np.array([2, 0]), np.array([8, 1]),
                                         np.array([True, False]), 100, 100, job_nodes=np.array([2, 1]))
    assert placed == 2 and left == 0 and len(chosen) == 2 and len(set(jobs.node[chosen])) == 2


def test_a_pooled_tenant_s_job_on_several_nodes_may_take_the_pool_s_nodes():
    """n0 and n1 held by the tier's pool (the tenant is pooled), n2 unheld: the pool's two nodes are its place
    (its jobs start in the pool's reservation); the unheld node alone is none."""
    jobs, (chosen, placed, left) = place(FULL, 2, held=[HELD_BY_POOL, HELD_BY_POOL, -1],
                                         pooled=np.array([True, False]))
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"]


def test_its_own_hold_is_tried_before_unheld_nodes():
    """n0, n1 held for the tenant and n2, n3 unheld with cheaper jobs: its hold first (what is freed there waits
    for it), as for one-node jobs."""
    names = ("n0", "n1", "n2", "n3")
    spec = [(1, 4, "low", "n0", 900.0), (1, 4, "low", "n0", 800.0), (1, 4, "low", "n1", 900.0),
            (1, 4, "low", "n1", 800.0), (1, 4, "low", "n2", 10.0), (1, 4, "low", "n2", 20.0),
            (1, 4, "low", "n3", 10.0), (1, 4, "low", "n3", 20.0)]
    jobs = jobs_on(spec)
    chosen, placed, _ = choose_placed(jobs, nodes_of(jobs, names, held=[0, 0, -1, -1]), np.array([1, 0]),
                                      np.array([8, 1]), np.array([True, False]), 100, 100,
                                      job_nodes=np.array([2, 1]))
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n0", "n1"]


def _choose(spec, names, need=1, job_gpus=8, k=2, budget_gpus=100, budget_jobs=100, gate=None, refused=None,
            idle=None):
    jobs = jobs_on(spec)
    if idle is not None:
        jobs = dataclasses.replace(jobs, idle=np.array(idle, dtype=bool))
    return jobs, choose_placed(jobs, nodes_of(jobs, names), np.array([need, 0]), np.array([job_gpus, 1]),
                               np.array([True, False]), budget_gpus, budget_jobs, gate=gate, refused=refused,
                               job_nodes=np.array([k, 1]))


N4 = ("n0", "n1", "n2", "n3")


def test_the_nodes_cleared_together_stay_within_the_gpu_budget():
    """The cheapest two nodes (n0's young 8-GPU job, n1's 4-GPU one) free 12 GPUs, past a budget of 8: the two
    that free 4 each are cleared (n1, n2), not the cheapest pair."""
    spec = [(1, 8, "low", "n0", 10.0), (1, 4, "low", "n1", 50.0), (1, 4, "low", "n1", 900.0),
            (1, 4, "low", "n2", 70.0), (1, 4, "low", "n2", 900.0)]
    jobs, (chosen, placed, _) = _choose(spec, NAMES, budget_gpus=8)
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n1", "n2"] and jobs.gpus[chosen].sum() <= 8


def test_the_nodes_cleared_together_stay_within_the_job_budget():
    """n0's four young 1-GPU jobs are the cheapest room, and with n1's one job are 5 jobs, past a budget of 4: n1
    and n2 (a job each) are cleared."""
    spec = ([(1, 1, "low", "n0", 1.0)] * 8 + [(1, 4, "low", "n1", 50.0), (1, 4, "low", "n1", 900.0),
                                               (1, 4, "low", "n2", 70.0), (1, 4, "low", "n2", 900.0)])
    jobs, (chosen, placed, _) = _choose(spec, NAMES, budget_jobs=4)
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n1", "n2"]


def test_the_cost_aware_gate_takes_nodes_whose_loss_together_is_below_the_worth():
    """Worth 15 GPU-minutes: the cheapest pair (n0, n1: 100 s and 200 s since their checkpoints) lose 20 in all,
    though each loses less than 15; n2 and n3's jobs checkpointed 10 s and 20 s ago lose 2: they are cleared."""
    gate = Gate(now_jobs=np.array([0, 0]), worth=np.array([15.0]), first=np.array([0, 1]), drain_s=0.0,
                checkpoint_s=600.0)
    spec = [(1, 4, "low", "n0", 100.0), (1, 4, "low", "n0", 5000.0), (1, 4, "low", "n1", 200.0),
            (1, 4, "low", "n1", 5000.0), (1, 4, "low", "n2", 610.0), (1, 4, "low", "n2", 5000.0),
            (1, 4, "low", "n3", 620.0), (1, 4, "low", "n3", 5000.0)]
    refused: list[int] = []
    jobs, (chosen, placed, _) = _choose(spec, N4, gate=gate, refused=refused)
    assert placed == 1 and sorted(jobs.node[chosen].tolist()) == ["n2", "n3"] and refused == []


def test_an_idle_job_s_node_is_cleared_first_for_a_job_on_several_nodes():
    """n0's job is idle (the health step): its GPUs do no work, so n0 is cleared first though its job ran longest,
    and then the cheapest busy node, n1."""
    spec = [(1, 4, "low", "n0", 5000.0), (1, 4, "low", "n0", 9000.0), (1, 4, "low", "n1", 100.0),
            (1, 4, "low", "n1", 9000.0), (1, 4, "low", "n2", 200.0), (1, 4, "low", "n2", 9000.0)]
    jobs, (chosen, placed, _) = _choose(spec, NAMES, idle=[True] + [False] * 5)
    assert placed == 1 and sorted(jobs.ids[chosen].tolist()) == ["j0", "j2"]


def test_room_on_a_node_as_it_is_is_taken_once():
    """Two 2 x 4 jobs; n0 has 4 free: the first job takes them and n1's cleared 4; the second then clears n0 and
    n2 (three jobs in all); counted free again, n0's 4 served both and n0's job was left."""
    spec = [(1, 4, "low", "n0", 300.0), (1, 4, "low", "n1", 100.0), (1, 4, "low", "n1", 900.0),
            (1, 4, "low", "n2", 200.0), (1, 4, "low", "n2", 900.0)]
    jobs, (chosen, placed, _) = _choose(spec, NAMES, need=2)
    assert placed == 2 and sorted(jobs.ids[chosen].tolist()) == ["j0", "j1", "j3"]


def test_the_budget_spent_on_one_job_is_not_spent_again_on_the_next():
    """Two 2 x 4 jobs on FULL and a budget of 8 GPUs (or 2 jobs): the first job's two preemptions spend it, the
    second has no place (with the budget counted afresh per job, four jobs went)."""
    for budget in ({"budget_gpus": 8}, {"budget_jobs": 2}):
        jobs, (chosen, placed, left) = _choose(FULL, NAMES, need=2, **budget)
        assert placed == 1 and left == 1 and len(chosen) == 2


def test_a_job_the_budget_cannot_make_room_for_is_not_called_refused_by_the_gate():
    """Worth 15 GPU-minutes, less than any two nodes lose, but 4 GPUs of budget clear no two nodes anyway: the job
    has no place for the budget, not 'not worth it' (the plan's note tells an operator which)."""
    gate = Gate(now_jobs=np.array([0, 0]), worth=np.array([15.0]), first=np.array([0, 1]), drain_s=0.0,
                checkpoint_s=1e9)
    refused: list[int] = []
    _, (chosen, placed, left) = _choose(FULL, NAMES, budget_gpus=4, gate=gate, refused=refused)
    assert chosen.size == 0 and left == 1 and refused == []


def test_each_forecast_job_is_weighed_at_its_own_worth_and_each_refused_is_counted():
    """Two forecast 2 x 4 jobs worth 300 and 1 GPU-minutes: the first is made room for, the second (worth less
    than any two nodes lose) is refused: once per job refused."""
    gate = Gate(now_jobs=np.array([0, 0]), worth=np.array([300.0, 1.0]), first=np.array([0, 2]), drain_s=0.0,
                checkpoint_s=1e9)
    refused: list[int] = []
    jobs, (chosen, placed, left) = _choose(FULL, NAMES, need=2, gate=gate, refused=refused)
    assert placed == 1 and left == 1 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"] and refused == [0]
    many = dataclasses.replace(gate, worth=np.array([1.0, 1.0]))
    refused = []
    _choose(FULL, NAMES, need=2, gate=many, refused=refused)
    assert refused == [0, 0]


def test_a_tenant_s_hold_is_sized_for_its_largest_job_then_the_most_nodes_among_those():
    """reservation.largest_jobs: t0 runs a -N 1 x 8 job and a -N 4 x 1 job: its largest is the 8 GPUs on one node
    (not the one asking the most nodes); t1's two 8-GPU jobs, -N 1 and -N 2: the -N 2 one (its place is the
    wider). A tenant not among `mine` stays at 1 GPU, one node."""
    from daemon.policy.reservation import largest_jobs
    jobs = dataclasses.replace(jobs_on([(0, 8, "high", "", 0.0), (0, 4, "high", "", 0.0), (1, 8, "high", "", 0.0),
                                        (1, 8, "high", "", 0.0), (2, 16, "low", "", 0.0)]),
                               nodes_asked=np.array([1, 4, 1, 2, 8]))
    quantum, nodes, _ = largest_jobs(jobs, np.array([True, True, True, True, False]), 3)
    assert quantum.tolist() == [8, 8, 1] and nodes.tolist() == [1, 2, 1]


def test_a_window_s_own_pass_places_a_job_on_several_nodes_too():
    """engine._window_first: a pooled tenant's window clears its jobs first, apart from the pool: the 2 x 4 job's
    place there is two nodes too (one 4-GPU job on each of two), not one node cleared whole."""
    from daemon.policy.engine import _window_first
    jobs = jobs_on(FULL)
    chosen, left = _window_first(jobs, nodes_of(jobs, NAMES), np.array([1, 0]), np.array([1, 0]), np.array([8, 1]),
                                 np.array([True, False]), 100, 100, 1, np.array([True, False]), [],
                                 job_nodes=np.array([2, 1]))
    assert left == 0 and sorted(jobs.ids[chosen].tolist()) == ["j1", "j3"]


def test_on_a_mixed_fleet_a_job_on_several_nodes_is_made_room_for_on_nodes_of_its_type():
    """The typed preemption (engine._preempt_typed) carries the job's shape too: a -N 2 x 4 job that accepts v100
    on three v100 nodes full of two low 4-GPU jobs each: the younger job of two of them, not one node whole."""
    from tests.policy.test_fleet_policy import CFG as TYPED, typed_state
    nodes = [("t4-0", "t4", 8), ("v100-0", "v100", 8), ("v100-1", "v100", 8), ("v100-2", "v100", 8)]
    spec = [(0, 8, "high", "", 0, ("v100",))] + [
        (1, 4, "low", f"v100-{i}", r, ()) for i in range(3) for r in (900.0 - 100 * i, 100.0 + 100 * i)]
    s = typed_state(["high", "low"], nodes, spec)
    s = dataclasses.replace(s, jobs=dataclasses.replace(s.jobs, nodes_asked=np.array([2, 1, 1, 1, 1, 1, 1])))
    p = plan(None, s, PolicyMemory(), TYPED)
    assert sorted((x.job_id, x.node) for x in p.preemptions) == [("j2", "v100-0"), ("j4", "v100-1")]


def test_a_node_past_the_budget_alone_does_not_turn_the_choice_from_the_idle_job():
    """n0 is empty (one part), the other is cleared within 4 GPUs of budget: n2's idle 2-GPU job, not n3's busy
    one. n1's idle 8-GPU job is past the budget alone: it is no candidate, and does not make the rule fall back
    from the fewest busy GPU-seconds to the fewest GPUs (n3)."""
    spec = [(1, 8, "low", "n1", 10.0), (1, 2, "low", "n2", 500.0), (0, 4, "high", "n2", 100.0),
            (1, 1, "low", "n3", 100.0), (0, 4, "high", "n3", 100.0)]
    jobs, (chosen, placed, _) = _choose(spec, N4, budget_gpus=4, idle=[True, True, False, False, False])
    assert placed == 1 and jobs.ids[chosen].tolist() == ["j1"]


def test_a_node_whose_candidates_cannot_free_its_part_is_not_cleared():
    """Two -N 2 jobs of 6 GPUs per node on two 8-GPU nodes, each with a low 4-GPU job and 4 free: the first job
    clears both; for the second nothing is left to clear on either node (2 free each): no place. A node's room is
    never read past its own candidates (the last node's then reached past the end of the candidates)."""
    jobs, (chosen, placed, left) = _choose([(1, 4, "low", "n0", 100.0), (1, 4, "low", "n1", 900.0)], ("n0", "n1"),
                                           need=2, job_gpus=12)
    assert placed == 1 and left == 1 and sorted(jobs.ids[chosen].tolist()) == ["j0", "j1"]


def test_the_nodes_cleared_for_a_job_on_several_nodes_count_a_low_job_on_several_nodes_at_its_gpus_in_all():
    """A protected -N 2 x 4 job within 8 GPUs of budget; L, a low -N 2 x 4 job on n0 and n1 (8 GPUs), beside an
    older 4-GPU job on each; n2's young 4-GPU job is the cheapest. _clear_multi counted L at its 4 GPUs on the node
    it cleared, so n2 and n0 were 8 GPUs: requeued, L freed n1 too, 12 GPUs went, past the budget (and n2's job for
    nothing). Counted at its 8 GPUs in all, only L fits the budget: it alone, its two nodes the job's place."""
    on = np.empty(6, dtype=object)
    on[:] = [("n0", "n1"), (), (), (), (), ()]
    jobs = dataclasses.replace(
        jobs_on([(1, 8, "low", "n[0-1]", 100.0), (1, 4, "low", "n0", 5000.0), (1, 4, "low", "n1", 5000.0),
                 (1, 4, "low", "n2", 150.0), (1, 4, "low", "n2", 5000.0), (0, 8, "high", "n3", 100.0)]),
        nodes_asked=np.array([2, 1, 1, 1, 1, 1]), on_nodes=on)
    nodes = dataclasses.replace(nodes_of(jobs, N4), free=np.array([0, 0, 0, 0]))
    chosen, placed, left = choose_placed(jobs, nodes, np.array([1, 0]), np.array([8, 1]), np.array([True, False]),
                                         8, 100, job_nodes=np.array([2, 1]))
    assert jobs.ids[chosen].tolist() == ["j0"] and (placed, left) == (1, 0)


def _aged(n_nodes: int, pending: list[tuple[str, int, int, float, int]], tenants: tuple[str, ...],
          aging_max_share: float):
    """`n_nodes` 8-GPU nodes, each full of two of t1's low 4-GPU jobs (the cheapest on n0), and `pending` normal jobs
    (id, tenant, GPUs, waited s, nodes asked), tenants' tiers normal but t1's: the plan with max_wait 10 steps."""
    names = tuple(f"n{i}" for i in range(n_nodes))
    run = jobs_on([(1, 4, "low", n, 900.0 + 100 * i + 10 * h) for i, n in enumerate(names) for h in range(2)])
    ids, ten, g, wait, k = zip(*pending)
    m = len(pending)
    jobs = Jobs(np.r_[run.ids, np.array(ids, dtype=object)], np.r_[run.tenant, ten], np.r_[run.gpus, g],
                np.r_[run.priority, [PRIORITY["normal"]] * m].astype(np.int8), np.r_[run.running, [False] * m],
                np.r_[run.runtime_s, [0.0] * m], np.r_[run.wait_s, wait], np.r_[run.node, np.array([""] * m, object)],
                nodes_asked=np.r_[np.ones(len(run), dtype=np.int64), k])
    used = np.array([8.0 * n_nodes if t == "t1" else 0.0 for t in tenants])
    pend = np.array([float(sum(x[2] for x in pending if x[1] == i)) for i in range(len(tenants))])
    st = ClusterState(AT, tenants, tuple("low" if t == "t1" else "normal" for t in tenants), 8 * n_nodes, used, pend,
                      jobs, nodes=nodes_of(run, names))
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "max_wait_steps": 10,
                         "aging_max_share": aging_max_share})
    return plan(flat_forecast(tenants, used.tolist()), st, PolicyMemory(), cfg)


def test_an_aged_tenants_hold_is_for_its_admitted_job_not_its_largest_jobs_shape():
    """Aging admits one job per starving tenant within aging_max_share of the GPUs (here 3 of 32): t0's 1-GPU job
    that waited 2 hours. Its hold was rounded up to whole jobs of t0's largest job, a -N 2 --gres=gpu:8 job queued a
    moment ago: a 16-GPU hold (two whole nodes on Slurm) and t1's four jobs on two nodes requeued for a 1-GPU job,
    five times the cap. Now the hold is the admitted job's 1 GPU, and one 4-GPU job (the cheapest) makes room."""
    p = _aged(4, [("old", 0, 1, 7200.0, 1), ("big", 0, 16, 0.0, 2)], ("t0", "t1"), 0.1)
    assert p.reservations == {"t0": 1}
    assert [(x.job_id, x.node, x.gpus) for x in p.preemptions] == [("j0", "n0", 4)]
    assert p.hold_job_gpus == {"t0": 1}


def test_aging_s_bound_counts_the_whole_nodes_an_aged_jobs_hold_takes():
    """aging_max_share 0.375 of 64 GPUs: 24 for aged work. t0's 1-GPU job waited longest (admitted); t2's -N 4
    --gres=gpu:4 job (16 GPUs) next: 1 + 16 fit the 24, so it was admitted too, and its hold is four whole 8-GPU
    nodes (32, as Slurm reserves them): 33 GPUs held for aged work, and 20 GPUs of t1's jobs requeued. Its admission
    counts the 32 its hold takes now: it waits for a slot, and only t0's job is made room for."""
    p = _aged(8, [("first", 0, 1, 9000.0, 1), ("wide", 2, 16, 7200.0, 4)], ("t0", "t1", "t2"), 0.375)
    assert p.reservations == {"t0": 1}
    assert [(x.job_id, x.gpus) for x in p.preemptions] == [("j0", 4)]
    assert any(n.startswith("aging: 1 tenant waited over 10 steps and waits for a slot") for n in p.notes), p.notes
