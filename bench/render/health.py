"""Renderer for docs/health.md: the health replay bench."""

from __future__ import annotations

from bench.render.common import block, load, n, pct, source, table


@block("health-replay")
def health_replay() -> str:
    """bench/health_bench.py: the daemon's plan() and health step (assess: detect, decide) on the simulator, per
    tier, with the health step off, reporting only, and requeueing by the configured actions."""
    d = load("health.json")
    h, bud = d["health"], d["budget"]
    names = {"off": "no health step", "report": "findings, report only", "requeue": "findings, requeue (defaults)"}
    rows = []
    for r in d["runs"]:
        ded = r["dedicated_bound"]
        for mode in ("off", "report", "requeue"):
            x = r["modes"][mode]
            t = x["tiers"]
            every = "every cycle" if r["every"] == 1 else f"every {r['every']} cycles"
            rows.append([r["strategy"], pct(r["idle_share"], 0), every, names[mode],
                         pct(x["alloc_util"]), pct(x["busy_util"]),
                         " / ".join(n(t[k]["unmet_gpu_min"]) for k in ("high", "normal", "low")),
                         " / ".join(n(t[k]["preempted_by_plan"]) for k in ("high", "normal", "low")),
                         " / ".join(n(t[k]["reclaimed"]) for k in ("high", "normal", "low")),
                         f"{n(sum(t[k]['lost_gpu_min_plan'] for k in t))} / "
                         f"{n(sum(t[k]['lost_gpu_min_reclaim'] for k in t))}",
                         f"{pct(ded['alloc_util'])} / {pct(ded['busy_util'])}"])
    acts = ", ".join(f"{k} {v}" for k, v in h["idle_actions"].items())
    return "\n".join([
        f"{d['workload']}, {d['days']:g} days, {n(d['capacity'])} GPUs shared, seed {d['seed']}. Idle or hung for "
        f"{h['idle_action_minutes']:g} min: {acts}; reclaims and the plan's preemptions share the budget "
        f"({pct(bud['share'], 0)} of the GPUs and {n(bud['jobs'])} jobs per {bud['window_s']:g} s). Per tier: "
        "high / normal / low.", "",
        table(["strategy", "idle share (model)", "health step", "run", "allocated", "busy",
               "unmet GPU-min", "preempted by the plan", "reclaimed by health", "GPU-min lost: plan / reclaim",
               "dedicated bound: allocated / busy"], rows), "",
        source(["health.json"], d)])
