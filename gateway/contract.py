"""What the daemon and every gateway replica agree on: the Redis key names, how an API key is digested, which
tenant names are acceptable, and the token-bucket script. Standard library only: the daemon imports it."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

LUA = resources.files("gateway").joinpath("token_bucket.lua").read_text()


def limit_key(prefix: str, tenant: str) -> str:
    """The tenant's bucket parameters (rate, burst, reason): the daemon writes them, gateways only read them."""
    return f"{prefix}:limit:{tenant}"


def bucket_key(prefix: str, tenant: str) -> str:
    """The tenant's token bucket (tokens, ts): written by the gateways' script."""
    return f"{prefix}:bucket:{tenant}"


def keys_key(prefix: str) -> str:
    """Redis hash the daemon publishes: SHA-256 hex digest of an API key -> tenant."""
    return f"{prefix}:apikeys"


def gateway_key_patterns(prefix: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read-only, read-write) Redis key patterns of everything a gateway touches, for its ACL user
    (deploy/redis/users.acl): it reads the limits and the published key map, and writes only its token buckets
    and its degrade cache (`<prefix>:rcache:<tenant>`, `<prefix>:rcache-idx:<tenant>`, gateway/degrade.py).
    Nothing the daemon writes matches a read-write pattern."""
    p = glob_escape(prefix)
    return (f"{p}:limit:*", f"{p}:apikeys"), (f"{p}:bucket:*", f"{p}:rcache:*", f"{p}:rcache-idx:*")


def glob_escape(text: str) -> str:
    """`text` as a literal in a Redis glob (MATCH, ACL key patterns): * ? [ ] and \\ escaped."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


DIGEST_RE = re.compile(r"[0-9a-fA-F]{64}")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()
