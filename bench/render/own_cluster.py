"""Renderer for docs/own-cluster.md: the timing of a replay of one's own cluster's export."""

from __future__ import annotations

from bench.render.common import block, exists, goal, load, met, n, source, table, verdict

OWN_RUNS = {"quick": "`--quick-forecaster`", "default": "default forecaster choice",
            "quick-recommend": "`--quick-forecaster --recommend`", "default-recommend": "`--recommend`"}


def _mmss(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{int(s // 60)} min {int(round(s % 60)):02d} s" if s >= 60 else f"{s:.0f} s"


@block("own-replay-timing")
def own_replay_timing() -> str:
    """bench/own_replay_bench.py: the own-cluster replay of a day on the 1,213-node fleet, phase by phase."""
    d = load("own_replay.json")
    i = d["input"]
    rows = []
    # a sweep (--recommend) is its own bench run, in its own file where it was measured
    extra = [load("own_replay_recommend.json")] if exists("own_replay_recommend.json") else []
    for dd, which in [(d, "before"), (d, "after")] + [(e, "after") for e in extra]:
        for r, run in dd.get(which, {}).items():
            ph = run["phases"]
            replay = next((v["seconds"] for k, v in ph.items() if k.startswith("replay ")), None)
            report = ph.get("writing the report and the figure", {}).get("seconds")
            t = next((t for t in dd["targets"].values() if t["metric"] == f"{r}.wall_s"), None)
            g = "-" if t is None else (f"{goal(t)}: {verdict(met(t, dd['after']))}" if which == "after"
                                       else goal(t))
            code = (f"before ({dd.get('before_commit', '?')})" if which == "before"
                    else f"after ({dd.get('commit', '?')})")
            rows.append([OWN_RUNS.get(r, r), code, _mmss(run["wall_s"]), _mmss(run["cpu_s"]),
                         _mmss(run.get("forecaster_chosen_at_s")),
                         _mmss(replay), _mmss(report), f"{run['load_average_1min_at_start']:.1f}",
                         f"{len(run.get('forecaster_line') or ''):,}", g])
    out = [f"A day of 1-minute steps ({n(i['days_replayed'] * 1440)} steps, {i['history_days']:g} days of history "
           f"before it) of the Alibaba GPU 2023 pods (`gpuspec33`) as {i['tenants']} `tenant@spec` columns, on "
           f"the trace's fleet: {n(i['nodes'])} nodes of {i['types']} types, {n(i['gpus'])} GPUs (demand scaled "
           f"to the fleet, peak {n(i['peak_demand_gpus'])} GPUs). `simulate --data` as a user runs it (every "
           "strategy once), on this shared "
           f"{d['cpus']}-core box, which other sessions were using: the wall time is mostly the share of the two "
           "cores this run got (the load average), the CPU time (the process and its workers) is its own work. "
           "\"Forecaster chosen\": when its line came, from the start.",
           "", table(["run", "code", "wall", "CPU", "forecaster chosen", "replay", "report", "load at start",
                      "forecaster line (chars)", "goal"], rows)]
    if d.get("speedup"):
        out += ["", "Before / after, wall time: " + ", ".join(f"{OWN_RUNS.get(r, r)} {x:.2f}x"
                                                          for r, x in d["speedup"].items()) + "."]
    ip = d.get("in_process")
    if ip:
        b, a = ip["threads_before"], ip["threads_after"]
        out += ["", f"Reading the history and building the workload: {ip['data_loading_s']:.1f} s. An LSTM training "
                f"batch, back to back: {b['seconds_per_batch']:.2f} s with {b['threads']} torch threads (before: "
                f"min(4, CPUs)), {a['seconds_per_batch']:.2f} s with {a['threads']} (now: the CPUs the load "
                f"average leaves idle), at load averages {b['load_average_1min']:.1f} and "
                f"{a['load_average_1min']:.1f}."]
    for e in extra:
        out += ["", source(["own_replay_recommend.json"], e)]
    out += ["", source(["own_replay.json"], d)]
    return "\n".join(out)
