"""A circuit breaker in front of one Redis, so a dead or hung Redis costs one short timeout, not one per request."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Awaitable, Callable

import redis


class RedisSkipped(redis.ConnectionError):
    """Raised instead of calling Redis while the circuit breaker is open (a RedisError: handled as Redis down)."""


# errors that say Redis cannot be reached (or hangs); an error Redis answered with (a script error, WRONGTYPE)
# proves it is there and does not open the breaker
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, OSError, asyncio.TimeoutError)


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
        except UNREACHABLE:
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
