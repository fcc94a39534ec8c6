"""Recurring windows on a real slurmctld (3 nodes x 4 GPUs, issue 39): each window is a recurring reservation made
ahead, with StartTime (the start less reclaim_before), Duration and the recurrence flag; at its start it holds its
nodes for the tenant, the plan's preemptions drain the low work there, and the tenant's job starts in it."""

import datetime as dt
import subprocess

import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.holds import parse_kv_line
from daemon.actuators.slurm.windows import parse_duration_min, parse_window_reservations
from daemon.config import SlurmActuatorConfig, WindowConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.actuators.test_slurm_holds import TENANTS, full, jobs, sbatch  # noqa: F401 (full: a fixture)
from tests.support.services import slurm_cluster, slurm_jobs, slurm_reset, slurm_run, wait_for

NODES = ("gn1", "gn2", "gn3")


def test_slurm_durations_in_minutes():
    assert [parse_duration_min(x) for x in ("00:06:00", "1-02:00:00", "90:00", "UNLIMITED", "00:00:30")] == \
        [6, 1560, 90, -1, 1]


def test_a_reservation_starts_when_the_plan_holds_the_window_even_when_reclaim_before_is_shorter():
    """reclaim_before 0 (or under a preemption's drain and a cycle): the plan holds the window, and preempts for it,
    from Config.window_min_lead_s ahead (daemon/policy/windows.py); the reservation starts then too (it started at
    the window's start: for the plan's first two and a half minutes new work could start on the nodes it cleared)."""
    from daemon.actuators.slurm.windows import wanted
    from daemon.config import Config

    cfg = Config()
    w = window("w0", every="daily", at="14:00", duration_minutes=60, reclaim_before_minutes=0)
    now = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.timezone.utc)
    start = dt.datetime(2026, 1, 5, 14, 0, tzinfo=dt.timezone.utc)
    begin, minutes, flag = wanted(w, now, cfg.window_min_lead_s())
    assert begin == (start - dt.timedelta(seconds=150)).astimezone().replace(tzinfo=None) and minutes == 63
    assert flag == "DAILY"
    assert wanted(w, now)[:2] == (start.astimezone().replace(tzinfo=None), 60)   # with no floor: reclaim_before
    # a 30-minute reclaim_before is already longer: unchanged
    w30 = window("w30", every="daily", at="14:00", duration_minutes=60, reclaim_before_minutes=30)
    assert wanted(w30, now, cfg.window_min_lead_s())[:2] == \
        ((start - dt.timedelta(minutes=30)).astimezone().replace(tzinfo=None), 90)
    # the daemon's actuator is given the floor by the wiring
    from daemon.service.wiring import _actuators

    acts = _actuators(Config.model_validate({
        "tenants": [t.model_dump() for t in TENANTS], "cluster": {"gpus": 12},
        "actuators": {"enabled": ["slurm"], "dry_run": True, "slurm": {"bin_dir": "/usr/bin"}}}), None)
    (act,) = [a for a in acts if a.name == "slurm"]
    assert act.windows.min_lead_s == cfg.window_min_lead_s()


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


def actuator(slurm):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0,
                                             windows_reserved="ahead"), TENANTS, dry_run=False)


def plan(windows, reserve=None, *pre):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=2,
                reservations=reserve or {}, quotas={}, limits={}, preemptions=tuple(pre), notifications=(),
                stale=False, forecast_model="x", notes=(), memory=PolicyMemory(),
                windows=tuple(w.model_dump(mode="json") for w in windows))


def shown(slurm, name):
    return parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", name))


def window(name, tenant="team-norm", gpus=4, **kw):
    return WindowConfig.model_validate({"name": name, "tenant": tenant, "gpus": gpus, "timezone": "UTC", **kw})


@pytest.mark.services
@pytest.mark.usefixtures("full")
def test_a_window_is_a_recurring_reservation_made_ahead_that_holds_and_is_drained_at_its_start(slurm):
    now = dt.datetime.now(dt.timezone.utc)
    # the reservation starts at the first whole minute at least 40 s ahead: the window opens a minute after it
    begin = (now + dt.timedelta(seconds=100)).replace(second=0, microsecond=0)
    start = begin + dt.timedelta(minutes=1)
    daily = window("eod", cron=f"{start.minute} {start.hour} * * *", duration_minutes=5, reclaim_before_minutes=1)
    weekly = window("sunday", tenant="team-high", every="weekly", day="sun", at="03:00", duration_minutes=60)
    weekdays = window("nine", tenant="team-high2", every="weekdays", at="09:00", duration_minutes=30,
                      reclaim_before_minutes=15)
    a = actuator(slurm)
    rep = a.apply(plan([daily, weekly, weekdays]))
    assert rep.ok, rep.errors
    r = shown(slurm, "gpuas-win-eod")
    assert r["StartTime"] == begin.astimezone().strftime("%Y-%m-%dT%H:%M:%S")   # the start less reclaim_before
    assert r["Duration"] == "00:06:00"                                            # reclaim_before + duration
    assert {"DAILY", "IGNORE_JOBS", "MAGNETIC"} <= set(r["Flags"].split(",")) and r["Accounts"] == "acct-norm"
    assert r["State"] == "INACTIVE"
    assert "WEEKLY" in shown(slurm, "gpuas-win-sunday")["Flags"].split(",")
    nine = shown(slurm, "gpuas-win-nine")
    assert "WEEKDAY" in nine["Flags"].split(",") and nine["StartTime"].endswith("T08:45:00")
    assert nine["Duration"] == "00:45:00"
    assert a.apply(plan([daily, weekly, weekdays])).actions == []      # the same windows again: nothing to do
    # windows that go away take their reservations with them
    assert a.apply(plan([daily])).ok
    out = slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation")
    assert [x.name for x in parse_window_reservations(out, "gpuas")] == ["gpuas-win-eod"]
    node = r["Nodes"]
    # the daemon is not needed for the hold: slurmctld starts it
    wait_for(lambda: shown(slurm, "gpuas-win-eod")["State"] == "ACTIVE", what="window reservation active",
             timeout=150)
    view = a.cluster_nodes(tuple(t.name for t in TENANTS))
    assert {n: int(h) for n, h in zip(view.names, view.held_by) if n == node} == {node: 3}  # team-norm's
    # the plan holds the window's 4 GPUs for team-norm and preempts the low work on its node: the reservation
    # covers the hold (no second one), the low jobs drain and the tenant's job starts in the window
    low_there = [j for j, v in jobs(slurm).items() if v[1] == node]
    assert low_there
    rep = a.apply(plan([daily], {"team-norm": 4},
                       *(Preemption(j, "team-low", 2, node, "window eod opens") for j in low_there)))
    assert rep.ok, rep.errors
    names = [x.name for x in parse_window_reservations(slurm_run(slurm["env"], "scontrol", "-o", "show",
                                                                 "reservation"), "gpuas")]
    assert "gpuas-hold-team-norm" not in names
    wait_for(lambda: all(jobs(slurm)[j][0] == "PENDING" for j in low_there), what="low jobs requeued", timeout=30)
    mine = sbatch(slurm, "normal", "acct-norm", gpus=4)
    wait_for(lambda: jobs(slurm)[mine][0] == "RUNNING", what="the window's job running", timeout=60)
    assert jobs(slurm)[mine][1:] == (node, "gpuas-win-eod")
    assert not any(v[1] == node for j, v in jobs(slurm).items() if j != mine and v[0] == "RUNNING")
    # a window that goes away while open takes its reservation with it (its job detached, still running)
    rep = a.apply(plan([]))
    assert rep.ok, rep.errors
    assert "gpuas-win-eod" not in slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation")
    assert jobs(slurm)[mine][:2] == ("RUNNING", node)


@pytest.mark.services
@pytest.mark.usefixtures("full")
def test_a_crontab_slurm_cannot_say_reserves_the_next_occurrence_only_and_says_so(slurm):
    monthly = window("monthly", cron="30 2 1 * *", duration_minutes=60, reclaim_before_minutes=0)
    rep = actuator(slurm).apply(plan([monthly]))
    assert rep.ok, rep.errors
    assert any("only its next occurrence" in x for x in rep.actions)
    r = shown(slurm, "gpuas-win-monthly")
    flags = set(r["Flags"].split(","))
    assert not flags & {"DAILY", "WEEKLY", "WEEKDAY"} and r["StartTime"].endswith("-01T02:30:00")


def test_a_pooled_tenants_active_window_leaves_the_rest_of_its_hold_in_the_pools_reservation():
    """Slurm side of Plan.window_holds: a pooled high tenant keeps its account in the pool's reservation while its
    window's reservation is active, and the pool holds the pooled holds less what the active window holds (the
    `covered` GPUs), so the window adds to what the account may use: its jobs run in the window's reservation,
    in the pool's and outside both."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.slurm.holds import SlurmHolds
    from tests.actuators.test_slurm_holds import TENANTS as ALL

    sent = []
    nodes = "\n".join(f"NodeName=gn{i} State=IDLE Gres=gpu:4 GresUsed=gpu:0" for i in range(1, 5))
    h = SlurmHolds(read=lambda *a: nodes if "nodes" in a else "", accounts={t.name: t.slurm_account for t in ALL},
                   scontrol=lambda rep, *a: sent.append(a) or True, tier_of={t.name: t.tier for t in ALL},
                   tiers=["high"], prefix="gpuas-hold", shrink_delay_s=0.0)
    p = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=1.0, high_pool=4,
             reservations={"team-high": 8, "team-high2": 4}, quotas={}, limits={}, preemptions=(), notifications=(),
             stale=False, forecast_model="x", notes=(), memory=PolicyMemory(), pooled=("team-high", "team-high2"),
             window_holds={"team-high": 4})
    rep = ActionReport("slurm", False)
    h.apply(p, rep, [], covered={"acct-high": 4})        # the window's reservation holds one 4-GPU node
    made = {a[2]: a for a in sent if a[:2] == ("create", "reservation")}
    pool = made["ReservationName=gpuas-hold-pool"]
    assert "Accounts=acct-high,acct-high2" in pool                                    # the account stays pooled
    assert len(next(x for x in pool if x.startswith("Nodes=")).split(",")) == 2      # 8 + 4 - 4 GPUs: 2 nodes
    assert "ReservationName=gpuas-hold-team-high" not in made                         # nothing held twice


def test_on_a_mixed_fleet_a_pooled_tenants_active_window_leaves_the_rest_of_each_type_in_the_pool():
    """A mixed fleet (gn1, gn2 a100; gn3, gn4 t4): team-high's window holds one t4 node (its reservation, made
    ahead on nodes of its type); the pool's reservation holds the pooled holds per type less what the active window
    holds of that type (`covered_by_type`): the two a100 nodes (team-high's 4 beyond its window, team-high2's 4),
    no t4 node. Before, the pool's per-type ask kept the window's t4 GPUs: it reserved a t4 node the window's
    reservation already held for the same account, three nodes for 8 GPUs."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.slurm.holds import SlurmHolds
    from tests.actuators.test_slurm_holds import TENANTS as ALL

    sent = []
    typ = {"gn1": "a100", "gn2": "a100", "gn3": "t4", "gn4": "t4"}
    nodes = "\n".join(f"NodeName={n} State=IDLE Gres=gpu:{t}:4 GresUsed=gpu:{t}:0" for n, t in typ.items())
    h = SlurmHolds(read=lambda *a: nodes if "nodes" in a else "", accounts={t.name: t.slurm_account for t in ALL},
                   scontrol=lambda rep, *a: sent.append(a) or True, tier_of={t.name: t.tier for t in ALL},
                   tiers=["high"], prefix="gpuas-hold", shrink_delay_s=0.0, node_type=lambda n: typ[n.name])
    p = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=1.0, high_pool=4,
             reservations={"team-high": 8, "team-high2": 4}, quotas={}, limits={}, preemptions=(), notifications=(),
             stale=False, forecast_model="x", notes=(), memory=PolicyMemory(), pooled=("team-high", "team-high2"),
             holds_by_type={"team-high": {"t4": 4, "a100": 4}, "team-high2": {"a100": 4}},
             window_holds={"team-high": 4}, window_holds_by_type={"team-high": {"t4": 4}})
    rep = ActionReport("slurm", False)
    h.apply(p, rep, [], covered={"acct-high": 4}, covered_by_type={"acct-high": {"t4": 4}})
    made = {a[2]: a for a in sent if a[:2] == ("create", "reservation")}
    pool = made["ReservationName=gpuas-hold-pool"]
    assert "Accounts=acct-high,acct-high2" in pool                                    # the account stays pooled
    assert sorted(next(x for x in pool if x.startswith("Nodes=")).removeprefix("Nodes=").split(",")) == \
        ["gn1", "gn2"], pool
    assert "ReservationName=gpuas-hold-team-high" not in made                         # nothing held twice


def test_active_windows_gpus_per_account_and_on_a_mixed_fleet_per_type():
    """SlurmWindows.active_gpus: the active window reservations' GPUs per account (what its hold need not hold again)
    and, on a mixed fleet, per account and GPU type (covered_by_type); an inactive reservation, another prefix's and
    a node the node list does not know count for nothing; a one-model cluster has no per-type figures."""
    from types import SimpleNamespace

    from daemon.actuators.slurm.holds import Node
    from daemon.actuators.slurm.windows import SlurmWindows

    typ = {"gn1": "a100", "gn2": "a100", "gn3": "t4"}
    nodes = [Node(n, "IDLE", 4, 0) for n in typ]
    out = "\n".join([
        "ReservationName=gpuas-win-a State=ACTIVE Nodes=gn[1,3] Accounts=acct-high,acct-norm",
        "ReservationName=gpuas-win-b State=ACTIVE Nodes=gn2,gn9 Accounts=acct-high",
        "ReservationName=gpuas-win-c State=INACTIVE Nodes=gn1 Accounts=acct-high",
        "ReservationName=other-d State=ACTIVE Nodes=gn1 Accounts=acct-high",
    ])

    def windows(node_type):
        return SlurmWindows(read=lambda *a: "", scontrol=lambda *a: True, prefix="gpuas-win", clock=lambda: 0.0,
                            holds=SimpleNamespace(node_type=node_type))

    assert windows(lambda n: typ[n.name]).active_gpus(out, nodes) == (
        {"acct-high": 12, "acct-norm": 8},
        {"acct-high": {"a100": 8, "t4": 4}, "acct-norm": {"a100": 4, "t4": 4}})
    assert windows(None).active_gpus(out, nodes) == ({"acct-high": 12, "acct-norm": 8}, {})


def test_a_recurring_reservation_just_after_its_occurrence_ended_is_left_for_slurmctld_to_move_on():
    """After an occurrence ends, slurmctld shows the reservation INACTIVE at its past StartTime for some seconds
    (about 20 s on 22.05) before it moves it to the next occurrence by itself. In that gap it is the same window:
    nothing is deleted, re-made or detached. Before, it read as 'its window changed' every day, and its jobs were
    detached. A reservation still at its past occurrence well after (slurmctld did not move it) is re-made."""
    from types import SimpleNamespace

    from daemon.actuators.base import ActionReport
    from daemon.actuators.slurm.holds import Node, RunningJob
    from daemon.actuators.slurm.windows import MOVE_ON_GRACE, SlurmWindows

    w = window("eod", cron="0 14 * * *", duration_minutes=60, reclaim_before_minutes=15)
    ended = dt.datetime(2026, 3, 2, 15, 0, tzinfo=dt.timezone.utc)        # yesterday 13:45 + 75 min of reservation
    begin = (ended - dt.timedelta(minutes=75)).astimezone().replace(tzinfo=None)
    line = (f"ReservationName=gpuas-win-eod StartTime={begin:%Y-%m-%dT%H:%M:%S} Duration=01:15:00 Nodes=gn1 "
            "Accounts=acct-norm Flags=IGNORE_JOBS,MAGNETIC,DAILY State=INACTIVE")
    nodes = [Node(n, "IDLE", 4, 0) for n in ("gn1", "gn2")]
    jobs = [RunningJob("7", "acct-norm", ("gn1",), 4, "gpuas-win-eod", True)]   # a job in it, not to be detached

    def apply_at(t: dt.datetime) -> list[tuple]:
        calls: list[tuple] = []
        holds = SimpleNamespace(account_of={"team-norm": "acct-norm"}, node_type=None,
                                choose_typed_fit=lambda *a, **k: (["gn2"], False))
        sw = SlurmWindows(read=lambda *a: "", scontrol=lambda rep, *a: calls.append(a) or True, holds=holds,
                          prefix="gpuas-win", clock=t.timestamp)
        sw.apply([w], ActionReport("slurm", False), jobs, line, nodes)
        return calls

    assert apply_at(ended + dt.timedelta(seconds=20)) == []
    stale = apply_at(ended + MOVE_ON_GRACE + dt.timedelta(minutes=1))
    assert ("delete", "ReservationName=gpuas-win-eod") in stale and any(c[0] == "create" for c in stale)


# ---- before it is active: what the simulator replays for Slurm ----------------------------------------------------
# A window's reservation, made ahead, before it is active, and where it cannot go, on the real slurmctld: what the
# replay does for Slurm (daemon/sim/cluster_holds.py ``_ahead``; tests/sim/test_windows_slurm_sim.py). From the moment
# it is made slurmctld starts on its nodes no job whose time limit reaches into it, another account's or its own
# tenant's (reason ``Reservation``); a job that ends before its StartTime starts there. The partitions have
# ``MaxTime=INFINITE``, so a job without ``--time`` (every simulated job) never starts there before the window. And a
# window's reservation cannot be made on, nor moved to, a node of the pool's UNLIMITED hold.

@pytest.fixture
def cleaned(slurm):
    yield
    slurm_reset(slurm)


def pooled_plan(windows, reserve=None, pooled=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=1, reservations=reserve or {},
                quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory(), pooled=pooled, windows=tuple(w.model_dump(mode="json") for w in windows))


def whole_node_job(slurm, account, minutes=None):
    """A 4-GPU job (a whole node) of `account`; no --time: the partition's MaxTime, INFINITE (services.py)."""
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
@pytest.mark.usefixtures("cleaned")
def test_nothing_without_a_time_limit_starts_on_a_windows_nodes_before_it_is_active(slurm):
    rep = actuator(slurm).apply(pooled_plan([in_three_hours()]))
    assert rep.ok, rep.errors
    r = parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", "gpuas-win-later"))
    assert r["State"] == "INACTIVE" and r["Accounts"] == "acct-norm"
    reserved = r["Nodes"]
    others = {n for n in NODES if n != reserved}
    # another account's jobs without a time limit: two run on the other nodes, the next waits, the reserved node
    # stays idle
    running = [whole_node_job(slurm, "acct-low") for _ in others]
    wait_for(lambda: all(slurm_jobs(slurm).get(j, ("",))[0] == "RUNNING" for j in running), what="two jobs running",
             timeout=60)
    assert {slurm_jobs(slurm)[j][1] for j in running} == others
    second = whole_node_job(slurm, "acct-low")
    wait_for(lambda: reason(slurm, second) not in ("", "None"), what="the third job considered", timeout=90)
    assert slurm_jobs(slurm)[second][0] == "PENDING", slurm_jobs(slurm)
    slurm_run(slurm["env"], "scancel", second)
    # the window's own tenant without a time limit, alone in the queue, waits for the reservation to start
    own = whole_node_job(slurm, "acct-norm")
    wait_for(lambda: reason(slurm, own) == "Reservation", what="the tenant's job waiting for its reservation",
             timeout=90, dead=lambda: "it started on " + slurm_jobs(slurm)[own][1]
             if slurm_jobs(slurm).get(own, ("",))[0] == "RUNNING" else None)
    # nothing runs on the reserved node (PLANNED: the backfill scheduler has planned the tenant's job there at the
    # reservation's start)
    assert not [j for j, (state, node, _) in slurm_jobs(slurm).items() if state == "RUNNING" and node == reserved]
    assert slurm_run(slurm["env"], "sinfo", "-h", "-n", reserved, "-o", "%T").strip() in ("idle", "planned")
    # a job that ends before the reservation's StartTime starts there (what a time limit would let the replay lend)
    slurm_run(slurm["env"], "scancel", own)
    short = whole_node_job(slurm, "acct-low", minutes=30)
    wait_for(lambda: slurm_jobs(slurm).get(short, ("",))[0] == "RUNNING", what="the short job running", timeout=90)
    assert slurm_jobs(slurm)[short][1] == reserved


@pytest.mark.services
@pytest.mark.usefixtures("cleaned")
def test_a_windows_reservation_takes_no_node_of_the_pools_unlimited_hold(slurm):
    pooled = ("team-high", "team-high2")
    a = actuator(slurm)
    assert a.apply(pooled_plan([], reserve={"team-high": 4}, pooled=pooled)).ok
    pool = parse_kv_line(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation", "gpuas-hold-pool"))
    assert pool["Duration"].startswith("365-") or pool["EndTime"] > "2027", pool   # UNLIMITED
    # a pooled tenant's window: its reservation is made outside the pool's node
    w = window("high", tenant="team-high", gpus=4, every="daily", at="03:00", duration_minutes=60)
    rep = a.apply(pooled_plan([w], reserve={"team-high": 4}, pooled=pooled))
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


@pytest.mark.services
@pytest.mark.usefixtures("cleaned")
def test_at_lead_a_window_is_reserved_only_at_its_lead_time_for_that_occurrence_alone(slurm):
    """windows_reserved = at_lead (the default): no reservation before the lead time (its nodes are any job's, none
    without a time limit kept off them), then, within two cycle intervals of it, one for that occurrence alone:
    StartTime the start less reclaim_before, Duration reclaim_before + duration, no recurrence flag (slurmctld purges
    it once it ends); kept while it is active."""
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                      dry_run=False, cycle_s=15.0)                   # made once StartTime is within 2 x 15 s
    now = dt.datetime.now(dt.timezone.utc)
    begin = (now + dt.timedelta(seconds=60)).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    start = begin + dt.timedelta(minutes=1)
    daily = window("eod", cron=f"{start.minute} {start.hour} * * *", duration_minutes=5, reclaim_before_minutes=1)
    # one made ahead before (windows_reserved was "ahead") is released, saying why
    assert actuator(slurm).apply(plan([daily])).ok and "DAILY" in shown(slurm, "gpuas-win-eod")["Flags"]
    rep = a.apply(plan([daily]))
    assert rep.ok and any("made at its lead time only" in x for x in rep.actions), (rep.actions, rep.errors)
    rep = a.apply(plan([daily]))
    assert rep.ok and rep.actions == [], (rep.actions, rep.errors)
    assert "gpuas-win-eod" not in slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation")
    # the lead time two cycles away: the reservation is made, for this occurrence only
    wait_for(lambda: dt.datetime.now(dt.timezone.utc) >= begin - dt.timedelta(seconds=25), what="the lead time near",
             timeout=150)
    rep = a.apply(plan([daily]))
    assert rep.ok, rep.errors
    r = shown(slurm, "gpuas-win-eod")
    assert r["StartTime"] == begin.astimezone().strftime("%Y-%m-%dT%H:%M:%S") and r["Duration"] == "00:06:00"
    flags = set(r["Flags"].split(","))
    assert {"IGNORE_JOBS", "MAGNETIC"} <= flags and not flags & {"DAILY", "WEEKLY", "WEEKDAY", "WEEKEND"}
    assert r["Accounts"] == "acct-norm" and r["State"] == "INACTIVE"
    assert a.apply(plan([daily])).actions == []                      # the same window again: nothing to do
    # active: kept (the next occurrence is not reserved before its own lead time)
    wait_for(lambda: shown(slurm, "gpuas-win-eod")["State"] == "ACTIVE", what="the reservation active", timeout=90)
    rep = a.apply(plan([daily]))
    assert rep.ok and rep.actions == [], (rep.actions, rep.errors)
    assert shown(slurm, "gpuas-win-eod")["StartTime"] == r["StartTime"]


@pytest.mark.services
@pytest.mark.usefixtures("cleaned")
def test_reserved_ahead_the_log_names_once_the_partitions_that_give_jobs_no_time_limit(slurm, caplog):
    """The test cluster's partitions have MaxTime=INFINITE and no DefaultTime: a job without --time never starts
    on a window's reservation made ahead; the log says so, once per actuator."""
    a = actuator(slurm)
    with caplog.at_level("WARNING", logger="gpu_autoscaler.actuator.slurm"):
        assert a.apply(plan([in_three_hours()])).ok
        said = [r.getMessage() for r in caplog.records if "reserved ahead" in r.getMessage()]
        assert len(said) == 1 and "partitions high,normal,low give a job without --time no time limit" in said[0]
        caplog.clear()
        assert a.apply(plan([in_three_hours()])).ok
        assert not [r for r in caplog.records if "reserved ahead" in r.getMessage()]


@pytest.mark.services
@pytest.mark.usefixtures("cleaned")
def test_at_lead_a_pooled_tenants_window_takes_the_pools_node_where_it_runs(slurm):
    """windows_reserved = at_lead, a pooled tenant's window: its reservation, made at the lead time, is on the pool's
    node where the tenant's job runs (taken out of the pool's reservation first: slurmctld refuses an overlap), as
    Kueue's hold and the replay take it; the job keeps running there, and the pool neither takes the free node for
    the GPUs it gives up when the window opens nor loses its other node. Before, the window went to the free node
    outside the pool, whose nodes carry other tenants' work on a busy cluster, and the pool kept the tenant's."""
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                      dry_run=False, cycle_s=900.0)          # its lead time is within two cycles (30 min)
    pooled = ("team-high", "team-high2")
    reserve = {"team-high": 4, "team-high2": 4}
    assert a.apply(pooled_plan([], reserve=reserve, pooled=pooled)).ok
    pool = set(expand(shown(slurm, "gpuas-hold-pool")["Nodes"]))
    assert len(pool) == 2
    job = whole_node_job(slurm, "acct-high")
    wait_for(lambda: slurm_jobs(slurm).get(job, ("",))[0] == "RUNNING", what="the pooled job running", timeout=60)
    there = slurm_jobs(slurm)[job][1]
    assert there in pool
    start = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=20)).strftime("%H:%M")
    w = window("high", tenant="team-high", gpus=4, every="daily", at=start, duration_minutes=60,
               reclaim_before_minutes=10)
    rep = a.apply(pooled_plan([w], reserve=reserve, pooled=pooled))
    assert rep.ok, rep.errors
    r = shown(slurm, "gpuas-win-high")
    assert r["Nodes"] == there and r["State"] == "INACTIVE" and r["Accounts"] == "acct-high", (r, rep.actions)
    assert set(expand(shown(slurm, "gpuas-hold-pool")["Nodes"])) == pool - {there}
    assert slurm_jobs(slurm)[job][:2] == ("RUNNING", there)
    assert a.apply(pooled_plan([w], reserve=reserve, pooled=pooled)).actions == []     # nothing more to do


def expand(nodes: str) -> list[str]:
    from daemon.actuators.slurm.holds import expand_hostlist

    return expand_hostlist(nodes)
