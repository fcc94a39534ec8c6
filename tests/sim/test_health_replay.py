"""The job-health step on the simulator (daemon/sim/health_replay.py): the daemon's own plan() and assess() each
step, reclaims through the simulator's actuator within the budget the plan left.

Each property is checked against the simulator's own state at the moment of the reclaim (the activity model's idle
run, the cluster's tenant and start step), not against the hook's bookkeeping: the actuator's `reclaim` is wrapped
to record what it is asked to requeue.
"""

from __future__ import annotations

import numpy as np
import pytest

from daemon.config import Config
from daemon.sim.activity import ActivityParams
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import RUNNING
from daemon.sim.health_replay import HealthHook, run_health, summary
from daemon.sim.replay import run_strategy
from daemon.sim.workloads import synthetic

STEPS = 150
# long idle stretches in every tier, so that high and normal jobs are found idle past the threshold too
PARAMS = ActivityParams(idle_share=0.5, mean_idle_steps=120)
# the default actions per tier (requeue low, report high and normal) at shorter thresholds, so that a 150-step
# replay of a 128-GPU cluster, whose jobs come and go, sees a few jobs reach them
_C = Config()
FAST = _C.model_copy(update={"health": _C.health.model_copy(update=dict(
    idle_warn_minutes=10, idle_action_minutes=20, hung_warn_minutes=10, hung_action_minutes=20,
    leak_window_minutes=20))})


@pytest.fixture(scope="module")
def w():
    return synthetic(tenants=12, gpus=128, days=0.5, seed=7, history_days=1.1, target_load=1.0)


class Recorder:
    """Wraps SimulatorActuator.reclaim: per call, what the simulator says of the job right then. And before each
    health step, the running jobs an unscraped exporter hides that would be due (low, idle past the threshold,
    run long enough)."""

    def __init__(self, monkeypatch, hook_of) -> None:
        self.rows: list[dict] = []
        self.hidden_due: set[int] = set()
        self.measured = False
        orig, orig_after = SimulatorActuator.reclaim, HealthHook.after_plan
        rec = self

        def reclaim(act, job_ids, reason):
            hook = hook_of()
            c, a = act.cluster, hook.activity
            for j in job_ids:
                jid = int(j)
                pos = int(np.flatnonzero(c.j_id[: c.size] == jid)[0])
                rec.rows.append({"job": jid, "tier": hook.tier_of_tenant[c.j_tenant[pos]],
                                 "idle_steps": int(a.idle_steps[jid]), "blind": bool(hook.telemetry.blind[jid]),
                                 "runtime_s": float((c.step_no - c.j_started_at[pos]) * hook.step_s),
                                 "measured": rec.measured})
            return orig(act, job_ids, reason)

        def after_plan(hook, c, k, state, memory, cfg, measured):
            live = np.flatnonzero(c.j_state[: c.size] == RUNNING)
            ids = c.j_id[live]
            due = (hook.tier_of_tenant[c.j_tenant[live]] == "low") & hook.telemetry.blind[ids] \
                & (hook.activity.idle_steps[ids] > cfg.health.idle_action_minutes * 60 / hook.step_s) \
                & ((c.step_no - c.j_started_at[live]) * hook.step_s >= cfg.policy.preempt_min_runtime_s)
            rec.hidden_due.update(int(x) for x in ids[due])
            rec.measured = measured
            return orig_after(hook, c, k, state, memory, cfg, measured)

        monkeypatch.setattr(SimulatorActuator, "reclaim", reclaim)
        monkeypatch.setattr(HealthHook, "after_plan", after_plan)


def run(w, cfg, mode, monkeypatch=None, **kw):
    """run_health, with the reclaims recorded when `monkeypatch` is given."""
    box: dict = {}
    rec = None
    if monkeypatch is not None:
        rec = Recorder(monkeypatch, lambda: box["hook"])
        orig_init = HealthHook.__init__

        def init(self, *a, **k):
            orig_init(self, *a, **k)
            box["hook"] = self

        monkeypatch.setattr(HealthHook, "__init__", init)
    m, h = run_health("reactive", w, cfg, mode, steps=kw.pop("steps", STEPS), params=kw.pop("params", PARAMS),
                      seed=kw.pop("seed", 3), **kw)
    return m, h, rec


def plain(s: dict) -> dict:
    return {t: (x["unmet_gpu_min"], x["preempted_by_plan"] + x["reclaimed"], x["lost_gpu_min_plan"]
                + x["lost_gpu_min_reclaim"]) for t, x in s["tiers"].items()}


def test_reclaim_off_is_the_plain_replay_and_reclaims_nothing(w):
    base = run_strategy("reactive", w, Config(), steps=360)
    m, h, _ = run(w, Config(), "off", steps=360)
    s = summary(m, h.meter)
    assert sum(x["reclaimed"] for x in s["tiers"].values()) == 0 and h.meter.health_steps == 0
    assert base.preempted["low"] > 0          # the plan preempts here: a changed choice would show
    assert m.util == base.util
    for t in base.unmet:
        assert m.unmet[t] == base.unmet[t] and m.preempted[t] == base.preempted[t] and m.lost[t] == base.lost[t]
    # report mode runs the health step (findings, idle marks for the plan) and requeues nothing
    m2, h2, _ = run(w, Config(), "report")
    assert h2.meter.health_steps == STEPS and sum(h2.meter.reclaimed.values()) == 0
    assert sum(sum(v.values()) for v in h2.meter.verdicts.values()) > 0


def test_only_low_jobs_idle_past_the_action_threshold_are_requeued(w, monkeypatch):
    # a minimum run time over the idle threshold, so that it decides (a job's idle run is clipped to its current
    # run: with a shorter minimum, every job idle past the threshold has run long enough)
    cfg = FAST.model_copy(update={"policy": FAST.policy.model_copy(update={"preempt_min_runtime_s": 1800.0})})
    assert cfg.health.idle_actions == Config().health.idle_actions == {"high": "report", "normal": "report",
                                                                       "low": "requeue"}
    m, h, rec = run(w, cfg, "requeue", monkeypatch)
    rows = rec.rows
    assert len(rows) > 0
    assert {r["tier"] for r in rows} == {"low"}
    limit = cfg.health.idle_action_minutes * 60 / h.step_s
    assert min(r["idle_steps"] for r in rows) >= limit
    assert min(r["runtime_s"] for r in rows) >= cfg.policy.preempt_min_runtime_s
    assert h.meter.verdicts["low"].get("protected", 0) > 0
    v = h.meter.verdicts
    # high and normal jobs were found idle past the threshold too, and only reported
    assert v["high"].get("report", 0) + v["normal"].get("report", 0) > 0
    assert set(v["high"]) | set(v["normal"]) <= {"report"}
    assert h.meter.partial_jobs == 0          # the simulated telemetry covers each job's allocation exactly
    assert sum(h.meter.reclaimed.values()) == sum(r["measured"] for r in rows)


def test_a_job_without_telemetry_is_never_reclaimed(w, monkeypatch):
    m, h, rec = run(w, FAST, "requeue", monkeypatch, missing_share=0.5)
    assert len(rec.rows) > 0 and not any(r["blind"] for r in rec.rows)
    assert h.meter.no_data_jobs > 0
    # unscraped low jobs were idle past the threshold while running: with telemetry they would have been taken
    assert len(rec.hidden_due) > 0


def test_the_budget_caps_reclaims(w, monkeypatch):
    window = 3600.0
    tight = FAST.model_copy(update={"policy": FAST.policy.model_copy(update={
        "preempt_budget_jobs": 2, "preempt_budget_window_s": window})})
    m, h, rec = run(w, tight, "requeue", monkeypatch)
    total_steps = STEPS + 240                 # the warm-up's steps spend the budget too
    bound = 2 + 2 * total_steps * h.step_s / window
    spent = len(rec.rows) + sum(m.preempted.values()) - sum(h.meter.reclaimed.values())
    assert 0 < len(rec.rows) and spent <= bound
    assert h.meter.verdicts["low"].get("over_budget", 0) > 0
    _, h_free, _ = run(w, FAST, "requeue")
    assert sum(h_free.meter.reclaimed.values()) > sum(h.meter.reclaimed.values())


def test_deterministic_per_seed(w):
    a = summary(*_pair(run(w, FAST, "requeue", seed=5)))
    b = summary(*_pair(run(w, FAST, "requeue", seed=5)))
    c = summary(*_pair(run(w, FAST, "requeue", seed=6)))
    drop = ("health_s", "wall_s")
    a, b, c = ({k: v for k, v in s.items() if k not in drop} for s in (a, b, c))
    assert a == b and a != c


def _pair(r):
    m, h, _ = r
    return m, h.meter
