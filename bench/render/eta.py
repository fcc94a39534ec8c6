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


@block("eta-slurm")
def eta_slurm() -> str:
    """The daemon's estimate beside `squeue --start` on a real slurmctld (bench/eta_slurm_bench.py), both scored
    against the actual starts, and which was closer."""
    f = "eta_slurm.json"
    if not exists(f):
        return "Not measured yet: `python bench/eta_slurm_bench.py`.\n"
    d = load(f)
    s = d["scores"]
    if not s.get("jobs_scored"):
        return f"No job waited long enough for both estimates. {source([f], d)}\n"

    def m(x):
        return "-" if x is None else f"{x:.2f}"

    cov = s.get("daemon_p90_coverage")
    rows = [["median abs error, min", m(s["daemon_p50_median_abs_error_min"]), m(s["slurm_median_abs_error_min"])],
            ["mean abs error, min", m(s["daemon_p50_mean_abs_error_min"]), m(s["slurm_mean_abs_error_min"])],
            ["jobs where it was closer", str(s["daemon_closer"]), str(s["slurm_closer"])],
            ["start came after it (too early)", "-", pct(s["slurm_late_share"])],
            ["start came by the p90", "-" if cov is None else pct(cov), "-"]]
    if s.get("with_history"):
        rows.append([f"median abs error, min, the {s['with_history']} jobs estimated with a run-length history",
                     m(s["with_history_daemon_p50_median_abs_error_min"]),
                     m(s["with_history_slurm_median_abs_error_min"])])
    dm, sm = s["daemon_p50_median_abs_error_min"], s["slurm_median_abs_error_min"]
    closer = ("the daemon's p50" if dm < sm else "Slurm's StartTime" if sm < dm else "neither (equal)")
    out = [f"{n(d['jobs_submitted'])} jobs on {d['nodes']} nodes of {d['gpus_per_node']} GPUs, a cycle every "
           f"{d['cycle_s']:g} s, {d['wall_s'] / 60:.1f} min; scored: the {s['jobs_scored']} jobs that had both "
           "estimates at one cycle and then started (of "
           f"{s['jobs_waited_over_10s']} that waited over 10 s).", "",
           table(["", "daemon p50", "Slurm StartTime (squeue --start)"], rows), "",
           f"Closer by the median absolute error: {closer} ({m(dm)} against {m(sm)} min).", "",
           source([f], d)]
    return "\n".join(out) + "\n"
