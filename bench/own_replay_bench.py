"""How long the own-cluster replay (`simulate --data`) takes on a real 1,213-node fleet, phase by phase.

The input is built from the real public Alibaba GPU 2023 trace (../shared/data/alibaba-gpu-2023): the gpuspec33 pod
list as a `--data` file of 1-minute `tenant@spec` columns (a tenant is a QoS class and the GPU models its pods
accept, as daemon/sim/fleet_replay.alibaba_fleet builds it, demand scaled to the fleet so that it contends), and
the node list as `[fleet] pools` (1,213 nodes, 7 models, 6,212 GPUs), with each tenant's tier from its QoS class.
The last `--days` are replayed; `--history-days` before them are the forecaster's history.

Each run is the CLI in a subprocess, as a user runs it, its stderr read line by line: the phase lines the replay
prints (forecaster/progress.py: "NAME: done in MM:SS") give the phase timings; wall time, CPU time (the process
and its worker processes) and the load average before and after are recorded. With `--before REV` the same runs
are made with the code of REV (a temporary git worktree), interleaved with this tree's, so both see the same
machine (this box is shared: compare the ratios, and read the load averages).

    nice -n 10 python bench/own_replay_bench.py [--runs quick,default,quick-recommend] [--before REV]
        [--before-runs quick] [--days 1] [--history-days 3] [--out bench/out] [--name own_replay]

In this process, before the runs: the data loading (reading the file, building the workload), and LSTM training
batches with the torch threads training used before (min(4, CPUs)) and now (the CPUs the load leaves idle).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from bench import provenance  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUNS = {  # name -> the flags beside --data/--days
    "quick": ["--quick-forecaster"],
    "default": [],
    "quick-recommend": ["--quick-forecaster", "--recommend"],
    "default-recommend": ["--recommend"],
}
# issue 37, item 7: a day of 1-minute steps on the 1,213-node fleet
TARGETS = {
    "quick_5min": {"what": "`simulate --data` 1 day, `--quick-forecaster`", "scope": "after", "metric": "quick.wall_s",
                   "op": "<", "value": 300, "unit": "s"},
    "default_10min": {"what": "`simulate --data` 1 day, the default forecaster choice", "scope": "after",
                      "metric": "default.wall_s", "op": "<", "value": 600, "unit": "s"},
    "quick_recommend_5min": {"what": "`simulate --data --recommend` 1 day, `--quick-forecaster`", "scope": "after",
                             "metric": "quick-recommend.wall_s", "op": "<", "value": 300, "unit": "s"},
    "default_recommend_10min": {"what": "`simulate --data --recommend` 1 day", "scope": "after",
                                "metric": "default-recommend.wall_s", "op": "<", "value": 600, "unit": "s"},
}
DONE = re.compile(r"^(?P<phase>.+?): done(?:, (?P<n>\d+)/(?P<total>\d+) \S+)? in (?P<t>[\d:]+)$")


def seconds(mmss: str) -> int:
    out = 0
    for part in mmss.split(":"):
        out = out * 60 + int(part)
    return out


def build_input(data_dir: Path, days: float, history_days: float, into: Path) -> dict:
    """history.csv and cluster.toml for the replay, from the real pod and node lists."""
    from daemon.sim.fleet_replay import alibaba_fleet

    fw = alibaba_fleet(data_dir, days=days, history_days=history_days, whole_fleet=True)
    w = fw.w
    cols, tenants = {}, []
    for i, name in enumerate(w.demand.columns):
        qos, spec = str(name).split("/", 1)
        t = f"{qos.lower()}-{spec.replace('|', '-')}"
        cols[f"{t}@{'*' if spec == 'any' else spec}"] = w.demand.iloc[:, i].to_numpy()
        tenants.append((t, w.tiers[i]))
    idx = w.demand.index if w.demand.index.tz is not None else w.demand.index.tz_localize("UTC")
    frame = pd.DataFrame(cols, index=idx.rename("time"))
    frame.to_csv(into / "history.csv")
    nodes = pd.read_csv(data_dir / "alibaba-gpu-2023" / "openb_node_list_gpu_node.csv")
    groups = nodes.groupby([nodes["model"].str.lower(), "gpu"]).size()
    types = sorted(groups.index.get_level_values(0).unique())
    gpus = int((groups.index.get_level_values(1) * groups).sum())
    toml = ["[cluster]", f"gpus = {gpus}", "gpus_per_node = 8", "", "[fleet]",
            "types = [" + ", ".join(f'"{t}"' for t in types) + "]", "pools = ["]
    toml += [f'  {{type = "{m}", nodes = {int(k)}, gpus_per_node = {int(g)}}},' for (m, g), k in groups.items()]
    toml += ["]", ""]
    for t, tier in tenants:
        toml += ["[[tenants]]", f'name = "{t}"', f'tier = "{tier}"', ""]
    (into / "cluster.toml").write_text("\n".join(toml))
    total = frame.sum(axis=1).to_numpy()
    return {"source": "alibaba-gpu-2023 openb_pod_list_gpuspec33.csv + openb_node_list_gpu_node.csv",
            "nodes": int(groups.sum()), "gpus": gpus, "types": len(types), "tenants": len(cols),
            "steps": len(frame), "step_s": 60, "days_replayed": days, "history_days": history_days,
            "peak_demand_gpus": float(total.max()), "demand_scaled_to_the_fleet": True}


def loading_and_training(inp: Path, days: float, batches: int = 6) -> dict:
    """In this process: reading the history and building the workload (the replay's data loading), and LSTM
    training batches on the history before the window with the threads training used before this change
    (min(4, CPUs)) and with `train_threads()` (the CPUs the load average leaves idle), back to back."""
    import dataclasses

    import torch

    from daemon.config import load_config
    from daemon.forecasting.retrain import peak_windows_for, spec_for, train_threads
    from daemon.sim import own as own_mod
    from forecaster.train import train

    cfg = load_config(inp / "cluster.toml")
    t = time.monotonic()
    frame = own_mod.read_file(inp / "history.csv", cfg)
    w, _ = own_mod.own_workload(frame, cfg, days=days, step_s=cfg.cycle.resolution_s, where="bench", tier_flags={},
                                job_flags={}, default_job_gpus=1, name="own")
    load_s = time.monotonic() - t
    before = w.demand.iloc[: w.start]
    spec = spec_for(before, cfg.cycle.resolution_s, cfg)
    if cfg.retrain.peak_head:
        wins = peak_windows_for(cfg, cfg.cycle.resolution_s, spec.horizon)
        spec = dataclasses.replace(spec, peak_windows=tuple(sorted(set(wins.values()))))
    out = {"data_loading_s": round(load_s, 2), "training_batches": batches}
    train(before, spec, epochs=1, samples_per_epoch=256, seed=0, progress=False)  # imports and first-call costs
    for name, threads in (("threads_before", max(1, min(4, os.cpu_count() or 1))), ("threads_after", train_threads())):
        torch.set_num_threads(threads)
        t = time.monotonic()
        train(before, spec, epochs=1, samples_per_epoch=256 * batches, seed=0, progress=False,
              weight_by_scale=True, zero_init=True, peak_weight=cfg.retrain.peak_weight)
        out[name] = {"threads": threads, "seconds_per_batch": round((time.monotonic() - t) / batches, 3),
                     "load_average_1min": os.getloadavg()[0]}
    return out


def worktree(rev: str, into: Path) -> Path:
    path = into / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
    return path


def one_run(code: Path, inp: Path, flags: list[str], days: float, out: Path) -> dict:
    """The CLI in a subprocess on `code`'s tree: wall, CPU, load, and each phase line's time."""
    cmd = [sys.executable, "-c", "from daemon.entry import main; main()", "-c", str(inp / "cluster.toml"),
           "simulate", "--data", str(inp / "history.csv"), "--days", f"{days:g}", "--out", str(out), *flags]
    env = {**os.environ, "PYTHONPATH": str(code), "GPUAS_PROGRESS_EVERY_S": "60"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0, t0 = os.getloadavg()[0], time.monotonic()
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((round(time.monotonic() - t0, 1), line.rstrip("\n")))
        print(f"{lines[-1][0]:8.1f} {line.rstrip()[:200]}", file=sys.stderr, flush=True)
    rc = proc.wait()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    phases = {}
    for at, line in lines:
        m = DONE.match(line)
        if m:
            phases[m["phase"]] = {"seconds": seconds(m["t"]), "ended_at_s": at}
    # the code before this change named no phase: when the forecaster line came is when its choice ended
    chose = next((at for at, line in lines if line.startswith(("predictive uses ", "forecaster: "))), None)
    return {"flags": flags, "rc": rc, "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "load_average_1min_at_start": load0, "load_average_1min_at_end": os.getloadavg()[0],
            "forecaster_chosen_at_s": chose, "phases": phases,
            "forecaster_line": next((line for _, line in lines if line.startswith(("predictive uses ",
                                                                                     "forecaster: "))), None),
            "longest_line_chars": max((len(line) for _, line in lines), default=0),
            "lines_before_the_table": sum(1 for _, line in lines if not line.startswith("setting")),
            "tail": [line for _, line in lines[-3:]] if rc else []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="quick,default")
    ap.add_argument("--before", default=None, metavar="REV", help="also run the code of this commit, interleaved")
    ap.add_argument("--before-runs", default=None, metavar="RUNS",
                    help="the runs --before makes (default: all of --runs; the old default choice alone took 45 "
                         "minutes on the shared box)")
    ap.add_argument("--no-in-process", action="store_true", help="skip the data loading and training measures")
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--history-days", type=float, default=3.0)
    ap.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--name", default="own_replay")
    a = ap.parse_args()
    runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad:
        raise SystemExit(f"--runs: unknown {bad}; choose from {list(RUNS)}")
    doc = provenance.started()
    doc.update(targets=TARGETS, days=a.days)
    with tempfile.TemporaryDirectory(prefix="own-replay-bench-") as tmp:
        tmp = Path(tmp)
        inp = tmp / "input"
        inp.mkdir()
        t = time.monotonic()
        doc["input"] = build_input(a.data_dir, a.days, a.history_days, inp)
        doc["input"]["build_seconds"] = round(time.monotonic() - t, 1)
        if not a.no_in_process:
            doc["in_process"] = loading_and_training(inp, a.days)
            print(f"in process: {doc['in_process']}", file=sys.stderr, flush=True)
        codes = {"after": ROOT}
        if a.before:
            codes = {"before": worktree(a.before, tmp), "after": ROOT}
            doc["before_commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.before],
                                                  capture_output=True, text=True, check=True).stdout.strip()
        try:
            for r in runs:
                for which, code in codes.items():
                    if which == "before" and a.before_runs is not None and r not in a.before_runs.split(","):
                        continue
                    print(f"== {r} ({which})", file=sys.stderr, flush=True)
                    doc.setdefault(which, {})[r] = one_run(code, inp, RUNS[r], a.days, tmp / f"out-{which}-{r}")
        finally:
            if a.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(codes["before"])],
                               check=False)
    if "before" in doc:
        doc["speedup"] = {r: round(doc["before"][r]["wall_s"] / doc["after"][r]["wall_s"], 2)
                          for r in runs if r in doc["before"] and doc["after"][r]["wall_s"] > 0}
    provenance.finished(doc)
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{a.name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
