"""The daemon's start-time estimates (daemon/service/eta.py): learned run lengths, the first estimate scored when
the job starts (metrics), withdrawn jobs forgotten, made every good cycle on the embedded simulator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.policy.eta_calibration import Calibration
from daemon.policy.state import ClusterState, Jobs
from daemon.policy.types import Plan, PolicyMemory
from daemon.service.eta import EtaTracker, peaks_of, windows_ahead
from daemon.service.wiring import build_runtime
from forecaster.types import Forecast

TENANTS = ("a", "b")


def _state(running: dict[str, float], pending: dict[str, float], at: float | None = None) -> ClusterState:
    """Tenant a's jobs; `running`: id -> seconds run, `pending`: id -> seconds waited; 4 GPUs, 1-GPU jobs."""
    ids = [*running, *pending]
    r = np.array([True] * len(running) + [False] * len(pending))
    jobs = Jobs(ids=np.array(ids, dtype=object), tenant=np.zeros(len(ids), dtype=np.int64),
                gpus=np.ones(len(ids), dtype=np.int64), priority=np.ones(len(ids), dtype=np.int8), running=r,
                runtime_s=np.array([*running.values(), *[0.0] * len(pending)]),
                wait_s=np.array([*[0.0] * len(running), *pending.values()]), node=np.array([""] * len(ids)))
    when = pd.Timestamp("2026-01-05T00:00:00Z") if at is None else pd.Timestamp(at, unit="s", tz="UTC")
    return ClusterState(at=when, tenants=TENANTS, tiers=("normal", "low"),
                        capacity=len(running), used=np.array([float(len(running)), 0.0]),
                        pending=np.array([float(len(pending)), 0.0]), jobs=jobs)


def test_the_first_estimate_is_scored_when_the_job_starts():
    now = [1000.0]
    reg = CollectorRegistry()
    t = EtaTracker(reg, lambda: now[0], min_samples=1)
    # the cluster is full; J0 finished at 600 s: the history says a run lasts 600 s
    t.update(_state({"J0": 540.0, "J1": 100.0, "J2": 100.0, "J3": 100.0, "J4": 100.0}, {}), None, None)
    now[0] = 1060.0
    view = t.update(_state({"J1": 160.0, "J2": 160.0, "J3": 160.0, "J4": 160.0}, {"P": 0.0}), None, None)
    (row,) = view["jobs"]
    # J1..J4 have run 160 s of the 600 the one finished run lasted: 440 s left
    assert row["job_id"] == "P" and row["p50_s"] == 440.0 and row["p50_at"] == "1970-01-01T00:25:00+00:00"
    assert reg.get_sample_value("gpuas_eta_age_seconds") == 0.0
    now[0] = 1100.0
    assert reg.get_sample_value("gpuas_eta_age_seconds") == 40.0
    # P starts 300 s later than told (it has run 60 s at 1860): error 300 s, past its p90 (also 1500)
    now[0] = 1860.0
    t.update(_state({"J1": 960.0, "J2": 960.0, "J3": 960.0, "P": 60.0}, {}), None, None)
    assert reg.get_sample_value("gpuas_eta_error_seconds_sum", {"tier": "normal"}) == 300.0
    assert reg.get_sample_value("gpuas_eta_p90_covered_total", {"tier": "normal", "covered": "false"}) == 1.0


def test_on_the_simulators_clock_the_estimate_and_its_score_are_on_the_snapshots_time():
    """The embedded simulator runs a minute of cluster time per 2 s cycle: job times are on its clock. The same
    queue as above, its snapshots 60 s apart while the wall clock barely moves: the same estimate, scored the same;
    only the age is on the wall clock. On the wall clock (the old code) P's start was read as wall minus its
    simulated run time, an error of hours."""
    wall = [5000.0]
    reg = CollectorRegistry()
    t = EtaTracker(reg, lambda: wall[0], min_samples=1, state_time=True)
    t.update(_state({"J0": 540.0, "J1": 100.0, "J2": 100.0, "J3": 100.0, "J4": 100.0}, {}, at=1000.0), None, None)
    wall[0] = 5002.0
    view = t.update(_state({"J1": 160.0, "J2": 160.0, "J3": 160.0, "J4": 160.0}, {"P": 0.0}, at=1060.0), None, None)
    (row,) = view["jobs"]
    assert row["p50_s"] == 440.0 and row["p50_at"] == "1970-01-01T00:25:00+00:00" and view["made_at"] == 1060.0
    wall[0] = 5003.0
    assert reg.get_sample_value("gpuas_eta_age_seconds") == 1.0
    t.update(_state({"J1": 960.0, "J2": 960.0, "J3": 960.0, "P": 60.0}, {}, at=1860.0), None, None)
    assert reg.get_sample_value("gpuas_eta_error_seconds_sum", {"tier": "normal"}) == 300.0


def test_a_job_withdrawn_while_waiting_is_not_scored():
    reg = CollectorRegistry()
    t = EtaTracker(reg, lambda: 0.0)
    t.update(_state({"J1": 1.0}, {"P": 0.0}), None, None)
    t.update(_state({"J1": 2.0}, {}), None, None)
    t.update(_state({"J1": 3.0, "P": 1.0}, {}), None, None)      # a new job reusing the id: not scored
    assert reg.get_sample_value("gpuas_eta_error_seconds_count", {"tier": "normal"}) is None


def test_every_good_cycle_estimates_the_pending_jobs(tmp_path):
    cfg = Config(cluster={"gpus": 64}, source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20,
                                                                                     warmup_steps=1500)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    rt.runner.run_once()
    snap = rt.runner.snapshot
    st = rt.runner.last_state
    pending = {str(j) for j, r in zip(st.jobs.ids, st.jobs.running) if not r}
    assert pending and snap.eta is not None
    assert {r["job_id"] for r in snap.eta["jobs"]} == pending
    assert sorted(r["position"] for r in snap.eta["jobs"]) == list(range(len(pending)))
    assert snap.eta["made_at"] == st.at.timestamp()     # the simulation's time, not today's (the console shows both)
    rt.close()


def test_a_windows_hold_ahead_is_handed_to_the_estimate():
    """A daily 14:00 window with 30 min reclaim_before, at 13:00 UTC: its hold begins in 30 min; at 13:45 it is in
    force (already among the plan's holds), so none is handed on."""
    w = {"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00", "timezone": "UTC",
         "duration_minutes": 60, "reclaim_before_minutes": 30}
    plan = Plan(at="2026-01-05T13:00:00+00:00", capacity=32, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory(), windows=(w,))
    assert windows_ahead(plan, pd.Timestamp("2026-01-05T13:00:00Z")) == [(1800.0, "batch", 16.0)]
    assert windows_ahead(plan, pd.Timestamp("2026-01-05T13:45:00Z")) == []


def test_the_daemon_scales_the_p90_by_the_jobs_that_started_under_it():
    """The calibration lives in the tracker: P is told a p90 440 s out (model) at 1060 and starts at 1800 (740 s:
    1.68x). With one started job enough (min_all=1 here), Q, pending next, gets its model p90 times 740/440."""
    now = [1000.0]
    t = EtaTracker(CollectorRegistry(), lambda: now[0], min_samples=1)
    t.cal = Calibration(min_all=1, min_tier=1, floor_s=30.0)
    t.update(_state({"J0": 540.0, "J1": 100.0, "J2": 100.0, "J3": 100.0, "J4": 100.0}, {}), None, None)
    now[0] = 1060.0
    (p,) = t.update(_state({"J1": 160.0, "J2": 160.0, "J3": 160.0, "J4": 160.0}, {"P": 0.0}), None, None)["jobs"]
    assert p["p90_s"] == 440.0 and "scaled" not in p["basis"]          # nothing started yet: the model's own
    now[0] = 1860.0
    (q,) = t.update(_state({"J1": 300.0, "J2": 300.0, "J3": 300.0, "P": 60.0}, {"Q": 0.0}), None, None)["jobs"]
    # runs seen: 600 and J4's 960; the J's have run 300: the p50 has each give back fifths at 336, 408, 480, 552 and
    # 624 s (the runs' 10th to 90th percentiles less 300), so three J's free Q's one GPU by 408; 624 at the 90th
    assert q["p50_s"] == 408.0 and q["p90_s"] == pytest.approx(624.0 * 740.0 / 440.0)
    assert "scaled x1.68" in q["basis"]


def test_a_standby_learns_the_p90s_calibration_too(tmp_path):
    """Every replica estimates every good cycle (only the acting one writes to Slurm): a standby reading the same
    cluster has learned the run lengths and the calibration when it takes over. Here a replica that never acts
    learns from the jobs that start while it stands by (one started job is enough for this test's calibration)."""
    cfg = Config(cluster={"gpus": 64}, source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20,
                                                                                     warmup_steps=1500)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    rt.runner.may_act = lambda: False
    tracker = rt.runner.eta
    tracker.cal = Calibration(min_all=1, min_tier=1, floor_s=cfg.cycle.interval_s)
    for _ in range(1000):    # a cycle is one simulated step: jobs start within a few hundred
        rt.runner.run_once()
        if tracker.cal.factors(float("inf")).by_tier:
            break
    assert not rt.runner.acting and rt.runner.snapshot.eta is not None
    assert tracker.cal.factors(float("inf")).by_tier and tracker.runs.to_dict()
    rt.close()


def test_the_p50_leans_on_the_queues_rate_once_that_erred_less():
    """J0 ends at 1060 (1 GPU freed in the first 60 s: the naive estimate of P, 1 GPU short, is 60 s; the run-length
    history says 400 s). P starts at 1140, 80 s after: the naive estimate was the closer, so the weight is 0 and
    R, 1 GPU short at 1200 (1 GPU freed in 200 s), is told 200 s, not the model's 260 s."""
    now = [1000.0]
    t = EtaTracker(CollectorRegistry(), lambda: now[0], min_samples=1)
    t.cal = Calibration(min_all=1, min_tier=1, min_blend=1, floor_s=60.0)
    t.update(_state({"J0": 500.0, "J1": 100.0, "J2": 100.0, "J3": 100.0}, {}), None, None)
    now[0] = 1060.0
    (p,) = t.update(_state({"J1": 160.0, "J2": 160.0, "J3": 160.0, "Q": 0.0}, {"P": 0.0}), None, None)["jobs"]
    assert p["p50_s"] == 400.0       # no started job yet: the model's
    now[0] = 1200.0
    (r,) = t.update(_state({"J1": 300.0, "J2": 300.0, "J3": 300.0, "Q": 140.0, "P": 60.0}, {"R": 0.0}),
                    None, None)["jobs"]
    assert t.cal.factors(now[0]).blend["normal"] == 0.0
    assert r["p50_s"] == pytest.approx(200.0) and "queue's rate" in r["basis"]


def test_forecast_peaks_per_tenant_sum_typed_series_and_keep_an_unforecast_one_unknown():
    """peaks_of (vectorised) against the per-tenant loop it replaced: each series' largest value over the horizon
    at each quantile, a typed series tenant@type added to its tenant, a series with no finite value NaN."""
    rng = np.random.default_rng(1)
    names = ("a", "b@a100", "b@t4", "c", "d@a100")
    vals = rng.uniform(0, 50, size=(5, 6, 3))
    vals[3] = np.nan                     # c: no forecast
    vals[4, :3] = np.nan                 # d: half the horizon missing
    fc = Forecast(names, (0.5, 0.9, 0.99), vals, pd.Timestamp("2026-01-05T00:00:00Z"), 60, "m")
    got = peaks_of(fc)
    want: dict[str, list[float]] = {}
    for i, s in enumerate(names):
        t = s.split("@", 1)[0]
        pk = [float(np.nanmax(fc.quantile(q)[i])) if np.isfinite(fc.quantile(q)[i]).any() else float("nan")
              for q in (0.5, 0.9)]
        want[t] = pk if t not in want else [x + y for x, y in zip(want[t], pk)]
    assert set(got) == set(want) == {"a", "b", "c", "d"}
    for t in want:
        assert got[t] == pytest.approx(tuple(want[t]), nan_ok=True)
    assert all(np.isnan(x) for x in got["c"])


def test_a_window_whose_reclaim_before_is_shorter_than_a_drain_is_handed_on_from_when_the_plan_holds_it():
    """reclaim_before 0: the plan holds the window from a preemption's drain and a cycle ahead
    (Config.window_min_lead_s, 150 s by default), so the estimate counts its hold from then, not from the start."""
    from daemon.config import Config

    w = {"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00", "timezone": "UTC",
         "duration_minutes": 60, "reclaim_before_minutes": 0}
    plan = Plan(at="2026-01-05T13:00:00+00:00", capacity=32, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory(), windows=(w,))
    lead = Config().window_min_lead_s()
    assert lead == 150.0
    assert windows_ahead(plan, pd.Timestamp("2026-01-05T13:00:00Z"), lead) == [(3600.0 - lead, "batch", 16.0)]
    assert windows_ahead(plan, pd.Timestamp("2026-01-05T13:58:00Z"), lead) == []   # held since 13:57:30


def test_gpus_draining_now_come_back_after_the_configs_drain_not_a_fixed_two_minutes(tmp_path):
    """The tracker handed the estimate no drain, so GPUs draining now came back at its default 120 s whatever
    policy.preempt_drain_s says (a site whose jobs checkpoint for 10 minutes was told its jobs start 8 minutes early);
    the daemon now hands Config.preempt_drain_s, and a reload moves it."""
    st = _state({}, {"P": 0.0})
    st = ClusterState(at=st.at, tenants=st.tenants, tiers=st.tiers, capacity=1, used=np.zeros(2),
                      pending=st.pending, jobs=st.jobs, draining=1.0)
    cfg = Config.model_validate({"policy": {"preempt_drain_s": 600}})
    t = EtaTracker(CollectorRegistry(), lambda: 0.0, drain_s=cfg.preempt_drain_s())
    (row,) = t.update(st, None, None)["jobs"]
    assert row["p50_s"] == 600.0 and row["basis"] == "GPUs draining now"
    # the daemon's own tracker, and after a reload
    run = Config(source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=4, warmup_steps=60)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                 policy={"preempt_drain_s": 600})
    rt = build_runtime(run, with_store=False)
    try:
        assert rt.runner.eta.drain_s == 600.0
        rt.runner.use_config(run.model_copy(update={"policy": run.policy.model_copy(update={"preempt_drain_s": 900})}))
        assert rt.runner.eta.drain_s == 900.0
    finally:
        rt.close()


def test_on_the_simulators_clock_a_job_that_fits_now_waits_one_simulated_minute_not_the_demos_wall_interval(tmp_path):
    """make run's demo runs a cycle every 2 s of wall time, each a minute of the simulation's, and its estimates are
    on the simulation's clock: the calibration's floor (the shortest wait: a job that fits now starts at the next
    cycle) is that minute. It was cycle.interval_s, 2 s: a job told "fits now" (model p90 0 s, floored at 2 s) that
    started a cycle later read as 30x late, and its p90 was 2 s times the scale."""
    cfg = Config(cluster={"gpus": 64}, cycle={"interval_s": 2.0},
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=1500)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    assert rt.runner.eta.state_time
    assert rt.runner.eta.cal.floor_s == cfg.cycle.resolution_s == 60
    rt.close()


def test_a_job_waiting_ten_minutes_is_scaled_by_the_estimates_made_ten_minutes_into_a_wait():
    """P and R wait from 1060; at 1660 (10 min in) each is estimated again and that estimate is kept; P starts at
    1800 and teaches the 10-minute scale (min_all=1 here) beside the first estimates' one. R, still waiting at
    1860 (13 min in), is scaled by the 10-minute estimates', not by the first ones'."""
    now = [1000.0]
    t = EtaTracker(CollectorRegistry(), lambda: now[0], min_samples=1)
    t.cal = Calibration(min_all=1, min_tier=1, floor_s=30.0)
    t.update(_state({"J0": 540.0, "J1": 100.0, "J2": 100.0, "J3": 100.0, "J4": 100.0}, {}), None, None)
    now[0] = 1060.0
    t.update(_state({"J1": 160.0, "J2": 160.0, "J3": 160.0, "J4": 160.0}, {"P": 0.0, "R": 0.0}), None, None)
    now[0] = 1660.0
    t.update(_state({"K1": 100.0, "K2": 100.0, "K3": 100.0, "K4": 100.0}, {"P": 600.0, "R": 600.0}), None, None)
    assert set(t._aged) == {"P", "R"} and set(t._aged["P"]) == {600}
    now[0] = 1860.0
    (r,) = t.update(_state({"K1": 300.0, "K2": 300.0, "K3": 300.0, "P": 60.0}, {"R": 800.0}), None, None)["jobs"]
    f = t.cal.factors(1860.0)
    assert "" in f.by_age[600] and f.by_age[600][""][0] != f.by_tier[""][0]
    assert "estimates 10 min into their wait" in r["basis"] and "P" not in t._aged
