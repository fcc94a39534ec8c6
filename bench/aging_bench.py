"""What anti-starvation costs and buys on the replay: one reactive and one predictive setting, aging as configured
(the default) against aging switched off (``max_wait_steps`` beyond the trace), on the same workload and forecasts.

Per run: high-tier unmet GPU-minutes, normal and low unmet, the longest wait of any job summed over its queue
stints (job-level starvation), the longest time a tenant had work queued and nothing running (tenant-level
starvation), preemptions and utilization. ``--code DIR`` runs another checkout's daemon (an earlier commit) on
the same workloads, for a before/after with the same script:

    nice -n 10 python bench/aging_bench.py [--cases synthetic,helios] [--days 2] [--out bench/out]
    nice -n 10 python bench/aging_bench.py --code /path/to/old/checkout --label before --settings default
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="synthetic,helios")
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--forecast-every", type=int, default=5)
    ap.add_argument("--settings", default="default,off", help="default (aging as configured), off (no aging)")
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose daemon is measured")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    sys.path.insert(0, str(a.code.resolve()))

    import numpy as np
    import torch

    from daemon.config import Config
    from daemon.forecasting.retrain import default_data_dir
    from daemon.policy.state import PRIORITY
    from daemon.sim import cluster as simcluster, workloads
    from daemon.sim.replay import ForecastBank, run_strategy
    from forecaster.registry import load_current

    torch.set_num_threads(2)
    # tenant-level starvation, observed on the simulated cluster's own step results (no change to its physics)
    seen: dict[int, dict] = {}
    step = simcluster.SimCluster.step

    def observed(self, wanted):
        st = step(self, wanted)
        r = seen.setdefault(id(self), {"cur": np.zeros(self.n), "best": np.zeros(self.n), "prio": self.prio_of_tenant})
        r["cur"] = np.where((st.queued > 0) & (st.served == 0), r["cur"] + 1, 0)
        r["best"] = np.maximum(r["best"], r["cur"])
        return st

    simcluster.SimCluster.step = observed
    data = default_data_dir()
    model = load_current(ROOT / "models")
    cfg = Config()
    import provenance  # bench/, next to this script

    out = {"code": str(a.code.resolve()), "commit": provenance.commit(a.code.resolve()), "label": a.label,
           "days": a.days, "max_wait_steps": cfg.policy.max_wait_steps,
           "policy": {k: v for k, v in cfg.policy.model_dump().items() if k.startswith(("aging", "max_wait"))},
           "runs": []}
    for case in a.cases.split(","):
        w = workloads.synthetic(40, 1024, a.days, seed=7, target_load=1.0) if case == "synthetic" else \
            workloads.helios(data, days=a.days)
        steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
        step_min = (w.demand.index[1] - w.demand.index[0]).total_seconds() / 60
        bank = ForecastBank(model, w.demand, a.forecast_every, cfg.cycle.horizon_steps, cfg.cycle.history_steps)
        for name, knobs in (("reactive", {"headroom": 0.05}), ("predictive", {"quantile": 0.9, "headroom": 0.05})):
            for setting in a.settings.split(","):
                k = dict(knobs, **({"max_wait_steps": 10**9} if setting == "off" else {}))
                seen.clear()
                t0 = time.perf_counter()
                m = run_strategy(name, w, cfg, bank if name == "predictive" else None, steps=steps, knobs=k)
                r = next(iter(seen.values()))
                s = m.summary()
                T = s["tiers"]
                row = {"case": case, "strategy": name, "knobs": knobs, "aging": setting, "label": a.label,
                       "utilization": s["utilization"], "preemptions": s["preemptions"],
                       "unmet_gpu_min": {t: T[t]["unmet_gpu_min"] for t in T},
                       "demand_gpu_min": {t: T[t]["demand_gpu_min"] for t in T},
                       "job_starvation_min": {t: T[t]["longest_starvation_min"] for t in T},
                       "tenant_starvation_min": {t: float(r["best"][r["prio"] == p].max(initial=0) * step_min)
                                                 for t, p in PRIORITY.items()},
                       "wait_p99_min": {t: T[t]["wait_p99_min"] for t in T}, "wall_s": time.perf_counter() - t0}
                out["runs"].append(row)
                u, js, ts = row["unmet_gpu_min"], row["job_starvation_min"], row["tenant_starvation_min"]
                print(f"{a.label:>7} {case:>9} {name:>10} aging={setting:<7} util={row['utilization']:.3f} "
                      f"unmet h/n/l={u['high']:,.0f}/{u['normal']:,.0f}/{u['low']:,.0f} "
                      f"job-starve n/l={js['normal']:.0f}/{js['low']:.0f} tenant-starve n/l={ts['normal']:.0f}/"
                      f"{ts['low']:.0f} preempt={row['preemptions']}", flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"aging{'-' + a.label if a.label else ''}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
