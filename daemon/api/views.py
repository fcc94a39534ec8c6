"""The data the API returns and the console draws, read from what the cycle last wrote.

Every function takes the running Daemon and returns plain JSON-ready dicts;
missing data is None, never 0.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.service import Daemon

HISTORY_STEPS = 240  # four hours at the default 1-minute resolution
EVENT_KINDS = ("node_down", "mass_node_failure", "preemption", "notification", "plan_change", "operator_change")


def num(x: Any) -> float | int | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() and abs(f) < 2**53 else round(f, 4)


def _history(d: "Daemon"):
    """What the forecaster read last cycle; before the first cycle, the persisted rolling history if any."""
    h = d.runtime.runner.last_history
    if h is None and d.runtime.history is not None:
        h = d.runtime.history.frame(HISTORY_STEPS, copy=True)
    return h


def _fallback(d: "Daemon") -> str | None:
    from daemon.forecasting import WithFallback

    f = d.runtime.runner.forecaster
    return f.last_error if isinstance(f, WithFallback) else None


def tenant_names(d: "Daemon") -> list[str]:
    runner = d.runtime.runner
    names: set[str] = {t.name for t in d.cfg.tenants}
    if runner.last_plan is not None:
        names.update(runner.last_plan.limits)
    if runner.last_state is not None:
        names.update(runner.last_state.tenants)
    return sorted(names)


def _state_index(d: "Daemon", tenant: str) -> int | None:
    st = d.runtime.runner.last_state
    if st is None:
        return None
    try:
        return st.tenants.index(tenant)
    except ValueError:
        return None


def tier_of(d: "Daemon", tenant: str) -> str:
    ov = d.runtime.overrides
    if ov is not None:
        t = ov.inputs().tiers.get(tenant)
        if t:
            return t
    st = d.runtime.runner.last_state
    i = _state_index(d, tenant)
    if st is not None and i is not None:
        return st.tiers[i]
    return d.cfg.tier_of(tenant)


def _limit(plan, tenant: str) -> dict | None:
    lim = plan.limits.get(tenant) if plan is not None else None
    if lim is None:
        return None
    return {"rate": num(lim.rate), "burst": num(lim.burst), "level": lim.level, "reason": lim.reason,
            "throttled": lim.level > 0 or lim.reason.startswith("fixed limit")}


def plan_view(d: "Daemon") -> dict:
    plan = d.runtime.runner.last_plan
    if plan is None:
        return {"plan": None}
    out = plan.to_dict()
    out.pop("memory", None)
    out["load"] = num(plan.load)
    out["rate_level"] = plan.memory.rate_level
    out["limits"] = {t: _limit(plan, t) for t in plan.limits}
    return out


def forecast_quality(d: "Daemon") -> dict | None:
    """Live forecast quality (scores of past forecasts against what happened; daemon/forecast_quality.py).

    None until a forecast's horizon has elapsed, and the console says "not scored yet" rather than a number.
    """
    return d.runtime.runner.quality.summary()


def cluster_view(d: "Daemon", history: int = HISTORY_STEPS) -> dict:
    rt = d.runtime
    plan = rt.runner.last_plan
    store = rt.store
    hist = store.plan_history(2000) if store is not None else []
    if hist:  # the plans of the last `history` steps' worth of time (cycles may be faster than steps)
        try:
            end = dt.datetime.fromisoformat(hist[-1]["at"])
            since = (end - dt.timedelta(seconds=history * d.cfg.cycle.resolution_s)).isoformat()
            hist = [s for s in hist if s["at"] >= since]
        except (TypeError, ValueError):
            hist = hist[-history:]
    lvl_cfg = d.cfg.ratelimits.levels
    level = plan.memory.rate_level if plan is not None else 0
    fc = rt.runner.last_forecast
    band = None
    if fc is not None and len(fc.tenants):
        p50 = fc.quantile(0.5).sum(axis=0)
        p90 = fc.quantile(0.9).sum(axis=0)
        band = {"issued_at": str(fc.issued_at), "step_s": fc.step_s,
                "p50": [num(v) for v in p50], "p90": [num(v) for v in p90]}
    demand = None
    h = _history(d)
    if h is not None and len(h):
        tail = h.iloc[-history:]
        demand = {"start": str(tail.index[0]), "step_s": d.cfg.cycle.resolution_s,
                  "values": [num(v) for v in tail.sum(axis=1, min_count=1).to_numpy()]}
    return {
        "at": plan.at if plan else None,
        "capacity": plan.capacity if plan else None,
        "load": num(plan.load) if plan else None,
        "held": int(sum(plan.reservations.values())) if plan else None,
        "high_pool": plan.high_pool if plan else None,
        "stale": plan.stale if plan else None,
        "notes": list(plan.notes) if plan else [],
        # the plan's level may be one the config no longer has (levels removed by a reload): no row to show
        "rate_level": {"index": level, "starts_at_load": lvl_cfg[level].load if level < len(lvl_cfg) else None,
                       "rates": ({"high": lvl_cfg[level].high, "normal": lvl_cfg[level].normal,
                                  "low": lvl_cfg[level].low} if level < len(lvl_cfg) else None),
                       "levels": len(lvl_cfg)},
        "model": {"in_use": plan.forecast_model if plan else None, "note": rt.forecaster_note,
                  "fallback": _fallback(d), "quality": forecast_quality(d)},
        "history": [{"at": s["at"], "capacity": s["capacity"], "load": s["load"], "held": s["reserved"],
                     "rate_level": s["rate_level"]} for s in hist],
        "demand": demand,
        "forecast": band,
        "health": d.health(),
    }


def tenant_summary(d: "Daemon", tenant: str) -> dict:
    plan = d.runtime.runner.last_plan
    st = d.runtime.runner.last_state
    i = _state_index(d, tenant)
    used = num(st.used[i]) if st is not None and i is not None else None
    lim = _limit(plan, tenant)
    return {"tenant": tenant, "tier": tier_of(d, tenant), "used": used,
            "held": int(plan.reservations.get(tenant, 0)) if plan else None,
            "quota": plan.quotas.get(tenant) if plan else None,
            "rate": lim["rate"] if lim else None, "throttled": lim["throttled"] if lim else None}


def _queue(d: "Daemon", tenant: str) -> dict | None:
    st = d.runtime.runner.last_state
    i = _state_index(d, tenant)
    if st is None or i is None or len(st.jobs) == 0:
        return None
    j = st.jobs
    pending = ~j.running
    mine = pending & (j.tenant == i)
    if not mine.any():
        return {"pending_jobs": 0, "pending_gpus": 0, "position": None, "expected_start": None}
    # the queue in wait order: oldest first; where the tenant's oldest pending job stands
    oldest = float(j.wait_s[mine].max())
    position = int((j.wait_s[pending] > oldest).sum()) + 1
    return {"pending_jobs": int(mine.sum()), "pending_gpus": int(j.gpus[mine].sum()), "position": position,
            "queue_length": int(pending.sum()), "longest_wait_s": num(oldest),
            "expected_start": None}  # no source reports a start estimate yet


def tenant_view(d: "Daemon", tenant: str, history: int = HISTORY_STEPS) -> dict:
    rt = d.runtime
    plan = rt.runner.last_plan
    st = rt.runner.last_state
    i = _state_index(d, tenant)
    out = tenant_summary(d, tenant)
    out["pending"] = num(st.pending[i]) if st is not None and i is not None else None
    out["limit"] = _limit(plan, tenant)
    out["preemptions"] = [{"job_id": p.job_id, "gpus": p.gpus, "node": p.node, "reason": p.reason}
                          for p in (plan.preemptions if plan else ()) if p.tenant == tenant]
    out["notifications"] = [{"type": n.kind, "message": n.message}
                            for n in (plan.notifications if plan else ()) if n.tenant == tenant]
    out["recent_events"] = rt.store.recent_events(50, tenant=tenant) if rt.store is not None else []
    out["queue"] = _queue(d, tenant)
    fc = rt.runner.last_forecast
    out["forecast"] = None
    if fc is not None and tenant in fc.tenants:
        k = fc.tenants.index(tenant)
        out["forecast"] = {"model": fc.model, "issued_at": str(fc.issued_at), "step_s": fc.step_s,
                           "p50": [num(v) for v in fc.quantile(0.5)[k]],
                           "p90": [num(v) for v in fc.quantile(0.9)[k]]}
    h = _history(d)
    out["usage"] = None
    if h is not None and len(h) and tenant in h.columns:
        tail = h[tenant].iloc[-history:]
        out["usage"] = {"start": str(tail.index[0]), "step_s": d.cfg.cycle.resolution_s,
                        "values": [num(v) for v in tail.to_numpy()]}
    ov = rt.overrides
    out["override"] = ov.for_tenant(tenant) if ov is not None else None
    out["plan_at"] = plan.at if plan else None
    return out

