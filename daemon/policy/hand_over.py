"""Which of the pool's nodes a growing hold takes from the shrinking pool (the node hand-over).

A pooled tenant whose own hold grows (its window's, held apart from the pool: Plan.window_holds) while the pool
shrinks takes first the pool's nodes where its work runs: that work stays where it is, and what the pool lets go
of is where the tenant was already running. The one rule, called alike by the Kubernetes node holds
(daemon/actuators/k8s/node_holds.py, on node objects) and the simulated cluster (daemon/sim/cluster_holds.py, on
arrays), so that the simulator does no more than the actuator does; each caller gives one hold at a time, over the
pool's usable nodes of one GPU type (or of the whole fleet), in its own order of nodes (by name, by index).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def hand_over(gpus: Sequence[int] | np.ndarray, own: Sequence[float] | np.ndarray,
              firm: Sequence[float] | np.ndarray, *, grow: int, spare: int, job_gpus: int) -> list[int]:
    """The positions (into the given nodes: the pool's usable nodes) that one growing hold takes, in the order
    taken. Per node: its GPUs (`gpus`), the hold's GPUs running there (`own`) and the GPUs there of others' work
    that cannot be preempted (`firm`). `grow`: the GPUs the hold asks beyond what it holds; `spare`: the GPUs the
    pool holds beyond what it asks.

    A node is a candidate where the hold runs (``own > 0``) and its job of `job_gpus` GPUs still fits beside the
    firm work there (``firm <= gpus - job_gpus``, ``job_gpus`` at least 1). The candidates where it runs most come
    first, then those with the least firm work, then the callers' order. Each is taken while the hold still grows
    and the node fits in what the pool can spare; a node larger than what is left of the spare is passed over for
    the next (a smaller one may fit)."""
    g = np.asarray(gpus, dtype=np.int64)
    mine = np.asarray(own, dtype=float)
    stuck = np.asarray(firm, dtype=float)
    if grow <= 0 or spare <= 0 or g.size == 0:
        return []
    cand = np.flatnonzero((mine > 0) & (stuck <= g - max(int(job_gpus), 1)))
    cand = cand[np.lexsort((stuck[cand], -mine[cand]))]   # np.lexsort: the last key sorts first; ties keep order
    out = []
    for i in cand.tolist():
        if grow <= 0:
            break
        if g[i] <= spare:
            out.append(i)
            grow -= int(g[i])
            spare -= int(g[i])
    return out
