"""The safe default: what the daemon enforces when its last good plan is too old to trust.

No holds beyond the static pool (the high tier keeps its guaranteed ``reserve_share``; nothing is held
for a forecast or for aging), no preemptions, rate limits at the level last in force. Pure: everything
it needs comes in as arguments.
"""

from __future__ import annotations

from dataclasses import replace

from daemon.config import Config, Tier
from daemon.policy import reservation
from daemon.policy.ratelimits import tenant_limits
from daemon.policy.types import Plan, PolicyMemory
from daemon.text import plural


def safe_default(at: str, capacity: int, tenants: tuple[str, ...], tiers: tuple[Tier, ...], memory: PolicyMemory,
                 cfg: Config, why: str) -> Plan:
    capacity = max(int(capacity), 0)
    pool = reservation.high_pool(capacity, cfg.policy.reserve_share)
    shared = capacity - pool
    limits = tenant_limits(tenants, tiers, memory.rate_level, float("nan"), cfg.ratelimits,
                           {t.name: t for t in cfg.tenants})
    if capacity:
        quotas = {t: shared for t, tier in zip(tenants, tiers) if tier != "high"}
        note = (f"{why}: safe default in force: no holds beyond the static pool ({plural(pool, 'GPU')} for the high "
                f"tier), no preemptions")
    else:  # the cluster's size is unknown (no snapshot, no plan, cluster.gpus not set): nothing sized from a guess
        quotas = {}
        note = (f"{why}: safe default in force: the cluster's size is unknown until the source answers (cluster.gpus "
                f"is not set): nothing applied, no holds, no quotas, no preemptions")
    mem = replace(memory, reservations={})
    return Plan(at=at, capacity=capacity, load=float("nan"), high_pool=pool, reservations={}, quotas=quotas,
                limits=limits, preemptions=(), notifications=(), stale=True, forecast_model="none", notes=(note,),
                memory=mem, safe_default=True)
