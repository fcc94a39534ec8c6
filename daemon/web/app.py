"""The daemon's HTTP surface: /metrics, /healthz, /plan, the Alertmanager webhook at /alerts, and /api/v1.

Without a token only /healthz and /metrics answer (/metrics too asks for one when `server.metrics_token(_file)`
is set: its series name every tenant); /alerts has its own webhook token; /plan and /api/v1 take the tokens in
`[[access.tokens]]`. Every token is parsed and compared by daemon/web/auth.py (`bearer`, `Secret`).

The app is built on a `Backend` (daemon/web/backend.py), not on the daemon: the service passes its adapter in.
"""

from __future__ import annotations

import asyncio
import logging
import time

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.failover import alerts
from daemon.sources.redact import redact_json
from daemon.web import api
from daemon.web.api import AccessHolder, read_capped
from daemon.web.auth import Secret, bearer
from daemon.web.backend import Backend, NodesUnavailable
from daemon.web.console import routes as ui

log = logging.getLogger("gpu_autoscaler.http")


def build_app(backend: Backend) -> Starlette:
    cfg = backend.config().server  # restart-only (daemon/config/reload.py): read once
    token = cfg.token()
    registry = backend.metrics_registry()
    rejected = backend.webhook_rejected
    open_webhook = token is None and cfg.allow_unauthenticated_webhook
    if token is None and not open_webhook:
        log.error("webhook refuses every post: no bearer token configured (set server.webhook_token_file, or "
                  "server.allow_unauthenticated_webhook = true to accept unauthenticated posts)")
    elif open_webhook:
        log.warning("webhook accepts unauthenticated posts (server.allow_unauthenticated_webhook = true)")

    webhook_secret = Secret(token) if token is not None else None
    raw_metrics_token = cfg.metrics_secret()
    metrics_secret = Secret(raw_metrics_token) if raw_metrics_token is not None else None
    del raw_metrics_token

    async def metrics_ep(request: Request) -> Response:
        if metrics_secret is not None and not metrics_secret.matches(bearer(request.headers.get("authorization"))):
            return JSONResponse({"error": "a valid bearer token is required (server.metrics_token)"}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        h = backend.health()
        # reasons quote source errors, which name the source's URL: never with its user and password
        return JSONResponse(redact_json(h), status_code=503 if h["status"] == "unhealthy" else 200)  # degraded is alive

    holder = AccessHolder(backend)
    if holder.get().empty:
        log.warning("no [[access.tokens]] configured: /plan, /api/v1 and the console refuse every request")
    api_routes, plan_ep = api.build(backend, holder)  # /plan answers what /api/v1/plan does

    async def alerts_ep(request: Request) -> Response:
        received = time.perf_counter()
        if token is None and not open_webhook:
            rejected("no_token_configured")
            return JSONResponse({"error": "webhook disabled: no token configured (server.webhook_token_file), and "
                                          "server.allow_unauthenticated_webhook is not true"}, status_code=403)
        if webhook_secret is not None:
            if not webhook_secret.matches(bearer(request.headers.get("authorization"))):
                rejected("unauthorized")
                log.warning("webhook: refused post without a valid bearer token from %s", request.client)
                return JSONResponse({"error": "unauthorized"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        body = await read_capped(request, cfg.max_body_bytes)
        if body is None:
            rejected("too_large")
            log.warning("webhook: body over %d bytes refused", cfg.max_body_bytes)
            return JSONResponse({"error": f"body over {cfg.max_body_bytes} bytes"}, status_code=413)
        try:
            payload = alerts.parse(body)
        except alerts.PayloadError as exc:
            rejected("malformed")
            log.warning("webhook: %s (first bytes: %r)", exc, body[:120])
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            # node lists and failover run in the failover worker: /healthz and /metrics keep answering
            done = await asyncio.wrap_future(backend.submit_alerts(payload, received))
        except alerts.PayloadError as exc:
            rejected("bad_node")
            log.warning("webhook: %s", exc)
            return JSONResponse({"error": str(exc)}, status_code=400)
        except NodesUnavailable as exc:
            rejected("nodes_unknown")
            log.error("webhook: %s; alert not acted on (Alertmanager retries)", exc)
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse({"accepted": len(payload.alerts), "actions": done})

    routes = [Route("/metrics", metrics_ep), Route("/healthz", healthz), Route("/plan", plan_ep),
              Route("/alerts", alerts_ep, methods=["POST"]), Route("/api/v1/alerts", alerts_ep, methods=["POST"]),
              *api_routes, *ui.build(backend, holder)]
    return Starlette(routes=routes)
