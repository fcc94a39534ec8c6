"""The one configuration object, validated once at start-up.

Every knob lives here so that a typo in a TOML file fails loudly before the
daemon touches a cluster: unknown keys are rejected (``extra="forbid"``) and
every error names the dotted key that is wrong.

The sections live beside this file, one module per concern, and are re-exported here so every
import path keeps working: models_base (the tier names, ConfigError), models_policy (cluster, tenants, cycle,
policy, rate limits, simulator), models_source (Prometheus and its queries, history, forecaster, retrain),
models_actuators (Redis, Slurm, Kubernetes, Kueue), models_service (server, access, gateway keys, HA, state,
failover) and models_health (job health). This file keeps the top-level Config, its checks across sections,
and parse_config / load_config.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from daemon.config.fleet import DEFAULT_TYPE, FleetConfig
from daemon.config.models_actuators import (  # re-exported: the old import path keeps working
    ActuatorsConfig,
    KubernetesActuatorConfig,
    KueueActuatorConfig,
    RedisActuatorConfig,
    SlurmActuatorConfig,
)
from daemon.config.models_base import (  # re-exported: the old import path keeps working
    TIERS,
    ConfigError,
    Tier,
)
from daemon.config.models_health import (  # re-exported: the old import path keeps working
    HEALTH_MAX_STEPS,
    HEALTH_QUERIES,
    HealthAction,
    HealthConfig,
)
from daemon.config.models_policy import (  # re-exported: the old import path keeps working
    ClusterConfig,
    CycleConfig,
    InferenceConfig,
    PolicyConfig,
    RateLevel,
    RateLimitConfig,
    SimulatorConfig,
    SkillGateConfig,
    TenantConfig,
)
from daemon.config.models_service import (  # re-exported: the old import path keeps working
    AccessConfig,
    AccessToken,
    FailoverConfig,
    GatewayKeysConfig,
    HAConfig,
    ServerConfig,
    StateConfig,
)
from daemon.config.models_source import (  # re-exported: the old import path keeps working
    EXPORTER,
    PROMETHEUS_QUERIES,
    RECORDED,
    RECORDED_QUERIES,
    ForecasterConfig,
    ForecastQualityConfig,
    HistoryConfig,
    PrometheusConfig,
    RetrainConfig,
    SourceConfig,
    refuse_unselected,
    unselected_series,
)
from daemon.config.names import collisions
from daemon.config.windows import WindowConfig, problems as window_problems
from gateway.configfile import Strict as _Strict, format_validation_error, read_toml


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
    def _health_queries_select_the_exporter(self) -> "Config":
        """[health]'s queries read DCGM series too: checked here, where source.prometheus.exporter_selector (what
        their $exporter becomes) is known."""
        refuse_unselected({f"health.{q}_query": getattr(self.health, f"{q}_query") for q in HEALTH_QUERIES},
                          self.source.prometheus.exporter_selector, self.source.prometheus.ingress_selector)
        return self

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
    def _services_window_fits_the_cycle(self) -> "Config":
        sv, step = self.forecaster.services, self.cycle.resolution_s
        if sv.kind != "same" and sv.window_s % step:
            raise ValueError(f"forecaster.services.window_s = {sv.window_s} is not a multiple of "
                             f"cycle.resolution_s = {step}: the services' windows must hold whole steps")
        if sv.kind == "seasonal_windows":
            from forecaster.composite import min_history_steps  # here only: importing the config stays light

            need = min_history_steps(sv.window_s, step)
            if self.cycle.history_steps < need:
                raise ValueError(f"forecaster.services.kind = 'seasonal_windows' needs cycle.history_steps >= "
                                 f"{need} (a day of {sv.window_s} s windows, one more, and the one filling); it is "
                                 f"{self.cycle.history_steps}")
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
                              [t.name for t in self.tenants], min_lead_s=self.window_min_lead_s())
        if bad:
            raise ValueError("; ".join(bad))
        return self

    def preempt_drain_s(self) -> float:
        """Seconds a preempted job keeps its GPUs while it drains: ``policy.preempt_drain_s``, by default the
        simulator's drain_steps times the cycle's resolution (so the replay and the daemon assume the same)."""
        pc = self.policy
        return float(pc.preempt_drain_s if pc.preempt_drain_s is not None
                     else self.source.simulator.drain_steps * self.cycle.resolution_s)

    def window_min_lead_s(self) -> float:
        """The shortest lead a window's hold has in the plan (daemon/policy/windows.py ``demands``): a preemption's
        drain and one cycle, so that what the plan preempts at the first plan of the lead has drained by the start.
        A reclaim_before shorter than this is lengthened to it, in the plan and in the windows' overlap check."""
        return self.preempt_drain_s() + float(self.cycle.interval_s)

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


__all__ = [  # what the modules above hold, importable from here as before
    "AccessConfig",
    "AccessToken",
    "ActuatorsConfig",
    "ClusterConfig",
    "ConfigError",
    "CycleConfig",
    "EXPORTER",
    "FailoverConfig",
    "ForecastQualityConfig",
    "ForecasterConfig",
    "GatewayKeysConfig",
    "HAConfig",
    "HEALTH_MAX_STEPS",
    "HEALTH_QUERIES",
    "HealthAction",
    "HealthConfig",
    "HistoryConfig",
    "InferenceConfig",
    "KubernetesActuatorConfig",
    "KueueActuatorConfig",
    "PROMETHEUS_QUERIES",
    "PolicyConfig",
    "PrometheusConfig",
    "RECORDED",
    "RECORDED_QUERIES",
    "RateLevel",
    "RateLimitConfig",
    "RedisActuatorConfig",
    "RetrainConfig",
    "ServerConfig",
    "SimulatorConfig",
    "SkillGateConfig",
    "SlurmActuatorConfig",
    "SourceConfig",
    "StateConfig",
    "TIERS",
    "TenantConfig",
    "Tier",
    "refuse_unselected",
    "unselected_series",
]
