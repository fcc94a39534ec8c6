"""Which pending Slurm jobs are demand now: those that free GPUs would start (squeue's reason), read without Slurm."""

import pytest

from daemon.actuators.slurm.actuator import SlurmJob, waits_for_gpus


def job(state, reason):
    return SlurmJob("1", "acct", "p", "normal", state, "", 0.0, 2, reason)


@pytest.mark.parametrize("reason", ["Resources", "Priority", "None", "ReqNodeNotAvail, Reserved for maintenance",
                                    "Reservation", "(Resources)", ""])
def test_waiting_for_gpus(reason):
    assert waits_for_gpus(job("PENDING", reason))


NOT_FOR_GPUS = ["BeginTime", "job requeued in held state", "launch failed requeued held", "JobHoldMaxRequeue",
                "Licenses", "BurstBufferStageIn", "PartitionConfig", "Dependency", "DependencyNeverSatisfied",
                "JobHeldUser", "JobHeldAdmin", "(JobHeldUser)", "AssocGrpGRES", "AssocMaxJobsLimit",
                "QOSMaxGRESPerUser", "QOSGrpGRES", "QOSJobLimit", "MaxGRESPerAccount", "AccountingPolicy",
                "PartitionDown", "PartitionInactive", "PartitionTimeLimit", "JobArrayTaskLimit", "BadConstraints",
                "InvalidAccount"]


@pytest.mark.parametrize("reason", NOT_FOR_GPUS)
def test_not_waiting_for_gpus(reason):
    assert not waits_for_gpus(job("PENDING", reason))


def test_only_pending_jobs_wait():
    assert not waits_for_gpus(job("RUNNING", "None")) and not waits_for_gpus(job("SUSPENDED", "Resources"))


def test_a_begin_time_job_is_demand_only_when_it_is_eligible_soon():
    # a requeued job waits about two minutes under BeginTime: the same demand; one submitted --begin for an hour
    # later is not; without its eligible time (or N/A) it is not
    j, now = job("PENDING", "BeginTime"), 1_000_000.0
    assert waits_for_gpus(j, now + 120, now) and waits_for_gpus(j, now - 5, now)
    assert not waits_for_gpus(j, now + 3600, now) and not waits_for_gpus(j, float("nan"), now)
    assert not waits_for_gpus(j, None, now)


def test_a_time_limit_is_read_and_none_is_not_zero():
    """squeue %l: a TimeLimit in %M's form is seconds; UNLIMITED or NOT_SET is no limit (NaN), never 0, which
    would tell the start estimate the job ends now."""
    import math

    from daemon.actuators.slurm.actuator import parse_squeue, parse_time_limit

    assert parse_time_limit("1-02:00:00") == 93600.0 and parse_time_limit("10:00") == 600.0
    assert all(math.isnan(parse_time_limit(t)) for t in ("UNLIMITED", "NOT_SET", "", "INFINITE"))
    line = "7|acct|p|normal|RUNNING|gn1|5:00|gres/gpu:2|None|2026-12-06T02:00:00|(null)|1|2026-12-06T02:00:00|"
    assert parse_squeue(line + "30:00")[0].time_limit_s == 1800.0
    assert math.isnan(parse_squeue(line + "UNLIMITED")[0].time_limit_s)


def test_squeue_output_that_is_not_its_lines_is_an_error_never_no_jobs():
    """A line of squeue's output that is not SQUEUE_FMT's (a wrapper's message on stdout, a cut line, a field of the
    wrong kind) is a SlurmError naming the line: it was skipped, so output that was all garbage read as an empty
    queue, and the scheduler's view, which bounds each tenant's demand, capped every tenant's to 0."""
    import subprocess

    from daemon.actuators.slurm.actuator import SlurmActuator, SlurmError, parse_squeue
    from daemon.config import SlurmActuatorConfig, TenantConfig

    good = "7|acct|p|normal|RUNNING|gn1|5:00|gres/gpu:2|None|2026-12-06T02:00:00|(null)|1|2026-12-06T02:00:00|30:00"
    assert [j.job_id for j in parse_squeue(good + "\n\n" + good.replace("7|", "8|", 1))] == ["7", "8"]
    with pytest.raises(SlurmError, match=r"line 1 has 1 fields, not 14 .*'<html><body>Service Unavailable"):
        parse_squeue("<html><body>Service Unavailable</body></html>")
    with pytest.raises(SlurmError, match="line 2 has 5 fields"):
        parse_squeue(good + "\n" + "9|acct|p|normal|RUNN")
    with pytest.raises(SlurmError, match=r"line 1: %M \(elapsed\) is 'soon'"):
        parse_squeue(good.replace("|5:00|", "|soon|"))
    with pytest.raises(SlurmError, match=r"line 1: %l \(time limit\) is 'a while'"):
        parse_squeue(good.replace("|30:00", "|a while"))

    act = SlurmActuator(SlurmActuatorConfig(), [TenantConfig(name="t", slurm_account="acct")], dry_run=True)
    act._run = lambda *args: subprocess.CompletedProcess(args, 0, stdout="slurm wrapper: maintenance at 18:00\n",
                                                         stderr="")
    with pytest.raises(SlurmError, match="line 1 has 1 fields"):
        act.jobs()
