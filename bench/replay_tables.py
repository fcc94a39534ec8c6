"""The README's replay tables, printed as Markdown from the replay bench's JSON, so the README carries the
bench's numbers and nothing else:

    python bench/replay_tables.py [bench/out/replay_synthetic.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("synthetic", "helios", "alibaba")
TARGET_NAMES = {"high_unmet_at_most_half": "high-tier unmet <= 50% of reactive's",
                "normal_unmet_no_higher": "normal-tier unmet no higher",
                "preemptions_at_most_70pct": "preemptions <= 70% of reactive's",
                "utilization_at_least": "utilization >= 85%"}


def n(x: float) -> str:
    return f"{x:,.0f}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def header(d: dict) -> str:
    t = d["tiers"]
    return (f"**{d['case']}**: {sum(t.values())} tenants ({t['high']} high, {t['normal']} normal, {t['low']} low), "
            f"{n(d['capacity'])} GPUs on {d['gpus_per_node']}-GPU nodes, {d['steps'] / 1440:.0f} days measured "
            f"({n(d['steps'])} minutes), {len(d['runs'])} settings, {d['wall_seconds']:.0f} s wall for the replay, "
            f"forecaster {d['forecaster']}, commit {d.get('commit', 'not recorded')}, load average "
            f"{d['loadavg_1m_start']:.1f} -> {d['loadavg_1m_end']:.1f}")


def settings_table(d: dict) -> str:
    shown = {label for labels in d["frontiers"].values() for label in labels}
    rows = ["| setting | util | high unmet GPU-min (min) | normal unmet | low unmet | wait p99 high / normal / low, min "
            "| longest starvation, min | preemptions (for the high tier) | work lost GPU-min | high-tier GPUs held "
            "(mean) | idle while queued GPU-min | preempted, left idle GPU-min |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in d["runs"]:
        if r["label"] not in shown:
            continue
        h, nm, lo = (r["tiers"][t] for t in ("high", "normal", "low"))
        starve = max(x["longest_starvation_min"] for x in r["tiers"].values())
        rows.append(f"| {r['label']} | {pct(r['utilization'])} | {n(h['unmet_gpu_min'])} ({n(h['minutes_with_unmet'])}) "
                    f"| {n(nm['unmet_gpu_min'])} | {n(lo['unmet_gpu_min'])} | {h['wait_p99_min']:.0f} / "
                    f"{nm['wait_p99_min']:.0f} / {lo['wait_p99_min']:.0f} | {starve:.0f} | {n(r['preemptions'])} "
                    f"({n(r['preemptions_for']['high'])}) | {n(r['work_lost_gpu_min'])} | "
                    f"{r['high_held_gpus_mean']:.0f} | {n(r['idle_while_queued_gpu_min'])} | "
                    f"{n(r['preempted_idle_gpu_min'])} |")
    return "\n".join(rows)


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def comparison(d: dict) -> str:
    c = d["comparison"]
    if not c.get("predictive_point"):
        return f"No comparison: {c.get('verdict', 'no reactive or predictive runs')}."
    ratio = lambda k: c[k]["predictive"] / c[k]["reactive"] if c[k]["reactive"] else float("nan")  # noqa: E731
    rows = [f"At equal utilization: reactive's best point {c['reactive_point']} ({pct(c['reactive_utilization'])}) "
            f"against {c['predictive_point']} ({pct(c['predictive_utilization'])}):", "",
            "| target | reactive | predictive | verdict |", "| --- | --- | --- | --- |"]
    t = c["targets"]
    rows.append(f"| {TARGET_NAMES['high_unmet_at_most_half']} | {n(c['high_unmet']['reactive'])} | "
                f"{n(c['high_unmet']['predictive'])} ({100 * ratio('high_unmet'):.0f}%) | "
                f"{verdict(t['high_unmet_at_most_half'])} |")
    rows.append(f"| {TARGET_NAMES['normal_unmet_no_higher']} | {n(c['normal_unmet']['reactive'])} | "
                f"{n(c['normal_unmet']['predictive'])} ({100 * (ratio('normal_unmet') - 1):+.0f}%) | "
                f"{verdict(t['normal_unmet_no_higher'])} |")
    rows.append(f"| {TARGET_NAMES['preemptions_at_most_70pct']} | {n(c['preemptions']['reactive'])} | "
                f"{n(c['preemptions']['predictive'])} ({100 * ratio('preemptions'):.0f}%) | "
                f"{verdict(t['preemptions_at_most_70pct'])} |")
    if "utilization_at_least" in t:
        rows.append(f"| {TARGET_NAMES['utilization_at_least']} | {pct(c['reactive_utilization'])} | "
                    f"{pct(c['predictive_utilization'])} | {verdict(t['utilization_at_least'])} |")
    meets = ", ".join(c["predictive_settings_meeting_all"]) or "none"
    rows += ["", f"(added rows, not targets: preemptions made for the high tier "
             f"{n(c['preemptions_for_high_tier']['reactive'])} vs {n(c['preemptions_for_high_tier']['predictive'])}; "
             f"GPUs held for the high tier on average {c['high_held_gpus_mean']['reactive']:.0f} vs "
             f"{c['high_held_gpus_mean']['predictive']:.0f}; low-tier unmet {n(c['low_unmet']['reactive'])} vs "
             f"{n(c['low_unmet']['predictive'])}; work lost {n(c['work_lost_gpu_min']['reactive'])} vs "
             f"{n(c['work_lost_gpu_min']['predictive'])} GPU-min; predictive settings at this utilization that meet "
             f"all targets at once: {meets})"]
    if "perfect_targets" in c:
        r0 = {"high": c["high_unmet"]["reactive"], "normal": c["normal_unmet"]["reactive"],
              "pre": c["preemptions"]["reactive"]}
        rows += ["", "The same targets for the perfect forecast (the same engine fed the true future), every setting "
                 "at this utilization:", "",
                 "| perfect-forecast setting | util | high-tier unmet | normal-tier unmet | preemptions |",
                 "| --- | --- | --- | --- | --- |"]
        by = {r["label"]: r for r in d["runs"]}
        for label, pt in c["perfect_targets"].items():
            r = by[label]
            hi, nm, pre = r["tiers"]["high"]["unmet_gpu_min"], r["tiers"]["normal"]["unmet_gpu_min"], r["preemptions"]
            rows.append(f"| {label} | {pct(r['utilization'])} | {n(hi)} "
                        f"({100 * hi / r0['high']:.0f}%): {verdict(pt['high_unmet_at_most_half'])} | {n(nm)} "
                        f"({100 * (nm / r0['normal'] - 1):+.0f}%): {verdict(pt['normal_unmet_no_higher'])} | {n(pre)} "
                        f"({100 * pre / r0['pre']:.0f}%): {verdict(pt['preemptions_at_most_70pct'])} |")
        if not c["perfect_targets"]:
            rows.append("| (none at this utilization) | | | | |")
    return "\n".join(rows)


def main(paths: list[str]) -> int:
    files = [Path(p) for p in paths] or [ROOT / "bench" / "out" / f"replay_{c}.json" for c in CASES]
    for f in files:
        d = json.loads(f.read_text())
        print(header(d), "", settings_table(d), "", comparison(d), "", sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
