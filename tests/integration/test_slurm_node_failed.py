"""Whether Slurm sees a node failed (SlurmActuator.node_down_confirmed, the failover's check before it acts on a
node-down alert), on a real slurmctld with three slurmd of this module's own.

Its own module, so its own cluster: on the cluster test_slurm_nodes.py shares, what an earlier test on the same
xdist worker left (a job requeued onto gn3 once made it "mixed"; a clean-start wait once timed out with all idle
by the time it printed) decided whether this test passed. A module, not a second fixture in that one, so that a
worker never runs both clusters at once (pytest tears one module's fixtures down before the next module's)."""

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import SlurmActuatorConfig, TenantConfig
from tests.support.services import slurm_cluster, slurm_run, slurm_says, wait_for

pytestmark = pytest.mark.services

NODES = ("gn1", "gn2", "gn3")
TENANTS = [TenantConfig(name="team-low", tier="low", slurm_account="acct-low")]


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


def actuator(slurm):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0,
                                             hold_shrink_delay_s=0), TENANTS, dry_run=False)


@pytest.mark.security
def test_slurm_says_whether_it_sees_a_node_failed(slurm):
    a = actuator(slurm)
    try:
        for st in ("DOWN", "FAIL", "DRAIN"):
            assert a.node_down_confirmed("gn3") is False
            # set, then read, on each try; a failure says what sinfo printed
            def set_then_seen(st=st):
                slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn3", f"State={st}", "Reason=test")
                return a.node_down_confirmed("gn3") is True

            try:
                wait_for(set_then_seen, what=f"Slurm sees gn3 {st}", timeout=60, interval=0.5)
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; node_down_confirmed: {a.node_down_confirmed('gn3')!r}; "
                                     f"{slurm_says(slurm)}") from None
            slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn3", "State=RESUME")
            wait_for(lambda: a.node_down_confirmed("gn3") is False, what="gn3 back", timeout=60)
        assert a.node_down_confirmed("no-such-node") is None                  # cannot tell: not a veto
        assert a.node_down_confirmed("gn1") is False
    finally:
        slurm_run(slurm["env"], "scontrol", "update", "NodeName=gn3", "State=RESUME", check=False)
