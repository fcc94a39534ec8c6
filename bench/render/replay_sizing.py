"""Renderer for docs/replay.md's SLO-sizing block (bench/sizing_bench.py): each strategy's smallest cluster for
the SLO per trace, every services' setting tried, and the issue's targets beside the perfect forecast's own saving.
Its own module because docs/replay.md's renderers outgrew one file."""

from __future__ import annotations

from bench.render.common import (
    block,
    exists,
    load,
    load_avg,
    n,
    out_glob,
    pct,
    source,
    table,
    verdict,
)

SIZING_CASES = ("synthetic", "helios", "alibaba", "servegen")


def _binding(z: dict, slo: dict) -> str:
    """The SLO part nearest its limit at the found size (what a smaller cluster would break first): the high tier's
    unmet GPU demand, the normal tier's, and where the replay measures inference requests the high tier's throttled
    requests (the SLO's high_requests, daemon/sim/sizing.py)."""
    parts = {"high": z["high_unmet_share"] / slo["high"] if slo["high"] else 0.0,
             "normal": z["normal_unmet_share"] / slo["normal"] if slo["normal"] else 0.0}
    limit = slo.get("high_requests", slo["high"])
    if z.get("high_throttled_share") is not None and limit:
        parts["high requests"] = z["high_throttled_share"] / limit
    return max(parts, key=lambda k: parts[k])


def _setting(st: dict) -> str:
    """A sizing setting in words: the services' HPA headroom and scale-down window, and predictive's replica
    quantile."""
    parts = [f"headroom {st['service_headroom']:g}"] if st.get("service_headroom") is not None else []
    if st.get("service_stabilization_s") is not None:
        parts.append(f"scale-down window {st['service_stabilization_s']:g} s")
    if st.get("replica_quantile") is not None:
        parts.append(f"p{100 * st['replica_quantile']:g} replicas")
    return ", ".join(parts)


def _sizing_row(case: str, z: dict, slo: dict) -> list[str]:
    who = z["strategy"] + (f" ({_setting(z['setting'])})" if z.get("setting_met") else "")
    if not z["met"]:
        big = [t for t in z.get("tries", []) if t.get("nodes") == z["largest_nodes_tried"]]
        thr = None if not big else big[0].get("high_throttled_share")
        why = "" if thr is None else f" (high requests {pct(thr, 2)} throttled there)"
        what = f"**not met**: {z['largest_nodes_tried']} nodes (the largest tried) miss{why}"
        if "settings" in z:
            low = min(z["settings"], key=lambda r: r.get("top_high_throttled_share") or 0.0)
            what = (f"**never meets** at any setting: the throttled floor (high requests throttled with nothing "
                    f"unmet: {pct(thr, 2)} at {_setting(z['settings'][0]['setting'])}, at the least "
                    f"{pct(low.get('top_high_throttled_share') or 0.0, 2)} at {_setting(low['setting'])})"
                    if all(r["never_meets"] for r in z["settings"])
                    else f"**not met** at any setting (at {_setting(z['setting'])}: {what[len('**not met**: '):]})")
        return [case, who, what, "–", "–", "–", "–", "–", "–", str(z["replays"])]
    below = {True: "misses", False: "**also meets** (not the smallest)", None: "–"}[z["one_node_less_misses"]]
    if z.get("monotone_in_tries") is False:
        below += "; **not monotone**: " + z["note"].split("here: ")[-1].split(" (")[0]
        safe = _every_larger_meets(z.get("tries") or [])
        if safe is not None and safe != z["nodes"]:
            gpn = z["gpus"] // z["nodes"]
            below += f"; every size tried from {safe} nodes ({n(safe * gpn)} GPUs) on meets"
    return [case, who, f"{n(z['gpus'])} ({z['nodes']} nodes)", n(z["gpu_hours"]),
            pct(z["allocated_utilization"]), pct(z["busy_utilization"]),
            f"{pct(z['high_unmet_share'], 3)} / {pct(z['normal_unmet_share'], 2)}"
            + ("" if z.get("high_throttled_share") is None else
               f"; high requests {pct(z['high_throttled_share'], 3)} throttled"), _binding(z, slo), below,
            str(z["replays"])]


def _every_larger_meets(tries: list[dict]) -> int | None:
    """The smallest size tried from which every larger size tried meets the SLO (None: the largest missed): the
    answer to read where the SLO is not monotone in the size and bisection found a smaller one that meets."""
    out = None
    for t in sorted(tries, key=lambda t: -t["nodes"]):
        if not t["met"]:
            break
        out = t["nodes"]
    return out


def _settings_table(d: dict) -> list[str]:
    """Every setting's answer for a trace sized over its services' knobs: GPUs where it meets the SLO, "floor" and
    the high tier's throttled share at the top where it never does (one row per setting of the services)."""
    cols = [(s, r) for s, z in d["strategies"].items() for r in z.get("settings", [])]
    keys = list(dict.fromkeys((s, r["setting"].get("replica_quantile")) for s, r in cols))
    heads = list(dict.fromkeys((r["setting"].get("service_headroom"), r["setting"].get("service_stabilization_s"))
                               for _, r in cols))

    def cell(s: str, r: dict) -> str:
        if r["met"]:
            return f"{n(r['gpus'])} ({r['nodes']})" + (" ←" if r["setting"] == d["strategies"][s]["setting"] and
                                                         d["strategies"][s]["setting_met"] else "")
        if r.get("not_fewer_than") is not None:
            return f"≥ {r['not_fewer_than']} nodes"
        if r["never_meets"]:
            thr = r.get("top_high_throttled_share")
            return "floor" + ("" if thr is None else f" ({pct(thr, 2)})")
        return f"not met ≤ {r['largest_nodes_tried']} nodes"

    rows = []
    windows = any(b is not None for _, b in heads)
    for h, b in heads:
        row = [f"{h:g}" + ("" if not windows else f" / {'–' if b is None else f'{b:g} s'}")]
        for s, q in keys:
            r = next((r for s2, r in cols if s2 == s and r["setting"].get("service_headroom") == h
                      and r["setting"].get("service_stabilization_s") == b
                      and r["setting"].get("replica_quantile") == q), None)
            row.append("–" if r is None else cell(s, r))
        rows.append(row)
    head = ["services' headroom" + (" / scale-down window" if windows else ""),
            *(s + ("" if q is None else f" (p{100 * q:g} replicas)") for s, q in keys)]
    return [table(head, rows)]


def _ceiling(d: dict, t: dict) -> str:
    """What the perfect forecast saves against the target's baseline on the same run: the most any forecast could
    save on this trace and physics, so a target above it is out of a forecaster's reach, not a knob away."""
    perfect, base = d["strategies"].get("perfect"), d["strategies"].get(t["against"])
    if not perfect or not base or not perfect.get("met") or not base.get("met") or not base.get("gpus"):
        return ""
    ceiling = 1.0 - perfect["gpus"] / base["gpus"]
    reach = "" if ceiling >= t["at_least"] else ": below the goal, so no forecast can meet it on this run"
    return f" (the perfect forecast saves {pct(ceiling)} of {t['against']}'s{reach})"


@block("replay-sizing")
def replay_sizing() -> str:
    """bench/sizing_bench.py: each strategy's smallest cluster for the SLO per trace, and the issue's targets."""
    rows, notes, files, settings_tables = [], [], [], []
    # each trace's published run, then its runs with a suffix (e.g. sizing_servegen_1day.json: a longer window)
    runs = [(c, f"sizing_{c}.json") for c in SIZING_CASES] + \
        [(p.stem.removeprefix("sizing_"), p.name) for c in SIZING_CASES for p in out_glob(f"sizing_{c}_*.json")]
    for case, f in runs:
        if not exists(f):
            continue
        d = load(f)
        files.append(f)
        rows += [_sizing_row(case, z, d["slo"]) for z in d["strategies"].values()]
        sv = "; ".join(f"{'saves' if v >= 0 else 'needs'} {pct(abs(v))} {'of' if v >= 0 else 'more than'} {s}'s GPUs"
                       if v is not None else f"no comparison with {s} (not met)"
                       for s, v in d["savings"].items() if s in ("static", "reactive"))
        how = " (chosen among the baselines)" if d.get("forecaster_fit_epochs") is None else ""
        flat = (" **Every strategy's gateway at the first rate level whatever the load** (`--flat-rate-limits`: as "
                "static's plan never tightens; the published rows tighten reactive's, predictive's and perfect's "
                "above 80% load): only the capacity policy differs." if d.get("flat_rate_limits") else "")
        notes.append(f"- **{case}** ({d['window'][0][:16]} to {d['window'][1][:16]}, {d['steps']:,} steps, forecaster "
                     f"{d['forecaster']}{how}; the trace's own size {d['own_nodes']} nodes; commit {d['commit']}, "
                     f"{load_avg(d)}, {d['bench_wall_seconds'] / 60:.0f} min): predictive {sv}.{flat}")
        if "service_settings" in d:  # inference services: each strategy sized at every setting of their knobs
            got = "; ".join(f"{s} at {_setting(z['setting'])}" if z["setting_met"] else f"{s} at none"
                            for s, z in d["strategies"].items())
            notes.append(f"  - services' cold start {d['service_cold_start_min']:g} min; each strategy is sized at "
                         "every setting below and gets its fewest GPUs (GPUs (nodes) per setting, ← the one chosen; "
                         "floor: never meets, the replicas' cold-start lag throttles too much at any size, with the "
                         "high tier's throttled share at the top size): "
                         f"{got}.")
            settings_tables.append((case, _settings_table(d)))
        for t in d["targets"].values():
            got = "not measured (a strategy missed the SLO)" if t["saving"] is None else (
                f"{verdict(t['met'])}: {pct(t['saving'])}, {'+' if t['gap'] >= 0 else ''}"
                f"{100 * t['gap']:.1f} points against the goal")
            notes.append(f"  - target: {t['what']}: {got}{_ceiling(d, t)}.")
    if not files:
        return "*No `bench/out/sizing_*.json` yet: run `python bench/sizing_bench.py`.*"
    head = ["trace", "strategy", "GPUs at the SLO", "GPU-hours", "allocated util.", "busy util.",
            "high / normal unmet", "nearest its limit", "one node less", "replays"]
    per = [x for case, t in settings_tables for x in ("", f"Each setting on {case}:", "", *t)]
    return "\n".join([table(head, rows), "", *notes, *per, "", source(files)])
