"""Per-job GPU health as a viewer may read it, from the Snapshot only (daemon/service/health.py builds it).

An operator sees every finding, job and tenant; a tenant token sees only rows of its own tenant (findings with
their evidence and what will happen when, its jobs' states, its idle GPUs). A finding on a job the scheduler does
not list has no tenant and is shown to operators only. The telemetry error (which names the Prometheus) is
shown to operators; a tenant reads only that telemetry is unavailable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.web.backend import Snapshot

if TYPE_CHECKING:
    from daemon.web.auth import Principal


def health_for(snap: Snapshot, viewer: "Principal", tenant: str | None = None) -> dict[str, Any]:
    """`tenant` narrows an operator's view (a tenant token is always narrowed to its own)."""
    h = snap.health
    if h is None:
        return {"enabled": snap.cfg.health.enabled, "at": None, "error": None, "outcomes": [], "jobs": [],
                "idle": []}
    only = tenant if viewer.operator else viewer.tenant
    everything = viewer.operator and only is None

    def mine(row: dict) -> bool:
        # a row of a job the scheduler does not list has tenant None: no tenant token matches it, whatever the
        # tenant is named
        return everything or (row.get("tenant") is not None and row.get("tenant") == only)

    err = h.get("error")
    return {"enabled": True, "at": h.get("at"),
            "error": err if viewer.operator else ("per-job telemetry unavailable" if err else None),
            "outcomes": [o for o in h.get("outcomes", []) if mine(o)],
            "jobs": [j for j in h.get("jobs", []) if mine(j)],
            "idle": [r for r in h.get("idle", []) if mine(r)]}
