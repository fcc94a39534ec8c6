"""A forecaster fitted at a coarser step, run on a finer history: the history averaged into whole windows of the
model's step, the model's forecast of the next windows read back at every fine step inside them.

Why: an inference service's load is a rate per window (ServeGen: a 10-minute window's mean rate, its minutes
drawn around it). At the replay's one-minute step a forecaster sees mostly the draws' noise, and a flat level (the
baseline chosen there) cannot see the next window's rise; fitted on the windows' means it forecasts the rate
changes the autoscaler needs to start replicas a cold start ahead (issue 40).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from forecaster.types import Forecast


def _step_s(history: pd.DataFrame) -> int:
    if len(history.index) < 2:
        raise ValueError("a resampled forecast needs at least two steps of history to know their step")
    return int((history.index[1] - history.index[0]).total_seconds())


def window_means(history: pd.DataFrame, step_s: int) -> pd.DataFrame:
    """The whole ``step_s``-second windows of ``history`` (aligned to the epoch), each the mean of its fine steps,
    indexed by the window's start. A window missing a step, or the one the next step falls in, is left out."""
    fine = _step_s(history)
    if step_s % fine:
        raise ValueError(f"a history at {fine} s steps does not divide into {step_s} s windows")
    per = step_s // fine
    ns = step_s * 10**9
    ids = history.index.as_unit("ns").asi8 // ns
    uniq, counts = np.unique(ids, return_counts=True)
    last = (history.index[-1].value + fine * 10**9) // ns   # the window the next step falls in is not whole
    keep = np.isin(ids, uniq[(counts == per) & (uniq < last)])
    out = history.loc[keep].groupby(ids[keep]).mean()
    out.index = pd.to_datetime(out.index.to_numpy() * ns, utc=True).tz_convert(history.index.tz)
    out.index.name = history.index.name
    return out


class Resampled:
    """``inner`` (a forecaster at ``step_s``-second steps) behind a history at a step that divides ``step_s``.

    Windows are aligned to the epoch (a 10-minute window starts at :00, :10, ...). Only whole windows are averaged:
    the window the last observation falls in is still filling, so it is forecast, not averaged from part of it.
    A fine step of the horizon takes the forecast of the window it falls in; a step past the inner forecast's last
    window takes that last window's. The inner forecast's own peak quantiles are for windows of its steps, not of
    the fine steps, so they are not carried: the peak over a lead window is the largest per-step quantile.

    The windows given to ``inner`` change only when one is completed (or, with a sliding history, when the first one
    is no longer whole), so its last forecast is reused while they are the same: at one-minute steps and 10-minute
    windows, one inner forecast in about five calls instead of every call."""

    def __init__(self, inner, step_s: int) -> None:
        if int(step_s) <= 0:
            raise ValueError(f"the coarse step must be positive, not {step_s}")
        self.inner = inner
        self.step_s = int(step_s)
        self.name = f"{inner.name}@{self.step_s}s"
        self._last: tuple[bytes, Forecast] | None = None   # (digest of the windows and horizon, inner forecast)

    def windows(self, history: pd.DataFrame) -> pd.DataFrame:
        return window_means(history, self.step_s)

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        fine = _step_s(history)
        coarse = self.windows(history)
        if coarse.empty:
            raise ValueError(f"no whole {self.step_s} s window in {len(history)} steps of history")
        ns = self.step_s * 10**9
        first = int(coarse.index[-1].value // ns) + 1                       # the first window forecast
        issued = history.index[-1]
        ahead = issued.value + fine * 10**9 * np.arange(1, horizon + 1)    # each fine step of the horizon
        need = int(ahead[-1] // ns) - first + 1
        most = getattr(getattr(self.inner, "spec", None), "horizon", need)   # an LSTM forecasts its horizon at most
        fc = self._inner(coarse, max(1, min(need, most)))
        pos = np.clip(ahead // ns - first, 0, fc.horizon - 1)
        return Forecast(fc.tenants, fc.quantiles, fc.values[:, pos, :], issued, fine, self.name)

    def _inner(self, coarse: pd.DataFrame, horizon: int) -> Forecast:
        """The inner forecast of ``coarse``: the last one again when the windows (times, tenants, values) and the
        horizon are those it was made from."""
        h = hashlib.blake2b(digest_size=16)
        h.update(coarse.index.as_unit("ns").asi8.tobytes())
        h.update("\0".join(map(str, coarse.columns)).encode())
        h.update(np.ascontiguousarray(coarse.to_numpy(dtype=float)).tobytes())
        h.update(str(horizon).encode())
        key = h.digest()
        if self._last is None or self._last[0] != key:
            self._last = (key, self.inner.predict(coarse, horizon))
        return self._last[1]
