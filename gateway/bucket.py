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


class _Bucket:
    """What the two clients share: the tenant's bucket and limit keys under `prefix`, the defaults for a tenant
    with no published limit, and the script's call (sync or async, as the client is)."""

    def __init__(self, client: redis.Redis | aredis.Redis, prefix: str = "gpuas", default_rate: float = 100.0,
                 default_burst: float = 200.0) -> None:
        self.client = client
        self.prefix = prefix
        self.default = (default_rate, default_burst)
        self._script = client.register_script(LUA)

    def _call(self, tenant: str, cost: float):
        """The script's reply (a list), or with an asyncio client the awaitable of it."""
        return self._script(keys=[bucket_key(self.prefix, tenant)],
                            args=[cost, *self.default, limit_key(self.prefix, tenant)])


class TokenBucket(_Bucket):
    """Synchronous client (for tests, tools and sync gateways)."""

    client: redis.Redis

    def acquire(self, tenant: str, cost: float = 1.0) -> Decision:
        return Decision.from_reply(self._call(tenant, cost))


class AsyncTokenBucket(_Bucket):
    client: aredis.Redis

    async def acquire(self, tenant: str, cost: float = 1.0) -> Decision:
        return Decision.from_reply(await self._call(tenant, cost))


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
