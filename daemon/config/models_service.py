"""The config sections of the daemon as a service: its HTTP server, access tokens, the gateways' keys,
high availability, state and node failover."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, HttpUrl, field_validator, model_validator

from daemon.config.models_base import ConfigError
from gateway.configfile import Strict as _Strict, read_secret
from gateway.keys import ApiKey


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
