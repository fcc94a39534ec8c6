"""Demand traces for the replay: the embedded synthetic cluster and the Alibaba GPU 2023 pod list."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daemon.replay.engine import Workload
from daemon.sources.synthetic import generate
from forecaster import traces


def synthetic(tenants: int = 40, gpus: int = 1024, days: float = 2.0, seed: int = 7, history_days: float = 2.0,
              target_load: float = 0.85, step_s: int = 60) -> Workload:
    """A fresh draw of the embedded simulator (seed 7: not the seed the shipped model was trained on)."""
    per_day = 86400 // step_s
    hist = int(history_days * per_day)
    steps = int(days * per_day)
    w = generate(tenants, hist + steps + 61, gpus, seed=seed, step_s=step_s, target_load=target_load)
    return Workload(f"synthetic-{tenants}x{gpus}", w.demand, w.tiers, w.job_gpus, gpus, hist)


def azure_shape(data_dir: Path, step_s: int = 60) -> np.ndarray:
    """Per-minute request-volume multiplier (mean 1) from the Azure LLM trace, tiled by the replay."""
    f = traces.azure_requests(data_dir, step_s=step_s)
    total = f.sum(axis=1).to_numpy()
    return total / total.mean()


def alibaba(data_dir: Path, days: float = 7.0, history_days: float = 3.0, capacity_quantile: float = 0.9) -> Workload:
    """GPU demand per minute for the trace's QoS classes (LS/Guaranteed ~ high, Burstable ~ normal, BE ~ low).

    The trace's concurrent demand is small next to its 6,212-GPU node list, so the replayed cluster is sized at
    the `capacity_quantile` of total demand over the window: contended at peaks, as the product assumes.
    """
    frame, tier_map = traces.alibaba_demand(data_dir, step_s=60, last_days=days + history_days)
    frame = np.ceil(frame)  # pods ask for whole or shared GPUs; a shared GPU still occupies one here
    tiers = tuple(tier_map[c] for c in frame.columns)
    hist = int(history_days * 1440)
    cap = int(np.ceil(np.quantile(frame.iloc[hist:].sum(axis=1), capacity_quantile)))
    w = Workload("alibaba-gpu-2023", frame, tiers, np.ones(frame.shape[1], dtype=np.int64), cap, hist)
    return w
