"""/metrics label sets stay bounded: alert names from the webhook, tenants that have left."""

import random
import string

import httpx
import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemon.config import Config
from daemon.policy.types import Plan, PolicyMemory, Preemption, RateLimit
from daemon.service.loop import Daemon
from daemon.service.telemetry import DaemonMetrics
from daemon.service.wiring import build_runtime
from forecaster.types import Forecast
from tests.conftest import free_port
from tests.support.daemons import just_now
from tests.support.services import wait_for

WEBHOOK = "webhook-token-0123456789"


def series(text: str, name: str) -> set[tuple]:
    """The label sets of metric `name` (a counter's `_total` samples) in a /metrics body."""
    out = set()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out.add(tuple(sorted(s.labels.items())))
    return out


@pytest.mark.security
def test_a_webhook_post_of_random_alert_names_adds_at_most_one_series(tmp_path):
    """Every alert name a webhook post carried used to become a `gpuas_alerts_total{alertname=...}` series for
    the life of the process: one post of 1000 made-up names, 1000 series."""
    port = free_port()
    c = Config(cluster={"gpus": 256}, cycle={"interval_s": 3600.0},
               source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 1500}},
               state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
               server={"port": port, "webhook_token": WEBHOOK, "max_body_bytes": 1 << 20})
    d = Daemon(build_runtime(c))
    d.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: d.cycles_done >= 1, what="a cycle", timeout=60)
        rng = random.Random(7)
        names = {"".join(rng.choices(string.ascii_letters, k=24)) for _ in range(1000)}
        alerts = [{"status": "firing", "labels": {"alertname": n}, "startsAt": just_now()} for n in names]
        before = series(httpx.get(f"{base}/metrics").text, "gpuas_alerts_total")
        r = httpx.post(f"{base}/alerts", json={"version": "4", "groupKey": "g", "status": "firing", "receiver": "r",
                                               "alerts": alerts}, headers={"Authorization": f"Bearer {WEBHOOK}"})
        assert r.status_code == 200 and r.json()["accepted"] == len(names) == 1000
        text = httpx.get(f"{base}/metrics").text
        added = series(text, "gpuas_alerts_total") - before
        assert added <= {(("alertname", "other"), ("outcome", "ignore"))}, sorted(added)[:5]
        assert 'gpuas_alerts_total{alertname="other",outcome="ignore"} 1000.0' in text
        # a configured name keeps its own series
        r = httpx.post(f"{base}/alerts", json={"version": "4", "groupKey": "g", "status": "firing", "receiver": "r",
                                               "alerts": [{"status": "firing",
                                                           "labels": {"alertname": "GPUClusterLoadHigh"},
                                                           "startsAt": just_now()}]},
                       headers={"Authorization": f"Bearer {WEBHOOK}"})
        assert r.status_code == 200
        assert 'gpuas_alerts_total{alertname="GPUClusterLoadHigh",outcome="cycle_now"} 1.0' in \
            httpx.get(f"{base}/metrics").text
    finally:
        d.stop()


def plan(tenants: list[str], preempt: str | None = None) -> Plan:
    return Plan(at="2026-01-06T13:30:00+00:00", capacity=64, load=0.5, high_pool=8,
                reservations={t: 4 for t in tenants}, quotas={},
                limits={t: RateLimit(50, 100, 0, "x") for t in tenants},
                preemptions=(Preemption("j1", preempt, 8, "n1", "peak ahead"),) if preempt else (), notifications=(),
                stale=False, forecast_model="m", notes=(), memory=PolicyMemory())


def forecast(tenants: list[str]) -> Forecast:
    return Forecast(tenants=tuple(tenants), issued_at=None, step_s=60, quantiles=(0.5, 0.9),
                    values=np.ones((len(tenants), 5, 2)), model="m")


def test_a_tenant_gone_longer_than_the_limit_leaves_metrics():
    """Per-tenant series were never removed: every tenant ever seen stayed in /metrics for good."""
    now = [0.0]
    m = DaemonMetrics(clock=lambda: now[0])
    m.observe_plan(plan(["stay", "leave"], preempt="leave"), forecast(["stay", "leave"]), 3, False, 3600)
    body = generate_latest(m.registry).decode()
    for name in ("gpuas_reservation_gpus", "gpuas_rate_limit_rps", "gpuas_forecast_peak_gpus",
                 "gpuas_preemptions_total"):
        assert {dict(ls)["tenant"] for ls in series(body, name)} >= {"leave"}, name
    now[0] = 1800.0                                              # gone, but not for long yet: still there
    m.observe_plan(plan(["stay"]), forecast(["stay"]), 3, False, 3600)
    assert 'tenant="leave"' in generate_latest(m.registry).decode()
    now[0] = 3601.0                                              # absent for over the limit: forgotten
    m.observe_plan(plan(["stay"]), forecast(["stay"]), 3, False, 3600)
    body = generate_latest(m.registry).decode()
    assert 'tenant="leave"' not in body and 'tenant="stay"' in body
    assert {dict(ls)["quantile"] for ls in series(body, "gpuas_forecast_peak_gpus")} == {"0.5", "0.9"}
    now[0] = 3700.0                                              # it comes back: new series
    m.observe_plan(plan(["stay", "leave"]), None, 3, False, 3600)
    assert 'gpuas_reservation_gpus{tenant="leave"} 4.0' in generate_latest(m.registry).decode()


def test_forget_after_is_a_described_cycle_setting():
    from daemon.config import ConfigError, CycleConfig, parse_config

    field = CycleConfig.model_fields["forget_tenant_after_s"]
    assert field.default == 86400.0 and "forgotten" in field.description
    with pytest.raises(ConfigError, match="cycle.forget_tenant_after_s: Input should be greater than 0"):
        parse_config({"cycle": {"forget_tenant_after_s": 0}})


def test_the_peak_gauge_shows_the_peak_the_hold_acts_on():
    """The gauge took the largest per-step quantile even where the forecast carries its own peak quantiles for
    the lead window, so /metrics showed another number than the one the policy held for."""
    f = forecast(["a"])
    f = f.with_values(f.values, peaks={3: np.array([[2.0, 7.0]])})  # own peak quantiles over 3 steps
    m = DaemonMetrics()
    m.observe_plan(plan(["a"]), f, 3, False, 3600)
    body = generate_latest(m.registry).decode()
    assert 'gpuas_forecast_peak_gpus{quantile="0.9",tenant="a"} 7.0' in body
    assert 'gpuas_forecast_peak_gpus{quantile="0.5",tenant="a"} 2.0' in body


def test_idle_minutes_and_forecast_quality_of_a_gone_tenant_leave_with_its_other_series(tmp_path):
    """gpuas_idle_gpu_minutes{tenant} and gpuas_forecast_tenant_{wql,p90_coverage}{tenant} were never dropped:
    they now follow cycle.forget_tenant_after_s like the daemon's other per-tenant series."""
    from daemon.service.health import HealthRunner
    from daemon.sources.base import SourceError

    class NoTelemetry:
        def read(self):
            raise SourceError("no per-job telemetry in this test")

    cfg = Config(cluster={"gpus": 256}, cycle={"forget_tenant_after_s": 3600},
                 source={"simulator": {"seed": 3, "tenants": 4, "warmup_steps": 1500}},
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    try:
        now = [0.0]
        rt.metrics.clock = lambda: now[0]
        runner = rt.runner
        runner.health = HealthRunner(cfg, NoTelemetry(), rt.metrics.registry)
        runner.run_once()
        here = runner.last_state.tenants[0]
        for t in ("gone", here):   # as the quality scores and the health step set them
            runner.quality.g_t_wql.labels(t).set(0.5)
            runner.quality.g_t_cov.labels(t).set(0.9)
            runner.health.metrics.idle_minutes.labels(t, "low").inc(5)
        rt.metrics.forget_tenants(["gone"], 3600)      # a plan had it at t=0
        names = ("gpuas_idle_gpu_minutes_total", "gpuas_forecast_tenant_wql", "gpuas_forecast_tenant_p90_coverage")

        def tenants_of(name: str) -> set[str]:
            return {dict(ls)["tenant"] for ls in series(generate_latest(rt.metrics.registry).decode(), name)}

        now[0] = 1800.0
        runner.run_once()
        assert all("gone" in tenants_of(n) for n in names)          # gone, but not for long yet
        now[0] = 3700.0
        runner.run_once()
        for n in names:
            assert "gone" not in tenants_of(n) and here in tenants_of(n), n
    finally:
        rt.close()
