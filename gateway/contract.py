"""What the daemon and every gateway replica agree on: the Redis key names, how an API key is digested, which
tenant names are acceptable, and the token-bucket script. Standard library only: the daemon imports it."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

LUA = resources.files("gateway").joinpath("token_bucket.lua").read_text()


def limit_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:limit:{tenant}"


def bucket_key(prefix: str, tenant: str) -> str:
    return f"{prefix}:bucket:{tenant}"


def keys_key(prefix: str) -> str:
    """Redis hash the daemon publishes: SHA-256 hex digest of an API key -> tenant."""
    return f"{prefix}:apikeys"


DIGEST_RE = re.compile(r"[0-9a-fA-F]{64}")
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()
