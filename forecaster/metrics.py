"""Forecast accuracy: weighted quantile loss, MASE against seasonal naive, interval coverage."""

from __future__ import annotations

import numpy as np


def weighted_quantile_loss(pred: np.ndarray, actual: np.ndarray, quantiles: tuple[float, ...]) -> float:
    """Sum of pinball losses over quantiles, normalised by the total of |actual| (the M5/GluonTS wQL).

    pred [..., Q], actual [...]; NaN actuals are skipped, never counted as zero.
    """
    mask = np.isfinite(actual)
    a = actual[mask]
    p = pred[mask]
    if a.size == 0:
        return float("nan")
    q = np.asarray(quantiles)
    diff = a[:, None] - p
    loss = np.maximum(q * diff, (q - 1) * diff).sum(axis=0)
    denom = np.abs(a).sum()
    return float(2 * loss.sum() / max(denom, 1e-9) / len(q))


def mase(point: np.ndarray, actual: np.ndarray, scale: np.ndarray) -> float:
    """Mean absolute error divided by the in-sample seasonal-naive MAE (per series `scale`)."""
    mask = np.isfinite(actual) & np.isfinite(point)
    err = np.abs(point - actual)
    s = np.broadcast_to(scale.reshape(scale.shape + (1,) * (actual.ndim - scale.ndim)), actual.shape)
    ok = mask & (s > 0)
    if not ok.any():
        return float("nan")
    return float((err[ok] / s[ok]).mean())


def coverage(upper: np.ndarray, actual: np.ndarray, strict: bool = False) -> float:
    """Share of actuals at or below the upper quantile (should be near that quantile); `strict`: below it."""
    mask = np.isfinite(actual)
    if not mask.any():
        return float("nan")
    if strict:
        return float((actual[mask] < upper[mask]).mean())
    return float((actual[mask] <= upper[mask]).mean())
