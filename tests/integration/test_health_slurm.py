"""Job health end to end on a real slurmctld and a real Prometheus scraping a DCGM-shaped exporter whose GPUs carry
the real jobs' ids (`hpc_job`): a low-priority job idle past the threshold is warned (AdminComment), then
requeued; a high-tier job is only reported; a job without telemetry is left alone; a job label that matches no
job acts on nothing. Thresholds are seconds on a 1-s grid; the detectors and the policy are the daemon's."""

from __future__ import annotations

import subprocess
import time

import httpx
import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from daemon.config import Config
from daemon.policy.state import ClusterState
from daemon.service.health import HealthRunner
from daemon.sources.job_telemetry import JobTelemetrySource
from tests.integration.test_health_prometheus import exporter
from tests.integration.test_slurm_actuator import act, admin_comment, sbatch, state
from tests.support.services import prometheus_server, scrape_config, slurm_cluster, wait_for

pytestmark = pytest.mark.services
TENANTS = ("team-high", "team-low")


def test_low_idle_job_is_warned_then_requeued_high_is_reported_no_telemetry_is_left_alone(tmp_path):
    with slurm_cluster() as slurm:
        low, high, quiet = (sbatch(slurm, "low", "acct-low"), sbatch(slurm, "high", "acct-high"),
                            sbatch(slurm, "low", "acct-low"))
        ids = (low, high, quiet)
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in ids), what="jobs running", timeout=60)
        # each job holds 2 GPUs (sbatch's default here): its telemetry covers both, or it is never acted on
        node = exporter(slurm["node"], [{"gpu": "0", "labels": {"hpc_job": low}, "act": 0.0},
                                        {"gpu": "1", "labels": {"hpc_job": low}, "act": 0.0},
                                        {"gpu": "2", "labels": {"hpc_job": high}, "act": 0.0},
                                        {"gpu": "3", "labels": {"hpc_job": high}, "act": 0.0},
                                        {"gpu": "4", "labels": {"hpc_job": "999999"}, "act": 0.0}])
        try:
            with prometheus_server(tmp_path, scrape_config(node)) as (url, _):
                cfg = Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                             cycle={"history_steps": 60, "resolution_s": 1, "stale_after_s": 3},
                             tenants=[{"name": "team-high", "tier": "high", "slurm_account": "acct-high"},
                                      {"name": "team-low", "tier": "normal", "slurm_account": "acct-low"}],
                             health={"enabled": True, "idle_warn_minutes": 0.1, "idle_action_minutes": 0.2,
                                     "hung_warn_minutes": 0.1, "hung_action_minutes": 0.2, "max_gap_s": 2,
                                     "leak_window_minutes": 0.1})
                registry = CollectorRegistry()
                runner = HealthRunner(cfg, JobTelemetrySource(cfg), registry)
                slurm_act = act(slurm)
                wait_for(lambda: httpx.get(f"{url}/api/v1/query", params={"query": "up == 1"}).json()["data"]
                         ["result"], what="exporter scraped", timeout=30)
                seen: list[dict[str, str]] = []
                comment_at_warning = None
                deadline = time.time() + 90
                while time.time() < deadline:
                    jobs = slurm_act.cluster_jobs(TENANTS)
                    st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=TENANTS, tiers=("high", "normal"),
                                      capacity=8, used=np.zeros(2), pending=np.zeros(2), jobs=jobs)
                    res = runner.run(st, [slurm_act], acting=True, budget=(8.0, 10.0))
                    verdicts = {o["job"]: o["verdict"] for o in res.view["outcomes"]}
                    seen.append(verdicts)
                    if verdicts.get(low) == "warn" and comment_at_warning is None:
                        comment_at_warning = admin_comment(slurm, low)
                    if verdicts.get(low) == "requeue":
                        break
                    time.sleep(1.5)
                assert seen[-1].get(low) == "requeue", seen
                first = next(i for i, v in enumerate(seen) if low in v)
                assert seen[first][low] == "warn"                        # warned before it was requeued
                assert "will be requeued" in comment_at_warning and "idle" in comment_at_warning
                wait_for(lambda: state(slurm, low).startswith("PENDING"), what="low job requeued", timeout=20)
                assert admin_comment(slurm, low).startswith("gpu-autoscaler: health: idle for")
                assert seen[-1][high] == "report" and state(slurm, high).startswith("RUNNING")
                assert "reported only" in admin_comment(slurm, high)     # told, never requeued
                assert quiet not in set().union(*seen) and state(slurm, quiet).startswith("RUNNING")
                assert admin_comment(slurm, quiet) == ""                 # no telemetry: left alone
                assert seen[-1]["999999"] == "unknown_job"
                assert registry.get_sample_value("gpuas_health_reclaims_total", {"kind": "idle", "tier": "low"}) == 1
                assert registry.get_sample_value("gpuas_job_idle_gpus", {"tenant": "team-high", "tier": "high"}) == 2
                assert registry.get_sample_value("gpuas_idle_gpu_minutes_total",
                                                 {"tenant": "team-high", "tier": "high"}) > 0
        finally:
            node.shutdown()
            node.server_close()
            subprocess.run(["scancel", *ids], env=slurm["env"], capture_output=True)
