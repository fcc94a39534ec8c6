"""The ASGI middleware: identity, the tenant's bucket, 401/429 with the reason, and the degrade path."""

from __future__ import annotations

import logging
import math
import time
from typing import Awaitable, Callable

import redis

from gateway.asgi import header, peek_body, reply_json
from gateway.breaker import Breaker, RedisSkipped
from gateway.bucket import AsyncTokenBucket, Decision
from gateway.contract import CONTROL_RE
from gateway.degrade import CacheKey, ResponseCache
from gateway.identity import Identity

log = logging.getLogger("gpu_autoscaler.gateway")


class BodyTooLarge(Exception):
    """The request body passed the gateway's max_body_bytes (raised from the `receive` the app reads)."""


def _clean_headers(scope: dict, trusted: Callable[[dict], bool]) -> dict:
    """The request's headers as the gateway passes them on.

    - A header name with an underscore is dropped: servers that map header names to CGI-style variables
      (``HTTP_X_TENANT``) read ``X_Tenant`` as ``X-Tenant``, so a client could forward its own tenant claim beside
      the one the gateway sets (nginx drops them by default too).
    - X-Forwarded-For gets the TCP peer appended, and keeps what came before only from a trusted proxy: the
      client's own value is a claim, never an identity. X-Real-IP and Forwarded from anyone else are dropped.
    """
    peer = (scope.get("client") or ("", 0))[0]
    from_proxy = trusted(scope)
    headers, chain = [], []
    for k, v in scope.get("headers", []):
        if b"_" in k:
            continue
        if k == b"x-forwarded-for":
            if from_proxy:
                chain.append(v)
            continue
        if k in (b"x-real-ip", b"forwarded") and not from_proxy:
            continue
        headers.append((k, v))
    if peer:
        chain.append(peer.encode("latin-1"))
    if chain:
        headers.append((b"x-forwarded-for", b", ".join(chain)))
    return {**scope, "headers": headers}


def _declared_length(scope: dict) -> int | None:
    """The Content-Length the client declared (None: none, or not a number: the server has refused it already)."""
    raw = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _with_tenant(scope: dict, tenant: str) -> dict:
    """The app behind sees the authenticated tenant in X-Tenant (a client's own X-Tenant is dropped)."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"x-tenant"]
    headers.append((b"x-tenant", tenant.encode("utf-8")))  # bytes as they are: two names never look alike
    return {**scope, "headers": headers, "state": {**scope.get("state", {}), "tenant": tenant}}


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
                 breaker: Breaker | None = None, max_body_bytes: int | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
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
        scope = _clean_headers(scope, self.identity.from_trusted_proxy)
        who = await self.identity.caller(scope)
        if who.tenant is None:
            await self._reply(send, 401, {"error": who.via}, [(b"www-authenticate", b'Bearer realm="gpu-autoscaler"')])
            return
        if self.max_body_bytes is None:
            await self._http(_with_tenant(scope, who.tenant), receive, send, who.tenant)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await self._too_large(send)
            return
        await self._bounded(_with_tenant(scope, who.tenant), receive, send, who.tenant)

    async def _too_large(self, send: Callable) -> None:
        await self._reply(send, 413, {"error": f"request body larger than {self.max_body_bytes} bytes"},
                          [(b"connection", b"close")])

    async def _bounded(self, scope: dict, receive: Callable[[], Awaitable], send: Callable, tenant: str) -> None:
        """`_http` with a body of at most max_body_bytes, counted as it arrives (a chunked body declares no
        length). Past it, the app's next read raises BodyTooLarge (an upstream then sees its request broken off,
        never a short body that looks whole), whatever the app answers is dropped, and the client gets 413."""
        state = {"size": 0, "over": False, "started": False}
        limit = self.max_body_bytes

        async def bounded_receive():
            if state["over"]:
                raise BodyTooLarge()
            msg = await receive()
            if msg["type"] == "http.request":
                state["size"] += len(msg.get("body", b""))
                if state["size"] > limit:
                    state["over"] = True
                    raise BodyTooLarge()
            return msg

        async def guarded_send(msg):
            if state["over"]:
                return   # the app's answer to a body it never got whole (a 500 for the exception, say)
            if msg["type"] == "http.response.start":
                state["started"] = True
            await send(msg)

        try:
            await self._http(scope, bounded_receive, guarded_send, tenant)
        except BodyTooLarge:
            pass
        except Exception:
            if not state["over"]:
                raise
        if state["over"] and not state["started"]:
            await self._too_large(send)

    async def _http(self, scope: dict, receive: Callable[[], Awaitable], send: Callable, tenant: str) -> None:
        """An identified caller's request: the tenant's bucket, then the app, the degrade path or the refusal."""
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
            if scope.get("method") == "POST" and header(scope, b"idempotency-key"):
                body, receive = await peek_body(receive, self.cache.max_bytes)
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
        scope = _clean_headers(scope, self.identity.from_trusted_proxy)
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

    _reply = staticmethod(reply_json)
