"""Statistical baselines: the yardstick the LSTM must beat and the fallback when it cannot be used.

Seasonal naive is vectorised over all tenants (cheap enough for every cycle);
ETS/Holt-Winters fits one statsmodels model per tenant and is meant for
backtests and small tenant counts.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np
import pandas as pd

from forecaster.types import Forecast


class Forecaster(Protocol):
    name: str

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast: ...


def _last_valid(values: np.ndarray) -> np.ndarray:
    """Last non-NaN value per row (NaN if the row has none)."""
    mask = ~np.isnan(values)
    has = mask.any(axis=1)
    last_idx = values.shape[1] - 1 - np.argmax(mask[:, ::-1], axis=1)
    out = values[np.arange(values.shape[0]), last_idx]
    return np.where(has, out, np.nan)


def _residual_quantiles(resid: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """[tenant, q] empirical residual quantiles; zero spread where no residual is known."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        qv = np.nanquantile(resid, quantiles, axis=1).T if resid.shape[1] else np.zeros((resid.shape[0], len(quantiles)))
    return np.nan_to_num(qv, nan=0.0)


def _step_s(history: pd.DataFrame) -> int:
    if len(history.index) >= 2:
        return int((history.index[1] - history.index[0]).total_seconds())
    return 60


class SeasonalNaive:
    """y[t+h] = y[t+h-season]; quantiles from the empirical seasonal-difference residuals.

    With less than one season of history it degrades to the last observed value,
    so a young cluster still gets a (wide) forecast instead of none.
    """

    def __init__(self, season: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99),
                 resid_window: int | None = None) -> None:
        self.season = int(season)
        self.quantiles = tuple(quantiles)
        self.resid_window = resid_window
        self.name = f"seasonal_naive_{self.season}"

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        vals = history.to_numpy(dtype=float).T  # [tenant, time]
        n, t = vals.shape
        last = _last_valid(vals) if t else np.full(n, np.nan)
        s = self.season
        if t >= s:
            # value one season before each horizon step (wrap inside the last season)
            idx = t - s + (np.arange(horizon) % s)
            point = vals[:, idx]
            point = np.where(np.isnan(point), last[:, None], point)
            w = self.resid_window or min(t - s, 7 * s)
            lo = max(s, t - w)
            resid = vals[:, lo:] - vals[:, lo - s:t - s] if t > lo else np.empty((n, 0))
        else:
            point = np.repeat(last[:, None], horizon, axis=1)
            resid = np.diff(vals, axis=1) if t > 1 else np.empty((n, 0))
        rq = _residual_quantiles(resid, self.quantiles)  # [tenant, q]
        values = point[:, :, None] + rq[:, None, :]
        values = np.maximum(values, 0.0)
        values = np.maximum.accumulate(values, axis=2)  # quantiles never cross
        issued = history.index[-1] if t else pd.Timestamp.now(tz="UTC")
        return Forecast(tuple(map(str, history.columns)), self.quantiles, values, issued, _step_s(history), self.name)


class HoltWinters:
    """Per-tenant additive Holt-Winters (statsmodels), fitted on a downsampled series.

    Minute data with a 1,440-step season is too slow to fit per tenant, so the
    series is averaged into `agg` steps first (15 min by default) and the forecast
    is spread back to the native step.
    """

    _PARAMS = ("smoothing_level", "smoothing_trend", "smoothing_seasonal", "damping_trend")

    def __init__(self, season: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), agg: int = 15,
                 fit_window_seasons: int = 7, refit_every: int = 24) -> None:
        self.season = int(season)
        self.quantiles = tuple(quantiles)
        self.agg = max(1, int(agg))
        self.fit_window_seasons = fit_window_seasons
        self.refit_every = refit_every
        self.name = "holt_winters"
        # smoothing parameters per tenant: optimising them is 15x the cost of filtering with them,
        # so they are re-estimated only every `refit_every` forecasts
        self._params: dict[str, tuple[dict, int]] = {}

    def _one(self, y: np.ndarray, horizon: int, key: str = "") -> tuple[np.ndarray, np.ndarray]:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        a = self.agg
        keep = (len(y) // a) * a
        y = y[len(y) - keep:]
        coarse = np.nanmean(y.reshape(-1, a), axis=1) if keep else y
        coarse = pd.Series(coarse).interpolate(limit_direction="both").to_numpy()
        sp = max(2, self.season // a)
        steps = int(np.ceil(horizon / a))
        if len(coarse) < 2 * sp + 2 or np.isnan(coarse).all():
            last = coarse[~np.isnan(coarse)][-1] if (~np.isnan(coarse)).any() else np.nan
            return np.full(horizon, last), np.zeros(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ExponentialSmoothing(coarse, trend="add", damped_trend=True, seasonal="add",
                                         seasonal_periods=sp, initialization_method="heuristic")
            cached = self._params.get(key)
            if cached is not None and cached[1] < self.refit_every:
                fit = model.fit(optimized=False, **cached[0])
                self._params[key] = (cached[0], cached[1] + 1)
            else:
                fit = model.fit(optimized=True)
                self._params[key] = ({k: float(fit.params[k]) for k in self._PARAMS}, 1)
        fc = np.repeat(np.asarray(fit.forecast(steps)), a)[:horizon]
        resid = np.asarray(fit.resid)
        return fc, resid[-7 * sp:] * np.sqrt(a)  # coarse residuals understate minute-level noise

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        vals = history.to_numpy(dtype=float).T
        window = self.fit_window_seasons * self.season
        vals = vals[:, -window:]
        n = vals.shape[0]
        out = np.zeros((n, horizon, len(self.quantiles)))
        names = [str(c) for c in history.columns]
        for i in range(n):
            fc, resid = self._one(vals[i], horizon, names[i])
            rq = np.nan_to_num(np.nanquantile(resid, self.quantiles), nan=0.0) if resid.size else np.zeros(len(self.quantiles))
            out[i] = fc[:, None] + rq[None, :]
        out = np.maximum.accumulate(np.maximum(out, 0.0), axis=2)
        return Forecast(tuple(map(str, history.columns)), self.quantiles, out, history.index[-1], _step_s(history), self.name)
