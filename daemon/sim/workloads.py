"""Demand for the simulator: the synthetic generator (deterministic per seed) and the replay's workloads
(the embedded synthetic cluster and the Alibaba GPU 2023 pod list).

Synthetic per-tenant GPU demand: diurnal and weekly cycles, a 14:00 peak for some tenants, bursts, noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from daemon.config import Tier
from daemon.sim.inference import InferenceSpec
from forecaster import traces


@dataclass(frozen=True)
class SyntheticWorkload:
    demand: pd.DataFrame        # time x tenant, GPUs wanted
    tiers: tuple[Tier, ...]
    job_gpus: np.ndarray        # GPUs per job for each tenant
    peaked: np.ndarray | None = None  # per tenant: whether it has the 14:00 peak (the truth a window bench scores)


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
    return SyntheticWorkload(frame, tiers, job, has_peak.copy())


def fleet_accepts(tiers: Sequence[str], types: Sequence[str]) -> list[tuple[str, ...]]:
    """What each simulated tenant's jobs accept on a mixed fleet, deterministic by position and tier: high-tier
    tenants the first type only or the first then the second; normal ones the second then the last, the last
    only, or any; low ones any (preemptible work goes where there is room)."""
    types = list(types)
    if len(types) < 2:
        return [()] * len(tiers)
    a, b, z = types[0], types[1], types[-1]
    choices = {"high": [(a,), (a, b)], "normal": [tuple(dict.fromkeys((b, z))), (z,), ()], "low": [()]}
    return [choices.get(t, [()])[i % len(choices.get(t, [()]))] for i, t in enumerate(tiers)]


@dataclass
class Workload:
    name: str
    demand: pd.DataFrame          # time x tenant, GPUs wanted
    tiers: tuple[Tier, ...]
    job_gpus: np.ndarray
    capacity: int
    start: int                    # first step that is measured (earlier steps are history/warm-up)
    requests_per_gpu_s: float = 0.5  # request volume per GPU in use, for the throttling account
    request_shape: np.ndarray | None = None  # per-minute multiplier (e.g. from the Azure trace), tiled
    gpus_per_node: int = 8                   # node size of the replayed cluster (every job fits on one node)
    # a mixed fleet (issue 24): the type and GPUs of every node, and per tenant the types its jobs accept (in order
    # of preference; () = any). None: one model, `capacity` GPUs on `gpus_per_node`-GPU nodes
    node_types: list[str] | None = None
    node_gpus: np.ndarray | None = None
    accepts: list[tuple[str, ...]] | None = None
    # a mixed fleet whose tenants' jobs ask different types: per demand column the tenant whose jobs they are (one
    # column per (tenant, accepted types): its demand stream, `accepts` per column; each column's tier and job size
    # its tenant's). None: each column is a tenant of its own, as before
    owners: list[str] | None = None
    # inference services (daemon/sim/inference.py): per inference tenant its replica spec, and the requests/s
    # that arrive per step (same index as demand, one column per inference tenant; their demand columns are
    # their GPU need at the previous step's rate)
    inference: dict[str, InferenceSpec] | None = None
    rates: pd.DataFrame | None = None
    # the requests/s each step's arrivals were DRAWN from (ServeGen: the 10-minute window's rate, the mean of the
    # minute's draw), same index and columns as ``rates``; None where only the observed rates exist (a user's own
    # --data). The perfect forecast's rates_only knob knows these, not the draws
    expected_rates: pd.DataFrame | None = None


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


def helios(data_dir: Path, start: str = "2020-05-14", days: float = 3.0, history_days: float = 2.0,
           high_vcs: int = 2, capacity_quantile: float = 0.9, gpus_per_node: int = 8,
           high_vc_names: Sequence[str] | None = None) -> Workload:
    """Helios "Earth" (SenseTime, May 2020): 16 virtual clusters (tenants of one Slurm cluster), per minute.

    Demand of a VC = running + pending GPUs. Each VC becomes two simulated tenants: ``<vc>/8`` with 8-GPU jobs
    (the trace's ``_noless_8`` GPUs: jobs of 8 GPUs or more, one whole node each here) and ``<vc>/s`` with the
    VC's mean small-job size, rounded down to 1, 2 or 4 (``_less_8``). Tiers: the `high_vcs` VCs with the
    largest quota (ties by name), or exactly the VCs named in `high_vc_names` when given, are the high tier
    (both parts); every other VC's 8-GPU part is normal and its small-job part low (preemptible). The replayed
    cluster is sized at the `capacity_quantile` of total demand in the measured window, on `gpus_per_node`-GPU
    nodes: contended at peaks, as the product assumes (the VCs' quotas add up to 856 GPUs, which the trace's
    demand exceeds only on a few days)."""
    root = Path(data_dir) / "helios-earth-2020"
    files = sorted(root.glob("vc*/cluster_sequence_vc.csv"))
    if not files:
        raise OSError(f"no Helios VC files under {root}")
    vcs = [f.parent.name for f in files]
    if high_vc_names is not None:
        unknown = sorted(set(high_vc_names) - set(vcs))
        if unknown:
            raise ValueError(f"unknown Helios VC {', '.join(unknown)}; the trace has {', '.join(vcs)}")
    elif not 0 <= high_vcs <= len(vcs):
        raise ValueError(f"high_vcs={high_vcs}: the trace has {len(vcs)} VCs")
    t0 = pd.Timestamp(start) - pd.Timedelta(days=history_days)
    t1 = pd.Timestamp(start) + pd.Timedelta(days=days)
    cols, sizes, quota = {}, {}, {}
    for f in files:
        vc = f.parent.name
        d = pd.read_csv(f, parse_dates=["time"], index_col="time")
        quota[vc] = int(d["total_gpu_num"].iloc[0])
        w = d.loc[t0: t1 - pd.Timedelta(minutes=1)]
        big = (w["running_gpu_num_noless_8"] + w["pending_gpu_num_noless_8"]).astype(float)
        small = (w["running_gpu_num_less_8"] + w["pending_gpu_num_less_8"]).astype(float)
        jobs = d["running_job_num_less_8"].sum() + d["pending_job_num_less_8"].sum()
        mean_small = (d["running_gpu_num_less_8"].sum() + d["pending_gpu_num_less_8"].sum()) / max(jobs, 1)
        cols[f"{vc}/8"], sizes[f"{vc}/8"] = big, gpus_per_node
        cols[f"{vc}/s"], sizes[f"{vc}/s"] = small, int(2 ** np.floor(np.log2(np.clip(mean_small, 1, 4))))
    frame = pd.DataFrame(cols)
    frame.index = frame.index.tz_localize("UTC")
    frame.index.name = "time"
    frame.columns.name = "tenant"
    high = set(high_vc_names) if high_vc_names is not None else \
        set(sorted(quota, key=lambda v: (-quota[v], v))[:high_vcs])
    tiers = tuple("high" if c.split("/")[0] in high else ("normal" if c.endswith("/8") else "low")
                  for c in frame.columns)
    hist = int(history_days * 1440)
    total = frame.iloc[hist:].sum(axis=1)
    cap = int(np.ceil(np.quantile(total, capacity_quantile) / gpus_per_node) * gpus_per_node)
    return Workload("helios-earth-2020", frame, tiers, np.array([sizes[c] for c in frame.columns], dtype=np.int64),
                    cap, hist, gpus_per_node=gpus_per_node)
