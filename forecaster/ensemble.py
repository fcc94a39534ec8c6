"""A small ensemble: the LSTM's quantiles averaged with a baseline's, the weight fitted before the scored window.

Averaging two forecasters' quantiles (quantile averaging, "Vincentization") helps when their errors differ:
the LSTM reads calendar and context, a baseline repeats the last value or smooths it. Which baseline and what
weight are chosen on a validation window that ends where the scored (held-out) window starts, so nothing of
the scored window is used to build the model that is scored on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecaster.metrics import weighted_quantile_loss
from forecaster.types import Forecast

WEIGHTS = (0.25, 0.5, 0.75)


class Blend:
    """weight x the LSTM's quantiles + (1 - weight) x the baseline's, per tenant, step and quantile.

    Where one side has no forecast for a tenant (NaN), the other side's is used alone.
    """

    def __init__(self, lstm, baseline, weight: float) -> None:
        if not 0.0 <= weight <= 1.0:
            raise ValueError(f"blend weight must be in [0, 1], got {weight}")
        self.lstm = lstm
        self.baseline = baseline
        self.weight = float(weight)
        self.name = f"{lstm.name}+{baseline.name}@{self.weight:g}"

    @property
    def spec(self):
        return self.lstm.spec

    @property
    def min_history(self) -> int:
        return getattr(self.lstm, "min_history", 1)

    def own_peaks(self) -> set[int]:
        from forecaster.calibration import own_peaks

        return own_peaks(self.lstm) | own_peaks(self.baseline)

    def can_batch_peaks(self, windows: tuple[int, ...]) -> bool:
        from forecaster.calibration import batched_peaks

        # a window neither side has its own peak for is the largest step of the mix, not the mix of the peaks
        return (set(windows) <= self.own_peaks() and batched_peaks(self.lstm, windows)
                and batched_peaks(self.baseline, windows))

    def peaks_at(self, history: pd.DataFrame, ends, horizon: int, windows: tuple[int, ...]) -> np.ndarray | None:
        """[origin, tenant, window, Q]: the blend's past peak forecasts, each side's mixed (as `predict` mixes them)."""
        if not self.can_batch_peaks(windows):
            return None
        return combine(self.lstm.peaks_at(history, ends, horizon, windows),
                       self.baseline.peaks_at(history, ends, horizon, windows), self.weight)

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        a = self.lstm.predict(history, horizon)
        b = self.baseline.predict(history, horizon)
        if a.tenants != b.tenants or tuple(a.quantiles) != tuple(b.quantiles):
            raise ValueError("blend: the LSTM and the baseline forecast different tenants or quantiles")
        vals = combine(a.values, b.values, self.weight)
        # a side with its own peak quantiles (an LSTM's peak head) is mixed with the other's peak as the policy
        # reads it (its largest per-step quantile over the window where it has none)
        peaks = {k: combine(a.peak_quantiles(k), b.peak_quantiles(k), self.weight)
                 for k in sorted(set(a.peaks or {}) | set(b.peaks or {}))}
        return Forecast(a.tenants, a.quantiles, vals, a.issued_at, a.step_s, self.name, peaks=peaks or None)


def combine(a: np.ndarray, b: np.ndarray, weight: float) -> np.ndarray:
    """weight * a + (1 - weight) * b; one side alone where the other is NaN; quantiles kept ordered."""
    out = weight * a + (1.0 - weight) * b
    out = np.where(np.isnan(a), b, np.where(np.isnan(b), a, out))
    return np.fmax.accumulate(out, axis=-1)  # both sides are ordered, so is their mix; this guards rounding


@dataclass(frozen=True)
class BlendChoice:
    lstm: str        # "lstm" or "lstm_conformal": which LSTM variant's quantiles go in
    baseline: str    # the baseline's name (selection.BASELINES)
    weight: float    # the LSTM's share
    val_wql: float   # its weighted quantile loss on the validation window
    scores: dict     # every (lstm, baseline, weight) tried -> validation wQL

    def to_dict(self) -> dict:
        return {"lstm": self.lstm, "baseline": self.baseline, "weight": self.weight, "val_wql": self.val_wql}


def fit_blend(preds: dict[str, np.ndarray], actual: np.ndarray, quantiles: tuple[float, ...], *,
              lstms: tuple[str, ...], baselines: list[str], weights: tuple[float, ...] = WEIGHTS) -> BlendChoice:
    """The (LSTM variant, baseline, weight) with the lowest wQL on a validation window's predictions.

    `preds` maps a model name to its [origin, tenant, h, q] forecasts over that window, `actual` [origin,
    tenant, h] is what happened there. Ties go to the earlier candidate (first LSTM, first baseline, first
    weight), so the choice is deterministic.
    """
    scores: dict[tuple[str, str, float], float] = {}
    for lv in lstms:
        for b in baselines:
            if lv not in preds or b not in preds:
                continue
            for w in weights:
                s = weighted_quantile_loss(combine(preds[lv], preds[b], w), actual, quantiles)
                if np.isfinite(s):
                    scores[(lv, b, float(w))] = s
    if not scores:
        raise ValueError("fit_blend: no scored combination (no LSTM or baseline predictions, or no actuals)")
    best = min(scores, key=lambda k: scores[k])
    return BlendChoice(best[0], best[1], best[2], scores[best],
                       {f"{k[0]}+{k[1]}@{k[2]:g}": v for k, v in scores.items()})
