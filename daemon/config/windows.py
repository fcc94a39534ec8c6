"""Recurring capacity windows (issue 39): GPUs a tenant is known to need at a time that recurs.

A window is declared demand: "team-a needs 16 GPUs every weekday from 14:00 Europe/Paris for 2 hours". The plan
holds them from ``reclaim_before_minutes`` ahead of each start (daemon/policy/windows.py), Slurm carries them as a
recurring reservation (daemon/actuators/slurm/windows.py), operators add and change them in the config
(``[[windows]]``) or through the API (daemon/state/overrides.py).

Next starts come from APScheduler's CronTrigger (a window's recurrence is a crontab or daily / weekly / weekdays
at a time of day, in its own time zone, so 14:00 Europe/Paris stays 14:00 across daylight saving). Pure: no clock
is read here; checks that need a time take it as an argument.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import Field, field_validator, model_validator

from gateway.configfile import Strict as _Strict

WINDOW_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}\Z")   # \Z: `$` also matches before a final newline
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# how far ahead overlaps are looked for: two weeks of starts cover every daily, weekday and weekly pattern twice
CHECK_PERIOD = dt.timedelta(days=14)
# a window starts at most this often on average (24 a day: hourly). The plan runs once a cycle and holds a window from
# its lead (at least a drain and a cycle) ahead: a window every minute would be a hold at all times, and its 20,160
# starts in the check period made the overlap check take half a minute (a PUT, a start or a reload held up)
MAX_STARTS_PER_DAY = 24
# whether a crontab ever fires is asked from this date (a 5-field crontab names no year: the answer does not depend
# on it, and a fixed date keeps the model free of the clock)
_EVER_FROM = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)\Z")


def _a_count(v: object) -> bool:
    """Whether `v` reads as a whole number of GPUs, as pydantic's int does (16, 16.0, "16")."""
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, str) and v.strip().lstrip("+-").isdigit()


class WindowConfig(_Strict):
    """One recurring window. Either ``cron`` or ``every`` (+ ``at``) gives the recurrence."""

    name: str = Field(description="the window's name (lowercase letters, digits, '-', '_'; up to 40): it names "
                      "the Slurm reservation (gpuas-win-<name>) and says why GPUs are held")
    tenant: str = Field(min_length=1, description="the tenant whose GPUs these are (one of [[tenants]])")
    gpus: int | dict[str, int] = Field(description="GPUs held during the window: a number on a one-model "
                                       "cluster, or GPU type -> GPUs on a mixed fleet (fleet.types)")
    cron: str | None = Field(None, description="a crontab (minute hour day month weekday) of the starts, in "
                             "`timezone`; instead of every/at")
    every: Literal["daily", "weekly", "weekdays"] | None = Field(None, description="daily, weekly (on `day`) or "
                                                                 "weekdays (Monday to Friday), at `at`")
    at: str | None = Field(None, description="the start's time of day, HH:MM in `timezone` (with `every`)")
    day: Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"] | None = Field(
        None, description="the day of a weekly window")
    timezone: str = Field("UTC", description="the IANA time zone of the starts (Europe/Paris)")
    duration_minutes: float = Field(gt=0, description="how long each occurrence lasts")
    reclaim_before_minutes: float = Field(30.0, ge=0, description="the lead time: the hold is in place, and "
                                          "low-priority work on those GPUs drained, from this long before each "
                                          "start (longer when the drain itself takes longer)")
    borrowable_before: bool = Field(True, description="true: before the lead time others may use the GPUs (no "
                                    "hold); false: they are held from the window's creation on")

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not WINDOW_NAME.match(v):
            raise ValueError(f"{v!r} is not a window name (lowercase letters, digits, '-', '_'; up to 40)")
        if v == "proposals":   # /api/v1/windows/proposals is the proposals' listing: such a window could not be read
            raise ValueError("'proposals' is reserved (the API's /api/v1/windows/proposals): choose another name")
        return v

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus_not_booleans(cls, v: object) -> object:
        # `gpus = true` would be read as 1 GPU (a bool is an int): a typo, not a count
        if isinstance(v, bool) or (isinstance(v, dict) and any(isinstance(n, bool) for n in v.values())):
            raise ValueError("must be a number of GPUs, not true or false")
        # anything else that is not a count (gpus = "lots", 16.5, [8]) failed both of the union's branches, and the
        # user read pydantic's two ("gpus.int: Input should be a valid integer, ...; gpus.dict[str,int]: Input should
        # be a valid dictionary"): one line instead
        if isinstance(v, dict):
            bad = {t: n for t, n in v.items() if not _a_count(n)}
            if bad:
                raise ValueError(f"GPUs per type must be whole numbers: {bad}")
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"must be a finite number of GPUs, not {v}")
        elif not _a_count(v):
            raise ValueError(f"must be a whole number of GPUs (gpus = 16), or GPUs per type on a mixed fleet "
                             f"(gpus = {{h100 = 8}}), not {v!r}")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus_ok(cls, v: int | dict[str, int]) -> int | dict[str, int]:
        if isinstance(v, dict):
            if not v:
                raise ValueError("names no GPU type")
            bad = {t: n for t, n in v.items() if n <= 0}
            if bad:
                raise ValueError(f"GPUs per type must be > 0: {bad}")
            out: dict[str, int] = {}
            for t, n in v.items():
                key = str(t).strip().lower()
                if key in out:   # "h100" and "H100" are one type: the second would silently replace the first
                    raise ValueError(f"the GPU type {key!r} is given twice ({sorted(v)})")
                out[key] = int(n)
            return out
        if v <= 0:
            raise ValueError("must be > 0")
        return v

    @field_validator("timezone")
    @classmethod
    def _zone_ok(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not an IANA time zone (Europe/Paris, UTC)") from None
        return v

    @model_validator(mode="after")
    def _recurrence_ok(self) -> "WindowConfig":
        if (self.cron is None) == (self.every is None):
            raise ValueError(f"window {self.name!r}: give either cron or every (with at), not "
                             + ("both" if self.cron else "neither"))
        if self.every is not None:
            if self.at is None or not _TIME.match(self.at):
                raise ValueError(f"window {self.name!r}: at = {self.at!r} is not a time of day HH:MM")
            if (self.every == "weekly") != (self.day is not None):
                raise ValueError(f"window {self.name!r}: day is " + ("needed by every = 'weekly'"
                                 if self.day is None else "read only with every = 'weekly'"))
        elif self.at is not None or self.day is not None:
            raise ValueError(f"window {self.name!r}: at and day go with every, not with cron")
        try:
            trig = self.trigger()
        except ValueError as exc:
            raise ValueError(f"window {self.name!r}: cron = {self.cron!r} is not a crontab: {exc}") from None
        if self.cron is not None:
            f = self.cron.split()
            if f[2] != "*" and f[4] != "*":
                # crontab fires when either the day of the month or the weekday matches; APScheduler's CronTrigger
                # only when both do ("0 9 1 * 1": the 1st and every Monday to cron, Mondays that are the 1st here)
                raise ValueError(f"window {self.name!r}: cron = {self.cron!r} restricts both the day of the month "
                                 "and the weekday, which crontab and the scheduler read differently: give one "
                                 "(two windows for both)")
            if trig.get_next_fire_time(None, _EVER_FROM) is None:
                raise ValueError(f"window {self.name!r}: cron = {self.cron!r} never fires (no such date)")
        return self

    # ---- the recurrence -------------------------------------------------------------------------------------
    def crontab(self) -> str:
        """The recurrence as a crontab (``every``/``at`` written as one)."""
        if self.cron is not None:
            return self.cron
        assert self.at is not None
        hh, mm = (int(x) for x in self.at.split(":"))
        dow = {"daily": "*", "weekdays": "mon-fri", "weekly": self.day or "*"}[self.every or "daily"]
        return f"{mm} {hh} * * {dow}"

    def trigger(self) -> CronTrigger:
        f = self.crontab().split()
        if len(f) == 5:
            f[4] = cron_weekdays(f[4])
        return CronTrigger.from_crontab(" ".join(f), timezone=ZoneInfo(self.timezone))

    def starts(self, since: dt.datetime, until: dt.datetime, limit: int | None = None) -> list[dt.datetime]:
        """The starts in [since, until), in the window's time zone (at most `limit` of them, the first)."""
        trig, out = self.trigger(), []
        t = trig.get_next_fire_time(None, since)
        while t is not None and t < until and (limit is None or len(out) < limit):
            out.append(t)
            t = trig.get_next_fire_time(t, t + dt.timedelta(seconds=1))
        return out

    def occurrence(self, now: dt.datetime) -> dt.datetime | None:
        """The start of the occurrence in progress at `now`, else of the next one (None: none ever again)."""
        return self.trigger().get_next_fire_time(None, now - self.duration + dt.timedelta(microseconds=1))

    def next_lead(self, now: dt.datetime, min_lead_s: float = 0.0) -> dt.datetime | None:
        """The lead time (start less ``held_lead``) of the first occurrence whose lead time is still ahead of `now`
        (an occurrence already being reclaimed for is the plan's hold's); None when it never starts again. When a
        Slurm reservation for the window is made for, and how soon it is made with ``windows_reserved = at_lead``."""
        lead = self.held_lead(min_lead_s)
        start = self.trigger().get_next_fire_time(None, now + lead + dt.timedelta(seconds=1))
        return None if start is None else start - lead

    def held_lead(self, min_lead_s: float = 0.0) -> dt.timedelta:
        """How long before each start the plan holds the window: reclaim_before, lengthened to `min_lead_s`
        (Config.window_min_lead_s: a preemption's drain and a cycle) where it is shorter, so that what the first plan
        of the lead preempts has drained by the start. The plan, the overlap check, Slurm's reservation and the start
        estimates all count from it."""
        return max(self.lead, dt.timedelta(seconds=min_lead_s))

    @property
    def duration(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.duration_minutes)

    @property
    def lead(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.reclaim_before_minutes)

    def slurm_flag(self) -> str | None:
        """The recurrence as a Slurm reservation flag (DAILY, WEEKLY, WEEKDAY), None when Slurm cannot say it
        (the next occurrence is then reserved alone and re-created once it has passed)."""
        if self.every is not None:
            return {"daily": "DAILY", "weekly": "WEEKLY", "weekdays": "WEEKDAY"}[self.every]
        f = (self.cron or "").split()
        if len(f) != 5 or not f[0].isdigit() or not f[1].isdigit() or f[2:4] != ["*", "*"]:
            return None
        dow = f[4].lower()
        if dow == "*":
            return "DAILY"
        if dow in ("1-5", "mon-fri"):
            return "WEEKDAY"
        if dow in DAYS or (dow.isdigit() and 0 <= int(dow) <= 7):
            return "WEEKLY"
        return None

    def gpus_by_type(self, default_type: str) -> dict[str, int]:
        return dict(self.gpus) if isinstance(self.gpus, dict) else {default_type: int(self.gpus)}

    def total_gpus(self) -> int:
        return int(sum(self.gpus.values())) if isinstance(self.gpus, dict) else int(self.gpus)

    def describe(self) -> str:
        """How the plan says it: "window batch opens 14:00 Europe/Paris"."""
        when = self.at if self.at is not None else f"cron {self.cron!r}"
        return f"window {self.name} opens {when} {self.timezone}"


_CRON_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def cron_weekdays(field: str) -> str:
    """A crontab's weekday field with its numbers as names: crontab counts 0 (and 7) as Sunday, APScheduler 3's
    CronTrigger 0 as Monday (its from_crontab passes the numbers through), so "1-5" would run Tuesday to
    Saturday. A numeric range is written out day by day ("0-2": "sun,mon,tue"), as a named range cannot wrap."""
    out = []
    for part in field.split(","):
        m = re.fullmatch(r"([0-7])(?:-([0-7]))?", part.strip())
        if m is None:
            out.append(part)
            continue
        a, b = int(m.group(1)), int(m.group(2) if m.group(2) is not None else m.group(1))
        if b < a:
            raise ValueError(f"weekday range {part!r} runs backwards")
        out.extend(_CRON_DAYS[d] for d in range(a, b + 1))
    return ",".join(dict.fromkeys(out))


def problems(windows: Iterable[WindowConfig], capacity: Mapping[str, int], typed: bool, tenants: Iterable[str] = (),
             since: dt.datetime | None = None, default_type: str = "gpu",
             tenants_are: str = "one of [[tenants]]", min_lead_s: float = 0.0) -> list[str]:
    """Why these windows cannot all be kept, one line each (empty: they can): a name twice, an unknown tenant or
    type, a number of GPUs on a mixed fleet (or types on a one-model cluster), a window larger than its type's
    capacity, one that overlaps itself, and windows whose holds overlap with more GPUs than the type has
    (both windows and the time named). `capacity`: GPUs per type (`default_type` on a one-model cluster); a type
    not in it is not checked for size (its capacity is known only to the scheduler). Holds count from
    reclaim_before ahead of each start, at least `min_lead_s` (Config.window_min_lead_s: the plan lengthens a
    shorter lead to a preemption's drain and a cycle, daemon/policy/windows.py). `since`: where the check period
    starts (the caller's clock). `tenants_are`: what `tenants` are, as an unknown tenant's line says it."""
    ws = list(windows)
    out: list[str] = []
    known_tenants = set(tenants)
    names = [w.name for w in ws]
    for n in sorted({n for n in names if names.count(n) > 1}):
        out.append(f"windows: the name {n!r} is used twice")
    for w in ws:
        where = f"windows.{w.name}"
        if known_tenants and w.tenant not in known_tenants:
            known = sorted(known_tenants)
            shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
            out.append(f"{where}.tenant: {w.tenant[:64]!r} is not {tenants_are} ({shown})")
        if typed and not isinstance(w.gpus, dict):
            out.append(f"{where}.gpus: a mixed fleet needs GPUs per type, for example {{h100 = {w.gpus}}}")
            continue
        if not typed and isinstance(w.gpus, dict):
            out.append(f"{where}.gpus: this cluster has one GPU model (no fleet.types): give a number")
            continue
        for t, g in w.gpus_by_type(default_type).items():
            if typed and t not in capacity:
                out.append(f"{where}.gpus: {t!r} is not a GPU type of this fleet {sorted(capacity)}")
            elif t in capacity and g > capacity[t]:
                what = f"{t} GPUs" if typed else "GPUs"
                out.append(f"{where}.gpus: {g} is more than the {capacity[t]} {what} the cluster has")
    if out:
        return out
    start = since or dt.datetime.now(dt.timezone.utc)
    end = start + CHECK_PERIOD
    most = MAX_STARTS_PER_DAY * CHECK_PERIOD.days
    spans: dict[str, list[tuple[dt.datetime, dt.datetime, WindowConfig, int]]] = {}
    for w in ws:
        if len(w.starts(start, end, limit=most + 1)) > most:
            out.append(f"windows.{w.name}.cron: {w.crontab()!r} starts more "
                       f"than {most} times in the {CHECK_PERIOD.days} days checked: a window recurs at most "
                       f"{MAX_STARTS_PER_DAY} times a day (hourly)")
            continue
        lead = w.held_lead(min_lead_s)
        occ = w.starts(start - w.duration, end + lead)
        for a, b in zip(occ, occ[1:]):
            if b - a < w.duration + lead:
                longer = "" if lead == w.lead else \
                    f" (reclaimed for {lead.total_seconds() / 60:g} min ahead: a preemption's drain and a cycle)"
                out.append(f"windows.{w.name}: an occurrence ({_fmt(b)}) starts, or is reclaimed for{longer}, before "
                           f"the one before it ({_fmt(a)}) has ended: shorten duration_minutes or "
                           "reclaim_before_minutes")
                break
        for s in occ:
            for t, g in w.gpus_by_type(default_type).items():
                spans.setdefault(t, []).append((s - lead, s + w.duration, w, g))
    if out:
        return out
    seen: set[tuple[str, ...]] = set()
    for t, items in sorted(spans.items()):
        cap = capacity.get(t)
        if cap is None:
            continue
        # a sweep over the holds in order of their start: at each start, the holds live then (begun, not ended)
        # and their GPUs; n log n (every hold against every other was minutes at a few thousand holds)
        items = sorted(items, key=lambda x: x[0])
        ends: list[tuple[dt.datetime, int]] = []   # (end, index in items) of the live holds
        live_at: dict[int, tuple[dt.datetime, dt.datetime, WindowConfig, int]] = {}
        total, i = 0, 0
        while i < len(items):
            a = items[i][0]
            while i < len(items) and items[i][0] == a:
                heapq.heappush(ends, (items[i][1], i))
                live_at[i] = items[i]
                total += items[i][3]
                i += 1
            while ends and ends[0][0] <= a:
                _e, j = heapq.heappop(ends)
                total -= live_at.pop(j)[3]
            if total <= cap or len(live_at) < 2:
                continue
            live = list(live_at.values())
            key = (t,) + tuple(sorted(w2.name for *_y, w2, _g2 in live))
            if key in seen:
                continue
            seen.add(key)
            lo, hi = max(x[0] for x in live), min(x[1] for x in live)
            who = " and ".join(f"{w2.name} ({g2})" for *_z, w2, g2 in sorted(live, key=lambda x: x[2].name))
            what = f"{t} GPUs" if typed else "GPUs"
            held = "reclaim_before on" + (", or a preemption's drain and a cycle ahead where that is longer"
                                          if any(w2.lead.total_seconds() < min_lead_s for *_y, w2, _g in live) else "")
            out.append(f"windows: {who} overlap from {_fmt(lo)} to {_fmt(hi)} (holds from {held}) with "
                       f"{total} {what}, more than the {cap} the cluster has")
    return out


def _fmt(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def window_of(d: Mapping) -> WindowConfig:
    """A plan's window (``Plan.windows``: each a WindowConfig as JSON) as the WindowConfig it was dumped from,
    validated once per distinct window and then reused: the replay's and the actuators' per-step and per-cycle
    reads of the same windows no longer re-validate them (and rebuild nothing else). Callers must not change it."""
    return _window_of(json.dumps(dict(d), sort_keys=True))


@functools.lru_cache(maxsize=256)
def _window_of(text: str) -> WindowConfig:
    return WindowConfig.model_validate(json.loads(text))
