"""Alertmanager webhook payloads (version 4) and what each alert means for the daemon.

Parsing is strict: a payload that is not what Alertmanager sends is refused
with a message saying which field is wrong, and nothing is acted on. Node
names must name exactly one known node (no ranges, lists or globs), only
configured alert names fence nodes, and a circuit breaker turns a mass
report into an alert for a human instead of a mass failover.
"""

from __future__ import annotations

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
    kind: Literal["node_down", "node_up", "cycle_now", "ignore"]
    alertname: str
    node: str | None = None


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


def actions(payload: WebhookPayload, cfg: FailoverConfig, known: Callable[[str], bool]) -> list[Action]:
    """Map each alert to what the daemon does about it.

    Every node name is checked before anything is acted on: one bad name refuses the whole post.
    Only alert names configured in ``failover.node_down_alerts`` may fence a node.
    """
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
