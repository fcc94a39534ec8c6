"""Renderers for docs/fleet.md: the fleet bench and the fleet control cycle."""

from __future__ import annotations

from collections.abc import Callable

from bench.render.common import _days, block, goal, load, met, n, pct, source, table, value_at, verdict


@block("cycle-fleet")
def cycle_fleet_block() -> str:
    """The daemon's whole cycle on a mixed fleet against a real Prometheus: one forecast series per (tenant, type);
    beside it the same bench without types, run right after on the same box (the load's share of the numbers)."""
    d = load("cycle-1000x4types.json")
    b = load("cycle-1000-untyped-baseline.json")
    s, sb = d["scenarios"]["incremental"], b["scenarios"]["incremental"]
    caps = ", ".join(f"{t} {n(g)}" for t, g in s["plan_capacity_by_type"].items())

    def both(f: Callable[[dict], str]) -> list[str]:
        return [f(s), f(sb)]

    rows = [["cycle p50 / p95 (ms)", *both(lambda x: f"{n(x['total_p50_ms'])} / {n(x['total_p95_ms'])}")]]
    rows += [[f"- {k}", *both(lambda x, k=k: f"{n(x[f'{k}_p50_ms'])} / {n(x[f'{k}_p95_ms'])}")]
             for k in ("collect", "forecast", "plan")]
    rows += [["forecast series", *both(lambda x: n(x.get("forecast_series", 0)))],
             ["samples read per cycle, mean / max", *both(lambda x: f"{n(x['samples_mean'])} / {n(x['samples_max'])}")],
             ["cold start to first plan (s)", *both(lambda x: f"{x['cold_start_s']:.1f}")],
             ["daemon RSS peak / end (GiB)", *both(lambda x: f"{x['rss_peak_gib']:.2f} / {x['rss_end_gib']:.2f}")]]
    rows += [[f"goal: {t['what']} {goal(t)}", verdict(met(t, s)), verdict(met(t, sb))]
             for t in d["targets"].values()]
    days = (_days(d["days"]) + " d").replace(" h d", " h")
    missed = [t for t in d["targets"].values() if not met(t, s)]

    def by(t: dict) -> str:   # how far a missed goal is: the measured value against the goal's
        v = value_at(s, t["metric"])
        return f"{t['what']}: {n(v)} {t.get('unit', '')} against {goal(t)} (x{v / t['value']:.2f})"

    summary = (f"On this run the mixed fleet meets {len(d['targets']) - len(missed)} of its {len(d['targets'])} "
               f"goals" + (f"; not met: {'; '.join(by(t) for t in missed)}." if missed else ", all of them."))
    fc = s.get("forecaster", "")
    if d.get("settle_between_cycles"):
        summary += (f" Between cycles the bench waited for the forecaster's background spread refresh (every 10th "
                    f"forecast; the daemon's cycles are 30 s apart, the bench's back to back): the longest refresh "
                    f"took {n(s['refresh_ms_max'])} ms, the longest wait {n(s['settle_ms_max'])} ms, in no cycle's "
                    f"time.")
    return "\n".join([f"`bench/cycle_bench.py --types {d['types']}`: {n(d['tenants'])} tenants x {d['types']} GPU "
                      f"types, {days} of history at 1 min in a real Prometheus (recording rules), "
                      f"{s['cycles']} cycles after the cold start, dry run; the plan's GPUs per type: {caps}; "
                      f"{n(s['plan_tenants_held_by_type'])} tenants held per type in the last plan. "
                      f"The forecaster: {fc.removeprefix('forecaster: ')}.", "",
                      table(["p50 / p95 (ms), or as said", f"{d['types']} types (tenant@type series)",
                             "one model (tenant series)"], rows), "", summary, "",
                      source(["cycle-1000x4types.json"], d), "",
                      source(["cycle-1000-untyped-baseline.json"], b)])


@block("fleet")
def fleet_block() -> str:
    """A mixed fleet (issue 24): type-aware against type-blind plans on the same simulated fleet."""
    d = load("fleet.json")
    out: list[str] = []
    names = {"synthetic": "Synthetic mixed fleet", "alibaba": "Alibaba GPU 2023, gpuspec33 on the node list's mix"}
    for case, c in d["cases"].items():
        mix = ", ".join(f"{f['type']} {f['nodes']}x{f['gpus_per_node']}" for f in c["fleet"])
        out += [f"**{names.get(case, case)}** ({c['tenants']} tenants, {n(c['capacity'])} GPUs on {c['nodes']} "
                f"nodes: {mix}; {n(c['steps'])} measured minutes, perfect forecast)", ""]
        rows = []
        for r in c["runs"]:
            t = r["tiers"]
            rows.append([r["mode"], f"{r['knobs'].get('headroom', 0):g}", pct(r["utilization"]),
                         pct(t["high"]["unmet_share"], 2), pct(t["normal"]["unmet_share"], 2),
                         pct(t["low"]["unmet_share"], 2), n(r["held_unusable_gpu_min"]), n(r["preemptions"]),
                         n(r["preempted_gpus_unusable_by_beneficiary"])])
        out += [table(["plan", "headroom", "utilization", "high unmet", "normal unmet", "low unmet",
                       "GPU-min held on types the holder cannot use", "preemptions",
                       "GPUs preempted for a job that cannot use them"], rows), ""]
        eq = c["equal_utilization"]
        variants = list(dict.fromkeys(r["mode"] for r in c["runs"]))
        if eq.get("high", {}).get("utilization") is not None:
            out += [table(["tier", "at utilization", *(f"unmet, {v}" for v in variants)],
                          [[t, pct(e["utilization"]), *(pct(e[v], 2) for v in variants)]
                           for t, e in eq.items() if e.get("utilization") is not None]), ""]
        share = c.get("guarantee_from_history")
        if share:
            out += ["`aware+guarantee`: `fleet.reserve_share` sized from the history window, "
                    + ", ".join(f"{t} {pct(v, 0)}" for t, v in share.items()) + ".", ""]
        mid = {r["mode"]: r for r in c["runs"] if r["knobs"].get("headroom") == 0.1}
        if len(mid) == len(variants):
            first = mid[variants[0]]
            specs = sorted(first["by_spec"], key=lambda s: -first["by_spec"][s]["demand_gpu_min"])
            out += [table(["work that accepts", "demand GPU-min", *(f"unmet, {v}" for v in variants)],
                          [[s.replace("|", " or "), n(first["by_spec"][s]["demand_gpu_min"]),
                            *(n(mid[v]["by_spec"][s]["unmet_gpu_min"]) for v in variants)] for s in specs]), "",
                    table(["GPU type", "GPUs", *(f"in use (mean), {v}" for v in variants)],
                          [[t, n(x["capacity"]), *(f"{mid[v]['types'][t]['in_use_mean']:.1f}" for v in variants)]
                           for t, x in first["types"].items()]), "",
                    "*Unmet GPU-minutes per accepted-type set (every tier) and GPUs in use per type, at headroom "
                    "0.1.*", ""]
    lat = d["plan_latency"]
    out += [f"`plan()` on a typed snapshot of {n(lat['tenants'])} tenants x {lat['types']} types ({n(lat['gpus'])} "
            f"GPUs, {n(lat['jobs'])} jobs): median {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms "
            "(goal: median < 20 ms).", "", source(["fleet.json"], d)]
    return "\n".join(out)
