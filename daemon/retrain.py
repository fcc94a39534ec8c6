"""retrain: pull history, train the LSTM, backtest it against the baselines, promote only if it wins."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from daemon.config import Config
from forecaster import backtest, registry
from forecaster.baselines import standard_baselines
from forecaster.lstm import LSTMSpec
from forecaster.series import fill_short_gaps, to_frame
from forecaster.train import train

log = logging.getLogger("gpu_autoscaler.retrain")


def default_data_dir() -> Path:
    env = os.environ.get("GPU_AUTOSCALER_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@dataclass
class RetrainOutcome:
    version: str | None
    promoted: bool
    message: str
    report: dict
    table: str


class DataError(Exception):
    pass


def read_history_file(path: Path, step_s: int) -> pd.DataFrame:
    """CSV or parquet; wide (a `time` column + one column per tenant) or long (`time, tenant, value`)."""
    path = Path(path)
    try:
        df = pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path)
    except Exception as exc:
        raise DataError(f"{path}: cannot read history: {exc}") from None
    if "time" not in df.columns:
        raise DataError(f"{path}: needs a 'time' column")
    if {"tenant", "value"} <= set(df.columns):
        return to_frame(df[["time", "tenant", "value"]], step_s)
    df["time"] = pd.to_datetime(df["time"], utc=True)
    wide = df.set_index("time").sort_index().astype(float)
    wide = wide.resample(pd.Timedelta(seconds=step_s)).mean()
    wide.columns.name = "tenant"
    return wide


def trace_history(name: str, data_dir: Path | None) -> tuple[pd.DataFrame, int]:
    from forecaster import traces

    d = Path(data_dir) if data_dir else default_data_dir()
    if name == "alibaba":
        frame, _ = traces.alibaba_demand(d, step_s=300, last_days=50)
        return frame, 300
    if name == "azure":
        return traces.azure_requests(d, step_s=10), 10
    raise DataError(f"unknown trace {name!r} (alibaba, azure)")


def simulator_history(cfg: Config, days: float) -> pd.DataFrame:
    from daemon.sim.workloads import generate

    sc = cfg.source.simulator
    steps = int(days * 86400 / cfg.cycle.resolution_s)
    w = generate(sc.tenants, steps, cfg.cluster.gpus, seed=sc.seed, step_s=cfg.cycle.resolution_s,
                 high_share=sc.high_share, low_share=sc.low_priority_share, target_load=sc.target_load,
                 peak_share=sc.peak_share, start=sc.start_time)
    return w.demand


def spec_for(frame: pd.DataFrame, step_s: int, cfg: Config, horizon: int | None = None,
             season: int | None = None) -> LSTMSpec:
    if season is None:
        season = cfg.forecaster.season_steps if step_s == cfg.cycle.resolution_s else max(2, 86400 // step_s)
    horizon = horizon or cfg.cycle.horizon_steps
    if len(frame) < 3 * season:  # short traces (Azure: one hour) have no daily season to lean on
        season = max(horizon, min(season, len(frame) // 6))
    context = min(60, season)
    return LSTMSpec(context=context, horizon=min(horizon, season), season=season,
                    quantiles=tuple(cfg.forecaster.quantiles), step_s=step_s)


def retrain_on(frame: pd.DataFrame, cfg: Config, *, model_dir: Path, step_s: int, epochs: int | None = None,
               samples_per_epoch: int = 16384, seed: int = 0, progress: bool = True, backtest_tenants: int = 40,
               out_dir: Path | None = None, name: str = "retrain", horizon: int | None = None,
               season: int | None = None, promote: bool = True, with_ets: bool = True) -> RetrainOutcome:
    frame = fill_short_gaps(frame.sort_index(), 3)
    spec = spec_for(frame, step_s, cfg, horizon, season)
    n = len(frame)
    holdout = min(spec.season, max(spec.horizon * 4, n // 5))
    if n - holdout < spec.season + spec.context + spec.horizon + 20:
        raise DataError(f"history too short to retrain: {n} steps, need about {spec.season * 2 + holdout}")
    train_frame = frame.iloc[: n - holdout]
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    res = train(train_frame, spec, epochs=epochs or cfg.retrain.epochs, samples_per_epoch=samples_per_epoch,
                seed=seed, progress=progress)
    from forecaster.lstm import LSTMForecaster

    candidate = LSTMForecaster(res.model, "candidate")
    rng = np.random.default_rng(seed)
    cols = list(frame.columns)
    if len(cols) > backtest_tenants:
        cols = sorted(rng.choice(cols, backtest_tenants, replace=False).tolist())
    bt_frame = frame[cols]
    qs = spec.quantiles
    hist_steps = max(spec.season * 9, 2 * spec.season + spec.context)
    models = {"lstm": candidate, **standard_baselines(spec.season, qs, min(n - holdout, hist_steps), with_ets=with_ets)}
    current = None
    try:
        current = registry.load_current(model_dir)
        if current.spec.step_s == spec.step_s and current.spec.horizon >= spec.horizon:
            models["current"] = current
    except registry.ModelError as exc:
        log.info("no current model to compare with: %s", exc)
    result = backtest.run(bt_frame, models, start=n - holdout, horizon=spec.horizon, stride=spec.horizon,
                          history_steps=hist_steps, quantiles=qs, season=spec.season, max_origins=24)
    baselines = [m for m in models if m not in ("lstm", "current")]
    best_name, best_wql = result.best_baseline(baselines)
    lstm_wql = result.report["models"]["lstm"]["wql"]
    gain = 1 - lstm_wql / best_wql if best_wql > 0 else 0.0
    report = {**result.report, "train": {"seconds": res.seconds, "epochs": res.epochs_run,
                                         "best_val_loss": res.best_val_loss, "curve": res.curve,
                                         "tenants": int(frame.shape[1]), "steps": int(len(train_frame))},
              "best_baseline": best_name, "gain_vs_best_baseline": gain}
    if out_dir is not None:
        backtest.write_report(result, out_dir, name)
    beats_baselines = lstm_wql <= best_wql * (1 - cfg.retrain.min_improvement)
    beats_current = "current" not in models or lstm_wql <= result.report["models"]["current"]["wql"]
    meta = {"data_window": [str(frame.index[0]), str(frame.index[-1])], "tenants": int(frame.shape[1]),
            "metrics": {"wql": lstm_wql, "best_baseline": best_name, "best_baseline_wql": best_wql,
                        "gain_vs_best_baseline": gain}, "train_seconds": res.seconds, "epochs": res.epochs_run}
    version = registry.save_version(model_dir, res.model, meta)
    promoted = False
    if not promote:
        msg = f"saved {version} (not promoted: promotion disabled); LSTM wQL {lstm_wql:.4f} vs {best_name} {best_wql:.4f}"
    elif beats_baselines and beats_current:
        registry.promote(model_dir, version, f"wQL {lstm_wql:.4f} beats {best_name} {best_wql:.4f} ({gain:+.1%})")
        promoted = True
        msg = f"promoted {version}: LSTM wQL {lstm_wql:.4f} vs best baseline {best_name} {best_wql:.4f} ({gain:+.1%})"
    else:
        why = (f"LSTM wQL {lstm_wql:.4f} does not beat {best_name} {best_wql:.4f} by {cfg.retrain.min_improvement:.0%}"
               if not beats_baselines else
               f"LSTM wQL {lstm_wql:.4f} is worse than the current model's {result.report['models']['current']['wql']:.4f}")
        registry.record_rejection(model_dir, version, why)
        msg = f"kept the current model; {version} saved but not promoted: {why}"
    return RetrainOutcome(version, promoted, msg, report, backtest.table(report))


def load_history(cfg: Config, *, data: Path | None = None, trace: str | None = None, data_dir: Path | None = None,
                 days: float = 10.0, source=None) -> tuple[pd.DataFrame, int]:
    """History to train or score on, and its step: a file, a public trace, or the configured source."""
    step_s = cfg.cycle.resolution_s
    if data is not None:
        frame = read_history_file(data, step_s)
    elif trace is not None:
        frame, step_s = trace_history(trace, data_dir)
    elif cfg.source.kind == "simulator":
        frame = simulator_history(cfg, days)
    else:
        from daemon.sources.prometheus import PrometheusSource

        src = source if isinstance(source, PrometheusSource) else PrometheusSource(cfg)
        frame = src.history_range(pd.Timedelta(days=days))
    if frame.empty or frame.shape[1] == 0:
        raise DataError("no history to train on")
    return frame, step_s


def retrain_from_config(cfg: Config, *, source=None, data: Path | None = None, trace: str | None = None,
                        data_dir: Path | None = None, days: float = 10.0, progress: bool = True,
                        out_dir: Path | None = None, epochs: int | None = None, model_dir: Path | None = None,
                        samples_per_epoch: int = 16384) -> RetrainOutcome:
    frame, step_s = load_history(cfg, data=data, trace=trace, data_dir=data_dir, days=days, source=source)
    return retrain_on(frame, cfg, model_dir=model_dir or cfg.forecaster.model_dir, step_s=step_s,
                      epochs=epochs, progress=progress, out_dir=out_dir, samples_per_epoch=samples_per_epoch)
