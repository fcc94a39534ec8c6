"""The token bucket: one atomic Lua script in Redis per request, shared by every gateway replica."""

from __future__ import annotations

from dataclasses import dataclass

import redis
import redis.asyncio as aredis

from gateway.contract import LUA, bucket_key, limit_key


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
        reply = self._script(keys=[bucket_key(self.prefix, tenant)],
                             args=[cost, *self.default, limit_key(self.prefix, tenant)])
        return Decision.from_reply(reply)


class AsyncTokenBucket:
    def __init__(self, client: aredis.Redis, prefix: str = "gpuas", default_rate: float = 100.0,
                 default_burst: float = 200.0) -> None:
        self.client = client
        self.prefix = prefix
        self.default = (default_rate, default_burst)
        self._script = client.register_script(LUA)

    async def acquire(self, tenant: str, cost: float = 1.0) -> Decision:
        reply = await self._script(keys=[bucket_key(self.prefix, tenant)],
                                   args=[cost, *self.default, limit_key(self.prefix, tenant)])
        return Decision.from_reply(reply)


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
