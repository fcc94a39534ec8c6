"""A high-tier inference service's holds are scored at policy.skill_gate.service_quantile (issue 40, item 2).

A service's shortfall is requests refused, against the high tier's SLO of 0.1% of them; a batch tenant's is a job
that waits. Scored at the acting quantile (p90: a GPU short weighs 9 idle), a wide forecast that holds ahead of
every rise loses to reacting one cold start late; at p99 it wins. The constructed case: demand 10, then 30 for 5
steps in every 40, forecast flat at 30 (every rise covered, most windows over-held).
"""

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, ConfigError, SkillGateConfig, parse_config
from daemon.forecasting.quality import ForecastQuality
from daemon.forecasting.skill import decide, score_quantiles
from daemon.sim.skill_gate import ReplayGate
from forecaster.types import Forecast

QS = (0.5, 0.9, 0.99)
H = 6
N = 300


def _demand() -> np.ndarray:
    t = np.arange(N)
    return np.where(t % 40 >= 35, 30.0, 10.0)


def _forecasts(names: tuple[str, ...], idx: pd.DatetimeIndex):
    for k in range(len(idx)):
        v = np.full((len(names), H), 30.0)
        yield k, Forecast(names, QS, np.stack([v, v * 1.01, v * 1.02], axis=2), idx[k], 60, "m")


def _scored(score_quantile: dict[str, float]) -> ForecastQuality:
    d = _demand()
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    hist = pd.DataFrame({"svc": d, "batch": d, "svc@h100": d}, index=idx)
    q = ForecastQuality(QS, H, stride=1, peak_windows={"lead": 4, "preempt": 2}, act_quantile=0.9, headroom=0.05)
    q.score_quantile = score_quantile
    for k, fc in _forecasts(tuple(hist.columns), idx):
        q.observe(fc, hist.iloc[: k + 1])
    return q


def test_a_high_tier_service_scored_at_p99_acts_on_a_forecast_that_covers_its_rises_a_batch_tenant_does_not():
    sk = _scored({"svc": 0.99}).skill()
    assert sk["svc"][2] == sk["batch"][2] >= 100                      # the same windows scored
    assert sk["batch"][0] > 1.2 * sk["batch"][1]                      # at p90 holding 30 loses to reacting
    assert sk["svc"][0] < 0.2 * sk["svc"][1]                          # at p99 it wins by far
    assert sk["svc@h100"][0] / sk["svc@h100"][1] == sk["svc"][0] / sk["svc"][1]   # a typed series: its tenant's
    gate = SkillGateConfig(enabled=True)
    v = decide({k: sk[k] for k in ("svc", "batch")}, ("svc", "batch"), {}, gate, {"svc": 0.99})
    assert v["svc"].acting and not v["batch"].acting
    assert "of the reactive holds' at p99 (<=" in v["svc"].why, v["svc"].why
    assert "at p99" not in v["batch"].why
    # the same evidence scored at the acting quantile: the service is planned reactively, as before
    plain = _scored({}).skill()
    assert plain["svc"] == plain["batch"]
    assert not decide(plain, ("svc",), {}, gate)["svc"].acting


def test_only_the_services_of_the_configured_tiers_are_scored_at_their_quantile():
    gate = SkillGateConfig()
    assert gate.service_quantile == {"high": 0.99}
    assert score_quantiles([("a", "high"), ("b", "normal"), ("c", "low")], gate) == {"a": 0.99}
    assert score_quantiles([("a", "high")], SkillGateConfig(service_quantile={})) == {}
    assert score_quantiles([("b", "normal")], SkillGateConfig(service_quantile={"normal": 0.95})) == {"b": 0.95}


@pytest.mark.parametrize("key, q", [("service_quantile", 1.0), ("batch_quantile", 0)])
def test_a_quantile_outside_0_1_is_refused_in_one_line(key, q):
    try:
        parse_config({"policy": {"skill_gate": {key: {"high": q}}}})
    except ConfigError as exc:
        msg = str(exc)
    else:
        raise AssertionError("accepted")
    assert key in msg and "between 0 and 1" in msg and "\n" not in msg.strip(), msg


def test_the_replay_gate_scores_the_workloads_high_tier_services_at_their_quantile():
    d = _demand()
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    demand = pd.DataFrame({"svc": d, "batch": d, "low-svc": d}, index=idx)
    cfg = Config(policy={"lead_time_steps": 4, "preempt_lead_steps": 2, "skill_gate": {"enabled": True}})
    gate = ReplayGate(cfg, demand, services=[("svc", "high"), ("low-svc", "low")])
    for k, fc in _forecasts(tuple(demand.columns), idx):
        acting = gate.at(k, fc, tuple(demand.columns))
    assert acting == {"svc"}, gate.verdicts
    assert "at p99" in gate.verdicts["svc"].why and "at p99" not in gate.verdicts["low-svc"].why


def test_the_daemon_scores_its_configured_high_tier_services_at_their_quantile(tmp_path):
    from daemon.config import SimulatorConfig, SourceConfig
    from daemon.service.wiring import build_runtime

    inf = {"gpus_per_replica": 1, "replica_rps": 5, "cold_start_s": 180}
    cfg = Config(cluster={"gpus": 64}, cycle={"horizon_steps": 5},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=3, warmup_steps=30)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none"},
                 tenants=[{"name": "tenant-0000", "tier": "high", "inference": inf},
                          {"name": "tenant-0001", "tier": "normal", "inference": inf},
                          {"name": "tenant-0002", "tier": "high"}],
                 policy={"skill_gate": {"enabled": True}}, state={"path": tmp_path / "s.sqlite"})
    rt = build_runtime(cfg)
    try:
        rt.runner.run_once()
        # tenant-0002, a high-tier batch tenant, at policy.skill_gate.batch_quantile's
        assert rt.runner.quality.score_quantile == {"tenant-0000": 0.99, "tenant-0002": 0.5}
        # a reload that lists no tier: every tenant scored at policy.quantile from the next cycle on
        with rt.runner.lock:
            rt.runner.use_config(cfg.model_copy(update={"policy": cfg.policy.model_copy(update={
                "skill_gate": cfg.policy.skill_gate.model_copy(update={"service_quantile": {},
                                                                       "batch_quantile": {}})})}))
        rt.runner.run_once()
        assert rt.runner.quality.score_quantile == {}
    finally:
        rt.close()
