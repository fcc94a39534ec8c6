"""The config sections that say where demand is read and how it is forecast: the source (Prometheus, its
queries and the exporter selector that keeps them from reading forged series), history, the forecaster and
retrain."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from daemon.config.models_base import Tier
from daemon.config.models_policy import SimulatorConfig
from gateway.configfile import Strict as _Strict

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?\s*")   # PromQL label matchers, as inside {...}


EXPORTER = "$exporter"   # in a query: replaced by source.prometheus.exporter_selector
_DCGM_SERIES = re.compile(r"\bDCGM_[A-Za-z0-9_]*")
_BRACES = re.compile(r"\{[^{}]*\}")   # outside strings and comments, a selector's matchers
_NAME_PATTERN = re.compile(r"__name__\s*(?:=~|!~|!=)\s*(?:\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`)")
# queries read each cycle, checked to select the exporter (util_query and nodes_query are read by no version)
PROMETHEUS_QUERIES = ("demand", "missing", "capacity", "known_nodes", "freshness", "demand_by_type",
                      "usage_by_type", "capacity_by_type", "nodes_by_type")


def unselected_series(query: str) -> list[str]:
    """The raw DCGM series a query reads without ``{$exporter}`` among its matchers.

    Any scrape target can expose a series named DCGM_FI_DEV_GPU_UTIL (a tenant's pod does it with one line of
    text), so a raw DCGM name counts only with the exporter's own labels; a query that reads a recorded series
    (gpuas:..., namespace:gpuas_...) is not checked, as the shipped recording rules select the exporter. A DCGM name
    inside braces (`{__name__="DCGM_..."}`) is selected by those braces; a name pattern (`__name__=~`, `!~`, `!=`)
    may match DCGM names, so its braces need $exporter too. Comments are dropped first: Prometheus ignores them, so
    a `$exporter` in one selects nothing."""
    text = without_comments(query, keep_length=True)
    blank = without_comments(query, strings="", keep_length=True)   # the same places, strings' insides blanked
    braces = [(m.start(), m.end(), EXPORTER in m.group()) for m in _BRACES.finditer(blank)]
    out = []
    for m in _DCGM_SERIES.finditer(text):
        inside = next((sel for a, b, sel in braces if a < m.start() < b), None)
        if inside is None:   # a name outside braces: selected by the braces that follow it
            rest = blank[m.end():].lstrip()
            inside = rest.startswith("{") and EXPORTER in rest[:rest.find("}") + 1]
        if not inside:
            out.append(m.group())
    for a, b, selected in braces:
        pattern = _NAME_PATTERN.search(text[a:b])
        if pattern and not selected:
            out.append(f"a selector {pattern.group()}")
    return out


def refuse_unselected(queries: dict[str, str | None]) -> None:
    """Raise naming the first query whose raw DCGM series do not select the exporter (unselected_series)."""
    for key, text in queries.items():
        bad = unselected_series(text or "")
        if bad:
            fix = f"add {EXPORTER} to its braces" if bad[0].startswith("a selector") else \
                f"write {bad[0]}{{{EXPORTER}, ...}}"
            raise ValueError(f"{key} reads {bad[0]} without {{{EXPORTER}}}: any pod Prometheus scrapes can "
                             f"expose that name and forge demand or capacity; {fix} "
                             "(source.prometheus.exporter_selector selects the DCGM exporter's series)")


INGRESS = "$ingress"   # in request_rate_query: replaced by source.prometheus.ingress_selector
# PromQL's strings and comments, in one pass from the left: a `#` inside a string is text, a quote inside a comment
# is commented out (a comment runs to the end of its line)
_STRINGS_COMMENTS = re.compile(r'("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`)|#[^\n]*')
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_SELECTOR = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)?\s*(\{[^{}]*\})?")
_CALL = re.compile(r"\s*(?:\(|(?:by|without)\b)", re.I)   # after a name: it is a function or an aggregation
_NOT_SERIES = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and",
                         "or", "unless", "atan2", "inf", "nan", "start", "end"})


def without_comments(query: str, strings: str | None = None, keep_length: bool = False) -> str:
    """`query` with its comments blanked (and its strings' insides replaced by `strings` when given), read as
    Prometheus lexes it: a comment hides what follows on its line from Prometheus, not from a scan that reads every
    `{`. keep_length: blanked with as many spaces, so that a place in the result is the same place in `query`."""
    def sub(m: re.Match) -> str:
        if not m.group(1):
            return " " * len(m.group()) if keep_length else " "
        if strings is None:
            return m.group()
        inner = " " * (len(m.group()) - 2) if keep_length else strings
        return m.group()[0] + inner + m.group()[-1]
    return _STRINGS_COMMENTS.sub(sub, query)


def unselected_rates(query: str) -> list[str]:
    """The series a request-rate query reads without ``{$ingress}`` among their matchers (a bare `{...}` is named
    by its matchers).

    Prometheus scrapes tenant pods too (their annotations ask for it), and a pod can expose the ingress' metric name
    with its own namespace: summed by namespace, its samples add to the tenant's rate. Every vector selector must
    therefore select the ingress' own series. Strings, comments, durations and the label lists of by/without/on/
    ignoring/group_* are not selectors; a name followed by `(` is a function. Outside strings and comments a `{`
    opens nothing but a selector, so every `{...}` must carry $ingress, also one after a keyword (`x or {...}`)."""
    text = _LABEL_LISTS.sub(" ", without_comments(query, strings=""))
    out = []
    for m in _SELECTOR.finditer(text):
        name, matchers = m.group(1), m.group(2)
        keyword = (name or "").lower() in _NOT_SERIES
        if matchers is None and (not name or keyword or _CALL.match(text, m.end())):
            continue   # no selector: a keyword, a function or an aggregation
        if matchers is None or INGRESS not in matchers:
            out.append(name if name and not keyword else "a selector {...}")
    return out


class PrometheusConfig(_Strict):
    url: str = Field("http://127.0.0.1:9090", description="base URL of the Prometheus HTTP API (the daemon adds "
                     "/api/v1/...); a user:password in it is shown as `***` in logs, /healthz and the console")
    timeout_s: float = Field(5.0, gt=0, description="seconds one request may take to connect, and then between bytes "
                             "of the answer, before it fails")
    retries: int = Field(2, ge=0, description="tries again of a request that failed (no connection, a timeout, a "
                         "500/502/503/504), with backoff from 0.2 s; then the cycle's read is a source error and "
                         "the last good plan is kept")
    exporter_selector: str = Field('job="dcgm-exporter"', min_length=1,
                                   description="PromQL label matchers that select the DCGM exporter's own series, "
                                   "put in place of $exporter in every query that reads a DCGM series (demand, "
                                   "capacity, nodes, freshness and [health]): series a tenant's pods expose under "
                                   "the DCGM names must not count. A query that reads a DCGM series without "
                                   "{$exporter} is refused. Keep honor_labels off for tenant scrape jobs, so their "
                                   "`job` label cannot be the exporter's")
    ingress_selector: str = Field('job="ingress-nginx"', min_length=1,
                                  description="PromQL label matchers that select the ingress controller's own "
                                  "series, put in place of $ingress in request_rate_query: requests a tenant's pods "
                                  "expose under the ingress' metric name must not add to its rate. A "
                                  "request_rate_query whose series lack {$ingress} is refused")
    tenant_label: str = Field("namespace", description="label naming the tenant in the demand and missing queries' "
                              "answers (their `by (...)`); its values are the tenant names. Default: the pod's "
                              "namespace, as DCGM exporter labels an allocated GPU")
    node_label: str = Field("Hostname", description="label naming the node in known_nodes_query's answer (DCGM "
                            "exporter's Hostname): the names an alert's node is checked against")
    disable_ssl: bool = Field(False, description="do not verify Prometheus' TLS certificate (https URLs); for a "
                              "test setup only: whoever sits in the path could then feed the daemon false demand")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent with every request, e.g. "
                                    "Authorization for an authenticating proxy or X-Scope-OrgID for Mimir, Cortex "
                                    "or Thanos tenancy; kept in the config file in the clear")
    max_response_mb: float = Field(64.0, gt=0, description="a bigger answer is a SourceError (read in chunks)")
    chunk_steps: int = Field(720, ge=1, description="steps per query_range request (bounds each answer's size)")
    # Demand of a tenant = GPUs allocated to it, busy or idle. DCGM exporter labels a GPU with the namespace
    # of the pod it is allocated to (empty when free).
    demand_query: str = Field('count by (namespace) (DCGM_FI_DEV_GPU_UTIL{$exporter, namespace!=""})',
                              description="PromQL: GPUs allocated per tenant (by tenant_label), busy or idle: the "
                              "demand that is forecast and planned for")
    # Tenants with a GPU seen in the last 15m whose series is not fresh now (its node's scrape failed, so
    # Prometheus marked it stale, or the exporter dropped it): missing, not idle.
    missing_query: str = Field('count by (namespace) ('
                               'last_over_time(DCGM_FI_DEV_GPU_UTIL{$exporter, namespace!=""}[15m])'
                               ' unless on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL{$exporter})',
                               description="PromQL: per tenant, GPUs it held in the last 15 minutes whose series is "
                               "not fresh now (a failed node scrape, a dropped series): that tenant is missing "
                               "(NaN), not idle")
    util_query: str = Field('avg by (namespace) (DCGM_FI_DEV_GPU_UTIL{$exporter, namespace!=""})',
                            description="not read by this version: demand is GPUs allocated, busy or idle, and no "
                            "utilization is used; accepted so that files which set it stay valid")
    capacity_query: str = Field("count(DCGM_FI_DEV_GPU_UTIL{$exporter})", description="PromQL: the cluster's healthy "
                                "GPUs (the plan's capacity; with a scheduler's node view, at most the GPUs it lists, "
                                "per node where the answer carries node_label); a step where it has no value "
                                "counts as not scraped, every "
                                "tenant missing there")
    nodes_query: str = Field("count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})",
                             description="not read by this version: "
                             "the nodes come from the scheduler, else from known_nodes_query; accepted so that files "
                             "which set it stay valid")
    # nodes seen within a day: a node that just died is still known (alerts may only name known nodes)
    known_nodes_query: str = Field("count by (Hostname) (max_over_time(DCGM_FI_DEV_GPU_UTIL{$exporter}[1d]))",
                                   description="PromQL, by node_label: nodes seen within a day, so one that just "
                                   "died is still known. When no live scheduler actuator lists the nodes, a "
                                   "node-down alert may only name one of these")
    freshness_query: str = Field("max(timestamp(DCGM_FI_DEV_GPU_UTIL{$exporter}))",
                                 description="PromQL: time of the newest "
                                 "sample; older than cycle.stale_after_s makes the snapshot stale (no new "
                                 "preemptions)")
    # a mixed fleet (issue 24): the same series per (tenant, GPU model); DCGM exporter labels each GPU with
    # modelName ("NVIDIA A100-SXM4-80GB"), which [fleet] types/aliases turn into a type
    type_label: str = Field("modelName", description="label naming the GPU model in the *_by_type queries' answers "
                            "(DCGM exporter's modelName; a MIG instance's profile needs its own label, e.g. "
                            "GPU_I_PROFILE); its values are matched to fleet.types through fleet.aliases, a value "
                            "that matches none is type \"unknown\" and reported")
    demand_by_type_query: str = Field('count by (namespace, modelName) '
                                      '(DCGM_FI_DEV_GPU_UTIL{$exporter, namespace!=""})',
                                      description="PromQL: GPUs allocated per tenant and GPU model (by tenant_label "
                                      "and type_label), busy or idle: the demand per type of a mixed fleet")
    usage_by_type_query: str = Field('count by (namespace, modelName) '
                                     '(DCGM_FI_DEV_GPU_UTIL{$exporter, namespace!=""} > 0)',
                                     description="PromQL: GPUs in use (utilization above 0) per tenant and GPU model")
    capacity_by_type_query: str = Field("count by (modelName) (DCGM_FI_DEV_GPU_UTIL{$exporter})", description="PromQL: "
                                        "healthy GPUs per GPU model (by type_label)")
    nodes_by_type_query: str = Field("count by (Hostname, modelName, namespace) (DCGM_FI_DEV_GPU_UTIL{$exporter})",
                                     description="PromQL: GPUs per node, GPU model and tenant (by node_label, "
                                     "type_label and tenant_label; no tenant = free). Read on a mixed fleet only when "
                                     "no scheduler actuator lists the nodes: it gives the policy each node's type, "
                                     "so the plan's holds are said per type")
    # issue 27: the shadow report's throttled share needs each tenant's request rate; no default query (the
    # request metric depends on the ingress in front of the tenants), so unset means unknown, never 0
    request_rate_query: str | None = Field(None, min_length=1, description="PromQL: requests per second per tenant "
                                           "(by tenant_label), read once per cycle, e.g. an ingress controller's "
                                           "`sum by (namespace) (rate(nginx_ingress_controller_requests{$ingress}"
                                           "[1m]))`; every series it reads must carry {$ingress} (ingress_selector), "
                                           "else the config is refused; "
                                           "fills the request rates the shadow report's throttled share is counted "
                                           "from. Unset: request rates are unknown. A tenant absent from the answer "
                                           "is unknown (NaN), not 0; a failed or malformed answer leaves them all "
                                           "unknown for that cycle (logged), never fails the cycle")
    # true when deploy/prometheus/gpu-autoscaler-recording.yml is loaded: the queries that are not set
    # explicitly read its pre-aggregated series instead of every GPU's raw series
    recording_rules: bool = Field(False, description="true once deploy/prometheus/gpu-autoscaler-recording.yml is "
                                  "loaded: demand_query, missing_query, capacity_query and the *_by_type queries, "
                                  "where not set here, read "
                                  "its pre-aggregated series instead of every GPU's raw series (far cheaper at "
                                  "thousands of GPUs)")

    @model_validator(mode="before")
    @classmethod
    def _recorded_defaults(cls, data):
        if isinstance(data, dict) and data.get("recording_rules") is True:
            data = {**RECORDED_QUERIES, **data}
        return data

    @model_validator(mode="after")
    def _queries_select_the_exporter(self) -> "PrometheusConfig":
        if not _MATCHERS.fullmatch(self.exporter_selector):
            raise ValueError(f"exporter_selector {self.exporter_selector!r} is not PromQL label matchers "
                             '(name="value", name=~"regex", ... separated by commas, no braces)')
        refuse_unselected({f"{q}_query": getattr(self, f"{q}_query")
                                                for q in PROMETHEUS_QUERIES})
        if not _MATCHERS.fullmatch(self.ingress_selector):
            raise ValueError(f"ingress_selector {self.ingress_selector!r} is not PromQL label matchers "
                             '(name="value", name=~"regex", ... separated by commas, no braces)')
        bad = unselected_rates(self.request_rate_query or "")
        if bad:
            raise ValueError(f"request_rate_query reads {bad[0]} without {{{INGRESS}}}: any pod Prometheus scrapes "
                             "can expose that name and add to its tenant's request rate; write "
                             f"{bad[0]}{{{INGRESS}, ...}} (source.prometheus.ingress_selector selects the ingress "
                             "controller's series)")
        return self

    def selects(self, query: str) -> str:
        """`query` with $exporter replaced by exporter_selector and $ingress by ingress_selector: what is sent to
        Prometheus."""
        return query.replace(EXPORTER, self.exporter_selector).replace(INGRESS, self.ingress_selector)

    def query(self, which: str) -> str:
        """The configured ``<which>_query``, as sent to Prometheus (selects)."""
        return self.selects(getattr(self, f"{which}_query"))


# What the daemon reads when recording_rules = true (the series deploy/prometheus/gpu-autoscaler-recording.yml records).
# A recorded series aggregates the job label away; any scraped series carries its scrape job's, so job="" keeps a
# pod that exposes these names itself (one line of text each) out of demand, missing and capacity.
RECORDED = '{job=""}'
RECORDED_QUERIES = {
    "demand_query": "namespace:gpuas_gpus_allocated:count" + RECORDED,
    "missing_query": "namespace:gpuas_gpus_stale:count" + RECORDED,
    "capacity_query": "cluster:gpuas_gpus:count" + RECORDED,
    "demand_by_type_query": "namespace_model:gpuas_gpus_allocated:count" + RECORDED,
    "usage_by_type_query": "namespace_model:gpuas_gpus_busy:count" + RECORDED,
    "capacity_by_type_query": "model:gpuas_gpus:count" + RECORDED,
}


class HistoryConfig(_Strict):
    """The daemon's own rolling history of the Prometheus demand series (daemon/sources/history.py)."""
    incremental: bool = Field(True, description="false: re-read the whole history window every cycle")
    path: Path | None = Field(None, description="SQLite file; default: next to state.path, '<stem>-history.sqlite'")
    overlap_steps: int = Field(1, ge=1, description="already-read steps read again each cycle (late samples)")
    backfill_chunk_steps: int = Field(720, ge=1, description="steps per request while backfilling")


class SourceConfig(_Strict):
    kind: Literal["simulator", "prometheus"] = Field("simulator", description="where demand and the cluster's state "
                                                     "come from: simulator (an embedded simulated cluster, no "
                                                     "servers needed) or prometheus (DCGM exporter metrics; jobs "
                                                     "and nodes from the Slurm or Kubernetes actuator)")
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)


class ForecastQualityConfig(_Strict):
    window: int = Field(60, ge=1, description="scored forecasts the live quality is computed over")
    coverage_min: float = Field(0.8, gt=0, lt=1, description="p90 coverage below this is degraded")
    coverage_max: float = Field(0.98, gt=0, le=1, description="p90 coverage above this is degraded (too wide)")
    fallback_after_cycles: int = Field(10, ge=1, description="cycles out of bounds before the best baseline takes over")
    min_scored: int = Field(10, ge=1, description="scored forecasts needed before quality is judged")
    peak_min_observed: float = Field(0.5, gt=0, le=1, description="a lead window's realised peak is scored (live, "
                                     "and by retrain) only where at least this share of its steps was observed: "
                                     "the peak of the observed steps; a missing step is never read as zero")


class ForecasterConfig(_Strict):
    kind: Literal["auto", "lstm", "seasonal_naive", "ets", "none"] = Field(
        "auto", description="auto: the model retrain scored best on this cluster, else the best baseline on the "
        "start-up history; lstm, seasonal_naive, ets: that one; none: no forecast, the policy plans on current "
        "demand only (the replay's reactive strategy, what `simulate --recommend` names when the forecast does not "
        "help on this cluster)")
    model_dir: Path = Field(Path("models"), description="the models and their manifest (`retrain` writes them); "
                            "relative: to the working directory (`make run` runs in the checkout, whose "
                            "models/ holds the shipped model)")
    quantiles: tuple[float, ...] = (0.5, 0.9, 0.99)
    season_steps: int = Field(1440, ge=2, description="steps in one season (a day at 1-min resolution)")
    quality: ForecastQualityConfig = Field(default_factory=ForecastQualityConfig)
    torch_threads: int = Field(1, ge=1, description="torch intra-op threads for the cycle's forecast "
                                                    "(1: fastest on a small or shared machine, bench/cycle_bench.py)")

    @field_validator("quantiles")
    @classmethod
    def _quantiles_ok(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v or any(not 0 < q < 1 for q in v) or list(v) != sorted(set(v)):
            raise ValueError("quantiles must be increasing values strictly between 0 and 1")
        return v


class RetrainConfig(_Strict):
    enabled: bool = False
    cron: str = "17 3 * * *"
    epochs: int = Field(8, ge=1)
    min_improvement: float = Field(0.0, ge=0, lt=1, description="required relative gain over the best baseline "
                                   "(in the score `select_by` ranks by: lower is better)")
    select_by: Literal["wql", "peak", "replay"] = Field("peak", description="what retrain ranks the candidates by: "
                                                        "`wql` the per-step weighted quantile loss; `peak` the "
                                                        "quantile loss of each tenant's peak over the policy's two "
                                                        "lead windows (their mean); `replay` the cost of a replay "
                                                        "of the held-out history through the policy with each of "
                                                        "the `replay_candidates` best by peak loss")
    peak_head: bool = Field(True, description="train the LSTM with a direct quantile head for the peak over the "
                            "policy's lead windows (lead_time_steps, preempt_lead_steps), on realised peaks")
    peak_weight: float = Field(1.0, ge=0, description="weight of the peak head's loss next to the per-step loss")
    peak_calibration: list[Literal["moving", "all"]] = Field(
        default_factory=lambda: ["moving", "all"],
        description="which per-tenant conformal peak calibrations are scored as candidates: `moving` learns each "
                    "tenant's peak shift from the windows where its series moved (`+peak`), `all` from every "
                    "window (`+peak_all`); empty: none")
    replay_candidates: int = Field(6, ge=1, description="select_by = replay: how many candidates (the best by "
                                   "peak loss) are replayed")
    replay_forecast_every: int = Field(1, ge=1, description="select_by = replay: forecast every this many steps "
                                       "of the replay (1: every step, as the daemon does)")
    replay_refresh_every: int = Field(10, ge=1, description="select_by = replay: a candidate's spreads and peak "
                                      "shifts are recomputed every this many of the replay's forecasts (the daemon: "
                                      "every 10 cycles, in the background). Each recomputation forecasts from 256 "
                                      "past origins, most of the replay's time; but the ranking moves with it "
                                      "(docs/forecasting.md: at 60 Helios' replay picked another forecaster)")
    replay_tier_weights: dict[Tier, float] = Field(
        default_factory=lambda: {"high": 4.0, "normal": 1.0, "low": 0.25},
        description="select_by = replay: the replay's cost is the sum over tiers of weight x unmet GPU-minutes, "
                    "plus the GPU-minutes of work lost to preemption")

    @field_validator("replay_tier_weights")
    @classmethod
    def _weights_ok(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()):
            raise ValueError("tier weights must be >= 0")
        return v
