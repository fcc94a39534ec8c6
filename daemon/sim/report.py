"""Replay output: a per-tier table for the terminal, JSON for machines, Pareto PNGs for people."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from daemon.sim.replay import Meter
from daemon.text import plural

UTIL_TOLERANCE = 0.005  # "equal utilization": within half a percentage point


# the table's columns: (header, unit, what it is: the legend and docs/replay.md's list, value from one setting's
# summary, format)
COLUMNS: tuple[tuple[str, str, str, Callable[[dict], float], str], ...] = (
    ("util", "%", "mean utilization: running GPUs over capacity", lambda s: 100 * s["utilization"], ".1f"),
    ("idleQ", "GPU-min", "idle while queued: GPU-minutes free while jobs waited (at most the GPUs queued; free "
     "GPUs spread over nodes do not start a larger job)", lambda s: s["idle_while_queued_gpu_min"], ".0f"),
    ("hi unmet", "GPU-min", "high-tier unmet demand: GPU-minutes asked for and not served",
     lambda s: s["tiers"]["high"]["unmet_gpu_min"], ".0f"),
    ("hi min", "min", "minutes with high-tier demand unmet", lambda s: s["tiers"]["high"]["minutes_with_unmet"],
     ".0f"),
    ("hi p99", "min", "high-tier wait, 99th percentile (tiers.high.wait_p99_min in the JSON)",
     lambda s: s["tiers"]["high"]["wait_p99_min"], ".0f"),
    ("nrm unmet", "GPU-min", "normal-tier unmet demand", lambda s: s["tiers"]["normal"]["unmet_gpu_min"], ".0f"),
    ("nrm p99", "min", "normal-tier wait, 99th percentile", lambda s: s["tiers"]["normal"]["wait_p99_min"], ".0f"),
    ("low unmet", "GPU-min", "low-tier unmet demand", lambda s: s["tiers"]["low"]["unmet_gpu_min"], ".0f"),
    ("low p99", "min", "low-tier wait, 99th percentile", lambda s: s["tiers"]["low"]["wait_p99_min"], ".0f"),
    ("starve", "min", "longest starvation: the longest any job waited in all (every queue stint), any tier",
     lambda s: max(x["longest_starvation_min"] for x in s["tiers"].values()), ".0f"),
    ("preempt", "jobs", "jobs preempted", lambda s: s["preemptions"], "d"),
    ("forHi", "jobs", "preemptions made for the high tier (the rest were for tenants protected by aging)",
     lambda s: s["preemptions_for"]["high"], "d"),
    ("lost", "GPU-min", "work lost: GPU-minutes of preempted jobs since their last checkpoint",
     lambda s: s["work_lost_gpu_min"], ".0f"),
    ("preIdle", "GPU-min", "preempted, then idle: GPU-minutes a preemption freed that then sat idle",
     lambda s: s["preempted_idle_gpu_min"], ".0f"),
    ("ms", "/cyc", "mean decision time of the policy engine per cycle, milliseconds",
     lambda s: s["decision_ms_mean"], ".1f"),
)



def _inf(tier: str, key: str) -> Callable[[dict], float]:
    return lambda s: s["tiers"][tier][key]


def _inf_share(tier: str) -> Callable[[dict], float]:
    def share(s: dict) -> float:
        t = s["tiers"][tier]
        return 100 * t["inf_throttled"] / t["inf_requests"] if t["inf_requests"] else 0.0
    return share


# an inference workload's requests per tier (daemon/sim/inference.py): arrived = served + throttled + late
INFERENCE_COLUMNS: tuple[tuple[str, str, str, Callable[[dict], float], str], ...] = (
    ("hi req", "req", "high-tier inference requests that arrived", _inf("high", "inf_requests"), ",.0f"),
    ("hi served", "req", "high-tier requests served in the minute they arrived", _inf("high", "inf_served"), ",.0f"),
    ("hi thr", "req", "high-tier requests throttled by the gateway (429 with Retry-After): no ready replica "
     "had room, or over the tenant's limit", _inf("high", "inf_throttled"), ",.0f"),
    ("hi thr%", "%", "high-tier requests throttled, share of those that arrived", _inf_share("high"), ".3f"),
    ("hi late", "req", "high-tier requests admitted but served a minute or more late (or never, at the end)",
     _inf("high", "inf_late"), ",.0f"),
    ("nrm req", "req", "normal-tier inference requests that arrived", _inf("normal", "inf_requests"), ",.0f"),
    ("nrm thr", "req", "normal-tier requests throttled", _inf("normal", "inf_throttled"), ",.0f"),
    ("nrm thr%", "%", "normal-tier requests throttled, share of those that arrived", _inf_share("normal"), ".3f"),
    ("nrm late", "req", "normal-tier requests served late", _inf("normal", "inf_late"), ",.0f"),
    ("svc GPU", "GPU-min", "GPU-minutes the services' replicas ran, cold ones included: what their requests cost "
     "(compare strategies at equal GPU-hours)", lambda s: sum(t.get("inf_gpu_min", 0.0) for t in s["tiers"].values()),
     ",.0f"),
)


def has_inference(runs: list[Meter] | list[dict]) -> bool:
    """Whether the replay's workload had inference services (its summaries count their requests per tier)."""
    return any("inf_requests" in s["tiers"]["high"] for s in _summaries(runs))


def _summaries(runs: list[Meter] | list[dict]) -> list[dict]:
    return [r if isinstance(r, dict) else r.summary() for r in runs]


def table(runs: list[Meter] | list[dict], legend: bool = False, columns=COLUMNS) -> str:
    """One row per setting, every tier measured. Each column is as wide as its widest cell (a long setting name
    moves the columns, never out of line); ``legend`` adds what each column is under the table. ``columns``:
    INFERENCE_COLUMNS for the requests of an inference workload's services."""
    sums = _summaries(runs)
    cells = [["setting", *(c[0] for c in columns)], ["", *(c[1] for c in columns)]]
    cells += [[s["label"], *(format(c[3](s), c[4]) for c in columns)] for s in sums]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = [" ".join([row[0].ljust(widths[0]), *(x.rjust(w) for x, w in zip(row[1:], widths[1:]))]).rstrip()
             for row in cells]
    return "\n".join(lines + ([""] + legend_lines(columns) if legend else []))


def legend_lines(columns=COLUMNS) -> list[str]:
    """What each column of ``table`` is, one line each (docs/replay.md lists the same)."""
    w, u = max(len(c[0]) for c in columns), max(len(c[1]) for c in columns)
    return ["columns:"] + [f"  {c[0]:<{w}}  {c[1]:<{u}}  {c[2]}" for c in columns]


def _n(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def comparison_lines(cmp_: dict) -> list[str]:
    """The comparison at equal utilization (``compare``'s dict) as lines a person reads: the three points, then
    one line per figure with each strategy's value."""
    if not cmp_:
        return []
    if "reactive_point" not in cmp_:
        return [f"comparison: {cmp_.get('verdict', 'none')}"]
    out = [f"comparison at equal utilization ({100 * cmp_['reactive_utilization']:.1f}%, reactive's best point):"]
    pts = [("reactive", cmp_["reactive_point"], cmp_.get("reactive_utilization")),
           ("predictive", cmp_.get("predictive_point"), cmp_.get("predictive_utilization")),
           ("perfect", cmp_.get("perfect_point"), cmp_.get("perfect_utilization"))]
    for name, label, util in pts:
        if label is not None:
            out.append(f"  {name:<11} {label}  (util {100 * util:.1f}%)")
    if cmp_.get("predictive_point") is None:
        # how far it fell short, and how to get points nearer (a default run has one setting per strategy)
        top = cmp_.get("predictive_top_utilization")
        short = "" if top is None else \
            f" (its highest runs at {100 * top:.1f}%; --sweep tries more settings, --recommend too)"
        return out + [f"  {cmp_.get('verdict', '')}{short}"]
    # a point is matched at reactive's utilization or above: one far above is not "equal", so say how far, and how
    # to get nearer points, rather than let the header claim it (a default run has one setting per strategy)
    for name, label, util in pts[1:]:
        gap = 100 * (util - cmp_["reactive_utilization"]) if label is not None else 0.0
        if gap > 1.0:
            out.append(f"  note: {name}'s nearest setting runs {gap:.1f} pt above reactive's utilization, not at "
                       "it: no setting of it came nearer (--sweep tries more settings)")
    names = [n for n, label, _ in pts if label is not None]
    figs = [("high-tier unmet, GPU-min", "high_unmet"), ("normal-tier unmet, GPU-min", "normal_unmet"),
            ("low-tier unmet, GPU-min", "low_unmet"), ("preemptions", "preemptions"),
            ("preempted, then idle, GPU-min", "preempted_idle"), ("hold flaps", "hold_flaps")]
    w = max(len(f[0]) for f in figs)
    out.append(f"  {'':<{w}}  " + "  ".join(f"{n:>10}" for n in names))
    for text, key in figs:
        if key in cmp_:
            out.append(f"  {text:<{w}}  " + "  ".join(f"{_n(cmp_[key].get(n)):>10}" for n in names))
    tg = cmp_.get("targets") or {}
    if tg:
        met = [k for k, v in tg.items() if v is True]
        missed = [k for k, v in tg.items() if v is False]
        out.append(f"  targets: {len(met)} of {len(tg)} met" + (f"; missed: {', '.join(missed)}" if missed else ""))
    return out


def frontier(points: list[dict], tier: str = "high", also=None) -> list[dict]:
    """The Pareto frontier: settings no other setting beats on both utilization (higher) and ``tier``'s unmet
    GPU-minutes (lower), and on ``also(point)`` (lower) where given (the recommendation's high-tier requests
    throttled). Sorted by utilization."""
    def figs(p: dict) -> tuple[float, ...]:
        return (-p["utilization"], p["tiers"][tier]["unmet_gpu_min"], *((also(p),) if also is not None else ()))

    fs = [figs(p) for p in points]
    out = [p for p, f in zip(points, fs)
           if not any(q is not p and g != f and all(a <= b for a, b in zip(g, f)) for q, g in zip(points, fs))]
    return sorted(out, key=lambda p: p["utilization"])


# what a target's "metric" names, read from one setting's summary
METRICS = {
    "high_unmet": lambda s: s["tiers"]["high"]["unmet_gpu_min"],
    "normal_unmet": lambda s: s["tiers"]["normal"]["unmet_gpu_min"],
    "low_unmet": lambda s: s["tiers"]["low"]["unmet_gpu_min"],
    "preemptions": lambda s: s["preemptions"],
    "preempted_idle": lambda s: s["preempted_idle_gpu_min"],
    "utilization": lambda s: s["utilization"],
}
OPS = {"<": lambda v, t: v < t, "<=": lambda v, t: v <= t, ">": lambda v, t: v > t, ">=": lambda v, t: v >= t}
# knobs that mean nothing to a forecast without spread: the perfect forecast is run without them
SPREAD_KNOBS = ("quantile", "preempt_quantile")


def _point(points: list[dict], util: float) -> dict | None:
    """Among ``points``, those at ``util`` or above (less the tolerance), the one with the least high-tier unmet
    demand (the higher utilization among equals)."""
    ok = [p for p in points if p["utilization"] >= util - UTIL_TOLERANCE]
    return min(ok, key=lambda x: (x["tiers"]["high"]["unmet_gpu_min"], -x["utilization"])) if ok else None


def verdicts(targets: dict, p: dict, reactive: dict, perfect: dict | None) -> dict[str, bool | None]:
    """Each target for setting ``p``. A relative target compares ``p``'s value with reactive's point's or with the
    perfect forecast's (``relative_to``): the ratio must meet ``op value``; where the other's value is 0, ``p``'s
    must be 0 too. None where the perfect forecast has no point to compare with."""
    out: dict[str, bool | None] = {}
    for k, t in targets.items():
        v = METRICS[t["metric"]](p)
        rel = t.get("relative_to")
        if rel is None:
            out[k] = bool(OPS[t["op"]](v, t["value"]))
            continue
        base = reactive if rel == "reactive" else perfect
        if base is None:
            out[k] = None
            continue
        b = METRICS[t["metric"]](base)
        out[k] = bool(v == 0) if b == 0 else bool(OPS[t["op"]](v / b, t["value"]))
    return out


def compare(summaries: list[dict], targets: dict | None = None) -> dict:
    """Predictive against reactive at equal utilization, with the perfect forecast (the same engine fed the true
    future) beside it.

    Reactive's best point: on its frontier, the lowest high-tier unmet among the points within one percentage
    point of its highest utilization. Predictive's point and the perfect forecast's point: the lowest high-tier
    unmet among their settings with at least that utilization (less half a point). ``targets`` (bench/targets.py)
    are checked for predictive's point; a target ``relative_to`` "perfect" compares with the perfect forecast's
    point, so what the perfect forecast reaches and predictive does not is the gap left to forecast error."""
    by = {s: [x for x in summaries if x["strategy"] == s] for s in ("reactive", "predictive", "perfect")}
    if not by["reactive"] or not by["predictive"]:
        return {}
    rf = frontier(by["reactive"])
    top = max(p["utilization"] for p in rf)
    r = min((p for p in rf if p["utilization"] >= top - 0.01), key=lambda p: p["tiers"]["high"]["unmet_gpu_min"])
    out = {"reactive_point": r["label"], "reactive_utilization": r["utilization"]}
    p = _point(by["predictive"], r["utilization"])
    if p is None:
        out["predictive_point"] = None
        out["verdict"] = "no predictive setting reaches the reactive point's utilization"
        out["predictive_top_utilization"] = max(x["utilization"] for x in by["predictive"])
        return out
    f = _point(by["perfect"], r["utilization"])
    tg = targets or {}

    def three(metric: str) -> dict:
        d = {"reactive": METRICS[metric](r), "predictive": METRICS[metric](p)}
        if f is not None:
            d["perfect"] = METRICS[metric](f)
        return d

    ver = verdicts(tg, p, r, f)
    ok = [x for x in by["predictive"] if x["utilization"] >= r["utilization"] - UTIL_TOLERANCE]
    out.update({"predictive_point": p["label"], "predictive_utilization": p["utilization"],
                "perfect_point": f["label"] if f else None, "perfect_utilization": f["utilization"] if f else None,
                **{m: three(m) for m in ("high_unmet", "normal_unmet", "preemptions", "preempted_idle")},
                "low_unmet": three("low_unmet"),
                "preemptions_for_high_tier": {"reactive": r["preemptions_for"]["high"],
                                              "predictive": p["preemptions_for"]["high"]},
                "work_lost_gpu_min": {"reactive": r["work_lost_gpu_min"], "predictive": p["work_lost_gpu_min"]},
                # the perfect forecast's too: the comparison's table printed '-' under it, as if not measured
                "hold_flaps": {"reactive": r.get("hold_flaps"), "predictive": p.get("hold_flaps"),
                               **({"perfect": f.get("hold_flaps")} if f is not None else {})},
                "high_held_gpus_mean": {"reactive": r.get("high_held_gpus_mean"),
                                        "predictive": p.get("high_held_gpus_mean")},
                "targets": ver, "all_met": all(v is True for v in ver.values()) if ver else None,
                # not a target: whether ANY predictive setting at that utilization meets every target at once
                # (the compared point is the one with the least high-tier unmet, as above)
                "predictive_settings_meeting_all": [x["label"] for x in ok if tg and
                                                    all(v is True for v in verdicts(tg, x, r, f).values())]})
    # the perfect forecast with predictive's point's own knobs (its quantiles mean nothing without spread), where
    # the sweep ran it: the same engine and setting, only the forecast differs
    same = {k: v for k, v in p["knobs"].items() if k not in SPREAD_KNOBS}
    twin = next((x for x in by["perfect"] if x["knobs"] == same), None)
    if twin is not None:
        out["perfect_same_knobs"] = {"label": twin["label"], "utilization": twin["utilization"],
                                     **{m: METRICS[m](twin) for m in ("high_unmet", "normal_unmet", "preemptions",
                                                                      "preempted_idle")}}
    # not a target either: the same targets for every perfect-forecast setting at that utilization (those relative
    # to the perfect forecast compare it with its own point)
    perfect = [x for x in by["perfect"] if x["utilization"] >= r["utilization"] - UTIL_TOLERANCE]
    if by["perfect"]:
        out["perfect_targets"] = {x["label"]: verdicts(tg, x, r, f) for x in perfect}
        out["perfect_settings_meeting_all"] = [x["label"] for x in perfect if tg and
                                               all(v is True for v in verdicts(tg, x, r, f).values())]
    return out


def gate_compare(summaries: list[dict], margins: list[float], targets: dict) -> dict:
    """The skill gate measured (issue 40, item 2): reactive against predictive ungated and against predictive gated
    at each margin (the replay knob ``gate_margin``), each by ``compare``'s equal-utilization matching on its own
    settings, so every variant is compared at reactive's same best point. ``targets`` (bench/targets.py
    REPLAY_GATED...) are checked for each gated point; ``high_gain_kept`` is the share of the ungated point's
    high-tier gain over reactive that the gated point keeps (None where the ungated one gained nothing)."""
    from daemon.sim.replay import GATE_MARGIN

    base = [x for x in summaries if x["strategy"] != "predictive"]
    pred = [x for x in summaries if x["strategy"] == "predictive"]
    plain = {k: v for k, v in targets.items() if v["metric"] != "high_gain_kept"}
    out = {"ungated": compare(base + [x for x in pred if GATE_MARGIN not in x["knobs"]], plain)}
    ug = out["ungated"]
    gain = (ug["high_unmet"]["reactive"] - ug["high_unmet"]["predictive"]) if ug.get("predictive_point") else None
    for m in margins:
        c = compare(base + [x for x in pred if x["knobs"].get(GATE_MARGIN) == m], plain)
        if c.get("predictive_point"):
            kept = None if gain is None or gain <= 0 else \
                (c["high_unmet"]["reactive"] - c["high_unmet"]["predictive"]) / gain
            c["high_gain_kept"] = kept
            for k, t in targets.items():
                if t["metric"] == "high_gain_kept":
                    c["targets"][k] = None if kept is None else bool(OPS[t["op"]](kept, t["value"]))
            c["all_met"] = all(v is True for v in c["targets"].values())
            p = next(x for x in pred if x["label"] == c["predictive_point"])
            c["skill_gate"] = p.get("skill_gate")
        out[f"{GATE_MARGIN}={m:g}"] = c
    return out


def to_json(runs: list[Meter], meta: dict, path: Path, comparison: dict | None = None) -> dict:
    """The report as JSON: ``meta`` (the bench's; its ``targets`` are checked by ``compare``), every setting's
    summary, each strategy's frontier and the comparison (``comparison``, when given, instead: runs that are not a
    sweep have no point to compare at equal utilization)."""
    summaries = [r.summary() for r in runs]
    out = {**meta, "runs": summaries,
           "frontiers": {s: [p["label"] for p in frontier([x for x in summaries if x["strategy"] == s])]
                         for s in dict.fromkeys(x["strategy"] for x in summaries)},
           "comparison": comparison if comparison is not None else compare(summaries, meta.get("targets"))}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    return out


COLORS = {"static": "tab:gray", "reactive": "tab:orange", "predictive": "tab:blue", "perfect": "tab:green"}


def duration_text(days: float) -> str:
    """A replayed window as a person says it, to the minute: "1 day", "23 h 59 min", "2 days 6 h" (not
    "0.999306 days")."""
    minutes = round(days * 1440)
    d, rest = divmod(minutes, 1440)
    h, m = divmod(rest, 60)
    parts = ([plural(d, "day")] if d else []) + ([f"{h} h"] if h else []) + ([f"{m} min"] if m else [])
    return " ".join(parts) or "0 min"


def replay_title(name: str, tenants: int, capacity: int, days: float, detail: str = "") -> str:
    """The figure's title: the workload, its size and the replayed window (``detail`` added after a comma)."""
    return (f"{name}: {plural(tenants, 'tenant')}, {plural(capacity, 'GPU', fmt=',')}, {duration_text(days)}"
            + (f", {detail}" if detail else ""))


def _unmet_axis(ax, values: list[float], tier: str) -> None:
    """The unmet axis: "no contention" written on the panel where no setting left any of the tier's demand unmet
    (a flat line on a +-0.05 axis says nothing); a linear axis where the values span less than a decade (a log
    axis there has no labelled tick); else symlog (linear up to 10 GPU-min), labelled at 1, 2 and 5 of each
    decade."""
    from matplotlib.ticker import FuncFormatter, SymmetricalLogLocator

    pos = [v for v in values if v > 0]
    if not pos:
        ax.set_ylim(-1, 1)
        ax.set_yticks([0])
        ax.text(0.5, 0.75, f"no contention: no setting left {tier}-tier demand unmet", transform=ax.transAxes,
                ha="center", va="center", fontsize=10, color="dimgray")
        return
    if max(pos) >= 10 * min(pos):
        ax.set_yscale("symlog", linthresh=10)
        ax.yaxis.set_major_locator(SymmetricalLogLocator(base=10, linthresh=10, subs=(1, 2, 5)))
    # after the scale (setting one resets the formatter): 2,000 rather than 2000 or 2x10^3
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v == int(v) else f"{v:,g}"))


def pareto_axes(runs: list[Meter] | list[dict], title: str):
    """The figure ``pareto_figure`` saves: utilization against high-tier unmet and against normal-tier unmet, every
    setting a dot; in each panel, each strategy's own Pareto frontier on that panel's tier (utilization higher,
    that tier's unmet lower) a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = _summaries(runs)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for s in dict.fromkeys(x["strategy"] for x in summaries):
        pts = [x for x in summaries if x["strategy"] == s]
        col = COLORS.get(s, "black")
        for ax, tier in zip(axes, ("high", "normal")):
            fr = frontier(pts, tier)
            ax.scatter([100 * p["utilization"] for p in pts], [p["tiers"][tier]["unmet_gpu_min"] for p in pts],
                       color=col, s=22, alpha=0.8, label=s if tier == "high" else None)
            ax.plot([100 * p["utilization"] for p in fr], [p["tiers"][tier]["unmet_gpu_min"] for p in fr],
                    color=col, lw=1.2)
    for ax, tier in zip(axes, ("high", "normal")):
        ax.set_xlabel("mean utilization, %")
        ax.set_ylabel(f"{tier}-tier unmet demand, GPU-min")
        _unmet_axis(ax, [p["tiers"][tier]["unmet_gpu_min"] for p in summaries], tier)
        ax.grid(alpha=0.3)
        ax.set_title(f"utilization vs {tier}-tier unmet\nlines: each strategy's Pareto frontier on {tier}-tier unmet",
                     fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def pareto_figure(runs: list[Meter] | list[dict], path: Path, title: str) -> Path:
    """``pareto_axes``'s figure as a PNG at ``path``."""
    fig = pareto_axes(runs, title)
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
