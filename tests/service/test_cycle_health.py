"""The cycle's health step (daemon/service/cycle.py `_health`): it runs after the plan, its reclaims spend the
preemption budget the plan left (and give back what is left to the policy's memory), and the Snapshot carries its
view. The operator binds it as it binds the plan's preemptions (an operator's tier, pauses, floors), a stale plan
or the safe default holds its reclaims back, and a reload turns it off and on. On the embedded simulator, with
telemetry made by hand for one of its running jobs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from daemon.actuators.base import ActionReport
from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.state import PRIORITY
from daemon.service.health import HealthRunner
from daemon.service.wiring import build_runtime
from tests.support.actuators import QuietActuator

N = 30


class OneIdleJob:
    """Every GPU the simulator allocated to the job, on the job's node, idle for the whole window."""

    def __init__(self, job: str, gpus: int, node: str) -> None:
        self.job, self.gpus, self.node = job, gpus, node
        self.reads = 0

    def read(self, end=None) -> Telemetry:
        import time
        self.reads += 1
        return Telemetry(time.time(), 60.0, N, tuple(
            GpuTrace(self.job, "slurm", None, self.node, str(k), np.zeros(N), np.full(N, 1e3), np.full(N, 79e3),
                     np.zeros(N)) for k in range(self.gpus)))


class Recorder(QuietActuator):
    """Stands for the Slurm actuator's health capabilities; records what it is asked."""

    name, dry_run = "slurm", False

    def __init__(self) -> None:
        self.reclaimed: list[str] = []
        self.comments: list[str] = []

    def comment(self, job_ids, text):
        self.comments += job_ids
        return ActionReport(self.name, False, actions=[f"scontrol update JobId={job_ids[0]}"])

    def reclaim(self, job_ids, reason):
        self.reclaimed += job_ids
        return ActionReport(self.name, False, actions=[f"scontrol requeue {j}" for j in job_ids])


HEALTH = {"idle_warn_minutes": 5, "idle_action_minutes": 10}


def runtime(tmp_path, priority: str = "low", health: dict | None = None, **policy):
    """The simulator's runtime after one cycle, a Recorder among its actuators, and telemetry that shows one running
    job of `priority` (an hour old or more) idle on all its GPUs: (runtime, recorder, that job, its tenant)."""
    cfg = Config(cluster={"gpus": 256}, policy=policy,
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=1500)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                 health={**HEALTH, **(health or {})})
    rt = build_runtime(cfg)
    st = rt.runner.run_once().collected.state
    pick = np.flatnonzero(st.jobs.running & (st.jobs.priority == PRIORITY[priority]) & (st.jobs.runtime_s > 3600)
                          & (st.jobs.gpus <= 4))   # within the budget's 5 GPUs (0.02 of 256)
    i = pick[0]
    job = str(st.jobs.ids[i])
    rec = Recorder()
    rt.runner.actuators.append(rec)
    rt.runner.health = HealthRunner(rt.runner.cfg, OneIdleJob(job, int(st.jobs.gpus[i]), str(st.jobs.node[i])),
                                    CollectorRegistry())
    return rt, rec, job, st.tenants[int(st.jobs.tenant[i])]


def test_the_health_step_warns_then_reclaims_and_spends_the_plans_budget(tmp_path):
    rt, rec, job, _ = runtime(tmp_path)
    r = rt.runner
    r.run_once()
    assert rec.comments == [job] and rec.reclaimed == []          # told first (AdminComment)
    assert r.snapshot.health["outcomes"][0]["verdict"] == "warn"
    r.run_once()
    assert rec.reclaimed == [job] and r.snapshot.health["outcomes"][0]["verdict"] == "requeue"
    cap = 0.02 * 256   # policy.preempt_budget_share of the GPUs: the bucket's size
    assert r.memory.budget_gpus is not None and r.memory.budget_gpus <= cap - 1   # the reclaim's GPUs were spent


def test_an_empty_preemption_budget_holds_the_reclaim_back(tmp_path):
    rt, rec, job, _ = runtime(tmp_path, preempt_budget_share=0.0)
    rt.runner.run_once()
    rt.runner.run_once()
    assert rec.reclaimed == [] and rt.runner.snapshot.health["outcomes"][0]["verdict"] == "over_budget"


def verdict(rt) -> str:
    return rt.runner.snapshot.health["outcomes"][0]["verdict"]


@pytest.mark.parametrize("change", [{"preemption_paused": True}, {"floor_gpus": 8}, None],
                         ids=["tenant-paused", "floor", "all-paused"])
def test_an_operators_pause_or_floor_holds_the_reclaim_back_until_it_is_lifted(tmp_path, change):
    """docs/console-and-api.md: a paused tenant's jobs, a floored tenant's jobs, and with the cluster-wide pause
    every job, are not preempted; a health requeue is not either. Lifted, the next cycle requeues."""
    rt, rec, job, tenant = runtime(tmp_path)
    r = rt.runner
    if change is None:
        rt.overrides.change_global("op", {"preemption_paused": True})
    else:
        rt.overrides.change_tenant("op", tenant, change)
    r.run_once()
    assert rec.comments == [job]                      # the tenant is told as usual ...
    r.run_once()
    r.run_once()
    assert rec.reclaimed == [] and verdict(rt) == "held"   # ... and never requeued while the operator says so
    msg = r.snapshot.health["outcomes"][0]["message"]
    assert "it would be requeued now, but not while an operator" in msg
    assert r.memory.budget_gpus is None or r.memory.budget_gpus > 1   # a held reclaim spends no budget
    if change is None:
        rt.overrides.change_global("op", {"preemption_paused": None})
    else:
        rt.overrides.change_tenant("op", tenant, {k: None for k in change})
    r.run_once()
    assert rec.reclaimed == [job] and verdict(rt) == "requeue"


def test_a_tenant_raised_to_high_by_an_operator_is_reported_at_its_new_tier(tmp_path):
    """The normal tier requeues here (idle_actions.normal = requeue), the high tier reports (the default): a
    tenant the console raised to high is the high tier's, as in the plan."""
    rt, rec, job, tenant = runtime(tmp_path, priority="normal", health={"idle_actions": {"normal": "requeue"}})
    r = rt.runner
    rt.overrides.change_tenant("op", tenant, {"tier": "high"})
    for _ in range(3):
        r.run_once()
    o = r.snapshot.health["outcomes"][0]
    assert rec.reclaimed == [] and (o["tier"], o["verdict"]) == ("high", "report")
    rt.overrides.change_tenant("op", tenant, {"tier": None})   # back to the config's normal: requeued
    r.run_once()
    assert rec.reclaimed == [job] and verdict(rt) == "requeue"


class Stale:
    """The simulator's collection, its newest sample made `age_s` old while `age_s` is set."""

    def __init__(self, source) -> None:
        self.source, self.age_s = source, None

    def collect(self, history_steps):
        c = self.source.collect(history_steps)
        if self.age_s is None:
            return c
        return dataclasses.replace(c, state=dataclasses.replace(c.state, staleness_s=self.age_s))


@pytest.mark.parametrize("safe_default", [False, True], ids=["stale-plan", "safe-default"])
def test_a_stale_plan_or_the_safe_default_holds_every_reclaim_back(tmp_path, safe_default):
    """The daemon keeps its last good plan (or falls back to the safe default) when its data cannot be trusted,
    and makes no new preemption then: no health requeue either, on the same snapshot."""
    rt, rec, job, _ = runtime(tmp_path)
    r = rt.runner
    r.source = stale = Stale(r.source)
    r.run_once()                                       # warned on fresh data
    stale.age_s = 1e6
    if safe_default:
        r.last_good_at = r.clock() - 10 * r.cfg.cycle.max_plan_age_s   # the last good plan is too old to keep
    r.run_once()
    r.run_once()
    assert r.last_plan is not None and rec.reclaimed == [] and verdict(rt) == "held"
    assert r.safe_active is safe_default
    msg = r.snapshot.health["outcomes"][0]["message"]
    assert ("the safe default is in force" if safe_default else "the plan is stale") in msg
    stale.age_s = None
    r.run_once()
    assert rec.reclaimed == [job] and verdict(rt) == "requeue"


def test_a_reload_turns_job_health_off_and_on(tmp_path):
    """A SIGHUP with health.enabled = false stops the step at once (no telemetry read, no warning, no requeue,
    nothing shown); with true again it starts afresh: a job is warned again before it is requeued."""
    from daemon.service.loop import Daemon

    rt, rec, job, _ = runtime(tmp_path, preempt_budget_window_s=1e-3)
    r = rt.runner
    telemetry = r.health.telemetry
    # health needs a Prometheus source; the cycle reads the cluster from the simulator all the same (the budget
    # then refills on the wall clock: at once, as it does between the simulator's cycles a minute apart)
    r.cfg = r.cfg.model_copy(update={"source": SourceConfig(kind="prometheus"),
                                     "health": r.cfg.health.model_copy(update={"enabled": True})})
    d = Daemon(rt, serve_http=False)
    d.config_path = tmp_path / "config.toml"
    body = ('[source]\nkind = "prometheus"\n\n[policy]\npreempt_budget_window_s = 1e-3\n\n'
            '[health]\nidle_warn_minutes = 5\nidle_action_minutes = 10\n')
    r.run_once()
    assert rec.comments == [job] and telemetry.reads == 1
    d.config_path.write_text(body + "enabled = false\n")
    assert d.reload() is True and not d.cfg.health.enabled
    r.run_once()
    r.run_once()
    assert rec.reclaimed == [] and telemetry.reads == 1 and r.snapshot.health is None
    d.config_path.write_text(body + "enabled = true\n")
    assert d.reload() is True
    r.run_once()
    assert rec.comments == [job, job] and rec.reclaimed == [] and verdict(rt) == "warn"   # warned afresh
    r.run_once()
    assert rec.reclaimed == [job]


def test_a_daemon_started_with_health_off_can_have_it_turned_on_by_a_reload(tmp_path):
    """Wiring leaves the runner a way to build the health step (on Prometheus; the simulator has no per-job
    telemetry): turned on, off and on again, the same step comes back (its metrics are registered once)."""
    from daemon.sources.job_telemetry import JobTelemetrySource

    cfg = Config(source={"kind": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}},
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    r = rt.runner
    on = cfg.model_copy(update={"health": cfg.health.model_copy(update={"enabled": True})})
    try:
        assert r.health is None and r.use_config(cfg) is None
        assert "turned on" in r.use_config(on) and isinstance(r.health.telemetry, JobTelemetrySource)
        first = r.health
        assert "turned off" in r.use_config(cfg) and r.health is None
        again = on.model_copy()
        assert "turned on" in r.use_config(again) and r.health is first and r.health.cfg is again
    finally:
        rt.close()
