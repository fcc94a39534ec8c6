"""API keys: the tenant credentials the gateway knows, from its own file or published by the daemon (which
reuses this model in its own config). pydantic and the standard library only: importing the daemon's config
must not load a Redis or HTTP client."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from pydantic import Field, model_validator

from gateway.configfile import Strict as _Strict, read_secret
from gateway.contract import key_digest


class GatewayConfigError(Exception):
    """A gateway config problem a human must fix; one line naming the dotted key."""


class ApiKey(_Strict):
    """One tenant credential: the key itself, a file holding it, or only its SHA-256 digest."""

    tenant: str = Field(min_length=1, description="the tenant a request with this key is counted and limited as "
                        "(its `<prefix>:limit:<tenant>` bucket); one key cannot name two tenants")
    key: str | None = Field(None, min_length=16, description="the key itself (at least 16 characters, surrounding "
                            "whitespace dropped), written in the config file; only its SHA-256 digest is compared "
                            "or published. Give one of key, key_file or key_sha256; prefer the other two")
    key_file: Path | None = Field(None, description="a file holding the key (at least 16 characters, surrounding "
                                  "whitespace dropped), read at start-up")
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$", description="only the key's SHA-256 digest, 64 "
                                   "lowercase hex digits (`printf %s KEY | sha256sum`): the key itself need not be on "
                                   "this host")

    @model_validator(mode="after")
    def _one_source(self) -> "ApiKey":
        if sum(x is not None for x in (self.key, self.key_file, self.key_sha256)) != 1:
            raise ValueError("give exactly one of key, key_file or key_sha256")
        return self

    def digest(self, where: str = "keys") -> str:
        if self.key_sha256 is not None:
            return self.key_sha256
        if self.key_file is not None:
            return key_digest(read_secret(self.key_file, f"{where}.key_file", GatewayConfigError))
        return key_digest(self.key or "")


def digest_map(keys: Iterable[ApiKey], where: str = "keys") -> dict[str, str]:
    """digest -> tenant; one key may not name two tenants."""
    out: dict[str, str] = {}
    for i, k in enumerate(keys):
        d = k.digest(f"{where}.{i}")
        if d in out and out[d] != k.tenant:
            raise GatewayConfigError(f"{where}.{i}: the same key is given to tenants {out[d]!r} and {k.tenant!r}")
        out[d] = k.tenant
    return out
