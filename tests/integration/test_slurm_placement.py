"""The daemon on a real Slurm cluster preempts where it makes room: end to end, placement-aware.

Two nodes of 4 GPUs (real slurmctld + slurmd), each running two 2-GPU low-priority jobs, the older pair started
first; a high-tier job asks for a whole node (4 GPUs) and waits. GPU usage comes from a real Prometheus scraping
a DCGM-style exporter. One daemon cycle (build_runtime: Prometheus source, Slurm actuator) must preempt the two
jobs of ONE node, hold that node for the high tier, and the high job must then start there. Counting GPUs only
(the cheapest jobs anywhere: the two young ones, one per node) frees 2 GPUs on each node and the 4-GPU job
cannot start.
"""

import logging
import time

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import Config, SlurmActuatorConfig
from daemon.service.wiring import build_runtime
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
from tests.integration.test_prometheus_scrape import exporter
from tests.support.services import prometheus_server, slurm_bin_without_controller, slurm_cluster, slurm_run, wait_for

pytestmark = pytest.mark.services

NODES = ("gn1", "gn2")
TENANTS = [{"name": "team-high", "tier": "high", "slurm_account": "acct-high"},
           {"name": "team-low", "tier": "low", "slurm_account": "acct-low"}]


def states(env):
    """job id -> (state, nodes)."""
    out = slurm_run(env, "squeue", "-h", "-o", "%i|%T|%N")
    return {f[0]: (f[1], f[2]) for f in (ln.split("|") for ln in out.splitlines())}


def sbatch(env, *opts):
    return slurm_run(env, "sbatch", "--parsable", "--requeue", "-o", "/dev/null", *opts, "--wrap", "sleep 600").strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Slurm (2 x 4 GPUs, full of low jobs, a 4-GPU high job waiting) and Prometheus seeing all 8 GPUs busy."""
    tmp = tmp_path_factory.mktemp("placement")
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        env = s["env"]
        def low(node):
            return sbatch(env, "--partition=low", "--account=acct-low", "--gres=gpu:2", "-w", node)

        old = [low(n) for n in NODES]
        wait_for(lambda: all(states(env).get(j, ("",))[0] == "RUNNING" for j in old), what="old jobs", timeout=60)
        time.sleep(3)  # squeue's elapsed time has whole seconds: the second pair is clearly younger
        young = [low(n) for n in NODES]
        wait_for(lambda: all(states(env).get(j, ("",))[0] == "RUNNING" for j in young), what="young jobs", timeout=60)
        high = sbatch(env, "--partition=high", "--account=acct-high", "--gres=gpu:4")
        time.sleep(1)
        assert states(env)[high][0] == "PENDING"
        gpus = [exporter(n, [("team-low", 80)] * 4) for n in NODES]
        targets = ", ".join(f"'127.0.0.1:{g.server_address[1]}'" for g in gpus)
        prom_cfg = (f"global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                    f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
        try:
            with prometheus_server(tmp, prom_cfg) as (url, _):
                cfg = Config(
                    source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                    cycle={"history_steps": 60, "resolution_s": 1},
                    forecaster={"kind": "seasonal_naive"},
                    tenants=TENANTS,
                    policy={"headroom": 0.0, "preempt_budget_share": 1.0},
                    actuators={"enabled": ["slurm"], "dry_run": False,
                               "slurm": {"slurm_conf": str(s["conf"]), "bin_dir": "/usr/bin"}})
                src = PrometheusSource(cfg)
                wait_for(lambda: src.collect(60).state.capacity == 8, what="8 GPUs scraped", timeout=30)
                time.sleep(1.1)
                yield {"env": env, "cfg": cfg, "old": old, "young": young, "high": high, "conf": s["conf"]}
        finally:
            for g in gpus:
                g.shutdown()
                g.server_close()


def test_one_cycle_clears_one_whole_node_and_the_waiting_job_starts_there(cluster):
    env, cfg = cluster["env"], cluster["cfg"]
    before = states(env)
    rt = build_runtime(cfg, with_store=False)
    result = rt.runner.run_once()
    assert result.outcome == "ok", result.error
    state = result.collected.state
    assert state.nodes is not None and sorted(state.nodes.names) == list(NODES)
    assert state.nodes.free.tolist() == [0, 0]
    pre = result.plan.preemptions
    assert sum(p.gpus for p in pre) == 4, result.plan.notes
    cleared = {p.node for p in pre}
    assert len(cleared) == 1, f"preempted on {sorted(cleared)}: GPUs spread over nodes make no room for 4"
    (node,) = cleared
    assert {p.job_id for p in pre} == {j for j in cluster["old"] + cluster["young"] if before[j][1] == node}
    assert all(r.ok for r in result.reports), [r.errors for r in result.reports]
    # what Slurm does with it: the high job starts on the node the cycle cleared (held for it meanwhile)
    wait_for(lambda: states(env).get(cluster["high"]) == ("RUNNING", node), what="high job on the cleared node",
             timeout=60)
    other = [j for j in cluster["old"] + cluster["young"] if before[j][1] != node]
    assert all(states(env)[j][0] == "RUNNING" for j in other)   # nothing on the other node was touched
    rt.actuators[0].release_holds()


def test_a_node_read_that_fails_keeps_the_jobs_and_falls_back_to_gpu_counts(cluster, tmp_path, caplog):
    """The scheduler's nodes unreadable (scontrol fails, squeue works): the state keeps the jobs, has no node
    view (the policy counts GPUs, as without one), and says so in the log; it is never read as empty nodes."""
    cfg = cluster["cfg"]
    no_scontrol = SlurmActuatorConfig(slurm_conf=cluster["conf"], bin_dir=slurm_bin_without_controller(tmp_path))
    slurm = SlurmActuator(no_scontrol, cfg.tenants)
    src = PrometheusSource(cfg, jobs_provider=slurm.cluster_jobs, nodes_provider=slurm.cluster_nodes)
    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.source.prometheus"):
        state = src.collect(60).state
    assert state.nodes is None
    assert set(state.jobs.ids) == set(states(cluster["env"])) and len(state.jobs) == 5
    assert "cannot read the scheduler's nodes" in caplog.text and "Unable to contact" in caplog.text



def test_a_job_read_that_fails_is_a_source_error_not_an_empty_queue(cluster, tmp_path):
    """No squeue to run: the cycle gets a SourceError (keeps its last plan, preempts nothing new)."""
    cfg = cluster["cfg"]
    slurm = SlurmActuator(SlurmActuatorConfig(slurm_conf=cluster["conf"], bin_dir=tmp_path / "nowhere"), cfg.tenants)
    src = PrometheusSource(cfg, jobs_provider=slurm.cluster_jobs, nodes_provider=slurm.cluster_nodes)
    with pytest.raises(SourceError, match="cannot read the scheduler's jobs: SlurmError: squeue"):
        src.collect(60)
