"""One acting replica: a leader lease with a monotonically increasing fencing token (Redis here; a
Kubernetes Lease object in daemon/ha/lease_k8s.py, on the same `Lease` loop).

Every replica runs cycles; only the lease holder acts. The lease is one Redis key
``<prefix>:leader`` = ``"<replica id>#<nonce>|<token>"`` with a TTL (the nonce is new in every
process, so two processes can never hold equal values, even with one configured id or after a
Redis restart that lost the token counter). Acquiring it (Lua, atomic) only
succeeds when the key is absent (``SET NX PX``) and takes the next value of the counter
``<prefix>:leader:token``, so every new term has a larger token than all before it. The holder
renews with a compare-and-PEXPIRE (Lua); a holder that misses renewals for a TTL loses the key,
and the next replica's acquire gives it a new, larger token.

The lease alone cannot stop a paused old leader (a long GC or SIGSTOP) from acting after
it woke up: it still believes it leads. So every side effect goes through
``daemon/ha/fencing.py``, which checks, atomically inside Redis at the moment of acting,
that this replica's token is still the one in the lease and that the lease has at least
``safety_margin`` of its TTL left; and it writes what it is about to do into a ledger
(``<prefix>:leader:ledger``, a stream) in the same script. A stale token is refused.

Every replica also says it is alive (``_beat``, each tick; ``peers()`` lists the others): a leader that stops
cleanly keeps the scheduler holds when another replica is about to take the lease over (a rolling restart
must not free held nodes for backfill), and releases them only as the last replica (daemon/service/loop.py).
In Redis that is a sorted set ``<prefix>:replicas`` of holders scored by when their beat lapses (Redis's
own clock, so replicas' clocks do not matter).

The operator's overrides live in this backend too (daemon/state/overrides.py). They are operator intent, not a side
effect on the cluster, so any replica writes them without the fence; only acting on them is fenced.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from typing import Callable

import redis

log = logging.getLogger("gpu_autoscaler.leader")

# Only when nobody holds it, even under our own name (a restarted replica with a fixed id waits for its old
# lease to lapse rather than adopt a token another live process may still use).
ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local tok = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'NX', 'PX', ARGV[2])
return tok
"""

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# The opening of every script that writes only for the lease holder (FENCE; daemon/shadow/log.py's APPEND):
# KEYS[1] the lease, ARGV[1] this replica's lease value "<id>#<nonce>|<token>", ARGV[2] the TTL in ms the lease must
# still have. 0 = refused (stale or expiring token) before anything is written; else the script goes on.
HOLDS_LEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  return 0
end
"""

# The fence: KEYS[1] lease, KEYS[2] ledger; ARGV = value "<id>#<nonce>|<token>", min TTL ms left, what, jobs,
# ledger maxlen, replica id.
# 1 = go ahead (and the act is in the ledger), 0 = refused (stale or expiring token), nothing written.
FENCE = HOLDS_LEASE + """local sep = string.find(ARGV[1], '|', 1, true)
local t = redis.call('TIME')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[5], '*', 'holder', ARGV[6],
           'token', string.sub(ARGV[1], sep + 1), 'what', ARGV[3], 'jobs', ARGV[4],
           'at', t[1] .. '.' .. string.format('%06d', tonumber(t[2])))
return 1
"""


# KEYS[1] the replicas' sorted set; ARGV holder, TTL ms. Lapsed beats are swept on the way.
BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 4)
return 1
"""

LIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
"""


def default_replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Lease:
    """The loop every backend shares: acquire when free, renew while held, stand down when renewal fails for
    longer than the lease minus the safety margin. Backends give `_try_acquire`, `_try_renew`, `_release`
    and `fence`; `transient` are their errors that mean "could not ask" rather than "no"."""

    transient: tuple[type[BaseException], ...] = (OSError,)
    store = "the lease store"

    def __init__(self, replica_id: str | None, ttl_s: float, renew_every_s: float | None, safety_margin: float,
                 on_elected: Callable[[int], None] | None, on_lost: Callable[[int], None] | None) -> None:
        if any(c in (replica_id or "") for c in "|#"):
            raise ValueError("replica id may not contain '|' or '#'")
        self.replica_id = replica_id or default_replica_id()
        self.holder = f"{self.replica_id}#{secrets.token_hex(4)}"
        self.ttl_s = ttl_s
        self.renew_every_s = renew_every_s if renew_every_s is not None else ttl_s / 3
        self.min_left_s = ttl_s * safety_margin
        self.on_elected = on_elected
        self.on_lost = on_lost
        self._lock = threading.Lock()
        self.token: int | None = None
        self._valid_until = 0.0  # monotonic: past this, we do not believe we lead, whatever the store says
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _try_acquire(self) -> int:
        raise NotImplementedError

    def _try_renew(self) -> bool:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    def fence(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
        raise NotImplementedError

    def term(self) -> int | None:
        """The fencing token this replica holds (daemon/ha/fencing.py's Fence), None while it does not lead."""
        return self.token

    def _beat(self) -> None:
        """Say this replica is alive for a TTL (every tick, leader or not)."""

    def _unbeat(self) -> None:
        """A clean stop: this replica no longer counts as alive."""

    def _live_holders(self) -> list[str]:
        """The holders (``<replica id>#<nonce>``) whose beat has not lapsed, this one included."""
        raise NotImplementedError

    def peers(self) -> list[str]:
        """The other live replicas' ids: who would take the lease over. Raises `transient` when the store
        cannot say."""
        return sorted(h.rsplit("#", 1)[0] for h in self._live_holders() if h != self.holder)

    # ---- state ---------------------------------------------------------------------------------
    @property
    def value(self) -> str | None:
        return None if self.token is None else f"{self.holder}|{self.token}"

    def is_leader(self) -> bool:
        with self._lock:
            return self.token is not None and time.monotonic() < self._valid_until

    # ---- one step of the loop ------------------------------------------------------------------
    def tick(self) -> bool:
        """Renew if holding, otherwise try to acquire; returns whether this replica leads now."""
        started = time.monotonic()
        elected = lost = None
        try:
            if self.token is not None:
                ok = self._try_renew()
                with self._lock:
                    if ok:
                        self._valid_until = started + self.ttl_s - self.min_left_s
                    else:
                        lost, self.token = self.token, None
            else:
                tok = self._try_acquire()
                if tok > 0:
                    with self._lock:
                        self.token = tok
                        self._valid_until = started + self.ttl_s - self.min_left_s
                    elected = tok
        except self.transient as exc:
            with self._lock:
                if self.token is not None and time.monotonic() >= self._valid_until:
                    lost, self.token = self.token, None
            log.warning("leader lease: %s unreachable (%s)%s", self.store, exc,
                        "; lease lapsed, acting stops" if lost else "")
        else:
            try:
                self._beat()
            except self.transient as exc:
                log.warning("leader lease: cannot say this replica is alive in %s (%s)", self.store, exc)
        if elected is not None:
            log.warning("leader lease: this replica (%s) is now the leader, fencing token %d", self.replica_id, elected)
            if self.on_elected:
                self.on_elected(elected)
        if lost is not None:
            log.error("leader lease: lost the lease (token %d); this replica stops acting and stands by", lost)
            if self.on_lost:
                self.on_lost(lost)
        return self.is_leader()

    def run(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="leader-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.renew_every_s)

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if release and self.token is not None:
            try:
                self._release()
                log.info("leader lease: released (token %d)", self.token)
            except self.transient:
                pass
        if release:
            try:
                self._unbeat()
            except self.transient:
                pass  # the beat lapses by itself after a TTL
        self.token = None

    def ledger(self) -> list[dict]:
        return []


class RedisLease(Lease):
    """The lease and the fence in Redis. Thread-safe; `run()` keeps it in a background thread."""

    transient = (redis.RedisError, OSError)
    store = "Redis"

    def __init__(self, client: redis.Redis, prefix: str = "gpuas", replica_id: str | None = None,
                 ttl_s: float = 15.0, renew_every_s: float | None = None, safety_margin: float = 0.3,
                 on_elected: Callable[[int], None] | None = None, on_lost: Callable[[int], None] | None = None,
                 ledger_maxlen: int = 100_000) -> None:
        super().__init__(replica_id, ttl_s, renew_every_s, safety_margin, on_elected, on_lost)
        self.client = client
        self.key = f"{prefix}:leader"
        self.token_key = f"{prefix}:leader:token"
        self.ledger_key = f"{prefix}:leader:ledger"
        self.ttl_ms = int(ttl_s * 1000)
        self.min_left_ms = int(self.min_left_s * 1000)
        self.ledger_maxlen = ledger_maxlen
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release_script = client.register_script(RELEASE)
        self._fence = client.register_script(FENCE)
        self.replicas_key = f"{prefix}:replicas"
        self._beat_script = client.register_script(BEAT)
        self._live_script = client.register_script(LIVE)

    def _try_acquire(self) -> int:
        return int(self._acquire(keys=[self.key, self.token_key], args=[self.holder, self.ttl_ms]))

    def _try_renew(self) -> bool:
        return bool(self._renew(keys=[self.key], args=[self.value, self.ttl_ms]))

    def _release(self) -> None:
        self._release_script(keys=[self.key], args=[self.value])

    def _beat(self) -> None:
        self._beat_script(keys=[self.replicas_key], args=[self.holder, self.ttl_ms])

    def _unbeat(self) -> None:
        self.client.zrem(self.replicas_key, self.holder)

    def _live_holders(self) -> list[str]:
        return [h.decode() if isinstance(h, bytes) else h for h in self._live_script(keys=[self.replicas_key])]

    # ---- the fence -------------------------------------------------------------------------------
    def fence(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
        """Right before a side effect: may it happen? Checked in Redis (token current, enough TTL left) and
        written to the ledger in the same atomic step. Returns (allowed, why not)."""
        value = self.value
        if value is None or not self.is_leader():
            return False, f"not the leader (replica {self.replica_id})"
        try:
            ok = int(self._fence(keys=[self.key, self.ledger_key],
                                 args=[value, self.min_left_ms, what, ",".join(jobs), self.ledger_maxlen,
                                       self.replica_id]))
        except (redis.RedisError, OSError) as exc:
            return False, f"cannot check the fencing token in Redis: {exc}"
        if not ok:
            return False, f"fencing token {value.rsplit('|', 1)[1]} is stale or about to expire"
        return True, ""

    def ledger(self) -> list[dict]:
        """The ledger as written (oldest first), for tests and audits."""
        out = []
        for _id, f in self.client.xrange(self.ledger_key):
            d = {k.decode(): v.decode() for k, v in f.items()}
            d["token"] = int(d["token"])
            d["jobs"] = [j for j in d["jobs"].split(",") if j]
            d["at"] = float(d["at"])
            out.append(d)
        return out
