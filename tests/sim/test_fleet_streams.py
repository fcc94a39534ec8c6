"""A mixed fleet whose tenants' jobs ask different types (SimCluster ``streams``): the per-type invariants at every
step on random fleets (hypothesis), with holds per (tenant, type), the pooled hold, preemptions and node failures."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.policy.state import PRIORITY
from daemon.sim.cluster import NOT_ACCEPTED, RUNNING, SimCluster
from tests.support.sim_books import disrupt

TIERS = [PRIORITY["high"], PRIORITY["normal"], PRIORITY["low"]]
TYPES = ("a100", "h100", "t4")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), streams=st.integers(1, 9), nodes=st.integers(2, 9),
       drain=st.integers(0, 3))
def test_streams_keep_the_per_type_invariants_at_every_step_on_random_fleets(seed, n, streams, nodes, drain):
    rng = np.random.default_rng(seed)
    prio = rng.choice(TIERS, n)
    node_types = [str(x) for x in rng.choice(TYPES, nodes)]
    node_gpus = rng.choice([1, 2, 4, 8], nodes)
    owner = np.r_[np.arange(n), rng.integers(0, n, max(streams - n, 0))][: max(streams, n)]
    spec = [tuple(str(x) for x in rng.permutation(TYPES + ("v100",))[: int(rng.integers(0, 4))]) for _ in owner]
    job = np.minimum(rng.choice([1, 2, 4, 8], n), int(node_gpus.max()))
    c = SimCluster([f"t{i}" for i in range(n)], prio, 0, job, drain_steps=drain, checkpoint_steps=5,
                   max_wait_steps=10, node_types=node_types, node_gpus=node_gpus,
                   streams=list(zip(owner.tolist(), spec)))
    cap, T, S = c.capacity, len(c.type_names), owner.size
    # a tenant accepts a type where any of its streams does (its holds can serve one of its jobs there)
    for i in range(n):
        assert ((c.acc_rank[i] < NOT_ACCEPTED) == (c.stream_rank[owner == i] < NOT_ACCEPTED).any(axis=0)).all()
    for _ in range(80):
        st_ = c.step(rng.integers(0, cap + 8, S).astype(float))
        c.check_invariants()                             # no job on a type its stream does not accept, and the rest
        assert c.idle_hold_misses().size == 0            # a free held node of a type they accept starts high work
        assert st_.served.shape == (S,) and int(st_.served.sum()) == st_.running_gpus
        assert (np.bincount(owner, weights=st_.served, minlength=n) == c.running_per_tenant()).all()
        run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
        assert (c.j_tenant[run] == owner[c.j_stream[run]]).all()
        r = rng.uniform()
        if r < 0.3:
            by = np.zeros((n + 1, T), dtype=np.int64)
            by[:n, int(rng.integers(T))] = rng.integers(0, cap, n) * (prio == PRIORITY["high"])
            c.set_reservations(by[:n].sum(axis=1), None, by_type=by)
            assert c.useless_held().sum() == 0           # never a hold on a type none of the holder's jobs accepts
        elif r < 0.4:   # the high tier's pooled hold, per type for the members the plan holds there
            by = np.zeros((n + 1, T), dtype=np.int64)
            by[n] = cap // (2 * T)
            c.set_reservations(np.zeros(n, dtype=np.int64), None, pool=(prio == PRIORITY["high"], cap // 2),
                               by_type=by, pool_types=rng.uniform(size=(n, T)) < 0.5)
        else:
            disrupt(c, rng, r)
        c.check_invariants()
