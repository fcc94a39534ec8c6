"""The daemon as the web layer reads it: the service's side of daemon/web/backend.py's `Backend` protocol.

A thin adapter over the Runtime (and the Daemon's health and alert hand-off, passed in as functions so this
module needs nothing of daemon/service/loop.py): the web layer gets the snapshot the cycle last published and
a handful of calls, and never the daemon's internals.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from daemon.config import Config
from daemon.service.wiring import NodeListError, Runtime
from daemon.state.overrides import Overrides
from daemon.web.backend import NodesUnavailable, Snapshot


class DaemonBackend:
    """Implements daemon.web.backend.Backend for a running daemon."""

    def __init__(self, runtime: Runtime, health: Callable[[bool], dict],
                 submit_alerts: Callable[[Any, float], Future]) -> None:
        self._rt = runtime
        self._health = health
        self._submit = submit_alerts

    def snapshot(self) -> Snapshot:
        return self._rt.runner.snapshot  # one reference, swapped whole at the end of each cycle

    def config(self) -> Config:
        return self._rt.cfg

    def health(self, detail: bool = False) -> dict:
        return self._health(detail)

    def events(self, limit: int = 100, kind: str | None = None, tenant: str | None = None,
               before: int | None = None) -> list[dict]:
        store = self._rt.store
        return store.recent_events(limit, kind, tenant, before) if store is not None else []

    def plan_history(self, limit: int) -> list[dict]:
        store = self._rt.store
        return store.plan_history(limit) if store is not None else []

    def shadow_records(self, limit: int | None = None) -> list[dict]:
        log = self._rt.runner.shadow_log  # under HA with Redis: the records every replica wrote as leader
        return log.records(limit) if log is not None else []

    def overrides(self) -> Overrides:
        rt = self._rt
        if rt.overrides is None:  # a runtime built without one (tests of the cycle alone): keep changes in memory
            rt.overrides = Overrides(rt.store)
            rt.runner.operator_inputs = rt.overrides.inputs
        return rt.overrides

    def submit_alerts(self, payload: Any, received: float) -> Future:
        """The failover worker's future, with "cannot list the nodes" said in the web layer's terms."""
        out: Future = Future()

        def done(f: Future) -> None:
            if f.cancelled():  # the worker shut down before it ran
                out.cancel()
                return
            exc = f.exception()
            if isinstance(exc, NodeListError):
                out.set_exception(NodesUnavailable(str(exc)))
            elif exc is not None:
                out.set_exception(exc)
            else:
                out.set_result(f.result())

        self._submit(payload, received).add_done_callback(done)
        return out

    def metrics_registry(self) -> CollectorRegistry:
        return self._rt.metrics.registry

    def webhook_rejected(self, reason: str) -> None:
        self._rt.metrics.webhook_rejected.labels(reason).inc()
