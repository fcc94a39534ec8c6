"""Why predictive costs ServeGen's batch tier so much (issue 40): the batch tier's unmet and the high tier's
throttled requests per variant, beside reactive at several HPA headrooms, on one window and cold start.

Variants: predictive at the default (holds and replica autoscaler at policy.quantile), the replica autoscaler at
the forecast's p50 with the holds at policy.quantile, the reverse, both at p50 (the config keys
policy.replica_quantile and policy.quantile), the skill gate on, and the autoscaler at p50 starting replicas ahead
for the high tier's services only (policy.replica_ahead_tiers); reactive at
headrooms 0.1 (the workload's), 0.2, 0.35 and 0.5; perfect. What separates the causes: at equal service GPU-hours
(the replicas started ahead) does predictive's batch unmet still exceed reactive's (holds, preemptions), and does
the plan's quantile or the autoscaler's move it. Writes bench/out/inference_variants_servegen.json.

    nice -n 10 python bench/inference_variants_bench.py [--days 0.25] [--cold-start 5]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference_bench import with_headroom  # noqa: E402

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.sim.own import choose_forecaster  # noqa: E402
from daemon.sim.replay import run_replay  # noqa: E402
from daemon.sim.servegen import servegen  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def row(m) -> dict:
    s = m.summary()
    t = s["tiers"]
    return {"strategy": m.name, "service_gpu_hours": sum(t[x]["inf_gpu_min"] for x in t) / 60,
            "high_inf_throttled": t["high"]["inf_throttled"], "low_unmet_gpu_min": t["low"]["unmet_gpu_min"],
            "normal_unmet_gpu_min": t["normal"]["unmet_gpu_min"], "preemptions": s["preemptions"]}


def with_quantiles(cfg: Config, plan: float | None = None, scaler: float | None = None) -> Config:
    """``cfg`` with the plan's quantile (policy.quantile) and the replica autoscaler's (policy.replica_quantile) set
    where given."""
    upd = {k: v for k, v in (("quantile", plan), ("replica_quantile", scaler)) if v is not None}
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update=upd)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=0.25)
    ap.add_argument("--cold-start", type=float, default=5.0, help="minutes")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    doc = {**provenance.started(), "bench": "inference_variants", "days": a.days, "cold_start_min": a.cold_start,
           "command": "python bench/inference_variants_bench.py " + " ".join(sys.argv[1:]), "variants": []}
    cfg = Config()
    tight = {t: min(lvl.rate(t) for lvl in cfg.ratelimits.levels) for t in ("high", "normal")}
    w, _ = servegen(default_data_dir(), days=a.days, cold_start_s=a.cold_start * 60, tight_limits=tight,
                    gpus_per_node=cfg.cluster.gpus_per_node)
    steps = len(w.demand) - w.start
    doc["window"] = [str(w.demand.index[w.start]), str(w.demand.index[-1])]
    model = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True).model
    gate = cfg.policy.skill_gate.model_copy(update={"enabled": True})
    gated = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"skill_gate": gate})})
    q = cfg.policy.quantile
    runs = [("default (plan and autoscaler at policy.quantile)", with_quantiles(cfg, scaler=q),
             ("reactive", "predictive", "perfect")),
            ("autoscaler p50, plan at policy.quantile", with_quantiles(cfg, scaler=0.5), ("predictive",)),
            ("autoscaler at policy.quantile, plan p50", with_quantiles(cfg, 0.5, q), ("predictive",)),
            ("autoscaler and plan p50", with_quantiles(cfg, 0.5, 0.5), ("predictive",)),
            ("skill gate on", gated, ("predictive",)),
            ("autoscaler p50, replicas ahead for the high tier only", with_quantiles(cfg, scaler=0.5).model_copy(
                update={"policy": with_quantiles(cfg, scaler=0.5).policy.model_copy(
                    update={"replica_ahead_tiers": ["high"]})}), ("predictive",))]
    for label, c, strategies in runs:
        for m in run_replay(w, c, model, steps=steps, strategies=strategies, workers=1):
            doc["variants"].append({"variant": label, **row(m)})
            print(doc["variants"][-1], file=sys.stderr, flush=True)
    for h in (0.2, 0.35, 0.5):
        (m,) = run_replay(with_headroom(w, h), cfg, None, steps=steps, strategies=("reactive",), workers=1)
        doc["variants"].append({"variant": f"reactive at HPA headroom {h:g}", **row(m)})
        print(doc["variants"][-1], file=sys.stderr, flush=True)
    doc = provenance.finished(doc)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "inference_variants_servegen.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
