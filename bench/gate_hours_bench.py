"""Where the ungated forecast's high-tier gain on synthetic comes from, hour by hour (issue 40: "where the forecast
has skill, synthetic's 14:00 tenants, the gate keeps at least 80% of the ungated gain").

Two things side by side, on the same trace and forecasts:
- the skill gate's evidence (daemon/forecasting/quality.py, ForecastQuality.score): per high-tier tenant and per
  hour of the day the forecast was made, the pinball loss of the forecast's holds and of the reactive holds over
  the policy's lead windows, at p50, p75 and p90 (the gate scores a high-tier batch tenant at
  policy.skill_gate.batch_quantile, p50 by default). A ratio under 1 is an hour where the forecast's holds beat
  reacting's; the gate trusts a tenant whose all-day ratio is at most 1 - margin;
- the replay (daemon/sim/windows_evidence.replay: the replay's physics, per tenant): reactive, predictive ungated and
  predictive gated at the published gate point, each tier's unmet GPU-minutes and the preemptions, and per
  high-tier tenant the GPUs queued per hour: where the ungated run's high-tier gain falls, and what it cost.

    nice -n 10 python bench/gate_hours_bench.py [--days 3] [--seed 7] [--fit] [--out bench/out]

Writes bench/out/gate_hours_synthetic.json with the shipped model, gate_hours_synthetic_fit.json with `--fit` (the
forecaster `retrain` picks on the trace's 2 days before the window, as replay_bench does); docs/forecasting.md
renders both.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.forecasting.quality import ForecastQuality  # noqa: E402
from daemon.sim import workloads  # noqa: E402
from daemon.sim.forecast_bank import ForecastBank  # noqa: E402
from daemon.sim.windows_evidence import replay  # noqa: E402
from forecaster.registry import load_current  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUANTILES = (0.5, 0.75, 0.9)
POINT = {"quantile": 0.5, "headroom": 0.15}   # the published gate comparison's point on synthetic (replay_bench)
REACTIVE = {"headroom": 0.15}                 # reactive's best point there
GATE_MARGIN = 0.1                             # the margin chosen there
TENANTS, GPUS, HISTORY_DAYS = 40, 1024, 2.0   # bench/replay_bench.py's synthetic case


def hold_losses(w, bank: ForecastBank, cfg: Config, steps: int, every: int) -> dict[str, dict]:
    """Per tenant: per hour of the forecast's origin (UTC) and quantile, [forecast hold loss, reactive hold loss,
    windows scored], by the gate's own scorer (one ForecastQuality per quantile, the policy's lead windows)."""
    pc, horizon = cfg.policy, cfg.cycle.horizon_steps
    names = [str(c) for c in w.demand.columns]
    scorers = {}
    for q in QUANTILES:
        fq = ForecastQuality(tuple(cfg.forecaster.quantiles), horizon,
                             peak_windows={"lead": pc.lead_time_steps, "preempt": pc.preempt_lead_steps},
                             peak_min_observed=cfg.forecaster.quality.peak_min_observed,
                             act_quantile=POINT["quantile"], headroom=POINT["headroom"])
        fq.score_quantile = {t: q for t in names}
        scorers[q] = fq
    acc = np.zeros((len(names), 24, len(QUANTILES), 3))
    values = w.demand.to_numpy(dtype=float)
    for k in range(w.start, w.start + steps - horizon, every):
        fc = bank.at(k)
        actual, last = values[k + 1: k + 1 + horizon].T, values[k]
        hour = w.demand.index[k].hour
        for j, q in enumerate(QUANTILES):
            pk = scorers[q].score(fc, actual, last).peak
            acc[:, hour, j] += np.stack([pk[:, :, 6].sum(axis=1), pk[:, :, 7].sum(axis=1), pk[:, :, 8].min(axis=1)],
                                        axis=1)
    return {t: {f"{q:g}": [[round(float(x), 3) for x in acc[i, h, j]] for h in range(24)]
                for j, q in enumerate(QUANTILES)} for i, t in enumerate(names)}


def run_one(w, cfg: Config, strategy: str, knobs: dict, bank: ForecastBank | None, steps: int,
            high: list[str]) -> dict:
    r = replay(w, cfg, strategy, steps=steps, bank=bank, knobs=knobs)
    s = r.meter.summary()
    names = [str(c) for c in w.demand.columns]
    hours = w.demand.index[w.start: w.start + r.unmet_by_step.shape[0]].hour
    per_hour = {t: [round(float(r.unmet_by_step[hours == h, names.index(t)].sum() * r.meter.step_min), 1)
                    for h in range(24)] for t in high}
    return {"label": s["label"], "utilization": s["utilization"], "preemptions": s["preemptions"],
            "unmet_gpu_min": {t: v["unmet_gpu_min"] for t, v in s["tiers"].items()},
            "high_tenant_queued_gpu_min_by_hour": per_hour,
            **({"skill_gate": s["skill_gate"]} if "skill_gate" in s else {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=3.0, help="measured days (the gate scores from the first)")
    ap.add_argument("--seed", type=int, default=7, help="the synthetic workload's seed (7: replay_bench's)")
    ap.add_argument("--every", type=int, default=5, help="forecast every N steps (replay_bench's gate run: 5)")
    ap.add_argument("--fit", action="store_true", help="the forecaster retrain picks on the 2 days before the "
                                                       "window, not the shipped model")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    out = provenance.started()
    cfg = Config()
    w = workloads.synthetic(TENANTS, GPUS, a.days, seed=a.seed, history_days=HISTORY_DAYS, target_load=1.0)
    # the generator's truth of who has the 14:00 peak (synthetic() draws the same workload and drops it)
    g = workloads.generate(TENANTS, len(w.demand), GPUS, seed=a.seed, target_load=1.0)
    assert g.demand.equals(w.demand), "the generator's draw differs from synthetic()'s"
    names = [str(c) for c in w.demand.columns]
    high = [t for t, tier in zip(names, w.tiers) if tier == "high"]
    peaked = dict(zip(names, (bool(x) for x in g.peaked)))
    if a.fit:
        import replay_bench  # noqa: E402  (bench/, next to this script)

        model, chosen = replay_bench.fit_forecaster(w, cfg, a.model_dir, None)
    else:
        model, chosen = load_current(a.model_dir), {"why": "the shipped model"}
    steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
    bank = ForecastBank(model, w.demand, a.every, cfg.cycle.horizon_steps, cfg.cycle.history_steps, keep=True,
                        prefetch=True, stop=w.start + steps)
    try:
        losses = hold_losses(w, bank, cfg, steps, a.every)
        runs = {"reactive": run_one(w, cfg, "reactive", REACTIVE, None, steps, high),
                "predictive_ungated": run_one(w, cfg, "predictive", POINT, bank, steps, high),
                "predictive_gated": run_one(w, cfg, "predictive", {**POINT, "gate_margin": GATE_MARGIN}, bank, steps,
                                            high)}
    finally:
        bank.close()
    out.update({"case": "synthetic", "workload": w.name, "seed": a.seed, "days": a.days, "forecast_every": a.every,
                "window_start": str(w.demand.index[w.start]), "forecaster": model.name,
                "forecaster_why": chosen.get("why", ""), "point": POINT, "reactive": REACTIVE,
                "gate_margin": GATE_MARGIN, "batch_quantile": dict(cfg.policy.skill_gate.batch_quantile),
                "quantiles": list(QUANTILES), "lead_windows": {"lead": cfg.policy.lead_time_steps,
                                                              "preempt": cfg.policy.preempt_lead_steps},
                "high_tier": [{"tenant": t, "has_1400_peak": peaked[t], "hold_loss_by_hour": losses[t]}
                              for t in high],
                "runs": runs})
    provenance.write(out, a.out, "gate_hours_synthetic_fit.json" if a.fit else "gate_hours_synthetic.json")
    for label, r in runs.items():
        print(label, r["label"], f"util {r['utilization']:.3f}", {k: round(v) for k, v in r["unmet_gpu_min"].items()},
              "preemptions", r["preemptions"])
    for t in high:
        f = np.array(losses[t]["0.5"])
        print(t, "14:00 peak" if peaked[t] else "no peak", "p50 all-day ratio",
              round(f[:, 0].sum() / max(f[:, 1].sum(), 1e-9), 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
