"""Operator changes at runtime: per-tenant tier, rate override, floor on held capacity, pause of preemptions,
and recurring windows (issue 39, docs/windows.md) declared beside the config's.

Each change is validated, stored together with an audit event (who, when, what changed, from and to) in one
atomic write, and handed to the next cycle's plan() as an OperatorInputs.

Where they live:

* One replica (no HA): the daemon's SQLite store, the value and its event in one transaction.
* HA (``ha.enabled``): in the lease backend, which every replica reads. A replica's own SQLite file would lose
  them at a failover (a pause set on the old leader gone, preemptions resume) and a change sent to a standby
  would never be applied. Redis: a JSON document at ``<prefix>:overrides`` and a stream of audit events at
  ``<prefix>:overrides:audit``, written in one MULTI/EXEC under WATCH (a concurrent write retries on the new
  value, so two writers never lose each other's change). Kubernetes: one ConfigMap ``<lease name>-overrides``
  holding the document and the newest audit events, replaced with the resourceVersion it was read at (a 409
  re-reads and re-applies). Every cycle re-reads them; the audit events are copied into the local events table,
  so /api/v1/events and the console show every change on every replica.

  A standby takes a change too: written to the shared store, it applies at the leader's next cycle. That is the
  same answer whichever replica a load-balanced Service routes the operator to, needs no leader address, and
  survives a leader change between the write and the next cycle (a 503 naming the leader would fail half the
  requests behind a Service, and a change accepted by a leader that dies before its next cycle would still be
  kept). Overrides are operator intent, not a side effect on the cluster, so no fencing token is checked.

  When the shared store cannot be reached a change is refused (``OverridesUnavailable``; the API answers 503),
  never kept only locally; and the cycle keeps the overrides it last read (logged, and in /healthz) - a Redis
  blip never drops a pause.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.config import Tier, WindowConfig
from daemon.policy.types import OperatorInputs
from daemon.state.store import StateStore
from gateway.configfile import error_text

log = logging.getLogger("gpu_autoscaler.overrides")

KEY = "operator_overrides"
EVENT_KIND = "operator_change"
APPLIES = "at the next cycle"
APPLIES_HA = "at the leader's next cycle"


# the shared store's error as the open /healthz says it (Overrides.status without detail)
UNREADABLE = "unreadable (the error is in the daemon's log and on the operator's console)"


class OverridesUnavailable(RuntimeError):
    """The shared store cannot be read or written: a change is refused rather than kept only on this replica."""


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


class WindowRefused(Exception):
    """A window the others (and the cluster) cannot take: an overlap over the capacity, a window larger than its
    type (the API answers 409). Not a ValueError, so a shared store's transaction does not read it as a malformed
    document."""


def _bad_change(exc: ValidationError) -> BadChange:
    """A body's first validation error as the API answers it: the field's path and the validator's sentence."""
    err = exc.errors()[0]
    return BadChange(".".join(str(p) for p in err["loc"]) or "body", error_text(err, "unknown field"))


def parse_window(name: str, body: Any) -> WindowConfig:
    """A PUT body as a window named `name` (the path's name wins; a body naming another is refused)."""
    if not isinstance(body, dict):
        raise BadChange("body", "must be a JSON object")
    if "name" in body and body["name"] != name:
        raise BadChange("name", f"{body['name']!r} is not the window's name in the path ({name!r})")
    try:
        return WindowConfig.model_validate({**body, "name": name})
    except ValidationError as exc:
        raise _bad_change(exc) from None


def _parse(model: type[BaseModel], body: Any) -> BaseModel:
    if not isinstance(body, dict):
        raise BadChange("body", "must be a JSON object")
    if not body:
        raise BadChange("body", f"empty change; fields: {sorted(model.model_fields)}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise _bad_change(exc) from None


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


def _said(v: Any, unset: str = "(config)") -> str:
    """A value in an audit message as an operator reads it (the event's `changes` keep the values themselves): no
    value is `unset` (a tenant's field: the config's), true/false as the API writes them, 20.0 as 20."""
    if v is None:
        return unset
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _empty() -> dict:
    return {"tenants": {}, "global": {}}


def _windows_of(doc: dict) -> dict[str, dict]:
    return dict(doc.get("windows") or {})


def _with_windows(doc: dict, windows: dict[str, dict]) -> dict:
    """`doc` with these windows; the key only when there are some (a document from before windows is the same)."""
    out = {"tenants": doc["tenants"], "global": doc["global"]}
    if windows:
        out["windows"] = {k: dict(v) for k, v in sorted(windows.items())}
    return out


def checked(doc: Any) -> dict:
    """A stored overrides document, checked field by field: anyone with access to the shared store (another
    version of the daemon, a person with redis-cli) may have written it. Raises ValueError."""
    if not isinstance(doc, dict) or set(doc) - {"tenants", "global", "windows"}:
        raise ValueError("not an overrides document")
    windows = doc.get("windows") or {}
    if not isinstance(windows, dict):
        raise ValueError("windows must be an object")
    tenants, glob = doc.get("tenants", {}), doc.get("global", {})
    if not isinstance(tenants, dict) or not isinstance(glob, dict):
        raise ValueError("tenants and global must be objects")
    try:
        for t, v in tenants.items():
            if not isinstance(v, dict):
                raise ValueError(f"tenant {t!r}: not an object")
            TenantChange.model_validate(v)
        GlobalChange.model_validate(glob)
        for name, w in windows.items():
            if not isinstance(w, dict) or WindowConfig.model_validate(w).name != name:
                raise ValueError(f"window {name!r}: not a window of that name")
    except ValidationError as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    return _with_windows({"tenants": {str(t): dict(v) for t, v in sorted(tenants.items())}, "global": dict(glob)},
                         windows)


@dataclass
class SharedRead:
    doc: dict | None  # None: nothing stored there yet (or it was lost)
    audit: list[tuple[str, dict]]  # (at, detail) of the audit events after the cursor, oldest first
    cursor: str | None  # where the next read of the audit starts


class SharedStore(Protocol):
    """Overrides kept in the lease backend (HA). Both raise OverridesUnavailable when it cannot be reached."""

    where: str  # for messages: "Redis (gpuas:overrides)"
    cursor_key: str  # the local kv key that says how far the audit has been copied into this replica's SQLite

    def read(self, cursor: str | None) -> SharedRead: ...

    def update(self, mutate: Callable[[dict], tuple[dict, dict]], at: str) -> tuple[dict, dict]:
        """mutate(current document) -> (new document, audit detail): both written in one atomic step, and
        only if nobody wrote in between (otherwise mutate runs again on the newer document)."""
        ...

    def seed(self, doc: dict) -> bool:
        """Store `doc` only where nothing is stored; whether it was."""
        ...


STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


class RedisOverrideStore:
    """The overrides document and its audit stream in the lease's Redis."""

    def __init__(self, client: Any, prefix: str = "gpuas", audit_maxlen: int = 100_000) -> None:
        import redis

        self.client = client
        self.key = f"{prefix}:overrides"
        self.audit_key = f"{prefix}:overrides:audit"
        self.audit_maxlen = audit_maxlen
        self.where = f"Redis ({self.key})"
        self.cursor_key = f"{KEY}_audit_cursor:redis:{self.audit_key}"
        self._errors = (redis.RedisError, OSError)

    def read(self, cursor: str | None) -> SharedRead:
        cursor = cursor if isinstance(cursor, str) and STREAM_ID.match(cursor) else None
        try:
            pipe = self.client.pipeline(transaction=True)  # the document and the audit as of one moment
            pipe.get(self.key)
            pipe.xrange(self.audit_key, min=f"({cursor}" if cursor else "-")
            raw, entries = pipe.execute()
        except self._errors as exc:
            raise OverridesUnavailable(f"cannot read the operator overrides from {self.where}: {exc}") from None
        try:
            doc = None if raw is None else checked(json.loads(raw))
        except ValueError as exc:
            raise OverridesUnavailable(f"the operator overrides in {self.where} are malformed: {exc}") from None
        audit = []
        for _id, f in entries:
            try:
                audit.append((f[b"at"].decode(), json.loads(f[b"detail"])))
            except (KeyError, ValueError, UnicodeDecodeError):
                log.warning("overrides: skipping a malformed audit event %s in %s", _id, self.audit_key)
        return SharedRead(doc, audit, entries[-1][0].decode() if entries else cursor)

    def update(self, mutate: Callable[[dict], tuple[dict, dict]], at: str) -> tuple[dict, dict]:
        def txn(pipe: Any) -> tuple[dict, dict]:
            raw = pipe.get(self.key)  # WATCHed: a write by anyone before EXEC makes redis-py run this again
            new, detail = mutate(_empty() if raw is None else checked(json.loads(raw)))
            pipe.multi()
            pipe.set(self.key, json.dumps(new))
            pipe.xadd(self.audit_key, {"at": at, "kind": EVENT_KIND, "detail": json.dumps(detail)},
                      maxlen=self.audit_maxlen, approximate=True)
            return new, detail

        try:
            return self.client.transaction(txn, self.key, value_from_callable=True)
        except self._errors as exc:
            raise OverridesUnavailable(f"cannot store the change in {self.where}: {exc}; nothing was changed") \
                from None
        except ValueError as exc:
            raise OverridesUnavailable(f"the operator overrides in {self.where} are malformed: {exc}; nothing "
                                       "was changed") from None

    def seed(self, doc: dict) -> bool:
        try:
            return bool(self.client.set(self.key, json.dumps(doc), nx=True))
        except self._errors as exc:
            raise OverridesUnavailable(f"cannot write the operator overrides to {self.where}: {exc}") from None


class ConfigMapOverrideStore:
    """The overrides document and the newest `audit_keep` audit events in one ConfigMap (a ConfigMap holds at
    most 1 MiB; each replica's SQLite keeps the full audit it copied). Written with optimistic concurrency: a
    replace carries the resourceVersion it read, the API server answers 409 when someone wrote since, and the
    change is re-applied to what is there now."""

    def __init__(self, api_client: Any, namespace: str, name: str, audit_keep: int = 500, attempts: int = 8) -> None:
        import urllib3
        from kubernetes import client as k8s

        self.k8s = k8s
        self.api = k8s.CoreV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.audit_keep = audit_keep
        self.attempts = attempts
        self.where = f"the Kubernetes API (ConfigMap {namespace}/{name})"
        self.cursor_key = f"{KEY}_audit_cursor:kubernetes:{namespace}/{name}"
        self._errors = (urllib3.exceptions.HTTPError, OSError)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        """The API call; None for 404, False for 409; anything else that fails is OverridesUnavailable."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn()
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                return False
            raise OverridesUnavailable(f"cannot {what} {self.where}: {exc.status} {exc.reason}") from None
        except self._errors as exc:
            raise OverridesUnavailable(f"cannot {what} {self.where}: {exc}") from None

    def _get(self) -> Any:
        return self._call("read", lambda: self.api.read_namespaced_config_map(self.name, self.namespace))

    def _parse(self, cm: Any) -> tuple[dict | None, list[dict], int]:
        data = (cm.data or {}) if cm is not None else {}
        try:
            doc = checked(json.loads(data["overrides.json"])) if "overrides.json" in data else None
            audit = [e for e in json.loads(data.get("audit.json", "[]")) if isinstance(e, dict)
                     and isinstance(e.get("seq"), int) and isinstance(e.get("detail"), dict)]
            return doc, audit, int(data.get("audit-seq", "0"))
        except ValueError as exc:
            raise OverridesUnavailable(f"the operator overrides in {self.where} are malformed: {exc}") from None

    def read(self, cursor: str | None) -> SharedRead:
        cm = self._get()
        doc, audit, seq = self._parse(cm)
        # the cursor is "<uid>/<seq>": a ConfigMap deleted and created again numbers its events from 1 again
        uid = (cm.metadata.uid or "") if cm is not None else ""
        last = 0
        if isinstance(cursor, str) and cursor.rpartition("/")[0] == uid and cursor.rpartition("/")[2].isdigit():
            last = int(cursor.rpartition("/")[2])
        new = [e for e in audit if e["seq"] > last]
        if new and new[0]["seq"] > last + 1 and last:
            log.warning("overrides: %d audit events in %s were trimmed before this replica copied them",
                        new[0]["seq"] - last - 1, self.where)
        return SharedRead(doc, [(str(e.get("at", "")), e["detail"]) for e in new], f"{uid}/{max(seq, last)}")

    def update(self, mutate: Callable[[dict], tuple[dict, dict]], at: str) -> tuple[dict, dict]:
        for _ in range(self.attempts):
            cm = self._get()
            doc, audit, seq = self._parse(cm)
            new, detail = mutate(doc or _empty())
            seq += 1
            audit = (audit + [{"seq": seq, "at": at, "kind": EVENT_KIND, "detail": detail}])[-self.audit_keep:]
            data = {"overrides.json": json.dumps(new), "audit.json": json.dumps(audit), "audit-seq": str(seq)}
            if cm is None:
                body = self.k8s.V1ConfigMap(metadata=self.k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                            data=data)
                done = self._call("create", lambda: self.api.create_namespaced_config_map(self.namespace, body))
            else:
                cm.data = data  # metadata.resourceVersion stays: the API server refuses it if anyone wrote since
                done = self._call("write", lambda: self.api.replace_namespaced_config_map(self.name, self.namespace,
                                                                                          cm))
            if done is not False and done is not None:
                return new, detail
            log.info("overrides: %s changed under this write (409); applying the change again", self.where)
        raise OverridesUnavailable(f"{self.where}: {self.attempts} conflicting writes in a row; nothing was changed")

    def seed(self, doc: dict) -> bool:
        body = self.k8s.V1ConfigMap(metadata=self.k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                    data={"overrides.json": json.dumps(doc), "audit.json": "[]", "audit-seq": "0"})
        done = self._call("create", lambda: self.api.create_namespaced_config_map(self.namespace, body))
        return done is not False and done is not None


class Overrides:
    """The operator's changes in force. Thread-safe; the HTTP thread writes, the cycle reads.

    `shared` (HA): the store both replicas read; `refresh()` (each cycle, `cycle_inputs`) re-reads it and
    copies its new audit events into the local SQLite events table. The local `KEY` then only caches what was
    last read, for a restart that cannot reach the shared store.
    """

    def __init__(self, store: StateStore | None, shared: SharedStore | None = None,
                 replica: str | None = None) -> None:
        self.store = store
        self.shared = shared
        self.replica = replica
        self._lock = threading.Lock()  # the cached values
        self._sync_lock = threading.Lock()  # one read (and audit copy) of the shared store at a time
        saved = store.get_value(KEY) if store is not None else None
        self._tenants: dict[str, dict[str, Any]] = dict((saved or {}).get("tenants", {}))
        self._global: dict[str, Any] = dict((saved or {}).get("global", {}))
        self._windows: dict[str, dict] = dict((saved or {}).get("windows", {}))
        self._cursor: str | None = None  # how far the audit was read, without a local store
        self.read_at: float | None = None  # epoch s of the last good read of the shared store
        self.read_error: str | None = None  # why the last read failed; None when it worked
        if shared is not None:
            self.refresh()

    def _snapshot(self) -> dict:
        return _with_windows({"tenants": {t: dict(v) for t, v in sorted(self._tenants.items())},
                              "global": dict(self._global)}, self._windows)

    def windows(self) -> dict[str, dict]:
        """The operator's windows, name -> its config dict."""
        with self._lock:
            return {k: dict(v) for k, v in sorted(self._windows.items())}

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
                paused_all=bool(self._global.get("preemption_paused")),
                windows=tuple(WindowConfig.model_validate(w) for _, w in sorted(self._windows.items())))

    def cycle_inputs(self) -> OperatorInputs:
        """What a cycle plans with: under HA re-read from the shared store first (the last read if that fails)."""
        self.refresh()
        return self.inputs()

    # ---- the shared store (HA) -----------------------------------------------------------------
    def status(self, detail: bool = True) -> dict | None:
        """For /healthz: where the overrides are read from, when they last were, and what failed since. Without
        `detail` (the open /healthz) the error is said without its text: a malformed document is said by what is
        wrong in it, which names a tenant ("tenant 'x': not an object")."""
        if self.shared is None:
            return None
        at = self.read_at
        err = self.read_error
        if err is not None and not detail:
            err = UNREADABLE
        return {"store": self.shared.where, "error": err,
                "read_at": dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat(timespec="seconds") if at else None}

    def problem(self, detail: bool = True) -> str | None:
        """A degraded-health reason while the shared store cannot be read, else None (`detail`: as status)."""
        st = self.status(detail)
        if st is None or st["error"] is None:
            return None
        what = st["error"] if detail else "the shared store is unreadable"
        return (f"operator overrides: {what}; planning with those last read "
                f"({st['read_at'] or 'never read: the local copy'})")

    def _adopt(self, doc: dict) -> None:
        """Use `doc` from now on; the local copy is rewritten only when it changed (not an fsync per cycle)."""
        with self._lock:
            changed = doc != self._snapshot()
            self._tenants = {t: dict(v) for t, v in doc["tenants"].items()}
            self._global = dict(doc["global"])
            self._windows = _windows_of(doc)
        if changed and self.store is not None:
            try:
                self.store.put_value(KEY, doc, _now())
            except Exception as exc:  # the local copy is a cache; the shared store has the real one
                log.warning("overrides: cannot cache the overrides in the local store: %s", exc)

    def _failed(self, why: str) -> None:
        with self._lock:
            first = self.read_error is None
            self.read_error = why
            paused = bool(self._global.get("preemption_paused"))
            n = len(self._tenants)
        (log.error if first else log.warning)(
            "overrides: %s; keeping the overrides last read (global pause %s, %d tenant overrides)",
            why, "on" if paused else "off", n)

    def refresh(self) -> bool:
        """Re-read the shared store. On failure the overrides last read stay in force; returns whether it worked."""
        if self.shared is None:
            return True
        with self._sync_lock:
            cursor = self.store.get_value(self.shared.cursor_key) if self.store is not None else self._cursor
            try:
                got = self.shared.read(cursor)
                if got.doc is None:
                    mine = self.all()
                    if mine["tenants"] or mine["global"] or mine.get("windows"):
                        # nothing there but this replica holds overrides: the shared store lost them (a Redis
                        # restarted empty) or HA was just turned on; put them back rather than drop a pause
                        if self.shared.seed(mine):
                            log.error("overrides: %s held no overrides; put back the ones this replica holds: %s",
                                      self.shared.where, json.dumps(mine))
                        got = self.shared.read(cursor)
            except OverridesUnavailable as exc:
                self._failed(str(exc))
                return False
            self._adopt(got.doc if got.doc is not None else self.all())
            if got.audit:
                items = [(at, EVENT_KIND, detail) for at, detail in got.audit]
                if self.store is not None:
                    try:
                        self.store.mirror_events(self.shared.cursor_key, got.cursor, items)
                    except Exception as exc:  # copied again next time: the cursor moves with the rows
                        log.warning("overrides: cannot copy %d audit events into the local store: %s",
                                    len(items), exc)
                else:
                    self._cursor = got.cursor
            elif self.store is None:
                self._cursor = got.cursor
            with self._lock:
                recovered, self.read_error = self.read_error, None
                self.read_at = time.time()
        if recovered:
            log.warning("overrides: %s readable again", self.shared.where)
        return True

    def _shared_change(self, mutate: Callable[[dict], tuple[dict, dict]]) -> tuple[dict, dict]:
        assert self.shared is not None
        with self._sync_lock:
            new, detail = self.shared.update(mutate, _now())  # OverridesUnavailable: refused, nothing changed
        self._adopt(new)
        self.refresh()  # the audit event into the local events table now, not at the next cycle
        return new, detail

    # ---- changes -------------------------------------------------------------------------------
    def _detail(self, who: str, scope: str, tenant: str | None, before: dict, after: dict) -> dict:
        changes = {k: {"from": before.get(k), "to": after.get(k)} for k in sorted(set(before) | set(after))
                   if before.get(k) != after.get(k)}
        unset = "(none)" if scope == "window" else "(config)"   # a tenant's or the global field: the config's
        what = ", ".join(f"{k} {_said(c['from'], unset)} -> {_said(c['to'], unset)}"
                         for k, c in changes.items()) or "no change"
        detail: dict[str, Any] = {"who": who, "scope": scope, "changes": changes,
                                  "message": f"{who} changed {tenant or 'all tenants'}: {what}"}
        if tenant is not None:
            detail["tenant"] = tenant
        if self.replica is not None:
            detail["replica"] = self.replica  # which replica took the change (HA)
        return detail

    def _commit(self, who: str, scope: str, tenant: str | None, before: dict, after: dict) -> dict:
        detail = self._detail(who, scope, tenant, before, after)
        if self.store is not None:
            self.store.put_value(KEY, self._snapshot(), _now(), (EVENT_KIND, detail))
        return detail

    def change_tenant(self, who: str, tenant: str, body: Any) -> dict:
        change = _parse(TenantChange, body)
        if self.shared is not None:
            def mutate(doc: dict) -> tuple[dict, dict]:
                before = dict(doc["tenants"].get(tenant, {}))
                after = _applied(before, change)
                tenants = {t: v for t, v in doc["tenants"].items() if t != tenant}
                if after:
                    tenants[tenant] = after
                return _with_windows({"tenants": tenants, "global": doc["global"]}, _windows_of(doc)), \
                    self._detail(who, "tenant", tenant, before, after)

            new, detail = self._shared_change(mutate)
            return {"tenant": tenant, "override": new["tenants"].get(tenant, {}), "audit": detail,
                    "applies": APPLIES_HA, "stored": self.shared.where}
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
        return {"tenant": tenant, "override": after, "audit": detail, "applies": APPLIES}

    def _restore(self, tenant: str, before: dict) -> None:
        if before:
            self._tenants[tenant] = before
        else:
            self._tenants.pop(tenant, None)

    def change_global(self, who: str, body: Any) -> dict:
        change = _parse(GlobalChange, body)
        if self.shared is not None:
            def mutate(doc: dict) -> tuple[dict, dict]:
                before = dict(doc["global"])
                after = _applied(before, change)
                return _with_windows({"tenants": doc["tenants"], "global": after}, _windows_of(doc)), \
                    self._detail(who, "global", None, before, after)

            new, detail = self._shared_change(mutate)
            return {"global": new["global"], "audit": detail, "applies": APPLIES_HA, "stored": self.shared.where}
        with self._lock:
            before = dict(self._global)
            after = _applied(before, change)
            self._global = after
            try:
                detail = self._commit(who, "global", None, before, after)
            except BaseException:
                self._global = before
                raise
        return {"global": after, "audit": detail, "applies": APPLIES}

    def change_window(self, who: str, name: str, window: WindowConfig | None,
                      check: Callable[[dict[str, WindowConfig]], list[str]]) -> dict:
        """Create or replace (`window`) or delete (None) the operator's window `name`, audited like every other
        change. `check(the operator's windows after the change)` says why they cannot be kept (overlaps over the
        capacity, with the config's windows): run on the document the write is based on, so two replicas that
        each add half of an overlap cannot both succeed. Raises WindowRefused, or KeyError for a delete of a
        window that is not there."""
        def next_windows(current: dict[str, dict]) -> tuple[dict[str, dict], dict, dict]:
            before = dict(current.get(name, {}))
            if window is None and not before:
                raise KeyError(name)
            after = window.model_dump(mode="json") if window is not None else {}
            out = {k: v for k, v in current.items() if k != name}
            if after:
                out[name] = after
                bad = check({k: WindowConfig.model_validate(v) for k, v in out.items()})
                if bad:
                    raise WindowRefused("; ".join(bad))
            return out, before, after

        def detail(before: dict, after: dict) -> dict:
            d = self._detail(who, "window", (after or before).get("tenant"), before, after)
            d["window"] = name
            verb = "deleted" if not after else ("created" if not before else "changed")
            head = f"{who} {verb} window {name} of {(after or before).get('tenant')}"
            if not before or not after:   # a new or deleted window: what it is (was), not "(config) -> 14:00"
                d["message"] = f"{head}: " + ", ".join(f"{k} {_said(v)}" for k, v in sorted((after or before).items())
                                                       if v is not None and k != "name")
            else:
                d["message"] = f"{head}: " + d["message"].split(": ", 1)[1]
            return d

        if self.shared is not None:
            def mutate(doc: dict) -> tuple[dict, dict]:
                ws, before, after = next_windows(_windows_of(doc))
                return _with_windows({"tenants": doc["tenants"], "global": doc["global"]}, ws), detail(before, after)

            new, d = self._shared_change(mutate)
            return {"window": _windows_of(new).get(name), "audit": d, "applies": APPLIES_HA,
                    "stored": self.shared.where}
        with self._lock:
            old = dict(self._windows)
            self._windows, before, after = next_windows(old)
            try:
                d = detail(before, after)
                if self.store is not None:
                    self.store.put_value(KEY, self._snapshot(), _now(), (EVENT_KIND, d))
            except BaseException:
                self._windows = old
                raise
        return {"window": after or None, "audit": d, "applies": APPLIES}
