"""Where the GPUs are, read from a real slurmctld with three slurmd (3 nodes x 4 GPUs): SlurmActuator.cluster_nodes;
and what the daemon does with a node-down alert Slurm does or does not back (whether Slurm sees a node failed at
all: test_slurm_node_failed.py, on a cluster of its own)."""

import time

import numpy as np
import pytest

from daemon.actuators.base import ListsClusterNodes
from daemon.actuators.slurm.actuator import SlurmActuator, SlurmError
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.policy.state import CLOSED, HELD_BY_POOL, UNHELD
from daemon.policy.types import Plan, PolicyMemory
from tests.support.services import slurm_bin_without_controller, slurm_cluster, slurm_run, wait_for

pytestmark = pytest.mark.services

NODES = ("gn1", "gn2", "gn3")
TENANTS = [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
           TenantConfig(name="team-high2", tier="high", slurm_account="acct-high2"),
           TenantConfig(name="team-low", tier="low", slurm_account="acct-low")]
NAMES = tuple(t.name for t in TENANTS)


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


def sbatch(slurm, *opts, wrap="sleep 600"):
    return slurm_run(slurm["env"], "sbatch", "--parsable", "--requeue", "-o", "/dev/null", *opts,
                     "--wrap", wrap).strip()


def running(slurm, *ids):
    out = slurm_run(slurm["env"], "squeue", "-h", "-o", "%i|%T")
    states = dict(ln.split("|") for ln in out.splitlines())
    return all(states.get(j) == "RUNNING" for j in ids)


def gone(slurm, *ids):
    return not set(ids) & set(slurm_run(slurm["env"], "squeue", "-h", "-o", "%i").split())


def actuator(slurm, bin_dir="/usr/bin"):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, warn_lead_s=0,
                                             hold_shrink_delay_s=0), TENANTS, dry_run=False)


def view(nodes):
    """node name -> (gpus, free, draining, held_by)."""
    return {str(n): (int(g), int(f), int(d), int(h))
            for n, g, f, d, h in zip(nodes.names, nodes.gpus, nodes.free, nodes.draining, nodes.held_by)}


def plan(reserve=0, other=0, pooled=()):
    res = {t: g for t, g in (("team-high", reserve), ("team-high2", other)) if g}
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=2, reservations=res, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory(), pooled=pooled)


def test_an_idle_cluster_reads_back_as_configured(slurm):
    a = actuator(slurm)
    assert isinstance(a, ListsClusterNodes)
    assert view(a.cluster_nodes(NAMES)) == {n: (4, 4, 0, UNHELD) for n in NODES}


def test_running_jobs_use_gpus_on_their_nodes_and_names_match_the_jobs(slurm):
    """A 1-node job's node is spelled as the nodes are; a 2-node job names no single node (a hostlist) but its
    GPUs are used on both of its nodes."""
    a = actuator(slurm)
    one = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:3", "-w", "gn1")
    two = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:2", "-N", "2", "-w", "gn2,gn3")
    try:
        wait_for(lambda: running(slurm, one, two), what="jobs running", timeout=60)
        nodes = a.cluster_nodes(NAMES)
        assert view(nodes) == {"gn1": (4, 1, 0, UNHELD), "gn2": (4, 2, 0, UNHELD), "gn3": (4, 2, 0, UNHELD)}
        jobs = a.cluster_jobs(NAMES)
        where = dict(zip(jobs.ids.tolist(), nodes.index_of(jobs.node).tolist()))
        assert where[one] == 0            # gn1: the policy can clear the node this job is on
        assert where[two] == -1           # "gn[2-3]": not one node, never picked to clear one
        assert dict(zip(jobs.ids.tolist(), jobs.node.tolist()))[two] == "gn[2-3]"
        assert dict(zip(jobs.ids.tolist(), jobs.gpus.tolist())) == {one: 3, two: 4}   # 2 GPUs on each of 2 nodes
    finally:
        slurm_run(slurm["env"], "scancel", one, two, check=False)
        wait_for(lambda: gone(slurm, one, two), what="jobs gone", timeout=60)


def test_the_daemons_holds_name_their_tenant_or_the_pool_and_other_reservations_close_a_node(slurm):
    a = actuator(slurm)
    try:
        rep = a.apply(plan(reserve=4))           # one whole node for team-high
        assert rep.ok, rep.errors
        v = view(a.cluster_nodes(NAMES))
        held = [n for n, x in v.items() if x[3] == NAMES.index("team-high")]
        assert len(held) == 1 and all(x[3] == UNHELD for n, x in v.items() if n not in held)
        # a hold of ours for a tenant this state does not list is no place for any tenant it lists
        assert view(a.cluster_nodes(("team-low",)))[held[0]][3] == CLOSED
        rep = a.apply(plan(reserve=4, other=4, pooled=("team-high", "team-high2")))  # two nodes, one pool
        assert rep.ok, rep.errors
        v = view(a.cluster_nodes(NAMES))
        pool = sorted(n for n, x in v.items() if x[3] == HELD_BY_POOL)
        assert len(pool) == 2
        (rest,) = set(NODES) - set(pool)
        assert v[rest][3] == UNHELD
        # someone else's reservation: a place for no tenant; one that has not started yet changes nothing
        slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=site-maint", "StartTime=now",
                  "Duration=60", "Users=root", f"Nodes={rest}", "Flags=IGNORE_JOBS")
        slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=site-later", "StartTime=now+1day",
                  "Duration=60", "Users=root", f"Nodes={pool[0]}", "Flags=IGNORE_JOBS,OVERLAP")
        v = view(a.cluster_nodes(NAMES))
        assert v[rest] == (4, 4, 0, CLOSED) and v[pool[0]][3] == HELD_BY_POOL
    finally:
        for r in ("site-maint", "site-later"):
            slurm_run(slurm["env"], "scontrol", "delete", f"ReservationName={r}", check=False)
        assert a.release_holds().ok
    assert view(a.cluster_nodes(NAMES)) == {n: (4, 4, 0, UNHELD) for n in NODES}


def test_a_drained_node_has_no_healthy_gpus_and_is_no_place(slurm):
    a = actuator(slurm)
    job = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:2", "-w", "gn3")
    try:
        wait_for(lambda: running(slurm, job), what="job running", timeout=60)
        # the reason is free text, and scontrol prints it after the node's own State= and Gres= (issue 36)
        slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn3", "State=DRAIN",
                  "Reason=test State=IDLE Gres=gpu:8 GresUsed=gpu:0")
        assert "Reason=test State=IDLE Gres=gpu:8" in slurm_run(slurm["env"], "scontrol", "-o", "show", "node", "gn3")
        v = view(a.cluster_nodes(NAMES))
        # its job keeps running, but nothing new starts there: nothing is free and nothing worth clearing
        assert v["gn3"] == (0, 0, 0, CLOSED) and v["gn1"] == (4, 4, 0, UNHELD)
        assert running(slurm, job)
    finally:
        slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn3", "State=RESUME", check=False)
        slurm_run(slurm["env"], "scancel", job, check=False)
        wait_for(lambda: gone(slurm, job), what="job gone", timeout=60)
    wait_for(lambda: view(a.cluster_nodes(NAMES))["gn3"] == (4, 4, 0, UNHELD), what="gn3 back", timeout=30)


def test_a_requeued_job_drains_before_its_gpus_are_free(slurm):
    """A batch script that ignores SIGTERM stays COMPLETING after a requeue (until KillWait's SIGKILL, 15 s in
    tests/support/services.py, 30 s by default): its GPUs are draining, not free, and not counted twice."""
    a = actuator(slurm)
    stubborn = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:3", "-w", "gn2",
                      wrap="trap '' TERM; while true; do sleep 1; done")
    other = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:1", "-w", "gn2")
    try:
        wait_for(lambda: running(slurm, stubborn, other), what="jobs running", timeout=60)
        slurm_run(slurm["env"], "scontrol", "hold", stubborn)   # requeued, it stays pending instead of starting again
        slurm_run(slurm["env"], "scontrol", "requeue", stubborn)
        wait_for(lambda: view(a.cluster_nodes(NAMES))["gn2"][2] == 3, what="GPUs draining", timeout=20)
        assert "COMPLETING" in slurm_run(slurm["env"], "squeue", "-h", "-j", stubborn, "-o", "%T")
        assert view(a.cluster_nodes(NAMES))["gn2"] == (4, 0, 3, UNHELD)
    finally:
        slurm_run(slurm["env"], "scancel", stubborn, other, check=False)
    wait_for(lambda: gone(slurm, stubborn, other), what="jobs gone", timeout=90)
    assert view(a.cluster_nodes(NAMES))["gn2"] == (4, 4, 0, UNHELD)


def test_an_unreachable_controller_is_an_error_not_an_empty_cluster(slurm, tmp_path):
    with pytest.raises(SlurmError, match="Unable to contact"):
        actuator(slurm, bin_dir=slurm_bin_without_controller(tmp_path)).cluster_nodes(NAMES)
    assert np.all(actuator(slurm).cluster_nodes(NAMES).gpus == 4)


# ---- does Slurm back a node-down alert? (failover.confirm_with_scheduler) ----------------------------------
def daemon_with(tmp_path, actuators):
    """A Daemon (not started) whose failover drives `actuators`."""
    from daemon.config import Config, SimulatorConfig, SourceConfig
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    cfg = Config(cluster={"gpus": 64},
                 source=SourceConfig(simulator=SimulatorConfig(seed=1, tenants=4, warmup_steps=50)),
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": tmp_path / "m"})
    d = Daemon(build_runtime(cfg), serve_http=False)
    d.runtime.actuators = list(actuators)
    return d


def node_state(slurm, node):
    return slurm_run(slurm["env"], "sinfo", "-h", "-N", "-n", node, "-o", "%T").split()[0]


@pytest.mark.security
def test_a_node_down_alert_slurm_does_not_back_requeues_nothing_and_says_why(slurm, tmp_path):
    jobs = [sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:2", "-w", "gn1") for _ in range(2)]
    d = daemon_with(tmp_path, [actuator(slurm)])
    try:
        wait_for(lambda: running(slurm, *jobs), what="jobs running", timeout=60)
        out = d.handle_node_down("gn1", time.perf_counter(), "GPUNodeDown")
        assert out["requeued"] == [] and not out["errors"], out
        assert "the scheduler does not see gn1 as failed (slurm: healthy)" in out["skipped"], out
        time.sleep(1)
        assert running(slurm, *jobs) and "drain" not in node_state(slurm, "gn1")    # not fenced either
        (ev,) = d.runtime.store.events("node_down_unconfirmed")
        assert ev["node"] == "gn1" and ev["alert"] == "GPUNodeDown" and "does not see" in ev["reason"], ev
        # turned off, the alert alone is acted on, as before
        d.use_config(d.cfg.model_copy(update={"failover": d.cfg.failover.model_copy(
            update={"confirm_with_scheduler": False})}))
        assert d._scheduler_disagrees("gn1") is None
    finally:
        d.runtime.close()
        slurm_run(slurm["env"], "scancel", *jobs, check=False)
        wait_for(lambda: gone(slurm, *jobs), what="jobs gone", timeout=60)


@pytest.mark.security
def test_a_node_down_alert_slurm_backs_is_acted_on(slurm, tmp_path):
    jobs = [sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:2", "-w", "gn2") for _ in range(2)]
    d = daemon_with(tmp_path, [actuator(slurm)])
    try:
        wait_for(lambda: running(slurm, *jobs), what="jobs running", timeout=60)
        slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn2", "State=DRAIN", "Reason=GPU fell off the bus")
        out = d.handle_node_down("gn2", time.perf_counter(), "GPUNodeDown")
        assert "skipped" not in out and sorted(out["requeued"]) == sorted(jobs) and not out["errors"], out
        wait_for(lambda: slurm_run(slurm["env"], "squeue", "-h", "-o", "%T", "-j", ",".join(jobs)).split() ==
                 ["PENDING", "PENDING"], what="both requeued", timeout=20)
    finally:
        d.runtime.close()
        slurm_run(slurm["env"], "scancel", *jobs, check=False)
        slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn2", "State=RESUME", check=False)
        wait_for(lambda: gone(slurm, *jobs), what="jobs gone", timeout=60)


def test_the_nvml_exporter_names_a_jobs_account_from_slurm_not_from_its_environment(slurm, tmp_path):
    """Issue 36, on the real slurmctld: a process whose cgroup is slurmstepd's job_<id> and whose environment claims
    SLURM_JOB_ACCOUNT=acct-high is the job's real account (asked of squeue); a job Slurm does not know is named by
    its id. (The test slurmd does not use cgroups, so the /proc entry is fabricated around the real job id.)"""
    from daemon.sources.nvml_exporter import SlurmAccounts, tenant_of_pid

    job = sbatch(slurm, "--partition=low", "--account=acct-low", "--gres=gpu:1")
    try:
        wait_for(lambda: running(slurm, job), what="job running", timeout=60)
        for pid, jid in ((100, job), (101, "999999")):
            (tmp_path / str(pid)).mkdir()
            (tmp_path / str(pid) / "environ").write_bytes(b"SLURM_JOB_ACCOUNT=acct-high\0")
            (tmp_path / str(pid) / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{jid}/step_0\n")
        accounts = SlurmAccounts(env=slurm["env"])
        assert tenant_of_pid(100, tmp_path, accounts) == "acct-low"
        assert tenant_of_pid(101, tmp_path, accounts) == "slurm-job-999999"
    finally:
        slurm_run(slurm["env"], "scancel", job, check=False)
        wait_for(lambda: gone(slurm, job), what="job gone", timeout=60)
