"""Recurring windows as known demand (issue 39): what each window asks of the plan at a given time.

From ``start - lead`` (the window's reclaim_before, or the drain plus a cycle when a preemption's drain takes
longer: the GPUs must be free by the start) the tenant's hold is at least the window's GPUs and the plan clears
them (preempts low-priority work on them, the drain ahead of the start). Before that the GPUs stay borrowable
(no hold) unless the window says ``borrowable_before = false``: then they are held from the window's creation
on, by attrition only (nothing new starts on them; nothing is preempted until the lead time).

Pure: the time is the snapshot's, handed in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.config.windows import WindowConfig


@dataclass(frozen=True)
class WindowDemand:
    """What one window asks of this plan."""

    window: str
    tenant: str
    gpus: int                     # GPUs held at least (0: nothing asked now)
    by_type: dict[str, int]       # of which per GPU type (a mixed fleet; one entry on a one-model cluster)
    clear: bool                   # the lead time has come: preempt so that they are free by the start
    reason: str                   # "window batch opens 14:00 Europe/Paris (in 25 min; held from 13:30)"


def demands(windows: Iterable[WindowConfig], now: dt.datetime, drain_s: float, cycle_s: float,
            default_type: str = "gpu") -> list[WindowDemand]:
    """Each window's demand at `now` (only those that ask for something). The lead is reclaim_before, at least
    the drain plus one cycle, so that a preemption made at the first plan of the lead has drained by the start."""
    out = []
    if now.tzinfo is None:  # a snapshot's time without a zone is UTC (the sources' own)
        now = now.replace(tzinfo=dt.timezone.utc)
    for w in windows:
        start = w.occurrence(now)
        if start is None:
            continue
        lead = max(w.lead, dt.timedelta(seconds=drain_s + cycle_s))
        end = start + w.duration
        opens = f"window {w.name} opens {start:%H:%M} {w.timezone}"
        if start <= now < end:
            why = f"{opens}: open until {end.astimezone(start.tzinfo):%H:%M}"
            out.append(WindowDemand(w.name, w.tenant, w.total_gpus(), w.gpus_by_type(default_type), True, why))
        elif now >= start - lead:
            mins = (start - now).total_seconds() / 60
            why = f"{opens} (in {mins:.0f} min; held and cleared from {(start - lead).astimezone(start.tzinfo):%H:%M})"
            out.append(WindowDemand(w.name, w.tenant, w.total_gpus(), w.gpus_by_type(default_type), True, why))
        elif not w.borrowable_before:
            why = f"{opens}: held ahead (borrowable_before = false), cleared from " \
                  f"{(start - lead).astimezone(start.tzinfo):%H:%M}"
            out.append(WindowDemand(w.name, w.tenant, w.total_gpus(), w.gpus_by_type(default_type), False, why))
    return out


def per_tenant(ds: Iterable[WindowDemand]) -> tuple[dict[str, int], dict[str, int], dict[str, dict[str, int]]]:
    """(GPUs held at least, GPUs to clear now, GPUs per type) per tenant, windows of one tenant summed (they may
    overlap: the config refuses only those that exceed the capacity)."""
    hold: dict[str, int] = {}
    clear: dict[str, int] = {}
    typed: dict[str, dict[str, int]] = {}
    for d in ds:
        hold[d.tenant] = hold.get(d.tenant, 0) + d.gpus
        if d.clear:
            clear[d.tenant] = clear.get(d.tenant, 0) + d.gpus
        tt = typed.setdefault(d.tenant, {})
        for t, g in d.by_type.items():
            tt[t] = tt.get(t, 0) + g
    return hold, clear, typed
