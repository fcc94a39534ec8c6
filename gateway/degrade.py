"""The degrade path's response cache: one caller's earlier answers, for that caller only, capped per tenant."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass

import redis.asyncio as aredis

from gateway.asgi import header
from gateway.breaker import Breaker
from gateway.proxy import HOP_BY_HOP

log = logging.getLogger("gpu_autoscaler.gateway")

# sees a tenant's API key
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
                 header(scope, b"accept") or "", header(scope, b"accept-encoding") or ""]
        if method == "POST":
            idem = header(scope, b"idempotency-key")
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
