"""The shadow report: the dry-run decisions recorded each cycle (record.py) against the demand seen afterwards.

Pure: records in, figures out. Per tenant and per tier:

- holds: cycles with GPUs held for the tenant, and the waits they would have avoided: at each step after a
  decision (up to the next decision, at most the forecast horizon), the demand seen then above what the tenant
  had running at the decision, as far as the hold's GPUs above that would have covered it (GPU-minutes). It counts
  only demand that really came, so a hold for a peak that never came avoids nothing;
- preemptions: the jobs that would have been preempted (suffered by the tenant), their GPUs and the work they
  would have lost (GPU-minutes since their last checkpoint), and those made for the tenant;
- limits: the cycles whose rate limit was below the tenant's request rate (throttled; only where the source
  reports request rates) and those whose limit was tightened by load (level > 0);
- the forecast's realised coverage: the share of decisions whose forecast (at the policy's quantile) was at or
  above the demand seen one step later (next step), and whose peak over the horizon was at or above the peak
  seen over that horizon (peak; only decisions whose whole horizon has been seen).

The demand seen afterwards is, by default, the records' own `seen` (each cycle records the newest demand its
source served), so the report needs the store only; a demand frame (tenant x time) can be given instead.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np
import pandas as pd

from daemon.shadow.record import tenants as tenant_rows

TIERS = ("high", "normal", "low")
EPS = 1e-9


def demand_seen(records: Iterable[dict], tenant: str | None = None) -> pd.DataFrame:
    """The demand the records saw, one row per distinct `seen_at` (the last record's value wins); `tenant`: that
    tenant's column only."""
    rows: dict[pd.Timestamp, dict[str, float]] = {}
    for r in records:
        at = pd.Timestamp(r["seen_at"])
        rows[at] = {t: (np.nan if d.get("seen") is None else float(d["seen"]))
                    for t, d in tenant_rows(r, tenant).items()}
    if not rows:
        return pd.DataFrame()
    f = pd.DataFrame.from_dict(rows, orient="index").sort_index()
    f.index.name = "time"
    return f


def _new() -> dict[str, Any]:
    return {"cycles": 0, "hold_cycles": 0, "held_gpu_cycles": 0, "waits_avoided_gpu_min": 0.0,
            "preemptions": 0, "preempted_gpus": 0, "work_lost_gpu_min": 0.0, "preemptions_for": 0,
            "throttled_cycles": 0, "rate_known_cycles": 0, "tightened_cycles": 0,
            "cov_next": [0, 0], "cov_peak": [0, 0]}


def _finish(a: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in a.items() if not k.startswith("cov_")}
    out["waits_avoided_gpu_min"] = round(out["waits_avoided_gpu_min"], 3)
    out["work_lost_gpu_min"] = round(out["work_lost_gpu_min"], 3)
    out["throttled_share"] = a["throttled_cycles"] / a["rate_known_cycles"] if a["rate_known_cycles"] else None
    out["tightened_share"] = a["tightened_cycles"] / a["cycles"] if a["cycles"] else None
    for k in ("next", "peak"):
        ok, n = a[f"cov_{k}"]
        out[f"coverage_{k}"] = ok / n if n else None
        out[f"coverage_{k}_scored"] = n
    return out


def _next_times(ats: list[pd.Timestamp]) -> list[pd.Timestamp | None]:
    """For each time of a sorted list, the first later time strictly after it (None for the last ones): one
    backwards pass, not a scan of the rest per record (which made the report quadratic)."""
    out: list[pd.Timestamp | None] = [None] * len(ats)
    for k in range(len(ats) - 2, -1, -1):
        out[k] = ats[k + 1] if ats[k + 1] > ats[k] else out[k + 1]
    return out


def shadow_report(records: list[dict], demand: pd.DataFrame | None = None, tenant: str | None = None,
                  private: bool = False) -> dict:
    """The report over `records` (oldest first or not: they are ordered by `seen_at`); `tenant` keeps that
    tenant's rows only (a tenant token's view), and decodes no other tenant's. `private` (the console's tenant
    view): no figure drawn from other tenants' jobs either: `preemptions_for` (how many of others' jobs would have
    been preempted for it) is None, as whom a preemption made room for is the operator's to know.

    Linear in the records: each record's windows of the demand seen are found by binary search in the sorted
    times (not boolean masks over all of them) and read as slices of one array."""
    keyed = sorted(((pd.Timestamp(r["seen_at"]), r.get("cycle", 0), i) for i, r in enumerate(records)),
                   key=lambda x: x[:2])
    ats = [x[0] for x in keyed]
    recs = [{**records[i], "tenants": tenant_rows(records[i], tenant)} for _, _, i in keyed]  # one decoding each
    if not recs:
        return {"cycles": 0, "tenants": {}, "tiers": {}, "from": None, "to": None, "quantile": None,
                "preemptions": 0, "hold_cycles": 0}
    seen = demand if demand is not None else demand_seen(recs)
    seen = seen.sort_index()
    if tenant is not None:
        seen = seen[[c for c in seen.columns if c == tenant]]
    times = seen.index
    vals = seen.to_numpy(dtype=float) if len(seen.columns) else np.empty((len(times), 0))
    col = {c: j for j, c in enumerate(seen.columns)}
    nxts = _next_times(ats)
    per: dict[str, dict] = defaultdict(_new)
    tier_of: dict[str, str] = {}
    for k, r in enumerate(recs):
        at = ats[k]
        step = pd.Timedelta(seconds=int(r["step_s"]))
        horizon = int(r["horizon_steps"])
        end = at + horizon * step
        nxt = nxts[k]
        until = min(end, nxt) if nxt is not None else min(end, at + step)
        i0 = int(times.searchsorted(at, side="right"))           # first time after the decision
        i_until = int(times.searchsorted(until, side="right"))   # covered: (at, until]
        i_end = int(times.searchsorted(end, side="right"))       # ahead: (at, end]
        n_ahead = max(i_end - i0, 0)
        whole = n_ahead >= horizon and (n_ahead == 0 or times[i_end - 1] >= end)
        j1 = int(times.searchsorted(at + step, side="left"))
        one = j1 if j1 < len(times) and times[j1] == at + step else None  # the row seen one step later
        for t, d in r["tenants"].items():
            if tenant is not None and t != tenant:
                continue
            a = per[t]
            tier_of[t] = d.get("tier", "normal")
            a["cycles"] += 1
            c = col.get(t)
            hold = int(d.get("hold") or 0)
            used = d.get("used")
            if hold > 0:
                a["hold_cycles"] += 1
                a["held_gpu_cycles"] += hold
                if used is not None and c is not None:
                    extra = max(hold - float(used), 0.0)
                    got = vals[i0:max(i_until, i0), c]
                    grow = np.clip(np.nan_to_num(got - float(used), nan=0.0), 0.0, extra)
                    a["waits_avoided_gpu_min"] += float(grow.sum()) * step.total_seconds() / 60.0
            rate, rr = d.get("rate"), d.get("request_rate")
            if rate is not None and rr is not None:
                a["rate_known_cycles"] += 1
                a["throttled_cycles"] += int(rr > rate + EPS)
            if (d.get("level") or 0) > 0:
                a["tightened_cycles"] += 1
            fn, fp = d.get("fc_next"), d.get("fc_peak")
            if fn is not None and c is not None and one is not None and np.isfinite(vals[one, c]):
                a["cov_next"][1] += 1
                a["cov_next"][0] += int(float(vals[one, c]) <= fn + EPS)
            if fp is not None and whole and c is not None:
                ahead = vals[i0:i0 + n_ahead, c]
                if np.isfinite(ahead).all():
                    a["cov_peak"][1] += 1
                    a["cov_peak"][0] += int(len(ahead) > 0 and float(ahead.max()) <= fp + EPS)
        for p in r.get("preemptions", []):
            if tenant is None or p["tenant"] == tenant:
                a = per[p["tenant"]]
                tier_of.setdefault(p["tenant"], r["tenants"].get(p["tenant"], {}).get("tier", "low"))
                a["preemptions"] += 1
                a["preempted_gpus"] += int(p["gpus"])
                a["work_lost_gpu_min"] += float(p.get("lost_gpu_min") or 0.0)
            if p.get("for_tenant") and not private and (tenant is None or p["for_tenant"] == tenant):
                per[p["for_tenant"]]["preemptions_for"] += 1
                tier_of.setdefault(p["for_tenant"], r["tenants"].get(p["for_tenant"], {}).get("tier", "normal"))
    if private:
        for a in per.values():
            a["preemptions_for"] = None
    tiers: dict[str, dict] = {}
    for tr in TIERS:
        agg = _new()
        names = [t for t in per if tier_of.get(t) == tr]
        if not names:
            continue
        for t in names:
            for key, v in per[t].items():
                if key.startswith("cov_"):
                    agg[key] = [agg[key][0] + v[0], agg[key][1] + v[1]]
                elif v is None or agg[key] is None:
                    agg[key] = None
                else:
                    agg[key] += v
        agg["tenants"] = len(names)
        tiers[tr] = _finish(agg)
    out_t = {t: {"tier": tier_of.get(t, "normal"), **_finish(a)} for t, a in sorted(per.items())}
    return {"cycles": len(recs), "from": recs[0]["at"], "to": recs[-1]["at"], "quantile": recs[-1].get("quantile"),
            "preemptions": sum(a["preemptions"] for a in out_t.values()),
            "hold_cycles": sum(a["hold_cycles"] for a in out_t.values()),
            "tenants": out_t, "tiers": tiers}


def table(rep: dict) -> str:
    """Per tier, then per tenant, for the terminal."""
    head = (f"{'':<28} {'tier':<6} {'cycles':>6} {'holds':>6} {'avoided':>8} {'preempt':>7} {'lost':>8} "
            f"{'forIt':>5} {'thrott':>6} {'tight':>6} {'cov1':>5} {'covPk':>5}")
    unit = (f"{'':<28} {'':<6} {'':>6} {'cyc':>6} {'GPU-min':>8} {'jobs':>7} {'GPU-min':>8} {'jobs':>5} "
            f"{'%':>6} {'%':>6} {'%':>5} {'%':>5}")

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}"

    def dash(x):
        return "-" if x is None else x

    def row(name, tier, a):
        return (f"{name:<28} {tier:<6} {a['cycles']:>6} {a['hold_cycles']:>6} {a['waits_avoided_gpu_min']:>8.0f} "
                f"{a['preemptions']:>7} {a['work_lost_gpu_min']:>8.0f} {dash(a['preemptions_for']):>5} "
                f"{pct(a['throttled_share']):>6} {pct(a['tightened_share']):>6} {pct(a['coverage_next']):>5} "
                f"{pct(a['coverage_peak']):>5}")

    lines = [f"shadow report: {rep['cycles']} dry-run cycles from {rep['from']} to {rep['to']}, forecast quantile "
             f"{rep['quantile']}", head, unit]
    lines += [row(f"tier {t}", t, a) for t, a in rep["tiers"].items()]
    lines += [row(n[:28], a["tier"], a) for n, a in rep["tenants"].items()]
    return "\n".join(lines)
