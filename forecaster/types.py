"""The forecast handed from the forecaster to the policy.

One array, tenants x horizon x quantiles, so the policy can take a peak over
the lead time for every tenant with one numpy call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Forecast:
    tenants: tuple[str, ...]
    quantiles: tuple[float, ...]
    values: np.ndarray  # [tenant, horizon step, quantile], same unit as the input series
    issued_at: pd.Timestamp  # time of the last observation the forecast was built from
    step_s: int
    model: str

    def __post_init__(self) -> None:
        if self.values.shape[0] != len(self.tenants) or self.values.shape[2] != len(self.quantiles):
            raise ValueError(f"forecast shape {self.values.shape} does not match tenants/quantiles")

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
        if tuple(tenants) == self.tenants:
            return self.values
        index = {t: i for i, t in enumerate(self.tenants)}
        pos = np.array([index.get(t, -1) for t in tenants], dtype=np.int64)
        out = np.full((len(tenants), self.horizon, len(self.quantiles)), np.nan)
        ok = pos >= 0
        out[ok] = self.values[pos[ok]]
        return out
