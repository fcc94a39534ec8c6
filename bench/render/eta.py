"""Renderer for docs/eta.md: the queue-wait ETA bench per trace."""

from __future__ import annotations

from bench.render.common import block, exists, goal, load, met, n, pct, source, table, verdict

# the held-out windows (2020-05-09, 2020-05-19) were first run once the p50's release levels were fixed, and with the
# code before them (commit 0fde1ec) beside (docs/eta.md)
ETA_CASES = (("synthetic", "eta_synthetic.json"), ("helios", "eta_helios.json"),
             ("helios, second window", "eta_helios_second.json"), ("helios, unseen window", "eta_helios_unseen.json"),
             ("helios, held-out window A", "eta_helios_heldout_a.json"),
             ("helios, held-out window A, before the release levels", "eta_helios_heldout_a_before.json"),
             ("helios, held-out window B", "eta_helios_heldout_b.json"),
             ("helios, held-out window B, before the release levels", "eta_helios_heldout_b_before.json"))
HELIOS_CASES = ETA_CASES[1:]


def measured(cases, notes: list[str], used: list[str]):
    """(case, its JSON) for each case whose bench JSON exists (its file added to `used`); a note for each that
    does not."""
    for case, f in cases:
        if not exists(f):
            notes.append(f"- {case}: not measured yet.")
            continue
        used.append(f)
        yield case, load(f)


@block("eta")
def eta() -> str:
    """The start-time estimate scored on the replay (bench/eta_bench.py), per trace, against issue 39's targets."""
    rows, notes, used = [], [], []
    for case, d in measured(ETA_CASES, notes, used):
        e = d["eta"]

        def mins(x):
            return "-" if x is None else f"{x:.1f}"

        cov = e["p90_coverage"]
        since = f" from {d['first_measured'][:10]}" if d.get("first_measured") else ""
        rows.append([f"{case} ({d['days']:g} day{since}, {d['strategy']})", n(e["jobs_waited_and_started"]),
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


@block("eta-later")
def eta_later() -> str:
    """The estimate a job still waiting was given at fixed times after it began to wait (daemon/sim/eta_replay.py
    AGES_MIN), scored against the same start, per trace, with issue 39's goals applied to it too."""
    rows, notes, used = [], [], []
    for case, d in measured(ETA_CASES, notes, used):
        ages = d["eta"].get("at_ages")
        if not ages:
            notes.append(f"- {case}: not measured at fixed times after (its JSON predates them).")
            continue

        def mins(x):
            return "-" if x is None else f"{x:.1f}"

        def ratio(x):
            return "-" if x is None else f"{x:.2f}"

        for age, e in ages.items():
            cov = e["p90_coverage"]
            rows.append([case, f"{age} min", n(e["jobs_waited_and_started"]), mins(e["median_wait_min"]),
                         mins(e["p50_median_abs_error_min"]), mins(e["naive_median_abs_error_min"]),
                         ratio(e["error_vs_naive"]), ratio(e.get("p50_aged_blend_error_vs_naive")),
                         ratio(e.get("p50_scaled_error_vs_naive")), "-" if cov is None else pct(cov)])
            got = []
            for t in d["targets"].values():
                v = e.get(t["metric"])
                if v is not None:
                    shown = pct(v) if t["metric"] == "p90_coverage" else f"{v:.2f}"
                    got.append(f"{t['what']} ({goal(t)}): {shown}, {verdict(met(t, e))}")
            if got:
                notes.append(f"- {case}, {age} min after: " + "; ".join(got) + ".")
    out = [table(["trace", "estimate made, after the wait began", "jobs still waiting then, and started",
                  "median wait left, min", "p50 median abs error, min", "naive median abs error, min",
                  "p50 error / naive's", "measured, not shown: p50 blended by its age's weight, error / naive's",
                  "measured, not shown: p50 scaled by its age's ratio, error / naive's", "p90 coverage"], rows)
           if rows else "", "", *notes]
    if used:
        out += ["", " ".join(source([f], load(f)) for f in used)]
    return "\n".join(out).strip("\n") + "\n"


@block("eta-breakdown")
def eta_breakdown() -> str:
    """Where the p50's error comes from on each Helios window (bench/eta_bench.py --breakdown,
    daemon/sim/eta_breakdown.py): the scored jobs grouped by what happened while they waited, the running jobs' end
    errors, and the replay re-scored with the unknowns made known (hindsight)."""

    def m(x):
        return "-" if x is None else f"{x:.1f}"

    rows, notes, used = [], [], []
    for case, f in HELIOS_CASES:
        if not exists(f) or "breakdown" not in load(f):
            continue
        d = load(f)
        used.append(f)
        b = d["breakdown"]
        for what, key in (("tier", "by_tier"), ("jobs that arrived later and started first",
                                                 "by_overtaken_by_later_arrivals"),
                          ("jobs ahead that left the queue unstarted", "by_jobs_ahead_withdrawn"),
                          ("jobs ahead in the queue at the estimate", "by_position")):
            for lab, g in b.get(key, {}).items():
                rows.append([case, f"{what}: {lab}", n(g["jobs"]), m(g["median_wait_min"]),
                             m(g["p50_median_abs_error_min"]), m(g["p50_median_signed_error_min"]),
                             m(g["naive_median_abs_error_min"])])
        r = b["running_end_error_min"]
        notes.append(f"- {case}: the jobs running at each estimate ended {m(r['median'])} min after their run-length "
                     f"p50 at the median (negative: before it; 10th-90th percentile {m(r['p10'])} to {m(r['p90'])}; "
                     f"{pct(b['running_end_unknown_share'])} had no basis, so never ended in the estimate).")
        for tier, by in sorted(b.get("overtaking_jobs_by_tier", {}).items()):
            if by:
                top = sorted(by.items(), key=lambda x: -x[1])
                notes.append(f"- {case}: the jobs that overtook the {tier} tier's scored jobs (once per job "
                             "overtaken), by their tier: " + ", ".join(f"{t} {n(c)}" for t, c in top) + ".")
        h = d.get("hindsight", {})
        if h:
            parts = [f"{label} {h[k]['error_vs_naive']:.2f}" for label, k in
                     (("the running jobs' ends known", "running_ends_known"),
                      ("the withdrawals known", "withdrawals_known"), ("both", "both_known")) if k in h]
            notes.append(f"- {case}: the release model's p50 error against the naive estimate's with (hindsight, "
                         "reads the future) " + ", ".join(parts)
                         + f"; the p50 served (blended) {d['eta']['error_vs_naive']:.2f}.")
    out = [table(["window", "jobs grouped by", "jobs", "median wait, min", "p50 median abs error, min",
                  "p50 median signed error, min (+: started later)", "naive median abs error, min"], rows)
           if rows else "- not measured yet.", "", *notes]
    if used:
        out += ["", " ".join(source([f], load(f)) for f in used)]
    return "\n".join(out).strip("\n") + "\n"


ETA_SLURM_CASES = (("runs shorter than their limits", "eta_slurm.json"),
                   ("runs near their limits", "eta_slurm_near_limit.json"))


@block("eta-slurm")
def eta_slurm() -> str:
    """The daemon's estimate beside `squeue --start` on a real slurmctld (bench/eta_slurm_bench.py), both scored
    against the actual starts, and which was closer, per case (how long the jobs run against their limits)."""

    def m(x):
        return "-" if x is None else f"{x:.2f}"

    rows, notes, used = [], [], []
    for case, d in measured(ETA_SLURM_CASES, notes, used):
        s = d["scores"]
        if not s.get("jobs_scored"):
            notes.append(f"- {case}: no job waited long enough for both estimates.")
            continue
        cov = s.get("daemon_p90_coverage")
        hist = (f"{s['with_history']}: {m(s['with_history_daemon_p50_median_abs_error_min'])} / "
                f"{m(s['with_history_slurm_median_abs_error_min'])}") if s.get("with_history") else "0"
        rows.append([f"{case} ({d.get('runs', '30-100 s on 2-3 min limits')}; {n(d['jobs_submitted'])} jobs, "
                     f"{d['wall_s'] / 60:.1f} min)", f"{s['jobs_scored']} of {s['jobs_waited_over_10s']}",
                     m(s["daemon_p50_median_abs_error_min"]), m(s["slurm_median_abs_error_min"]),
                     f"{m(s['daemon_p50_mean_abs_error_min'])} / {m(s['slurm_mean_abs_error_min'])}",
                     f"{s['daemon_closer']} / {s['slurm_closer']}", pct(s["slurm_late_share"]),
                     "-" if cov is None else pct(cov), hist])
        dm, sm = s["daemon_p50_median_abs_error_min"], s["slurm_median_abs_error_min"]
        closer = "the daemon's p50" if dm < sm else "Slurm's StartTime" if sm < dm else "neither (equal)"
        notes.append(f"- {case}: closer by the median absolute error: {closer} ({m(dm)} against {m(sm)} min).")
    out = [table(["case", "jobs scored (of those that waited > 10 s)", "daemon p50 median abs error, min",
                  "Slurm StartTime median abs error, min", "mean abs error, daemon / Slurm, min",
                  "jobs where closer, daemon / Slurm", "starts after Slurm's (it was too early)",
                  "starts by the daemon's p90", "with a run-length history: jobs, median abs error daemon / Slurm"],
                 rows) if rows else "", "", *notes]
    if used:
        d0 = load(used[0])
        out += ["", f"{d0['nodes']} nodes of {d0['gpus_per_node']} GPUs, a cycle every {d0['cycle_s']:g} s; a job "
                "is scored when it had both estimates at one cycle and then started.",
                "", " ".join(source([f], load(f)) for f in used)]
    return "\n".join(out).strip("\n") + "\n"


@block("eta-scale")
def eta_scale() -> str:
    """How long one estimate of every pending job takes on a big contended cluster (bench/eta_scale_bench.py)."""
    f = "eta_scale.json"
    if not exists(f):
        return "Not measured yet.\n"
    d = load(f)
    t = d["target"]
    return (f"{n(d['tenants'])} tenants, {n(d['gpus'])} GPUs on {n(d['nodes'])} nodes, {n(d['running_jobs'])} running "
            f"jobs, {n(d['pending_jobs'])} pending: one estimate of every pending job (p50 and p90) took "
            f"{d['estimate_p50_ms']:,.0f} ms (median of {d['repeats']}, at most {d['estimate_max_ms']:,.0f} ms); "
            f"{d['pending_with_p50']:,} of the pending jobs got a p50. Target {goal(t)}: "
            f"{verdict(d['met'])}.\n\n{source([f], d)}\n")
