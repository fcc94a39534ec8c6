"""What a source reports about the cluster at one instant.

Jobs are held column-wise (numpy arrays) because the policy must scan tens of
thousands of them within a few milliseconds; a list of objects would not do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from daemon.config import Tier

PRIORITY = {"low": 0, "normal": 1, "high": 2}
PRIORITY_NAME = {v: k for k, v in PRIORITY.items()}
UNHELD, HELD_BY_POOL = -1, -2   # Nodes.held_by: no hold; the high tier's pooled hold (any pooled tenant)
CLOSED = -3   # Nodes.held_by: a place for no tenant (someone else's reservation; a node that takes no new job)


@dataclass(frozen=True)
class Jobs:
    ids: np.ndarray          # str job ids (Slurm job id, pod ns/name, simulator id)
    tenant: np.ndarray       # int index into ClusterState.tenants
    gpus: np.ndarray         # int GPUs held or asked for
    priority: np.ndarray     # int8, see PRIORITY
    running: np.ndarray      # bool; False = pending in the queue
    runtime_s: np.ndarray    # float seconds since (re)start; 0 for pending
    wait_s: np.ndarray       # float seconds spent pending so far
    node: np.ndarray         # str node name ("" when pending)
    accepts: np.ndarray | None = None  # per job, a tuple of GPU types in order of preference (() = any type);
                                       # None: every job accepts any type (a one-model cluster)
    idle: np.ndarray | None = None     # per job, bool: the job health step found it idle or hung (its GPUs do no
                                       # work), so a hold takes its GPUs before a busy job's; False or None
                                       # (unknown: no telemetry, no health step) is busy
    time_limit_s: np.ndarray | None = None  # per job, float seconds it may run in all (Slurm's TimeLimit), NaN when
                                            # it has none or it is unknown; None: no scheduler limits (Kubernetes,
                                            # the simulator). The start estimate ends a running job by it
    nodes_asked: np.ndarray | None = None   # per job, int nodes it runs on or asks for (Slurm -N); None: one each.
                                            # A hold for a job on several nodes takes a node per node asked
    packed: np.ndarray | None = None        # per job, bool: its nodes_asked are pods that may share a node (a
                                            # Kubernetes gang: a Kueue Workload of k pods of gpus/k each), not k
                                            # distinct nodes (Slurm -N); None or False: distinct nodes
    spread: np.ndarray | None = None        # per job, bool: its GPUs are asked for the whole job (Slurm --gpus)
                                            # over nodes_asked distinct nodes, which Slurm fills at least one each
                                            # and as many as free on the first (cons_tres), not evenly: --gpus=6
                                            # -N 4 starts on 3 + 1 + 1 + 1 free; None or False: per node
    on_nodes: np.ndarray | None = None      # per job, a tuple of the node names a running job runs on where they
                                            # are several (Slurm's expanded %N; `node` is then the hostlist, which
                                            # names no node), () otherwise; None: every job on its `node`. Read
                                            # through `parts`, which gives its GPUs on each

    @staticmethod
    def empty() -> "Jobs":
        return Jobs(np.array([], dtype=object), np.array([], dtype=np.int64), np.array([], dtype=np.int64),
                    np.array([], dtype=np.int8), np.array([], dtype=bool), np.array([], dtype=float),
                    np.array([], dtype=float), np.array([], dtype=object))

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def select(self, mask: np.ndarray) -> "Jobs":
        return Jobs(*(getattr(self, f)[mask] for f in ("ids", "tenant", "gpus", "priority", "running",
                                                          "runtime_s", "wait_s", "node")),
                    accepts=None if self.accepts is None else self.accepts[mask],
                    idle=None if self.idle is None else self.idle[mask],
                    time_limit_s=None if self.time_limit_s is None else self.time_limit_s[mask],
                    nodes_asked=None if self.nodes_asked is None else self.nodes_asked[mask],
                    packed=None if self.packed is None else self.packed[mask],
                    spread=None if self.spread is None else self.spread[mask],
                    on_nodes=None if self.on_nodes is None else self.on_nodes[mask])

    @staticmethod
    def concat(parts: "list[Jobs]") -> "Jobs":
        """The jobs of ``parts`` in order. An optional column stays None only where every part lacks it; a part
        without it gets that column's meaning of "unknown" (any type, busy, no limit), so jobs read from a second
        source (Kueue's waiting Workloads beside the pods) join without inventing what the source did not say."""
        if not parts:
            return Jobs.empty()

        def col(name: str, fill) -> np.ndarray | None:
            if all(getattr(p, name) is None for p in parts):
                return None
            out = []
            for p in parts:
                v = getattr(p, name)
                if v is None:
                    v = np.empty(len(p), dtype=object) if fill == () else np.full(len(p), fill)
                    if fill == ():
                        v[:] = [()] * len(p)
                out.append(v)
            return np.concatenate(out)

        return Jobs(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                      ("ids", "tenant", "gpus", "priority", "running", "runtime_s", "wait_s", "node")),
                    accepts=col("accepts", ()), idle=col("idle", False), time_limit_s=col("time_limit_s", np.nan),
                    nodes_asked=col("nodes_asked", 1), packed=col("packed", False), spread=col("spread", False),
                    on_nodes=col("on_nodes", ()))

    def parts(self, nodes: "Nodes", rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where the jobs ``rows`` (indices) run, a part per job and node: each part's position in ``rows``, its
        node's index in ``nodes`` (-1: not in the view) and its GPUs there. A job on several nodes (``on_nodes``)
        has a part on each, its GPUs split evenly (what Slurm gives a --gres=gpu:N job on each node; a --gpus job's
        remainder is counted on its first nodes); any other job one part, all its GPUs, on its ``node``. Without
        ``on_nodes``, exactly ``(arange, index_of(node), gpus)``."""
        rows = np.asarray(rows, dtype=np.int64)
        pos, at, g = np.arange(rows.size), nodes.index_of(self.node[rows]), self.gpus[rows].astype(np.int64)
        if self.on_nodes is None or rows.size == 0:
            return pos, at, g
        multi = [(p, names) for p, names in enumerate(self.on_nodes[rows].tolist()) if names and len(names) > 1]
        if not multi:
            return pos, at, g
        keep = np.ones(rows.size, dtype=bool)
        keep[[p for p, _ in multi]] = False
        m_pos = np.concatenate([np.full(len(names), p) for p, names in multi])
        m_at = nodes.index_of(np.array([n for _, names in multi for n in names], dtype=object))
        m_g = np.concatenate([int(g[p]) // len(names) + (np.arange(len(names)) < int(g[p]) % len(names))
                              for p, names in multi]).astype(np.int64)
        order = np.argsort(np.r_[pos[keep], m_pos], kind="stable")
        return (np.r_[pos[keep], m_pos][order], np.r_[at[keep], m_at][order], np.r_[g[keep], m_g][order])


@dataclass(frozen=True)
class Nodes:
    """Where GPUs are: one entry per node, so decisions can be placement-aware (a preemption that frees
    one GPU on each of eight nodes does not make room for an 8-GPU job)."""

    names: np.ndarray        # node names as the jobs' `node` column spells them
    gpus: np.ndarray         # int healthy GPUs per node (0 = down)
    free: np.ndarray         # int GPUs free now
    draining: np.ndarray     # int GPUs released by earlier preemptions, free once they drain
    held_by: np.ndarray      # int tenant index holding the node (reservation), -1 = none, -2 = the tier's pool,
                             # -3 = closed to every tenant (CLOSED)
    gpu_type: np.ndarray | None = None  # str GPU type per node (daemon.config.fleet); None: all DEFAULT_TYPE

    def __len__(self) -> int:
        return int(self.names.shape[0])

    def index_of(self, job_nodes: np.ndarray) -> np.ndarray:
        """Node index of each job's node name (-1 when pending or unknown)."""
        if len(job_nodes) == 0:
            return np.zeros(0, dtype=np.int64)
        names, jn = np.asarray(self.names), np.asarray(job_nodes)
        if names.dtype.kind in "iu" and jn.dtype.kind in "iu" and np.array_equal(names, np.arange(len(names))):
            # nodes named by their index (the simulator's replay, every step): the name is the index
            return np.where((jn >= 0) & (jn < len(names)), jn, -1).astype(np.int64)
        return pd.Index(names).get_indexer(jn).astype(np.int64)


@dataclass(frozen=True)
class ClusterState:
    at: pd.Timestamp
    tenants: tuple[str, ...]
    tiers: tuple[Tier, ...]
    capacity: int                  # healthy, schedulable GPUs
    used: np.ndarray               # GPUs in use per tenant (NaN = unknown)
    pending: np.ndarray            # GPUs asked for but queued, per tenant (NaN = unknown)
    jobs: Jobs = field(default_factory=Jobs.empty)
    draining: int = 0              # GPUs being released by earlier preemptions
    staleness_s: float = 0.0       # age of the newest sample behind this snapshot
    missing: tuple[str, ...] = ()  # tenants with no fresh sample
    failed_nodes: tuple[str, ...] = ()
    request_rate: np.ndarray | None = None  # req/s per tenant, when the source knows it
    nodes: Nodes | None = None     # per-node view, when the source knows placement
    # what the source removed as not backed by the scheduler (daemon/sources/scheduler_bounds.py): per tenant, GPUs
    # of demand above its running jobs' GPUs; and GPUs the metrics put on nodes the scheduler does not list
    capped: dict[str, int] = field(default_factory=dict)
    capacity_dropped: int = 0

    def tier_array(self) -> np.ndarray:
        return np.array([PRIORITY[t] for t in self.tiers], dtype=np.int8)

    def with_tiers(self, changes: Mapping[str, Tier]) -> ClusterState:
        """This state with the operators' tier changes (tenant -> tier) in place of the source's: the tiers a plan is
        made with, and what a record of that plan (the shadow report's) says the tenant was."""
        if not changes:
            return self
        return dataclasses.replace(self, tiers=tuple(changes.get(t, tier) for t, tier in zip(self.tenants, self.tiers)))

    @property
    def demand(self) -> np.ndarray:
        """GPUs each tenant wants right now (running + queued)."""
        return self.used + self.pending

    def load(self) -> float:
        """Share of healthy GPUs in use; NaN when usage is unknown."""
        if self.capacity <= 0:
            return float("nan")
        used = np.nansum(self.used) if np.isfinite(self.used).any() else float("nan")
        return float(used) / self.capacity
