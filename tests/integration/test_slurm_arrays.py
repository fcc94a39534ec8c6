"""A tenant's job arrays and jobs asking several GPU types, as the Slurm actuator's view reads them, on a real
slurmctld: squeue prints a pending array as one line (``1_[3-10%3]``), and a job may ask two types at once."""

import subprocess
import time

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.config.fleet import FleetConfig
from tests.support.services import slurm_cluster, wait_for

pytestmark = pytest.mark.services

TENANTS = ("team-high", "team-low")


def submit(s, *args, account="acct-low", partition="low"):
    return subprocess.run(["sbatch", "--parsable", f"--partition={partition}", f"--account={account}", *args,
                           "-o", "/dev/null", "--wrap", "sleep 600"], env=s["env"], capture_output=True,
                          text=True, check=True).stdout.strip().split(";")[0]


def act(s, fleet=None, dry_run=True, **cfg):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", **cfg),
                         [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
                          TenantConfig(name="team-low", tier="low", slurm_account="acct-low")], fleet=fleet,
                         dry_run=dry_run)


def states(s):
    out = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%r"], env=s["env"], capture_output=True,
                         text=True).stdout
    return {ln.split("|")[0]: ln.split("|")[1:] for ln in out.splitlines() if ln.strip()}



def _first_task_running(s, array: str) -> str:
    """A high-tier job on 3 of gn1's 4 GPUs, then a pending array (`array`) of one a100 each whose first task runs on
    the fourth; the array's id."""
    high = submit(s, "--gres=gpu:a100:3", account="acct-high", partition="high")
    wait_for(lambda: states(s).get(high, [""])[0] == "RUNNING", what="high job running", timeout=60)
    a = submit(s, array, "--gres=gpu:a100:1")
    wait_for(lambda: states(s).get(f"{a}_1", [""])[0] == "RUNNING", what="task 1 running", timeout=60)
    return a

def test_every_pending_task_of_an_array_is_demand_up_to_its_throttle():
    """gn1 (a100:4): a high job takes 3 GPUs; a low tenant's --array=1-6%2 of a100:1 runs task 1 on the last GPU,
    then --array=1-10 of a100:1 and --array=1-8%3 of a100:2 wait. squeue prints each pending array as one line
    (2_[2-6%2]), read as one job of one task's GPUs: the tenant's demand 1 + 1 + 2 GPUs where 10 + 10 + 16 wait,
    and the arrays' tasks (squeue -O's JobID, not %i's id) accepted any type. Now each pending task is a job
    (squeue -r), up to what Slurm starts at once: of a %N array, N less its tasks running (the others wait for the
    array's own tasks to end, as Slurm says once N run: JobArrayTaskLimit, not for GPUs): 1 task of the first,
    10 of the second, 3 of the third (6 GPUs)."""
    with slurm_cluster(nodes=("gn1",), gpus=4, gres_types={"gn1": "a100"}) as s:
        a = _first_task_running(s, "--array=1-6%2")
        b = submit(s, "--array=1-10", "--gres=gpu:a100:1")
        c = submit(s, "--array=1-8%3", "--gres=gpu:a100:2")
        time.sleep(2)
        js = act(s, FleetConfig(types=["a100"])).cluster_jobs(TENANTS)
        pending = {}
        for jid, g, run, acc in zip(js.ids, js.gpus.tolist(), js.running, js.accepts):
            if not run:
                arr = jid.split("_")[0]
                pending[arr] = pending.get(arr, 0) + g
                assert acc == ("a100",), (jid, acc)
        assert pending == {a: 1, b: 10, c: 6}, (pending, states(s))
        assert dict(zip(js.ids, js.accepts))[f"{a}_1"] == ("a100",)


def test_a_job_asking_two_gpu_types_at_once_needs_a_node_with_both():
    """--gres=gpu:a100:1,gpu:t4:1, --gpus=a100:1,t4:1 and --gpus-per-node=a100:1,t4:1 run only on a node that has
    both types (slurmctld refuses them at sbatch where none has: 'Requested node configuration is not available';
    --gpus=a100:2,t4:4 -N2 too, though gn1 and gn2 together have them). job_types read each as accepting either:
    on gn1 (a100) + gn2 (t4) + gn3 (a100:3 and t4:3) the plan held for them, and made room for them, on gn1 or gn2,
    which cannot start them. Now they accept gn3's type (a100: its GRES type with the most GPUs, a tie taken
    alphabetically), and a plain a100 job a100 as before."""
    with slurm_cluster(nodes=("gn1", "gn2", "gn3"), gpus=6,
                       gres_types={"gn1": "a100", "gn2": "t4", "gn3": "a100+t4"}) as s:
        ids = [submit(s, "--gres=gpu:a100:1,gpu:t4:1"), submit(s, "--gpus=a100:1,t4:1"),
               submit(s, "--gpus-per-node=a100:1,t4:1"), submit(s, "--gres=gpu:t4:1", "-w", "gn2")]
        wait_for(lambda: all(states(s).get(j, [""])[0] == "RUNNING" for j in ids), what="jobs running", timeout=60)
        where = subprocess.run(["squeue", "-h", "-o", "%i %N"], env=s["env"], capture_output=True, text=True).stdout
        assert {ln.split()[0]: ln.split()[1] for ln in where.splitlines()} == dict(zip(ids, ["gn3"] * 3 + ["gn2"]))
        got = act(s, FleetConfig(types=["a100", "t4"])).job_types()
        assert [got[j] for j in ids] == [("a100",), ("a100",), ("a100",), ("t4",)], got


def test_a_job_asking_two_gpu_types_no_node_has_together_never_starts_and_is_no_demand(caplog):
    """On gn1 (a100) + gn2 (t4) sbatch refuses --gres=gpu:a100:1,gpu:t4:1; a tenant's held job updated to it
    (scontrol update, its own job) stays pending (BadConstraints once slurmctld looks at it). job_types read it as
    accepting either type; now None: it never starts, and it is no demand whatever its reason says, said once."""
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4, gres_types={"gn1": "a100", "gn2": "t4"}) as s:
        refused = subprocess.run(["sbatch", "--partition=low", "--account=acct-low", "--gres=gpu:a100:1,gpu:t4:1",
                                  "-o", "/dev/null", "--wrap", "sleep 600"], env=s["env"], capture_output=True,
                                 text=True)
        assert refused.returncode != 0 and "node configuration is not available" in refused.stderr
        jid = submit(s, "--gres=gpu:a100:1", "--hold")
        subprocess.run(["scontrol", "update", f"jobid={jid}", "gres=gpu:a100:1,gpu:t4:1"], env=s["env"],
                       check=True, capture_output=True)
        subprocess.run(["scontrol", "release", jid], env=s["env"], check=True, capture_output=True)
        a = act(s, FleetConfig(types=["a100", "t4"]))
        assert a.job_types()[jid] is None
        js = a.cluster_jobs(TENANTS)
        assert jid not in list(js.ids)
        a.cluster_jobs(TENANTS)
        assert sum(f"job {jid} asks several GPU types" in r.getMessage() for r in caplog.records) == 1


def test_a_tenants_huge_array_is_read_per_record_and_at_most_the_bound_of_its_tasks(caplog):
    """squeue -r prints every task of an array a line: a tenant's --array=0-999999 (MaxArraySize goes to 4,000,001)
    was 119 MB from each of the view's squeue reads (4.7 s of squeue, 33 s of parsing per read at 10^6 tasks), past
    the command timeout from about 2*10^6 tasks: one tenant's array stalled, then failed, every tenant's view. Now the
    reads list an array's pending tasks as its one record (1_[1-999]) and the view makes jobs of a tenant's first
    actuators.slurm.max_array_tasks of them (here 100, of a 1000-task array on this slurmctld's MaxArraySize), lowest
    ids first, saying once how many it left out; another tenant's array is read whole."""
    import logging
    with slurm_cluster(nodes=("gn1",), gpus=4, gres_types={"gn1": "a100"}) as s:
        big = submit(s, "--array=0-999", "--gres=gpu:a100:4", account="acct-high", partition="high")
        wait_for(lambda: states(s).get(f"{big}_0", [""])[0] == "RUNNING", what="task 0 running", timeout=60)
        small = submit(s, "--array=1-5", "--gres=gpu:a100:1")
        time.sleep(2)
        a = act(s, FleetConfig(types=["a100"]), max_array_tasks=100)
        lines = []
        run = a._run

        def counted(*args):
            r = run(*args)
            if args[0] == "squeue" and "--json" not in args:   # (--json: a record each, pretty-printed)
                lines.append(r.stdout.count("\n"))
            return r

        a._run = counted
        with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.actuator.slurm"):
            js = a.cluster_jobs(TENANTS)
        pending = {}
        for jid, run_, acc in zip(js.ids, js.running, js.accepts):
            if not run_:
                pending.setdefault(jid.split("_")[0], []).append(int(jid.split("_")[1]))
                assert acc == ("a100",), (jid, acc)
        assert pending == {big: list(range(1, 101)), small: [1, 2, 3, 4, 5]}, {k: len(v) for k, v in pending.items()}
        assert sum(lines) < 20, lines      # every squeue read: a line per record, not per task (old: 3000 and more)
        assert f"job array {big}_[1-999]: 899 of its pending tasks are not read" in caplog.text
        assert "actuators.slurm.max_array_tasks" in caplog.text
        wide = act(s, FleetConfig(types=["a100"]), max_array_tasks=2000).cluster_jobs(TENANTS)   # a bigger cluster's
        assert sum(1 for j, r in zip(wide.ids, wide.running) if not r and j.startswith(f"{big}_")) == 999


def test_a_throttled_arrays_split_off_and_held_tasks_take_no_more_than_its_throttle_and_hide_no_other_array():
    """gn1 (a100:4): a high job takes 3 GPUs; a low tenant's --array=1-100%3 runs task 1 on the last GPU, its
    --array=1-10 waits too, the bound at 20 tasks. An update of task 5 (the tenant's own: scontrol update) splits it
    off the array's record, and squeue without -r prints the record's line without its %3 (1_[2-100], reasons
    joined): the old view made jobs of the bound's 20 of its tasks, then cut them to 2 by squeue --json's throttle,
    and the other array got none of the bound: 2 tasks of demand where 12 wait. A hold of task 7 joins JobHeldAdmin
    to the line's reasons: the old view read the whole array as held, and the other still had none: no demand at all.
    Now the throttle, the line's or --json's, decides first what waits (3 less the one running), the bound counts
    those, and --json's records say which task is held: 2 + 10 tasks both times."""
    with slurm_cluster(nodes=("gn1",), gpus=4, gres_types={"gn1": "a100"}) as s:
        a = _first_task_running(s, "--array=1-100%3")
        b = submit(s, "--array=1-10", "--gres=gpu:a100:1")
        subprocess.run(["scontrol", "update", f"jobid={a}_5", "comment=split"], env=s["env"], check=True,
                       capture_output=True)
        time.sleep(2)
        line = subprocess.run(["squeue", "-h", "-t", "PENDING", "-o", "%i|%r"], env=s["env"], capture_output=True,
                              text=True).stdout
        assert f"{a}_[2-100]|" in line, line     # the %3 dropped (22.05)

        def demand():
            js = act(s, FleetConfig(types=["a100"]), max_array_tasks=20).cluster_jobs(TENANTS)
            pending: dict[str, list[int]] = {}
            for jid, run in zip(js.ids, js.running):
                if not run:
                    pending.setdefault(jid.split("_")[0], []).append(int(jid.split("_")[1]))
            return {k: sorted(v) for k, v in pending.items()}

        assert demand() == {a: [2, 3], b: list(range(1, 11))}, states(s)
        subprocess.run(["scontrol", "hold", f"{a}_7"], env=s["env"], check=True, capture_output=True)
        time.sleep(1)
        assert "JobHeld" in subprocess.run(["squeue", "-h", "-t", "PENDING", "-j", a, "-o", "%r"], env=s["env"],
                                           capture_output=True, text=True).stdout
        assert demand() == {a: [2, 3], b: list(range(1, 11))}, states(s)


def test_a_hold_for_a_job_asking_two_gpu_types_takes_a_node_with_both():
    """gn1 (a100:4) and gn2 (a100:2 + t4:2): both are a100 nodes to the plan (a node's type is its GRES type with
    the most GPUs). The high tenant's --gres=gpu:a100:1,gpu:t4:1 waits while a low job fills gn2, and the plan holds
    2 a100 GPUs for it. The hold took gn1 (free, so it ranked first), where Slurm cannot start the job: the low job
    requeued, the job still waited for gn2 to be free of everyone else's. Now the GPUs held for a job asking several
    types at once are taken from the nodes that have them all: gn2, and the job starts there once the low job goes."""
    from daemon.policy.types import Plan, PolicyMemory

    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4, gres_types={"gn1": "a100", "gn2": "a100+t4"}) as s:
        low = submit(s, "--gres=gpu:a100:2,gpu:t4:2", "-w", "gn2")
        wait_for(lambda: states(s).get(low, [""])[0] == "RUNNING", what="low job running", timeout=60)
        high = submit(s, "--gres=gpu:a100:1,gpu:t4:1", account="acct-high", partition="high")
        a = act(s, FleetConfig(types=["a100", "t4"]), dry_run=False)
        js = a.cluster_jobs(TENANTS)
        assert dict(zip(js.ids, js.accepts))[high] == ("a100",)
        plan = Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=1.0, high_pool=2,
                    reservations={"team-high": 2}, quotas={}, limits={}, preemptions=(), notifications=(),
                    stale=False, forecast_model="x", notes=(), memory=PolicyMemory(),
                    holds_by_type={"team-high": {"a100": 2}})
        a.apply(plan)
        res = subprocess.run(["scontrol", "-o", "show", "reservation"], env=s["env"], capture_output=True,
                             text=True).stdout
        assert " Nodes=gn2 " in res, res
        subprocess.run(["scancel", low], env=s["env"], check=True, capture_output=True)
        wait_for(lambda: states(s).get(high, [""])[0] == "RUNNING", what="the two-type job running", timeout=60)
