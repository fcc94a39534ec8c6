"""Idle reclaim through the product's own decisions on the one simulator: per tier, unmet demand, preemptions (by
the plan) and reclaims (by the health step), work lost, allocated and busy utilization (allocation weighted by
activity), with and without reclaim, same seed, same physics, on the Helios "Earth" demand (16 VCs as 32 tenants).

Each step runs what the daemon's cycle runs (daemon/sim/health_replay.py): the strategy's `plan()` with `Jobs.idle`
from the last health step's findings, the plan applied, then the health step (`assess`: `detect`, coverage,
`decide`, the function `HealthRunner` calls) on simulated per-GPU telemetry, its reclaims applied through the
simulator's actuator (a requeue: the cluster's preemption) within the preemption budget the plan left. Modes:
off (no health step: the plain replay), report (findings mark idle jobs for the plan; nothing requeued), requeue
(the configured actions: by default low-tier jobs idle or hung for health.idle_action_minutes are requeued, high
and normal reported only).

The busy shares are a model (daemon/sim/activity.py says why: no trace we hold records per-job activity, and
Helios' `gpu_utilization` is allocated/quota), so the runs are repeated for several idle shares. "Dedicated" is a
bound computed from the same trace, not simulated: each VC on its own quota (the trace's `total_gpu_num`), serving
min(demand, quota), busy at the same modelled shares.

`--every N` runs the health step every N steps (the detectors read a window per GPU, which is the replay's cost);
`--every-main` is the cadence of the first strategy at the middle idle share (1: every cycle, as the daemon).

    nice -n 10 python bench/health_bench.py [--days 3] [--idle-shares 0.1,0.25,0.4] [--strategies reactive,perfect]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.config import Config  # noqa: E402
from daemon.sim.activity import ActivityParams  # noqa: E402
from daemon.sim.health_replay import MODES, run_health, summary  # noqa: E402
from daemon.sim.workloads import helios  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import provenance  # noqa: E402  (bench/, next to this script)


def dedicated(data: Path, w, params: ActivityParams) -> dict:
    """Each VC on its own quota: served = min(demand, quota); busy = served x the modelled mean busy share."""
    root = data / "helios-earth-2020"
    quotas = {f.parent.name: int(pd.read_csv(f, nrows=1)["total_gpu_num"].iloc[0])
              for f in sorted(root.glob("vc*/cluster_sequence_vc.csv"))}
    d = w.demand.iloc[w.start:]
    vc = d.T.groupby(lambda c: c.split("/")[0]).sum().T
    served = np.minimum(vc.to_numpy(), np.array([quotas[v] for v in vc.columns]))
    q = float(sum(quotas.values()))
    alloc = served.sum(axis=1).mean() / q
    mean_busy = (1 - params.idle_share) * params.busy_level + params.idle_share * params.idle_level
    return {"quota_gpus": int(q), "alloc_util": alloc, "busy_util": alloc * mean_busy}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--idle-shares", default="0.1,0.25,0.4")
    ap.add_argument("--strategies", default="reactive,perfect",
                    help="the first at every idle share; the others at the middle one only")
    ap.add_argument("--every", type=int, default=5, help="health step every N steps (the sweep)")
    ap.add_argument("--every-main", type=int, default=1, help="health step every N steps (the main case)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args()
    w = helios(args.data, days=args.days, history_days=0.25)
    cfg = Config()
    shares = [float(x) for x in args.idle_shares.split(",")]
    strategies = args.strategies.split(",")
    mid = shares[len(shares) // 2]
    plan = [(strategies[0], mid, args.every_main)] + [(strategies[0], s, args.every) for s in shares] \
        + [(st, mid, args.every) for st in strategies[1:]]
    h, pc = cfg.health, cfg.policy
    out = {**provenance.started(), "workload": w.name, "days": args.days, "capacity": w.capacity, "seed": args.seed,
           "health": {"idle_warn_minutes": h.idle_warn_minutes, "idle_action_minutes": h.idle_action_minutes,
                      "hung_action_minutes": h.hung_action_minutes, "idle_actions": dict(h.idle_actions),
                      "window_minutes": h.window_minutes()},
           "budget": {"share": pc.preempt_budget_share, "jobs": pc.preempt_budget_jobs,
                      "window_s": pc.preempt_budget_window_s, "min_runtime_s": pc.preempt_min_runtime_s},
           "runs": []}
    steps = len(w.demand) - w.start
    for strategy, share, every in plan:
        p = ActivityParams(idle_share=share)
        t0 = time.perf_counter()
        row = {"strategy": strategy, "idle_share": share, "every": every, "params": p.__dict__,
               "dedicated_bound": dedicated(args.data, w, p), "modes": {}}
        for mode in MODES:
            m, hook = run_health(strategy, w, cfg, mode, steps=steps, params=p, seed=args.seed, every=every)
            row["modes"][mode] = summary(m, hook.meter)
            s = row["modes"][mode]
            print(f"{strategy} idle {share:g} every {every} {mode}: busy {s['busy_util']:.3f} alloc "
                  f"{s['alloc_util']:.3f} low unmet {s['tiers']['low']['unmet_gpu_min']:.0f} reclaimed "
                  f"{s['tiers']['low']['reclaimed']} preempted {s['tiers']['low']['preempted_by_plan']} "
                  f"({s['wall_s']:.0f} s)", file=sys.stderr, flush=True)
        row["seconds"] = round(time.perf_counter() - t0, 1)
        out["runs"].append(row)
    provenance.finished(out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "health.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
