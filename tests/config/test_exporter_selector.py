"""One exporter selector for every Prometheus query (issue 36): a tenant's pod can expose series named like the DCGM
exporter's, so each query that reads a DCGM series selects the exporter's own (source.prometheus.exporter_selector,
the `$exporter` in the queries), and a config whose query does not is refused with one line naming the key."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from daemon.cli import cli
from daemon.config import Config
from daemon.config.models import HEALTH_QUERIES, PROMETHEUS_QUERIES, unselected_series

DCGM = re.compile(r"DCGM_[A-Z0-9_]+(\{[^}]*\})?")


def _selected(query: str, selector: str) -> bool:
    """Every DCGM series the query reads carries the selector among its matchers."""
    found = list(DCGM.finditer(query))
    return bool(found) and all(m.group(1) and selector in m.group(1) for m in found)


@pytest.mark.security
def test_every_default_query_that_reads_dcgm_selects_the_exporters_job():
    pc = Config().source.prometheus
    assert pc.exporter_selector == 'job="dcgm-exporter"'
    for q in PROMETHEUS_QUERIES:
        assert _selected(pc.query(q), 'job="dcgm-exporter"'), (q, pc.query(q))
    hc = Config().health
    for q in HEALTH_QUERIES:
        assert _selected(pc.selects(getattr(hc, f"{q}_query")), 'job="dcgm-exporter"'), q


def test_the_selector_is_one_key_for_the_source_and_health():
    cfg = Config(source={"prometheus": {"exporter_selector": 'job="gpu-metrics"'}})
    pc = cfg.source.prometheus
    assert pc.query("demand") == 'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{job="gpu-metrics", namespace!=""})'
    assert pc.query("capacity") == 'count(DCGM_FI_DEV_GPU_UTIL{job="gpu-metrics"})'
    assert pc.selects(cfg.health.xid_query) == 'DCGM_FI_DEV_XID_ERRORS{job="gpu-metrics"}'


def test_health_exporter_selector_is_read_as_the_one_key_and_a_second_different_one_is_refused():
    """The key's old place ([health], before it applied to every query) keeps a file valid; both places set to
    different selectors would leave one silently unused, so that is refused."""
    cfg = Config(health={"exporter_selector": 'job="dcgm"'})
    assert cfg.source.prometheus.exporter_selector == 'job="dcgm"'
    assert 'job="dcgm"' in cfg.source.prometheus.query("known_nodes")
    same = Config(health={"exporter_selector": 'job="dcgm"'},
                  source={"prometheus": {"exporter_selector": 'job="dcgm"'}})
    assert same.source.prometheus.exporter_selector == 'job="dcgm"'
    with pytest.raises(ValidationError, match="old place of source.prometheus.exporter_selector"):
        Config(health={"exporter_selector": 'job="a"'}, source={"prometheus": {"exporter_selector": 'job="b"'}})


@pytest.mark.security
@pytest.mark.parametrize("key, query", [
    ("demand_query", 'count by (namespace) (DCGM_FI_DEV_GPU_UTIL{namespace!=""})'),
    ("capacity_query", "count(DCGM_FI_DEV_GPU_UTIL)"),
    ("known_nodes_query", "count by (Hostname) (max_over_time(DCGM_FI_DEV_GPU_UTIL[1d]))"),
    ("freshness_query", "max(timestamp(DCGM_FI_DEV_GPU_UTIL))"),
    ("missing_query", 'count by (namespace) (last_over_time(DCGM_FI_DEV_GPU_UTIL{$exporter}[15m]) unless on '
                      '(Hostname, gpu) DCGM_FI_DEV_GPU_UTIL)'),   # the second series is not selected
    ("capacity_by_type_query", 'count by (modelName) (DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"})'),
])
def test_a_query_that_reads_dcgm_without_the_selector_is_refused(key, query):
    with pytest.raises(ValidationError, match=rf"{key} reads DCGM_FI_DEV_GPU_UTIL without \{{\$exporter\}}"):
        Config(source={"prometheus": {key: query}})


@pytest.mark.security
def test_every_dcgm_family_is_checked_not_only_the_dev_fields():
    """The profiling fields (DCGM_FI_PROF_*, the default activity query's) are DCGM series a pod can forge too."""
    with pytest.raises(ValidationError, match=r"demand_query reads DCGM_FI_PROF_GR_ENGINE_ACTIVE without"):
        Config(source={"prometheus": {"demand_query": "count by (namespace) (DCGM_FI_PROF_GR_ENGINE_ACTIVE > 0)"}})
    with pytest.raises(ValidationError, match=r"activity_query reads DCGM_FI_PROF_GR_ENGINE_ACTIVE without"):
        Config(health={"activity_query": "DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_DEV_GPU_UTIL{$exporter} / 100"})


def test_a_health_query_without_the_selector_is_refused():
    with pytest.raises(ValidationError, match=r"activity_query reads DCGM_FI_DEV_GPU_UTIL without"):
        Config(health={"activity_query": "DCGM_FI_DEV_GPU_UTIL / 100"})


def test_queries_of_recorded_or_other_series_are_not_checked():
    """The shipped recording rules select the exporter themselves; a site's own metric is its own business."""
    cfg = Config(source={"prometheus": {"recording_rules": True, "freshness_query": "max(timestamp(up))",
                                        "capacity_query": "sum(my_gpus)"}},
                 health={"activity_query": "gpuas:job_gpu_activity:ratio"})
    assert cfg.source.prometheus.query("demand") == 'namespace:gpuas_gpus_allocated:count{job=""}'
    assert unselected_series('DCGM_FI_DEV_GPU_UTIL{ $exporter , gpu="0"} + DCGM_FI_DEV_FB_USED{$exporter}') == []


@pytest.mark.security
@pytest.mark.parametrize("bad", ['job="x"} or vector(1) or up{a="b"', "job=dcgm", '{job="x"}', 'job="x" or 1',
                                 "  ", '__name__="DCGM_FI_DEV_GPU_UTIL"', 'job=~"("',
                                 # a comment ends the query: the rest of each query would be cut off
                                 'job="dcgm-exporter"} offset 1h #', 'job="dcgm-exporter"} @ 100 #'])
def test_an_exporter_selector_that_is_not_label_matchers_is_refused(bad):
    """Refused as the selector it is (the error names the key's value), not later as a query it breaks: the
    ValidationError echoes its input, so matching the key's name alone would pass whatever refused it."""
    said = rf"exporter_selector {re.escape(repr(bad))} is not PromQL label matchers"
    with pytest.raises(ValidationError, match=said):
        Config(source={"prometheus": {"exporter_selector": bad}})
    with pytest.raises(ValidationError, match=said):
        Config(health={"exporter_selector": bad})
    with pytest.raises(ValidationError, match="exporter_selector"):
        Config(source={"prometheus": {"exporter_selector": ""}})   # empty: pydantic's min_length says it


@pytest.mark.parametrize("bad, why", [('job="a" or job="b"', "`or` between matchers"), ("  ", "no matcher"),
                                      ('__name__="DCGM_FI_DEV_GPU_UTIL"', "metric name must not be set twice"),
                                      ('job="a"} offset 1h #', "more than label matchers")])
def test_the_selectors_refusal_says_why(bad, why):
    with pytest.raises(ValidationError, match=re.escape(why)):
        Config(source={"prometheus": {"exporter_selector": bad}})


@pytest.mark.parametrize("line, said", [
    ('capacity_query = "count(DCGM_FI_DEV_GPU_UTIL)"', "capacity_query reads DCGM_FI_DEV_GPU_UTIL without {$exporter}"),
    ('request_rate_query = "sum by (namespace) (rate(nginx_ingress_controller_requests[1m]))"',
     "request_rate_query reads nginx_ingress_controller_requests without {$ingress}"),
])
def test_check_config_refuses_an_unselected_query_in_one_line(tmp_path, line, said):
    out = check_config_refusal(tmp_path, line)
    assert "source.prometheus" in out and said in out


def check_config_refusal(tmp_path, line: str) -> str:
    """check-config's one line (exit 2, no traceback) on a Prometheus source config holding `line`."""
    path = tmp_path / "c.toml"
    path.write_text(f'[source]\nkind = "prometheus"\n[source.prometheus]\n{line}\n')
    res = CliRunner().invoke(cli, ["--config", str(path), "check-config"])
    assert res.exit_code == 2, res.output
    out = res.output.strip()
    assert "\n" not in out and "Traceback" not in out
    return out


@pytest.mark.security
@pytest.mark.parametrize("query, series", [
    ("sum by (namespace) (rate(nginx_ingress_controller_requests[1m]))", "nginx_ingress_controller_requests"),
    ('sum by (namespace) (rate(nginx_ingress_controller_requests{job="ingress-nginx"}[1m]))',
     "nginx_ingress_controller_requests"),                                 # a literal job, not the one key
    ("sum by (namespace) (rate(a{$ingress}[1m])) or sum by (namespace) (rate(b[1m]))", "b"),   # one of two
    ('sum by (namespace) (rate({__name__="nginx_ingress_controller_requests"}[1m]))', "a selector {...}"),
])
def test_a_request_rate_query_without_the_ingress_selector_is_refused(query, series):
    """A tenant's pod can expose the ingress' request metric for its own namespace, and summed by namespace its
    samples add to the tenant's rate: every series the query reads must select the ingress' own ({$ingress})."""
    with pytest.raises(ValidationError, match=rf"request_rate_query reads {re.escape(series)} without "
                                              r"\{\$ingress\}"):
        Config(source={"prometheus": {"request_rate_query": query}})


def test_the_ingress_selector_replaces_the_placeholder_in_the_request_rate_query():
    q = ('sum by (namespace) (rate(nginx_ingress_controller_requests{$ingress, status!~"5.."}[5m] offset 1m)) '
         '/ on (namespace) group_left max by (namespace) (up{$ingress})')
    pc = Config(source={"prometheus": {"request_rate_query": q}}).source.prometheus
    assert pc.ingress_selector == 'job="ingress-nginx"'
    assert pc.query("request_rate") == q.replace("$ingress", 'job="ingress-nginx"')
    pc = Config(source={"prometheus": {"request_rate_query": q, "ingress_selector": 'job="traefik"'}}).source.prometheus
    assert pc.query("request_rate") == q.replace("$ingress", 'job="traefik"')
    from daemon.config.models_source import unselected_rates

    assert unselected_rates('label_replace(sum by (ingress) (rate(x{$ingress}[5m:1m])), "namespace", "$1", '
                            '"ingress", "(.*)") * 1e3 > bool Inf') == []


@pytest.mark.security
@pytest.mark.parametrize("bad", ['job="x"} or vector(1) or up{a="b"', "job=ingress", '{job="x"}'])
def test_an_ingress_selector_that_is_not_label_matchers_is_refused(bad):
    with pytest.raises(ValidationError, match=rf"ingress_selector {re.escape(repr(bad))} is not PromQL label"):
        Config(source={"prometheus": {"ingress_selector": bad}})


# Queries the hand scan let through although they read a series without the selector: a keyword used as a metric
# name (Prometheus reads `sum(offset)` as the sum of a metric named offset), braces with no metric name (they match
# every name, the DCGM ones too) and an `or` between matchers (VictoriaMetrics' and the parser's syntax: each
# alternative is a selector of its own).
KEYWORD_NAMED = [
    ("request_rate_query", "sum by (namespace) (offset)", "offset"),
    ("request_rate_query", "sum by (namespace) (rate(ingress_rps{$ingress}[1m]) or rate(by[1m]))", "by"),
    ("request_rate_query", "sum by (namespace) (ingress_rps{$ingress} or start)", "start"),
    ("request_rate_query", "sum by (namespace) (ingress_rps{$ingress} or end)", "end"),
    ("request_rate_query", "sum by (namespace) (ingress_rps{$ingress} or without)", "without"),
    ("request_rate_query", 'sum by (namespace) (ingress_rps{$ingress or namespace="team-a"})', "ingress_rps"),
    ("demand_query", 'count by (namespace) ({namespace!="", gpu!=""})', 'a selector {namespace!="",gpu!=""}'),
    ("capacity_query", 'count(DCGM_FI_DEV_GPU_UTIL{$exporter or gpu!=""})', "DCGM_FI_DEV_GPU_UTIL"),
]


@pytest.mark.security
@pytest.mark.parametrize("key, query, series", KEYWORD_NAMED)
def test_a_series_the_hand_scan_did_not_see_is_refused(key, query, series):
    placeholder = "$ingress" if key == "request_rate_query" else "$exporter"
    with pytest.raises(ValidationError, match=rf"{key} reads {re.escape(series)} without "
                                              rf"\{{{re.escape(placeholder)}\}}"):
        Config(source={"prometheus": {key: query}})


@pytest.mark.parametrize("key, query", [
    ("request_rate_query", 'sum by (namespace) (rate(ingress_rps{$ingress, code!~"5.."}[5m] offset 1m @ end()))'),
    ("request_rate_query", 'sum by (namespace) (ingress_rps{$ingress, a="1" or $ingress, b="2"})  # "or" {x}'),
    ("request_rate_query", "max_over_time(sum by (namespace) (rate(ingress_rps{$ingress}[1m]))[10m:1m]) * 1"),
    ("demand_query", 'count by (namespace) ({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_.*", $exporter})'),
    ("demand_query", "count by (namespace) (gpuas:custom{job=\"\"} or on (namespace) my_site_metric)"),
    # a DCGM name in a string is text, not a series (the hand scan refused it)
    ("demand_by_type_query", 'count by (namespace, modelName) (label_replace(DCGM_FI_DEV_GPU_UTIL{$exporter, '
                             'namespace!=""}, "read", "DCGM_FI_DEV_GPU_UTIL", "", ""))'),
])
def test_a_query_whose_every_series_is_selected_is_accepted(key, query):
    """Selected in a range, a subquery, with offset and @, in each `or` alternative, by a name pattern; recorded
    series and a site's own metrics are not DCGM series; strings and comments are not series."""
    pc = Config(source={"prometheus": {key: query}}).source.prometheus
    assert pc.query(key.removesuffix("_query")) == query.replace("$ingress", 'job="ingress-nginx"').replace(
        "$exporter", 'job="dcgm-exporter"')


@pytest.mark.parametrize("line, key, said", [
    ('request_rate_query = "sum by (namespace (ingress_rps{$ingress})"', "request_rate_query",
     "unclosed left parenthesis"),
    ('demand_query = "count by (namespace) (DCGM_FI_DEV_GPU_UTIL{$exporter, gpu=~\\"(\\"})"', "demand_query",
     "illegal regex"),
    ('capacity_query = "count(DCGM_FI_DEV_GPU_UTIL $exporter)"', "capacity_query", "invalid promql query"),
    ('[health]\nxid_query = "DCGM_FI_DEV_XID_ERRORS{$exporter}["', "health.xid_query",
     "unexpected end of input inside brackets"),
])
def test_a_query_that_does_not_parse_is_refused_in_one_line_with_the_parsers_message(tmp_path, line, key, said):
    """Prometheus would answer each with a parse error every cycle: refused at start instead, naming the key."""
    out = check_config_refusal(tmp_path, line)
    assert f"{key} is not a PromQL query Prometheus can run" in out and said in out, out


def test_the_placeholders_are_replaced_in_one_pass_as_checked():
    """What is checked is what is sent: a selector whose value holds the other placeholder's text is sent as
    written (replaced one after the other, `$ingress` inside the exporter's selector became a broken query)."""
    pc = Config(source={"prometheus": {"exporter_selector": 'job="$ingress"'}}).source.prometheus
    assert pc.query("capacity") == 'count(DCGM_FI_DEV_GPU_UTIL{job="$ingress"})'


def test_a_placeholder_outside_braces_is_refused_in_one_line():
    """Sent, the replacement string holds the selector's text and parses, but selects nothing: said so, with the
    key."""
    query = "label_replace(ingress_rps{$ingress}, \"by\", \"$ingress\", \"\", \"\")"
    with pytest.raises(ValidationError, match=r"request_rate_query: \$ingress stands outside a selector's braces"):
        Config(source={"prometheus": {"request_rate_query": query, "ingress_selector": "job='ingress-nginx'"}})


@pytest.mark.security
@pytest.mark.parametrize("query, said", [
    ("(" * 20_000 + "count(DCGM_FI_DEV_GPU_UTIL{$exporter})" + ")" * 20_000, "40,048 characters, over the 8,192"),
    ("-" * 8_000 + "count(DCGM_FI_DEV_GPU_UTIL{$exporter})", "8,002 brackets and operators, over the 512"),
])
def test_a_query_the_parser_would_crash_on_is_refused_in_one_line(tmp_path, query, said):
    """promql-parser recurses per level of nesting: 20,000 parentheses (or a chain of `-`) overflowed its stack and
    the process died of a segfault, no line at all (on a reload, the running daemon). Refused before the parse.
    In a process of its own: on the old code this test's own process would have died."""
    import subprocess
    import sys

    path = tmp_path / "c.toml"
    path.write_text(f'[source]\nkind = "prometheus"\n[source.prometheus]\ncapacity_query = "{query}"\n')
    res = subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(path), "check-config"],
                         capture_output=True, text=True, timeout=120)
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, (res.returncode, out[-300:])
    assert "\n" not in out and f"capacity_query: too large to check: {said}" in out, out[-300:]


@pytest.mark.parametrize("depth", [65, 200])
def test_a_query_nested_deeper_than_the_walk_can_take_is_refused(tmp_path, depth):
    """The parser's `walk` takes about the cube of the depth (500 nested parentheses, 1,001 characters: 4 s; 1,000:
    over 30 s), at each start, reload and check-config: past MAX_DEPTH levels the query is refused, unwalked."""
    inner = "count(DCGM_FI_DEV_GPU_UTIL{$exporter})"
    out = check_config_refusal(tmp_path, f'capacity_query = "{"(" * depth}{inner}{")" * depth}"')
    assert "capacity_query: too large to check: nested more than 64 levels deep" in out, out
    ok = "(" * 60 + inner + ")" * 60   # as deep as a site's query never is, and still checked
    assert Config(source={"prometheus": {"capacity_query": ok}}).source.prometheus.capacity_query == ok
