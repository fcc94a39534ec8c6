"""Renderer for docs/windows.md: the scheduled-windows bench on the synthetic trace."""

from __future__ import annotations

from bench.render.common import block, listing, load, n, pct, source, table, verdict


@block("windows-synthetic")
def windows_synthetic() -> str:
    """bench/windows_bench.py: the windows proposed from the 7 days before the measured window on synthetic,
    replayed with predictive (the high tier's proposals; the high and normal tiers'), against predictive without
    windows and the perfect forecast."""
    return _synthetic("windows_synthetic.json")


@block("windows-synthetic-seed12")
def windows_synthetic_seed12() -> str:
    """bench/windows_bench.py --seed 12: the same on another draw of the generator (its tenants, peaks and bursts),
    so the result is not one draw's."""
    return _synthetic("windows_synthetic_seed12.json")


@block("windows-synthetic-seeds")
def windows_synthetic_seeds() -> str:
    """bench/windows_bench.py --seeds: the target's two runs (predictive without windows, and with the high tier's
    proposed windows as Kueue carries them out) on several draws of the generator, per seed and pooled."""
    name = "windows_synthetic_seeds.json"
    d = load(name)
    t, p = d["target"], d["pool"]

    rows = [_seeds_row(str(r["seed"]), listing(r["tenants_with_1400_peak_high"]), r) for r in d["per_seed"]]
    rows.append(_seeds_row(f"pooled ({p['seeds']} seeds)", "", p))
    k, m = p["seeds"], p["seeds_meeting"]
    pooled = ("no seed had high-tier unmet at its 14:00 tenants to cut" if p["cut"] is None else
              f"the 14:00 tenants' high-tier unmet cut by {pct(p['cut'])} (1 - the sum with windows / the sum "
              f"without, target: cut >= {pct(t['cut'], 0)})")
    lines = [f"- pooled over {k} seeds: {verdict(p['conditions']['all'])}: {pooled}; normal-tier unmet "
             f"{p['normal_unmet_delta_gpu_min']:+,.0f} GPU-min, preemptions {p['preemptions_delta']:+d} (summed).",
             f"- seeds meeting each condition: the cut {m['cut']} of {k}, no more normal-tier unmet "
             f"{m['normal_unmet']} of {k}, no more preemptions {m['preemptions']} of {k}; all three {m['all']} of {k}."]
    skipped = "; ".join(f"seed {x['seed']} ({x['why']})" for x in d["skipped"])
    lines.append(f"- skipped: {skipped}." if skipped else
                 "- no seed skipped: each had high-tier unmet at its 14:00 tenants without windows.")
    return "\n".join([
        f"Synthetic ({d['workload']}), seeds {', '.join(str(x) for x in d['seeds'])}, {d['measured_days']:g} "
        f"measured day(s) after {d['history_days']} days of history, forecaster choice: {d['forecaster_choice']}; "
        f"per seed {d['compared']['without']} against {d['compared']['with']}.", "",
        table(["seed", "high-tier tenants with the 14:00 peak", "high unmet at 14:00 tenants without (GPU-min)",
               "with windows", "cut", "normal unmet change (GPU-min)", "preemptions change",
               "held idle without / with (GPU-min)", f"cut >= {pct(t['cut'], 0)}", "normal no more",
               "preemptions no more", "all three"], rows), "",
        f"Target: {t['what']}.", "", *lines, "",
        *_seeds_why(d),
        source([name], d)])


# the causes of a wait while a window held (daemon/sim/windows_breakdown.py), as the why table's columns
_CAUSES = (("others_firm", "others' work that cannot be preempted on its nodes"),
           ("low_not_cleared", "low work not cleared"), ("draining", "draining"),
           ("demand_above_window", "its demand above the window"), ("other", "other"))


def _seeds_why(d: dict) -> list[str]:
    """The seeds' ``why`` (bench/windows_bench.py explain): where the 14:00 tenants' unmet falls against the high
    tier's windows without and with them, why they waited while a window held, and what each window's nodes
    carried when its hold was first in place. Nothing for a JSON from before it was measured."""
    rows = d["per_seed"]
    if not rows or not all("why" in r for r in rows):
        return []

    def places(x: dict) -> str:
        return f"{n(x['outside'])} / {n(x['lead'])} / {n(x['open'])}"

    def causes(c: dict) -> str:
        c = dict(c, other=c.get("other", 0.0) + c.get("free_in_pieces", 0.0))
        return " / ".join(n(c.get(k, 0.0)) for k, _ in _CAUSES)

    p = d["pool"]["why"]
    table1 = [[str(r["seed"]), places(r["why"]["left_gpu_min_by_place"]["without"]),
               places(r["why"]["left_gpu_min_by_place"]["with"]),
               causes(r["why"]["while_window_holds_gpu_min_by_cause"])] for r in rows]
    table1.append([f"pooled ({len(rows)} seeds)", places(p["left_gpu_min_by_place"]["without"]),
                   places(p["left_gpu_min_by_place"]["with"]), causes(p["while_window_holds_gpu_min_by_cause"])])
    table2 = []
    for r in rows:
        at = {(x["window"], x["phase"]): x for x in r["why"]["window_nodes"]}
        for x in (x for x in r["why"]["window_nodes"] if x["phase"] == "lead"):
            o = at.get((x["window"], "open"))
            tiers = ", ".join(f"{t} {n(g)}" for t, g in x["others_firm_on_held_gpus_by_tier"].items())
            ran = x["others_firm_on_held_run_minutes_median"]
            e = x["its_jobs_fit_elsewhere_gpus"]
            table2.append([str(r["seed"]), x["window"], n(x["window_gpus"]), str(x["job_gpus"]), x["at"],
                           n(x["held_gpus"]), f"{x['held_nodes_with_others_firm']} of {x['held_nodes']}"
                           + (f" ({tiers} GPUs; run {n(ran)} min, median)" if tiers else ""),
                           n(x["its_jobs_fit_on_held_gpus"]), n(x["its_jobs_fit_in_cluster_gpus"]),
                           f"{n(e['pool'])} / {n(e['unheld'])} / {n(e['other_holds'])}",
                           "-" if o is None else f"{n(o['its_jobs_fit_on_held_gpus'])} / "
                                                 f"{n(o['its_jobs_fit_in_cluster_gpus'])}"])
    w = p["left_gpu_min_by_place"]["with"]
    left = sum(w.values())
    c = p["while_window_holds_gpu_min_by_cause"]
    held = sum(c.values())
    short = [(r["seed"], x) for r in rows for x in r["why"]["window_nodes"]
             if x["phase"] == "lead" and x["its_jobs_fit_in_cluster_gpus"] < x["window_gpus"]]
    lines = []
    if left > 0:
        lines.append(f"- pooled, of the {n(left)} GPU-min left at the 14:00 tenants with the windows, "
                     f"{n(w['lead'] + w['open'])} ({pct((w['lead'] + w['open']) / left)}) falls in a window's lead "
                     f"or while it is open, {n(w['outside'] + w['none'])} outside the windows.")
    if held > 0:
        lines.append(f"- of the {n(held)} GPU-min the 14:00 tenants queued while their window held, "
                     f"{n(c.get('others_firm', 0.0))} ({pct(c.get('others_firm', 0.0) / held)}) waited for others' "
                     "work that cannot be preempted on the window's nodes.")
    if short:
        lines.append("- windows whose tenant's jobs fit, at its lead time, on fewer GPUs in the whole cluster than the "
                     "window asks (any holder's nodes, everything preemptible cleared; no choice of nodes could have "
                     "held the window for its jobs then): " + "; ".join(
                         f"seed {s} {x['window']} ({n(x['its_jobs_fit_in_cluster_gpus'])} of {n(x['window_gpus'])})"
                         for s, x in short) + ".")
    return [
        "Where the 14:00 tenants' unmet falls against the high tier's windows (the same windows' times without and "
        "with them), and why they waited while a window held, from its lead time to its end (each seed's `why`):",
        "",
        table(["seed", "without windows: outside / in the lead / open (GPU-min)", "with windows: outside / in the "
               "lead / open", "queued while a window held, for: " + " / ".join(x for _, x in _CAUSES)
               + " (GPU-min)"], table1), "",
        "What each window's nodes carried when its hold was first in place (its lead), and where its tenant's jobs "
        "fit then, everything preemptible cleared: on the window's nodes and over the whole cluster, any holder's "
        "nodes (the most any choice of nodes could have held for them):", "",
        table(["seed", "window", "GPUs", "GPUs per job", "first held", "GPUs held",
               "held nodes with others' work that cannot be preempted (its GPUs per tier; how long it had run)",
               "its jobs fit on held (GPUs)", "its jobs fit in the cluster (GPUs)",
               "of which elsewhere: the pool's / unheld / other holds' nodes",
               "at its start: fit on held / in the cluster"], table2), "",
        *lines, ""]


@block("windows-synthetic-leads")
def windows_synthetic_leads() -> str:
    """bench/windows_bench.py --seeds --leads: the same draws with the high tier's proposed windows at each lead time
    in turn, pooled per lead: what a longer lead buys and costs."""
    name = "windows_synthetic_leads.json"
    d = load(name)
    t = d["target"]
    rows = []
    for x in d["by_lead"]:
        p = x["pool"]
        by_seed = ", ".join(f"{r['seed']}: {'-' if r['cut'] is None else pct(r['cut'], 0)}" for r in x["per_seed"])
        rows.append([f"{x['lead_minutes']} min", "-" if p["cut"] is None else pct(p["cut"]),
                     f"{p['normal_unmet_delta_gpu_min']:+,.0f}", f"{p['preemptions_delta']:+d}",
                     f"{n(p['held_idle_gpu_min_without'])} / {n(p['held_idle_gpu_min_with'])}",
                     verdict(p["conditions"]["all"]), by_seed])
    skipped = "; ".join(f"seed {x['seed']} ({x['why']})" for x in d["skipped"])
    return "\n".join([
        f"Synthetic ({d['workload']}), seeds {', '.join(str(x) for x in d['seeds'])}, {d['measured_days']:g} "
        f"measured day(s) after {d['history_days']} days of history, forecaster choice: {d['forecaster_choice']}; "
        f"per seed {d['compared']['without']} against {d['compared']['with']}; pooled over the seeds.", "",
        table(["lead (reclaim_before)", "cut at the 14:00 tenants (pooled)", "normal unmet change (GPU-min)",
               "preemptions change", "held idle without / with (GPU-min)",
               f"target (cut >= {pct(t['cut'], 0)}, normal and preemptions no more)", "cut per seed"], rows), "",
        *([f"- skipped: {skipped}.", ""] if skipped else []),
        source([name], d)])


def _seeds_row(first: str, who: str, r: dict) -> list[str]:
    """A row of the multi-seed table: one seed's figures, or the pooled ones (the same keys)."""
    def yes(ok: bool) -> str:
        return "yes" if ok else "**no**"

    c = r["conditions"]
    return [first, who, n(r["high_unmet_at_1400_tenants_without"]), n(r["high_unmet_at_1400_tenants_with"]),
            "-" if r["cut"] is None else pct(r["cut"]), f"{r['normal_unmet_delta_gpu_min']:+,.0f}",
            f"{r['preemptions_delta']:+d}", f"{n(r['held_idle_gpu_min_without'])} / {n(r['held_idle_gpu_min_with'])}",
            yes(c["cut"]), yes(c["normal_unmet"]), yes(c["preemptions"]), yes(c["all"])]


def _synthetic(name: str) -> str:
    d = load(name)
    names = {"predictive": "predictive, no windows",
             "predictive_with_high_tier_windows": "predictive + the high tier's proposed windows",
             "predictive_with_high_and_normal_tier_windows": "predictive + the high and normal tiers' proposed windows",
             "predictive_with_high_tier_windows_on_slurm": "the high tier's windows, on Slurm, reserved ahead",
             "predictive_with_high_and_normal_tier_windows_on_slurm":
                 "the high and normal tiers' windows, on Slurm, reserved ahead",
             "predictive_with_high_tier_windows_on_slurm_at_lead":
                 "the high tier's windows, on Slurm, reserved at the lead time",
             "predictive_with_high_and_normal_tier_windows_on_slurm_at_lead":
                 "the high and normal tiers' windows, on Slurm, reserved at the lead time",
             "predictive_with_a_null_window":
                 f"predictive + one 8-GPU window at 03:00 UTC for {d.get('null_window', {}).get('tenant', '?')} "
                 "(the noise of one replay)",
             "perfect": "perfect forecast, no windows"}
    rows = [[names[k], n(r["high_unmet_gpu_min_at_1400_tenants"]), n(r["of_which_12_16_utc"]),
             n(r["high_unmet_gpu_min"]), n(r["normal_unmet_gpu_min"]), n(r["preemptions"]), n(r["held_idle_gpu_min"]),
             pct(r["utilization"])] for k, r in d["runs"].items()]
    lines = []
    base = d["runs"]["predictive"]["high_unmet_gpu_min_at_1400_tenants"]
    for key, what in (("high", "the high tier's windows"), ("high_normal", "the high and normal tiers' windows"),
                      ("high_on_slurm", "the high tier's windows, on Slurm, reserved ahead"),
                      ("high_normal_on_slurm", "the high and normal tiers' windows, on Slurm, reserved ahead"),
                      ("high_on_slurm_at_lead", "the high tier's windows, on Slurm, reserved at the lead time"),
                      ("high_normal_on_slurm_at_lead",
                       "the high and normal tiers' windows, on Slurm, reserved at the lead time")):
        if key not in d["verdict"]:
            continue
        v = d["verdict"][key]
        tiers, _, on = key.partition("_on_")
        r = d["runs"][f"predictive_with_{tiers.replace('_', '_and_')}_tier_windows" + (f"_on_{on}" if on else "")]
        outside = r["high_unmet_gpu_min_at_1400_tenants"] - r["of_which_12_16_utc"]
        cut = "no high-tier unmet at the 14:00 tenants without windows" if v["cut"] is None else \
            (f"14:00 tenants' high-tier unmet cut by {pct(v['cut'])}" if v["cut"] >= 0 else
             f"14:00 tenants' high-tier unmet rose from {n(base)} to "
             f"{n(r['high_unmet_gpu_min_at_1400_tenants'])} GPU-min") \
            + f" (target: cut >= {pct(d['target']['cut'], 0)})"
        lines.append(f"- {what}: {verdict(v['met'])}: {cut}; normal-tier unmet "
                     f"{v['normal_unmet_delta_gpu_min']:+,.0f} GPU-min, preemptions {v['preemptions_delta']:+d}."
                     + (f" Of what is left, {n(outside)} GPU-min falls outside 12:00-16:00 UTC, where no window is: "
                        f"with nothing left inside, the cut would be {pct(1 - outside / base)}."
                        if base > 0 and outside > 0 and v["cut"] is not None and v["cut"] >= 0 else "")
                     + (f" Step by step, that normal-tier unmet: "
                        f"{r['normal_unmet_delta']['while_a_window_held_gpu_min']:+,.0f} while a window held (its lead "
                        f"time to its end), {r['normal_unmet_delta']['at_other_times_gpu_min']:+,.0f} at other times."
                        if "normal_unmet_delta" in r and key in ("high", "high_on_slurm_at_lead") else ""))
    if "noise" in d:
        z = d["noise"]
        lines.append(f"- the noise of one replay: one window of 8 GPUs for 15 minutes at 03:00 UTC for "
                     f"{d['null_window']['tenant']}, hours from any peak, moved the 14:00 tenants' high-tier unmet by "
                     f"{z['high_unmet_delta_gpu_min_at_1400_tenants']:+,.0f} GPU-min, the normal tier's by "
                     f"{z['normal_unmet_delta_gpu_min']:+,.0f} GPU-min and preemptions by {z['preemptions_delta']:+d}: "
                     "a difference of that size between two rows says nothing about the windows.")
    why = {"demand_above_window": "its demand above its window's GPUs (its nodes full of its own work, no place in "
                                  "the pool or unheld)", "draining": "GPUs of its window still draining",
           "low_not_cleared": "low work not yet cleared off its window's nodes",
           "others_firm": "another tenant's work that cannot be preempted on its window's nodes",
           "free_in_pieces": "free GPUs on its window's nodes in pieces smaller than its jobs", "other": "other"}
    for run, on in (("predictive_with_high_tier_windows", ""),
                    ("predictive_with_high_tier_windows_on_slurm", " on Slurm, reserved ahead"),
                    ("predictive_with_high_tier_windows_on_slurm_at_lead", " on Slurm, reserved at the lead time")):
        b = d["runs"].get(run, {}).get("while_window_holds")
        if b is not None:
            parts = [f"{n(g)} GPU-min {why[c]}" for c, g in b["gpu_min_by_cause"].items() if g > 0]
            lines.append(f"- while a high-tier window held{on}, its 14:00 tenant waited for: "
                         + ("; ".join(parts) if parts else "nothing") + " (per step in the JSON's while_window_holds).")
    for run, on in (("predictive_with_high_tier_windows", ""),
                    ("predictive_with_high_tier_windows_on_slurm_at_lead", " on Slurm, reserved at the lead time")):
        left = d["runs"].get(run, {}).get("left_at_1400_tenants")
        if left is not None:
            lines.append(f"- what is left with the high tier's windows{on}, by tenant and span of minutes: "
                         + ("; ".join(_spans(left, d.get("step_minutes", 1.0))) or "nothing") + ".")
    props = [f"{p['tenant']} ({p['tier']}) {p['gpus']} GPUs {p['every']} {p['at']} {p['timezone']}, "
             f"{p['duration_minutes']:.0f} min, seen {p['days_seen']}/{p['days_checked']} days" for p in d["proposals"]]
    return "\n".join([
        f"Synthetic ({d['workload']}, seed {d['seed']}), {d['measured_days']:g} measured day(s) after "
        f"{d['history_days']} days of history; forecaster {d['forecaster']} ({d['forecaster_choice']}). "
        f"High-tier tenants with the 14:00 peak: {listing(d['tenants_with_1400_peak']['high'])}.", "",
        table(["run", "high unmet at 14:00 tenants (GPU-min)", "of which 12:00-16:00 UTC", "high unmet (GPU-min)",
               "normal unmet (GPU-min)", "preemptions", "held idle (GPU-min)", "utilization"], rows), "",
        f"Target: {d['target']['what']}.", "", *lines, "",
        f"Proposed ({len(props)}): " + "; ".join(props) + ".", "",
        source([name], d)])


def _spans(left: list[dict], step_min: float) -> list[str]:
    """The steps where a 14:00 tenant still queued (the bench's left_at_1400_tenants), as spans of consecutive
    minutes per tenant: when, GPU-minutes, where against its window, and whether it queued then without windows."""
    def minute(at: str) -> int:
        h, m = at.split(":")
        return int(h) * 60 + int(m)

    out, cur = [], None
    for x in sorted(left, key=lambda x: (x["tenant"], minute(x["at"]))):
        place = {"open": "in its open window", "lead": "in its window's lead", "none": "it has no window"}.get(
            x["window"], f"{x.get('minutes_to_lead')} min before its window's lead time")
        if x["window"] == "outside" and (x.get("minutes_to_lead") or 0) > 120:
            place = "hours from its window"
        key = (x["tenant"], place, x["also_without_windows"])
        if cur is not None and cur["key"] == key and minute(x["at"]) == cur["last"] + 1:
            cur["last"], cur["gpu_min"] = minute(x["at"]), cur["gpu_min"] + x["queued_gpus"] * step_min
            cur["peak"] = max(cur["peak"], x["demand_gpus"])
            continue
        cur = {"key": key, "first": x["at"], "last": minute(x["at"]), "gpu_min": x["queued_gpus"] * step_min,
               "peak": x["demand_gpus"]}
        out.append(cur)
    return [f"{c['key'][0]} {c['first']}" + (f"-{c['last'] // 60:02d}:{c['last'] % 60:02d}"
                                             if minute(c["first"]) != c["last"] else "")
            + f" {n(c['gpu_min'])} GPU-min ({c['key'][1]}, demand up to {n(c['peak'])} GPUs"
            + (", as without windows" if c["key"][2] else "") + ")" for c in out]
