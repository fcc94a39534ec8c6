"""The simulator's physics, checked at every step on random workloads (hypothesis) and on hand-made cases."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.policy.state import PRIORITY
from daemon.sim.cluster import QUEUED, RUNNING, SimCluster
from tests.support.sim_books import BookedSimCluster, disrupt

TIERS = [PRIORITY["high"], PRIORITY["normal"], PRIORITY["low"]]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7), nodes=st.integers(1, 6),
       gpn=st.sampled_from([2, 4, 8]), drain=st.integers(0, 3))
def test_invariants_hold_at_every_step_on_random_workloads(seed, n, nodes, gpn, drain):
    rng = np.random.default_rng(seed)
    prio = rng.choice(TIERS, n)
    job = rng.choice([1, 2, 4, 8], n)
    job = np.minimum(job, gpn)
    cap = nodes * gpn - int(rng.integers(0, gpn))  # the last node may be smaller
    c = BookedSimCluster([f"t{i}" for i in range(n)], prio, cap, job, gpus_per_node=gpn, drain_steps=drain,
                         checkpoint_steps=5, max_wait_steps=10)
    for s in range(120):
        wanted = rng.integers(0, cap + gpn, n).astype(float)
        if rng.uniform() < 0.05:
            wanted[rng.integers(n)] = np.nan               # a gap in the trace: no change
        st_ = c.step(wanted)
        c.check_invariants()
        # a high-tier job that fits on a free node its tenant holds (or the pool it belongs to) started this step
        assert c.idle_hold_misses().size == 0
        assert st_.running_gpus + st_.draining_gpus <= st_.capacity
        assert st_.running_gpus + st_.draining_gpus + st_.free_gpus == st_.capacity
        # served per tenant is what its running jobs hold: GPUs on healthy nodes, each job once
        assert np.array_equal(st_.served, c.running_now())
        r = rng.uniform()
        if r < 0.3:  # the policy's kinds of actions, at random
            c.set_reservations(rng.integers(0, cap, n) * (prio == PRIORITY["high"]),
                               int(rng.integers(0, cap)) if rng.uniform() < 0.5 else None)
        elif r < 0.4:
            c.set_reservations(np.zeros(n, dtype=np.int64), None, pool=(prio == PRIORITY["high"], cap // 2))
        else:
            disrupt(c, rng, r)
        c.check_invariants()
    # GPU-minutes conserved, against books kept from the job table and the actions taken (tests/support/sim_books.py):
    # served per tenant = the GPU-steps of its job stints (preempted, requeued, finished and stranded ones
    # included); every healthy GPU-step was running, draining (drain_steps after each preemption) or free
    c.check_conserved()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6), nodes=st.integers(2, 6), gpn=st.sampled_from([2, 4, 8]))
def test_a_node_restored_with_stranded_jobs_is_never_booked_twice(seed, n, nodes, gpn):
    # nodes fail with their jobs left stranded (as on a real cluster before anyone reacts) and come back
    # before anyone requeued them: the node comes back empty, its stranded jobs queued, nothing booked twice
    rng = np.random.default_rng(seed)
    prio = rng.choice(TIERS, n)
    job = np.minimum(rng.choice([1, 2, 4, 8], n), gpn)
    cap = nodes * gpn
    c = BookedSimCluster([f"t{i}" for i in range(n)], prio, cap, job, gpus_per_node=gpn, drain_steps=1,
                         checkpoint_steps=5, max_wait_steps=10)
    for _ in range(80):
        c.step(rng.integers(0, cap + gpn, n).astype(float))
        c.check_invariants()
        r = rng.uniform()
        if r < 0.15:
            c.fail_node(int(rng.integers(c.n_nodes)), requeue=False)
        elif r < 0.3:
            for node in np.flatnonzero(~c.node_ok):
                stranded = set(c.j_id[c.running_on(int(node))].tolist())
                back = c.restore_node(int(node))
                c.check_invariants()
                assert set(back) == stranded                  # exactly the stranded jobs went back to the queue
                assert c.running_on(int(node)).size == 0
                assert c.node_free[node] == c.node_cap[node]
        c.check_invariants()
    c.check_conserved()


def test_restoring_a_node_requeues_the_jobs_stranded_on_it():
    c = SimCluster(["a", "b"], np.array([PRIORITY["normal"], PRIORITY["low"]]), 8, np.array([8, 8]),
                   gpus_per_node=8, drain_steps=0)
    c.step(np.array([8.0, 8.0]))
    (running,) = c.j_id[c.running_on(0)].tolist()
    assert c.fail_node(0, requeue=False) == [running]
    back = c.restore_node(0)
    c.check_invariants()
    assert back == [running]
    st_ = c.step(np.array([8.0, 8.0]))
    c.check_invariants()
    assert st_.running_gpus == 8                         # one 8-GPU job on the 8-GPU node, not two


def test_held_gpus_are_never_filled_beyond_what_is_free():
    # the over-commit seen before: a 16-GPU cluster full of low work, then a 16-GPU hold for a tenant that
    # asks for 22: nothing may start until GPUs are really free
    c = SimCluster(["hi", "lo"], np.array([PRIORITY["high"], PRIORITY["low"]]), 16, np.array([1, 1]),
                   gpus_per_node=8, drain_steps=0)
    c.step(np.array([0.0, 16.0]))
    assert c.running_per_tenant().tolist() == [0, 16]
    c.set_reservations(np.array([16, 0]))
    for _ in range(5):
        st_ = c.step(np.array([22.0, 16.0]))
        c.check_invariants()
        assert st_.running_gpus <= 16 and st_.served[0] == 0
    # the low work leaves one node: the high tenant gets exactly that node
    st_ = c.step(np.array([22.0, 8.0]))
    assert st_.served.tolist() == [8, 8] and st_.running_gpus == 16


def test_holds_are_whole_nodes_and_only_the_holder_starts_there():
    c = SimCluster(["hi", "lo"], np.array([PRIORITY["high"], PRIORITY["low"]]), 32, np.array([1, 1]),
                   gpus_per_node=8)
    c.set_reservations(np.array([3, 0]))                  # 3 GPUs asked: one whole node held
    assert c.held_gpus()[0] == 8
    st_ = c.step(np.array([2.0, 40.0]))
    assert st_.served.tolist() == [2, 24]                 # the low tenant gets the 3 other nodes, not the held one
    held = np.flatnonzero(c.node_holder == 0)
    assert c.node_free[held].sum() == 6                  # the hold's idle GPUs stay idle (nobody borrows)


def test_an_8_gpu_job_needs_a_whole_free_node():
    c = SimCluster(["big", "small"], np.array([PRIORITY["high"], PRIORITY["low"]]), 16, np.array([8, 1]),
                   gpus_per_node=8)
    c.step(np.array([0.0, 2.0]))                          # best fit packs the two 1-GPU jobs on one node
    assert (c.node_free == 8).sum() == 1
    st_ = c.step(np.array([8.0, 2.0]))
    assert st_.served.tolist() == [8, 2]
    # one 1-GPU job on each node (a hold steers the second one): 14 GPUs free, yet no whole node
    c2 = SimCluster(["big", "s1", "s2"], np.array([PRIORITY["high"], PRIORITY["low"], PRIORITY["low"]]), 16,
                    np.array([8, 1, 1]), gpus_per_node=8)
    c2.set_reservations(np.array([0, 1, 1]))                # s1 and s2 each hold one node
    c2.step(np.array([0.0, 1.0, 1.0]))
    c2.set_reservations(np.array([0, 0, 0]))
    st_ = c2.step(np.array([8.0, 1.0, 1.0]))
    c2.check_invariants()
    assert st_.free_gpus == 14 and st_.served[0] == 0 and c2.queued_per_tenant()[0] == 8


def test_a_shared_pool_serves_whichever_member_peaks():
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]])
    c = SimCluster(["a", "b", "lo"], prio, 32, np.array([1, 1, 1]), gpus_per_node=8)
    c.set_reservations(np.zeros(3, dtype=np.int64), None, pool=(prio == PRIORITY["high"], 16))
    st_ = c.step(np.array([16.0, 0.0, 32.0]))
    assert st_.served.tolist() == [16, 0, 16]
    st_ = c.step(np.array([0.0, 16.0, 32.0]))
    assert st_.served.tolist() == [0, 16, 16]             # b takes the pool a just left


def test_a_high_tier_job_starts_on_its_free_hold_even_when_the_rest_is_full():
    # issue 37: the low tier already fills the unheld node; the high tenant's job must start on the pool's free node
    # (and on a hold of its own) in the step it arrives, not wait beside it
    prio = np.array([PRIORITY["high"], PRIORITY["low"]])
    for pool in (True, False):
        c = SimCluster(["hi", "lo"], prio, 8, np.array([4, 4]), gpus_per_node=4)
        if pool:
            c.set_reservations(np.zeros(2, dtype=np.int64), None, pool=(prio == PRIORITY["high"], 4))
        else:
            c.set_reservations(np.array([4, 0]))
        c.step(np.array([0.0, 8.0]))                       # lo runs on the one node not held
        st_ = c.step(np.array([4.0, 8.0]))
        assert st_.served.tolist() == [4, 4] and c.idle_hold_misses().size == 0


def test_starvation_adds_up_every_queue_stint_of_a_job():
    c = SimCluster(["hi", "lo"], np.array([PRIORITY["high"], PRIORITY["low"]]), 8, np.array([8, 8]),
                   gpus_per_node=8, drain_steps=0, max_wait_steps=1000)
    c.step(np.array([8.0, 8.0]))                   # hi runs, lo waits
    for _ in range(4):
        c.step(np.array([8.0, 8.0]))
    st_ = c.step(np.array([0.0, 8.0]))             # hi leaves: lo starts after 5 steps queued
    assert st_.started[:, :2].tolist() == [[5, 5]]
    c.preempt(c.j_id[c.running_on(0)])             # requeued
    for _ in range(3):
        c.step(np.array([8.0, 8.0]))               # hi back: lo waits 3 more steps
    assert c.starvation()[PRIORITY["low"]] == 5 + 3


def _busy_cluster():
    """Two 8-GPU nodes: a high tenant's 8-GPU job fills node 0; six 1-GPU low jobs started on node 1, two of
    them preempted (queued again, their 2 GPUs draining). Its books add up."""
    c = SimCluster(["hi", "lo"], np.array([PRIORITY["high"], PRIORITY["low"]]), 16, np.array([8, 1]),
                   gpus_per_node=8, drain_steps=2)
    c.step(np.array([8.0, 6.0]))
    c.preempt(c.j_id[np.flatnonzero((c.j_state[: c.size] == RUNNING) & (c.j_tenant[: c.size] == 1))[:2]])
    c.check_invariants()
    assert c.draining_gpus() == 2 and (c.j_state[: c.size] == QUEUED).sum() == 2
    return c


@pytest.mark.parametrize("corrupt, message", [
    # a node over-filled: a queued job marked running on the full node, nothing taken from its free count
    (lambda c: _start_on(c, _queued(c), _full(c)), "books off"),
    # a job running without a node, and one placed on a node while queued
    (lambda c: c.j_node.__setitem__(_running(c), -1), "running without a node"),
    (lambda c: c.j_node.__setitem__(_queued(c), 0), "running without a node"),
    # per-node books that do not add up: a GPU appears from nowhere, or one goes missing
    (lambda c: c.node_free.__setitem__(1, c.node_free[1] + 1), "books off"),
    (lambda c: c.node_free.__setitem__(1, c.node_free[1] - 1), "books off"),
    # drained GPUs released twice (free and still draining)
    (lambda c: c.node_free.__setitem__(int(c.d_node[0]), c.node_free[int(c.d_node[0])] + int(c.d_gpus[0])),
     "books off"),
    # negative free GPUs
    (lambda c: c.node_free.__setitem__(_full(c), -1), "negative free"),
    # a job counted twice, a slot in no state
    (lambda c: c.j_id.__setitem__(1, c.j_id[0]), "counted twice"),
    (lambda c: c.j_state.__setitem__(0, 0), "in no state"),
    # a hold left on a failed node; preempted-idle GPUs that are not free
    (lambda c: (c.fail_node(1, requeue=True), c.node_holder.__setitem__(1, 0)), "hold sits on a failed node"),
    (lambda c: c.node_pre.__setitem__(_full(c), 1), "preempted-idle"),
])
def test_the_checker_raises_on_a_broken_state(corrupt, message):
    import copy

    c = _busy_cluster()
    broken = copy.deepcopy(c)
    corrupt(broken)
    with pytest.raises(AssertionError, match=message):
        broken.check_invariants()
    c.check_invariants()                                  # the untouched copy still passes


def _start_on(c, pos, node):
    c.j_state[pos] = RUNNING
    c.j_node[pos] = node


def _queued(c):
    return np.flatnonzero(c.j_state[: c.size] == QUEUED)[0]


def _running(c):
    return np.flatnonzero(c.j_state[: c.size] == RUNNING)[0]


def _full(c):
    return int(np.flatnonzero(c.node_free == 0)[0])


def test_starvation_stays_cumulative_once_the_requeued_job_starts_again_or_is_withdrawn():
    def cluster():
        c = SimCluster(["hi", "lo"], np.array([PRIORITY["high"], PRIORITY["low"]]), 8, np.array([8, 8]),
                       gpus_per_node=8, drain_steps=0, max_wait_steps=1000)
        for _ in range(5):
            c.step(np.array([8.0, 8.0]))               # hi runs, lo waits: 4 steps queued after its first
        c.step(np.array([0.0, 8.0]))                   # lo starts after 5 steps
        c.preempt(c.j_id[c.running_on(0)])             # requeued
        for _ in range(3):
            c.step(np.array([8.0, 8.0]))               # 3 more steps queued
        return c

    c = cluster()
    st_ = c.step(np.array([0.0, 8.0]))                 # hi leaves: lo starts again, 4 steps into this stint
    assert st_.started[:, :2].tolist() == [[4, 9]]     # this stint, and all stints
    for _ in range(3):
        c.step(np.array([0.0, 8.0]))
    assert c.starvation()[PRIORITY["low"]] == 9        # running now: the longest wait is kept, not the stint's
    c = cluster()
    c.step(np.array([8.0, 0.0]))                       # lo gives up while queued: its wait still counts
    assert (c.j_state[: c.size] == QUEUED).sum() == 0
    assert c.starvation()[PRIORITY["low"]] == 9
