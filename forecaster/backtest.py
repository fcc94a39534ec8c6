"""Rolling-origin backtest: every model forecasts from the same origins and is scored on the same actuals."""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from forecaster.baselines import Forecaster
from forecaster.memo import shared_past_peaks
from forecaster.metrics import (
    DEFAULT_PEAK_WINDOWS,
    PEAK_MIN_OBSERVED,
    coverage,
    mase,
    peak_report,
    weighted_quantile_loss,
)
from forecaster.progress import Progress

BUCKETS = ((1, 15), (16, 30), (31, 60), (61, 10_000))
MIN_ORIGINS = 12


def origin_stride(window: int, horizon: int, min_origins: int = MIN_ORIGINS) -> int:
    """Origins a horizon apart (forecasts that do not overlap), closer where that leaves fewer than `min_origins`.

    A short history's held-out window may hold only one horizon (the one-hour Azure trace: 58 steps, a 30-step
    horizon): scored from a single origin, its p90 coverage is one forecast's 60 points, not a measurement.
    """
    room = window - horizon  # origins lie in [start, start + room]
    if room < 0 or room // horizon + 1 >= min_origins:
        return horizon
    return max(1, room // (min_origins - 1))


@dataclass
class BacktestResult:
    report: dict
    predictions: dict[str, np.ndarray]   # model -> [origin, tenant, h, q]
    actuals: np.ndarray                  # [origin, tenant, h]
    origins: list[pd.Timestamp]
    tenants: tuple[str, ...]
    # model -> [origin, tenant, window, q]: the forecast's peak quantiles over each lead window (`report`'s
    # "peak_windows", in that order), as the policy reads them (Forecast.peak_over)
    peak_predictions: dict[str, np.ndarray] | None = None
    last: np.ndarray | None = None       # [origin, tenant]: the last value before each origin (NaN if missing)

    def best_baseline(self, baselines: list[str]) -> tuple[str, float]:
        scores = {m: self.report["models"][m]["wql"] for m in baselines if m in self.report["models"]}
        name = min(scores, key=lambda m: scores[m])
        return name, scores[name]


def seasonal_scale(frame: pd.DataFrame, season: int) -> np.ndarray:
    """In-sample MAE of the seasonal-naive forecast per tenant: MASE's denominator."""
    v = frame.to_numpy(dtype=float)
    if v.shape[0] <= season:
        season = 1
    # a tenant with no pair of samples a season apart (new, or silent) has no scale: NaN, said by the caller. The
    # errstate alone let numpy's "Mean of empty slice" warning through, and a daemon on a young Prometheus printed
    # it, with the source line, among its log lines
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = np.nanmean(np.abs(v[season:] - v[:-season]), axis=0)
    return np.where(np.isfinite(s) & (s > 0), s, np.nan)


def _peak_coverage(upper: np.ndarray, actual: np.ndarray) -> float:
    ok = np.isfinite(actual).all(axis=-1) & np.isfinite(upper).all(axis=-1)
    if not ok.any():
        return float("nan")
    return float((actual.max(axis=-1)[ok] <= upper.max(axis=-1)[ok]).mean())


def forecast_peaks(fc, windows: dict[str, int], quantiles: tuple[float, ...]) -> np.ndarray:
    """[tenant, window, q]: a forecast's peak quantiles over each lead window, as the policy reads them."""
    return np.stack([np.stack([fc.peak_over(k, q) for q in quantiles], axis=-1) for k in windows.values()], axis=1)


def run(frame: pd.DataFrame, models: dict[str, Forecaster], *, start: int, horizon: int,
        history_steps: int, quantiles: tuple[float, ...], season: int, max_origins: int = 48,
        stride: int | None = None, peak_windows: dict[str, int] | None = None,
        tiers: dict[str, str] | None = None, peak_min_observed: float = PEAK_MIN_OBSERVED,
        progress: str | None = None) -> BacktestResult:
    """Origins run from `start` (index into frame) to the end, `stride` apart (by default `origin_stride`).

    Besides the per-step scores, each model's peak over the policy's lead windows (`peak_windows`, name ->
    steps; by default the policy's default `lead` and `preempt` windows) is scored against the realised peak
    (`forecaster.metrics.peak_report`), overall and, with `tiers` (tenant -> tier; a tenant not in it is
    "normal", the daemon's default), by tier. ``progress``: the phase's name, to show the forecasts made as they
    go (forecaster.progress; scoring dozens of candidates at 24 origins takes minutes on a big history).
    """
    windows = dict(DEFAULT_PEAK_WINDOWS if peak_windows is None else peak_windows)
    if stride is None:
        stride = origin_stride(len(frame) - start, horizon)
    last = len(frame) - horizon
    origins = list(range(start, last + 1, stride))
    if len(origins) > max_origins:
        pick = np.linspace(0, len(origins) - 1, max_origins).round().astype(int)
        origins = [origins[i] for i in pick]
    if not origins:
        raise ValueError(f"no backtest origin: {len(frame)} steps, start {start}, horizon {horizon}")
    actual = np.stack([frame.iloc[o:o + horizon].to_numpy(dtype=float).T for o in origins])
    last = np.stack([frame.iloc[o - 1].to_numpy(dtype=float) if o > 0 else np.full(frame.shape[1], np.nan)
                     for o in origins])
    qs = tuple(quantiles)
    preds: dict[str, np.ndarray] = {}
    peaks: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    # candidates wrapping the same model recalibrate their peaks on its same past forecasts: computed once (so a
    # later candidate's seconds_per_forecast leaves out the part it shared)
    bar = Progress(progress or "backtest", len(models) * len(origins), unit="forecasts", enabled=bool(progress))
    with shared_past_peaks(), bar:
        for name, m in models.items():
            out, pk = [], []
            t0 = time.perf_counter()
            bar.set_phase(name)
            for o in origins:
                hist = frame.iloc[max(0, o - history_steps):o]
                fc = m.predict(hist, horizon)
                out.append(fc.values)
                pk.append(forecast_peaks(fc, windows, qs))
                bar.update(1)
            seconds[name] = (time.perf_counter() - t0) / len(origins)
            preds[name] = np.stack(out)
            peaks[name] = np.stack(pk)
    scale = seasonal_scale(frame.iloc[:start], season)
    tier_of = (np.array([tiers.get(str(c), "normal") for c in frame.columns]) if tiers is not None else None)
    i50 = int(np.argmin(np.abs(np.asarray(qs) - 0.5)))
    i90 = int(np.argmin(np.abs(np.asarray(qs) - 0.9)))
    report: dict = {"origins": len(origins), "stride": stride, "horizon": horizon, "tenants": int(frame.shape[1]),
                    "first_origin": str(frame.index[origins[0]]), "last_origin": str(frame.index[origins[-1]]),
                    "quantiles": list(qs), "models": {},
                    "peak_windows": {k: max(1, min(int(v), horizon)) for k, v in windows.items()}}
    for name, p in preds.items():
        per_h = {}
        for lo, hi in BUCKETS:
            if lo > horizon:
                continue
            sl = slice(lo - 1, min(hi, horizon))
            per_h[f"h{lo}-{min(hi, horizon)}"] = weighted_quantile_loss(p[:, :, sl], actual[:, :, sl], qs)
        report["models"][name] = {
            "wql": weighted_quantile_loss(p, actual, qs),
            "wql_by_horizon": per_h,
            "mase": mase(p[..., i50], actual, scale[None, :] * np.ones((len(origins), 1))),
            "coverage_p90": coverage(p[..., i90], actual),
            # the share strictly under the p90: on a series that often does not move (GPU counts), many actuals
            # equal a p90 at the last value; a calibrated p90 then has coverage_p90 >= 0.9 >= this
            "coverage_p90_strict": coverage(p[..., i90], actual, strict=True),
            # the policy reserves for the peak over the lead time: how often the realised peak stays under the
            # forecast's p90 peak, per (origin, tenant) with every step observed
            "peak_coverage_p90": _peak_coverage(p[..., i90], actual),
            # what the policy acts on: the peak over each lead window at each quantile (see peak_report)
            "peak": peak_report(peaks[name], actual, last, qs, windows, tier_of, peak_min_observed),
            "seconds_per_forecast": seconds[name],
        }
    return BacktestResult(report, preds, actual, [frame.index[o] for o in origins], tuple(map(str, frame.columns)),
                          peaks, last)


def write_report(result: BacktestResult, out_dir: Path, name: str = "backtest",
                 plot_tenants: int = 4) -> tuple[Path, Path]:
    """JSON report plus a PNG of forecast vs actual for a few tenants at the last origin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath = out_dir / f"{name}.json"
    jpath.write_text(json.dumps(result.report, indent=2, sort_keys=True, default=float) + "\n")
    k = min(plot_tenants, len(result.tenants))
    # the tenants with the most demand are the interesting ones
    order = np.argsort(-np.nan_to_num(result.actuals.mean(axis=(0, 2))))[:k]
    fig, axes = plt.subplots(k, 1, figsize=(9, 2.4 * k), squeeze=False)
    o = len(result.origins) - 1
    for ax, ti in zip(axes[:, 0], order):
        h = np.arange(1, result.actuals.shape[2] + 1)
        ax.plot(h, result.actuals[o, ti], color="black", lw=1.5, label="actual")
        for mname, p in result.predictions.items():
            ln = ax.plot(h, p[o, ti, :, 0], lw=1, label=f"{mname} p50")
            ax.fill_between(h, p[o, ti, :, 0], p[o, ti, :, -1], color=ln[0].get_color(), alpha=0.12)
        ax.set_title(f"{result.tenants[ti]} from {result.origins[o]}", fontsize=9)
        ax.set_xlabel("steps ahead")
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    ppath = out_dir / f"{name}.png"
    fig.savefig(ppath, dpi=90)
    plt.close(fig)
    return jpath, ppath


def table(report: dict) -> str:
    """One row per model, best wQL first; `< p90` is the share strictly under the p90 (ties with it excluded)."""
    wins = report.get("peak_windows", {})
    # each window's loss column as wide as its head ('preempt3 loss' is 13): 10 wide, every row sat left of it
    lw = {w: max(10, len(f"{w}{k} loss")) for w, k in wins.items()}
    head = "".join(f" {f'{w}{k} loss':>{lw[w]}} {'p90':>5} {'mv':>5}" for w, k in wins.items())
    w0 = max([30, *(len(n) for n in report["models"])])   # retrain's 'seasonal_naive_daily+conformal+peak_all'
    rows = [f"{'model':<{w0}} {'wQL':>8} {'MASE':>7} {'p90 cov':>8} {'< p90':>6} {'peak p90':>9}{head} {'ms/fc':>8}"]
    nan = float("nan")
    for name, m in sorted(report["models"].items(), key=lambda kv: kv[1]["wql"]):
        pk = m.get("peak", {})
        cells = "".join(f" {pk.get(w, {}).get('loss', nan):>{lw[w]}.4f} {pk.get(w, {}).get('coverage_p90', nan):>5.3f}"
                        f" {pk.get(w, {}).get('coverage_p90_moving', nan):>5.3f}" for w in wins)
        rows.append(f"{name:<{w0}} {m['wql']:>8.4f} {m['mase']:>7.3f} {m['coverage_p90']:>8.3f} "
                    f"{m.get('coverage_p90_strict', float('nan')):>6.3f} "
                    f"{m.get('peak_coverage_p90', float('nan')):>9.3f}{cells} {m['seconds_per_forecast'] * 1000:>8.1f}")
    if wins:
        rows.append("peak columns: the peak over each lead window (steps): its quantile loss, p90 coverage, and p90 "
                    "coverage where the series moves (mv)")
    return "\n".join(rows)
