"""Idle reclaim on the one simulator: busy utilization (allocation weighted by activity) with and without reclaiming
low-priority jobs idle or hung for `--act-steps` steps, on the Helios "Earth" demand (16 VCs as 32 tenants, the
replay's workload), per tier.

The cluster model and the demand are the replay's (daemon/sim/cluster.py, daemon/sim/workloads.py); the busy shares
are a model (daemon/sim/activity.py says why: no trace we hold records per-job activity, and Helios'
`gpu_utilization` is allocated/quota). So the run is repeated for several idle shares. No forecasting policy runs
here (holds and preemptions are the replay's subject); scheduling is the cluster model's own tier order. A reclaim
is the cluster's preemption (requeue: drain, lost work since the checkpoint), under the default preemption budget
(policy.preempt_budget_share of the GPUs per preempt_budget_window_s).

"Dedicated" is a bound computed from the same trace, not simulated: each VC on its own quota (the trace's
`total_gpu_num`), serving min(demand, quota), busy at the same modelled shares.

    nice -n 10 python bench/health_bench.py [--days 3] [--idle-shares 0.1,0.25,0.4] [--out bench/out]
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
from daemon.policy.state import PRIORITY  # noqa: E402
from daemon.sim.activity import Activity, ActivityParams  # noqa: E402
from daemon.sim.cluster import SimCluster  # noqa: E402
from daemon.sim.workloads import helios  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import provenance  # noqa: E402  (bench/, next to this script)

TIERS = ("high", "normal", "low")


def run(w, params: ActivityParams, reclaim: str, act_steps: int, seed: int) -> dict:
    """reclaim: off; always (every low job idle past act_steps, within the budget); waiting (only as many GPUs as
    queued work asks for: a reclaim that frees GPUs nobody waits for only costs the job its progress)."""
    cfg = Config()
    pc, sc = cfg.policy, cfg.source.simulator
    tenants = list(map(str, w.demand.columns))
    tiers = np.array(w.tiers)
    prio = np.array([PRIORITY[t] for t in w.tiers], dtype=np.int8)
    c = SimCluster(tenants, prio, w.capacity, w.job_gpus, gpus_per_node=w.gpus_per_node,
                   drain_steps=sc.drain_steps, checkpoint_steps=sc.checkpoint_steps, max_wait_steps=pc.max_wait_steps)
    a = Activity(len(tenants), params, seed=seed)
    low = np.flatnonzero(tiers == "low")
    # the preemption budget's refill per 60-s step: share of the GPUs per window, windows per step
    per_step = pc.preempt_budget_share * w.capacity * 60.0 / pc.preempt_budget_window_s
    jobs_per_step = pc.preempt_budget_jobs * 60.0 / pc.preempt_budget_window_s
    demand = w.demand.to_numpy(dtype=float)
    unmet = {t: 0.0 for t in TIERS}
    wanted = {t: 0.0 for t in TIERS}
    alloc = busy = cap = 0.0
    reclaims = {t: 0 for t in TIERS}
    idle_alloc = 0.0
    for i in range(demand.shape[0]):
        st = c.step(demand[i])
        a.step(c)
        if reclaim != "off":
            cand = a.idle_jobs(c, act_steps, low)
            if cand.size:
                pos = np.searchsorted(c.j_id[: c.size], cand)
                g = np.cumsum(c.j_gpus[pos])
                limit = per_step if reclaim == "always" else min(per_step, float(st.queued.sum()))
                take = cand[(g <= limit) & (np.arange(cand.size) < jobs_per_step)]
                if take.size:
                    c.preempt(take)
                    reclaims["low"] += int(take.size)
        if i < w.start:
            continue
        served = st.served.astype(float)
        want = np.where(np.isfinite(demand[i]), demand[i], served)
        for t in TIERS:
            m = tiers == t
            wanted[t] += float(want[m].sum())
            unmet[t] += float(np.maximum(want[m] - served[m], 0).sum())
        alloc += st.running_gpus
        b = a.busy_gpus(c)
        busy += b
        ids, _, g = a.running(c)
        idle_alloc += float(g[a.state[ids] != 0].sum())
        cap += st.capacity
    return {"reclaim": reclaim, "alloc_util": alloc / cap, "busy_util": busy / cap,
            "idle_allocated_share": idle_alloc / max(alloc, 1),
            "unmet_share": {t: unmet[t] / wanted[t] if wanted[t] else 0.0 for t in TIERS},
            "reclaims": reclaims, "preemptions_total": int(c.total_preemptions),
            "lost_gpu_minutes": float(c.total_lost)}


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
    ap.add_argument("--act-steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args()
    w = helios(args.data, days=args.days, history_days=0.25)
    out = {**provenance.started(), "workload": w.name, "days": args.days, "capacity": w.capacity,
           "act_steps": args.act_steps, "seed": args.seed, "runs": []}
    for s in map(float, args.idle_shares.split(",")):
        p = ActivityParams(idle_share=s)
        t0 = time.perf_counter()
        row = {"idle_share": s, "params": p.__dict__, "dedicated_bound": dedicated(args.data, w, p),
               "without": run(w, p, "off", args.act_steps, args.seed),
               "with_when_waiting": run(w, p, "waiting", args.act_steps, args.seed),
               "with_always": run(w, p, "always", args.act_steps, args.seed)}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        out["runs"].append(row)
        print(json.dumps({k: row[k] for k in ("idle_share", "dedicated_bound", "without",
                                                    "with_when_waiting", "with_always")}, indent=1))
    provenance.finished(out)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "health.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
