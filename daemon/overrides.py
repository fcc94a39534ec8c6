"""Operator changes at runtime: per-tenant tier, rate override, floor on held capacity, pause of preemptions.

Each change is validated, persisted in the daemon's SQLite store together with an
audit event (who, when, what changed, from and to) in one transaction, and handed
to the next cycle's plan() as an OperatorInputs.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.config import Tier
from daemon.policy.types import OperatorInputs
from daemon.store import StateStore

KEY = "operator_overrides"


class BadChange(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TenantChange(BaseModel):
    """A PATCH body for one tenant; a field set to null goes back to the config's value."""

    model_config = ConfigDict(extra="forbid", strict=True)
    tier: Tier | None = None
    rate_override: float | None = Field(None, gt=0, le=1e6, description="fixed req/s, whatever the load level")
    floor_gpus: int | None = Field(None, ge=0, le=1_000_000, description="GPUs held for the tenant at least")
    preemption_paused: bool | None = Field(None, description="true: this tenant's jobs are not preempted")


class GlobalChange(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    preemption_paused: bool | None = Field(None, description="true: no job is preempted")


def _parse(model: type[BaseModel], body: Any) -> BaseModel:
    if not isinstance(body, dict):
        raise BadChange("body", "must be a JSON object")
    if not body:
        raise BadChange("body", f"empty change; fields: {sorted(model.model_fields)}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise BadChange(field, msg) from None


def _applied(before: dict, change: BaseModel) -> dict:
    """`before` with the fields the change names; null (or false) drops a field back to the config's value."""
    after = dict(before)
    for k in change.model_fields_set:
        v = getattr(change, k)
        if v is None or v is False:
            after.pop(k, None)
        else:
            after[k] = v
    return after


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Overrides:
    """The operator's changes in force. Thread-safe; the HTTP thread writes, the cycle reads."""

    def __init__(self, store: StateStore | None) -> None:
        self.store = store
        self._lock = threading.Lock()
        saved = store.get_value(KEY) if store is not None else None
        self._tenants: dict[str, dict[str, Any]] = dict((saved or {}).get("tenants", {}))
        self._global: dict[str, Any] = dict((saved or {}).get("global", {}))

    def _snapshot(self) -> dict:
        return {"tenants": {t: dict(v) for t, v in sorted(self._tenants.items())}, "global": dict(self._global)}

    def all(self) -> dict:
        with self._lock:
            return self._snapshot()

    def for_tenant(self, tenant: str) -> dict:
        with self._lock:
            return dict(self._tenants.get(tenant, {}))

    def inputs(self) -> OperatorInputs:
        with self._lock:
            t = self._tenants
            return OperatorInputs(
                tiers={k: v["tier"] for k, v in t.items() if v.get("tier")},
                rates={k: float(v["rate_override"]) for k, v in t.items() if v.get("rate_override")},
                floors={k: int(v["floor_gpus"]) for k, v in t.items() if v.get("floor_gpus")},
                paused=frozenset(k for k, v in t.items() if v.get("preemption_paused")),
                paused_all=bool(self._global.get("preemption_paused")))

    def _commit(self, who: str, scope: str, tenant: str | None, before: dict, after: dict) -> dict:
        changes = {k: {"from": before.get(k), "to": after.get(k)} for k in sorted(set(before) | set(after))
                   if before.get(k) != after.get(k)}
        what = ", ".join(f"{k} {c['from']} -> {c['to']}" for k, c in changes.items()) or "no change"
        detail: dict[str, Any] = {"who": who, "scope": scope, "changes": changes,
                                  "message": f"{who} changed {tenant or 'all tenants'}: {what}"}
        if tenant is not None:
            detail["tenant"] = tenant
        if self.store is not None:
            self.store.put_value(KEY, self._snapshot(), _now(), ("operator_change", detail))
        return detail

    def change_tenant(self, who: str, tenant: str, body: Any) -> dict:
        change = _parse(TenantChange, body)
        with self._lock:
            before = dict(self._tenants.get(tenant, {}))
            after = _applied(before, change)
            if after:
                self._tenants[tenant] = after
            else:
                self._tenants.pop(tenant, None)
            try:
                detail = self._commit(who, "tenant", tenant, before, after)
            except BaseException:
                self._restore(tenant, before)
                raise
        return {"tenant": tenant, "override": after, "audit": detail, "applies": "at the next cycle"}

    def _restore(self, tenant: str, before: dict) -> None:
        if before:
            self._tenants[tenant] = before
        else:
            self._tenants.pop(tenant, None)

    def change_global(self, who: str, body: Any) -> dict:
        change = _parse(GlobalChange, body)
        with self._lock:
            before = dict(self._global)
            after = _applied(before, change)
            self._global = after
            try:
                detail = self._commit(who, "global", None, before, after)
            except BaseException:
                self._global = before
                raise
        return {"global": after, "audit": detail, "applies": "at the next cycle"}
