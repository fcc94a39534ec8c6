"""A Prometheus that scrapes another cluster's exporters under the same job, on a real Prometheus: the other nodes'
GPUs are not capacity, and the line that says so names the GPUs still counted as load and the setting that
leaves them out.

The README's minimal config (the default exporter_selector, `job="dcgm-exporter"`) against a Prometheus scraping a
second cluster's nodes too printed "load=1500.0% cap=16" with a warning that said only "304 GPU(s) the metrics
report are not capacity, not on the scheduler's nodes": the other cluster's tenants, for whom this scheduler runs no
job, stay in the load (a Kubernetes view lists only the tenants' pods, so such names are left as they are), and
nothing told the operator what to change.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from daemon.actuators.base import ListsClusterJobs
from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import Config, SlurmActuatorConfig, TenantConfig
from daemon.policy.state import Jobs, Nodes
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
from tests.support.dcgm import scraped_gpus
from tests.support.services import slurm_cluster, slurm_run, wait_for

pytestmark = [pytest.mark.services]

BY_NODE = "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """One exporter target: node-a (this cluster: 8 GPUs of team-a) and node-x (the other cluster: 8 of team-x)."""
    owners = {"node-a": ["team-a"] * 8, "node-x": ["team-x"] * 8}
    with scraped_gpus(tmp_path_factory.mktemp("other-cluster"), owners) as url:
        yield url


def test_the_other_clusters_gpus_are_named_with_the_setting_that_leaves_them_out(prom, caplog):
    def jobs(tenants: tuple[str, ...]) -> Jobs:       # this scheduler: team-a's one 8-GPU job on node-a
        a = tenants.index("team-a")
        return Jobs(ids=np.array(["1"], dtype=object), tenant=np.array([a]), gpus=np.array([8]),
                    priority=np.array([2], dtype=np.int8), running=np.ones(1, dtype=bool),
                    runtime_s=np.full(1, 600.0), wait_s=np.zeros(1), node=np.array(["node-a"], dtype=object))

    def nodes(tenants: tuple[str, ...]) -> Nodes:
        return Nodes(names=np.array(["node-a"], dtype=object), gpus=np.array([8]), free=np.array([0]),
                     draining=np.zeros(1, dtype=np.int64), held_by=np.array([-1]))

    cfg = Config(source={"kind": "prometheus", "prometheus": {"url": prom, "timeout_s": 5, "retries": 0,
                                                              "capacity_query": BY_NODE}},
                 cycle={"history_steps": 60, "resolution_s": 1}, tenants=[{"name": "team-a", "tier": "high"}])
    src = PrometheusSource(cfg, jobs_provider=jobs, nodes_provider=nodes)
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
        st = src.collect(60).state
        src.collect(60)
    assert st.capacity == 8 and dict(zip(st.tenants, st.used.tolist())) == {"team-a": 8, "team-x": 8}
    said = [r.getMessage() for r in caplog.records if "not capacity" in r.getMessage()]
    assert said == ["8 GPU(s) the metrics report are not capacity, not on the scheduler's nodes (node-x: 8); 8 GPU(s) "
                    "of 1 name the scheduler runs no job for (team-x) still count as load: if those nodes are another "
                    "cluster's, select this cluster's exporter with source.prometheus.exporter_selector"], said


@pytest.fixture(scope="module")
def slurm():
    """A real slurmctld with one slurmd: node-a, 8 GPUs (this cluster; node-x is the other one's)."""
    with slurm_cluster(nodes=("node-a",), gpus=8) as s:
        yield s


def test_on_slurm_an_account_with_no_job_is_not_this_clusters_load(prom, slurm, tmp_path, caplog):
    """squeue lists every job of the cluster (SlurmActuator.lists_every_job): team-x has GPUs in Prometheus and no
    job in squeue, so it runs none here: its demand is capped to 0 (the load reads team-a's 8 GPUs of 8, not 16),
    said once in one line naming it and exporter_selector. A squeue that cannot be read fails the cycle
    (SourceError), never an empty queue that would cap everyone to 0. On the old code team-x counted 8."""
    tenants = [TenantConfig(name="team-a", tier="high")]
    act = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin"), tenants, dry_run=True)
    assert isinstance(act, ListsClusterJobs) and act.lists_every_job()
    job = slurm_run(slurm["env"], "sbatch", "--parsable", "--account=team-a", "--gres=gpu:8", "-o", "/dev/null",
                    "--wrap", "sleep 600").strip()
    try:
        wait_for(lambda: "RUNNING" in slurm_run(slurm["env"], "squeue", "-h", "-j", job, "-o", "%T"),
                 what="team-a's job running", timeout=60)
        cfg = Config(source={"kind": "prometheus", "prometheus": {"url": prom, "timeout_s": 5, "retries": 0,
                                                                  "capacity_query": BY_NODE}},
                     cycle={"history_steps": 60, "resolution_s": 1}, tenants=[t.model_dump() for t in tenants])
        src = PrometheusSource(cfg, jobs_provider=act.cluster_jobs, nodes_provider=act.cluster_nodes,
                               jobs_whole=act.lists_every_job())
        with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
            st = src.collect(60).state
            src.collect(60)
        assert st.capacity == 8 and dict(zip(st.tenants, st.used.tolist())) == {"team-a": 8, "team-x": 0}
        assert st.capped == {"team-x": 8} and float(np.nansum(st.used)) / st.capacity == 1.0
        said = [r.getMessage() for r in caplog.records if "runs no job for" in r.getMessage()]
        assert said == ["8 GPU(s) of 1 name the scheduler runs no job for (team-x) are not this cluster's load: "
                        "demand capped to 0 (the scheduler lists every job of the cluster, so these series are "
                        "another cluster's or stale); select this cluster's exporter with "
                        "source.prometheus.exporter_selector"], said
        assert not [r for r in caplog.records if r.getMessage().startswith("tenant team-x")]   # one line, not two
        bad = tmp_path / "bin"
        bad.mkdir()
        (bad / "squeue").write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\n"
                                    "exit 1\n")
        (bad / "squeue").chmod(0o755)
        (bad / "scontrol").symlink_to("/usr/bin/scontrol")
        broken = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=str(bad)), tenants, dry_run=True)
        src = PrometheusSource(cfg, jobs_provider=broken.cluster_jobs, nodes_provider=broken.cluster_nodes,
                               jobs_whole=broken.lists_every_job())
        with pytest.raises(SourceError, match="cannot read the scheduler's jobs"):
            src.collect(60)
    finally:
        slurm_run(slurm["env"], "scancel", job)
