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

    tenant: str = Field(min_length=1)
    key: str | None = Field(None, min_length=16)
    key_file: Path | None = None
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

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
