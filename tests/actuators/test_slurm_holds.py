"""Slurm holds on a real slurmctld with three slurmd (3 nodes x 4 GPUs): whole-node reservations."""

import dataclasses
import time

import pytest

from daemon.actuators.base import ActionReport
from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.holds import (
    Node,
    RunningJob,
    SlurmHolds,
    expand_hostlist,
    parse_kv_line,
    parse_nodes,
    parse_reservations,
)
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.support.services import slurm_cluster, slurm_jobs as jobs, slurm_reset, slurm_run, wait_for

NODES = ("gn1", "gn2", "gn3")
TENANTS = [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
           TenantConfig(name="team-high2", tier="high", slurm_account="acct-high2"),
           TenantConfig(name="team-low", tier="low", slurm_account="acct-low"),
           TenantConfig(name="team-norm", tier="normal", slurm_account="acct-norm")]


def plan(reserve=0, *pre, other=0, pooled=()):
    res = {t: g for t, g in (("team-high", reserve), ("team-high2", other)) if g}
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=2,
                reservations=res, quotas={}, limits={}, preemptions=tuple(pre),
                notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory(), pooled=pooled)


# ---- pure parts -------------------------------------------------------------------------------
def test_hostlists_and_scontrol_output():
    assert expand_hostlist("gn[1-3,05],login1") == ["gn1", "gn2", "gn3", "gn05", "login1"]
    assert expand_hostlist("(null)") == [] and expand_hostlist("") == []
    res = parse_reservations("ReservationName=gpuas-hold-high StartTime=2026-12-04T01:08:15 Nodes=gn[1-2] NodeCnt=2 "
                             "Flags=IGNORE_JOBS,SPEC_NODES,MAGNETIC TRES=cpu=16 Users=(null) Accounts=a,b State=ACTIVE")
    assert res[0].nodes == ("gn1", "gn2") and res[0].accounts == ("a", "b") and "MAGNETIC" in res[0].flags
    nodes = parse_nodes("NodeName=gn1 Arch=x86_64 Gres=gpu:a100:4(S:0) GresUsed=gpu:a100:2(IDX:0-1) State=MIXED\n"
                        "NodeName=gn2 Gres=gpu:4 GresUsed=gpu:0 State=IDLE+DRAIN")
    assert (nodes[0].gpus, nodes[0].gpus_used, nodes[0].healthy) == (4, 2, True) and not nodes[1].healthy


def test_a_node_reason_is_free_text_and_overrides_no_field():
    # scontrol -d -o show nodes (22.05): Reason= comes last, spaces and all, then [user@time]
    line = ("NodeName=gn1 Arch=x86_64 CoresPerSocket=1 AvailableFeatures=a100 Gres=gpu:a100:4 GresUsed=gpu:a100:4 "
            "OS=Linux 6.1 #1 SMP PREEMPT_DYNAMIC State=DRAIN+ALLOCATED ThreadsPerCore=1 Partitions=high,low "
            "AllocTRES= CapWatts=n/a Reason=bad gpu State=IDLE Gres=gpu:8 GresUsed=gpu:0 NodeName=gn9 "
            "[root@2026-12-06T02:26:38]")
    kv = parse_kv_line(line)
    assert kv["Reason"] == "bad gpu State=IDLE Gres=gpu:8 GresUsed=gpu:0 NodeName=gn9 [root@2026-12-06T02:26:38]"
    assert (kv["State"], kv["Gres"], kv["NodeName"], kv["AllocTRES"]) == ("DRAIN+ALLOCATED", "gpu:a100:4", "gn1", "")
    (node,) = parse_nodes(line)
    assert (node.name, node.gpus, node.gpus_used, node.healthy, node.features) == ("gn1", 4, 4, False, "a100")
    assert parse_kv_line("NodeName=gn2 State=IDLE Reason=none")["Reason"] == "none"


def holds(delay=0.0, clock=None):
    return SlurmHolds(read=None, scontrol=None, accounts={"h": "acct-high"}, tier_of={"h": "high"}, tiers=["high"],
                      prefix="gpuas-hold", shrink_delay_s=delay, clock=clock or time.monotonic)


def test_node_choice_whole_nodes_prefers_current_then_useful():
    h = holds()
    nodes = [Node("a", "MIXED", 4, 4), Node("b", "IDLE", 4, 0), Node("c", "MIXED", 4, 4), Node("d", "DOWN*", 4, 0)]
    jobs = [RunningJob("1", "acct-high", ("c",), 2, "", True)]
    # 5 GPUs need two whole nodes: the idle one and the one the high tier already runs on; never the down one
    assert h.choose(nodes, jobs, (), 5, ("acct-high",), {}, set(), keep=False) == ["b", "c"]
    # GPUs this plan's preemptions free count too; a node in someone else's reservation is never taken
    assert h.choose(nodes, [], (), 4, ("acct-high",), {"a": 4}, {"b"}, keep=False) == ["a"]
    # the current node stays while it still covers the need (no churn)
    assert h.choose(nodes, jobs, ("a",), 4, ("acct-high",), {}, set(), keep=False) == ["a"]
    # keep=True (inside the shrink delay): every current node stays
    assert h.choose(nodes, jobs, ("a", "b"), 1, ("acct-high",), {}, set(), keep=True) == ["a", "b"]


def test_many_pending_two_type_jobs_are_checked_once_per_set_of_types():
    """A hold's nodes for its accounts' pending jobs that ask several GPU types at once (choose_typed's `together`):
    each job was an entry checked against every node of the type, so a tenant's 20,000 such jobs took 2 s per type
    and call over 1,000 nodes, each cycle. Entries of one set of types are one now, their GPUs summed."""
    checks = [0]

    class Need(frozenset):
        def __le__(self, other):
            checks[0] += 1
            return frozenset.__le__(self, other)

        __hash__ = frozenset.__hash__

    h = SlurmHolds(read=None, scontrol=None, accounts={"h": "acct-high"}, tier_of={"h": "high"}, tiers=["high"],
                   prefix="gpuas-hold", shrink_delay_s=0.0, node_type=lambda n: "a100")
    nodes = [Node(f"n{i}", "IDLE", 4, 0, gres="gpu:a100:4" + (",gpu:t4:1" if i >= 95 else "")) for i in range(100)]
    together = tuple((Need({"a100", "t4"}), 1) for _ in range(1_000))
    got = h.choose_typed(nodes, [], (), 4, ("acct-high",), {}, set(), keep=False, by_type={"a100": 4},
                         together=together)
    assert len(got) == 1 and got[0] in {f"n{i}" for i in range(95, 100)}, got
    assert checks[0] <= 2 * len(nodes), checks


def test_node_choice_prefers_nodes_without_work_that_cannot_be_preempted():
    h = SlurmHolds(read=None, scontrol=None, accounts={"h": "acct-high", "n": "acct-norm", "l": "acct-low"},
                   tier_of={"h": "high", "n": "normal", "l": "low"}, tiers=["high"], prefix="gpuas-hold",
                   shrink_delay_s=0.0)
    # a: a normal job on 2 GPUs, 2 free; b: low jobs on all 4 GPUs. b is taken: its low jobs can be preempted
    # (or end while the hold keeps new work off), while a stays split until the normal job ends by itself
    nodes = [Node("a", "MIXED", 4, 2), Node("b", "ALLOCATED", 4, 4)]
    jobs = [RunningJob("1", "acct-norm", ("a",), 2, "", True), RunningJob("2", "acct-low", ("b",), 4, "", True)]
    assert h.choose(nodes, jobs, (), 4, ("acct-high",), {}, set(), keep=False) == ["b"]


def test_pooled_tenants_want_one_hold_with_every_account():
    h = SlurmHolds(read=None, scontrol=None, accounts={t.name: t.slurm_account for t in TENANTS},
                   tier_of={t.name: t.tier for t in TENANTS}, tiers=["high"], prefix="gpuas-hold", shrink_delay_s=0.0)
    w = h.wanted(plan(3, other=5, pooled=("team-high", "team-high2")))
    assert w == {"gpuas-hold-team-high": (0, ("acct-high",)), "gpuas-hold-team-high2": (0, ("acct-high2",)),
                 "gpuas-hold-pool": (8, ("acct-high", "acct-high2"))}
    assert h.wanted(plan(3))["gpuas-hold-pool"] == (0, ())


# ---- real slurmctld ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4) as s:
        yield s


def sbatch(slurm, partition, account, gpus=2):
    return slurm_run(slurm["env"], "sbatch", "--parsable", f"--partition={partition}", f"--account={account}",
                     f"--gres=gpu:{gpus}", "--requeue", "-o", "/dev/null", "--wrap", "sleep 600").strip().split(";")[0]


def our_res(slurm):
    return [r for r in parse_reservations(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation"))
            if r.name.startswith("gpuas-hold")]


def actuator(slurm, delay=0.0, dry_run=False, clock=None):
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", hold_shrink_delay_s=delay,
                                          warn_lead_s=0),
                      TENANTS, dry_run=dry_run)
    if clock is not None:
        a.holds.clock = clock
    return a


@pytest.fixture
def full(slurm):
    """Six low-priority 2-GPU jobs fill the 12 GPUs."""
    ids = [sbatch(slurm, "low", "acct-low") for _ in range(6)]
    wait_for(lambda: all(jobs(slurm).get(j, ("",))[0] == "RUNNING" for j in ids), what="low jobs running", timeout=60)
    yield ids
    slurm_reset(slurm)


@pytest.mark.services
def test_hold_keeps_low_jobs_off_and_lets_the_high_tier_on(slurm, full):
    a = actuator(slurm)
    j = jobs(slurm)
    target = j[full[0]][1]
    on_target = [x for x in full if j[x][1] == target]
    assert len(on_target) == 2
    # the plan: hold 4 GPUs for team-high and preempt the two low jobs on one node
    rep = a.apply(plan(4, *(Preemption(x, "team-low", 2, target, "peak ahead for team-high") for x in on_target)))
    assert rep.ok, rep.errors
    (res,) = our_res(slurm)
    assert res.nodes == (target,) and res.accounts == ("acct-high",)
    assert {"IGNORE_JOBS", "MAGNETIC"} <= res.flags
    wait_for(lambda: all(jobs(slurm)[x][0] == "PENDING" for x in on_target), what="requeued", timeout=20)
    low = sbatch(slurm, "low", "acct-low")
    time.sleep(4)
    j = jobs(slurm)
    assert j[low][0] == "PENDING"                       # 4 GPUs are free on the held node, yet it does not start
    assert all(j[x][0] == "PENDING" for x in on_target)  # nor do the requeued ones
    high = sbatch(slurm, "high", "acct-high")
    wait_for(lambda: jobs(slurm)[high][0] == "RUNNING", what="high job running", timeout=30)
    j = jobs(slurm)
    assert j[high][1] == target and j[high][2] == res.name  # MAGNETIC: it used the hold without asking for it
    assert not any(j[x][1] == target for x in [low, *on_target] if j[x][0] == "RUNNING")
    assert a.apply(plan(4)).actions == []                   # same plan again: nothing to do
    # the forecast recedes: the hold goes, the high job keeps running, low work may use the node again
    rep = a.apply(plan(0))
    assert rep.ok, rep.errors
    assert our_res(slurm) == []
    assert jobs(slurm)[high][:2] == ("RUNNING", target)
    wait_for(lambda: any(v[:2] == ("RUNNING", target) for k, v in jobs(slurm).items() if k != high),
             what="low job on the released node", timeout=30)


@pytest.mark.services
def test_a_replica_leading_again_waits_the_shrink_delay_afresh(slurm, full, r, redis_url):
    """HA with a real redis-server lease: a holds 3 nodes and starts wanting fewer (the delay running), is paused
    past its lease; b leads and its plans want the 3 nodes again, then b dies; a leads again 900 s on and wants
    fewer. Before, a shrank at once, on the wish it saw start 900 s ago and not since (b's plans between wanted
    more); now the delay starts again."""
    import redis

    from daemon.ha.fencing import FencedActuator
    from daemon.ha.lease import RedisLease

    now = [1000.0]

    def replica(name):
        lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
        return lease, FencedActuator(actuator(slurm, delay=300, clock=lambda: now[0]), lease)

    lease_a, a = replica("a")
    assert lease_a.tick() and lease_a.token == 1
    assert a.apply(plan(10)).ok and len(our_res(slurm)[0].nodes) == 3
    now[0] += 100
    assert a.apply(plan(3)).ok and len(our_res(slurm)[0].nodes) == 3      # wants fewer: the delay runs
    r.delete("gpuas:leader")                                              # a paused past its lease
    assert not lease_a.tick()
    lease_b, b = replica("b")
    assert lease_b.tick() and lease_b.token == 2
    rep = b.apply(plan(10))                                               # b's plans want the 3 nodes
    assert rep.ok and len(our_res(slurm)[0].nodes) == 3, rep.errors
    r.delete("gpuas:leader")                                              # b dies
    now[0] += 900
    assert lease_a.tick() and lease_a.token == 3                          # a leads again
    rep = a.apply(plan(3))
    assert rep.ok, rep.errors
    assert len(our_res(slurm)[0].nodes) == 3, "shrank on a wish for fewer seen in an earlier term"
    now[0] += 300
    rep = a.apply(plan(3))
    assert rep.ok and len(our_res(slurm)[0].nodes) == 1, rep.errors     # its own 300 s: shrinks


@pytest.mark.services
def test_hold_grows_at_once_and_shrinks_after_the_delay(slurm, full):
    now = [1000.0]
    a = actuator(slurm, delay=300, clock=lambda: now[0])
    assert a.apply(plan(6)).ok
    assert len(our_res(slurm)[0].nodes) == 2            # 6 GPUs = two whole 4-GPU nodes
    assert a.apply(plan(10)).ok
    assert len(our_res(slurm)[0].nodes) == 3            # grows at once
    now[0] += 100
    assert a.apply(plan(3)).ok
    assert len(our_res(slurm)[0].nodes) == 3            # wants fewer, but not for long enough
    now[0] += 299
    assert a.apply(plan(3)).ok
    assert len(our_res(slurm)[0].nodes) == 3            # 299 s of wanting fewer: still held
    now[0] += 1
    rep = a.apply(plan(3))
    assert rep.ok and len(our_res(slurm)[0].nodes) == 1  # 300 s: shrinks to the one node 3 GPUs need
    now[0] += 10
    a.apply(plan(0))
    assert len(our_res(slurm)) == 1                      # release waits for the delay too
    now[0] += 301
    a.apply(plan(0))
    assert our_res(slurm) == []


@pytest.mark.services
def test_reconcile_at_start_touches_only_our_reservations_and_release_stops_no_job(slurm, full):
    slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=gpuas-hold-old", "StartTime=now",
              "Duration=UNLIMITED", "Accounts=acct-x", "Nodes=gn1", "Flags=IGNORE_JOBS")
    slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=maint-window", "StartTime=now",
              "Duration=60", "Users=root", "Nodes=gn3", "Flags=IGNORE_JOBS")
    assert actuator(slurm, dry_run=True).apply(plan(4)).actions  # dry run: says what it would do ...
    assert [r.name for r in our_res(slurm)] == ["gpuas-hold-old"]  # ... and does nothing
    a = actuator(slurm)
    rep = a.apply(plan(4))
    assert rep.ok, rep.errors
    names = {r.name: r for r in parse_reservations(slurm_run(slurm["env"], "scontrol", "-o", "show", "reservation"))}
    assert "gpuas-hold-old" not in names and "maint-window" in names
    assert names["gpuas-hold-team-high"].nodes != ("gn3",)   # never a node in someone else's reservation
    assert names["gpuas-hold-team-high"].accounts == ("acct-high",)
    high = sbatch(slurm, "high", "acct-high")
    held = names["gpuas-hold-team-high"].nodes[0]
    low_there = [k for k, v in jobs(slurm).items() if v[1] == held]
    slurm_run(slurm["env"], "scontrol", "requeue", low_there[0])
    wait_for(lambda: jobs(slurm)[high][2] == "gpuas-hold-team-high", what="high job in the hold", timeout=30)
    rep = a.release_holds()                               # the daemon stops
    assert rep.ok, rep.errors
    assert our_res(slurm) == []
    assert jobs(slurm)[high][0] == "RUNNING"


@pytest.mark.services
def test_each_tenant_holds_its_own_whole_nodes(slurm, full):
    a = actuator(slurm)
    assert a.apply(plan(3, other=5)).ok                    # 3 GPUs: one node; 5 GPUs: two nodes
    res = {r.name: r for r in our_res(slurm)}
    assert set(res) == {"gpuas-hold-team-high", "gpuas-hold-team-high2"}
    assert len(res["gpuas-hold-team-high"].nodes) == 1 and len(res["gpuas-hold-team-high2"].nodes) == 2
    assert not set(res["gpuas-hold-team-high"].nodes) & set(res["gpuas-hold-team-high2"].nodes)
    assert res["gpuas-hold-team-high2"].accounts == ("acct-high2",)
    assert a.apply(plan(3, other=5)).actions == []          # stable: nothing moves
    assert a.apply(plan(3)).ok                              # team-high2 needs nothing now: its hold goes
    assert [r.name for r in our_res(slurm)] == ["gpuas-hold-team-high"]


@pytest.mark.services
def test_an_aged_low_tier_tenant_is_held_like_any_other(slurm, full):
    """Aging (or an operator's floor) makes the plan hold GPUs for a tenant outside the high tier: on Slurm it
    is a whole-node reservation for that tenant's account (hold_tiers: every tier by default), gone when the
    plan stops asking."""
    a = actuator(slurm)
    aged = Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=2, reservations={"team-low": 4},
                quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())
    rep = a.apply(aged)
    assert rep.ok, rep.errors
    (res,) = our_res(slurm)
    assert res.name == "gpuas-hold-team-low" and res.accounts == ("acct-low",) and len(res.nodes) == 1
    assert {"IGNORE_JOBS", "MAGNETIC"} <= res.flags
    j = jobs(slurm)
    assert all(j[x][0] == "RUNNING" for x in full)         # its own jobs there keep running
    assert a.apply(plan(0)).ok and our_res(slurm) == []


@pytest.mark.services
def test_a_timed_out_create_is_reported_and_no_hold_outlives_the_plan(slurm, full, tmp_path):
    # the real scontrol, behind a wrapper that answers late: the reservation is made, the daemon times out
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in ("squeue", "sinfo", "scancel", "sbatch"):
        (bin_dir / b).symlink_to(f"/usr/bin/{b}")
    slow = bin_dir / "scontrol"
    slow.write_text('#!/bin/sh\n/usr/bin/scontrol "$@"; rc=$?\n'
                    'case "$*" in *"create reservation"*) sleep 3;; esac\nexit $rc\n')
    slow.chmod(0o755)
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, timeout_s=1,
                                          hold_shrink_delay_s=0, warn_lead_s=0), TENANTS, dry_run=False)
    rep = a.apply(plan(4))
    assert any("timed out" in e or "expired" in e.lower() for e in rep.errors), rep.errors
    assert [r.name for r in our_res(slurm)] == ["gpuas-hold-team-high"]   # it was made after all
    rep = a.apply(plan(4))                                   # next cycle: adopted as it is, no second create
    assert rep.ok and not any("create" in x for x in rep.actions), rep.actions
    rep = a.apply(plan(0))                                   # the plan no longer asks: it goes
    assert rep.ok and our_res(slurm) == []


@pytest.mark.services
def test_a_pooled_hold_is_one_reservation_any_pooled_account_starts_in(slurm, full):
    a = actuator(slurm)
    assert a.apply(plan(3, other=1)).ok                      # one hold each first: two reservations
    assert {r.name for r in our_res(slurm)} == {"gpuas-hold-team-high", "gpuas-hold-team-high2"}
    rep = a.apply(plan(4, pooled=("team-high", "team-high2")))  # pooled: 4 GPUs for the tier, team-high2 idle
    assert rep.ok, rep.errors
    (res,) = our_res(slurm)                                   # the per-tenant holds went (no delay here)
    assert res.name == "gpuas-hold-pool" and len(res.nodes) == 1
    assert res.accounts == ("acct-high", "acct-high2") and {"IGNORE_JOBS", "MAGNETIC"} <= res.flags
    held = res.nodes[0]
    on_held = [k for k, v in jobs(slurm).items() if v[1] == held]
    for k in on_held:                                         # the low jobs there end (as a preemption would)
        slurm_run(slurm["env"], "scontrol", "requeue", k)
    high2 = sbatch(slurm, "high", "acct-high2", gpus=4)       # the tenant the GPUs were not forecast for
    wait_for(lambda: jobs(slurm)[high2][0] == "RUNNING", what="team-high2 job in the pool", timeout=30)
    j = jobs(slurm)
    assert j[high2][1] == held and j[high2][2] == "gpuas-hold-pool"
    assert not any(v[:2] == ("RUNNING", held) for k, v in j.items() if k != high2)   # no low job went back
    assert a.apply(plan(4, pooled=("team-high", "team-high2"))).actions == []        # stable
    assert a.apply(plan(0, pooled=("team-high", "team-high2"))).ok                   # nothing wanted: it goes
    assert our_res(slurm) == [] and jobs(slurm)[high2][0] == "RUNNING"


def test_a_held_node_the_holder_can_never_use_is_let_go():
    """As in the simulator: a current node stays in the hold while the holder's job (`job_gpus`) still fits
    beside the work of other accounts there that cannot be preempted; otherwise the hold moves."""
    h = SlurmHolds(read=None, scontrol=None, accounts={"h": "acct-high", "n": "acct-norm"},
                   tier_of={"h": "high", "n": "normal"}, tiers=["high"], prefix="gpuas-hold", shrink_delay_s=0.0)
    nodes = [Node("a", "MIXED", 4, 2), Node("b", "IDLE", 4, 0)]
    jobs = [RunningJob("1", "acct-norm", ("a",), 2, "", True)]
    assert h.choose(nodes, jobs, ("a",), 4, ("acct-high",), {}, set(), keep=False, job_gpus=2) == ["a"]
    assert h.choose(nodes, jobs, ("a",), 4, ("acct-high",), {}, set(), keep=False, job_gpus=4) == ["b"]
    # inside the shrink delay too: keeping a node no job of the holder fits on holds nothing usable
    assert h.choose(nodes, jobs, ("a",), 4, ("acct-high",), {}, set(), keep=True, job_gpus=4) == ["b"]
    p = dataclasses.replace(plan(4, other=4, pooled=("team-high", "team-high2")),
                            hold_job_gpus={"team-high": 4, "team-high2": 2})
    full = SlurmHolds(read=None, scontrol=None, accounts={t.name: t.slurm_account for t in TENANTS},
                      tier_of={t.name: t.tier for t in TENANTS}, tiers=["high", "low"], prefix="gpuas-hold",
                      shrink_delay_s=0.0)
    assert full.job_gpus(p)["gpuas-hold-pool"] == 2         # the pool: its smallest member's job


@pytest.mark.services
def test_a_hold_stuck_on_a_node_full_of_firm_work_moves_on_the_real_slurmctld(slurm):
    """A hold that has a node where another account's normal job (not preemptible) runs keeps it while the
    holder's job still fits beside that job, and moves to another whole node when it does not."""
    a = actuator(slurm)
    norm = sbatch(slurm, "normal", "acct-norm", gpus=2)
    wait_for(lambda: jobs(slurm).get(norm, ("",))[0] == "RUNNING", what="normal job running", timeout=60)
    node = jobs(slurm)[norm][1]
    try:
        slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=gpuas-hold-team-high",
                  "StartTime=now", "Duration=UNLIMITED", "Accounts=acct-high", f"Nodes={node}",
                  "Flags=IGNORE_JOBS,MAGNETIC")
        p = dataclasses.replace(plan(4), hold_job_gpus={"team-high": 2})
        assert a.apply(p).ok
        (res,) = our_res(slurm)
        assert res.nodes == (node,)                        # a 2-GPU job fits beside the normal one: no churn
        p = dataclasses.replace(plan(4), hold_job_gpus={"team-high": 4})
        rep = a.apply(p)
        assert rep.ok, rep.errors
        (res,) = our_res(slurm)
        assert len(res.nodes) == 1 and res.nodes != (node,)   # a 4-GPU job never fits there: the hold moved
        assert jobs(slurm)[norm][:2] == ("RUNNING", node)     # the normal job was not touched
    finally:
        slurm_reset(slurm)


# ---- hold names: one per tenant, never the pool's ---------------------------------------------------------
ODD = [TenantConfig(name="pool", tier="high", slurm_account="acct-pool"),
       TenantConfig(name="ml team", tier="high", slurm_account="acct-mlsp"),
       TenantConfig(name="ml_team", tier="high", slurm_account="acct-mlus")]


def test_hold_names_are_distinct_per_tenant_and_never_the_pools():
    from daemon.actuators.slurm.holds import hold_name, pool_hold_name

    names = {t.name: hold_name("gpuas-hold", t.name) for t in ODD}
    assert names["ml_team"] == "gpuas-hold-ml_team"                 # a name Slurm takes as it is: unchanged
    assert len(set(names.values())) == 3 and pool_hold_name("gpuas-hold") not in names.values()
    assert names["ml team"].startswith("gpuas-hold-ml_team-") and names["pool"].startswith("gpuas-hold-pool-")
    assert hold_name("gpuas-hold", "team-high") == "gpuas-hold-team-high"


def test_a_tenant_named_like_anothers_hashed_hold_gets_its_own():
    """Issue 36: `ml_team-b4aa16` is a valid reservation name, and was `ml team`'s hold as it is; a name that ends
    like a hash is hashed too now, so the two never share one (and one of them lose its hold)."""
    from daemon.actuators.slurm.holds import hold_name

    hashed = hold_name("gpuas-hold", "ml team")                      # gpuas-hold-ml_team-<6 hex>
    twin = hashed.removeprefix("gpuas-hold-")
    assert hold_name("gpuas-hold", twin) != hashed
    assert hold_name("gpuas-hold", twin).startswith(hashed + "-")
    assert hold_name("gpuas-hold", "ml-team-v2") == "gpuas-hold-ml-team-v2"   # not six hex digits: as it is


def odd_plan(gpus: dict, pooled=()):
    return dataclasses.replace(plan(), reservations=gpus, pooled=pooled)


@pytest.mark.services
def test_tenants_named_pool_ml_team_and_ml_underscore_team_hold_their_own_reservations(slurm):
    from daemon.actuators.slurm.holds import hold_name

    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", hold_shrink_delay_s=0), ODD,
                      dry_run=False)
    try:
        rep = a.apply(odd_plan({"pool": 4, "ml team": 4, "ml_team": 4}))
        assert rep.ok, rep.errors
        res = {r.name: r for r in our_res(slurm)}
        assert {n: r.accounts for n, r in res.items()} == {
            hold_name("gpuas-hold", "pool"): ("acct-pool",), hold_name("gpuas-hold", "ml team"): ("acct-mlsp",),
            "gpuas-hold-ml_team": ("acct-mlus",)}
        assert sorted(n for r in res.values() for n in r.nodes) == list(NODES)   # one whole node each
        assert a.apply(odd_plan({"pool": 4, "ml team": 4, "ml_team": 4})).actions == []   # stable
        # the pool (here: of the tenant named pool) is its own reservation beside the tenant's
        rep = a.apply(odd_plan({"pool": 4, "ml team": 4}, pooled=("pool",)))
        assert rep.ok, rep.errors
        assert {r.name: r.accounts for r in our_res(slurm)} == {
            "gpuas-hold-pool": ("acct-pool",), hold_name("gpuas-hold", "ml team"): ("acct-mlsp",)}
    finally:
        assert a.release_holds().ok and our_res(slurm) == []


@pytest.mark.services
def test_a_tenant_named_like_anothers_hold_and_that_other_hold_one_reservation_each(slurm):
    """Real slurmctld: `ml team` and a tenant named as `ml team`'s hold was (`ml_team-<its hash>`) each get a
    reservation of their own, admitting only their own account (before, both plans wrote one reservation)."""
    from daemon.actuators.slurm.holds import hold_name

    twin = hold_name("gpuas-hold", "ml team").removeprefix("gpuas-hold-")
    tenants = [ODD[1], TenantConfig(name=twin, tier="high", slurm_account="acct-twin")]
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", hold_shrink_delay_s=0),
                      tenants, dry_run=False)
    try:
        rep = a.apply(odd_plan({"ml team": 4, twin: 4}))
        assert rep.ok, rep.errors
        res = {r.name: r for r in our_res(slurm)}
        assert sorted(r.accounts for r in res.values()) == [("acct-mlsp",), ("acct-twin",)]
        assert sum(len(r.nodes) for r in res.values()) == 2
        assert a.apply(odd_plan({"ml team": 4, twin: 4})).actions == []   # stable: neither takes the other's
    finally:
        assert a.release_holds().ok and our_res(slurm) == []


@pytest.mark.services
def test_a_hold_under_its_old_name_is_released_and_the_tenant_keeps_its_nodes(slurm):
    """Earlier versions named `ml team`'s hold gpuas-hold-ml_team: found, released, and the hold under the new
    name starts on the same node."""
    from daemon.actuators.slurm.holds import hold_name

    slurm_run(slurm["env"], "scontrol", "create", "reservation", "ReservationName=gpuas-hold-ml_team", "StartTime=now",
              "Duration=UNLIMITED", "Accounts=acct-mlsp", "Nodes=gn2", "Flags=IGNORE_JOBS,MAGNETIC")
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin"), ODD[1:2], dry_run=False)
    try:
        rep = a.apply(odd_plan({"ml team": 4}))
        assert rep.ok, rep.errors
        assert any("release hold gpuas-hold-ml_team" in x and "named" in x for x in rep.actions), rep.actions
        assert [(r.name, r.nodes, r.accounts) for r in our_res(slurm)] == [
            (hold_name("gpuas-hold", "ml team"), ("gn2",), ("acct-mlsp",))]
    finally:
        a.release_holds()
        slurm_run(slurm["env"], "scontrol", "delete", "ReservationName=gpuas-hold-ml_team", check=False)


# ---- a reclaim re-checks the live job (issue 36) -------------------------------------------------------------
def test_a_job_started_anew_under_its_id_or_moved_to_another_tier_is_not_requeued():
    """The health reclaim re-reads the job right before the requeue and compares it with the job the cycle read
    (cluster_jobs): the same id with another start (requeued and running again) or submit time, or a QOS that
    makes it another tier, is left alone; the job as read is requeued. squeue's lines as Slurm prints them
    (SQUEUE_FMT, %S last); the real slurmctld needs two minutes to start a requeued job again."""
    from daemon.actuators.slurm.actuator import SQUEUE_FMT, parse_squeue

    assert SQUEUE_FMT.split("|")[12] == "%S"

    def line(start="2026-12-06T02:00:00", submit="2026-12-06T01:59:00", qos="normal"):
        return f"77|acct-low|low|{qos}|RUNNING|gn1|2:00:00|gres/gpu:4|None|{submit}|(null)|1|{start}"

    a = SlurmActuator(SlurmActuatorConfig(priority_by_qos={"urgent": "high"}), TENANTS, dry_run=True)
    now = {"out": line()}
    a._listed = lambda job_ids=None, node=None, states=None: parse_squeue(now["out"])
    assert parse_squeue(line())[0].started == parse_squeue(line())[0].started > 0
    a.cluster_jobs(tuple(t.name for t in TENANTS))
    for changed, why in ((line(start="2026-12-06T02:30:00"), "not the job the cycle read"),
                         (line(submit="2026-12-06T02:10:00"), "not the job the cycle read"),
                         (line(qos="urgent"), "its tier is high now, low when the cycle read it")):
        now["out"] = changed
        rep = a.reclaim(["77"], "health: idle")
        assert not any("requeue" in x for x in rep.actions) and any(why in x for x in rep.actions), rep.actions
    now["out"] = line()
    assert "scontrol requeue 77" in a.reclaim(["77"], "health: idle").actions


def test_a_hold_for_a_job_on_several_nodes_keeps_its_nodes_and_takes_one_per_node_asked():
    """A hold sized for -N 2 --gres=gpu:4 (Plan.hold_job_gpus 8) on 4-GPU nodes: read as one job of 8 GPUs, no node
    could ever hold it (whole_nodes.usable), so the hold kept none of its nodes and moved whenever another ranked
    first. With the job's shape its nodes stay; and 12 GPUs for 3 nodes x 4 are 3 nodes of 8, not 2."""
    h = holds()
    small = [Node("a", "IDLE", 4, 0), Node("b", "MIXED", 4, 4), Node("c", "MIXED", 4, 4)]
    assert h.choose(small, [], ("b", "c"), 8, ("acct-high",), {}, set(), keep=False, job_gpus=8) == ["a", "b"]
    assert h.choose(small, [], ("b", "c"), 8, ("acct-high",), {}, set(), keep=False, job_gpus=8,
                    shape=(2, 4)) == ["b", "c"]
    big = [Node(n, "IDLE", 8, 0) for n in "xyz"]
    assert h.choose(big, [], (), 12, ("acct-high",), {}, set(), keep=False, job_gpus=12) == ["x", "y"]
    # where the plan counts the hold at its nodes' GPUs (24 for 3 nodes of 8): never more than it counted
    assert h.choose(big, [], (), 24, ("acct-high",), {}, set(), keep=False, job_gpus=12,
                    shape=(3, 4)) == ["x", "y", "z"]
    # two such jobs fit on the same 3 nodes of 8; a node of 2 GPUs holds no part of one
    assert h.choose([*big, Node("w", "IDLE", 2, 0)], [], (), 24, ("acct-high",), {}, set(), keep=False,
                    job_gpus=12, shape=(3, 4)) == ["x", "y", "z"]


def test_a_hold_shaped_for_a_job_on_many_nodes_takes_no_more_than_the_plan_counted():
    """One account's -N 10 --gres=gpu:1 job sizes its hold as a job of 10 GPUs (Plan.hold_job_gpus), and a node per
    node it asks took 10 nodes of 8: 80 GPUs the plan counted as 10, unseen by the capacity, the pool and the other
    holds (with -N <all nodes>, the whole cluster). The hold takes whole nodes for the GPUs the plan counted (2 of
    8) and says once per cycle that the job's shape does not fit it; a shape that fits is still taken."""
    h = holds()
    many = [Node(f"n{i:02d}", "IDLE", 8, 0) for i in range(16)]
    assert h.choose(many, [], (), 10, ("acct-high",), {}, set(), keep=False, job_gpus=10,
                    shape=(10, 1)) == ["n00", "n01"]
    assert h.choose(many, [], (), 16, ("acct-high",), {}, set(), keep=False, job_gpus=8,
                    shape=(2, 4)) == ["n00", "n01"]                 # 2 x 4 where the plan counted 2 nodes' GPUs
    assert h.choose(many, [], (), 8, ("acct-high",), {}, set(), keep=False, job_gpus=8,
                    shape=(2, 4)) == ["n00"]                        # not where it counted 8
    text = "\n".join(f"NodeName={n.name} Gres=gpu:8 GresUsed=gpu:0 State=IDLE" for n in many)
    sent: list[tuple[str, ...]] = []
    h = SlurmHolds(read=lambda *a: text if "nodes" in a else "", scontrol=lambda rep, *a: sent.append(a) or True,
                   accounts={"team-high": "acct-high"}, tier_of={"team-high": "high"}, tiers=["high"],
                   prefix="gpuas-hold", shrink_delay_s=0.0)
    rep = ActionReport("slurm", False)
    h.apply(dataclasses.replace(plan(10), hold_job_gpus={"team-high": 10}), rep, [], shapes={"acct-high": (10, 1)})
    (create,) = sent
    assert "Nodes=n00,n01" in create, create
    said = [x for x in rep.actions if "shape" in x]
    assert said == ["hold gpuas-hold-team-high: its jobs' shape (10 nodes of 1 GPU each) does not fit its hold "
                    "(10 GPUs): it holds whole nodes for those GPUs"], rep.actions


def test_a_hold_is_shaped_for_its_accounts_job_on_several_nodes_only_where_that_job_is_the_one_it_is_sized_for():
    """shape_of: the hold takes a job's shape where one of its accounts runs a job on several nodes of exactly the
    GPUs the plan sized the hold for; a one-node job, or a shape of other GPUs in all, is no shape (a hold sized for
    one job of 12 is not made of 2 nodes x 4)."""
    from daemon.actuators.slurm.holds import shape_of

    assert shape_of(("a",), 8, {"a": (2, 4)}) == (2, 4)
    assert shape_of(("a", "b"), 8, {"b": (2, 4)}) == (2, 4)
    assert shape_of(("a",), 8, {"a": (1, 8)}) is None
    assert shape_of(("a",), 12, {"a": (2, 4)}) is None
    assert shape_of(("a",), 8, {}) is None


def test_a_shaped_holds_nodes_have_room_for_a_part_each_even_where_a_smaller_node_ranks_first():
    """whole_nodes.pick with a shape: a node with fewer GPUs than a part is never taken, even where it ranks first
    (here by name among equal scores): 24 GPUs for jobs of 3 nodes x 4 are the three nodes of 8, not the node of 2
    beside them, which holds no part (and takes GPUs the plan did not count)."""
    h = holds()
    busy = [Node("a", "IDLE", 2, 0), *(Node(n, "MIXED", 8, 6) for n in "xyz")]
    assert h.choose(busy, [], (), 24, ("acct-high",), {}, set(), keep=False, job_gpus=12,
                    shape=(3, 4)) == ["x", "y", "z"]


def test_apply_sizes_a_hold_by_its_accounts_job_shape():
    """SlurmHolds.apply passes each hold its job's shape (shapes: account -> nodes, GPUs per node): as above, 24
    GPUs for -N 3 --gres=gpu:4 are the three nodes of 8, not the node of 2 first by name and three of 8."""
    from daemon.actuators.base import ActionReport

    nodes = "\n".join(["NodeName=a Gres=gpu:2 GresUsed=gpu:0 State=IDLE",
                       *(f"NodeName={n} Gres=gpu:8 GresUsed=gpu:6 State=MIXED" for n in "xyz")])
    made: list[tuple] = []
    h = SlurmHolds(read=lambda *a: nodes if "nodes" in a else "", scontrol=lambda rep, *a: made.append(a) or True,
                   accounts={"h": "acct-high"}, tier_of={"h": "high"}, tiers=["high"], prefix="gpuas-hold",
                   shrink_delay_s=0.0, clock=time.monotonic)
    p = dataclasses.replace(plan(), reservations={"h": 24}, hold_job_gpus={"h": 12})
    rep = ActionReport("slurm", False)
    h.apply(p, rep, [], shapes={"acct-high": (3, 4)})
    (create,) = [a for a in made if a[:2] == ("create", "reservation")]
    assert "Nodes=x,y,z" in create, create
    assert any("its jobs ask 3 nodes of 4 GPUs each" in x for x in rep.actions), rep.actions


def _holds_on_16_idle_nodes(typed: bool = False):
    """SlurmHolds over a fake slurmctld of 16 idle 8-GPU nodes (all a100 where `typed`, the plan's holds by type
    too) that keeps its reservations (made, resized, deleted): (the holds, the reservations by name, a cycle: apply
    a plan of `gpus` held for team-high's jobs of `shape`, the report's actions)."""
    many = [Node(f"n{i:02d}", "IDLE", 8, 0) for i in range(16)]
    text = "\n".join(f"NodeName={n.name} Gres=gpu:8 GresUsed=gpu:0 State=IDLE" for n in many)
    res: dict[str, str] = {}

    def scontrol(rep, *a):
        kv = dict(x.split("=", 1) for x in a if "=" in x)
        if a[0] == "delete":
            res.pop(kv["ReservationName"], None)
        else:
            res[kv["ReservationName"]] = kv.get("Nodes", res.get(kv["ReservationName"], ""))
        return True

    def read(*a):
        if "nodes" in a:
            return text
        return "\n".join(f"ReservationName={k} Nodes={v} Accounts=acct-high Flags=IGNORE_JOBS,MAGNETIC"
                         for k, v in res.items())

    h = SlurmHolds(read=read, scontrol=scontrol, accounts={"team-high": "acct-high"}, tier_of={"team-high": "high"},
                   tiers=["high"], prefix="gpuas-hold", shrink_delay_s=0.0,
                   node_type=(lambda n: "a100") if typed else None)

    def cycle(shape, gpus=10):
        rep = ActionReport("slurm", False)
        p = dataclasses.replace(plan(gpus), hold_job_gpus={"team-high": 10} if gpus else {},
                                holds_by_type={"team-high": {"a100": gpus}} if typed and gpus else {})
        h.apply(p, rep, [], shapes={"acct-high": shape})
        return rep.actions

    return h, res, cycle


def test_a_shape_that_does_not_fit_its_hold_is_said_when_it_starts_and_when_it_ends_not_every_cycle():
    """The hold's jobs' shape that does not fit the GPUs the plan counts (-N 10 --gres=gpu:1, a hold of 10 GPUs)
    was said every cycle, through a set SlurmHolds.choose filled for _apply_one; it is now choose's return value,
    and the line comes once when it starts and once when it ends (a shape of 2 x 5 fits the same 10 GPUs)."""
    _, res, run = _holds_on_16_idle_nodes()

    def cycle(shape):
        return [x for x in run(shape) if "shape" in x]

    said = [cycle((10, 1)) for _ in range(3)]
    assert said == [["hold gpuas-hold-team-high: its jobs' shape (10 nodes of 1 GPU each) does not fit its hold "
                     "(10 GPUs): it holds whole nodes for those GPUs"], [], []], said
    assert res == {"gpuas-hold-team-high": "n00,n01"}
    said = [cycle((2, 5)) for _ in range(3)]
    assert said == [["hold gpuas-hold-team-high: its jobs' shape (10 nodes of 1 GPU each) fits its hold (10 GPUs) "
                     "again: it holds a node per node they ask"], [], []], said
    assert cycle((10, 1)) != []                                          # and again when it starts again


def test_a_shape_that_does_not_fit_is_said_again_for_a_hold_made_anew_and_not_as_the_hold_s_shape():
    """Said when it starts, for a hold that is then gone (deleted by hand, the plan holding nothing for it a cycle):
    the hold made anew says it again. The line that makes the hold names no per-node shape while it does not fit
    (it holds whole nodes for the GPUs, not a node per node asked). A hold the plan ends says nothing of its shape;
    a hold by GPU type says it as one of any type."""
    _, res, cycle = _holds_on_16_idle_nodes()
    first = cycle((10, 1))
    assert [x for x in first if "does not fit" in x] and not [x for x in first if "its jobs ask" in x], first
    res.clear()                                                          # gone: an operator deleted it
    assert not [x for x in cycle((10, 1), gpus=0) if "shape" in x]
    assert [x for x in cycle((10, 1)) if "does not fit" in x]
    # a hold the plan ends (0 GPUs) says neither that the shape fits it again nor that it does not
    assert not [x for x in cycle((10, 1), gpus=0) if "shape" in x] and not res
    assert not [x for x in cycle((2, 5)) if "shape" in x] and res
    assert not [x for x in cycle((10, 1), gpus=0) if "shape" in x] and not res
    # a hold by GPU type (a mixed fleet) says it the same way
    _, res, cycle = _holds_on_16_idle_nodes(typed=True)
    said = [[x for x in cycle((10, 1)) if "shape" in x] for _ in range(2)]
    assert said == [["hold gpuas-hold-team-high: its jobs' shape (10 nodes of 1 GPU each) does not fit its hold "
                     "(10 GPUs): it holds whole nodes for those GPUs"], []], said
    assert len(res["gpuas-hold-team-high"].split(",")) == 2
