"""What occupies the GPUs held for a tenant (issue 37, item 2): per GPU type, the held nodes' GPUs split into the
tenant's own running work, other tenants' work that cannot be preempted, other tenants' preemptible work, GPUs
draining and GPUs free.

Why: a high-tier job may wait beside its own hold because the hold's GPUs are taken by other tenants' high-tier
jobs that started there before the plan moved their holds elsewhere; high-tier work is never preempted, so those
GPUs stay occupied, not idle, until the jobs end. The tenant page and /api/v1/tenants/<t> show this split so that
the wait explains itself. On the high tier's pool (nodes held together for every high-tier tenant) the other pool
tenants' work is counted apart (`pool_others`): the pool is held for them too, so their jobs there are what the pool
is for, not work that "started there before the plan held these nodes"; counted with the latter, a tenant held 18 of
a 600-GPU pool read "481 of your held GPUs run other tenants' work". Pure: the cycle's snapshot in, plain numbers
out.
"""

from __future__ import annotations

import numpy as np

from daemon.config import DEFAULT_TYPE
from daemon.policy.state import HELD_BY_POOL, PRIORITY, ClusterState

PARTS = ("own", "pool_others", "others_protected", "others_preemptible", "draining", "free")


def hold_use(state: ClusterState, tenant: int, pool: np.ndarray, protected: np.ndarray) -> dict[str, dict[str, int]]:
    """Per GPU type, the GPUs of the nodes held for tenant `tenant` now (held by it, or by the high tier's pool when
    it is one of the tenants `pool` marks, bool per tenant: those the pool is held for) and what occupies them
    (PARTS), with `gpus` their healthy GPUs. The other pool tenants' work on the pool's nodes is `pool_others`.

    `protected` (bool per tenant) marks the tenants whose work the policy never preempts besides the high tier's
    (held for, floored, paused): another tenant's running job is preemptible only when it is low-priority and its
    tenant is not protected (daemon/policy/preemption.py), else it counts in `others_protected`. Empty when the
    source reports no nodes or nothing is held for the tenant."""
    nodes = state.nodes
    if nodes is None or len(nodes) == 0:
        return {}
    pool = np.asarray(pool, dtype=bool)
    pooled = bool(pool[tenant])
    on_pool = (nodes.held_by == HELD_BY_POOL) & pooled
    held = (nodes.held_by == tenant) | on_pool
    if not held.any():
        return {}
    types = nodes.gpu_type.astype(str) if nodes.gpu_type is not None else np.full(len(nodes), DEFAULT_TYPE)
    out: dict[str, dict[str, int]] = {}
    for k in np.flatnonzero(held):
        row = out.setdefault(str(types[k]), {"gpus": 0, **dict.fromkeys(PARTS, 0)})
        row["gpus"] += int(nodes.gpus[k])
        row["draining"] += int(nodes.draining[k])
        row["free"] += int(nodes.free[k])
    jobs = state.jobs
    if len(jobs):
        run = np.flatnonzero(jobs.running)
        pos, node_of, gpus = jobs.parts(nodes, run)   # a job on several nodes: its GPUs on each of them
        on = node_of >= 0
        on[on] = held[node_of[on]]
        prot = np.asarray(protected, dtype=bool)
        for p in np.flatnonzero(on):
            j, k = run[pos[p]], node_of[p]
            t = int(jobs.tenant[j])
            if t == tenant:
                part = "own"
            elif pool[t] and on_pool[k]:
                part = "pool_others"
            elif jobs.priority[j] == PRIORITY["low"] and not prot[t]:
                part = "others_preemptible"
            else:
                part = "others_protected"
            out[str(types[k])][part] += int(gpus[p])
    return dict(sorted(out.items()))
