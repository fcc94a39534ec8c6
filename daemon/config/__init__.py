"""The one configuration object, validated at start-up and again on reload.

The one configuration object: the top-level model with its checks across sections (models; each section in a
models_<concern> module beside it), and the pure merge a reload runs (reload).
`from daemon.config import Config, load_config, ConfigError`.
"""

from daemon.config.fleet import ANY, DEFAULT_TYPE, UNKNOWN_TYPE, FleetConfig, NodePool, TypeResolver, accepts_type
from daemon.config.models import (
    RECORDED_QUERIES,
    AccessConfig,
    AccessToken,
    ActuatorsConfig,
    ClusterConfig,
    Config,
    ConfigError,
    CycleConfig,
    FailoverConfig,
    ForecasterConfig,
    ForecastQualityConfig,
    GatewayKeysConfig,
    HAConfig,
    HealthConfig,
    HistoryConfig,
    KubernetesActuatorConfig,
    KueueActuatorConfig,
    PolicyConfig,
    PrometheusConfig,
    RateLevel,
    RateLimitConfig,
    RedisActuatorConfig,
    RetrainConfig,
    ServerConfig,
    SimulatorConfig,
    SkillGateConfig,
    SlurmActuatorConfig,
    SourceConfig,
    StateConfig,
    TenantConfig,
    Tier,
    load_config,
    parse_config,
)
from daemon.config.windows import WindowConfig

__all__ = [
    "WindowConfig",
    "ANY", "DEFAULT_TYPE", "UNKNOWN_TYPE", "FleetConfig", "NodePool", "TypeResolver", "accepts_type",
    "AccessConfig", "AccessToken", "ActuatorsConfig", "ClusterConfig", "Config", "ConfigError", "CycleConfig",
    "FailoverConfig", "ForecastQualityConfig", "ForecasterConfig", "GatewayKeysConfig", "HAConfig", "HealthConfig",
    "HistoryConfig", "KubernetesActuatorConfig", "KueueActuatorConfig", "PolicyConfig", "PrometheusConfig",
    "RECORDED_QUERIES",
    "RateLevel", "RateLimitConfig", "RedisActuatorConfig", "RetrainConfig", "ServerConfig", "SimulatorConfig",
    "SkillGateConfig",
    "SlurmActuatorConfig", "SourceConfig", "StateConfig", "TenantConfig", "Tier", "load_config", "parse_config",
]
