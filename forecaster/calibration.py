"""Quantiles from a model's own h-step-ahead errors, per horizon step, over a recent window.

A baseline is a fair yardstick only if its spread is what its own forecasts
missed by at the same lead time: one-step in-sample residuals understate the
error an hour ahead, and inflating them by a fudge factor overstates it. So
every baseline here makes its point forecast from many recent origins, takes
the error at each horizon step h (actual[o + h] - point_o[h]), and adds the
empirical quantiles of those errors, step by step, to today's point forecast.

The same machinery recalibrates a quantile model (conformal): the shift that
would have made each quantile cover its nominal share of recent actuals.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from forecaster.threads import carry_torch_threads


def recent_origins(n_steps: int, horizon: int, *, first: int, window: int, max_origins: int) -> np.ndarray:
    """Exclusive history ends `t` (the model saw values[:t]) whose whole horizon is observed.

    The most recent `window` of them, at most `max_origins` evenly spread; empty if none qualifies.
    """
    last = n_steps - horizon
    lo = max(first, last - window)
    if last < lo:
        return np.empty(0, dtype=np.int64)
    o = np.arange(lo, last + 1)
    if len(o) > max_origins:
        o = o[np.linspace(0, len(o) - 1, max_origins).round().astype(np.int64)]
    return o


def errors_at(values: np.ndarray, origins: np.ndarray, point: np.ndarray) -> np.ndarray:
    """[origin, tenant, h] errors actual - point; `values` is [tenant, time], `point` [origin, tenant, h].

    One origin at a time, each a slice values[:, o:o + h] subtracted into its own row of the result: the one
    fancy index [N, O, H] and its transposed subtraction it replaced read memory across the grain (446 ms at
    1,388 series x 256 origins x 60 steps, 52 ms now; a spread refresh calls this up to 18 times). The same
    numbers in the same (C-contiguous) layout, so every sum and sort of them downstream is unchanged."""
    origins = np.asarray(origins)
    n_t = values.shape[1]
    h = point.shape[2]
    o = len(origins)
    if point.shape != (o, values.shape[0], h) or (o and (origins.min() < 0 or origins.max() + h > n_t)):
        idx = origins[:, None] + np.arange(h)[None, :]          # [O, H]: the general (and erroring) path
        return values[:, idx].transpose(1, 0, 2) - point
    out = np.empty(point.shape, dtype=np.result_type(values, point))
    # callers pass history.to_numpy().T, whose time axis is the slow one: one copy makes the slices contiguous
    values = np.ascontiguousarray(values)
    for i, s in enumerate(origins.tolist()):
        np.subtract(values[:, s:s + h], point[i], out=out[i])
    return out


def nan_quantiles(x: np.ndarray, quantiles: tuple[float, ...] | np.ndarray,
                  axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles over `axis` ignoring NaN (linear interpolation, like numpy's default), plus the count used.

    Vectorised with one sort: np.nanquantile loops in Python per slice, too slow for 1,000 tenants x 60 steps.
    Returns ([..., Q] with `axis` removed, count); NaN where a slice has no value.
    """
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    q = np.asarray(quantiles, dtype=float)
    # the ranks read from each slice depend only on its count of finite values: when the slices have few distinct
    # counts (no gaps: one), a partition at those ranks puts the same values there as a full sort, at a fraction
    # of its cost (the spread refresh sorts [tenants x 256 origins x 60 steps] twice)
    n = np.isfinite(x).sum(axis=-1)
    pos = (np.maximum(n, 1) - 1)[..., None] * q              # [..., Q]
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0)[..., None])
    frac = pos - lo
    ranks = np.unique(np.concatenate([lo.ravel(), hi.ravel()]))
    if x.shape[-1] and 0 < ranks.size <= 16:
        s = np.partition(x, ranks, axis=-1)                  # NaN go last, as in a sort
    else:
        s = np.sort(x, axis=-1)                              # NaN sort last
    a = np.take_along_axis(s, lo, axis=-1)
    b = np.take_along_axis(s, hi, axis=-1)
    out = a + (b - a) * frac
    out[n == 0] = np.nan
    return out, n


def error_quantiles(errors: np.ndarray, quantiles: tuple[float, ...], min_count: int = 20) -> np.ndarray:
    """[tenant, h, Q] quantiles of [origin, tenant, h] errors, per tenant and horizon step.

    Where a tenant has fewer than `min_count` errors at a step, its errors over all steps are pooled; a tenant
    with no error at all gets zero spread (its point forecast is all there is to say).
    """
    per, n = nan_quantiles(errors, quantiles, axis=0)       # [N, H, Q], [N, H]
    o, t, h = errors.shape
    pooled, pn = nan_quantiles(errors.transpose(1, 0, 2).reshape(t, o * h), quantiles, axis=1)  # [N, Q]
    thin = (n < min_count)[..., None]
    per = np.where(thin & (pn[:, None, None] > 0), pooled[:, None, :], per)
    return np.nan_to_num(per, nan=0.0)


def with_error_quantiles(point: np.ndarray, errors: np.ndarray, quantiles: tuple[float, ...]) -> np.ndarray:
    """[tenant, h, Q]: today's point forecast plus the quantiles of past h-step errors, non-negative, ordered."""
    return add_error_quantiles(point, error_quantiles(errors, quantiles))


def add_error_quantiles(point: np.ndarray, eq: np.ndarray) -> np.ndarray:
    """[tenant, h, Q]: point [tenant, h] plus error quantiles [tenant, h, Q], non-negative, ordered."""
    values = np.maximum(point[:, :, None] + eq, 0.0)
    return np.maximum.accumulate(values, axis=2)


def conformal_shift(pred: np.ndarray, actual: np.ndarray, quantiles: tuple[float, ...],
                    min_count: int = 20) -> np.ndarray:
    """[tenant, Q] additive shifts so each quantile covers its nominal share of the recent actuals.

    pred [origin, tenant, h, Q], actual [origin, tenant, h]. The shift for quantile q is the q-quantile of
    (actual - pred_q) over the recent origins and steps: adding it makes the past coverage exactly q. Tenants
    with too few scored steps borrow the shift of all tenants (in units of their own scale, not pooled raw).
    """
    resid = actual[..., None] - pred                        # [O, N, H, Q]
    o, n, h, nq = resid.shape
    flat = resid.transpose(1, 0, 2, 3).reshape(n, o * h, nq)
    shift = np.empty((n, nq))
    counts = np.isfinite(flat[:, :, 0]).sum(axis=1)
    for j, q in enumerate(quantiles):
        sj, _ = nan_quantiles(flat[:, :, j], (q,), axis=1)
        shift[:, j] = sj[:, 0]
    thin = counts < min_count
    if thin.any():
        # a tenant with no actual seen has no scale (its mean would be NaN, and numpy warns): 1, as a scale of 0
        seen = np.isfinite(actual).sum(axis=(0, 2))
        scale = np.nansum(np.abs(actual), axis=(0, 2)) / np.maximum(seen, 1)
        scale = np.where((seen > 0) & np.isfinite(scale) & (scale > 0), scale, 1.0)
        rel = flat / scale[:, None, None]
        pooled = np.array([nan_quantiles(rel[:, :, j].ravel(), (q,), axis=0)[0][0]
                           for j, q in enumerate(quantiles)])
        shift[thin] = np.nan_to_num(pooled, nan=0.0)[None, :] * scale[thin, None]
    return np.nan_to_num(shift, nan=0.0)


_FROZEN = __import__("threading").local()   # per thread: ids of the SpreadRefresh objects held at their spread


_PENDING_LOCK = __import__("threading").Lock()
_PENDING: weakref.WeakSet = weakref.WeakSet()   # spreads with a due recomputation not started


def start_pending_refreshes() -> int:
    """Start every due background spread recomputation held back so far; returns how many started.

    The daemon's cycle calls it when the cycle's work (forecast, plan, act) is done, so a refresh runs in the time
    between cycles instead of inside the forecast that found it due. It only starts threads: it never waits.
    """
    with _PENDING_LOCK:
        spreads = list(_PENDING)
        _PENDING.clear()
    return sum(sp.release() for sp in spreads)


class frozen_spreads:
    """Within this block (in this thread) the given spreads are served as they are: not counted, not recomputed."""

    def __init__(self, spreads) -> None:
        self.ids = {id(s) for s in spreads}

    def __enter__(self):
        self.before = getattr(_FROZEN, "ids", frozenset())
        _FROZEN.ids = frozenset(self.before | self.ids)
        return self

    def __exit__(self, *exc) -> None:
        _FROZEN.ids = self.before


class SpreadRefresh:
    """The last spread (error quantiles, conformal shifts) computed for a tenant set, and when to recompute it.

    `every` = 1 recomputes at every forecast (backtests, retrain: each origin gets its own). With `every` = k the
    spread is reused for k forecasts, then recomputed. With `background` on (the daemon), the recomputation runs
    in a worker thread from the history of the forecast that found the spread due, and forecasts keep the last
    spread until it is ready: the forecast call itself never pays for it. The very first spread for a tenant set
    is computed at once (a start-up cost, once).

    A due background recomputation is not started inside the forecast call that found it due: it waits, pending,
    until `start_pending_refreshes()` (the daemon's cycle calls it once its cycle's work is done), so it never
    shares the GIL and the cores with that forecast and the rest of its cycle. Where nobody calls it (a bench, a
    test), the pending job starts at the next `get` (or `wait`) instead: nothing is lost, and a forecast still
    never waits for it.
    """

    def __init__(self, every: int = 1, background: bool = False) -> None:
        import threading

        self.every = max(1, int(every))
        self.background = bool(background)
        self._lock = threading.Lock()
        self._key = None
        self._value = None
        self._uses = 0
        self._job = None          # (key, thread, result box) of a recomputation in flight
        self._pending = None      # (key, compute) of a due recomputation not started yet (see release)
        self.refreshes = 0        # spreads computed (for tests and the bench)
        self.seconds = 0.0        # how long the last computation took
        self.last_error: str | None = None

    def get(self, key, compute):
        """The spread for `key` (hashable: tenants, horizon), computing it with `compute()` when due."""

        with self._lock:
            self._collect()
            if self._key == key and id(self) in getattr(_FROZEN, "ids", ()):
                return self._value    # a recalibration is replaying the model at past origins: today's spread
            if self._key == key and self._uses < self.every:
                self._uses += 1
                return self._value
            if self._key == key and self.background:
                if self._job is None and self._pending is not None:
                    self._start()   # due since an earlier forecast and nobody released it: start it now
                elif self._job is None:
                    # due: recompute off the forecast path from this history, serve the last one meanwhile; the
                    # thread starts once the caller's cycle says its work is done (release), not during this call
                    self._pending = (key, compute)
                    with _PENDING_LOCK:
                        _PENDING.add(self)
                self._uses += 1
                return self._value
        import time

        t0 = time.perf_counter()
        value = compute()   # first spread for this tenant set, or every forecast in a backtest
        self.seconds = time.perf_counter() - t0
        with self._lock:
            self._key, self._value, self._uses = key, value, 1
            if self._pending is not None and self._pending[0] != key:
                self._pending = None   # another tenant set: a pending job for the old one would be dropped anyway
            self.refreshes += 1
        return value

    def _start(self) -> None:
        """Start the pending recomputation in a worker thread (under the lock)."""
        import threading

        key, compute = self._pending
        self._pending = None
        box: dict = {}
        # with the releasing thread's torch thread count (forecaster/threads.py): a recalibrated LSTM's refresh
        # replays it at 16 past origins, and a new thread ran each on one OpenMP thread per core
        th = threading.Thread(target=carry_torch_threads(self._run), args=(compute, box), name="spread-refresh",
                              daemon=True)
        self._job = (key, th, box)
        th.start()

    @property
    def pending(self) -> bool:
        """Whether a due recomputation waits to be released."""
        return self._pending is not None

    def release(self) -> bool:
        """Start the pending recomputation, if any and none is in flight; never waits for it. True if started."""
        with self._lock:
            self._collect()
            if self._pending is None or self._job is not None:
                return False
            self._start()
            return True

    def _run(self, compute, box: dict) -> None:
        import time

        t0 = time.perf_counter()
        try:
            box["value"] = compute()
            self.seconds = time.perf_counter() - t0
        except Exception as exc:  # a failed refresh keeps the last spread; said on the next collect
            box["error"] = f"{type(exc).__name__}: {exc}"

    def _collect(self) -> None:
        """Take a finished background recomputation (under the lock)."""
        if self._job is None or self._job[1].is_alive():
            return
        key, _, box = self._job
        self._job = None
        if "error" in box:
            self.last_error = box["error"]
            self._uses = 0   # try again at the next forecast
            return
        self.last_error = None
        if key == self._key:
            self._value, self._uses = box["value"], 0
            self.refreshes += 1

    def wait(self, timeout: float | None = None) -> None:
        """Block until a background recomputation in flight (or pending: started here) is done (tests, the bench
        between cycles)."""
        self.release()
        job = self._job
        if job is not None:
            job[1].join(timeout)
        with self._lock:
            self._collect()


class _Wrapper:
    """What a recalibration passes through from the model it wraps (its history needs, its spec) and its own
    spread's refresh period."""

    model: Any
    spread: SpreadRefresh

    @property
    def refresh(self) -> int:
        return self.spread.every

    @property
    def min_history(self) -> int:
        return getattr(self.model, "min_history", 1)

    @property
    def spec(self):
        return self.model.spec


class Recalibrated(_Wrapper):
    """Any forecaster recalibrated per tenant from its own recent h-step errors (split conformal, additive).

    At each forecast the model also forecasts from up to `origins` recent points of the history whose horizon
    is already known; for every tenant and quantile q the q-quantile of (actual - forecast_q) over those origins
    and steps is added to today's forecast, so each quantile covers its nominal share of the recent past. Only
    the history handed to `predict` is used (in a backtest, nothing after the origin). The shifts are
    recomputed every `refresh` forecasts, in a background thread when `background` is set (the daemon).
    """

    def __init__(self, model, origins: int = 16, window: int | None = None, refresh: int = 1,
                 background: bool = False, forecasts_at=None) -> None:
        self.model = model
        # (history, ends, horizon) -> [origin, tenant, h, Q]: the model's forecasts from the recent origins; by
        # default it forecasts from each truncated history. A baseline whose spread comes from its own errors
        # passes its `forecasts_at` (each origin's point forecast with today's spread: the shift then corrects
        # today's spread, not the one it had days ago)
        self.forecasts_at = forecasts_at
        self.origins = origins
        self.window = window
        self.name = f"{model.name}+conformal"
        self.spread = SpreadRefresh(refresh, background)
        self.last_shift: np.ndarray | None = None
        # the model's own forecasts at the origins of its last shift computation, by (tenants, horizon) and the
        # origin's last timestamp: a recalibrated blend replays this model at the same origins, no second forward
        self._replay: tuple[tuple, dict] | None = None

    def own_peaks(self) -> set[int]:
        return own_peaks(self.model)

    def can_batch_peaks(self, windows: tuple[int, ...]) -> bool:
        # the per-step shift leaves a peak head's quantiles as they are: the inner model's past peaks are ours
        return set(windows) <= own_peaks(self.model) and batched_peaks(self.model, windows)

    def peaks_at(self, history, ends, horizon: int, windows: tuple[int, ...]) -> np.ndarray | None:
        if not self.can_batch_peaks(windows):
            return None
        return self.model.peaks_at(history, ends, horizon, windows)

    def shifts(self, history, horizon: int) -> np.ndarray | None:
        """[tenant, Q] shifts from the model's forecasts at recent origins of `history`; None with < 4 origins."""
        t = len(history)
        ends = recent_origins(t, horizon, first=max(1, self.min_history),
                              window=self.window or 8 * horizon * self.origins // 4, max_origins=self.origins)
        if len(ends) < 4:
            return None
        vals = history.to_numpy(dtype=float).T
        if self.forecasts_at is not None:
            preds = self.forecasts_at(history, ends, horizon)
        else:
            # today's model at each past origin: inner spreads (a blend's partner, a recalibrated LSTM inside it)
            # as `predict` just computed them for this history, so the shift corrects what is served now, in a
            # backtest as in the daemon
            with frozen_spreads(spreads_in(self.model)):
                preds = np.stack([self.model.predict(history.iloc[:e], horizon).values for e in ends])  # [O,N,H,Q]
            self._replay = ((tuple(map(str, history.columns)), horizon),
                            {history.index[e - 1]: preds[i] for i, e in enumerate(ends)})
        idx = ends[:, None] + np.arange(horizon)[None, :]
        actual = vals[:, idx].transpose(1, 0, 2)
        return conformal_shift(preds, actual, tuple(self.quantiles_of(preds)))

    def quantiles_of(self, preds: np.ndarray) -> tuple[float, ...]:
        qs = getattr(getattr(self.model, "spec", None), "quantiles", None) or getattr(self.model, "quantiles", None)
        if qs is None or len(qs) != preds.shape[-1]:
            raise ValueError(f"{self.name}: cannot tell the model's quantiles")
        return tuple(qs)

    def predict(self, history, horizon: int):
        from forecaster.types import Forecast

        fc = self._replayed(history, horizon) or self.model.predict(history, horizon)
        shift = self.spread.get((tuple(map(str, history.columns)), horizon), lambda: self.shifts(history, horizon))
        if shift is None:
            return Forecast(fc.tenants, fc.quantiles, fc.values, fc.issued_at, fc.step_s, self.name)
        self.last_shift = shift
        # the per-step shift corrects the per-step quantiles; a peak head's own quantiles pass as they are (their
        # calibration is PeakCalibrated's, on realised peaks)
        return fc.with_values(add_shift(fc.values, shift), self.name)


    def _replayed(self, history, horizon: int):
        """While an outer recalibration replays this model at past origins: the forecast this model made from
        that origin in its own last shift computation (the same model, the same history up to there), if any."""
        from forecaster.types import Forecast

        memo = self._replay
        if memo is None or id(self.spread) not in getattr(_FROZEN, "ids", ()) or not len(history):
            return None
        key, at = memo
        cols = tuple(map(str, history.columns))
        vals = at.get(history.index[-1]) if key == (cols, horizon) else None
        if vals is None:
            return None
        step = int((history.index[1] - history.index[0]).total_seconds()) if len(history) > 1 else 60
        return Forecast(cols, tuple(self.quantiles_of(vals)), vals, history.index[-1], step, self.model.name)


def add_shift(values: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """[tenant, h, Q] + per-tenant, per-quantile shifts [tenant, Q], non-negative, quantiles ordered.

    A NaN forecast (a tenant without history) stays NaN, never becomes the shift alone.
    """
    vals = np.maximum(values + shift[:, None, :], 0.0)
    return np.fmax.accumulate(vals, axis=2)


def spreads_in(model) -> list[SpreadRefresh]:
    """Every SpreadRefresh inside a forecaster (a recalibrated blend holds three): for the bench and tests."""
    out: list[SpreadRefresh] = []
    seen: set[int] = set()

    def walk(m) -> None:
        if m is None or id(m) in seen:
            return
        seen.add(id(m))
        sp = getattr(m, "_spread", None) if not isinstance(m, (Recalibrated, PeakCalibrated)) else m.spread
        if isinstance(sp, SpreadRefresh):
            out.append(sp)
        for attr in ("model", "lstm", "baseline", "primary", "chosen"):
            walk(getattr(m, attr, None))

    walk(model)
    return out


def own_peaks(model) -> set[int]:
    """The lead windows for which `model`'s forecasts carry their own peak quantiles (an LSTM's peak head, passed
    through a recalibration or mixed into a blend, or a peak calibration); empty for a plain baseline."""
    f = getattr(model, "own_peaks", None)
    return set(f()) if callable(f) else set()


def batched_peaks(model, windows) -> bool:
    """Whether `model.peaks_at` gives its past peak forecasts over `windows` in one batch (else: None)."""
    f = getattr(model, "can_batch_peaks", None)
    return bool(f(tuple(windows))) if callable(f) else False


def peak_shift(pred: np.ndarray, real: np.ndarray, moving: np.ndarray | None, quantiles: tuple[float, ...],
               min_count: int = 8) -> np.ndarray:
    """[tenant, Q] additive shifts so each forecast peak quantile covers its nominal share of recent realised peaks.

    pred [origin, tenant, Q] the forecast peak quantiles over one window, real [origin, tenant] the realised peaks
    (NaN: not scored), moving [origin, tenant] (or None): where the series moved. With `moving`, a tenant's shift
    is learnt from the windows where it moved (where it did not, any forecast at or above the value covers it, and
    counting those would leave the peaks that matter under-covered), from all its windows where it moved fewer
    than `min_count` times. A tenant with fewer than `min_count` scored windows at all borrows the shift of all
    tenants, in units of its own level; with none anywhere, no shift.
    """
    resid = real[..., None] - pred                                   # [O, N, Q]
    ok = np.isfinite(resid)
    if moving is not None:
        mv = ok & np.asarray(moving, dtype=bool)[..., None]
        enough = mv[..., 0].sum(axis=0) >= min_count                 # [N]
        resid = np.where(enough[None, :, None], np.where(mv, resid, np.nan), resid)
    shift = np.empty(resid.shape[1:])
    counts = np.isfinite(resid[..., 0]).sum(axis=0)
    for j, q in enumerate(quantiles):
        shift[:, j] = nan_quantiles(resid[:, :, j], (q,), axis=0)[0][:, 0]
    thin = counts < min_count
    if thin.any():
        with np.errstate(all="ignore"):
            level = np.nanmean(np.abs(real), axis=0)
        level = np.where(np.isfinite(level) & (level > 0), level, 1.0)
        rel = resid / level[None, :, None]
        pooled = np.array([nan_quantiles(rel[:, :, j].ravel(), (q,), axis=0)[0][0] for j, q in enumerate(quantiles)])
        shift[thin] = np.nan_to_num(pooled, nan=0.0)[None, :] * level[thin, None]
    return np.nan_to_num(shift, nan=0.0)


class PeakCalibrated(_Wrapper):
    """Any forecaster whose peak quantiles over the policy's lead windows are recalibrated per tenant on the
    realised peaks of its own recent forecasts (split conformal, additive).

    The policy holds for each tenant's q-peak over a lead window (`Forecast.peak_over`). At each forecast the model
    also forecasts from up to `origins` recent points of the history whose windows are already known; for every
    tenant, window and quantile q, the q-quantile of (realised peak - forecast q-peak) over those origins, where the
    series moved (`peak_shift`), is added to today's q-peak. The per-step quantiles are left as they are; the
    forecast carries the calibrated peaks (`Forecast.peaks`). Only the history handed to `predict` is used. The
    shifts are recomputed every `refresh` forecasts, in a background thread when `background` is set (the daemon).
    """

    SUFFIX = "+peak"

    def __init__(self, model, windows: tuple[int, ...], origins: int | None = None, window: int | None = None,
                 refresh: int = 1, background: bool = False, forecasts_at=None, moving_only: bool = True,
                 min_observed: float | None = None) -> None:
        from forecaster.metrics import PEAK_MIN_OBSERVED

        self.model = model
        self.windows = tuple(sorted({max(1, int(k)) for k in windows}))
        if not self.windows:
            raise ValueError("PeakCalibrated needs at least one lead window")
        # (history, ends, horizon) -> [origin, tenant, h, Q]: a baseline's vectorised forecasts from past origins
        # (it has no peak head, so its peaks are the largest per-step quantiles); else the model's own `peaks_at`
        # (an LSTM: every origin in one batch), else it forecasts from each origin in turn
        self.forecasts_at = forecasts_at
        self.batched = forecasts_at is not None or batched_peaks(model, self.windows)
        # the recent past the shifts are learnt from: two days at 1-minute steps for a 10-step window. A GPU count
        # moves in few windows (on Helios at 1-minute steps in 1 of 15), so a tenant's moves need many origins:
        # 256 where the past forecasts come in one batch, 48 where the model forecasts from each in turn
        self.origins = origins or (256 if self.batched else 48)
        self.window = window or 288 * max(self.windows)
        self.moving_only = moving_only
        self.min_observed = PEAK_MIN_OBSERVED if min_observed is None else min_observed
        self.name = f"{model.name}{self.SUFFIX}"
        self.spread = SpreadRefresh(refresh, background)
        self.last_shift: np.ndarray | None = None   # [tenant, window, Q]

    def own_peaks(self) -> set[int]:
        return set(self.windows) | own_peaks(self.model)

    def _past_peaks(self, history, ends: np.ndarray, horizon: int) -> np.ndarray:
        """[origin, tenant, window, Q]: the model's forecast peaks from history[:e] for each e in `ends`."""
        ks = [min(k, horizon) for k in self.windows]
        if self.forecasts_at is not None:
            v = self.forecasts_at(history, ends, horizon)                               # [O, N, H, Q]
            return np.stack([np.fmax.reduce(v[:, :, :k, :], axis=2) for k in ks], axis=2)
        if batched_peaks(self.model, tuple(ks)):
            return self.model.peaks_at(history, ends, horizon, tuple(ks))
        with frozen_spreads(spreads_in(self.model)):
            fcs = [self.model.predict(history.iloc[:e], horizon) for e in ends]
        return np.stack([np.stack([fc.peak_quantiles(k) for k in ks], axis=1) for fc in fcs])

    def shifts(self, history, horizon: int, quantiles: tuple[float, ...]) -> np.ndarray | None:
        """[tenant, window, Q] shifts from the model's forecasts at recent origins of `history`; None with < 4."""
        from forecaster.metrics import moves, realised_peaks

        k_max = min(max(self.windows), horizon)
        ends = recent_origins(len(history), k_max, first=max(1, self.min_history), window=self.window,
                              max_origins=self.origins)
        if len(ends) < 4:
            return None
        qs = tuple(quantiles)
        vals = history.to_numpy(dtype=float).T                                         # [N, T]
        pred = self._past_peaks(history, ends, horizon)                                 # [O, N, K, Q]
        idx = ends[:, None] + np.arange(k_max)[None, :]
        actual = vals[:, idx].transpose(1, 0, 2)                                        # [O, N, k_max]
        last = vals[:, ends - 1].T                                                      # [O, N]
        out = []
        for i, k in enumerate(self.windows):
            k = min(k, horizon)
            real = realised_peaks(actual, k, self.min_observed)
            mv = moves(actual, last, k) if self.moving_only else None
            out.append(peak_shift(pred[:, :, i, :], real, mv, qs))
        return np.stack(out, axis=1)

    def predict(self, history, horizon: int):
        from forecaster.types import ordered_peaks

        fc = self.model.predict(history, horizon)
        shift = self.spread.get((tuple(map(str, history.columns)), horizon, "peak"),
                                lambda: self.shifts(history, horizon, fc.quantiles))
        if shift is None:
            return fc.with_values(fc.values, self.name)
        self.last_shift = shift
        peaks = dict(fc.peaks or {})
        for i, k in enumerate(self.windows):
            if k > horizon:
                continue
            peaks[k] = ordered_peaks(fc.peak_quantiles(k) + shift[:, i, :])
        return fc.with_values(fc.values, self.name, peaks)
