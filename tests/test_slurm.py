import subprocess
import time

import pytest

from daemon.actuators.slurm import SlurmActuator, parse_elapsed, parse_gpus
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.services import slurm_cluster, wait_for

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster() as s:
        yield s


def sbatch(slurm, partition, account, gpus=2):
    r = subprocess.run(["sbatch", "--parsable", f"--partition={partition}", f"--account={account}", f"--gres=gpu:{gpus}",
                        "--requeue", "-o", "/dev/null", "--wrap", "sleep 600"], env=slurm["env"], capture_output=True,
                       text=True, check=True)
    return r.stdout.strip().split(";")[0]


def state(slurm, jid):
    r = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T|%k"], env=slurm["env"], capture_output=True, text=True)
    return r.stdout.strip()


def act(slurm, dry_run=False, mode="requeue"):
    cfg = SlurmActuatorConfig(slurm_conf=slurm["conf"], mode=mode, bin_dir="/usr/bin")
    return SlurmActuator(cfg, [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
                               TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], dry_run=dry_run)


def plan_for(*pre):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=1.0, high_pool=2, reservations={}, quotas={},
                limits={}, preemptions=tuple(pre), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


@pytest.fixture
def jobs(slurm):
    ids = {"low1": sbatch(slurm, "low", "acct-low"), "low2": sbatch(slurm, "low", "acct-low"),
           "high": sbatch(slurm, "high", "acct-high")}
    wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in ids.values()), what="jobs running", timeout=60)
    yield ids
    subprocess.run(["scancel", *ids.values()], env=slurm["env"], capture_output=True)
    wait_for(lambda: all(state(slurm, j) == "" for j in ids.values()), what="jobs gone", timeout=60)


def test_parsers():
    assert parse_elapsed("1-02:03:04") == 93784 and parse_elapsed("05:06") == 306 and parse_elapsed("") == 0
    assert parse_gpus("gres:gpu:2") == 2 and parse_gpus("gres/gpu:a100:4") == 4 and parse_gpus("N/A") == 0


def test_reads_jobs_as_tenants_and_priorities(slurm, jobs):
    a = act(slurm)
    js = a.cluster_jobs(("team-high", "team-low"))
    assert len(js) == 3 and js.running.all() and (js.gpus == 2).all()
    by_id = dict(zip(js.ids, js.priority))
    assert by_id[jobs["high"]] == 2 and by_id[jobs["low1"]] == 0
    waiting = sbatch(slurm, "low", "acct-low", gpus=8)      # 6 of 8 GPUs are taken: this one queues
    try:
        time.sleep(2)
        js = a.cluster_jobs(("team-high", "team-low"))
        i = list(js.ids).index(waiting)
        assert not js.running[i] and js.gpus[i] == 8 and 1 <= js.wait_s[i] < 120
    finally:
        subprocess.run(["scancel", waiting], env=slurm["env"], capture_output=True)


def test_preempt_requeues_low_and_refuses_high(slurm, jobs):
    a = act(slurm)
    plan = plan_for(Preemption(jobs["low1"], "team-low", 2, slurm["node"], "peak ahead for team-high"),
                    Preemption(jobs["high"], "team-high", 2, slurm["node"], "bogus"))
    rep = a.apply(plan)
    assert any("refused to preempt" in e and jobs["high"] in e for e in rep.errors)
    wait_for(lambda: state(slurm, jobs["low1"]).startswith("PENDING"), what="requeued", timeout=20)
    assert "peak ahead for team-high" in state(slurm, jobs["low1"])
    assert state(slurm, jobs["high"]).startswith("RUNNING")
    assert state(slurm, jobs["low2"]).startswith("RUNNING")
    again = a.apply(plan_for(plan.preemptions[0]))      # idempotent: the job is already pending
    assert again.ok and any("not running" in x for x in again.actions)
    assert not any(x.startswith("scontrol requeue") for x in again.actions)


def test_dry_run_changes_nothing(slurm, jobs):
    rep = act(slurm, dry_run=True).apply(plan_for(Preemption(jobs["low2"], "team-low", 2, "", "x")))
    assert rep.dry_run and any("requeue" in x for x in rep.actions)
    assert state(slurm, jobs["low2"]).startswith("RUNNING")


def test_suspend_mode(slurm, jobs):
    act(slurm, mode="suspend").apply(plan_for(Preemption(jobs["low2"], "team-low", 2, "", "x")))
    assert state(slurm, jobs["low2"]).startswith("SUSPENDED")
    subprocess.run(["scontrol", "resume", jobs["low2"]], env=slurm["env"], check=True)


def test_node_failure_requeues_everything_on_it_within_seconds(slurm, jobs):
    a = act(slurm)
    t0 = time.perf_counter()
    on = a.jobs_on_node(slurm["node"])
    rep = a.requeue([j for j, _ in on], "node gpunode1 failed (GPUNodeDown)")
    took = time.perf_counter() - t0
    assert rep.ok, rep.errors
    assert {j for j, _ in on} == set(jobs.values())
    assert {t for _, t in on} == {"team-high", "team-low"}
    wait_for(lambda: all(state(slurm, j).startswith("PENDING") for j in jobs.values()), what="all requeued",
             timeout=5 - took)
    took = time.perf_counter() - t0
    assert took < 5


def test_node_names_are_single_nodes_and_a_range_is_refused(slurm):
    from daemon import alerts
    from daemon.config import FailoverConfig

    names = act(slurm).node_names()
    assert names == {slurm["node"]}
    p = alerts.parse(('{"version":"4","status":"firing","receiver":"r","groupKey":"k","alerts":[{"status":"firing",'
                      '"labels":{"alertname":"GPUNodeDown","node":"gpunode[1-9]"},"startsAt":"x"}]}').encode())
    with pytest.raises(alerts.PayloadError, match="alerts.0.labels.node"):
        alerts.actions(p, FailoverConfig(), names.__contains__)
