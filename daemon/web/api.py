"""/api/v1: the console's data as JSON, behind the same tokens (see daemon/web/auth.py)."""

from __future__ import annotations

import json
import re
import time
from typing import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.state.overrides import BadChange, OverridesUnavailable
from daemon.web import views, windows_api
from daemon.web.auth import Access, Principal
from daemon.web.backend import Backend, Snapshot
from daemon.web.eta_view import eta_for
from daemon.web.health_view import health_for
from daemon.web.openapi import spec

TENANT_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")


class BadInput(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def error(status: int, message: str, field: str | None = None) -> JSONResponse:
    body = {"error": message}
    if field is not None:
        body["field"] = field
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


class AccessHolder:
    """The Access for the config in force; rebuilt when a reload swaps the config."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._cfg = None
        self._access: Access | None = None

    def get(self) -> Access:
        cfg = self.backend.config().access
        if cfg is not self._cfg or self._access is None:
            self._access, self._cfg = Access(cfg), cfg
        return self._access


def int_param(request: Request, name: str, default: int | None, lo: int, hi: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise BadInput(name, f"must be an integer, got {raw!r}") from None
    if not lo <= v <= hi:
        raise BadInput(name, f"must be between {lo} and {hi}, got {v}")
    return v


async def read_capped(request: Request, cap: int) -> bytes | None:
    """The request body, or None when it is (or its Content-Length says it is) over `cap` bytes; reading
    stops there, so a huge body is never held."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > cap:
                return None
        except ValueError:
            return None
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > cap:
            return None
    return bytes(body)


async def json_body(request: Request, cap: int = 65536) -> object:
    body = await read_capped(request, cap)
    if body is None:
        raise BadInput("body", f"over {cap} bytes")
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise BadInput("body", f"not JSON: {exc}") from None


def build(backend: Backend, holder: AccessHolder) -> tuple[list[Route], Callable]:
    """The /api/v1 routes, and the endpoint of /api/v1/plan (the app serves it at /plan too: one body).

    Each handler takes `backend.snapshot()` once and reads the cycle's data from that one snapshot only.
    """
    def who(request: Request) -> Principal | None:
        return holder.get().from_request(request)

    def guarded(handler, operator: bool = False):
        async def ep(request: Request) -> Response:
            p = who(request)
            if p is None:
                return error(401, "a valid bearer token is required")
            if operator and not p.operator:
                return error(403, f"{p.name}: operator token required")
            try:
                return await handler(request, p)
            except BadInput as exc:
                return error(400, str(exc), exc.field)
        return ep

    def check_tenant(snap: Snapshot, p: Principal, tenant: str) -> JSONResponse | None:
        if not TENANT_RE.match(tenant):
            return error(400, f"tenant: not a valid tenant name: {tenant[:64]!r}", "tenant")
        if not p.may_see(tenant):  # before the existence check: other tenants' names do not leak
            return error(403, f"{p.name} may only see tenant {p.tenant}")
        if tenant not in views.tenant_names(snap):
            return error(404, f"unknown tenant {tenant!r}")
        return None

    def asked_tenant(request: Request, snap: Snapshot, p: Principal,
                     own: bool = True) -> tuple[str | None, JSONResponse | None]:
        """The `tenant` query parameter checked (else the refusal), or without one: a tenant token's own tenant
        when `own`, None (every tenant the viewer may see) otherwise and for an operator."""
        tenant = request.query_params.get("tenant") or None
        if tenant is not None:
            return tenant, check_tenant(snap, p, tenant)
        return (p.tenant if own and not p.operator else None), None

    async def plan(_: Request, p: Principal) -> Response:
        return JSONResponse(views.plan_view(backend.snapshot()))

    async def tenants(_: Request, p: Principal) -> Response:
        snap = backend.snapshot()
        names = [t for t in views.tenant_names(snap) if p.may_see(t)]
        return JSONResponse({"tenants": [views.tenant_summary(snap, backend, t) for t in names]})

    async def tenant(request: Request, p: Principal) -> Response:
        snap = backend.snapshot()
        t = request.path_params["tenant"]
        if request.method == "PATCH" and not p.operator:
            return error(403, f"{p.name}: operator token required to change a tenant")
        bad = check_tenant(snap, p, t)
        if bad is not None:
            return bad
        if request.method == "PATCH":
            body = await json_body(request)
            too_many = windows_api.floor_beyond_capacity(snap, backend.config(), body)
            if too_many is not None:
                raise BadInput("floor_gpus", too_many)
            try:  # in a worker thread: under HA the change is a round trip to the shared store
                return JSONResponse(await run_in_threadpool(overrides().change_tenant, p.name, t, body))
            except BadChange as exc:
                raise BadInput(exc.field, str(exc).split(": ", 1)[1]) from None
            except OverridesUnavailable as exc:  # HA: refused, never kept only on this replica
                return error(503, str(exc))
        return JSONResponse(views.tenant_view(snap, backend, t, p))

    async def overrides_ep(request: Request, p: Principal) -> Response:
        if request.method == "PATCH":
            body = await json_body(request)
            try:
                return JSONResponse(await run_in_threadpool(overrides().change_global, p.name, body))
            except BadChange as exc:
                raise BadInput(exc.field, str(exc).split(": ", 1)[1]) from None
            except OverridesUnavailable as exc:
                return error(503, str(exc))
        return JSONResponse(overrides().all())

    overrides = backend.overrides

    async def events(request: Request, p: Principal) -> Response:
        snap = backend.snapshot()
        limit = int_param(request, "limit", 100, 1, 1000)
        before = int_param(request, "before", None, 1, 2**62)
        kind = request.query_params.get("kind") or None
        if kind is not None and kind not in views.EVENT_KINDS:   # a typo would list nothing, as if none happened
            raise BadInput("kind", f"must be one of {', '.join(views.EVENT_KINDS)}, got {kind[:64]!r}")
        tenant, bad = asked_tenant(request, snap, p)
        if bad is not None:
            return bad
        rows = backend.events(limit, kind, tenant, before)
        return JSONResponse({"events": views.for_viewer(snap, p, rows)})  # a tenant: its own part of each

    async def health(request: Request, p: Principal) -> Response:
        """Per-job GPU health (docs/health.md): a tenant token reads its own tenant's rows only."""
        snap = backend.snapshot()
        tenant, bad = asked_tenant(request, snap, p, own=False)
        if bad is not None:
            return bad
        return JSONResponse(health_for(snap, p, tenant))

    async def eta(request: Request, p: Principal) -> Response:
        """Pending jobs' start estimates with their age (docs/eta.md); a tenant token reads its own jobs only."""
        snap = backend.snapshot()
        tenant, bad = asked_tenant(request, snap, p)
        if bad is not None:
            return bad
        job = request.query_params.get("job") or None
        if job is not None and len(job) > 256:
            raise BadInput("job", "a job id is at most 256 characters")
        return JSONResponse(eta_for(snap.eta, time.time(), tenant, job))

    async def openapi(_: Request, p: Principal) -> Response:
        return JSONResponse(spec())

    plan_ep = guarded(plan, operator=True)
    routes = [
        Route("/api/v1/plan", plan_ep),
        Route("/api/v1/tenants", guarded(tenants)),
        Route("/api/v1/tenants/{tenant}", guarded(tenant), methods=["GET", "PATCH"]),
        Route("/api/v1/overrides", guarded(overrides_ep, operator=True), methods=["GET", "PATCH"]),
        Route("/api/v1/events", guarded(events)),
        Route("/api/v1/health", guarded(health)),
        Route("/api/v1/eta", guarded(eta)),
        Route("/api/v1/openapi.json", guarded(openapi)),
        *windows_api.build(backend, guarded, error, json_body, BadInput),
    ]
    return routes, plan_ep
