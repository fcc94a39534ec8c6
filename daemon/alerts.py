"""Alertmanager webhook payloads (version 4) and what each alert means for the daemon.

Parsing is strict: a payload that is not what Alertmanager sends is refused
with a message saying which field is wrong, and nothing is acted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NODE_DOWN_ALERTS = frozenset({"GPUNodeDown", "GpuNodeDown", "NodeDown", "GPUXidErrors"})
LOAD_ALERTS = frozenset({"GPULoadSpike", "GPUClusterLoadHigh", "GPUTenantLoadSpike"})
NODE_LABELS = ("node", "Hostname", "hostname", "instance", "kubernetes_node")


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


def node_of(alert: Alert) -> str | None:
    for key in NODE_LABELS:
        v = alert.labels.get(key)
        if v:
            return v.split(":", 1)[0] if key == "instance" else v
    return None


def actions(payload: WebhookPayload) -> list[Action]:
    """Map each alert to what the daemon does about it."""
    out: list[Action] = []
    for a in payload.alerts:
        name = a.labels.get("alertname", "")
        if name in NODE_DOWN_ALERTS:
            node = node_of(a)
            if node is None:
                out.append(Action("ignore", name))
            else:
                out.append(Action("node_down" if a.status == "firing" else "node_up", name, node))
        elif name in LOAD_ALERTS or a.labels.get("gpu_autoscaler") == "cycle":
            out.append(Action("cycle_now" if a.status == "firing" else "ignore", name))
        else:
            out.append(Action("ignore", name))
    return out
