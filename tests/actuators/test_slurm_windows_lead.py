"""A window's Slurm reservation gets its nodes picked again at the lead time of its occurrence, as the simulator picks
a window's nodes then (issue 39), on a real slurmctld (5 nodes x 4 GPUs).

The reservations are made ahead (a day ahead in production) on free nodes; then work that cannot be preempted lands
on some of them (a job that was to end before the window, whose time limit the admin then raised: slurmctld lets
it run into the reservation). Once the StartTime is within two cycle intervals the daemon moves each such
reservation to free nodes, in place, with StartTime, Duration and flags as they were; one whose choice is the same
is not touched; one whose move slurmctld refuses keeps its nodes and the report says so; an occurrence is picked
once (a replica that leads in the middle picks the same nodes again: nothing sent); an active reservation is never
moved."""

import datetime as dt
import time

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import SlurmActuatorConfig
from tests.actuators.test_slurm_holds import TENANTS
from tests.actuators.test_slurm_windows import plan, shown, window
from tests.support.services import slurm_cluster, slurm_jobs, slurm_reset, slurm_run, wait_for

NODES = ("gn1", "gn2", "gn3", "gn4", "gn5")
CYCLE_S = 15.0          # the nodes are picked again once the StartTime is within 2 x 15 s


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


@pytest.fixture
def clean(slurm):
    yield
    slurm_reset(slurm)
    slurm_run(slurm["env"], "scontrol", "update", f"NodeName={','.join(NODES)}", "State=RESUME", check=False)


def actuator(slurm):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0,
                                             windows_reserved="ahead"), TENANTS,
                         dry_run=False, cycle_s=CYCLE_S)


def firm_job_on(slurm, node):
    """A normal-tier 2-GPU job (team-norm's: not preemptible) on `node`, started while it ends before the window's
    reservation (1 minute), then given no time limit by the admin: it now runs into the reservation."""
    jid = slurm_run(slurm["env"], "sbatch", "--parsable", "--partition=normal", "--account=acct-norm", f"-w{node}",
                    "--time=1", "--gres=gpu:2", "-o", "/dev/null", "--wrap", "sleep 600").strip().split(";")[0]
    wait_for(lambda: slurm_jobs(slurm).get(jid, ("",))[0] == "RUNNING", what=f"the job on {node} running", timeout=80)
    slurm_run(slurm["env"], "scontrol", "update", f"JobId={jid}", "TimeLimit=UNLIMITED")
    return jid


def updates(rep):
    return [a for a in rep.actions if a.startswith("scontrol update ReservationName=")]


@pytest.mark.services
@pytest.mark.usefixtures("clean")
def test_a_windows_nodes_are_picked_again_at_its_lead_time_once_and_never_while_active(slurm):
    env = slurm["env"]
    now = dt.datetime.now(dt.timezone.utc)
    # the reservations start at the first whole minute at least 150 s ahead (the firm jobs must start, and end by
    # then, before it); the windows open a minute after that
    begin = (now + dt.timedelta(seconds=210)).replace(second=0, microsecond=0)
    start = begin + dt.timedelta(minutes=1)
    cron = f"{start.minute} {start.hour} * * *"
    ws = [window("a-busy", tenant="team-high", cron=cron, duration_minutes=5, reclaim_before_minutes=1),
          window("b-same", tenant="team-norm", cron=cron, duration_minutes=5, reclaim_before_minutes=1),
          window("c-refused", tenant="team-high2", cron=cron, duration_minutes=5, reclaim_before_minutes=1)]
    a = actuator(slurm)
    rep = a.apply(plan(ws))
    assert rep.ok, rep.errors
    made = {w: shown(slurm, f"gpuas-win-{w}") for w in ("a-busy", "b-same", "c-refused")}
    assert {w: r["Nodes"] for w, r in made.items()} == {"a-busy": "gn1", "b-same": "gn2", "c-refused": "gn3"}
    # later, work that cannot be preempted runs into two of them
    firm_job_on(slurm, "gn1")
    firm_job_on(slurm, "gn3")

    # an hour before (the daemon's clock set back): not yet the lead time, nothing is moved
    a.windows.clock = lambda: time.time() - 3600
    rep = a.apply(plan(ws))
    assert rep.ok and updates(rep) == [], (rep.actions, rep.errors)
    a.windows.clock = time.time
    assert shown(slurm, "gpuas-win-a-busy")["Nodes"] == "gn1"

    # a reservation made on c-refused's new node just before the daemon's update reaches slurmctld: it refuses
    send = a.windows.scontrol

    def racing(rep, *args):
        if args[:2] == ("update", "ReservationName=gpuas-win-c-refused"):
            node = next(x for x in args if x.startswith("Nodes=")).removeprefix("Nodes=")
            slurm_run(env, "scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now",
                      "Duration=UNLIMITED", "Users=root", f"Nodes={node}", "Flags=IGNORE_JOBS")
        return send(rep, *args)

    a.windows.scontrol = racing
    local_begin = begin.astimezone().replace(tzinfo=None)
    wait_for(lambda: (local_begin - dt.datetime.now()).total_seconds() <= 2 * CYCLE_S - 5, what="the lead time near",
             timeout=240, interval=1.0)
    rep = a.apply(plan(ws))
    after = {w: shown(slurm, f"gpuas-win-{w}") for w in ("a-busy", "b-same", "c-refused")}
    assert after["a-busy"]["State"] == "INACTIVE", "the test was too slow: the reservation started first"
    # a-busy: moved to the first free node, in place; its StartTime, Duration, flags and account as they were
    assert after["a-busy"]["Nodes"] == "gn4", rep.actions
    for key in ("StartTime", "Duration", "Accounts", "State"):
        assert after["a-busy"][key] == made["a-busy"][key], key
    assert set(after["a-busy"]["Flags"].split(",")) == set(made["a-busy"]["Flags"].split(","))
    assert {"IGNORE_JOBS", "MAGNETIC", "DAILY"} <= set(after["a-busy"]["Flags"].split(","))
    # b-same: the same choice, no update sent
    assert after["b-same"]["Nodes"] == "gn2"
    assert not any("gpuas-win-b-same" in u for u in updates(rep))
    # c-refused: slurmctld refused the move to gn5 (maint took it): it keeps gn3, reserved, and the report says so
    assert after["c-refused"]["Nodes"] == "gn3" and after["c-refused"]["State"] == "INACTIVE"
    said = [e for e in rep.errors if e.startswith("window gpuas-win-c-refused")]
    assert len(said) == 1 and "keeps gn3" in said[0], rep.errors
    assert updates(rep) == ["scontrol update ReservationName=gpuas-win-a-busy Nodes=gn4",
                            "scontrol update ReservationName=gpuas-win-c-refused Nodes=gn5"]

    # a replica that leads now (it picked nothing in its term) picks again: on this cluster the same nodes, no update
    rep = actuator(slurm).apply(plan(ws))
    assert rep.ok and updates(rep) == [], (rep.actions, rep.errors)

    # once per occurrence: gn4 drained now would change a-busy's choice, c-refused could try again; neither is sent
    slurm_run(env, "scontrol", "update", "NodeName=gn4", "State=DRAIN", "Reason=test")
    slurm_run(env, "scontrol", "delete", "ReservationName=maint")
    rep = a.apply(plan(ws))
    assert updates(rep) == [], rep.actions
    assert shown(slurm, "gpuas-win-a-busy")["Nodes"] == "gn4"

    # active: a new replica (it picked nothing yet) moves nothing, though gn4 is drained and gn3 still busy
    wait_for(lambda: all(shown(slurm, f"gpuas-win-{w}")["State"] == "ACTIVE" for w in ("a-busy", "c-refused")),
             what="the reservations active", timeout=120, interval=1.0)
    rep = actuator(slurm).apply(plan(ws))
    assert updates(rep) == [], rep.actions
    assert (shown(slurm, "gpuas-win-a-busy")["Nodes"], shown(slurm, "gpuas-win-c-refused")["Nodes"]) == ("gn4", "gn3")


def test_the_pick_at_the_lead_time_counts_what_the_plans_preemptions_free_and_keeps_its_nodes_among_equals():
    """The node rule (no slurmctld: the choice only): two nodes full of low work, both clearable; the plan's
    preemptions free gn2, which the pick counts as free GPUs (as the simulator counts draining ones), so the window
    moves there; with nothing freed the two are equal and the reservation keeps gn1 (no move for nothing). An hour
    before its lead time nothing is picked."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.slurm.holds import Node, RunningJob, SlurmHolds
    from daemon.actuators.slurm.windows import SlurmWindows

    begin = dt.datetime(2026, 12, 7, 14, 0, tzinfo=dt.timezone.utc)
    w = window("x", tenant="team-high", cron="1 14 * * *", duration_minutes=5, reclaim_before_minutes=1)
    res = (f"ReservationName=gpuas-win-x StartTime={begin.astimezone().replace(tzinfo=None):%Y-%m-%dT%H:%M:%S} "
           "Duration=00:06:00 Nodes=gn1 Flags=IGNORE_JOBS,DAILY,SPEC_NODES,MAGNETIC Accounts=acct-high "
           "State=INACTIVE")
    nodes = [Node("gn1", "ALLOCATED", 4, 4), Node("gn2", "ALLOCATED", 4, 4)]
    low = [RunningJob("1", "acct-low", ("gn1",), 4, "", True), RunningJob("2", "acct-low", ("gn2",), 4, "", True)]

    def sent(before_s, freed):
        out = []
        holds = SlurmHolds(read=None, scontrol=None, accounts={t.name: t.slurm_account for t in TENANTS},
                           tier_of={t.name: t.tier for t in TENANTS}, tiers=["high"], prefix="gpuas-hold",
                           shrink_delay_s=0.0)
        ws = SlurmWindows(read=lambda *a: "", scontrol=lambda rep, *a: out.append(a) or True, holds=holds,
                          prefix="gpuas-win", clock=lambda: begin.timestamp() - before_s, repick_within_s=60.0)
        rep = ActionReport("slurm", False)
        ws.apply([w], rep, low, res, nodes, freed)
        assert rep.ok, rep.errors
        return out

    assert sent(30, {"gn2": 4}) == [("update", "ReservationName=gpuas-win-x", "Nodes=gn2")]
    assert sent(30, {}) == []
    assert sent(3600, {"gn2": 4}) == []
