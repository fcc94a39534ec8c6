"""A history file's columns and their units, read one way by `simulate --data`, `retrain --data` and `backtest
--data`.

A column is a tenant's GPUs (no unit, or `[GPU]`), or an inference service's requests/s (`svc-a[req/s]`, or the
column of a tenant whose `[[tenants]]` entry has a `[tenants.inference]` table). The daemon forecasts GPUs: an
inference tenant's series is its GPU need at the rate its autoscaler sees (``need_frame``). So the rates become
that need here, before anything is trained, scored or replayed: a model chosen on requests/s would be chosen on a
series the daemon never forecasts. Below daemon/sim and daemon/forecasting/retrain (both import it; it imports
neither): pure numpy and pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.forecasting.errors import DataError

# a column's unit, named in the header as `svc-a[req/s]`: GPUs (the default) or requests/s of an inference service
UNITS = ("GPU", "req/s")


@dataclass(frozen=True)
class InferenceSpec:
    """One inference service: GPUs per replica (G), requests/s one ready replica serves (R), the seconds from a
    replica's placement to its first served request (S: load the model, warm up), the autoscaler's headroom over
    the rate it sees, and its scale-down stabilization window (an HPA's behavior.scaleDown.
    stabilizationWindowSeconds, 300 s by default as kube-controller-manager's: the replica count is the max of
    the recommendations over that window; 0 scales down at once)."""

    gpus_per_replica: int
    replica_rps: float
    cold_start_s: float
    headroom: float = 0.1
    scale_down_stabilization_s: float = 300.0

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1 or not self.replica_rps > 0 or not self.cold_start_s >= 0 \
                or not self.headroom >= 0 or not self.scale_down_stabilization_s >= 0:
            raise ValueError(f"inference spec: gpus_per_replica >= 1, replica_rps > 0, cold_start_s >= 0, "
                             f"headroom >= 0 and scale_down_stabilization_s >= 0, not {self}")

    def cold_steps(self, step_s: int) -> int:
        """Whole steps of cold start: a replica placed at step k serves from step k + cold_steps."""
        return int(math.ceil(self.cold_start_s / step_s - 1e-9))

    def stabilization_steps(self, step_s: int) -> int:
        """Steps whose recommendations the replica count is the max of, this one included: an HPA keeps those
        made within the window (strictly after now - window), so with a step of ``step_s`` the last
        ceil(window / step) of them, and at least this step's (0 s: scale down at once)."""
        return max(1, int(math.ceil(self.scale_down_stabilization_s / step_s - 1e-9)))

    def need_gpus(self, rate: np.ndarray | pd.Series | float) -> np.ndarray:
        """GPUs for ``rate`` requests/s with the headroom, in whole replicas; a missing rate stays missing."""
        r = np.asarray(rate, dtype=float)
        reps = np.ceil(np.maximum(r, 0.0) * (1.0 + self.headroom) / self.replica_rps - 1e-9)
        return np.where(np.isfinite(r), reps * self.gpus_per_replica, np.nan)


def need_frame(rates: pd.DataFrame, specs: Mapping[str, InferenceSpec]) -> pd.DataFrame:
    """Each inference tenant's demand column: its GPU need at the PREVIOUS step's observed rate (the first step
    at its own rate), the series the forecaster, the policy and the reactive autoscaler all see."""
    seen = rates.shift(1)
    seen.iloc[:1] = rates.iloc[:1]
    return pd.DataFrame({c: specs[c].need_gpus(seen[c].to_numpy()) for c in rates.columns}, index=rates.index)


def split_unit(col: str) -> tuple[str, str | None]:
    """`name[unit]` -> (name, unit); a column without brackets -> (column, None)."""
    c = str(col)
    if c.endswith("]") and "[" in c:
        name, _, unit = c[:-1].rpartition("[")
        if name:
            return name.strip(), unit.strip()
    return c, None


def gpu_columns(frame: pd.DataFrame, cfg: Config, where: str) -> tuple[pd.DataFrame, dict[str, InferenceSpec],
                                                                       pd.DataFrame | None]:
    """Each column's unit: a `[req/s]` column, or one of a tenant with a `[tenants.inference]` section, holds an
    inference service's requests/s, and becomes its GPU need (``need_frame``) with the section's replica spec.
    Returns the frame in GPUs with plain tenant names, the specs and the rates (None: no service).
    Refused (one line naming the column): an unknown unit, a rate column with no replica spec in the config, a
    negative or infinite rate, one tenant in two columns."""
    conf = {t.name: t.inference for t in cfg.tenants if t.inference is not None}
    names, rate_of = [], {}
    for c in frame.columns:
        name, unit = split_unit(c)
        if unit is not None and unit not in UNITS:
            raise DataError(f"{where}: column {c!r}: unknown unit {unit!r}; a column is GPUs ([GPU] or no unit) or "
                            "an inference service's requests/s ([req/s])")
        if unit == "GPU" and name in conf:
            raise DataError(f"{where}: column {c!r} is GPUs, but [tenants.inference] makes {name} a service whose "
                            "column is requests/s: name its unit [req/s] or drop the section")
        if unit == "req/s" or (unit is None and name in conf):
            if name not in conf:
                raise DataError(f"{where}: column {c!r} is requests/s, but the config gives {name} no replica spec: "
                                f"add a [tenants.inference] table (gpus_per_replica, replica_rps, cold_start_s) to "
                                f"its [[tenants]] entry")
            rate_of[name] = c
        names.append(name)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # `svc-a` and `svc-a[req/s]`, `team-b` and `team-b[GPU]`: were two columns of one tenant, both read
        cols = [str(c) for c, n in zip(frame.columns, names) if n == twice[0]]
        raise DataError(f"{where}: columns {' and '.join(repr(c) for c in cols)} are both tenant {twice[0]!r}: one "
                        "column per tenant (sum them, or rename one)")
    out = frame.copy()
    out.columns = pd.Index(names, name="tenant")
    if not rate_of:
        return out, {}, None
    # the config's table has the spec's fields, by name: a field added to both reaches the replay without a third edit
    specs = {n: InferenceSpec(**i.model_dump()) for n, i in conf.items() if n in rate_of}
    rates = frame[[rate_of[n] for n in rate_of]].astype(float)
    rates.columns = pd.Index(list(rate_of), name="tenant")
    # below 0, or infinite (its need was NaN, missing, while the replay served an infinite rate); NaN is missing
    bad = ((rates < 0) | np.isinf(rates)).to_numpy()
    if bad.any():
        r, c = (int(i[0]) for i in np.nonzero(bad))
        raise DataError(f"{where}: column {rate_of[rates.columns[c]]!r} at {rates.index[r]}: {rates.iat[r, c]:g} "
                        "requests/s, " + ("below 0" if rates.iat[r, c] < 0 else "not a finite number"))
    need = need_frame(rates, specs)
    for n in rate_of:
        out[n] = need[n]
    return out, specs, rates
