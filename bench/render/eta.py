"""Renderer for docs/eta.md: the queue-wait ETA bench per trace."""

from __future__ import annotations

from bench.render.common import block, exists, goal, load, met, n, pct, source, table, verdict

ETA_CASES = (("synthetic", "eta_synthetic.json"), ("helios", "eta_helios.json"))


@block("eta")
def eta() -> str:
    """The start-time estimate scored on the replay (bench/eta_bench.py), per trace, against issue 39's targets."""
    rows, notes, used = [], [], []
    for case, f in ETA_CASES:
        if not exists(f):
            notes.append(f"- {case}: not measured yet.")
            continue
        d = load(f)
        used.append(f)
        e = d["eta"]

        def mins(x):
            return "-" if x is None else f"{x:.1f}"

        cov = e["p90_coverage"]
        rows.append([f"{case} ({d['days']:g} day, {d['strategy']})", n(e["jobs_waited_and_started"]),
                     mins(e["median_wait_min"]), mins(e["p50_median_abs_error_min"]),
                     mins(e["naive_median_abs_error_min"]), "-" if cov is None else pct(cov),
                     f"{e['p50_known']} / {e['jobs_waited_and_started']}"])
        for t in d["targets"].values():
            v = e.get(t["metric"])
            if v is None:
                notes.append(f"- {case}: {t['what']} ({goal(t)}): not measured (no value).")
                continue
            shown = pct(v) if t["metric"] == "p90_coverage" else f"{v:.2f}"
            notes.append(f"- {case}: {t['what']} ({goal(t)}): {shown}, {verdict(met(t, e))}.")
        if e.get("p50_scaled_error_vs_naive") is not None:
            notes.append(f"- {case}: the p50 scaled by the median ratio too (measured, not shown): median abs error "
                         f"{mins(e['p50_scaled_median_abs_error_min'])} min, "
                         f"{e['p50_scaled_error_vs_naive']:.2f} of the naive estimate's.")
    out = [table(["trace", "jobs waited and started", "median wait, min", "p50 median abs error, min",
                  "naive median abs error, min", "p90 coverage", "p50 known"], rows) if rows else "", "", *notes]
    if used:   # each trace's run names its own commit and load
        out += ["", " ".join(source([f], load(f)) for f in used)]
    return "\n".join(out).strip("\n") + "\n"
