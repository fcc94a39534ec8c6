import json
import re
import subprocess
import time

import numpy as np
import pandas as pd
import pytest

from daemon.actuators.slurm.actuator import SlurmActuator, SlurmError, parse_elapsed, parse_gpus, parse_job_gpus
from daemon.actuators.slurm.squeue import spread_jobs
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.policy.state import PRIORITY
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.support.services import slurm_cluster, wait_for

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster() as s:
        yield s


def sbatch(slurm, partition, account, gpus=2, comment=None, wrap="sleep 600"):
    extra = [f"--comment={comment}"] if comment else []
    r = subprocess.run(["sbatch", "--parsable", f"--partition={partition}", f"--account={account}",
                        f"--gres=gpu:{gpus}", "--requeue", "-o", "/dev/null", *extra, "--wrap", wrap],
                       env=slurm["env"], capture_output=True, text=True, check=True)
    return r.stdout.strip().split(";")[0]


def state(slurm, jid):
    r = subprocess.run(["squeue", "-h", "-j", jid, "-o", "%T|%k"], env=slurm["env"], capture_output=True, text=True)
    return r.stdout.strip()


def admin_comment(slurm, jid):
    """Read from `squeue --json` (Slurm 22.05 lists every job there, whatever the filter), where it is one field."""
    out = subprocess.run(["squeue", "--json"], env=slurm["env"], capture_output=True, text=True, check=True).stdout
    return next(j.get("admin_comment") or "" for j in json.loads(out)["jobs"] if str(j["job_id"]) == jid)


def act(slurm, dry_run=False, mode="requeue", lead=0.0, min_runtime_s=0.0, clock=time.monotonic):
    cfg = SlurmActuatorConfig(slurm_conf=slurm["conf"], mode=mode, bin_dir="/usr/bin", warn_lead_s=lead)
    return SlurmActuator(cfg, [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
                               TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], dry_run=dry_run,
                         min_runtime_s=min_runtime_s, clock=clock)


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


def requeue_refusing_bin(tmp_path):
    """A bin_dir of the real Slurm commands whose `scontrol requeue` fails while the returned flag file exists."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in ("squeue", "sinfo", "scancel", "sbatch"):
        (bin_dir / b).symlink_to(f"/usr/bin/{b}")
    fail = tmp_path / "fail-requeue"
    (bin_dir / "scontrol").write_text(
        f'#!/bin/sh\ncase "$1" in requeue) [ -e {fail} ] && '
        '{ echo "injected: requeue refused" >&2; exit 1; };; esac\n'
        'exec /usr/bin/scontrol "$@"\n')
    (bin_dir / "scontrol").chmod(0o755)
    return bin_dir, fail


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


def test_gpus_asked_per_job_or_per_task_are_the_jobs_gpus(slurm):
    """squeue's %b is the GPUs asked per node only: a low tenant's jobs asking --gpus=2 or --gpus-per-task=1 -n2 read
    as jobs of 0 GPUs on a node full of them, so none was ever preempted for the high tier (each freed nothing), a
    pending --gpus=4 was no demand, and the tenant's metered demand was capped to 0. Now 2, 2 and 4 GPUs."""
    env = slurm["env"]

    def submit(*args):
        return subprocess.run(["sbatch", "--parsable", "--partition=low", "--account=acct-low", *args, "--requeue",
                               "-o", "/dev/null", "--wrap", "sleep 600"], env=env, capture_output=True, text=True,
                              check=True).stdout.strip().split(";")[0]
    ids = [submit("--gpus=2"), submit("--gpus-per-task=1", "-n2"), submit("--gpus=2"), submit("--gpus=2")]
    try:
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in ids), what="jobs running", timeout=60)
        ids.append(submit("--gpus=4"))   # the node's 8 GPUs are taken: it queues
        time.sleep(2)
        js = act(slurm).cluster_jobs(("team-high", "team-low"))
        got = {i: (int(g), bool(r)) for i, g, r in zip(js.ids, js.gpus, js.running)}
        assert [got[i] for i in ids] == [(2, True)] * 4 + [(4, False)]
        assert [j.gpus for j in act(slurm).jobs(job_ids=ids[:2])] == [2, 2]   # the preemption's re-read too
    finally:
        subprocess.run(["scancel", *ids], env=env, capture_output=True)
        wait_for(lambda: all(state(slurm, j) == "" for j in ids), what="jobs gone", timeout=60)


def test_an_account_named_like_a_tenant_is_not_that_tenants(slurm):
    """team-high's jobs run under acct-high. A job submitted under an account called team-high (any account the
    site has, or makes, by that name) was read as team-high's: a job and demand of the high tier's, its warnings
    team-high's notices. It is no tenant's now; acct-high's job stays team-high's."""
    env = slurm["env"]

    def submit(account):
        return subprocess.run(["sbatch", "--parsable", "--partition=low", f"--account={account}", "--gres=gpu:1",
                               "-o", "/dev/null", "--wrap", "sleep 600"], env=env, capture_output=True, text=True,
                              check=True).stdout.strip().split(";")[0]
    ids = [submit("team-high"), submit("acct-high")]
    try:
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in ids), what="jobs running", timeout=60)
        a = act(slurm)
        js = a.cluster_jobs(("team-high", "team-low"))
        assert ids[0] not in js.ids.tolist() and ids[1] in js.ids.tolist()
        assert sorted(a.tenant(j) for j in a.jobs(job_ids=ids)) == ["@account:team-high", "team-high"]
    finally:
        subprocess.run(["scancel", *ids], env=env, capture_output=True)
        wait_for(lambda: all(state(slurm, j) == "" for j in ids), what="jobs gone", timeout=60)


def test_a_line_of_the_per_job_gpus_that_is_not_its_format_is_an_error():
    assert parse_job_gpus("7;N/A;gres:gpu:1;3;\n8;gres/gpu:a100:2;N/A;1;\n9;N/A;N/A;1;\n") == {"7": 3, "8": 2}
    for bad in ("7;N/A;gres:gpu:1;N/A;", "sbatch wrapper says hi", ";gres:gpu:1;N/A;1;"):
        with pytest.raises(SlurmError, match="squeue: line 1"):
            parse_job_gpus(bad)


def test_only_gpus_asked_for_the_whole_job_are_spread_over_its_nodes():
    """--gpus (tres-per-job) is what Slurm spreads one a node at least, not evenly (Jobs.spread); --gpus-per-task
    follows its tasks."""
    assert spread_jobs("7;N/A;gres:gpu:1;3;\n8;gres/gpu:a100:2;N/A;1;\n9;N/A;N/A;1;\n10;gres:gpu:6;N/A;4;\n") == \
        {"8", "10"}


def test_a_pending_job_that_free_gpus_would_not_start_is_not_demand(slurm, jobs):
    # held, waiting for its begin time, or for another job: Slurm would not start it on GPUs a preemption freed, so
    # it must drive no preemption (nor age): it is not in the jobs the policy reads. One waiting for GPUs still is
    a = act(slurm)
    opts = {"held": ["-H"], "later": ["--begin=now+3600"], "after": [f"--dependency=afterok:{jobs['high']}"]}
    ids = {}
    try:
        for k, extra in opts.items():
            r = subprocess.run(["sbatch", "--parsable", "--partition=high", "--account=acct-high", "--gres=gpu:2",
                                "-o", "/dev/null", *extra, "--wrap", "sleep 600"], env=slurm["env"],
                               capture_output=True, text=True, check=True)
            ids[k] = r.stdout.strip().split(";")[0]
        ids["gpus"] = sbatch(slurm, "high", "acct-high", gpus=8)   # 6 of 8 GPUs taken: waits for GPUs

        def reasons():
            out = subprocess.run(["squeue", "-h", "-o", "%i|%r"], env=slurm["env"], capture_output=True,
                                 text=True).stdout
            return dict(ln.split("|") for ln in out.splitlines())

        want = {"held": "JobHeldUser", "later": "BeginTime", "after": "Dependency"}
        wait_for(lambda: all(reasons().get(ids[k]) == v for k, v in want.items())
                 and reasons().get(ids["gpus"]) in ("Resources", "Priority"), what="pending reasons", timeout=60)
        js = a.cluster_jobs(("team-high", "team-low"))
        seen = set(js.ids)
        assert ids["gpus"] in seen and not {ids["held"], ids["later"], ids["after"]} & seen
        assert int(js.gpus[~js.running].sum()) == 8                # the pending demand now: the one waiting job
        # a requeued job waits under BeginTime for a couple of minutes: it stays the same demand (and keeps the wait
        # aging banked for it), with no wait counted until it is eligible
        subprocess.run(["scontrol", "requeue", jobs["low1"]], env=slurm["env"], capture_output=True, check=True)
        wait_for(lambda: reasons().get(jobs["low1"]) == "BeginTime", what="requeued under BeginTime", timeout=60)
        js = a.cluster_jobs(("team-high", "team-low"))
        i = list(js.ids).index(jobs["low1"])
        assert not js.running[i] and js.wait_s[i] == 0
    finally:
        subprocess.run(["scancel", *ids.values()], env=slurm["env"], capture_output=True)


def test_a_held_job_waits_from_its_release_not_its_submission(slurm, jobs):
    # held for a while, then released: it waited for GPUs only since the release, so that is its wait (aging
    # counts it; a hold must not let a job jump the queue). A job queued all along waits from its submission
    a = act(slurm)
    ids = []
    try:
        r = subprocess.run(["sbatch", "--parsable", "--partition=low", "--account=acct-low", "--gres=gpu:8", "-H",
                            "-o", "/dev/null", "--wrap", "sleep 600"], env=slurm["env"], capture_output=True,
                           text=True, check=True)
        held = r.stdout.strip().split(";")[0]
        ids.append(held)
        queued = sbatch(slurm, "low", "acct-low", gpus=8)
        ids.append(queued)
        time.sleep(6)
        subprocess.run(["scontrol", "release", held], env=slurm["env"], capture_output=True, check=True)
        wait_for(lambda: held in set(a.cluster_jobs(("team-high", "team-low")).ids), what="released", timeout=30)
        js = a.cluster_jobs(("team-high", "team-low"))
        w = dict(zip(js.ids, js.wait_s))
        assert w[queued] >= 5 and w[held] < 4, w
    finally:
        subprocess.run(["scancel", *ids], env=slurm["env"], capture_output=True)


def test_preempt_requeues_low_and_refuses_high(slurm, jobs):
    a = act(slurm)
    plan = plan_for(Preemption(jobs["low1"], "team-low", 2, slurm["node"], "peak ahead for team-high"),
                    Preemption(jobs["high"], "team-high", 2, slurm["node"], "bogus"))
    rep = a.apply(plan)
    assert any("refused to preempt" in e and jobs["high"] in e for e in rep.errors)
    wait_for(lambda: state(slurm, jobs["low1"]).startswith("PENDING"), what="requeued", timeout=20)
    assert admin_comment(slurm, jobs["low1"]) == "gpu-autoscaler: peak ahead for team-high"
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
    from daemon.config import FailoverConfig
    from daemon.failover import alerts

    names = act(slurm).node_names()
    assert names == {slurm["node"]}
    p = alerts.parse(('{"version":"4","status":"firing","receiver":"r","groupKey":"k","alerts":[{"status":"firing",'
                      '"labels":{"alertname":"GPUNodeDown","node":"gpunode[1-9]"},"startsAt":"x"}]}').encode())
    with pytest.raises(alerts.PayloadError, match="alerts.0.labels.node"):
        alerts.actions(p, FailoverConfig(), names.__contains__)


def test_warns_first_then_requeues_after_the_lead(slurm, tmp_path):
    flag = tmp_path / "usr1"
    # the batch script checkpoints on SIGUSR1 (here: writes a file) and keeps running; it says when its trap is set
    script = (f"trap 'echo checkpoint > {flag}' USR1; touch {tmp_path}/ready-$SLURM_JOB_ID; "
              "while true; do sleep 1; done")
    j1, j2 = sbatch(slurm, "low", "acct-low", wrap=script), sbatch(slurm, "low", "acct-low", wrap=script)
    try:
        wait_for(lambda: all((tmp_path / f"ready-{j}").exists() for j in (j1, j2)), what="trap set", timeout=60)
        now = [100.0]
        a = act(slurm, lead=30, clock=lambda: now[0])
        p = Preemption(j1, "team-low", 2, slurm["node"], "peak ahead for team-high")
        rep = a.apply(plan_for(p))
        assert rep.ok, rep.errors
        assert f"scancel --signal=USR1 --batch {j1}" in rep.actions
        (note,) = rep.notifications
        assert note.tenant == "team-low" and note.kind == "preempt_warning" and "in 30 s" in note.message
        wait_for(flag.exists, what="SIGUSR1 trapped by the batch script", timeout=30)
        assert state(slurm, j1).startswith("RUNNING")
        now[0] += 29
        # the next plan picks the other job: the warned one already covers the 2 GPUs, nobody else is warned
        rep = a.apply(plan_for(Preemption(j2, "team-low", 2, slurm["node"], "peak ahead for team-high")))
        assert not any("scancel" in x or "requeue" in x for x in rep.actions), rep.actions
        assert state(slurm, j1).startswith("RUNNING")
        now[0] += 1
        rep = a.apply(plan_for(p))                    # lead over: requeued now
        assert rep.ok and f"scontrol requeue {j1}" in rep.actions
        wait_for(lambda: state(slurm, j1).startswith("PENDING"), what="requeued after the lead", timeout=20)
        assert state(slurm, j2).startswith("RUNNING")
    finally:
        subprocess.run(["scancel", j1, j2], env=slurm["env"], capture_output=True)


def test_user_comment_is_never_overwritten(slurm):
    j = sbatch(slurm, "low", "acct-low", comment="my run: lr=3e-4")
    try:
        wait_for(lambda: state(slurm, j).startswith("RUNNING"), what="running", timeout=60)
        subprocess.run(["scontrol", "update", f"JobId={j}", "AdminComment=site: billing ok"], env=slurm["env"],
                       check=True)
        rep = act(slurm).apply(plan_for(Preemption(j, "team-low", 2, slurm["node"], "peak ahead")))
        assert rep.ok, rep.errors
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="requeued", timeout=20)
        assert state(slurm, j) == "PENDING|my run: lr=3e-4"
        assert admin_comment(slurm, j) == "site: billing ok | gpu-autoscaler: peak ahead"
        act(slurm).requeue([j], "node gpunode1 failed")   # ours is replaced, the site's kept
        assert admin_comment(slurm, j) == "site: billing ok | gpu-autoscaler: node gpunode1 failed"
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_min_runtime_protects_a_job_that_just_started(slurm):
    j = sbatch(slurm, "low", "acct-low")
    try:
        wait_for(lambda: state(slurm, j).startswith("RUNNING"), what="running", timeout=60)
        p = Preemption(j, "team-low", 2, slurm["node"], "x")
        rep = act(slurm, min_runtime_s=3600).apply(plan_for(p))
        assert rep.ok and any("policy.preempt_min_runtime_s" in x for x in rep.actions)
        time.sleep(2)
        assert state(slurm, j).startswith("RUNNING")
        time.sleep(1)  # squeue's elapsed time is whole seconds
        assert act(slurm, min_runtime_s=1).apply(plan_for(p)).ok
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="requeued once old enough", timeout=20)
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_a_replica_leading_again_warns_afresh_not_on_its_warning_of_an_earlier_term(slurm, tmp_path, r, redis_url):
    """HA with a real redis-server lease: a warns a job (SIGUSR1: the job checkpoints), is paused past its lease; b
    leads and preempts nothing, then dies; a leads again an hour later and its plan names the job again. Before, a
    requeued it at once on its hour-old warning (an hour of work since the checkpoint lost); now it warns again and
    requeues only after the lead."""
    import redis

    from daemon.ha.fencing import FencedActuator
    from daemon.ha.lease import RedisLease

    now = [100.0]

    def replica(name):
        lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
        return lease, FencedActuator(act(slurm, lead=30, clock=lambda: now[0]), lease)

    flag = tmp_path / "usr1"
    script = (f"trap 'echo checkpoint >> {flag}' USR1; touch {tmp_path}/ready-$SLURM_JOB_ID; "
              "while true; do sleep 1; done")
    j = sbatch(slurm, "low", "acct-low", wrap=script)
    try:
        wait_for(lambda: (tmp_path / f"ready-{j}").exists(), what="trap set", timeout=60)
        p = plan_for(Preemption(j, "team-low", 2, slurm["node"], "peak ahead for team-high"))
        lease_a, a = replica("a")
        assert lease_a.tick() and lease_a.token == 1
        rep = a.apply(p)
        assert rep.ok and f"scancel --signal=USR1 --batch {j}" in rep.actions, (rep.actions, rep.errors)
        wait_for(lambda: flag.exists() and flag.read_text().count("checkpoint") == 1, what="first warning trapped",
                 timeout=30)
        r.delete("gpuas:leader")                                # a paused past its lease
        assert not lease_a.tick()
        lease_b, b = replica("b")
        assert lease_b.tick() and lease_b.token == 2
        assert b.apply(plan_for()).ok                           # b's plans spare the job
        r.delete("gpuas:leader")                                # b dies
        now[0] += 3600
        assert lease_a.tick() and lease_a.token == 3            # a leads again, an hour on
        rep = a.apply(p)
        assert rep.ok, rep.errors
        assert f"scontrol requeue {j}" not in rep.actions, "requeued on a warning of an earlier term"
        assert f"scancel --signal=USR1 --batch {j}" in rep.actions, rep.actions
        wait_for(lambda: flag.read_text().count("checkpoint") == 2, what="second warning trapped", timeout=30)
        assert state(slurm, j).startswith("RUNNING")
        now[0] += 30
        rep = a.apply(p)                                        # the new lead over: requeued now
        assert rep.ok and f"scontrol requeue {j}" in rep.actions, (rep.actions, rep.errors)
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_the_warning_signal_kills_a_script_that_does_not_trap_it(slurm):
    """Why warnings are off by default: SIGUSR1's default action ends the batch script, and the job with it."""
    j = sbatch(slurm, "low", "acct-low", wrap="sleep 600")
    try:
        wait_for(lambda: state(slurm, j).startswith("RUNNING"), what="running", timeout=60)
        time.sleep(2)  # the script is running
        rep = act(slurm, lead=30).apply(plan_for(Preemption(j, "team-low", 2, slurm["node"], "x")))
        assert rep.ok and any("scancel --signal=USR1" in x for x in rep.actions)
        wait_for(lambda: not state(slurm, j).startswith("RUNNING"), what="job ended by the signal", timeout=20)
        assert not state(slurm, j).startswith("PENDING")   # gone, not requeued
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_a_failed_requeue_after_the_warning_is_retried_without_a_second_warning(slurm, tmp_path):
    """The real scontrol behind a wrapper that refuses `scontrol requeue` while a flag file exists."""
    bin_dir, fail = requeue_refusing_bin(tmp_path)
    script = (f"trap 'echo checkpoint >> {tmp_path}/usr1' USR1; touch {tmp_path}/ready-$SLURM_JOB_ID; "
              "while true; do sleep 1; done")
    j = sbatch(slurm, "low", "acct-low", wrap=script)
    try:
        wait_for(lambda: (tmp_path / f"ready-{j}").exists(), what="trap set", timeout=60)
        now = [100.0]
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, warn_lead_s=30, holds=False),
                          [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], dry_run=False,
                          clock=lambda: now[0])
        p = plan_for(Preemption(j, "team-low", 2, slurm["node"], "peak ahead"))
        assert a.apply(p).ok
        wait_for(lambda: (tmp_path / "usr1").exists(), what="warning trapped", timeout=30)
        fail.touch()
        now[0] += 30
        rep = a.apply(p)
        assert any("injected: requeue refused" in e for e in rep.errors), rep.errors     # reported per action
        assert state(slurm, j).startswith("RUNNING")
        fail.unlink()
        now[0] += 1
        rep = a.apply(p)                                  # retried: requeued now, not warned again
        assert rep.ok and f"scontrol requeue {j}" in rep.actions, rep
        assert not any(x.startswith("scancel") for x in rep.actions)
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="requeued", timeout=20)
        assert (tmp_path / "usr1").read_text().count("checkpoint") == 1
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_a_failed_node_failure_requeue_is_retried_by_the_next_cycle(slurm, tmp_path):
    bin_dir, fail = requeue_refusing_bin(tmp_path)
    j = sbatch(slurm, "low", "acct-low")
    try:
        wait_for(lambda: state(slurm, j).startswith("RUNNING"), what="running", timeout=60)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, holds=False),
                          [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], dry_run=False)
        # a node that was reported down but is healthy: the failed requeue is not retried, the job runs on
        fail.touch()
        assert not a.requeue([j], "node gpunode1 failed (GPUNodeDown)").ok
        fail.unlink()
        rep = a.apply(plan_for())
        assert rep.ok and not any("requeue" in x for x in rep.actions), rep.actions
        assert state(slurm, j).startswith("RUNNING")
        # the node is drained (the failover fences it): the requeue is retried until slurmctld takes it
        fail.touch()
        rep = a.requeue([j], "node gpunode1 failed (GPUNodeDown)")
        assert any("injected: requeue refused" in e for e in rep.errors), rep.errors
        subprocess.run(["scontrol", "update", f"NodeName={slurm['node']}", "State=DRAIN", "Reason=test"],
                       env=slurm["env"], check=True)
        assert state(slurm, j).startswith("RUNNING")
        rep = a.apply(plan_for())                         # slurmctld still refuses: reported, kept
        assert any("injected" in e for e in rep.errors) and state(slurm, j).startswith("RUNNING")
        fail.unlink()
        rep = a.apply(plan_for())
        assert rep.ok and f"scontrol requeue {j}" in rep.actions, rep
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="requeued by the retry", timeout=20)
        assert not any("requeue" in x for x in a.apply(plan_for()).actions)   # done: not again
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)
        subprocess.run(["scontrol", "update", f"NodeName={slurm['node']}", "State=RESUME"], env=slurm["env"],
                       capture_output=True)


def test_a_failed_requeue_added_while_a_retry_pass_waits_on_slurm_is_not_lost(slurm, tmp_path):
    """The failover worker adds to the retry map while a cycle's retry pass waits on squeue (a wrapper holds
    that squeue until the test has added): the pass removes only what it handled, the new job is retried next."""
    import threading

    bin_dir, fail = requeue_refusing_bin(tmp_path)
    pause, entered = tmp_path / "pause", tmp_path / "entered"
    (bin_dir / "squeue").unlink()
    (bin_dir / "squeue").write_text(
        f'#!/bin/sh\nif [ "$1" = -h ] && [ -e {pause} ]; then touch {entered}; '
        f'while [ -e {pause} ]; do sleep 0.05; done; fi\nexec /usr/bin/squeue "$@"\n')
    (bin_dir / "squeue").chmod(0o755)
    j1, j2 = sbatch(slurm, "low", "acct-low"), sbatch(slurm, "low", "acct-low")
    node = slurm["node"]
    try:
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in (j1, j2)), what="running", timeout=60)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, holds=False),
                          [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], dry_run=False)
        fail.touch()
        assert not a.requeue([j1], f"node {node} failed (GPUNodeDown)").ok
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=test"], env=slurm["env"],
                       check=True)
        fail.unlink()
        pause.touch()
        cycle = threading.Thread(target=lambda: out.append(a.apply(plan_for())))
        out = []
        cycle.start()
        wait_for(entered.exists, what="the retry pass waiting on squeue", timeout=20)
        fail.touch()                                       # meanwhile the failover worker's requeue fails too
        assert not a.requeue([j2], f"node {node} failed (GPUNodeDown)").ok
        fail.unlink()
        pause.unlink()
        cycle.join(30)
        assert out[0].ok and f"scontrol requeue {j1}" in out[0].actions, out[0]
        rep = a.apply(plan_for())                          # j2 was not lost: this cycle requeues it
        assert rep.ok and f"scontrol requeue {j2}" in rep.actions, rep
        wait_for(lambda: all(state(slurm, j).startswith("PENDING") for j in (j1, j2)), what="both requeued",
                 timeout=20)
    finally:
        for p in (pause, fail):
            p.unlink(missing_ok=True)
        subprocess.run(["scancel", j1, j2], env=slurm["env"], capture_output=True)
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=slurm["env"],
                       capture_output=True)


@pytest.mark.security
def test_a_job_name_or_comment_cannot_spoof_the_admin_comment(slurm):
    """`scontrol show job` prints the job's name and Comment as free text beside AdminComment; a job named
    `x AdminComment=evil` must not make the daemon write `evil` back as the site's AdminComment."""
    def spoofing(comment):
        r = subprocess.run(["sbatch", "--parsable", "--partition=low", "--account=acct-low", "--gres=gpu:1",
                            "--requeue", "-o", "/dev/null", "--job-name=x AdminComment=evil", f"--comment={comment}",
                            "--wrap", "sleep 600"], env=slurm["env"], capture_output=True, text=True, check=True)
        return r.stdout.strip()

    site, bare = spoofing("mine AdminComment=bad Foo=bar"), spoofing("AdminComment=bad")
    try:
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in (site, bare)), what="running", timeout=60)
        subprocess.run(["scontrol", "update", f"JobId={site}", "AdminComment=site: billing ok"], env=slurm["env"],
                       check=True)
        rep = act(slurm).apply(plan_for(*(Preemption(j, "team-low", 1, slurm["node"], "peak ahead")
                                          for j in (site, bare))))
        assert rep.ok, rep.errors
        assert admin_comment(slurm, site) == "site: billing ok | gpu-autoscaler: peak ahead"
        assert admin_comment(slurm, bare) == "gpu-autoscaler: peak ahead"
        # a requeued job passes through COMPLETING before PENDING (seen under CI's load)
        wait_for(lambda: state(slurm, site).startswith("PENDING"), what="requeued", timeout=30)
        assert state(slurm, site) == "PENDING|mine AdminComment=bad Foo=bar"      # the user's Comment untouched
        act(slurm).requeue([site], "node gpunode1 failed")                        # ours replaced, the site's kept
        assert admin_comment(slurm, site) == "site: billing ok | gpu-autoscaler: node gpunode1 failed"
    finally:
        subprocess.run(["scancel", site, bare], env=slurm["env"], capture_output=True)



def test_a_job_requeued_and_running_again_under_its_id_is_not_reclaimed_for_its_earlier_run(slurm):
    """Issue 36, on the real slurmctld: the health reclaim re-reads the job right before the requeue. A job
    someone else requeued after the cycle read it runs again under the same id and submit time, with a new start
    time (Slurm starts a requeued job after its BeginTime, about two minutes): it is not the run the decision was
    about, so it is left alone; read again by the next cycle, it is the job read and is requeued."""
    jid = sbatch(slurm, "low", "acct-low", gpus=1)
    try:
        wait_for(lambda: state(slurm, jid).startswith("RUNNING"), what="job running", timeout=60)
        a = act(slurm)
        a.cluster_jobs(("team-high", "team-low"))
        subprocess.run(["scontrol", "requeue", jid], env=slurm["env"], check=True, capture_output=True)
        wait_for(lambda: state(slurm, jid).startswith("PENDING"), what="job requeued", timeout=60)
        wait_for(lambda: state(slurm, jid).startswith("RUNNING"), what="job running again", timeout=240)
        rep = a.reclaim([jid], "health: idle")
        assert rep.ok and not any(x.startswith("scontrol requeue") for x in rep.actions), rep.actions
        assert any("not the job the cycle read" in x for x in rep.actions) and state(slurm, jid).startswith("RUNNING")
        a.cluster_jobs(("team-high", "team-low"))
        rep = a.reclaim([jid], "health: idle")
        assert rep.ok and f"scontrol requeue {jid}" in rep.actions, (rep.actions, rep.errors)
    finally:
        subprocess.run(["scancel", jid], env=slurm["env"], capture_output=True)
        wait_for(lambda: state(slurm, jid) == "", what="job gone", timeout=60)


MADE = 1767607200.0   # 2026-01-05T10:00:00Z
ETA_RE = r"( slurm=\d{4}-\d\d-\d\dT\d\d:\d\dZ)?"


def test_a_pending_jobs_start_estimate_is_in_its_admin_comment_beside_the_sites(slurm, jobs):
    """show_eta on the real slurmctld: the estimate's part is written beside the site's AdminComment (with
    squeue --start's own when the backfill scheduler gave one), not rewritten while it moves under 5 minutes,
    replaced in place when it moves, kept when a reason is written after it."""
    a = act(slurm)
    j = sbatch(slurm, "high", "acct-high", gpus=8)            # 6 of 8 GPUs taken: it waits
    try:
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="pending", timeout=60)
        subprocess.run(["scontrol", "update", f"JobId={j}", "AdminComment=site: billing ok"], env=slurm["env"],
                       check=True)
        rep = a.show_eta([{"job_id": j, "p50_s": 600.0, "p90_s": None}], MADE)
        assert rep.ok, rep.errors
        assert re.fullmatch(r"site: billing ok \| gpu-autoscaler-eta: p50=2026-01-05T10:10Z p90=unknown" + ETA_RE,
                            admin_comment(slurm, j))
        assert a.show_eta([{"job_id": j, "p50_s": 840.0, "p90_s": None}], MADE).actions == []   # moved 4 min
        rep = a.show_eta([{"job_id": j, "p50_s": 1200.0, "p90_s": 3000.0}], MADE)
        assert rep.ok and len(rep.actions) == 1, rep.errors
        assert re.fullmatch(r"site: billing ok \| gpu-autoscaler-eta: p50=2026-01-05T10:20Z p90=2026-01-05T10:50Z"
                            + ETA_RE, admin_comment(slurm, j))
        assert a.comment([j], "health: a note").ok
        assert re.fullmatch(r"site: billing ok \| gpu-autoscaler-eta: p50=2026-01-05T10:20Z p90=2026-01-05T10:50Z"
                            + ETA_RE + r" \| gpu-autoscaler: health: a note", admin_comment(slurm, j))
        rep = a.show_eta([{"job_id": j, "p50_s": None, "p90_s": None}], MADE)
        assert rep.ok, rep.errors
        assert re.fullmatch(r"site: billing ok \| gpu-autoscaler-eta: p50=unknown p90=unknown" + ETA_RE
                            + r" \| gpu-autoscaler: health: a note", admin_comment(slurm, j))
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_a_replica_leading_again_rewrites_the_start_estimate_another_leader_changed(slurm, jobs, r, redis_url):
    """HA with a real redis-server lease: a writes a pending job's estimate (p50 10:10), is paused past its lease;
    b leads and writes 10:30, then dies; a leads again and plans 10:10. Before, a skipped the write (its record
    said 10:10, within 5 minutes of its plan) and the comment went on showing b's stale 10:30."""
    import redis

    from daemon.ha.fencing import FencedActuator
    from daemon.ha.lease import RedisLease

    def replica(name):
        lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
        return lease, FencedActuator(act(slurm), lease)

    def shown():
        return re.search(r"p50=(\S+)", admin_comment(slurm, j)).group(1)

    j = sbatch(slurm, "high", "acct-high", gpus=8)            # 6 of 8 GPUs taken: it waits
    try:
        wait_for(lambda: state(slurm, j).startswith("PENDING"), what="pending", timeout=60)
        lease_a, a = replica("a")
        assert lease_a.tick() and lease_a.token == 1
        rep = a.show_eta([{"job_id": j, "p50_s": 600.0, "p90_s": None}], MADE)
        assert rep.ok and rep.actions, rep.errors
        assert shown() == "2026-01-05T10:10Z"
        r.delete("gpuas:leader")                               # a paused past its lease (its key lapsed)
        assert not lease_a.tick()
        lease_b, b = replica("b")
        assert lease_b.tick() and lease_b.token == 2
        rep = b.show_eta([{"job_id": j, "p50_s": 1800.0, "p90_s": None}], MADE)
        assert rep.ok and rep.actions, rep.errors
        assert shown() == "2026-01-05T10:30Z"
        r.delete("gpuas:leader")                               # b dies
        assert lease_a.tick() and lease_a.token == 3           # a leads again
        rep = a.show_eta([{"job_id": j, "p50_s": 600.0, "p90_s": None}], MADE)
        assert rep.ok, rep.errors
        assert shown() == "2026-01-05T10:10Z", "the other leader's estimate stayed"
        assert {e["token"] for e in lease_a.ledger() if e["holder"] == "a"} == {1, 3}   # every write fenced
    finally:
        subprocess.run(["scancel", j], env=slurm["env"], capture_output=True)


def test_a_running_jobs_time_limit_moves_a_pending_jobs_start_estimate(slurm):
    """The Slurm source reads each running job's TimeLimit (%l) beside its elapsed time (%M) into the Jobs it gives
    the policy, and the estimate ends the job by it: on the real slurmctld, an 8-GPU job waiting behind one running
    with a 10-minute limit is estimated to start when that limit runs out (no run-length history yet), and raising
    the limit to 30 minutes moves the estimate 20 minutes later."""
    from prometheus_client import CollectorRegistry

    from daemon.policy.state import ClusterState
    from daemon.service.eta import EtaTracker

    tenants, a = ("team-high", "team-low"), act(slurm, dry_run=True)

    def eta_of(jid):
        jobs, nodes = a.cluster_jobs(tenants), a.cluster_nodes(tenants)
        used = np.array([float(jobs.gpus[jobs.running & (jobs.tenant == i)].sum()) for i in range(2)])
        pending = np.array([float(jobs.gpus[~jobs.running & (jobs.tenant == i)].sum()) for i in range(2)])
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("high", "low"),
                          capacity=int(nodes.gpus.sum()), used=used, pending=pending, jobs=jobs, nodes=nodes)
        rows = EtaTracker(CollectorRegistry(), time.time).update(st, None, None)["jobs"]
        return next(r for r in rows if r["job_id"] == jid), dict(zip(jobs.ids, jobs.runtime_s))

    run = subprocess.run(["sbatch", "--parsable", "--partition=low", "--account=acct-low", "--gres=gpu:8",
                          "--time=10", "-o", "/dev/null", "--wrap", "sleep 600"], env=slurm["env"],
                         capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    wait = ""
    try:
        wait_for(lambda: state(slurm, run).startswith("RUNNING"), what="limited job running", timeout=60)
        wait = sbatch(slurm, "low", "acct-low", gpus=8)
        wait_for(lambda: state(slurm, wait).startswith("PENDING"), what="pending", timeout=60)
        first, elapsed = eta_of(wait)
        assert first["p50_s"] is not None and "time limit" in first["basis"], first
        assert first["p50_s"] == pytest.approx(600.0 - elapsed[run], abs=5.0), (first, elapsed)
        subprocess.run(["scontrol", "update", f"JobId={run}", "TimeLimit=30"], env=slurm["env"], check=True)
        later, elapsed = eta_of(wait)
        assert later["p50_s"] == pytest.approx(1800.0 - elapsed[run], abs=5.0), (later, elapsed)
        assert later["p50_s"] - first["p50_s"] > 1100.0
    finally:
        subprocess.run(["scancel", run, *([wait] if wait else [])], env=slurm["env"], capture_output=True)


def test_a_tenants_account_is_matched_as_slurm_spells_it(slurm):
    """Slurm's account names are case-insensitive and it prints them lower-case (sbatch --account=Team-Big runs
    under 'team-big'). A tenant named Team-Big (its account by default its name) or with slurm_account 'Acct-Big'
    matched none of its jobs: its work was nobody's, its pending GPUs no demand, nothing held or preempted for it,
    silently. Now the accounts are compared as Slurm spells them."""
    env = slurm["env"]

    def submit(account):
        return subprocess.run(["sbatch", "--parsable", "--partition=low", f"--account={account}", "--gres=gpu:1",
                               "-o", "/dev/null", "--wrap", "sleep 600"], env=env, capture_output=True, text=True,
                              check=True).stdout.strip().split(";")[0]
    ids = [submit("Team-Big"), submit("Acct-Big")]
    try:
        wait_for(lambda: all(state(slurm, j).startswith("RUNNING") for j in ids), what="jobs running", timeout=60)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin"),
                          [TenantConfig(name="Team-Big", tier="high"),
                           TenantConfig(name="team-other", tier="low", slurm_account="Acct-Big")])
        js = a.cluster_jobs(("Team-Big", "team-other"))
        assert dict(zip(js.ids.tolist(), js.tenant.tolist())) == {ids[0]: 0, ids[1]: 1}
        assert [a.tenant(j) for j in a.jobs(job_ids=ids)] == ["Team-Big", "team-other"]
    finally:
        subprocess.run(["scancel", *ids], env=env, capture_output=True)
        wait_for(lambda: all(state(slurm, j) == "" for j in ids), what="jobs gone", timeout=60)


def test_a_component_of_a_heterogeneous_job_is_preempted_by_its_jobs_id():
    """A low tenant's hetjob (sbatch ... : ...) runs as 123+0 and 123+1 (on gn1 and gn2), each a job to the view.
    slurmctld refuses a requeue of one component ('Invalid job id specified'; a suspend: 'Operation not permitted on
    individual component of heterogeneous job'), so the plan's preemption of 123+1 failed every cycle and the
    tenant's work was never preempted. Now the requeue names the hetjob (123), which requeues every component."""
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4) as s:
        part = ["--partition=low", "--account=acct-low", "--gres=gpu:1", "-o", "/dev/null"]
        r = subprocess.run(["sbatch", "--parsable", *part, "-w", "gn1", "--requeue", "--wrap", "sleep 600", ":",
                            *part, "-w", "gn2"], env=s["env"], capture_output=True, text=True, check=True)
        het = r.stdout.strip().split(";")[0]
        wait_for(lambda: state(s, f"{het}+1").count("RUNNING") == 2, what="hetjob running", timeout=60)
        rep = act(s).apply(plan_for(Preemption(f"{het}+1", "team-low", 1, "gn2", "peak ahead for team-high")))
        assert not rep.errors, rep.errors
        assert f"scontrol requeue {het}" in rep.actions, rep.actions
        wait_for(lambda: "RUNNING" not in state(s, het), what="both components requeued", timeout=30)


def test_a_heterogeneous_job_with_a_component_above_low_is_never_preempted_for_its_low_one():
    """Each component of a hetjob has its own partition, QOS and account (Slurm's heterogeneous_jobs page), and a
    component is requeued with every other (whole_job). Read at its own tier, the low component of a hetjob whose
    other component runs in partition high (under another tenant's account here) was a low job: the plan's
    preemption of it requeued the high component too. Now each component is read at its job's highest tier (at
    least normal across accounts): the view does not offer it, and a plan that names it is refused."""
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4) as s:
        hi = ["--partition=high", "--account=acct-high", "--gres=gpu:1", "-o", "/dev/null"]
        lo = ["--partition=low", "--account=acct-low", "--gres=gpu:1", "-o", "/dev/null"]
        r = subprocess.run(["sbatch", "--parsable", *hi, "-w", "gn1", "--requeue", "--wrap", "sleep 600", ":",
                            *lo, "-w", "gn2"], env=s["env"], capture_output=True, text=True, check=True)
        het = r.stdout.strip().split(";")[0]
        wait_for(lambda: state(s, f"{het}+1").count("RUNNING") == 2, what="hetjob running", timeout=60)
        js = act(s).cluster_jobs(("team-high", "team-low"))
        tiers = dict(zip(js.ids.tolist(), js.priority.tolist()))
        assert tiers == {f"{het}+0": PRIORITY["high"], f"{het}+1": PRIORITY["high"]}, tiers
        rep = act(s).apply(plan_for(Preemption(f"{het}+1", "team-low", 1, "gn2", "peak ahead for team-high")))
        assert f"scontrol requeue {het}" not in rep.actions, rep.actions
        assert any(f"refused to preempt {het}+1: priority high" in e for e in rep.errors), rep.errors
        assert state(s, het).count("RUNNING") == 2


def test_a_cycle_writes_at_most_max_eta_writes_estimates_and_each_account_gets_its_turn(slurm):
    """On the real slurmctld: one account's 300 pending jobs beside another's 3, max_eta_writes 50. The first
    cycle writes 50, the other account's 3 among them (before, all 303 were updated in one cycle, the other's after
    the flood's); the flood's rest follow, 50 a cycle, each job once, and then nothing is rewritten."""
    cfg = SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", max_eta_writes=50)
    a = SlurmActuator(cfg, [TenantConfig(name="flood", tier="low", slurm_account="acct-flood"),
                            TenantConfig(name="other", tier="low", slurm_account="acct-other")], dry_run=False)

    def submit(account, n):   # held: pending whatever the GPUs, in one shell (300 sbatch from Python took long)
        out = subprocess.run(["sh", "-c", f'for i in $(seq {n}); do sbatch --parsable -H --partition=low '
                              f'--account={account} --gres=gpu:1 -o /dev/null --wrap "sleep 600" || exit 1; done'],
                             env=slurm["env"], capture_output=True, text=True, check=True).stdout
        return [line.split(";")[0] for line in out.split()]

    flood, other = submit("acct-flood", 300), submit("acct-other", 3)
    try:
        assert len(flood) == 300 and len(other) == 3
        rows = [{"job_id": j, "p50_s": 600.0, "p90_s": None} for j in flood + other]

        def with_eta():   # of these jobs (squeue --json lists the earlier tests' ended jobs too)
            out = subprocess.run(["squeue", "--json"], env=slurm["env"], capture_output=True, text=True,
                                 check=True).stdout
            return {str(j["job_id"]) for j in json.loads(out)["jobs"] if str(j["job_id"]) in set(flood + other)
                    and "gpu-autoscaler-eta: p50=2026-01-05T10:10Z" in (j.get("admin_comment") or "")}

        rep = a.show_eta(rows, MADE)
        assert rep.ok and len(rep.actions) == 50, (len(rep.actions), rep.errors[:3])
        shown = with_eta()
        assert set(other) <= shown and len(shown) == 50
        sent = [act.split()[2] for act in rep.actions]
        for _ in range(6):   # 253 left: 50 a cycle
            rep = a.show_eta(rows, MADE)
            assert rep.ok and 0 < len(rep.actions) <= 50, rep.errors[:3]
            sent += [act.split()[2] for act in rep.actions]
        assert sorted(sent) == sorted(f"JobId={j}" for j in flood + other)   # each once
        assert with_eta() == set(flood + other)
        assert a.show_eta(rows, MADE).actions == []
    finally:
        subprocess.run(["scancel", *flood, *other], env=slurm["env"], capture_output=True)
