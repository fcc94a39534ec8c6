"""A mixed fleet on Slurm (issue 24): typed GRES read from squeue / scontrol, holds of a type on nodes of that type,
no preemption that frees a type the protected tenant cannot use. Real slurmctld with three slurmd: gn1, gn2 with
``gpu:a100:4`` and gn3 with ``gpu:t4:4`` (each node has its type as a feature too)."""

import time
from timeit import repeat

import numpy as np
import pytest

from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.actuators.slurm.gres import feature_terms, gres_gpu_types, gres_parts, job_accepts, node_type
from daemon.actuators.slurm.holds import parse_reservations
from daemon.config import SlurmActuatorConfig, TenantConfig
from daemon.config.fleet import FleetConfig, TypeResolver
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.support.services import slurm_cluster, slurm_jobs as jobs, slurm_reset, slurm_run, wait_for

NODES = ("gn1", "gn2", "gn3")
TYPES = {"gn1": "a100", "gn2": "a100", "gn3": "t4"}
FLEET = FleetConfig(types=["a100", "t4"], aliases={"NVIDIA A100-SXM4-80GB": "a100", "Tesla T4": "t4"})
TENANTS = [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
           TenantConfig(name="team-t4", tier="high", slurm_account="acct-t4"),
           TenantConfig(name="team-low", tier="low", slurm_account="acct-low")]


def plan(reservations=None, by_type=None, *pre):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=12, load=1.0, high_pool=4,
                reservations=dict(reservations or {}), quotas={}, limits={}, preemptions=tuple(pre),
                notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory(),
                holds_by_type=dict(by_type or {}))


# ---- pure parsing ----------------------------------------------------------------------------
def test_gres_types_of_nodes_and_jobs():
    assert gres_gpu_types("gpu:a100:4(S:0-1),gpu:t4:2(IDX:0,1)") == {"a100": 4, "t4": 2}
    assert gres_gpu_types("gres:gpu:2") == {"": 2} and gres_gpu_types("gres/gpu:a100:2") == {"a100": 2}
    assert gres_gpu_types("gres:nvme:1") == {} and gres_gpu_types("(null)") == {}
    assert feature_terms("[a100|t4]&ib*2") == ["a100", "t4", "ib"] and feature_terms("(null)") == []


def test_gres_parts_is_linear_in_the_input():
    # issue 36: the look-ahead split rescanned to the next parenthesis at every comma (220 KB took 16 s). Four
    # times the input must cost about four times as much (quadratic: sixteen); the best of several runs each, in
    # this process's CPU time, so that other work on a loaded machine does not count
    def cost(n: int) -> float:
        text = "gpu:a100:1," * n
        return min(repeat(lambda: gres_parts(text), number=1, repeat=7, timer=time.process_time))

    assert cost(16_000) / cost(4_000) < 10
    assert gres_parts("gpu:a100:1(IDX:0,2)," * 3 + "gpu:t4:2(S:0") == ["gpu:a100:1(IDX:0,2)"] * 3 + ["gpu:t4:2(S:0"]
    assert gres_gpu_types("gpu:a100:1(IDX:0,2)," * 20_000) == {"a100": 20_000}


def test_what_a_job_accepts_in_order_of_preference():
    r = FLEET.resolver()
    assert job_accepts(r, "gres:gpu:a100:2") == ("a100",)
    assert job_accepts(r, "gres:gpu:2") == ()                                    # untyped: any type
    assert job_accepts(r, "gres:gpu:1", "a100|t4") == ("a100", "t4")
    assert job_accepts(r, "gres:gpu:1", "a100|t4", "t4") == ("t4", "a100")       # --prefer goes first
    assert job_accepts(r, "gres:gpu:1", "", "t4") == ("t4", "a100")              # prefer alone: every type
    assert job_accepts(r, "gres:gpu:1", "ib&nvme") == ()                         # not GPU features: any type
    assert r.unmatched == set()                                                  # ...and not reported
    assert job_accepts(r, "gres:gpu:h200:1") == ("unknown",) and r.unmatched == {"h200"}


def test_a_job_naming_several_types_at_once_accepts_the_types_of_the_nodes_that_have_them_all():
    """Not either of them (Slurm starts it only on a node with all): the nodes' types, None where no node has them
    (it never starts); without the nodes, not judged (as before: either)."""
    r = FLEET.resolver()
    nodes = [("gpu:a100:4", "a100"), ("gpu:t4:4(S:0)", "t4"), ("gpu:T4:2,gpu:a100:2", "a100")]
    assert job_accepts(r, "gres:gpu:a100:1,gres:gpu:t4:1", nodes=nodes) == ("a100",)
    assert job_accepts(r, "gres:gpu:a100:1,gres:shard:t4:2", nodes=nodes) == ("a100",)
    assert job_accepts(r, "gres:gpu:a100:1,gres:gpu:t4:1", nodes=nodes[:2]) is None
    assert job_accepts(r, "gres:gpu:a100:1,gres:gpu:t4:1") == ("a100", "t4")
    assert job_accepts(r, "gres:gpu:a100:1,gres:gpu:a100:1", nodes=nodes[:2]) == ("a100",)


def test_node_type_from_gres_then_features_unknown_reported():
    r = FLEET.resolver()
    assert node_type(r, "gpu:a100:4(S:0)") == "a100"
    assert node_type(r, "gpu:4", "ib,Tesla T4") == "t4"          # untyped GRES, the model as a feature
    assert node_type(r, "gpu:4", "ib") == "unknown" and r.unmatched == {"untyped gres gpu:4"}
    assert node_type(TypeResolver(), "gpu:a100:4") == "gpu"      # one-model cluster: unchanged


# ---- real slurmctld ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster(nodes=NODES, gpus=4, gres_types=TYPES) as s:
        yield s


def sbatch(slurm, partition, account, *gres):
    return slurm_run(slurm["env"], "sbatch", "--parsable", f"--partition={partition}", f"--account={account}",
                     *gres, "--requeue", "-o", "/dev/null", "--wrap", "sleep 600").strip().split(";")[0]


def running(slurm, ids):
    wait_for(lambda: all(jobs(slurm).get(j, ("",))[0] == "RUNNING" for j in ids), what="jobs running", timeout=60)


def actuator(slurm, fleet=FLEET):
    return SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir="/usr/bin", hold_shrink_delay_s=0,
                                             warn_lead_s=0), TENANTS, dry_run=False, fleet=fleet)


@pytest.fixture
def clean(slurm):
    yield
    slurm_reset(slurm)


@pytest.mark.services
def test_node_types_and_job_types_from_slurm(slurm, clean):
    a = actuator(slurm)
    nodes = a.cluster_nodes(("team-high", "team-t4", "team-low"))
    assert dict(zip(nodes.names, nodes.gpu_type)) == TYPES
    typed = sbatch(slurm, "normal", "acct-high", "--gres=gpu:a100:2")
    anyone = sbatch(slurm, "normal", "acct-high", "--gres=gpu:2")
    both = sbatch(slurm, "normal", "acct-t4", "--gres=gpu:1", "--constraint=a100|t4", "--prefer=t4")
    per_job = sbatch(slurm, "normal", "acct-t4", "--gpus=t4:1")              # squeue's tres-per-job
    per_task = sbatch(slurm, "normal", "acct-t4", "--gpus-per-task=a100:1", "-n1")
    js = a.cluster_jobs(("team-high", "team-t4", "team-low"))
    got = dict(zip(js.ids, js.accepts))
    assert got[typed] == ("a100",) and got[anyone] == ()
    assert got[per_job] == ("t4",) and got[per_task] == ("a100",)
    # while pending it prefers t4; once running squeue keeps only the feature that placed it (still one it takes)
    assert got[both] in (("t4", "a100"), ("t4",))
    assert a.unknown_types == []


@pytest.mark.services
def test_a_hold_of_a100_takes_only_a100_nodes(slurm, clean):
    # the a100 nodes are full of low jobs, the t4 node is idle: a type-blind hold would take the idle t4 node
    low = [sbatch(slurm, "low", "acct-low", "--gres=gpu:a100:4") for _ in range(2)]
    running(slurm, low)
    a = actuator(slurm)
    rep = a.apply(plan({"team-high": 4, "team-t4": 4}, {"team-high": {"a100": 4}, "team-t4": {"t4": 4}}))
    assert rep.ok, rep.errors
    res = {r.name: r.nodes for r in parse_reservations(slurm_run(slurm["env"], "scontrol", "-o", "show",
                                                                 "reservation"))}
    assert len(res["gpuas-hold-team-high"]) == 1 and set(res["gpuas-hold-team-high"]) <= {"gn1", "gn2"}
    assert res["gpuas-hold-team-t4"] == ("gn3",)
    # a hold of both types: one node of each, in one reservation
    assert a.release_holds().ok
    rep = a.apply(plan({"team-high": 8}, {"team-high": {"a100": 4, "t4": 4}}))
    assert rep.ok, rep.errors
    res = {r.name: r.nodes for r in parse_reservations(slurm_run(slurm["env"], "scontrol", "-o", "show",
                                                                 "reservation"))}
    assert "gn3" in res["gpuas-hold-team-high"] and len(res["gpuas-hold-team-high"]) == 2


@pytest.mark.services
def test_a_t4_job_is_never_preempted_for_an_a100_job(slurm, clean):
    a100_low = [sbatch(slurm, "low", "acct-low", "--gres=gpu:a100:4") for _ in range(2)]
    t4_low = sbatch(slurm, "low", "acct-low", "--gres=gpu:t4:4")
    running(slurm, [*a100_low, t4_low])
    waiting = sbatch(slurm, "high", "acct-high", "--gres=gpu:a100:4")
    a = actuator(slurm)
    node_of = {j: jobs(slurm)[j][1] for j in (*a100_low, t4_low)}
    # a plan that (type-blind) clears the t4 node for team-high's a100 job, and one a100 node
    rep = a.apply(plan({}, {}, Preemption(t4_low, "team-low", 4, node_of[t4_low], "peak", "team-high"),
                       Preemption(a100_low[0], "team-low", 4, node_of[a100_low[0]], "peak", "team-high")))
    assert rep.ok, rep.errors
    assert any(f"skip {t4_low}: it frees t4 GPUs and team-high takes only a100" in x for x in rep.actions)
    wait_for(lambda: jobs(slurm)[waiting][0] == "RUNNING", what="the a100 job started", timeout=30)
    j = jobs(slurm)
    assert j[t4_low][0] == "RUNNING"                      # the t4 job was not touched
    assert j[a100_low[0]][0] == "PENDING"                 # the a100 one was requeued, and team-high runs there
    assert j[waiting][1] == node_of[a100_low[0]]


@pytest.mark.services
def test_a_job_that_takes_both_starts_on_the_preferred_type_when_it_is_free(slurm, clean):
    both = ("--gres=gpu:1", "--constraint=a100|t4", "--prefer=t4")
    first = sbatch(slurm, "normal", "acct-t4", *both)
    running(slurm, [first])
    assert jobs(slurm)[first][1] == "gn3"                 # the preferred type is free: there
    fill = sbatch(slurm, "normal", "acct-low", "--gres=gpu:t4:3")
    running(slurm, [fill])
    second = sbatch(slurm, "normal", "acct-t4", *both)
    running(slurm, [second])
    assert TYPES[jobs(slurm)[second][1]] == "a100"        # t4 full: the other type it accepts
    # what the daemon reads for such a job while it waits: t4 first, a100 after
    for _ in range(2):
        sbatch(slurm, "normal", "acct-low", "--gres=gpu:a100:4")
    third = sbatch(slurm, "normal", "acct-t4", *both)
    time.sleep(1)
    js = actuator(slurm).cluster_jobs(("team-high", "team-t4", "team-low"))
    got = dict(zip(js.ids, js.accepts))
    pending = dict(zip(js.ids, ~js.running))
    assert pending[third] and got[third] == ("t4", "a100")
    assert isinstance(js.accepts, np.ndarray)
