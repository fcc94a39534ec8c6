"""The config sections that say where demand is read and how it is forecast: the source (Prometheus, its
queries and the exporter selector that keeps them from reading forged series), history, the forecaster and
retrain."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from daemon.config.models_base import Tier
from daemon.config.models_policy import SimulatorConfig
from daemon.config.promql_selectors import (
    DEFAULT_EXPORTER,
    DEFAULT_INGRESS,
    EXPORTER,
    INGRESS,
    Unparsable,
    any_name,
    dcgm_name,
    label_matchers,
    substitute,
    unselected,
)
from gateway.configfile import Strict as _Strict

log = logging.getLogger("gpu_autoscaler.config")

# queries read each cycle, checked to select the exporter (util_query is read by no version)
PROMETHEUS_QUERIES = ("demand", "missing", "capacity", "nodes", "known_nodes", "freshness", "demand_by_type",
                      "usage_by_type", "capacity_by_type", "nodes_by_type")


def _placeholders(exporter: str, ingress: str) -> dict[str, str]:
    return {EXPORTER: exporter, INGRESS: ingress}


def unselected_series(query: str, exporter: str = DEFAULT_EXPORTER, ingress: str = DEFAULT_INGRESS) -> list[str]:
    """The raw DCGM series a query reads without ``{$exporter}`` among its matchers (promql_selectors.dcgm_name:
    a DCGM name, or a selector whose name is not fixed); ValueError when it does not parse."""
    return unselected(query, EXPORTER, _placeholders(exporter, ingress), dcgm_name)


def unselected_rates(query: str, exporter: str = DEFAULT_EXPORTER, ingress: str = DEFAULT_INGRESS) -> list[str]:
    """The series a request-rate query reads without ``{$ingress}`` among their matchers: every one counts, as a
    tenant's pod can expose the ingress' metric with its own namespace and, summed by namespace, add to its rate.
    ValueError when it does not parse."""
    return unselected(query, INGRESS, _placeholders(exporter, ingress), any_name)


def _checked(key: str, query: str, placeholder: str, check: Callable[[str], list[str]]) -> list[str]:
    """check(query), its ValueError (the parser's) said in one line naming the key."""
    try:
        return check(query)
    except Unparsable as exc:
        raise ValueError(f"{key} is not a PromQL query Prometheus can run ({placeholder} replaced by its selector): "
                         f"{exc}") from None
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


def refuse_unselected(queries: dict[str, str], exporter: str, ingress: str) -> None:
    """Raise naming the first query whose raw DCGM series do not select the exporter (unselected_series), or that
    does not parse."""
    for key, text in queries.items():
        bad = _checked(key, text, EXPORTER, lambda q: unselected_series(q, exporter, ingress))
        if bad:
            fix = f"add {EXPORTER} to its braces" if bad[0].startswith("a selector") else \
                f"write {bad[0]}{{{EXPORTER}, ...}}"
            raise ValueError(f"{key} reads {bad[0]} without {{{EXPORTER}}}: any pod Prometheus scrapes can "
                             f"expose that name and forge demand or capacity; {fix} "
                             "(source.prometheus.exporter_selector selects the DCGM exporter's series)")


def _refuse_bad_selector(key: str, selector: str) -> None:
    try:
        label_matchers(selector)
    except ValueError as exc:
        raise ValueError(f"{key} {selector!r} is not PromQL label matchers ({exc}; write name=\"value\", "
                         'name=~"regex", ... separated by commas, no braces)') from None


class PrometheusConfig(_Strict):
    url: str = Field("http://127.0.0.1:9090", description="base URL of the Prometheus HTTP API (the daemon adds "
                     "/api/v1/...); a user:password in it is shown as `***` in logs, /healthz and the console")
    timeout_s: float = Field(5.0, gt=0, description="seconds one request may take to connect, and then between bytes "
                             "of the answer, before it fails")
    retries: int = Field(2, ge=0, description="tries again of a request that failed (no connection, a timeout, a "
                         "500/502/503/504), with backoff from 0.2 s; then the cycle's read is a source error and "
                         "the last good plan is kept")
    exporter_selector: str = Field(DEFAULT_EXPORTER, min_length=1,
                                   description="PromQL label matchers that select the DCGM exporter's own series, "
                                   "put in place of $exporter in every query that reads a DCGM series (demand, "
                                   "capacity, nodes, freshness and [health]): series a tenant's pods expose under "
                                   "the DCGM names must not count. A query that reads a DCGM series without "
                                   "{$exporter} is refused. Keep honor_labels off for tenant scrape jobs, so their "
                                   "`job` label cannot be the exporter's")
    ingress_selector: str = Field(DEFAULT_INGRESS, min_length=1,
                                  description="PromQL label matchers that select the ingress controller's own "
                                  "series, put in place of $ingress in request_rate_query: requests a tenant's pods "
                                  "expose under the ingress' metric name must not add to its rate. A "
                                  "request_rate_query whose series lack {$ingress} is refused")
    tenant_label: str = Field("namespace", description="label naming the tenant in the demand and missing queries' "
                              "answers (their `by (...)`); its values are the tenant names. Default: the pod's "
                              "namespace, as DCGM exporter labels an allocated GPU. Beside a kubernetes or kueue "
                              "actuator, a namespace (namespace or exported_namespace) is read as the tenant whose "
                              "k8s_namespace it is, and one called like a tenant of another namespace as no tenant's; "
                              "otherwise, beside a slurm actuator, a value is an account, read as the tenant whose "
                              "slurm_account it is (one called like a tenant of another account: no tenant's)")
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
                            "utilization is used; accepted so that files which set it stay valid (one WARNING line at "
                            "load says so)")
    capacity_query: str = Field("count(DCGM_FI_DEV_GPU_UTIL{$exporter})", description="PromQL: the cluster's healthy "
                                "GPUs (the plan's capacity; with a scheduler's node view, at most the GPUs it lists, "
                                "per node where the answer carries node_label); a step where it has no value "
                                "counts as not scraped, every "
                                "tenant missing there")
    nodes_query: str = Field("count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})",
                             description="PromQL, by node_label: GPUs reporting per node now. Read once per cycle "
                             "beside a scheduler's node view where capacity_query's answer names no node: a node the "
                             "scheduler runs GPU jobs on that counts fewer GPUs here than those jobs hold (none: a "
                             "silent exporter; some: a lost GPU) has its tenants missing, not idle (the missing query "
                             "forgets a GPU after 15 minutes). Count what the scheduler counts: MIG instances where "
                             "it lists instances")
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
    def _unread_keys_are_said(self) -> "PrometheusConfig":
        """A key this version does not read is accepted (files that set it stay valid) but said, once per load:
        an operator who tunes it would otherwise wait for an effect that never comes."""
        for key in sorted({"util_query"} & self.model_fields_set):
            log.warning("source.prometheus.%s is set but not read by this version (%s); remove it", key,
                        "demand is GPUs allocated, no utilization is used")
        return self

    @model_validator(mode="after")
    def _queries_select_the_exporter(self) -> "PrometheusConfig":
        _refuse_bad_selector("exporter_selector", self.exporter_selector)
        _refuse_bad_selector("ingress_selector", self.ingress_selector)
        refuse_unselected({f"{q}_query": getattr(self, f"{q}_query") for q in PROMETHEUS_QUERIES},
                          self.exporter_selector, self.ingress_selector)
        if self.request_rate_query is not None:
            bad = _checked("request_rate_query", self.request_rate_query, INGRESS,
                           lambda q: unselected_rates(q, self.exporter_selector, self.ingress_selector))
            if bad:
                raise ValueError(f"request_rate_query reads {bad[0]} without {{{INGRESS}}}: any pod Prometheus "
                                 "scrapes can expose that name and add to its tenant's request rate; write "
                                 f"{bad[0]}{{{INGRESS}, ...}} (source.prometheus.ingress_selector selects the "
                                 "ingress controller's series)")
        return self

    def selects(self, query: str) -> str:
        """`query` with $exporter replaced by exporter_selector and $ingress by ingress_selector: what is sent to
        Prometheus."""
        return substitute(query, _placeholders(self.exporter_selector, self.ingress_selector))

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
    keep_steps: int | None = Field(None, ge=1, description="steps the store keeps (cycle.history_steps where that is "
                                   "longer; the forecaster reads cycle.history_steps of it): window proposals need 8 "
                                   "days (11520 at 60 s). Unset: cycle.history_steps on Prometheus (each step kept "
                                   "costs memory per series and backfill at the first start), 8 days on the "
                                   "embedded simulator")


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


class ServicesForecastConfig(_Strict):
    """How the inference services (tenants with a `[tenants.inference]` table) are forecast
    (docs/forecasting.md#inference-services)."""

    kind: Literal["auto", "seasonal_windows", "same"] = Field(
        "auto", description="auto and seasonal_windows: the services' columns are forecast by the daily seasonal "
        "naive (recalibrated) on their window_s-second window means, once the history holds a day of windows (auto "
        "uses the main forecaster until then); same: by the main forecaster at the cycle's step, as batch tenants")
    window_s: int = Field(600, gt=0, description="the services' window in seconds (a multiple of "
                          "cycle.resolution_s): their load is averaged into whole windows of this length, and the "
                          "seasonal naive's season is a day of them (86400 / window_s)")

    @field_validator("window_s")
    @classmethod
    def _window_divides_a_day(cls, v: int) -> int:
        if 86400 % v:
            raise ValueError(f"forecaster.services.window_s = {v} does not divide a day (86400 s) into whole "
                             "windows: the daily season would not be whole")
        return v


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
    services: ServicesForecastConfig = Field(default_factory=ServicesForecastConfig)
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
