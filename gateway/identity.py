"""Who is asking: an API key (hashed, compared in constant time) or, from a trusted proxy only, X-Tenant."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from typing import Iterable

import redis
import redis.asyncio as aredis

from gateway.asgi import header
from gateway.breaker import UNREACHABLE, Breaker
from gateway.config import GatewayConfig, digest_map
from gateway.contract import CONTROL_RE, DIGEST_RE, key_digest, keys_key

log = logging.getLogger("gpu_autoscaler.gateway")


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
        me = asyncio.current_task()
        while True:
            try:
                await self._load()
            except Exception:  # noqa: BLE001 - the refresher must outlive any one bad read
                log.exception("gateway: reading the published API keys failed")
            finally:
                first.set()   # tried: requests no longer wait for a first read
            if me is not None and me.cancelling():
                # asked to stop while reading, and the read did not let the CancelledError through (it ended as
                # a caught error or an answer): stop anyway. Seen in CI: the loop went on re-reading every
                # refresh_s, and the event loop's shutdown waited for it forever
                return
            await asyncio.sleep(self.refresh_s)

    async def _load(self) -> None:
        try:
            raw = await self.client.hgetall(keys_key(self.prefix))
        except (redis.RedisError, OSError) as exc:
            if self.breaker is not None and isinstance(exc, UNREACHABLE):
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

    def from_trusted_proxy(self, scope: dict) -> bool:
        """Is the TCP peer one of `trusted_proxies` (whose X-Tenant and X-Forwarded-For are believed)?"""
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
        auth = header(scope, b"authorization") or ""
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else (header(scope, b"x-api-key") or "").strip()
        claimed = _utf8(header(scope, b"x-tenant"))
        if key:
            tenant = self.tenant_for_key(key)
            if tenant is not None:
                return Caller(tenant, "api-key")
            # an authenticating proxy in front may pass on the client's own Authorization (no gateway key)
            if claimed is None or not self.from_trusted_proxy(scope):
                return Caller(None, "unknown API key")
        if claimed is not None:
            if not self.from_trusted_proxy(scope):
                return Caller(None, "X-Tenant is not trusted from this address; send an API key")
            if not self.known_tenant(claimed):
                return Caller(None, "unknown tenant in X-Tenant")
            return Caller(claimed, "trusted-proxy")
        return Caller(None, "no credential (Authorization: Bearer KEY or X-API-Key)")
