"""The forecast handed from the forecaster to the policy.

One array, tenants x horizon x quantiles, so the policy can take a peak over
the lead time for every tenant with one numpy call.

What the policy acts on is each tenant's peak over a lead window at a quantile. The largest of the per-step
q-quantiles over a window is not the q-quantile of the window's peak: it is at most that (the peak is above
every step), and well under it where the timing of a rise is uncertain. So a forecaster may also carry the
peak's own quantiles for the windows the policy reads (`peaks`: a head trained on realised peaks, or a
per-tenant conformal correction of them); `peak_over` serves them where present and the largest per-step
quantile elsewhere, so a consumer reads one or the other through the same call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd


def ordered_peaks(p: np.ndarray) -> np.ndarray:
    """[tenant, quantile] peak quantiles made readable by the policy: at least 0 (no negative demand) and not
    falling from one quantile to the next (the hold reads one quantile, preemption a lower one); NaN (no forecast
    for a tenant) stays NaN."""
    return np.fmax.accumulate(np.maximum(p, 0.0), axis=1)


@dataclass(frozen=True)
class Forecast:
    tenants: tuple[str, ...]
    quantiles: tuple[float, ...]
    values: np.ndarray  # [tenant, horizon step, quantile], same unit as the input series
    issued_at: pd.Timestamp  # time of the last observation the forecast was built from
    step_s: int
    model: str
    # optional: lead window (steps) -> [tenant, quantile] quantiles of each tenant's peak over the next that many
    # steps (same unit as `values`); absent, or a window not in it, the peak is the largest per-step quantile
    peaks: Mapping[int, np.ndarray] | None = field(default=None, compare=False)
    # optional: inference service -> the model that forecast it, where one forecast merges two
    # (forecaster/composite.py: the services' own model beside the main one); the skill gate judges a service on
    # one model's windows
    tenant_models: Mapping[str, str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.values.shape[0] != len(self.tenants) or self.values.shape[2] != len(self.quantiles):
            raise ValueError(f"forecast shape {self.values.shape} does not match tenants/quantiles")
        for k, p in (self.peaks or {}).items():
            if int(k) < 1 or np.shape(p) != (len(self.tenants), len(self.quantiles)):
                raise ValueError(f"peak over {k} steps has shape {np.shape(p)}, expected "
                                 f"({len(self.tenants)}, {len(self.quantiles)}) and a window of 1 step or more")

    @property
    def horizon(self) -> int:
        return int(self.values.shape[1])

    def quantile_index(self, q: float) -> int:
        """Index of quantile q, or of the nearest stored quantile above it (the last one at most)."""
        return min(int(np.searchsorted(np.asarray(self.quantiles), q - 1e-9)), len(self.quantiles) - 1)

    def quantile(self, q: float) -> np.ndarray:
        """[tenant, horizon] at quantile q; the nearest quantile above q is used if q is not stored."""
        return self.values[:, :, self.quantile_index(q)]

    def for_tenants(self, tenants: tuple[str, ...] | list[str]) -> np.ndarray:
        """Values re-ordered to `tenants`; tenants the forecast lacks get NaN."""
        return self._reorder(self.values, tenants)

    def _reorder(self, a: np.ndarray, tenants: tuple[str, ...] | list[str] | None) -> np.ndarray:
        if tenants is None or tuple(tenants) == self.tenants:
            return a
        index = {t: i for i, t in enumerate(self.tenants)}
        pos = np.array([index.get(t, -1) for t in tenants], dtype=np.int64)
        out = np.full((len(tenants),) + a.shape[1:], np.nan)
        ok = pos >= 0
        out[ok] = a[pos[ok]]
        return out

    def has_peak(self, steps: int) -> bool:
        """Whether the peak over `steps` (clipped to the horizon, at least 1) has its own quantiles here."""
        return self.peaks is not None and self.window(steps) in self.peaks

    def window(self, steps: int) -> int:
        """The lead window the policy reads for `steps`: at least one step, at most the horizon."""
        return max(1, min(int(steps), self.horizon))

    def peak_quantiles(self, steps: int) -> np.ndarray:
        """[tenant, quantile]: every stored quantile of each tenant's peak over the next `steps` steps (its own
        where carried, else the largest per-step quantile), in the forecast's tenant order."""
        k = self.window(steps)
        if self.peaks is not None and k in self.peaks:
            return np.asarray(self.peaks[k], dtype=float)
        v = self.values[:, :k, :]
        return np.fmax.reduce(v, axis=1) if v.shape[0] else np.zeros((0, len(self.quantiles)))

    def peak_over(self, steps: int, q: float, tenants: tuple[str, ...] | list[str] | None = None) -> np.ndarray:
        """[tenant] the q-quantile of each tenant's peak over the next `steps` steps (clipped to the horizon).

        The forecast's own peak quantiles where it carries them for this window; otherwise the largest per-step
        quantile over the window (NaN only where every step is NaN). `tenants`: re-ordered to these, NaN for a
        tenant the forecast lacks.
        """
        k = self.window(steps)
        j = self.quantile_index(q)
        if self.peaks is not None and k in self.peaks:
            return self._reorder(np.asarray(self.peaks[k], dtype=float)[:, j], tenants)
        v = self.values[:, :k, j]
        return self._reorder(np.fmax.reduce(v, axis=1) if v.shape[0] else np.zeros(0), tenants)

    def shifted(self, steps: int) -> "Forecast":
        """This forecast read `steps` steps after it was made, as a replay that forecasts every few steps reads
        it in between: the horizon moves on and its last step repeats at the end.

        Its own peak quantiles are carried as what they add, per tenant and quantile, to the largest per-step
        quantile over each window (a conformal peak shift, or what a peak head sees beyond the steps), added to
        the shifted steps' largest. Dropped, a replay forecasting every 5 steps would run a peak-calibrated
        forecaster as an uncalibrated one on 4 steps in 5 (and could not tell `+peak` candidates from bare ones).
        Where that difference is not finite (every step of the window NaN) the window's peak is kept as it was.
        As where they are made (forecaster/calibration.py), the carried peaks are at least 0 and do not fall from one
        quantile to the next: the hold reads one quantile and the preemption a lower one.
        """
        s = min(int(steps), self.horizon)
        if s <= 0:
            return self
        vals = np.concatenate([self.values[:, s:], np.repeat(self.values[:, -1:], s, axis=1)], axis=1)
        peaks = None
        if self.peaks:
            peaks = {}
            for k, p in self.peaks.items():
                k = int(k)
                p = np.asarray(p, dtype=float)
                with np.errstate(invalid="ignore"):
                    add = p - np.fmax.reduce(self.values[:, :k, :], axis=1)
                    now = np.fmax.reduce(vals[:, :k, :], axis=1) + add
                peaks[k] = ordered_peaks(np.where(np.isfinite(add), now, p))
        return Forecast(self.tenants, self.quantiles, vals, self.issued_at, self.step_s, self.model, peaks,
                        self.tenant_models)

    def with_values(self, values: np.ndarray, model: str | None = None, peaks=None) -> "Forecast":
        """The same forecast with other per-step values (and name); its own peaks are kept unless `peaks`
        (a mapping, or {} for none) says otherwise."""
        return Forecast(self.tenants, self.quantiles, values, self.issued_at, self.step_s,
                        self.model if model is None else model, self.peaks if peaks is None else (peaks or None),
                        self.tenant_models)
