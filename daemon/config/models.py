"""The one configuration object, validated once at start-up.

Every knob lives here so that a typo in a TOML file fails loudly before the
daemon touches a cluster: unknown keys are rejected (``extra="forbid"``) and
every error names the dotted key that is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, HttpUrl, ValidationError, field_validator, model_validator

from daemon.config.fleet import DEFAULT_TYPE, FleetConfig
from daemon.config.names import collisions
from daemon.config.windows import WindowConfig, problems as window_problems
from gateway.configfile import Strict as _Strict, format_validation_error, read_secret, read_toml
from gateway.keys import ApiKey

Tier = Literal["high", "normal", "low"]
TIERS: tuple[Tier, ...] = ("high", "normal", "low")


class ConfigError(Exception):
    """A config problem a human must fix; the CLI prints it on one line and exits 2."""




class ClusterConfig(_Strict):
    name: str = Field("default", description="this cluster's name: a model is used only on the cluster it was scored "
                      "on (`<source.kind>:<name>`; the shipped one on \"simulator:default\"), so renaming makes "
                      "forecaster.kind = auto score the baselines until retrain scores a model here")
    gpus: int = Field(1024, gt=0,
                      description="GPUs in the cluster (simulator, or a fallback when the source cannot tell)")
    gpus_per_node: int = Field(8, gt=0, description="GPUs per node of the simulated cluster and of the synthetic "
                               "replay: holds take whole nodes of this size and a job fits on one node. With "
                               "Slurm or Kubernetes the nodes are the scheduler's own and this is not read")


class InferenceConfig(_Strict):
    gpus_per_replica: int = Field(ge=1, description="GPUs of one replica (one job)")
    replica_rps: float = Field(gt=0, description="requests/s one ready replica serves")
    cold_start_s: float = Field(ge=0, description="seconds from a replica's placement to its first served request")
    headroom: float = Field(0.1, ge=0, description="the service's autoscaler's headroom over the rate it sees")


class TenantConfig(_Strict):
    name: str = Field(min_length=1, description="the tenant as the source names it (with Prometheus: a value of "
                      "source.prometheus.tenant_label, by default the pod's namespace); a listed tenant with no GPUs "
                      "is 0, not absent. Kubernetes: only listed tenants' namespaces are ever touched")
    tier: Tier = Field("normal", description="high: shares the guaranteed pool (policy.reserve_share) and gets GPUs "
                       "held for its forecast peak; each tier has its own req/s in ratelimits.levels. Unlisted "
                       "tenants are normal; which jobs may be preempted comes from the scheduler's job priority")
    slurm_account: str | None = Field(None, description="Slurm account whose jobs are this tenant's, and that its "
                                      "hold reservations admit; default: the tenant's name")
    k8s_namespace: str | None = Field(None, description="namespace whose pods are this tenant's (its quota, queues "
                                      "and evictions); default: the tenant's name. A `kube-*` namespace is never "
                                      "touched")
    rate_override: float | None = Field(None, gt=0, description="fixed req/s for this tenant, ignores load levels")
    job_gpus: int | None = Field(None, ge=1, description="GPUs of this tenant's typical job, read only by "
                                 "`simulate --data/--from-source` (the replay of this cluster's history); default: "
                                 "its --job-gpus flag, else --default-job-gpus (1)")
    inference: InferenceConfig | None = Field(None, description="read only by `simulate --data`: this tenant is an "
                                              "inference service whose column holds requests/s; a "
                                              "`[tenants.inference]` table with gpus_per_replica, replica_rps, "
                                              "cold_start_s (and headroom, default 0.1) turns them into replicas "
                                              "(docs/own-cluster.md)")


class CycleConfig(_Strict):
    interval_s: float = Field(30.0, gt=0, description="seconds from the start of one cycle to the next (an alert "
                              "can run one sooner; an overrun cycle is followed at once). /healthz says unhealthy "
                              "when no cycle completed within max(3 x interval_s, 10 s)")
    resolution_s: int = Field(60, gt=0, description="step of the demand series and of the forecast")
    history_steps: int = Field(2880, ge=60, description="how much history the forecaster reads each cycle")
    horizon_steps: int = Field(60, ge=1, description="steps (of resolution_s) forecast each cycle; the policy's "
                               "lead times are cut to it, and a model in use that forecasts fewer steps is refused")
    stale_after_s: float = Field(180.0, gt=0, description="data older than this is stale: no new preemptions")
    max_missing_share: float = Field(0.2, ge=0, le=1, description="share of tenants without a fresh sample that "
                                                                  "makes the snapshot stale")
    max_plan_age_s: float = Field(1800.0, gt=0, description="a last good plan older than this gives way to the safe "
                                                            "default: no holds beyond the static pool, no preemptions")
    forget_tenant_after_s: float = Field(86400.0, gt=0, description="a tenant absent from every plan this long is "
                                         "forgotten: its per-tenant series leave /metrics and its `<prefix>:limit:"
                                         "<tenant>` key (one the redis actuator wrote) is deleted from Redis (the "
                                         "actuator reads this at start; the series follow a reload)")


class SkillGateConfig(_Strict):
    """Act on the forecast per tenant only where it has shown skill (daemon/forecasting/skill.py,
    docs/forecasting.md#the-skill-gate)."""

    enabled: bool = Field(False, description="plan a tenant on the forecast only while its forecast's holds lose "
                          "less (acting quantile's pinball loss of the peak over the lead windows) than the "
                          "reactive hold (demand now with headroom) on the same scored windows; other tenants, and "
                          "all until min_scored windows are scored, are planned reactively")
    margin: float = Field(0.1, ge=0, lt=1, description="the forecast is acted on when its loss is at most "
                          "(1 - margin) x the reactive loss: better by this share, since what it costs in "
                          "preemptions and idle holds is not in the loss")
    hysteresis: float = Field(0.05, ge=0, lt=1, description="a tenant acting on the forecast goes back to reactive "
                              "only when its loss exceeds (1 - margin + hysteresis) x the reactive loss")
    min_scored: int = Field(10, ge=1, description="forecasts scored for both rules (in every lead window) before "
                            "a tenant may act on the forecast (at most `window`)")
    window: int = Field(600, ge=1, description="the last scored forecasts the gate decides on (one is kept every "
                        "cycle.horizon_steps / 12 steps: by default 5 min, so 600 is 50 hours, and a daily rise the "
                        "forecast saw coming stays in the evidence until the next one)")


class PolicyConfig(_Strict):
    reserve_share: float = Field(0.2, ge=0, le=1, description="guaranteed pool for the high tier")
    lead_time_steps: int = Field(10, ge=0, description="how far ahead capacity is held for a predicted peak")
    preempt_lead_steps: int = Field(3, ge=1, description="how far ahead jobs are preempted (>= checkpoint drain)")
    quantile: float = Field(0.9, gt=0, lt=1, description="forecast quantile that is reserved for")
    headroom: float = Field(0.05, ge=0, le=1)
    preempt_budget_share: float = Field(0.02, ge=0, le=1,
                                        description="GPUs preempted per budget window, share of cluster")
    preempt_budget_jobs: int = Field(500, ge=0, description="jobs preempted per budget window")
    preempt_budget_window_s: float = Field(30.0, gt=0, description="the budget refills over this much time, "
                                           "whatever triggers cycles (a token bucket holding one window)")
    hysteresis: float = Field(0.05, ge=0, lt=1, description="a hold grows at once and shrinks only once its target is "
                              "this share below the next smaller hold in whole jobs; 0: holds follow the target")
    max_wait_steps: int = Field(120, ge=1, description="wait of a low- or normal-priority job (all its queue stints) "
                                "after which it is admitted ahead of the high tier's borrowing (aging)")
    aging_cumulative: bool = Field(True, description="aging sums a job's wait over all its queue stints (requeues) "
                                   "and exempts a job aging started for aging_min_run_s; off: the current stint only")
    aging_min_run_s: float = Field(1800.0, ge=0, description="a job started through aging is not preempted "
                                   "before it has run this long")
    aging_before_high: bool = Field(True, description="aged jobs are held for before the high tier's forecast "
                                    "beyond its guarantee (min(static pool, its own hold)); off: after it")
    aging_max_share: float = Field(0.1, ge=0, le=1, description="aged work (admitted, or running its grace period) "
                                   "is bounded to this share of the GPUs; the longest waiter always gets one job")
    min_preempt_gpus: int = Field(1, ge=1, description="deficits smaller than this are not worth a preemption")
    preempt_min_runtime_s: float = Field(0.0, ge=0, description="a job younger than this is never preempted "
                                         "(like Slurm's PreemptExemptTime); the Slurm actuator re-checks it")
    preempt_quantile: float | None = Field(None, gt=0, lt=1, description="forecast quantile jobs are preempted for "
                                           "within preempt_lead_steps; none: `quantile`, as the hold. Lower: the "
                                           "hold covers the high quantile, preemption only the likely demand")
    replica_quantile: float | None = Field(None, gt=0, lt=1, description="read by `simulate` and the replay: "
                                           "forecast quantile an inference service's predictive replica autoscaler "
                                           "scales to (the peak over its cold start plus drain); none: `quantile`, "
                                           "as the hold. Lower: fewer replicas started ahead, more GPUs left to "
                                           "batch (docs/replay.md)")
    pool_high_tier: bool = Field(True, description="hold the high tier's reservations as one pool that any high-tier "
                                 "tenant may use (one Slurm reservation for all their accounts), not one hold each")
    preempt_cost_aware: bool = Field(True, description="preempt for forecast demand (not for jobs waiting now) only "
                                     "when it is forecast to arrive before the drain ends and the GPU-minutes it would "
                                     "use the cleared GPUs for exceed the work the preemption loses since the job's "
                                     "last checkpoint plus its drain (docs/replay.md#cost-aware-preemption)")
    preempt_worth_weight: float = Field(1.0, gt=0, description="cost-aware rule: what a GPU-minute of forecast "
                                        "protected demand served is worth against a GPU-minute of work a preemption "
                                        "loses (1: even; retrain's replay cost weighs a high-tier GPU-minute unmet "
                                        "as 4, retrain.replay_tier_weights)")
    preempt_drain_s: float | None = Field(None, ge=0, description="seconds a preempted job keeps its GPUs while it "
                                          "checkpoints and stops (Slurm GraceTime); none: the simulator's "
                                          "drain_steps x cycle.resolution_s, so the replay and the daemon agree")
    checkpoint_interval_s: float | None = Field(None, gt=0, description="seconds between a job's checkpoints: a "
                                                "preemption loses the work since the last one; none: the simulator's "
                                                "checkpoint_steps x cycle.resolution_s")
    skill_gate: SkillGateConfig = Field(default_factory=SkillGateConfig)


class RateLevel(_Strict):
    load: float = Field(ge=0, le=1.5, description="cluster load at which this level starts")
    high: float = Field(gt=0)
    normal: float = Field(gt=0)
    low: float = Field(gt=0)

    def rate(self, tier: Tier) -> float:
        return float(getattr(self, tier))


def _default_levels() -> list[RateLevel]:
    return [
        RateLevel(load=0.0, high=1000, normal=100, low=100),
        RateLevel(load=0.8, high=200, normal=50, low=100),
        RateLevel(load=0.9, high=200, normal=50, low=50),
    ]


class RateLimitConfig(_Strict):
    levels: list[RateLevel] = Field(default_factory=_default_levels, description="per-tier req/s by cluster load "
                                    "(GPUs in use / healthy GPUs): the last level whose `load` is reached applies; "
                                    "loads strictly increasing from 0.0. Default: from 0.8 the high tier drops to "
                                    "200 req/s and normal to 50, from 0.9 low to 50 too")
    hysteresis: float = Field(0.05, ge=0, lt=0.5, description="load must fall this far below a level to loosen")
    burst_seconds: float = Field(2.0, gt=0, description="bucket size as seconds of rate")

    @field_validator("levels")
    @classmethod
    def _sorted_from_zero(cls, v: list[RateLevel]) -> list[RateLevel]:
        if not v:
            raise ValueError("at least one level is needed")
        loads = [lvl.load for lvl in v]
        if loads != sorted(loads) or len(set(loads)) != len(loads):
            raise ValueError("levels must have strictly increasing load")
        if loads[0] != 0.0:
            raise ValueError("the first level must start at load 0.0")
        return v


class SimulatorConfig(_Strict):
    seed: int = Field(42, description="random seed of the synthetic demand: the same seed and settings give the same "
                      "cluster, run after run")
    tenants: int = Field(40, gt=0, description="simulated tenants, named tenant-0000, tenant-0001, ...")
    high_share: float = Field(0.1, ge=0, le=1, description="share of the simulated tenants in the high tier (at least "
                              "one when above 0): the first ones by name, twice as big on average, and at least 60% "
                              "of them with the 14:00 peak")
    low_priority_share: float = Field(0.5, ge=0, le=1, description="share of normal-tier demand that is preemptible")
    target_load: float = Field(0.85, gt=0, le=2, description="mean demand as a share of GPUs")
    peak_share: float = Field(0.3, ge=0, le=1, description="tenants with a daily 14:00 peak")
    drain_steps: int = Field(2, ge=0, description="steps a preempted job holds its GPUs while it checkpoints")
    checkpoint_steps: int = Field(30, ge=1, description="steps between a simulated job's checkpoints: a preempted "
                                  "job loses the work done since its last one (counted as lost GPU-steps)")
    start_time: str = Field("2026-01-04T13:30:00Z", description="simulated time (ISO 8601, UTC) of the first "
                            "generated step; the first cycle comes warmup_steps later, so with the defaults at 13:30, "
                            "half an hour before the 14:00 peak")
    warmup_steps: int = Field(2880, ge=0, description="history generated before the first cycle")


_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_MATCHERS = re.compile(rf"{_MATCHER}(?:,{_MATCHER})*,?\s*")   # PromQL label matchers, as inside {...}


EXPORTER = "$exporter"   # in a query: replaced by source.prometheus.exporter_selector
_DCGM_SERIES = re.compile(r"\bDCGM_[A-Za-z0-9_]*")
# queries read each cycle, checked to select the exporter (util_query and nodes_query are read by no version)
PROMETHEUS_QUERIES = ("demand", "missing", "capacity", "known_nodes", "freshness", "demand_by_type",
                      "usage_by_type", "capacity_by_type", "nodes_by_type")


def unselected_series(query: str) -> list[str]:
    """The raw DCGM series a query reads without ``{$exporter}`` among its matchers.

    Any scrape target can expose a series named DCGM_FI_DEV_GPU_UTIL (a tenant's pod does it with one line of
    text), so a raw DCGM name counts only with the exporter's own labels; a query that reads a recorded series
    (gpuas:..., namespace:gpuas_...) is not checked, as the shipped recording rules select the exporter."""
    out = []
    for m in _DCGM_SERIES.finditer(query):
        rest = query[m.end():].lstrip()
        inside = rest[1:rest.find("}")] if rest.startswith("{") and "}" in rest else None
        if inside is None or EXPORTER not in inside:
            out.append(m.group())
    return out


def refuse_unselected(queries: dict[str, str | None]) -> None:
    """Raise naming the first query whose raw DCGM series do not select the exporter (unselected_series)."""
    for key, text in queries.items():
        bad = unselected_series(text or "")
        if bad:
            raise ValueError(f"{key} reads {bad[0]} without {{{EXPORTER}}}: any pod Prometheus scrapes can "
                             f"expose that name and forge demand or capacity; write {bad[0]}{{{EXPORTER}, ...}} "
                             "(source.prometheus.exporter_selector selects the DCGM exporter's series)")


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
                                           "`sum by (namespace) (rate(nginx_ingress_controller_requests[1m]))`; "
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
        return self

    def selects(self, query: str) -> str:
        """`query` with $exporter replaced by exporter_selector: what is sent to Prometheus."""
        return query.replace(EXPORTER, self.exporter_selector)

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
    model_dir: Path = Path("models")
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


class RedisActuatorConfig(_Strict):
    url: str = Field("redis://127.0.0.1:6379/0", description="the Redis the gateways read: per-tenant limits, API "
                     "key digests, notifications; also the HA lease's Redis unless ha.redis_url is set. Log in as "
                     "the daemon's own ACL user (`redis://gpuas-daemon:PASSWORD@host:6379/0`, "
                     "deploy/redis/users.acl), never as the gateways'")
    prefix: str = Field("gpuas", description="prefix of every key the redis actuator writes (`<prefix>:limit:"
                        "<tenant>`, `<prefix>:apikeys`, `<prefix>:notifications`, ...): the gateways' redis.prefix "
                        "must be the same")
    gateway_user: str = Field("gpuas-gateway", min_length=1, description="the Redis ACL user the gateways log in "
                              "as: a daemon Redis URL (this url, ha.redis_url) that logs in as it is refused, since "
                              "every gateway could then write the lease, the overrides and the key map")


class SlurmActuatorConfig(_Strict):
    mode: Literal["requeue", "suspend"] = Field("requeue",
                                                description="suspend keeps GPUs allocated; requeue frees them")
    bin_dir: Path = Field(Path("/usr/bin"), description="directory of scontrol, squeue, sinfo and scancel (run from "
                          "here, never looked up on PATH)")
    slurm_conf: Path | None = Field(None, description="SLURM_CONF for scontrol/squeue (default: Slurm's own)")
    timeout_s: float = Field(10.0, gt=0, description="a Slurm command still running after this many seconds is "
                             "killed and fails: that action's error, or for a read (squeue, sinfo) the cycle's")
    # a job's priority class comes from its QOS if mapped, else from its partition, else "normal"
    priority_by_qos: dict[str, Tier] = Field(
        default_factory=lambda: {"high": "high", "low": "low", "preemptible": "low"},
        description="job QOS -> priority class; only jobs of class low are ever preempted. Checked before "
                    "priority_by_partition; a job matched by neither is normal")
    priority_by_partition: dict[str, Tier] = Field(default_factory=lambda: {"high": "high", "low": "low"},
                                                   description="job partition -> priority class, for a job whose "
                                                               "QOS is not in priority_by_qos")
    drain_failed_nodes: bool = Field(True, description="drain a node reported down so nothing new lands on it")
    warn_signal: str = Field("USR1", pattern=r"^[A-Z0-9]+$", description="sent to the batch script before a preemption")
    # off by default: a batch script that does not trap the signal is killed by it (and not requeued)
    warn_lead_s: float = Field(0.0, ge=0, description="time between the warning and the requeue (0: no warning)")
    # holds: one whole-node reservation (Flags=IGNORE_JOBS,MAGNETIC) per tenant the plan reserves GPUs for
    holds: bool = Field(True, description="hold the plan's reserved GPUs with a Slurm reservation")
    hold_tiers: list[Tier] = Field(default_factory=lambda: ["high", "normal", "low"],
                                   description="tiers whose tenants get a hold when the plan reserves GPUs for them "
                                               "(with slurm enabled: every tier, as the plan and simulator hold)")
    hold_name_prefix: str = Field("gpuas-hold", pattern=r"^[A-Za-z0-9_.-]+$",
                                  description="reservations named so are the daemon's own; no other is touched")
    window_name_prefix: str = Field("gpuas-win", pattern=r"^[A-Za-z0-9_.-]+$",
                                    description="recurring windows' reservations are named <prefix>-<window> "
                                                "(docs/windows.md); no other is touched by them")
    hold_shrink_delay_s: float = Field(300.0, ge=0,
                                       description="a hold shrinks only after wanting fewer nodes this long")

    @model_validator(mode="after")
    def _windows_are_not_holds(self) -> "SlurmActuatorConfig":
        # the holds release every reservation named <hold prefix>-*: a window's named so would be released
        h, w = self.hold_name_prefix, self.window_name_prefix
        if w == h or w.startswith(h + "-") or h.startswith(w + "-"):
            raise ValueError(f"actuators.slurm.window_name_prefix = {w!r} and hold_name_prefix = {h!r}: one names "
                             "the other's reservations (the holds would release the windows'); pick apart names")
        return self


class KubernetesActuatorConfig(_Strict):
    in_cluster: bool = Field(False, description="connect with the pod's service account (the daemon runs in the "
                             "cluster) instead of a kubeconfig; the kubernetes HA backend uses the same connection")
    kubeconfig: Path | None = Field(None, description="kubeconfig file (its current context) when not in_cluster; "
                                    "unset: $KUBECONFIG or ~/.kube/config")
    gpu_resource: str = Field("nvidia.com/gpu", description="extended resource a GPU is requested as: counted on "
                              "pods and nodes, and capped by the tenant quotas (`requests.<resource>`)")
    quota_name: str = Field("gpu-autoscaler", description="name of the ResourceQuota written in each tenant "
                            "namespace (capping GPUs of pods not in the low PriorityClass); only quotas of this name "
                            "with the daemon's managed-by label are changed or deleted, so use no name of your own")
    grace_period_s: int = Field(30, ge=0, description="seconds an evicted pod gets to shut down (the Eviction's "
                                "grace period, for preemptions and for a failed node's pods)")
    timeout_s: float = Field(10.0, gt=0, description="every API request: no answer within this is that action's error")
    reclaim_bare_pods: bool = Field(False, description="job health's requeue may evict a pod with no controller "
                                    "(no ownerReferences): nothing recreates it, so the eviction deletes it for good; "
                                    "false: such a pod is skipped and reported")
    admission_params: str | None = Field(None, pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
                                         description="name of the cluster-scoped AdmissionParams object the "
                                         "admission policies read (deploy/kubernetes/admission/, whose bindings name "
                                         "gpu-autoscaler): the daemon writes each tenant namespace's tier and the node "
                                         "holds its pods may tolerate. Unset: not written")


class KueueActuatorConfig(_Strict):
    """Kueue mode: ClusterQueues per tier in one cohort (connection: actuators.kubernetes)."""
    cohort: str = Field("gpu-autoscaler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                        description="the Cohort at the root of the daemon's tree: the high, low and tenant "
                                    "ClusterQueues and the normal and pool Cohorts sit in it")
    flavor: str = Field("default-flavor", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="ResourceFlavor name")
    queue_prefix: str = Field("gpuas", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                              description="ClusterQueues <prefix>-<tier>, LocalQueues <prefix> and <prefix>-low")
    gpu_resource: str = Field("nvidia.com/gpu", description="resource the queues' quotas are given in and node "
                              "holds count; keep it equal to actuators.kubernetes.gpu_resource")
    hold_label: str = Field("gpu-autoscaler.io/hold",
                            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                            description="node label and taint key of a whole-node hold (value: the tenant)")
    window_name_prefix: str = Field("gpuas-win", pattern=r"^[A-Za-z0-9_.-]+$",
                                    description="recurring windows' reservations are named <prefix>-<window> "
                                                "(docs/windows.md); no other is touched by them")
    hold_shrink_delay_s: float = Field(300.0, ge=0,
                                       description="a node hold shrinks only after wanting fewer nodes this long")


class ActuatorsConfig(_Strict):
    dry_run: bool = Field(True, description="every actuator reports what it would do (log, /plan, the console) and "
                          "changes nothing; set false to act. The embedded simulator is driven either way")
    enabled: list[Literal["log", "redis", "slurm", "kubernetes", "kueue", "simulator"]] = Field(
        default_factory=lambda: ["log"],
        description="what carries out the plan: log (to the log), redis (limits and API keys for the gateways), "
                    "slurm, kubernetes (quotas, evictions, failover), kueue (queues and node holds; kubernetes beside "
                    "it keeps failover, PriorityClasses and Events). simulator needs source.kind = simulator, whose "
                    "cluster is driven whether listed or not")
    release_holds_on_stop: bool = Field(True, description="release scheduler holds on stop (Slurm reservations, "
                                                "Kueue node holds, Kubernetes quotas)")
    redis: RedisActuatorConfig = Field(default_factory=RedisActuatorConfig)
    slurm: SlurmActuatorConfig = Field(default_factory=SlurmActuatorConfig)
    kubernetes: KubernetesActuatorConfig = Field(default_factory=KubernetesActuatorConfig)
    kueue: KueueActuatorConfig = Field(default_factory=KueueActuatorConfig)


class ServerConfig(_Strict):
    enabled: bool = Field(True, description="serve HTTP: /metrics, /healthz, the Alertmanager webhook (/alerts), "
                          "the console and /api/v1; off: none of them, so no failover on alerts")
    host: str = Field("127.0.0.1", description="address to listen on; the default answers only on this host: use "
                      "0.0.0.0 (or an address of this host) for Prometheus, Alertmanager and browsers elsewhere")
    port: int = Field(9105, ge=0, le=65535, description="TCP port to listen on (0: one the OS picks)")
    webhook_token: str | None = Field(None, description="bearer token Alertmanager must send to /alerts; with no "
                                      "token (nor webhook_token_file) the webhook refuses every post unless "
                                      "allow_unauthenticated_webhook. Prefer webhook_token_file")
    webhook_token_file: Path | None = Field(None, description="a file holding the webhook token (read at start-up, "
                                            "surrounding whitespace dropped; not with webhook_token as well); the same "
                                            "file can be Alertmanager's `authorization.credentials_file`")
    max_body_bytes: int = Field(1_048_576, gt=0, description="largest webhook post accepted, in bytes; a bigger one "
                                "gets 413 and is not read further")
    allow_unauthenticated_webhook: bool = Field(False,
                                                description="accept webhook posts without a token (refused otherwise)")
    metrics_token: str | None = Field(None, min_length=16, description="when set (or metrics_token_file), /metrics "
                                      "answers only `Authorization: Bearer <token>` (401 otherwise): its series "
                                      "name every tenant, with its holds, limits, forecasts and preemptions")
    metrics_token_file: Path | None = Field(None, description="a file holding the metrics token (at least 16 "
                                            "characters); the same file can be Prometheus' `authorization."
                                            "credentials_file` (deploy/prometheus/gpu-autoscaler-scrape.yml)")
    public_url: HttpUrl | None = Field(None, description="the console's address as browsers see it, e.g. "
                                       "https://console.example behind a TLS proxy: the console's forms are "
                                       "accepted only with this Origin. Unset: the Origin must match the URL the "
                                       "request arrived on")

    @field_validator("public_url")
    @classmethod
    def _public_url_is_an_origin(cls, v: HttpUrl | None) -> HttpUrl | None:
        if v is not None and (v.username or v.password):
            raise ValueError("no user or password in the console's public URL")
        if v is not None and (v.query or v.fragment):
            raise ValueError("the console's public URL takes no query or fragment")
        return v

    @model_validator(mode="after")
    def _one_token_each(self) -> "ServerConfig":
        # two secrets for one door: an operator rotating one of them would not know which is in force
        if self.metrics_token is not None and self.metrics_token_file is not None:
            raise ValueError("give at most one of metrics_token and metrics_token_file")
        if self.webhook_token is not None and self.webhook_token_file is not None:
            raise ValueError("give at most one of webhook_token and webhook_token_file")
        return self

    def metrics_secret(self) -> str | None:
        """The token /metrics asks for, or None (open /metrics). ConfigError when its file cannot be read."""
        if self.metrics_token_file is not None:
            return read_secret(self.metrics_token_file, "server.metrics_token_file", ConfigError)
        return self.metrics_token

    def token(self) -> str | None:
        if self.webhook_token_file is not None:
            try:
                return self.webhook_token_file.read_text().strip() or None
            except OSError as exc:
                raise ConfigError(f"server.webhook_token_file: cannot read {self.webhook_token_file}: {exc}") from exc
        return self.webhook_token


class FailoverConfig(_Strict):
    """Which alerts may fence a node, and the circuit breaker that stops a bad alert from draining the cluster."""

    node_down_alerts: list[str] = Field(default_factory=lambda: ["GPUNodeDown"],
                                        description="alert names that mean 'this node is gone'")
    cycle_alerts: list[str] = Field(default_factory=lambda: ["GPUClusterLoadHigh", "GPUTenantLoadSpike"],
                                    description="alert names that run a cycle now")
    node_labels: list[str] = Field(default_factory=lambda: ["node", "Hostname", "hostname", "kubernetes_node"],
                                   description="labels read, in order, for the node name")
    breaker_max_nodes: int = Field(3, ge=1,
                                   description="more nodes than this reported down within the window: no failover")
    breaker_max_share: float = Field(0.1, gt=0, le=1, description="or more than this share of the nodes")
    breaker_window_s: float = Field(600.0, gt=0, description="nodes reported down within this many seconds count "
                                    "together against breaker_max_nodes and breaker_max_share; once tripped, no "
                                    "failover until this long after the last report over the limit")
    node_cache_s: float = Field(30.0, ge=0, description="how long the scheduler's node list is reused")
    max_alert_age_s: float = Field(600.0, gt=0, allow_inf_nan=False, description="an alert that started firing "
                                   "(or, resolved, ended) longer ago than this is refused, counted "
                                   "(gpuas_alerts_total outcome=stale) and logged: a post replayed or held back "
                                   "for hours must not fence a node or run a cycle. Alertmanager re-sends a firing "
                                   "alert with its first startsAt, so only its first posts within this act")
    confirm_with_scheduler: bool = Field(
        True, description="before requeueing a node's jobs on a node-down alert, ask the scheduler whether it sees "
        "the node failed too (Slurm: DOWN, DRAIN, FAIL or NOT_RESPONDING; Kubernetes: Ready False or Unknown); when "
        "it sees the node healthy, nothing is requeued or fenced and the disagreement is logged, recorded as an "
        "event and said in the webhook's reply. A scheduler that cannot tell does not block the failover. Turn "
        "off to act on the alert alone, e.g. when GPU faults do not reach the scheduler (no Slurm "
        "HealthCheckProgram, no node problem detector)")


class AccessToken(_Strict):
    """One bearer token for the console and the API: an operator sees and changes everything, a tenant
    token sees only its own tenant."""

    name: str = Field(min_length=1, description="who holds the token; written to the audit log")
    role: Literal["operator", "tenant"] = Field(description="operator: sees and changes everything (tiers, rates, "
                                                "floors, pauses); tenant: sees only `tenant`'s own pages and API, "
                                                "and changes nothing")
    tenant: str | None = Field(None, description="the tenant a tenant token may see (role = tenant only)")
    token: str | None = Field(None, min_length=16, description="the token itself (at least 16 characters), written in "
                              "the config file; give token or token_file, and prefer token_file")
    token_file: Path | None = Field(None, description="a file holding the token (at least 16 characters, "
                                    "surrounding whitespace dropped), read at start-up and at each reload")

    @model_validator(mode="after")
    def _consistent(self) -> "AccessToken":
        if (self.token is None) == (self.token_file is None):
            raise ValueError("give exactly one of token or token_file")
        if self.role == "tenant" and not self.tenant:
            raise ValueError("a tenant token needs tenant = NAME")
        if self.role == "operator" and self.tenant:
            raise ValueError("an operator token sees every tenant: drop tenant")
        return self

    def secret(self) -> str:
        if self.token_file is not None:
            return read_secret(self.token_file, f"access.tokens.{self.name}.token_file", ConfigError)
        return self.token or ""


class AccessConfig(_Strict):
    tokens: list[AccessToken] = Field(default_factory=list)
    cookie_secure: bool = Field(False, description="mark the console's login cookie Secure (behind HTTPS)")

    @field_validator("tokens")
    @classmethod
    def _unique_names(cls, v: list[AccessToken]) -> list[AccessToken]:
        names = [t.name for t in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate token names: {dup}")
        return v


class GatewayKeysConfig(_Strict):
    """API keys the daemon publishes to Redis (`<prefix>:apikeys`, SHA-256 digest -> tenant) for the gateways;
    needs the redis actuator. Empty: the daemon publishes nothing and leaves Redis' map alone."""

    keys: list[ApiKey] = Field(default_factory=list)


class HAConfig(_Strict):
    """Two or more replicas, one acting: a leader lease with a fencing token, in Redis (daemon/ha/lease.py) or
    a Kubernetes Lease object (daemon/ha/lease_k8s.py)."""

    enabled: bool = Field(False, description="run as one of several replicas: each plans, only the lease holder "
                          "acts, and each of its writes is fenced by the lease's token; off: this process acts alone")
    backend: Literal["redis", "kubernetes"] = Field("redis", description="where the lease and the operator's "
                                                    "overrides live: redis (ha.redis_url) or kubernetes (a Lease "
                                                    "object in ha.namespace, over actuators.kubernetes' connection)")
    redis_url: str | None = Field(None, description="the control plane's Redis: the lease, the operator's "
                                  "overrides and their audit stream, the shadow stream (default: "
                                  "actuators.redis.url). Log in as the daemon's ACL user, never the gateways' "
                                  "(docs/security.md)")
    prefix: str = Field("gpuas", description="redis backend: prefix of the lease's keys (`<prefix>:leader`, "
                        "`:leader:token`, `:leader:ledger`), the replicas' beats and the shared overrides; the same on "
                        "every replica of one daemon, another for each daemon sharing the Redis")
    namespace: str = Field("default", description="kubernetes backend: the Lease's namespace")
    lease_name: str = Field("gpu-autoscaler-leader", description="kubernetes backend: the Lease object")
    replica_id: str | None = Field(None, pattern=r"^[^|#]+$", description="default: hostname:pid")
    lease_ttl_s: float = Field(15.0, gt=0, description="a dead leader's lease expires after this")
    renew_every_s: float | None = Field(None, gt=0, description="default: lease_ttl_s / 3")
    safety_margin: float = Field(0.3, ge=0, lt=1, description="share of the TTL that must be left to act")

    @model_validator(mode="after")
    def _renew_before_expiry(self) -> "HAConfig":
        if self.renew_every_s is not None and self.renew_every_s >= self.lease_ttl_s * (1 - self.safety_margin):
            raise ValueError("renew_every_s must be well below lease_ttl_s * (1 - safety_margin)")
        return self


class StateConfig(_Strict):
    path: Path = Field(Path("state/gpu-autoscaler.sqlite"), description="SQLite file of what survives a restart: "
                       "the policy's memory, the last good plan, the model in use, the events and (without HA) the "
                       "operator's overrides. Relative: to the working directory; its directory is created")
    events_keep_days: float = Field(30.0, gt=0, description="events (failovers, preemptions, operator changes) "
                                    "older than this are deleted")
    events_max_rows: int = Field(200_000, ge=1000, description="and at most this many are kept")
    shadow_records: bool = Field(True, description="with actuators.dry_run, the acting replica records each cycle "
                                 "what it would have done (holds, preemptions, limits, the forecast) for "
                                 "`gpu-autoscaler shadow-report` and the console (compressed JSON, in the state "
                                 "store or, under HA with Redis, the lease's Redis)")
    shadow_keep_days: float = Field(7.0, gt=0, description="shadow records older than this (by write time) are "
                                    "deleted, in the state store and, under HA with Redis, from the lease's stream")
    shadow_max_rows: int = Field(20_160, ge=100, description="and at most this many are kept (a week of 30-s cycles); "
                                 "under HA with Redis, the stream is trimmed to about this many")


HealthAction = Literal["report", "requeue"]


HEALTH_QUERIES = ("activity", "fb_used", "fb_free", "xid")
HEALTH_MAX_STEPS = 11_000   # points Prometheus returns per series in one range query


def _default_idle_actions() -> dict[Tier, HealthAction]:
    return {"high": "report", "normal": "report", "low": "requeue"}


class HealthConfig(_Strict):
    """Per-job GPU health (daemon/health/, docs/health.md): idle, hung, leaking and erroring jobs found from the
    DCGM exporter's per-GPU series with their job labels, told to the tenant, and reclaimed by policy."""

    enabled: bool = Field(False, description="read per-job GPU telemetry each cycle, publish findings (metrics, "
                          "console, API) and act on them as configured; needs source.kind = prometheus")
    activity_query: str = Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE{$exporter} or DCGM_FI_DEV_GPU_UTIL{$exporter} / 100",
                                description="PromQL: per-GPU activity as a share 0..1 with the exporter's job "
                                "labels (graphics engine active, falling back to GPU_UTIL in percent / 100); "
                                "$exporter is replaced by source.prometheus.exporter_selector; with the recording "
                                "rules: "
                                "gpuas:job_gpu_activity:ratio{$exporter}")
    fb_used_query: str = Field("DCGM_FI_DEV_FB_USED{$exporter}", description="PromQL: per-GPU framebuffer used (MiB)")
    fb_free_query: str = Field("DCGM_FI_DEV_FB_FREE{$exporter}", description="PromQL: per-GPU framebuffer free (MiB)")
    xid_query: str = Field("DCGM_FI_DEV_XID_ERRORS{$exporter}", description="PromQL: per-GPU last XID (a gauge "
                           "holding the last XID code, not a count)")
    slurm_job_label: str = Field("hpc_job", min_length=1, description="label naming the Slurm job (the exporter's "
                                 "--hpc-job-mapping-dir)")
    pod_label: str = Field("pod", min_length=1, description="label naming the Kubernetes pod")
    namespace_label: str = Field("namespace", min_length=1, description="label naming the pod's namespace")
    host_label: str = Field("Hostname", min_length=1, description="label naming the GPU's node")
    gpu_label: str = Field("gpu", min_length=1, description="label naming the GPU on its node (index)")
    max_gap_s: float = Field(120.0, ge=0, description="missing samples add no idle time; a gap longer than this "
                             "ends an idle (or hung) run")
    idle_activity_max: float = Field(0.05, gt=0, le=1, description="a GPU under this activity share is idle")
    idle_warn_minutes: float = Field(30.0, gt=0, description="idle this long: a finding, and the tenant is warned")
    idle_action_minutes: float = Field(60.0, gt=0, description="idle this long: the tier's idle_actions applies")
    idle_actions: dict[Tier, HealthAction] = Field(default_factory=_default_idle_actions,
                                                   description="what happens to a job idle past "
                                                   "idle_action_minutes, by tier (a low-priority job's tier is "
                                                   "low, others their tenant's): report, or requeue (Slurm "
                                                   "requeue; Kubernetes Eviction API with the grace period)")
    hung_activity_max: float = Field(0.01, gt=0, le=1, description="activity under this on every GPU ...")
    hung_fb_min_share: float = Field(0.5, gt=0, le=1, description="... with at least this share of each GPU's "
                                     "framebuffer in use is a hung job")
    hung_warn_minutes: float = Field(30.0, gt=0, description="hung this long: a finding, and the tenant is warned")
    hung_action_minutes: float = Field(60.0, gt=0, description="hung this long: the tier's hung_actions applies")
    hung_actions: dict[Tier, HealthAction] = Field(default_factory=_default_idle_actions,
                                                   description="what happens to a hung job, by tier: report, or "
                                                   "requeue (a restart)")
    leak_window_minutes: float = Field(60.0, gt=0, description="window a framebuffer trend is fitted on")
    leak_min_rise_share: float = Field(0.1, gt=0, le=1, description="a leak rose by at least this share of the "
                                       "framebuffer over the window")
    leak_monotone_share: float = Field(0.9, gt=0, le=1, description="and did not fall in at least this share of "
                                       "its steps")
    leak_full_within_minutes: float = Field(120.0, gt=0, description="and is projected to fill the framebuffer "
                                            "within this many minutes (leaks are reported, never acted on)")
    xid_critical: list[int] = Field(default_factory=lambda: [48, 63, 64, 74, 79, 92, 94, 95, 119, 120],
                                    description="XIDs that are a GPU error (hardware, driver): reported as "
                                    "gpu_error")
    xid_application: list[int] = Field(default_factory=lambda: [13, 31, 43, 45, 68, 109],
                                       description="XIDs that are the application's own fault (the device plugin "
                                       "ignores these): reported apart, as app_xid")

    @field_validator("idle_actions", "hung_actions")
    @classmethod
    def _every_tier(cls, v: dict[Tier, HealthAction]) -> dict[Tier, HealthAction]:
        """A partial table (`idle_actions = {low = "requeue"}`) keeps the defaults for the tiers it leaves out,
        so every tier has an action (a missing one would fail the whole health step each cycle)."""
        return {**_default_idle_actions(), **v}

    @model_validator(mode="after")
    def _consistent(self) -> "HealthConfig":
        if self.idle_action_minutes < self.idle_warn_minutes:
            raise ValueError("idle_action_minutes must be >= idle_warn_minutes (the tenant is warned first)")
        if self.hung_action_minutes < self.hung_warn_minutes:
            raise ValueError("hung_action_minutes must be >= hung_warn_minutes (the tenant is warned first)")
        if self.hung_activity_max > self.idle_activity_max:
            raise ValueError("hung_activity_max must be <= idle_activity_max (a hung job is an idle one)")
        both = sorted(set(self.xid_critical) & set(self.xid_application))
        if both:
            raise ValueError(f"XIDs {both} are in both xid_critical and xid_application")
        if any(x <= 0 for x in self.xid_critical + self.xid_application):
            raise ValueError("XIDs are positive codes")
        refuse_unselected({f"{q}_query": getattr(self, f"{q}_query") for q in HEALTH_QUERIES})
        return self

    def window_minutes(self) -> float:
        """How much history each cycle reads: enough to see the longest threshold, plus a margin."""
        return max(self.idle_action_minutes, self.hung_action_minutes, self.leak_window_minutes) + 10.0


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


class Config(_Strict):
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    tenants: list[TenantConfig] = Field(default_factory=list)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    ratelimits: RateLimitConfig = Field(default_factory=RateLimitConfig)
    source: SourceConfig = Field(default_factory=SourceConfig)
    history: HistoryConfig = Field(default_factory=HistoryConfig)
    forecaster: ForecasterConfig = Field(default_factory=ForecasterConfig)
    actuators: ActuatorsConfig = Field(default_factory=ActuatorsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    access: AccessConfig = Field(default_factory=AccessConfig)
    gateway: GatewayKeysConfig = Field(default_factory=GatewayKeysConfig)
    ha: HAConfig = Field(default_factory=HAConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    failover: FailoverConfig = Field(default_factory=FailoverConfig)
    retrain: RetrainConfig = Field(default_factory=RetrainConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    windows: list[WindowConfig] = Field(default_factory=list, description="recurring capacity windows "
                                        "(docs/windows.md): GPUs a tenant is held at a time that recurs")

    @model_validator(mode="before")
    @classmethod
    def _one_exporter_selector(cls, data):
        """health.exporter_selector, where it was before it applied to every query, is read as
        source.prometheus.exporter_selector (files that set it keep working); both set and different is refused,
        as one of them would be silently ignored."""
        if not isinstance(data, dict) or not isinstance(data.get("health"), dict) \
                or "exporter_selector" not in data["health"]:
            return data
        health = dict(data["health"])
        old = health.pop("exporter_selector")
        source = dict(data.get("source") or {})
        prom = dict(source.get("prometheus") or {})
        if "exporter_selector" in prom and prom["exporter_selector"] != old:
            raise ValueError("health.exporter_selector is the old place of source.prometheus.exporter_selector, "
                             f"and they differ ({old!r} vs {prom['exporter_selector']!r}): keep the second only")
        prom.setdefault("exporter_selector", old)
        return {**data, "health": health, "source": {**source, "prometheus": prom}}

    @model_validator(mode="after")
    def _unique_tenants(self) -> "Config":
        names = [t.name for t in self.tenants]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate tenant names: {sorted(dup)}")
        clash = collisions(names)  # two tenants in one hold: one of them would lose it
        if clash:
            raise ValueError("; ".join(clash))
        return self

    @model_validator(mode="after")
    def _skill_gate_can_score_enough(self) -> "Config":
        g = self.policy.skill_gate
        if g.min_scored > g.window:
            raise ValueError(f"policy.skill_gate.min_scored = {g.min_scored} is more than the scored forecasts it "
                             f"keeps (policy.skill_gate.window = {g.window}): no tenant could ever act on the "
                             "forecast")
        return self

    @model_validator(mode="after")
    def _ets_has_the_history_it_needs(self) -> "Config":
        # with less history Holt-Winters' seasonal fit cannot run and it would forecast the last value with no
        # spread at all, under its own name
        fc = self.forecaster
        if fc.kind == "ets":
            from forecaster.baselines import (
                HoltWinters,  # here only: importing the config must not load statsmodels
            )

            need = HoltWinters.min_steps(fc.season_steps, HoltWinters.agg_for(fc.season_steps))
            if self.cycle.history_steps < need:
                raise ValueError(f"forecaster.kind = 'ets' needs cycle.history_steps >= {need} (two seasons of "
                                 f"forecaster.season_steps = {fc.season_steps}, plus two of the means it fits); "
                                 f"it is {self.cycle.history_steps}")
        return self

    @model_validator(mode="after")
    def _holds_the_plan_makes_are_enforced(self) -> "Config":
        # the plan holds GPUs for every tier (the high tier by forecast, normal and low tenants by aging or an
        # operator's floor) and the simulator holds them all: a Slurm actuator that holds only some would
        # leave planned (and replayed) holds unenforced
        if "slurm" in self.actuators.enabled:
            s = self.actuators.slurm
            if not s.holds:
                raise ValueError("actuators.slurm.holds: false leaves every hold the plan makes (and the replay "
                                 "counts) unenforced on Slurm; keep it true")
            left_out = [t for t in ("high", "normal", "low") if t not in s.hold_tiers]
            if left_out:
                raise ValueError(f"actuators.slurm.hold_tiers: {left_out} left out; the plan holds GPUs for "
                                 "tenants of every tier (high by forecast, normal and low by aging or an operator's "
                                 "floor) and the simulator holds them all, so Slurm must too")
        return self

    @model_validator(mode="after")
    def _health_reads_prometheus(self) -> "Config":
        if self.health.enabled and self.source.kind != "prometheus":
            raise ValueError("health.enabled needs source.kind = 'prometheus' (per-job GPU telemetry comes from "
                             "the DCGM exporter's series)")
        steps = self.health.window_minutes() * 60 / self.cycle.resolution_s
        if self.health.enabled and steps > HEALTH_MAX_STEPS:
            # each cycle allocates that many steps per GPU series before Prometheus would refuse the range
            raise ValueError(f"health reads {self.health.window_minutes():g} min of telemetry each cycle (the longest "
                             "of idle_action_minutes, hung_action_minutes and leak_window_minutes, plus 10): "
                             f"{steps:.0f} steps of cycle.resolution_s, over the {HEALTH_MAX_STEPS} a Prometheus "
                             "range query returns; lower those thresholds")
        return self

    @model_validator(mode="after")
    def _control_plane_is_not_the_gateways(self) -> "Config":
        # the gateways' Redis user may write its buckets only (deploy/redis/users.acl); with its credential the
        # daemon's lease, overrides, audit and key map would be writable by every gateway, so it is refused
        from daemon.config.redis_acl import url_user

        gw = self.actuators.redis.gateway_user
        for key, url in self.daemon_redis_urls().items():
            if url_user(url) == gw:
                raise ValueError(f"{key} logs in as {gw!r}, the gateways' Redis user (actuators.redis.gateway_user): "
                                 "the lease, the operator's overrides, their audit and the API-key map must not be "
                                 "written with a gateway's credential; log in as the daemon's own user "
                                 "(deploy/redis/users.acl, docs/security.md)")
        return self

    @model_validator(mode="after")
    def _windows_fit(self) -> "Config":
        # refused at start and reload: a window larger than its type's GPUs, or windows that overlap with more
        # GPUs than there are (each named, with the time); the API checks a change against the live capacity
        bad = window_problems(self.windows, self.known_capacity(), self.fleet.typed,
                              [t.name for t in self.tenants])
        if bad:
            raise ValueError("; ".join(bad))
        return self

    def known_capacity(self) -> dict[str, int]:
        """GPUs per type known from the config alone: the simulated cluster's (fleet.pools, else cluster.gpus);
        empty for a real scheduler, whose GPUs only it can tell (checked against its snapshot at runtime)."""
        if self.fleet.pools:
            out: dict[str, int] = {}
            for p in self.fleet.pools:
                out[p.type] = out.get(p.type, 0) + p.nodes * p.gpus_per_node
            return out
        if self.source.kind == "simulator" and not self.fleet.typed:
            return {DEFAULT_TYPE: self.cluster.gpus}
        return {}

    def daemon_redis_urls(self) -> dict[str, str]:
        """The Redis URLs this daemon logs in with, by the config key that gives them (ha.redis_url only when the
        lease is in Redis; its default, actuators.redis.url)."""
        out = {}
        if "redis" in self.actuators.enabled:
            out["actuators.redis.url"] = self.actuators.redis.url
        if self.ha.enabled and self.ha.backend == "redis":
            out["ha.redis_url" if self.ha.redis_url else "actuators.redis.url (ha.redis_url's default)"] = \
                self.ha.redis_url or self.actuators.redis.url
        return out

    def tier_of(self, tenant: str) -> Tier:
        for t in self.tenants:
            if t.name == tenant:
                return t.tier
        return "normal"


def parse_config(data: dict, origin: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, origin)) from None


def load_config(path: Path | str | None) -> Config:
    """Load and validate a TOML file; ``None`` gives the embedded simulated-cluster default."""
    if path is None:
        return Config()
    return parse_config(read_toml(Path(path), ConfigError), str(path))
