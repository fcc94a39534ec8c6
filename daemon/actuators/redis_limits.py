"""Publishes per-tenant token-bucket parameters and notifications to Redis for the gateways.

A tenant that leaves the plans has its `<prefix>:limit:<tenant>` key deleted once it has been gone for
`forget_after_s` (cycle.forget_tenant_after_s): tenants come and go, and their keys would otherwise stay for
ever. Each key carries `seen`, the last time (epoch s) a plan had its tenant, refreshed every quarter of that
period, so the count survives a restart of the daemon. Only the actuator's own keys are ever deleted: under its
prefix, one per tenant, and carrying the fields it writes (`rate`, `burst`, `updated`); a key somebody else put
there without them is left alone.
"""

from __future__ import annotations

import json
import time
from typing import Callable

import redis

from daemon.actuators.base import ActionReport
from daemon.policy.types import Notification, Plan
from daemon.text import plural
from gateway.contract import glob_escape, keys_key, limit_key


class RedisLimitsActuator:
    name = "redis"

    def __init__(self, url: str, prefix: str = "gpuas", dry_run: bool = True,
                 client: redis.Redis | None = None, stream_maxlen: int = 10_000,
                 api_keys: dict[str, str] | None = None, forget_after_s: float = 86400.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client or redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        self.prefix = prefix
        self.forget_after_s = forget_after_s
        self.clock = clock
        self._seen: dict[str, float] = {}  # tenant -> its key's `seen` as last read or written (own keys only)
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
            self._seen = {}

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
        """What Redis holds now, so a restarted daemon (or a flushed Redis) is reconciled, not assumed.

        Also reads when each of its own keys' tenants was last seen (`_seen`); a key without `seen` (written
        before keys carried it) counts as seen now, so it is forgotten only after a whole period."""
        out = {}
        self._seen = {}
        head = f"{self.prefix}:limit:"
        keys = [k for k in self.client.scan_iter(match=f"{glob_escape(self.prefix)}:limit:*", count=1000)
                if k.decode("utf-8", "replace").startswith(head)]
        if not keys:
            return out
        pipe = self.client.pipeline(transaction=False)
        for k in keys:
            pipe.hmget(k, "rate", "burst", "reason", "updated", "seen")
        now = self.clock()
        for k, (r, b, why, updated, seen) in zip(keys, pipe.execute()):
            if r is not None and b is not None:
                tenant = k.decode("utf-8", "replace")[len(head):]
                out[tenant] = (float(r), float(b), (why or b"").decode())
                if updated is not None:  # written by this actuator: its own to forget
                    self._seen[tenant] = _float(seen, now)
        return out

    def _forget(self, present: set[str], fresh: set[str], now: float, rep: ActionReport, pipe) -> list[str]:
        """Queue on `pipe` (None: dry run, report only): delete the own keys of tenants gone for longer than
        forget_after_s, and refresh `seen` on present tenants' keys every quarter of that (`fresh`: keys being
        rewritten anyway). Returns the tenants forgotten."""
        gone = sorted(t for t, seen in self._seen.items() if t not in present and now - seen > self.forget_after_s)
        for t in gone:
            rep.actions.append(f"delete {limit_key(self.prefix, t)}: tenant absent for over "
                               f"{self.forget_after_s:g}s")
            if pipe is not None:
                pipe.delete(limit_key(self.prefix, t))
        if pipe is not None:
            for t in sorted((present & set(self._published)) - fresh):
                if now - self._seen.get(t, float("-inf")) > self.forget_after_s / 4:
                    pipe.hset(limit_key(self.prefix, t), "seen", now)
        return gone

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
                rep.actions.append(f"set {self.prefix}:reservations for {plural(len(reserved), 'tenant')}")
            now = self.clock()
            present = set(plan.limits)
            if self.dry_run:
                self._forget(present, set(changed), now, rep, None)
                return rep
            pipe = self.client.pipeline(transaction=True)
            for t, lim in changed.items():
                pipe.hset(limit_key(self.prefix, t), mapping={"rate": lim.rate, "burst": lim.burst, "level": lim.level,
                                                              "reason": lim.reason, "updated": now, "seen": now})
            gone = self._forget(present, set(changed), now, rep, pipe)
            if reserved != self._reserved:
                # the whole hash, replaced at once: a tenant the plan no longer holds GPUs for leaves it
                pipe.delete(f"{self.prefix}:reservations")
                if reserved:
                    pipe.hset(f"{self.prefix}:reservations", mapping=reserved)
            if not len(pipe):  # nothing changed, nothing to forget or refresh
                return rep
            # every write of ours moves the version, the holds' hash too: a replica that leads again sees that
            # another leader wrote since (_check_version) and re-reads, instead of skipping a write by its record
            bump = bool(changed or gone) or reserved != self._reserved
            incr_at = len(pipe)  # the INCR's place among the pipeline's replies, whatever is queued after it
            if bump:
                pipe.incr(f"{self.prefix}:limits:version")
            if changed or gone:  # a forgotten limit is a change for the gateways too
                pipe.publish(f"{self.prefix}:limits", json.dumps({"at": plan.at, "changed": sorted(changed),
                                                                  "forgotten": gone}))
            res = pipe.execute()
            if bump:
                self._version = str(res[incr_at]).encode()  # what the INCR above made it
            for t, lim in changed.items():
                self._published[t] = (lim.rate, lim.burst, lim.reason)
            for t in present & set(self._published):
                if t in changed or now - self._seen.get(t, float("-inf")) > self.forget_after_s / 4:
                    self._seen[t] = now
            for t in gone:
                self._published.pop(t, None)
                self._seen.pop(t, None)
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
                message = n.message  # the tenant reads it: the policy names no other tenant in it
                pipe.xadd(f"{self.prefix}:notifications", {"tenant": n.tenant, "kind": n.kind, "message": message},
                          maxlen=self.stream_maxlen, approximate=True)
                pipe.set(f"{self.prefix}:notice:{n.tenant}", json.dumps({"kind": n.kind, "message": message}), ex=3600)
            pipe.execute()
        except redis.RedisError as exc:
            rep.errors.append(f"redis: {exc}")
        return rep


def _float(raw: bytes | None, default: float) -> float:
    try:
        return float(raw) if raw is not None else default
    except ValueError:
        return default

