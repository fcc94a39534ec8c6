"""Recurring windows as known demand (issue 39): what each window asks of the plan at a given time.

From ``start - lead`` (the window's reclaim_before, or the drain plus a cycle when a preemption's drain takes
longer: the GPUs must be free by the start) the tenant's hold is at least the window's GPUs, those held for the
tenant alone (never the pool's: a Slurm reservation for its account, its hold flavor's quota; Plan.window_holds,
per GPU type on a mixed fleet: Plan.window_holds_by_type),
while the rest of a pooled tenant's hold stays in the pool, so the window adds to what it may use; and the plan
clears them: it preempts low-priority work on them, spread evenly over the lead (``clear_gpus`` rises by the
window's GPUs x cycle / (lead - drain) each cycle, and reaches all of them at the plan made a drain and a cycle
before the start, so they have drained by the start; the plan asks all of them from the lead time for a tenant
whose jobs take whole nodes, daemon/policy/engine.py). A window's clearing is known demand: it is not weighed by
the cost-aware rule and has its own preemption budget (what it asks to clear now), so it neither waits on nor
spends the budget kept for the forecast. Before that the GPUs stay borrowable (no hold) unless the window says
``borrowable_before = false``: then they are held from the window's creation on, by attrition only (nothing new
starts on them; nothing is preempted until the lead time).

Pure: the time is the snapshot's, handed in.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from daemon.config.windows import WindowConfig
from daemon.policy.types import Plan


@dataclass(frozen=True)
class WindowDemand:
    """What one window asks of this plan."""

    window: str
    tenant: str
    gpus: int                     # GPUs held at least (0: nothing asked now)
    by_type: dict[str, int]       # of which per GPU type (a mixed fleet; one entry on a one-model cluster)
    clear_gpus: int               # of which to be free for the tenant (or used by it) now: the drain so far
    reason: str                   # "window batch opens 14:00 Europe/Paris (in 25 min; held from 13:30, ...)"

    @property
    def clear(self) -> bool:
        """The lead time has come: the plan preempts so that the GPUs are free by the start."""
        return self.clear_gpus > 0


def cleared_share(now: dt.datetime, start: dt.datetime, lead: dt.timedelta, drain_s: float, cycle_s: float) -> float:
    """The share of a window's GPUs cleared by the plan made at `now` (between ``start - lead`` and the start):
    one cycle's share at the lead time, one more each cycle, all of them at ``start - drain - cycle`` (a
    preemption made then has drained a cycle before the start)."""
    span = max(lead.total_seconds() - drain_s, cycle_s, 1e-9)
    done = (now - (start - lead)).total_seconds() + cycle_s
    return min(max(done / span, 0.0), 1.0)


# the clause of a window's reason that says its drain is spread over the lead (``demands``)
_SPREAD = re.compile(r"\d+ of (\d+) cleared now, all by \d\d:\d\d\)")


def cleared_whole(reason: str) -> str:
    """A window's reason (``demands``) once the plan clears all its GPUs from the lead time, as it does for a tenant
    whose jobs take whole nodes (daemon/policy/engine.py): the spread clause ("2 of 16 cleared now, all by 14:27")
    no longer holds."""
    return _SPREAD.sub(lambda m: f"all {m[1]} cleared from then, as its jobs take whole nodes)", reason)


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
        lead = w.held_lead(drain_s + cycle_s)
        end = start + w.duration
        gpus = w.total_gpus()
        opens = f"window {w.name} opens {start:%H:%M} {w.timezone}"
        if start <= now < end:
            why = f"{opens}: open until {end.astimezone(start.tzinfo):%H:%M}"
            out.append(WindowDemand(w.name, w.tenant, gpus, w.gpus_by_type(default_type), gpus, why))
        elif now >= start - lead:
            mins = (start - now).total_seconds() / 60
            clear = min(gpus, math.ceil(gpus * cleared_share(now, start, lead, drain_s, cycle_s) - 1e-9))
            by = (start - dt.timedelta(seconds=drain_s + cycle_s)).astimezone(start.tzinfo)
            why = (f"{opens} (in {mins:.0f} min; held from {(start - lead).astimezone(start.tzinfo):%H:%M}, "
                   f"{clear} of {gpus} cleared now, all by {by:%H:%M})")
            out.append(WindowDemand(w.name, w.tenant, gpus, w.gpus_by_type(default_type), clear, why))
        elif not w.borrowable_before:
            why = f"{opens}: held ahead (borrowable_before = false), cleared from " \
                  f"{(start - lead).astimezone(start.tzinfo):%H:%M}"
            out.append(WindowDemand(w.name, w.tenant, gpus, w.gpus_by_type(default_type), 0, why))
    return out


def per_tenant(ds: Iterable[WindowDemand]) -> tuple[dict[str, int], dict[str, int], dict[str, dict[str, int]]]:
    """(GPUs held at least, GPUs to have cleared now, GPUs per type) per tenant, windows of one tenant summed (they
    may overlap: the config refuses only those that exceed the capacity)."""
    hold: dict[str, int] = {}
    clear: dict[str, int] = {}
    typed: dict[str, dict[str, int]] = {}
    for d in ds:
        hold[d.tenant] = hold.get(d.tenant, 0) + d.gpus
        if d.clear_gpus:
            clear[d.tenant] = clear.get(d.tenant, 0) + d.clear_gpus
        tt = typed.setdefault(d.tenant, {})
        for t, g in d.by_type.items():
            tt[t] = tt.get(t, 0) + g
    return hold, clear, typed


def pool_spare(plan: Plan, tenant: str, gpu_type: str | None, gpus: int) -> int:
    """How many of a pooled tenant's window's `gpus` (of `gpu_type` on a mixed fleet, else None) the high tier's
    pool gives up when the window opens, so that a window's reservation made at its lead time may take them from
    the pool's nodes (Slurm, ``windows_reserved = "at_lead"``: daemon/actuators/slurm/windows.py, and its replay,
    daemon/sim/cluster_holds.py ``_ahead``): the window's GPUs held apart from the pool, at most the tenant's hold
    in the plan now (its hold beyond the window stays in the pool). 0 for a tenant not in the pool."""
    if tenant not in plan.pooled:
        return 0
    held = plan.holds_by_type.get(tenant, {}).get(gpu_type, 0) if gpu_type is not None \
        else plan.reservations.get(tenant, 0)
    return max(min(int(gpus), int(held)), 0)


# how close a Slurm window's StartTime (its lead time) is when its reservation is made (windows_reserved =
# "at_lead") and its nodes are picked again ("ahead"): two cycle intervals, since the daemon acts once per cycle and
# one late cycle must not miss it. The Slurm actuator (daemon/actuators/slurm/windows.py repick_within_s) and its
# replay (daemon/sim/actuator.py windows_at_lead_s) both read it here
MARGIN_CYCLES = 2


def reserve_margin_s(cycle_s: float) -> float:
    """Seconds before a window's lead time within which its Slurm reservation is made, or its nodes picked again."""
    return MARGIN_CYCLES * float(cycle_s)
