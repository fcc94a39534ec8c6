"""Node failover while a cycle with 500 preemptions is in flight, through a real Alertmanager.

A daemon drives the embedded simulated cluster (16,384 GPUs, 2,048 nodes, 200 tenants). After a quiet
first cycle the forecaster predicts a high-tier peak as large as the cluster, so the next cycle preempts
500 low-priority jobs (the per-cycle job budget; aging is off for the run so every low-priority job is a
candidate). Next to the simulator, a stand-in
scheduler actuator spends ``--per-job-ms`` on each preemption (Slurm would run scontrol per job),
which keeps that cycle in flight for several seconds. While it is in flight:

1. a node dies in the simulator and its ``GPUNodeDown`` alert is posted to a real Alertmanager
   (``prometheus-alertmanager``, the shipped route with ``group_wait: 0s``), which calls the
   daemon's webhook; a second node's alert is posted straight to the webhook;
2. a client polls ``/healthz`` every 20 ms from the start of the cycle to its end.

Reported: the cycle's preemptions and duration, failover time from webhook receipt to jobs requeued
(the daemon's own figure) and from the Alertmanager post, whether each failover finished while the
cycle was still in flight, and /healthz latency (p50, p99, max).

    nice -n 10 python bench/failover_bench.py [--out bench/out/failover.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.actuators.base import ActionReport  # noqa: E402
from daemon.config import Config  # noqa: E402
from daemon.service.loop import Daemon  # noqa: E402
from daemon.service.wiring import build_runtime  # noqa: E402
from forecaster.types import Forecast  # noqa: E402
from tests.conftest import REPO, free_port  # noqa: E402
from tests.support.services import alertmanager_server, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import provenance  # noqa: E402  (bench/, next to this script)
import targets  # noqa: E402

TOKEN = "bench-token-0123456789"


class SpikeForecaster:
    """Predicts every high-tier tenant at the whole cluster: the policy must clear as much as it may."""

    name = "spike"

    def __init__(self, tiers: dict[str, str], capacity: int, quantiles: tuple[float, ...], step_s: int) -> None:
        self.tiers, self.capacity, self.quantiles, self.step_s = tiers, capacity, quantiles, step_s
        self.spike = False   # until armed: every tenant stays where it is (a quiet first cycle)

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        tenants = tuple(history.columns)
        last = np.nan_to_num(history.iloc[-1].to_numpy(dtype=float))
        peak = np.array([self.capacity if self.spike and self.tiers.get(t) == "high" else v
                         for t, v in zip(tenants, last)])
        vals = np.repeat(np.repeat(peak[:, None, None], horizon, axis=1), len(self.quantiles), axis=2)
        return Forecast(tenants, self.quantiles, vals, history.index[-1], self.step_s, self.name)


class SlowScheduler:
    """Stands in for a scheduler that takes per_job_s per preemption; holds no daemon lock while it works."""

    name = "slow-scheduler"
    dry_run = False

    def __init__(self, per_job_s: float) -> None:
        self.per_job_s = per_job_s
        self.started = threading.Event()
        self.finished = threading.Event()
        self.preemptions = 0
        self.window: tuple[float, float] | None = None
        self.armed = False          # only the spike cycle is timed

    def apply(self, plan) -> ActionReport:
        n = len(plan.preemptions)
        if self.armed:
            self.armed = False
            self.notes = list(plan.notes)
            self.preemptions = n
            t0 = time.perf_counter()
            self.started.set()
            for _ in range(n):
                time.sleep(self.per_job_s)
            self.window = (t0, time.perf_counter())
            self.finished.set()
        return ActionReport(self.name, False, [f"preempt {n} jobs"])

    def requeue(self, job_ids, reason) -> ActionReport:
        return ActionReport(self.name, False)

    def notify(self, notes) -> ActionReport:
        return ActionReport(self.name, False)


def node_with_jobs(d: Daemon, skip: set[int]) -> int:
    sim = d.runtime.sim
    with sim.lock:
        c = sim.cluster
        busy = c.j_node[: c.size][c.j_state[: c.size] == 2]
    return int(next(n for n in np.unique(busy) if n not in skip and n >= 0))


def alert_body(node: str) -> dict:
    return {"version": "4", "groupKey": "bench", "status": "firing", "receiver": "gpu-autoscaler",
            "alerts": [{"status": "firing", "labels": {"alertname": "GPUNodeDown", "node": node},
                        "startsAt": "2026-01-06T13:30:00Z"}]}


def run(per_job_ms: float, gpus: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="gpuas-failover-bench-"))
    port = free_port()
    cfg = Config(cluster={"gpus": gpus}, cycle={"interval_s": 3600},
                 source={"simulator": {"seed": 5, "tenants": 200, "warmup_steps": 1500, "low_priority_share": 0.8}},
                 policy={"preempt_budget_jobs": 500, "preempt_budget_share": 1.0, "max_wait_steps": 100_000},
                 state={"path": tmp / "state.sqlite"}, forecaster={"model_dir": tmp / "models"},
                 server={"port": port, "webhook_token": TOKEN})
    rt = build_runtime(cfg)
    spike = SpikeForecaster(dict(zip(rt.sim.tenants, rt.sim.work.tiers)), gpus, cfg.forecaster.quantiles,
                            cfg.cycle.resolution_s)
    rt.runner.forecaster = spike
    slow = SlowScheduler(per_job_ms / 1000)
    rt.actuators.append(slow)          # the runner holds the same list
    d = Daemon(rt)
    d.start()
    base = f"http://127.0.0.1:{port}"
    out: dict = {"gpus": gpus, "nodes": rt.sim.cluster.n_nodes, "per_job_ms": per_job_ms}
    try:
        wait_for(lambda: d.cycles_done >= 1, what="first cycle", timeout=120)
        sim = rt.sim
        token_file = tmp / "token"
        token_file.write_text(TOKEN)
        am_cfg = (REPO / "deploy/alertmanager/gpu-autoscaler.yml").read_text()
        am_cfg = am_cfg.replace("http://127.0.0.1:9105/alerts", f"{base}/alerts")
        am_cfg = am_cfg.replace("/etc/gpu-autoscaler/webhook-token", str(token_file))
        with alertmanager_server(tmp, am_cfg) as (am, _):
            # Alertmanager holds notifications until its cluster gossip settles; wait for that first
            wait_for(lambda: "gossip settled" in (tmp / "alertmanager.log").read_text().lower(),
                     what="Alertmanager gossip settled", timeout=60)
            lat: list[float] = []
            stop = threading.Event()

            def poll():
                with httpx.Client(timeout=5) as c:
                    while not stop.is_set():
                        t = time.perf_counter()
                        r = c.get(f"{base}/healthz")
                        lat.append(time.perf_counter() - t)
                        assert r.status_code == 200, r.text
                        time.sleep(0.02)

            spike.spike = True
            slow.armed = True
            d.trigger_cycle()
            if not slow.started.wait(120):
                raise RuntimeError("the spike cycle did not start preempting")
            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            # 1. through Alertmanager
            n1 = node_with_jobs(d, set())
            with sim.lock:
                sim.cluster.fail_node(n1, requeue=False)
            t0 = time.perf_counter()
            r = httpx.post(f"{am}/api/v2/alerts", json=[{"labels": {"alertname": "GPUNodeDown",
                                                                    "node": sim.node_name(n1)}}])
            r.raise_for_status()
            wait_for(lambda: rt.store.events("node_down"), what="failover via Alertmanager", timeout=30, interval=0.01)
            am_total = time.perf_counter() - t0
            ev1 = rt.store.events("node_down")[-1]
            in_flight_1 = not slow.finished.is_set()
            # 2. straight to the webhook
            n2 = node_with_jobs(d, {n1})
            with sim.lock:
                sim.cluster.fail_node(n2, requeue=False)
            t0 = time.perf_counter()
            r = httpx.post(f"{base}/alerts", json=alert_body(sim.node_name(n2)),
                           headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            direct_total = time.perf_counter() - t0
            in_flight_2 = not slow.finished.is_set()
            act = r.json()["actions"][0]
            slow.finished.wait(300)
            time.sleep(0.1)
            stop.set()
            poller.join(10)
        with sim.lock:
            stranded = int(len(sim.cluster.stranded()))
        ms = np.array(lat) * 1000
        c0, c1 = slow.window
        out.update({
            "cycle_preemptions": slow.preemptions, "cycle_notes": slow.notes, "cycle_actuation_s": round(c1 - c0, 2),
            "via_alertmanager": {"node": ev1["node"], "jobs": len(ev1["jobs"]),
                                 "receipt_to_requeued_s": round(ev1["seconds"], 4),
                                 "alertmanager_post_to_requeued_s": round(am_total, 3),
                                 "cycle_still_in_flight": in_flight_1},
            "direct_webhook": {"node": act["node"], "jobs": len(act["requeued"]),
                               "receipt_to_requeued_s": act["seconds"], "http_round_trip_s": round(direct_total, 4),
                               "cycle_still_in_flight": in_flight_2},
            "stranded_jobs_after": stranded,
            "healthz_ms": {"n": int(ms.size), "p50": round(float(np.percentile(ms, 50)), 1),
                           "p99": round(float(np.percentile(ms, 99)), 1), "max": round(float(ms.max()), 1)},
        })
    finally:
        d.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/out/failover.json"))
    ap.add_argument("--per-job-ms", type=float, default=20.0)
    ap.add_argument("--gpus", type=int, default=16384)
    a = ap.parse_args()
    res = provenance.started()
    res.update(run(a.per_job_ms, a.gpus))
    res["targets"] = targets.FAILOVER
    provenance.finished(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2) + "\n")
    va, dw, h = res["via_alertmanager"], res["direct_webhook"], res["healthz_ms"]
    print(f"cycle in flight: {res['cycle_preemptions']} preemptions, {res['cycle_actuation_s']} s of actuation "
          f"({res['gpus']} GPUs, {res['nodes']} nodes)")
    print("| failover path | jobs | receipt -> requeued | end to end | cycle still in flight |")
    print("|---|---|---|---|---|")
    print(f"| Alertmanager -> webhook | {va['jobs']} | {va['receipt_to_requeued_s'] * 1000:.0f} ms | "
          f"{va['alertmanager_post_to_requeued_s'] * 1000:.0f} ms | {va['cycle_still_in_flight']} |")
    print(f"| webhook (direct) | {dw['jobs']} | {dw['receipt_to_requeued_s'] * 1000:.0f} ms | "
          f"{dw['http_round_trip_s'] * 1000:.0f} ms | {dw['cycle_still_in_flight']} |")
    print(f"/healthz during the cycle: n={h['n']} p50={h['p50']} ms p99={h['p99']} ms max={h['max']} ms; "
          f"stranded jobs after: {res['stranded_jobs_after']}")
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
