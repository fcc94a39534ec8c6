"""Replay output: a per-tier table for the terminal, JSON for machines, Pareto PNGs for people."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.sim.replay import Meter

UTIL_TOLERANCE = 0.005  # "equal utilization": within half a percentage point


def table(runs: list[Meter]) -> str:
    head = (f"{'setting':<36} {'util':>5} {'idleQ':>7} {'hi unmet':>8} {'hi min':>6} {'hi p99':>6} "
            f"{'nrm unmet':>9} {'nrm p99':>7} {'low unmet':>9} {'low p99':>7} {'starve':>6} "
            f"{'preempt':>7} {'forHi':>6} {'lost':>7} {'preIdle':>7} {'ms':>5}")
    unit = (f"{'':<36} {'%':>5} {'GPU-min':>7} {'GPU-min':>8} {'min':>6} {'min':>6} {'GPU-min':>9} {'min':>7} "
            f"{'GPU-min':>9} {'min':>7} {'min':>6} {'jobs':>7} {'jobs':>6} {'GPU-min':>7} {'GPU-min':>7} {'/cyc':>5}")
    rows = [head, unit]
    for r in runs:
        s = r.summary()
        h, nm, lo = (s["tiers"][t] for t in ("high", "normal", "low"))
        starve = max(x["longest_starvation_min"] for x in s["tiers"].values())
        rows.append(f"{s['label']:<36} {100 * s['utilization']:>5.1f} {s['idle_while_queued_gpu_min']:>7.0f} "
                    f"{h['unmet_gpu_min']:>8.0f} {h['minutes_with_unmet']:>6.0f} {h['wait_p99_min']:>6.0f} "
                    f"{nm['unmet_gpu_min']:>9.0f} {nm['wait_p99_min']:>7.0f} {lo['unmet_gpu_min']:>9.0f} "
                    f"{lo['wait_p99_min']:>7.0f} {starve:>6.0f} {s['preemptions']:>7d} "
                    f"{s['preemptions_for']['high']:>6d} {s['work_lost_gpu_min']:>7.0f} "
                    f"{s['preempted_idle_gpu_min']:>7.0f} {s['decision_ms_mean']:>5.1f}")
    return "\n".join(rows)


def frontier(points: list[dict], tier: str = "high") -> list[dict]:
    """The Pareto frontier: settings no other setting beats on both utilization (higher) and ``tier``'s unmet
    GPU-minutes (lower). Sorted by utilization."""
    def unmet(p: dict) -> float:
        return p["tiers"][tier]["unmet_gpu_min"]

    out = []
    for p in points:
        u, x = p["utilization"], unmet(p)
        dominated = any(q is not p and q["utilization"] >= u and unmet(q) <= x
                        and (q["utilization"] > u or unmet(q) < x) for q in points)
        if not dominated:
            out.append(p)
    return sorted(out, key=lambda p: p["utilization"])


# what a target's "metric" names, read from one setting's summary
METRICS = {
    "high_unmet": lambda s: s["tiers"]["high"]["unmet_gpu_min"],
    "normal_unmet": lambda s: s["tiers"]["normal"]["unmet_gpu_min"],
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
                "low_unmet": {"reactive": r["tiers"]["low"]["unmet_gpu_min"],
                              "predictive": p["tiers"]["low"]["unmet_gpu_min"]},
                "preemptions_for_high_tier": {"reactive": r["preemptions_for"]["high"],
                                              "predictive": p["preemptions_for"]["high"]},
                "work_lost_gpu_min": {"reactive": r["work_lost_gpu_min"], "predictive": p["work_lost_gpu_min"]},
                "hold_flaps": {"reactive": r.get("hold_flaps"), "predictive": p.get("hold_flaps")},
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


def pareto_figure(runs: list[Meter], path: Path, title: str) -> Path:
    """Utilization against high-tier unmet and against normal-tier unmet, every setting a dot; in each panel,
    each strategy's own Pareto frontier on that panel's tier (utilization higher, that tier's unmet lower) a
    line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = [r.summary() for r in runs]
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
        ax.set_yscale("symlog", linthresh=10)
        ax.grid(alpha=0.3)
        ax.set_title(f"utilization vs {tier}-tier unmet\nlines: each strategy's Pareto frontier on {tier}-tier unmet",
                     fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
