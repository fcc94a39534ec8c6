"""The data the API returns and the console draws, read from one cycle's snapshot.

Every function takes the `Snapshot` a request took once (daemon/web/backend.py), and, where it needs what is
not the product of a cycle (events, overrides, health), the `Backend`; it returns plain JSON-ready dicts.
Missing data is None, never 0.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pandas as pd

from daemon.config import DEFAULT_TYPE, WindowConfig
from daemon.policy import fleet
from daemon.policy.types import RATE_KINDS
from daemon.sources.redact import redact_json
from daemon.text import plural
from daemon.web.backend import HISTORY_STEPS, Backend, Snapshot
from daemon.web.hold_use import PARTS, hold_use
from forecaster.composite import model_of

if TYPE_CHECKING:
    from daemon.web.auth import Principal
# the policy's preemption reason named (up to five of) the tenants the GPUs were cleared for, in events stored
# before it stopped doing so
# (daemon/policy/engine.py): "... ahead of forecast peak (p90 within 3 steps) for tenant-a, tenant-b"
_CLEARED_FOR = re.compile(r"(ahead of forecast peak \([^)]*\)) for [^;]*")


def hide_beneficiaries(text: str) -> str:
    """A preemption reason as the preempted tenant may read it: not whom its job made room for."""
    return _CLEARED_FOR.sub(r"\1 for protected tenants", text)


# every kind the daemon writes (daemon/failover/handler.py, daemon/policy/events.py, daemon/service/health.py,
# daemon/state/overrides.py): the console's filters, and what /api/v1/events and /ui/events accept as `kind`
EVENT_KINDS = ("node_down", "node_down_unconfirmed", "mass_node_failure", "preemption", "notification", "plan_change",
               "operator_change", "health_warning", "health_reclaim")


def _iso(t: Any) -> str:
    """A time as ISO 8601 with the T, as `at` and every other time of the API: str() of a pandas Timestamp puts a
    space there (`2026-12-07 23:04:00+00:00`: a tenant's forecast.issued_at on the first-day walk, hday3)."""
    return pd.Timestamp(t).isoformat()


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


# ---- what a tenant token may read ------------------------------------------------------------------------
# Events and plan entries are written once, for the operator, and may name several tenants (a failed node's
# jobs, the tenants a preemption made room for). A tenant token reads them through `for_viewer`: its own job
# ids, its own name, and no other tenant's name, count or job.

_NAME_CHARS = "A-Za-z0-9_.:@-"  # what a tenant name may hold (daemon/web/api.py TENANT_RE)
ANOTHER = "another tenant"


def _scrubber(viewer: str, names: Iterable[str]):
    """A function that takes a text and returns it with every other tenant's name replaced by "another tenant"."""
    others = sorted({n for n in names if n and n != viewer}, key=len, reverse=True)
    pattern = None
    if others:
        # a whole name only: not inside a longer name; a trailing "." ends a sentence unless a name goes on after it
        pattern = re.compile(rf"(?<![{_NAME_CHARS}])(?:{'|'.join(map(re.escape, others))})"
                             rf"(?![A-Za-z0-9_:@-]|\.[A-Za-z0-9_])")

    def scrub(text: str) -> str:
        text = hide_beneficiaries(text)
        return pattern.sub(ANOTHER, text) if pattern is not None else text

    return scrub


def _scrubbed(obj: Any, scrub) -> Any:
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, dict):
        return {k: _scrubbed(v, scrub) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrubbed(v, scrub) for v in obj]
    return obj


TENANT_KINDS = ("node_down", "preemption", "notification", "plan_change", "operator_change", "health_warning",
                "health_reclaim")


def _event_for(row: dict, viewer: str, scrub) -> dict | None:
    """`row` as tenant `viewer` may read it, or None when it may not read it at all."""
    head = {k: row[k] for k in ("id", "at", "kind") if k in row}
    kind = row.get("kind")
    if kind == "node_down":
        if viewer not in (row.get("tenants") or []) and row.get("tenant") != viewer:
            return None
        # its own jobs only: events logged before jobs were kept per tenant show none rather than everyone's
        mine = (row.get("by_tenant") or {}).get(viewer) or []
        errors = row.get("errors") or []
        return {**head, "node": row.get("node"), "tenant": viewer, "tenants": [viewer], "jobs": [str(j) for j in mine],
                "seconds": row.get("seconds"),
                # actuator errors name other tenants' jobs: a tenant learns that there were some, not which
                "errors": [f"{plural(len(errors), 'error')} during the failover (details for operators)"]
                if errors else []}
    if kind not in TENANT_KINDS or row.get("tenant") != viewer:
        return None  # mass node failures, cluster-wide plan changes and changes to all tenants are the operator's
    out = {k: _scrubbed(v, scrub) for k, v in row.items() if k not in ("id", "at", "kind", "tenant", "tenants",
                                                                        "by_tenant", "beneficiary", "who_for")}
    return {**head, "tenant": viewer, **out}


def for_viewer(snap: Snapshot, viewer: "Principal", rows: list[dict]) -> list[dict]:
    """Events as `viewer` may read them: all of each for an operator, trimmed to its own tenant for a tenant."""
    if viewer.operator:
        return rows
    scrub = _scrubber(viewer.tenant or "", _all_names(snap, rows))
    out = []
    for r in rows:
        e = _event_for(r, viewer.tenant or "", scrub)
        if e is not None:
            out.append(e)
    return out


def _all_names(snap: Snapshot, rows: Iterable[dict] = ()) -> set[str]:
    """Every tenant name the daemon knows of now, and those the given events name (tenants that have left)."""
    names = set(tenant_names(snap))
    for r in rows:
        names.update(r.get("tenants") or [])
        names.update(r.get("by_tenant") or {})
        if isinstance(r.get("tenant"), str):
            names.add(r["tenant"])
    return names


def tenant_names(snap: Snapshot) -> list[str]:
    names: set[str] = {t.name for t in snap.cfg.tenants}
    if snap.plan is not None:
        names.update(snap.plan.limits)
    if snap.state is not None:
        names.update(snap.state.tenants)
    return sorted(names)


def _state_index(snap: Snapshot, tenant: str) -> int | None:
    st = snap.state
    if st is None:
        return None
    try:
        return st.tenants.index(tenant)
    except ValueError:
        return None


def tier_of(snap: Snapshot, backend: Backend, tenant: str) -> str:
    """The tier the plan in force gave `tenant`: an operator's tier change with it, or the cycle's. A change not yet
    planned (it applies at the next cycle) is the record's `override`: read as the tier at once, it put a "high
    tier" beside the plan's normal-tier limit, quota and reason until the next cycle. A plan restored from the
    store does not say which changes made it: there the operator's tier now stands."""
    t = (snap.plan_tiers if snap.plan_tiers is not None else backend.overrides().inputs().tiers).get(tenant)
    if t:
        return t
    st = snap.state
    i = _state_index(snap, tenant)
    if st is not None and i is not None:
        return st.tiers[i]
    return snap.cfg.tier_of(tenant)


def _limit(snap: Snapshot, tenant: str) -> dict | None:
    """A tenant's limit in the plan: the rate the plan sets, and whether it throttles. Throttled only where a gateway
    applies the limits (the redis actuator: ActuatorsConfig.gateway_limits): on a first-day Kubernetes cluster
    without one the API said `throttled: true` of a limit nothing applied. `enforced`: a gateway applies it now
    (not in dry run)."""
    plan = snap.plan
    lim = plan.limits.get(tenant) if plan is not None else None
    if lim is None:
        return None
    act = snap.cfg.actuators
    return {"rate": num(lim.rate), "burst": num(lim.burst), "level": lim.level, "reason": lim.reason,
            "throttled": act.gateway_limits and (lim.level > 0 or lim.reason.startswith("fixed limit")),
            "enforced": act.limits_enforced}


def _told(snap: Snapshot, kind: str) -> bool:
    """Whether a notification of `kind` is true to show: a rate-limit change ("throttled", "relaxed") only where a
    gateway applies the limits, as the Kubernetes actuator sends its Events."""
    return kind not in RATE_KINDS or snap.cfg.actuators.gateway_limits


def plan_view(snap: Snapshot) -> dict:
    """The plan in force: the one body of /api/v1/plan and /plan.

    The plan's fields (memory left out), each limit with its reason and whether it throttles, the whole
    forecaster note, and the live scores of past forecasts (`forecast_quality`). `{"plan": null}` before the
    first plan.
    """
    plan = snap.plan
    if plan is None:
        return {"plan": None}
    out = plan.to_dict()
    out["forecaster_note"] = snap.forecaster_note  # the whole note; the start-up line prints it short
    out.pop("memory", None)
    out["load"] = num(plan.load)
    out["rate_level"] = plan.memory.rate_level
    out["limits"] = {t: _limit(snap, t) for t in plan.limits}
    out["notifications"] = [n for n in out["notifications"] if _told(snap, n["kind"])]
    out["forecast_quality"] = snap.quality  # live scores of past forecasts, per tenant too
    return out


def forecast_quality(snap: Snapshot) -> dict | None:
    """Live forecast quality (scores of past forecasts against what happened; daemon/forecasting/quality.py).

    None until a forecast's horizon has elapsed, and the console says "not scored yet" rather than a number.
    """
    return dict(snap.quality_summary) if snap.quality_summary is not None else None


def _in_use_by_type(snap: Snapshot, tenant_index: int | None = None) -> dict[str, int]:
    """GPUs running per GPU type (one tenant's when ``tenant_index`` is given), from the cycle's snapshot: each
    running job's node's type. Empty for a one-model cluster (no node reports a type)."""
    st = snap.state
    if st is None or st.nodes is None or st.nodes.gpu_type is None or len(st.jobs) == 0:
        return {}
    j = st.jobs
    run = np.flatnonzero(j.running if tenant_index is None else j.running & (j.tenant == tenant_index))
    _, node_of, gpus = j.parts(st.nodes, run)   # a job on several nodes: its GPUs on each of them
    on = node_of >= 0
    types = st.nodes.gpu_type[node_of[on]].astype(str)
    out: dict[str, int] = {}
    for t, g in zip(types.tolist(), gpus[on].tolist()):
        out[t] = out.get(t, 0) + int(g)
    return out


def types_view(snap: Snapshot) -> list[dict] | None:
    """A mixed fleet per GPU type (issue 24): healthy GPUs, the high tier's guarantee, GPUs held, GPUs in use, and
    what the plan says of that type. None for a one-model cluster."""
    plan = snap.plan
    if plan is None or not plan.capacity_by_type:
        return None
    used = _in_use_by_type(snap)
    held: dict[str, int] = {}
    for by in plan.holds_by_type.values():
        for t, g in by.items():
            held[t] = held.get(t, 0) + int(g)
    return [{"type": t, "capacity": int(cap), "high_pool": int(plan.high_pool_by_type.get(t, 0)),
             "held": held.get(t, 0), "in_use": used.get(t, 0), "notes": list(plan.notes_by_type.get(t, ()))}
            for t, cap in sorted(plan.capacity_by_type.items())]


def tenant_types(snap: Snapshot, tenant: str) -> list[dict] | None:
    """One tenant per GPU type: GPUs held for it and GPUs it runs there, and its waiting GPUs per set of types they
    accept. Its own numbers only (no other tenant's); None for a one-model cluster."""
    plan = snap.plan
    if plan is None or not plan.capacity_by_type:
        return None
    i = _state_index(snap, tenant)
    used = _in_use_by_type(snap, i) if i is not None else {}
    held = plan.holds_by_type.get(tenant, {})
    return [{"type": t, "held": int(held.get(t, 0)), "in_use": int(used.get(t, 0))}
            for t in sorted(plan.capacity_by_type) if held.get(t) or used.get(t)]


def _hold_use(snap: Snapshot, backend: Backend, tenant: str) -> list[dict] | None:
    """Per GPU type held for `tenant`, the GPUs the plan holds there (`planned`) and what occupies the nodes held
    for it now (daemon/web/hold_use.py): its own work, the high tier's pool's other tenants' work, others' work
    that cannot be preempted, others' preemptible work, draining, free (`pooled`: the nodes are the pool's). None
    when nothing is held for it and no node is. GPU counts only: no other tenant's name."""
    plan, st = snap.plan, snap.state
    i = _state_index(snap, tenant)
    if plan is None or st is None or i is None:
        return None
    ops = backend.overrides().inputs()
    protected = np.array([ops.paused_all or t in plan.reservations or t in plan.pooled or t in ops.paused
                          or ops.floors.get(t, 0) > 0 for t in st.tenants], dtype=bool)
    pool = np.array([tenant in plan.pooled and t in plan.pooled for t in st.tenants], dtype=bool)
    use = hold_use(st, i, pool, protected)
    planned = dict(plan.holds_by_type.get(tenant, {}))
    if not planned and plan.reservations.get(tenant) and not plan.capacity_by_type:  # a one-model cluster
        planned = {DEFAULT_TYPE: int(plan.reservations[tenant])}
    pooled = tenant in plan.pooled
    rows = [{"type": t, "planned": int(planned.get(t, 0)), "pooled": pooled,
             **use.get(t, {"gpus": 0, **dict.fromkeys(PARTS, 0)})} for t in sorted(set(planned) | set(use))]
    return rows or None


def _pending_by_accepts(snap: Snapshot, tenant: str) -> dict[str, int] | None:
    st = snap.state
    i = _state_index(snap, tenant)
    if st is None or i is None or st.jobs.accepts is None:
        return None
    j = st.jobs
    mine = (~j.running) & (j.tenant == i)
    out: dict[str, int] = {}
    for acc, g in zip(j.accepts[mine].tolist(), j.gpus[mine].tolist()):
        key = "|".join(acc) if acc else "any"
        out[key] = out.get(key, 0) + int(g)
    return out


def cluster_view(snap: Snapshot, backend: Backend, history: int = HISTORY_STEPS) -> dict:
    cfg = snap.cfg
    plan = snap.plan
    hist = backend.plan_history(2000)
    if plan is not None:  # a cycle in flight may have saved a newer plan than the snapshot's: not shown yet
        hist = [s for s in hist if s["at"] <= plan.at]
    if hist:  # the plans of the last `history` steps' worth of time (cycles may be faster than steps)
        try:
            end = dt.datetime.fromisoformat(hist[-1]["at"])
            since = (end - dt.timedelta(seconds=history * cfg.cycle.resolution_s)).isoformat()
            hist = [s for s in hist if s["at"] >= since]
        except (TypeError, ValueError):
            hist = hist[-history:]
    lvl_cfg = cfg.ratelimits.levels
    level = plan.memory.rate_level if plan is not None else 0
    fc = snap.forecast
    band = None
    if fc is not None and len(fc.tenants):
        p50 = fc.quantile(0.5).sum(axis=0)
        p90 = fc.quantile(0.9).sum(axis=0)
        band = {"issued_at": _iso(fc.issued_at), "step_s": fc.step_s,
                "p50": [num(v) for v in p50], "p90": [num(v) for v in p90]}
    demand = None
    h = snap.history
    if h is not None and len(h):
        tail = h.iloc[-history:]
        demand = {"start": _iso(tail.index[0]), "step_s": cfg.cycle.resolution_s,
                  "values": [num(v) for v in tail.sum(axis=1, min_count=1).to_numpy()]}
    return {
        "at": plan.at if plan else None,
        "capacity": plan.capacity if plan else None,
        "load": num(plan.load) if plan else None,
        "held": int(sum(plan.reservations.values())) if plan else None,
        "high_pool": plan.high_pool if plan else None,
        "held_for": held_split(plan, snap),
        "stale": plan.stale if plan else None,
        "notes": list(plan.notes) if plan else [],
        # the plan's level may be one the config no longer has (levels removed by a reload): no row to show
        "rate_level": {"index": level, "starts_at_load": lvl_cfg[level].load if level < len(lvl_cfg) else None,
                       "rates": ({"high": lvl_cfg[level].high, "normal": lvl_cfg[level].normal,
                                  "low": lvl_cfg[level].low} if level < len(lvl_cfg) else None),
                       "levels": len(lvl_cfg)},
        "model": {"in_use": plan.forecast_model if plan else None, "note": snap.forecaster_note,
                  "fallback": snap.fallback_error, "quality": forecast_quality(snap),
                  # when the first scores come: a forecast is scored once its horizon has passed
                  "horizon_min": cfg.cycle.horizon_steps * cfg.cycle.resolution_s / 60},
        "history": [{"at": s["at"], "capacity": s["capacity"], "load": s["load"], "held": s["reserved"],
                     "rate_level": s["rate_level"]} for s in hist],
        "demand": demand,
        "forecast": band,
        # the operator's view (the console's cluster page): the reason with its error text, never a URL's password
        "health": redact_json(backend.health(detail=True)),
        "types": types_view(snap),
    }


def held_split(plan, snap: Snapshot | None = None) -> dict | None:
    """Why the GPUs held exceed the high tier's pool (issue 37): the held GPUs per reason (Plan.held_for: the high
    tier's forecast, recurring windows, aged tenants, operators' floors) and how far the high tier's holds go beyond
    its guarantee (borrowed from GPUs nobody else needs now). None without a plan or for a plan from before the
    split was kept. With the skill gate on (Plan.forecast_acting), `high_acting` of the `high_tenants` are held for
    their forecast, the others for their demand now with headroom (the cycle's tiers, from `snap`)."""
    if plan is None or not plan.held_for:
        return None
    hf = {k: int(plan.held_for.get(k, 0)) for k in ("high", "window", "aged", "floor")}
    out = {**hf, "high_beyond_pool": max(hf["high"] - int(plan.high_pool), 0)}
    st = snap.state if snap is not None else None
    if plan.forecast_acting and st is not None:
        high = [t for t, tier in zip(st.tenants, st.tiers) if tier == "high"]
        out["high_tenants"] = len(high)
        out["high_acting"] = sum(1 for t in high if (plan.forecast_acting.get(t) or {}).get("acting"))
    return out


def listed_tenants(snap: Snapshot, rows: list[dict], most: int = 25) -> tuple[list[dict], dict | None]:
    """The cluster page's short list (issue 37): the tenants holding capacity and those an operator's fixed limit
    throttles, most held first. A rate level above 0 throttles every tenant alike, so it is said once (the second
    value: the level, its starting load and rates) rather than listing everyone; None at level 0 or without a plan."""
    plan = snap.plan
    fixed = {t for t, lim in (plan.limits.items() if plan is not None else ())
             if lim.reason.startswith("fixed limit")}
    shown = sorted((t for t in rows if t["held"] or t["tenant"] in fixed), key=lambda t: -(t["held"] or 0))[:most]
    level = plan.memory.rate_level if plan is not None else 0
    levels = snap.cfg.ratelimits.levels
    if level <= 0 or not plan.limits:
        return shown, None
    lv = levels[level] if level < len(levels) else None
    return shown, {"index": level, "starts_at_load": lv.load if lv else None,
                   "rates": {"high": lv.high, "normal": lv.normal, "low": lv.low} if lv else None,
                   "fixed": len(fixed)}


def tenant_summary(snap: Snapshot, backend: Backend, tenant: str) -> dict:
    plan = snap.plan
    st = snap.state
    i = _state_index(snap, tenant)
    used = num(st.used[i]) if st is not None and i is not None else None
    lim = _limit(snap, tenant)
    return {"tenant": tenant, "tier": tier_of(snap, backend, tenant), "used": used,
            "held": int(plan.reservations.get(tenant, 0)) if plan else None,
            "quota": plan.quotas.get(tenant) if plan else None,
            "rate": lim["rate"] if lim else None, "throttled": lim["throttled"] if lim else None,
            # the skill gate (policy.skill_gate): whether this tenant's holds and preemptions act on the forecast,
            # and why; None while the gate is off (every tenant acts on it)
            "acting_on_forecast": dict(plan.forecast_acting[tenant]) if plan and tenant in plan.forecast_acting
            else None}


def _queue(snap: Snapshot, tenant: str) -> dict | None:
    """The tenant's place in the queue: its next job in the scheduler's order (high first, aged work, then low;
    the longest waiting first within each: daemon/policy/eta.py), that job's p50 start estimate, and how long its
    oldest job has waited. By wait time alone a high tier's job that starts next read as #65 of 170."""
    from daemon.policy.eta import scheduler_order

    st = snap.state
    i = _state_index(snap, tenant)
    if st is None or i is None or len(st.jobs) == 0:
        return None
    j = st.jobs
    pending = np.flatnonzero(~j.running)
    mine = j.tenant[pending] == i
    if not mine.any():
        return {"pending_jobs": 0, "pending_gpus": 0, "position": None, "expected_start": None}
    cfg = snap.cfg
    order = pending[scheduler_order(j.priority[pending], j.wait_s[pending],
                                    cfg.policy.max_wait_steps * cfg.cycle.resolution_s)]
    position = int(np.flatnonzero(j.tenant[order] == i)[0])
    first = str(j.ids[order[position]])
    nxt = next((r for r in (snap.eta or {}).get("jobs", ()) if r["job_id"] == first), None)
    return {"pending_jobs": int(mine.sum()), "pending_gpus": int(j.gpus[pending[mine]].sum()),
            "position": position + 1, "queue_length": int(pending.size),
            "longest_wait_s": num(float(j.wait_s[pending[mine]].max())),
            "expected_start": nxt["p50_at"] if nxt else None}


def _tenant_forecast(fc, tenant: str):
    """`tenant`'s forecast (horizon x quantiles), None when the forecast has no series of it: on a mixed fleet the
    sum of its typed series (``tenant@spec``), as the policy sizes its hold (daemon/policy/fleet.py)."""
    mine = fleet.tenant_series(fc.tenants, tenant) if fc is not None else []
    if not mine:
        return None
    idx = {name: k for k, name in enumerate(fc.tenants)}
    v = fc.values[[idx[n] for n in mine]]
    # fleet.tenant_values's sum (of the observed series, NaN where none is), for one tenant: that function's
    # cache is keyed on the policy's whole tenant list, which a per-request call would evict
    with np.errstate(all="ignore"):
        return np.where(np.isnan(v).all(axis=0), np.nan, np.nansum(v, axis=0))


def _tenant_model(fc, tenant: str) -> str:
    """The model that forecast `tenant`: with inference services the forecast is two models' merged
    (forecaster/composite.py), and its name names both, so a tenant's page would not say which one is its own."""
    names = {model_of(fc, n) for n in fleet.tenant_series(fc.tenants, tenant)}
    return names.pop() if len(names) == 1 else fc.model


def tenant_view(snap: Snapshot, backend: Backend, tenant: str, viewer: "Principal",
                history: int = HISTORY_STEPS) -> dict:
    """One tenant's page. A tenant `viewer` gets its events trimmed and other tenants' names out of every
    reason and message (`for_viewer`); an operator gets them whole."""
    plan = snap.plan
    st = snap.state
    i = _state_index(snap, tenant)
    out = tenant_summary(snap, backend, tenant)
    out["pending"] = num(st.pending[i]) if st is not None and i is not None else None
    out["limit"] = _limit(snap, tenant)
    out["preemptions"] = [{"job_id": p.job_id, "gpus": p.gpus, "node": p.node, "reason": p.reason}
                          for p in (plan.preemptions if plan else ()) if p.tenant == tenant]
    out["notifications"] = [{"type": n.kind, "message": n.message}
                            for n in (plan.notifications if plan else ()) if n.tenant == tenant and _told(snap, n.kind)]
    events = backend.events(50, tenant=tenant)
    out["recent_events"] = for_viewer(snap, viewer, events)
    if not viewer.operator:  # the plan's own reasons name the tenants a preemption cleared GPUs for
        scrub = _scrubber(tenant, _all_names(snap, events))
        out["preemptions"] = _scrubbed(out["preemptions"], scrub)
        out["notifications"] = _scrubbed(out["notifications"], scrub)
        out["limit"] = _scrubbed(out["limit"], scrub)
    out["queue"] = _queue(snap, tenant)
    fc = snap.forecast
    out["forecast"] = None
    vals = _tenant_forecast(fc, tenant)
    if vals is not None:
        out["forecast"] = {"model": _tenant_model(fc, tenant), "issued_at": _iso(fc.issued_at), "step_s": fc.step_s,
                           "p50": [num(v) for v in vals[:, fc.quantile_index(0.5)]],
                           "p90": [num(v) for v in vals[:, fc.quantile_index(0.9)]]}
    h = snap.history
    out["usage"] = None
    mine = fleet.tenant_series([str(c) for c in h.columns], tenant) if h is not None and len(h) else []
    if mine:  # a mixed fleet: the sum of the tenant's typed series, as the policy reads them
        tail = h[mine].iloc[-history:].sum(axis=1, min_count=1)
        out["usage"] = {"start": _iso(tail.index[0]), "step_s": snap.cfg.cycle.resolution_s,
                        "values": [num(v) for v in tail.to_numpy()]}
    out["override"] = backend.overrides().for_tenant(tenant)
    out["plan_at"] = plan.at if plan else None
    out["types"] = tenant_types(snap, tenant)
    out["pending_by_accepts"] = _pending_by_accepts(snap, tenant)
    out["hold_use"] = _hold_use(snap, backend, tenant)
    out["window_hold"] = window_hold(snap, tenant)
    typed = [n for n in fleet.tenant_series(fc.tenants, tenant) if fleet.SERIES_SEP in n] if fc is not None else []
    if typed:  # a mixed fleet's typed series (tenant@spec), per set of types; `forecast` is their sum
        k90 = fc.quantile_index(0.9)
        idx = {name: k for k, name in enumerate(fc.tenants)}
        out["forecast_by_accepts"] = {n.rsplit(fleet.SERIES_SEP, 1)[1]: [num(v) for v in fc.values[idx[n], :, k90]]
                                      for n in typed}
    return out



def window_hold(snap: Snapshot, tenant: str) -> dict | None:
    """The GPUs of `tenant`'s hold its recurring windows hold now (Plan.window_holds) and which windows those are,
    each with its occurrence's start and end (on the plan's clock) and whether it is open: the tenant's page said
    its hold was for "the p90 peak over the next 10 minutes" while a window held it. None while none holds."""
    plan = snap.plan
    gpus = int(plan.window_holds.get(tenant, 0)) if plan is not None else 0
    if not gpus:
        return None
    now = dt.datetime.fromisoformat(plan.at)
    now = now if now.tzinfo is not None else now.replace(tzinfo=dt.timezone.utc)
    lead_s = snap.cfg.window_min_lead_s()
    holding = []
    for d in plan.windows:
        if d.get("tenant") != tenant:
            continue
        try:
            w = WindowConfig.model_validate(d)
        except ValueError:   # a plan stored by another version: the window is not named, the count still shown
            continue
        start = w.occurrence(now)
        if start is not None and start - w.held_lead(lead_s) <= now:
            holding.append({"name": w.name, "start": start.isoformat(), "end": (start + w.duration).isoformat(),
                            "open": start <= now})
    return {"gpus": gpus, "windows": holding}
