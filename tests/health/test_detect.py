"""The detectors on hand-made series: idle, hung, leak and XIDs, with the safety rules (missing is never idle)."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.config import HealthConfig
from daemon.health.detect import detect, trailing_run
from daemon.health.types import GpuTrace, Telemetry
from tests.conftest import assert_promtool_rules

STEP = 60.0
N = 90          # 90 one-minute steps
END = 1_800_000_000.0
FB = 80_000.0   # MiB per GPU


def gpu(job: str, activity, fb_used=None, xid=None, gpu_id: str = "0", host: str = "n1",
        scheduler: str = "slurm") -> GpuTrace:
    a = np.asarray(activity, dtype=float)
    u = np.full(N, 1000.0) if fb_used is None else np.asarray(fb_used, dtype=float)
    x = np.zeros(N) if xid is None else np.asarray(xid, dtype=float)
    return GpuTrace(job, scheduler, None, host, gpu_id, a, u, FB - u, x)


def tel(*gpus: GpuTrace, rejected: dict | None = None) -> Telemetry:
    return Telemetry(END, STEP, N, tuple(gpus), rejected or {})


CFG = HealthConfig()


def run(*gpus, runtime=None, **kw):
    return detect(tel(*gpus, **kw), CFG, stale_after_s=180.0, runtime_s=runtime)


def test_trailing_run_skips_short_gaps_without_counting_them_and_stops_at_long_ones():
    cond = np.array([1, 1, 1, 1, 1, 1], dtype=bool)
    present = np.array([1, 1, 0, 1, 0, 1], dtype=bool)
    r = trailing_run(cond, present, 60.0, max_gap_steps=1)
    assert r.minutes == 4.0 and r.start == 0 and r.end == 5       # 4 present samples; gaps add nothing
    present = np.array([1, 1, 0, 0, 1, 1], dtype=bool)
    assert trailing_run(cond, present, 60.0, max_gap_steps=1).minutes == 2.0   # a 2-step gap ends the run
    assert trailing_run(np.array([1, 0], dtype=bool), np.ones(2, bool), 60.0, 1) is None


def test_idle_job_past_the_warning_threshold_is_found_with_its_evidence():
    act = np.r_[np.full(50, 0.9), np.full(40, 0.02)]            # busy, then 40 min at 2%
    statuses, found = run(gpu("101", act), gpu("101", act, gpu_id="1"))
    assert [(f.kind, f.job) for f in found] == [("idle", "101")]
    f = found[0]
    assert f.minutes == 40.0 and f.gpus == ("n1:0", "n1:1")
    assert f.numbers["max_activity"] == pytest.approx(0.02) and f.numbers["gpus"] == 2.0
    assert f.since == END - 39 * STEP and f.until == END
    assert statuses[0].state == "ok" and statuses[0].idle_gpus == 2


def test_idle_shorter_than_the_threshold_and_a_busy_job_give_nothing():
    assert run(gpu("1", np.r_[np.full(70, 0.9), np.full(20, 0.0)]))[1] == []
    assert run(gpu("2", np.full(N, 0.8)))[1] == []


def test_one_busy_gpu_makes_the_job_not_idle_but_its_idle_gpu_is_counted():
    statuses, found = run(gpu("7", np.full(N, 0.0)), gpu("7", np.full(N, 0.9), gpu_id="1"))
    assert found == [] and statuses[0].idle_gpus == 1


def test_missing_samples_never_count_as_idle_time():
    act = np.full(N, 0.0)
    act[::2] = np.nan          # half the samples missing: 45 present idle minutes, not 90
    _, found = run(gpu("5", act))
    assert found[0].minutes == 45.0
    act = np.full(N, np.nan)
    act[-20:] = 0.0            # 20 min of samples after a long silence: under the 30-min threshold
    assert run(gpu("6", act))[1] == []


def test_a_job_whose_exporter_stopped_is_no_data_never_idle():
    act = np.r_[np.full(80, 0.0), np.full(10, np.nan)]   # idle for 80 min, then silent for 10
    statuses, found = run(gpu("9", act))
    assert found == [] and statuses[0].state == "no_data" and "old" in statuses[0].why


def test_a_job_with_one_gpu_unseen_is_not_idle_at_those_steps():
    quiet = np.full(N, 0.0)
    half = np.full(N, np.nan)
    half[:40] = 0.0            # GPU 1 reports only the first 40 minutes
    statuses, found = run(gpu("3", quiet), gpu("3", half, gpu_id="1"))
    assert found == [] and statuses[0].state == "no_data"


def test_the_idle_run_is_clipped_to_the_jobs_time_since_its_last_restart():
    # a requeued Slurm job keeps its id: minutes before its restart must not count
    _, found = run(gpu("11", np.full(N, 0.0)), runtime={"11": 20 * 60.0})
    assert found == []
    _, found = run(gpu("11", np.full(N, 0.0)), runtime={"11": 45 * 60.0})
    assert found[0].minutes == 45.0


def test_hung_is_quiet_with_the_framebuffer_held_and_takes_the_place_of_idle():
    act = np.r_[np.full(40, 0.9), np.full(50, 0.0)]
    _, found = run(gpu("21", act, fb_used=np.full(N, 0.9 * FB)))
    assert [f.kind for f in found] == ["hung"]
    assert found[0].minutes == 50.0 and found[0].numbers["min_fb_share"] == pytest.approx(0.9)
    _, found = run(gpu("22", act, fb_used=np.full(N, 0.1 * FB)))   # same activity, memory released: idle
    assert [f.kind for f in found] == ["idle"]


def test_a_steady_rise_toward_full_is_a_leak_and_noise_or_a_plateau_is_not():
    rise = np.linspace(0.3, 0.8, N) * FB                 # +0.5 of the framebuffer in 90 min: full in ~36 min more
    _, found = run(gpu("31", np.full(N, 0.9), fb_used=rise))
    assert [f.kind for f in found] == ["memory_leak"]
    n = found[0].numbers
    assert n["slope_share_per_min"] > 0 and n["fb_share_now"] == pytest.approx(0.8)
    assert n["minutes_to_full"] == pytest.approx(0.2 / (0.5 / 89), rel=0.05)
    rng = np.random.default_rng(0)
    noisy = (0.5 + rng.normal(0, 0.05, N)).clip(0, 1) * FB
    assert run(gpu("32", np.full(N, 0.9), fb_used=noisy))[1] == []
    assert run(gpu("33", np.full(N, 0.9), fb_used=np.full(N, 0.95 * FB)))[1] == []   # high but flat


def test_xid_is_an_event_when_it_appears_critical_and_application_are_kept_apart():
    x = np.zeros(N)
    x[60:] = 79                # fell off the bus at minute 60; the gauge keeps 79
    y = np.zeros(N)
    y[70:] = 13                # an application's own fault
    _, found = run(gpu("41", np.full(N, 0.9), xid=x), gpu("41", np.full(N, 0.9), xid=y, gpu_id="1"))
    kinds = {f.kind: f for f in found}
    assert set(kinds) == {"gpu_error", "app_xid"}
    assert kinds["gpu_error"].numbers["xid"] == 79 and kinds["gpu_error"].gpus == ("n1:0",)
    assert kinds["gpu_error"].since == END - (N - 1 - 60) * STEP
    assert kinds["app_xid"].numbers["xid"] == 13 and kinds["app_xid"].gpus == ("n1:1",)
    # a value already held at the window's start is the gauge remembering an old event
    assert run(gpu("42", np.full(N, 0.9), xid=np.full(N, 79.0)))[1] == []


def test_a_rejected_job_gets_no_finding_whatever_its_series_say():
    statuses, found = run(gpu("51", np.full(N, 0.0)), rejected={"51": "GPU n1:0 claimed by jobs 51 and 52"})
    assert found == [] and statuses[0].state == "rejected" and "claimed" in statuses[0].why


def test_config_refuses_an_action_threshold_before_the_warning_and_overlapping_xid_sets():
    with pytest.raises(ValueError, match="idle_action_minutes"):
        HealthConfig(idle_warn_minutes=60, idle_action_minutes=30)
    with pytest.raises(ValueError, match="both"):
        HealthConfig(xid_critical=[13, 79])


def test_health_alert_rules_pass_promtool():
    assert_promtool_rules("gpu-autoscaler-health-rules.yml", "gpu-autoscaler-health-rules.test.yml")
