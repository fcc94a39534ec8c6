"""The cycle's health step (daemon/service/cycle.py `_health`): it runs after the plan, its reclaims spend the
preemption budget the plan left (and give back what is left to the policy's memory), and the Snapshot carries its
view. On the embedded simulator, with telemetry made by hand for one of its running low-priority jobs."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry

from daemon.actuators.base import ActionReport
from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.state import PRIORITY
from daemon.service.health import HealthRunner
from daemon.service.wiring import build_runtime

N = 30


class OneIdleJob:
    """Every GPU the simulator allocated to the job, on the job's node, idle for the whole window."""

    def __init__(self, job: str, gpus: int, node: str) -> None:
        self.job, self.gpus, self.node = job, gpus, node

    def read(self, end=None) -> Telemetry:
        import time
        return Telemetry(time.time(), 60.0, N, tuple(
            GpuTrace(self.job, "slurm", None, self.node, str(k), np.zeros(N), np.full(N, 1e3), np.full(N, 79e3),
                     np.zeros(N)) for k in range(self.gpus)))


class Recorder:
    """Stands for the Slurm actuator's health capabilities; records what it is asked."""

    name, dry_run = "slurm", False

    def __init__(self) -> None:
        self.reclaimed: list[str] = []
        self.comments: list[str] = []

    def apply(self, plan):
        return ActionReport(self.name, False)

    def requeue(self, job_ids, reason):
        return ActionReport(self.name, False)

    def notify(self, notes):
        return ActionReport(self.name, False)

    def comment(self, job_ids, text):
        self.comments += job_ids
        return ActionReport(self.name, False, actions=[f"scontrol update JobId={job_ids[0]}"])

    def reclaim(self, job_ids, reason):
        self.reclaimed += job_ids
        return ActionReport(self.name, False, actions=[f"scontrol requeue {j}" for j in job_ids])


def runtime(tmp_path, **policy):
    cfg = Config(cluster={"gpus": 256}, policy=policy,
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=1500)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                 health={"idle_warn_minutes": 5, "idle_action_minutes": 10})
    rt = build_runtime(cfg)
    st = rt.runner.run_once().collected.state
    low = np.flatnonzero(st.jobs.running & (st.jobs.priority == PRIORITY["low"]) & (st.jobs.runtime_s > 3600))
    job = str(st.jobs.ids[low[0]])
    rec = Recorder()
    rt.runner.actuators.append(rec)
    rt.runner.health = HealthRunner(rt.runner.cfg, OneIdleJob(job, int(st.jobs.gpus[low[0]]),
                                                              str(st.jobs.node[low[0]])), CollectorRegistry())
    return rt, rec, job


def test_the_health_step_warns_then_reclaims_and_spends_the_plans_budget(tmp_path):
    rt, rec, job = runtime(tmp_path)
    r = rt.runner
    r.run_once()
    assert rec.comments == [job] and rec.reclaimed == []          # told first (AdminComment)
    assert r.snapshot.health["outcomes"][0]["verdict"] == "warn"
    r.run_once()
    assert rec.reclaimed == [job] and r.snapshot.health["outcomes"][0]["verdict"] == "requeue"
    cap = 0.02 * 256   # policy.preempt_budget_share of the GPUs: the bucket's size
    assert r.memory.budget_gpus is not None and r.memory.budget_gpus <= cap - 1   # the reclaim's GPUs were spent


def test_an_empty_preemption_budget_holds_the_reclaim_back(tmp_path):
    rt, rec, job = runtime(tmp_path, preempt_budget_share=0.0)
    rt.runner.run_once()
    rt.runner.run_once()
    assert rec.reclaimed == [] and rt.runner.snapshot.health["outcomes"][0]["verdict"] == "over_budget"
