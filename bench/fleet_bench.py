"""The mixed-fleet benchmark (issue 24): type-aware against type-blind plans on the same simulated fleet, and the
policy's latency on a typed cluster of 1,000 tenants x 4 types.

Cases (daemon/sim/fleet_replay.py; perfect forecast, so the modes differ only in their use of types):
  synthetic  3 types (h100 12x8, a100 16x8, t4 16x4 GPUs), 30 tenants with different preferences, 1 day
  alibaba    Alibaba GPU 2023 gpuspec33 pods, tenants = (QoS class, gpu_spec), on the node list's 7-model mix
             scaled to the trace's demand, 2 days
Each is swept over policy.headroom, so they can be compared at equal utilization. A third variant is type-aware
with fleet.reserve_share per type sized from the history window (guarantee_from_history), what an operator of a
mixed fleet would configure; the type-blind engine has one share for the cluster.

    nice -n 10 python bench/fleet_bench.py [--cases synthetic,alibaba] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.config.fleet import FleetConfig  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.policy import PolicyMemory, plan  # noqa: E402
from daemon.policy.state import PRIORITY, UNHELD, ClusterState, Jobs, Nodes  # noqa: E402
from daemon.sim.fleet_replay import (  # noqa: E402
    alibaba_fleet,
    at_equal_utilization,
    guarantee_from_history,
    run_fleet,
    synthetic_fleet,
)
from forecaster.types import Forecast  # noqa: E402

HEADROOMS = (0.0, 0.1, 0.25)


def typed_plan_latency(tenants: int = 1000, types: int = 4, nodes_per_type: int = 250, jobs: int = 20000,
                       repeats: int = 30, seed: int = 3) -> dict:
    """plan() on a typed snapshot: ``tenants`` tenants (10% high), ``types`` types of ``nodes_per_type`` 8-GPU
    nodes, ``jobs`` jobs (80% running) accepting one type, two types in order, or any."""
    rng = np.random.default_rng(seed)
    names = [f"g{k}" for k in range(types)]
    N = types * nodes_per_type
    node_type = np.repeat(np.array(names, dtype=object), nodes_per_type)
    tiers = tuple("high" if i % 10 == 0 else ("low" if i % 2 else "normal") for i in range(tenants))
    ten = rng.integers(0, tenants, jobs)
    g = rng.choice([1, 2, 4, 8], jobs)
    run = rng.uniform(size=jobs) < 0.8
    node = np.where(run, rng.integers(0, N, jobs), -1)
    acc = np.empty(jobs, dtype=object)
    kinds = [(), (names[0],), (names[1], names[2]), (names[3],)]
    acc[:] = [kinds[i % len(kinds)] for i in ten]
    node[run] = np.array([rng.choice(np.flatnonzero(node_type == a[0])) if a else x
                          for a, x in zip(acc[run], node[run])])
    busy = np.minimum(np.bincount(node[run], weights=g[run], minlength=N), 8).astype(np.int64)
    prio = np.array([PRIORITY[tiers[t]] for t in ten], dtype=np.int8)
    names_n = np.array([f"n{i}" for i in range(N)], dtype=object)
    jobs_ = Jobs(np.array([f"j{i}" for i in range(jobs)], dtype=object), ten, g, prio, run,
                 np.where(run, 3600.0, 0.0), np.where(run, 0.0, 120.0),
                 np.where(run, names_n[np.maximum(node, 0)], ""), accepts=acc)
    nodes = Nodes(names_n, np.full(N, 8), 8 - busy, np.zeros(N, dtype=np.int64), np.full(N, UNHELD),
                  gpu_type=node_type)
    used = np.bincount(ten[run], weights=g[run], minlength=tenants).astype(float)
    pend = np.bincount(ten[~run], weights=g[~run], minlength=tenants).astype(float)
    at = pd.Timestamp("2026-01-06T13:50:00Z")
    tn = tuple(f"t{i}" for i in range(tenants))
    state = ClusterState(at, tn, tiers, 8 * N, used, pend, jobs_, nodes=nodes)
    v = np.repeat((used + pend)[:, None, None] * 1.2, 60, axis=1)
    fc = Forecast(tn, (0.5, 0.9, 0.99), np.concatenate([v, v * 1.1, v * 1.2], axis=2), at, 60, "bench")
    cfg = Config()
    first = plan(fc, state, PolicyMemory(), cfg)   # steady state: the memory and last plan of a running daemon
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = plan(fc, state, first.memory, cfg, first, now=at.timestamp() + 600)  # the budget refilled
        times.append(time.perf_counter() - t0)
    return {"tenants": tenants, "types": types, "nodes": N, "jobs": jobs, "gpus": 8 * N,
            "p50_ms": float(np.percentile(times, 50) * 1000), "p95_ms": float(np.percentile(times, 95) * 1000),
            "held_tenants": len(p.holds_by_type), "preemptions": len(p.preemptions)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="synthetic,alibaba")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--data", default=None)
    a = ap.parse_args()
    out = provenance.started()
    cfg = Config()
    cases = {}
    for case in a.cases.split(","):
        if case == "synthetic":
            fw, steps = synthetic_fleet(), 1440
        elif case == "alibaba":
            fw, steps = alibaba_fleet(Path(a.data) if a.data else default_data_dir()), 2880
        else:
            raise SystemExit(f"unknown case {case!r}")
        runs = []
        share = guarantee_from_history(fw)
        cfg_share = cfg.model_copy(update={"fleet": FleetConfig(types=sorted(set(fw.node_types)),
                                                                reserve_share=share)})
        variants = [("aware", "aware", cfg), ("aware", "aware+guarantee", cfg_share), ("blind", "blind", cfg)]
        for mode, label, c in variants:
            for h in HEADROOMS:
                r = run_fleet(fw, c, mode, steps=steps, knobs={"headroom": h}, label=label)
                print(f"{case}/{label}/headroom={h}: util {r['utilization']:.3f}, high unmet "
                      f"{r['tiers']['high']['unmet_share']:.3%}, unusable holds {r['held_unusable_gpu_min']:.0f} "
                      f"GPU-min, {r['wall_s']:.0f} s", file=sys.stderr, flush=True)
                runs.append(r)
        from collections import Counter
        mix = Counter(zip(fw.node_types, fw.node_gpus.tolist()))
        cases[case] = {"workload": fw.w.name, "tenants": len(fw.w.demand.columns), "capacity": fw.w.capacity,
                       "nodes": len(fw.node_types),
                       "fleet": [{"type": t, "gpus_per_node": g, "nodes": k} for (t, g), k in sorted(mix.items())],
                       "steps": steps, "runs": runs, "guarantee_from_history": share,
                       "equal_utilization": {t: at_equal_utilization(runs, t) for t in ("high", "normal", "low")}}
    out["cases"] = cases
    out["plan_latency"] = typed_plan_latency()
    print(f"plan() typed: p50 {out['plan_latency']['p50_ms']:.1f} ms", file=sys.stderr)
    provenance.finished(out)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "fleet.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
