"""What a gateway replica needs: an atomic Redis token-bucket check and an ASGI middleware around it.

The daemon only publishes bucket parameters; the decision is made inside
Redis by one Lua script, so any number of replicas share one bucket per
tenant without races. A throttled user gets 429 with Retry-After and the
reason the daemon wrote (for example the cluster load level in force).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Awaitable, Callable

import redis
import redis.asyncio as aredis

LUA = resources.files("daemon.actuators").joinpath("token_bucket.lua").read_text()


def limit_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:limit:{tenant}"


def bucket_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:bucket:{tenant}"


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


def tenant_from_header(scope: dict) -> str | None:
    for k, v in scope.get("headers", []):
        if k == b"x-tenant":
            return v.decode("latin-1") or None
    return None


class RateLimitMiddleware:
    """ASGI middleware: 429 + Retry-After + X-RateLimit-Reason when the tenant's bucket is empty.

    If Redis cannot be reached the request is let through (``fail_open``) and
    marked with ``X-RateLimit-Degraded``: a limiter outage should not become a
    gateway outage. Set ``fail_open=False`` to refuse instead.
    """

    def __init__(self, app: Callable, bucket: AsyncTokenBucket,
                 tenant_of: Callable[[dict], str | None] = tenant_from_header, fail_open: bool = True) -> None:
        self.app = app
        self.bucket = bucket
        self.tenant_of = tenant_of
        self.fail_open = fail_open

    async def __call__(self, scope: dict, receive: Callable[[], Awaitable], send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tenant = self.tenant_of(scope)
        if tenant is None:
            await self._reply(send, 400, {"error": "no tenant given (X-Tenant header)"}, [])
            return
        try:
            d = await self.bucket.acquire(tenant)
        except (redis.RedisError, OSError) as exc:
            if not self.fail_open:
                await self._reply(send, 503, {"error": f"rate limiter unavailable: {exc}"}, [(b"retry-after", b"1")])
                return

            async def send_degraded(msg):
                if msg["type"] == "http.response.start":
                    msg = {**msg, "headers": list(msg.get("headers", [])) + [(b"x-ratelimit-degraded", b"1")]}
                await send(msg)

            await self.app(scope, receive, send_degraded)
            return
        headers = [(b"x-ratelimit-limit", f"{d.rate:g}".encode()),
                   (b"x-ratelimit-remaining", str(max(0, math.floor(d.remaining))).encode())]
        if not d.allowed:
            retry = max(1, math.ceil(d.retry_after_s)) if d.retry_after_s >= 0 else 60
            headers += [(b"retry-after", str(retry).encode()), (b"x-ratelimit-reason", d.reason.encode("utf-8", "replace"))]
            await self._reply(send, 429, {"error": "rate limited", "tenant": tenant, "reason": d.reason,
                                          "retry_after_s": round(d.retry_after_s, 3)}, headers)
            return

        async def send_with_headers(msg):
            if msg["type"] == "http.response.start":
                msg = {**msg, "headers": list(msg.get("headers", [])) + headers}
            await send(msg)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    async def _reply(send: Callable, status: int, body: dict, headers: list) -> None:
        data = json.dumps(body).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                                *headers]})
        await send({"type": "http.response.body", "body": data})
