"""Synthetic per-tenant GPU demand: diurnal and weekly cycles, a 14:00 peak for some tenants, bursts, noise.

Deterministic for a seed so tests, the default model and the benchmarks can be reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from daemon.config import Tier


@dataclass(frozen=True)
class SyntheticWorkload:
    demand: pd.DataFrame        # time x tenant, GPUs wanted
    tiers: tuple[Tier, ...]
    job_gpus: np.ndarray        # GPUs per job for each tenant


def tenant_tiers(n: int, high_share: float, low_share: float, rng: np.random.Generator) -> tuple[Tier, ...]:
    n_high = int(round(n * high_share))
    if high_share > 0 and n_high == 0:
        n_high = 1
    rest = n - n_high
    n_low = int(round(rest * low_share))
    tiers: list[Tier] = ["high"] * n_high + ["low"] * n_low + ["normal"] * (rest - n_low)
    return tuple(tiers)


def generate(n_tenants: int, steps: int, capacity: int, *, seed: int = 42, step_s: int = 60,
             high_share: float = 0.1, low_share: float = 0.5, target_load: float = 0.85,
             peak_share: float = 0.3, start: str = "2026-01-05T00:00:00Z") -> SyntheticWorkload:
    rng = np.random.default_rng(seed)
    tiers = tenant_tiers(n_tenants, high_share, low_share, rng)
    n = n_tenants
    t = np.arange(steps)
    idx = pd.date_range(pd.Timestamp(start), periods=steps, freq=pd.Timedelta(seconds=step_s), name="time")
    minute = (idx.hour.to_numpy() * 60 + idx.minute.to_numpy()).astype(float)
    dow = idx.day_of_week.to_numpy()
    # tenant sizes: heavy-tailed, like real clusters
    size = rng.lognormal(0.0, 1.0, n)
    is_high = np.array([x == "high" for x in tiers])
    size[is_high] *= 2.0
    amp = rng.uniform(0.2, 0.6, n)
    phase = rng.uniform(9 * 60, 16 * 60, n)  # daily maximum between 09:00 and 16:00
    diurnal = 1 + amp[:, None] * np.cos(2 * np.pi * (minute[None, :] - phase[:, None]) / 1440.0)
    weekend = np.where(dow >= 5, 1 - rng.uniform(0.1, 0.4, n)[:, None], 1.0)
    # the 14:00 peak: mostly high-tier inference/training launches, some normal tenants too
    p_peak = np.where(is_high, max(peak_share, 0.6), peak_share)
    has_peak = rng.uniform(size=n) < p_peak
    width = rng.uniform(20, 45, n)
    height = rng.uniform(1.0, 2.5, n) * has_peak
    bump = height[:, None] * np.exp(-0.5 * ((minute[None, :] - 14 * 60) / width[:, None]) ** 2)
    # bursts: a few per day, sharp rise, exponential decay
    bursts = np.zeros((n, steps))
    rate = 3.0 / 1440.0
    for i in range(n):
        onsets = np.flatnonzero(rng.uniform(size=steps) < rate)
        for o in onsets:
            dur = np.arange(steps - o)
            bursts[i, o:] += rng.uniform(0.3, 1.2) * np.exp(-dur / rng.uniform(10, 60))
    # AR(1) noise
    noise = np.zeros((n, steps))
    eps = rng.normal(0, 0.05, (n, steps))
    for k in range(1, steps):
        noise[:, k] = 0.9 * noise[:, k - 1] + eps[:, k]
    shape = np.maximum(diurnal * weekend + bump + bursts + noise, 0.0)
    mean_total = (size[:, None] * shape).sum(axis=0).mean()
    scale = target_load * capacity / max(mean_total, 1e-9)
    demand = np.round(size[:, None] * shape * scale)
    job = np.clip(np.round(size * scale / 4), 1, 8).astype(np.int64)
    job = np.array([int(2 ** np.floor(np.log2(j))) for j in job], dtype=np.int64)
    names = [f"tenant-{i:04d}" for i in range(n)]
    frame = pd.DataFrame(demand.T, index=idx, columns=pd.Index(names, name="tenant"))
    del t
    return SyntheticWorkload(frame, tiers, job)
