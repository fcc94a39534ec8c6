"""The daemon's start-time estimate beside Slurm's own (`squeue --start`), scored against the actual starts on a real
slurmctld (issue 39, item 4).

A real Slurm test cluster (tests/support/services.py: munged, slurmctld with the backfill scheduler, one slurmd per
node, GPUs as GRES) gets a queue of real batch jobs, each with a time limit (``--time``) and a real run shorter than
it (``sleep``): users ask for more time than their jobs take, which is what Slurm's backfill scheduler plans on. Every
``--cycle-s`` seconds, as the daemon's cycle would, the Slurm actuator reads the jobs and nodes, the estimator
(daemon/service/eta.py, with no plan and no forecast: the queue alone) estimates every pending job, ``show_eta``
writes it into the job's AdminComment (beside Slurm's own ``slurm=``), and ``squeue --start``'s StartTime is read
beside it. The tracker learns the tenant's run lengths from the jobs that end, as it does live.

Scored per job that waited and started: the estimates made at the first cycle where both had one (the same instant),
against the actual start (squeue's StartTime once it runs): the absolute error of the daemon's p50 and of Slurm's
StartTime, and whether the start came by the daemon's p90.

    nice -n 10 python bench/eta_slurm_bench.py [--jobs 30] [--seed 1] [--out bench/out/eta_slurm.json]
    nice -n 10 python bench/eta_slurm_bench.py --near-limit --jobs 24 --out bench/out/eta_slurm_near_limit.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.actuators.slurm.actuator import ETA_TAG, SlurmActuator  # noqa: E402
from daemon.config import SlurmActuatorConfig, TenantConfig  # noqa: E402
from daemon.policy.state import ClusterState  # noqa: E402
from daemon.service.eta import EtaTracker  # noqa: E402
from tests.support.services import slurm_cluster  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import provenance  # noqa: E402  (bench/, next to this script)

TENANT, ACCOUNT = "team-a", "acct-a"
OUT = Path(__file__).resolve().parent / "out" / "eta_slurm.json"


def job_specs(n: int, seed: int, near_limit: bool = False) -> list[dict]:
    """`n` jobs: GPUs 2, 4 or 8; a time limit of 2 or 3 minutes; a real run of 30-100 s (always inside the limit),
    or with `near_limit` of 85% of its limit to 5 s short of it (the case where the limits say it all); in three
    waves, at 0, 90 and 180 s (by the later ones some jobs have ended: the tracker has a history)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        gpus, limit = rng.choice((2, 4, 4, 8)), rng.choice((2, 3))
        run = rng.randint(int(0.85 * 60 * limit), 60 * limit - 5) if near_limit else rng.randint(30, 100)
        out.append({"gpus": gpus, "limit_min": limit, "run_s": run, "submit_s": 90 * min(3 * i // n, 2)})
    return out


def _admin_comments(env: dict) -> dict[str, str]:
    out = subprocess.run(["squeue", "--json"], env=env, capture_output=True, text=True, check=True).stdout
    return {str(j["job_id"]): j.get("admin_comment") or "" for j in json.loads(out)["jobs"]}


def run(slurm: dict, specs: list[dict], cycle_s: float = 5.0, timeout_s: float = 1200.0,
        log=print) -> dict:
    """Submit `specs` on the `slurm` cluster (slurm_cluster's dict), run the cycles until every job started (or
    `timeout_s`), and return the per-job record and the scores."""
    env = slurm["env"]
    cfg = SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin")
    act = SlurmActuator(cfg, [TenantConfig(name=TENANT, tier="normal", slurm_account=ACCOUNT)], dry_run=False)
    tracker = EtaTracker(CollectorRegistry(), time.time, resolution_s=cycle_s)   # its cycle, as the daemon's
    tenants = (TENANT,)
    t0 = time.time()
    todo = sorted(range(len(specs)), key=lambda i: specs[i]["submit_s"])
    ids: dict[str, int] = {}
    rec: dict[str, dict] = {}
    comments: dict[str, str] = {}
    while time.time() - t0 < timeout_s:
        now = time.time()
        while todo and specs[todo[0]]["submit_s"] <= now - t0:
            i = todo.pop(0)
            s = specs[i]
            r = subprocess.run(["sbatch", "--parsable", "--partition=normal", f"--account={ACCOUNT}",
                                f"--gres=gpu:{s['gpus']}", f"--time={s['limit_min']}", "-o", "/dev/null",
                                "--wrap", f"sleep {s['run_s']}"], env=env, capture_output=True, text=True, check=True)
            jid = r.stdout.strip().split(";")[0]
            ids[jid] = i
            rec[jid] = {**s, "job_id": jid, "submitted": time.time()}
        jobs, nodes = act.cluster_jobs(tenants), act.cluster_nodes(tenants)
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("normal",),
                          capacity=int(nodes.gpus.sum()), used=np.array([float(jobs.gpus[jobs.running].sum())]),
                          pending=np.array([float(jobs.gpus[~jobs.running].sum())]), jobs=jobs, nodes=nodes)
        view = tracker.update(st, None, None)
        rep = act.show_eta(view["jobs"], view["made_at"])
        if rep.errors:
            log(f"show_eta: {rep.errors}")
        live = {j.job_id: j for j in act.jobs()}   # squeue --start's StartTime for a pending job, the start once run
        for row in view["jobs"]:
            r = rec.get(str(row["job_id"]))
            j = live.get(str(row["job_id"]))
            if r is None or j is None or j.state != "PENDING":
                continue
            slurm_at = float(j.started) if np.isfinite(j.started) else None
            p50 = None if row["p50_s"] is None else view["made_at"] + row["p50_s"]
            p90 = None if row["p90_s"] is None else view["made_at"] + row["p90_s"]
            r.setdefault("first_daemon", {"at": view["made_at"], "p50": p50, "p90": p90, "basis": row["basis"]})
            if slurm_at is not None:
                r.setdefault("first_slurm", {"at": view["made_at"], "start": slurm_at})
            if "paired" not in r and slurm_at is not None and p50 is not None:
                r["paired"] = {"at": view["made_at"], "p50": p50, "p90": p90, "slurm": slurm_at,
                               "basis": row["basis"]}
        for jid, j in live.items():
            if jid in rec and j.state != "PENDING" and "started" not in rec[jid] and np.isfinite(j.started):
                rec[jid]["started"] = float(j.started)
        got = _admin_comments(env)
        for jid in rec:
            if ETA_TAG in got.get(jid, ""):
                comments[jid] = got[jid]
        for jid in rec:
            if "started" not in rec[jid] and jid not in live:   # ended between two reads: squeue lists it no more
                rec[jid]["started"] = None
        if not todo and all("started" in r for r in rec.values()):
            break
        time.sleep(max(cycle_s - (time.time() - now), 0.5))
    for jid, r in rec.items():
        r["admin_comment"] = comments.get(jid, "")
    return {"jobs": [rec[j] for j in sorted(rec, key=int)], "scores": score(list(rec.values())),
            "wall_s": round(time.time() - t0, 1)}


def score(recs: list[dict]) -> dict:
    """Per job that waited (both had an estimate at one cycle) and started: the abs error of each estimate."""
    rows = [r for r in recs if "paired" in r and r.get("started") is not None]
    if not rows:
        return {"jobs_scored": 0}
    d = np.array([abs(r["paired"]["p50"] - r["started"]) for r in rows]) / 60
    s = np.array([abs(r["paired"]["slurm"] - r["started"]) for r in rows]) / 60
    cov = [r["started"] <= r["paired"]["p90"] + 1.0 for r in rows if r["paired"]["p90"] is not None]
    hist = [i for i, r in enumerate(rows) if "run-length history" in r["paired"]["basis"]]
    waited = sum(r.get("started") is not None and r["started"] - r["submitted"] > 10.0 for r in recs)
    out = {"jobs_scored": len(rows), "jobs_waited_over_10s": waited,
           "daemon_p50_median_abs_error_min": round(float(np.median(d)), 2),
           "slurm_median_abs_error_min": round(float(np.median(s)), 2),
           "daemon_p50_mean_abs_error_min": round(float(d.mean()), 2),
           "slurm_mean_abs_error_min": round(float(s.mean()), 2),
           "daemon_closer": int((d < s).sum()), "slurm_closer": int((s < d).sum()), "tied": int((d == s).sum()),
           "daemon_p90_coverage": round(float(np.mean(cov)), 3) if cov else None,
           "slurm_late_share": round(float(np.mean([r["paired"]["slurm"] < r["started"] - 1.0 for r in rows])), 3),
           "with_history": len(hist)}
    if hist:
        out["with_history_daemon_p50_median_abs_error_min"] = round(float(np.median(d[hist])), 2)
        out["with_history_slurm_median_abs_error_min"] = round(float(np.median(s[hist])), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=2, help="slurmd nodes of 8 GPUs each")
    ap.add_argument("--cycle-s", type=float, default=5.0)
    ap.add_argument("--near-limit", action="store_true",
                    help="runs of 85%% of their limit to 5 s short of it (default: 30-100 s on 2-3 min limits)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    out = provenance.started()
    specs = job_specs(a.jobs, a.seed, a.near_limit)
    with slurm_cluster(nodes=tuple(f"gn{i + 1}" for i in range(a.nodes))) as slurm:
        res = run(slurm, specs, cycle_s=a.cycle_s)
    out.update({"jobs_submitted": a.jobs, "seed": a.seed, "nodes": a.nodes, "gpus_per_node": 8,
                "runs": "85% of the limit to 5 s short" if a.near_limit else "30-100 s on 2-3 min limits",
                "cycle_s": a.cycle_s, **res})
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(provenance.finished(out), indent=1) + "\n")
    print(json.dumps(out["scores"], indent=1))


if __name__ == "__main__":
    main()
