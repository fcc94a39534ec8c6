"""The start estimate of a Kubernetes gang (a Kueue Workload of k pods, Jobs.packed): its pods may share a node,
where Slurm's -N parts may not (tests/policy/test_eta.py's multi-node case)."""

import dataclasses

import numpy as np

from daemon.policy.eta import RunLengths, estimate
from tests.policy.test_eta import MULTI_LIMITS, _multinode


def test_a_gangs_pods_start_together_on_one_node_with_room_for_both():
    """M and Q, each 2 pods of 4, on 8-GPU nodes with 8 free on n0 alone: M's two pods start at once on n0 (as
    Slurm's -N 2 job it waited for n1 at 300); Q then waits for R1's n1 at 300."""
    st = _multinode((8, 0, 0))
    gang = dataclasses.replace(st, jobs=dataclasses.replace(st.jobs, packed=np.array([False] * 3 + [True, True])))
    got = {e.job_id: e for e in estimate(gang, RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert {j: (got[j].p50_s, got[j].p90_s) for j in ("M", "Q")} == {"M": (0.0, 0.0), "Q": (300.0, 300.0)}
    slurm = {e.job_id: e for e in estimate(st, RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert slurm["M"].p50_s == 300.0
