"""The node hand-over is one rule (daemon/policy/hand_over.py) in its two callers: on random pools, holds and
running work, the simulated cluster (Holds._hand_over, on arrays) and the Kubernetes node holds
(NodeHolds._hand_over, on node objects, in dry run: the choice only) hand the same nodes over to the same holds."""

import numpy as np
from kubernetes import client as k8s

from daemon.actuators.base import ActionReport
from daemon.actuators.k8s.node_holds import HoldNode, NodeHolds
from daemon.actuators.k8s.objects import POOL_VALUE
from daemon.policy.state import PRIORITY
from daemon.sim.cluster import UNHELD, SimCluster


def _both(seed: int) -> tuple[dict, dict, int]:
    """One random case: the holds after the simulator's hand-over, after the node holds', and the nodes handed."""
    rng = np.random.default_rng(seed)
    n, N, gpn = 4, 9, 8
    names = [f"t{i}" for i in range(n)]                 # name order is index order, as node n0..n8 is
    prio = rng.choice([PRIORITY["high"], PRIORITY["normal"], PRIORITY["low"]], size=n).astype(np.int8)
    job = rng.integers(1, gpn + 1, size=n)
    c = SimCluster(names, prio, N * gpn, job, gpus_per_node=gpn)
    c.pool_members = rng.random(n) < 0.75
    c.pool_members[0] = True
    c.node_holder[:] = rng.choice([n, n, n, UNHELD, *range(n)], size=N)
    # running jobs: per node, some of each tenant's GPUs, never more than the node has
    r_ten, r_node, r_g = [], [], []
    for i in range(N):
        left = gpn
        for t in rng.permutation(n)[: rng.integers(0, 3)]:
            g = int(rng.integers(0, left + 1))
            if g:
                r_ten.append(t), r_node.append(i), r_g.append(g)
                left -= g
    r_ten, r_node, r_g = np.array(r_ten, dtype=np.int64), np.array(r_node, dtype=np.int64), np.array(r_g)
    firm_j = c.prio_of_tenant[r_ten] != PRIORITY["low"]
    have = np.bincount(c.node_holder[c.node_holder >= 0], minlength=n + 1)
    want = have.copy()
    want[:n] += np.where(c.pool_members, rng.integers(0, 4, size=n), 0)   # the pooled holds that grow
    want[n] = max(0, have[n] - int(rng.integers(0, have[n] + 1)))        # the pool that shrinks
    before = c.node_holder.copy()

    nodes = [HoldNode(f"n{i}", gpn, 0, True, None if before[i] == UNHELD else
                      POOL_VALUE if before[i] == n else names[before[i]], "1", ()) for i in range(N)]
    held = {v: {x.name for x in nodes if x.holder == v} for v in [POOL_VALUE, *names]}
    wanted = {**{names[h]: int(want[h]) * gpn for h in range(n)}, POOL_VALUE: int(want[n]) * gpn}
    members = {POOL_VALUE: {names[h] for h in np.flatnonzero(c.pool_members)}, **{t: {t} for t in names}}
    by_tenant: dict = {}
    firm_of: dict = {}
    for t, i, g, f in zip(r_ten.tolist(), r_node.tolist(), r_g.tolist(), firm_j.tolist()):
        for d in [by_tenant] + ([firm_of] if f else []):
            d.setdefault(names[t], {})[f"n{i}"] = d.setdefault(names[t], {}).get(f"n{i}", 0) + g
    holds = NodeHolds(k8s.ApiClient(), label="gpu-autoscaler/hold", gpu_resource="nvidia.com/gpu",
                      tenants_ns={t: t for t in names}, shrink_delay_s=0, dry_run=True)
    rep = ActionReport("kueue", True)
    holds._hand_over(rep, nodes, held, wanted, members, by_tenant, firm_of, {t: int(j) for t, j in zip(names, job)},
                     {})

    c._hand_over(want, have, r_ten, r_node, r_g, firm_j)
    sim = {v: {f"n{i}" for i in np.flatnonzero(c.node_holder == h)} for h, v in [(n, POOL_VALUE), *enumerate(names)]}
    return sim, held, len(rep.actions)


def test_the_simulator_and_the_kubernetes_node_holds_hand_over_the_same_nodes():
    handed = 0
    for seed in range(300):
        sim, held, k = _both(seed)
        assert sim == held, seed
        handed += k
    assert handed > 100       # the cases do hand nodes over (about a third of them, one to three nodes)
