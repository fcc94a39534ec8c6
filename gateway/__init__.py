"""The gateway, a separate deployable: who is asking, a shared Redis token bucket, an ASGI middleware.

The daemon only publishes bucket parameters; the decision is made inside
Redis by one Lua script, so any number of replicas share one bucket per
tenant without races. A throttled user gets 429 with Retry-After and the
reason the daemon wrote (for example the cluster load level in force).

The tenant comes from a credential, never from what the client claims: an
API key (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``) is hashed
(SHA-256) and compared, in constant time, with every known key digest; the
digest -> tenant map comes from the gateway's config and/or from Redis, where
the daemon publishes it. ``X-Tenant`` counts only from addresses listed in
``trusted_proxies`` (the TCP peer; an explicit opt-in for an authenticating proxy in front),
and only for a tenant that has a key; a valid key still names its own tenant, and an Authorization
header that is no gateway key (the token such a proxy checked) does not stop X-Tenant there.
Anything else is 401: there is no default bucket for an unknown caller.

A hung or dead Redis costs at most one short timeout: a circuit breaker then skips Redis for a few seconds
(``fail_open`` decides at once) and lets one request probe it after. The stand-alone proxy sends only the
request's path and query to its upstream (any other request target is a 400) and never forwards the
gateway's own credentials; the degrade cache keeps one caller's answers for that caller only, with
per-tenant caps.

A separate deployable: it needs only the base install (redis, starlette, httpx, pydantic) and imports nothing
of `daemon`. The daemon imports `gateway.contract` (the Redis key names both sides use) and `gateway.config`
(the API-key model its own config reuses). Importing this package loads nothing: each module is imported
by name.
"""
