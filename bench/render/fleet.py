"""Renderers for docs/fleet.md: the fleet bench and the fleet control cycle."""

from __future__ import annotations

from collections.abc import Callable

from bench.render.common import _days, block, goal, listing, load, met, n, pct, source, table, value_at, verdict


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


@block("fleet-gate")
def fleet_gate_block() -> str:
    """The skill gate per (tenant, GPU type) on the Alibaba mixed fleet, each pod with its own types (issue 40):
    bench/fleet_gate_bench.py, compared at reactive's best point against issue 40's checks."""
    d = load("fleet_gate_alibaba.json")
    comp, goals = d["comparison"], d["targets"]
    key = f"gate_margin={d['gate_margin']:g}"
    g, ug = comp.get(key, {}), comp.get("ungated", {})
    tenants = ", ".join(f"{t} ({d['tiers'][t]})" for t in d["tenants"])
    out = [f"`bench/fleet_gate_bench.py --days {d['steps'] / 1440:g}`: {d['workload']}, {len(d['tenants'])} tenants "
           f"(the QoS classes: {tenants}) whose pods ask {len(d['series'])} sets of GPU types in all, so "
           f"{len(d['series'])} (tenant, types) forecast series; {n(d['capacity'])} GPUs on {n(d['nodes'])} nodes, "
           f"{n(d['steps'])} measured minutes from {d['window_start']}, forecaster {d['forecaster']}, "
           f"skill gate margin {d['gate_margin']:g}.", ""]
    if not g.get("predictive_point"):
        out += [f"Gated: {g.get('verdict', 'no comparison')}.", "", source(["fleet_gate_alibaba.json"], d)]
        return "\n".join(out)
    rows = [[f"reactive {g['reactive_point'].removeprefix('reactive')}", pct(g["reactive_utilization"]),
             n(g["high_unmet"]["reactive"]), n(g["normal_unmet"]["reactive"]), n(g["low_unmet"]["reactive"]),
             n(g["preemptions"]["reactive"]), "", ""]]
    for name, c in (("ungated", ug), ("gated", g)):
        if not c.get("predictive_point"):
            rows.append([name, c.get("verdict", "-"), "", "", "", "", "", ""])
            continue
        checks = c.get("targets", {})
        sg = c.get("skill_gate")
        on = (f"{n(sg['read_tenant_steps_on_forecast'])} of {n(sg['read_tenant_steps'])}" if sg else "-")
        rows.append([f"predictive {name} {c['predictive_point'].removeprefix('predictive')}",
                     pct(c["predictive_utilization"]), n(c["high_unmet"]["predictive"]),
                     n(c["normal_unmet"]["predictive"]), n(c["low_unmet"]["predictive"]),
                     n(c["preemptions"]["predictive"]), on,
                     f"{sum(v is True for v in checks.values())} of {len(checks)}"])
    out += [table(["point", "utilization", "high unmet GPU-min", "normal unmet", "low unmet", "preemptions",
                   "high-tier tenant-steps on the forecast", "checks met"], rows), ""]
    missed = [goals[k]["what"] for k, v in g["targets"].items() if v is not True]
    s = d.get("gated_point_series") or {}
    acted, at_end = s.get("acted_some_step", []), s.get("acting_at_end", [])
    high = {t for t, tier in d["tiers"].items() if tier == "high"}
    acted_high = [x for x in acted if x.rsplit("@", 1)[0] in high]
    out += [f"At reactive's best point the gated predictive meets {sum(v is True for v in g['targets'].values())} "
            f"of issue 40's {len(g['targets'])} checks" + (f" (not met: {'; '.join(missed)})" if missed else "")
            + f". Of the {s.get('series', 0)} (tenant, types) series, {len(acted)} acted on the forecast at some "
            f"measured step ({listing(acted)}), {len(acted_high)} of them the high tier's (the only tier whose holds "
            f"and preemptions follow the forecast), and {len(at_end)} at the window's end ({listing(at_end)}): "
            f"each decided alone, on the forecasts scored so far."]
    same = all(g[m]["predictive"] == g[m]["reactive"] for m in ("high_unmet", "normal_unmet", "low_unmet",
                                                                 "preemptions"))
    if ug.get("predictive_point"):
        gain = ug["high_unmet"]["reactive"] - ug["high_unmet"]["predictive"]
        ug_missed = [goals[k]["what"] for k, v in ug.get("targets", {}).items() if v is not True]
        cost = f", at the price of: {'; '.join(ug_missed)}" if ug_missed else ""
        kept = g.get("high_gain_kept")
        if not acted_high and same:
            out[-1] += (f" What it shows: no high-tier series showed skill against its reactive hold on this window, "
                        f"so the gated plan is reactive's own (the same figures), and none of the "
                        f"{n(gain)} GPU-min of high-tier unmet the ungated forecast saved is kept{cost}.")
        elif kept is not None:
            out[-1] += (f" What it shows: the gated point keeps {pct(kept, 0)} of the {n(gain)} GPU-min of "
                        f"high-tier unmet the ungated forecast saved{cost}.")
    out += ["", source(["fleet_gate_alibaba.json"], d)]
    return "\n".join(out)
