"""The whole cycle at scale against a real Prometheus: collect, forecast, plan, act (dry run).

The bench makes a history of N tenants x D days at 1 min, writes it as OpenMetrics in the shape the
shipped recording rules record (namespace:gpuas_gpus_allocated:count per tenant, cluster:gpuas_gpus:count,
no sample while a tenant holds no GPU) plus one DCGM series per node for the last 20 minutes, and runs past
"now" by the length of the run, backfills it with `promtool tsdb create-blocks-from openmetrics`, starts
`prometheus` on 127.0.0.1 on those blocks, and then runs the daemon's own runtime (build_runtime:
Prometheus source with recording_rules = true, incremental history in SQLite, the shipped forecaster,
the policy, the log actuator in dry run) in a child process, once per scenario:

  - incremental: cold start to the first plan, then `--cycles` cycles, the clock 30 s further each time
    (one new step every other cycle, as with the default 30 s cycle and 1 min steps);
  - the same with torch's default thread count (one per core) instead of forecaster.torch_threads = 1;
  - full re-read (history.incremental = false): every cycle reads the whole window, as before #13.

Between cycles (outside their time) the bench waits for the forecaster's background spread refresh, if one is in
flight, and records how long it waited and how long the refresh took (`settle_ms_max`, `refresh_ms_max`): the
daemon's cycles are 30 s apart, the bench's back to back. `--no-settle` runs them without the wait.

Per cycle: wall time of each phase (collect, forecast, plan, act, the rest = store and metrics), samples
read from Prometheus, and Prometheus's own time from its /metrics (engine evaluation and HTTP handler
time of /api/v1/query and /api/v1/query_range). Per scenario: cold start (process start to the first
plan, with its parts), RSS (peak and at the end).

    nice -n 10 python bench/cycle_bench.py --tenants 1000 --days 2 --out bench/out/cycle-1000.json
    nice -n 10 python bench/cycle_bench.py --tenants 10000 --days 0.5 --out bench/out/cycle-10000.json

`--forecaster lstm` runs the shipped LSTM whatever it was scored on (the default, auto, uses the best baseline on
a cluster the model in use was not scored on, as here); the LSTM-at-scale figures in docs/benchmarks.md are

    nice -n 10 python bench/cycle_bench.py --tenants 1000 --days 2 --forecaster lstm --out bench/out/cycle-1000.json
    nice -n 10 python bench/cycle_bench.py --tenants 10000 --days 1.1 --forecaster lstm --scenarios incremental \
        --out bench/out/cycle-10000.json

A mixed fleet (issue 24), `--types 4`: [fleet] types t0..t3, one model name per type; the recorded series are per
(tenant, model) (namespace_model:gpuas_gpus_allocated:count, model:gpuas_gpus:count), each tenant on one type or
split over two, nodes typed round-robin. The daemon then forecasts one series per (tenant, type) and the plan
holds per type; each node's type comes from nodes_by_type_query, read here as 8 x the node's one raw series.

    nice -n 10 python bench/cycle_bench.py --tenants 1000 --days 2 --types 4 --scenarios incremental \
        --out bench/out/cycle-1000x4types.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import provenance  # bench/, next to this script
import targets

EXPORTER = 'job="dcgm-exporter",'   # the exporter's scrape job, as the default exporter_selector selects

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STEP = 60
CYCLE_S = 30.0
PHASES = ("collect", "forecast", "plan", "act", "other")


# ---------------------------------------------------------------- data ------------------------------------------
def demand(n_tenants: int, steps: int, t0: int, seed: int = 7) -> np.ndarray:
    """Allocated GPUs per tenant and step: a size, a daily cycle, noise; a fifth of tenants idle at night."""
    rng = np.random.default_rng(seed)
    size = np.maximum(1, rng.lognormal(1.6, 0.8, n_tenants)).round()
    phase = rng.uniform(0, 2 * np.pi, n_tenants)
    t = (t0 + STEP * np.arange(steps)) / 86400.0 * 2 * np.pi
    daily = 0.5 + 0.5 * np.sin(t[:, None] + phase[None, :])
    noise = rng.normal(0, 0.15, (steps, n_tenants))
    d = np.maximum(0, np.round(size[None, :] * (0.3 + 0.9 * daily + noise)))
    night_idle = rng.uniform(size=n_tenants) < 0.2
    d[:, night_idle] *= (daily[:, night_idle] > 0.35)
    return d.astype(np.int64)


def model(t: int) -> str:
    """The model name DCGM would report for type t (aliased to "t<t>" in the mixed-fleet config)."""
    return f"NVIDIA Bench-GPU-{t}"


def typed_split(d: np.ndarray, types: int) -> list[tuple[int, np.ndarray]]:
    """A mixed fleet's demand per (tenant, type): tenant i on type i % types, every other tenant split 70/30 with
    type (i + 1) % types. Returns (type, steps x tenants array) per type."""
    n = d.shape[1]
    two = np.arange(n) % 2 == 1
    first = np.where(two, np.ceil(d * 0.7), d).astype(np.int64)
    second = d - first
    out = []
    for t in range(types):
        part = np.where((np.arange(n) % types == t)[None, :], first, 0)
        part = part + np.where(((np.arange(n) + 1) % types == t)[None, :] & two[None, :], second, 0)
        out.append((t, part))
    return out


def write_openmetrics(path: Path, d: np.ndarray, t0: int, now: int, gpus: int, types: int = 0) -> int:
    """Write the recorded series (all steps) and one raw DCGM series per node (last 20 min on, for the
    freshness query); returns the number of samples. `types`: the mixed fleet's per-model series instead."""
    steps, n = d.shape
    names = [f"t{i:05d}" for i in range(n)]
    lines = 0
    with open(path, "w", buffering=1 << 22) as f:
        if types:
            f.write("# TYPE namespace_model:gpuas_gpus_allocated:count gauge\n")
            parts = typed_split(d, types)
            for s in range(steps):
                ts = f" {t0 + STEP * s}\n"
                for t, part in parts:
                    row = part[s]
                    nz = np.nonzero(row)[0]
                    f.write("".join(f'namespace_model:gpuas_gpus_allocated:count{{modelName="{model(t)}",'
                                    f'namespace="{names[j]}"}} {row[j]}{ts}' for j in nz))
                    lines += len(nz)
            f.write("# TYPE model:gpuas_gpus:count gauge\n")
            for s in range(steps):
                ts = f" {t0 + STEP * s}\n"
                f.write("".join(f'model:gpuas_gpus:count{{modelName="{model(t)}"}} {gpus // types}{ts}'
                                for t in range(types)))
                lines += types
        else:
            prefix = [f'namespace:gpuas_gpus_allocated:count{{namespace="{nm}"}} ' for nm in names]
            f.write("# TYPE namespace:gpuas_gpus_allocated:count gauge\n")
            for s in range(steps):
                ts = f" {t0 + STEP * s}\n"
                row = d[s]
                nz = np.nonzero(row)[0]
                f.write("".join(prefix[j] + str(row[j]) + ts for j in nz))
                lines += len(nz)
        f.write("# TYPE cluster:gpuas_gpus:count gauge\n")
        for s in range(steps):
            f.write(f"cluster:gpuas_gpus:count {gpus} {t0 + STEP * s}\n")
        lines += steps
        f.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        typed = [f',modelName="{model(g % types)}"' if types else "" for g in range(gpus // 8)]
        raw = [f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="node{g:05d}",gpu="0"{typed[g]}}} 0'
               for g in range(gpus // 8)]
        for s in range(max(0, (now - 1200 - t0) // STEP), steps):
            ts = f" {t0 + STEP * s}\n"
            f.write(ts.join(raw) + ts)
            lines += len(raw)
        f.write("# EOF\n")
    return lines


# ---------------------------------------------------------------- Prometheus ------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_prometheus(tmp: Path, tsdb: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen(["nice", "-n", "10", "prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={tsdb}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d",
                             "--query.lookback-delta=30s"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError("prometheus not ready after 300 s")


def prom_times(url: str) -> dict[str, float]:
    """Prometheus's own cumulative time: engine evaluation (all slices) and the two query HTTP handlers."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out = {"engine_s": 0.0, "http_s": 0.0}
    for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for smp in fam.samples:
            if smp.name == "prometheus_engine_query_duration_seconds_sum":
                out["engine_s"] += smp.value
            elif (smp.name == "prometheus_http_request_duration_seconds_sum"
                  and smp.labels.get("handler") in ("/api/v1/query", "/api/v1/query_range")):
                out["http_s"] += smp.value
    return out


# ---------------------------------------------------------------- the daemon (child process) --------------------
def child(args) -> None:
    spawned = args.spawned
    t_imp = time.time()
    import logging

    logging.basicConfig(level=logging.WARNING)
    from daemon import policy
    from daemon.config import parse_config
    from daemon.service.wiring import build_runtime

    imported = time.time()
    n = args.tenants
    tenants = [{"name": f"t{i:05d}", "tier": "high" if i % 10 == 0 else ("low" if i % 5 == 1 else "normal")}
               for i in range(n)]
    fleet: dict = {}
    prom_extra: dict = {}
    if args.types:
        fleet = {"types": [f"t{t}" for t in range(args.types)],
                 "aliases": {model(t): f"t{t}" for t in range(args.types)}}
        # the bench writes one raw series per node (8 GPUs each): the node view counts it 8 times
        prom_extra = {"nodes_by_type_query":
                      "8 * count by (Hostname, modelName, namespace) (DCGM_FI_DEV_GPU_UTIL{$exporter})"}
    cfg = parse_config({
        "fleet": fleet,
        "cluster": {"gpus": args.gpus},
        "tenants": tenants,
        "cycle": {"history_steps": args.steps, "interval_s": CYCLE_S},
        "source": {"kind": "prometheus", "prometheus": {"url": args.url, "recording_rules": True, "timeout_s": 120,
                                                         "retries": 0, "max_response_mb": args.max_response_mb,
                                                         "chunk_steps": args.chunk, **prom_extra}},
        "forecaster": {"torch_threads": args.torch_threads or 1,
                       **({"kind": args.forecaster} if args.forecaster else {})},
        "history": {"incremental": not args.full, "backfill_chunk_steps": args.chunk},
        "actuators": {"enabled": ["log"], "dry_run": True},
        "state": {"path": str(Path(args.state) / "state.sqlite")},
    }, "bench")
    rt = build_runtime(cfg)
    built = time.time()
    clock = [float(args.now) + 1.0]
    src, runner = rt.source, rt.runner
    src.clock = lambda: clock[0]
    acc: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    src.collect = timed("collect", src.collect)
    runner.forecaster.predict = timed("forecast", runner.forecaster.predict)
    policy.plan = timed("plan", policy.plan)
    if args.profile:
        # the last call's arguments, to profile plan() on this state outside the bench (pickled at the end)
        inner_plan = policy.plan

        def capture(*a, **k):
            captured["plan"] = (a, k)
            return inner_plan(*a, **k)
        captured: dict = {}
        policy.plan = capture
    for act in runner.actuators:
        act.apply = timed("act", act.apply)

    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()

    from forecaster.calibration import spreads_in

    def settle() -> tuple[float, float]:
        """Wait for the forecaster's background spread refreshes in flight, outside every cycle's time; returns
        (seconds waited, longest refresh's own seconds). The daemon's cycles are 30 s apart and the bench runs them
        back to back: a refresh started in one cycle (every 10th) would otherwise run through the next few and be
        counted in their phases, which a daemon's 30 s interval does not do unless the refresh takes that long."""
        t = time.perf_counter()
        spreads = spreads_in(runner.forecaster)
        for sp in spreads:
            sp.wait(300)
        return time.perf_counter() - t, max((sp.seconds for sp in spreads), default=0.0)

    def cycle(profiled: bool = False) -> dict:
        acc.clear()
        s0 = src.samples
        p0 = prom_times(args.url)
        t = time.perf_counter()
        if profiled and prof is not None:
            prof.enable()
        res = runner.run_once()
        if profiled and prof is not None:
            prof.disable()
        total = time.perf_counter() - t
        p1 = prom_times(args.url)
        row = {k: acc.get(k, 0.0) for k in PHASES[:-1]}
        row["other"] = total - sum(row.values())
        waited, refresh = settle() if args.settle_child else (0.0, 0.0)
        row.update(settle_s=waited, refresh_s=refresh)
        row.update(total=total, samples=src.samples - s0, outcome=res.outcome,
                   prom_engine_s=p1["engine_s"] - p0["engine_s"], prom_http_s=p1["http_s"] - p0["http_s"],
                   error=res.error)
        return row

    first = cycle()
    first_plan = time.time() - first["settle_s"]   # the plan was made before the wait
    rows = []
    for _ in range(args.cycles):
        clock[0] += CYCLE_S
        rows.append(cycle(profiled=True))
    if prof is not None:
        import pickle

        prof.dump_stats(f"{args.profile}.prof")
        with open(f"{args.profile}.plan.pkl", "wb") as fh:
            pickle.dump(captured.get("plan"), fh)
        with open(f"{args.profile}.history.pkl", "wb") as fh:
            pickle.dump(runner.last_history, fh)
    rss_now = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
    out = {
        "cold_start_s": first_plan - spawned,
        "cold_parts_s": {"python_start": t_imp - spawned, "imports": imported - t_imp,
                         "build_runtime": built - imported, **{f"first_{k}": first[k] for k in PHASES}},
        "first_cycle": first,
        "cycles": rows,
        "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rss_end_bytes": rss_now,
        "history_shape": list(runner.last_state and (args.steps, len(runner.last_state.tenants)) or []),
        "forecast_series": len(runner.last_history.columns) if runner.last_history is not None else 0,
        "plan_types": sorted(runner.last_plan.capacity_by_type) if runner.last_plan is not None else [],
        "plan_capacity_by_type": dict(runner.last_plan.capacity_by_type) if runner.last_plan is not None else {},
        "plan_tenants_held_by_type": len(runner.last_plan.holds_by_type) if runner.last_plan is not None else 0,
        "forecaster": rt.forecaster_note,
    }
    rt.close()
    print("RESULT " + json.dumps(out))


def run_child(tmp: Path, url: str, a, name: str, *, torch_threads: int = 0, full: bool = False,
              cycles: int, chunk: int) -> dict:
    state = tmp / f"state-{name}"
    state.mkdir()
    argv = ["nice", "-n", "10", sys.executable, str(Path(__file__).resolve()), "--child", "--url", url,
            "--tenants", str(a.tenants), "--steps", str(a.steps), "--now", str(a.now), "--gpus", str(a.gpus),
            "--cycles", str(cycles), "--state", str(state), "--chunk", str(chunk),
            "--max-response-mb", str(a.max_response_mb), "--spawned", str(time.time()), "--types", str(a.types)]
    if torch_threads:
        argv += ["--torch-threads", str(torch_threads)]
    if full:
        argv += ["--full"]
    if a.profile:
        argv += ["--profile", f"{a.profile}-{name}"]
    if a.forecaster:
        argv += ["--forecaster", a.forecaster]
    if a.settle:
        argv += ["--settle"]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"failed": True, "rc": p.returncode, "stderr": p.stderr[-3000:]}


def summarize(r: dict, tenants: int) -> dict:
    if r.get("failed"):
        return r
    rows = [c for c in r["cycles"] if c["outcome"] in ("ok", "stale")]
    if not rows:
        return {"failed": True, "outcomes": [c["outcome"] for c in r["cycles"]],
                "errors": [c["error"] for c in r["cycles"]][:3]}
    s = {"cycles": len(rows), "outcomes": sorted({c["outcome"] for c in r["cycles"]})}
    for k in (*PHASES, "total"):
        v = np.array([c[k] for c in rows]) * 1000
        s[f"{k}_p50_ms"] = float(np.percentile(v, 50))
        s[f"{k}_p95_ms"] = float(np.percentile(v, 95))
    s["settle_ms_max"] = float(max(c.get("settle_s", 0.0) for c in rows) * 1000)
    s["refresh_ms_max"] = float(max(c.get("refresh_s", 0.0) for c in rows) * 1000)
    smp = np.array([c["samples"] for c in rows])
    s.update(samples_mean=float(smp.mean()), samples_max=int(smp.max()),
             samples_per_tenant_max=float(smp.max() / tenants),
             prom_engine_ms_mean=float(np.mean([c["prom_engine_s"] for c in rows]) * 1000),
             prom_http_ms_mean=float(np.mean([c["prom_http_s"] for c in rows]) * 1000),
             cold_start_s=r["cold_start_s"], cold_parts_s=r["cold_parts_s"],
             first_cycle_samples=r["first_cycle"]["samples"],
             first_cycle_prom_engine_s=r["first_cycle"]["prom_engine_s"],
             rss_peak_gib=r["rss_peak_bytes"] / 2**30, rss_end_gib=r["rss_end_bytes"] / 2**30,
             forecaster=r["forecaster"], forecast_series=r.get("forecast_series", 0),
             plan_capacity_by_type=r.get("plan_capacity_by_type", {}),
             plan_tenants_held_by_type=r.get("plan_tenants_held_by_type", 0))
    return s


def table(res: dict) -> str:
    cols = list(res["scenarios"])
    lines = [f"| {res['tenants']:,} tenants x {res['days']} d | " + " | ".join(cols) + " |",
             "| --- |" + " --- |" * len(cols)]

    def row(label, f):
        vals = []
        for c in cols:
            s = res["scenarios"][c]
            try:
                vals.append(f(s))
            except (KeyError, TypeError):
                vals.append("failed" if s.get("failed") else "-")
        lines.append(f"| {label} | " + " | ".join(vals) + " |")

    row("cycle p50 / p95 (ms)", lambda s: f"{s['total_p50_ms']:.0f} / {s['total_p95_ms']:.0f}")
    for k in PHASES:
        row(f"  {k} p50 / p95 (ms)", lambda s, k=k: f"{s[f'{k}_p50_ms']:.0f} / {s[f'{k}_p95_ms']:.0f}")
    row("samples per cycle, mean / max", lambda s: f"{s['samples_mean']:,.0f} / {s['samples_max']:,}")
    row("max samples per tenant per cycle", lambda s: f"{s['samples_per_tenant_max']:.2f}")
    row("Prometheus time per cycle: engine / HTTP (ms)",
        lambda s: f"{s['prom_engine_ms_mean']:.1f} / {s['prom_http_ms_mean']:.1f}")
    row("cold start to first plan (s)", lambda s: f"{s['cold_start_s']:.1f}")
    row("  of which first collect (backfill) (s)", lambda s: f"{s['cold_parts_s']['first_collect']:.1f}")
    row("  samples in the first cycle", lambda s: f"{s['first_cycle_samples']:,}")
    row("RSS peak / end (GiB)", lambda s: f"{s['rss_peak_gib']:.2f} / {s['rss_end_gib']:.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tenants", type=int, default=1000)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--full-cycles", type=int, default=3, help="cycles of the full re-read scenario")
    ap.add_argument("--chunk", type=int, default=720, help="history.backfill_chunk_steps")
    ap.add_argument("--max-response-mb", type=float, default=64.0)
    ap.add_argument("--scenarios", default="incremental,incremental-torch-threads-cores,full-reread")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--types", type=int, default=0, help="a mixed fleet of this many GPU types (0: one model)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the work dir (TSDB) here")
    ap.add_argument("--forecaster", default=None,
                    help="forecaster.kind for the daemon (default: the config's own, auto: the model in use if scored "
                         "on this cluster, else the best baseline at start-up); `lstm` measures the shipped LSTM")
    ap.add_argument("--no-settle", dest="settle", action="store_false",
                    help="do not wait between cycles for the forecaster's background spread refresh (the bench's "
                         "default waits, outside the cycles' time, and records how long: see settle())")
    ap.add_argument("--settle", dest="settle_child", action="store_true", help=argparse.SUPPRESS)  # child
    ap.add_argument("--profile", default=None,
                    help="PREFIX: cProfile the timed cycles of each scenario into PREFIX-<scenario>.prof, and pickle "
                         "the last plan() call's arguments and the last history there too (to profile offline)")
    # child process
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--url")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--now", type=int)
    ap.add_argument("--gpus", type=int)
    ap.add_argument("--state")
    ap.add_argument("--spawned", type=float)
    ap.add_argument("--torch-threads", type=int, default=0)
    ap.add_argument("--full", action="store_true")
    a = ap.parse_args()
    if a.child:
        return child(a)

    out = a.out or REPO / "bench" / "out" / f"cycle-{a.tenants}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="cycle-bench-", dir=a.keep))
    a.steps = int(round(a.days * 86400 / STEP))
    run_s = (a.cycles + 5) * CYCLE_S + 600
    a.now = int(time.time()) // STEP * STEP
    t0 = a.now - (a.steps - 1) * STEP
    total_steps = a.steps + int(run_s // STEP)
    res: dict = {"tenants": a.tenants, "days": a.days, "types": a.types, "history_steps": a.steps,
                 "cores": os.cpu_count(), "forecaster_kind": a.forecaster or "auto",
                 "settle_between_cycles": a.settle,
                 "load_avg_at_start": os.getloadavg(), "commit": provenance.commit(),
                 "targets": targets.CYCLE_FLEET if a.types else targets.CYCLE, "scenarios": {}}
    proc = None
    try:
        t = time.perf_counter()
        d = demand(a.tenants, total_steps, t0)
        per = 8 * max(1, a.types)   # whole nodes of 8, the same number per type
        a.gpus = int(np.ceil(d.sum(axis=1).max() * 1.1 / per) * per)
        om = tmp / "data.om"
        lines = write_openmetrics(om, d, t0, a.now, a.gpus, a.types)
        del d
        res["generate_s"] = time.perf_counter() - t
        res["backfill_samples"] = lines
        res["gpus"] = a.gpus
        print(f"generated {lines:,} samples ({om.stat().st_size / 2**20:.0f} MiB) in {res['generate_s']:.0f} s",
              flush=True)
        t = time.perf_counter()
        tsdb = tmp / "tsdb"
        subprocess.run(["nice", "-n", "10", "promtool", "tsdb", "create-blocks-from", "openmetrics",
                        str(om), str(tsdb)], check=True, capture_output=True)
        res["promtool_s"] = time.perf_counter() - t
        om.unlink()
        print(f"promtool backfill {res['promtool_s']:.0f} s", flush=True)
        t = time.perf_counter()
        proc, url = start_prometheus(tmp, tsdb)
        res["prometheus_start_s"] = time.perf_counter() - t
        for spec in a.scenarios.split(","):
            # NAME or NAME@CHUNK (backfill/request chunk in steps for this scenario only)
            name, _, chunk = spec.partition("@")
            full = name.startswith("full-reread")
            threads = os.cpu_count() if name.endswith("threads-cores") else 1
            cycles = a.full_cycles if full else a.cycles
            if chunk:
                cycles = min(cycles, 2)
            t = time.perf_counter()
            r = run_child(tmp, url, a, spec.replace("@", "-chunk-"), torch_threads=threads, full=full, cycles=cycles,
                          chunk=int(chunk or a.chunk))
            name = spec
            res["scenarios"][name] = summarize(r, a.tenants)
            res["scenarios"][name]["wall_s"] = time.perf_counter() - t
            if r.get("failed"):
                res["scenarios"][name]["detail"] = r
            print(f"{name}: done in {time.perf_counter() - t:.0f} s", flush=True)
            out.write_text(json.dumps(res, indent=2))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        if a.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    res["load_avg_at_end"] = os.getloadavg()
    res["table"] = table(res)
    out.write_text(json.dumps(res, indent=2))
    print(res["table"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
