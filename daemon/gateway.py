"""What a gateway replica needs: who is asking, an atomic Redis token-bucket check, and an ASGI middleware.

The daemon only publishes bucket parameters; the decision is made inside
Redis by one Lua script, so any number of replicas share one bucket per
tenant without races. A throttled user gets 429 with Retry-After and the
reason the daemon wrote (for example the cluster load level in force).

The tenant comes from a credential, never from what the client claims: an
API key (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``) is hashed
(SHA-256) and compared, in constant time, with every known key digest; the
digest -> tenant map comes from the gateway's config and/or from Redis, where
the daemon publishes it. ``X-Tenant`` counts only from addresses listed in
``trusted_proxies`` (the TCP peer; an explicit opt-in for an authenticating proxy in front),
and only for a tenant that has a key; a valid key still names its own tenant, and an Authorization
header that is no gateway key (the token such a proxy checked) does not stop X-Tenant there. Anything else is 401: there is no
default bucket for an unknown caller.

A hung or dead Redis costs at most one short timeout: a circuit breaker then skips Redis for a few seconds
(``fail_open`` decides at once) and lets one request probe it after. The stand-alone proxy sends only the
request's path and query to its upstream (any other request target is a 400) and never forwards the
gateway's own credentials; the degrade cache keeps one caller's answers for that caller only, with
per-tenant caps.

This module needs only the base install (redis, starlette, pydantic); it must
not import the daemon's heavy dependencies.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import math
import re
import time
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import quote, unquote_to_bytes
from typing import Awaitable, Callable, Iterable

import httpx
import redis
import redis.asyncio as aredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

log = logging.getLogger("gpu_autoscaler.gateway")

LUA = resources.files("daemon.actuators").joinpath("token_bucket.lua").read_text()


def limit_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:limit:{tenant}"


def bucket_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:bucket:{tenant}"


def keys_key(prefix: str) -> str:
    """Redis hash the daemon publishes: SHA-256 hex digest of an API key -> tenant."""
    return f"{prefix}:apikeys"


DIGEST_RE = re.compile(r"[0-9a-fA-F]{64}")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()


class GatewayConfigError(Exception):
    """A gateway config problem a human must fix; one line naming the dotted key."""


def read_secret(path: Path, where: str, error: type[Exception] = GatewayConfigError) -> str:
    """A token or key kept in a file (stripped); `error` naming `where` if it cannot be read or is too short."""
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise error(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(value) < 16:
        raise error(f"{where}: {path} holds fewer than 16 characters")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiKey(_Strict):
    """One tenant credential: the key itself, a file holding it, or only its SHA-256 digest."""

    tenant: str = Field(min_length=1)
    key: str | None = Field(None, min_length=16)
    key_file: Path | None = None
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

    @model_validator(mode="after")
    def _one_source(self) -> "ApiKey":
        if sum(x is not None for x in (self.key, self.key_file, self.key_sha256)) != 1:
            raise ValueError("give exactly one of key, key_file or key_sha256")
        return self

    def digest(self, where: str = "keys") -> str:
        if self.key_sha256 is not None:
            return self.key_sha256
        if self.key_file is not None:
            return key_digest(read_secret(self.key_file, f"{where}.key_file"))
        return key_digest(self.key or "")


def digest_map(keys: Iterable[ApiKey], where: str = "keys") -> dict[str, str]:
    """digest -> tenant; one key may not name two tenants."""
    out: dict[str, str] = {}
    for i, k in enumerate(keys):
        d = k.digest(f"{where}.{i}")
        if d in out and out[d] != k.tenant:
            raise GatewayConfigError(f"{where}.{i}: the same key is given to tenants {out[d]!r} and {k.tenant!r}")
        out[d] = k.tenant
    return out


class GatewayRedis(_Strict):
    url: str = Field("redis://127.0.0.1:6379/0", description="the Redis holding the buckets, limits and published keys")
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
        parts = []
        for err in exc.errors():
            key = ".".join(str(p) for p in err["loc"]) or "<root>"
            parts.append(f"{key}: {'unknown key' if err['type'] == 'extra_forbidden' else err['msg']}")
        raise GatewayConfigError(f"{origin}: " + "; ".join(parts)) from None
    digest_map(cfg.keys)  # unreadable key files and shared keys fail now, not at the first request
    return cfg


def load_gateway_config(path: Path | str) -> GatewayConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise GatewayConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GatewayConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_gateway_config(data, str(path))


@dataclass(frozen=True)
class Caller:
    tenant: str | None           # None: refused
    via: str                     # "api-key" | "trusted-proxy" | why it was refused


def _utf8(value: str | None) -> str | None:
    """A header value read as latin-1, as the UTF-8 text it carries when it does (tenant names)."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeDecodeError:
        return value


def _header(scope: dict, name: bytes) -> str | None:
    for k, v in scope.get("headers", []):
        if k == name:
            return v.decode("latin-1")
    return None


class RedisSkipped(redis.ConnectionError):
    """Raised instead of calling Redis while the circuit breaker is open (a RedisError: handled as Redis down)."""


# errors that say Redis cannot be reached (or hangs); an error Redis answered with (a script error, WRONGTYPE)
# proves it is there and does not open the breaker
_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)


class Breaker:
    """A circuit breaker in front of one Redis: after a failed call Redis is skipped for ``cooldown_s``, then
    one call (the probe) may try it again; its success closes the breaker, its failure opens it again.

    Without it a hung Redis cost every request a full socket timeout (4-8 s with the retries), with fail_open
    or without: the limiter outage became a gateway outage. While open, the caller gets ``RedisSkipped`` at
    once and applies its fail-open/fail-closed rule. Only one probe is in flight at a time; everything else
    keeps skipping meanwhile. One event loop; no locking needed.
    """

    def __init__(self, cooldown_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failed = False          # open (or half-open once the cool-down is over)
        self.open_until = -math.inf
        self.probing = False

    def retry_after_s(self) -> float:
        """Seconds until the next probe (0 when closed)."""
        return max(0.0, self.open_until - self.clock()) if self.failed else 0.0

    def _admit(self) -> bool:
        if not self.failed:
            return True
        if self.probing or self.clock() < self.open_until:
            return False
        self.probing = True
        return True

    def failure(self) -> None:
        self.failed, self.probing = True, False
        self.open_until = self.clock() + self.cooldown_s

    def success(self) -> None:
        self.failed, self.probing = False, False

    async def call(self, fn: Callable[[], Awaitable]):
        """`await fn()` unless the breaker is open (then RedisSkipped); a failure to reach Redis opens it."""
        if not self._admit():
            raise RedisSkipped(f"Redis skipped for {self.retry_after_s():.1f} s after a failure")
        try:
            result = await fn()
        except _UNREACHABLE:
            self.failure()
            raise
        except redis.RedisError:
            self.success()   # Redis answered (with an error): it is reachable
            raise
        except BaseException:
            self.probing = False   # cancelled (client went away): let another request probe
            raise
        self.success()
        return result


class Identity:
    """API key -> tenant, from config and (optionally) the map the daemon publishes to Redis.

    Keys are held as SHA-256 digests; a presented key's digest is compared with
    every known digest using ``hmac.compare_digest`` (no early exit), so the
    answer time does not depend on which key, or how much of one, matched.

    The published map is re-read every ``refresh_s`` by a background task (started by the first request on
    the event loop): no request waits for Redis to refresh it, so a hung Redis costs requests nothing here.
    Only the very first read is waited for (once; bounded by the Redis timeout), or a freshly started
    gateway would refuse every published key until it had read them.
    """

    def __init__(self, keys: dict[str, str] | None = None, *, client: aredis.Redis | None = None,
                 prefix: str = "gpuas", refresh_s: float = 5.0, trusted_proxies: Iterable[str] = (),
                 breaker: Breaker | None = None) -> None:
        self.local = dict(keys or {})
        self.client = client
        self.prefix = prefix
        self.refresh_s = refresh_s
        self.trusted = [ipaddress.ip_network(p, strict=False) for p in trusted_proxies]
        self.breaker = breaker
        self._published: dict[str, str] = {}
        self._loaded_at = -math.inf
        self._task: asyncio.Task | None = None
        self._first: asyncio.Event | None = None
        self._entries = self._build()

    @classmethod
    def from_config(cls, cfg: GatewayConfig, client: aredis.Redis | None = None,
                    breaker: Breaker | None = None) -> "Identity":
        return cls(digest_map(cfg.keys), client=client if cfg.keys_from_redis else None, prefix=cfg.redis.prefix,
                   refresh_s=cfg.keys_refresh_s, trusted_proxies=cfg.trusted_proxies, breaker=breaker)

    def _build(self) -> list[tuple[bytes, str]]:
        merged = {**self._published, **self.local}
        return [(bytes.fromhex(d), t) for d, t in merged.items()]

    async def _refresh(self) -> None:
        """Make sure the background refresher runs on this event loop; wait only for the first read ever."""
        if self.client is None:
            return
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._first = asyncio.Event()
            self._task = loop.create_task(self._refresh_forever(self._first), name="gateway-published-keys")
        if self._loaded_at == -math.inf and self._first is not None and not self._first.is_set():
            await self._first.wait()

    async def _refresh_forever(self, first: asyncio.Event) -> None:
        while True:
            try:
                await self._load()
            except Exception:  # noqa: BLE001 - the refresher must outlive any one bad read
                log.exception("gateway: reading the published API keys failed")
            finally:
                first.set()   # tried: requests no longer wait for a first read
            await asyncio.sleep(self.refresh_s)

    async def _load(self) -> None:
        try:
            raw = await self.client.hgetall(keys_key(self.prefix))
        except (redis.RedisError, OSError) as exc:
            if self.breaker is not None and isinstance(exc, _UNREACHABLE):
                self.breaker.failure()   # requests skip Redis at once instead of each finding it down
            log.warning("gateway: cannot read published API keys (%s); keeping %d known", exc, len(self._published))
            self._loaded_at = time.monotonic()
            return
        pub, bad = {}, 0
        for d, t in raw.items():
            try:
                d = d.decode("ascii") if isinstance(d, bytes) else d
                t = t.decode("utf-8") if isinstance(t, bytes) else t
            except UnicodeDecodeError:
                bad += 1
                continue
            if DIGEST_RE.fullmatch(d) and t and not CONTROL_RE.search(t):
                pub[d.lower()] = t
            else:
                bad += 1
        if bad:
            log.warning("gateway: %d malformed entries in %s skipped (want SHA-256 hex -> tenant)", bad,
                        keys_key(self.prefix))
        self._published = pub
        self._loaded_at = time.monotonic()
        self._entries = self._build()

    def tenant_for_key(self, presented: str) -> str | None:
        given = bytes.fromhex(key_digest(presented))
        found = None
        for digest, tenant in self._entries:
            if hmac.compare_digest(digest, given):
                found = tenant
        return found

    def known_tenant(self, tenant: str) -> bool:
        return any(t == tenant for _, t in self._entries)

    def _trusted(self, scope: dict) -> bool:
        client = scope.get("client")
        if not self.trusted or not client:
            return False
        try:
            addr = ipaddress.ip_address(client[0])
        except ValueError:
            return False
        return any(addr in net for net in self.trusted)

    async def caller(self, scope: dict) -> Caller:
        await self._refresh()
        auth = _header(scope, b"authorization") or ""
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else (_header(scope, b"x-api-key") or "").strip()
        claimed = _utf8(_header(scope, b"x-tenant"))
        if key:
            tenant = self.tenant_for_key(key)
            if tenant is not None:
                return Caller(tenant, "api-key")
            # an authenticating proxy in front may pass on the client's own Authorization (no gateway key)
            if claimed is None or not self._trusted(scope):
                return Caller(None, "unknown API key")
        if claimed is not None:
            if not self._trusted(scope):
                return Caller(None, "X-Tenant is not trusted from this address; send an API key")
            if not self.known_tenant(claimed):
                return Caller(None, "unknown tenant in X-Tenant")
            return Caller(claimed, "trusted-proxy")
        return Caller(None, "no credential (Authorization: Bearer KEY or X-API-Key)")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    remaining: float
    retry_after_s: float
    rate: float
    reason: str

    @staticmethod
    def from_reply(reply: list) -> "Decision":
        allowed, tokens, retry, rate, reason = reply
        dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
        return Decision(bool(int(allowed)), float(dec(tokens)), float(dec(retry)), float(dec(rate)), dec(reason))


class TokenBucket:
    """Synchronous client (for tests, tools and sync gateways)."""

    def __init__(self, client: redis.Redis, prefix: str = "gpuas", default_rate: float = 100.0,
                 default_burst: float = 200.0) -> None:
        self.client = client
        self.prefix = prefix
        self.default = (default_rate, default_burst)
        self._script = client.register_script(LUA)

    def acquire(self, tenant: str, cost: float = 1.0) -> Decision:
        reply = self._script(keys=[limit_key(self.prefix, tenant), bucket_key(self.prefix, tenant)],
                             args=[cost, *self.default])
        return Decision.from_reply(reply)


class AsyncTokenBucket:
    def __init__(self, client: aredis.Redis, prefix: str = "gpuas", default_rate: float = 100.0,
                 default_burst: float = 200.0) -> None:
        self.client = client
        self.prefix = prefix
        self.default = (default_rate, default_burst)
        self._script = client.register_script(LUA)

    async def acquire(self, tenant: str, cost: float = 1.0) -> Decision:
        reply = await self._script(keys=[limit_key(self.prefix, tenant), bucket_key(self.prefix, tenant)],
                                   args=[cost, *self.default])
        return Decision.from_reply(reply)


def _with_tenant(scope: dict, tenant: str) -> dict:
    """The app behind sees the authenticated tenant in X-Tenant (a client's own X-Tenant is dropped)."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"x-tenant"]
    headers.append((b"x-tenant", tenant.encode("utf-8")))  # bytes as they are: two names never look alike
    return {**scope, "headers": headers, "state": {**scope.get("state", {}), "tenant": tenant}}


HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade",
              b"proxy-authenticate", b"proxy-authorization"}
# the gateway's own credentials end at the gateway: an upstream (or whatever a crafted target reached) never
# sees a tenant's API key
NOT_FORWARDED = HOP_BY_HOP | {b"host", b"authorization", b"x-api-key"}
NOT_CACHED = HOP_BY_HOP | {b"content-length", b"set-cookie"}  # headers a cached answer does not keep
SAFE_METHODS = ("GET", "HEAD")
# a cached answer is chosen by these request headers only; an answer that says it varies by anything else
# (Vary: Cookie, Authorization, *) cannot be given to another request safely
VARY_OK = {"accept", "accept-encoding"}
# the caller's credential: two users of one tenant (two keys, or one key and two sessions) never share an answer
CREDENTIAL_HEADERS = (b"authorization", b"x-api-key", b"cookie")


@dataclass(frozen=True)
class Cached:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    age_s: float


@dataclass(frozen=True)
class CacheKey:
    tenant: str
    entry: str     # SHA-256 hex of what makes two requests identical


def _directives(headers: list[tuple[bytes, bytes]], name: bytes) -> set[str]:
    """The comma-separated tokens of every `name` header, lower case, without their `=value`."""
    out = set()
    for k, v in headers:
        if k.lower() == name:
            for part in v.decode("latin-1").split(","):
                token = part.split("=", 1)[0].strip().lower()
                if token:
                    out.add(token)
    return out


def storable(status: int, headers: list[tuple[bytes, bytes]]) -> bool:
    """May this answer be given to a later identical request of the same caller?

    Only a 200 that is neither ``private`` nor ``no-store`` and whose ``Vary`` names at most Accept and
    Accept-Encoding (what the cache key holds). A private answer, or one that varies by Cookie, Authorization
    or anything else (or ``*``), is about the one request that got it.
    """
    if status != 200:
        return False
    if _directives(headers, b"cache-control") & {"private", "no-store"}:
        return False
    return _directives(headers, b"vary") <= VARY_OK


_CACHE_PUT = """
-- KEYS[1]: the tenant's entries (hash: entry id -> blob, and '#bytes' -> their total size)
-- KEYS[2]: the tenant's index (sorted set: entry id -> stored at, epoch seconds)
-- ARGV: entry id, blob, stored at, ttl ms, max entries, max bytes. Returns 1 if stored, 0 if too big.
-- Atomic: expired entries go, then the oldest until the tenant is within both caps again.
local data, idx = KEYS[1], KEYS[2]
local id, blob = ARGV[1], ARGV[2]
local at, ttl_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_entries, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
-- the two keys expire together; if only one is left (evicted, deleted by hand) start the tenant afresh
if redis.call('EXISTS', data) == 0 or redis.call('EXISTS', idx) == 0 then
  redis.call('DEL', data, idx)
end
local function drop(member)
  local n = redis.call('HSTRLEN', data, member)
  redis.call('HDEL', data, member)
  redis.call('ZREM', idx, member)
  redis.call('HINCRBY', data, '#bytes', -n)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', idx, '-inf', '(' .. tostring(at - ttl_ms / 1000))) do
  drop(m)
end
if redis.call('ZSCORE', idx, id) then
  drop(id)
end
if #blob > max_bytes then
  return 0
end
redis.call('HSET', data, id, blob)
redis.call('ZADD', idx, at, id)
local total = redis.call('HINCRBY', data, '#bytes', #blob)
while redis.call('ZCARD', idx) > max_entries or total > max_bytes do
  local oldest = redis.call('ZRANGE', idx, 0, 0)[1]
  if not oldest then   -- the total disagrees with the entries: start the tenant afresh
    redis.call('DEL', data, idx)
    return 0
  end
  drop(oldest)
  total = tonumber(redis.call('HGET', data, '#bytes'))
end
redis.call('PEXPIRE', data, ttl_ms)
redis.call('PEXPIRE', idx, ttl_ms)
return 1
"""


class ResponseCache:
    """Responses of idempotent requests, per tenant and per caller, in Redis: the fallback for an over-limit
    request.

    Identical means: same tenant, same credential (Authorization / X-API-Key) and Cookie, method, path as
    sent, query, Accept and Accept-Encoding headers; a POST counts only when it carries an ``Idempotency-Key``
    header, and then the key and the body's SHA-256 are part of the identity. Only answers that ``storable``
    allows are kept, up to ``max_bytes``, for ``ttl_s``.

    Each tenant's entries live in one hash with an index by age (``<prefix>:rcache:<tenant>`` and
    ``<prefix>:rcache-idx:<tenant>``); one Lua script stores an entry and evicts the oldest until the tenant
    holds at most ``max_entries_per_tenant`` entries and ``max_bytes_per_tenant`` bytes, so a tenant varying
    its query string cannot grow the cache (and fill the Redis that holds the buckets) without bound.
    """

    def __init__(self, client: aredis.Redis, prefix: str = "gpuas", ttl_s: float = 300.0,
                 max_bytes: int = 1_048_576, max_entries_per_tenant: int = 256,
                 max_bytes_per_tenant: int = 8_388_608, breaker: Breaker | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self.max_entries_per_tenant = max_entries_per_tenant
        self.max_bytes_per_tenant = max_bytes_per_tenant
        self.breaker = breaker or Breaker()
        self._put = client.register_script(_CACHE_PUT)

    def entries_key(self, tenant: str) -> str:
        return f"{self.prefix}:rcache:{tenant}"

    def index_key(self, tenant: str) -> str:
        return f"{self.prefix}:rcache-idx:{tenant}"

    def key_for(self, tenant: str, scope: dict, body: bytes | None) -> CacheKey | None:
        method = scope.get("method", "GET")
        path = scope["raw_path"].decode("latin-1") if scope.get("raw_path") else scope.get("path", "")  # as sent
        credential = hashlib.sha256(b"\x00".join(b"\x01".join(v for k, v in scope.get("headers", []) if k == name)
                                                  for name in CREDENTIAL_HEADERS)).hexdigest()
        parts = [tenant, credential, method, path, scope.get("query_string", b"").decode("latin-1"),
                 _header(scope, b"accept") or "", _header(scope, b"accept-encoding") or ""]
        if method == "POST":
            idem = _header(scope, b"idempotency-key")
            if not idem or body is None:
                return None
            parts += [idem, hashlib.sha256(body).hexdigest()]
        elif method not in SAFE_METHODS:
            return None
        return CacheKey(tenant, hashlib.sha256("\x00".join(parts).encode("utf-8", "replace")).hexdigest())

    async def get(self, key: CacheKey) -> Cached | None:
        raw = await self.breaker.call(lambda: self.client.hget(self.entries_key(key.tenant), key.entry))
        if not raw:
            return None
        meta_json, _, body = raw.partition(b"\n")
        try:
            meta = json.loads(meta_json)
            age = time.time() - float(meta["at"])
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]]
            status = int(meta["status"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("gateway: a malformed cached answer in %s ignored", self.entries_key(key.tenant))
            return None
        if age > self.ttl_s:
            return None   # expired; the next store of this tenant drops it
        return Cached(status, headers, body, max(0.0, age))

    async def put(self, key: CacheKey, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        if not storable(status, headers) or len(body) > self.max_bytes:
            return False
        keep = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers
                if k.lower() not in NOT_CACHED and not k.lower().startswith(b"x-ratelimit")]
        at = time.time()
        blob = json.dumps({"status": status, "headers": keep, "at": at}).encode() + b"\n" + body
        stored = await self.breaker.call(lambda: self._put(
            keys=[self.entries_key(key.tenant), self.index_key(key.tenant)],
            args=[key.entry, blob, repr(at), max(1, int(self.ttl_s * 1000)), self.max_entries_per_tenant,
                  self.max_bytes_per_tenant]))
        return bool(int(stored))


_UNSAFE_BYTES = re.compile(rb"[^\x21-\x7e]")


def _escape(raw: bytes) -> bytes:
    """Bytes an HTTP target cannot carry as they are (space, controls, non-ASCII) percent-escaped, byte by byte."""
    return _UNSAFE_BYTES.sub(lambda m: b"%%%02X" % m.group()[0], raw)


class ProxyApp:
    """A minimal ASGI reverse proxy (httpx): the stand-alone gateway's upstream and the cheaper fallback.

    The request's path and query go upstream as the client sent them (``raw_path``: percent-escapes kept),
    joined to the upstream URL's own path; scheme, host and port are always the upstream's. A target that is
    not a path starting with ``/`` (``@host:port/x``, ``http://host/x``, ``\\host``, ``*``), or that holds a
    ``.`` or ``..`` segment (which would leave the upstream's path prefix), is refused 400:
    the upstream URL used to be the upstream string + the target, so ``@127.0.0.1:9302/admin`` made the
    upstream a user name and sent the request (with the tenant's headers) to any host the caller chose.
    The gateway's own credentials (Authorization, X-API-Key) are not forwarded.

    Bodies are streamed both ways, and the answer's bytes are passed on undecoded with their own
    Content-Encoding and Content-Length (and Set-Cookie); only hop-by-hop headers are dropped.
    """

    def __init__(self, url: str, timeout_s: float = 30.0, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.base = httpx.URL(url)
        self._prefix = self.base.raw_path.partition(b"?")[0].rstrip(b"/")
        self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    def target_url(self, scope: dict) -> httpx.URL | None:
        """The upstream URL for this request: only the path (after the upstream's own) and the query are the
        client's. None when the request target is not origin-form (a path starting with /)."""
        raw = scope.get("raw_path")
        if raw is None:
            raw = quote(scope.get("path", "")).encode("ascii")
        if not raw.startswith(b"/"):
            return None
        if any(seg in (b".", b"..") for seg in re.split(rb"[/\\]", unquote_to_bytes(raw))):
            return None   # /base/../admin would leave the upstream's path prefix (httpx removes dot segments)
        query = scope.get("query_string") or b""
        full = _escape(self._prefix + raw) + (b"?" + _escape(query) if query else b"")
        try:
            url = self.base.copy_with(raw_path=full)
        except (httpx.InvalidURL, UnicodeDecodeError):
            return None
        if (url.scheme, url.host, url.port, url.userinfo) != (self.base.scheme, self.base.host, self.base.port,
                                                              self.base.userinfo):
            return None   # cannot happen with copy_with(raw_path=...); never send elsewhere if it did
        return url

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable], send: Callable) -> None:
        if scope["type"] != "http":
            return
        url = self.target_url(scope)
        if url is None:
            await RateLimitMiddleware._reply(send, 400, {"error": "the request target must be a path starting "
                                                                  "with /"}, [])
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k not in NOT_FORWARDED]
        sized = any(k == b"content-length" for k, _ in headers)
        chunked = any(k == b"transfer-encoding" for k, _ in scope.get("headers", []))
        # a body with a length (kept in `headers`) or chunked is streamed; none at all stays none
        content = _stream_body(receive) if sized or chunked else await _read_body(receive)
        try:
            req = self.client.build_request(scope.get("method", "GET"), url, headers=headers, content=content)
            resp = await self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            log.warning("gateway: upstream %s failed: %s", self.url, exc)
            await RateLimitMiddleware._reply(send, 502, {"error": "upstream unavailable"}, [])
            return
        try:
            out = [(k.lower(), v) for k, v in resp.headers.raw if k.lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": resp.status_code, "headers": out})
            async for chunk in resp.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await resp.aclose()


async def _stream_body(receive: Callable[[], Awaitable]):
    """The request body as it arrives (for httpx to send upstream)."""
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return
        if msg.get("body"):
            yield msg["body"]
        if not msg.get("more_body"):
            return


async def _read_body(receive: Callable[[], Awaitable]) -> bytes:
    """The whole request body (the proxy forwards it in one piece)."""
    chunks = []
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            break
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body"):
            break
    return b"".join(chunks)


async def _peek_body(receive: Callable[[], Awaitable], limit: int) -> tuple[bytes | None, Callable[[], Awaitable]]:
    """Read the request body up to `limit` bytes: (the body, or None when it is longer, and a `receive` that
    gives the app everything from the start). A long body is never held whole: past `limit` the app's reads
    go straight to the client again."""
    held: list[dict] = []
    size, complete = 0, False
    while size <= limit:
        msg = await receive()
        held.append(msg)
        if msg["type"] != "http.request":
            break
        size += len(msg.get("body", b""))
        if not msg.get("more_body"):
            complete = True
            break
    body = b"".join(m.get("body", b"") for m in held) if complete and size <= limit else None

    async def replay():
        return held.pop(0) if held else await receive()

    return body, replay


def _header_text(text: str) -> bytes:
    """Free text as a header value: control characters (a line break would make the server refuse the whole
    answer) become spaces."""
    return CONTROL_RE.sub(" ", text).encode("utf-8", "replace")


def _close_reason(text: str) -> str:
    """A websocket close reason: at most 123 bytes of UTF-8."""
    return text.encode("utf-8")[:123].decode("utf-8", "ignore")


class RateLimitMiddleware:
    """ASGI middleware: 401 for an unknown caller; 429 + Retry-After + X-RateLimit-Reason when the
    tenant's bucket is empty. A websocket upgrade goes through the same identity and costs one token.

    If Redis cannot be reached the request is let through (``fail_open``) and
    marked with ``X-RateLimit-Degraded``: a limiter outage should not become a
    gateway outage. Set ``fail_open=False`` to refuse instead. ``breaker`` skips
    Redis for a while after a failure, so that rule applies at once instead of
    after a timeout per request.

    Degrade path (off unless ``cache`` or ``fallback`` is given): an over-limit
    request is answered from ``cache`` (the same caller's earlier answer to an
    identical idempotent request), else by the ``fallback`` app (a cheaper
    upstream), marked ``X-Degraded: cache`` / ``X-Degraded: cheaper-upstream``;
    only when neither can answer does it get the 429.
    """

    def __init__(self, app: Callable, bucket: AsyncTokenBucket, identity: Identity, fail_open: bool = True,
                 cache: ResponseCache | None = None, fallback: Callable | None = None,
                 breaker: Breaker | None = None) -> None:
        self.app = app
        self.bucket = bucket
        self.identity = identity
        self.fail_open = fail_open
        self.cache = cache
        self.fallback = fallback
        self.breaker = breaker or Breaker()
        self._down_logged_at = -math.inf

    async def _acquire(self, tenant: str) -> Decision:
        return await self.breaker.call(lambda: self.bucket.acquire(tenant))

    def _closed_retry_after(self) -> bytes:
        return str(max(1, math.ceil(self.breaker.retry_after_s()))).encode()

    def _limiter_down(self, exc: Exception) -> None:
        """Say that Redis cannot be reached, and what requests get meanwhile; at most once every 10 s."""
        now = time.monotonic()
        if now - self._down_logged_at >= 10.0:
            self._down_logged_at = now
            log.warning("gateway: rate limiter unavailable (%s); requests are %s", exc,
                        "let through marked X-RateLimit-Degraded (fail_open)" if self.fail_open else "refused (503)")

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable], send: Callable) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        who = await self.identity.caller(scope)
        if who.tenant is None:
            await self._reply(send, 401, {"error": who.via}, [(b"www-authenticate", b'Bearer realm="gpu-autoscaler"')])
            return
        tenant = who.tenant
        scope = _with_tenant(scope, tenant)
        try:
            d = await self._acquire(tenant)
        except (redis.RedisError, OSError) as exc:
            self._limiter_down(exc)
            if not self.fail_open:
                await self._reply(send, 503, {"error": "rate limiter unavailable"},
                                  [(b"retry-after", self._closed_retry_after())])
                return

            async def send_degraded(msg):
                if msg["type"] == "http.response.start":
                    msg = {**msg, "headers": list(msg.get("headers", [])) + [(b"x-ratelimit-degraded", b"1")]}
                await send(msg)

            await self.app(scope, receive, send_degraded)
            return
        headers = [(b"x-ratelimit-limit", f"{d.rate:g}".encode()),
                   (b"x-ratelimit-remaining", str(max(0, math.floor(d.remaining)) if math.isfinite(d.remaining)
                                                  else d.remaining).encode())]
        cache_key = None
        if self.cache is not None:
            body = None
            if scope.get("method") == "POST" and _header(scope, b"idempotency-key"):
                body, receive = await _peek_body(receive, self.cache.max_bytes)
            cache_key = self.cache.key_for(tenant, scope, body)
        if not d.allowed:
            retry = max(1, math.ceil(d.retry_after_s)) if d.retry_after_s >= 0 else 60
            headers += [(b"retry-after", str(retry).encode()), (b"x-ratelimit-reason", _header_text(d.reason))]
            if await self._degraded(scope, receive, send, tenant, cache_key, headers):
                return
            await self._reply(send, 429, {"error": "rate limited", "tenant": tenant, "reason": d.reason,
                                          "retry_after_s": round(d.retry_after_s, 3)}, headers)
            return

        captured: dict = {"body": [], "size": 0}

        async def send_with_headers(msg):
            if msg["type"] == "http.response.start":
                captured["status"], captured["headers"] = msg["status"], list(msg.get("headers", []))
                msg = {**msg, "headers": list(msg.get("headers", [])) + headers}
            elif msg["type"] == "http.response.body" and cache_key is not None:
                captured["size"] += len(msg.get("body", b""))
                if captured["size"] <= self.cache.max_bytes:
                    captured["body"].append(msg.get("body", b""))
                else:  # too big to cache: not held while it streams past
                    captured["body"].clear()
            await send(msg)

        await self.app(scope, receive, send_with_headers)
        if cache_key is not None and scope.get("method") != "HEAD" and "status" in captured \
                and captured["size"] <= self.cache.max_bytes:
            try:
                await self.cache.put(cache_key, captured["status"], captured["headers"], b"".join(captured["body"]))
            except RedisSkipped:
                pass   # its Redis is down and was said so
            except (redis.RedisError, OSError) as exc:
                log.warning("gateway: response not cached (%s)", exc)

    async def _websocket(self, scope: dict, receive: Callable, send: Callable) -> None:
        """A websocket upgrade: the same identity, and one token of the tenant's bucket per connection.

        Refused before the handshake (the server answers HTTP 403): close code 1008 for an unknown caller,
        1013 with the limit's reason when the bucket is empty.
        """
        who = await self.identity.caller(scope)
        if who.tenant is None:
            await send({"type": "websocket.close", "code": 1008, "reason": _close_reason(who.via)})
            return
        try:
            d = await self._acquire(who.tenant)
        except (redis.RedisError, OSError) as exc:
            self._limiter_down(exc)
            if not self.fail_open:
                await send({"type": "websocket.close", "code": 1013, "reason": "rate limiter unavailable"})
                return
        else:
            if not d.allowed:
                await send({"type": "websocket.close", "code": 1013,
                            "reason": _close_reason(f"rate limited: {d.reason}")})
                return
        await self.app(_with_tenant(scope, who.tenant), receive, send)

    async def _degraded(self, scope: dict, receive: Callable, send: Callable, tenant: str, cache_key: CacheKey | None,
                        headers: list) -> bool:
        """Answer an over-limit request from the cache or the cheaper upstream; False if neither can."""
        if cache_key is not None:
            try:
                hit = await self.cache.get(cache_key)
            except RedisSkipped:
                hit = None
            except (redis.RedisError, OSError) as exc:
                log.warning("gateway: response cache unavailable (%s)", exc)
                hit = None
            if hit is not None:
                body = b"" if scope.get("method") == "HEAD" else hit.body
                out = [*hit.headers, (b"content-length", str(len(hit.body)).encode()), *headers,
                       (b"x-degraded", b"cache"), (b"age", str(int(hit.age_s)).encode())]
                await send({"type": "http.response.start", "status": hit.status, "headers": out})
                await send({"type": "http.response.body", "body": body})
                log.info("gateway: %s over limit, answered from cache", tenant)
                return True
        if self.fallback is not None:
            async def send_marked(msg):
                if msg["type"] == "http.response.start":
                    msg = {**msg, "headers": list(msg.get("headers", [])) + headers
                           + [(b"x-degraded", b"cheaper-upstream")]}
                await send(msg)

            await self.fallback(scope, receive, send_marked)
            log.info("gateway: %s over limit, routed to the cheaper upstream", tenant)
            return True
        return False

    @staticmethod
    async def _reply(send: Callable, status: int, body: dict, headers: list) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": data})


def limiter_client(url: str, timeout_s: float = 0.5) -> aredis.Redis:
    """The gateway's Redis client: every call gives up after `timeout_s`; a call that found its pooled
    connection dead (a Redis restart) is retried once at once, a timed-out one is not retried at all.

    redis-py's default policy retries three times with exponential backoff: with Redis down, every request then
    waited 3-4 s for the limiter to fail (open or closed). A hung Redis (accepts, never answers) cost two 2 s
    socket timeouts per request even with one retry; now one `timeout_s`, and the breaker skips Redis after it.
    """
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return aredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                 retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)))


def build_app(cfg: GatewayConfig, app: Callable | None = None) -> RateLimitMiddleware:
    """The gateway as configured: `app` (or a proxy to `upstream`) behind identity, limits and the degrade path.

    One circuit breaker per Redis: the cache shares the limiter's unless it has its own Redis
    (`degrade.cache_redis_url`)."""
    if app is None:
        if cfg.upstream is None:
            raise GatewayConfigError("upstream: the stand-alone gateway needs upstream = URL")
        app = ProxyApp(cfg.upstream)
    client = limiter_client(cfg.redis.url, cfg.redis.timeout_s)
    breaker = Breaker(cfg.redis.breaker_s)
    dg = cfg.degrade
    cache = None
    if dg.cache:
        if dg.cache_redis_url:
            cache_client, cache_breaker = limiter_client(dg.cache_redis_url, cfg.redis.timeout_s), \
                Breaker(cfg.redis.breaker_s)
        else:
            cache_client, cache_breaker = client, breaker
        cache = ResponseCache(cache_client, cfg.redis.prefix, dg.cache_ttl_s, dg.cache_max_bytes,
                              dg.cache_max_entries_per_tenant, dg.cache_max_bytes_per_tenant, cache_breaker)
    fallback = ProxyApp(dg.cheaper_upstream) if dg.cheaper_upstream else None
    return RateLimitMiddleware(app, AsyncTokenBucket(client, cfg.redis.prefix),
                               Identity.from_config(cfg, client, breaker), fail_open=cfg.fail_open, cache=cache,
                               fallback=fallback, breaker=breaker)


def main(argv: list[str] | None = None) -> None:
    """`gpu-autoscaler-gateway --config gateway.toml`: a stand-alone rate-limiting reverse proxy (needs uvicorn)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="gpu-autoscaler-gateway", description=main.__doc__)
    ap.add_argument("--config", "-c", required=True, help="gateway TOML file")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line, with its URL and query, per proxied request
    try:
        app = build_app(load_gateway_config(args.config))
    except GatewayConfigError as exc:
        sys.stderr.write(f"gpu-autoscaler-gateway: config error: {exc}\n")
        sys.exit(2)
    try:
        import uvicorn
    except ImportError:
        sys.stderr.write("gpu-autoscaler-gateway: needs an ASGI server: pip install 'gpu-autoscaler[gateway]'\n")
        sys.exit(2)
    # proxy_headers=False: scope["client"] stays the TCP peer, the address `trusted_proxies` is about (uvicorn
    # would otherwise replace it with X-Forwarded-For from local clients, who could then pose as the proxy)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False)


if __name__ == "__main__":
    main()
