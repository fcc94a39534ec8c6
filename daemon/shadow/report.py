"""The shadow report: the dry-run decisions recorded each cycle (record.py) against the demand seen afterwards.

Pure: records in, figures out. Per tenant and per tier:

- holds: cycles with GPUs held for the tenant, and the waits they would have avoided: at each step after a
  decision (up to the next decision, at most the forecast horizon), the demand seen then above what the tenant
  had running at the decision, as far as the hold's GPUs above that would have covered it (GPU-minutes). It counts
  only demand that really came, so a hold for a peak that never came avoids nothing;
- preemptions: the jobs that would have been preempted (suffered by the tenant), their GPUs and the work they
  would have lost (GPU-minutes since their last checkpoint), and those made for the tenant;
- limits: the cycles whose rate limit was below the tenant's request rate (only where the source reports
  request rates) and those whose limit was tightened by load (level > 0) or fixed by an operator, where a gateway
  would have applied it (the record's `limits_enforced`: the redis actuator enabled; older records: assumed);
  cycles without one count as `unenforced_cycles` and throttle nobody;
- the forecast's realised coverage: the share of decisions whose forecast (at the policy's quantile) was at or
  above the demand seen one step later (next step), and whose peak over the horizon was at or above the peak
  seen over that horizon (peak; only decisions whose whole horizon has been seen).

The demand seen afterwards is, by default, the records' own `seen` (each cycle records the newest demand its
source served), so the report needs the store only; a demand frame (tenant x time) can be given instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from daemon.shadow.record import problem, tenants as tenant_rows

TIERS = ("high", "normal", "low")
SKIPPED_LISTED = 20   # skipped records listed by id in a report (all are counted)
EPS = 1e-9
# a tier's counts that are of cycles: a cycle counts once for the tier however many of its tenants it names
TIER_CYCLES = ("cycles", "hold_cycles", "tightened_cycles", "rate_known_cycles", "throttled_cycles",
               "unenforced_cycles")


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
            "throttled_cycles": 0, "rate_known_cycles": 0, "tightened_cycles": 0, "unenforced_cycles": 0,
            "gated_cycles": 0, "forecast_cycles": 0, "gated_series_cycles": 0, "forecast_series_cycles": 0,
            "cov_next": [0, 0], "cov_peak": [0, 0]}


def _finish(a: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in a.items() if not k.startswith("cov_")}
    out["waits_avoided_gpu_min"] = round(out["waits_avoided_gpu_min"], 3)
    out["work_lost_gpu_min"] = round(out["work_lost_gpu_min"], 3)
    out["throttled_share"] = a["throttled_cycles"] / a["rate_known_cycles"] if a["rate_known_cycles"] else None
    # of the cycles whose limits a gateway would have applied: None (the table's "-") where none would
    enforced = a["cycles"] - a["unenforced_cycles"]
    out["tightened_share"] = a["tightened_cycles"] / enforced if enforced > 0 else None
    # the skill gate: the share of the cycles it decided in which the plan acted on the forecast
    out["acting_share"] = a["forecast_cycles"] / a["gated_cycles"] if a["gated_cycles"] else None
    # and of its series' cycles (one series per GPU type the tenant has on a mixed fleet, else the tenant's own)
    gs = a.get("gated_series_cycles") or 0
    out["acting_series_share"] = a.get("forecast_series_cycles", 0) / gs if gs else None
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


FIELDS = ("used", "seen", "hold", "rate", "level", "request_rate", "fc_next", "fc_peak")


def _names(r: dict, only: str | None) -> list[str]:
    names = list(r["tenants"]) if "tenants" in r else r["names"]
    if only is None:
        return list(names)
    return [only] if only in names else []


def _columns(r: dict, only: str | None) -> tuple[list[str], list[str], dict[str, np.ndarray]]:
    """One record's per-tenant figures as arrays (NaN where unknown), without a dict per tenant; `only`: that
    tenant's alone."""
    names = _names(r, only)
    if "tenants" in r:  # one dict per tenant (version 1)
        rows = r["tenants"]
        tiers = [rows[n].get("tier", "normal") for n in names]
        f = {k: np.array([rows[n].get(k) for n in names], dtype=float) for k in FIELDS}
        f["fixed"] = np.array([_fixed(rows[n].get("limit_reason")) for n in names], dtype=bool)
        f["acting"] = np.full(len(names), -1.0)
        f["gated_series"], f["acting_series"] = f["acting"].copy(), f["acting"].copy()
    else:
        cols = r["cols"]
        i = range(len(names)) if only is None else ([r["names"].index(only)] if names else [])
        if only is None:
            tiers = list(cols["tier"])
            f = {k: np.array(cols[k], dtype=float) for k in FIELDS}
        else:
            tiers = [cols["tier"][j] for j in i]
            f = {k: np.array([cols[k][j] for j in i], dtype=float) for k in FIELDS}
        f["level"][f["level"] < 0] = np.nan  # -1: no limit for the tenant
        reasons = r.get("reasons") or []
        fixed_at = [k for k, why in enumerate(reasons) if _fixed(why)]
        lr = cols.get("limit_reason")
        f["fixed"] = (np.isin(np.array([lr[j] for j in i], dtype=np.int64), fixed_at) if fixed_at and lr is not None
                      else np.zeros(len(names), dtype=bool))
        acting = cols.get("acting")   # the skill gate's choice (-1: off; absent in older records)
        f["acting"] = np.full(len(names), -1.0) if acting is None else \
            np.array(acting if only is None else [acting[j] for j in i], dtype=float)
        for key in ("gated_series", "acting_series"):   # the gate's series (per GPU type on a mixed fleet); a
            col = cols.get(key)                         # record from before them: the tenant's own, one series
            f[key] = (np.where(f["acting"] >= 0, 1.0 if key == "gated_series" else f["acting"], -1.0)
                      if col is None else np.array(col if only is None else [col[j] for j in i], dtype=float))
    return names, tiers, f


def _fixed(reason: Any) -> bool:
    """Whether a limit's reason is an operator's fixed limit (daemon/policy/ratelimits.py), which the API counts as
    throttled whatever the load level."""
    return isinstance(reason, str) and reason.startswith("fixed limit")


@dataclass(frozen=True)
class Totals:
    """What the report counts over a run of records, before it is read for one viewer (`view`): the console
    counts them once per cycle and reads every tenant's report from them (docs/console-and-api.md)."""

    cycles: int
    first: Any                                   # the first and last records' `at` (by seen_at), their quantile
    last: Any
    quantile: Any
    per: dict[str, dict[str, Any]]               # tenant -> its counters (coverage as [ok, scored])
    tier_of: dict[str, str]
    skipped: tuple[dict[str, Any], ...] = ()     # {"id", "problem"} of each record left out
    # tier -> its counts of cycles (records), not of tenant-cycles: cycles naming a tenant of the tier, with a
    # hold for one, with one's limit tightened, with a request rate known for one, with one throttled (TIER_CYCLES)
    tier_cycles: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    unenforced: int = 0   # the records whose limits no gateway would have applied (no redis actuator)


def skipped_lines(rep: dict) -> list[str]:
    """One line per record a report left out (those it lists), and how many more it counted."""
    lines = [f"shadow record {s['id']} skipped: {s['problem']}" for s in rep.get("skipped", ())]
    more = rep.get("skipped_records", 0) - len(lines)
    return lines + ([f"... and {more} more shadow records skipped"] if more > 0 else [])


def count(records: list[dict], demand: pd.DataFrame | None = None, tenant: str | None = None) -> Totals:
    """The counters of `records` (oldest first or not: they are ordered by `seen_at`); `tenant`: that tenant's
    alone, decoding no other tenant's. A record that cannot be read (``record.problem``: a missing field, a
    column of the wrong length, figures that are not numbers, bytes that are not a record) is left out whole and
    listed in `skipped` by its id (its row id in the state store, its stream id in Redis, else its position).

    Linear in the records, and vectorised over each record's tenants: each record's windows of the demand seen
    are found by binary search in the sorted times (not boolean masks over all of them) and read as slices of
    one array, its figures added into per-tenant arrays (no dict per tenant and record)."""
    skipped: list[dict[str, Any]] = []
    good: list[tuple[pd.Timestamp, Any, int]] = []
    kept_cols: dict[int, tuple[list[str], list[str], dict[str, np.ndarray]]] = {}
    for i, r in enumerate(records):
        why = problem(r)
        if why is None:
            try:  # the figures are numbers: decoded now (kept for a tenant's view, where they are small)
                cols = _columns(r, tenant)
                if tenant is not None:
                    kept_cols[i] = cols
            except (TypeError, ValueError, KeyError, IndexError) as exc:
                why = f"figures that are not numbers ({exc})"
        if why is not None:
            skipped.append({"id": r.get("id", f"#{i}") if isinstance(r, dict) else f"#{i}", "problem": why})
            continue
        good.append((pd.Timestamp(r["seen_at"]), r.get("cycle", 0), i))
    keyed = sorted(good, key=lambda x: x[:2])
    if not keyed:
        return Totals(0, None, None, None, {}, {}, tuple(skipped))
    ats = [x[0] for x in keyed]
    recs = [records[i] for _, _, i in keyed]
    kept = [kept_cols[i] for _, _, i in keyed] if tenant is not None else []
    # every tenant named, one index each
    gi: dict[str, int] = {}
    seen_lists: set[int] = set()
    for r in recs:
        names = r["tenants"] if "tenants" in r else r["names"]
        if tenant is not None or id(names) not in seen_lists:  # records may share one list of names
            seen_lists.add(id(names))
            for n in _names(r, tenant):
                gi.setdefault(n, len(gi))
        for p in r.get("preemptions", []):
            for n in (p["tenant"], p.get("for_tenant")):
                if n and (tenant is None or n == tenant):
                    gi.setdefault(n, len(gi))
    gnames = list(gi)
    nt = len(gnames)
    cache: dict[tuple, np.ndarray] = {}

    def index(names: list[str]) -> np.ndarray:
        key = tuple(names)
        if key not in cache:
            cache[key] = np.array([gi[n] for n in names], dtype=np.int64)
        return cache[key]

    # the demand seen: one row per distinct seen_at (the last record's wins), one column per tenant
    if demand is not None:
        seen = demand.sort_index()
        times = seen.index
        vals = seen.to_numpy(dtype=float) if len(seen.columns) else np.empty((len(times), 0))
        fcol = {c: j for j, c in enumerate(seen.columns)}
        gcol = np.array([fcol.get(n, -1) for n in gnames], dtype=np.int64)
    else:
        times = pd.DatetimeIndex(sorted(set(ats)))
        vals = np.full((len(times), nt), np.nan)
        for k, (r, at) in enumerate(zip(recs, ats)):
            names, _, f = kept[k] if tenant is not None else (_names(r, None), None, None)
            if f is None:
                seen_col = r["cols"]["seen"] if "tenants" not in r else [r["tenants"][n].get("seen") for n in names]
                v = np.array(seen_col, dtype=float)
            else:
                v = f["seen"]
            j = int(times.searchsorted(at))
            vals[j] = np.nan
            vals[j, index(names)] = v
        gcol = np.arange(nt, dtype=np.int64)
    z = np.zeros(nt, dtype=np.int64)
    cyc, hold_c, held, rate_known, thr, tight = z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy()
    unenf = z.copy()
    n_unenf = 0
    cn_ok, cn_n, cp_ok, cp_n = z.copy(), z.copy(), z.copy(), z.copy()
    gated, on_fc, gated_s, on_fc_s = z.copy(), z.copy(), z.copy(), z.copy()
    waits = np.zeros(nt)
    pre_n, pre_g, pre_for = z.copy(), z.copy(), z.copy()
    lost = np.zeros(nt)
    touched = np.zeros(nt, dtype=bool)
    tier_of: dict[str, str] = {}
    tier_cycles: dict[str, dict[str, int]] = {}
    ran: dict[tuple[str, str], tuple[pd.Timestamp, float]] = {}   # a preempted job's last record (_again)
    nxts = _next_times(ats)
    for k, r in enumerate(recs):
        at = ats[k]
        step = pd.Timedelta(seconds=int(r["step_s"]))
        horizon = int(r["horizon_steps"])
        end = at + horizon * step
        nxt = nxts[k]
        until = min(end, nxt) if nxt is not None else min(end, at + step)
        i0 = int(times.searchsorted(at, side="right"))           # first time after the decision
        i_until = max(int(times.searchsorted(until, side="right")), i0)   # covered: (at, until]
        i_end = int(times.searchsorted(end, side="right"))       # ahead: (at, end]
        n_ahead = max(i_end - i0, 0)
        whole = n_ahead >= horizon and (n_ahead == 0 or times[i_end - 1] >= end)
        j1 = int(times.searchsorted(at + step, side="left"))
        one = j1 if j1 < len(times) and times[j1] == at + step else None  # the row seen one step later
        names, tiers, f = kept[k] if kept else _columns(r, tenant)
        applied = bool(r.get("limits_enforced", True))   # older records: as they were counted
        n_unenf += not applied
        if names:
            g = index(names)
            c = gcol[g]
            has = c >= 0
            tier_of.update(zip(names, tiers))
            cyc[g] += 1
            hold = np.trunc(np.nan_to_num(f["hold"], nan=0.0)).astype(np.int64)
            used = f["used"]
            m = hold > 0
            hold_c[g[m]] += 1
            held[g[m]] += hold[m]
            m = m & np.isfinite(used) & has
            if m.any() and i_until > i0:
                got = vals[i0:i_until][:, c[m]]
                extra = np.maximum(hold[m] - used[m], 0.0)
                grow = np.clip(np.nan_to_num(got - used[m], nan=0.0), 0.0, extra)
                waits[g[m]] += grow.sum(axis=0) * step.total_seconds() / 60.0
            rate, rr = f["rate"], f["request_rate"]
            m = np.isfinite(rate) & np.isfinite(rr)
            rate_known[g[m]] += 1
            over = m & (np.nan_to_num(rr, nan=0.0) > np.nan_to_num(rate, nan=np.inf) + EPS)
            thr[g] += over
            # throttled as the API says it: the limit tightened by the load level, or fixed by an operator, where
            # a gateway would have applied it (a first-day walk without one read 100%)
            tightened = ((np.nan_to_num(f["level"], nan=0.0) > 0) | f["fixed"]) & applied
            tight[g] += tightened
            unenf[g] += not applied
            _tier_cycle(tier_cycles, tiers, hold > 0, tightened, m, over, applied)
            gated[g] += f["acting"] >= 0
            on_fc[g] += f["acting"] == 1
            np.add.at(gated_s, g, np.maximum(f["gated_series"], 0).astype(np.int64))
            np.add.at(on_fc_s, g, np.maximum(f["acting_series"], 0).astype(np.int64))
            fn, fp = f["fc_next"], f["fc_peak"]
            if one is not None:
                v = np.where(has, vals[one][np.where(has, c, 0)] if vals.shape[1] else np.nan, np.nan)
                m = np.isfinite(fn) & np.isfinite(v)
                cn_n[g[m]] += 1
                cn_ok[g[m]] += v[m] <= fn[m] + EPS
            if whole:
                m = np.isfinite(fp) & has
                if m.any():
                    ahead = vals[i0:i0 + n_ahead][:, c[m]]
                    fin = np.isfinite(ahead).all(axis=0)
                    gm = g[m][fin]
                    cp_n[gm] += 1
                    if n_ahead > 0:
                        cp_ok[gm] += ahead[:, fin].max(axis=0) <= fp[m][fin] + EPS
        rt = dict(zip(names, tiers)) if r.get("preemptions") else {}
        for p in r.get("preemptions", []):
            if _again(ran, p, at, step):
                continue
            if tenant is None or p["tenant"] == tenant:
                j = gi[p["tenant"]]
                touched[j] = True
                tier_of.setdefault(p["tenant"], rt.get(p["tenant"], "low"))
                pre_n[j] += 1
                pre_g[j] += int(p["gpus"])
                lost[j] += float(p.get("lost_gpu_min") or 0.0)
            if p.get("for_tenant") and (tenant is None or p["for_tenant"] == tenant):
                j = gi[p["for_tenant"]]
                touched[j] = True
                pre_for[j] += 1
                tier_of.setdefault(p["for_tenant"], rt.get(p["for_tenant"], "normal"))
    per: dict[str, dict] = {}
    for j in np.flatnonzero(touched | (cyc > 0)):
        per[gnames[j]] = {
            "cycles": int(cyc[j]), "hold_cycles": int(hold_c[j]), "held_gpu_cycles": int(held[j]),
            "waits_avoided_gpu_min": float(waits[j]), "preemptions": int(pre_n[j]), "preempted_gpus": int(pre_g[j]),
            "work_lost_gpu_min": float(lost[j]), "preemptions_for": int(pre_for[j]),
            "throttled_cycles": int(thr[j]), "rate_known_cycles": int(rate_known[j]),
            "tightened_cycles": int(tight[j]), "unenforced_cycles": int(unenf[j]), "gated_cycles": int(gated[j]),
            "forecast_cycles": int(on_fc[j]),
            "gated_series_cycles": int(gated_s[j]), "forecast_series_cycles": int(on_fc_s[j]),
            "cov_next": [int(cn_ok[j]), int(cn_n[j])],
            "cov_peak": [int(cp_ok[j]), int(cp_n[j])]}
    return Totals(len(recs), recs[0]["at"], recs[-1]["at"], recs[-1].get("quantile"), per, tier_of, tuple(skipped),
                  tier_cycles, n_unenf)


def _tier_cycle(acc: dict[str, dict[str, int]], tiers: list[str], hold: np.ndarray, tightened: np.ndarray,
                known: np.ndarray, over: np.ndarray, applied: bool = True) -> None:
    """Add one record to each tier's counts of cycles (TIER_CYCLES): once per tier it names, whatever the number
    of its tenants (a tier's "cycles" summed over tenants read 40,000 for 2,000 cycles of 20 tenants)."""
    tarr = np.asarray(tiers)
    for tr in dict.fromkeys(tiers):
        m = tarr == tr
        a = acc.setdefault(tr, dict.fromkeys(TIER_CYCLES, 0))
        a["cycles"] += 1
        a["hold_cycles"] += bool(hold[m].any())
        a["tightened_cycles"] += bool(tightened[m].any())
        a["rate_known_cycles"] += bool(known[m].any())
        a["throttled_cycles"] += bool(over[m].any())
        a["unenforced_cycles"] += not applied


def view(tot: Totals, tenant: str | None = None, private: bool = False) -> dict:
    """The report of `tot` as one viewer reads it: `tenant` keeps that tenant's rows only (a tenant token's view;
    its tier row is its own figures). `private` (the console's tenant view): no figure drawn from other tenants'
    jobs either: `preemptions_for` (how many of others' jobs would have been preempted for it) is None, as whom a
    preemption made room for is the operator's to know. Cheap: dicts over the counted tenants, no record read."""
    per = tot.per if tenant is None else ({tenant: tot.per[tenant]} if tenant in tot.per else {})
    skipped = {"skipped_records": len(tot.skipped), "skipped": list(tot.skipped[:SKIPPED_LISTED])}
    if not tot.cycles:
        return {"cycles": 0, "tenants": {}, "tiers": {}, "from": None, "to": None, "quantile": None,
                "preemptions": 0, "hold_cycles": 0, "unenforced_cycles": 0, **skipped}
    if private:  # nor a row for a tenant that appears only as the one others' jobs were preempted for
        per = {t: {**a, "preemptions_for": None} for t, a in per.items() if a["cycles"] or a["preemptions"]}
    tier_of = tot.tier_of
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
        if tenant is None and tr in tot.tier_cycles:  # cycles, not tenant-cycles (a tenant's view: its own rows)
            agg.update(tot.tier_cycles[tr])
        tiers[tr] = _finish(agg)
    out_t = {t: {"tier": tier_of.get(t, "normal"), **_finish(a)} for t, a in sorted(per.items())}
    return {"cycles": tot.cycles, "from": tot.first, "to": tot.last, "quantile": tot.quantile,
            "preemptions": sum(a["preemptions"] for a in out_t.values()),
            "hold_cycles": sum(a["hold_cycles"] for a in out_t.values()),
            "unenforced_cycles": tot.unenforced,
            "tenants": out_t, "tiers": tiers, **skipped}




def _again(ran: dict, p: dict, at: pd.Timestamp, step: pd.Timedelta) -> bool:
    """Whether preemption `p` is one an earlier record already counted: the same job, not restarted since. A dry run
    evicts nothing, so a job the plan picks stays and the next cycles pick it again (a first-day walk on Kubernetes
    counted one 8-GPU pod twice, its lost work twice); a job preempted and started again (the embedded simulator
    acts) has run less than the time since, and counts again. Records without the runtime count each time."""
    rt = p.get("runtime_s")
    if rt is None:
        return False
    key = (p["tenant"], str(p["job_id"]))
    last = ran.get(key)
    ran[key] = (at, float(rt))
    if last is None:
        return False
    since = max((at - last[0]).total_seconds(), 0.0)
    return float(rt) + step.total_seconds() >= last[1] + since or float(rt) == last[1] == 0.0


def shadow_report(records: list[dict], demand: pd.DataFrame | None = None, tenant: str | None = None,
                  private: bool = False) -> dict:
    """The report over `records` (`count`, then `view`); `tenant` counts and keeps that tenant's rows only."""
    return view(count(records, demand, tenant), tenant, private)


# the terminal table's columns and what each means (printed under the table; docs/own-cluster.md lists them too)
LEGEND = (
    ("cycles", "dry-run cycles that named the tenant (a tier: each cycle once, however many of its tenants)"),
    ("holds", "cycles with GPUs held for it (a tier: for any of its tenants)"),
    ("avoided", "GPU-minutes of waits the holds would have avoided (demand that came, as far as the hold covered it)"),
    ("preempt", "its jobs that would have been preempted"),
    ("lost", "GPU-minutes of work those preemptions would have lost (since each job's last checkpoint)"),
    ("forIt", "other tenants' jobs that would have been preempted to make room for it"),
    ("thrott", "% of cycles throttled: its limit tightened by the load level or fixed by an operator (the API's "
               "`throttled`), of those a gateway would have applied it in (- where none: no redis actuator)"),
    ("over", "% of cycles whose limit was below its request rate (- where the source reports no request rates)"),
    ("cov1", "% of decisions whose forecast was at or above the demand seen one step later (- before one is seen)"),
    ("covPk", "% of decisions whose forecast peak was at or above the peak seen over the horizon (- until a "
              "decision's whole horizon is among the records read: a --last shorter than the horizon never has one)"),
    ("onFc", "% of the cycles the skill gate decided in which its plan acted on the forecast (- while the gate is "
             "off; a tier: of its tenants' cycles)"),
)


def legend() -> str:
    """The table's columns, one line each."""
    width = max(len(k) for k, _ in LEGEND)
    return "\n".join(["columns:"] + [f"  {k:<{width}}  {v}" for k, v in LEGEND])


def table(rep: dict) -> str:
    """Per tier, then per tenant, for the terminal, with the legend of its columns under it."""
    head = (f"{'':<28} {'tier':<6} {'cycles':>6} {'holds':>6} {'avoided':>8} {'preempt':>7} {'lost':>8} "
            f"{'forIt':>5} {'thrott':>6} {'over':>6} {'cov1':>5} {'covPk':>5} {'onFc':>5}")
    unit = (f"{'':<28} {'':<6} {'':>6} {'cyc':>6} {'GPU-min':>8} {'jobs':>7} {'GPU-min':>8} {'jobs':>5} "
            f"{'%':>6} {'%':>6} {'%':>5} {'%':>5} {'%':>5}")

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}"

    def dash(x):
        return "-" if x is None else x

    def row(name, tier, a):
        return (f"{name:<28} {tier:<6} {a['cycles']:>6} {a['hold_cycles']:>6} {a['waits_avoided_gpu_min']:>8.0f} "
                f"{a['preemptions']:>7} {a['work_lost_gpu_min']:>8.0f} {dash(a['preemptions_for']):>5} "
                f"{pct(a['tightened_share']):>6} {pct(a['throttled_share']):>6} {pct(a['coverage_next']):>5} "
                f"{pct(a['coverage_peak']):>5} {pct(a.get('acting_share')):>5}")

    lines = [f"shadow report: {rep['cycles']} dry-run cycles from {rep['from']} to {rep['to']}, forecast quantile "
             f"{rep['quantile']}" + (f" ({rep['skipped_records']} corrupt records skipped)"
                                    if rep.get("skipped_records") else "")]
    if rep.get("unenforced_cycles"):
        lines.append(f"rate limits: no gateway would have applied them in {rep['unenforced_cycles']} of these cycles "
                     "(actuators.enabled has no redis): the limits are the plan's, no tenant throttled (thrott)")
    lines += [head, unit]
    lines += [row(f"tier {t}", t, a) for t, a in rep["tiers"].items()]
    lines += [row(n[:28], a["tier"], a) for n, a in rep["tenants"].items()]
    return "\n".join(lines + ["", legend()])
