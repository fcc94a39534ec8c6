"""Statistical baselines: the yardstick the LSTM must beat and the fallback when it cannot be used.

Every baseline's quantiles come from its own empirical h-step-ahead errors, per
horizon step, over a recent window (forecaster/calibration.py): the point
forecast is made from many recent origins, and the spread added to today's
forecast at step h is what those forecasts missed by at step h.

Naive, seasonal naive, daily+weekly seasonal naive and simple exponential
smoothing are vectorised over all tenants (cheap enough for every cycle);
Holt-Winters fits one statsmodels model per tenant and is meant for backtests
and small tenant counts.
"""

from __future__ import annotations

import threading
import warnings
from typing import Protocol

import numpy as np
import pandas as pd

from forecaster.calibration import (
    SpreadRefresh,
    add_error_quantiles,
    error_quantiles,
    errors_at,
    recent_origins,
    with_error_quantiles,
)
from forecaster.series import ffill
from forecaster.types import Forecast


class Forecaster(Protocol):
    name: str

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast: ...


def _step_s(history: pd.DataFrame) -> int:
    if len(history.index) >= 2:
        return int((history.index[1] - history.index[0]).total_seconds())
    return 60


def _issued(history: pd.DataFrame) -> pd.Timestamp:
    return history.index[-1] if len(history) else pd.Timestamp.now(tz="UTC")


_MEMO_GUARD = threading.Lock()   # makes each model's memo lock once


class _Vectorised:
    """A point rule applied at many origins at once; quantiles from its own errors at those origins."""

    name = "baseline"
    quantiles: tuple[float, ...]
    error_window: int | None
    max_origins: int
    # the error quantiles are recomputed every `refresh` forecasts (1 = always); in between, today's point
    # forecast gets the last computed spread (the spread moves slowly). In the daemon the recomputation runs in
    # the background (`SpreadRefresh`), so the forecast call never pays for it.
    _spread: SpreadRefresh | None = None

    @property
    def spread(self) -> SpreadRefresh:
        if self._spread is None:
            self._spread = SpreadRefresh()
        return self._spread

    @spread.setter
    def spread(self, value: SpreadRefresh) -> None:
        self._spread = value

    @property
    def refresh(self) -> int:
        return self.spread.every

    def _first_origin(self) -> int:
        return 1

    def _point(self, vals: np.ndarray, ff: np.ndarray, ends: np.ndarray, horizon: int, params=None) -> np.ndarray:
        """[origin, tenant, h] point forecasts from the histories vals[:, :end] for each end in `ends`, with the
        parameters `_params` chose (None for a rule that has none)."""
        raise NotImplementedError

    def _params(self, vals: np.ndarray, ff: np.ndarray, horizon: int):
        """Parameters chosen from the history (None for a fixed rule); cached and refreshed with the spread."""
        return None

    def _usable(self, n_steps: int) -> bool:
        return n_steps >= self._first_origin()

    def _error_quantiles(self, vals: np.ndarray, ff: np.ndarray, horizon: int) -> tuple[np.ndarray, object]:
        """(error quantiles [tenant, h, Q], parameters): what the spread cache holds for a tenant set.

        Kept for the last history seen (by its content): a recalibrated baseline's two refreshes (its own spread,
        and the conformal shift's `forecasts_at`) fall due at the same forecast and ran this twice on the same
        history, in two threads, the cycle's costliest work at 1,000 tenants and up; the second now waits for the
        first and takes its result (read-only, shared)."""
        import hashlib

        key = (vals.shape, horizon, hashlib.blake2b(np.ascontiguousarray(vals).data, digest_size=16).digest())
        with self._memo_lock():
            memo = self.__dict__.get("_eq_memo")
            if memo is not None and memo[0] == key:
                return memo[1]
            eq, params = self._compute_error_quantiles(vals, ff, horizon)
            eq.flags.writeable = False
            self._eq_memo = (key, (eq, params))
            return eq, params

    def _memo_lock(self):
        lock = self.__dict__.get("_eq_lock")
        if lock is None:
            with _MEMO_GUARD:
                lock = self.__dict__.setdefault("_eq_lock", threading.Lock())
        return lock

    def _compute_error_quantiles(self, vals: np.ndarray, ff: np.ndarray, horizon: int) -> tuple[np.ndarray, object]:
        n, t = vals.shape
        params = self._params(vals, ff, horizon)
        window = self.error_window or max(8 * horizon, 7 * getattr(self, "season", horizon))
        ends = recent_origins(t, horizon, first=self._first_origin(), window=window, max_origins=self.max_origins)
        if ends.size:
            errors = errors_at(vals, ends, self._point(vals, ff, ends, horizon, params))
        else:
            errors = np.full((1, n, horizon), np.nan)
        return error_quantiles(errors, self.quantiles), params

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        vals = history.to_numpy(dtype=float).T  # [tenant, time]
        n, t = vals.shape
        if not self._usable(t):
            return self._short(history, horizon)
        ff = ffill(vals)
        eq, params = self.spread.get((tuple(map(str, history.columns)), horizon),
                                     lambda: self._error_quantiles(vals, ff, horizon))
        point = self._point(vals, ff, np.array([t]), horizon, params)[0]
        values = add_error_quantiles(point, eq)
        return Forecast(tuple(map(str, history.columns)), self.quantiles, values, _issued(history),
                        _step_s(history), self.name)

    def forecasts_at(self, history: pd.DataFrame, ends: np.ndarray, horizon: int) -> np.ndarray:
        """[origin, tenant, h, Q]: the point forecasts from history[:e] for each e in `ends`, each with the
        spread computed from the whole `history` (what a forecast issued now would carry).

        What a recalibration compares with the actuals after each `e`: it then adjusts today's spread to what
        was missed lately, also when the spread itself has changed since (a calm week after a wild one).
        """
        vals = history.to_numpy(dtype=float).T
        t = vals.shape[1]
        if not self._usable(t):
            return np.stack([self._short(history.iloc[:e], horizon).values for e in ends])
        ff = ffill(vals)
        eq, params = self._error_quantiles(vals, ff, horizon)
        point = self._point(vals, ff, np.asarray(ends), horizon, params)    # [O, N, H]
        return np.stack([add_error_quantiles(p, eq) for p in point])

    def can_batch_peaks(self, windows: tuple[int, ...]) -> bool:
        return True

    def peaks_at(self, history: pd.DataFrame, ends: np.ndarray, horizon: int,
                 windows: tuple[int, ...]) -> np.ndarray:
        """[origin, tenant, window, Q]: the largest per-step quantile over each window of `forecasts_at` (computed
        once per request within a scoring run, forecaster/memo.py)."""
        from forecaster.memo import memo_peaks

        def compute() -> np.ndarray:
            v = self.forecasts_at(history, ends, horizon)
            return np.stack([np.fmax.reduce(v[:, :, :max(1, min(k, horizon)), :], axis=2) for k in windows],
                            axis=2)

        return memo_peaks(self, history, ends, horizon, windows, compute)

    def _short(self, history: pd.DataFrame, horizon: int) -> Forecast:
        fc = Naive(self.quantiles, self.error_window, self.max_origins).predict(history, horizon)
        return Forecast(fc.tenants, fc.quantiles, fc.values, fc.issued_at, fc.step_s, self.name)


class Naive(_Vectorised):
    """y[t+h] = y[t] (the last value seen): strong at short lead times on step-like series."""

    def __init__(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), error_window: int | None = None,
                 max_origins: int = 256) -> None:
        self.quantiles = tuple(quantiles)
        self.error_window = error_window
        self.max_origins = max_origins
        self.name = "naive"

    def _point(self, vals, ff, ends, horizon, params=None):
        last = ff[:, ends - 1]  # [N, O]
        return np.repeat(last.T[:, :, None], horizon, axis=2)

    def _short(self, history, horizon):  # no history at all: nothing to say, not zero
        values = np.full((history.shape[1], horizon, len(self.quantiles)), np.nan)
        return Forecast(tuple(map(str, history.columns)), self.quantiles, values, _issued(history),
                        _step_s(history), self.name)


class RecentMax(_Vectorised):
    """y[t+h] = max(y[t-k+1..t]): the most the tenant used over the last `window` steps (by default the policy's
    lead window, 10 steps).

    A series of whole jobs dips when one job ends and the next has not started yet (Helios VCs at 1-minute
    steps); the last value then forecasts the dip, and a hold made of it shrinks just before the demand comes
    back. Missing steps are carried forward (forecaster.series.ffill), never read as zero; NaN only before a
    tenant's first value."""

    def __init__(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), window: int = 10,
                 error_window: int | None = None, max_origins: int = 256) -> None:
        if window < 1:
            raise ValueError(f"recent_max needs a window of 1 step or more, not {window}")
        self.quantiles = tuple(quantiles)
        self.window = int(window)
        self.error_window = error_window
        self.max_origins = max_origins
        self.name = "recent_max"

    def _point(self, vals, ff, ends, horizon, params=None):
        at = np.asarray(ends)[:, None] - 1 - np.arange(self.window)[None, :]      # [O, k], newest first
        top = np.fmax.reduce(ff[:, np.maximum(at, 0)], axis=2)                    # [N, O]
        return np.repeat(top.T[:, :, None], horizon, axis=2)


class SeasonalNaive(_Vectorised):
    """y[t+h] = y[t+h-season]; with less than one season of history, the last value (a young cluster still
    gets a forecast, with the naive forecast's own errors)."""

    def __init__(self, season: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), error_window: int | None = None,
                 max_origins: int = 256) -> None:
        self.season = int(season)
        self.quantiles = tuple(quantiles)
        self.error_window = error_window
        self.max_origins = max_origins
        self.name = f"seasonal_naive_{self.season}"

    def _first_origin(self) -> int:
        return self.season

    def _lagged(self, vals, ff, ends, horizon, lag):
        idx = ends[:, None] - lag + (np.arange(horizon)[None, :] % lag)   # [O, H], always < end
        p = vals[:, idx].transpose(1, 0, 2)                                # [O, N, H]
        last = ff[:, ends - 1].T[:, :, None]
        return np.where(np.isnan(p), last, p)

    def _point(self, vals, ff, ends, horizon, params=None):
        return self._lagged(vals, ff, ends, horizon, self.season)


class SeasonalNaiveDW(SeasonalNaive):
    """Daily and weekly seasonality: the mean of the values one day and one week before each step.

    Needs a week of history plus room to score its own errors; with less it is the daily seasonal naive.
    """

    def __init__(self, season: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), error_window: int | None = None,
                 max_origins: int = 256) -> None:
        super().__init__(season, quantiles, error_window, max_origins)
        self.name = f"seasonal_naive_dw_{self.season}"

    def _first_origin(self) -> int:
        return 7 * self.season

    def _usable(self, n_steps: int) -> bool:
        return n_steps >= 7 * self.season + self.season  # a day of origins to learn its errors from

    def _short(self, history, horizon):
        fc = SeasonalNaive(self.season, self.quantiles, self.error_window, self.max_origins).predict(history, horizon)
        return Forecast(fc.tenants, fc.quantiles, fc.values, fc.issued_at, fc.step_s, self.name)

    def _point(self, vals, ff, ends, horizon, params=None):
        d = self._lagged(vals, ff, ends, horizon, self.season)
        w = self._lagged(vals, ff, ends, horizon, 7 * self.season)
        return 0.5 * (d + w)


class ExpSmoothing(_Vectorised):
    """Simple exponential smoothing, ETS(A,N,N): every step ahead is the smoothed level l_t = a y_t + (1-a) l_{t-1}.

    Why it is here: on a noisy count series (requests per 10 s) the last value carries one step's noise into the
    whole hour, while a smoothed level averages it away; without this baseline the yardstick there was naive,
    which flattered the LSTM. One `a` for the cluster, from `ALPHAS` (1 is naive): the one whose h-step forecasts
    missed least in total (absolute error summed over tenants, as the weighted quantile loss adds them up) at
    up to 256 origins spread over the history it is given, after a burn-in. One `a` rather than one per tenant,
    because one tenant's errors pick a noisy `a` (per-tenant choices scored 4% worse on Azure and 6% on ServeGen);
    even the cluster's choice moves with the origins it is scored at (Alibaba: 0.0518 recalibrated with 64 origins
    from the first step, 0.0545 with 256 after the burn-in), so it uses as many as the spread does. Chosen at the
    lead time that is scored rather than by statsmodels' one-step fit, and vectorised over all tenants (a
    statsmodels fit per tenant is too slow for 1,000 tenants every cycle). It is re-chosen with the spread.
    """

    # a tie goes to the first: the last value unless smoothing helps
    ALPHAS = (1.0, 0.7, 0.5, 0.3, 0.2, 0.1, 0.05, 0.02)

    def __init__(self, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), error_window: int | None = None,
                 max_origins: int = 256) -> None:
        self.quantiles = tuple(quantiles)
        self.error_window = error_window
        self.max_origins = max_origins
        self.name = "exp_smoothing"

    @staticmethod
    def levels(vals: np.ndarray, alpha: float) -> np.ndarray:
        """[tenant, time] smoothed levels; NaN until a tenant's first value.

        The level moves only on observed steps and holds through a gap: a missing sample is not a measurement
        (forward-filling it first would pull the level towards the last value seen, as if it had been read again).
        """
        from scipy.signal import lfilter

        def smooth(y: np.ndarray) -> np.ndarray:  # rows of observed values, the first one starting the level
            lv = np.empty_like(y)
            lv[:, 0] = y[:, 0]
            lv[:, 1:], _ = lfilter([alpha], [1.0, alpha - 1.0], y[:, 1:], axis=1, zi=(1.0 - alpha) * y[:, :1])
            return lv

        out = np.full(vals.shape, np.nan)
        obs = np.isfinite(vals)
        first = np.argmax(obs, axis=1)
        n_obs = obs.sum(axis=1)
        live = n_obs > 0
        gapless = live & (n_obs == vals.shape[1] - first)  # observed every step from its first value on
        for f in np.unique(first[gapless]):                # one filter over every gapless tenant starting at f
            r = np.flatnonzero(gapless & (first == f))
            out[r, f:] = smooth(vals[r, f:])
        for i in np.flatnonzero(live & ~gapless):          # with gaps: smooth what was seen, hold it in between
            seen = np.flatnonzero(obs[i])
            out[i, seen] = smooth(vals[i, seen][None, :])[0]
        return ffill(out)

    def _params(self, vals, ff, horizon) -> float:
        n, t = vals.shape
        # origins start once the smallest weight has mostly forgotten the first value (3 / a steps), so a short
        # history does not score small weights on levels still pinned to where the series began
        first = max(1, min(t // 2, int(3 / min(self.ALPHAS))))
        ends = recent_origins(t, horizon, first=first, window=t, max_origins=self.max_origins)
        if not ends.size:
            return 1.0  # nothing to choose from yet: the last value
        loss = self.alpha_losses(vals, ends, horizon)
        return float(self.ALPHAS[int(np.argmin(loss))])

    def alpha_losses(self, vals: np.ndarray, ends: np.ndarray, horizon: int) -> list[float]:
        """Per alpha in ALPHAS: the absolute h-step error summed over tenants, origins `ends` and steps (NaN left out).

        The actuals are gathered once for every alpha and each alpha's error written in place (its levels broadcast
        over the horizon instead of repeated into an [O, N, H] point array): the same errors in the same layout as
        ``nansum(abs(errors_at(vals, ends, self._point(...))))`` read, so the same sums, at a third of the memory
        traffic (8 alphas x 170 MB arrays per spread refresh at 1,388 series)."""
        actual = errors_at(vals, ends, np.zeros((len(ends), vals.shape[0], horizon)))
        err = np.empty_like(actual)
        loss = []
        for a in self.ALPHAS:
            lv = self.levels(vals, a)[:, ends - 1]                          # [N, O]
            np.subtract(actual, lv.T[:, :, None], out=err)
            np.abs(err, out=err)
            err[np.isnan(err)] = 0.0                                        # what nansum sums
            loss.append(float(np.sum(err)))
        return loss

    def _point(self, vals, ff, ends, horizon, params=None):
        lv = self.levels(vals, 1.0 if params is None else float(params))[:, ends - 1]  # [N, O]
        return np.repeat(lv.T[:, :, None], horizon, axis=2)


def hw_forecasts(level: np.ndarray, trend: np.ndarray, season: np.ndarray, phi: float, period: int,
                 ends: np.ndarray, steps: int) -> np.ndarray:
    """[origin, step] additive damped Holt-Winters forecasts from the filtered states at coarse index end-1.

    The textbook recursion l_t + (phi + ... + phi^j) b_t + s_{t+j-m(k+1)}, k = (j-1)//m. It equals
    statsmodels' `forecast()` at every step but multiples of m, where statsmodels reuses the season of one cycle
    earlier (tests/forecaster/test_models.py checks both).
    """
    t = ends - 1
    j = np.arange(1, steps + 1)
    cum = np.cumsum(phi ** j)
    sidx = t[:, None] + j[None, :] - period * ((j[None, :] - 1) // period + 1)
    return level[t][:, None] + cum[None, :] * trend[t][:, None] + season[sidx]


def hw_filter(y: np.ndarray, period: int, params: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(level, trend, season) of an additive damped Holt-Winters run over `y` with fixed smoothing parameters,
    from statsmodels' heuristic start: what `ExponentialSmoothing(y, trend="add", damped_trend=True,
    seasonal="add", seasonal_periods=period, initialization_method="heuristic").fit(optimized=False, **params)`
    returns as `level`, `trend` and `season`, bit for bit (the same operations in the same order,
    tests/forecaster/test_models.py checks it), without building the model and its results (pandas frames, a
    summary): 20 ms a tenant there, where the recursion alone is a fraction of a millisecond."""
    from statsmodels.tsa.exponential_smoothing.initialization import _initialization_heuristic

    y = np.ascontiguousarray(y, dtype=float)
    n, m = len(y), int(period)
    l0, b0, s0 = _initialization_heuristic(y, "add", "add", m)
    alpha, beta = float(params["smoothing_level"]), float(params["smoothing_trend"])
    gamma, phi = float(params["smoothing_seasonal"]), float(params["damping_trend"])
    alphac, betac, gammac = 1 - alpha, 1 - beta, 1 - gamma
    y_alpha, y_gamma = (alpha * y).tolist(), (gamma * y).tolist()
    lv, b = [float(l0)] + [0.0] * n, [float(b0)] + [0.0] * n
    s = [float(v) for v in s0] + [0.0] * n
    for i in range(1, n + 1):
        held = lv[i - 1] + b[i - 1] * phi
        lv[i] = y_alpha[i - 1] - (alpha * s[i - 1]) + (alphac * held)
        b[i] = (beta * (lv[i] - lv[i - 1])) + (betac * (b[i - 1] * phi))
        s[i + m - 1] = y_gamma[i - 1] - (gamma * held) + (gammac * s[i - 1])
    return np.array(lv[1:]), np.array(b[1:]), np.array(s[m:n + m])


class HoltWinters:
    """Per-tenant additive damped Holt-Winters (statsmodels), fitted on a downsampled series.

    Minute data with a 1,440-step season is too slow to fit per tenant, so the series is averaged into `agg`
    steps first (by default a 96th of the season: 15 minutes of a day). Forecasts are made from every recent
    coarse origin with the fitted states (multi-step, not one-step), and the errors against the native-step
    actuals, per horizon step, give the quantiles.
    """

    _PARAMS = ("smoothing_level", "smoothing_trend", "smoothing_seasonal", "damping_trend")

    def __init__(self, season: int, quantiles: tuple[float, ...] = (0.5, 0.9, 0.99), agg: int | None = None,
                 fit_window_seasons: int = 7, refit_every: int = 24, error_seasons: float = 2.0,
                 max_origins: int = 256) -> None:
        self.season = int(season)
        self.quantiles = tuple(quantiles)
        self.agg = self.agg_for(season) if agg is None else max(1, int(agg))
        self.fit_window_seasons = fit_window_seasons
        self.refit_every = refit_every
        self.error_seasons = error_seasons
        self.max_origins = max_origins
        self.name = "holt_winters"
        # smoothing parameters per tenant: optimising them is 15x the cost of filtering with them,
        # so they are re-estimated only every `refit_every` forecasts: (params, forecasts since, the last time of
        # the newest history counted)
        self._params: dict[str, tuple[dict, int, object]] = {}

    @staticmethod
    def agg_for(season: int) -> int:
        """Steps averaged into one fitted value: a day of 1-minute steps becomes 96 quarter hours."""
        return max(1, int(season) // 96)

    @staticmethod
    def min_steps(season: int, agg: int) -> int:
        """The history the seasonal fit needs: two seasons plus two coarse steps.

        With less, `_one` can only return the last value with no errors (a zero spread), which is not
        Holt-Winters and would be scored as if it were.
        """
        agg = max(1, int(agg))
        return (2 * max(2, int(season) // agg) + 2) * agg

    @staticmethod
    def fits_in(n_steps: int, season: int, agg: int) -> bool:
        return n_steps >= HoltWinters.min_steps(season, agg)

    def _one(self, y: np.ndarray, horizon: int, key: str = "", at=None) -> tuple[np.ndarray, np.ndarray]:
        """Point forecast [horizon] and errors [origin, horizon] for one tenant; `at`: the history's last time."""
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        a = self.agg
        keep = (len(y) // a) * a
        y = y[len(y) - keep:]
        no_err = np.full((1, horizon), np.nan)
        if keep == 0 or np.isnan(y).all():
            return np.full(horizon, np.nan), no_err
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            coarse = np.nanmean(y.reshape(-1, a), axis=1)
        coarse = pd.Series(coarse).interpolate(limit_direction="both").to_numpy()
        sp = max(2, self.season // a)
        steps = int(np.ceil(horizon / a))
        if not self.fits_in(keep, self.season, a) or np.ptp(coarse) == 0:
            # too short for a season, or flat (the optimiser has nothing to fit): the last value
            return np.full(horizon, coarse[-1]), no_err
        cached = self._params.get(key)
        # a forecast from a newer history than the last one counted; not a replay at a past origin (a recalibration
        # makes 16 per forecast: counting those re-estimated the parameters every 1.4 forecasts, not every 24)
        new = cached is None or at is None or cached[2] is None or at > cached[2]
        if cached is not None and (cached[1] < self.refit_every or not new):
            # the parameters known: statsmodels' filter with them, without building its model and results
            params = cached[0]
            lvl, tr, se = hw_filter(coarse, sp, params)
            if new:
                self._params[key] = (params, cached[1] + 1, at)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = ExponentialSmoothing(coarse, trend="add", damped_trend=True, seasonal="add",
                                             seasonal_periods=sp, initialization_method="heuristic")
                fit = model.fit(optimized=True)
            params = {k: float(fit.params[k]) for k in self._PARAMS}
            self._params[key] = (params, 1, at)
            lvl, tr, se = (np.asarray(x, dtype=float) for x in (fit.level, fit.trend, fit.season))
        phi = float(params["damping_trend"])
        nc = len(coarse)
        point = np.repeat(hw_forecasts(lvl, tr, se, phi, sp, np.array([nc]), steps)[0], a)[:horizon]
        # coarse origins whose native horizon is fully observed, after the first season (initialisation)
        last = (keep - horizon) // a
        lo = max(sp + 1, last - int(self.error_seasons * sp))
        if last < lo:
            return point, no_err
        ends = np.arange(lo, last + 1)
        if len(ends) > self.max_origins:
            ends = ends[np.linspace(0, len(ends) - 1, self.max_origins).round().astype(np.int64)]
        fc = np.repeat(hw_forecasts(lvl, tr, se, phi, sp, ends, steps), a, axis=1)[:, :horizon]
        actual = y[(ends * a)[:, None] + np.arange(horizon)[None, :]]
        return point, actual - fc

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        vals = history.to_numpy(dtype=float).T
        vals = vals[:, -self.fit_window_seasons * self.season:]
        n = vals.shape[0]
        names = [str(c) for c in history.columns]
        at = history.index[-1] if len(history) else None
        points = np.full((n, horizon), np.nan)
        errs: list[np.ndarray] = []
        for i in range(n):
            points[i], e = self._one(vals[i], horizon, names[i], at)
            errs.append(e)
        o = max(e.shape[0] for e in errs) if errs else 1
        errors = np.full((o, n, horizon), np.nan)
        for i, e in enumerate(errs):
            errors[: e.shape[0], i] = e
        values = with_error_quantiles(points, errors, self.quantiles)
        return Forecast(tuple(map(str, history.columns)), self.quantiles, values, _issued(history),
                        _step_s(history), self.name)


def standard_baselines(season: int, quantiles: tuple[float, ...], n_steps: int, *, with_ets: bool = True,
                       ets_agg: int | None = None) -> dict:
    """The baselines a cluster's history allows, by name: naive, recent max, simple exponential smoothing,
    seasonal naive (daily), daily+weekly (8 days of history), Holt-Winters (two seasons)."""
    out: dict = {"naive": Naive(quantiles), "recent_max": RecentMax(quantiles),
                 "exp_smoothing": ExpSmoothing(quantiles), "seasonal_naive_daily": SeasonalNaive(season, quantiles)}
    if n_steps >= 8 * season:
        out["seasonal_naive_dw"] = SeasonalNaiveDW(season, quantiles)
    hw = HoltWinters(season, quantiles, agg=ets_agg or None)
    if with_ets and HoltWinters.fits_in(n_steps, season, hw.agg):
        out["holt_winters"] = hw
    return out
