"""The ServeGen workload: 43 real LLM API clients (Alibaba Cloud Model Studio, m-small) as inference services,
beside synthetic batch tenants on the same cluster (`simulate --trace servegen`; issue 40, item 1).

- Arrivals: per minute, a count drawn from the 10-minute window's rate and CV. The count of a renewal process over
  T seconds has mean rate x T and variance ~ rate x T x cv^2; a minute's count can at most be the whole window's,
  so the variance is capped at 9 x mean^2 (all of a window's requests in one of its ten minutes). Over-dispersed
  counts are negative-binomial draws with that mean and variance, the others Poisson. Deterministic per seed.
  With ``arrivals="fitted"`` (`simulate --arrivals fitted`) each request is drawn instead, as ServeGen's own
  generator draws them: a window's ceil(rate x 600) requests spaced by its fitted Gamma or Weibull inter-arrival
  times, scaled to fill the window (``draw_arrivals_fitted``): the same rate, and the family's shape, not only its
  CV, decides how a window's requests bunch into its minutes.
- Gaps: a 10-minute window where every client is at 0 at once is missing data (forecaster/traces.py), not idle
  load; each client's rate and CV there are interpolated in time between the windows either side (the edges
  carried), and the workload's notes count the windows filled. Replaying them as 0 would scale every service to no
  replica and measure the cold start back, a collapse the real load never had.
- Clients idle in more than 90% of the replayed window (history included) are left out.
- Tiers: the `high_share` of the kept clients with the largest mean rate (at least one) are the high tier, the
  others normal.
- Rates: the gateway's tight limit (the lowest per-tier rate in `ratelimits.levels`: by default 200 req/s high, 50
  normal above 80% load) is the plan's per-tenant limit. ServeGen's biggest clients exceed it, so each client's
  rate is scaled by one factor, min(1, 0.9 x its tier's tight limit / its p99 rate over the window) (the CV kept):
  a service the operator has sized to fit its tier's limit. The factors are in the workload's notes.
- Replicas: `gpus_per_replica` GPUs each, serving `replica_rps` after `cold_start_s`; each service's autoscaler
  has `headroom` over the rate it sees and scales down after `scale_down_stabilization_s` (an HPA's default 300 s;
  daemon/sim/inference.py).
- Batch: `batch_tenants` tenants of the synthetic generator (daemon/sim/workloads.py), their mean demand
  `batch_ratio` x the services' mean GPU need; the cluster is the `capacity_quantile` of the sum of every tenant's
  demand over the measured window, in whole nodes, so peaks contend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from daemon.sim.inference import InferenceSpec, need_frame
from daemon.sim.workloads import Workload, generate
from forecaster import traces

IDLE_MAX = 0.9
ARRIVALS = ("moments", "fitted")


def _window(rate: pd.DataFrame, step_s: int) -> tuple[int, int]:
    """Seconds of ``rate``'s windows (its index's spacing; ServeGen's 10 minutes for one window) and steps of
    ``step_s`` in each (at least one)."""
    win_s = int((rate.index[1] - rate.index[0]).total_seconds()) if len(rate) > 1 else traces.SERVEGEN_WINDOW_S
    return win_s, max(1, win_s // step_s)


def per_step(rate: pd.DataFrame, step_s: int = 60) -> pd.DataFrame:
    """Each window's value on every ``step_s`` step it spans (a window's rate is the mean of each of its steps'
    draws: the expected rate ``Workload.expected_rates`` keeps)."""
    per = _window(rate, step_s)[1]
    idx = pd.date_range(rate.index[0], periods=len(rate) * per, freq=pd.Timedelta(seconds=step_s), name="time")
    return pd.DataFrame(np.repeat(rate.to_numpy(dtype=float), per, axis=0), index=idx, columns=rate.columns)


def draw_arrivals(rate: pd.DataFrame, cv: pd.DataFrame, seed: int, step_s: int = 60) -> pd.DataFrame:
    """Requests arriving per step (counts), one column per client, from windows of mean rate ``rate`` (req/s)
    and inter-arrival CV ``cv`` (same shape), each window spread over its steps (the module's docstring)."""
    per = _window(rate, step_s)[1]
    steps = per_step(rate, step_s)
    r, c = steps.to_numpy(), per_step(cv, step_s).to_numpy()
    mean = np.maximum(r, 0.0) * step_s
    var = np.minimum(mean * c ** 2, (per - 1) * mean ** 2 if per > 1 else mean * c ** 2)
    rng = np.random.default_rng(seed)
    over = var > mean * (1 + 1e-9)
    out = rng.poisson(np.where(over, 0.0, mean)).astype(float)
    if over.any():  # negative binomial: n = mean^2 / (var - mean), p = mean / var
        m, v = mean[over], var[over]
        out[over] = rng.negative_binomial(m ** 2 / (v - m), m / v)
    return pd.DataFrame(out, index=steps.index, columns=rate.columns)


CHUNK_REQUESTS = 4_000_000   # requests drawn at once (a few arrays of this many floats: about 100 MB)


def draw_arrivals_fitted(rate: pd.DataFrame, cv: pd.DataFrame, family: pd.DataFrame, shape: pd.DataFrame,
                         seed: int, step_s: int = 60) -> pd.DataFrame:
    """Requests arriving per step, as ServeGen's own generator makes them (servegen/construct.py, ``_sample_iats``):
    a window of rate r holds ceil(r x window) requests, whose inter-arrival times are drawn from the window's fitted
    family (``family``: Gamma or Weibull, shape ``shape``) and scaled to fill the window, so the window's count is
    its rate and the family's shape decides how they bunch into its minutes. A window without a fitted family (the
    trace's gaps, filled by interpolation), or of more than CHUNK_REQUESTS requests (drawn one by one, GiBs; the
    real trace's most is 1.5 x 10^6), is drawn from its rate and CV (``draw_arrivals``). Deterministic per seed;
    the fitted windows use their own stream, so adding them leaves the others' draws as they were."""
    win_s, per = _window(rate, step_s)
    out = draw_arrivals(rate, cv, seed, step_s)
    counts = out.to_numpy(copy=True)
    fam = family.reindex(index=rate.index, columns=rate.columns).fillna("").to_numpy(dtype=object)
    shp = shape.reindex(index=rate.index, columns=rate.columns).to_numpy(dtype=float)
    r = np.maximum(rate.to_numpy(dtype=float), 0.0)
    rng = np.random.default_rng([seed, 1])
    for j in range(r.shape[1]):
        # a window of more than CHUNK_REQUESTS requests is drawn from its rate and CV too: drawn one by one, a
        # trace's window of 10^5 requests a second (6 x 10^7) took arrays of GiBs (the real trace's most: 1.5 x 10^6)
        fitted = np.isin(fam[:, j], traces.SERVEGEN_FAMILIES) & (r[:, j] > 0) & (r[:, j] * win_s <= CHUNK_REQUESTS)
        wins = np.flatnonzero(fitted)
        if not wins.size:
            continue
        n = np.ceil(r[wins, j] * win_s - 1e-9).astype(np.int64)
        col = counts[:, j].reshape(-1, per).copy()
        group = (np.cumsum(n) - n) // CHUNK_REQUESTS    # windows drawn together: about CHUNK_REQUESTS requests
        for g in np.unique(group):
            part = np.flatnonzero(group == g)
            w, k = wins[part], n[part]
            a = np.repeat(shp[w, j], k)
            gamma = np.repeat(fam[w, j] == "Gamma", k)
            iat = np.empty(a.size)
            iat[gamma] = rng.gamma(a[gamma])
            iat[~gamma] = rng.weibull(a[~gamma])
            seg = np.repeat(np.arange(part.size), k)
            total = np.bincount(seg, weights=iat, minlength=part.size)
            before = np.repeat(np.r_[0.0, np.cumsum(total)[:-1]], k)
            cum = np.cumsum(iat) - before
            span = np.repeat(total, k)
            # all of a window's draws underflowing to 0 (a Gamma shape near 0.01): its requests spread evenly
            first = np.repeat(np.r_[0, np.cumsum(k)[:-1]], k)
            even = (np.arange(a.size) - first + 1) / np.repeat(k, k)
            frac = np.where(span > 0, cum / np.where(span > 0, span, 1.0), even)
            minute = np.minimum((frac * per).astype(np.int64), per - 1)
            col[w] = np.bincount(seg * per + minute, minlength=part.size * per).reshape(part.size, per)
        counts[:, j] = col.reshape(-1)
    return pd.DataFrame(counts, index=out.index, columns=out.columns)


@dataclass(frozen=True)
class ServeGenNotes:
    """What the workload chose: the clients left out as idle, the high tier, each client's rate factor, the gap
    windows filled and the services' scale-down stabilization."""

    idle: tuple[str, ...]
    high: tuple[str, ...]
    rate_factor: dict[str, float]
    gap_windows_filled: tuple[str, ...] = ()
    scale_down_stabilization_s: float = 300.0

    def to_dict(self) -> dict:
        return {"idle_clients_left_out": list(self.idle), "high_tier": list(self.high),
                "scale_down_stabilization_s": self.scale_down_stabilization_s,
                "rate_factor": {k: round(v, 4) for k, v in self.rate_factor.items()},
                "gap_windows_filled": list(self.gap_windows_filled)}


def servegen(data_dir: Path, *, days: float = 1.0, history_days: float = 2.0, seed: int = 7,
             cold_start_s: float = 180.0, gpus_per_replica: int = 1, replica_rps: float = 5.0, headroom: float = 0.1,
             high_share: float = 0.15, tight_limits: dict[str, float] | None = None, batch_tenants: int = 20,
             batch_ratio: float = 2.0, capacity_quantile: float = 0.9, gpus_per_node: int = 8,
             step_s: int = 60, scale_down_stabilization_s: float = 300.0,
             arrivals: str = "moments") -> tuple[Workload, ServeGenNotes]:
    """The last ``history_days + days`` of the 14-day trace, per ``step_s``; the last ``days`` are measured.
    ``arrivals``: "moments" (each minute's count from its window's rate and CV, ``draw_arrivals``) or "fitted"
    (each request from its window's fitted family, as ServeGen generates them, ``draw_arrivals_fitted``)."""
    if arrivals not in ARRIVALS:
        raise ValueError(f"arrivals {arrivals!r}: one of {', '.join(ARRIVALS)}")
    rate, cv = traces.servegen_windows(data_dir)
    total_days = (len(rate) * traces.SERVEGEN_WINDOW_S) / 86400
    if history_days + days > total_days + 1e-9:
        raise ValueError(f"ServeGen has {total_days:g} days: --days {days:g} after {history_days:g} days of history "
                         "do not fit")
    keep_w = int(round((history_days + days) * 86400 / traces.SERVEGEN_WINDOW_S))
    rate, cv = rate.iloc[-keep_w:], cv.iloc[-keep_w:]
    gaps = tuple(str(t) for t in rate.index[rate.isna().all(axis=1)])
    rate, cv = (f.interpolate(method="time").ffill().bfill().fillna(0.0) for f in (rate, cv))
    idle_share = (rate <= 0).mean()
    idle = tuple(c for c in rate.columns if idle_share[c] > IDLE_MAX)
    rate, cv = rate.drop(columns=list(idle)), cv.drop(columns=list(idle))
    n_high = max(1, int(round(high_share * rate.shape[1])))
    by_mean = sorted(rate.columns, key=lambda c: (-rate[c].mean(), c))
    high = tuple(by_mean[:n_high])
    limits = tight_limits or {"high": 200.0, "normal": 50.0}
    factor = {c: float(min(1.0, 0.9 * limits["high" if c in high else "normal"] / max(rate[c].quantile(0.99), 1e-9)))
              for c in rate.columns}
    if arrivals == "fitted":
        family, shape = traces.servegen_patterns(data_dir)
        drawn = draw_arrivals_fitted(rate * pd.Series(factor), cv, family, shape, seed, step_s)
    else:
        drawn = draw_arrivals(rate * pd.Series(factor), cv, seed, step_s)
    rates = drawn / step_s
    expected = per_step(rate * pd.Series(factor), step_s)
    specs = {c: InferenceSpec(gpus_per_replica, replica_rps, cold_start_s, headroom, scale_down_stabilization_s)
             for c in rates.columns}
    need = need_frame(rates, specs)
    hist = int(round(history_days * 86400 / step_s))
    steps = len(need)
    mean_need = float(need.iloc[hist:].sum(axis=1).mean())
    batch_gpus = max(gpus_per_node, int(round(batch_ratio * mean_need / 0.85)))
    b = generate(batch_tenants, steps, batch_gpus, seed=seed, step_s=step_s, start=str(need.index[0]))
    b.demand.index = need.index
    demand = pd.concat([need, b.demand], axis=1)
    demand.columns.name = "tenant"
    tiers = tuple("high" if c in high else "normal" for c in need.columns) + tuple(b.tiers)
    job = np.r_[np.full(need.shape[1], gpus_per_replica, dtype=np.int64),
                np.minimum(b.job_gpus, gpus_per_node)].astype(np.int64)
    total = demand.iloc[hist:].sum(axis=1)
    cap = int(np.ceil(np.quantile(total, capacity_quantile) / gpus_per_node) * gpus_per_node)
    name = f"servegen-m-small-cold{cold_start_s / 60:g}m"
    w = Workload(name, demand, tiers, job, cap, hist, gpus_per_node=gpus_per_node, inference=specs, rates=rates,
                 expected_rates=expected)
    return w, ServeGenNotes(idle, high, factor, gaps, scale_down_stabilization_s)
