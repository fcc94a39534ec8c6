"""The OpenAPI 3.1 description of /api/v1, served at /api/v1/openapi.json."""

from __future__ import annotations

from typing import Any

from daemon.config import WindowConfig
from daemon.state.overrides import GlobalChange, TenantChange
from daemon.web.views import EVENT_KINDS

_ERR = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
_AUTH_ERRORS = {"401": {**_ERR, "description": "no valid token"},
                "403": {**_ERR, "description": "the token may not see this"}}
_TENANT_PARAM = {"name": "tenant", "in": "path", "required": True, "schema": {"type": "string"}}


def _json(schema: dict, description: str = "ok") -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _get(summary: str, schema: dict, *, params: list | None = None, extra: dict | None = None,
         operator: bool = False) -> dict:
    op: dict[str, Any] = {"summary": summary + (" (operator token)" if operator else ""),
                          "responses": {"200": _json(schema), **_AUTH_ERRORS, **(extra or {})}}
    if params:
        op["parameters"] = params
    return {"get": op}


def spec(extra_paths: dict | None = None) -> dict:
    obj = {"type": "object"}
    paths: dict[str, Any] = {
        "/api/v1/plan": _get("The plan in force: held capacity, quotas, limits with reasons, preemptions, live "
                             "forecast quality (also served at /plan)",
                             {"$ref": "#/components/schemas/Plan"}, operator=True),
        "/api/v1/tenants": _get("Tenants the token may see, one summary each",
                                {"type": "object", "properties": {"tenants": {"type": "array", "items": {
                                    "$ref": "#/components/schemas/TenantSummary"}}}}),
        "/api/v1/tenants/{tenant}": _get(
            "One tenant: usage and forecast band, held capacity and quota, the limit in force and its reason, "
            "preemptions and notifications, queue position", {"$ref": "#/components/schemas/Tenant"},
            params=[_TENANT_PARAM], extra={"404": {**_ERR, "description": "unknown tenant"},
                                           "400": {**_ERR, "description": "malformed tenant name"}}),
        "/api/v1/events": _get(
            "Failovers, preemptions, notifications, plan changes and operator changes, newest first. A tenant "
            "token sees its own tenant's, trimmed to its own part: a failover lists its own jobs only, and other "
            "tenants' names in reasons and messages read 'another tenant'",
            {"type": "object", "properties": {"events": {
                "type": "array", "items": {"$ref": "#/components/schemas/Event"}}}},
            params=[{"name": "kind", "in": "query", "schema": {"type": "string", "enum": list(EVENT_KINDS)}},
                    {"name": "tenant", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000,
                                                                 "default": 100}},
                    {"name": "before", "in": "query", "schema": {"type": "integer", "minimum": 1},
                     "description": "only events with a smaller id (paging)"}],
            extra={"400": {**_ERR, "description": "bad query parameter; `field` names it"},
                   "404": {**_ERR, "description": "unknown tenant in `tenant`"}}),
        "/api/v1/openapi.json": _get("This description", obj),
        "/api/v1/health": _get(
            "Per-job GPU health: idle, hung, leaking and erroring jobs with their evidence (GPUs, window, numbers) "
            "and what happens when (warn, requeue at the threshold, report only); each job's telemetry state "
            "(ok, no_data, rejected with why); idle allocated GPUs per tenant and tier. A tenant token sees its "
            "own tenant's rows only",
            {"type": "object", "required": ["enabled", "outcomes", "jobs", "idle"], "properties": {
                "enabled": {"type": "boolean"}, "at": {"type": ["string", "null"]},
                "error": {"type": ["string", "null"]},
                "outcomes": {"type": "array", "items": obj}, "jobs": {"type": "array", "items": obj},
                "idle": {"type": "array", "items": obj}}},
            params=[{"name": "tenant", "in": "query", "schema": {"type": "string"}}],
            extra={"400": {**_ERR, "description": "malformed tenant name"},
                   "404": {**_ERR, "description": "unknown tenant in `tenant`"}}),
        "/api/v1/eta": _get(
            "Pending jobs' start estimates (docs/eta.md): per job its place in the scheduler's order (position, "
            "from 0: the job started next is 0, where the tenant record's queue.position and the console count "
            "from 1), p50 and p90 "
            "start (seconds after made_at and as times; null = unknown) and what they rest on or why unknown; "
            "age_s is how old the estimates are. A tenant token sees its own jobs only",
            {"type": "object", "required": ["made_at", "age_s", "jobs"], "properties": {
                "made_at": {"type": ["string", "null"]}, "age_s": {"type": ["number", "null"]},
                "jobs": {"type": "array", "items": obj},
                "why": {"type": "string", "description": "only when jobs is empty: why (none made yet, no "
                                                         "pending job of that id)"}}},
            params=[{"name": "tenant", "in": "query", "schema": {"type": "string"}},
                    {"name": "job", "in": "query", "schema": {"type": "string", "maxLength": 256}}],
            extra={"400": {**_ERR, "description": "malformed tenant name or job id"},
                   "404": {**_ERR, "description": "unknown tenant in `tenant`"}}),
    }
    change_errors = {**_AUTH_ERRORS, "400": {**_ERR, "description": "bad change; `field` names it"},
                     "503": {**_ERR, "description": "HA: the shared store of operator changes (the lease backend) "
                                                    "cannot be reached; nothing was changed"}}
    paths["/api/v1/tenants/{tenant}"]["patch"] = {
        "summary": "Change a tenant at runtime (operator token): tier, rate override, floor on held capacity, "
                   "pause of its preemptions; null restores the config's value; persisted, audited, applied at "
                   "the next cycle",
        "parameters": [_TENANT_PARAM],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "$ref": "#/components/schemas/TenantChange"}}}},
        "responses": {"200": _json(obj), **change_errors, "404": {**_ERR, "description": "unknown tenant"}}}
    paths["/api/v1/overrides"] = {
        "get": {"summary": "Operator changes in force (operator token)",
                "responses": {"200": _json(obj), **_AUTH_ERRORS}},
        "patch": {"summary": "Pause or resume preemptions cluster-wide (operator token)",
                  "requestBody": {"required": True, "content": {"application/json": {"schema": {
                      "$ref": "#/components/schemas/GlobalChange"}}}},
                  "responses": {"200": _json(obj), **change_errors}}}
    name_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    window = {"$ref": "#/components/schemas/Window"}
    paths["/api/v1/windows"] = _get(
        "Recurring capacity windows (docs/windows.md), the config's (source config) and the operator's (source "
        "api), with the next start and when its hold begins; a tenant token sees its own tenant's only",
        {"type": "object", "properties": {"windows": {"type": "array", "items": window}}})
    paths["/api/v1/windows/proposals"] = _get(
        "Windows proposed from the history store (docs/windows.md): each tenant's recurring peak with its "
        "evidence (days seen, size, the replayed unmet without and with it, GPU-minutes held idle); computed off "
        "the cycle, 202 with status computing until ready; accept one by PUT /api/v1/windows/{name} with its "
        "`window`", {"type": "object", "required": ["status"], "properties": {
            "status": {"type": "string", "enum": ["computing", "ready", "no history", "failed"]},
            "proposals": {"type": "array", "items": obj}, "significance": {"type": "string"}}},
        params=[{"name": "timezone", "in": "query", "schema": {"type": "string"}}],
        extra={"202": _json(obj), "400": {**_ERR, "description": "not an IANA time zone"}}, operator=True)
    paths["/api/v1/windows/{name}"] = {
        **_get("One window", window, params=[name_param],
               extra={"404": {**_ERR, "description": "no such window (or another tenant's)"}}),
        "put": {"summary": "Create or replace an operator's window (operator token); audited, stored with the "
                           "overrides (HA: in the lease backend), applied at the next cycle",
                "parameters": [name_param],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "$ref": "#/components/schemas/WindowChange"}}}},
                "responses": {"200": _json(obj), **change_errors,
                              "409": {**_ERR, "description": "the cluster cannot take it: larger than its type's "
                                                             "GPUs, or an overlap over the capacity (both windows "
                                                             "and the time named); or a window of the config file"}}},
        "delete": {"summary": "Delete an operator's window (operator token); audited",
                   "parameters": [name_param],
                   "responses": {"200": _json(obj), **change_errors,
                                 "404": {**_ERR, "description": "no such operator's window"},
                                 "409": {**_ERR, "description": "a window of the config file"}}}}
    paths["/api/v1/alerts"] = {"post": {
        "summary": "The Alertmanager webhook (also at /alerts): node-down alerts fail the node over. It takes the "
                   "webhook token (server.webhook_token_file), not an access token",
        "security": [{"webhook": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": {
            "type": "object", "required": ["alerts"], "properties": {"alerts": {"type": "array"}},
            "description": "Alertmanager webhook payload, version 4"}}}},
        "responses": {
            "200": _json({"type": "object", "properties": {"accepted": {"type": "integer"},
                                                           "actions": {"type": "array"}}}),
            "400": {**_ERR, "description": "not an Alertmanager payload, or a node name that is not exactly one "
                                           "known node (nothing is done)"},
            "401": {**_ERR, "description": "no valid webhook token"},
            "403": {**_ERR, "description": "webhook disabled: no token configured and no explicit opt-in"},
            "413": {**_ERR, "description": "body over server.max_body_bytes"},
            "503": {**_ERR, "description": "the node list is unavailable; not acted on (Alertmanager retries)"}}}}
    paths.update(extra_paths or {})
    nullable_num = {"type": ["number", "null"]}
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpu-autoscaler", "version": "1",
                 "description": "Read what the daemon planned and why; operators change tenants at runtime."},
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "webhook": {"type": "http", "scheme": "bearer",
                                            "description": "the webhook token, for /api/v1/alerts only"},
                                "cookie": {"type": "apiKey", "in": "cookie", "name": "gpuas_token"}},
            "schemas": {
                "Error": {"type": "object", "required": ["error"],
                          "properties": {"error": {"type": "string"}, "field": {"type": "string"}}},
                "Limit": {"type": "object", "properties": {"rate": nullable_num, "burst": nullable_num,
                                                           "level": {"type": "integer"}, "reason": {"type": "string"},
                                                           "throttled": {"type": "boolean", "description": "the "
                                                                         "limit is tightened by the load level or "
                                                                         "fixed by an operator, and a gateway "
                                                                         "applies it (the redis actuator; in dry "
                                                                         "run: once acting); false without one"},
                                                           "enforced": {"type": "boolean", "description": "a "
                                                                        "gateway applies the limit now: the redis "
                                                                        "actuator enabled and not in dry run"}}},
                "Plan": {"type": "object", "properties": {
                    "at": {"type": ["string", "null"]}, "capacity": {"type": "integer"}, "load": nullable_num,
                    "high_pool": {"type": "integer"}, "reservations": obj, "quotas": obj,
                    "limits": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Limit"}},
                    "preemptions": {"type": "array"}, "notifications": {"type": "array"},
                    "stale": {"type": "boolean"}, "forecast_model": {"type": "string"},
                    "rate_level": {"type": "integer"},
                    "holds_by_type": {"type": "object", "description": "a mixed fleet: tenant -> {GPU type: GPUs "
                                      "held on nodes of that type}; empty for a one-model cluster"},
                    "capacity_by_type": obj, "high_pool_by_type": obj,
                    "window_holds": {"type": "object", "description": "only while a recurring window holds: tenant "
                                     "-> GPUs of its hold its windows hold now, its alone (a pooled tenant's hold "
                                     "beyond them is the pool's)"},
                    "window_holds_by_type": {"type": "object", "description": "a mixed fleet, only while a window "
                                             "holds: tenant -> {GPU type: GPUs of its holds_by_type there that its "
                                             "windows hold}"},
                    "held_for": {"type": "object", "description": "the held GPUs by why they are held: high (the high "
                                 "tier's forecast peak, which may exceed high_pool, its guarantee), window (what the "
                                 "recurring windows hold now: window_holds), aged (anti-starvation), floor "
                                 "(operators' floor_gpus)"},
                    "notes_by_type": {"type": "object", "description": "GPU type -> what the plan did there and why"},
                    "forecast_acting": {"type": "object", "description": "the skill gate (policy.skill_gate; empty "
                                        "while off): tenant -> {acting, why, forecast_loss, reactive_loss, "
                                        "scored}, and on a mixed fleet by_type: GPU type -> the same for that "
                                        "type's series, each decided alone (acting: any type acts)"},
                    "forecaster_note": {"type": "string", "description": "which forecaster is in use and why "
                                        "(the whole note; the start-up line names it short)"},
                    "forecast_quality": {"type": "object", "description": "live scores of past forecasts against "
                                         "what happened: wql, coverage_p90, scored, fallback, per tenant too"},
                    "plan": {"type": "null", "description": "only before the first plan: the whole body is "
                                                            "{\"plan\": null}"}}},
                "TenantSummary": {"type": "object", "properties": {
                    "tenant": {"type": "string"}, "tier": {"type": "string"}, "used": nullable_num,
                    "held": {"type": ["integer", "null"]}, "quota": {"type": ["integer", "null"]},
                    "rate": nullable_num, "throttled": {"type": ["boolean", "null"]},
                    "acting_on_forecast": {"type": ["object", "null"], "description": "the skill gate: whether the "
                                           "tenant's holds and preemptions act on the forecast ({acting, why, "
                                           "forecast_loss, reactive_loss, scored}, on a mixed fleet with "
                                           "by_type: GPU type -> the same per type); null while the gate is off"}}},
                "Tenant": {"allOf": [{"$ref": "#/components/schemas/TenantSummary"}, {"type": "object", "properties": {
                    "pending": nullable_num,
                    "limit": {"anyOf": [{"$ref": "#/components/schemas/Limit"}, {"type": "null"}]},  # null: no plan yet
                    "preemptions": {"type": "array"}, "notifications": {"type": "array"},
                    "recent_events": {"type": "array", "items": {"$ref": "#/components/schemas/Event"}},
                    "queue": {"type": ["object", "null"]},
                    "forecast": {"type": ["object", "null"], "description": "{model, issued_at, step_s, p50, p90}; "
                                 "model: the one that forecast this tenant (an inference service's own, or the main)"},
                    "usage": {"type": ["object", "null"]}, "override": {"type": ["object", "null"]},
                    "types": {"type": ["array", "null"], "description": "a mixed fleet: per GPU type, GPUs held for "
                              "the tenant and GPUs it uses (null for a one-model cluster)"},
                    "hold_use": {"type": ["array", "null"], "description": "per GPU type held for the tenant: "
                                 "planned (GPUs the plan holds there), pooled (the nodes are the high tier's "
                                 "pool, held for all its tenants), gpus (of the nodes held now), and what "
                                 "occupies them: own, pool_others (the high tier's pool's other tenants, whom it "
                                 "is held for too), others_protected (never preempted), others_preemptible, "
                                 "draining, free"},
                    "pending_by_accepts": {"type": ["object", "null"], "description": "GPUs waiting per set of GPU "
                                           "types the jobs accept (\"any\": every type)"},
                    "window_hold": {"type": ["object", "null"], "description": "while the tenant's recurring windows "
                                    "hold: {gpus (of `held`, the windows' own: the plan's window_holds), windows: "
                                    "[{name, start, end, open}]}; null while none holds"}}}]},
                "TenantChange": TenantChange.model_json_schema(),
                "GlobalChange": GlobalChange.model_json_schema(),
                "WindowChange": WindowConfig.model_json_schema(),
                "Window": {"type": "object", "additionalProperties": True, "properties": {
                    "name": {"type": "string"}, "tenant": {"type": "string"}, "source": {"type": "string"},
                    "next_start": {"type": ["string", "null"], "description": "the occurrence in progress, else "
                                   "the next one"}, "held_from": {"type": ["string", "null"]},
                    "open_until": {"type": ["string", "null"], "description": "while an occurrence is in progress, "
                                   "its end"},
                    "slurm_flag": {"type": ["string", "null"]}}},
                "Event": {"type": "object", "required": ["id", "at", "kind"], "properties": {
                    "id": {"type": "integer"}, "at": {"type": "string"}, "kind": {"type": "string"},
                    "tenant": {"type": "string"}}, "additionalProperties": True},
            },
        },
        "security": [{"bearer": []}, {"cookie": []}],
    }
