"""What the web layer reads and asks of the daemon: one cycle's `Snapshot`, and the `Backend` protocol.

The web layer never sees the daemon itself. The cycle builds one frozen Snapshot at its end and publishes it
with one reference assignment (`CycleRunner.publish`, daemon/service/cycle.py); a request handler takes
`snap = backend.snapshot()` once and reads the plan, the cluster state, the forecast, the history and the
forecast quality from that one object, so a page or an answer never mixes the cycle in flight with the one
before it. What is not the product of a cycle (health, the event log, the operator's overrides, the config in
force for tokens and the server, the webhook's hand-off to failover) goes through the Backend's methods.

The service implements the protocol (daemon/service/backend.py) and hands it to `daemon.web.app.build_app`.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from daemon.config import Config
from daemon.policy.state import ClusterState
from daemon.policy.types import OperatorInputs, Plan
from forecaster.types import Forecast

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

HISTORY_STEPS = 240  # rows of demand history a snapshot keeps: four hours at the default 1-minute resolution


@dataclass(frozen=True, eq=False)  # compared by identity: a field-wise == would compare frames and arrays
class Snapshot:
    """One cycle as the web shows it. Built once, never changed: every field is the cycle's own.

    `plan` is the plan in force (the last good one: a stale cycle keeps it), `state`, `forecast` and `history`
    what that cycle read and predicted (None before the first cycle; `history` may then hold a rolling
    history restored from disk). `cfg` is the config the cycle ran with, so the plan is read against the
    config that made it (rate levels, tenants, resolution) even after a reload between cycles.
    """

    cfg: Config
    plan: Plan | None = None
    state: ClusterState | None = None
    forecast: Forecast | None = None
    history: pd.DataFrame | None = None   # time x tenant, the last HISTORY_STEPS rows, a copy
    quality: Mapping[str, Any] | None = None          # live scores of past forecasts (QualityScores as a dict)
    quality_summary: Mapping[str, Any] | None = None  # the cluster-level part the console shows; None: not scored
    forecaster_note: str = ""             # which forecaster is in use and why
    fallback_error: str | None = None     # why the model fell back to its baseline this cycle, if it did
    cycle: int = 0                        # cycles run when it was published (0: before the first)
    # per-job GPU health (daemon/service/health.py): outcomes with evidence, per-job states, idle GPUs per tenant
    # and tier; None when health is off or before the first cycle
    health: Mapping[str, Any] | None = None
    # pending jobs' start estimates (daemon/service/eta.py): made_at (epoch s) and one row per job; None before
    eta: Mapping[str, Any] | None = None
    # the operators' tier changes the plan in force was made with (tenant -> tier; None: not known, a plan restored
    # from the store): a change applies at the next cycle, so until then a tenant's record keeps the plan's tier
    plan_tiers: Mapping[str, str] | None = None


class OverridesView(Protocol):
    """The operator's runtime changes (daemon/state/overrides.py `Overrides` is one).

    change_* raise daemon.state.overrides.BadChange for a bad change and OverridesUnavailable when (under HA)
    the shared store cannot take it; they block on that store, so handlers call them in a worker thread.
    """

    def all(self) -> dict: ...

    def for_tenant(self, tenant: str) -> dict: ...

    def inputs(self) -> OperatorInputs: ...

    def change_tenant(self, who: str, tenant: str, body: Any) -> dict: ...

    def change_global(self, who: str, body: Any) -> dict: ...

    def windows(self) -> dict[str, dict]: ...

    def change_window(self, who: str, name: str, window: Any, check: Any) -> dict: ...


class NodesUnavailable(Exception):
    """What the future of `Backend.submit_alerts` raises when no scheduler or source can list the nodes:
    no alert can be checked, so none is acted on (the webhook answers 503 and Alertmanager retries)."""


class Backend(Protocol):
    """The daemon as the web layer sees it."""

    def snapshot(self) -> Snapshot:
        """The last published cycle; take it once per request."""
        ...

    def config(self) -> Config:
        """The config in force now (access tokens, server settings): a reload applies to the next request."""
        ...

    def health(self, detail: bool = False) -> dict:
        """ok | degraded | unhealthy with the reason (the /healthz body). Without `detail` the reason carries no
        error text (a source's error may quote a scheduler's output: accounts, job ids): /healthz is open; the
        operator's views ask for the detail."""
        ...

    def events(self, limit: int = 100, kind: str | None = None, tenant: str | None = None,
               before: int | None = None) -> list[dict]:
        """The event log, newest first ([] without a store)."""
        ...

    def plan_history(self, limit: int) -> list[dict]:
        """The saved plans' headline numbers, oldest first ([] without a store)."""
        ...

    def shadow_records(self, limit: int | None = None) -> list[dict]:
        """The newest `limit` shadow records (what dry-run cycles would have done, daemon/shadow), oldest first
        ([] without a store). A blocking read: handlers call it in a worker thread."""
        ...

    def overrides(self) -> OverridesView:
        ...

    def submit_alerts(self, payload: Any, received: float) -> Future:
        """Hand a parsed webhook post (daemon.failover.alerts.WebhookPayload) to the failover worker.

        The future holds what was done (a list of dicts), or raises daemon.failover.alerts.PayloadError (a
        node name that is not exactly one known node: nothing done) or NodesUnavailable.
        """
        ...

    def metrics_registry(self) -> CollectorRegistry:
        """What /metrics exposes."""
        ...

    def webhook_rejected(self, reason: str) -> None:
        """Count a refused webhook post (`gpuas_webhook_rejected{reason}`)."""
        ...
