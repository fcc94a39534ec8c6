"""GPUs a Slurm job asks for in ways squeue's %b (GPUs per node) does not print as GPUs, on a real slurmctld whose
nodes have shard and MPS GRES over their GPUs (gn1: gpu:4 and shard:16; gn2: gpu:4 and mps:400): a job's shards or
MPS share are a fraction of a GPU, read conservatively as the one GPU of each node they sit on (no job asking GPUs
gets it whole while they run), and --gpus-per-socket as its GPUs per socket times its sockets per node."""

import subprocess
import time

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator, SlurmError
from daemon.actuators.slurm.squeue import parse_job_gpus
from daemon.config import SlurmActuatorConfig, TenantConfig
from tests.support.services import slurm_cluster, wait_for

pytestmark = pytest.mark.services

TENANTS = ("team-high", "team-low")


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4, shared={"gn1": "shard:16", "gn2": "mps:400"}) as s:
        yield s


def act(slurm):
    cfg = SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin")
    return SlurmActuator(cfg, [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
                               TenantConfig(name="team-low", tier="low", slurm_account="acct-low")])


def submit(slurm, *args):
    return subprocess.run(["sbatch", "--parsable", "--partition=low", "--account=acct-low", *args, "--requeue",
                           "-o", "/dev/null", "--wrap", "sleep 600"], env=slurm["env"], capture_output=True,
                          text=True, check=True).stdout.strip().split(";")[0]


def state(slurm, jid):
    return subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T"], env=slurm["env"], capture_output=True,
                          text=True).stdout.strip()


def test_shard_mps_and_per_socket_jobs_hold_gpus_and_wait_for_them(slurm):
    """A low tenant's jobs asking shard:2 (gn1), mps:50 (gn2) and --gpus-per-socket=2 --sockets-per-node=2 read as
    jobs of 0 GPUs: never preempted for the high tier (each freed nothing), and pending ones (shard:16 and mps:400,
    the nodes' whole shares, taken in part) no demand. Now 1, 1 and 4 GPUs running, and 1 and 1 waiting."""
    ids = [submit(slurm, "--gres=shard:2", "-w", "gn1"), submit(slurm, "--gres=mps:50", "-w", "gn2"),
           submit(slurm, "--gpus-per-socket=2", "--sockets-per-node=2")]
    try:
        wait_for(lambda: all(state(slurm, j) == "RUNNING" for j in ids), what="jobs running", timeout=60)
        ids += [submit(slurm, "--gres=shard:16", "-w", "gn1"), submit(slurm, "--gres=mps:400", "-w", "gn2")]
        time.sleep(2)
        assert [state(slurm, j) for j in ids[3:]] == ["PENDING", "PENDING"]
        a = act(slurm)
        js = a.cluster_jobs(TENANTS)
        got = {i: (int(g), bool(r)) for i, g, r in zip(js.ids, js.gpus, js.running)}
        assert [got.get(i) for i in ids] == [(1, True), (1, True), (4, True), (1, False), (1, False)], got
        assert [j.total_gpus for j in a.jobs(job_ids=ids[:3])] == [1, 1, 4]   # the preemption's re-read too
    finally:
        subprocess.run(["scancel", *ids], env=slurm["env"], capture_output=True)
        wait_for(lambda: all(state(slurm, j) == "" for j in ids), what="jobs gone", timeout=60)


def test_the_parsers_on_squeues_own_lines():
    from daemon.actuators.slurm.squeue import parse_node_gpus

    # as squeue printed them for the jobs above (%b; -O JOB_GPUS_FMT)
    assert [parse_node_gpus(b) for b in ("gres:shard:2", "gres:mps:50", "N/A", "gres:gpu:2", "gres:shard:0")] == \
        [1, 1, 0, 2, 0]
    # (--gpus-per-socket=2 --sockets-per-node=2; =1 with 1 socket on -N2; --gres=shard:2: Sockets is '*')
    assert parse_job_gpus("3;N/A;N/A;1;gres:gpu:2;2;1;\n4;N/A;N/A;2;gres:gpu:1;1;2;\n1;N/A;N/A;1;N/A;*;1;\n") == \
        {"3": 4, "4": 2}
    with pytest.raises(SlurmError, match="squeue: line 1: --gpus-per-socket"):
        parse_job_gpus("3;N/A;N/A;1;gres:gpu:2;*;1;")


def test_a_typed_share_or_per_socket_request_accepts_its_type_only():
    """A mixed fleet (gn1: gpu:a100:4 and shard:16, which Slurm types as shard:a100:16; gn2: gpu:t4:4 and mps:400).
    job_types read tres-per-node, -job and -task only: a low tenant's --gpus-per-socket=t4:1 job (tres-per-socket)
    and its typed shard:a100:2 and mps:t4:50 jobs (not gpu GRES) accepted any type, so the plan held for them, and
    made room for them, on nodes of the other type; so were its untyped shard:2 and mps:50 jobs, which run only where
    shards (gn1) or MPS (gn2) are. Now each accepts its type, an untyped share the types of the nodes that have it."""
    from daemon.config.fleet import FleetConfig

    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4, gres_types={"gn1": "a100", "gn2": "t4"},
                       shared={"gn1": "shard:16", "gn2": "mps:400"}) as s:
        ids = [submit(s, "--gpus-per-socket=t4:1", "--sockets-per-node=2"), submit(s, "--gres=shard:a100:2"),
               submit(s, "--gres=mps:t4:50"), submit(s, "--gres=gpu:a100:1"), submit(s, "--gres=shard:2"),
               submit(s, "--gres=mps:50")]
        wait_for(lambda: all(state(s, j) == "RUNNING" for j in ids), what="jobs running", timeout=60)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin"),
                          [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")],
                          fleet=FleetConfig(types=["a100", "t4"]))
        got = a.job_types()
        assert [got[j] for j in ids] == [("t4",), ("a100",), ("t4",), ("a100",), ("a100",), ("t4",)], got
        js = a.cluster_jobs(("team-low",))
        assert dict(zip(js.ids, js.accepts))[ids[0]] == ("t4",)


def test_a_gres_whose_name_ends_in_gpu_is_no_gpu():
    """A site's GRES called like a GPU's but not one (gn1: gpu:4 and vgpu:8; squeue's %b prints gres:vgpu:2):
    parse_gpus searched each entry for 'gpu:<n>', so a low tenant's --gres=vgpu:2 job read as 2 GPUs, and pending,
    as demand for them (holds for its tenant, room made for it). Now only the gpu GRES counts."""
    with slurm_cluster(nodes=("gn1",), gpus=4, shared={"gn1": "vgpu:8"}) as s:
        ids = [submit(s, "--gres=vgpu:2"), submit(s, "--gres=vgpu:8"), submit(s, "--gres=gpu:1,vgpu:2")]
        wait_for(lambda: state(s, ids[0]) == "RUNNING" and state(s, ids[2]) == "RUNNING", what="jobs running",
                 timeout=60)
        js = act(s).cluster_jobs(TENANTS)
        got = dict(zip(js.ids, js.gpus.tolist()))
        assert [got.get(j) for j in ids] == [0, 0, 1], got


def test_a_gpu_request_without_a_count_is_one_gpu():
    """--gres=gpu, --gres=gpu:a100 and --gpus-per-node=a100 ask for one GPU (Slurm's default count), and squeue
    prints them without one (gres:gpu, gres:gpu:a100): read as 0 GPUs, such a job running was never preempted for
    the high tier (it freed nothing) and pending no demand, and the typed ones took any type on a mixed fleet.
    gn1 has a100:4: the three run on one GPU each (GresUsed counts 3), and read so."""
    from daemon.config.fleet import FleetConfig

    with slurm_cluster(nodes=("gn1",), gpus=4, gres_types={"gn1": "a100"}) as s:
        ids = [submit(s, "--gres=gpu"), submit(s, "--gres=gpu:a100"), submit(s, "--gpus-per-node=a100")]
        wait_for(lambda: all(state(s, j) == "RUNNING" for j in ids), what="jobs running", timeout=60)
        nodes = subprocess.run(["scontrol", "-d", "-o", "show", "nodes"], env=s["env"], capture_output=True,
                               text=True).stdout
        assert "GresUsed=gpu:a100:3(IDX:0-2)" in nodes
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin"),
                          [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")],
                          fleet=FleetConfig(types=["a100"]))
        js = a.cluster_jobs(("team-low",))
        assert [dict(zip(js.ids, js.gpus.tolist())).get(j) for j in ids] == [1, 1, 1]
        assert [dict(zip(js.ids, js.accepts)).get(j) for j in ids] == [(), ("a100",), ("a100",)]
