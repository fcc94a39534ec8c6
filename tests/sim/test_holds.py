"""The simulator takes hold nodes by the rule the Slurm reservations and Kubernetes node holds use
(daemon/actuators/whole_nodes.rank), and lets go of a held node its holder can never use."""

from dataclasses import dataclass

import numpy as np

from daemon.actuators import whole_nodes
from daemon.policy.state import PRIORITY
from daemon.sim.cluster import RUNNING, UNHELD, SimCluster


@dataclass(frozen=True)
class _Node:
    name: str
    gpus: int


def _actuators_pick(c: SimCluster, h: int, nodes_wanted: int) -> set[int]:
    """What whole_nodes.rank + pick choose for tenant h on the simulator's state (no current hold)."""
    run = np.flatnonzero(c.j_state[: c.size] == RUNNING)
    firm, score = {}, {}
    drain = c.node_draining()
    for i in range(c.n_nodes):
        name = f"n{i:03d}"
        on = run[c.j_node[run] == i]
        mine = on[c.j_tenant[on] == h]
        foreign = on[(c.j_tenant[on] != h) & (c.prio_of_tenant[c.j_tenant[on]] != PRIORITY["low"])]
        firm[name] = int(c.j_gpus[foreign].sum())
        score[name] = int(c.j_gpus[mine].sum()) + int(c.node_free[i]) + int(drain[i])
    nodes = [_Node(f"n{i:03d}", int(c.node_cap[i])) for i in range(c.n_nodes) if c.node_holder[i] == UNHELD]
    picked = whole_nodes.pick(whole_nodes.rank(nodes, (), firm, score), (), nodes_wanted * c.gpus_per_node, False)
    return {int(x[1:]) for x in picked}


def test_a_new_hold_takes_the_nodes_the_actuators_rule_picks():
    for seed in range(12):
        rng = np.random.default_rng(seed)
        n = 6
        prio = rng.choice([0, 1, 2], size=n).astype(np.int8)
        c = SimCluster([f"t{i}" for i in range(n)], prio, 8 * 10, rng.choice([1, 2, 4, 8], size=n), gpus_per_node=8,
                       drain_steps=2)
        c.step(np.round(rng.uniform(0, 20, n)))
        run = c.j_id[: c.size][c.j_state[: c.size] == RUNNING]
        c.preempt(rng.choice(run, size=min(3, run.size), replace=False))    # some GPUs draining
        h, k = int(rng.integers(n)), int(rng.integers(1, 4))
        expect = _actuators_pick(c, h, k)
        res = np.zeros(n, dtype=np.int64)
        res[h] = 8 * k
        c.set_reservations(res)
        assert set(np.flatnonzero(c.node_holder == h).tolist()) == expect, seed
        c.check_invariants()


def test_a_held_node_full_of_work_that_cannot_be_preempted_is_let_go_for_one_the_holder_can_use():
    prio = np.array([PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["hi", "lo"], prio, 16, np.array([8, 1]), gpus_per_node=8)
    c.step(np.array([8.0, 0.0]))                      # the high tier's job takes node 0
    assert c.j_node[0] == 0
    c.node_holder[0] = 1                               # a stale hold of the low tenant on that node
    c.set_reservations(np.array([0, 8]))               # it still wants one node: the count does not change
    assert c.node_holder.tolist() == [UNHELD, 1]       # but node 0 can never run its job: the hold moves
    st = c.step(np.array([8.0, 8.0]))
    assert st.served.tolist() == [8, 8]


def test_a_pooled_tenants_window_hold_takes_the_pools_nodes_it_runs_on():
    """A pooled high tenant whose window is held apart from the pool (Plan.window_holds) takes first the pool's
    nodes where it already runs, of those the shrinking pool gives up; its jobs stay where they are. Before, the
    pool let go of the node where its members ran least (b's) and the window took a node full of low work, while
    a's own job kept a pool node: the pool ran short by the node a still used."""
    prio = np.array([PRIORITY["high"], PRIORITY["high"], PRIORITY["low"]], dtype=np.int8)
    c = SimCluster(["a", "b", "lo"], prio, 32, np.array([8, 4, 1]), gpus_per_node=8)
    members = np.array([True, True, False])
    c.set_reservations(np.zeros(3, dtype=np.int64), pool=(members, 16))
    c.step(np.array([8.0, 4.0, 24.0]))
    on = {int(c.j_tenant[i]): int(c.j_node[i]) for i in np.flatnonzero(c.j_state[: c.size] == RUNNING)
          if c.j_tenant[i] < 2}
    pool_nodes = set(np.flatnonzero(c.node_holder == 3).tolist())
    assert pool_nodes == {on[0], on[1]} and on[0] != on[1]        # a's and b's jobs run on the pool's two nodes
    c.set_reservations(np.array([8, 0, 0]), pool=(members, 8))     # a's window: 8 of its own, the pool 8 (b's)
    assert np.flatnonzero(c.node_holder == 0).tolist() == [on[0]]  # the node a runs on, handed over
    assert np.flatnonzero(c.node_holder == 3).tolist() == [on[1]]  # the pool keeps b's
    c.check_invariants()
