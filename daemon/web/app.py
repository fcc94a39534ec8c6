"""The daemon's HTTP surface: /metrics, /healthz, /plan, the Alertmanager webhook at /alerts, and /api/v1.

Without a token only /healthz and /metrics answer (/metrics too asks for one when `server.metrics_token(_file)`
is set: its series name every tenant); /alerts has its own webhook token; /plan and /api/v1 take the tokens in
`[[access.tokens]]`. Every token is parsed and compared by daemon/web/auth.py (`bearer`, `Secret`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.failover import alerts
from daemon.service.wiring import NodeListError
from daemon.sources.redact import redact_json
from daemon.web import api
from daemon.web.api import AccessHolder, read_capped
from daemon.web.auth import Secret, bearer
from daemon.web.console import routes as ui

if TYPE_CHECKING:
    from daemon.service.loop import Daemon

log = logging.getLogger("gpu_autoscaler.http")


def build_app(daemon: "Daemon") -> Starlette:
    cfg = daemon.cfg.server
    token = cfg.token()
    metrics = daemon.runtime.metrics
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
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        h = daemon.health()
        # reasons quote source errors, which name the source's URL: never with its user and password
        return JSONResponse(redact_json(h), status_code=503 if h["status"] == "unhealthy" else 200)  # degraded is alive

    holder = AccessHolder(daemon)
    if holder.get().empty:
        log.warning("no [[access.tokens]] configured: /plan, /api/v1 and the console refuse every request")
    api_routes, guarded = api.build(daemon, holder)

    async def _plan(_: Request, __) -> Response:
        p = daemon.runtime.runner.last_plan
        body = p.summary() if p else {"plan": None}
        body["forecast_quality"] = daemon.runtime.runner.quality.current().to_dict()  # live scores of past forecasts
        return JSONResponse(body)

    plan_ep = guarded(_plan, operator=True)

    async def alerts_ep(request: Request) -> Response:
        received = time.perf_counter()
        if token is None and not open_webhook:
            metrics.webhook_rejected.labels("no_token_configured").inc()
            return JSONResponse({"error": "webhook disabled: no token configured (server.webhook_token_file), and "
                                          "server.allow_unauthenticated_webhook is not true"}, status_code=403)
        if webhook_secret is not None:
            if not webhook_secret.matches(bearer(request.headers.get("authorization"))):
                metrics.webhook_rejected.labels("unauthorized").inc()
                log.warning("webhook: refused post without a valid bearer token from %s", request.client)
                return JSONResponse({"error": "unauthorized"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
        body = await read_capped(request, cfg.max_body_bytes)
        if body is None:
            metrics.webhook_rejected.labels("too_large").inc()
            log.warning("webhook: body over %d bytes refused", cfg.max_body_bytes)
            return JSONResponse({"error": f"body over {cfg.max_body_bytes} bytes"}, status_code=413)
        try:
            payload = alerts.parse(body)
        except alerts.PayloadError as exc:
            metrics.webhook_rejected.labels("malformed").inc()
            log.warning("webhook: %s (first bytes: %r)", exc, body[:120])
            return JSONResponse({"error": str(exc)}, status_code=400)
        try:
            # node lists and failover run in the failover worker: /healthz and /metrics keep answering
            done = await asyncio.wrap_future(daemon.submit_alerts(payload, received))
        except alerts.PayloadError as exc:
            metrics.webhook_rejected.labels("bad_node").inc()
            log.warning("webhook: %s", exc)
            return JSONResponse({"error": str(exc)}, status_code=400)
        except NodeListError as exc:
            metrics.webhook_rejected.labels("nodes_unknown").inc()
            log.error("webhook: %s; alert not acted on (Alertmanager retries)", exc)
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse({"accepted": len(payload.alerts), "actions": done})

    routes = [Route("/metrics", metrics_ep), Route("/healthz", healthz), Route("/plan", plan_ep),
              Route("/alerts", alerts_ep, methods=["POST"]), Route("/api/v1/alerts", alerts_ep, methods=["POST"]),
              *api_routes, *ui.build(daemon, holder)]
    return Starlette(routes=routes)


def dumps(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
