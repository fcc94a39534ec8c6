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
from forecaster.ensemble import fit_blend
from forecaster.lstm import Conformal, LSTMSpec
from forecaster.selection import RECAL, make_baseline, wrap_lstm
from forecaster.series import fill_short_gaps, to_frame
from forecaster.train import train

log = logging.getLogger("gpu_autoscaler.retrain")


def default_data_dir() -> Path:
    env = os.environ.get("GPU_AUTOSCALER_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent.parent / "shared" / "data"


MAX_ETS_TENANTS = 100  # above this many tenants Holt-Winters is scored but never put in use (per-tenant fits)
TRAINED_DIR = Path("trained")  # retrains on a file or a public trace land here (gitignored), not in models/


@dataclass
class RetrainOutcome:
    version: str | None
    promoted: bool
    message: str
    report: dict
    table: str
    in_use: dict | None = None


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
    try:
        df["time"] = pd.to_datetime(df["time"], utc=True)
    except (ValueError, TypeError) as exc:
        raise DataError(f"{path}: column 'time' is not a timestamp: {exc}") from None
    long = {"tenant", "value"} <= set(df.columns)
    if long:
        wide = df.pivot_table(index="time", columns="tenant", values="value", aggfunc="mean") \
            if pd.api.types.is_numeric_dtype(df["value"]) else df.set_index("time")[["value"]]
    else:
        wide = df.set_index("time").sort_index()
    check_history(wide, step_s, str(path))
    if long:
        return to_frame(df[["time", "tenant", "value"]], step_s)
    wide = wide.astype(float).resample(pd.Timedelta(seconds=step_s)).mean()
    wide.columns.name = "tenant"
    return wide


def check_history(wide: pd.DataFrame, step_s: int, where: str) -> None:
    """Refuse input the models would silently mis-read; the message names the column and the problem."""
    if wide.shape[1] == 0 or len(wide) == 0:
        raise DataError(f"{where}: no tenant column or no row")
    for col in wide.columns:
        s = wide[col]
        if not pd.api.types.is_numeric_dtype(s):
            bad = s[pd.to_numeric(s, errors="coerce").isna() & s.notna()]
            raise DataError(f"{where}: column {col!r} is not numeric (e.g. {str(bad.iloc[0])[:20]!r})")
        if s.isna().all():
            raise DataError(f"{where}: column {col!r} is empty")
        if (s < 0).any():
            raise DataError(f"{where}: column {col!r} has negative values (first at {s[s < 0].index[0]}): "
                            "demand cannot be negative")
        if s.nunique(dropna=True) == 1:
            raise DataError(f"{where}: column {col!r} is constant ({s.dropna().iloc[0]:g}): "
                            "nothing to forecast; drop it")
    gaps = pd.Series(wide.index.unique().sort_values()).diff().dt.total_seconds().to_numpy()[1:]
    if len(gaps):
        native = int(np.median(gaps))
        if native <= 0 or (step_s % native and native % step_s):
            raise DataError(f"{where}: samples are {native} s apart, which does not divide evenly into the "
                            f"{step_s} s step (cycle.resolution_s)")
        if native > step_s:  # each sample would fill one step in native // step_s and leave the others missing
            raise DataError(f"{where}: samples are {native} s apart, coarser than the {step_s} s step "
                            f"(cycle.resolution_s); set the step to {native} s or more")


def trace_history(name: str, data_dir: Path | None) -> tuple[pd.DataFrame, int]:
    from forecaster import traces

    d = Path(data_dir) if data_dir else default_data_dir()
    if name == "alibaba":
        frame, _ = traces.alibaba_demand(d, step_s=300, last_days=50)
        return frame, 300
    if name == "azure":
        return traces.azure_requests(d, step_s=10), 10
    if name == "helios":
        return traces.helios_demand(d, step_s=300), 300
    if name == "servegen":
        return traces.servegen_rates(d), 600
    raise DataError(f"unknown trace {name!r} ({', '.join(TRACES)})")


TRACES = ("alibaba", "azure", "helios", "servegen")


def simulator_history(cfg: Config, days: float) -> pd.DataFrame:
    from daemon.sim.workloads import generate

    sc = cfg.source.simulator
    steps = int(days * 86400 / cfg.cycle.resolution_s)
    pools = cfg.fleet.pools  # a mixed fleet: the simulated source's cluster and its typed series (tenant@spec)
    gpus = sum(p.nodes * p.gpus_per_node for p in pools) if pools else cfg.cluster.gpus
    w = generate(sc.tenants, steps, gpus, seed=sc.seed, step_s=cfg.cycle.resolution_s,
                 high_share=sc.high_share, low_share=sc.low_priority_share, target_load=sc.target_load,
                 peak_share=sc.peak_share, start=sc.start_time)
    if pools:
        from daemon.policy.fleet import series_name
        from daemon.sim.workloads import fleet_accepts

        acc = fleet_accepts(w.tiers, list(dict.fromkeys(p.type for p in pools)))
        return w.demand.set_axis(pd.Index([series_name(t, a) for t, a in zip(w.demand.columns, acc)],
                                          name="tenant"), axis=1)
    return w.demand


ANCHORS = (3, 6, 12, 24, 60)  # (h10a) the LSTM's median corrects a learned mix of these window means, last, season-ago


def nominal_season(step_s: int, cfg: Config, season: int | None = None) -> int:
    """The season a history at `step_s` has before any shortening: the configured one at the cycle's step."""
    if season is not None:
        return int(season)
    return cfg.forecaster.season_steps if step_s == cfg.cycle.resolution_s else max(2, 86400 // step_s)


def check_one_season(n: int, step_s: int, cfg: Config, what: str) -> None:
    """A history at the cycle's step shorter than the configured season is refused (a trace at its own step,
    such as Azure's hour of 10-second counts, is scored with a season shortened to its length instead)."""
    if step_s == cfg.cycle.resolution_s and n < cfg.forecaster.season_steps:
        raise DataError(f"{what}: {n} steps is less than one season ({cfg.forecaster.season_steps} steps)")


def spec_for(frame: pd.DataFrame, step_s: int, cfg: Config, horizon: int | None = None,
             season: int | None = None) -> LSTMSpec:
    season = nominal_season(step_s, cfg, season)
    horizon = horizon or cfg.cycle.horizon_steps
    real_season = True
    if len(frame) < 3 * season:  # short traces (Azure: one hour) have no daily season to lean on
        season, real_season = max(horizon, min(season, len(frame) // 6)), False
    context = min(60, season)
    # per-series scaling divides by the last season's mean, floored: 1 for GPU counts, lower for request rates
    # well under 1/s (ServeGen clients), so small series are not flattened to zero
    with np.errstate(all="ignore"):
        level = float(np.nanmedian(frame.mean().to_numpy(dtype=float))) if frame.shape[1] else 1.0
    floor = 1.0 if not np.isfinite(level) or level >= 10 else float(max(1e-3, 0.1 * level))
    # an hour ahead of a day-long season, the last value is a better anchor than the value one season ago
    # (naive beats seasonal naive on every real trace here); the network learns the correction from there
    # (and when the "season" is only a window of a short history, not a day, the value one season ago means nothing)
    anchor = "last" if horizon * 12 <= season or not real_season else "seasonal"
    return LSTMSpec(context=context, horizon=min(horizon, season), season=season,
                    quantiles=tuple(cfg.forecaster.quantiles), step_s=step_s, scale_floor=floor, anchor=anchor,
                    anchors=ANCHORS)


def retrain_on(frame: pd.DataFrame, cfg: Config, *, model_dir: Path, step_s: int, epochs: int | None = None,
               samples_per_epoch: int = 16384, seed: int = 0, progress: bool = True, backtest_tenants: int = 40,
               out_dir: Path | None = None, name: str = "retrain", horizon: int | None = None,
               season: int | None = None, promote: bool = True, with_ets: bool = True,
               scored_on: str = "unknown", blend: bool = True, weight_by_scale: bool = True,
               zero_init: bool = True) -> RetrainOutcome:
    frame = fill_short_gaps(frame.sort_index(), 3)
    if season is None:
        check_one_season(len(frame), step_s, cfg, "history too short to retrain")
    spec = spec_for(frame, step_s, cfg, horizon, season)
    n = len(frame)
    holdout = min(spec.season, max(spec.horizon * 4, n // 5))
    if n < spec.season:
        raise DataError(f"history too short to retrain: {n} steps is less than one season ({spec.season} steps)")
    if n - holdout < spec.season + spec.context + spec.horizon + 20:
        raise DataError(f"history too short to retrain: {n} steps, need about {spec.season * 2 + holdout}")
    train_frame = frame.iloc[: n - holdout]
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    res = train(train_frame, spec, epochs=epochs or cfg.retrain.epochs, samples_per_epoch=samples_per_epoch,
                seed=seed, progress=progress, weight_by_scale=weight_by_scale, zero_init=zero_init)
    from forecaster.lstm import LSTMForecaster

    candidate = LSTMForecaster(res.model, "candidate")
    rng = np.random.default_rng(seed)
    cols = list(frame.columns)
    if len(cols) > backtest_tenants:
        cols = sorted(rng.choice(cols, backtest_tenants, replace=False).tolist())
    bt_frame = frame[cols]
    qs = spec.quantiles
    # score on the history the daemon will give the model each cycle (a file or trace at another step: 9 seasons)
    daemon_steps = cfg.cycle.history_steps if step_s == cfg.cycle.resolution_s else spec.season * 9
    hist_steps = max(daemon_steps, spec.season + spec.context + 1)
    models = {"lstm": candidate, "lstm_conformal": Conformal(candidate),
              **standard_baselines(spec.season, qs, min(n - holdout, hist_steps), with_ets=with_ets)}
    skipped: dict[str, str] = {}
    # which baselines the daemon could run every cycle here (Holt-Winters fits one model per tenant)
    runnable_baselines = [m for m in models if m not in ("lstm", "lstm_conformal")
                          and (m != "holt_winters" or frame.shape[1] <= MAX_ETS_TENANTS)]
    blend_choice = None
    if blend:
        blend_choice, why_not = fit_blend_before(train_frame[cols], candidate, spec, holdout, hist_steps,
                                                 runnable_baselines, with_ets)
        if blend_choice is None:
            skipped["lstm_blend"] = why_not
        else:
            blend_entry = {"conformal": blend_choice.lstm == "lstm_conformal", "blend": blend_choice.to_dict(),
                           "season": spec.season}
            models["lstm_blend"] = wrap_lstm(candidate, blend_entry)
            models["lstm_blend" + RECAL] = wrap_lstm(candidate, {**blend_entry, "recalibrated": True})
    # every baseline the daemon could run here also recalibrated per tenant from its own recent errors (the LSTM's
    # recalibrated variant is lstm_conformal): scored on the same held-out window, chosen only if it scores best
    for b in runnable_baselines:
        models[b + RECAL] = make_baseline(b + RECAL, spec.season, qs)
    current_entry, cur_version = None, None
    try:
        current_entry = registry.read_in_use(model_dir)
        if current_entry is None or current_entry.get("kind") == "lstm":
            cur_version = (current_entry["version"] if current_entry
                           else registry.read_manifest(model_dir).get("current"))
            if cur_version:
                current = registry.load_version(model_dir, cur_version)
                if current.spec.step_s != spec.step_s:
                    skipped["current"] = (f"{current.name} forecasts at {current.spec.step_s} s steps, "
                                          f"this history is {spec.step_s} s")
                elif current.spec.horizon < spec.horizon:
                    skipped["current"] = f"{current.name} forecasts {current.spec.horizon} steps, {spec.horizon} needed"
                else:
                    models["current"] = wrap_lstm(current, current_entry) if current_entry else current
    except registry.ModelError as exc:
        skipped["current"] = str(exc)
    for k, why in skipped.items():
        log.warning("not scored: %s: %s", k, why)
    result = backtest.run(bt_frame, models, start=n - holdout, horizon=spec.horizon, history_steps=hist_steps,
                          quantiles=qs, season=spec.season, max_origins=24)
    scores = {k: float(v["wql"]) for k, v in result.report["models"].items()}
    baselines = [m for m in models if not m.startswith("lstm") and m != "current"]
    # Holt-Winters fits one model per tenant: scored always, but too slow to run every cycle on a big cluster
    eligible = [m for m in baselines if not m.startswith("holt_winters") or frame.shape[1] <= MAX_ETS_TENANTS]
    best_name = min(eligible, key=lambda m: scores[m])
    best_wql = scores[best_name]
    fallback = min((m for m in baselines if not m.startswith("holt_winters")), key=lambda m: scores[m])  # every cycle
    # recalibrated or not, alone or blended with a baseline (and that recalibrated): as it scored
    lstm_name = min((m for m in models if m.startswith("lstm")), key=lambda m: scores[m])
    lstm_wql = scores[lstm_name]
    gain = 1 - lstm_wql / best_wql if best_wql > 0 else 0.0
    # the winner: the best baseline, unless the new LSTM beats it by the required margin, or the current model
    # (already scored on this data) does better than both
    contenders = {best_name: best_wql}
    if lstm_wql <= best_wql * (1 - cfg.retrain.min_improvement):
        contenders[lstm_name] = lstm_wql
    if "current" in scores:
        contenders["current"] = scores["current"]
    winner = min(contenders, key=lambda k: (contenders[k], k != "current"))
    runnable_why = None
    if step_s != cfg.cycle.resolution_s:
        runnable_why = (f"this history is at {step_s} s steps, "
                        f"the daemon runs cycle.resolution_s = {cfg.cycle.resolution_s} s")
    elif spec.horizon < cfg.cycle.horizon_steps:
        runnable_why = (f"the horizon is {spec.horizon} steps, "
                        f"the daemon needs cycle.horizon_steps = {cfg.cycle.horizon_steps}")
    report = {**result.report, "train": {"seconds": res.seconds, "epochs": res.epochs_run,
                                         "best_val_loss": res.best_val_loss, "curve": res.curve,
                                         "tenants": int(frame.shape[1]), "steps": int(len(train_frame))},
              "best_baseline": best_name, "gain_vs_best_baseline": gain, "lstm_variant": lstm_name, "winner": winner,
              "scored_on": scored_on,
              "not_scored": skipped, "blend": blend_choice.to_dict() if blend_choice else None,
              "blend_scores": blend_choice.scores if blend_choice else {}}
    if out_dir is not None:
        backtest.write_report(result, out_dir, name)
    meta = {"data_window": [str(frame.index[0]), str(frame.index[-1])], "tenants": int(frame.shape[1]),
            "scored_on": scored_on,
            "metrics": {"wql": lstm_wql, "best_baseline": best_name, "best_baseline_wql": best_wql,
                        "gain_vs_best_baseline": gain}, "train_seconds": res.seconds, "epochs": res.epochs_run}
    version = registry.save_version(model_dir, res.model, meta)
    ranked = ", ".join(f"{k} {v:.4f}" for k, v in sorted(scores.items(), key=lambda kv: kv[1]))
    why = f"{winner} scored best on {scored_on} (last {holdout} steps, wQL: {ranked})"
    if not winner.startswith("lstm") and lstm_name not in contenders:
        why += f"; the new LSTM did not beat {best_name} by {cfg.retrain.min_improvement:.0%}"
    entry = {"scored_on": scored_on, "step_s": int(step_s), "horizon": int(spec.horizon), "season": int(spec.season),
             "quantiles": list(qs), "wql": contenders[winner], "scores": scores, "fallback": fallback, "why": why,
             "at": pd.Timestamp.now(tz="UTC").isoformat()}
    # how the winner's p90 did on the held-out window: the share of actual steps at or under it, and of
    # (origin, tenant) pairs whose realised peak over the horizon stayed at or under the forecast's p90 peak
    won = result.report["models"][winner]
    entry.update(coverage_p90=won["coverage_p90"], peak_coverage_p90=won["peak_coverage_p90"])
    if winner.startswith("lstm_blend"):
        entry.update(kind="lstm", name=f"lstm:{version}", version=version,
                     conformal=blend_choice.lstm == "lstm_conformal", blend=blend_choice.to_dict(),
                     recalibrated=winner.endswith(RECAL))
    elif winner.startswith("lstm"):
        entry.update(kind="lstm", name=f"lstm:{version}", version=version, conformal=winner == "lstm_conformal")
    elif winner == "current":
        entry.update(kind="lstm", name=f"lstm:{cur_version}", version=cur_version,
                     conformal=bool((current_entry or {}).get("conformal")))
        if (current_entry or {}).get("blend"):
            entry["blend"] = current_entry["blend"]
            entry["recalibrated"] = bool(current_entry.get("recalibrated"))
    else:
        entry.update(kind="baseline", name=best_name, recalibrated=best_name.endswith(RECAL))
    promoted = False
    if not promote:
        msg = f"saved {version}, nothing promoted (promotion disabled); winner {winner}: {why}"
    elif runnable_why is not None:
        registry.record_rejection(model_dir, version, f"not runnable by the daemon: {runnable_why}")
        msg = f"saved {version}, nothing promoted: {runnable_why}; winner here would be {entry['name']} ({why})"
    else:
        registry.set_in_use(model_dir, entry)
        promoted = winner.startswith("lstm")
        if not promoted:
            registry.record_rejection(model_dir, version, why)
        msg = (f"promoted {version}: {why}" if promoted else
               f"in use: {entry['name']} ({why}); {version} saved but not promoted")
    return RetrainOutcome(version, promoted, msg, report, backtest.table(report), entry)


def fit_blend_before(frame: pd.DataFrame, lstm, spec: LSTMSpec, holdout: int, hist_steps: int,
                     baselines: list[str], with_ets: bool):
    """Fit the LSTM + baseline blend on the window just before the held-out one; (choice, None) or (None, why).

    `frame` is the history before the held-out window (what the LSTM was trained on), so the weight and the
    partner are chosen without seeing the window they are scored on.
    """
    n = len(frame)
    start = n - holdout
    if start < spec.season + spec.context + 1:
        return None, f"no room for a validation window before the held-out one ({n} steps before it)"
    models = {"lstm": lstm, "lstm_conformal": Conformal(lstm),
              **{k: v for k, v in standard_baselines(spec.season, spec.quantiles, min(start, hist_steps),
                                                     with_ets=with_ets).items() if k in baselines}}
    res = backtest.run(frame, models, start=start, horizon=spec.horizon, history_steps=hist_steps,
                       quantiles=spec.quantiles, season=spec.season, max_origins=24)
    try:
        choice = fit_blend(res.predictions, res.actuals, spec.quantiles, lstms=("lstm", "lstm_conformal"),
                           baselines=[b for b in baselines if b in models])
    except ValueError as exc:
        return None, str(exc)
    return choice, None


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
                        samples_per_epoch: int = 16384, this_cluster: bool = False) -> RetrainOutcome:
    """Retrain on the configured source (into forecaster.model_dir) or on a file/trace (into `trained/`).

    A file or a public trace is not this cluster: its models go to a separate directory unless `model_dir`
    says otherwise, so a retrain on a trace can never replace the production model.
    """
    frame, step_s = load_history(cfg, data=data, trace=trace, data_dir=data_dir, days=days, source=source)
    if trace is not None:
        scored_on = f"trace:{trace}"
    elif data is not None and not this_cluster:
        scored_on = f"file:{Path(data).name}"
    else:
        from daemon.forecasting.choose import cluster_id

        scored_on = cluster_id(cfg)
    if model_dir is None:
        model_dir = (TRAINED_DIR if (trace is not None or (data is not None and not this_cluster))
                     else cfg.forecaster.model_dir)
    return retrain_on(frame, cfg, model_dir=model_dir, step_s=step_s, scored_on=scored_on,
                      epochs=epochs, progress=progress, out_dir=out_dir, samples_per_epoch=samples_per_epoch)
