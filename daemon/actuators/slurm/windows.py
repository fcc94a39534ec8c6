"""Recurring windows as real Slurm reservations (issue 39), made at each lead time or created ahead.

When, ``actuators.slurm.windows_reserved`` says:

- ``at_lead`` (the default): each occurrence's reservation alone (no recurrence flag; slurmctld purges it once it
  has ended), made only once its StartTime is ``repick_within_s`` (two cycle intervals) away, and kept while that
  occurrence is under way. Before then its nodes are any job's. Why the default: slurmctld starts on a reservation
  that exists and is not active no job whose time limit reaches into it, and a job without one (INFINITE, the
  default of a partition with no DefaultTime) never starts there, the tenant's own included: one made ahead idles
  its nodes from one occurrence to the next. The cost: while the daemon is down no occurrence is reserved.
- ``ahead``: recurring, made at the first plan, as below; it holds while the daemon is down, and only jobs with a
  time limit ending before its StartTime borrow its nodes (for partitions with a DefaultTime or MaxTime).

Each window of the plan (``Plan.windows``: the config's and the operator's) is one reservation, made for its next
occurrence whose lead time is still ahead:

    scontrol create reservation ReservationName=gpuas-win-<name> StartTime=<start - reclaim_before>
        Duration=<reclaim_before + duration> Accounts=<the tenant's account> Nodes=<whole nodes>
        Flags=IGNORE_JOBS,MAGNETIC,DAILY|WEEKLY|WEEKDAY

- The recurrence flag makes slurmctld move the reservation to the next occurrence by itself when one ends. A
  crontab Slurm cannot say (only "M H * * *", weekdays and one weekday are) gets the next occurrence alone, with
  no flag; once it has passed, the next apply creates the following one (and says so each time).
- StartTime is written in this host's local time, which is how scontrol reads it: the daemon and slurmctld must
  share a time zone (docs/windows.md). A window's own time zone only decides when its starts fall.
- Slurm 22.05 reserves whole nodes, not GPUs (as the holds, daemon/actuators/slurm/holds.py): the window's GPUs
  in whole nodes, per GPU type on a mixed fleet, never nodes in another reservation (Slurm would refuse the
  overlap in time with our own UNLIMITED holds), but for ``at_lead`` and a pooled tenant: its reservation takes
  first the pool's nodes where the tenant runs, by the hand-over rule Kueue's hold uses (``_from_pool``), taken
  out of the pool's reservation just before; until the window opens they count toward the pool's GPUs that the
  window takes (``active_gpus``), so the pool does not take other nodes for them.
- ``IGNORE_JOBS``: the reservation can be made on nodes with jobs running; Slurm itself starts no job there whose
  time limit reaches into the window. The plan clears what still runs there at the lead time (the preemptions:
  the window's nodes are the tenant's held nodes once the reservation is active, ``SlurmActuator.cluster_nodes``).
- ``MAGNETIC``: the tenant's jobs use it without asking.
- A tenant whose largest job asks several nodes (``-N 2 --gres=gpu:4``: the view's job shapes) gets nodes where that
  job starts: a node per node it asks, each with room for its GPUs per node (the holds' ``shape``), where those
  nodes take no more than the window's GPUs rounded up to whole nodes (nodes of one size tried in turn where the
  ranking's first pick is larger: 16 GPUs for a 2 x 4 job are two nodes of 8, not one of 16). The window's GPUs
  are the operator's: the tenant's jobs never make it larger. Where no such nodes fit (8 GPUs for 2 x 4 on 8-GPU
  nodes: one node), the window takes whole nodes for its GPUs as before and the report says the tenant's jobs
  cannot start in it, and how many GPUs would (``_unfit``).

When the nodes are picked: twice. At creation (up to a day ahead, so that the window holds even if the daemon is
down at its lead time), and again at the lead time of each occurrence, as the simulator and Kueue pick a window's
nodes then, from the cluster as it is: once the reservation's StartTime is at most ``repick_within_s`` away (two
cycle intervals: the daemon acts once per cycle, and one late cycle must not miss it), the window's nodes are
chosen again by the same rule (``SlurmHolds.choose_typed``, outside every other reservation; its own nodes win a
tie) and, only when that choice differs, moved in place with ``scontrol update ReservationName=<name>
Nodes=<list>``. slurmctld (22.05) keeps StartTime, Duration, IGNORE_JOBS, MAGNETIC and the recurrence flag through
that update, and a DAILY, WEEKLY or WEEKDAY reservation keeps the new nodes for its next occurrences, until their own
lead time picks again. At most once per occurrence (its StartTime) in a fencing term (``TermRecord``): no churn
every cycle. A replica that leads in the middle picks again from the cluster as it finds it; on the same cluster
that is the same choice (no update), so doing it again is harmless. Never while the reservation is active (its
jobs run there). An update slurmctld refuses (a reservation made on the node in between) leaves the old nodes: the
reservation still holds them, and the report says so.

While a window's reservation is active its nodes count toward the tenant's hold (``SlurmHolds`` holds only the
rest). A reservation is re-made (deleted and created) only while it is not active, when the window changed;
one whose window is gone is deleted, its jobs detached first (they keep running). Only reservations named
``<prefix>-<window>`` are touched.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from daemon.actuators.base import NO_FENCE, ActionReport, FenceGuard, TermRecord
from daemon.actuators.slurm.holds import (
    Node,
    Reservation,
    RunningJob,
    SlurmHolds,
    expand_hostlist,
    parse_kv_line,
    parse_reservations,
)
from daemon.config.fleet import DEFAULT_TYPE
from daemon.config.windows import WindowConfig
from daemon.policy.hand_over import hand_over
from daemon.policy.types import Plan
from daemon.policy.windows import pool_spare
from daemon.text import plural

log = logging.getLogger("gpu_autoscaler.actuator.slurm")

SLURM_TIME = "%Y-%m-%dT%H:%M:%S"
# how long after a recurring reservation's occurrence ends it may still show that occurrence (INACTIVE, its past
# StartTime) before slurmctld moves it on: about 20 s on slurmctld 22.05; a few cycles of margin
MOVE_ON_GRACE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class WindowReservation:
    """A reservation of ours as `scontrol -o show reservation` gives it."""

    name: str
    start: dt.datetime          # naive local time, as slurmctld prints it
    duration_min: int
    nodes: tuple[str, ...]
    accounts: tuple[str, ...]
    flags: frozenset[str]
    state: str


def parse_duration_min(text: str) -> int:
    """Slurm's ``[days-]HH:MM:SS`` (or ``MM:SS``, ``UNLIMITED``) in whole minutes; -1 for UNLIMITED."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return -1
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    h, m, s = parts
    return (int(days) if days else 0) * 1440 + h * 60 + m + (1 if s else 0)


def parse_window_reservations(out: str, prefix: str) -> list[WindowReservation]:
    res = []
    for line in out.splitlines():
        kv = parse_kv_line(line)
        name = kv.get("ReservationName", "")
        if not name.startswith(prefix + "-"):
            continue
        try:
            start = dt.datetime.strptime(kv.get("StartTime", ""), SLURM_TIME)
        except ValueError:
            start = dt.datetime.min
        res.append(WindowReservation(name, start, parse_duration_min(kv.get("Duration", "0")),
                                     tuple(expand_hostlist(kv.get("Nodes", ""))),
                                     tuple(a for a in kv.get("Accounts", "").split(",") if a and a != "(null)"),
                                     frozenset(f for f in kv.get("Flags", "").split(",") if f),
                                     kv.get("State", "ACTIVE").upper()))
    return res


def untimed_partitions(out: str) -> list[str]:
    """The partitions (``scontrol -o show partition``) that give a job without ``--time`` no time limit (no
    DefaultTime, MaxTime UNLIMITED): such a job never starts on a window's reservation made ahead."""
    names = []
    for line in out.splitlines():
        kv = parse_kv_line(line)
        if kv.get("PartitionName") and kv.get("DefaultTime", "NONE").upper() == "NONE" \
                and kv.get("MaxTime", "UNLIMITED").upper() in ("UNLIMITED", "INFINITE"):
            names.append(kv["PartitionName"])
    return names


def window_reservation_name(prefix: str, window: str) -> str:
    return f"{prefix}-{window}"


@dataclass(frozen=True)
class Wanted:
    """The reservation a window wants now."""

    name: str
    start: dt.datetime           # local, naive (what scontrol reads)
    duration_min: int
    account: str
    gpus: int
    by_type: dict[str, int]
    flag: str | None
    tenant: str = ""


def wanted(w: WindowConfig, now: dt.datetime, min_lead_s: float = 0.0) -> tuple[dt.datetime, int, str | None] | None:
    """(StartTime, Duration in minutes, flag) of the reservation for `w`: its first occurrence whose lead time
    is still ahead of `now` (an occurrence already being reclaimed for is the plan's hold's, not re-made here);
    None when it never starts again. The lead is the one the plan holds the window from (``held_lead``:
    reclaim_before, at least `min_lead_s`), so the reservation keeps others off from when the plan clears."""
    lead = w.next_lead(now, min_lead_s)
    if lead is None:
        return None
    begin = lead.astimezone().replace(tzinfo=None, microsecond=0)
    return begin, int(math.ceil((w.held_lead(min_lead_s) + w.duration).total_seconds() / 60 - 1e-9)), \
        w.slurm_flag()


def gpus_on(nodes: list[Node], names: Iterable[str]) -> int:
    """The GPUs of the nodes named (a name not among `nodes`, e.g. a node gone from sinfo, counts none): what a
    reservation on them holds, the one measure its making, its move at the lead time and its check agree on."""
    size = {n.name: n.gpus for n in nodes}
    return sum(size.get(n, 0) for n in names)


class SlurmWindows:
    """Keeps one reservation per window, matched to the plan's windows; see the module docstring."""

    def __init__(self, *, read: Callable[..., str], scontrol: Callable[..., bool], holds: SlurmHolds,
                 prefix: str, clock: Callable[[], float], repick_within_s: float = 60.0,
                 guard: Callable[[], FenceGuard] = lambda: NO_FENCE, at_lead: bool = False,
                 min_lead_s: float = 0.0) -> None:
        self.read = read
        self.min_lead_s = min_lead_s      # Config.window_min_lead_s: a reclaim_before shorter is held from this
        self.scontrol = scontrol
        self.holds = holds                # its node choice and account map (the holds' rule for whole nodes)
        self.prefix = prefix
        self.clock = clock                # epoch seconds
        # an inactive reservation's nodes are picked again once its StartTime is this close (two cycle intervals)
        self.repick_within_s = repick_within_s
        # windows_reserved = at_lead: each occurrence's reservation made alone (no recurrence flag), only once its
        # StartTime is repick_within_s away; until then no reservation starves the jobs without a time limit
        self.at_lead = at_lead
        self._checked_partitions = False  # "ahead": the partitions without a time limit said once (apply)
        # reservation name -> the StartTime (occurrence) whose nodes were picked at its lead time, in this fencing
        # term: at most one pick per occurrence; a replica that leads again picks again (same cluster, same choice)
        self._picked: TermRecord[str, dt.datetime] = TermRecord(guard)

    def active_gpus(self, all_out: str, nodes: list[Node], plan: Plan | None = None
                    ) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
        """Account -> GPUs of its windows' reservations active now (what the tenant's hold need not hold again); and
        on a mixed fleet account -> GPU type -> those GPUs per type (the holds' node types; empty on a one-model
        cluster): a typed hold holds only the rest of each type. One pass over the reservations for both.

        With ``at_lead`` and the `plan`, a pooled tenant's reservation made at its lead time and not active yet
        counts too, up to what the pool gives up when it opens (``pool_spare``): it took those GPUs from the pool's
        nodes (``_from_pool``), and the pool's reservation must not take others for them meanwhile."""
        of = {n.name: n for n in nodes}
        pending = self.at_lead and plan is not None and bool(plan.pooled)
        tenant_of = {a: t for t, a in self.holds.account_of.items()} if pending else {}
        out: dict[str, int] = {}
        by_type: dict[str, dict[str, int]] = {}
        for r in parse_window_reservations(all_out, self.prefix):
            known = [of[name] for name in r.nodes if name in of]
            for a in r.accounts:
                per: dict[str | None, int] = {}
                for n in known:
                    typ = self.holds.node_type(n) if self.holds.node_type is not None else None
                    per[typ] = per.get(typ, 0) + n.gpus
                if r.state != "ACTIVE":
                    if not pending or tenant_of.get(a) not in plan.pooled:
                        continue
                    per = {typ: pool_spare(plan, tenant_of[a], typ, g) for typ, g in per.items()}
                out[a] = out.get(a, 0) + sum(per.values())
                if self.holds.node_type is not None:
                    mine = by_type.setdefault(a, {})
                    for typ, g in per.items():
                        mine[str(typ)] = mine.get(str(typ), 0) + g
        return out, by_type

    def apply(self, windows: Iterable[WindowConfig], rep: ActionReport, jobs: list[RunningJob], res_out: str,
              nodes: list[Node], freed: dict[str, int] | None = None, plan: Plan | None = None,
              shapes: dict[str, tuple[int, int]] | None = None) -> None:
        """`freed`: node -> GPUs this plan's preemptions free there (holds.freed_by), counted as free when a
        window's nodes are picked again at its lead time, as the simulator counts draining GPUs. `plan`: with
        ``at_lead``, a pooled tenant's reservation takes first the pool's nodes where it runs (``_from_pool``).
        `shapes`: account -> (nodes, GPUs per node) of its largest job where it asks several nodes
        (actuator_view.job_shapes): its window's nodes are picked where that job starts (``_choose``)."""
        now = dt.datetime.fromtimestamp(self.clock(), dt.timezone.utc)
        windows = list(windows)
        if windows and not self.at_lead and not self._checked_partitions:
            self._warn_untimed()
        mine = {r.name: r for r in parse_window_reservations(res_out, self.prefix)}
        every = parse_reservations(res_out)
        others = {n for r in every if r.name not in mine for n in r.nodes}
        # with at_lead, the pool's reservation: a pooled tenant's window takes its nodes where it runs (_from_pool)
        pool = next((r for r in every if r.name == self.holds.pool_name), None) \
            if self.at_lead and plan is not None and plan.pooled else None
        want: dict[str, Wanted] = {}
        later: set[str] = set()
        local_now = now.astimezone().replace(tzinfo=None)
        for w in windows:
            account = self.holds.account_of.get(w.tenant)
            if account is None:
                rep.errors.append(f"window {w.name}: tenant {w.tenant} is not configured; no reservation")
                continue
            got = wanted(w, now, self.min_lead_s)
            if got is None:
                continue
            start, dur, flag = got
            name = window_reservation_name(self.prefix, w.name)
            if self.at_lead:
                flag = None
                r = mine.get(name)
                if r is not None and r.start - dt.timedelta(seconds=self.repick_within_s) <= local_now < (
                        r.start + dt.timedelta(minutes=r.duration_min)) and r.start < start:
                    start = r.start             # the occurrence under way (or at its lead time): it is kept
                elif (start - local_now).total_seconds() > self.repick_within_s:
                    later.add(name)             # made at its lead time, not before
                    continue
            want[name] = Wanted(name, start, dur, account, w.total_gpus(),
                                w.gpus_by_type(DEFAULT_TYPE) if isinstance(w.gpus, dict) else {}, flag, w.tenant)
            if flag is None and not self.at_lead:
                rep.actions.append(f"window {w.name}: Slurm has no recurrence for cron {w.cron!r}: only its next "
                                   f"occurrence ({start:%Y-%m-%d %H:%M}) is reserved, and re-made each time")
        for name, r in sorted(mine.items()):
            if name not in want:
                self._delete(rep, r, jobs, "made at its lead time only (actuators.slurm.windows_reserved = at_lead)"
                             if name in later else "no such window now")
        taken = set(others)
        for name, wt in sorted(want.items()):
            r = mine.get(name)
            if r is not None and (r.state == "ACTIVE" or self._same(r, wt, nodes, local_now)):
                if r.state != "ACTIVE" and 0 < (r.start - local_now).total_seconds() <= self.repick_within_s:
                    # every other reservation's nodes as they are now (the ones moved earlier in this pass too)
                    busy = others | {n for o in mine.values() if o.name != name for n in o.nodes}
                    r = self._pick_at_lead(rep, r, wt, nodes, jobs, busy, freed or {},
                                           (shapes or {}).get(wt.account))
                    mine[name] = r
                taken |= set(r.nodes)
                continue
            if r is not None:
                self._delete(rep, r, jobs, "its window changed")
            handed = self._from_pool(wt, plan, pool, nodes, jobs) if pool is not None and plan is not None else []
            rest_by = {typ: g - gpus_on([n for n in nodes if self.holds.node_type is not None
                                         and self.holds.node_type(n) == typ], handed)
                       for typ, g in wt.by_type.items()}
            rest = wt.gpus - gpus_on(nodes, handed)
            targets = handed + (self._choose(rep, name, nodes, jobs, rest, wt.account, {}, taken,
                                             {t: g for t, g in rest_by.items() if g > 0} or None, (),
                                             (shapes or {}).get(wt.account))
                                if rest > 0 else [])
            if gpus_on(nodes, targets) < wt.gpus:
                rep.errors.append(f"window {name}: only {plural(len(targets), 'free node')} for "
                                  f"{plural(wt.gpus, 'GPU')} outside other reservations; not reserved")
                continue
            if handed and not self._shrink_pool(rep, pool, handed, jobs, name):
                continue
            flags = "IGNORE_JOBS,MAGNETIC" + (f",{wt.flag}" if wt.flag else "")
            rep.actions.append(f"window {name}: reserve {plural(wt.gpus, 'GPU')} as "
                               f"{plural(len(targets), 'whole node')} from {wt.start:%Y-%m-%d %H:%M} for "
                               f"{wt.duration_min} min" + (f", {wt.flag}" if wt.flag else ""))
            if self.scontrol(rep, "create", "reservation", f"ReservationName={name}",
                             f"StartTime={wt.start.strftime(SLURM_TIME)}", f"Duration={wt.duration_min}",
                             f"Accounts={wt.account}", f"Nodes={','.join(targets)}", f"Flags={flags}"):
                taken |= set(targets)
                if (wt.start - local_now).total_seconds() <= self.repick_within_s:
                    self._picked[name] = wt.start    # made at its lead time: that was the pick for this occurrence

    def _from_pool(self, wt: Wanted, plan: Plan, pool: Reservation, nodes: list[Node],
                   jobs: list[RunningJob]) -> list[str]:
        """The pool's nodes a pooled tenant's reservation made at its lead time takes (``at_lead``): where the
        tenant runs, by the one hand-over rule (daemon/policy/hand_over.py, as Kueue's window hold and the
        simulator take them), at most the GPUs the pool gives up when the window opens (``pool_spare``: the
        window's, up to the tenant's hold in the plan), per GPU type on a mixed fleet. The tenant's jobs there keep
        running, in its window's reservation; without this the window's nodes were only those outside the pool,
        where the other tenants' work that cannot be preempted runs, and the pool let go of the nodes the tenant
        ran on."""
        if wt.tenant not in plan.pooled:
            return []
        preemptible = {self.holds.account_of[t] for t, tier in self.holds.tier_of.items() if tier == "low"}
        own: dict[str, int] = {}
        firm: dict[str, int] = {}
        for j in jobs:
            if j.running:
                for n in j.nodes:
                    if j.account == wt.account:
                        own[n] = own.get(n, 0) + j.gpus
                    elif j.account not in preemptible:
                        firm[n] = firm.get(n, 0) + j.gpus
        pooled = set(pool.nodes)
        in_pool = sorted((n for n in nodes if n.name in pooled and n.healthy and n.gpus > 0),
                         key=lambda n: n.name)
        typed = self.holds.node_type is not None and wt.by_type
        out: list[str] = []
        for typ, g in (sorted(wt.by_type.items()) if typed else [(None, wt.gpus)]):
            cand = [n for n in in_pool if typ is None or self.holds.node_type(n) == typ]
            spare = pool_spare(plan, wt.tenant, typ, g)
            take = hand_over([n.gpus for n in cand], [own.get(n.name, 0) for n in cand],
                             [firm.get(n.name, 0) for n in cand], grow=g, spare=spare,
                             job_gpus=plan.job_gpus((wt.tenant,)))
            out += [cand[i].name for i in take]
        return out

    def _shrink_pool(self, rep: ActionReport, pool: Reservation, handed: list[str], jobs: list[RunningJob],
                     name: str) -> bool:
        """Take `handed` out of the pool's reservation (its jobs there detached first: they keep running), so that
        the window's reservation can be made on them (slurmctld refuses an overlap). False when slurmctld refuses."""
        rest = [n for n in pool.nodes if n not in handed]
        rep.actions.append(f"window {name}: takes {plural(len(handed), 'node')} of {pool.name} where its tenant "
                           f"runs ({','.join(handed)}): the pool gives them up when the window opens")
        for j in jobs:
            if j.reservation == pool.name and set(j.nodes) & set(handed):
                self.scontrol(rep, "update", f"JobId={j.job_id}", "ReservationName=")
        ok = self.scontrol(rep, "update", f"ReservationName={pool.name}", f"Nodes={','.join(rest)}") if rest else \
            self.scontrol(rep, "delete", f"ReservationName={pool.name}")
        if not ok:
            rep.errors.append(f"window {name}: slurmctld refused to take {','.join(handed)} out of {pool.name}; "
                              "not reserved now, tried again next cycle")
        return bool(ok)

    def _warn_untimed(self) -> None:
        """Once, in the log (the report says what was done): with reservations made ahead, which partitions start
        jobs with no time limit (those never start on a window's nodes between its occurrences, the tenant's own
        included)."""
        try:
            untimed = untimed_partitions(self.read("scontrol", "-o", "show", "partition"))
        except Exception as exc:  # noqa: BLE001 (a failed read only skips this warning; the next apply tries again)
            log.warning("windows reserved ahead: could not read the partitions (%s)", exc)
            return
        self._checked_partitions = True
        if untimed:
            log.warning("windows are reserved ahead (actuators.slurm.windows_reserved = ahead), but partitions %s "
                        "give a job without --time no time limit: none of those starts on a window's nodes between "
                        "its occurrences; give them a DefaultTime, or use at_lead", ",".join(untimed))

    def _choose(self, rep: ActionReport, name: str, nodes: list[Node], jobs: list[RunningJob], gpus: int,
                account: str, freed: dict[str, int], busy: set[str], by_type: dict[str, int] | None,
                prefer: tuple[str, ...], shape: tuple[int, int] | None) -> list[str]:
        """The window's nodes for `gpus` (the holds' rule, ``SlurmHolds.choose_typed``, from scratch, never a node
        in `busy`). `shape`: the tenant's largest job asks several nodes (nodes, GPUs per node): the nodes are picked
        where it starts, a node per node it asks with room for its GPUs per node, only where they take no more than
        `gpus` rounded up to whole nodes (whole_nodes.fits); where the ranking's first pick takes more (a node of 16
        first, then one of 8, for 16 GPUs) the nodes of each size with room for its parts are tried in turn,
        smallest first. Where none fits: whole nodes for `gpus` as without a shape, and the report says the job
        cannot start in the window (``_unfit``)."""
        def pick(among: list[Node], shp: tuple[int, int] | None) -> tuple[list[str], bool]:
            # (the nodes, whether they fit the shape): the holds' choice says when it dropped the shape (never
            # without one)
            got, dropped = self.holds.choose_typed_fit(among, jobs, (), gpus, (account,), freed, busy, keep=False,
                                                       by_type=by_type, prefer=prefer, shape=shp)
            return got, not dropped

        if shape is None or shape[0] <= 1:
            return pick(nodes, None)[0]
        targets, fitted = pick(nodes, shape)
        if fitted:
            return targets
        if not by_type:
            for size in sorted({n.gpus for n in nodes if n.gpus >= shape[1]}):
                same = [n for n in nodes if n.gpus == size]
                got, ok = pick(same, shape)
                if ok and gpus_on(same, got) >= gpus and len(got) >= shape[0]:
                    return got
        self._unfit(rep, name, nodes, gpus, shape, targets)
        return targets

    @staticmethod
    def _unfit(rep: ActionReport, name: str, nodes: list[Node], gpus: int, shape: tuple[int, int],
               targets: list[str]) -> None:
        """Says that the window's tenant's largest job cannot start in its nodes, and how many GPUs would let it:
        a node per node it asks, of the smallest size with room for its GPUs per node."""
        sizes = [n.gpus for n in nodes if n.healthy and n.gpus >= shape[1]]
        need = f"; a window of {plural(shape[0] * min(sizes), 'GPU')} would hold one" \
            if len(sizes) >= shape[0] else "; no window here can hold one"
        rep.actions.append(f"window {name}: its tenant's jobs ask {plural(shape[0], 'node')} of "
                           f"{plural(shape[1], 'GPU')} each, which {plural(gpus, 'GPU')} in whole nodes "
                           f"({plural(len(targets), 'node')}) cannot start{need}")

    def _pick_at_lead(self, rep: ActionReport, r: WindowReservation, wt: Wanted, nodes: list[Node],
                      jobs: list[RunningJob], busy: set[str], freed: dict[str, int],
                      shape: tuple[int, int] | None = None) -> WindowReservation:
        """The nodes of `r`'s coming occurrence picked again at its lead time, as the simulator picks a window's
        nodes then: the rule the reservation was made with (choose_typed, from scratch, never a node of another
        reservation in `busy`), from the cluster as it is now and the GPUs this plan frees (`freed`), its own nodes
        winning a tie (no move for nothing).
        Moved in place only when the choice differs; once per occurrence. Returns the reservation as it is after
        (its old nodes when the move is refused)."""
        if self._picked.get(r.name) == r.start:
            return r
        self._picked[r.name] = r.start
        targets = self._choose(rep, r.name, nodes, jobs, wt.gpus, wt.account, freed, busy, wt.by_type or None,
                               r.nodes, shape)
        if sorted(targets) == sorted(r.nodes):
            return r
        if gpus_on(nodes, targets) < wt.gpus:
            rep.actions.append(f"window {r.name}: keeps {','.join(r.nodes)} for its start at {r.start:%H:%M}: only "
                               f"{plural(len(targets), 'node')} outside other reservations for "
                               f"{plural(wt.gpus, 'GPU')}")
            return r
        rep.actions.append(f"window {r.name}: its start at {r.start:%Y-%m-%d %H:%M} is near; its nodes picked now, "
                           f"as the plan picks them: {','.join(r.nodes)} -> {','.join(targets)}")
        if self.scontrol(rep, "update", f"ReservationName={r.name}", f"Nodes={','.join(targets)}"):
            return replace(r, nodes=tuple(targets))
        rep.errors.append(f"window {r.name}: slurmctld refused the move to {','.join(targets)}; it keeps "
                          f"{','.join(r.nodes)}, still reserved for its start at {r.start:%Y-%m-%d %H:%M}")
        return r

    def _same(self, r: WindowReservation, wt: Wanted, nodes: list[Node], local_now: dt.datetime) -> bool:
        """Whether `r` is what the window wants: its start (slurmctld moves a recurring one on by itself, so a
        later start of the same recurrence counts, and so does an occurrence that ended less than
        ``MOVE_ON_GRACE`` ago: slurmctld shows it INACTIVE at its past start for some seconds before it moves it to
        the next, and re-making it then detached its jobs and logged 'its window changed' every day), duration,
        account, flag and GPUs."""
        held = gpus_on(nodes, r.nodes)
        step = {"DAILY": dt.timedelta(days=1), "WEEKLY": dt.timedelta(days=7)}.get(wt.flag or "")
        ended = r.start + dt.timedelta(minutes=r.duration_min)
        moving_on = (wt.flag is not None and wt.flag in r.flags and r.start < wt.start
                     and ended <= local_now < ended + MOVE_ON_GRACE
                     and (step is None or (wt.start - r.start) % step == dt.timedelta(0)))
        same_start = r.start == wt.start or moving_on or (wt.flag is not None and r.start >= wt.start and (
            step is None or (r.start - wt.start) % step == dt.timedelta(0)))
        flag_ok = (wt.flag in r.flags) if wt.flag else not (r.flags & {"DAILY", "WEEKLY", "WEEKDAY", "WEEKEND"})
        return (same_start and r.duration_min == wt.duration_min and r.accounts == (wt.account,) and flag_ok
                and wt.gpus <= held < wt.gpus + max((n.gpus for n in nodes), default=1))

    def _delete(self, rep: ActionReport, r: WindowReservation, jobs: list[RunningJob], why: str) -> None:
        rep.actions.append(f"release window reservation {r.name}: {why}")
        for j in jobs:
            if j.reservation == r.name:
                self.scontrol(rep, "update", f"JobId={j.job_id}", "ReservationName=")
        self.scontrol(rep, "delete", f"ReservationName={r.name}")
