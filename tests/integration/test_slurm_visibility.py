"""The Slurm read sees the whole cluster, or refuses to plan, on a real slurmctld read by a user that is not root.

squeue, sinfo and scontrol leave out, without an error, a ``Hidden=YES`` partition's jobs (and the nodes in no other
partition) for anyone but root and SlurmUser, unless asked ``--all``/``-a``; and with ``PrivateData=jobs`` a user
that is not root, SlurmUser or an operator sees only its own jobs, asked ``--all`` or not. The daemon reads absence
as fact (an account with no job listed runs none here, ListsClusterJobs.lists_every_job), so either read made busy
tenants idle. The daemon's user here is uid 65534 (nobody), by setpriv: the hidden partition through a bin_dir of
wrappers running each Slurm command so, PrivateData through the daemon's own process run so (what the daemon's
identity is: os.geteuid).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import Config, SlurmActuatorConfig, TenantConfig
from daemon.sources.prometheus import PrometheusSource
from tests.support.dcgm import scraped_gpus
from tests.support.services import slurm_cluster, slurm_run, wait_for

pytestmark = [pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
BY_NODE = "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})"
TENANTS = [TenantConfig(name="team-a", tier="low"), TenantConfig(name="team-x", tier="normal")]
HIDDEN = "PartitionName=secret Nodes=gn1,gn2 Hidden=YES MaxTime=INFINITE State=UP\n"


def _as_nobody_possible() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to read Slurm as another user")


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """The DCGM-style exporter of gn1 (team-a's 2 GPUs, team-x's 2) and gn2 (team-y's 4), on a real Prometheus."""
    owners = {"gn1": ["team-a", "team-a", "team-x", "team-x"], "gn2": ["team-y"] * 4}
    with scraped_gpus(tmp_path_factory.mktemp("visibility"), owners) as url:
        yield url


def _config(prom: str) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": prom, "timeout_s": 5, "retries": 0,
                                                               "capacity_query": BY_NODE}},
                  cycle={"history_steps": 60, "resolution_s": 1}, tenants=[t.model_dump() for t in TENANTS])


def _submit(slurm: dict, account: str, partition: str, node: str, gpus: int) -> str:
    return slurm_run(slurm["env"], "sbatch", "--parsable", f"--account={account}", f"--partition={partition}",
                     f"--nodelist={node}", f"--gres=gpu:{gpus}", "-o", "/dev/null", "--wrap", "sleep 600").strip()


def _running(slurm: dict, jobs: list[str]) -> None:
    wait_for(lambda: slurm_run(slurm["env"], "squeue", "-h", "-o", "%T", "-j", ",".join(jobs)).split()
             == ["RUNNING"] * len(jobs), what="jobs running", timeout=60)


def _nobody_bin(tmp: Path) -> Path:
    """Slurm's commands, each run as uid 65534 (the daemon's reads as a user that is not root or SlurmUser)."""
    tmp.chmod(0o755)
    bin_dir = tmp / "as-nobody"
    bin_dir.mkdir()
    for b in ("squeue", "scontrol", "sinfo"):
        (bin_dir / b).write_text(f'#!/bin/sh\nexec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups '
                                 f'/usr/bin/{b} "$@"\n')
        (bin_dir / b).chmod(0o755)
    return bin_dir


@pytest.fixture(scope="module")
def hidden():
    """gn1 in the partitions high, normal and low and in the hidden partition secret; gn2 in secret only."""
    _as_nobody_possible()
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4, partition_nodes=("gn1",), extra_conf=HIDDEN) as s:
        s["dir"].chmod(0o755)   # slurm.conf and munge's socket, for the other user
        yield s


def test_a_hidden_partitions_jobs_and_nodes_are_read(hidden, prom, tmp_path):
    """team-a runs 2 GPUs in partition low on gn1; team-x 2 in the hidden partition on gn1, and team-y (no tenant) 4
    on gn2, a node only in it. Read as a user that is not root, squeue without --all listed team-a's job alone and
    scontrol show nodes gn1 alone: team-x's GPUs were capped to 0 (idle), team-y's were not this cluster's load and
    gn2 not capacity (load 2 of 4, where 8 of 8 GPUs run). Now both jobs and both nodes are read: capacity 8, each
    tenant's GPUs as they run, none capped."""
    jobs = [_submit(hidden, "team-a", "low", "gn1", 2), _submit(hidden, "team-x", "secret", "gn1", 2),
            _submit(hidden, "team-y", "secret", "gn2", 4)]
    try:
        _running(hidden, jobs)
        act = SlurmActuator(SlurmActuatorConfig(slurm_conf=hidden["conf"], bin_dir=_nobody_bin(tmp_path)), TENANTS,
                            dry_run=True)
        assert slurm_run({**hidden["env"]}, str(act.cfg.bin_dir / "squeue"), "-h", "-o", "%a").split() == ["team-a"]
        src = PrometheusSource(_config(prom), jobs_provider=act.cluster_jobs, nodes_provider=act.cluster_nodes,
                               jobs_whole=act.lists_every_job())
        st = src.collect(60).state
        assert st.capacity == 8 and st.capped == {}, (st.capacity, st.capped)
        assert dict(zip(st.tenants, st.used.tolist())) == {"team-a": 2, "team-x": 2, "team-y": 4}
        assert sorted(act.node_names()) == ["gn1", "gn2"] and act.node_down_confirmed("gn2") is False
    finally:
        slurm_run(hidden["env"], "scancel", *jobs)


@pytest.fixture(scope="module")
def private():
    """One node, 4 GPUs, and PrivateData=jobs: a user that is not root, SlurmUser or an operator sees its own jobs."""
    _as_nobody_possible()
    with slurm_cluster(nodes=("gn1",), gpus=4, extra_conf="PrivateData=jobs\n") as s:
        s["dir"].chmod(0o755)
        yield s


READ_AS_NOBODY = """
import json, sys
from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import Config, SlurmActuatorConfig, TenantConfig
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
conf, prom = sys.argv[1:3]
tenants = [TenantConfig(name="team-a", tier="low"), TenantConfig(name="team-x", tier="normal")]
act = SlurmActuator(SlurmActuatorConfig(slurm_conf=conf, bin_dir="/usr/bin"), tenants, dry_run=True)
cfg = Config(source={"kind": "prometheus", "prometheus": {"url": prom, "timeout_s": 5, "retries": 0,
                                                          "capacity_query": %r}},
             cycle={"history_steps": 60, "resolution_s": 1}, tenants=[t.model_dump() for t in tenants])
src = PrometheusSource(cfg, jobs_provider=act.cluster_jobs, nodes_provider=act.cluster_nodes,
                       jobs_whole=act.lists_every_job())
try:
    st = src.collect(60).state
    print(json.dumps({"used": dict(zip(st.tenants, st.used.tolist())), "capped": st.capped}))
except SourceError as exc:
    print(json.dumps({"refused": str(exc)}))
""" % BY_NODE


def test_private_jobs_refuse_the_read_for_a_user_without_the_right(private, prom):
    """PrivateData=jobs, team-x's 2-GPU job running, the daemon run as uid 65534 (no accounting database: no
    operator): squeue listed no job, so team-x's GPUs were capped to 0 and team-a's too, every tenant idle. Now the
    cycle's read is refused, in one line naming the setting, the user and the fix (the daemon then keeps its last
    plan: SourceError). Run as root, the same cluster is read whole."""
    job = _submit(private, "team-x", "normal", "gn1", 2)
    try:
        _running(private, [job])
        p = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                            "-c", READ_AS_NOBODY, str(private["conf"]), prom], cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        got = json.loads(p.stdout.strip().splitlines()[-1])
        assert got == {"refused": "cannot read the scheduler's jobs: SlurmError: slurmctld shows nobody (uid 65534) "
                       "only its own jobs: slurm.conf has PrivateData=jobs and nobody is not SlurmUser (root), root or "
                       "a Slurm operator (AdminLevel not set), so every other tenant would read as idle and its GPUs "
                       "as free: the jobs are not read and the last plan is kept. Run the daemon as SlurmUser, or make "
                       "nobody an operator: sacctmgr modify user nobody set adminlevel=operator"}, got
        act = SlurmActuator(SlurmActuatorConfig(slurm_conf=private["conf"], bin_dir="/usr/bin"), TENANTS, dry_run=True)
        assert list(act.cluster_jobs(("team-a", "team-x")).ids) == [job]   # root: every job, nothing refused
    finally:
        slurm_run(private["env"], "scancel", job)
