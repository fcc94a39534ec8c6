"""Where shadow records are kept: the state store (one replica), or the HA lease's Redis (several replicas).

Under HA the acting replica changes at a takeover; records kept in one replica's SQLite file would leave with it.
With `ha.backend = "redis"` they go to a Redis stream every replica reads (`<ha.prefix>:shadow`, trimmed to about
`state.shadow_max_rows` entries and to `state.shadow_keep_days`), so the new leader's report holds the old
leader's cycles too. (With the Kubernetes lease backend there is no store every replica reads that suits a record
per cycle: the records stay in each replica's state store.)
"""

from __future__ import annotations

from typing import Any, Protocol

from daemon.ha.lease import HOLDS_LEASE
from daemon.state.store import StateStore, pack, unpack_record

# KEYS[1] the leader lease, KEYS[2] the shadow stream; ARGV: this replica's lease value "<id>#<nonce>|<token>", min
# TTL ms left, maxlen, the packed record, keep ms (0: no time bound). The record goes in only while that value is
# still the lease's (with some TTL left), in one step: a replica deposed (paused, then woken after a takeover)
# between its "am I the leader" and its write cannot append a second record for the same period. Entries older
# than keep ms (their stream ids are Redis's clock in ms) go in the same step. 1 = appended, 0 = refused.
APPEND = HOLDS_LEASE + """redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'r', ARGV[4])
if tonumber(ARGV[5]) > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('XTRIM', KEYS[2], 'MINID', tostring(now - tonumber(ARGV[5])))
end
return 1
"""


class ShadowLog(Protocol):
    def append(self, record: dict) -> bool:
        """Store one record; False when it was refused (this replica no longer holds the lease)."""
        ...

    def records(self, limit: int | None = None) -> list[dict]:
        """The newest `limit` records (all when None), oldest first."""
        ...


class StoreShadowLog:
    """The records in the daemon's SQLite state store (state.path)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def append(self, record: dict) -> bool:
        self.store.save_shadow(record)
        return True

    def records(self, limit: int | None = None) -> list[dict]:
        return self.store.shadow_records(limit)


class RedisShadowLog:
    """The records in a Redis stream every replica reads (one entry per cycle, field ``r``: the packed record).

    With `lease` (the replica's RedisLease, in the same Redis) a record is appended only while this replica's
    fencing token is still the lease's, checked and written in one script (APPEND); without one (reading only:
    shadow-report), append writes unchecked."""

    def __init__(self, client: Any, prefix: str = "gpuas", maxlen: int = 20_160, lease: Any = None,
                 keep_s: float | None = None) -> None:
        self.client = client
        self.key = f"{prefix}:shadow"
        self.maxlen = maxlen
        # by time too (state.shadow_keep_days, as the SQLite store): a count alone lets a stream of large records
        # (many tenants) grow for months in the lease's Redis, which also holds the lease (noeviction: renewals fail)
        self.keep_ms = int(keep_s * 1000) if keep_s else 0
        self.lease = lease
        self._append = client.register_script(APPEND) if lease is not None else None

    def append(self, record: dict) -> bool:
        if self.lease is None:
            self.client.xadd(self.key, {"r": pack(record)}, maxlen=self.maxlen, approximate=True)
            if self.keep_ms:
                sec, usec = self.client.time()
                self.client.xtrim(self.key, minid=str(int(sec) * 1000 + int(usec) // 1000 - self.keep_ms),
                                  approximate=False)
            return True
        value = self.lease.value
        if value is None:
            return False
        ok = self._append(keys=[self.lease.key, self.key],
                          args=[value, self.lease.min_left_ms, self.maxlen, pack(record), self.keep_ms])
        return bool(ok)

    def records(self, limit: int | None = None) -> list[dict]:
        rows = self.client.xrevrange(self.key, count=limit) if limit is not None else self.client.xrevrange(self.key)
        out = []
        for sid, fields in reversed(rows):
            raw = fields.get(b"r", fields.get("r"))
            out.append(unpack_record(sid.decode() if isinstance(sid, bytes) else str(sid), raw))
        return out
