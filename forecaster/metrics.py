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


# The policy's two lead windows (daemon.config.PolicyConfig: lead_time_steps, preempt_lead_steps) at their defaults;
# the daemon passes its configured ones. Kept here because the forecaster library does not import the daemon.
DEFAULT_PEAK_WINDOWS = {"lead": 10, "preempt": 3}
# a window's realised peak is scored only where at least this share of its steps is observed
PEAK_MIN_OBSERVED = 0.5


def realised_peaks(actual: np.ndarray, steps: int, min_observed: float = PEAK_MIN_OBSERVED) -> np.ndarray:
    """[...] each window's realised peak: the largest observed value over the first `steps` steps of actual
    [..., H], where at least `min_observed` of those steps (and at least one) were observed; NaN (not scored)
    elsewhere.

    A missing step is never read as zero: a peak over a gap is the peak of what was seen, and a window that is
    mostly gap says too little about its peak to score a forecast against.
    """
    w = np.asarray(actual, dtype=float)[..., :steps]
    seen = np.isfinite(w).sum(axis=-1)
    need = max(1, int(np.ceil(min_observed * w.shape[-1] - 1e-9)))
    peak = np.fmax.reduce(w, axis=-1) if w.shape[-1] else np.full(w.shape[:-1], np.nan)
    return np.where(seen >= need, peak, np.nan)


def moves(actual: np.ndarray, last: np.ndarray, steps: int) -> np.ndarray:
    """[...] bool: the series moves over the window, i.e. its observed values over the first `steps` steps of
    actual [..., H] and the last value seen before it (`last` [...], where known) are not all equal.

    On a window that does not move every forecast whose p90 is at or above the value covers it, and none can
    strictly; coverage measured where the series moves says how the forecast does where it can be wrong.
    """
    w = np.asarray(actual, dtype=float)[..., :steps]
    last = np.asarray(last, dtype=float)
    fin = np.isfinite(w)
    first = np.take_along_axis(w, np.argmax(fin, axis=-1)[..., None], axis=-1)[..., 0]
    ref = np.where(np.isfinite(last), last, first)
    return (fin & (w != ref[..., None])).any(axis=-1)


def peak_scores(pred: np.ndarray, actual: np.ndarray, quantiles: tuple[float, ...],
                moving: np.ndarray | None = None, q_cover: float = 0.9) -> dict:
    """Quantile loss and coverage of forecast peak quantiles pred [..., Q] against realised peaks actual [...].

    `loss` is the weighted quantile loss of the peaks (as `weighted_quantile_loss`); `coverage_p90` the share of
    scored windows whose realised peak is at or under the forecast's `q_cover` peak, `coverage_p90_strict` the
    share strictly under it, `coverage_p90_moving` the share at or under it among the windows where the series
    moves (`moving`). Scored: windows with a realised peak (see `realised_peaks`) and a forecast.
    """
    qs = np.asarray(quantiles, dtype=float)
    j = int(np.argmin(np.abs(qs - q_cover)))
    ok = np.isfinite(actual) & np.isfinite(pred).all(axis=-1)
    a, p = actual[ok], pred[ok]
    out: dict = {"scored": int(ok.sum())}
    if not a.size:
        out.update(loss=float("nan"), coverage_p90=float("nan"), coverage_p90_strict=float("nan"),
                   coverage_p90_moving=float("nan"), moving=0)
        return out
    out["loss"] = weighted_quantile_loss(p, a, tuple(quantiles))
    out["coverage_p90"] = float((a <= p[:, j]).mean())
    out["coverage_p90_strict"] = float((a < p[:, j]).mean())
    if moving is not None:
        m = np.asarray(moving, dtype=bool)[ok]
        out["moving"] = int(m.sum())
        out["coverage_p90_moving"] = float((a[m] <= p[m, j]).mean()) if m.any() else float("nan")
    return out


def peak_report(pred: np.ndarray, actual: np.ndarray, last: np.ndarray, quantiles: tuple[float, ...],
                windows: dict[str, int], tiers: np.ndarray | None = None,
                min_observed: float = PEAK_MIN_OBSERVED) -> dict:
    """Peak scores of one model for each lead window, overall and by tier.

    pred [origin, tenant, window, Q]: the forecast peak quantiles for `windows` (name -> steps, in that order);
    actual [origin, tenant, H]; last [origin, tenant]: the last value before each origin; tiers [tenant] or None.
    Returns {name: {"steps": k, **peak_scores, "by_tier": {tier: peak_scores}}} and "loss": the mean over the
    windows of their peak loss (what `retrain --select-by peak` ranks).
    """
    out: dict = {}
    losses = []
    for i, (name, k) in enumerate(windows.items()):
        k = max(1, min(int(k), actual.shape[-1]))
        real = realised_peaks(actual, k, min_observed)
        mv = moves(actual, last, k)
        w = {"steps": k, **peak_scores(pred[:, :, i, :], real, quantiles, mv)}
        if tiers is not None:
            w["by_tier"] = {str(t): peak_scores(pred[:, tiers == t, i, :], real[:, tiers == t], quantiles,
                                                mv[:, tiers == t])
                            for t in sorted(set(tiers.tolist()))}
        out[name] = w
        losses.append(w["loss"])
    fin = [x for x in losses if np.isfinite(x)]
    out["loss"] = float(np.mean(fin)) if fin else float("nan")
    return out
