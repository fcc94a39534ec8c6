"""A protected tenant's job on several nodes (-N 2 --gres=gpu:4, --gpus-per-node=4 -N 3) on a real slurmctld with
three 8-GPU nodes: its demand is its GPUs per node times its nodes, and its hold is whole nodes per node asked."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time

import numpy as np
import pandas as pd
import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.holds import expand_hostlist, parse_reservations
from daemon.config import Config, SlurmActuatorConfig, TenantConfig, WindowConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.support.services import slurm_cluster, slurm_jobs as jobs, slurm_reset, slurm_run, wait_for

pytestmark = pytest.mark.services
NODES = ("gn1", "gn2", "gn3")
TENANTS = [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
           TenantConfig(name="team-low", tier="low", slurm_account="acct-low")]


def sbatch(s, *opts: str) -> str:
    return slurm_run(s["env"], "sbatch", "--parsable", "--requeue", "-o", "/dev/null", *opts,
                     "--wrap", "sleep 600").strip().split(";")[0]


def hold_nodes(s) -> list[tuple[str, ...]]:
    return [r.nodes for r in parse_reservations(slurm_run(s["env"], "scontrol", "-o", "show", "reservation"))
            if r.name.startswith("gpuas-hold")]


def plan(gpus: int, job: int) -> Plan:
    """The plan holds `gpus` for team-high in jobs of `job` GPUs (its quantum: its largest job's GPUs in all)."""
    return dataclasses.replace(
        Plan(at="2026-01-01T00:00:00+00:00", capacity=24, load=1.0, high_pool=0, reservations={"team-high": gpus},
             quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
             memory=PolicyMemory()), hold_job_gpus={"team-high": job})


def waiting_on_full_nodes(s, *opts: str) -> tuple[SlurmActuator, str]:
    """Each node full of a low job; team-high's job asking `opts` pending; the cycle's read of the jobs done."""
    low = [sbatch(s, "--partition=low", "--account=acct-low", "--gres=gpu:8", "-w", n) for n in NODES]
    wait_for(lambda: all(jobs(s).get(j, ("",))[0] == "RUNNING" for j in low), what="low jobs running", timeout=60)
    high = sbatch(s, "--partition=high", "--account=acct-high", *opts)
    wait_for(lambda: jobs(s).get(high, ("",))[0] == "PENDING", what="high job pending", timeout=30)
    a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                      dry_run=False)
    js = a.cluster_jobs(("team-high", "team-low"))
    assert dict(zip(js.ids.tolist(), js.gpus.tolist()))[high] == 4 * int(opts[opts.index("-N") + 1])
    # the nodes it asks, which the plan counts its hold at (a whole node each: reservation.hold_footprint)
    assert dict(zip(js.ids.tolist(), js.nodes_asked.tolist()))[high] == int(opts[opts.index("-N") + 1])
    return a, high


def test_a_job_on_several_nodes_is_held_as_whole_nodes_per_node_it_asks():
    """The plan holds a tenant's GPUs in jobs of its largest job's GPUs in all (8 for -N 2 --gres=gpu:4), and the
    hold took whole nodes covering that many GPUs: one node of 8, where a job asking 2 nodes never starts, and for
    --gpus-per-node=4 -N 3 (12 GPUs) two nodes of 8. Now the hold takes a node per node asked, with room for the
    job's GPUs per node: the job starts in it once the low jobs there are gone, and no low job starts there, where
    the plan counts those nodes' GPUs; where it counts fewer, the hold takes no more than it counted (whole nodes
    for its GPUs) and says so."""
    with slurm_cluster(nodes=NODES, gpus=8) as s:
        a, high = waiting_on_full_nodes(s, "--gres=gpu:4", "-N", "2")
        assert a.shapes == {"acct-high": (2, 4)}
        rep = a.apply(plan(16, 8))
        assert rep.ok, rep.errors
        (held,) = hold_nodes(s)
        assert len(held) == 2, rep.actions
        assert any("(its jobs ask 2 nodes of 4 GPUs each)" in x for x in rep.actions), rep.actions
        for j, (st, node, _) in jobs(s).items():
            if j != high and node in held:
                slurm_run(s["env"], "scancel", j)
        wait_for(lambda: jobs(s)[high][0] == "RUNNING", what="high job running in its hold", timeout=60)
        assert set(expand_hostlist(jobs(s)[high][1])) == set(held) and jobs(s)[high][2] == "gpuas-hold-team-high"
        assert a.apply(plan(16, 8)).actions == []         # kept as it is: no churn
        slurm_reset(s)

        a, high = waiting_on_full_nodes(s, "--gpus-per-node=4", "-N", "3")
        assert a.shapes == {"acct-high": (3, 4)}
        rep = a.apply(plan(12, 12))                       # 3 nodes of 8 would be 24 GPUs held for 12 counted
        assert rep.ok, rep.errors
        assert [len(n) for n in hold_nodes(s)] == [2], rep.actions
        assert any("shape (3 nodes of 4 GPUs each) does not fit its hold (12 GPUs)" in x for x in rep.actions)
        rep = a.apply(plan(24, 12))
        assert rep.ok, rep.errors
        assert [len(n) for n in hold_nodes(s)] == [3], rep.actions
        # said once when it ends (and not again while it fits)
        assert [x for x in rep.actions if "shape" in x] == [
            "hold gpuas-hold-team-high: its jobs' shape (3 nodes of 4 GPUs each) fits its hold (24 GPUs) again: it "
            "holds a node per node they ask"], rep.actions
        rep = a.apply(plan(24, 12))
        assert not any("shape" in x for x in rep.actions), rep.actions


def test_the_plan_requeues_one_low_job_on_each_of_two_nodes_and_the_2_x_4_job_starts():
    """Three 8-GPU nodes, each running two low 4-GPU jobs; team-high's -N 2 --gres=gpu:4 job waits. The plan made
    room for it as one job of 8 GPUs on one node, where it cannot start (both low jobs of a node lost for
    nothing); now one low job on each of two nodes (preemption.choose_placed with the job's nodes asked), and
    Slurm starts the job on those two nodes, in its hold, while every other low job runs on."""
    from daemon.policy import PolicyMemory, plan as make_plan
    from daemon.policy.state import ClusterState

    with slurm_cluster(nodes=NODES, gpus=8) as s:
        low = [sbatch(s, "--partition=low", "--account=acct-low", "--gres=gpu:4", "-w", n) for n in NODES * 2]
        wait_for(lambda: all(jobs(s).get(j, ("",))[0] == "RUNNING" for j in low), what="low jobs running", timeout=60)
        high = sbatch(s, "--partition=high", "--account=acct-high", "--gres=gpu:4", "-N", "2")
        wait_for(lambda: jobs(s).get(high, ("",))[0] == "PENDING", what="high job pending", timeout=30)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                          dry_run=False)
        tenants = ("team-high", "team-low")
        js, nodes = a.cluster_jobs(tenants), a.cluster_nodes(tenants)
        used = np.array([float(js.gpus[js.running & (js.tenant == i)].sum()) for i in range(2)])
        pending = np.array([float(js.gpus[~js.running & (js.tenant == i)].sum()) for i in range(2)])
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("high", "low"), capacity=24,
                          used=used, pending=pending, jobs=js, nodes=nodes)
        p = make_plan(None, st, PolicyMemory(), Config(tenants=[t.model_dump() for t in TENANTS],
                                                       policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
        pre = sorted((x.node, x.gpus) for x in p.preemptions)
        assert len(pre) == 2 and len({n for n, _ in pre}) == 2 and all(g == 4 for _, g in pre), p.notes
        rep = a.apply(p)
        assert rep.ok, rep.errors
        wait_for(lambda: jobs(s)[high][0] == "RUNNING", what="the 2 x 4 job running", timeout=90)
        assert set(expand_hostlist(jobs(s)[high][1])) == {n for n, _ in pre}
        gone = {x.job_id for x in p.preemptions}
        assert all(jobs(s)[j][0] == "RUNNING" for j in low if j not in gone)   # the other four run on
        a.release_holds()
def test_the_plan_requeues_a_low_job_on_two_nodes_and_a_waiting_8_gpu_job_starts():
    """Two 8-GPU nodes, both running one low -N 2 --gres=gpu:8 job; team-high's 8-GPU job waits. The view read the
    low job's node as squeue's hostlist (gn[1-2]), which names no node, so the plan never took it as a candidate
    and preempted nothing; now its nodes are read (Jobs.on_nodes), the plan requeues it, freeing 8 GPUs on each
    node, and Slurm starts the high job."""
    from daemon.policy import PolicyMemory, plan as make_plan
    from daemon.policy.state import ClusterState

    with slurm_cluster(nodes=NODES[:2], gpus=8) as s:
        low = sbatch(s, "--partition=low", "--account=acct-low", "--gres=gpu:8", "-N", "2")
        wait_for(lambda: jobs(s).get(low, ("",))[0] == "RUNNING", what="low job running", timeout=60)
        high = sbatch(s, "--partition=high", "--account=acct-high", "--gres=gpu:8")
        wait_for(lambda: jobs(s).get(high, ("",))[0] == "PENDING", what="high job pending", timeout=30)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                          dry_run=False)
        tenants = ("team-high", "team-low")
        js, nodes = a.cluster_jobs(tenants), a.cluster_nodes(tenants)
        row = js.ids.tolist().index(low)
        assert js.gpus[row] == 16 and js.on_nodes[row] == ("gn1", "gn2") and js.node[row] == "gn[1-2]"
        used = np.array([float(js.gpus[js.running & (js.tenant == i)].sum()) for i in range(2)])
        pending = np.array([float(js.gpus[~js.running & (js.tenant == i)].sum()) for i in range(2)])
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("high", "low"), capacity=16,
                          used=used, pending=pending, jobs=js, nodes=nodes)
        p = make_plan(None, st, PolicyMemory(), Config(tenants=[t.model_dump() for t in TENANTS],
                                                       policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
        assert [(x.job_id, x.gpus) for x in p.preemptions] == [(low, 16)], p.notes
        rep = a.apply(p)
        assert rep.ok, rep.errors
        wait_for(lambda: jobs(s)[high][0] == "RUNNING", what="the 8-GPU job running", timeout=90)
        assert jobs(s)[low][0] != "RUNNING"
        a.release_holds()


def test_a_window_for_a_tenant_whose_jobs_ask_several_nodes_takes_nodes_its_job_starts_in():
    """Nodes of two sizes: gn1 of 16 GPUs, gn2 and gn3 of 8, each full of a low job; team-high's -N 2 --gres=gpu:4
    job pending, and a window of 16 GPUs for team-high, reserved ahead. The window took gn1 alone (the node with the
    most GPUs ranks first), where a job on 2 nodes never starts; now gn2 and gn3, and once the window's reservation
    is active and the low jobs there are gone (the plan's preemptions; cancelled here), the job starts in the
    window's reservation."""
    with slurm_cluster(nodes=NODES, gpus=8, node_gpus={"gn1": 16}) as s:
        low = [sbatch(s, "--partition=low", "--account=acct-low", f"--gres=gpu:{g}", "-w", n)
               for n, g in (("gn1", 16), ("gn2", 8), ("gn3", 8))]
        wait_for(lambda: all(jobs(s).get(j, ("",))[0] == "RUNNING" for j in low), what="low jobs running", timeout=60)
        high = sbatch(s, "--partition=high", "--account=acct-high", "--gres=gpu:4", "-N", "2")
        wait_for(lambda: jobs(s).get(high, ("",))[0] == "PENDING", what="high job pending", timeout=30)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", warn_lead_s=0,
                                              windows_reserved="ahead"), TENANTS, dry_run=False)
        a.cluster_jobs(("team-high", "team-low"))
        assert a.shapes == {"acct-high": (2, 4)}
        # the reservation starts at the first whole minute at least 40 s ahead; the window opens a minute later
        begin = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=100)).replace(second=0, microsecond=0)
        start = begin + dt.timedelta(minutes=1)
        w = WindowConfig.model_validate({"name": "multi", "tenant": "team-high", "gpus": 16, "timezone": "UTC",
                                         "cron": f"{start.minute} {start.hour} * * *", "duration_minutes": 10,
                                         "reclaim_before_minutes": 1})
        rep = a.apply(dataclasses.replace(plan(0, 8), windows=(w.model_dump(mode="json"),)))
        assert rep.ok, rep.errors
        (r,) = [r for r in parse_reservations(slurm_run(s["env"], "scontrol", "-o", "show", "reservation"))
                if r.name == "gpuas-win-multi"]
        assert sorted(r.nodes) == ["gn2", "gn3"], rep.actions
        assert not any("cannot start" in x for x in rep.actions), rep.actions

        def active() -> bool:
            out = slurm_run(s["env"], "scontrol", "-o", "show", "reservation", "gpuas-win-multi")
            return "State=ACTIVE" in out

        wait_for(active, what="the window's reservation active", timeout=200)
        for j in low:
            slurm_run(s["env"], "scancel", j)
        wait_for(lambda: jobs(s)[high][0] == "RUNNING", what="high job running in its window", timeout=60)
        assert set(expand_hostlist(jobs(s)[high][1])) == {"gn2", "gn3"} and jobs(s)[high][2] == "gpuas-win-multi"


def test_a_gpus_job_on_several_nodes_is_estimated_to_start_where_slurm_starts_it():
    """What Slurm does with --gpus=6 -N 4 (GPUs not divisible by the nodes): four 4-GPU nodes with 3, 1, 1, 1 free.
    cons_tres gives each node one GPU at least and the first node as many as are free: it starts the job there as
    gpu:3 + gpu:1 x 3 (scontrol -d show job). Read from squeue (tres-per-job, -N 4: Jobs.spread) while it waits
    for its --begin time, the start estimate says it fits the GPUs free now; with the GPUs split evenly (2 per
    node, rounded up, the old rule) only one node had room, and it was estimated to wait for another job's end."""
    from prometheus_client import CollectorRegistry

    from daemon.policy.state import ClusterState
    from daemon.service.eta import EtaTracker

    nodes4 = ("gn1", "gn2", "gn3", "gn4")
    with slurm_cluster(nodes=nodes4, gpus=4) as s:
        fill = [sbatch(s, "--partition=low", "--account=acct-low", "--gres=gpu:1", "--time=30", "-w", "gn1")]
        fill += [sbatch(s, "--partition=low", "--account=acct-low", "--gres=gpu:3", "--time=30", "-w", n)
                 for n in nodes4[1:]]
        wait_for(lambda: all(jobs(s).get(j, ("",))[0] == "RUNNING" for j in fill), what="fill running", timeout=60)
        job = sbatch(s, "--partition=high", "--account=acct-high", "--gpus=6", "-N", "4", "--begin=now+45")
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", warn_lead_s=0), TENANTS,
                          dry_run=True)
        tenants = ("team-high", "team-low")
        js, nodes = a.cluster_jobs(tenants), a.cluster_nodes(tenants)
        assert jobs(s)[job][0] == "PENDING" and sorted(nodes.free.tolist()) == [1, 1, 1, 3]
        row = js.ids.tolist().index(job)
        assert (js.gpus[row], js.nodes_asked[row], js.spread[row]) == (6, 4, True)
        used = np.array([float(js.gpus[js.running & (js.tenant == i)].sum()) for i in range(2)])
        pending = np.array([float(js.gpus[~js.running & (js.tenant == i)].sum()) for i in range(2)])
        st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("high", "low"), capacity=16,
                          used=used, pending=pending, jobs=js, nodes=nodes)
        got = next(r for r in EtaTracker(CollectorRegistry(), time.time).update(st, None, None)["jobs"]
                   if r["job_id"] == job)
        assert got["p50_s"] == 0.0 and got["basis"] == "fits the GPUs free now", got
        wait_for(lambda: jobs(s)[job][0] == "RUNNING", what="the --gpus=6 -N 4 job running", timeout=120)
        shown = slurm_run(s["env"], "scontrol", "-d", "show", "job", job)
        per_node = sorted(int(g) for g in re.findall(r"GRES=gpu:(\d+)\(IDX", shown))
        # one line per node, or a line for nodes alike (Nodes=gn[2-4] ... gpu:1): 3 on one node, 1 on the others
        assert per_node in ([1, 1, 1, 3], [1, 3]) and "JOB_GRES=gpu:6" in shown, shown
