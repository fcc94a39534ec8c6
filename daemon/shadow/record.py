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
from daemon.policy import fleet
from daemon.policy.state import ClusterState
from daemon.policy.types import Plan
from forecaster.types import Forecast

VERSION = 2
# per-tenant figures, stored column by column (one list per field, tenants in `names` order): a record for 10,000
# tenants is built in milliseconds with numpy, not in a Python loop over 10,000 dicts
NUMERIC = ("used", "pending", "seen", "hold", "quota", "rate", "level", "request_rate", "fc_next", "fc_peak")


def work_lost_gpu_min(gpus: int, runtime_s: float, checkpoint_s: float | None) -> float:
    """GPU-minutes of work a preemption would have thrown away: the job's run since its last checkpoint (since its
    start when the checkpoint interval is unknown)."""
    since = runtime_s % checkpoint_s if checkpoint_s else runtime_s
    return float(gpus) * max(0.0, float(since)) / 60.0


def _col(x: np.ndarray) -> list:
    """A float column as a JSON list, 3 decimals (NaN stays NaN: unknown)."""
    return np.round(np.asarray(x, dtype=float), 3).tolist()


def make_record(plan: Plan, state: ClusterState, fc: Forecast | None, history: pd.DataFrame | None, cfg: Config,
                cycle: int) -> dict[str, Any]:
    """The record of one dry-run cycle (JSON-ready; NaN where a figure is unknown)."""
    q = cfg.policy.quantile
    step_s = cfg.cycle.resolution_s
    names = tuple(state.tenants)
    n = len(names)
    seen_at = history.index[-1] if history is not None and len(history) else state.at
    seen = np.full(n, np.nan)
    if history is not None and len(history):
        # a mixed fleet's history is per typed series (tenant@spec): a tenant's demand is their sum
        last = fleet.tenant_demand(history.iloc[[-1]]).iloc[-1]
        seen = last.reindex(list(names)).to_numpy(dtype=float)
    fc_next = fc_peak = np.full(n, np.nan)
    if fc is not None:
        # [tenant, step], NaN for a tenant it lacks; typed series summed per tenant, as the policy reads them
        vals = fleet.tenant_values(fc, names)[:, :, fc.quantile_index(q)]
        if vals.shape[1]:
            fc_next = vals[:, 0]
            with np.errstate(all="ignore"):
                fc_peak = np.where(np.isfinite(vals).any(axis=1), np.nanmax(np.where(np.isfinite(vals), vals, -np.inf),
                                                                                 axis=1), np.nan)
    lims = [plan.limits.get(t) for t in names]
    reasons: dict[str, int] = {}
    reason_idx = [reasons.setdefault(x.reason, len(reasons)) if x is not None else -1 for x in lims]
    cols = {
        "used": _col(state.used), "pending": _col(state.pending), "seen": _col(seen),
        "hold": [int(plan.reservations.get(t, 0)) for t in names],
        "quota": _col([plan.quotas.get(t, np.nan) for t in names]),
        "rate": _col([x.rate if x is not None else np.nan for x in lims]),
        "level": [x.level if x is not None else -1 for x in lims],
        "request_rate": _col(state.request_rate) if state.request_rate is not None else _col(np.full(n, np.nan)),
        "fc_next": _col(fc_next), "fc_peak": _col(fc_peak),
        "tier": list(state.tiers), "limit_reason": reason_idx,
        # the skill gate (policy.skill_gate): 1 the tenant's plan acts on the forecast, 0 reactive, -1 gate off
        "acting": [(1 if plan.forecast_acting[t].get("acting") else 0) if t in plan.forecast_acting else -1
                   for t in names],
        # and its series (one per GPU type on a mixed fleet, the tenant's own on one model): how many it decided
        # and how many of them act on the forecast (-1 gate off)
        "gated_series": [len(plan.forecast_acting[t].get("by_type") or (None,)) if t in plan.forecast_acting
                         else -1 for t in names],
        "acting_series": [_acting_series(plan.forecast_acting[t]) if t in plan.forecast_acting else -1
                          for t in names],
    }
    jobs = state.jobs
    where = {str(j): k for k, j in enumerate(jobs.ids)} if len(jobs) and plan.preemptions else {}
    ck = cfg.policy.checkpoint_interval_s
    if ck is None and cfg.source.kind == "simulator":  # the simulated jobs' own checkpoint interval
        ck = float(cfg.source.simulator.checkpoint_steps * step_s)
    pre = []
    for p in plan.preemptions:
        k = where.get(str(p.job_id))
        runtime = float(jobs.runtime_s[k]) if k is not None else 0.0
        pre.append({"job_id": str(p.job_id), "tenant": p.tenant, "gpus": int(p.gpus), "node": p.node,
                    "reason": p.reason, "for_tenant": p.for_tenant,
                    "lost_gpu_min": round(work_lost_gpu_min(p.gpus, runtime, ck), 3), "runtime_s": round(runtime, 1)})
    return {"v": VERSION, "at": plan.at, "cycle": int(cycle), "seen_at": pd.Timestamp(seen_at).isoformat(),
            "step_s": int(step_s), "horizon_steps": int(cfg.cycle.horizon_steps),
            "lead_time_steps": int(cfg.policy.lead_time_steps), "quantile": q, "model": plan.forecast_model,
            "capacity": int(plan.capacity), "load": float(plan.load), "rate_level": int(plan.memory.rate_level),
            "notes": list(plan.notes), "names": list(names), "cols": cols, "reasons": list(reasons),
            "preemptions": pre,
            # whether a gateway would apply the plan's limits once acting (the redis actuator): without one no
            # tenant would have been throttled, whatever the level (report.py counts none)
            "limits_enforced": cfg.actuators.gateway_limits}


def tenants(record: dict, only: str | None = None) -> dict[str, dict[str, Any]]:
    """A record's per-tenant figures as {tenant: {field: value}} (None where unknown), whichever way it is stored:
    column by column (version 2) or one dict per tenant. `only` decodes that tenant's row alone (a tenant's view
    of a 10,000-tenant record must not cost the decoding of all of them)."""
    if "tenants" in record:
        rows = record["tenants"]
        return rows if only is None else ({only: rows[only]} if only in rows else {})
    cols, reasons, names = record["cols"], record.get("reasons", []), record["names"]
    if only is None:
        idx = range(len(names))
    else:
        try:
            idx = [names.index(only)]
        except ValueError:
            return {}
    out: dict[str, dict[str, Any]] = {}
    for i in idx:
        d: dict[str, Any] = {"tier": cols["tier"][i]}
        for k in NUMERIC:
            v = cols[k][i]
            d[k] = None if v is None or (isinstance(v, float) and v != v) or (k == "level" and v < 0) else v
        r = cols["limit_reason"][i]
        d["limit_reason"] = reasons[r] if 0 <= r < len(reasons) else None
        out[names[i]] = d
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def problem(record: Any) -> str | None:
    """Why `record` cannot be read as a shadow record, in one phrase naming the field; None when it can.

    The report (daemon/shadow/report.py) skips such a record whole, by its id: one corrupt record (a disk error,
    a hand edit, a writer of another version) must cost its own cycle, never the report (a KeyError) or a silent
    wrong figure. The readers (daemon/shadow/log.py, daemon/state/store.py) give bytes that are not a record as
    ``{"id": ..., "unreadable": why}``. Structure only: the figures' being numbers is checked where they are
    decoded (report.count)."""
    if not isinstance(record, dict):
        return f"not a record but a JSON {type(record).__name__}"
    if "unreadable" in record:
        return str(record["unreadable"])
    for key in ("at", "seen_at", "step_s", "horizon_steps"):
        if record.get(key) is None:
            return f"no {key!r}"
    try:
        seen_at = pd.Timestamp(record["seen_at"])
    except (TypeError, ValueError):
        seen_at = None
    if seen_at is None or seen_at is pd.NaT or seen_at.tzinfo is None:
        return f"'seen_at' {str(record['seen_at'])[:40]!r} is not a time with its zone"
    if not _is_int(record["step_s"]) or record["step_s"] <= 0:
        return f"'step_s' {str(record['step_s'])[:20]!r} is not a whole number of seconds > 0"
    if not _is_int(record["horizon_steps"]) or record["horizon_steps"] < 0:
        return f"'horizon_steps' {str(record['horizon_steps'])[:20]!r} is not a whole number >= 0"
    if "cycle" in record and not _is_int(record["cycle"]):
        return f"'cycle' {str(record['cycle'])[:20]!r} is not a whole number"
    if "tenants" in record:
        rows = record["tenants"]
        if not isinstance(rows, dict) or not all(isinstance(v, dict) for v in rows.values()):
            return "'tenants' is not a table of tenants"
    else:
        names, cols = record.get("names"), record.get("cols")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return "no 'names' (a list of tenant names)"
        if not isinstance(cols, dict):
            return "no 'cols' (the per-tenant figures)"
        for key in NUMERIC + ("tier", "limit_reason"):
            col = cols.get(key)
            if not isinstance(col, list) or len(col) != len(names):
                return f"'cols.{key}' is not one value per tenant ({len(names)})"
        for key in ("acting", "gated_series", "acting_series"):   # optional: older records have none
            col = cols.get(key)
            if col is not None and (not isinstance(col, list) or len(col) != len(names)):
                return f"'cols.{key}' is not one value per tenant ({len(names)})"
        if not isinstance(record.get("reasons", []), list):
            return "'reasons' is not a list"
    pre = record.get("preemptions", [])
    if not isinstance(pre, list):
        return "'preemptions' is not a list"
    for p in pre:
        if not isinstance(p, dict) or not isinstance(p.get("tenant"), str) or not _is_int(p.get("gpus")) \
                or not isinstance(p.get("for_tenant") or "", str) \
                or not isinstance(p.get("lost_gpu_min") or 0.0, (int, float)):
            return f"a preemption without a tenant and a whole number of GPUs: {str(p)[:80]}"
    return None


def _acting_series(verdict: dict) -> int:
    """How many of a tenant's gate series act on the forecast: its types' (by_type) on a mixed fleet, else 0 or 1."""
    by = verdict.get("by_type")
    if by:
        return sum(1 for v in by.values() if v.get("acting"))
    return 1 if verdict.get("acting") else 0
