"""Where the services' throttled requests go, service by service, and whom the skill gate trusts (issue 40).

The inference bench (bench/inference_bench.py) compares strategies per tier; this one opens the tiers up on the
same workload (ServeGen m-small's services beside the synthetic batch tenants, the same cluster, seed and history)
at a few cold starts: reactive, the perfect forecast, and the product's choice at the replica quantile (p90 by
default) with the skill gate off and on. Per service: its tier, requests, throttled requests and GPU-minutes under
each; per tenant (services and batch), the gated run's measured steps on the forecast and the verdict its window
ended on (the two losses the gate compares, and why). The batch tiers' unmet and the preemptions come per run.
docs/forecasting.md renders it ("Whom the gate trusts on ServeGen").

    nice -n 10 python bench/inference_breakdown_bench.py [--cold-starts 3,9] [--replica-quantile 0.9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference_bench import servegen_workload, with_replica_quantile  # noqa: E402

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.sim.own import choose_forecaster  # noqa: E402
from daemon.sim.replay import run_replay  # noqa: E402
from daemon.sim.sizing import gated  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("high", "normal", "low")


def run_figures(m) -> dict:
    """One run: utilization, preemptions, every tier's throttled requests and unmet GPU-minutes, per service, and
    (gate on) per tenant."""
    s = m.summary()
    return {"utilization": s["utilization"], "preemptions": s["preemptions"],
            "tiers": {t: {k: s["tiers"][t][k] for k in ("inf_requests", "inf_throttled", "inf_gpu_min",
                                                         "unmet_gpu_min")} for t in TIERS},
            "services": s.get("services"), "skill_gate_by_tenant": s.get("skill_gate_by_tenant")}


def run_case(cold_min: float, q: float, data: Path, days: float, history_days: float, seed: int) -> dict:
    cfg = with_replica_quantile(Config(), q)
    w, _ = servegen_workload(cold_min, days, seed, data, history_days, cfg)
    steps = len(w.demand) - w.start
    runs = {}
    for name in ("reactive", "perfect"):
        (m,) = run_replay(w, cfg, None, steps=steps, strategies=(name,), workers=1)
        runs[name] = run_figures(m)
    for label, c in (("product", cfg), ("product_gated", gated(cfg))):
        product = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True, services=list(w.inference))
        (m,) = run_replay(w, c, product.model, steps=steps, strategies=("predictive",), workers=1)
        runs[label] = {"forecaster": product.name, **run_figures(m)}
    tiers = dict(zip(w.demand.columns, w.tiers))
    return {"cold_start_min": cold_min, "replica_quantile": q, "capacity_gpus": w.capacity, "steps": steps,
            "services": sorted(w.inference), "batch_tenants": sorted(t for t in w.demand.columns
                                                                     if t not in w.inference),
            "tiers": tiers, "skill_gate": Config().policy.skill_gate.model_dump(), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold-starts", default="3,9", help="minutes, comma-separated")
    ap.add_argument("--replica-quantile", type=float, default=0.9)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--history-days", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    doc = {**provenance.started(), "bench": "inference_breakdown", "days": a.days, "history_days": a.history_days,
           "seed": a.seed, "command": "python bench/inference_breakdown_bench.py " + " ".join(sys.argv[1:]),
           "cases": []}
    for c in (float(x) for x in a.cold_starts.split(",")):
        print(f"cold start {c:g} min...", file=sys.stderr, flush=True)
        doc["cases"].append(run_case(c, a.replica_quantile, a.data_dir or default_data_dir(), a.days,
                                     a.history_days, a.seed))
    provenance.write(doc, a.out, "inference_breakdown_servegen.json")


if __name__ == "__main__":
    main()
