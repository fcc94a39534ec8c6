"""Who is asking: bearer tokens from `[[access.tokens]]`, compared in constant time.

An operator token sees and changes everything; a tenant token sees only its own
tenant; a request without a valid token sees nothing but /healthz and /metrics.
The console's login form stores the same token in an HttpOnly cookie.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import Request

from daemon.config import AccessConfig, ConfigError

COOKIE = "gpuas_token"


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
        self.entries: list[tuple[bytes, Principal]] = []
        seen: dict[str, str] = {}
        for t in cfg.tokens:
            secret = t.secret()
            if secret in seen:
                raise ConfigError(f"access.tokens: {t.name} and {seen[secret]} share one token")
            seen[secret] = t.name
            self.entries.append((secret.encode(), Principal(t.name, t.role, t.tenant)))

    @property
    def empty(self) -> bool:
        return not self.entries

    def lookup(self, presented: str | None) -> Principal | None:
        """The holder of `presented`, or None. Every configured token is compared, each in constant time."""
        if not presented:
            return None
        given = presented.strip().encode()
        found = None
        for secret, who in self.entries:
            if hmac.compare_digest(secret, given):
                found = who
        return found

    def from_request(self, request: Request) -> Principal | None:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return self.lookup(auth[7:])
        return self.lookup(request.cookies.get(COOKIE))
