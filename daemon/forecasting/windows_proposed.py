"""Recurring windows proposed from history (issue 39, item 2): a tenant whose demand peaks at the same time of day,
day after day, is a window an operator may declare; this finds such peaks and says why.

Per tenant series (per GPU type on a mixed fleet: the history's ``tenant@types`` columns), the demand is averaged
into 15-minute bins and decomposed with statsmodels: MSTL on the daily and weekly seasons where there are two weeks
of history, STL on the daily season where there is less. The daily seasonal profile, less its own 6-hour rolling
median (a broad diurnal swing is not a peak: a window holds for a burst, the forecast follows the swing), gives the
peak's time of day and extent. It is proposed only when it is not noise (``SIGNIFICANCE``):

- the daily season's strength, 1 - var(remainder) / var(daily season + remainder) (Hyndman's F_s), is at least
  ``min_strength``;
- the profile's peak is at least ``noise_sds`` (2) standard deviations of the decomposition's remainder (and at
  least one GPU): a bump no larger than the series' own swings is not a recurring peak;
- on at least ``min_days`` of the last ``days`` days the peak came: that day's mean demand in the window exceeds
  its mean over the ``PRE_H`` hours before by at least half the profile's peak and at least one GPU.

The window's GPUs are the ``quantile`` (0.9) of the days' largest demand inside it, over the days the peak came;
its recurrence is weekdays when the peak came on the weekdays and never on a weekend day the history holds, else
daily; its time of day is in the time zone asked for. Pure: no clock, no I/O; the replayed evidence (unmet with and
without, GPU-minutes held idle) is daemon/sim/windows_evidence.py.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from daemon.config import Config

DAYS, MIN_DAYS = 7, 5         # the proposals' look-back: a peak on MIN_DAYS of the last DAYS days
BIN = pd.Timedelta(minutes=15)
PER_DAY = 96                  # 15-minute bins a day
PRE_H = 2.0                   # hours before the window a day's peak is measured against
SIGNIFICANCE = ("the daily season's strength >= {min_strength:g}, the peak >= {noise_sds:g} standard deviations "
                "of the remainder, and on >= {min_days} of the last {days} days (the window's mean above the "
                "{pre:g} h before by >= half the peak and >= 1 GPU)")


@dataclass(frozen=True)
class Proposal:
    """One proposed window and its evidence (``to_window`` is what accepting it declares)."""

    name: str
    tenant: str
    gpu_type: str | None          # the GPU type on a mixed fleet (the series' types, the first); None: one model
    gpus: int
    every: str                    # "daily" or "weekdays"
    at: str                       # HH:MM in `timezone`
    timezone: str
    duration_minutes: float
    reclaim_before_minutes: float
    days_seen: int                # days of the last `days_checked` the peak came
    days_checked: int
    peak_gpus: float              # the profile's peak above its 6-hour median (GPUs)
    strength: float               # the daily season's strength F_s
    method: str                   # "MSTL(daily, weekly)" or "STL(daily)"
    evidence: dict = field(default_factory=dict)   # the replay's (daemon/sim/windows_evidence.py), when run

    def to_window(self) -> dict:
        """The window as the config / API takes it (daemon/config/windows.py WindowConfig)."""
        gpus: int | dict[str, int] = {self.gpu_type: self.gpus} if self.gpu_type else self.gpus
        return {"name": self.name, "tenant": self.tenant, "gpus": gpus, "every": self.every, "at": self.at,
                "timezone": self.timezone, "duration_minutes": self.duration_minutes,
                "reclaim_before_minutes": self.reclaim_before_minutes, "borrowable_before": True}

    def as_dict(self) -> dict:
        return {**asdict(self), "window": self.to_window()}


def store_steps(cfg: Config) -> int:
    """Steps of history the proposals read whole: DAYS days and, before them, the season the evidence's replay
    starts from (8 days at the defaults). The embedded simulator's history store keeps at least this many
    (daemon/service/wiring.py), so it lives here, beside the look-back it follows, not in the web layer."""
    return DAYS * 86400 // cfg.cycle.resolution_s + cfg.forecaster.season_steps


def split_series(name: str) -> tuple[str, str | None]:
    """A history column as (tenant, GPU type): ``team@a100|t4`` is team on a100 (its first accepted type). The last
    "@" splits, as daemon/policy/fleet.split_series reads a series: type names never hold one."""
    tenant, sep, types = name.rpartition("@")
    return (tenant, types.split("|")[0] or None) if sep else (name, None)


def _bins(s: pd.Series) -> pd.Series:
    """The series as 15-minute means on a UTC index; bins with no sample stay NaN (missing is not zero)."""
    idx = pd.DatetimeIndex(s.index)
    if idx.tz is None:
        idx = idx.tz_localize("UTC")
    return pd.Series(s.to_numpy(dtype=float), index=idx).resample(BIN).mean()


def daily_profile(x: pd.Series) -> tuple[np.ndarray, float, float, str]:
    """(the daily seasonal profile over the bins of a day, the daily season's strength, the remainder's standard
    deviation, the method). `x`: 15-minute
    bins, gaps filled. MSTL with the weekly season where two weeks are there, else STL on the day."""
    from statsmodels.tsa.seasonal import MSTL, STL

    v = x.to_numpy(dtype=float)
    if len(v) >= 2 * 7 * PER_DAY:
        res = MSTL(v, periods=(PER_DAY, 7 * PER_DAY)).fit()
        seas = np.asarray(res.seasonal)[:, 0]
        method = "MSTL(daily, weekly)"
    else:
        res = STL(v, period=PER_DAY).fit()
        seas = np.asarray(res.seasonal)
        method = "STL(daily)"
    resid = np.asarray(res.resid)
    var_sr = float(np.var(seas + resid))
    strength = max(0.0, 1.0 - float(np.var(resid)) / var_sr) if var_sr > 0 else 0.0
    # the profile by time of day (the first bin of the history need not be midnight)
    pos = ((x.index - x.index.normalize()) // BIN).to_numpy() % PER_DAY
    prof = np.bincount(pos, weights=seas, minlength=PER_DAY) / np.maximum(np.bincount(pos, minlength=PER_DAY), 1)
    return prof, strength, float(np.std(resid)), method


def _sharp(prof: np.ndarray, span_bins: int = 24) -> np.ndarray:
    """The profile less its circular rolling median over `span_bins` (6 h): what rises above the diurnal swing."""
    wrapped = np.concatenate([prof[-span_bins:], prof, prof[:span_bins]])
    med = pd.Series(wrapped).rolling(span_bins + 1, center=True).median().to_numpy()[span_bins:-span_bins]
    return prof - med


def propose_series(s: pd.Series, name: str, *, timezone: str = "UTC", days: int = 7, min_days: int = 5,
                   min_strength: float = 0.2, noise_sds: float = 2.0, quantile: float = 0.9,
                   reclaim_before_minutes: float = 30.0) -> Proposal | None:
    """The window proposed for one tenant series (None: no recurring peak that passes ``SIGNIFICANCE``). `s`: GPUs
    wanted over time (any step up to 15 min; a naive index is UTC); at least `days` whole days are needed."""
    x = _bins(s)
    if x.notna().sum() < days * PER_DAY * 0.8 or len(x) < 2 * PER_DAY:
        return None
    filled = x.interpolate(limit_direction="both")
    prof, strength, noise, method = daily_profile(filled)
    if strength < min_strength:
        return None
    sharp = _sharp(prof)
    top = int(np.argmax(sharp))
    peak = float(sharp[top])
    if not peak >= max(noise_sds * noise, 1.0):   # a bump the size of the remainder's swings is noise
        return None
    # the extent: the bins around the top above half the peak (at least 30 min)
    lo = hi = top
    while (lo - 1) % PER_DAY != top and sharp[(lo - 1) % PER_DAY] > peak / 2 and hi - lo < PER_DAY // 4:
        lo -= 1
    while (hi + 1) % PER_DAY != top and sharp[(hi + 1) % PER_DAY] > peak / 2 and hi - lo < PER_DAY // 4:
        hi += 1
    n_bins = max(hi - lo + 1, 2)
    # each of the last `days` days: did the peak come, and how large was the demand inside the window
    pre = int(PRE_H * 4)
    first, last = x.index[0], x.index[-1] + BIN
    starts = [d + lo * BIN for d in pd.date_range(first.normalize() - pd.Timedelta(days=1), last.normalize(),
                                                  freq="D")]
    starts = [t for t in starts if t - pre * BIN >= first and t + n_bins * BIN <= last][-days:]
    seen, sizes, seen_days, checked = 0, [], [], 0
    for start in starts:
        win = x[start: start + (n_bins - 1) * BIN]
        before = x[start - pre * BIN: start - BIN]
        if win.notna().sum() < n_bins / 2 or before.notna().sum() < pre / 2:
            continue
        checked += 1
        excess = float(win.mean() - before.mean())
        if excess >= max(peak / 2, 1.0):
            seen += 1
            seen_days.append(start)
            raw = s[(s.index >= _naive_like(s, start)) & (s.index < _naive_like(s, start + n_bins * BIN))]
            sizes.append(float(raw.max()))
    if seen < min_days:
        return None
    tz = ZoneInfo(timezone)
    local = (x.index[0].normalize() + lo * BIN).to_pydatetime().astimezone(tz)
    weekend_days = [t for t in starts if t.tz_convert(tz).day_of_week >= 5]
    on_weekend = [t for t in seen_days if t.tz_convert(tz).day_of_week >= 5]
    every = "weekdays" if weekend_days and not on_weekend else "daily"
    tenant, gpu_type = split_series(name)
    gpus = int(math.ceil(np.quantile(sizes, quantile)))
    pname = _window_name(tenant, gpu_type, local)
    return Proposal(pname, tenant, gpu_type, gpus, every, f"{local:%H:%M}", timezone, float(n_bins * 15),
                    reclaim_before_minutes, seen, checked, round(peak, 2), round(strength, 3), method)


def _naive_like(s: pd.Series, t: pd.Timestamp) -> pd.Timestamp:
    return t if pd.DatetimeIndex(s.index).tz is not None else t.tz_convert("UTC").tz_localize(None)


def _window_name(tenant: str, gpu_type: str | None, local: dt.datetime) -> str:
    import re

    base = re.sub(r"[^a-z0-9_-]", "-", tenant.lower()).strip("-_") or "tenant"
    base = base if base[0].isalnum() else "t" + base
    suffix = f"-{gpu_type}" if gpu_type else ""
    return f"{base}{suffix}-{local:%H%M}"[:40]


def propose(history: pd.DataFrame, *, timezone: str = "UTC", days: int = 7, min_days: int = 5,
            min_strength: float = 0.2, noise_sds: float = 2.0, quantile: float = 0.9,
            reclaim_before_minutes: float = 30.0, exclude: tuple[str, ...] = ()) -> list[Proposal]:
    """A proposal per tenant series of `history` (time x series, GPUs wanted) that has a recurring peak; series in
    `exclude` (tenants that already have a window) are skipped. Sorted by the peak's size, largest first."""
    out = []
    for col in history.columns:
        tenant, _ = split_series(str(col))
        if tenant in exclude:
            continue
        p = propose_series(history[col].dropna(), str(col), timezone=timezone, days=days, min_days=min_days,
                           min_strength=min_strength, noise_sds=noise_sds, quantile=quantile,
                           reclaim_before_minutes=reclaim_before_minutes)
        if p is not None:
            out.append(p)
    return sorted(out, key=lambda p: -p.gpus)
