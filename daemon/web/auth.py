"""Who is asking: bearer tokens from `[[access.tokens]]`, compared as SHA-256 digests in constant time.

An operator token sees and changes everything; a tenant token sees only its own
tenant; a request without a valid token sees nothing but /healthz and /metrics
(and /metrics too needs its own token when `server.metrics_token(_file)` is set).
The console's login form stores the same token in an HttpOnly cookie.

Every token the daemon checks (access tokens, the webhook token, the metrics token) goes through the
one parser (`bearer`) and the one comparison (`Secret.matches`) here: the scheme is case-insensitive
(RFC 7235), and what is compared is two 32-byte SHA-256 digests, so neither the time taken nor an early
exit on a length mismatch says anything about the configured token's length.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from starlette.requests import Request

from daemon.config import AccessConfig, ConfigError

COOKIE = "gpuas_token"


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (any case of "Bearer"), or None."""
    if not header:
        return None
    parts = header.strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    return parts[1].strip() or None


def digest(token: str) -> bytes:
    """SHA-256 of the token as it is compared (surrounding whitespace dropped): always 32 bytes."""
    return hashlib.sha256(token.strip().encode("utf-8")).digest()


class Secret:
    """A configured token, kept only as its SHA-256 digest.

    `hmac.compare_digest` on the raw strings returns at once when the lengths differ, which tells a caller
    the token's length; on two digests of fixed length it always walks all 32 bytes.
    """

    __slots__ = ("digest",)

    def __init__(self, token: str) -> None:
        self.digest = digest(token)

    def matches(self, presented: str | None) -> bool:
        if presented is None:
            return False
        return hmac.compare_digest(self.digest, digest(presented))


@dataclass(frozen=True)
class Principal:
    name: str
    role: str            # "operator" | "tenant"
    tenant: str | None   # set for tenant tokens

    @property
    def operator(self) -> bool:
        return self.role == "operator"

    def may_see(self, tenant: str) -> bool:
        return self.operator or self.tenant == tenant


class Access:
    def __init__(self, cfg: AccessConfig) -> None:
        self.entries: list[tuple[Secret, Principal]] = []
        seen: dict[bytes, str] = {}
        for t in cfg.tokens:
            secret = Secret(t.secret())
            if secret.digest in seen:
                raise ConfigError(f"access.tokens: {t.name} and {seen[secret.digest]} share one token")
            seen[secret.digest] = t.name
            self.entries.append((secret, Principal(t.name, t.role, t.tenant)))

    @property
    def empty(self) -> bool:
        return not self.entries

    def lookup(self, presented: str | None) -> Principal | None:
        """The holder of `presented`, or None. Every configured token is compared, each in constant time."""
        if not presented or not presented.strip():
            return None
        found = None
        for secret, who in self.entries:
            if secret.matches(presented):
                found = who
        return found

    def from_request(self, request: Request) -> Principal | None:
        """A bearer header when there is one, else the console's cookie."""
        token = bearer(request.headers.get("authorization"))
        if token is not None:
            return self.lookup(token)
        return self.lookup(request.cookies.get(COOKIE))
