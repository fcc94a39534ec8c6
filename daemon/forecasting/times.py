"""The `time` column of a history file (`retrain --data`, `simulate --data`): what its values mean, and whether
their spacing fits the cycle's step.

pandas alone reads every number as nanoseconds since the epoch: a Prometheus export's epoch seconds (1.7e9) became
a few seconds of 1970, and the file was refused as "samples are 0 s apart". Numbers are epoch seconds,
milliseconds, microseconds or nanoseconds, told apart by magnitude: for any time from 1973 to 5138 the four units
give values in four disjoint ranges, so the median value names the unit. Text is read as pandas reads it (ISO 8601
with or without a zone; a time without a zone is UTC).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

# (upper bound of the median |value|, unit): epoch seconds stay below 1e11 until the year 5138, milliseconds below
# 1e14, microseconds below 1e17; nanoseconds above
EPOCH_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"))
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}


class TimeFormatError(ValueError):
    """A `time` column that is not a time (the message says why; the caller names the file)."""


def epoch_unit(values: np.ndarray) -> str:
    """The unit of epoch numbers, from the magnitude of their median."""
    mag = float(np.median(np.abs(values)))
    return next((u for bound, u in EPOCH_UNITS if mag < bound), "ns")


def _unreadable(col: pd.Series, exc: Exception) -> str:
    """Why a text `time` column is no time, in one line naming the first value that is none and its row. pandas'
    own message ran to four lines of advice about its `format` argument and named no row."""
    parsed = pd.to_datetime(col, utc=True, errors="coerce", format="mixed")
    bad = np.flatnonzero(parsed.isna().to_numpy() & col.notna().to_numpy())
    if bad.size == 0:  # each value reads alone, not together (a column of times in several zones' formats)
        return f"column 'time' is not a timestamp: {str(exc).splitlines()[0]}"
    i = int(bad[0])
    return (f"column 'time', data row {i + 1}: {str(col.iloc[i])[:40]!r} is not a time (ISO 8601, e.g. "
            "2026-01-04T13:30:00Z, or epoch seconds, milliseconds, microseconds or nanoseconds)")


def parse_times(col: pd.Series) -> tuple[pd.Series, str | None]:
    """`time` as UTC timestamps, and the epoch unit its numbers were read in (None for text).

    A column of numbers (or of text that is all numbers, as a parquet file may hold them) is epoch time in the unit
    its magnitude names; anything else is read as pandas reads times. Refused (TimeFormatError): no value, a
    negative epoch number, a value that is no time."""
    if pd.api.types.is_bool_dtype(col):
        raise TimeFormatError("column 'time' holds true/false, not times")
    nums = col if pd.api.types.is_numeric_dtype(col) else pd.to_numeric(col, errors="coerce")
    numeric = pd.api.types.is_numeric_dtype(col) or ((nums.notna() == col.notna()).all() and col.notna().any())
    if not numeric:
        # pandas warns (two lines on stderr) when it cannot infer one format: the refusal below says it in one
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            try:
                return pd.to_datetime(col, utc=True), None
            except (ValueError, TypeError, OverflowError) as exc:
                raise TimeFormatError(_unreadable(col, exc)) from None
    v = nums.to_numpy(dtype=float)
    finite = v[np.isfinite(v)]
    if finite.size == 0:
        raise TimeFormatError("column 'time' has no value")
    if (finite < 0).any():
        raise TimeFormatError(f"column 'time' has a negative number ({finite[finite < 0][0]:g}): epoch times "
                              "(seconds, milliseconds, microseconds or nanoseconds since 1970) are positive")
    unit = epoch_unit(finite)
    try:
        return pd.to_datetime(nums, unit=unit, utc=True), unit
    except (ValueError, OverflowError) as exc:
        raise TimeFormatError(f"column 'time' read as epoch {UNIT_NAMES[unit]}: {exc}") from None


def spacing_problem(times: pd.DatetimeIndex, step_s: int) -> str | None:
    """What is wrong with the spacing of sorted, distinct `times` for a series on `step_s` steps, in words the user
    can act on; None when the samples divide the step. The median gap is the file's own spacing: a few missing
    samples do not change it."""
    if len(times) < 2:
        return None
    native = float(np.median(pd.Series(times).diff().dt.total_seconds().to_numpy()[1:]))
    if native < 1:
        return (f"samples are {native:g} s apart, less than a second: if 'time' holds epoch numbers, they are "
                "read by magnitude as seconds, milliseconds, microseconds or nanoseconds since 1970 "
                "(docs/own-cluster.md, the time formats)")
    if step_s % native and native % step_s:
        return (f"samples are {native:g} s apart, which does not divide evenly into the {step_s} s step "
                "(cycle.resolution_s)")
    if native > step_s:  # each sample would fill one step in native // step_s and leave the others missing
        n = int(native)
        season = f" (and [forecaster] season_steps = {86400 // n} for a daily season)" if 86400 % n == 0 else ""
        return (f"samples are {n} s apart but the step is {step_s} s (cycle.resolution_s): set [cycle] "
                f"resolution_s = {n}{season} to read this file at its own step, or give samples {step_s} s apart "
                "or closer")
    return None


def zone_missing(col: pd.Series) -> str | None:
    """The first value of a text `time` column when it names no zone (read as UTC, as the docs say), else None. A
    newcomer's export in local time was read as UTC without a word: its daily peaks, the replayed window and the
    windows proposed from it came out shifted by the offset."""
    first = col.dropna()
    if first.empty or pd.api.types.is_numeric_dtype(col):
        return None
    v = str(first.iloc[0]).strip()
    try:
        return v if pd.Timestamp(v).tzinfo is None else None
    except (ValueError, TypeError, OverflowError):
        return None
