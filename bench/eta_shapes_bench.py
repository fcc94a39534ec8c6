"""How long the start-time estimate takes when one tenant queues many jobs, each of its own shape: 10,000 Kueue
gangs (2 to 65 pods of 1 to 8 GPUs) or Slurm -N jobs of the same shapes, beside the same queue of one-node jobs of
the same GPUs (what a tenant's queue of that size costs without shapes), on bench/eta_scale_bench.py's cluster at
1,250 nodes (100 tenants, ~98% full). Before daemon/policy/eta.py's _Shapes, each such job whose GPUs fit the
pools but whose parts fit no node was searched for nodes at every release.

    python bench/eta_shapes_bench.py [--pending 10000] [--nodes 1250]   -> bench/out/eta_shapes.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.eta_scale_bench import cluster  # noqa: E402
from bench.provenance import finished, started  # noqa: E402
from daemon.policy.eta import estimate  # noqa: E402
from daemon.policy.state import PRIORITY  # noqa: E402


def queue(pending: int, nodes: int, mode: str):
    """The cluster with every pending job tenant t0050's (normal), job i of 2 + i % 64 parts of 1 + (i // 64) % 8
    GPUs: a gang (``packed``), a -N job (``multi``) or one job of those GPUs on one node (``onenode``)."""
    st, rl = cluster(100, nodes, pending)
    j = st.jobs
    n_run = int(j.running.sum())
    k = np.ones(len(j), dtype=np.int64)
    parts = 2 + np.arange(pending) % 64
    per = 1 + (np.arange(pending) // 64) % 8
    gpus = j.gpus.copy()
    gpus[n_run:] = parts * per
    if mode != "onenode":
        k[n_run:] = parts
    tenant, prio = j.tenant.copy(), j.priority.copy()
    tenant[n_run:], prio[n_run:] = 50, PRIORITY["normal"]
    jobs = dataclasses.replace(j, tenant=tenant, priority=prio, gpus=gpus, nodes_asked=k,
                               packed=np.r_[np.zeros(n_run, dtype=bool), np.full(pending, mode == "packed")],
                               wait_s=np.r_[np.zeros(n_run), 1000.0 + np.arange(pending)[::-1]])
    return dataclasses.replace(st, jobs=jobs), rl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1250)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out/eta_shapes.json")
    a = ap.parse_args()
    res = started()
    runs = {}
    for mode in ("packed", "multi", "onenode"):
        st, rl = queue(a.pending, a.nodes, mode)
        t0 = time.perf_counter()
        etas = estimate(st, rl)
        runs[mode] = {"estimate_s": round(time.perf_counter() - t0, 2),
                      "pending_with_p50": sum(e.p50_s is not None for e in etas)}
    res.update({"pending_jobs": a.pending, "nodes": a.nodes, "gpus": a.nodes * 8,
                "running_jobs": int(st.jobs.running.sum()), "runs": runs})
    finished(res)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
