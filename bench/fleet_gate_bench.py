"""The skill gate per (tenant, GPU type) on the Alibaba mixed fleet (issue 40 item 2, 'per tenant (and per GPU
type)'): the gpuspec33 pods with each pod's own GPU-type constraint, a tenant per QoS class (so LS asks T4, G2,
V100M16|V100M32, ... and any type: one demand stream and one forecast series per set of types, ``LS@t4``), on the
node list's fleet (daemon/sim/fleet_replay.py alibaba_fleet(per_job_types=True)). Replayed as bench/replay_bench.py
--gate-margins does: reactive over its six headrooms, predictive at p90 over the same six, ungated and gated at
the margin, each compared at reactive's best point by the same matching (daemon/sim/report.py gate_compare) against
issue 40's checks (no tier's unmet more than 5% above reactive's, preemptions at most 110% of reactive's, high-tier
unmet no higher). Counted per gated run: the (tenant, types) series on the forecast (steps, and at the window's end).

The forecaster is a baseline (no fitting: the bench stays within minutes on a shared box): naive by default, the one
the untyped Alibaba gate replay chose on its own history (bench/out/replay_alibaba_gate.json).

    nice -n 10 python bench/fleet_gate_bench.py [--days 1] [--margin 0.1] [--model naive] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import targets  # noqa: E402  (bench/, next to this script)

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.sim import report  # noqa: E402
from daemon.sim.fleet_replay import alibaba_fleet  # noqa: E402
from daemon.sim.replay import GATE_MARGIN, run_replay  # noqa: E402
from forecaster.baselines import standard_baselines  # noqa: E402

HEADROOMS = (0.0, 0.05, 0.1, 0.15, 0.25, 0.4)   # replay_bench's GATE_HEADROOMS


def series_counts(summary: dict) -> dict:
    """A gated run's (tenant, types) series: how many there are, how many acted on the forecast at some measured
    step, how many at the window's end (their verdict), and those of the high tier (the only tier whose holds and
    preemptions the plan makes on the forecast)."""
    steps = summary.get("skill_gate_by_series") or {}
    verdicts = summary.get("skill_gate_by_tenant") or {}
    at_end = sorted(f"{t}@{'*' if k == 'any' else k}" for t, v in verdicts.items()
                    for k, x in ((v.get("verdict") or {}).get("by_type") or {}).items() if x["acting"])
    return {"series": len(steps), "acted_some_step": sorted(s for s, k in steps.items() if k > 0),
            "acting_at_end": at_end, "steps_on_forecast": {s: k for s, k in steps.items() if k > 0},
            "series_steps": int(summary["steps"]) * len(steps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=1.0, help="measured days (after half a day of history)")
    ap.add_argument("--margin", type=float, default=0.1, help="policy.skill_gate.margin (replay_bench's choice)")
    ap.add_argument("--model", default="naive", help="a baseline: naive, recent_max, exp_smoothing, "
                    "seasonal_naive_daily")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    ap.add_argument("--data", type=Path, default=None)
    a = ap.parse_args()
    out = provenance.started()
    cfg = Config()
    fw = alibaba_fleet(a.data or default_data_dir(), days=a.days, per_job_types=True)
    w = fw.workload()
    models = standard_baselines(1440, tuple(cfg.forecaster.quantiles), len(w.demand), with_ets=False)
    if a.model not in models:
        raise SystemExit(f"--model {a.model!r}: choose from {sorted(models)}")
    steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
    grid = [{"quantile": 0.9, "headroom": h} for h in HEADROOMS]
    settings = [("reactive", {"headroom": h}) for h in HEADROOMS] + [("predictive", k) for k in grid] + \
        [("predictive", {**k, GATE_MARGIN: a.margin}) for k in grid]
    load0, t0 = os.getloadavg()[0], time.perf_counter()
    runs = run_replay(w, cfg, models[a.model], steps=steps, settings=settings, progress=True, count_rule=True)
    summaries = [r.summary() for r in runs]
    goal = targets.REPLAY_GATED
    comparison = report.gate_compare(summaries, [a.margin], goal)
    gated = {s["label"]: series_counts(s) for s in summaries if GATE_MARGIN in s["knobs"]}
    owners = list(dict.fromkeys(w.owners or []))
    out.update({"case": "alibaba-per-job-types", "workload": w.name, "tenants": owners,
                "tiers": dict(zip(owners, (w.tiers[list(w.owners).index(t)] for t in owners))),
                "series": [f"{o}@{'|'.join(acc) or '*'}" for o, acc in zip(w.owners, w.accepts)],
                "capacity": w.capacity, "nodes": len(fw.node_types), "steps": steps,
                "window_start": str(w.demand.index[w.start]), "forecaster": models[a.model].name,
                "gate_margin": a.margin, "targets": goal, "wall_seconds": time.perf_counter() - t0,
                "loadavg_1m_start": load0, "loadavg_1m_end": os.getloadavg()[0],
                "runs": summaries, "comparison": comparison, "gated_series": gated})
    key = f"{GATE_MARGIN}={a.margin:g}"
    point = comparison.get(key, {}).get("predictive_point")
    out["gated_point_series"] = gated.get(point) if point else None
    provenance.finished(out)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "fleet_gate_alibaba.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for variant, c in comparison.items():
        print(f"-- {variant}:", file=sys.stderr)
        print("\n".join(report.comparison_lines(c)) if c.get("predictive_point") else c.get("verdict", c),
              file=sys.stderr)
    print(f"gated point {point}: {out['gated_point_series']}", file=sys.stderr)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
