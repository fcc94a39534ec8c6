"""Scoring forecasters by what acting on them costs: a replay of the cluster's recent history through the policy.

`retrain --select-by replay` replays the held-out end of the history it trained on (the window every candidate
is also backtested on) through the daemon's own policy engine and the simulated cluster (`daemon.sim.replay`),
once with no forecast (reactive, for reference) and once per candidate, each forecasting as the daemon runs it
(spreads and shifts recomputed every 10 forecasts, in the forecast call so that the result depends on the
history only). A candidate's cost is the sum over tiers of `retrain.replay_tier_weights[tier]` x its unmet
GPU-minutes, plus the GPU-minutes of work lost to preemption. Nothing random: the same history, candidates and
configuration give the same costs.

A window with no contention tells the candidates nothing: at the configured GPUs every replay serves every tier, so
every cost is 0 and the choice would fall to the order of the list. There the window is replayed again on a
*tight* cluster, sized at the 90th percentile of the window's own total demand in whole nodes (the size the replay
bench gives a trace), which asks which forecaster would have protected the tiers had this window been tight; each
row says the GPUs it was replayed on (`capacity`, `tight`). Costs that still tie are broken by the peak loss
(daemon/forecasting/retrain.py).

The replay needs what the demand series does not say: each tenant's tier, the GPUs per job, the cluster's GPUs
and node size (`ReplayCluster`). The embedded simulator knows them; for a real cluster they come from the
configuration (tiers from `[[tenants]]`, `cluster.gpus`, `cluster.gpus_per_node`) and jobs are taken as one GPU
each, since the series only holds GPUs in use. Missing samples are gaps, not zeros: the simulated cluster keeps a
tenant's jobs as they were through a gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from daemon.config import Config
from forecaster.baselines import Forecaster

TIERS = ("high", "normal", "low")


@dataclass(frozen=True)
class ReplayCluster:
    """What a replay of a cluster's history needs beyond its demand."""

    tiers: dict[str, str] = field(default_factory=dict)   # tenant -> tier; a tenant not in it is "normal"
    capacity: int | None = None    # GPUs; None: the 90th percentile of the history's total demand, in whole nodes
    gpus_per_node: int = 8
    job_gpus: dict[str, int] = field(default_factory=dict)   # tenant -> GPUs per job; not in it: 1

    @classmethod
    def from_config(cls, cfg: Config) -> "ReplayCluster":
        return cls({t.name: t.tier for t in cfg.tenants}, cfg.cluster.gpus, cfg.cluster.gpus_per_node)

    def has_high_tier(self, tenants) -> bool:
        return any(self.tiers.get(str(t), "normal") == "high" for t in tenants)


def _whole_nodes_p90(total: pd.Series, gpn: int) -> int:
    total = total.dropna()
    return int(np.ceil(np.quantile(total, 0.9) / gpn) * gpn) if len(total) else gpn


def workload(frame: pd.DataFrame, start: int, cluster: ReplayCluster):
    """The history as a replay workload: measured from `start` (the steps before are history and warm-up)."""
    from daemon.sim.workloads import Workload

    cols = [str(c) for c in frame.columns]
    gpn = int(cluster.gpus_per_node)
    cap = cluster.capacity
    if cap is None:
        cap = _whole_nodes_p90(frame.sum(axis=1, min_count=1), gpn)
    jobs = np.array([min(max(1, int(cluster.job_gpus.get(c, 1))), gpn) for c in cols], dtype=np.int64)
    tiers = tuple(cluster.tiers.get(c, "normal") for c in cols)
    return Workload("retrain-replay", frame, tiers, jobs, max(int(cap), 1), int(start), gpus_per_node=gpn)


def cost(summary: dict, weights: dict[str, float]) -> float:
    """Weighted unmet GPU-minutes over the tiers plus the GPU-minutes of work lost to preemption."""
    return float(sum(weights.get(t, 0.0) * summary["tiers"][t]["unmet_gpu_min"] for t in TIERS)
                 + summary["work_lost_gpu_min"])


def contended(summary: dict) -> bool:
    """Whether a replay had anything for a forecast to change: demand left unmet in some tier, or a preemption."""
    return bool(summary["preemptions"] or any(summary["tiers"][t]["unmet_gpu_min"] > 0 for t in TIERS))


def _row(summary: dict, weights: dict[str, float], capacity: int, tight: bool) -> dict:
    return {"cost": cost(summary, weights), "capacity": int(capacity), "tight": tight,
            "utilization": summary["utilization"],
            **{f"{t}_unmet_gpu_min": summary["tiers"][t]["unmet_gpu_min"] for t in TIERS},
            "preemptions": summary["preemptions"], "work_lost_gpu_min": summary["work_lost_gpu_min"],
            "preempted_idle_gpu_min": summary["preempted_idle_gpu_min"]}


def replay_scores(frame: pd.DataFrame, start: int, cfg: Config, cluster: ReplayCluster,
                  models: dict[str, Callable[[], Forecaster]], *, weights: dict[str, float],
                  forecast_every: int = 1) -> dict[str, dict]:
    """{"reactive": row, name: row for each candidate}: each row the replay's cost and its parts, over the steps
    of `frame` from `start` to the end, on the configured GPUs or, where the reactive replay there saw no
    contention, on the tight cluster (module docstring). `models` maps a name to a function that builds that
    forecaster fresh (the replay must not inherit a spread another run left behind). `cfg` is the daemon's
    configuration at the history's step (cycle.resolution_s, horizon_steps, history_steps and the policy's lead
    windows)."""
    from daemon.sim.replay import run_replay

    w = workload(frame, start, cluster)
    steps = len(frame) - start
    react = run_replay(w, cfg, None, steps=steps, settings=[("reactive", {})])[0].summary()
    tight = False
    if not contended(react):
        cap = _whole_nodes_p90(frame.iloc[start:].sum(axis=1, min_count=1), w.gpus_per_node)
        if cap < w.capacity:
            w, tight = replace(w, capacity=cap), True
            react = run_replay(w, cfg, None, steps=steps, settings=[("reactive", {})])[0].summary()
    out = {"reactive": _row(react, weights, w.capacity, tight)}
    for name, make in models.items():
        m = run_replay(w, cfg, make(), steps=steps, settings=[("predictive", {})], forecast_every=forecast_every)[0]
        out[name] = _row(m.summary(), weights, w.capacity, tight)
    return out
