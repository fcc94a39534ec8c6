"""Which model a cluster uses: the one that scored best on that cluster's own recent data.

`retrain` writes the winner (LSTM or baseline) to the manifest's `in_use` entry
with the cluster it was scored on; `resolve` turns that entry back into a
forecaster after checking the daemon can run it. Before any retrain has scored
a model on a cluster, `StartupSelection` scores the baselines on the history
the daemon reads at start-up and uses the best.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from forecaster import backtest
from forecaster.baselines import (
    ExpSmoothing,
    Forecaster,
    HoltWinters,
    Naive,
    RecentMax,
    SeasonalNaive,
    SeasonalNaiveDW,
    _Vectorised,
)
from forecaster.calibration import PeakCalibrated, Recalibrated, SpreadRefresh
from forecaster.ensemble import Blend
from forecaster.registry import ModelError, load_version
from forecaster.types import Forecast

log = logging.getLogger("gpu_autoscaler.selection")

BASELINES = ("naive", "recent_max", "exp_smoothing", "seasonal_naive_daily", "seasonal_naive_dw", "holt_winters")
RECAL = "+conformal"  # a candidate's name with this suffix: that candidate recalibrated (forecaster/calibration.py)
# a candidate's name with one of these suffixes: its peak over the policy's lead windows recalibrated per tenant on
# realised peaks (PeakCalibrated), from the windows where the series moved (+peak) or from all (+peak_all)
PEAK = {"+peak": True, "+peak_all": False}


def peak_suffix(name: str) -> tuple[str, bool | None]:
    """(the name without a peak-calibration suffix, moving_only) or (name, None) without one."""
    for suf, moving in PEAK.items():
        if name.endswith(suf):
            return name[: -len(suf)], moving
    return name, None


def calibrate_peaks(model, windows, moving_only: bool, refresh: int = 1, background: bool = False,
                    forecasts_at=None) -> PeakCalibrated:
    """`model` with its peak quantiles over `windows` (steps) recalibrated on realised peaks, named with its suffix."""
    out = PeakCalibrated(model, tuple(windows), refresh=refresh, background=background, forecasts_at=forecasts_at,
                         moving_only=moving_only)
    out.name = model.name + next(s for s, m in PEAK.items() if m == moving_only)
    return out


def make_baseline(name: str, season: int, quantiles: tuple[float, ...], refresh: int = 1,
                  background: bool = False, peak_windows=None) -> Forecaster:
    """A baseline by name, or `<baseline>+conformal`: that baseline recalibrated from its own recent errors; either
    with `+peak` or `+peak_all`: its peak over `peak_windows` (steps) recalibrated on realised peaks.

    `refresh` > 1: the naive family recomputes its error quantiles (and a recalibrated one its shifts) every
    `refresh` forecasts only, in a background thread with `background` (the daemon); Holt-Winters re-estimates
    its parameters every 24 forecasts anyway.
    """
    base, moving = peak_suffix(name)
    if moving is not None:
        if not peak_windows:
            raise ModelError(f"{name}: a peak-calibrated baseline needs the lead windows it is calibrated for")
        inner = make_baseline(base, season, quantiles, refresh, background)
        at = inner.forecasts_at if isinstance(inner, _Vectorised) else None
        return calibrate_peaks(inner, peak_windows, moving, refresh, background, at)
    if name.endswith(RECAL):
        inner = make_baseline(name[: -len(RECAL)], season, quantiles, refresh, background)
        at = inner.forecasts_at if isinstance(inner, _Vectorised) else None
        return Recalibrated(inner, refresh=refresh, background=background, forecasts_at=at)
    fc: _Vectorised | None = None
    if name == "naive":
        fc = Naive(quantiles)
    elif name == "recent_max":
        fc = RecentMax(quantiles)
    elif name == "exp_smoothing":
        fc = ExpSmoothing(quantiles)
    elif name == "seasonal_naive_daily":
        fc = SeasonalNaive(season, quantiles)
    elif name == "seasonal_naive_dw":
        fc = SeasonalNaiveDW(season, quantiles)
    if fc is not None:
        fc.spread = SpreadRefresh(refresh, background)
        return fc
    if name == "holt_winters":
        return HoltWinters(season, quantiles)
    raise ModelError(f"unknown baseline {name!r} (known: {', '.join(BASELINES)}, each also with {RECAL!r})")


def recalibrate(model, refresh: int = 1, background: bool = False) -> Recalibrated:
    """`model` recalibrated per tenant from its own recent h-step errors (the one recipe retrain scores)."""
    return Recalibrated(model, refresh=refresh, background=background)


def check_runnable(entry: dict, step_s: int, horizon: int) -> None:
    """Refuse a model whose step or horizon does not fit the daemon's cycle, with the reason."""
    if int(entry.get("step_s", step_s)) != int(step_s):
        raise ModelError(f"model in use ({entry['name']}, scored on {entry['scored_on']}) forecasts at "
                         f"{entry['step_s']} s steps but cycle.resolution_s is {step_s} s; retrain on this cluster "
                         "or change the step")
    if int(entry.get("horizon", horizon)) < int(horizon):
        raise ModelError(f"model in use ({entry['name']}) forecasts {entry['horizon']} steps but "
                         f"cycle.horizon_steps is {horizon}")


def resolve(entry: dict, model_dir: Path, quantiles: tuple[float, ...], background: bool = True) -> Forecaster:
    """The forecaster an `in_use` entry names (an LSTM version from `model_dir`, or a baseline), as the daemon
    runs it: spreads and shifts recomputed every 10 forecasts, off the forecast call (background thread).

    ``background=False`` recomputes them in the forecast call instead, at the same forecasts: a replay must
    depend on the trace only, and a background recomputation lands at a forecast that depends on thread timing."""
    if entry.get("kind") == "lstm":
        return wrap_lstm(load_version(Path(model_dir), entry["version"]), entry, refresh=10, background=background)
    return make_baseline(entry["name"], int(entry["season"]), tuple(entry.get("quantiles", quantiles)),
                         refresh=10, background=background, peak_windows=peak_windows_of(entry))


def peak_windows_of(entry: dict) -> tuple[int, ...] | None:
    """The lead windows (steps) an `in_use` entry's peak calibration is for, or None without one."""
    pc = entry.get("peak_calibration")
    return tuple(int(k) for k in pc["windows"]) if pc else None


def wrap_lstm(model, entry: dict, refresh: int = 1, background: bool = False) -> Forecaster:
    """An LSTM as its `in_use` entry says it won: recalibrated from its own recent errors (`conformal`),
    blended with a baseline (`blend`: baseline name and the LSTM's weight), both, or bare; `recalibrated`:
    the blend's output recalibrated in turn; `peak_calibration` (windows, moving_only): its peak over the lead
    windows recalibrated on realised peaks, last."""
    inner = recalibrate(model, refresh, background) if entry.get("conformal") else model
    b = entry.get("blend")
    out = inner
    if b:
        season = int(entry.get("season", model.spec.season))
        partner = make_baseline(b["baseline"], season, tuple(model.spec.quantiles), refresh=refresh,
                                background=background)
        out = Blend(inner, partner, float(b["weight"]))
        out = recalibrate(out, refresh, background) if entry.get("recalibrated") else out
    pc = entry.get("peak_calibration")
    if pc:
        out = calibrate_peaks(out, peak_windows_of(entry), bool(pc.get("moving_only", True)), refresh, background)
    return out


def steps_needed(before: int, holdout: Callable[[int], int]) -> int:
    """The fewest steps of history `n` that leave `before` steps ahead of a held-out end of `holdout(n)` steps.

    Why not `before + holdout(n)`: the held-out end grows with the history (a fifth of it), so the count said for
    the history at hand was short of what a longer one needs, and a user who added exactly that was refused again.
    `holdout` never shrinks as `n` grows and grows by less than `n` does, so the first `n` that fits is found by
    counting up (a few hundred steps at most: the held-out end is at most a season)."""
    n = before
    while n - holdout(n) < before:
        n += 1
    return n


def from_first_sample(history: pd.DataFrame) -> pd.DataFrame:
    """`history` from its first step with a value for any tenant (empty if it has none)."""
    seen = np.flatnonzero(np.isfinite(history.to_numpy(dtype=float)).any(axis=1))
    return history.iloc[seen[0]:] if len(seen) else history.iloc[:0]


def startup_holdout(n: int, season: int, horizon: int) -> int:
    """The held-out end StartupSelection scores on, for `n` steps of history."""
    return max(4 * horizon, min(season, n // 5))


class StartupSelection:
    """Scores the cheap baselines (bare and recalibrated) on the first history it is given and forecasts with the
    best of them.

    Holt-Winters is left out: fitting it per tenant is too slow for a cycle. Until the history has room
    for a held-out window (about a season plus four horizons) it forecasts with `interim` and tries again.
    """

    def __init__(self, season: int, quantiles: tuple[float, ...], *, max_tenants: int = 40, seed: int = 0) -> None:
        self.season = int(season)
        self.quantiles = tuple(quantiles)
        self.max_tenants = max_tenants
        self.seed = seed
        self.chosen: Forecaster | None = None
        self.scores: dict[str, float] = {}
        self.why = "not selected yet: no history seen"
        self._waiting_said = False
        self.interim: Forecaster = make_baseline("seasonal_naive_daily", self.season, self.quantiles, refresh=10,
                                                 background=True)

    @property
    def name(self) -> str:
        return self.chosen.name if self.chosen is not None else self.interim.name

    def candidates(self, n_steps: int) -> dict[str, Forecaster]:
        """The cheap baselines the history allows, each also recalibrated from its own recent errors."""
        names = ["naive", "exp_smoothing", "seasonal_naive_daily"]
        names += ["seasonal_naive_dw"] if n_steps >= 8 * self.season else []
        return {n: make_baseline(n, self.season, self.quantiles) for b in names for n in (b, b + RECAL)}

    def select(self, history: pd.DataFrame, horizon: int) -> Forecaster | None:
        # the history counts from its first sample: the daemon's window is as long as it keeps whatever the source
        # has, so on a Prometheus that began scraping an hour ago it is 2 days of gaps and an hour of data. Counted
        # whole, it passed the length check, and every cycle backtested the baselines on gaps (seconds per cycle
        # at 40 tenants) until a day of data let it choose, on less than the held-out window it says it needs
        history = from_first_sample(history)
        n = len(history)
        holdout = startup_holdout(n, self.season, horizon)
        if n - holdout < self.season + horizon or history.shape[1] == 0:
            need = steps_needed(self.season + horizon, lambda m: startup_holdout(m, self.season, horizon))
            self.why = f"not selected yet: {n} steps of history, need {need}"
            return None
        cols = list(history.columns)
        if len(cols) > self.max_tenants:
            cols = sorted(np.random.default_rng(self.seed).choice(cols, self.max_tenants, replace=False).tolist())
        models = self.candidates(n - holdout)
        res = backtest.run(history[cols], models, start=n - holdout, horizon=horizon, stride=max(1, horizon // 2),
                           history_steps=n, quantiles=self.quantiles, season=self.season, max_origins=16)
        self.scores = {k: float(v["wql"]) for k, v in res.report["models"].items()}
        finite = {k: v for k, v in self.scores.items() if np.isfinite(v)}
        if not finite:
            self.why = "not selected yet: no scored step in the start-up history"
            return None
        best = min(finite, key=lambda k: finite[k])
        # as the daemon runs it: the spread recomputed every 10 forecasts, off the forecast call
        self.chosen = make_baseline(best, self.season, self.quantiles, refresh=10, background=True)
        self.why = (f"{best} scored best on the start-up history ({len(cols)} tenants, last {holdout} steps): "
                    + ", ".join(f"{k} {v:.4f}" for k, v in sorted(finite.items(), key=lambda kv: kv[1])))
        log.info("start-up selection: %s", self.why)
        return self.chosen

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        if self.chosen is None and self.select(history, horizon) is None and not self._waiting_said:
            # once: the cycle line names the interim model, not that it is one
            log.info("start-up selection: %s; forecasting with %s until then", self.why, self.interim.name)
            self._waiting_said = True
        return (self.chosen or self.interim).predict(history, horizon)
