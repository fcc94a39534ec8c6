"""Load levels -> per-tenant token-bucket parameters, with hysteresis on the way down."""

from __future__ import annotations

import math

from daemon.config import RateLimitConfig, TenantConfig, Tier
from daemon.policy.types import RateLimit


def rate_level(load: float, previous: int, cfg: RateLimitConfig) -> int:
    """Tighten as soon as load crosses a level; loosen only once load is `hysteresis` below it.

    Unknown load (NaN) keeps the previous level: no data is not a reason to relax.
    """
    levels = cfg.levels
    previous = max(0, min(previous, len(levels) - 1))
    if not math.isfinite(load):
        return previous
    up = max(i for i, lvl in enumerate(levels) if load >= lvl.load)
    if up >= previous:
        return up
    lvl = previous
    while lvl > up and load < levels[lvl].load - cfg.hysteresis:
        lvl -= 1
    return lvl


def tenant_limits(tenants: tuple[str, ...], tiers: tuple[Tier, ...], level: int, load: float,
                  cfg: RateLimitConfig, overrides: dict[str, TenantConfig]) -> dict[str, RateLimit]:
    # a level remembered from before a reload that removed levels (a restored or stale plan's memory)
    # means the tightest level there is now, not an IndexError in the stale or safe-default path
    level = max(0, min(level, len(cfg.levels) - 1))
    lvl = cfg.levels[level]
    load_txt = f"{load:.0%}" if math.isfinite(load) else "unknown"
    reasons = {
        tier: (f"cluster load {load_txt} (level {level}, >= {lvl.load:.0%}): {tier} tier limited to "
               f"{lvl.rate(tier):g} req/s"
               if level > 0 else f"normal operation: {tier} tier limit {lvl.rate(tier):g} req/s")
        for tier in ("high", "normal", "low")
    }
    cache = {tier: RateLimit(lvl.rate(tier), lvl.rate(tier) * cfg.burst_seconds, level, reasons[tier])
             for tier in ("high", "normal", "low")}
    out: dict[str, RateLimit] = {}
    for name, tier in zip(tenants, tiers):
        o = overrides.get(name)
        if o is not None and o.rate_override is not None:
            r = o.rate_override
            out[name] = RateLimit(r, r * cfg.burst_seconds, level, f"fixed limit for {name}: {r:g} req/s")
        else:
            out[name] = cache[tier]
    return out
