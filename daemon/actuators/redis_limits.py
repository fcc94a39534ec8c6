"""Publishes per-tenant token-bucket parameters and notifications to Redis for the gateways."""

from __future__ import annotations

import json
import time

import redis

from daemon.actuators.base import ActionReport
from gateway.contract import keys_key, limit_key
from daemon.policy.types import Notification, Plan


class RedisLimitsActuator:
    name = "redis"

    def __init__(self, url: str, prefix: str = "gpuas", dry_run: bool = True,
                 client: redis.Redis | None = None, stream_maxlen: int = 10_000,
                 api_keys: dict[str, str] | None = None) -> None:
        self.client = client or redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix = prefix
        self.dry_run = dry_run
        self.stream_maxlen = stream_maxlen
        self._published: dict[str, tuple[float, float, str]] = {}
        self.api_keys = api_keys  # SHA-256 digest -> tenant, published for the gateways (None: leave alone)
        self._keys_in_redis: dict[str, str] | None = None
        self._reserved: dict[str, int] | None = None  # <prefix>:reservations as last written (None: unknown)
        self._version: bytes | None = None  # `<prefix>:limits:version` as last read or written

    def _check_version(self) -> None:
        """Forget what we think Redis holds when `<prefix>:limits:version` is not what we last saw: Redis came
        back empty (a restart without its data, a flush, a failover) or someone else wrote."""
        seen = self.client.get(f"{self.prefix}:limits:version")
        if seen != self._version:
            self._published, self._keys_in_redis, self._reserved, self._version = {}, None, None, seen

    def _publish_keys(self, rep: ActionReport) -> None:
        """Make `<prefix>:apikeys` equal the configured map (one MULTI: gateways never see half of it)."""
        if self.api_keys is None:
            return
        if self._keys_in_redis is None:
            raw = self.client.hgetall(keys_key(self.prefix))
            self._keys_in_redis = {k.decode(): v.decode() for k, v in raw.items()}
        if self._keys_in_redis == self.api_keys:
            return
        rep.actions.append(f"publish {len(self.api_keys)} API key digests to {keys_key(self.prefix)}")
        if self.dry_run:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(keys_key(self.prefix))
        if self.api_keys:
            pipe.hset(keys_key(self.prefix), mapping=self.api_keys)
        pipe.incr(f"{self.prefix}:limits:version")
        self._version = str(pipe.execute()[-1]).encode()
        self._keys_in_redis = dict(self.api_keys)

    def _current(self) -> dict[str, tuple[float, float, str]]:
        """What Redis holds now, so a restarted daemon (or a flushed Redis) is reconciled, not assumed."""
        out = {}
        keys = list(self.client.scan_iter(match=f"{self.prefix}:limit:*", count=1000))
        if not keys:
            return out
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.hmget(k, "rate", "burst", "reason")
        for k, (r, b, why) in zip(keys, pipe.execute()):
            if r is not None and b is not None:
                tenant = k.decode().split(":limit:", 1)[1]
                out[tenant] = (float(r), float(b), (why or b"").decode())
        return out

    def apply(self, plan: Plan) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        try:
            self._check_version()
            self._publish_keys(rep)
            if not self._published:
                self._published = self._current()
            changed = {t: lim for t, lim in plan.limits.items()
                       if self._published.get(t) != (lim.rate, lim.burst, lim.reason)}
            for t, lim in sorted(changed.items()):
                rep.actions.append(f"set {limit_key(self.prefix, t)} rate={lim.rate:g} burst={lim.burst:g}")
            reserved = {t: int(r) for t, r in plan.reservations.items() if r > 0}
            if self._reserved is None:  # what Redis holds now (a restarted daemon, a flushed Redis)
                raw = self.client.hgetall(f"{self.prefix}:reservations")
                self._reserved = {k.decode(): int(float(v)) for k, v in raw.items() if k != b"_"}
            if reserved != self._reserved:
                rep.actions.append(f"set {self.prefix}:reservations for {len(reserved)} tenants")
            if self.dry_run or (not changed and reserved == self._reserved):
                return rep
            now = time.time()
            pipe = self.client.pipeline(transaction=True)
            for t, lim in changed.items():
                pipe.hset(limit_key(self.prefix, t), mapping={"rate": lim.rate, "burst": lim.burst, "level": lim.level,
                                                              "reason": lim.reason, "updated": now})
            if reserved != self._reserved:
                # the whole hash, replaced at once: a tenant the plan no longer holds GPUs for leaves it
                pipe.delete(f"{self.prefix}:reservations")
                if reserved:
                    pipe.hset(f"{self.prefix}:reservations", mapping=reserved)
            if changed:
                pipe.incr(f"{self.prefix}:limits:version")
                pipe.publish(f"{self.prefix}:limits", json.dumps({"at": plan.at, "changed": sorted(changed)}))
            res = pipe.execute()
            if changed:
                self._version = str(res[-2]).encode()  # what the INCR above made it
            for t, lim in changed.items():
                self._published[t] = (lim.rate, lim.burst, lim.reason)
            self._reserved = reserved
        except redis.RedisError as exc:
            self._published = {}  # unknown state: re-read next time
            self._keys_in_redis = None
            self._version = None
            self._reserved = None
            rep.errors.append(f"redis: {exc}")
        return rep

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        return ActionReport(self.name, self.dry_run)  # Redis holds no jobs

    def notify(self, notes: list[Notification]) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run, [f"notify {n.tenant} [{n.kind}]" for n in notes])
        if self.dry_run or not notes:
            return rep
        try:
            pipe = self.client.pipeline(transaction=False)
            for n in notes:
                pipe.xadd(f"{self.prefix}:notifications", {"tenant": n.tenant, "kind": n.kind, "message": n.message},
                          maxlen=self.stream_maxlen, approximate=True)
                pipe.set(f"{self.prefix}:notice:{n.tenant}", json.dumps({"kind": n.kind, "message": n.message}), ex=3600)
            pipe.execute()
        except redis.RedisError as exc:
            rep.errors.append(f"redis: {exc}")
        return rep
