"""Training the global quantile LSTM: seeded, early-stopped on a time-ordered validation split."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from forecaster.lstm import LSTMSpec, QuantileLSTM, make_windows, pinball
from forecaster.metrics import PEAK_MIN_OBSERVED, realised_peaks
from forecaster.progress import Progress
from forecaster.series import calendar_features


@dataclass
class TrainResult:
    model: QuantileLSTM
    epochs_run: int
    best_val_loss: float
    seconds: float
    curve: list[dict] = field(default_factory=list)


def _targets(values: np.ndarray, origins: np.ndarray, tenants: np.ndarray, h: int, scale: np.ndarray) -> np.ndarray:
    idx = origins[:, None] + 1 + np.arange(h)[None, :]
    return (values[idx, tenants[:, None]] / scale[:, None]).astype(np.float32)


def _peak_targets(y: np.ndarray, spec: LSTMSpec) -> np.ndarray:
    """[B, K] the realised peak over each peak window (scaled), NaN where too little of it was seen: a missing
    step is never a zero, as in scoring (`forecaster.metrics.realised_peaks`)."""
    ks = [max(1, min(int(k), spec.horizon)) for k in spec.peak_windows]
    return np.stack([realised_peaks(y, k, PEAK_MIN_OBSERVED) for k in ks], axis=1).astype(np.float32)


def _batch(values, cal, origins, tenants, spec, weight_by_scale: bool = False):
    x, lag, cal0, last, scale = make_windows(values, cal, origins, tenants, spec)
    y = _targets(values, origins, tenants, spec.horizon, scale)
    w = scale / max(float(scale.mean()), 1e-9) if weight_by_scale else np.ones_like(scale)
    yp = _peak_targets(y, spec) if spec.peak_windows else np.zeros((len(y), 0), dtype=np.float32)
    return [torch.from_numpy(a) for a in (x, lag, cal0, last, y, w.astype(np.float32), yp)]


def _loss(model: QuantileLSTM, batch, qs: torch.Tensor, peak_weight: float) -> torch.Tensor:
    """Pinball loss over every step, plus `peak_weight` x the pinball loss of the peak head against the realised
    peaks over the lead windows (when the model has one)."""
    x, lag, cal0, last, y, w, yp = batch
    steps, peaks = model.forward_all(x, lag, cal0, last)
    loss = pinball(steps, y, qs, w)
    if peaks is not None and peak_weight > 0:
        loss = loss + peak_weight * pinball(peaks, yp, qs, w)
    return loss


def valid_origins(n_steps: int, spec: LSTMSpec) -> tuple[int, int]:
    """First and last origin that have full context, a season of lag and a full horizon of targets."""
    return max(spec.season - 1, spec.context - 1), n_steps - 1 - spec.horizon


def train(frame: pd.DataFrame, spec: LSTMSpec, *, epochs: int = 8, batch_size: int = 256,
          samples_per_epoch: int = 16384, lr: float = 3e-3, seed: int = 0, val_share: float = 0.2,
          patience: int = 2, progress: bool = True, val_samples: int = 4096, weight_by_scale: bool = False,
          zero_init: bool = False, peak_weight: float = 1.0) -> TrainResult:
    """Fit on the first (1 - val_share) of the time axis, stop early on the rest.

    `weight_by_scale` weighs each window's loss by its series' scale, so training ranks errors as the
    weighted quantile loss does (a big tenant's miss counts more than a small one's). `zero_init` starts
    the head's last layer at zero: the untrained model's median is then exactly its anchor (the last
    value, or the season-ago value), so training starts from that baseline instead of from noise.
    `peak_weight`: with `spec.peak_windows`, the weight of the peak head's loss (the realised peak over each lead
    window) next to the per-step loss; early stopping watches the same sum.
    """
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    values = frame.to_numpy(dtype=float)
    n_steps, n_ten = values.shape
    cal = calendar_features(frame.index)
    lo, hi = valid_origins(n_steps, spec)
    split = lo + int((hi - lo) * (1 - val_share))
    if split - lo < 10 or hi - split < 1:
        raise ValueError(f"not enough history to train: {n_steps} steps for season {spec.season}, "
                         f"context {spec.context}, horizon {spec.horizon}")
    model = QuantileLSTM(spec)
    if zero_init:
        last_layer = model.head[-1]
        torch.nn.init.zeros_(last_layer.weight)
        torch.nn.init.zeros_(last_layer.bias)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    qs = torch.tensor(spec.quantiles, dtype=torch.float32)
    vo = rng.integers(split, hi + 1, val_samples)
    vt = rng.integers(0, n_ten, val_samples)
    val = _batch(values, cal, vo, vt, spec, weight_by_scale)
    best = float("inf")
    best_state = None
    bad = 0
    curve = []
    run = 0
    steps_per_epoch = max(1, samples_per_epoch // batch_size)
    # one named phase over every epoch's batches (early stopping ends it before its total): a bar on a terminal,
    # plain lines with the ETA elsewhere (forecaster.progress), and one line per epoch with its losses
    bar = Progress("training the LSTM", epochs * steps_per_epoch, unit="batches", enabled=progress)
    try:
        for epoch in range(epochs):
            model.train()
            total = 0.0
            bar.set_phase(f"epoch {epoch + 1}/{epochs}")
            for _ in range(steps_per_epoch):
                o = rng.integers(lo, split - spec.horizon + 1, batch_size)
                t = rng.integers(0, n_ten, batch_size)
                batch = _batch(values, cal, o, t, spec, weight_by_scale)
                opt.zero_grad()
                loss = _loss(model, batch, qs, peak_weight)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                total += loss.item()
                bar.update(1)
            model.eval()
            with torch.no_grad():
                vl = float(_loss(model, val, qs, peak_weight))
            run = epoch + 1
            curve.append({"epoch": run, "train_loss": total / steps_per_epoch, "val_loss": vl})
            bar.note(f"epoch {run}: train {total / steps_per_epoch:.4f} val {vl:.4f}")
            if vl < best - 1e-5:
                best, bad = vl, 0
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            else:
                bad += 1
                if bad >= patience:
                    break
    finally:
        bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return TrainResult(model, run, best, time.perf_counter() - t0, curve)
