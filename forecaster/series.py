"""Turning raw samples into the tenant x time frame every model reads.

The one rule that matters for safety: a missing sample stays NaN. Only short
gaps are bridged (a scrape that failed once); a long silence is reported as
missing, never as zero load, so the policy cannot mistake an outage for an
idle tenant.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def to_frame(samples: pd.DataFrame, step_s: int, *, start: pd.Timestamp | None = None,
             end: pd.Timestamp | None = None) -> pd.DataFrame:
    """Long samples (columns ``time, tenant, value``) -> regular wide frame, NaN where nothing was seen."""
    if samples.empty:
        idx = pd.DatetimeIndex([], tz="UTC", name="time")
        return pd.DataFrame(index=idx, dtype=float)
    df = samples.copy()
    df["time"] = pd.to_datetime(df["time"], utc=True)
    wide = df.pivot_table(index="time", columns="tenant", values="value", aggfunc="mean")
    freq = pd.Timedelta(seconds=step_s)
    wide = wide.resample(freq).mean()
    lo = start if start is not None else wide.index[0]
    hi = end if end is not None else wide.index[-1]
    full = pd.date_range(pd.Timestamp(lo).floor(freq), pd.Timestamp(hi).floor(freq), freq=freq, name="time")
    wide = wide.reindex(full)
    wide.columns.name = "tenant"
    return wide.astype(float)


def fill_short_gaps(frame: pd.DataFrame, max_gap_steps: int = 3) -> pd.DataFrame:
    """Bridge gaps of at most `max_gap_steps` by carrying the last value; longer gaps stay NaN."""
    if frame.empty or max_gap_steps <= 0:
        return frame
    out = frame.copy()
    for col in frame.columns:
        s = frame[col]
        na = s.isna().to_numpy()
        if not na.any():
            continue
        ids = np.cumsum(~na)
        lengths = np.bincount(ids, weights=na.astype(float))
        short = na & (lengths[ids] <= max_gap_steps) & (ids > 0)
        filled = s.ffill()
        vals = s.to_numpy().copy()
        vals[short] = filled.to_numpy()[short]
        out[col] = vals
    return out


def calendar_features(index: pd.DatetimeIndex) -> np.ndarray:
    """Hour-of-day and day-of-week as sin/cos pairs: [len(index), 4]."""
    minutes = index.hour.to_numpy() * 60 + index.minute.to_numpy()
    day = 2 * np.pi * minutes / 1440.0
    week = 2 * np.pi * (index.day_of_week.to_numpy() * 1440 + minutes) / (7 * 1440.0)
    return np.stack([np.sin(day), np.cos(day), np.sin(week), np.cos(week)], axis=1).astype(np.float32)


def ffill(values: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along the last axis of [tenant, time]; leading NaN stay NaN (nothing seen yet)."""
    miss = np.isnan(values)
    if not miss.any():
        return values
    idx = np.where(~miss, np.arange(values.shape[1])[None, :], 0)
    np.maximum.accumulate(idx, axis=1, out=idx)
    out = values[np.arange(values.shape[0])[:, None], idx]
    seen = np.maximum.accumulate(~miss, axis=1)
    return np.where(seen, out, np.nan)
