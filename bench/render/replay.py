"""Renderers for docs/replay.md: each trace's replay comparison and its goals, the summary, findings, cost rule,
worth weight, forecast cadence, unseen traces and the shipped model (the sizing and the inference replay have their
own modules, replay_sizing.py and replay_inference.py).
replay() and replay_verdicts() are also what README's results-at-a-glance and the tests read."""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench.render.common import (
    BLOCKS,
    OPS,
    ROOT,
    block,
    exists,
    listing,
    load,
    n,
    out_glob,
    pct,
    relative_met,
    replay_model_name,
    source,
    table,
    verdict,
)
from bench.render.replay_what_if import FORESIGHT_FILES

REPLAY_CASES = ("synthetic", "helios", "alibaba")


def replay(case: str) -> dict:
    return load(f"replay_{case}.json")


def replay_header(d: dict) -> str:
    t = d["tiers"]
    every = d["forecast_every"]
    return (f"**{d['case']}**: {sum(t.values())} tenants ({t['high']} high, {t['normal']} normal, {t['low']} low), "
            f"{n(d['capacity'])} GPUs on {d['gpus_per_node']}-GPU nodes, {d['steps'] / 1440:.0f} days measured "
            f"({n(d['steps'])} minutes), {len(d['runs'])} settings, {d['wall_seconds']:.0f} s wall for the replay, "
            f"forecaster {d['forecaster']}"
            + (f" (its LSTM candidates trained {d['forecaster_fit_epochs']} epochs)" if d.get("forecaster_fit_epochs")
               else "")
            + ", forecast "
            + ("every step, as the daemon does" if every == 1 else f"every {every} steps and shifted in between")
            + f", commit {d.get('commit', 'not recorded')}, load average "
            f"{d['loadavg_1m_start']:.1f} -> {d['loadavg_1m_end']:.1f}")


def replay_settings_table(d: dict) -> str:
    shown = {label for labels in d["frontiers"].values() for label in labels}
    rows = []
    for r in d["runs"]:
        if r["label"] not in shown:
            continue
        h, nm, lo = (r["tiers"][t] for t in ("high", "normal", "low"))
        starve = max(x["longest_starvation_min"] for x in r["tiers"].values())
        rows.append([r["label"], pct(r["utilization"]), f"{n(h['unmet_gpu_min'])} ({n(h['minutes_with_unmet'])})",
                     n(nm["unmet_gpu_min"]), n(lo["unmet_gpu_min"]),
                     f"{h['wait_p99_min']:.0f} / {nm['wait_p99_min']:.0f} / {lo['wait_p99_min']:.0f}", f"{starve:.0f}",
                     f"{n(r['preemptions'])} ({n(r['preemptions_for']['high'])})", n(r["work_lost_gpu_min"]),
                     f"{r['high_held_gpus_mean']:.0f}", n(r["idle_while_queued_gpu_min"]),
                     n(r["preempted_idle_gpu_min"])])
    return table(["setting", "util", "high unmet GPU-min (min)", "normal unmet", "low unmet",
                  "wait p99 high / normal / low, min", "longest starvation, min", "preemptions (for the high tier)",
                  "work lost GPU-min", "high-tier GPUs held (mean)", "idle while queued GPU-min",
                  "preempted, left idle GPU-min"], rows)


def _run_metric(r: dict, metric: str) -> float:
    return {"high_unmet": r["tiers"]["high"]["unmet_gpu_min"], "normal_unmet": r["tiers"]["normal"]["unmet_gpu_min"],
            "preemptions": r["preemptions"], "preempted_idle": r["preempted_idle_gpu_min"],
            "utilization": r["utilization"]}[metric]


METRIC_NAMES = {"high_unmet": "high-tier unmet", "normal_unmet": "normal-tier unmet", "preemptions": "preemptions",
                "preempted_idle": "GPU-min preempted, then idle", "utilization": "utilization"}


def _base(d: dict, t: dict) -> dict | None:
    """The setting a relative replay goal compares with: reactive's point, or the perfect forecast's point."""
    c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
    label = c["reactive_point"] if t.get("relative_to", "reactive") == "reactive" else c.get("perfect_point")
    return by.get(label) if label else None


def replay_verdict(d: dict, t: dict, run: dict) -> bool | None:
    """One of the JSON's goals for ``run``; None where the setting it is relative to did not run."""
    v = _run_metric(run, t["metric"])
    if not t.get("relative_to"):
        return OPS[t["op"]](v, t["value"])
    base = _base(d, t)
    return None if base is None else relative_met(t, v, _run_metric(base, t["metric"]))


def replay_verdicts(d: dict, run: dict | None = None) -> dict[str, bool | None]:
    """Each of the JSON's goals for the predictive comparison point (or for ``run``)."""
    c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
    pred = run or by[c["predictive_point"]]
    return {k: replay_verdict(d, t, pred) for k, t in d.get("targets", {}).items()}


def verdict3(ok: bool | None) -> str:
    return "no perfect-forecast setting at this utilization" if ok is None else verdict(ok)


def _change(t: dict, pred: float, react: float) -> str:
    if t["metric"] == "normal_unmet":
        return f"{100 * (pred / react - 1):+.0f}%" if react else "–"
    return pct(pred / react, 0) if react else "–"


def replay_comparison(d: dict) -> str:
    c = d["comparison"]
    if not c.get("predictive_point"):
        return f"No comparison: {c.get('verdict', 'no reactive or predictive runs')}."
    by = {r["label"]: r for r in d["runs"]}
    react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
    perf = by.get(c.get("perfect_point") or "")
    tg = d.get("targets", {})
    shown = {t["metric"]: t for t in tg.values()}
    rows = []
    for k in ("high_unmet", "normal_unmet", "preemptions", "preempted_idle", "utilization"):
        t = shown.get(k)
        rv, pv = _run_metric(react, k), _run_metric(pred, k)
        fv = _run_metric(perf, k) if perf else None
        fmt = pct if k == "utilization" else n
        if t and t.get("relative_to") == "perfect":
            pcell = f"{fmt(pv)} ({_change(t, pv, fv)} of the perfect forecast's)" if fv is not None else fmt(pv)
        elif k == "utilization":
            pcell = fmt(pv)
        else:
            pcell = f"{fmt(pv)} ({_change({'metric': k}, pv, rv)})"
        # what the perfect forecast reaches on the same goal: the rest of the way is forecast error
        fcell = "–" if fv is None else fmt(fv) + (f": {verdict3(replay_verdict(d, t, perf))}" if t else "")
        rows.append([t["what"] if t else METRIC_NAMES[k], fmt(rv), pcell, fcell,
                     verdict3(replay_verdict(d, t, pred)) if t else "no goal"])
    meets = ", ".join(c["predictive_settings_meeting_all"]) or "none"
    out = [f"At equal utilization: reactive's best point {c['reactive_point']} ({pct(c['reactive_utilization'])}) "
           f"against {c['predictive_point']} ({pct(c['predictive_utilization'])}), beside the perfect forecast's "
           + (f"point {c['perfect_point']} ({pct(c['perfect_utilization'])})" if perf else "(none at this utilization)")
           + ":", "",
           table(["target", "reactive", "predictive", "perfect forecast (same engine)", "verdict"], rows), "",
           f"(added rows, not targets: preemptions made for the high tier "
           f"{n(c['preemptions_for_high_tier']['reactive'])} "
           f"vs {n(c['preemptions_for_high_tier']['predictive'])}; GPUs held for the high tier on average "
           f"{c['high_held_gpus_mean']['reactive']:.0f} vs {c['high_held_gpus_mean']['predictive']:.0f}; "
           f"low-tier unmet {n(c['low_unmet']['reactive'])} vs {n(c['low_unmet']['predictive'])}; work lost "
           f"{n(c['work_lost_gpu_min']['reactive'])} vs {n(c['work_lost_gpu_min']['predictive'])} GPU-min; predictive "
           f"settings at this utilization that meet all targets at once: {meets})"]
    twin = c.get("perfect_same_knobs")
    if twin:
        out += ["", f"The perfect forecast with the predictive point's own knobs, {twin['label']} "
                f"({pct(twin['utilization'])}): high-tier unmet {n(twin['high_unmet'])}, normal-tier unmet "
                f"{n(twin['normal_unmet'])}, {n(twin['preemptions'])} preemptions, {n(twin['preempted_idle'])} GPU-min "
                "preempted and then idle."]
    if "perfect_targets" in c:
        rel = [t for t in tg.values() if t.get("relative_to")] or [
            {"metric": m, "what": m} for m in ("high_unmet", "normal_unmet", "preemptions")]
        prow = []
        for label in c["perfect_targets"]:
            r = by[label]
            cells = []
            for t in rel:
                b = _base(d, t)
                pv, rv = _run_metric(r, t["metric"]), _run_metric(b, t["metric"]) if b else 0
                cells.append(f"{n(pv)} ({_change(t, pv, rv)})" + (f": {verdict3(replay_verdict(d, t, r))}"
                                                                  if "op" in t else ""))
            prow.append([label, pct(r["utilization"]), *cells])
        if not prow:
            prow.append(["(none at this utilization)", "", *([""] * len(rel))])
        out += ["", "The same targets for the perfect forecast (the same engine fed the true future), every setting "
                "at this utilization (preemptions against the perfect forecast's point):", "",
                table(["perfect-forecast setting", "util", *(METRIC_NAMES[t["metric"]] for t in rel)], prow)]
    return "\n".join(out)


def _replay_case_block(case: str) -> Callable[[], str]:
    def render() -> str:
        d = replay(case)
        return "\n".join([replay_header(d), "", replay_settings_table(d), "", replay_comparison(d), "",
                          source([f"replay_{case}.json"])])
    return render


for _case in REPLAY_CASES:
    BLOCKS[f"replay-{_case}"] = _replay_case_block(_case)


@block("replay-forecasters")
def replay_forecasters() -> str:
    out = []
    for case in REPLAY_CASES:
        d = replay(case)
        ch = d["forecaster_choice"]
        scores = sorted(ch.get("scores", {}).items(), key=lambda kv: kv[1])
        blend = ch.get("blend")
        chosen = replay_model_name(scores[0][0], blend)
        others = ", ".join(f"{replay_model_name(k, blend)} {v:.4f}" for k, v in scores[1:])
        out.append(f"- **{case}**: {chosen} ({scores[0][1]:.4f}; {others}), scored on {ch.get('scored_on', '?')}.")
    out += ["", "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json` "
                "(`forecaster_choice`).*"]
    return "\n".join(out)


@block("replay-summary")
def replay_summary() -> str:
    data = {c: replay(c) for c in REPLAY_CASES}
    names = {}
    for d in data.values():
        for k, t in d.get("targets", {}).items():
            names.setdefault(k, t)
    rows = []
    for k, t in names.items():
        row = [t["what"]]
        for case, d in data.items():
            c = d["comparison"]
            by = {r["label"]: r for r in d["runs"]}
            pred = by[c["predictive_point"]]
            pv = _run_metric(pred, t["metric"])
            if t.get("relative_to"):
                base = _base(d, t)
                if base is None:
                    row.append(f"{n(pv)}, no perfect-forecast setting at this utilization")
                    continue
                rv = _run_metric(base, t["metric"])
                whose = "" if t["relative_to"] == "reactive" else " (perfect forecast)"
                nums = f"{n(pv)} vs {n(rv)}{whose}, {_change(t, pv, rv)}"
            else:
                nums = pct(pv)
            row.append(f"{verdict(replay_verdict(d, t, pred))} ({nums})" if k in d.get("targets", {}) else (
                f"{nums} (no goal)" if t.get("relative_to") else "–"))
        rows.append(row)
    for what, key in (("(added, not a target) a predictive setting meeting all at once",
                       "predictive_settings_meeting_all"),
                      ("(added, not a target) a perfect-forecast setting meeting all at once",
                       "perfect_settings_meeting_all")):
        rows.append([what, *(listing(d["comparison"].get(key, [])) if d.get("targets") else "–"
                             for d in data.values())])
    head = ["target", *(f"{c}" + ("" if data[c].get("targets") else " (no target)") for c in REPLAY_CASES)]
    return "\n".join([table(head, rows), "",
                      "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json`.*"])


@block("replay-findings")
def replay_findings() -> str:
    out = []
    data = {c: replay(c) for c in REPLAY_CASES}
    for case, d in data.items():
        c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
        react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
        bits = []
        # predictive settings that meet the high-tier goal, and how far below reactive's utilization they run
        hi = d.get("targets", {}).get("high_unmet_at_most_half")
        if hi and not replay_verdicts(d)["high_unmet_at_most_half"]:
            ok = [r for r in d["runs"] if r["strategy"] == "predictive"
                  and relative_met(hi, _run_metric(r, "high_unmet"), _run_metric(react, "high_unmet"))]
            if ok:
                gaps = [100 * (react["utilization"] - r["utilization"]) for r in ok]
                bits.append(f"{len(ok)} predictive settings leave at most half of reactive's high-tier unmet demand, "
                            f"at {min(gaps):.1f} to {max(gaps):.1f} points below reactive's utilization (outside the "
                            f"half-point tolerance)")
        aged = [x["preemptions"] - x["preemptions_for"]["high"] for x in (react, pred)]
        bits.append(f"preemptions made for tenants protected by aging, not for the high tier: {n(aged[0])} of "
                    f"reactive's {n(react['preemptions'])}, {n(aged[1])} of predictive's {n(pred['preemptions'])}")
        bits.append(f"preempted GPUs left idle: {n(pred['preempted_idle_gpu_min'])} GPU-min predictive against "
                    f"{n(react['preempted_idle_gpu_min'])} reactive")
        best = max(d["runs"], key=lambda r: r["utilization"])
        static = [r for r in d["runs"] if r["strategy"] == "static"]
        top_static = max(static, key=lambda r: r["utilization"])
        pool = next((r for r in static if r["knobs"].get("reserve_share") == 0.2), None)
        bits.append(f"static's best utilization {pct(top_static['utilization'])}, "
                    + ("the highest of all settings" if top_static is best else
                       f"{100 * (best['utilization'] - top_static['utilization']):.1f} points under the highest "
                       f"({best['label']})")
                    + (f"; with a 20% pool it leaves {n(_run_metric(pool, 'high_unmet'))} GPU-min of high-tier demand "
                       f"unmet" if pool else ""))
        better = [label for label in c.get("perfect_targets", {})
                  if _run_metric(by[label], "high_unmet") > _run_metric(pred, "high_unmet")]
        if better:
            bits.append("perfect-forecast settings at this utilization that leave more high-tier demand unmet than "
                        f"the predictive point: {listing(better)}")
        out.append(f"- **{case}**: " + "; ".join(bits) + ".")
    syn = data["synthetic"]
    frontier = set(syn["frontiers"]["reactive"])
    starve = [max(x["longest_starvation_min"] for x in r["tiers"].values())
              for r in syn["runs"] if r["label"] in frontier]
    sys.path.insert(0, str(ROOT))
    from daemon.config import PolicyConfig

    out.append(f"- The longest summed wait of any job, for reactive on synthetic (its frontier): {min(starve):.0f} to "
               f"{max(starve):.0f} minutes, against `max_wait_steps = {PolicyConfig().max_wait_steps}`.")
    out += ["", "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json`.*"]
    return "\n".join(out)


def _same_setting(d: dict, r: dict, drop: str, **change) -> dict | None:
    """The run of `d` of r's strategy whose knobs are r's without knob `drop` and with `change`: the same setting
    with one knob back at its default (and others set)."""
    knobs = {k: v for k, v in r["knobs"].items() if k != drop} | change
    return next((x for x in d["runs"] if x["strategy"] == r["strategy"] and x["knobs"] == knobs), None)


@block("replay-cost-rule")
def replay_cost_rule() -> str:
    """What the cost-aware rule changed: per plan (the same plan made again with the rule off, counted by the
    replay) and end to end (settings run with the rule on and off)."""
    out = []
    for case in REPLAY_CASES:
        d = replay(case)
        # weight 1, the default (the sweep's larger weight is the block above's)
        counted = [r for r in d["runs"] if r.get("cost_rule") and r["knobs"].get("preempt_worth_weight", 1) == 1]
        if not counted:
            continue
        refused = [r["cost_rule"]["refused"] for r in counted]
        changed = [r["cost_rule"]["steps_changed"] / r["steps"] for r in counted]
        out.append(f"- **{case}**: over the {len(counted)} settings with the rule on at weight 1 (predictive and "
                   "perfect), "
                   f"{n(min(refused))} to {n(max(refused))} job preemptions refused per setting, in "
                   f"{pct(min(changed))} to {pct(max(changed))} of the plans.")
        rows = []
        for off in (r for r in d["runs"] if r["knobs"].get("preempt_cost_aware") is False):
            on = _same_setting(d, off, "preempt_cost_aware")
            if on is None or not on.get("cost_rule"):
                continue
            x = on["cost_rule"]
            rows.append([on["label"], f"{n(x['steps_changed'])}", f"{n(x['refused'])} ({n(x['jobs_refused'])})",
                         n(x["other_choice"]),
                         *(f"{fmt(_run_metric(off, m))} -> {fmt(_run_metric(on, m))}"
                           for m, fmt in (("utilization", pct), ("high_unmet", n), ("normal_unmet", n),
                                          ("preemptions", n), ("preempted_idle", n)))])
        if rows:
            out += ["", table(["setting (rule on)", "plans changed", "job preemptions refused (distinct jobs)",
                               "made instead", "util, rule off -> on", "high-tier unmet", "normal-tier unmet",
                               "preemptions", "GPU-min preempted, then idle"], rows), ""]
    out += ["*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json` "
            "(`cost_rule` per setting). Per plan: the same plan made again with the rule off; a job refused at "
            "several steps counts at each, and once in brackets. End to end: the same setting run with the rule "
            "off.*"]
    return "\n".join(out)


@block("replay-worth-weight")
def replay_worth_weight() -> str:
    """The cost-aware rule's worth weight against the rule off, with the perfect forecast."""
    if not exists("replay_worth_weight.json"):
        return "Not measured yet."
    d = load("replay_worth_weight.json")
    rows = []
    for case, c in d["cases"].items():
        for r in c["runs"]:
            rows.append([case, r["label"], pct(r["utilization"]), *(n(_run_metric(r, m)) for m in
                                                                   ("high_unmet", "normal_unmet")),
                         n(r["tiers"]["low"]["unmet_gpu_min"]), n(r["preemptions"]), n(r["work_lost_gpu_min"]),
                         n(r["preempted_idle_gpu_min"])])
    return "\n".join([table(["case", "perfect-forecast setting", "util", "high unmet", "normal unmet", "low unmet",
                              "preemptions", "work lost GPU-min", "preempted, then idle GPU-min"], rows), "",
                       source(["replay_worth_weight.json"], d)])


@block("replay-worth-weight-fitted")
def replay_worth_weight_fitted() -> str:
    """The cost-aware rule at the sweep's larger worth weight against weight 1 and the rule off, with each case's
    fitted forecaster (predictive) and the perfect forecast, per setting of the published sweep."""
    out, shown, skipped = [], [], []
    for case in REPLAY_CASES:
        d = replay(case)
        heavy = [r for r in d["runs"] if r["knobs"].get("preempt_worth_weight", 1) != 1
                 and r["knobs"].get("preempt_cost_aware", True)]
        if not heavy:
            skipped.append(case)
            continue
        rows, counts, pairs = [], {}, []
        for r in heavy:
            one = _same_setting(d, r, "preempt_worth_weight")
            off = _same_setting(d, r, "preempt_worth_weight", preempt_cost_aware=False)
            if one is None or off is None:
                continue
            pairs.append((one, r))
            w = r["knobs"]["preempt_worth_weight"]
            rows.append([one["label"], f"{w:g}", *(" / ".join(fmt(_run_metric(x, m)) for x in (off, one, r))
                                                   for m, fmt in (("utilization", pct), ("high_unmet", n),
                                                                  ("normal_unmet", n), ("preemptions", n),
                                                                  ("preempted_idle", n)))])
            c = counts.setdefault(r["strategy"], {"n": 0, **{f"{m}_{s}": 0 for m in ("high", "pre", "normal")
                                                             for s in ("less", "more")}})
            c["n"] += 1
            for m, key in (("high_unmet", "high"), ("preemptions", "pre"), ("normal_unmet", "normal")):
                c[f"{key}_less"] += _run_metric(r, m) < _run_metric(one, m)
                c[f"{key}_more"] += _run_metric(r, m) > _run_metric(one, m)
        if not rows:
            skipped.append(case)
            continue
        shown.append(case)
        said = "; ".join(f"{s}, {c['n']} settings: less high-tier unmet in {c['high_less']} (more in "
                         f"{c['high_more']}), fewer preemptions in {c['pre_less']} (more in {c['pre_more']}), less "
                         f"normal-tier unmet in {c['normal_less']} (more in {c['normal_more']})"
                         for s, c in counts.items())
        ruled = [x for p in pairs for x in p if x["strategy"] == "predictive" and x.get("cost_rule")]
        if ruled and all(x["cost_rule"]["steps_changed"] == 0 for x in ruled):
            said += (". With this forecaster the rule changed no plan in any of these predictive settings, at weight "
                     "1 or at the larger weight: each made the same preemptions as the same plan with the rule off, "
                     "so this trace says nothing about the weight with it")
        out += [f"- **{case}** (forecaster {d['forecaster']}), the larger weight against weight 1 at the same "
                f"setting: {said}.", "",
                table(["setting (weight 1)", "weight", "util: off / 1 / weight", "high-tier unmet",
                       "normal-tier unmet", "preemptions", "GPU-min preempted, then idle"], rows), ""]
    if not out:
        return "Not measured yet: the committed replays predate the sweep's worth weight."
    if skipped:
        out.append(f"Not in this sweep's committed replay: {', '.join(skipped)} (run before the weight was added).")
        out.append("")
    out.append(source([f"replay_{c}.json" for c in shown]))
    return "\n".join(out)


@block("replay-forecast-every")
def replay_forecast_every() -> str:
    """The published replays against the same replays forecasting at the other pace (every step, as the daemon,
    or every 5 steps, shifted in between)."""
    rows: list[list[str]] = []
    note: list[str] = []
    bullets: list[str] = []
    for case in ("synthetic", "helios"):
        d = replay(case)
        other_name = next((f.name for f in out_glob(f"replay_{case}_every*.json")), None)
        if other_name is None:
            continue
        o = load(other_name)
        for x in sorted((d, o), key=lambda x: x["forecast_every"]):
            c, by = x["comparison"], {r["label"]: r for r in x["runs"]}
            p = by[c["predictive_point"]]
            v = replay_verdicts(x)
            met_n = sum(ok is True for ok in v.values())
            rows.append([case, f"{x['forecast_every']}" + (" (published)" if x is d else ""),
                         f"{x['wall_seconds']:.0f} s / {x['replay_cpu_seconds']:.0f} s", c["predictive_point"],
                         pct(p["utilization"]), n(_run_metric(p, "high_unmet")), n(_run_metric(p, "normal_unmet")),
                         n(p["preemptions"]), n(p["preempted_idle_gpu_min"]), f"{met_n} of {len(v)}"])
        every = {x["forecast_every"]: {r["label"]: r for r in x["runs"] if r["strategy"] == "predictive"}
                 for x in (d, o)}
        fast, slow = every[min(every)], every[max(every)]
        pairs = [(fast[k], slow[k]) for k in fast if k in slow]
        if pairs:
            def count(metric: str, more: bool) -> int:
                return sum((_run_metric(a, metric) > _run_metric(b, metric)) if more else
                           (_run_metric(a, metric) < _run_metric(b, metric)) for a, b in pairs)
            bullets.append(f"- **{case}**, the same {len(pairs)} predictive settings forecasting every {min(every)} "
                           f"against every {max(every)} steps: more preemptions in {count('preemptions', True)}, "
                           f"less high-tier unmet in {count('high_unmet', False)} (more in "
                           f"{count('high_unmet', True)}), less normal-tier unmet in {count('normal_unmet', False)}, "
                           f"more GPU-min preempted and then idle in {count('preempted_idle', True)}.")
        files = f"`bench/out/replay_{case}.json` and `bench/out/{other_name}`"
        same = o.get("same_forecaster_as") == f"replay_{case}.json" and o.get("commit") == d.get("commit")
        note.append(f"{case} from {files} (" + ("the same fitted forecaster, one run, commit "
                                                 f"{d.get('commit')}" if same else
                                                 f"commits {d.get('commit')} and {o.get('commit')}") + ")")
    if not rows:
        return "No replay at the other pace is committed."
    return "\n".join([table(["trace", "forecast every (steps)", "replay wall / CPU", "predictive point", "util",
                              "high-tier unmet", "normal-tier unmet", "preemptions", "preempted, then idle GPU-min",
                              "targets met"], rows), "", *bullets, "", "*" + "; ".join(note) + ".*"])


@block("replay-unseen")
def replay_unseen() -> str:
    """The check on a window and tier mapping the published figures do not use (issue #26)."""
    files = [f for case in ("helios", "synthetic") for f in out_glob(f"replay_{case}_unseen*.json")
             # a second pace of the same window is not another window, nor a what-if on it (FORESIGHT_FILES)
             if "_every" not in f.name and f.name not in {w for w, _ in FORESIGHT_FILES}]
    if not files:
        return "No replay of another window is committed."
    out = []
    for f in files:
        d = load(f.name)
        what = (f"Synthetic workload seed {d['workload_seed']}" if "workload_seed" in d
                else f"Window from {d['window_start'][:10]}, high tier {', '.join(d['high_tier'])}")
        out += [f"{what}: " + replay_header(d), "", replay_comparison(d), "", source([f.name])]
    return "\n".join(out)


@block("replay-shipped-model")
def replay_shipped_model() -> str:
    d = load("replay_synthetic_shipped_model.json")
    fitted = replay("synthetic")
    c = d["comparison"]
    by = {r["label"]: r for r in d["runs"]}
    react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
    v = replay_verdicts(d)
    parts = []
    for k, t in d["targets"].items():
        base = _base(d, t) if t.get("relative_to") else None
        if base is not None:
            pv, rv = _run_metric(pred, t["metric"]), _run_metric(base, t["metric"])
            parts.append(f"{t['what']}: {n(pv)} against {n(rv)} ({_change(t, pv, rv)}, {verdict3(v[k])})")
    same = fitted["forecaster"] == d["forecaster"]
    pace = "every step" if d["forecast_every"] == 1 else f"every {d['forecast_every']} steps"
    how = f"commit {d.get('commit', 'not recorded')}, forecasting {pace}"
    lead = (f"The selection picked the shipped LSTM ({d['forecaster']}) on the synthetic history itself, so the run "
            f"with `--shipped-model` ({how}) has the same forecaster: " if same else
            f"With the shipped LSTM instead (`--shipped-model`, {how}) ")
    out = [lead + f"the comparison point is {c['predictive_point']} at {pct(pred['utilization'])} against "
           f"reactive's {pct(react['utilization'])}: " + "; ".join(parts) + "."]
    other = replay_verdicts(fitted)
    if not same and other.get("high_unmet_at_most_half") != v.get("high_unmet_at_most_half"):
        out.append("Whether the synthetic high-tier target is met depends on which of the two forecasters the "
                   f"selection picks (their wQL on the history: fitted {fitted['forecaster_choice']['wql']:.4f}, "
                   f"shipped {fitted['forecaster_choice']['scores'].get('current', float('nan')):.4f}).")
    out += ["", source(["replay_synthetic_shipped_model.json"])]
    return "\n".join(out)
