"""A tenant's series pushed to a Pushgateway are not the DCGM exporter's, on a real Prometheus and Pushgateway.

A Pushgateway is scraped with honor_labels (its documented setup: a pushed series keeps its own job and instance),
and tenants' batch jobs push to it, which is what it is for. A push to /metrics/job/dcgm-exporter gives its series
job="dcgm-exporter", the exporter selector's default: 200 GPUs pushed for team-a on invented nodes were team-a's
demand, capacity and history like the exporter's own. The Pushgateway marks each group it holds with
push_time_seconds and the group's labels, which a push cannot leave out: while such a group passes the exporter
selector the source is refused in one line naming it (the plan is kept, nothing new preempted), and the steps where
one did are read as missing, never as the pushed GPUs, also once the group is gone.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from daemon.config import Config
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource, pushed_selector
from tests.support.services import metrics_target, prometheus_server, pushgateway_server, wait_for

TENANTS = [{"name": "team-a"}, {"name": "team-b"}]
PUSHED = 200
GROUP = "/metrics/job/dcgm-exporter/tenant/team-a"

pytestmark = [pytest.mark.services, pytest.mark.security]


def exporter_text() -> str:
    """node-a's 8 GPUs: team-a holds two, team-b one."""
    held = {0: "team-a", 1: "team-a", 2: "team-b"}
    return "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{Hostname="node-a",gpu="{g}"' + (f',namespace="{held[g]}"' if g in held else "")
        + "} 50\n" for g in range(8))


def pushed_text() -> str:
    return "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{Hostname="forged-{i // 8}",gpu="{i % 8}",namespace="team-a"}} 100\n'
        for i in range(PUSHED))


@pytest.fixture
def prom(tmp_path):
    """(Prometheus url, Pushgateway url): Prometheus scrapes the exporter (job dcgm-exporter) and the Pushgateway
    (job pushgateway, honor_labels), every second."""
    real = metrics_target(exporter_text())
    ingress = metrics_target('# TYPE ingress_rps gauge\ningress_rps{namespace="team-a"} 12\n')
    try:
        with pushgateway_server(tmp_path) as pgw:
            cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                   f"  - job_name: dcgm-exporter\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{real.server_address[1]}']\n"
                   f"  - job_name: ingress-nginx\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{ingress.server_address[1]}']\n"
                   f"  - job_name: pushgateway\n    honor_labels: true\n    static_configs:\n"
                   f"      - targets: ['{pgw.removeprefix('http://')}']\n")
            with prometheus_server(tmp_path, cfg) as (url, _):
                wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 8,
                         what="the exporter scraped")
                yield url, pgw
    finally:
        for srv in (real, ingress):
            srv.shutdown()
            srv.server_close()


def count(url: str, q: str) -> float:
    r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
    return float(r[0]["value"][1]) if r else 0.0


def config(url: str, **prometheus) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0,
                                                               **prometheus}},
                  cycle={"history_steps": 60, "resolution_s": 1}, tenants=TENANTS)


def push(url: str, pgw: str) -> None:
    """team-a's job pushes 200 GPUs' series under the exporter's job, and Prometheus scrapes them for 3 s."""
    assert httpx.put(f"{pgw}{GROUP}", content=pushed_text()).status_code == 200
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 8 + PUSHED,
             what="the pushed series scraped")
    time.sleep(3)


def test_a_group_pushed_under_the_exporters_job_refuses_the_source_in_one_line(prom):
    url, pgw = prom
    push(url, pgw)
    # the pushed series really pass the exporter's selector: read as it is, team-a holds 202 GPUs
    assert count(url, 'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter", namespace="team-a"})') \
        == 2 + PUSHED
    src = PrometheusSource(config(url))
    with pytest.raises(SourceError) as got:
        src.collect(60)
    msg = str(got.value)
    assert "\n" not in msg and "1 Pushgateway group(s)" in msg and 'job="dcgm-exporter"' in msg
    assert 'tenant="team-a"' in msg and "metric_relabel_configs" in msg


def test_steps_a_pushed_group_passed_as_the_exporter_are_missing_once_it_is_gone(prom):
    """The group deleted, the source answers again; the history it reads over the time the group was there has no
    step with the pushed GPUs (the refused cycles left that gap, and a backfill reads it too): those steps are
    missing (NaN) for every tenant, the others the exporter's 2 and 1. (team-a stays missing after, for the
    missing query's lookback: the pushed GPUs named it and are gone, so they read as its stale GPUs, never as 0.)"""
    url, pgw = prom
    time.sleep(6)   # a few steps of the exporter alone first
    push(url, pgw)
    assert httpx.delete(f"{pgw}{GROUP}").status_code in (200, 202)
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 8
             and count(url, 'count(push_time_seconds{job="dcgm-exporter"})') == 0, what="the group gone")
    time.sleep(2)
    hist = PrometheusSource(config(url)).collect(60).history
    a, b = hist["team-a"].to_numpy(), hist["team-b"].to_numpy()
    assert np.isfinite(a).sum() >= 2 and set(a[np.isfinite(a)]) == {2.0}, f"team-a's history: {a.tolist()}"
    scraped = b[int(np.argmax(np.isfinite(b))):]   # from Prometheus' first scrape on
    assert set(scraped[np.isfinite(scraped)]) == {1.0}
    assert np.isnan(scraped).sum() >= 2, f"the steps the pushed group was there are not missing: {b.tolist()}"


def test_a_group_pushed_under_the_ingress_job_leaves_the_request_rates_unknown(prom, caplog):
    """The same for the ingress' series: team-a pushes 700 req/s of the ingress' metric under its job, and its rate
    read 12 + 700 in the shadow report (its limit read as far below its requests). While the group is there the rates
    are unknown (None, never a guess), said in one line; the cycle goes on."""
    url, pgw = prom
    cfg = config(url, request_rate_query="sum by (namespace) (ingress_rps{$ingress})")
    wait_for(lambda: count(url, 'sum(ingress_rps{job="ingress-nginx"})') == 12, what="the ingress scraped")
    time.sleep(2.1)   # a sample at or before the aligned step the source reads
    assert PrometheusSource(cfg).collect(60).state.request_rate.tolist()[0] == 12
    assert httpx.put(f"{pgw}/metrics/job/ingress-nginx",
                     content='# TYPE ingress_rps gauge\ningress_rps{namespace="team-a"} 700\n').status_code == 200
    wait_for(lambda: count(url, 'sum(ingress_rps{job="ingress-nginx"})') == 712, what="the pushed rate scraped")
    time.sleep(2.1)
    st = PrometheusSource(cfg).collect(60).state
    assert st.request_rate is None, f"the pushed requests were read: {st.request_rate}"
    said = [r.getMessage() for r in caplog.records if "Pushgateway" in r.getMessage()]
    assert len(said) == 1 and 'job="ingress-nginx"' in said[0] and "\n" not in said[0]
    assert st.used.tolist() == [2, 1]


def test_a_tenant_cannot_push_its_idle_jobs_gpu_busy_to_keep_it_from_reclaim(tmp_path):
    """Per-job health reads the exporter's per-GPU series. Slurm job 101 is idle on node-a:0; its tenant pushes that
    GPU at 90% under the exporter's job (same job, node and GPU labels). The two series disagreed, so the job was
    refused ("a second exporter?"): never idle, never reclaimed, for as long as the push stayed. The pushed group's
    series are not the exporter's: the job is idle on the exporter's numbers, and the read says so once."""
    from daemon.health.detect import detect
    from daemon.sources.job_telemetry import JobTelemetrySource

    lb = 'Hostname="node-a",gpu="0",hpc_job="101"'
    real = metrics_target(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lb},UUID=\"GPU-a-0\"}} 0\n"
                          f"DCGM_FI_DEV_FB_USED{{{lb},UUID=\"GPU-a-0\"}} 1000\n"
                          f"DCGM_FI_DEV_FB_FREE{{{lb},UUID=\"GPU-a-0\"}} 79000\n"
                          f"DCGM_FI_DEV_XID_ERRORS{{{lb},UUID=\"GPU-a-0\"}} 0\n")
    try:
        with pushgateway_server(tmp_path) as pgw:
            cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                   f"  - job_name: dcgm-exporter\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{real.server_address[1]}']\n"
                   f"  - job_name: pushgateway\n    honor_labels: true\n    static_configs:\n"
                   f"      - targets: ['{pgw.removeprefix('http://')}']\n")
            with prometheus_server(tmp_path, cfg) as (url, _):
                assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter",
                                 content=f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lb}}} 0.9\n").status_code == 200
                wait_for(lambda: count(url, 'count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{job="dcgm-exporter"})') == 2,
                         what="the exporter and the push scraped")
                time.sleep(12)   # past idle_warn_minutes (6 s)
                hc = {"enabled": True, "idle_warn_minutes": 0.1, "idle_action_minutes": 0.1, "max_gap_s": 5}
                c = Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                           cycle={"history_steps": 60, "resolution_s": 1, "stale_after_s": 3}, health=hc)
                statuses, found = detect(JobTelemetrySource(c).read(), c.health, c.cycle.stale_after_s)
                st = {s.job: s for s in statuses}
                assert st["101"].state != "rejected", st["101"].why
                assert [(f.kind, f.job) for f in found] == [("idle", "101")]
    finally:
        real.shutdown()
        real.server_close()


def test_the_pushed_groups_selector_keeps_the_exporters_job_and_instance_matchers():
    assert pushed_selector('job="dcgm-exporter"') == 'push_time_seconds{job="dcgm-exporter"}'
    # a label the push's path need not carry is left out: a group under the exporter's job is enough
    assert pushed_selector('job="dcgm", container="exporter"') == 'push_time_seconds{job="dcgm"}'
    assert pushed_selector('instance=~"10\\\\..*", job!="x"') == \
        'push_time_seconds{instance=~"10\\\\..*", job!="x"}'
    assert pushed_selector('service="dcgm"') == 'push_time_seconds{service="dcgm"}'
    # a selector that takes every scrape job's series (the documented opt-out) takes the Pushgateway's knowingly:
    # every group would pass it, a backup job's metrics too
    for every in ('job=~".+"', 'job!="x"', 'job!~"tenant-.*"', 'job=~".*", namespace!=""'):
        assert pushed_selector(every) is None, every
    assert pushed_selector('job=~"dcgm-exporter|dcgm"') == 'push_time_seconds{job=~"dcgm-exporter|dcgm"}'
