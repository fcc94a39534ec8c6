"""A tenant cannot forge demand, capacity or nodes through metrics (issue 36), on a real Prometheus.

Prometheus scrapes two targets: the DCGM exporter (scrape job `dcgm-exporter`: node-a and node-b, 8 GPUs each,
team-a holding two of them and team-b one) and a tenant's pod (scrape job `tenant-pods`) that exposes 200 series
under the exporter's name, for team-a, on five nodes that do not exist. Both targets are really scraped, so the
forged series are in Prometheus beside the real ones. The daemon's queries select the exporter's job
(source.prometheus.exporter_selector): demand, capacity and known nodes come from the exporter only, with the raw
queries and with the shipped recording rules. With a selector that lets the forged series in, the scheduler's view
still bounds them: a tenant's demand is capped at its running jobs' GPUs, capacity at the scheduler's nodes.
"""

from __future__ import annotations

import logging
import time

import httpx
import numpy as np
import pytest

from daemon.config import Config
from daemon.policy.state import Jobs, Nodes
from daemon.sources.prometheus import PrometheusSource
from tests.conftest import REPO
from tests.support.services import metrics_target, prometheus_server, wait_for

RULES = REPO / "deploy" / "prometheus" / "gpu-autoscaler-recording.yml"
TENANTS = [{"name": "team-a"}, {"name": "team-b"}]
FORGED = 200

pytestmark = [pytest.mark.services, pytest.mark.security]


def serve(lines: list[str]):
    """A scrape target serving `lines` of DCGM_FI_DEV_GPU_UTIL (the text exposition format)."""
    return metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "\n".join(lines) + "\n")


def exporter_lines() -> list[str]:
    held = {("node-a", 0): ("team-a", 90), ("node-a", 1): ("team-a", 0), ("node-b", 0): ("team-b", 70)}
    out = []
    for node in ("node-a", "node-b"):
        for g in range(8):
            ns, util = held.get((node, g), ("", 0))
            label = f',namespace="{ns}"' if ns else ""
            out.append(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{g}"{label}}} {util}')
    return out


def forged_lines() -> list[str]:
    return [f'DCGM_FI_DEV_GPU_UTIL{{Hostname="forged-{i // 40}",gpu="{i % 40}",namespace="team-a"}} 100'
            for i in range(FORGED)]


# The pod also exposes the recording rules' own names: a scraped series carries its scrape job's `job` label, a
# recorded one (aggregated by namespace or in all) has none, so the recorded queries select job="".
FORGED_RECORDED = (f'namespace:gpuas_gpus_allocated:count{{namespace="team-a"}} {FORGED}\n'
                   f'namespace:gpuas_gpus_stale:count{{namespace="team-b"}} 1\n'
                   f'cluster:gpuas_gpus:count {FORGED}\n')
# The ingress controller's request rates (scrape job `ingress-nginx`), and the same metric from the tenant's pod for
# its own namespace, once as itself and once claiming the ingress' job (honor_labels off: it becomes exported_job).
INGRESS_RPS = {"team-a": 12.0, "team-b": 3.0}
RATE_QUERY = "sum by (namespace) (ingress_rps{$ingress})"
FORGED_RPS = ('# TYPE ingress_rps gauge\n'
              'ingress_rps{namespace="team-a",pod="own"} 500\n'
              'ingress_rps{namespace="team-a",pod="own",job="ingress-nginx"} 700\n')
# ... and a series named like a PromQL keyword, which Prometheus reads as a metric where a selector may stand
FORGED_OFFSET = 'offset{namespace="team-a"} 900\n'



@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """(url) of a Prometheus scraping the exporter and the forging pod, with the recording rules loaded."""
    tmp = tmp_path_factory.mktemp("forged")
    real = serve(exporter_lines())
    forged = metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "\n".join(forged_lines()) + "\n"
                            + FORGED_RECORDED + FORGED_RPS + FORGED_OFFSET)
    ingress = metrics_target("# TYPE ingress_rps gauge\n"
                             + "".join(f'ingress_rps{{namespace="{t}"}} {v}\n' for t, v in INGRESS_RPS.items()))
    cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\n"
           f"rule_files: ['{RULES}']\nscrape_configs:\n")
    for job, srv in (("dcgm-exporter", real), ("tenant-pods", forged), ("ingress-nginx", ingress)):
        cfg += f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{srv.server_address[1]}']\n"
    try:
        with prometheus_server(tmp, cfg) as (url, _):
            def count(q: str) -> float:
                r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
                return float(r[0]["value"][1]) if r else 0.0

            # both targets scraped, the forged series really in Prometheus, and the rules evaluated twice since
            wait_for(lambda: count("count(DCGM_FI_DEV_GPU_UTIL)") == 16 + FORGED, what="both targets scraped",
                     timeout=30)
            wait_for(lambda: count("count(ingress_rps)") == 4 and count("count({__name__='offset'})") == 1,
                     what="the ingress and the pod's rates scraped", timeout=30)
            wait_for(lambda: count("count(cluster:gpuas_gpus:count)") == 2, what="recording rules, and the forged "
                     "recorded names scraped", timeout=30)
            time.sleep(2.1)
            yield url
    finally:
        for s in (real, forged, ingress):
            s.shutdown()
            s.server_close()


def config(url: str, **prometheus) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0,
                                                               **prometheus}},
                  cycle={"history_steps": 60, "resolution_s": 1}, tenants=TENANTS)


@pytest.mark.parametrize("rules", [False, True], ids=["raw-queries", "recording-rules"])
def test_demand_capacity_and_nodes_come_only_from_the_exporter(prom, rules):
    src = PrometheusSource(config(prom, recording_rules=rules))
    got = src.collect(60)
    st = got.state
    assert st.tenants == ("team-a", "team-b")
    assert st.used.tolist() == [2, 1], "the forged series counted as team-a's demand"
    assert st.capacity == 16, "the forged series counted as capacity"
    assert st.missing == () and st.staleness_s < 5
    assert src.node_names() == {"node-a", "node-b"}, "the forged nodes are known"
    # the history the forecast reads: never more than team-a's two GPUs at any scraped step
    assert np.nanmax(got.history["team-a"].to_numpy()) == 2


def scheduler():
    """The scheduler's view: team-a runs one 2-GPU job on node-a, team-b one 1-GPU job on node-b."""
    def jobs(tenants: tuple[str, ...]) -> Jobs:
        idx = {t: i for i, t in enumerate(tenants)}
        return Jobs(ids=np.array(["1", "2"], dtype=object), tenant=np.array([idx["team-a"], idx["team-b"]]),
                    gpus=np.array([2, 1]), priority=np.array([1, 1], dtype=np.int8),
                    running=np.array([True, True]), runtime_s=np.array([60.0, 60.0]), wait_s=np.zeros(2),
                    node=np.array(["node-a", "node-b"], dtype=object))

    def nodes(tenants: tuple[str, ...]) -> Nodes:
        return Nodes(names=np.array(["node-a", "node-b"], dtype=object), gpus=np.array([8, 8]),
                     free=np.array([6, 7]), draining=np.zeros(2, dtype=np.int64), held_by=np.array([-1, -1]))
    return jobs, nodes


def test_with_a_loose_selector_the_scheduler_view_bounds_what_gets_through(prom, caplog):
    """A site that selects every scrape job (job=~".+") lets the forged series into the queries; with a scheduler
    view, team-a's demand stops at its running job's 2 GPUs and the capacity at the scheduler's 16, both reported,
    and the capping is logged once, not every cycle."""
    jobs, nodes = scheduler()
    by_node = 'count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})'
    cfg = config(prom, exporter_selector='job=~".+"', capacity_query=by_node)
    loose = PrometheusSource(cfg).collect(60).state
    assert loose.used[0] == 2 + FORGED and loose.capacity == 16 + FORGED   # no scheduler view: all let in
    src = PrometheusSource(cfg, jobs_provider=jobs, nodes_provider=nodes)
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
        st = src.collect(60).state
        src.collect(60)
    assert st.used.tolist() == [2, 1] and st.capped == {"team-a": FORGED}
    assert st.capacity == 16 and st.capacity_dropped == FORGED
    capped_lines = [r for r in caplog.records if "team-a" in r.getMessage() and "capped" in r.getMessage()]
    assert len(capped_lines) == 1, [r.getMessage() for r in caplog.records]
    # the default count(...) names no node: the capacity is bounded by the scheduler's total instead
    total = PrometheusSource(config(prom, exporter_selector='job=~".+"'), jobs_provider=jobs, nodes_provider=nodes)
    assert total.collect(60).state.capacity == 16


def test_a_tenants_pod_does_not_add_to_its_request_rate(prom):
    """The pod exposes the ingress' request metric for its own namespace (twice: as itself and under the ingress'
    job label). Summed by namespace without a selector, team-a's rate is 12 + 500 + 700 req/s, which would raise the
    share of cycles its rate limit reads as too low in the shadow report; request_rate_query selects the ingress'
    job ({$ingress}, ingress_selector), so the rate read is the ingress' 12."""
    raw = httpx.get(f"{prom}/api/v1/query", params={"query": "sum by (namespace) (ingress_rps)"}).json()
    unselected = {r["metric"]["namespace"]: float(r["value"][1]) for r in raw["data"]["result"]}
    assert unselected == {"team-a": 12.0 + 500 + 700, "team-b": 3.0}   # the forged series are in Prometheus
    st = PrometheusSource(config(prom, request_rate_query=RATE_QUERY)).collect(60).state
    assert st.tenants == ("team-a", "team-b")
    assert st.request_rate.tolist() == [INGRESS_RPS["team-a"], INGRESS_RPS["team-b"]]


# Queries that read the pod's series although every `{...}` the old scan saw carried the selector: a bare `{...}`
# after `or` (the scan took the keyword for the selector's name and skipped it), a quote in a comment (the scan read
# the lines between two commented quotes as a string) and a comment inside the braces (Prometheus ignores the
# `$ingress` or `$exporter` in it).
HIDDEN = [
    ("request_rate_query", 'sum by (namespace) (ingress_rps{$ingress} or {__name__="ingress_rps"})', 12 + 500 + 700),
    ("request_rate_query", 'sum by (namespace) (ingress_rps{$ingress} # "\n or ingress_rps # "\n)',
     12 + 500 + 700),
    ("request_rate_query", "sum by (namespace) (ingress_rps{ # $ingress\n})", 12 + 500 + 700),
    ("demand_query", 'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{ # $exporter\n namespace!=""})', 2 + FORGED),
    # a name pattern: the old check saw no DCGM name ('DCGM.*' has no 'DCGM_')
    ("demand_query", 'count by (namespace) ({__name__=~"DCGM.*", namespace!=""})', 2 + FORGED),
    # a comment ends at a carriage return for Prometheus; the hand scan read it to the newline
    ("request_rate_query", "sum by (namespace) (ingress_rps{$ingress} # \r or ingress_rps)", 12 + 500 + 700),
    # the hand scan took `offset` for the keyword; Prometheus reads it as a metric's name
    ("request_rate_query", "sum by (namespace) (ingress_rps{$ingress} or offset)", 12 + 900),
    # braces without a name match every name, the DCGM ones too (the hand scan looked for a DCGM name or pattern)
    ("demand_query", 'count by (namespace) ({namespace!="", gpu!=""})', 2 + FORGED),
]


@pytest.mark.parametrize("key, query, forged", HIDDEN, ids=["or-bare-braces", "quote-in-comment",
                                                             "comment-in-braces", "dcgm-comment-in-braces",
                                                             "dcgm-name-pattern", "comment-ends-at-cr",
                                                             "keyword-as-name", "dcgm-no-name"])
def test_a_query_that_hides_an_unselected_series_from_the_check_is_refused(prom, key, query, forged):
    """Each query reads team-a's forged series on this Prometheus (the sum is the pod's, not the ingress' 12 or the
    exporter's 2), so the config that holds it is refused, naming the key."""
    sent = query.replace("$ingress", 'job="ingress-nginx"').replace("$exporter", 'job="dcgm-exporter"')
    r = httpx.get(f"{prom}/api/v1/query", params={"query": sent}).json()
    assert r["status"] == "success", r
    assert {x["metric"]["namespace"]: float(x["value"][1]) for x in r["data"]["result"]}["team-a"] == forged
    with pytest.raises(ValueError, match=rf"{key} reads .* without \{{\$(ingress|exporter)\}}"):
        config(prom, **{key: query})


def test_a_comment_in_a_selected_query_is_not_refused(prom):
    """A comment is not a series: the words and quotes in it neither refuse the query nor select anything."""
    query = "sum by (namespace) (ingress_rps{$ingress})  # the ingress' own series, \"not the pods'\"\n"
    st = PrometheusSource(config(prom, request_rate_query=query)).collect(60).state
    assert st.request_rate.tolist() == [INGRESS_RPS["team-a"], INGRESS_RPS["team-b"]]


def test_a_dcgm_name_selected_in_its_braces_is_not_refused(prom):
    """`{__name__="DCGM_...", $exporter}` selects the exporter's series: the old check, which looked for braces
    after the name, refused it."""
    query = 'count by (namespace) ({__name__="DCGM_FI_DEV_GPU_UTIL", $exporter, namespace!=""})'
    st = PrometheusSource(config(prom, demand_query=query)).collect(60).state
    assert st.used.tolist() == [2, 1]


# Where a parser could read a query otherwise than Prometheus: quotes and escapes, comments and line ends, keywords in
# capitals or as names, the forms of a range, a subquery, offset and @, and binary operators.
LEXED = [
    r'ingress_rps{a="\\"} or b', "ingress_rps{a='\\''} or b", 'ingress_rps{a="}#"} or b',
    r'ingress_rps{a="\u0022"} or b',
    "ingress_rps # c\r or b", "ingress_rps #c\u2028 or b", 'ingress_rps{a="1"}\n#}\nor b', "ingress_rps\tor\tb",
    "SUM(ingress_rps) OR b", "sum(offset) by (x) unless on () start", "sum(by) + sum(without) * end",
    "ingress_rps OFFSET 1m and b @ end()", "rate(ingress_rps[5m:] offset -1m) / ignoring (a) group_left b",
    "topk(scalar(b), ingress_rps) > bool 1", "{__name__=~\"ingress.*\", a!=\"\"} atan2 -b",
]


@pytest.mark.parametrize("query", LEXED)
def test_the_checks_parser_reads_each_query_as_prometheus_does(prom, query):
    """The selector check trusts promql-parser to see the series Prometheus reads. Prometheus' own formatting of the
    query (format_query, its syntax tree printed) holds the same selectors as the parser reads in the query."""
    from daemon.config.promql_selectors import DEFAULT_EXPORTER, DEFAULT_INGRESS, EXPORTER, INGRESS, selectors

    def read(q: str) -> list[tuple]:
        return sorted((s.name or "", sorted(s.matchers)) for s in
                      selectors(q, INGRESS, {EXPORTER: DEFAULT_EXPORTER, INGRESS: DEFAULT_INGRESS}))
    r = httpx.get(f"{prom}/api/v1/format_query", params={"query": query}).json()
    assert r["status"] == "success", r
    assert read(query) == read(r["data"]), r["data"]
