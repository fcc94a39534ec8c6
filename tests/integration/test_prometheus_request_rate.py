"""source.prometheus.request_rate_query (issue 27) against a real Prometheus backfilled by promtool: each tenant's
request rate is read into ClusterState.request_rate, and the shadow report's throttled share is counted from it.

An ingress gauge `ingress_rps` (requests per second, per namespace and ingress pod) and an nginx-style counter
`nginx_ingress_controller_requests` that grows by exactly rps x 60 a minute; team-b has two ingress pods (summed),
team-c's requests stop for a while (absent: unknown, not 0), team-d has none ever.
"""

import time

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, PrometheusConfig, SourceConfig
from daemon.policy.types import Plan, PolicyMemory, RateLimit
from daemon.shadow.record import make_record
from daemon.shadow.report import shadow_report
from daemon.sources.prometheus import PrometheusSource
from tests.support.services import backfilled_prometheus

EXPORTER = 'job="dcgm-exporter",'   # the exporter's scrape job, as the default exporter_selector selects
INGRESS = 'job="ingress-nginx",'    # the ingress controller's, as the default ingress_selector selects

pytestmark = pytest.mark.services

MINUTES = 60
T0 = (int(time.time()) // 3600 - 3) * 3600        # 3 hours ago, on the hour
TENANTS = ("team-a", "team-b", "team-c", "team-d")
QUIET = range(20, 30)                              # team-c sends no request here (no series at all)
GAUGE = "sum by (namespace) (ingress_rps{$ingress})"
COUNTER = "sum by (namespace) (rate(nginx_ingress_controller_requests_total{$ingress}[5m]))"
LIMIT = {"team-a": 20.0, "team-b": 20.0, "team-c": 4.0, "team-d": 1.0}   # the plan's limits, req/s


def rps(tenant: str, m: int, pod: int = 0) -> float | None:
    """Requests per second of one ingress pod for the tenant at minute m; None: no series."""
    if tenant == "team-a":
        return 12.5 + (m % 5) * 3.25          # 12.5 .. 25.5: above 20 at m % 5 in (3, 4)
    if tenant == "team-b":
        return (10.0 + m % 4) if pod == 0 else 7.75 * (m % 3)    # two pods, summed
    if tenant == "team-c":
        return None if m in QUIET else 1.5 * (m % 4)
    return None


def total(tenant: str, m: int) -> float:
    parts = [rps(tenant, m, p) for p in (0, 1) if (tenant == "team-b" or p == 0)]
    return float("nan") if any(x is None for x in parts) else float(sum(parts))


def openmetrics() -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for m in range(MINUTES):
        for g, t in enumerate(TENANTS):
            lines.append(f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="node1",gpu="{g}",namespace="{t}"}} '
                         f'50 {T0 + 60 * m}')
    lines.append("# TYPE ingress_rps gauge")
    for m in range(MINUTES):
        for t in TENANTS:
            for p in (0, 1):
                v = rps(t, m, p) if (t == "team-b" or p == 0) else None
                if v is not None:
                    lines.append(f'ingress_rps{{{INGRESS}namespace="{t}",pod="ing-{p}"}} {v} {T0 + 60 * m}')
        lines.append(f'ingress_rps{{{INGRESS}pod="ing-0"}} 999 {T0 + 60 * m}')   # no tenant label: not anyone's rate
    lines.append("# TYPE nginx_ingress_controller_requests counter")
    count = 1000.0
    for m in range(MINUTES):   # team-a only, at a steady 12 req/s: the counter grows 720 a minute
        lines.append(f'nginx_ingress_controller_requests_total{{{INGRESS}namespace="team-a"}} {count} {T0 + 60 * m}')
        count += 12 * 60
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled_prometheus(tmp_path_factory.mktemp("prom"), openmetrics()) as (url, _):
        yield url


def cfg_for(url: str, query: str | None) -> Config:
    pc = PrometheusConfig(url=url, timeout_s=2, retries=0, request_rate_query=query)
    return Config(source=SourceConfig(kind="prometheus", prometheus=pc),
                  cycle={"history_steps": 60, "stale_after_s": 120},
                  tenants=[{"name": t} for t in TENANTS])


def collect(url: str, query: str | None, minute: int):
    return PrometheusSource(cfg_for(url, query), clock=lambda: T0 + 60 * minute + 1.0).collect(5).state


def test_request_rates_are_read_exactly_per_tenant(prom):
    for m in (10, 23, MINUTES - 1):   # 23: team-c is quiet
        st = collect(prom, GAUGE, m)
        assert st.tenants == TENANTS
        np.testing.assert_array_equal(st.request_rate, [total(t, m) for t in TENANTS])
    st = collect(prom, GAUGE, 23)
    assert np.isnan(st.request_rate[2]) and np.isnan(st.request_rate[3])   # absent: unknown, not 0
    assert st.request_rate[1] == rps("team-b", 23, 0) + rps("team-b", 23, 1)
    assert st.missing == () and list(st.used) == [1, 1, 1, 1]             # GPU demand read as before


def test_the_documented_counter_rate_form(prom):
    st = collect(prom, COUNTER, 40)   # OpenMetrics names a counter's samples ..._total
    assert st.request_rate[0] == pytest.approx(12.0, rel=1e-9)
    assert np.isnan(st.request_rate[1:]).all()


def test_no_query_configured_is_unknown(prom):
    assert collect(prom, None, 10).request_rate is None


@pytest.mark.parametrize("query", ["-" + GAUGE, "sum by (namespace) (ingress_rps{$ingress} * on () "
                                   "ingress_rps{$ingress})", "ingress_rps{$ingress} / 0 - 1"])
def test_a_bad_answer_leaves_the_rates_unknown_and_the_cycle_goes_on(prom, query, caplog):
    # negative, an error answer, NaN/-Inf: never 0, never a failed cycle. A query that does not parse is refused at
    # load (tests/config/test_exporter_selector.py); one matching many series to many fails when evaluated (422)
    st = collect(prom, query, 10)
    assert st.request_rate is None
    assert st.capacity == 4 and list(st.used) == [1, 1, 1, 1]
    assert "request rates unknown this cycle" in caplog.text


def plan_for(at: str) -> Plan:
    limits = {t: RateLimit(rate=r, burst=r, level=0, reason="r") for t, r in LIMIT.items()}
    return Plan(at=at, capacity=4, load=1.0, high_pool=0, reservations={}, quotas={}, limits=limits, preemptions=(),
                notifications=(), stale=False, forecast_model="m", notes=(), memory=PolicyMemory())


def test_shadow_report_throttled_share_from_the_read_rates(prom):
    """Records made from states read off Prometheus: the throttled share is the hand count of minutes whose rate
    was above the limit, over the minutes the rate was known."""
    cycles = range(5, MINUTES)
    records = []
    for k, m in enumerate(cycles):
        src = PrometheusSource(cfg_for(prom, GAUGE), clock=lambda m=m: T0 + 60 * m + 1.0)
        got = src.collect(5)
        records.append(make_record(plan_for(got.state.at.isoformat()), got.state, None, got.history, src.cfg, k + 1))
    rep = shadow_report(records)["tenants"]
    for t in TENANTS:
        rates = [total(t, m) for m in cycles]
        known = [r for r in rates if r == r]
        over = sum(r > LIMIT[t] for r in known)
        assert rep[t]["rate_known_cycles"] == len(known) and rep[t]["throttled_cycles"] == over
        assert rep[t]["throttled_share"] == (over / len(known) if known else None)
    # the figures are not trivial: a known share strictly between 0 and 1 for a and b, c counted without its quiet
    # minutes, d unknown throughout
    assert 0 < rep["team-a"]["throttled_share"] < 1 and 0 < rep["team-b"]["throttled_share"] < 1
    assert rep["team-c"]["rate_known_cycles"] == len(cycles) - len(QUIET)
    assert rep["team-d"]["throttled_share"] is None
    assert pd.Timestamp(records[-1]["at"]) == pd.Timestamp(T0 + 60 * (MINUTES - 1), unit="s", tz="UTC")
