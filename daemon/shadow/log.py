"""Where shadow records are kept: the state store (one replica), or the HA lease's Redis (several replicas).

Under HA the acting replica changes at a takeover; records kept in one replica's SQLite file would leave with it.
With `ha.backend = "redis"` they go to a Redis stream every replica reads (`<ha.prefix>:shadow`, trimmed to about
`state.shadow_max_rows` entries), so the new leader's report holds the old leader's cycles too. (With the
Kubernetes lease backend there is no store every replica reads that suits a record per cycle: the records stay
in each replica's state store.)
"""

from __future__ import annotations

from typing import Any, Protocol

from daemon.state.store import StateStore, pack, unpack


class ShadowLog(Protocol):
    def append(self, record: dict) -> None: ...

    def records(self, limit: int | None = None) -> list[dict]:
        """The newest `limit` records (all when None), oldest first."""
        ...


class StoreShadowLog:
    """The records in the daemon's SQLite state store (state.path)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def append(self, record: dict) -> None:
        self.store.save_shadow(record)

    def records(self, limit: int | None = None) -> list[dict]:
        return self.store.shadow_records(limit)


class RedisShadowLog:
    """The records in a Redis stream every replica reads (one entry per cycle, field ``r``: the packed record)."""

    def __init__(self, client: Any, prefix: str = "gpuas", maxlen: int = 20_160) -> None:
        self.client = client
        self.key = f"{prefix}:shadow"
        self.maxlen = maxlen

    def append(self, record: dict) -> None:
        self.client.xadd(self.key, {"r": pack(record)}, maxlen=self.maxlen, approximate=True)

    def records(self, limit: int | None = None) -> list[dict]:
        rows = self.client.xrevrange(self.key, count=limit) if limit is not None else self.client.xrevrange(self.key)
        out = []
        for _, fields in reversed(rows):
            raw = fields.get(b"r", fields.get("r"))
            out.append(unpack(raw))
        return out
