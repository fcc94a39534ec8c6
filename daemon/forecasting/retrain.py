"""retrain: pull history, train the LSTM, backtest it against the baselines, promote only if it wins."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from daemon.config import Config
from daemon.forecasting.errors import DataError
from daemon.forecasting.history_csv import read_csv_columns
from daemon.forecasting.replay_select import ReplayCluster, replay_scores
from daemon.forecasting.times import TimeFormatError, parse_times, spacing_problem, zone_missing
from daemon.forecasting.units import gpu_columns
from forecaster import backtest, registry
from forecaster.baselines import standard_baselines
from forecaster.ensemble import fit_blend
from forecaster.lstm import Conformal, LSTMSpec
from forecaster.memo import shared_past_peaks
from forecaster.progress import phase
from forecaster.selection import PEAK, RECAL, make_baseline, peak_suffix, wrap_lstm
from forecaster.series import fill_short_gaps, to_frame
from forecaster.train import train

log = logging.getLogger("gpu_autoscaler.retrain")


def default_data_dir() -> Path:
    env = os.environ.get("GPU_AUTOSCALER_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data beside the checkout


# calibrating a forecaster's peak replays it at many past origins: Holt-Winters refits there, so it gets none
SLOW_TO_REPLAY = ("holt_winters",)
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
    entries: dict[str, dict] = dataclasses.field(default_factory=dict)  # candidate -> what in_use would record

# A history file resampled to the step has one row per step between its first and last time. A file with gaps has
# more steps than rows, but not without bound: one outlier timestamp (a year 2200 among minutes of 2026) would
# otherwise make a 5-line file a 100-million-row frame (gigabytes, then MemoryError or the OOM killer). Allowed:
# SPAN_STEPS_PER_ROW steps per distinct time given (three quarters missing), plus a day of 1-min steps.
SPAN_STEPS_PER_ROW = 4
SPAN_SLACK_STEPS = 1440


def read_history_file(path: Path, step_s: int, keep: Callable[[str], bool] | None = None) -> pd.DataFrame:
    """CSV or parquet; wide (a `time` column + one column per tenant) or long (`time, tenant, value`).

    Idle columns (constant, or with no value) are dropped with one warning that lists them all (one refusal per
    column made a user rerun twenty times for one file); a column `keep` says yes to (a tenant the config lists)
    stays, as 0 demand where it has no value, as the daemon counts a listed tenant with no GPUs."""
    path = Path(path)
    csv = path.suffix not in (".parquet", ".pq")
    try:
        df = read_csv_columns(path) if csv else pd.read_parquet(path)
    except DataError:
        raise
    except ImportError:  # pandas reads parquet through pyarrow, which the package does not install
        if csv:
            raise
        raise DataError(f"{path}: reading parquet needs pyarrow, which is not installed: `pip install pyarrow` in "
                        "the daemon's environment, or give the history as CSV") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the file is empty: a history starts with a header line (`time,<tenant>,...`, or "
                        "`time,tenant,value`), then one line per sample") from None
    except Exception as exc:  # pandas' parser errors end in a newline and may span lines: one line
        raise DataError(f"{path}: cannot read history: {' '.join(str(exc).split())}") from None
    if "time" not in df.columns:
        seen = ", ".join(repr(str(c)[:40]) for c in df.columns[:6]) + (", ..." if df.shape[1] > 6 else "") \
            or "no names"
        sep = " (a CSV's columns are separated by commas)" if csv and df.shape[1] == 1 else ""
        raise DataError(f"{path}: needs a 'time' column; the header has {seen}{sep}")
    naive = zone_missing(df["time"])
    try:  # epoch numbers by magnitude (s, ms, us, ns), text as pandas reads it: daemon/forecasting/times.py
        df["time"], unit = parse_times(df["time"])
    except TimeFormatError as exc:
        raise DataError(f"{path}: {exc}") from None
    if unit is None and naive is not None:
        log.warning("%s: 'time' names no zone (first value %r): read as UTC; if the file is in local time, give "
                    "its offset (e.g. %s+01:00), or its daily peaks and windows come out shifted", path, naive[:40],
                    naive[:40])
    long = {"tenant", "value"} <= set(df.columns)
    if long:
        wide = df.pivot_table(index="time", columns="tenant", values="value", aggfunc="mean") \
            if pd.api.types.is_numeric_dtype(df["value"]) else df.set_index("time")[["value"]]
    else:
        wide = df.set_index("time").sort_index()
    idle = check_history(wide, step_s, str(path))
    if long:
        out = to_frame(df[["time", "tenant", "value"]], step_s)
    else:
        out = wide.astype(float).resample(pd.Timedelta(seconds=step_s)).mean()
        out.columns.name = "tenant"
    return drop_idle(out, idle, str(path), keep)


def drop_idle(frame: pd.DataFrame, idle: Mapping[str, float], where: str,
              keep: Callable[[str], bool] | None = None) -> pd.DataFrame:
    """The frame without its idle columns (`idle`: column -> its one value, NaN for none), said in one warning;
    a kept one with no value is 0 throughout. Refused when nothing is left."""
    kept = [c for c in idle if keep is not None and keep(str(c))]
    gone = [c for c in idle if c not in kept]
    if len(gone) == frame.shape[1]:
        raise DataError(f"{where}: every column is constant or empty ({len(gone)}): nothing to forecast or replay")
    if gone:
        log.warning("%s: %d idle column(s) dropped, constant or with no value (nothing to forecast): %s", where,
                    len(gone), ", ".join(f"{c} ({'empty' if np.isnan(idle[c]) else f'{idle[c]:g}'})" for c in gone))
    empty = [c for c in kept if np.isnan(idle[c])]
    if empty:
        frame = frame.copy()
        frame[empty] = 0.0
    return frame.drop(columns=gone)


# the largest value a history column may hold (GPUs, or requests per second for a service)
MAX_VALUE = 1e9


def check_history(wide: pd.DataFrame, step_s: int, where: str) -> dict[str, float]:
    """Refuse input the models would silently mis-read; the message names the column and the problem. Returns
    the idle columns (constant, or with no value: column -> its value, NaN for none) for drop_idle."""
    if wide.shape[1] == 0:
        raise DataError(f"{where}: no tenant column: the header names only 'time' (one column per tenant beside it, "
                        "or `time,tenant,value`)")
    if len(wide) == 0:
        raise DataError(f"{where}: a header but no data row: one line per sample under it")
    idle: dict[str, float] = {}
    for col in wide.columns:
        s = wide[col]
        if not pd.api.types.is_numeric_dtype(s):
            bad = s[pd.to_numeric(s, errors="coerce").isna() & s.notna()]
            raise DataError(f"{where}: column {col!r} is not numeric (e.g. {str(bad.iloc[0])[:20]!r})")
        if s.isna().all():
            idle[col] = float("nan")
            continue
        if (s < 0).any():
            raise DataError(f"{where}: column {col!r} has negative values (first at {s[s < 0].index[0]}): "
                            "demand cannot be negative")
        inf = np.isinf(s.to_numpy(dtype=float))
        if inf.any():  # pandas reads "inf" as a number; resampled and summed, it would vanish or be everything
            raise DataError(f"{where}: column {col!r} has {s[inf].iloc[0]} at {s.index[inf][0]}: GPU demand is a "
                            "finite number")
        huge = s.to_numpy(dtype=float) > MAX_VALUE
        if huge.any():  # 1e308 is finite, but summed or scaled it is inf: a unit mistake or a hostile file
            raise DataError(f"{where}: column {col!r} has {s[huge].iloc[0]:g} at {s.index[huge][0]}: more than "
                            f"{MAX_VALUE:g}, which no cluster's GPUs or service's requests per second reach")
        if s.nunique(dropna=True) == 1:
            idle[col] = float(s.dropna().iloc[0])
    times = wide.index.unique().sort_values()
    spacing = spacing_problem(times, step_s)  # first: data coarser than the step also spans too many steps
    if spacing:
        raise DataError(f"{where}: {spacing}")
    if len(times) > 1:  # before any resampling: the frame on the step has one row per step of the whole span
        steps = int((times[-1] - times[0]) // pd.Timedelta(seconds=step_s)) + 1
        bound = SPAN_STEPS_PER_ROW * len(times) + SPAN_SLACK_STEPS
        if steps > bound:
            raise DataError(f"{where}: the samples span {times[0]} to {times[-1]} ({steps:,} steps of {step_s} s) "
                            f"but the file has {len(times):,} distinct times (at most {bound:,} steps allowed): "
                            "a timestamp far from the others?")
    return idle


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


def _simulated(cfg: Config, days: float):
    from daemon.sim.workloads import generate

    sc = cfg.source.simulator
    steps = int(days * 86400 / cfg.cycle.resolution_s)
    pools = cfg.fleet.pools  # a mixed fleet: the simulated source's cluster
    gpus = sum(p.nodes * p.gpus_per_node for p in pools) if pools else cfg.cluster.gpus
    return generate(sc.tenants, steps, gpus, seed=sc.seed, step_s=cfg.cycle.resolution_s,
                    high_share=sc.high_share, low_share=sc.low_priority_share, target_load=sc.target_load,
                    peak_share=sc.peak_share, start=sc.start_time)


def simulator_history(cfg: Config, days: float) -> pd.DataFrame:
    """The simulated source's history; on a mixed fleet its typed series (tenant@spec), as the source serves."""
    w = _simulated(cfg, days)
    pools = cfg.fleet.pools
    if pools:
        from daemon.policy.fleet import series_name
        from daemon.sim.workloads import fleet_accepts

        acc = fleet_accepts(w.tiers, list(dict.fromkeys(p.type for p in pools)))
        return w.demand.set_axis(pd.Index([series_name(t, a) for t, a in zip(w.demand.columns, acc)],
                                          name="tenant"), axis=1)
    return w.demand


def replay_cluster(cfg: Config, days: float = 10.0, trace: str | None = None, data: Path | None = None,
                   data_dir: Path | None = None) -> ReplayCluster | None:
    """What `--select-by replay` replays the history on: the simulator's own tenants (tiers, job sizes) and GPUs,
    the Alibaba trace's QoS classes as tiers, or the configured cluster (tiers from `[[tenants]]`, one GPU per
    job); None for a file or a trace whose tenants have no tiers."""
    if trace == "alibaba":
        from forecaster import traces

        _, tiers = traces.alibaba_demand(Path(data_dir) if data_dir else default_data_dir(), step_s=300,
                                         last_days=50)
        return ReplayCluster({str(k): v for k, v in tiers.items()}, None, cfg.cluster.gpus_per_node)
    if trace is not None or data is not None:
        return ReplayCluster.from_config(cfg) if data is not None else None
    if cfg.source.kind == "simulator":
        w = _simulated(cfg, days)
        cols = [str(c) for c in w.demand.columns]
        return ReplayCluster(dict(zip(cols, w.tiers)), cfg.cluster.gpus, cfg.cluster.gpus_per_node,
                             {c: int(g) for c, g in zip(cols, w.job_gpus)})
    return ReplayCluster.from_config(cfg)


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


def peak_windows_for(cfg: Config, step_s: int, horizon: int) -> dict[str, int]:
    """The policy's two lead windows (`lead`: lead_time_steps, `preempt`: preempt_lead_steps) in steps of a history
    at `step_s`: as configured at the cycle's step, else the same time ahead rounded up; 1 to `horizon` steps."""
    pc = cfg.policy
    out = {}
    for name, steps in (("lead", pc.lead_time_steps), ("preempt", pc.preempt_lead_steps)):
        k = steps if step_s == cfg.cycle.resolution_s else int(np.ceil(steps * cfg.cycle.resolution_s / step_s))
        out[name] = max(1, min(int(k), int(horizon)))
    return out


def replay_config(cfg: Config, step_s: int, horizon: int, history_steps: int, windows: dict[str, int]) -> Config:
    """The configuration a replay of a history at `step_s` runs with: the daemon's, at that step and horizon."""
    cycle = cfg.cycle.model_copy(update={"resolution_s": int(step_s), "horizon_steps": int(horizon),
                                         "history_steps": max(int(history_steps), 60)})
    policy = cfg.policy.model_copy(update={"lead_time_steps": windows["lead"],
                                           "preempt_lead_steps": windows["preempt"]})
    return cfg.model_copy(update={"cycle": cycle, "policy": policy})


def train_threads(cpus: int | None = None, load: float | None = None) -> int:
    """Torch's intra-op threads for training: the CPUs left idle by the load average, 1 to 4. On a busy box the
    threads only wait on each other: a training batch of the own-cluster replay's LSTM (28 series, 60-step
    context) took 5.1 s with 2 threads and 0.7 s with 1 at a load average of 15 on 2 cores (issue 37, item 7)."""
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # no affinity call (macOS)
            cpus = os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average here: assume an idle box, as before
            load = 0.0
    return max(1, min(4, cpus, int(cpus - load + 0.5)))


def retrain_on(frame: pd.DataFrame, cfg: Config, *, model_dir: Path, step_s: int, epochs: int | None = None,
               samples_per_epoch: int = 16384, seed: int = 0, progress: bool = True, backtest_tenants: int = 40,
               out_dir: Path | None = None, name: str = "retrain", horizon: int | None = None,
               season: int | None = None, promote: bool = True, with_ets: bool = True,
               scored_on: str = "unknown", blend: bool = True, weight_by_scale: bool = True,
               zero_init: bool = True, select_by: str | None = None, cluster: ReplayCluster | None = None,
               tiers: dict[str, str] | None = None) -> RetrainOutcome:
    """Train, score every candidate on the held-out end of `frame`, put the best in use (with `promote`).

    The candidates are ranked by `select_by` (default `retrain.select_by`): `wql`, `peak` (the quantile loss of the
    peak over the policy's lead windows) or `replay` (the cost of replaying the held-out window through the policy
    with each; needs `cluster`, the tiers and sizes of the replayed cluster, with a high tier: without one the
    peak loss ranks them, and the report says why). `tiers` (tenant -> tier) breaks the peak scores down by tier;
    by default the cluster's.
    """
    select_by = select_by or cfg.retrain.select_by
    if select_by not in ("wql", "peak", "replay"):
        raise ValueError(f"select_by must be wql, peak or replay, not {select_by!r}")
    frame = fill_short_gaps(frame.sort_index(), 3)
    if season is None:
        check_one_season(len(frame), step_s, cfg, "history too short to retrain")
    spec = spec_for(frame, step_s, cfg, horizon, season)
    windows = peak_windows_for(cfg, step_s, spec.horizon)
    if cfg.retrain.peak_head:
        spec = dataclasses.replace(spec, peak_windows=tuple(sorted(set(windows.values()))))
    n = len(frame)
    holdout = min(spec.season, max(spec.horizon * 4, n // 5))
    if n < spec.season:
        raise DataError(f"history too short to retrain: {n} steps is less than one season ({spec.season} steps)")
    if n - holdout < spec.season + spec.context + spec.horizon + 20:
        raise DataError(f"history too short to retrain: {n} steps, need about {spec.season * 2 + holdout}")
    train_frame = frame.iloc[: n - holdout]
    torch.set_num_threads(train_threads())
    res = train(train_frame, spec, epochs=epochs or cfg.retrain.epochs, samples_per_epoch=samples_per_epoch,
                seed=seed, progress=progress, weight_by_scale=weight_by_scale, zero_init=zero_init,
                peak_weight=cfg.retrain.peak_weight)
    from forecaster.lstm import LSTMForecaster

    candidate = LSTMForecaster(res.model, "candidate")
    # scoring forecasts small batches: one intra-op thread is as fast on a quiet box and far faster on a busy one
    # (an LSTM forecast for 8 tenants: 1.6 ms with 1 thread, 76 ms with 2 at a load average of 5 on 2 cores)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _score_and_choose(frame, cfg, res, candidate, spec, windows, model_dir=model_dir, step_s=step_s,
                                 seed=seed, backtest_tenants=backtest_tenants, out_dir=out_dir, name=name,
                                 promote=promote, with_ets=with_ets, scored_on=scored_on, blend=blend,
                                 select_by=select_by, cluster=cluster, tiers=tiers, progress=progress)
    finally:
        torch.set_num_threads(threads)


def _score_and_choose(frame: pd.DataFrame, cfg: Config, res, candidate, spec: LSTMSpec, windows: dict[str, int], *,
                      model_dir: Path, step_s: int, seed: int, backtest_tenants: int, out_dir: Path | None,
                      name: str, promote: bool, with_ets: bool, scored_on: str, blend: bool, select_by: str,
                      cluster: ReplayCluster | None, tiers: dict[str, str] | None,
                      progress: bool = False) -> RetrainOutcome:
    n = len(frame)
    holdout = min(spec.season, max(spec.horizon * 4, n // 5))
    train_frame = frame.iloc[: n - holdout]
    rng = np.random.default_rng(seed)
    cols = list(frame.columns)
    if len(cols) > backtest_tenants:
        cols = sorted(rng.choice(cols, backtest_tenants, replace=False).tolist())
    bt_frame = frame[cols]
    qs = spec.quantiles
    if tiers is None and cluster is not None:
        tiers = dict(cluster.tiers)
    # score on the history the daemon will give the model each cycle (a file or trace at another step: 9 seasons)
    daemon_steps = cfg.cycle.history_steps if step_s == cfg.cycle.resolution_s else spec.season * 9
    hist_steps = max(daemon_steps, spec.season + spec.context + 1)
    # every LSTM candidate as the entry `in_use` would record for it (`wrap_lstm` builds it from that entry)
    lstm_entries: dict[str, dict] = {"lstm": {}, "lstm_conformal": {"conformal": True}}
    models = {k: wrap_lstm(candidate, e) for k, e in lstm_entries.items()}
    models.update(standard_baselines(spec.season, qs, min(n - holdout, hist_steps), with_ets=with_ets))
    skipped: dict[str, str] = {}
    # which baselines the daemon could run every cycle here (Holt-Winters fits one model per tenant)
    runnable_baselines = [m for m in models if m not in lstm_entries
                          and (m != "holt_winters" or frame.shape[1] <= MAX_ETS_TENANTS)]
    blend_choice = None
    if blend:
        with phase("fitting the LSTM's blend with a baseline", enabled=progress):
            blend_choice, why_not = fit_blend_before(train_frame[cols], candidate, spec, holdout, hist_steps,
                                                     runnable_baselines, with_ets)
        if blend_choice is None:
            skipped["lstm_blend"] = why_not
        else:
            blend_entry = {"conformal": blend_choice.lstm == "lstm_conformal", "blend": blend_choice.to_dict(),
                           "season": spec.season}
            for k, e in (("lstm_blend", blend_entry), ("lstm_blend" + RECAL, {**blend_entry, "recalibrated": True})):
                lstm_entries[k] = e
                models[k] = wrap_lstm(candidate, e)
    # every baseline the daemon could run here also recalibrated per tenant from its own recent errors (the LSTM's
    # recalibrated variant is lstm_conformal): scored on the same held-out window, chosen only if it scores best
    for b in runnable_baselines:
        models[b + RECAL] = make_baseline(b + RECAL, spec.season, qs)
    # and each (but Holt-Winters, costly to replay at past origins, or a blend with it) with its peak over
    # the lead windows recalibrated per tenant on realised peaks: the per-step forecast unchanged, so these tie
    # their base on wQL and are listed after it (a tie goes to the base)
    peak_wins = sorted(set(windows.values()))
    for mode in dict.fromkeys(cfg.retrain.peak_calibration):
        suf = "+peak" if mode == "moving" else "+peak_all"
        calib = {"windows": peak_wins, "moving_only": mode == "moving"}
        for k, e in list(lstm_entries.items()):
            partner = (e.get("blend") or {}).get("baseline", "")
            if not any(k.endswith(s) for s in PEAK) and not partner.startswith(SLOW_TO_REPLAY):
                lstm_entries[k + suf] = {**e, "peak_calibration": calib}
                models[k + suf] = wrap_lstm(candidate, lstm_entries[k + suf])
        for b in runnable_baselines:
            if b.startswith(SLOW_TO_REPLAY):
                continue
            for v in (b, b + RECAL):
                models[v + suf] = make_baseline(v + suf, spec.season, qs, peak_windows=peak_wins)
    current_entry, cur_version, current = None, None, None
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
                          quantiles=qs, season=spec.season, max_origins=24, peak_windows=windows, tiers=tiers,
                          peak_min_observed=cfg.forecaster.quality.peak_min_observed,
                          progress=f"scoring {len(models)} candidates" if progress else None)
    scores = {k: float(v["wql"]) for k, v in result.report["models"].items()}
    peak_scores = {k: float(v["peak"]["loss"]) for k, v in result.report["models"].items()}
    baselines = [m for m in models if not m.startswith("lstm") and m != "current"]
    # Holt-Winters fits one model per tenant: scored always, but too slow to run every cycle on a big cluster
    eligible = [m for m in baselines if not m.startswith("holt_winters") or frame.shape[1] <= MAX_ETS_TENANTS]
    lstms = [m for m in models if m.startswith("lstm")]
    # issue #10's yardstick, kept as it was: the LSTM family's best wQL against the best baseline's
    best_wql_name = min(eligible, key=lambda m: scores[m])
    lstm_name = min(lstms, key=lambda m: scores[m])
    gain = 1 - scores[lstm_name] / scores[best_wql_name] if scores[best_wql_name] > 0 else 0.0
    # what the winner is chosen by
    selected_by, select_note, replay = select_by, None, None
    if select_by == "replay":
        if cluster is None or not cluster.has_high_tier(frame.columns):
            selected_by = "peak"
            select_note = ("no replay: " + ("no cluster to replay was given" if cluster is None else
                                           "no tenant is in the high tier, so no forecast changes what the policy "
                                           "holds") + "; ranked by the peak loss instead")
        else:
            with phase("replaying the held-out window with each candidate", enabled=progress):
                replay = _replay_candidates(frame, n - holdout, cfg, cluster, models, lstm_entries, eligible,
                                            lstms, peak_scores, candidate, current, current_entry, spec, windows,
                                            hist_steps)
    rank = ({m: replay[m]["cost"] for m in replay if m != "reactive"} if replay is not None
            else scores if selected_by == "wql" else peak_scores)
    winner, best_name, lstm_best, contenders = choose_winner(rank, eligible, lstms, cfg.retrain.min_improvement,
                                                             tie=peak_scores if replay is not None else None)
    if replay is not None and replay["reactive"].get("tight"):
        select_note = (f"the held-out window had no contention on the configured GPUs, so it was replayed on "
                       f"{replay['reactive']['capacity']:,} GPUs (the 90th percentile of its total demand)")
    if replay is not None and len({rank[m] for m in contenders}) < len(contenders):
        select_note = ((select_note + "; ") if select_note else "") + "equal replay costs broken by the peak loss"
    r = _ranker(rank)
    # run every cycle where the LSTM cannot: a plain or recalibrated baseline, no Holt-Winters
    fallback = min((m for m in baselines if not m.startswith("holt_winters") and peak_suffix(m)[1] is None),
                   key=lambda m: peak_scores[m] if selected_by != "wql" else scores[m])
    runnable_why = None
    if step_s != cfg.cycle.resolution_s:
        runnable_why = (f"this history is at {step_s} s steps, "
                        f"the daemon runs cycle.resolution_s = {cfg.cycle.resolution_s} s")
    elif spec.horizon < cfg.cycle.horizon_steps:
        runnable_why = (f"the horizon is {spec.horizon} steps, "
                        f"the daemon needs cycle.horizon_steps = {cfg.cycle.horizon_steps}")
    report = {**result.report, "train": {"seconds": res.seconds, "epochs": res.epochs_run,
                                         "best_val_loss": res.best_val_loss, "curve": res.curve,
                                         "tenants": int(frame.shape[1]), "steps": int(len(train_frame)),
                                         "peak_windows": list(spec.peak_windows),
                                         "peak_weight": cfg.retrain.peak_weight},
              "best_baseline": best_wql_name, "gain_vs_best_baseline": gain, "lstm_variant": lstm_name,
              "winner": winner, "scored_on": scored_on, "select_by": selected_by, "select_note": select_note,
              "ranked": {k: rank[k] for k in sorted(rank, key=r)}, "best_baseline_selected": best_name,
              "lstm_variant_selected": lstm_best, "replay": replay,
              "not_scored": skipped, "blend": blend_choice.to_dict() if blend_choice else None,
              "blend_scores": blend_choice.scores if blend_choice else {}}
    if out_dir is not None:
        backtest.write_report(result, out_dir, name)
    meta = {"data_window": [str(frame.index[0]), str(frame.index[-1])], "tenants": int(frame.shape[1]),
            "scored_on": scored_on,
            "metrics": {"wql": scores[lstm_name], "best_baseline": best_wql_name,
                        "best_baseline_wql": scores[best_wql_name], "gain_vs_best_baseline": gain,
                        "peak_loss": peak_scores["lstm"], "peak_windows": windows},
            "train_seconds": res.seconds, "epochs": res.epochs_run}
    version = registry.save_version(model_dir, res.model, meta)
    # the peak loss is no column of the table: say it is the mean of the lead windows' loss columns
    cols = " and ".join(f"{w}{k}" for w, k in windows.items())  # as forecaster/backtest.py's table heads them
    unit = {"wql": "wQL", "peak": f"peak loss, the mean of the {cols} loss columns",
            "replay": "replay cost"}[selected_by]
    ranked = ", ".join(f"{k} {v:.4f}" if selected_by != "replay" else f"{k} {v:,.0f}"
                       for k, v in sorted(rank.items(), key=lambda kv: r(kv[0])))
    why = f"{winner} scored best on {scored_on} (last {holdout} steps, {unit}: {ranked})"
    if select_note:
        why += f"; {select_note}"
    if not winner.startswith("lstm") and lstm_best not in contenders:
        margin = cfg.retrain.min_improvement  # "did not beat X by 0%" read as a tie it had not been
        why += f"; the new LSTM did not beat {best_name}" + (f" by {margin:.0%}" if margin > 0 else "")
    won = result.report["models"][winner]
    entry = {"scored_on": scored_on, "step_s": int(step_s), "horizon": int(spec.horizon), "season": int(spec.season),
             "quantiles": list(qs), "wql": scores[winner], "scores": scores, "fallback": fallback, "why": why,
             "at": pd.Timestamp.now(tz="UTC").isoformat(), "select_by": selected_by,
             # what the policy acts on, scored beside the wQL: the peak over each lead window (loss, p90 coverage
             # overall and where the series moves, by tier) of the winner, and every candidate's peak loss
             "peak_windows": windows, "peak_loss": _finite(peak_scores[winner]), "peak": _finite(won["peak"]),
             "peak_scores": _finite(peak_scores)}
    if replay is not None:
        entry["replay"] = {"cost": replay[winner]["cost"], "reactive_cost": replay["reactive"]["cost"],
                           "scores": {k: v["cost"] for k, v in replay.items()}, "winner": replay[winner]}
    # how the winner's p90 did on the held-out window: the share of actual steps at or under it, and of
    # (origin, tenant) pairs whose realised peak over the horizon stayed at or under the forecast's p90 peak
    entry.update(coverage_p90=won["coverage_p90"], peak_coverage_p90=won["peak_coverage_p90"])
    entries = {m: candidate_entry(m, lstm_entries, version, cur_version, current_entry, peak_wins)
               for m in models}
    entry.update(entries[winner])
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
    return RetrainOutcome(version, promoted, msg, report, backtest.table(report), entry, entries)


def _ranker(rank: dict[str, float]):
    def r(m: str) -> float:
        v = rank.get(m, float("inf"))
        return v if np.isfinite(v) else float("inf")
    return r


def choose_winner(rank: dict[str, float], eligible: list[str], lstms: list[str],
                  min_improvement: float, tie: dict[str, float] | None = None
                  ) -> tuple[str, str, str, dict[str, float]]:
    """(winner, best baseline, best new LSTM variant, contenders) by `rank` (lower is better; a candidate not in it
    is last): the best baseline, unless the new LSTM's best beats it by `min_improvement`, or the current model
    (already scored on this data, "current" in `rank`) does better than both (a tie goes to the current model).
    Equal ranks are broken by `tie` (lower first; a replay's costs by the peak loss), so that no choice falls to
    the order candidates happen to be listed in."""
    r, t = _ranker(rank), _ranker(tie or {})
    best_name = min(eligible, key=lambda m: (r(m), t(m)))
    lstm_best = min(lstms, key=lambda m: (r(m), t(m)))
    contenders = {best_name: r(best_name)}
    if r(lstm_best) < r(best_name) * (1 - min_improvement) or (
            r(lstm_best) == r(best_name) * (1 - min_improvement) and t(lstm_best) < t(best_name)):
        contenders[lstm_best] = r(lstm_best)
    if "current" in rank:
        contenders["current"] = r("current")
    winner = min(contenders, key=lambda k: (contenders[k], k != "current", t(k)))
    return winner, best_name, lstm_best, contenders


def candidate_entry(m: str, lstm_entries: dict[str, dict], version: str, cur_version: str | None,
                    current_entry: dict | None, peak_wins: list[int]) -> dict:
    """What `in_use` records for candidate `m` (beside the scores), from which `selection.resolve` rebuilds it."""
    if m in lstm_entries:
        e = lstm_entries[m]
        out = {"kind": "lstm", "name": f"lstm:{version}", "version": version, "conformal": bool(e.get("conformal"))}
        if e.get("blend"):
            out.update(blend=e["blend"], recalibrated=bool(e.get("recalibrated")))
        if e.get("peak_calibration"):
            out["peak_calibration"] = e["peak_calibration"]
        return out
    if m == "current":
        out = {"kind": "lstm", "name": f"lstm:{cur_version}", "version": cur_version,
               "conformal": bool((current_entry or {}).get("conformal"))}
        for k in ("blend", "recalibrated", "peak_calibration"):
            if (current_entry or {}).get(k) is not None:
                out[k] = current_entry[k]
        return out
    base, moving = peak_suffix(m)
    out = {"kind": "baseline", "name": m, "recalibrated": base.endswith(RECAL)}
    if moving is not None:
        out["peak_calibration"] = {"windows": peak_wins, "moving_only": moving}
    return out


def _finite(x):
    """`x` with every NaN float replaced by None (the manifest is JSON)."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _replay_candidates(frame: pd.DataFrame, start: int, cfg: Config, cluster: ReplayCluster, models: dict,
                       lstm_entries: dict[str, dict], eligible: list[str], lstms: list[str],
                       peak_scores: dict[str, float], candidate, current, current_entry: dict | None, spec: LSTMSpec,
                       windows: dict[str, int], hist_steps: int) -> dict[str, dict]:
    """Replay the held-out window with the `retrain.replay_candidates` candidates best by peak loss, and always the
    best baseline, the best new LSTM and the current model by it (so the choice among them is the replay's)."""
    runnable = [m for m in models if m in eligible or m in lstms or m == "current"]
    fin = {m: peak_scores[m] if np.isfinite(peak_scores[m]) else float("inf") for m in runnable}
    pick = sorted(runnable, key=lambda m: fin[m])[: cfg.retrain.replay_candidates]
    pick += [min(eligible, key=lambda m: fin[m]), min(lstms, key=lambda m: fin[m])]
    pick += ["current"] if "current" in models else []
    season, qs = spec.season, spec.quantiles

    every = cfg.retrain.replay_refresh_every

    def factory(m: str):
        # as the daemon runs it, but the spreads recomputed every `replay_refresh_every` forecasts and in the
        # forecast call: the replay depends on the history only
        if m in lstm_entries:
            return lambda: wrap_lstm(candidate, lstm_entries[m], refresh=every, background=False)
        if m == "current":
            return lambda: (wrap_lstm(current, current_entry, refresh=every, background=False) if current_entry
                            else current)
        return lambda: make_baseline(m, season, qs, refresh=every, background=False,
                                     peak_windows=sorted(set(windows.values())))

    rcfg = replay_config(cfg, spec.step_s, spec.horizon, hist_steps, windows)
    # the LSTM variants (bare, conformal, blends; +peak, +peak_all) recalibrate their peaks on the same LSTM at
    # the same replay steps: computed once for all of them (forecaster/memo.py; the same answers)
    with shared_past_peaks():
        return replay_scores(frame, start, rcfg, cluster, {m: factory(m) for m in dict.fromkeys(pick)},
                             weights=dict(cfg.retrain.replay_tier_weights),
                             forecast_every=cfg.retrain.replay_forecast_every)


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
    """History to train or score on, and its step: a file, a public trace, or the configured source. A file's
    columns are read in their units as `simulate --data` reads them (daemon/forecasting/units.py): a service's
    requests/s become its GPU need, the series the daemon forecasts, named by the tenant."""
    step_s = cfg.cycle.resolution_s
    if data is not None:
        frame, _, _ = gpu_columns(read_history_file(data, step_s), cfg, str(data))
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
                        samples_per_epoch: int = 16384, this_cluster: bool = False,
                        select_by: str | None = None) -> RetrainOutcome:
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
    # the tenants' tiers break the peak scores down by tier, and with the GPUs and job sizes make a replay possible
    cluster = replay_cluster(cfg, days, trace, data, data_dir)
    return retrain_on(frame, cfg, model_dir=model_dir, step_s=step_s, scored_on=scored_on,
                      epochs=epochs, progress=progress, out_dir=out_dir, samples_per_epoch=samples_per_epoch,
                      select_by=select_by, cluster=cluster)
