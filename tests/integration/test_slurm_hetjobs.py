"""Heterogeneous jobs (sbatch ... : ...) on a real slurmctld: what the health reclaim does to their components.
Each component (123+0, 123+1) has its own account, partition and QOS, and a requeue of one is a requeue of the
job (squeue.whole_job: slurmctld refuses a component's own)."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.test_slurm_actuator import act, state
from tests.support.services import slurm_cluster, wait_for

pytestmark = pytest.mark.services


def hetjob(s, *components: list[str]) -> str:
    """One hetjob whose components are `components` (each sbatch's options), sleeping; its id once all run."""
    args = ["sbatch", "--parsable", "--requeue", "-o", "/dev/null"]
    for i, opts in enumerate(components):
        args += [*([":"] if i else []), *opts, *(["--wrap", "sleep 600"] if i == 0 else [])]
    het = subprocess.run(args, env=s["env"], capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    wait_for(lambda: state(s, het).count("RUNNING") == len(components), what="hetjob running", timeout=60)
    return het


def test_a_health_reclaim_of_one_component_requeues_the_job_only_when_every_component_is_named():
    """A low tenant's idle component (team-low's, partition low) beside a busy one of team-high's: the health
    policy's reclaim of the idle one named it alone, the actuator sent `scontrol requeue <job>`, and Slurm requeued
    team-high's busy component too. Now the actuator reads every component the job's id lists and requeues the
    job only when the reclaim names them all (the policy does when each is due: daemon/health/reclaim.py)."""
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4) as s:
        hi = ["--partition=high", "--account=acct-high", "--gres=gpu:1", "-w", "gn1"]
        lo = ["--partition=low", "--account=acct-low", "--gres=gpu:1", "-w", "gn2"]
        mixed = hetjob(s, hi, lo)
        rep = act(s).reclaim([f"{mixed}+1"], "health: idle for 90 min")
        assert not any(a.startswith("scontrol requeue") for a in rep.actions), rep.actions
        assert (f"skip heterogeneous job {mixed}: a requeue requeues every component, and {mixed}+0 is not to be "
                "reclaimed") in rep.actions
        assert state(s, mixed).count("RUNNING") == 2
        # every component named (each due, by its own tenant's policy): the job is requeued, once
        low = hetjob(s, lo, [*lo[:-2], "-w", "gn1"])
        rep = act(s).reclaim([f"{low}+0", f"{low}+1"], "health: idle for 90 min")
        assert not rep.errors and [a for a in rep.actions if a.startswith("scontrol requeue")] == [
            f"scontrol requeue {low}"], rep
        wait_for(lambda: "RUNNING" not in state(s, low), what="both components requeued", timeout=30)
        assert state(s, mixed).count("RUNNING") == 2


def test_a_component_without_gpus_does_not_keep_a_hetjobs_idle_gpus_from_reclaim():
    """A tenant's idle GPU component beside a component with no GPUs (sbatch --gres=gpu:1 ... : -n1 ...): the
    health policy has no finding for the latter (it watches GPUs) and names it only where its account is a
    tenant's, so the actuator, waiting for every component to be named, never requeued the idle GPUs. A component
    with no GPUs now goes with the job, as a plain job's CPUs go with its idle GPUs."""
    with slurm_cluster(nodes=("gn1", "gn2"), gpus=4) as s:
        lo = ["--partition=low", "--account=acct-low", "--gres=gpu:1", "-w", "gn1"]
        cpu = ["--partition=low", "--account=acct-low", "-n1", "-w", "gn2"]
        het = hetjob(s, lo, cpu)
        rep = act(s).reclaim([f"{het}+0"], "health: idle for 90 min")
        assert not rep.errors and [a for a in rep.actions if a.startswith("scontrol requeue")] == [
            f"scontrol requeue {het}"], rep
        wait_for(lambda: "RUNNING" not in state(s, het), what="both components requeued", timeout=30)
