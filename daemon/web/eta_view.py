"""The pending jobs' start estimates as the API and the console show them (made by daemon/service/eta.py)."""

from __future__ import annotations

from typing import Any

import pandas as pd


def iso(t: float | None) -> str | None:
    """An epoch time as ISO 8601 UTC; None stays None (unknown)."""
    return None if t is None else pd.Timestamp(t, unit="s", tz="UTC").isoformat()


def eta_for(view: dict[str, Any] | None, now: float, tenant: str | None = None,
            job: str | None = None) -> dict[str, Any]:
    """The estimates with their age, one tenant's or one job's only when asked (None before the first). An
    answer with no job says why (`why`): none made yet, or no pending job of that id (of that tenant: whether
    another tenant's job exists is not said)."""
    if view is None:
        return {"made_at": None, "age_s": None, "jobs": [],
                "why": "no estimates yet: they are made after each good cycle, the first after the daemon's first"}
    rows = [r for r in view["jobs"]
            if (tenant is None or r["tenant"] == tenant) and (job is None or r["job_id"] == job)]
    made_wall = view.get("made_wall", view["made_at"])   # the age on the wall clock (the simulator's differs)
    out = {"made_at": iso(view["made_at"]), "age_s": round(now - made_wall, 3), "jobs": rows}
    if not rows:
        whose = f" of {tenant}" if tenant is not None else ""
        out["why"] = (f"no pending job {job!r}{whose}: estimates are made for pending jobs only (one that started "
                      "or ended has none)") if job is not None else f"no pending jobs{whose}"
    return out
