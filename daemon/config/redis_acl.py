"""The Redis ACL users that keep the control plane out of the gateways' reach (deploy/redis/users.acl).

One Redis, two users: the gateways' user reads the limits and the published API-key map and writes only its
token buckets and degrade cache; the daemon's user owns everything else under its prefixes (the lease, the
operator's overrides and their audit stream, the key map, the shadow stream, the limits). Whoever holds a
gateway's Redis credential can then no longer raise a tenant's tier, pause preemptions, plant an operator
event or add an API key. Pure text: `gpu-autoscaler redis-acl` writes it, check-config checks the URLs."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

from gateway.contract import gateway_key_patterns, glob_escape

DAEMON_USER = "gpuas-daemon"
GATEWAY_USER = "gpuas-gateway"

# every command a gateway sends, its scripts' commands included (Redis checks those against the caller's user
# too): connecting (redis-py's CLIENT SETINFO, absent before Redis 7.2, may be refused: it ignores that), the bucket
# script, reading the key map, the degrade cache's script and reads
GATEWAY_COMMANDS = (
    "ping", "select", "evalsha", "eval", "script|load", "time",
    "hgetall", "hget", "hmget", "hset", "hdel", "hstrlen", "hincrby", "exists", "del", "pexpire",
    "zadd", "zrem", "zcard", "zrange", "zrangebyscore", "zscore",
)

PLACEHOLDER = "#REPLACE-WITH-SHA256-OF-THE-{who}-PASSWORD"   # not a hash: Redis refuses to start on it


def password_rule(password: str | None, who: str) -> str:
    """`#<sha256>` of the password (the file never holds it), or a placeholder Redis refuses to load."""
    if password is None:
        return PLACEHOLDER.format(who=who.upper())
    return "#" + hashlib.sha256(password.encode("utf-8")).hexdigest()


def acl_file(prefix: str = "gpuas", ha_prefix: str = "gpuas", daemon_password: str | None = None,
             gateway_password: str | None = None) -> str:
    """The ACL file for Redis' `aclfile`: the default user off, the daemon's user, the gateways' user.

    `prefix`: actuators.redis.prefix (= the gateways' redis.prefix); `ha_prefix`: ha.prefix."""
    for name, p in (("actuators.redis.prefix", prefix), ("ha.prefix", ha_prefix)):
        if not p or re.search(r"\s", p):
            raise ValueError(f"{name}: {p!r} cannot be written in an ACL key pattern (empty or with whitespace)")
    reads, writes = gateway_key_patterns(prefix)
    owned = sorted({f"{glob_escape(p)}:*" for p in (prefix, ha_prefix)})
    gw = " ".join(["on", password_rule(gateway_password, "gateway"), "resetkeys", "resetchannels",
                   *(f"%R~{k}" for k in reads), *(f"~{k}" for k in writes), "-@all",
                   *(f"+{c}" for c in GATEWAY_COMMANDS)])
    dm = " ".join(["on", password_rule(daemon_password, "daemon"), "resetkeys", "resetchannels",
                   *(f"~{k}" for k in owned), *(f"&{k}" for k in owned), "+@all", "-@dangerous"])
    # Redis (7.0) takes no comments in an ACL file: what it means is in docs/security.md
    return f"user default off\nuser {DAEMON_USER} {dm}\nuser {GATEWAY_USER} {gw}\n"


def url_user(url: str) -> str | None:
    """The user a redis:// URL logs in as (None: Redis' default user, no name given)."""
    try:
        return urlsplit(url).username or None
    except ValueError:
        return None
