"""Renderers for docs/benchmarks.md: forecast accuracy per trace, forecast timing and retraining, the policy,
failover, control-cycle and replay-scale benches."""

from __future__ import annotations

from bench.render.common import (
    OPS,
    TRACES,
    _days,
    _gain,
    _step,
    block,
    goal,
    listing,
    load,
    load_avg,
    met,
    model_name,
    ms,
    n,
    pct,
    source,
    table,
    verdict,
)


@block("forecast-traces")
def forecast_traces() -> str:
    d = load("forecast_traces.json")
    tg = {k: v for k, v in d["targets"].items() if v.get("scope") == "traces"}
    rows, verdicts = [], {k: [] for k in tg}
    for name, t in d["traces"].items():
        rep = t["report"]
        scored = f" ({rep['tenants']} scored)" if rep["tenants"] != t["tenants"] else ""
        pick = "the new LSTM, recalibrated" if t["winner"] == "lstm_conformal" else (
            "the new LSTM" if t["winner"] == "lstm" else model_name(t["winner"], t.get("blend")))
        row = [TRACES.get(name, name), f"{_step(t['step_s'])}, {t['horizon_steps']}, {t['tenants']}{scored}",
               f"{t['lstm_wql']:.4f} ({model_name(t['lstm_variant'], t.get('blend'))})",
               f"{model_name(t['best_baseline'])} {t['best_baseline_wql']:.4f}", _gain(t["gain_vs_best_baseline"]),
               pick, f"{t['in_use_coverage_p90']:.3f} ({t['in_use_coverage_p90_strict']:.3f})",
               f"{t['in_use_peak_coverage_p90']:.3f}"]
        for k, target in tg.items():
            ok = met(target, t)
            verdicts[k].append((name, ok))
            row.append(verdict(ok))
        rows.append(row)
    header = ["trace", "step, horizon, tenants", "LSTM family wQL", "best fair baseline", "LSTM vs best",
              "`retrain`'s pick", "pick: p90 coverage (strictly under)", "pick: peak p90",
              *[tg[k]["what"] for k in tg]]
    out = [table(header, rows), ""]
    by = {k: ([x for x, ok in v if ok], [x for x, ok in v if not ok]) for k, v in verdicts.items()}
    title = {k: TRACES[k].split(",")[0].split(" ")[0] for k in d["traces"]}
    say = lambda names: listing([title[x] for x in names])  # noqa: E731
    for k, target in tg.items():
        yes, no = by[k]
        out.append(f"- *{target['what']}* ({goal(target)}): met on {say(yes)}" +
                   (f", not on {say(no)}." if no else "."))
    tr = d["traces"]
    peaks = sorted((t["in_use_peak_coverage_p90"], title[k]) for k, t in tr.items())
    out.append(f"- The realised peak over the horizon stays at or under the in-use model's p90 peak "
               f"{pct(peaks[0][0], 0)}-{pct(peaks[-1][0], 0)} of the time ("
               + ", ".join(f"{nm} {v:.3f}" for v, nm in peaks) + ").")
    won = [k for k, t in tr.items() if t["winner"] == "lstm_conformal"]
    if won:
        out.append("- Where the recalibrated LSTM won, recalibration moved its coverage: the bare LSTM covers "
                   + ", ".join(f"{tr[k]['report']['models']['lstm']['coverage_p90']:.3f} on {title[k]}" for k in won)
                   + "; the recalibrated one " + ", ".join(f"{tr[k]['in_use_coverage_p90']:.3f}" for k in won) + ".")
    if "azure" in tr:
        a, m = tr["azure"], tr["azure"]["report"]["models"]
        rep = a["report"]
        out.append(f"- Azure: the pick's p90 coverage comes from {n(rep['origins'] * rep['tenants'] * rep['horizon'])} "
                   f"scored steps ({rep['origins']} overlapping origins x {rep['tenants']} tenants x {rep['horizon']} "
                   f"steps, {rep['stride']} steps apart). Recalibrated exponential smoothing covers "
                   f"{m['exp_smoothing+conformal']['coverage_p90']:.3f} "
                   f"(wQL {m['exp_smoothing+conformal']['wql']:.4f}); "
                   f"the recalibrated LSTM alone {m['lstm_conformal']['coverage_p90']:.3f} "
                   f"(wQL {m['lstm_conformal']['wql']:.4f}). Naive alone scores {m['naive']['wql']:.4f}: "
                   f"against it the LSTM family would lead by {pct(1 - a['lstm_wql'] / m['naive']['wql'])}.")
    if "helios" in tr:
        h, m = tr["helios"], tr["helios"]["report"]["models"]
        out.append(f"- Helios: the in-use {model_name(h['winner'])} forecast's p90 is the last value, and on 5-minute "
                   f"GPU counts that value often does not change: {h['in_use_coverage_p90']:.3f} of the actual steps "
                   f"are at or under it but only {h['in_use_coverage_p90_strict']:.3f} strictly under. Recalibrated "
                   f"naive covers {m['naive+conformal']['coverage_p90']:.3f} (wQL {m['naive+conformal']['wql']:.4f}); "
                   f"the LSTM family's best form covers {h['lstm_coverage_p90']:.3f} at "
                   f"{_gain(h['gain_vs_best_baseline']).strip('*')} than the best baseline.")
    out += ["", source(["forecast_traces.json"], d)]
    return "\n".join(out)


TIMING_ROWS = (("lstm", "LSTM"), ("lstm_conformal", "LSTM, recalibrated (conformal)"),
               ("blend", "blend: recalibrated LSTM + naive"), ("blend_recalibrated", "the same blend, recalibrated"),
               ("seasonal_naive_daily", "seasonal naive (daily)"), ("naive+conformal", "naive, recalibrated"),
               ("exp_smoothing", "exponential smoothing"),
               ("exp_smoothing+conformal", "exponential smoothing, recalibrated"),
               ("holt_winters", "Holt-Winters"), ("holt_winters+conformal", "Holt-Winters, recalibrated"))


@block("forecast-timing")
def forecast_timing() -> str:
    d = load("forecast_traces.json")
    ts, tg = d["timing_shipped"], d["targets"]
    rows = []
    for key, label in TIMING_ROWS:
        r = ts["daemon"].get(key)
        if r is None:
            continue
        target = tg.get(f"{key}_p95")
        tenants = ts["holt_winters_tenants"] if key.startswith("holt_winters") else ts["tenants"]
        p95 = ms(r["ms_p95"]) + (f" (max {ms(r['ms_max'])})" if r["ms_max"] > 2 * r["ms_p95"] else "")
        rows.append([f"{label}, {n(tenants)} tenants", ms(r["ms_median"]), p95, ms(r["first_call_ms"]),
                     ms(r["background_refresh_ms_max"]) if r["background_refresh_ms_max"] else "–",
                     f"{goal(target)}: {verdict(met(target, d))}" if target else "–"])
    out = [table(["model in use", "median", "p95", "first call (computes the spread at once)",
                  "background recomputation (max)", "goal (p95)"], rows), ""]
    hw = ts["daemon"].get("holt_winters")
    es = ts["daemon"].get("exp_smoothing")
    if hw:
        out.append(f"Holt-Winters re-estimates its smoothing parameters every 24 forecasts, inside the forecast call: "
                   f"that call took {hw['ms_max'] / 1000:.1f} s for {ts['holt_winters_tenants']} tenants "
                   f"({ts['holt_winters_history_steps']:,} steps of history), against the 30 s default cycle interval.")
    if es:
        out.append(f"Exponential smoothing filters the whole history for every tenant at each call "
                   f"({ms(es['ms_median'])} median); choosing its weight runs with the spread, in the background "
                   f"({es['background_refresh_ms_max'] / 1000:.1f} s at most here).")
    old = load("forecast_timing.json")
    med = [r["ms_median"] for r in old["daemon"].values()]
    p95 = [r["ms_p95"] for r in old["daemon"].values()]
    out += ["", f"An earlier `--only-timing` run (`bench/out/forecast_timing.json`, {load_avg(old)} from other work "
            f"on the box) measured the first {len(med)} rows at {min(med):.0f}-{max(med):.0f} ms median and "
            f"{min(p95):.0f}-{max(p95):.0f} ms p95. Recomputing at every forecast took "
            f"{n(old['conformal_refresh_ms_median'])} ms for the conformal shifts and "
            f"{n(old['seasonal_naive_refresh_ms_median'])} ms for seasonal naive's error quantiles: what the "
            f"background thread now does every 10th forecast. With {old['threads']} torch threads on the loaded box "
            f"the bare LSTM took {n(old['lstm_ms_median'])} ms median ({n(old['lstm_ms_p95'])} ms p95), against "
            f"{n(old['daemon']['lstm']['ms_median'])} ms with one: the intra-op threads wait on each other, which is "
            f"why the daemon forecasts with one (`forecaster.torch_threads`).",
            "", source(["forecast_traces.json"], d)]
    return "\n".join(out)


@block("forecast-retrain")
def forecast_retrain() -> str:
    d = load("forecast_retrain_timing.json")
    target = d["targets"]["retrain_10min"]
    w = d["wql"]
    runner_up = sorted((v, k) for k, v in w.items() if k != d["winner"])[:4]
    rows = []
    for sel, r in (d.get("by_select") or {d.get("select_by", "wql"): d}).items():
        rule, _, every = sel.partition("/")
        sel = rule + (f"` with `retrain.replay_forecast_every = {every}" if every else "")
        if not r.get("finished", True):   # stopped at the bench's limit (--rule-timeout-s)
            over = OPS[target["op"]](r["timeout_s"], target["value"]) is False
            rows.append([f"`retrain --select-by {sel}` end to end, {n(r['tenants'])} tenants x {r['days']:g} days "
                         f"at 1 min", f"not finished after {r['timeout_s']:.0f} s (stopped there; load "
                         f"{r['load_average_1min']:.1f})", f"{goal(target)}: "
                         + ("not met" if over else "not measured")])
            continue
        rows.append([f"`retrain --select-by {sel}` end to end, {n(r['tenants'])} tenants x {r['days']:g} days at "
                     f"1 min (winner {model_name(r['winner'], r.get('blend'))}"
                     + (f"; {r['select_note']}" if r.get("select_note") else "") + ")",
                     f"{r['retrain_seconds']:.0f} s (training {r['train_seconds']:.0f} s, {r['epochs']} epochs; "
                     f"load {r.get('load_average_1min', d.get('load_average_1min', float('nan'))):.1f} at its end)",
                     f"{goal(target)}: {verdict(met(target, r))}"])
    rows.append([f"peak RSS (`--select-by {d.get('select_by', 'wql')}`)", f"{d['rss_peak_mib'] / 1024:.2f} GiB", "–"])
    return "\n".join([
        table(["measure", "measured", "goal"], rows),
        "",
        f"The winner there was {model_name(d['winner'], d.get('blend'))} (wQL {w[d['winner']]:.4f}); next: "
        + ", ".join(f"{model_name(k, d.get('blend'))} {v:.4f}" for v, k in runner_up) + ".",
        "", source(["forecast_retrain_timing.json"], d)])


# ---------------------------------------------------------------------------------------- policy, failover, cycle

@block("policy")
def policy() -> str:
    d = load("policy.json")
    p, target = d["plan"], d["targets"]["plan_p95"]
    out = [table(["measure", "median", "p95", "goal (p95)"],
                 [[f"`plan()` for {n(p['tenants'])} tenants, {n(p['gpus'])} GPUs, {n(p['jobs'])} jobs "
                   f"({n(p['preemptions'])} preemptions chosen)", f"{p['median_ms']:.2f} ms", f"{p['p95_ms']:.2f} ms",
                   f"{goal(target)}: {verdict(met(target, d))}"]]), ""]
    r = d["redis"]
    if "error" not in r:
        names = {"lua_token_bucket": "our Lua token bucket", "limits_moving_window": "`limits` moving window",
                 "limits_fixed_window": "`limits` fixed window"}
        out.append(table(["limiter on loopback Redis", "1 client, decisions/s", "4 clients, decisions/s"],
                         [[names.get(k, k), n(v["1_clients_per_s"]), n(v["4_clients_per_s"])] for k, v in r.items()]))
        ours, mw = r["lua_token_bucket"], r["limits_moving_window"]
        rel = [ours[f"{c}_clients_per_s"] / mw[f"{c}_clients_per_s"] - 1 for c in (1, 4)]
        out += ["", "In this run ours made " + " and ".join(
            f"{pct(abs(x), 0)} {'more' if x > 0 else 'fewer'} decisions per second ({c})"
            for x, c in zip(rel, ("1 client", "4 clients"))) + " than the `limits` moving window."]
    out += ["", source(["policy.json"], d)]
    return "\n".join(out)


@block("failover")
def failover() -> str:
    d = load("failover.json")
    va, dw, h, tg = d["via_alertmanager"], d["direct_webhook"], d["healthz_ms"], d["targets"]
    goal_ = tg["via_alertmanager_5s"]
    rows = [["Alertmanager -> webhook", va["jobs"], ms(va["receipt_to_requeued_s"] * 1000),
             f"{ms(va['alertmanager_post_to_requeued_s'] * 1000)} from the post to Alertmanager",
             "yes" if va["cycle_still_in_flight"] else "no", f"{goal(goal_)}: {verdict(met(goal_, d))}"],
            ["webhook (direct)", dw["jobs"], ms(dw["receipt_to_requeued_s"] * 1000),
             f"{ms(dw['http_round_trip_s'] * 1000)} HTTP round trip", "yes" if dw["cycle_still_in_flight"] else "no",
             f"{goal(tg['direct_webhook_5s'])}: {verdict(met(tg['direct_webhook_5s'], d))}"]]
    hz, st = tg["healthz_p99_100ms"], tg["no_stranded_jobs"]
    return "\n".join([
        f"The cycle in flight: {n(d['cycle_preemptions'])} preemptions on {n(d['gpus'])} GPUs "
        f"({n(d['nodes'])} nodes), {d['per_job_ms']:g} ms per preemption in the stand-in scheduler, "
        f"{d['cycle_actuation_s']:.1f} s of actuation.",
        "", table(["failover path", "jobs requeued", "receipt -> jobs requeued", "end to end",
                   "cycle still in flight when done", "goal"], rows), "",
        f"`/healthz` during that cycle: {n(h['n'])} requests, p50 {h['p50']:.1f} ms, p99 {h['p99']:.1f} ms, "
        f"max {h['max']:.1f} ms (goal: p99 {goal(hz)}, {verdict(met(hz, d))}). Jobs left on the dead nodes: "
        f"{d['stranded_jobs_after']} ({verdict(met(st, d))}).",
        "", source(["failover.json"], d)])


CYCLE_COLUMNS = (("cycle-1000.json", "incremental", "{t} x {d} d"),
                 ("cycle-1000.json", "incremental-torch-threads-cores", "{t} x {d} d, torch threads = cores"),
                 ("cycle-1000.json", "full-reread", "{t} x {d} d, full re-read"),
                 ("cycle-10000.json", "incremental", "{t} x {d} d"),
                 ("cycle-10000-12h.json", "incremental", "{t} x {d} d (baseline forecaster)"),
                 ("cycle-10000-12h.json", "full-reread", "{t} x {d} d, full re-read"))


@block("cycle")
def cycle() -> str:
    cols = []
    for f, sc, label in CYCLE_COLUMNS:
        d = load(f)
        if sc in d["scenarios"]:
            days = _days(d["days"])
            cols.append((d, d["scenarios"][sc], label.format(t=n(d["tenants"]), d=days).replace(" h d", " h")))

    def pair(a: float, b: float) -> str:
        return f"{n(a)} / {n(b)}"

    spec = [("cycle p50 / p95 (ms)", lambda s: pair(s["total_p50_ms"], s["total_p95_ms"])),
            ("- collect", lambda s: pair(s["collect_p50_ms"], s["collect_p95_ms"])),
            ("- forecast", lambda s: pair(s["forecast_p50_ms"], s["forecast_p95_ms"])),
            ("- plan", lambda s: pair(s["plan_p50_ms"], s["plan_p95_ms"])),
            ("- act (dry run)", lambda s: pair(s["act_p50_ms"], s["act_p95_ms"])),
            ("- rest (state store, metrics)", lambda s: pair(s["other_p50_ms"], s["other_p95_ms"])),
            ("samples read per cycle, mean / max", lambda s: pair(s["samples_mean"], s["samples_max"])),
            ("max samples per cycle / tenants", lambda s: f"{s['samples_per_tenant_max']:,.2f}"),
            ("Prometheus per cycle: engine / HTTP handler (ms)",
             lambda s: f"{s['prom_engine_ms_mean']:,.1f} / {s['prom_http_ms_mean']:,.1f}"),
            ("cold start to first plan (s)", lambda s: f"{s['cold_start_s']:.1f}"),
            ("- first collect (backfill)", lambda s: f"{s['cold_parts_s']['first_collect']:.1f}"),
            ("- first forecast", lambda s: f"{s['cold_parts_s']['first_forecast']:.1f}"),
            ("- start, imports, build runtime",
             lambda s: f"{sum(s['cold_parts_s'][k] for k in ('python_start', 'imports', 'build_runtime')):.1f}"),
            ("samples in the first cycle", lambda s: n(s["first_cycle_samples"])),
            ("daemon RSS peak / end (GiB)", lambda s: f"{s['rss_peak_gib']:.2f} / {s['rss_end_gib']:.2f}")]
    rows = [[label, *(f(s) for _, s, _ in cols)] for label, f in spec]
    d0 = load("cycle-1000.json")
    tg = d0["targets"]
    for k, target in tg.items():
        rows.append([f"goal: {target['what']} {goal(target)}",
                     *(verdict(met(d["targets"][k], s)) for d, s, _ in cols)])
    loads = [x for f in ("cycle-1000.json", "cycle-10000.json", "cycle-10000-12h.json")
             for key in ("load_avg_at_start", "load_avg_at_end") for x in load(f)[key]]
    out = [table(["tenants x history (days)", *(c[2] for c in cols)], rows), ""]
    base, inc = d0["scenarios"]["incremental"], d0["scenarios"]
    thr, full = inc.get("incremental-torch-threads-cores"), inc.get("full-reread")
    if full:
        out.append(f"- Re-reading the whole window every cycle, as the daemon did before the incremental history, "
                   f"reads {n(full['samples_max'])} samples and takes {full['total_p50_ms'] / 1000:.1f} s per cycle "
                   f"(p50), with Prometheus spending {full['prom_http_ms_mean'] / 1000:.1f} s per cycle in its HTTP "
                   f"handlers.")
    if thr:
        out.append(f"- With torch's own default (one thread per core) the forecast took {n(thr['forecast_p50_ms'])} ms "
                   f"p50 / {n(thr['forecast_p95_ms'])} ms p95 instead of {n(base['forecast_p50_ms'])} / "
                   f"{n(base['forecast_p95_ms'])} ms: on a machine whose cores are busy the threads of one small "
                   f"batch wait on each other.")
    big = load("cycle-10000.json")["scenarios"].get("incremental")
    if big:
        t0, t1 = d0["tenants"], load("cycle-10000.json")["tenants"]
        out.append(f"- From {n(t0)} to {n(t1)} tenants: collect x{big['collect_p50_ms'] / base['collect_p50_ms']:.0f} "
                   f"(p50), samples per cycle x{big['samples_max'] / base['samples_max']:.0f}, Prometheus's own time "
                   f"x{big['prom_engine_ms_mean'] / base['prom_engine_ms_mean']:.0f}, forecast "
                   f"x{big['forecast_p50_ms'] / base['forecast_p50_ms']:.0f}, plan {base['plan_p50_ms']:.0f} -> "
                   f"{big['plan_p50_ms']:.0f} ms, the rest {base['other_p50_ms']:.0f} -> {big['other_p50_ms']:.0f} ms; "
                   f"cold start {big['cold_start_s']:.0f} s, of which {big['cold_parts_s']['first_collect']:.0f} s "
                   f"reading {n(big['first_cycle_samples'])} samples.")
        phases = {k: big[f"{k}_p50_ms"] for k in ("collect", "forecast", "plan", "act", "other")}
        worst = max(phases, key=phases.get)
        out.append(f"- At {n(t1)} tenants the largest phase is {worst} ({n(phases[worst])} ms p50), the first to "
                   f"break the cycle goal on its own; the 12-hour columns forecast with the seasonal-naive fallback "
                   f"(the shipped LSTM needs more history).")
    def made(f: str) -> str:
        d = load(f)
        kind = d.get("forecaster_kind")
        return (f"`{f}` (commit {d.get('commit') or 'not recorded'}"
                + (f", `--forecaster {kind}`" if kind and kind != "auto" else "") + ")")

    out += ["", f"*From {made('cycle-1000.json')}, {made('cycle-10000.json')} and {made('cycle-10000-12h.json')} in "
                f"bench/out; 1-minute load average {min(loads):.1f} to {max(loads):.1f} during the runs.*"]
    return "\n".join(out)


@block("replay-scale")
def replay_scale() -> str:
    d = load("replay_scale.json")
    rows = [[r["strategy"], f"{r['wall_s']:.0f} s", f"{r['cpu_s']:.0f} s", f"{r['decision_ms_mean']:.1f}",
             pct(r["utilization"]), n(r["tiers"]["high"]["unmet_gpu_min"]), n(r["tiers"]["normal"]["unmet_gpu_min"]),
             n(r["tiers"]["low"]["unmet_gpu_min"]), n(r["preemptions"]), n(r["work_lost_gpu_min"])]
            for r in d["runs"]]
    target = d["targets"]["scale_15min"]
    return "\n".join([
        f"{n(d['tenants'])} tenants, {n(d['capacity'])} GPUs on {n(d['capacity'] // d['gpus_per_node'])} "
        f"{d['gpus_per_node']}-GPU nodes, {n(d['steps'])} steps ({d['steps'] / 1440:g} days), forecaster "
        f"{d['forecaster']} every {d['forecast_every']} steps, {d['workers']} worker processes on {d['cpus']} cores, "
        f"{load_avg(d)}:", "",
        table(["strategy", "wall", "CPU", "decision ms/cycle", "util", "high unmet GPU-min", "normal unmet",
               "low unmet", "preemptions", "work lost GPU-min"], rows), "",
        f"The whole case took {d['wall_seconds']:.0f} s ({d['wall_seconds'] / 60:.1f} min) of wall time, generating "
        f"the workload included, and {d['replay_cpu_seconds']:.0f} s of CPU: goal {goal(target)} "
        f"({target['what']}), {verdict(met(target, d))}. A row's wall time is its own run's, so the rows do not add "
        f"up; {d['cpus']} idle cores could not do it in less than {d['replay_cpu_seconds'] / d['cpus']:.0f} s (the CPU "
        f"time over the cores), which was not measured.",
        "", source(["replay_scale.json"], d)])
