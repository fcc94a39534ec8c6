"""Renderer for docs/forecasting.md's "why the gate keeps none of synthetic's gain": bench/gate_hours_bench.py's
hold losses by hour of the day (the gate's evidence) beside where the ungated run's high-tier gain fell and what it
cost the other tiers."""

from __future__ import annotations

from bench.render.common import block, exists, load, n, pct, source, table

FILES = ("gate_hours_synthetic.json", "gate_hours_synthetic_fit.json")
PEAK_HOURS = range(12, 16)   # the 14:00 peak's rise and fall (its width is 20-45 min)
RUNS = ("reactive", "predictive_ungated", "predictive_gated")


def _ratio(rows: list[list[float]], hours=range(24)) -> float | None:
    f = sum(rows[h][0] for h in hours)
    r = sum(rows[h][1] for h in hours)
    return f / r if r > 0 else None


def _r(x: float | None) -> str:
    return "-" if x is None else pct(x, 0)


def _tenants(d: dict) -> str:
    on_at = 1 - d["gate_margin"]
    rows = []
    for t in d["high_tier"]:
        by = t["hold_loss_by_hour"]
        p50 = by["0.5"]
        hourly = [_ratio(p50, [h]) for h in range(24)]
        wins = [h for h, x in enumerate(hourly) if x is not None and x <= on_at]
        best = min((h for h, x in enumerate(hourly) if x is not None), key=lambda h: hourly[h], default=None)
        rows.append([t["tenant"], "yes" if t["has_1400_peak"] else "no",
                     " / ".join(_r(_ratio(by[f"{q:g}"])) for q in d["quantiles"]),
                     _r(_ratio(p50, PEAK_HOURS)), f"{len(wins)} of 24",
                     "-" if best is None else f"{best:02d}:00 ({_r(hourly[best])})"])
    qs = " / ".join(f"p{100 * q:g}" for q in d["quantiles"])
    return table(["high-tier tenant", "14:00 peak", f"forecast holds' loss / reactive's, all day ({qs})",
                  "the same at p50, 12:00-15:59", f"hours at p50 <= {pct(on_at, 0)} (the gate's bar)",
                  "best hour at p50"], rows)


def _runs(d: dict) -> tuple[str, str]:
    rows = []
    for key in RUNS:
        r = d["runs"][key]
        u = r["unmet_gpu_min"]
        g = r.get("skill_gate")
        share = "all (ungated)" if key == "predictive_ungated" else "-" if not g else \
            pct(g["read_tenant_steps_on_forecast"] / max(g["read_tenant_steps"], 1), 0)
        rows.append([r["label"], pct(r["utilization"]), n(u["high"]), n(u["normal"]), n(u["low"]),
                     n(r["preemptions"]), share])
    re, un = d["runs"]["reactive"], d["runs"]["predictive_ungated"]
    gain = re["unmet_gpu_min"]["high"] - un["unmet_gpu_min"]["high"]
    cost = sum(un["unmet_gpu_min"][t] - re["unmet_gpu_min"][t] for t in ("normal", "low"))
    q_re = re["high_tenant_queued_gpu_min_by_hour"]
    q_un = un["high_tenant_queued_gpu_min_by_hour"]
    cut = {t: sum(q_re[t]) - sum(q_un[t]) for t in q_re}
    cut_peak = sum(sum(q_re[t][h] - q_un[t][h] for h in PEAK_HOURS) for t in q_re)
    total_cut = sum(cut.values())
    trade = (f"Acting on every high-tier tenant's forecast (ungated) against reactive: the high tier's unmet "
             f"{'-' if gain >= 0 else '+'}{n(abs(gain))} GPU-min, the normal and low tiers' "
             f"{'+' if cost >= 0 else '-'}{n(abs(cost))}"
             + (f" ({n(cost / gain)} lower-tier GPU-min per high-tier GPU-min gained)" if gain > 0 and cost > 0
                else "") + ". Each high-tier tenant's GPU-minutes queued, ungated against reactive: "
             + ", ".join(f"{t} {'+' if c < 0 else '-'}{n(abs(c))}" for t, c in cut.items())
             + (f"; of the {n(total_cut)} GPU-min fewer, {n(cut_peak)} ({pct(cut_peak / total_cut, 0)}) in "
                f"12:00-15:59"
                if total_cut > 0 else "") + ".")
    return table(["run", "utilization", "high unmet (GPU-min)", "normal unmet", "low unmet", "preemptions",
                  "high-tier tenant-steps on the forecast"], rows), trade


def _case(d: dict, name: str) -> list[str]:
    runs, trade = _runs(d)
    why = d["forecaster_why"].split(" (last ")[0]   # retrain's why lists every candidate's score: the choice is enough
    return [f"**{d['forecaster']}** ({why}): synthetic seed {d['seed']}, {d['days']:g} measured "
            f"days from {d['window_start'][:10]}, a forecast every {d['forecast_every']} steps; holds at "
            f"p{100 * d['point']['quantile']:g} with headroom {d['point']['headroom']:g} (the published gate "
            f"point), lead windows {d['lead_windows']['lead']} and {d['lead_windows']['preempt']} steps.", "",
            _tenants(d), "", runs, "", trade, "", source([name], d)]


@block("skill-gate-hours")
def skill_gate_hours() -> str:
    have = [f for f in FILES if exists(f)]
    if not have:
        return "Not measured yet: `nice -n 10 python bench/gate_hours_bench.py [--fit]`."
    out: list[str] = []
    for f in have:
        out += _case(load(f), f) + [""]
    return "\n".join(out).rstrip()
