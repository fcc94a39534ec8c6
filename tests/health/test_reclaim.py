"""The reclaim policy: warn first, act at the tier's threshold, within the minimum run time and the budget."""

from __future__ import annotations

import pytest

from daemon.config import Config
from daemon.health.reclaim import FREE, HealthMemory, JobInfo, Restraints, decide
from daemon.health.types import Finding
from daemon.policy.types import OperatorInputs
from daemon.service.health import job_infos, restraints
from tests.policy.test_engine import make_state

NOW = 1_800_000_000.0


def finding(job: str, minutes: float, kind: str = "idle", gpus: int = 8) -> Finding:
    return Finding(kind, job, "slurm", None, tuple(f"n1:{i}" for i in range(gpus)), NOW - minutes * 60, NOW,
                   minutes, {"max_activity": 0.0}, f"job {job}: idle for {minutes:.0f} min")


def info(tier="low", gpus=8, running=True, runtime_s=7200.0, tenant="team-a", nodes=("n1",)) -> JobInfo:
    return JobInfo(tenant, tier, gpus, running, runtime_s, nodes)


CFG = Config()


def run(findings, jobs, memory=None, cfg=CFG, budget=(100.0, 10.0), now=NOW, restraints=FREE):
    return decide(findings, jobs, cfg, memory or HealthMemory(), now, *budget, restraints)


def test_a_low_priority_job_is_warned_at_30_minutes_then_requeued_at_60():
    d = run([finding("1", 35)], {"1": info()})
    assert [w.job for w in d.warnings] == ["1"] and d.reclaims == []
    o = d.outcomes[0]
    assert o.verdict == "warn" and o.due_in_minutes == 25 and "requeued in 25 min" in o.message
    d2 = run([finding("1", 61)], {"1": info()}, memory=d.memory, now=NOW + 26 * 60)
    assert [(r.job, r.kind, r.gpus) for r in d2.reclaims] == [("1", "idle", 8)] and d2.warnings == []
    assert d2.budget_gpus == 92 and d2.budget_jobs == 9
    assert ("1", "idle") not in d2.memory.warned   # a later idle stretch is warned afresh


def test_the_first_cycle_that_sees_a_long_idle_job_warns_and_requeues_only_at_the_next():
    d = run([finding("1", 90)], {"1": info()})
    assert d.reclaims == [] and d.outcomes[0].verdict == "warn" and "next cycle" in d.outcomes[0].message
    assert [r.job for r in run([finding("1", 91)], {"1": info()}, memory=d.memory).reclaims] == ["1"]


def test_high_and_normal_tiers_are_reported_only_by_default():
    mem = HealthMemory({("h", "idle"): NOW - 3600, ("n", "idle"): NOW - 3600})
    d = run([finding("h", 120), finding("n", 120)], {"h": info("high"), "n": info("normal")}, memory=mem)
    assert d.reclaims == [] and {o.verdict for o in d.outcomes} == {"report"}
    assert all(o.due_in_minutes is None for o in d.outcomes)


def test_a_job_label_that_matches_no_job_and_a_job_not_running_are_left_alone():
    mem = HealthMemory({("x", "idle"): NOW - 3600, ("p", "idle"): NOW - 3600})
    d = run([finding("x", 120), finding("p", 120)], {"p": info(running=False)}, memory=mem)
    assert d.reclaims == [] and d.warnings == []
    v = {o.finding.job: o for o in d.outcomes}
    assert v["x"].verdict == "unknown_job" and "matches no job" in v["x"].message
    assert v["p"].verdict == "not_running"


def test_minimum_run_time_and_the_budget_hold_reclaims_back_longest_idle_first():
    cfg = Config(policy={"preempt_min_runtime_s": 1800})
    mem = HealthMemory({(j, "idle"): NOW - 3600 for j in "abc"})
    jobs = {"a": info(runtime_s=600), "b": info(), "c": info()}
    d = run([finding("a", 70), finding("b", 65), finding("c", 80)], jobs, memory=mem, cfg=cfg, budget=(8.0, 5.0))
    v = {o.finding.job: o.verdict for o in d.outcomes}
    assert v == {"a": "protected", "c": "requeue", "b": "over_budget"}   # c idle longest gets the budget
    assert [r.job for r in d.reclaims] == ["c"]


def test_a_hung_job_is_restarted_by_requeue_and_a_leak_is_only_told():
    mem = HealthMemory({("h", "hung"): NOW - 3600})
    d = run([finding("h", 70, kind="hung"), finding("l", 60, kind="memory_leak")],
            {"h": info(), "l": info()}, memory=mem)
    assert [(r.job, r.kind) for r in d.reclaims] == [("h", "hung")]
    leak = next(o for o in d.outcomes if o.finding.kind == "memory_leak")
    assert leak.verdict == "report" and leak.due_in_minutes is None and [w.job for w in d.warnings] == ["l"]


def test_report_only_config_never_reclaims():
    cfg = Config(health={"idle_actions": {"high": "report", "normal": "report", "low": "report"}})
    mem = HealthMemory({("1", "idle"): NOW - 3600})
    assert run([finding("1", 300)], {"1": info()}, memory=mem, cfg=cfg).reclaims == []


@pytest.mark.security
@pytest.mark.parametrize("seen, nodes, why", [
    (tuple(f"a:{i}" for i in range(4)), ("a", "b"), "covers 4 of the job's 8 GPU(s)"),   # node b's exporter down
    (tuple(f"a:{i}" for i in range(4)) + tuple(f"n9:{i}" for i in range(4)), ("a", "b"), "n9, not among"),
    (tuple(f"a:{i}" for i in range(8)), (), "not among the job's nodes (unknown nodes)"),
])
def test_partial_telemetry_never_reclaims_nor_warns(seen, nodes, why):
    """An 8-GPU job whose telemetry covers 4 of its GPUs, or names GPUs on a node the job does not run on (a stale
    or forged job mapping), is idle on partial evidence: already warned and due now, it is still not requeued."""
    f = Finding("idle", "42", "slurm", None, seen, NOW - 71 * 60, NOW, 71.0, {"max_activity": 0.0},
                "job 42 idle: all GPU(s) under 5% activity for 71 min")
    d = run([f], {"42": info(gpus=8, nodes=nodes)}, memory=HealthMemory({("42", "idle"): NOW - 3600}))
    assert d.reclaims == [] and d.warnings == []
    o = d.outcomes[0]
    assert o.verdict == "partial_telemetry" and why in o.message and "nothing is done" in o.message
    assert d.budget_gpus == 100.0


def test_full_telemetry_on_a_two_node_job_is_acted_on():
    seen = tuple(f"a:{i}" for i in range(4)) + tuple(f"b:{i}" for i in range(4))
    f = Finding("idle", "42", "slurm", None, seen, NOW - 71 * 60, NOW, 71.0, {}, "job 42 idle")
    d = run([f], {"42": info(gpus=8, nodes=("a", "b"))}, memory=HealthMemory({("42", "idle"): NOW - 3600}))
    assert [r.job for r in d.reclaims] == ["42"]


@pytest.mark.security
def test_an_unknown_jobs_outcome_has_no_tenant_even_with_a_namespace_label():
    f = Finding("idle", "alpha/pod-1", "kubernetes", "alpha", ("n1:0",), NOW - 3600, NOW, 60.0, {}, "idle")
    d = run([f], {})
    assert d.outcomes[0].verdict == "unknown_job" and d.outcomes[0].tenant is None
    assert d.outcomes[0].to_dict()["tenant"] is None


def test_restraints_hold_a_due_reclaim_back_and_spend_none_of_the_budget():
    """What holds a preemption back holds a reclaim back: the cycle hands in why (daemon/service/health.py
    `restraints`); a held job is told why, and another tenant's job is requeued as before."""
    mem = HealthMemory({(j, "idle"): NOW - 3600 for j in "ab"})
    jobs = {"a": info(tenant="team-a"), "b": info(tenant="team-b")}
    held = Restraints(tenants={"team-a": "an operator has paused this tenant's preemptions"})
    d = run([finding("a", 90), finding("b", 70)], jobs, memory=mem, restraints=held)
    v = {o.finding.job: o for o in d.outcomes}
    assert [r.job for r in d.reclaims] == ["b"] and d.budget_gpus == 92     # a's 8 GPUs not spent
    assert v["a"].verdict == "held" and "but not while an operator has paused" in v["a"].message
    d = run([finding("a", 90), finding("b", 70)], jobs, memory=mem, restraints=Restraints("the plan is stale"))
    assert d.reclaims == [] and {o.verdict for o in d.outcomes} == {"held"} and d.budget_gpus == 100
    # not due yet: a warning that says the requeue waits for the restraint
    d = run([finding("a", 35)], jobs, restraints=held)
    assert d.outcomes[0].verdict == "warn" and "would be requeued in 25 min" in d.warnings[0].message
    # a report-only tier is reported, whatever holds requeues back
    assert run([finding("a", 90)], {"a": info("normal", tenant="team-a")}, memory=mem,
               restraints=held).outcomes[0].verdict == "report"


def test_restraints_come_from_the_operators_inputs_and_the_plans_freshness():
    ops = OperatorInputs(floors={"f": 4, "z": 0}, paused=frozenset({"p"}))
    r = restraints(ops, None)
    assert r.held is None and set(r.tenants) == {"f", "p"} and r.why("z") is None
    assert restraints(OperatorInputs(paused_all=True), None).why("anyone") == "an operator has paused preemptions"
    # the operator's tier is the job's tier (a low-priority job stays low)
    st = make_state(["normal", "normal"], [(0, 2, "normal", True, 3600, 0), (1, 2, "low", True, 3600, 0)],
                    capacity=8)
    tenants = st.tenants
    infos = job_infos(st, Config(), OperatorInputs(tiers={tenants[0]: "high", tenants[1]: "high"}))
    assert sorted(i.tier for i in infos.values()) == ["high", "low"]


def test_an_idle_component_of_a_heterogeneous_job_is_not_requeued_while_another_is_busy():
    """A Slurm hetjob's components (7+0, 7+1) are a job each to the health policy, each of its own account and tier,
    and a requeue of one is a requeue of all (the actuator sends 7). A low tenant's idle 7+1 beside team-b's busy
    7+0 (no finding) was requeued, and team-b's work with it, untold. Now it waits, and says for what."""
    mem = HealthMemory({("7+1", "idle"): NOW - 3600})
    jobs = {"7+0": info("high", gpus=4, tenant="team-b"), "7+1": info("low", gpus=4)}
    d = run([finding("7+1", 90, gpus=4)], jobs, memory=mem)
    assert d.reclaims == [] and d.budget_gpus == 100
    o = d.outcomes[0]
    assert o.verdict == "held" and "1 other component of heterogeneous job 7 (7+0) is not due" in o.message


def test_a_heterogeneous_jobs_component_without_gpus_does_not_keep_its_idle_gpus_from_reclaim():
    """A component with no GPUs (sbatch --gres=gpu:8 ... : -n1 ...) has no finding: the health policy watches GPUs.
    Waited for as a component not yet due, it kept the job's idle GPUs from ever being requeued; it now goes with
    the job, as a plain job's CPUs go with its idle GPUs."""
    mem = HealthMemory({("7+0", "idle"): NOW - 3600})
    jobs = {"7+0": info(gpus=4), "7+1": info(gpus=0)}
    d = run([finding("7+0", 90, gpus=4)], jobs, memory=mem)
    assert [(r.job, r.job_ids, r.gpus) for r in d.reclaims] == [("7+0", ["7+0", "7+1"], 4)], d.outcomes
    assert d.outcomes[0].verdict == "requeue"


def test_a_heterogeneous_job_whose_every_component_is_due_is_one_reclaim_of_all_their_gpus():
    mem = HealthMemory({("7+0", "idle"): NOW - 3600, ("7+1", "hung"): NOW - 3600})
    jobs = {"7+0": info(gpus=4), "7+1": info(gpus=2), "8": info(gpus=1)}
    d = run([finding("7+0", 90, gpus=4), finding("7+1", 70, kind="hung", gpus=2)], jobs, memory=mem)
    assert [(r.job, r.job_ids, r.gpus) for r in d.reclaims] == [("7+0", ["7+0", "7+1"], 6)]
    assert (d.budget_gpus, d.budget_jobs) == (94, 9)
    assert {o.finding.job: o.verdict for o in d.outcomes} == {"7+0": "requeue", "7+1": "requeue"}
    assert "with every component of heterogeneous job 7" in d.outcomes[0].message
    # warned, the tenant reads that the whole job goes, and only once every component is due
    w = run([finding("7+0", 35, gpus=4)], jobs).warnings[0].message
    assert "with every component of heterogeneous job 7, so only once each of them is due" in w
