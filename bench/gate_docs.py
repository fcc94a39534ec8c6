"""The skill gate measured in the replay (issue 40, item 2), as docs/forecasting.md shows it: per trace, reactive's
best point against predictive ungated and gated at each margin, each at reactive's utilization by the sweep's own
matching (daemon/sim/report.py ``compare``), with issue 40's checks met or not and by how much.

The margin is chosen here, from the JSON, by a rule fixed before the runs: on the windows marked for the choice
(synthetic and the published Helios window), the margin that meets the most checks, then the smallest total
shortfall, then the smaller margin. A window marked unseen is shown at that margin only and never enters the
choice. bench/render_docs.py registers the block; this module only reads the JSON it is given.
"""

from __future__ import annotations

from collections.abc import Callable

# (case, file, role): "choice" windows choose the margin, "unseen" ones are reported at it, "report" ones too
GATE_FILES = (("synthetic", "replay_synthetic_gate.json", "choice"),
              ("helios", "replay_helios_gate.json", "choice"),
              ("helios", "replay_helios_gate_unseen.json", "unseen"),
              ("alibaba", "replay_alibaba_gate.json", "report"))
VALUE = {"high_unmet": ("high", "high-tier unmet"), "normal_unmet": ("normal", "normal-tier unmet"),
         "low_unmet": ("low", "low-tier unmet")}


def variant(m: float) -> str:
    return f"gate_margin={m:g}"


def on_forecast(gate: dict | None, pct: Callable[[float, int], str]) -> str:
    """The share of tenant-steps the plan acted on the forecast for: of the tenants whose verdict it reads (the high
    tier, and inference services that may start replicas ahead). A JSON from before that count has only the share
    of all tenants (``tenant_steps_on_forecast`` of ``tenant_steps``, normal and low tiers included, whose verdict
    changes nothing), said as such."""
    if not gate:
        return "all (ungated)"
    if "read_tenant_steps" in gate:
        steps = gate["read_tenant_steps"]
        return pct(gate["read_tenant_steps_on_forecast"] / steps, 0) if steps else "none read"
    if gate.get("tenant_steps"):
        return f"{pct(gate['tenant_steps_on_forecast'] / gate['tenant_steps'], 0)} of all tenants"
    return "all (ungated)"


def _ratio(c: dict, metric: str) -> tuple[float, float]:
    """(predictive, reactive) for a check's metric at the comparison's points."""
    v = c[metric]
    return float(v["predictive"]), float(v["reactive"])


def shortfall(c: dict, key: str, t: dict) -> float:
    """How far a check is from its limit, as a share (0 where met): the ratio to reactive over the limit, or the
    gain kept under it."""
    if t["metric"] == "high_gain_kept":
        kept = c.get("high_gain_kept")
        return 0.0 if kept is None else max(t["value"] - kept, 0.0)
    p, r = _ratio(c, t["metric"])
    if r == 0:
        return 0.0 if p == 0 else 1.0
    return max(p / r - t["value"], 0.0)


def check_text(c: dict, key: str, t: dict, pct: Callable[[float, int], str], n: Callable[[float], str]) -> str:
    """One check in words: the figures, the limit, met or not and the gap."""
    ok = c["targets"].get(key)
    if t["metric"] == "high_gain_kept":
        kept = c.get("high_gain_kept")
        if kept is None:
            return (f"{t['what']}: not measured (no ungated point at reactive's utilization, or it gained nothing "
                    "on the high tier)")
        gap = "" if ok else f", {100 * (t['value'] - kept):.0f} pt short"
        return f"{t['what']}: kept {pct(kept, 0)} ({'met' if ok else '**not met**'}{gap})"
    p, r = _ratio(c, t["metric"])
    what = t["what"]
    if r == 0:
        return f"{what}: {n(p)} against reactive's 0 ({'met' if ok else '**not met**'})"
    gap = "" if ok else f", {100 * (p / r - t['value']):.0f} pt over"
    return f"{what}: {n(p)} against {n(r)}, {pct(p / r, 0)} of reactive's ({'met' if ok else '**not met**'}{gap})"


def meeting_measured(d: dict) -> str:
    """Which margins tried meet every check that was measured (one not measured, the gain kept where no ungated
    point reaches reactive's utilization, is left aside and named): the answer to "is there a margin that meets
    every target here", which the choice rule, ranking by checks met, does not give."""
    ok, unmeasured = [], set()
    for x in d["gate_margins"]:
        c = d["comparison"].get(variant(x), {})
        if not c.get("predictive_point"):
            continue
        unmeasured |= {k for k, v in c["targets"].items() if v is None}
        if all(v is not False for v in c["targets"].values()):
            ok.append(f"{x:g}")
    tried = ", ".join(f"{x:g}" for x in d["gate_margins"])
    aside = (" (" + "; ".join(d["targets"][k]["what"] for k in sorted(unmeasured)) + ": not measured, left aside)"
             if unmeasured else "")
    return (f"Margins tried ({tried}) whose point meets every check measured{aside}: "
            + (", ".join(ok) if ok else "**none**") + ".")


def choose(files: dict[str, dict]) -> float | None:
    """The margin, by the rule in the module's docstring, from the windows marked "choice"."""
    chosen = [files[f] for _, f, role in GATE_FILES if role == "choice" and f in files]
    if not chosen:
        return None
    margins = sorted(set.intersection(*(set(d["gate_margins"]) for d in chosen)))

    def score(m: float) -> tuple:
        met = short = 0.0
        for d in chosen:
            c = d["comparison"].get(variant(m), {})
            if not c.get("predictive_point"):
                return (-1, 0.0, m)
            met += sum(v is True for v in c["targets"].values())
            short += sum(shortfall(c, k, t) for k, t in d["targets"].items())
        return (met, -short, -m)

    return max(margins, key=score) if margins else None


def render(load: Callable[[str], dict], exists: Callable[[str], bool], pct: Callable[[float, int], str],
           n: Callable[[float], str], table: Callable, header: Callable[[dict], str],
           source: Callable) -> str:
    files = {f: load(f) for _, f, _ in GATE_FILES if exists(f)}
    if not files:
        return "No replay with the skill gate is committed."
    m = choose(files)
    out = [f"The margin chosen on synthetic and the published Helios window: **{m:g}** (the most checks met, then the "
           "smallest shortfall, then the smaller margin; the unseen window had no say)." if m is not None else
           "No margin could be chosen: synthetic and the published Helios window are not both measured.", ""]
    verdicts = {}
    for case, f, role in GATE_FILES:
        if f not in files:
            continue
        d = files[f]
        shown = ["ungated", *(variant(x) for x in d["gate_margins"] if role == "choice" or x == m)]
        what = f"window from {d['window_start'][:10]}, high tier {', '.join(d['high_tier'])}"
        out += [f"{header(d)}; {what}" + (" (**unseen**: reported at the chosen margin only)" if role == "unseen"
                                          else ""), ""]
        grid = [r["label"].removeprefix("predictive") for r in d["runs"]
                if r["strategy"] == "predictive" and "gate_margin" not in r["knobs"]]
        out += [f"Predictive settings (each ungated and gated): {', '.join(grid)}; forecaster "
                + (f"as `{d['forecaster_choice']['reused_from']}` chose" if d["forecaster_choice"].get("reused_from")
                   else "the shipped model" if "why" in d["forecaster_choice"] and "shipped" in
                   d["forecaster_choice"]["why"] else "fitted on the history") + ".", ""]
        first = d["comparison"]["ungated"]
        if not first.get("reactive_point"):
            out += [f"No comparison: {first.get('verdict', 'no reactive runs')}.", ""]
            continue
        rows = []
        for v in shown:
            c = d["comparison"].get(v, {})
            if not c.get("predictive_point"):
                rows.append([v, c.get("verdict", "no point"), *([""] * 6)])
                continue
            share = on_forecast(c.get("skill_gate"), pct)
            tg = c["targets"]
            rows.append([v, f"{c['predictive_point']} ({pct(c['predictive_utilization'], 1)})",
                         *(f"{n(c[k]['predictive'])}" for k in ("high_unmet", "normal_unmet", "low_unmet",
                                                                "preemptions")),
                         share, f"{sum(x is True for x in tg.values())} of {len(tg)}"])
        r = next(x for x in d["runs"] if x["label"] == first["reactive_point"])
        out += [f"Reactive's best point {first['reactive_point']} ({pct(first['reactive_utilization'], 1)}): "
                f"high-tier unmet {n(r['tiers']['high']['unmet_gpu_min'])}, normal "
                f"{n(r['tiers']['normal']['unmet_gpu_min'])}, low {n(r['tiers']['low']['unmet_gpu_min'])} GPU-min, "
                f"{n(r['preemptions'])} preemptions.",
                "", table(["predictive", "point (util)", "high unmet", "normal unmet", "low unmet", "preemptions",
                           "tenant-steps on the forecast", "checks met"], rows), ""]
        if role == "choice":
            out += [meeting_measured(d), ""]
        if m is not None and d["comparison"].get(variant(m), {}).get("predictive_point"):
            c = d["comparison"][variant(m)]
            verdicts[f] = c["all_met"]
            meets = c.get("predictive_settings_meeting_all") or []
            out += [f"At the chosen margin {m:g}: " + "; ".join(check_text(c, k, t, pct, n)
                                                                 for k, t in d["targets"].items()) + ". Gated "
                    "settings at this utilization that meet every check but the gain kept: "
                    + (", ".join(meets) if meets else "none") + ".", ""]
        out += [source([f], d), ""]
    if m is not None and verdicts:
        missed = [f for f, ok in verdicts.items() if not ok]
        out.append("Every check is met at the chosen margin on every trace measured." if not missed else
                   "At the chosen margin, checks are missed on " + ", ".join(f"`{f}`" for f in missed) + ".")
    return "\n".join(out).rstrip()
