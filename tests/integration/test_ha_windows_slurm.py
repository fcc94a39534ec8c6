"""HA: a window's Slurm reservation across a takeover (issue 39), on a real slurmctld (3 nodes x 4 GPUs) with a real
redis-server lease. The reservations the old leader made are adopted by the new one (read back from slurmctld by
name): neither duplicated nor deleted nor re-made, the active one with the tenant's job in it included, and its nodes
are the tenant's held nodes for the new leader too. The old leader's stale token sends nothing."""

import datetime as dt

import pytest
import redis

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.windows import parse_window_reservations
from daemon.config import SlurmActuatorConfig
from daemon.ha.fencing import FencedActuator
from daemon.ha.lease import RedisLease
from tests.actuators.test_slurm_holds import TENANTS, full, jobs, sbatch  # noqa: F401 (full: a fixture)
from tests.actuators.test_slurm_windows import plan, shown, window
from tests.support.services import slurm_cluster, slurm_run, wait_for

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=("gn1", "gn2", "gn3"), gpus=4) as s:
        yield s


def _replica(slurm, redis_url, name):
    """A replica: a new process's Slurm actuator (it knows nothing of the reservations), fenced by its lease."""
    lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
    inner = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", warn_lead_s=0,
                                             windows_reserved="ahead"),
                          TENANTS, dry_run=False)
    return lease, FencedActuator(inner, lease)


def _ours(slurm):
    out = slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation")
    return {r.name: r for r in parse_window_reservations(out, "gpuas")}


@pytest.mark.usefixtures("full")
def test_the_new_leader_adopts_the_old_leaders_window_reservations(slurm, r, redis_url):
    now = dt.datetime.now(dt.timezone.utc)
    begin = (now + dt.timedelta(seconds=100)).replace(second=0, microsecond=0)
    start = begin + dt.timedelta(minutes=1)
    soon = window("eod", cron=f"{start.minute} {start.hour} * * *", duration_minutes=5, reclaim_before_minutes=1)
    later = window("nine", tenant="team-high", every="weekdays", at="09:00", duration_minutes=30,
                   reclaim_before_minutes=15)
    lease_a, a = _replica(slurm, redis_url, "a")
    assert lease_a.tick()
    rep = a.apply(plan([soon, later]))
    assert rep.ok, rep.errors
    made = _ours(slurm)
    assert sorted(made) == ["gpuas-win-eod", "gpuas-win-nine"]
    # a dies (kill -9: its key lapses); b, a new process, takes over and plans the same windows
    r.delete("gpuas:leader")
    lease_b, b = _replica(slurm, redis_url, "b")
    assert lease_b.tick() and lease_b.token == 2
    rep = b.apply(plan([soon, later]))
    assert rep.ok, rep.errors
    assert rep.actions == [], rep.actions                       # adopted: nothing created, deleted or re-made
    assert _ours(slurm) == made
    assert a.apply(plan([])).fenced and _ours(slurm) == made    # the old leader's stale token deletes nothing
    # the window opens under b: slurmctld starts the reservation b never made; the tenant's job runs in it
    wait_for(lambda: shown(slurm, "gpuas-win-eod")["State"] == "ACTIVE", what="window reservation active",
             timeout=150)
    node = made["gpuas-win-eod"].nodes[0]
    view = b.cluster_nodes(tuple(t.name for t in TENANTS))
    assert {n: int(h) for n, h in zip(view.names, view.held_by) if n == node} == {node: 3}   # team-norm's
    low_there = [j for j, v in jobs(slurm).items() if v[1] == node]
    slurm_run(slurm["env"], "scancel", *low_there)
    mine = sbatch(slurm, "normal", "acct-norm", gpus=4)
    wait_for(lambda: jobs(slurm)[mine][0] == "RUNNING", what="the window's job running", timeout=60)
    assert jobs(slurm)[mine][2] == "gpuas-win-eod"
    # b dies in the window; c takes over: the active reservation and its job stay, and no second hold is made for
    # the window's GPUs (the reservation covers the plan's hold for team-norm)
    r.delete("gpuas:leader")
    lease_c, c = _replica(slurm, redis_url, "c")
    assert lease_c.tick() and lease_c.token == 3
    rep = c.apply(plan([soon, later], {"team-norm": 4}))
    assert rep.ok, rep.errors
    assert not any("window" in x or "gpuas-hold-team-norm" in x for x in rep.actions), rep.actions
    now_ours = _ours(slurm)
    assert now_ours["gpuas-win-eod"].nodes == made["gpuas-win-eod"].nodes and \
        now_ours["gpuas-win-eod"].state == "ACTIVE" and now_ours["gpuas-win-nine"] == made["gpuas-win-nine"]
    assert jobs(slurm)[mine][0] == "RUNNING"
    # the new leader owns them: a window deleted under c takes its reservation with it (its job detached, running)
    rep = c.apply(plan([later]))
    assert rep.ok, rep.errors
    assert sorted(_ours(slurm)) == ["gpuas-win-nine"] and jobs(slurm)[mine][:2] == ("RUNNING", node)
