import numpy as np
import pandas as pd
import pytest
from prometheus_client import generate_latest

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.forecasting.quality import ForecastQuality
from daemon.service.wiring import build_runtime
from forecaster.baselines import SeasonalNaive
from forecaster.selection import StartupSelection
from forecaster.types import Forecast
from tests.conftest import assert_promtool_rules

QS = (0.5, 0.9, 0.99)


def _hist(vals, start="2026-01-01"):
    idx = pd.date_range(start, periods=len(vals), freq="min", tz="UTC", name="time")
    return pd.DataFrame({"a": vals, "b": vals}, index=idx)


def test_a_forecast_is_scored_once_its_horizon_has_elapsed():
    h = _hist(np.full(10, 10.0))
    q = ForecastQuality(QS, 4, min_scored=1, stride=1)
    vals = np.zeros((2, 4, 3))
    vals[0] = [9.0, 11.0, 12.0]            # tenant a: p90 above every actual
    vals[1] = [5.0, 6.0, 7.0]              # tenant b: p90 under every actual
    fc = Forecast(("a", "b"), QS, vals, h.index[5], 60, "m")
    q.observe(fc, h.iloc[:6])
    assert q.current().scored == 0          # nothing has happened yet
    q.observe(None, h.iloc[:9])
    assert q.current().scored == 0          # 3 of 4 steps known: not yet
    q.observe(None, h)
    cur = q.current()
    assert cur.scored == 1 and cur.coverage_p90 == 0.5
    assert cur.tenants["a"]["coverage_p90"] == 1.0 and cur.tenants["b"]["coverage_p90"] == 0.0
    # pinball per step for a: 0.5*1 + 0.1*1 + 0.01*2 = 0.62; for b: 0.5*5 + 0.9*4 + 0.99*3 = 9.07
    assert abs(cur.tenants["a"]["wql"] - 2 * 0.62 / 10 / 3) < 1e-9
    assert abs(cur.wql - 2 * (0.62 + 9.07) * 4 / 80 / 3) < 1e-9
    # missing actuals are not scored as zero
    h2 = h.copy()
    h2.iloc[7:, 1] = np.nan
    q2 = ForecastQuality(QS, 4, min_scored=1, stride=1)
    q2.observe(fc, h2.iloc[:6])
    q2.observe(None, h2)
    assert q2.current().tenants["b"]["coverage_p90"] == 0.0 and q2.scored[0].steps.tolist() == [4.0, 1.0]


def test_the_peak_over_each_lead_window_is_scored_live_with_gaps_never_zero():
    from prometheus_client import CollectorRegistry

    idx = pd.date_range("2026-01-01", periods=10, freq="min", tz="UTC", name="time")
    h = pd.DataFrame({"a": [10.0] * 6 + [10, 14, 12, 10], "b": [10.0] * 6 + [np.nan, np.nan, 12, 10]}, index=idx)
    reg = CollectorRegistry()
    q = ForecastQuality(QS, 4, min_scored=1, stride=1, peak_windows={"lead": 3, "preempt": 1}, registry=reg)
    vals = np.broadcast_to(np.array([9.0, 11.0, 12.0]), (2, 4, 3)).copy()
    # its own peak quantiles over the lead window (3 steps); none over 1 step: the step's quantiles serve
    fc = Forecast(("a", "b"), QS, vals, h.index[5], 60, "m",
                  peaks={3: np.array([[12.0, 15.0, 16.0], [1.0, 1.0, 1.0]])})
    q.observe(fc, h.iloc[:6], tiers={"a": "high"})
    q.observe(None, h)
    pk = q.current().peak
    lead, pre = pk["lead"], pk["preempt"]
    # a: realised lead peak 14: 0.5 * 2 + 0.1 * 1 + 0.01 * 2 = 1.12, covered by 15, moving (10 -> 14)
    # b: (NaN, NaN, 12) has 1 of 3 steps seen: not scored; it would lose badly against p90 1 if gaps were zeros
    assert lead["scored"] == 1 and lead["loss"] == pytest.approx(2 * 1.12 / 14 / 3)
    assert lead["coverage_p90"] == 1.0 and lead["coverage_p90_moving"] == 1.0 and lead["moving"] == 1
    # a over 1 step: 10 against (9, 11, 12): 0.5 + 0.1 + 0.02; does not move
    assert pre["scored"] == 1 and pre["loss"] == pytest.approx(2 * 0.62 / 10 / 3) and pre["moving"] == 0
    assert lead["by_tier"]["high"]["scored"] == 1 and lead["by_tier"]["normal"]["scored"] == 0
    assert q.current().tenants["a"]["peak_coverage_p90_lead"] == 1.0
    assert q.current().tenants["b"]["peak_loss_lead"] is None
    assert q.summary()["peak wQL (lead, 3 steps)"] == round(2 * 1.12 / 14 / 3, 4)
    text = generate_latest(reg).decode()
    assert 'gpuas_forecast_peak_p90_coverage{tier="high",window="lead"} 1.0' in text
    assert 'gpuas_forecast_peak_loss{tier="all",window="preempt"}' in text


class TooNarrow:
    """A forecaster whose p90 is far under what happens: live coverage near zero."""

    name = "too-narrow"

    def predict(self, history, horizon):
        fc = SeasonalNaive(60, QS).predict(history, horizon)
        return Forecast(fc.tenants, fc.quantiles, fc.values * 0.2, fc.issued_at, fc.step_s, self.name)


def test_degraded_live_quality_falls_back_to_the_best_baseline(tmp_path, caplog):
    cfg = Config(cluster={"gpus": 128}, cycle={"horizon_steps": 5, "history_steps": 600},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=6, warmup_steps=800)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none",
                             "quality": {"min_scored": 2, "fallback_after_cycles": 3}},
                 state={"path": tmp_path / "s.sqlite"})
    rt = build_runtime(cfg)
    runner = rt.runner
    runner.forecaster = TooNarrow()
    models = []
    for _ in range(16):
        res = runner.run_once()
        models.append(res.forecast.model)
    assert "too-narrow" in models and models[-1] != "too-narrow"
    assert isinstance(runner.forecaster, StartupSelection) and runner.quality.fallback
    assert "live forecast quality degraded: p90 coverage" in caplog.text
    text = generate_latest(rt.metrics.registry).decode()
    assert "gpuas_forecast_quality_fallback 1.0" in text and 'gpuas_forecast_tenant_p90_coverage{tenant=' in text
    rt.close()


def test_good_live_quality_keeps_the_model(tmp_path):
    cfg = Config(cluster={"gpus": 128}, cycle={"horizon_steps": 5, "history_steps": 600},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=6, warmup_steps=800)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none",
                             "quality": {"min_scored": 2, "fallback_after_cycles": 3, "coverage_min": 0.01,
                                         "coverage_max": 1.0}},
                 state={"path": tmp_path / "s.sqlite"})
    rt = build_runtime(cfg)
    for _ in range(14):
        rt.runner.run_once()
    cur = rt.runner.quality.current()
    assert cur.scored >= 2 and cur.coverage_p90 is not None and not cur.fallback
    assert cur.to_dict()["tenants"]
    assert rt.runner.quality.summary()["p90 coverage"] == round(cur.coverage_p90, 3)   # what the console shows
    rt.close()


def test_forecast_alert_rules_pass_promtool():
    assert_promtool_rules("gpu-autoscaler-forecast-rules.yml", "gpu-autoscaler-forecast-rules.test.yml")

def test_plan_and_metrics_carry_the_live_scores_per_tenant(tmp_path):
    """/plan (real HTTP) and /metrics show the live pinball loss and p90 coverage of each tenant."""
    import httpx

    from daemon.service.loop import Daemon
    from tests.conftest import free_port
    from tests.support.services import wait_for

    port, token = free_port(), "operator-token-0123456789"
    cfg = Config(cluster={"gpus": 128}, cycle={"horizon_steps": 5, "history_steps": 600, "interval_s": 0.2},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=6, warmup_steps=800)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none", "quality": {"min_scored": 2}},
                 state={"path": tmp_path / "s.sqlite"}, server={"port": port},
                 access={"tokens": [{"name": "ops", "role": "operator", "token": token}]})
    d = Daemon(build_runtime(cfg))
    d.start()
    base = f"http://127.0.0.1:{port}"
    try:
        # the published Snapshot's scores (made under the cycle's lock), not the live scorer's: the cycle thread
        # appends to its deque of scored forecasts while a read from here walks it
        wait_for(lambda: d.backend.snapshot().quality["scored"] >= 2, what="two scored forecasts", timeout=120)
        fq = httpx.get(f"{base}/plan", headers={"Authorization": f"Bearer {token}"}).json()["forecast_quality"]
        assert fq["scored"] >= 2 and 0.0 <= fq["coverage_p90"] <= 1.0 and fq["wql"] >= 0.0
        assert len(fq["tenants"]) == 6
        for t, v in fq["tenants"].items():
            assert v["wql"] is None or v["wql"] >= 0.0
            assert v["coverage_p90"] is None or 0.0 <= v["coverage_p90"] <= 1.0
        text = httpx.get(f"{base}/metrics").text
        some = next(iter(fq["tenants"]))
        assert f'gpuas_forecast_tenant_wql{{tenant="{some}"}}' in text
        assert f'gpuas_forecast_tenant_p90_coverage{{tenant="{some}"}}' in text
        assert "gpuas_forecast_quality_fallback 0.0" in text
    finally:
        d.stop()


def test_the_fallback_waits_for_n_cycles_in_a_row_out_of_bounds():
    """Three cycles out of bounds in a row (fallback_after_cycles=3), not the first bad one; the reason once."""
    hist = _hist(np.full(40, 10.0))
    q = ForecastQuality(QS, 2, min_scored=1, stride=1, fallback_after_cycles=3)

    def fc(k):  # issued at minute k, 2 steps ahead, its p90 (1) under the actual (10): it never covers
        vals = np.broadcast_to(np.array([0.5, 1.0, 2.0]), (2, 2, 3)).copy()
        return Forecast(("a", "b"), QS, vals, hist.index[k], 60, "m")

    due = []
    for k in range(8):
        q.observe(fc(k), hist.iloc[: k + 1])
        due.append((q.out_of_bounds_cycles, q.fallback_due() is not None))
    # a forecast matures 2 cycles after it is issued: nothing is scored before k=2
    assert due == [(0, False), (0, False), (1, False), (2, False), (3, True), (4, False), (5, False), (6, False)]
