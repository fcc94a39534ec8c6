"""Who slurmctld shows every job to, read from its own answers (daemon/actuators/slurm/visibility.py), and the
actuator's check before the cycle's job read. The real slurmctld with PrivateData=jobs and a hidden partition, read
as a user that is not root: tests/integration/test_slurm_visibility.py. An operator's AdminLevel needs the
accounting database, which the test machine does not run: here slurmctld's answer is the text 22.05 prints."""

from __future__ import annotations

import os
import subprocess

import pytest

from daemon.actuators.slurm.actuator import SQUEUE_FMT, SlurmActuator, SlurmError
from daemon.actuators.slurm.visibility import parse_admin_level, parse_config, sees_all_line
from daemon.config import SlurmActuatorConfig, TenantConfig

# scontrol show config of Slurm 22.05.8, the lines around the two read (the rest: `Key = value` alike)
CONFIG = """Configuration data as of 2026-12-07T23:02:41
JobCredentialPrivateKey = (null)
MCSPlugin               = mcs/none
PrivateData             = {private}
ProctrackType           = proctrack/linuxproc
SlurmUser               = slurm(64030)
SLURM_VERSION           = 22.05.8
"""
ASSOC = ("Current Association Manager state\n\nUser Records\n\n"
         "UserName=alice(1000) DefAccount=ml DefWckey= AdminLevel=Administrator\n"
         "UserName=gpuas(1001) DefAccount=ops DefWckey= AdminLevel={level}\n")


def test_privatedata_and_slurmuser_are_read_from_scontrol_show_config():
    cfg = parse_config(CONFIG.format(private="jobs,nodes,reservations"))
    assert cfg.private == {"jobs", "nodes", "reservations"} and (cfg.slurm_user, cfg.slurm_uid) == ("slurm", 64030)
    assert parse_config(CONFIG.format(private="none")).private == frozenset()
    assert parse_config(CONFIG.format(private="(null)")).private == frozenset()


def test_the_users_own_admin_level_is_read_not_another_users():
    assert parse_admin_level(ASSOC.format(level="Operator"), "gpuas") == "operator"
    assert parse_admin_level(ASSOC.format(level="None"), "gpuas") == "none"
    assert parse_admin_level(ASSOC.format(level="None"), "alice") == "administrator"
    none_cached = "Current Association Manager state\n\nNo users currently cached in Slurm.\n"   # no accounting
    assert parse_admin_level(none_cached, "gpuas") == ""


def test_who_sees_every_job_and_what_the_others_are_told():
    jobs = parse_config(CONFIG.format(private="jobs"))
    assert sees_all_line(jobs, 0, "root", "") is None                        # root
    assert sees_all_line(jobs, 64030, "slurm", "") is None                   # SlurmUser
    assert sees_all_line(jobs, 1001, "gpuas", "operator") is None            # an operator
    assert sees_all_line(jobs, 1001, "gpuas", "administrator") is None
    # PrivateData=nodes alone: slurmctld refuses that read with an error, which every view already reports
    assert sees_all_line(parse_config(CONFIG.format(private="nodes,usage")), 1001, "gpuas", "") is None
    line = sees_all_line(parse_config(CONFIG.format(private="jobs,reservations")), 1001, "gpuas", "none")
    assert line == ("slurmctld shows gpuas (uid 1001) only its own jobs and only the reservations it may use: "
                    "slurm.conf has PrivateData=jobs,reservations and gpuas is not SlurmUser (slurm), root or a Slurm "
                    "operator (AdminLevel None), so every other tenant would read as idle and its GPUs as free; the "
                    "daemon's holds and other reservations would read as absent: the jobs are not read and the last "
                    "plan is kept. Run the daemon as SlurmUser, or make gpuas an operator: sacctmgr modify user gpuas "
                    "set adminlevel=operator")


def _actuator(answers: dict[str, str | Exception], asked: list[str]) -> SlurmActuator:
    """An actuator whose scontrol answers `answers` (by subcommand) and whose squeue lists no job."""
    act = SlurmActuator(SlurmActuatorConfig(), [TenantConfig(name="t")], dry_run=True)

    def run(*args: str) -> subprocess.CompletedProcess:
        asked.append(" ".join(args))
        got = answers.get(args[2] if args[0] == "scontrol" else args[0], "")
        if isinstance(got, Exception):
            return subprocess.CompletedProcess(args, 1, stdout="", stderr=str(got))
        return subprocess.CompletedProcess(args, 0, stdout=got, stderr="")

    act._run = run   # type: ignore[method-assign]
    return act


def test_an_operator_is_read_and_a_user_without_the_right_refused(monkeypatch):
    """The daemon's user (65534, nobody here) under PrivateData=jobs: read when slurmctld holds it as an operator,
    refused (no job read) when it holds it as None. Without PrivateData it asks nothing more than squeue."""
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    asked: list[str] = []
    op = ASSOC.replace("gpuas(1001)", "nobody(65534)").format(level="Operator")
    act = _actuator({"config": CONFIG.format(private="jobs"), "assoc_mgr": op}, asked)
    assert len(act.cluster_jobs(("t",)).ids) == 0
    assert asked[:3] == ["scontrol show config", "scontrol show assoc_mgr flags=users users=nobody",
                         f"squeue -h -o {SQUEUE_FMT} --all"]
    asked.clear()
    act = _actuator({"config": CONFIG.format(private="jobs"), "assoc_mgr": op.replace("Operator", "None")}, asked)
    with pytest.raises(SlurmError, match=r"^slurmctld shows nobody \(uid 65534\) only its own jobs: .*AdminLevel None"):
        act.cluster_jobs(("t",))
    assert not [a for a in asked if a.startswith("squeue")]
    asked.clear()
    act = _actuator({"config": CONFIG.format(private="none")}, asked)
    act.cluster_jobs(("t",))
    assert asked[0] == "scontrol show config" and not [a for a in asked if "assoc_mgr" in a]


def test_a_config_that_cannot_be_read_is_no_view_until_read_once(monkeypatch):
    """scontrol show config failing: never read, the jobs are not read (the daemon cannot tell whether it sees
    them all); read once, that answer decides (PrivateData changes with a slurmctld reconfigure, not by itself)."""
    monkeypatch.setattr(os, "geteuid", lambda: 65534)
    answers: dict[str, str | Exception] = {"config": RuntimeError("slurm_load_ctl_conf error: Unable to contact")}
    act = _actuator(answers, [])
    with pytest.raises(SlurmError, match="^cannot tell whether slurmctld shows this user every job .*Unable to "
                                         "contact.*: the jobs are not read$"):
        act.cluster_jobs(("t",))
    answers["config"] = CONFIG.format(private="none")
    act.cluster_jobs(("t",))
    answers["config"] = RuntimeError("slurm_load_ctl_conf error: Unable to contact")
    assert len(act.cluster_jobs(("t",)).ids) == 0
