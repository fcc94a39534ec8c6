"""Renderers for docs/replay.md's what-if sections: knob what-ifs, perfect-foresight and rises brackets, and
the seed spread of the synthetic sweeps. Kept apart from replay.py so neither passes ~800 lines."""

from __future__ import annotations

from collections.abc import Callable

from bench.render.common import block, load, n, out_glob, pct, source, table

# each what-if file, and the knob its predictive settings are summarised by (None: per knob-set only)
WHAT_IFS = (("replay_helios_preempt_leads.json", "preempt_lead_steps"), ("replay_synthetic_aging_knobs.json", None))


def _span(xs: list[float], fmt: Callable[[float], str]) -> str:
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def _knob_set(r: dict) -> tuple:
    """A run's knobs without the forecast quantile, which only predictive has: the key that pairs a predictive
    setting with the perfect forecast's (and reactive's) run of the same knobs, whatever order they were given in."""
    return tuple(sorted((k, v) for k, v in r["knobs"].items() if k != "quantile"))


def _knob_text(key: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in key) or "defaults"


def _ratio(a: float, b: float) -> str:
    return pct(a / b, 0) if b else "–"


def _what_if_groups(d: dict, f: str) -> dict[tuple, dict[str, dict]]:
    """Per knob-set, each strategy's run; a knob-set with two runs of one strategy (two predictive quantiles) would
    pair the perfect forecast with only one of them, so it is refused."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in d["runs"]:
        g = groups.setdefault(_knob_set(r), {})
        if r["strategy"] in g:
            raise ValueError(f"{f}: two {r['strategy']} runs with the knobs {_knob_text(_knob_set(r))}")
        g[r["strategy"]] = r
    return groups


@block("replay-what-if")
def replay_what_if() -> str:
    """`replay_bench.py --settings` runs: each setting, then per knob-set predictive's preemptions against the
    perfect forecast's with the same knobs (the third target, which the sweep's comparison checks only at one
    point)."""
    out = []
    for f, by in WHAT_IFS:
        d = load(f)
        rows = []
        for r in d["runs"]:
            t = r["tiers"]
            pf = r["preemptions_for"]
            rows.append([r["label"], pct(r["utilization"]), n(t["high"]["unmet_gpu_min"]),
                         n(t["normal"]["unmet_gpu_min"]), n(t["low"]["unmet_gpu_min"]),
                         f"{n(r['preemptions'])} ({n(pf['high'])} / {n(pf['normal'])} / {n(pf['low'])})",
                         n(r["preempted_idle_gpu_min"]), n(r["idle_while_queued_gpu_min"])])
        pairs = {k: g for k, g in _what_if_groups(d, f).items() if "predictive" in g and "perfect" in g}
        cmp_rows = []
        for k, g in pairs.items():
            p, q = g["predictive"], g["perfect"]
            gap = {tier: p["preemptions_for"][tier] - q["preemptions_for"][tier] for tier in ("high", "normal", "low")}
            cmp_rows.append([_knob_text(k), n(p["preemptions"]), n(q["preemptions"]),
                             _ratio(p["preemptions"], q["preemptions"]),
                             f"{p['preemptions'] - q['preemptions']:+,} ({gap['high']:+,} / {gap['normal']:+,} / "
                             f"{gap['low']:+,})"])
        out += [f"**{d['case']}**, forecaster {d['forecaster']}, {d['steps'] / 1440:.0f} days, {len(d['runs'])} "
                f"settings:", "",
                table(["setting", "util", "high unmet GPU-min", "normal unmet", "low unmet",
                       "preemptions (for high / normal / low)", "preempted, left idle GPU-min",
                       "idle while queued GPU-min"], rows), ""]
        if cmp_rows:
            out += [table(["knobs (both strategies)", "predictive preemptions", "perfect forecast's",
                           "predictive / perfect", "predictive - perfect (for high / normal / low)"], cmp_rows), ""]
        if by:   # predictive's settings beside the perfect forecast's, summarised per value of the knob varied
            vals: dict[object, list[dict]] = {}
            for k, g in pairs.items():
                v = dict(k).get(by)
                if v is not None:
                    vals.setdefault(v, []).append(g)
            srows = [[f"{by} = {v}", str(len(gs)),
                      _span([g["predictive"]["tiers"]["high"]["unmet_gpu_min"] for g in gs], n),
                      _span([g["predictive"]["preemptions"] / g["perfect"]["preemptions"] for g in gs
                             if g["perfect"]["preemptions"]] or [float("nan")], lambda r: pct(r, 0)),
                      _span([g["predictive"]["preempted_idle_gpu_min"] for g in gs], n),
                      _span([g["perfect"]["preempted_idle_gpu_min"] for g in gs], n)]
                     for v, gs in sorted(vals.items(), key=lambda kv: str(kv[0]).zfill(12))]
            out += [table([f"predictive, by {by}", "settings", "high unmet GPU-min", "preemptions / perfect's",
                           "preempted, left idle GPU-min", "the perfect forecast's preempted, left idle"], srows),
                    ""]
        out += [source([f], d), ""]
    out += [_what_if_seeds()]
    return "\n".join(out).rstrip("\n")


# `replay_bench.py --settings @bench/whatif/<file>.json --suffix _<file>`: the perfect forecast told the true future
# only `foresight_steps` ahead, or only a share of the rises in it (`rises_seen`), at the knobs of a published
# comparison's points; each beside the sweep whose comparison it is checked against (the same window and tiers)
FORESIGHT_FILES = (("replay_helios_foresight.json", "replay_helios.json"),
                   ("replay_helios_rises.json", "replay_helios.json"),
                   ("replay_helios_unseen_foresight.json", "replay_helios_unseen.json"),
                   ("replay_helios_unseen_rises.json", "replay_helios_unseen.json"),
                   ("replay_synthetic_foresight.json", "replay_synthetic.json"))
# what each target's metric is called in the table's last column
SHORT = {"high_unmet": "high tier", "normal_unmet": "normal tier", "preemptions": "preemptions",
         "preempted_idle": "preempted idle", "utilization": "utilization"}
_SAME = ("utilization", "preemptions", "preempted_idle_gpu_min")


def _same_run(a: dict, b: dict) -> bool:
    return a["tiers"] == b["tiers"] and all(a[k] == b[k] for k in _SAME)


def _points(f: str, pub_name: str) -> tuple[dict, dict, dict, dict]:
    """A what-if file, and its sweep's reactive and perfect-forecast points and targets; the what-if's reactive run
    must be the published one (same engine, same window), or the two were measured apart and are not compared."""
    d, pub = load(f), load(pub_name)
    cmp_ = pub["comparison"]
    by_label = {x["label"]: x for x in pub["runs"]}
    r, pf = by_label[cmp_["reactive_point"]], by_label[cmp_["perfect_point"]]
    mine = next((x for x in d["runs"] if x["label"] == r["label"]), None)
    if mine is None or not _same_run(mine, r):
        raise ValueError(f"{f}: its {r['label']} is not the published one in {pub_name}: measure both at one commit")
    again = next((x for x in d["runs"] if x["label"] == pf["label"]), None)
    if again is not None and not _same_run(again, pf):
        raise ValueError(f"{f}: its {pf['label']} is not the published one in {pub_name}: measure both at one commit")
    return d, r, pf, pub["targets"]


def _base_label(x: dict) -> str:
    """A run's label without the perfect forecast's own knobs (its knob set), as the replay writes labels."""
    from daemon.sim.replay import PERFECT_KNOBS, Meter

    return Meter(x["strategy"], {k: v for k, v in x["knobs"].items() if k not in PERFECT_KNOBS}).label


def _seen_share(x: dict) -> float | None:
    """The share of the high tier's rises a rises_seen run saw coming (the replay's count, not the share asked)."""
    c = x.get("rises_high")
    return c["seen"] / c["rises"] if c and c["rises"] else None


def _missed(x: dict, r: dict, pf: dict, tg: dict) -> list[str]:
    """The targets run ``x`` misses against reactive's point ``r`` and the perfect forecast's ``pf`` (and equal
    utilization, if it is below reactive's point less the tolerance)."""
    from daemon.sim.report import UTIL_TOLERANCE, verdicts

    missed = [SHORT[tg[k]["metric"]] for k, v in verdicts(tg, x, r, pf).items() if v is not True]
    if x["utilization"] < r["utilization"] - UTIL_TOLERANCE:
        missed.append("equal utilization")
    return missed


def _rises_bracket(f: str, pub_name: str, foresight: int) -> tuple[float | None, float | None]:
    """At this foresight, the share of the high tier's rises seen by the run with the fewest seen that meets every
    target, and by the run with the most seen under that which misses one (None where there is none): between the
    two lies what the perfect forecast has to see, as far as these runs tell. Returns (below, need)."""
    from daemon.sim.replay import FORESIGHT, RISES_SEEN

    d, r, pf, tg = _points(f, pub_name)
    runs = [x for x in d["runs"] if x["strategy"] == "perfect" and x["knobs"].get(FORESIGHT) == foresight
            and RISES_SEEN in x["knobs"] and _seen_share(x) is not None]
    meet = [_seen_share(x) for x in runs if not _missed(x, r, pf, tg)]
    need = min(meet) if meet else None
    miss = [_seen_share(x) for x in runs if _missed(x, r, pf, tg) and (need is None or _seen_share(x) < need)]
    return (max(miss) if miss else None), need


def _foresight_case(f: str, pub_name: str, drain: int) -> list[str]:
    """One what-if file of the perfect forecast's own knobs, checked against its sweep's comparison points."""
    from daemon.sim.replay import FORESIGHT, RISES_SEEN

    d, r, pf, tg = _points(f, pub_name)
    rows, least_f, least_r, same0 = [], {}, {}, []
    rh, rn, ri = r["tiers"]["high"]["unmet_gpu_min"], r["tiers"]["normal"]["unmet_gpu_min"], r["preempted_idle_gpu_min"]
    for x in d["runs"]:
        if x["strategy"] == "reactive":
            continue
        missed = _missed(x, r, pf, tg)
        fs, share, seen_share = x["knobs"].get(FORESIGHT), x["knobs"].get(RISES_SEEN), _seen_share(x)
        base = _base_label(x)
        if x["strategy"] == "perfect" and share is None and fs is not None:
            least_f.setdefault(base, None)
            if not missed:
                least_f[base] = min(fs, least_f[base] if least_f[base] is not None else fs)
        elif x["strategy"] == "perfect" and share is not None:
            key = f"{base} seeing {'the whole horizon' if fs is None else f'{fs} steps'} ahead"
            least_r.setdefault(key, None)
            if not missed and seen_share is not None:
                least_r[key] = min(seen_share, least_r[key] if least_r[key] is not None else seen_share)
        if x["strategy"] == "perfect" and fs == 0 and share is None:
            # seeing nothing ahead, the engine is reactive at the same headroom: the sweep's run, number for number
            twin = next((y for y in load(pub_name)["runs"] if y["strategy"] == "reactive"
                         and y["knobs"] == {"headroom": x["knobs"].get("headroom")}), None)
            same0.append(f"{twin['label'] if twin else 'no reactive run at its headroom'}: "
                         f"{'the same numbers' if twin and _same_run(twin, x) else 'different numbers'}")
        hi, nm, idle = x["tiers"]["high"]["unmet_gpu_min"], x["tiers"]["normal"]["unmet_gpu_min"], \
            x["preempted_idle_gpu_min"]
        perfect = x["strategy"] == "perfect"
        rows.append([base, ("the whole horizon" if fs is None else str(fs)) if perfect else "–",
                     (f"{pct(share, 0)} asked, " + (f"{pct(seen_share, 0)} came" if seen_share is not None
                                                     else "not counted") if share is not None else "all")
                     if perfect else "–",
                     pct(x["utilization"]), f"{n(hi)} ({_ratio(hi, rh)})",
                     f"{n(nm)} ({(nm / rn - 1) * 100:+.1f}%)" if rn else n(nm),
                     f"{n(x['preemptions'])} ({_ratio(x['preemptions'], pf['preemptions'])})",
                     f"{n(idle)} ({_ratio(idle, ri)})", "**all met**" if not missed else "misses " + ", ".join(missed)])
    where = f", window from {d['window_start'][:10]}, high tier {', '.join(d['high_tier'])}" \
        if "unseen" in pub_name else ""
    said = [f"**{d['case']}**{where}: against reactive's point {r['label']} ({pct(r['utilization'])}; high-tier "
            f"unmet {n(rh)}, normal-tier {n(rn)}, {n(ri)} GPU-min preempted and left idle) and the perfect forecast's "
            f"point {pf['label']} ({n(pf['preemptions'])} preemptions), from `bench/out/{pub_name}`."]
    if least_f:
        said.append("The least foresight that meets every target, per knob set: "
                    + "; ".join(f"{k} {f'{v} steps' if v is not None else 'none of these'}"
                                for k, v in least_f.items()) + f" (a preemption drains for {drain} steps).")
    if least_r:
        said.append("The least share of the high tier's rises seen (as they came) that meets every target, per knob "
                    "set: " + "; ".join(f"{k}: {pct(v, 0) if v is not None else 'none of these'}"
                                        for k, v in least_r.items()) + ".")
    if same0:
        said.append("Seeing nothing ahead (foresight 0), against the sweep's reactive run at the same headroom: "
                    + "; ".join(same0) + ".")
    return [" ".join(said), "",
            table(["setting", "foresight, steps", "rises seen", "util", "high unmet GPU-min (of reactive's)",
                   "normal unmet (against reactive's)", "preemptions (of the perfect point's)",
                   "preempted, left idle GPU-min (of reactive's)", "targets, at equal utilization"], rows),
            "", source([f], d), ""]


@block("replay-foresight")
def replay_foresight() -> str:
    """How far ahead, and how many of the rises, the perfect forecast must see for the engine to meet #26's targets:
    each setting checked, target by target, against the published comparison's reactive point and perfect-forecast
    point (the sweep's own JSON), at that utilization. The what-if's reactive run must be the published one (same
    engine, same window), or the two files were measured apart and are not compared."""
    from daemon.config import Config

    drain = Config().source.simulator.drain_steps
    out = []
    for f, pub_name in FORESIGHT_FILES:
        out += _foresight_case(f, pub_name, drain)
    return "\n".join(out).rstrip("\n")


# the rises what-if (and its sweep) of each rises_bench case, where one was run: replay_<case>_rises.json
RISES_WHAT_IF = {f.removeprefix("replay_").removesuffix("_rises.json"): (f, pub)
                 for f, pub in FORESIGHT_FILES if f.endswith("_rises.json")}


@block("replay-rises")
def replay_rises() -> str:
    """bench/rises_bench.py: what an alarm after each high-tier rise sees of the next rises, the drain ahead, beside
    the share of rises the perfect forecast had to see (the rises what-if) to meet every target."""
    d = load("rises.json")
    rows, said = [], []
    for case, c in d["cases"].items():
        by = c["by_after"]
        cells = [f"{pct(by[str(a)]['recall'], 0)} / {pct(by[str(a)]['alarm_share'], 0)} / "
                 f"{pct(by[str(a)]['precision'], 0)}" for a in d["after_steps"]]
        where = f"{case} (from {c['window_start'][:10]}; {', '.join(c['high_tier'])})"
        rows.append([where, n(by[str(d['after_steps'][0])]["rises"]), *cells])
        if case in RISES_WHAT_IF:
            below, need = _rises_bracket(*RISES_WHAT_IF[case], c["drain_steps"])
            if need is None:
                said.append(f"**{case}**: no share of rises seen in its what-if meets every target")
                continue
            gap = (f"between {pct(below, 0)} (a target missed) and {pct(need, 0)} (all met)" if below is not None
                   else f"at most {pct(need, 0)}")
            reach = [a for a in d["after_steps"] if by[str(a)]["recall"] >= need]
            if reach:
                a = reach[0]
                said.append(f"**{case}**: the perfect forecast had to see {gap} of the high tier's rises the drain "
                            f"ahead, with no false alarm; an alarm after each rise sees {pct(by[str(a)]['recall'], 0)} "
                            f"when it lasts {a} steps, alarming at {pct(by[str(a)]['alarm_share'], 0)} of the steps, "
                            f"{pct(1 - by[str(a)]['precision'], 0)} of its alarms followed by no rise within the drain")
            else:
                a = max(d["after_steps"], key=lambda a: by[str(a)]["recall"])
                verdict = "short of it" if below is None or by[str(a)]["recall"] <= below else \
                    "inside that bracket, so these runs cannot tell whether it would do"
                said.append(f"**{case}**: the perfect forecast had to see {gap} of the high tier's rises the drain "
                            f"ahead, with no false alarm; an alarm after each rise sees at most "
                            f"{pct(by[str(a)]['recall'], 0)} ({verdict}; lasting {a} steps, alarming at "
                            f"{pct(by[str(a)]['alarm_share'], 0)} of the steps, {pct(1 - by[str(a)]['precision'], 0)} "
                            "of its alarms followed by no rise within the drain)")
    head = ["case (high tier)", "rises"] + [f"alarm lasting {a} steps: rises seen / steps alarming / alarms "
                                            "followed by a rise" for a in d["after_steps"]]
    return "\n".join([table(head, rows), "", *[f"- {x}." for x in said], "",
                      source(["rises.json", *[f for f, _ in RISES_WHAT_IF.values()]], d)])


SEED_FILES = ("replay_synthetic.json", "replay_synthetic_unseen.json")   # their sweeps run the same knobs
SEED_POINT = (("reactive", {"headroom": 0.15}), ("predictive", {"quantile": 0.5, "headroom": 0.15,
                                                                "preempt_cost_aware": False}),
              ("predictive", {"quantile": 0.9, "headroom": 0.15, "preempt_cost_aware": False}),
              ("perfect", {"headroom": 0.15, "preempt_cost_aware": False}))


def _what_if_seeds() -> str:
    """The synthetic comparison's knobs (bench/whatif/synthetic_point_seeds.json) on workloads drawn with other
    seeds, beside the published seed and the unseen one: how much predictive's preemptions against the perfect
    forecast's with the same knobs move from one workload (and its chosen forecaster) to another."""
    files = [*SEED_FILES, *(p.name for p in out_glob("replay_synthetic_seed*_point.json"))]
    rows = []
    for f in files:
        d = load(f)
        by = {(r["strategy"], tuple(sorted(r["knobs"].items()))): r for r in d["runs"]}
        want = [(s, tuple(sorted(k.items()))) for s, k in SEED_POINT]
        missing = [w for w in want if w not in by]
        if missing:
            raise ValueError(f"{f} has no run of {missing}")
        rs = [by[w] for w in want]
        perf = rs[3]["preemptions"]
        rows.append([str(d.get("workload_seed", "–")), d["forecaster"],
                     " / ".join(n(r["preemptions"]) for r in rs),
                     " / ".join(_ratio(r["preemptions"], perf) for r in rs[1:3]),
                     " / ".join(n(r["tiers"]["high"]["unmet_gpu_min"]) for r in rs),
                     " / ".join(pct(r["utilization"]) for r in rs), d.get("commit", "not recorded")])
    return "\n".join([
        "The synthetic comparison's knobs (headroom 0.15; predictive at p50 and p90, the cost-aware rule off) on "
        "workloads drawn with other seeds, each with the forecaster chosen on its own history (same knobs, not "
        "each workload's own comparison point):", "",
        table(["seed", "forecaster", "preemptions: reactive / p50 / p90 / perfect", "p50 / p90 against the perfect "
               "forecast's", "high unmet GPU-min: reactive / p50 / p90 / perfect", "util: reactive / p50 / p90 / "
               "perfect", "commit"], rows), "", source(files)])
