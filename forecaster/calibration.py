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

import numpy as np


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
    """[origin, tenant, h] errors actual - point; `values` is [tenant, time], `point` [origin, tenant, h]."""
    h = point.shape[2]
    idx = origins[:, None] + np.arange(h)[None, :]          # [O, H]
    actual = values[:, idx].transpose(1, 0, 2)               # [O, N, H]
    return actual - point


def nan_quantiles(x: np.ndarray, quantiles: tuple[float, ...] | np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Quantiles over `axis` ignoring NaN (linear interpolation, like numpy's default), plus the count used.

    Vectorised with one sort: np.nanquantile loops in Python per slice, too slow for 1,000 tenants x 60 steps.
    Returns ([..., Q] with `axis` removed, count); NaN where a slice has no value.
    """
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    s = np.sort(x, axis=-1)                                  # NaN sort last
    n = np.isfinite(s).sum(axis=-1)
    q = np.asarray(quantiles, dtype=float)
    pos = (np.maximum(n, 1) - 1)[..., None] * q              # [..., Q]
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0)[..., None])
    frac = pos - lo
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
        scale = np.nanmean(np.abs(actual), axis=(0, 2))
        scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
        rel = flat / scale[:, None, None]
        pooled = np.array([nan_quantiles(rel[:, :, j].ravel(), (q,), axis=0)[0][0]
                           for j, q in enumerate(quantiles)])
        shift[thin] = np.nan_to_num(pooled, nan=0.0)[None, :] * scale[thin, None]
    return np.nan_to_num(shift, nan=0.0)
