"""A mixed fleet in the simulator (issue 24): nodes of several GPU types and sizes, tenants whose jobs accept an
ordered set of types. Invariants per type checked at every step on random fleets (hypothesis), and hand-made
cases for preference and typed holds."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.policy.state import PRIORITY
from daemon.sim.cluster import NOT_ACCEPTED, RUNNING, SimCluster
from tests.support.sim_books import disrupt

TIERS = [PRIORITY["high"], PRIORITY["normal"], PRIORITY["low"]]
TYPES = ("a100", "h100", "t4")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7), nodes=st.integers(2, 9), drain=st.integers(0, 3),
       aware=st.booleans())
def test_per_type_invariants_hold_at_every_step_on_random_fleets(seed, n, nodes, drain, aware):
    rng = np.random.default_rng(seed)
    prio = rng.choice(TIERS, n)
    node_types = [str(x) for x in rng.choice(TYPES, nodes)]
    node_gpus = rng.choice([1, 2, 4, 8], nodes)
    accepts = []
    for _ in range(n):
        k = int(rng.integers(0, 4))   # 0 = any type; else an ordered subset (maybe a type no node has)
        accepts.append(tuple(str(x) for x in rng.permutation(TYPES + ("v100",))[:k]))
    job = np.minimum(rng.choice([1, 2, 4, 8], n), int(node_gpus.max()))
    c = SimCluster([f"t{i}" for i in range(n)], prio, 0, job, drain_steps=drain, checkpoint_steps=5,
                   max_wait_steps=10, node_types=node_types, node_gpus=node_gpus, accepts=accepts)
    cap = c.capacity
    assert cap == int(node_gpus.sum())
    T = len(c.type_names)
    for _ in range(100):
        wanted = rng.integers(0, cap + 8, n).astype(float)
        if rng.uniform() < 0.05:
            wanted[rng.integers(n)] = np.nan
        st_ = c.step(wanted)
        c.check_invariants()
        # issue 37: a high-tier job that fits on a free held node of a type it accepts (its tenant's own hold, or
        # the pool's where the plan holds it) starts in that step
        assert c.idle_hold_misses().size == 0
        assert st_.running_gpus + st_.draining_gpus + st_.free_gpus == st_.capacity
        assert int(c.running_per_type().sum()) == st_.running_gpus
        # a job never runs on a type its tenant does not accept (also inside check_invariants; said here too)
        run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        assert (c.acc_rank[c.j_tenant[run], c.node_type[c.j_node[run]]] < NOT_ACCEPTED).all()
        r = rng.uniform()
        if r < 0.3:
            res = rng.integers(0, cap, n) * (prio == PRIORITY["high"])
            by = None
            if aware:
                by = np.zeros((n + 1, T), dtype=np.int64)
                by[:n, int(rng.integers(T))] = res
            c.set_reservations(res, int(rng.integers(0, cap)) if rng.uniform() < 0.5 else None, by_type=by)
            if aware:  # a type-aware hold never sits on a type its holder cannot use
                assert c.useless_held().sum() == 0
        elif r < 0.4:
            by = None
            if aware:
                by = np.zeros((n + 1, T), dtype=np.int64)
                by[n] = cap // (2 * T)
            c.set_reservations(np.zeros(n, dtype=np.int64), None, pool=(prio == PRIORITY["high"], cap // 2),
                               by_type=by, pool_types=rng.uniform(size=(n, T)) < 0.5 if aware else None)
        else:
            disrupt(c, rng, r)
        c.check_invariants()
        held = c.held_per_type()
        assert int(held.sum()) == int(c.held_gpus().sum())


def _fleet(accepts, job=(1,), prio=None, types=("t4", "t4", "h100", "h100"), gpus=(4, 4, 8, 8)):
    n = len(accepts)
    return SimCluster([f"t{i}" for i in range(n)], np.array(prio or [PRIORITY["normal"]] * n), 0,
                      np.array(job * n if len(job) == 1 else job), node_types=list(types), node_gpus=list(gpus),
                      accepts=accepts)


def test_jobs_go_to_their_preferred_type_first_and_never_to_one_they_do_not_accept():
    c = _fleet([("h100", "t4"), ("t4",)])
    st_ = c.step(np.array([4.0, 12.0]))
    per = c.running_per_type()               # columns: h100, t4 (sorted type names)
    assert c.type_names == ("h100", "t4")
    assert per[0].tolist() == [4, 0]         # tenant 0 prefers h100: all on h100 while it has room
    assert per[1].tolist() == [0, 8]         # tenant 1 takes only t4: 8 of its 12 run, the rest waits
    assert st_.queued[1] == 4
    c.check_invariants()
    # tenant 0 grows past the h100 nodes: its next choice is t4, which tenant 1 already fills
    c.step(np.array([20.0, 12.0]))
    assert c.running_per_type()[0].tolist() == [16, 0]


def test_a_type_no_node_has_leaves_the_job_waiting():
    c = _fleet([("v100",), ()])
    st_ = c.step(np.array([3.0, 3.0]))
    assert st_.served.tolist() == [0, 3] and st_.queued[0] == 3
    assert not c.acc_rank[0].min() < NOT_ACCEPTED


def test_typed_holds_land_on_the_type_asked_and_blind_ones_may_not():
    # tenant 0 (high) runs only on h100; a type-blind hold of 8 GPUs goes by the actuators' node rule (a free t4
    # node scores as high as an h100 one, and comes first by index); a type-aware one holds h100 GPUs only
    prio = [PRIORITY["high"], PRIORITY["low"]]
    blind = _fleet([("h100",), ()], prio=prio, gpus=(8, 8, 8, 8))
    blind.step(np.array([0.0, 0.0]))
    blind.set_reservations(np.array([8, 0]))
    aware = _fleet([("h100",), ()], prio=prio)
    aware.step(np.array([0.0, 0.0]))
    by = np.zeros((3, 2), dtype=np.int64)
    by[0, 0] = 8
    aware.set_reservations(np.array([8, 0]), by_type=by)
    assert aware.held_per_type()[0].tolist() == [8, 0] and aware.useless_held()[0] == 0
    assert blind.held_per_type()[0].sum() >= 8
    assert blind.useless_held()[0] == blind.held_per_type()[0][1]   # whatever landed on t4 protects nothing
    assert blind.useless_held()[0] > 0
    # the held h100 node is the holder's: the low tenant cannot start there, the holder can
    st_ = aware.step(np.array([8.0, 24.0]))
    assert st_.served[0] == 8 and aware.running_per_type()[1].tolist() == [8, 8]


def test_the_state_carries_types_and_accepts_for_the_policy():
    import pandas as pd
    c = _fleet([("h100", "t4"), ()])
    c.step(np.array([2.0, 2.0]))
    s = c.state(("a", "b"), ("high", "low"), pd.Timestamp("2026-01-01T00:00:00Z"), 60)
    assert s.nodes.gpu_type.tolist() == ["t4", "t4", "h100", "h100"]
    assert [tuple(a) for a in s.jobs.accepts] == [("h100", "t4")] * 2 + [()] * 2


def test_an_untyped_cluster_has_no_types_in_its_state():
    import pandas as pd
    c = SimCluster(["a"], np.array([1]), 16, np.array([2]))
    c.step(np.array([4.0]))
    s = c.state(("a",), ("normal",), pd.Timestamp("2026-01-01T00:00:00Z"), 60)
    assert s.nodes.gpu_type is None and s.jobs.accepts is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_a_one_type_fleet_of_any_type_jobs_runs_exactly_as_the_one_model_cluster(seed):
    # the typed paths (placement by preference, holds in GPUs per type) reduce to the one-model cluster's when
    # every node has one type and every job accepts any: the same jobs start on the same nodes, step for step
    rng = np.random.default_rng(seed)
    n, nodes = 6, 8
    prio = rng.choice(TIERS, n)
    job = rng.choice([1, 2, 4, 8], n)
    plain = SimCluster([f"t{i}" for i in range(n)], prio, nodes * 8, job, drain_steps=2, checkpoint_steps=5,
                       max_wait_steps=10)
    typed = SimCluster([f"t{i}" for i in range(n)], prio, 0, job, drain_steps=2, checkpoint_steps=5,
                       max_wait_steps=10, node_types=["gpu"] * nodes, node_gpus=[8] * nodes, accepts=[()] * n)
    for _ in range(80):
        wanted = rng.integers(0, 80, n).astype(float)
        a, b = plain.step(wanted), typed.step(wanted)
        assert np.array_equal(a.served, b.served) and np.array_equal(a.queued, b.queued)
        assert np.array_equal(plain.j_node[: plain.size], typed.j_node[: typed.size])
        if rng.uniform() < 0.3:
            res = rng.integers(0, 40, n) * (prio == PRIORITY["high"])
            cap = int(rng.integers(0, 64)) if rng.uniform() < 0.5 else None
            plain.set_reservations(res, cap)
            typed.set_reservations(res, cap)
            assert np.array_equal(plain.node_holder, typed.node_holder)
        elif rng.uniform() < 0.2:
            running = np.flatnonzero(plain.j_state[: plain.size] == RUNNING)
            ids = plain.j_id[rng.choice(running, size=min(running.size, 2), replace=False)] if running.size else []
            plain.preempt(ids)
            typed.preempt(ids)


def test_a_pooled_hold_on_a_type_is_for_the_pooled_tenants_held_there():
    # two high-tier tenants in one pool: A runs only on t4, B anywhere. The plan holds the t4 nodes for A (and
    # B on h100). Without per-type membership B's one-GPU jobs fill the small t4 nodes first (best fit) and A,
    # the tenant the t4 hold is for, waits
    def run(pool_types):
        c = _fleet([("t4",), ()], prio=[PRIORITY["high"]] * 2, types=("t4", "t4", "h100"), gpus=(2, 2, 8))
        by = np.zeros((3, 2), dtype=np.int64)
        by[2] = [0, 4]                                   # columns: h100, t4; row 2 = the pool
        c.set_reservations(np.zeros(2, dtype=np.int64), pool=(np.array([True, True]), 4), by_type=by,
                           pool_types=pool_types)
        c.step(np.array([0.0, 10.0]))
        st_ = c.step(np.array([4.0, 10.0]))
        c.check_invariants()
        return st_.served
    assert run(np.array([[False, True], [True, False]])).tolist() == [4, 8]
    assert run(None)[0] < 4


def test_normal_work_stays_within_its_cap_per_type():
    c = _fleet([(), ()], prio=[PRIORITY["normal"], PRIORITY["low"]], types=("t4", "t4", "h100", "h100"),
               gpus=(4, 4, 8, 8))
    c.set_reservations(np.zeros(2, dtype=np.int64), normal_cap_by_type=np.array([4, 8]))   # h100, t4
    for _ in range(3):
        c.step(np.array([40.0, 40.0]))
        c.check_invariants()
    per = c.running_per_type()
    assert per[0].tolist() == [4, 8]            # normal: 4 of h100, 8 of t4, the rest waits
    assert per[1].tolist() == [12, 0]           # low (preemptible) borrows the rest of h100
