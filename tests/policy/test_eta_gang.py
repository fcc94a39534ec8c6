"""The start estimate of a Kubernetes gang (a Kueue Workload of k pods, Jobs.packed): its pods may share a node,
where Slurm's -N parts may not (tests/policy/test_eta.py's multi-node case)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from daemon.policy import eta
from daemon.policy.eta import RunLengths, estimate
from daemon.policy.state import UNHELD, ClusterState, Jobs, Nodes
from tests.policy.test_eta import MULTI_LIMITS, TENANTS, TIERS, _multinode


def test_a_gangs_pods_start_together_on_one_node_with_room_for_both():
    """M and Q, each 2 pods of 4, on 8-GPU nodes with 8 free on n0 alone: M's two pods start at once on n0 (as
    Slurm's -N 2 job it waited for n1 at 300); Q then waits for R1's n1 at 300."""
    st = _multinode((8, 0, 0))
    gang = dataclasses.replace(st, jobs=dataclasses.replace(st.jobs, packed=np.array([False] * 3 + [True, True])))
    got = {e.job_id: e for e in estimate(gang, RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert {j: (got[j].p50_s, got[j].p90_s) for j in ("M", "Q")} == {"M": (0.0, 0.0), "Q": (300.0, 300.0)}
    slurm = {e.job_id: e for e in estimate(st, RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert slurm["M"].p50_s == 300.0


def _shaped_queue(gangs: int, packed: bool) -> ClusterState:
    """40 8-GPU nodes, each with 3 GPUs free and a running 5-GPU job of tenant a ending at 100 s x (node + 1), no
    history (time limits). Pending: tenant n's `gangs` jobs, each of its own shape: 2 + i parts of 4 GPUs (120 GPUs
    free in all: the pools take the first 29 shapes), as gangs (Kueue) or -N jobs (Slurm)."""
    n_nodes, names = 40, np.array([f"n{i}" for i in range(40)], dtype=object)
    k = 2 + np.arange(gangs)
    jobs = Jobs(ids=np.array([f"R{i}" for i in range(n_nodes)] + [f"G{i}" for i in range(gangs)], dtype=object),
                tenant=np.r_[np.zeros(n_nodes, dtype=np.int64), np.full(gangs, 2)],
                gpus=np.r_[np.full(n_nodes, 5), 4 * k], priority=np.ones(n_nodes + gangs, dtype=np.int8),
                running=np.r_[np.ones(n_nodes, dtype=bool), np.zeros(gangs, dtype=bool)],
                runtime_s=np.zeros(n_nodes + gangs), wait_s=np.r_[np.zeros(n_nodes), 1000.0 - np.arange(gangs)],
                node=np.r_[names, np.array([""] * gangs, dtype=object)], nodes_asked=np.r_[np.ones(n_nodes), k],
                packed=np.r_[np.zeros(n_nodes, dtype=bool), np.full(gangs, packed)])
    nodes = Nodes(names=names, gpus=np.full(n_nodes, 8), free=np.full(n_nodes, 3), draining=np.zeros(n_nodes),
                  held_by=np.full(n_nodes, UNHELD))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=8 * n_nodes,
                        used=np.array([5.0 * n_nodes, 0, 0, 0]),
                        pending=np.array([0.0, 0, float(jobs.gpus[n_nodes:].sum()), 0]), jobs=jobs, nodes=nodes)


@pytest.mark.parametrize("packed", [True, False])
def test_a_queue_of_jobs_each_of_its_own_shape_is_not_searched_node_by_node_at_every_release(monkeypatch, packed):
    """A tenant's gangs (or -N jobs) whose GPUs fit the pools' free GPUs but whose parts fit no node were each
    searched for nodes at every release (a memo caught only jobs of one shape): 10,000 of them, each of its own
    shape, took 108 s per estimate (bench/eta_shapes_bench.py). Here 60 such jobs and 40 releases: each job is searched
    for nodes about once, where it starts, not once per release (the old code: 482 searches of gangs, 608 of -N
    jobs)."""
    st = _shaped_queue(60, packed)
    calls = []
    real = eta._on_nodes

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(eta, "_on_nodes", counted)
    limits = {f"R{i}": 100.0 * (i + 1) for i in range(40)}
    got = {e.job_id: e.p50_s for e in estimate(st, RunLengths(), time_limit_s=limits, quantiles=(0.5,))}
    assert len(calls) <= 2 * 60, len(calls)
    # 2 x 4: no node has 4 free until R0 ends (100 s, n0's 8 free hold both pods), nor two nodes until R1's (200 s)
    assert got["G0"] == (100.0 if packed else 200.0)
