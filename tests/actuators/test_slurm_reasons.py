"""Which pending Slurm jobs are demand now: those that free GPUs would start (squeue's reason), read without Slurm."""

import pytest

from daemon.actuators.slurm.actuator import SlurmJob, waits_for_gpus


def job(state, reason):
    return SlurmJob("1", "acct", "p", "normal", state, "", 0.0, 2, reason)


@pytest.mark.parametrize("reason", ["Resources", "Priority", "None", "ReqNodeNotAvail, Reserved for maintenance",
                                    "Reservation", "(Resources)", ""])
def test_waiting_for_gpus(reason):
    assert waits_for_gpus(job("PENDING", reason))


NOT_FOR_GPUS = ["BeginTime", "Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "(JobHeldUser)",
                "AssocGrpGRES", "AssocMaxJobsLimit", "QOSMaxGRESPerUser", "QOSGrpGRES", "QOSJobLimit",
                "MaxGRESPerAccount", "AccountingPolicy", "PartitionDown", "InvalidAccount"]


@pytest.mark.parametrize("reason", NOT_FOR_GPUS)
def test_not_waiting_for_gpus(reason):
    assert not waits_for_gpus(job("PENDING", reason))


def test_only_pending_jobs_wait():
    assert not waits_for_gpus(job("RUNNING", "None")) and not waits_for_gpus(job("SUSPENDED", "Resources"))
