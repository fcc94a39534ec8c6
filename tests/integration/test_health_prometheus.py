"""Per-job health on a real Prometheus scraping small DCGM-shaped exporters with job labels (127.0.0.1).

node-a: Slurm job 101 idle (0% on its GPU), job 102 busy with its framebuffer rising (a leak). node-b: job 103
busy, a Kubernetes pod (team-k/train-1) busy, and the bad inputs: job 105 serves NaN activity, job 106 a
negative one, and GPU 3 is named by jobs 107 and 108 at once (a job mapping that names a GPU twice). node-c:
job 104 idle until its exporter stops; then it is "no data", never idle. Thresholds are in seconds here (the
grid is 1 s) so the run takes about 20 s; the detectors are the same.
"""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer

import httpx
import pytest

from daemon.config import Config
from daemon.health.detect import detect
from daemon.sources.job_telemetry import JobTelemetrySource
from tests.conftest import REPO
from tests.support.services import metrics_target, prometheus_server, wait_for

RULES = REPO / "deploy" / "prometheus" / "gpu-autoscaler-health-recording.yml"
FB = 80_000.0

pytestmark = pytest.mark.services


def exporter(node: str, gpus: list[dict]) -> ThreadingHTTPServer:
    """dcgm-exporter's shape: per GPU activity, FB used/free and last XID, labelled with the job using it.

    Each GPU is {"gpu", "labels", "act", "fb"}: act and fb are numbers or functions of seconds since start."""
    t0 = time.time()

    def val(v):
        return v(time.time() - t0) if callable(v) else v

    def text() -> str:
        lines = []
        for g in gpus:
            lb = ",".join(f'{k}="{v}"' for k, v in {"gpu": g["gpu"], "UUID": f"GPU-{node}-{g['gpu']}",
                                                       "Hostname": node, "modelName": "NVIDIA H100 80GB HBM3",
                                                       **g["labels"]}.items())
            used = val(g.get("fb", 1000.0))
            lines += [f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lb}}} {val(g['act'])}",
                      f"DCGM_FI_DEV_GPU_UTIL{{{lb}}} 0",
                      f"DCGM_FI_DEV_FB_USED{{{lb}}} {used}", f"DCGM_FI_DEV_FB_FREE{{{lb}}} {FB - used}",
                      f"DCGM_FI_DEV_XID_ERRORS{{{lb}}} 0"]
        return "\n".join(lines) + "\n"

    return metrics_target(text)


def slurm(job: str) -> dict:
    return {"hpc_job": job}


def health_config(url: str, activity_query: str | None = None) -> Config:
    health = {"enabled": True, "idle_warn_minutes": 0.1, "idle_action_minutes": 0.1, "hung_warn_minutes": 0.1,
              "hung_action_minutes": 0.1, "leak_window_minutes": 0.1, "leak_min_rise_share": 0.03,
              "leak_full_within_minutes": 10, "max_gap_s": 2}
    if activity_query:
        health["activity_query"] = activity_query
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                  cycle={"history_steps": 60, "resolution_s": 1, "stale_after_s": 3}, health=health)


@pytest.mark.parametrize("rules", [False, True], ids=["raw-queries", "recording-rules"])
def test_findings_come_out_exactly_and_a_stopped_exporter_is_no_data(tmp_path, rules):
    node_a = exporter("node-a", [{"gpu": "0", "labels": slurm("101"), "act": 0.0},
                                 {"gpu": "1", "labels": slurm("102"), "act": 0.9,
                                  "fb": lambda s: min(FB, 1000.0 + 1500.0 * s)},
                                 {"gpu": "2", "labels": {}, "act": 0.0}])            # a free GPU: no job
    node_b = exporter("node-b", [{"gpu": "0", "labels": slurm("103"), "act": 0.8},
                                 {"gpu": "1", "labels": slurm("105"), "act": "NaN"},
                                 {"gpu": "2", "labels": slurm("106"), "act": -0.5},
                                 {"gpu": "3", "labels": slurm("107"), "act": 0.0},
                                 {"gpu": "3", "labels": slurm("108"), "act": 0.0},
                                 {"gpu": "4", "labels": {"pod": "train-1", "namespace": "team-k",
                                                         "container": "main"}, "act": 0.7}])
    node_c = exporter("node-c", [{"gpu": "0", "labels": slurm("104"), "act": 0.01}])
    servers = [node_a, node_b, node_c]
    targets = ", ".join(f"'127.0.0.1:{s.server_address[1]}'" for s in servers)
    prom_cfg = (f"global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\n"
                f"scrape_configs:\n  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
    if rules:
        prom_cfg += f"rule_files: ['{RULES}']\n"
    try:
        with prometheus_server(tmp_path, prom_cfg) as (url, _):
            cfg = health_config(url, "gpuas:job_gpu_activity:ratio{$exporter}" if rules else None)
            src = JobTelemetrySource(cfg)

            def count(q: str) -> float:
                r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
                return float(r[0]["value"][1]) if r else 0.0

            wait_for(lambda: count("count(up == 1)") == 3, what="three exporters scraped", timeout=30)
            time.sleep(10)   # more than idle_warn_minutes (6 s) and the leak window on the grid

            statuses, found = detect(src.read(), cfg.health, cfg.cycle.stale_after_s)
            assert sorted((f.kind, f.job) for f in found) == [("idle", "101"), ("idle", "104"),
                                                              ("memory_leak", "102")]
            idle = next(f for f in found if f.job == "101")
            assert idle.gpus == ("node-a:0",) and idle.numbers["max_activity"] == 0.0 and idle.minutes >= 0.1
            leak = next(f for f in found if f.kind == "memory_leak")
            assert leak.gpus == ("node-a:1",) and leak.numbers["slope_share_per_min"] > 0
            st = {s.job: s for s in statuses}
            assert st["103"].state == "ok" and st["team-k/train-1"].state == "ok"
            assert st["team-k/train-1"].tenant == "team-k" and st["team-k/train-1"].scheduler == "kubernetes"
            assert st["105"].state == "rejected" and "NaN" in st["105"].why
            assert st["106"].state == "rejected" and "-0.5" in st["106"].why
            for j in ("107", "108"):
                assert st[j].state == "rejected" and "node-b:3 is also claimed by another job" in st[j].why
                assert ({"107", "108"} - {j}).pop() not in st[j].why      # the other job is not named to this one
            assert not {f.job for f in found} & {"105", "106", "107", "108"}
            # a takeover: a new leader's fresh source, with nothing handed over, finds the same from history
            _, again = detect(JobTelemetrySource(cfg).read(), cfg.health, cfg.cycle.stale_after_s)
            first = {(f.kind, f.job): f.minutes for f in found}
            assert {(f.kind, f.job) for f in again} == set(first)
            assert all(f.minutes >= first[(f.kind, f.job)] for f in again if f.kind == "idle")

            node_c.shutdown()
            node_c.server_close()
            wait_for(lambda: count('count(up{job="dcgm-exporter"} == 0)') == 1, what="node-c down", timeout=30)
            time.sleep(6)    # past stale_after_s (3 s), with a rule evaluation's lag
            statuses, found = detect(src.read(), cfg.health, cfg.cycle.stale_after_s)
            st = {s.job: s for s in statuses}
            assert sorted((f.kind, f.job) for f in found) == [("idle", "101"), ("memory_leak", "102")], st["104"]
            assert st["104"].state == "no_data"
    finally:
        for s in (node_a, node_b):
            s.shutdown()
            s.server_close()


@pytest.mark.security
def test_forged_dcgm_series_of_another_scrape_job_never_make_a_busy_job_idle(tmp_path):
    """A tenant's pod, scraped by an ordinary scrape job, exposes 20 series under the DCGM names with a victim pod's
    labels at 0% activity. The default queries select only the exporter's scrape job, so the victim stays busy;
    with a selector that lets them in, the series for one GPU disagree (0.9 vs 0.0) and the job is refused,
    never averaged down to "idle" (20 x 0.0 + 0.9 over 21 is 0.043, under the 5% threshold)."""
    victim = {"pod": "train-0", "namespace": "victim", "container": "main"}
    real = exporter("node-a", [{"gpu": "0", "labels": victim, "act": 0.9}])
    forged = exporter("node-a", [{"gpu": "0", "labels": {**victim, "x": f"k{i}"}, "act": 0.0} for i in range(20)])
    prom_cfg = "global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\nscrape_configs:\n"
    for job, srv in (("dcgm-exporter", real), ("tenant-pods", forged)):
        prom_cfg += (f"  - job_name: {job}\n    static_configs:\n"
                     f"      - targets: ['127.0.0.1:{srv.server_address[1]}']\n")
    try:
        with prometheus_server(tmp_path, prom_cfg) as (url, _):
            wait_for(lambda: len(httpx.get(f"{url}/api/v1/query", params={"query": "up == 1"}).json()["data"]
                                 ["result"]) == 2, what="both targets scraped", timeout=30)
            time.sleep(8)    # past idle_warn_minutes (6 s) on the 1 s grid
            cfg = health_config(url)
            statuses, found = detect(JobTelemetrySource(cfg).read(), cfg.health, cfg.cycle.stale_after_s)
            st = {s.job: s for s in statuses}
            assert found == [] and st["victim/train-0"].state == "ok"
            assert st["victim/train-0"].busy_share == pytest.approx(0.9)
            dumped = cfg.model_dump()
            dumped["source"]["prometheus"]["exporter_selector"] = 'job=~".+"'
            loose = Config(**dumped)
            statuses, found = detect(JobTelemetrySource(loose).read(), loose.health, loose.cycle.stale_after_s)
            st = {s.job: s for s in statuses}
            assert found == [] and st["victim/train-0"].state == "rejected"
            assert "21 activity series for GPU node-a:0 disagree" in st["victim/train-0"].why
    finally:
        for s in (real, forged):
            s.shutdown()
            s.server_close()
