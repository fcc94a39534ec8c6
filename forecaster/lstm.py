"""A global quantile LSTM: one small network for every tenant's series.

Why global: 1,000 tenants each with a few days of data is too little for
per-tenant models, but plenty for one shared model once every series is put on
the same scale (divided by its own recent mean). The encoder reads the last
`context` steps; the head also sees what happened one season ago over the
horizon (the seasonal-naive forecast), so the network only has to learn how
today differs from yesterday, and it emits every quantile at once with
non-crossing outputs (a base plus cumulative softplus increments).

What the policy acts on is each tenant's peak over its lead windows at a quantile, and the largest of the
per-step quantiles over a window is not the peak's quantile (it is at most that, and well under it where a
rise's timing is uncertain). With `peak_windows` the network also has a direct head for the quantiles of the
peak over the next k steps, for each k there: it starts at the largest per-step quantile over the window (its
last layer is zero at first) and learns the correction from the realised peaks (`train`'s peak loss); the
forecast carries it (`Forecast.peaks`) and the policy reads it through `Forecast.peak_over`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from forecaster.series import calendar_features, ffill
from forecaster.types import Forecast

N_CAL = 4
MIX_GAIN = 10.0


@dataclass(frozen=True)
class LSTMSpec:
    context: int = 60
    horizon: int = 60
    season: int = 1440
    hidden: int = 64
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    step_s: int = 60
    scale_floor: float = 1.0  # a series is divided by max(its last season's mean, this); small for rates < 1
    anchor: str = "seasonal"  # the median is a correction of the season-ago value, or ("last") of the last value
    # non-empty: the median is a correction of a learned mix of anchors instead: the last value, the means of the
    # last k steps for each k here, and the season-ago value (weights per horizon step, shifted per window)
    anchors: tuple[int, ...] = ()
    # non-empty: a direct quantile head for the peak over the next k steps, for each k here (the policy's lead
    # windows), trained on realised peaks
    peak_windows: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["quantiles"] = list(self.quantiles)
        d["anchors"] = list(self.anchors)
        d["peak_windows"] = list(self.peak_windows)
        return d

    @staticmethod
    def from_dict(d: dict) -> "LSTMSpec":
        d = dict(d)
        d["quantiles"] = tuple(d["quantiles"])
        d["anchors"] = tuple(d.get("anchors", ()))  # models saved before anchors existed have none
        d["peak_windows"] = tuple(d.get("peak_windows", ()))  # nor a peak head, before it existed
        return LSTMSpec(**d)


class QuantileLSTM(nn.Module):
    def __init__(self, spec: LSTMSpec) -> None:
        super().__init__()
        self.spec = spec
        q = len(spec.quantiles)
        self.encoder = nn.LSTM(input_size=2 + N_CAL, hidden_size=spec.hidden, batch_first=True)
        head_in = spec.hidden + spec.horizon + N_CAL + 1
        self.windows = tuple(min(int(k), spec.context) for k in spec.anchors)
        if self.windows:
            # last value, the window means, the season-ago value, the last value moved as it moved a season ago
            k = len(self.windows) + 3
            head_in += len(self.windows) + 1
            # which anchor to trust, per horizon step (starts leaning on the last value), plus a per-window shift
            # of those weights from what the network read (starts at zero)
            # (kept at a tenth of the logits so Adam moves them ten times faster than the network's weights)
            self.mix = nn.Parameter(torch.zeros(spec.horizon, k))
            with torch.no_grad():
                self.mix[:, 0] = 2.0 / MIX_GAIN
            self.mix_head = nn.Linear(head_in, spec.horizon * k)
            nn.init.zeros_(self.mix_head.weight)
            nn.init.zeros_(self.mix_head.bias)
        self.head = nn.Sequential(nn.Linear(head_in, 2 * spec.hidden), nn.ReLU(),
                                  nn.Linear(2 * spec.hidden, spec.horizon * q))
        self.peak_windows = tuple(max(1, min(int(k), spec.horizon)) for k in spec.peak_windows)
        if self.peak_windows:
            # per window and quantile: a correction of the largest per-step quantile over the window; zero at first
            self.peak_head = nn.Sequential(nn.Linear(head_in, spec.hidden), nn.ReLU(),
                                           nn.Linear(spec.hidden, len(self.peak_windows) * q))
            nn.init.zeros_(self.peak_head[-1].weight)
            nn.init.zeros_(self.peak_head[-1].bias)

    def forward(self, x: torch.Tensor, lag: torch.Tensor, cal0: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """x [B, L, 2+cal], lag [B, H] (scaled season-ago values; [B, 1 + H] with anchors, the origin's first),
        cal0 [B, cal], last [B, 1] -> [B, H, Q]."""
        return self.forward_all(x, lag, cal0, last)[0]

    def forward_all(self, x: torch.Tensor, lag: torch.Tensor, cal0: torch.Tensor,
                    last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The per-step quantiles [B, H, Q] and, with peak windows, the peak quantiles [B, K, Q] (else None).

        A window's peak starts from the largest per-step quantile over it, detached: the peak loss trains the
        peak head (and the shared encoder), not the per-step quantiles, which keep their own calibration."""
        _, (h, _) = self.encoder(x)
        if self.windows:
            lag0, lag = lag[:, :1], lag[:, 1:]
            v = x[:, :, 0]
            means = torch.stack([v[:, -k:].mean(dim=1) for k in self.windows], dim=1)  # [B, K]
            z = torch.cat([h[-1], lag, cal0, last, means, lag0], dim=1)
            cands = torch.cat([last.expand_as(lag).unsqueeze(2), means.unsqueeze(1).expand(-1, lag.shape[1], -1),
                               lag.unsqueeze(2), (last + lag - lag0).unsqueeze(2)], dim=2)  # [B, H, K + 3]
            w = torch.softmax(MIX_GAIN * self.mix + self.mix_head(z).view(cands.shape), dim=2)
            anchor = (w * cands).sum(dim=2)
        else:
            z = torch.cat([h[-1], lag, cal0, last], dim=1)
            anchor = last.expand_as(lag) if self.spec.anchor == "last" else lag
        out = self.head(z).view(-1, self.spec.horizon, len(self.spec.quantiles))
        base = anchor + out[:, :, 0]  # median as a correction of the seasonal-naive (or last) value
        rest = torch.nn.functional.softplus(out[:, :, 1:]).cumsum(dim=2)
        steps = torch.cat([base.unsqueeze(2), base.unsqueeze(2) + rest], dim=2)
        if not self.peak_windows:
            return steps, None
        top = steps.detach()
        start = torch.stack([top[:, :k, :].amax(dim=1) for k in self.peak_windows], dim=1)   # [B, K, Q]
        peaks = start + self.peak_head(z).view(start.shape)
        return steps, torch.cummax(peaks, dim=2).values   # quantiles kept ordered


def pinball(pred: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor,
            weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean pinball loss over quantiles, ignoring NaN targets (missing data carries no signal).

    `weight` [B] weighs each window (e.g. by its series' scale, so the loss ranks errors as the weighted
    quantile loss does: in the series' own units, not relative to its size).
    """
    mask = ~torch.isnan(target)
    t = torch.nan_to_num(target).unsqueeze(2)
    diff = t - pred
    loss = torch.maximum(quantiles * diff, (quantiles - 1) * diff)
    m = mask.to(pred.dtype)
    if weight is not None:
        m = m * weight[:, None]
    loss = loss * m.unsqueeze(2)
    return loss.sum() / (m.sum() * pred.shape[2]).clamp(min=1e-9)


def _ffill_rows(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along rows; leading NaN take the row's first value (0 if none)."""
    out = ffill(a)
    miss = np.isnan(a)
    first = np.argmax(~miss, axis=1)
    first_val = np.where((~miss).any(axis=1), a[np.arange(a.shape[0]), first], 0.0)
    return np.where(np.isnan(out), first_val[:, None], out)


SCALE_CHUNK = 1024   # (origin, tenant) pairs per block of season means: a block of 1024 x 1440 floats stays in cache


def season_means(values: np.ndarray, origins: np.ndarray, tenants: np.ndarray, season: int,
                 chunk: int | None = None) -> np.ndarray:
    """[B] the nan-mean of values[o - season + 1 .. o, t] for each (origin o, tenant t) pair, steps before the first
    clipped to the first (NaN where all are NaN): the scale `make_windows` divides a series by.

    Why not one fancy index: that built two [B, season] index arrays and a [B, season] gather, 115 MB each for
    10,000 tenants a cycle, read column-wise out of a [T, N] array; their page faults and cache misses made the
    LSTM forecast grow 34x for 10x tenants (make_windows 18 ms at 1,000 tenants, 1.5 s at 10,000). Here the
    windows are strided views (no index arrays) gathered a block of pairs at a time, each block's mean taken while
    it is in cache; every row is the same numbers in the same order as before, so the means are bit-identical."""
    b = len(origins)
    chunk = chunk or SCALE_CHUNK
    out = np.empty(b)
    if b == 0:
        return out
    origins = np.asarray(origins, dtype=np.int64)
    tenants = np.asarray(tenants, dtype=np.int64)
    start = origins - season + 1
    inside = start >= 0
    swv = np.lib.stride_tricks.sliding_window_view(values, season, axis=0) if values.shape[0] >= season else None
    with np.errstate(all="ignore"):
        for s in range(0, b, chunk):
            e = min(s + chunk, b)
            st, tt, ok = start[s:e], tenants[s:e], inside[s:e]
            if swv is not None and ok.all():
                block = swv[st, tt]                          # [pairs, season]: swv[w, n, k] = values[w + k, n]
            else:   # a window reaching before the first step: the old clipped index, for this block only
                idx = np.clip(st[:, None] + np.arange(season)[None, :], 0, None)
                block = values[idx, tt[:, None]]
            out[s:e] = np.nanmean(block, axis=1)
    return out


def make_windows(values: np.ndarray, cal: np.ndarray, origins: np.ndarray, tenants: np.ndarray,
                 spec: LSTMSpec) -> tuple[np.ndarray, ...]:
    """Model inputs for (origin, tenant) pairs; `values` is [T, N] with NaN for missing.

    The origin is the index of the last observed step. The scale is the mean of
    the season before the origin, so training and inference scale identically.
    """
    L, H, S = spec.context, spec.horizon, spec.season
    o = origins[:, None]
    ctx_idx = o - L + 1 + np.arange(L)[None, :]                   # [B, L]
    # with anchors, lag also carries the season-ago value of the origin itself first: [B, 1 + H]
    first = 0 if spec.anchors else 1
    lag_idx = o + first + np.arange(H + 1 - first)[None, :] - S     # [B, H] (or [B, 1 + H])
    lag_idx = np.where(lag_idx > o, lag_idx - S * ((lag_idx - o - 1) // S + 1), lag_idx)
    ti = tenants[:, None]
    ctx = values[ctx_idx, ti]
    scale = season_means(values, origins, tenants, S)
    floor = spec.scale_floor
    scale = np.where(np.isfinite(scale) & (scale > 0), np.maximum(scale, floor), max(floor, 1.0))
    ctx_s = ctx / scale[:, None]
    miss = np.isnan(ctx_s)
    # carry the last seen value through gaps inside the window; the flag tells the model it did
    ctx_f = _ffill_rows(ctx_s)
    last = ctx_f[:, -1:]
    lag = values[np.clip(lag_idx, 0, None), ti] / scale[:, None]
    lag = np.where(np.isnan(lag), last, lag)
    x = np.concatenate([ctx_f[:, :, None], miss[:, :, None].astype(np.float32), cal[ctx_idx]], axis=2)
    cal0 = cal[np.minimum(origins + 1, cal.shape[0] - 1)]
    return (x.astype(np.float32), lag.astype(np.float32), cal0.astype(np.float32), last.astype(np.float32),
            scale.astype(np.float32))


class LSTMForecaster:
    """Wraps a trained QuantileLSTM behind the Forecaster interface."""

    # `predict` runs the network on at most this many tenants at once. With one batch of 10,000 windows the
    # forecast grew worse than linearly with the tenants (x14 for x10 in the cycle bench; likely the LSTM's per-step
    # [B, 4*hidden] gate tensors falling out of cache); in chunks it is x7 (bench/out/cycle-10000.json against
    # cycle-1000.json). A batch up to this size runs as one, as before, so every smaller fleet's numbers are
    # unchanged; a larger one differs from a single batch only by float32 rounding (the matmul's blocking depends
    # on the batch size).
    predict_chunk: int = 2048

    def __init__(self, model: QuantileLSTM, version: str = "unversioned") -> None:
        self.model = model.eval()
        self.spec = model.spec
        self.version = version
        self.name = f"lstm:{version}"

    @property
    def min_history(self) -> int:
        return self.spec.season + 1

    def own_peaks(self) -> set[int]:
        return set(self.model.peak_windows)

    def can_batch_peaks(self, windows: tuple[int, ...]) -> bool:
        return True

    @torch.no_grad()
    def peaks_at(self, history: pd.DataFrame, ends: np.ndarray, horizon: int, windows: tuple[int, ...],
                 batch: int = 8192) -> np.ndarray:
        """[origin, tenant, window, Q]: the peak quantiles this model forecast from history[:e] for each e in
        `ends` (its own peak head where it has one for a window, else the largest per-step quantile), in batches
        of windows: what `predict` on each truncated history gives, without a call per origin. Computed once per
        request within a scoring run (forecaster/memo.py)."""
        from forecaster.memo import memo_peaks

        return memo_peaks(self, history, ends, horizon, windows,
                          lambda: self._peaks_at(history, ends, horizon, windows, batch))

    def _peaks_at(self, history: pd.DataFrame, ends: np.ndarray, horizon: int, windows: tuple[int, ...],
                  batch: int) -> np.ndarray:
        spec = self.spec
        values = history.to_numpy(dtype=float)
        ext_index = history.index.append(pd.date_range(history.index[-1] + pd.Timedelta(seconds=spec.step_s),
                                                       periods=spec.horizon, freq=pd.Timedelta(seconds=spec.step_s)))
        cal = calendar_features(ext_index)
        n = values.shape[1]
        ends = np.asarray(ends, dtype=np.int64)
        origins = np.repeat(ends - 1, n)
        tenants = np.tile(np.arange(n), len(ends))
        own = {k: i for i, k in enumerate(self.model.peak_windows)}
        out = np.empty((len(origins), len(windows), len(spec.quantiles)))
        for s in range(0, len(origins), batch):
            o, t = origins[s:s + batch], tenants[s:s + batch]
            x, lag, cal0, last, scale = make_windows(values, cal, o, t, spec)
            steps, pk = self.model.forward_all(torch.from_numpy(x), torch.from_numpy(lag), torch.from_numpy(cal0),
                                               torch.from_numpy(last))
            steps = steps.numpy()[:, :horizon, :]
            for j, k in enumerate(windows):
                p = pk.numpy()[:, own[k], :] if pk is not None and k in own else steps[:, :k, :].max(axis=1)
                out[s:s + batch, j] = np.maximum(p * scale[:, None], 0.0)
        out = out.reshape(len(ends), n, len(windows), len(spec.quantiles))
        # as `predict`: a tenant with no sample in the context before an origin has no forecast from it
        ctx = ends[:, None] - spec.context + np.arange(spec.context)[None, :]
        dead = np.isnan(values[np.clip(ctx, 0, None)]).all(axis=1)                         # [O, N]
        out[dead] = np.nan
        return out

    def _forward(self, x: torch.Tensor, lag: torch.Tensor, cal0: torch.Tensor,
                 last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward_all` on the whole batch, in chunks of `predict_chunk` rows when it is larger (see there)."""
        b, c = x.shape[0], max(1, int(self.predict_chunk))
        if b <= c:
            return self.model.forward_all(x, lag, cal0, last)
        parts = [self.model.forward_all(x[i:i + c], lag[i:i + c], cal0[i:i + c], last[i:i + c])
                 for i in range(0, b, c)]
        steps = torch.cat([p[0] for p in parts])
        peaks = torch.cat([p[1] for p in parts]) if parts[0][1] is not None else None
        return steps, peaks

    @torch.no_grad()
    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        spec = self.spec
        if horizon > spec.horizon:
            raise ValueError(f"model forecasts {spec.horizon} steps, {horizon} asked")
        if len(history) < self.min_history:
            raise ValueError(f"need {self.min_history} steps of history, got {len(history)}")
        step = int((history.index[1] - history.index[0]).total_seconds())
        if step != spec.step_s:
            raise ValueError(f"model trained at {spec.step_s}s steps, history is at {step}s")
        values = history.to_numpy(dtype=float)
        ext_index = history.index.append(pd.date_range(history.index[-1] + pd.Timedelta(seconds=step),
                                                       periods=spec.horizon, freq=pd.Timedelta(seconds=step)))
        cal = calendar_features(ext_index)
        n = values.shape[1]
        origins = np.full(n, values.shape[0] - 1)
        x, lag, cal0, last, scale = make_windows(values, cal, origins, np.arange(n), spec)
        out, pk = self._forward(torch.from_numpy(x), torch.from_numpy(lag), torch.from_numpy(cal0),
                                torch.from_numpy(last))
        vals = out.numpy()[:, :horizon, :] * scale[:, None, None]
        vals = np.maximum(vals, 0.0)
        # a tenant with no recent sample at all gets no forecast, not a made-up one
        dead = np.isnan(values[-spec.context:]).all(axis=0)
        vals[dead] = np.nan
        peaks = None
        if pk is not None:
            p = np.maximum(pk.numpy() * scale[:, None, None], 0.0).astype(float)
            p[dead] = np.nan
            peaks = {k: p[:, i, :] for i, k in enumerate(self.model.peak_windows) if k <= horizon}
        return Forecast(tuple(map(str, history.columns)), spec.quantiles, vals.astype(float), history.index[-1],
                        step, self.name, peaks=peaks or None)


# The conformal recalibration works on any forecaster (baselines and blends too) and lives with the other
# spread code; `Conformal` is its historical name here.
from forecaster.calibration import Recalibrated as Conformal  # noqa: E402,F401
