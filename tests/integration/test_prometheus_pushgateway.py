"""A tenant's series pushed to a Pushgateway are not the DCGM exporter's, on a real Prometheus and Pushgateway.

A Pushgateway is scraped with honor_labels (its documented setup: a pushed series keeps its own job and instance),
and tenants' batch jobs push to it, which is what it is for. A push to /metrics/job/dcgm-exporter gives its series
job="dcgm-exporter", the exporter selector's default: 200 GPUs pushed for team-a on invented nodes were team-a's
demand, capacity and history like the exporter's own. The Pushgateway marks each group it holds with
push_time_seconds and the group's labels, which a push cannot leave out. A group whose path names an instance gives
it to every one of its series: they are left out by that instance, and the others read on (the tenants with GPUs at
that instance read as missing while it stands: its pushes, or a real exporter scraped under it). A group whose path
names none can give its series any instance (measured below): while one passes the exporter selector the source is
refused in one line naming it (the plan is kept, nothing new preempted), and the steps where one did are read as
missing, never as the pushed GPUs, also once the group is gone.
"""

from __future__ import annotations

import time
from typing import Callable

import httpx
import numpy as np
import pytest

from daemon.config import Config
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
from daemon.sources.pushgateway import MAX_GROUPS, MAX_REGEX_CHARS, Pushed, add_back, pushed_selector
from tests.support.services import metrics_target, prometheus_server, pushgateway_server, wait_for

TENANTS = [{"name": "team-a"}, {"name": "team-b"}]
PUSHED = 200
GROUP = "/metrics/job/dcgm-exporter/tenant/team-a"

pytestmark = [pytest.mark.services, pytest.mark.security]


def exporter_text(node: str, held: dict[int, str], gpus: int) -> str:
    return "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{g}"' + (f',namespace="{held[g]}"' if g in held else "")
        + "} 50\n" for g in range(gpus))


def pushed_text(tenant: str = "team-a") -> str:
    return "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{Hostname="forged-{i // 8}",gpu="{i % 8}",namespace="{tenant}"}} 100\n'
        for i in range(PUSHED))


@pytest.fixture
def prom(tmp_path):
    """(Prometheus url, Pushgateway url, node-a's exporter's instance): Prometheus scrapes two exporters (job
    dcgm-exporter: node-a's 8 GPUs, team-a holds two; node-b's 4, team-b holds one), an ingress and the Pushgateway
    (job pushgateway, honor_labels), every second."""
    real = metrics_target(exporter_text("node-a", {0: "team-a", 1: "team-a"}, 8))
    other = metrics_target(exporter_text("node-b", {0: "team-b"}, 4))
    ingress = metrics_target('# TYPE ingress_rps gauge\ningress_rps{namespace="team-a"} 12\n'
                             'ingress_rps{namespace="team-b"} 5\n')
    try:
        with pushgateway_server(tmp_path) as pgw:
            cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                   f"  - job_name: dcgm-exporter\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{real.server_address[1]}', '127.0.0.1:{other.server_address[1]}']\n"
                   f"  - job_name: ingress-nginx\n    static_configs:\n"
                   f"      - targets: ['127.0.0.1:{ingress.server_address[1]}']\n"
                   f"  - job_name: pushgateway\n    honor_labels: true\n    static_configs:\n"
                   f"      - targets: ['{pgw.removeprefix('http://')}']\n")
            with prometheus_server(tmp_path, cfg) as (url, _):
                wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 12,
                         what="the exporters scraped")
                yield url, pgw, f"127.0.0.1:{real.server_address[1]}"
    finally:
        for srv in (real, other, ingress):
            srv.shutdown()
            srv.server_close()


def count(url: str, q: str) -> float:
    r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
    return float(r[0]["value"][1]) if r else 0.0


def config(url: str, **prometheus) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0,
                                                               **prometheus}},
                  cycle={"history_steps": 60, "resolution_s": 1}, tenants=TENANTS)


def push(url: str, pgw: str, group: str = GROUP, text: str | None = None) -> None:
    """team-a's job pushes 200 GPUs' series under the exporter's job, and Prometheus scrapes them for 3 s."""
    assert httpx.put(f"{pgw}{group}", content=text or pushed_text()).status_code == 200
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 12 + PUSHED,
             what="the pushed series scraped")
    time.sleep(3)


def test_a_group_pushed_under_the_exporters_job_refuses_the_source_in_one_line(prom):
    """A group whose path names no instance (GROUP): its series cannot be left out (the next test shows why), so the
    read is refused whole, and the line says why."""
    url, pgw, _ = prom
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
    assert "name no instance in their path" in msg


def test_a_group_without_an_instance_gives_its_series_any_instance_its_push_names(prom):
    """What the refusal above stands on, measured: a group whose path names no instance has push_time_seconds
    without one, and so have its series whose body names none; a series whose body names an instance keeps it, the
    real exporter's too, so no matcher tells it from the exporter's. A path's instance wins over the body's."""
    url, pgw, real = prom
    body = ('DCGM_FI_DEV_GPU_UTIL{Hostname="p1",gpu="0",namespace="team-b"} 1\n'
            f'DCGM_FI_DEV_GPU_UTIL{{Hostname="p2",gpu="0",namespace="team-b",instance="{real}"}} 1\n')
    assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter", content=body).status_code == 200
    assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter/instance/made-up:9400",
                     content=f'DCGM_FI_DEV_GPU_UTIL{{Hostname="p3",gpu="0",instance="{real}"}} 1\n').status_code == 200
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 15, what="the pushes scraped")

    def labels(q: str) -> list[dict]:
        r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
        return sorted(({k: v for k, v in x["metric"].items() if k != "__name__"} for x in r), key=str)
    assert labels('push_time_seconds') == [{"instance": "made-up:9400", "job": "dcgm-exporter"},
                                           {"job": "dcgm-exporter"}]
    pushed = {x["Hostname"]: x.get("instance") for x in labels('DCGM_FI_DEV_GPU_UTIL{Hostname=~"p."}')}
    assert pushed == {"p1": None, "p2": real, "p3": "made-up:9400"}


def test_steps_a_pushed_group_passed_as_the_exporter_are_missing_once_it_is_gone(prom):
    """The group deleted, the source answers again; the history it reads over the time the group was there has no
    step with the pushed GPUs (the refused cycles left that gap, and a backfill reads it too): those steps are
    missing (NaN) for every tenant, the others the exporter's 2 and 1. (team-a stays missing after, for the
    missing query's lookback: the pushed GPUs named it and are gone, so they read as its stale GPUs, never as 0.)"""
    url, pgw, _ = prom
    time.sleep(6)   # a few steps of the exporter alone first
    push(url, pgw)
    assert httpx.delete(f"{pgw}{GROUP}").status_code in (200, 202)
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 12
             and count(url, 'count(push_time_seconds{job="dcgm-exporter"})') == 0, what="the group gone")
    time.sleep(2)
    hist = PrometheusSource(config(url)).collect(60).history
    a, b = hist["team-a"].to_numpy(), hist["team-b"].to_numpy()
    a = a[int(np.argmax(a == 2)):]   # from Prometheus' first scrape of node-a on
    assert np.isfinite(a).sum() >= 2 and set(a[np.isfinite(a)]) == {2.0}, f"team-a's history: {a.tolist()}"
    scraped = b[int(np.argmax(b == 1)):]   # from Prometheus' first scrape of node-b on
    assert set(scraped[np.isfinite(scraped)]) == {1.0}
    assert np.isnan(scraped).sum() >= 2, f"the steps the pushed group was there are not missing: {b.tolist()}"


def test_a_group_pushed_under_the_ingress_job_leaves_the_request_rates_unknown(prom, caplog):
    """The same for the ingress' series: team-a pushes 700 req/s of the ingress' metric under its job, and its rate
    read 12 + 700 in the shadow report (its limit read as far below its requests). While the group is there the rates
    are unknown (None, never a guess), said in one line; the cycle goes on."""
    url, pgw, _ = prom
    cfg = config(url, request_rate_query="sum by (namespace) (ingress_rps{$ingress})")
    wait_for(lambda: count(url, 'sum(ingress_rps{job="ingress-nginx"})') == 17, what="the ingress scraped")
    time.sleep(2.1)   # a sample at or before the aligned step the source reads
    assert PrometheusSource(cfg).collect(60).state.request_rate.tolist()[0] == 12
    assert httpx.put(f"{pgw}/metrics/job/ingress-nginx",
                     content='# TYPE ingress_rps gauge\ningress_rps{namespace="team-a"} 700\n').status_code == 200
    wait_for(lambda: count(url, 'sum(ingress_rps{job="ingress-nginx"})') == 717, what="the pushed rate scraped")
    time.sleep(2.1)
    st = PrometheusSource(cfg).collect(60).state
    assert st.request_rate is None, f"the pushed requests were read: {st.request_rate}"
    said = [r.getMessage() for r in caplog.records if "Pushgateway" in r.getMessage()]
    assert len(said) == 1 and 'job="ingress-nginx"' in said[0] and "\n" not in said[0]
    assert st.used.tolist() == [2, 1]


MADE_UP = "127.0.0.1.*"   # an instance no exporter has: as a regex, unescaped, it would name every one here


def test_a_group_naming_a_made_up_instance_costs_the_other_tenants_nothing(prom, caplog):
    """team-a pushes 200 GPUs under the exporter's job and a made-up instance. Every cycle was refused, for every
    tenant, while the group stood (and past policy.max_plan_age_s the safe default took over for all). Its series
    carry its instance: they are left out (escaped: the name, read as a regex, would match both exporters), team-b's
    demand and the capacity are read on, team-a (whom the push names) reads as missing, and one line names the group
    and the nodes. The history read once the group is gone has team-b's GPU at every step."""
    url, pgw, _ = prom
    time.sleep(4)   # a few steps of the exporters alone first
    push(url, pgw, f"/metrics/job/dcgm-exporter/instance/{MADE_UP}")
    src = PrometheusSource(config(url))
    st = src.collect(60).state
    assert st.capacity == 12, "the pushed GPUs are not capacity, the exporters' are"
    assert np.isnan(st.used[0]) and st.used[1] == 1, st.used.tolist()
    said = [r.getMessage() for r in caplog.records if "Pushgateway group" in r.getMessage()]
    assert len(said) == 1 and f'instance="{MADE_UP}"' in said[0] and "forged-0" in said[0], said
    assert "node-a" not in said[0] and "\n" not in said[0]
    src.collect(60)
    assert len([r for r in caplog.records if "Pushgateway group" in r.getMessage()]) == 1, "one line per change"
    assert httpx.delete(f"{pgw}/metrics/job/dcgm-exporter/instance/{MADE_UP}").status_code in (200, 202)
    wait_for(lambda: count(url, 'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})') == 12
             and count(url, 'count(push_time_seconds{job="dcgm-exporter"})') == 0, what="the group gone")
    time.sleep(2)
    hist = PrometheusSource(config(url)).collect(60).history
    b = hist["team-b"].to_numpy()
    scraped = b[int(np.argmax(b == 1)):]   # from Prometheus' first scrape of node-b on
    assert len(scraped) >= 8 and set(scraped.tolist()) == {1.0}, f"team-b's history: {b.tolist()}"


def test_a_group_naming_a_real_exporters_instance_leaves_that_nodes_tenants_missing(prom):
    """A tenant pushes 200 GPUs (for a namespace no tenant has) under node-a's exporter's instance: the pushed series
    and node-a's own are one instance, and cannot be told apart. node-a's GPUs are not counted and its tenant
    (team-a) reads as missing, never as 0; node-b's team-b and capacity are read on (they were refused with
    everything else). Once the group is gone, the history has team-a's 2 GPUs before and after it and NaN where it
    stood, never 0: node-a's series are read again at the steps where no group named its instance."""
    url, pgw, real = prom
    time.sleep(4)   # a few steps of the exporters alone first
    push(url, pgw, f"/metrics/job/dcgm-exporter/instance/{real}", pushed_text("nobody"))
    st = PrometheusSource(config(url)).collect(60).state
    assert st.capacity == 4
    assert np.isnan(st.used[0]) and st.used[1] == 1, st.used.tolist()
    assert st.missing == ("team-a",)
    assert httpx.delete(f"{pgw}/metrics/job/dcgm-exporter/instance/{real}").status_code in (200, 202)
    wait_for(lambda: count(url, 'count(push_time_seconds{job="dcgm-exporter"})') == 0, what="the group gone")
    time.sleep(3)
    a = PrometheusSource(config(url)).collect(60).history["team-a"].to_numpy()
    a = a[int(np.argmax(a == 2)):]   # from Prometheus' first scrape of node-a on
    stood = np.flatnonzero(np.isnan(a))
    assert len(stood) >= 2 and set(a[np.isfinite(a)].tolist()) == {2.0}, f"team-a's history: {a.tolist()}"
    assert stood[0] > 0 and stood[-1] < len(a) - 1 and len(stood) == stood[-1] - stood[0] + 1, a.tolist()


def test_past_the_bound_the_groups_refuse_the_read_whole_and_say_why(prom):
    url, pgw, _ = prom
    for i in range(MAX_GROUPS + 1):
        assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter/instance/made-up-{i}",
                         content='DCGM_FI_DEV_GPU_UTIL{Hostname="x",gpu="0",namespace="team-a"} 1\n').status_code == 200
    wait_for(lambda: count(url, 'count(push_time_seconds{job="dcgm-exporter"})') == MAX_GROUPS + 1,
             what="the groups scraped")
    time.sleep(2.1)   # a sample at or before the aligned step the source reads
    with pytest.raises(SourceError) as got:
        PrometheusSource(config(url)).collect(60)
    assert f"their {MAX_GROUPS + 1} instances are over the {MAX_GROUPS} left out one by one" in str(got.value)


def test_a_group_naming_an_instance_under_the_ingress_job_leaves_only_its_tenants_rate_unknown(prom):
    """team-b pushes 700 req/s for team-a under the ingress' job and a made-up instance: the rates were all unknown
    while it stood. team-a's rate (the push names it) is unknown, team-b's read (5)."""
    url, pgw, _ = prom
    cfg = config(url, request_rate_query="sum by (namespace) (ingress_rps{$ingress})")
    assert httpx.put(f"{pgw}/metrics/job/ingress-nginx/instance/made-up:80",
                     content='# TYPE ingress_rps gauge\ningress_rps{namespace="team-a"} 700\n').status_code == 200
    wait_for(lambda: count(url, 'sum(ingress_rps{job="ingress-nginx"})') == 717, what="the pushed rate scraped")
    time.sleep(2.1)
    rate = PrometheusSource(cfg).collect(60).state.request_rate
    assert rate is not None and np.isnan(rate[0]) and rate[1] == 5, rate


def health_read(tmp_path, pushes: Callable[[str, str], None],
                after: Callable[[str, str], None] | None = None) -> tuple[dict, list]:
    """(statuses by job, findings) of per-job health, on a real Prometheus scraping one exporter (Slurm job 101 idle
    on node-a:0) and a Pushgateway that `pushes(pushgateway url, the exporter's instance)` fills first, and `after`
    12 s later (3 s before the read)."""
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
                pushes(pgw, f"127.0.0.1:{real.server_address[1]}")
                wait_for(lambda: count(url, 'count(DCGM_FI_PROF_GR_ENGINE_ACTIVE{job="dcgm-exporter"})') == 2,
                         what="the exporter and the push scraped")
                time.sleep(12)   # past idle_warn_minutes (6 s)
                if after is not None:
                    after(pgw, f"127.0.0.1:{real.server_address[1]}")
                    time.sleep(3)
                hc = {"enabled": True, "idle_warn_minutes": 0.1, "idle_action_minutes": 0.1, "max_gap_s": 5}
                c = Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                           cycle={"history_steps": 60, "resolution_s": 1, "stale_after_s": 3}, health=hc)
                statuses, found = detect(JobTelemetrySource(c).read(), c.health, c.cycle.stale_after_s)
                return {s.job: s for s in statuses}, found
    finally:
        real.shutdown()
        real.server_close()


def test_a_tenant_cannot_push_its_idle_jobs_gpu_busy_to_keep_it_from_reclaim(tmp_path):
    """Per-job health reads the exporter's per-GPU series. Slurm job 101 is idle on node-a:0; its tenant pushes that
    GPU at 90% under the exporter's job (same job, node and GPU labels) and a made-up instance. The two series
    disagreed, so the job was refused ("a second exporter?"): never idle, never reclaimed, for as long as the push
    stayed. The pushed group's series (its instance) are not the exporter's: the job is idle on the exporter's
    numbers. (This pushed under no instance before: such a group's series may carry the exporter's own instance,
    next test.)"""
    lb = 'Hostname="node-a",gpu="0",hpc_job="101"'

    def pushes(pgw: str, _: str) -> None:
        assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter/instance/made-up:9400",
                         content=f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lb}}} 0.9\n").status_code == 200
    st, found = health_read(tmp_path, pushes)
    assert st["101"].state != "rejected", st["101"].why
    assert [(f.kind, f.job) for f in found] == [("idle", "101")]


def test_a_group_without_an_instance_cannot_forge_a_gpu_error_for_a_job(tmp_path, caplog):
    """A group whose path names no instance gives its series the instance its body names, here the exporter's: a
    tenant pushed a second GPU of job 101 (node-a:1) whose XID went from 0 to 79, and job 101 had a critical XID
    finding (and an idle one on "all 2 GPUs"), on numbers no exporter gave. No series such a group may have pushed is
    the exporter's telemetry (every one carrying the group's other labels: here, all of the exporter's job), so
    nothing is found on them, and one line says why."""
    def xid(code: int) -> Callable[[str, str], None]:
        def put(pgw: str, real: str) -> None:
            lb = f'Hostname="node-a",gpu="1",hpc_job="101",instance="{real}"'
            assert httpx.put(f"{pgw}/metrics/job/dcgm-exporter",
                             content=f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lb}}} 0\n"
                                     f"DCGM_FI_DEV_XID_ERRORS{{{lb}}} {code}\n").status_code == 200
        return put
    st, found = health_read(tmp_path, xid(0), after=xid(79))
    assert [(f.kind, f.job) for f in found] == [], [f.summary for f in found]
    said = [r.getMessage() for r in caplog.records if "Pushgateway" in r.getMessage()]
    assert len(said) == 1 and 'job="dcgm-exporter"' in said[0], said


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


def test_groups_whose_instance_names_make_a_regex_past_the_bound_refuse_the_read_whole():
    """Under MAX_GROUPS groups, but with instance names (any a push's path gives) whose regex, carried by every query,
    is past MAX_REGEX_CHARS: not left out one by one, the read refused whole and saying why (mutation testing: the
    bound dropped passed every test)."""
    long = [{"job": "dcgm-exporter", "instance": f"{i}-" + "x" * 300} for i in range(10)]
    push = Pushed.of(long)
    assert len(push.instances) < MAX_GROUPS and len(push.excluded()) > MAX_REGEX_CHARS
    assert push.whole == f"their instances' names are over the {MAX_REGEX_CHARS} characters left out one by one"
    assert Pushed.of(long[:2]).whole is None
    # and the count's bound is MAX_GROUPS itself: that many are left out one by one, one more is refused
    assert Pushed.of([{"instance": f"i{i}"} for i in range(MAX_GROUPS)]).whole is None
    assert Pushed.of([{"instance": f"i{i}"} for i in range(MAX_GROUPS + 1)]).whole is not None


def test_the_series_at_a_groups_instance_are_added_back_only_where_no_group_stood():
    """add_back on a grid worked by hand: team-a runs 2 GPUs off the instance and 1 at it (a real exporter scraped
    under a group's instance), team-b 0 at it. Where no group stood the 1 is added to the 2 (not put in its place);
    where one stood it is left out and team-a's step is touched (its numbers unknown there), team-b's 0 not (mutation
    testing: adding back at every step, replacing instead of adding, and touching zeros passed every test)."""
    keys, at = {"team-a": 0}, np.array([[1.0, 1.0], [0.0, 0.0]])   # rows of team-a, team-b at the instance
    rows, touched = add_back(keys, np.array([[2.0, 2.0]]), {"team-a": 0, "team-b": 1}, at, np.array([False, True]))
    assert rows[keys["team-a"]].tolist() == [3.0, 2.0] and rows[keys["team-b"]].tolist()[0] == 0.0
    assert set(touched) == {"team-a"} and touched["team-a"].tolist() == [False, True]
