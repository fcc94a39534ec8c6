"""The gateway's own file (gateway.toml), validated at start-up: Redis, API keys, trusted proxies, the upstream,
the degrade path."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import httpx
from pydantic import Field, ValidationError, field_validator, model_validator

from gateway.configfile import Strict as _Strict, format_validation_error, read_toml
from gateway.keys import ApiKey, GatewayConfigError, digest_map


class GatewayRedis(_Strict):
    url: str = Field("redis://127.0.0.1:6379/0", description="the Redis holding the buckets, limits and "
                     "published keys; log in as the gateways' own ACL user "
                     "(`redis://gpuas-gateway:PASSWORD@host:6379/0`, deploy/redis/users.acl), "
                     "which cannot write the daemon's control state")
    prefix: str = "gpuas"
    timeout_s: float = Field(0.5, gt=0, le=30,
                             description="one Redis call (connect or command) gives up after this long; the limiter "
                                         "then counts as down (fail_open decides). Redis answers in well under a "
                                         "millisecond, so this bounds what a hung Redis costs the request that finds "
                                         "it hung")
    breaker_s: float = Field(5.0, gt=0, le=300,
                             description="after a failed Redis call, skip Redis for this long and apply fail_open at "
                                         "once (no request waits for a dead or hung Redis); then one request probes "
                                         "it, and limits apply again as soon as it answers")


def _http_url(v: str | None) -> str | None:
    """An upstream must be an http(s) URL with a host; anything else would be a 502 on every request.

    No query or fragment: the request's own path and query are joined to the upstream's path, nothing else."""
    if v is not None:
        try:
            url = httpx.URL(v)
        except httpx.InvalidURL:
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"{v!r} is not an http(s) URL")
        if url.query or url.fragment or "?" in v or "#" in v:
            raise ValueError(f"{v!r}: an upstream URL takes no query or fragment (the request's own are sent)")
    return v


def _redis_url(v: str | None) -> str | None:
    if v is not None and not re.match(r"^(redis|rediss|unix)://", v):
        raise ValueError(f"{v!r} is not a redis://, rediss:// or unix:// URL")
    return v


class DegradeConfig(_Strict):
    """What an over-limit request gets instead of a bare 429. Off by default."""

    cache: bool = Field(False, description="answer from a cached response of an identical idempotent request by the "
                                           "same caller (same tenant and same credential and cookies)")
    cache_ttl_s: float = Field(300.0, gt=0, description="how long a response stays usable as a fallback")
    cache_max_bytes: int = Field(1_048_576, gt=0, description="larger responses (or request bodies) are not cached")
    cache_max_entries_per_tenant: int = Field(
        256, gt=0, description="at most this many cached answers per tenant; storing one more evicts the oldest")
    cache_max_bytes_per_tenant: int = Field(
        8_388_608, gt=0, description="at most this many bytes of cached answers (body and kept headers) per tenant; "
                                     "storing more evicts the oldest. With the entries cap this bounds what one tenant "
                                     "can put into Redis by varying its query string")
    cache_redis_url: str | None = Field(
        None, description="keep the cache in this Redis instead of the one holding the buckets and published keys "
                          "(redis.url), so a full cache can never crowd out the limiter")
    cheaper_upstream: str | None = Field(None, description="route over-limit requests here (URL) when no cached answer")

    @field_validator("cheaper_upstream")
    @classmethod
    def _cheaper_url(cls, v: str | None) -> str | None:
        return _http_url(v)

    @field_validator("cache_redis_url")
    @classmethod
    def _cache_redis(cls, v: str | None) -> str | None:
        return _redis_url(v)

    @model_validator(mode="after")
    def _caps_fit(self) -> "DegradeConfig":
        if self.cache_max_bytes > self.cache_max_bytes_per_tenant:
            raise ValueError(f"cache_max_bytes ({self.cache_max_bytes}) is larger than cache_max_bytes_per_tenant "
                             f"({self.cache_max_bytes_per_tenant}): such an answer could never be kept")
        return self

    @property
    def enabled(self) -> bool:
        return self.cache or self.cheaper_upstream is not None


class GatewayConfig(_Strict):
    """The gateway's own file (gateway.toml); independent of the daemon's config."""

    redis: GatewayRedis = Field(default_factory=GatewayRedis)
    keys: list[ApiKey] = Field(default_factory=list, description="API keys known to this gateway")
    keys_from_redis: bool = Field(True, description="also accept the keys the daemon publishes to Redis")
    keys_refresh_s: float = Field(5.0, gt=0, description="how often the published keys are re-read")
    trusted_proxies: list[str] = Field(default_factory=list,
                                       description="addresses/CIDRs whose X-Tenant header is believed (opt-in)")
    fail_open: bool = Field(True, description="let requests through (marked) when Redis is down")
    upstream: str | None = Field(None, description="stand-alone gateway: where allowed requests go")
    degrade: DegradeConfig = Field(default_factory=DegradeConfig)
    max_body_bytes: int = Field(8_388_608, gt=0, description="a request body larger than this (declared in "
                                "Content-Length, or counted as a chunked body arrives) is refused 413; the upstream "
                                "never gets a whole one")

    @field_validator("upstream")
    @classmethod
    def _upstream_url(cls, v: str | None) -> str | None:
        return _http_url(v)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                ipaddress.ip_network(p, strict=False)
            except ValueError:
                raise ValueError(f"{p!r} is not an address or CIDR") from None
        return v


def parse_gateway_config(data: dict, origin: str = "gateway config") -> GatewayConfig:
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise GatewayConfigError(format_validation_error(exc, origin)) from None
    digest_map(cfg.keys)  # unreadable key files and shared keys fail now, not at the first request
    return cfg


def load_gateway_config(path: Path | str) -> GatewayConfig:
    return parse_gateway_config(read_toml(Path(path), GatewayConfigError), str(path))
