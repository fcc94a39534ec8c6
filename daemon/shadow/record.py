"""One shadow record per cycle: the decisions of a dry-run plan (holds, preemptions and limits, with their
reasons), the state they were made on, the demand seen at that cycle and the forecast they followed.

It holds what the report needs and nothing of the jobs beyond the preempted ones, so a record stays small
(about 150 bytes per tenant) and the report can be computed from records alone: a later record's `seen` is the
demand seen after an earlier one's decisions (``daemon.shadow.report``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy.state import ClusterState
from daemon.policy.types import Plan
from forecaster.types import Forecast

VERSION = 1


def _num(x: float) -> float | None:
    x = float(x)
    return round(x, 3) if np.isfinite(x) else None


def work_lost_gpu_min(gpus: int, runtime_s: float, checkpoint_s: float | None) -> float:
    """GPU-minutes of work a preemption would have thrown away: the job's run since its last checkpoint (since its
    start when the checkpoint interval is unknown)."""
    since = runtime_s % checkpoint_s if checkpoint_s else runtime_s
    return float(gpus) * max(0.0, float(since)) / 60.0


def make_record(plan: Plan, state: ClusterState, fc: Forecast | None, history: pd.DataFrame | None, cfg: Config,
                cycle: int) -> dict[str, Any]:
    """The record of one dry-run cycle (JSON-ready)."""
    q = cfg.policy.quantile
    step_s = cfg.cycle.resolution_s
    seen_at = history.index[-1] if history is not None and len(history) else state.at
    last = history.iloc[-1] if history is not None and len(history) else None
    fq = None
    if fc is not None:
        vals = fc.for_tenants(state.tenants)  # [tenant, step, quantile], NaN for a tenant the forecast lacks
        fq = vals[:, :, fc.quantile_index(q)]
    rr = state.request_rate
    tenants: dict[str, dict] = {}
    for i, t in enumerate(state.tenants):
        lim = plan.limits.get(t)
        d: dict[str, Any] = {
            "tier": state.tiers[i], "used": _num(state.used[i]), "pending": _num(state.pending[i]),
            "seen": _num(last[t]) if last is not None and t in last.index else None,
            "hold": int(plan.reservations.get(t, 0)), "quota": plan.quotas.get(t),
            "rate": lim.rate if lim else None, "level": lim.level if lim else None,
            "limit_reason": lim.reason if lim else None,
            "request_rate": _num(rr[i]) if rr is not None else None,
        }
        if fq is not None:
            row = fq[i]
            d["fc_next"] = _num(row[0]) if row.size else None
            d["fc_peak"] = _num(np.nanmax(row)) if row.size and np.isfinite(row).any() else None
        tenants[t] = d
    jobs = state.jobs
    where = {str(j): k for k, j in enumerate(jobs.ids)} if len(jobs) else {}
    ck = cfg.policy.checkpoint_interval_s
    if ck is None and cfg.source.kind == "simulator":  # the simulated jobs' own checkpoint interval
        ck = float(cfg.source.simulator.checkpoint_steps * step_s)
    pre = []
    for p in plan.preemptions:
        k = where.get(str(p.job_id))
        runtime = float(jobs.runtime_s[k]) if k is not None else 0.0
        pre.append({"job_id": str(p.job_id), "tenant": p.tenant, "gpus": int(p.gpus), "node": p.node,
                    "reason": p.reason, "for_tenant": p.for_tenant,
                    "lost_gpu_min": round(work_lost_gpu_min(p.gpus, runtime, ck), 3)})
    return {"v": VERSION, "at": plan.at, "cycle": int(cycle), "seen_at": pd.Timestamp(seen_at).isoformat(),
            "step_s": int(step_s), "horizon_steps": int(cfg.cycle.horizon_steps),
            "lead_time_steps": int(cfg.policy.lead_time_steps), "quantile": q, "model": plan.forecast_model,
            "capacity": int(plan.capacity), "load": _num(plan.load), "rate_level": int(plan.memory.rate_level),
            "notes": list(plan.notes), "tenants": tenants, "preemptions": pre}
