"""A real Prometheus 2.x on 127.0.0.1, backfilled with known DCGM-style history by promtool."""

import subprocess
import time

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, PrometheusConfig, SourceConfig
from daemon.forecasting.choose import baseline
from daemon.policy import staleness_reason
from daemon.service.cycle import CycleRunner
from daemon.sources.base import SourceError
from daemon.sources.history import History
from daemon.sources.prometheus import PrometheusSource
from tests.conftest import free_port, need_binary
from tests.support.services import backfilled_prometheus, prometheus_server

EXPORTER = 'job="dcgm-exporter",'   # the exporter's scrape job, as the default exporter_selector selects

pytestmark = pytest.mark.services

MINUTES = 180
T0 = (int(time.time()) // 3600 - 8) * 3600        # 8 hours ago, on the hour
GPUS = {"team-a": ("node1", 8), "team-b": ("node2", 8), "team-c": ("node3", 4), "team-d": ("node4", 4)}
GAP = range(100, 110)                              # team-c's exporter (node3) is silent here
IDLE = range(30, 40)                               # team-a has no GPU allocated here


def alloc(tenant, m):
    """GPUs allocated to the tenant at minute m (busy or idle); team-d never has one."""
    if tenant == "team-a":
        return 0 if m in IDLE else 2 + m % 7
    if tenant == "team-b":
        return 8 if 60 <= m < 120 else 3
    if tenant == "team-c":
        return 1 + m % 3
    return 0


def expected():
    out = {}
    for t in GPUS:
        out[t] = np.array([np.nan if (t == "team-c" and m in GAP) else alloc(t, m) for m in range(MINUTES)],
                          dtype=float)
    return out


def openmetrics() -> str:
    """DCGM-style: a GPU carries its pod's namespace while allocated; one allocated GPU idles at 0%."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for m in range(MINUTES):
        ts = T0 + 60 * m
        for t, (node, n) in GPUS.items():
            if t == "team-c" and m in GAP:
                continue
            a = alloc(t, m)
            for g in range(n):
                if g < a:
                    v = 50 + m % 40 if g < a - 1 else 0       # allocated, the last one idle
                    lines.append(f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="{node}",gpu="{g}",'
                                 f'namespace="{t}"}} {v} {ts}')
                else:
                    lines.append(f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="{node}",gpu="{g}"}} 0 {ts}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled_prometheus(tmp_path_factory.mktemp("prom"), openmetrics()) as (url, proc):
        yield url, proc


def cfg_for(url, **over):
    return Config(source=SourceConfig(kind="prometheus", prometheus=PrometheusConfig(url=url, timeout_s=2, retries=0)),
                  cycle={"history_steps": MINUTES, "stale_after_s": 120, **over},
                  tenants=[{"name": "team-a", "tier": "high"}, {"name": "team-b"}, {"name": "team-c", "tier": "low"},
                           {"name": "team-d"}])


def clock_at(minute, extra=1.0):
    return lambda: T0 + 60 * minute + extra


def test_reads_exactly_the_backfilled_history(prom):
    url, _ = prom
    src = PrometheusSource(cfg_for(url), clock=clock_at(MINUTES - 1))
    got = src.collect(MINUTES)
    exp = expected()
    assert list(got.history.columns) == ["team-a", "team-b", "team-c", "team-d"]
    assert len(got.history) == MINUTES
    assert got.history.index[0].timestamp() == T0
    for t in GPUS:
        np.testing.assert_array_equal(got.history[t].to_numpy(), exp[t])   # NaN in the gap, 0 when idle
    st = got.state
    assert st.capacity == 24
    assert list(st.used) == [alloc(t, MINUTES - 1) for t in GPUS]
    assert st.tiers == ("high", "normal", "low", "normal")
    assert st.staleness_s == pytest.approx(1.0) and st.missing == ()


def test_gap_now_is_reported_as_missing_not_zero(prom):
    url, _ = prom
    st = PrometheusSource(cfg_for(url), clock=clock_at(105)).collect(60).state
    assert st.missing == ("team-c",)
    assert np.isnan(st.used[2]) and st.used[0] == alloc("team-a", 105) and st.used[3] == 0


def test_each_cycle_reads_only_the_new_steps(prom, tmp_path):
    """Backfill once, then a new step costs two steps of each tenant (the new one and the last one again)."""
    url, _ = prom
    minute = [MINUTES - 20]
    cfg = cfg_for(url)
    history = History(60, cfg.cycle.history_steps, tmp_path / "h.sqlite")
    src = PrometheusSource(cfg, clock=lambda: T0 + 60 * minute[0] + 1.0, history=history)
    src.collect(MINUTES)
    backfill = src.samples
    assert backfill >= 3 * (MINUTES - 40)                        # team-a, b, c over the window; team-d idle
    for _ in range(5):
        minute[0] += 1
        before = src.samples
        got = src.collect(MINUTES)
        assert src.samples - before <= 2 * len(GPUS) + 2 + 1 + 2   # demand, capacity (range + now), freshness, stale
    full = PrometheusSource(cfg, clock=src.clock).window(got.history.index[0].timestamp(), T0 + 60 * minute[0])
    pd.testing.assert_frame_equal(got.history, full, check_freq=False)   # incremental = a full re-read
    assert list(got.state.used) == [alloc(t, minute[0]) for t in GPUS]
    history.close()
    again = History(60, cfg.cycle.history_steps, tmp_path / "h.sqlite")   # a restart reads only what it missed
    src2 = PrometheusSource(cfg, clock=lambda: T0 + 60 * (minute[0] + 3) + 1.0, history=again)
    got = src2.collect(MINUTES)
    assert src2.samples <= 4 * len(GPUS) + 4 + 1 + 4
    m2 = minute[0] + 3
    scraped = got.history.index >= pd.Timestamp(T0, unit="s", tz="UTC")
    assert got.history.index[-1] == pd.Timestamp(T0 + 60 * m2, unit="s", tz="UTC")
    for t, want in expected().items():
        np.testing.assert_array_equal(got.history[t][scraped].to_numpy(), want[: m2 + 1])
    assert got.history[~scraped].isna().all().all()


def test_node_names_are_the_nodes_that_reported(prom):
    url, _ = prom
    assert (PrometheusSource(cfg_for(url), clock=clock_at(MINUTES - 1)).node_names()
            == {"node1", "node2", "node3", "node4"})


def test_idle_tenant_in_a_fresh_scrape_is_zero_not_missing(prom):
    url, _ = prom
    got = PrometheusSource(cfg_for(url), clock=clock_at(35)).collect(60)
    st = got.state
    assert st.missing == ()
    assert st.used[0] == 0 and st.used[3] == 0                      # team-a idle now, team-d never allocated
    assert (got.history["team-a"].iloc[-6:] == 0).all()             # idle minutes are 0 in history too
    scraped = got.history.index >= pd.Timestamp(T0, unit="s", tz="UTC")
    assert (got.history["team-d"][scraped] == 0).all()               # fresh and idle: 0
    assert got.history[~scraped].isna().all().all()                  # before the first scrape: unknown


def test_old_data_is_stale(prom):
    url, _ = prom
    cfg = cfg_for(url)
    st = PrometheusSource(cfg, clock=lambda: T0 + 60 * (MINUTES - 1) + 3600).collect(60).state
    assert st.capacity == 0 and st.staleness_s == float("inf")       # nothing scraped in the last hour
    assert set(st.missing) == set(GPUS)
    assert staleness_reason(st, cfg) is not None


def test_history_range_chunks_long_spans(prom):
    url, _ = prom
    src = PrometheusSource(cfg_for(url), clock=clock_at(MINUTES - 1))
    src.step_s = 1  # 10,800 one-second points: more than one query_range may return
    import pandas as pd

    f = src.history_range(pd.Timedelta(minutes=MINUTES - 1))
    assert len(f) == (MINUTES - 1) * 60 + 1
    assert f["team-a"].iloc[-1] == alloc("team-a", MINUTES - 1)


def test_prometheus_down_is_a_source_error():
    src = PrometheusSource(cfg_for(f"http://127.0.0.1:{free_port()}"))
    t0 = time.perf_counter()
    with pytest.raises(SourceError, match="prometheus"):
        src.collect(60)
    assert time.perf_counter() - t0 < 10


def test_cycle_keeps_last_good_plan_when_prometheus_goes_away(tmp_path):
    need_binary("promtool")
    tmp = tmp_path
    (tmp / "data.om").write_text(openmetrics())
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp / "data.om"), str(tmp / "tsdb")],
                   check=True, capture_output=True)
    with prometheus_server(tmp, "global:\n  scrape_interval: 1h\n", data_dir=tmp / "tsdb",
                           extra=["--query.lookback-delta=30s"]) as (url, proc):
        cfg = cfg_for(url, horizon_steps=10)
        src = PrometheusSource(cfg, clock=clock_at(MINUTES - 1))
        runner = CycleRunner(cfg, src, baseline(cfg), [])
        first = runner.run_once()
        assert first.outcome == "ok" and first.plan.capacity == 24
        assert first.plan.reservations["team-a"] >= alloc("team-a", MINUTES - 1)
        proc.terminate()
        proc.wait()
        second = runner.run_once()
        assert second.outcome == "source_error" and second.plan is first.plan
        assert second.plan.preemptions == first.plan.preemptions
        assert runner.metrics.source_up._value.get() == 0
