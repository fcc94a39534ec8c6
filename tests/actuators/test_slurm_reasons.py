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
