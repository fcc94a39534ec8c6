"""What a window's reservation, made ahead by the Slurm actuator, does on a real slurmctld (2 nodes x 4 GPUs) before
it is active, and where it cannot go: what the simulator replays for Slurm (daemon/sim/cluster_holds.py ``_ahead``;
tests/sim/test_windows_slurm_sim.py).

- From the moment it is made, slurmctld starts on its nodes no job whose time limit reaches into it: another
  account's, and its own tenant's too (the reservation is not active yet: its jobs wait for it, reason
  ``Reservation``). A job that ends before the reservation's StartTime starts there. The test cluster's partitions
  have ``MaxTime=INFINITE``, so a job submitted without ``--time`` (every simulated job: it has no time limit) has
  no end, and never starts on a window's nodes before the window.
- A window's reservation cannot be made on, nor moved to, a node of the high tier's pool hold (an ``UNLIMITED``
  reservation): slurmctld refuses the overlap, and the actuator picks outside it."""

import datetime as dt
import subprocess

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.holds import parse_kv_line
from daemon.config import SlurmActuatorConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.actuators.test_slurm_holds import TENANTS
from tests.actuators.test_slurm_windows import window
from tests.support.services import slurm_cluster, slurm_jobs, slurm_reset, slurm_run, wait_for

NODES = ("gn1", "gn2")


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


@pytest.fixture
def clean(slurm):
    yield
    slurm_reset(slurm)


def actuator(slurm):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                         dry_run=False)


def plan(windows, reserve=None, pooled=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=1.0, high_pool=1, reservations=reserve or {},
                quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory(), pooled=pooled, windows=tuple(w.model_dump(mode="json") for w in windows))


def sbatch(slurm, account, minutes=None):
    """A 4-GPU job (a whole node) of `account`; no --time: the partition's MaxTime, INFINITE."""
    extra = [f"--time={minutes}"] if minutes else []
    return slurm_run(slurm["env"], "sbatch", "--parsable", "--partition=normal", f"--account={account}",
                     "--gres=gpu:4", *extra, "-o", "/dev/null", "--wrap", "sleep 600").strip().split(";")[0]


def reason(slurm, jid):
    return slurm_run(slurm["env"], "squeue", "-h", "-j", jid, "-o", "%r").strip()


def in_three_hours():
    """A daily window that opens in about three hours (its reservation starts 30 min before)."""
    at = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=3)).strftime("%H:%M")
    return window("later", tenant="team-norm", gpus=4, every="daily", at=at, duration_minutes=60,
                  reclaim_before_minutes=30)


@pytest.mark.services
@pytest.mark.usefixtures("clean")
def test_nothing_without_a_time_limit_starts_on_a_windows_nodes_before_it_is_active(slurm):
    rep = actuator(slurm).apply(plan([in_three_hours()]))
    assert rep.ok, rep.errors
    r = parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", "gpuas-win-later"))
    assert r["State"] == "INACTIVE" and r["Accounts"] == "acct-norm"
    reserved = r["Nodes"]
    other = next(n for n in NODES if n != reserved)
    # another account's jobs without a time limit: one runs on the other node, the next waits, the reserved node
    # stays idle
    first, second = sbatch(slurm, "acct-low"), sbatch(slurm, "acct-low")
    wait_for(lambda: slurm_jobs(slurm).get(first, ("",))[0] == "RUNNING", what="the first job running", timeout=60)
    assert slurm_jobs(slurm)[first][1] == other
    wait_for(lambda: reason(slurm, second) not in ("", "None"), what="the second job considered", timeout=60)
    assert slurm_jobs(slurm)[second][0] == "PENDING", slurm_jobs(slurm)
    # the window's own tenant without a time limit waits for the reservation to start
    own = sbatch(slurm, "acct-norm")
    wait_for(lambda: reason(slurm, own) == "Reservation", what="the tenant's job waiting for its reservation",
             timeout=60)
    assert slurm_jobs(slurm)[own][0] == "PENDING"
    assert slurm_run(slurm["env"], "sinfo", "-h", "-n", reserved, "-o", "%T").strip() == "idle"
    # a job that ends before the reservation's StartTime starts there (what a time limit would let the replay lend)
    slurm_run(slurm["env"], "scancel", second, own)
    short = sbatch(slurm, "acct-low", minutes=30)
    wait_for(lambda: slurm_jobs(slurm).get(short, ("",))[0] == "RUNNING", what="the short job running", timeout=90)
    assert slurm_jobs(slurm)[short][1] == reserved


@pytest.mark.services
@pytest.mark.usefixtures("clean")
def test_a_windows_reservation_takes_no_node_of_the_pools_unlimited_hold(slurm):
    pooled = ("team-high", "team-high2")
    a = actuator(slurm)
    assert a.apply(plan([], reserve={"team-high": 4}, pooled=pooled)).ok
    pool = parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", "gpuas-hold-pool"))
    assert pool["Duration"].startswith("365-") or pool["EndTime"] > "2027", pool   # UNLIMITED
    # a pooled tenant's window: its reservation is made outside the pool's node
    w = window("high", tenant="team-high", gpus=4, every="daily", at="03:00", duration_minutes=60)
    rep = a.apply(plan([w], reserve={"team-high": 4}, pooled=pooled))
    assert rep.ok, rep.errors
    mine = parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", "gpuas-win-high"))
    assert mine["Nodes"] != pool["Nodes"]
    # slurmctld itself refuses the pool's node to a window's reservation, made there or moved there
    start = (dt.datetime.now() + dt.timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S")
    made = slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=gpuas-win-x",
                     f"StartTime={start}", "Duration=60", "Accounts=acct-high", f"Nodes={pool['Nodes']}",
                     "Flags=IGNORE_JOBS,MAGNETIC,DAILY", check=False)
    assert "gpuas-win-x" not in slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation"), made
    moved = subprocess.run(["scontrol", "update", "ReservationName=gpuas-win-high", f"Nodes={pool['Nodes']}"],
                           env=slurm["env"], capture_output=True, text=True)
    assert moved.returncode != 0 and "overlaps with another reservation" in moved.stderr
