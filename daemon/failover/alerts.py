"""Alertmanager webhook payloads (version 4) and what each alert means for the daemon.

Parsing is strict: a payload that is not what Alertmanager sends is refused
with a message saying which field is wrong, and nothing is acted on. Node
names must name exactly one known node (no ranges, lists or globs), only
configured alert names fence nodes, and a circuit breaker turns a mass
report into an alert for a human instead of a mass failover. An alert older than
``failover.max_alert_age_s`` (a firing one by its ``startsAt``, a resolved one by its ``endsAt``) is refused:
a post replayed or delayed for hours must not fence a node that has long been fine again, nor run cycles.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from daemon.config import FailoverConfig

# characters that make Slurm (scontrol, squeue -w) or a selector read more than one node
FORBIDDEN = frozenset("[],*?{}!=~\\\"'")


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: str
    endsAt: str | None = None
    generatorURL: str | None = None
    fingerprint: str | None = None


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="allow")
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str
    groupKey: str
    alerts: list[Alert] = Field(min_length=1, max_length=1000)
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str | None = None
    truncatedAlerts: int = 0


class PayloadError(ValueError):
    pass


def parse(body: bytes) -> WebhookPayload:
    try:
        return WebhookPayload.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise PayloadError(f"not an Alertmanager v4 payload: {where}: {first['msg']}") from None


@dataclass(frozen=True)
class Action:
    kind: Literal["node_down", "node_up", "cycle_now", "ignore", "stale"]
    alertname: str
    node: str | None = None
    age_s: float = 0.0   # how long ago the alert started (firing) or ended (resolved), when it is stale


def alert_time(text: str, where: str) -> dt.datetime:
    """An RFC 3339 time as Alertmanager writes it (nanoseconds allowed), or a PayloadError naming the field."""
    try:
        t = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise PayloadError(f"{where}: {text[:40]!r} is not an RFC 3339 time") from None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)


def age_s(alert: Alert, i: int, now: dt.datetime) -> float:
    """Seconds since the alert started firing, or for a resolved one since it ended (its endsAt, when set)."""
    when = alert_time(alert.startsAt, f"alerts.{i}.startsAt")
    if alert.status == "resolved" and alert.endsAt and not alert.endsAt.startswith("0001-"):
        when = alert_time(alert.endsAt, f"alerts.{i}.endsAt")
    return (now - when).total_seconds()


def node_label(alert: Alert, labels: list[str]) -> tuple[str, str] | None:
    """(label, value) of the first configured node label present on the alert."""
    for key in labels:
        v = alert.labels.get(key)
        if v is not None:
            return key, v
    return None


def check_node_name(value: str, where: str, known: Callable[[str], bool]) -> str:
    """The name of exactly one node the scheduler or source knows, or a PayloadError naming the field."""
    bad = sorted({c for c in value if c in FORBIDDEN or c.isspace()})
    if not value:
        raise PayloadError(f"{where}: empty node name")
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise PayloadError(f"{where}: {value[:80]!r} is not exactly one node name (contains {shown}); nothing fenced")
    if len(value) > 253:
        raise PayloadError(f"{where}: node name longer than 253 characters; nothing fenced")
    if not known(value):
        raise PayloadError(f"{where}: {value!r} is not a node known to the scheduler or source; nothing fenced")
    return value


def actions(payload: WebhookPayload, cfg: FailoverConfig, known: Callable[[str], bool],
            now: dt.datetime | None = None) -> list[Action]:
    """Map each alert to what the daemon does about it.

    Every node name and time is checked before anything is acted on: one bad one refuses the whole post.
    Only alert names configured in ``failover.node_down_alerts`` may fence a node. An alert older than
    ``failover.max_alert_age_s`` at `now` (default: the clock) is ``stale``: nothing is done for it.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    out = [_stale_or(act, age_s(a, i, now), cfg.max_alert_age_s)
           for i, (a, act) in enumerate(zip(payload.alerts, _actions(payload, cfg, known)))]
    return out


def _stale_or(act: Action, age: float, limit: float) -> Action:
    return Action("stale", act.alertname, act.node, age) if age > limit and act.kind != "ignore" else act


def _actions(payload: WebhookPayload, cfg: FailoverConfig, known: Callable[[str], bool]) -> list[Action]:
    out: list[Action] = []
    node_down = set(cfg.node_down_alerts)
    cycle = set(cfg.cycle_alerts)
    for i, a in enumerate(payload.alerts):
        name = a.labels.get("alertname", "")
        if name in node_down:
            found = node_label(a, cfg.node_labels)
            if found is None:
                out.append(Action("ignore", name))
                continue
            key, value = found
            node = check_node_name(value, f"alerts.{i}.labels.{key}", known if a.status == "firing" else _any)
            out.append(Action("node_down" if a.status == "firing" else "node_up", name, node))
        elif name in cycle:
            out.append(Action("cycle_now" if a.status == "firing" else "ignore", name))
        else:
            out.append(Action("ignore", name))
    return out


def _any(_: str) -> bool:
    return True


class Breaker:
    """Counts distinct nodes reported down in a sliding window; too many at once means monitoring is broken.

    While open, node-down alerts are only alerted on, never acted on. It closes once the window
    holds no more reports than the limits allow.
    """

    def __init__(self, cfg: FailoverConfig) -> None:
        self.cfg = cfg
        self.reports: dict[str, float] = {}   # node -> last time it was reported down
        self.open_until = float("-inf")
        self.lock = threading.Lock()

    def is_open(self, now: float) -> bool:
        return now < self.open_until

    def limit(self, cluster_nodes: int) -> int:
        by_share = int(self.cfg.breaker_max_share * cluster_nodes) if cluster_nodes > 0 else self.cfg.breaker_max_nodes
        return max(1, min(self.cfg.breaker_max_nodes, by_share))  # one dead node is always handled

    def admit(self, nodes: list[str], now: float, cluster_nodes: int) -> tuple[bool, int, int]:
        """Record the reports; (act?, distinct nodes down within the window, limit)."""
        with self.lock:
            cutoff = now - self.cfg.breaker_window_s
            self.reports = {n: t for n, t in self.reports.items() if t >= cutoff}
            for n in nodes:
                self.reports[n] = now
            count, lim = len(self.reports), self.limit(cluster_nodes)
            if count > lim:
                self.open_until = now + self.cfg.breaker_window_s
            return not self.is_open(now), count, lim
