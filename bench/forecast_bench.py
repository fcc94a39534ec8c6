"""Forecaster benchmark: training and inference time at 1,000 tenants x 14 days, memory, accuracy vs baselines.

Targets (issue 3): inference < 100 ms for 1,000 tenants on 2 cores; training < 10 min;
LSTM >= 15% lower weighted quantile loss than the best baseline on held-out data.
Also backtests on the real public traces (Alibaba GPU 2023, Azure LLM 2023).

    python bench/forecast_bench.py [--tenants 1000] [--days 14] [--out bench/out/forecast.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.retrain import default_data_dir, retrain_on, trace_history  # noqa: E402
from daemon.sim.workloads import generate  # noqa: E402
from forecaster import backtest  # noqa: E402
from forecaster.baselines import HoltWinters, SeasonalNaive  # noqa: E402
from forecaster.lstm import LSTMForecaster, LSTMSpec  # noqa: E402
from forecaster.train import train  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tenants", type=int, default=1000)
    ap.add_argument("--days", type=float, default=14)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--samples-per-epoch", type=int, default=32768)
    ap.add_argument("--score-tenants", type=int, default=100)
    ap.add_argument("--no-traces", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench/out/forecast.json"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    out: dict = {"tenants": a.tenants, "days": a.days, "threads": torch.get_num_threads()}

    t0 = time.perf_counter()
    steps = int(a.days * 1440)
    w = generate(a.tenants, steps, 100 * a.tenants, seed=11)
    frame = w.demand
    out["generate_seconds"] = time.perf_counter() - t0
    holdout = 1440
    spec = LSTMSpec()
    t0 = time.perf_counter()
    res = train(frame.iloc[:-holdout], spec, epochs=a.epochs, samples_per_epoch=a.samples_per_epoch, progress=True)
    out["train_seconds"] = time.perf_counter() - t0
    out["train_epochs"] = res.epochs_run
    out["rss_after_train_mib"] = rss_mib()
    model = LSTMForecaster(res.model, "bench")

    hist = frame.iloc[-holdout - spec.season - 1:-holdout]
    model.predict(hist, 60)  # warm-up
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        model.predict(hist, 60)
        times.append(time.perf_counter() - t0)
    out["inference_ms_median"] = float(np.median(times) * 1000)
    out["inference_ms_p95"] = float(np.percentile(times, 95) * 1000)
    sn = SeasonalNaive(1440)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        sn.predict(frame.iloc[-holdout - 2 * 1440:-holdout], 60)
        times.append(time.perf_counter() - t0)
    out["seasonal_naive_ms_median"] = float(np.median(times) * 1000)

    rng = np.random.default_rng(0)
    cols = sorted(rng.choice(list(frame.columns), min(a.score_tenants, a.tenants), replace=False).tolist())
    models = {"lstm": model, "seasonal_naive_daily": SeasonalNaive(1440), "seasonal_naive_weekly": SeasonalNaive(7 * 1440),
              "holt_winters": HoltWinters(1440)}
    bt = backtest.run(frame[cols], models, start=len(frame) - holdout, horizon=60, stride=60, history_steps=8 * 1440,
                      quantiles=spec.quantiles, season=1440, max_origins=24)
    out["accuracy"] = bt.report
    base = {k: v["wql"] for k, v in bt.report["models"].items() if k != "lstm"}
    best = min(base, key=base.get)
    out["best_baseline"] = best
    out["gain_vs_best_baseline"] = 1 - bt.report["models"]["lstm"]["wql"] / base[best]
    out["rss_peak_mib"] = rss_mib()

    if not a.no_traces:
        out["traces"] = {}
        data = default_data_dir()
        cfg = Config()
        for name in ("alibaba", "azure"):
            try:
                tf, step_s = trace_history(name, data)
            except Exception as exc:  # the traces live outside the repo; say so rather than fail
                out["traces"][name] = {"error": str(exc)}
                continue
            horizon = 12 if name == "alibaba" else 30
            with tempfile.TemporaryDirectory() as d:
                r = retrain_on(tf, cfg, model_dir=Path(d), step_s=step_s, epochs=10, progress=False,
                               horizon=horizon, promote=False, out_dir=args_out_dir(a.out), name=f"backtest_{name}")
            out["traces"][name] = {"step_s": step_s, "horizon_steps": horizon, "report": r.report,
                                   "gain_vs_best_baseline": r.report["gain_vs_best_baseline"],
                                   "best_baseline": r.report["best_baseline"]}

    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2, default=float) + "\n")
    print(f"\nforecast bench: {a.tenants} tenants x {a.days:g} days at 1 min, {out['threads']} threads")
    print(f"{'measure':<44} {'value':>12} {'target':>12}")
    rows = [
        ("training time (s)", out["train_seconds"], "< 600"),
        ("inference, 1,000 tenants, median (ms)", out["inference_ms_median"], "< 100"),
        ("inference p95 (ms)", out["inference_ms_p95"], ""),
        ("seasonal-naive forecast, median (ms)", out["seasonal_naive_ms_median"], ""),
        ("peak RSS (MiB)", out["rss_peak_mib"], ""),
        (f"wQL gain vs best baseline ({best})", 100 * out["gain_vs_best_baseline"], ">= 15 %"),
    ]
    for k, v, t in rows:
        print(f"{k:<44} {v:>12.2f} {t:>12}")
    print()
    print(backtest.table(bt.report))
    for name, r in out.get("traces", {}).items():
        if "error" in r:
            print(f"\n{name}: {r['error']}")
            continue
        print(f"\n{name} trace ({r['step_s']}s steps, horizon {r['horizon_steps']}):")
        print(backtest.table(r["report"]))
    print(f"\nwrote {a.out}")
    return 0


def args_out_dir(out: Path) -> Path:
    return out.parent


if __name__ == "__main__":
    raise SystemExit(main())
