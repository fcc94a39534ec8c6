"""Slurm holds: each GPU reservation of the plan becomes a whole-node Slurm reservation for that tenant's account.

Why whole nodes: Slurm 22.05 reservations can reserve nodes, cores, licenses and
burst buffers (``scontrol create reservation TRES=`` accepts cpu, node, license
and bb only), not a GRES/GPU count. So a tenant's hold is ``ceil`` of its reserved
GPUs in whole nodes (as the simulator holds them), named explicitly (``Nodes=``)
so the daemon decides which:

    scontrol create reservation ReservationName=gpuas-hold-<tenant> StartTime=now Duration=UNLIMITED
        Accounts=<tenant's account> Nodes=n1,n2 Flags=IGNORE_JOBS,MAGNETIC

A plan that pools tenants (``Plan.pooled``: the high tier's holds as one pool) gets one reservation for all of
them, ``<prefix>-pool`` with ``Accounts=<a>,<b>,...`` and the sum of their GPUs, so any pooled tenant's job may
start on any of its nodes; their own per-tenant holds are then released.

- ``IGNORE_JOBS``: the nodes can be reserved while jobs run on them; those jobs keep running.
- ``MAGNETIC``: jobs of the tenant's account use the reservation without asking for it.
- Jobs of other accounts cannot start on reserved nodes, so GPUs freed by a preemption are
  not backfilled by low-priority work.

Release never kills a job: a reservation that still has jobs cannot be deleted
("Requested reservation is in use"), and letting it end would kill them unless
the site set ResvOverRun=UNLIMITED. So the jobs are first detached from it
(``scontrol update JobId=.. ReservationName=``; they keep running where they
are) and then it is deleted. The same detach is done for jobs on nodes a
shrinking hold gives back.

A mixed fleet (``Plan.holds_by_type``): a hold's GPUs of each type are taken in whole nodes whose GRES type is
that type (``choose_typed``), all in the tenant's one reservation; 22.05 has no other way to reserve a GPU model
(docs/fleet-schedulers.md).

Only reservations whose name starts with the configured prefix are ever touched;
they are read back from Slurm every cycle, so a hold left by a crash, a failed
command or an old config is reconciled against the current plan (kept, resized
or deleted).

Names (daemon.config.names): ``<prefix>-<tenant>`` for a tenant whose name is a valid reservation name as it
is and does not end like a hash, and ``<prefix>-<tenant, odd characters as '_'>-<6 hex of its SHA-1>`` for any
other and for a tenant named ``pool``, so no two tenants share a hold (the config refuses a clash of the hash)
and no tenant gets the pool's (``<prefix>-pool``). A hold made under
the name an earlier version gave (odd characters as '_', no hash) is not the tenant's any more: it is
released like any stray hold of ours, and the tenant's new hold starts on its nodes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

from daemon.actuators import whole_nodes
from daemon.actuators.base import NO_FENCE, ActionReport, FenceGuard, TermRecord
from daemon.actuators.slurm.gres import gres_gpu_types, gres_gpus
from daemon.actuators.slurm.visibility import ALL_NODES
from daemon.config.names import POOL, slurm_hold_name
from daemon.policy.types import Plan
from daemon.text import plural

# (GPU types, GPUs) of pending jobs that ask several GPU types at once: the types casefolded, as Slurm compares them
Together = tuple[tuple[frozenset[str], int], ...]

BAD_NODE_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "POWER", "FUTURE", "INVAL", "REBOOT", "MAINT")


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist 'gn[1-3,05],login1' -> ['gn1', 'gn2', 'gn3', 'gn05', 'login1'] (one bracket per name)."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", text.strip()):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if not prefix and not ranges:
            continue
        if prefix in ("(null)", "N/A"):
            continue
        if ranges is None:
            out.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                out.append(prefix + lo + suffix)
                continue
            width = len(lo) if lo.startswith("0") else 0
            out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1))
    return out


FREE_TEXT = ("Reason", "Comment")  # values that are free text: written by whoever drained the node, spaces and all
_FREE_TEXT_AT = re.compile(r"(?:^|\s)(?:" + "|".join(FREE_TEXT) + r")=")


def parse_kv_line(line: str) -> dict[str, str]:
    """One line of `scontrol -o show ...`: Key=Value tokens separated by spaces.

    A node's ``Reason=`` is free text to the end of the line (after every field scontrol prints, and with its
    ``[user@time]``), so a reason that reads ``State=IDLE Gres=gpu:8`` must not be taken for the node's state
    or GPUs: the fields are read only before the first free-text key, which takes the rest of the line, and a
    key seen twice keeps its first value."""
    out: dict[str, str] = {}
    cut = _FREE_TEXT_AT.search(line)
    head = line if cut is None else line[:cut.start()]
    for k, v in re.findall(r"(\w+)=(\S*)", head):
        out.setdefault(k, v)
    if cut is not None:
        key, _, rest = line[cut.start():].strip().partition("=")
        out.setdefault(key, rest.strip())
    return out


def pool_hold_name(prefix: str) -> str:
    """The reservation of the pooled tenants' hold."""
    return f"{prefix}-{POOL}"


def hold_name(prefix: str, tenant: str) -> str:
    """The reservation that holds `tenant`'s GPUs (daemon.config.names: plain, or hashed so that no two tenants
    share one and none takes the pool's)."""
    return slurm_hold_name(prefix, tenant)


def legacy_hold_name(prefix: str, tenant: str) -> str:
    """The name earlier versions gave a tenant's hold (odd characters as '_', no hash): still found, so a hold
    made under it moves to the tenant's hold_name (see SlurmHolds.apply)."""
    return f"{prefix}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", tenant)


def freed_by(plan: Plan) -> dict[str, int]:
    """Node -> GPUs the plan's preemptions free there (a node choice counts them as free)."""
    freed: dict[str, int] = {}
    for p in plan.preemptions:
        if p.node:
            for n in expand_hostlist(p.node):
                freed[n] = freed.get(n, 0) + p.gpus
    return freed


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: tuple[str, ...]
    accounts: tuple[str, ...]
    flags: frozenset[str]
    state: str = "ACTIVE"   # INACTIVE: not started yet (a future StartTime); it keeps nothing off its nodes now


def parse_reservations(out: str) -> list[Reservation]:
    res = []
    for line in out.splitlines():
        kv = parse_kv_line(line)
        if "ReservationName" not in kv:
            continue
        accts = kv.get("Accounts", "")
        res.append(Reservation(kv["ReservationName"], tuple(expand_hostlist(kv.get("Nodes", ""))),
                               tuple(a for a in accts.split(",") if a and a != "(null)"),
                               frozenset(f for f in kv.get("Flags", "").split(",") if f), kv.get("State", "ACTIVE")))
    return res


@dataclass(frozen=True)
class Node:
    name: str
    state: str
    gpus: int
    gpus_used: int
    gres: str = ""       # the configured Gres= text (its GPU type: daemon/actuators/slurm/gres.py)
    features: str = ""   # AvailableFeatures

    @property
    def healthy(self) -> bool:
        return not any(b in self.state.upper() for b in BAD_NODE_STATES) and not self.state.endswith("*")


def _gres_gpus(text: str) -> int:
    """'gpu:4', 'gpu:a100:4(S:0-1)', 'gpu:2(IDX:0-1)' -> 4, 4, 2 (gres.gres_gpus, the one GRES parser)."""
    return gres_gpus(text)


def parse_nodes(out: str) -> list[Node]:
    """`scontrol -d -o show nodes`: Gres (configured) and GresUsed (allocated) per node."""
    nodes = []
    for line in out.splitlines():
        kv = parse_kv_line(line)
        if "NodeName" in kv:
            nodes.append(Node(kv["NodeName"], kv.get("State", ""), _gres_gpus(kv.get("Gres", "")),
                              _gres_gpus(kv.get("GresUsed", "")), kv.get("Gres", ""),
                              kv.get("AvailableFeatures", "")))
    return nodes


def shape_of(accounts: tuple[str, ...], job_gpus: int, shapes: dict[str, tuple[int, int]]
             ) -> tuple[int, int] | None:
    """(nodes, GPUs per node) of the job a hold of `accounts` is sized for (`job_gpus`, Plan.hold_job_gpus: its
    GPUs in all), where one of them runs such a job on several nodes (`shapes`: account -> its largest job's);
    None: a job on one node."""
    fits = [s for a in accounts if (s := shapes.get(a)) is not None and s[0] > 1 and s[0] * s[1] == job_gpus]
    return max(fits, default=None)


@dataclass(frozen=True)
class RunningJob:
    """What node choice needs to know about one job: whose, where, how many GPUs per node, in which reservation."""
    job_id: str
    account: str
    nodes: tuple[str, ...]
    gpus: int
    reservation: str
    running: bool


class SlurmHolds:
    """Keeps one reservation per held tenant, ``<prefix>-<tenant>``, matched to the plan; see the module
    docstring. Per tenant, in whole nodes, only that tenant's account admitted, or one pool with every pooled
    tenant's account: what the simulator holds."""

    def __init__(self, *, read: Callable[..., str], scontrol: Callable[..., bool], accounts: dict[str, str],
                 tier_of: dict[str, str], tiers: list[str], prefix: str, shrink_delay_s: float,
                 clock: Callable[[], float] = time.monotonic, node_type: Callable[[Node], str] | None = None,
                 guard: Callable[[], FenceGuard] = lambda: NO_FENCE) -> None:
        self.read = read                  # read("scontrol", "-o", "show", "res") -> stdout, raises on failure
        self.scontrol = scontrol          # scontrol(rep, *args) -> ok; records the action (and obeys dry run)
        self.account_of = accounts        # tenant -> Slurm account
        self.tier_of = tier_of            # tenant -> tier
        self.tiers = list(tiers)
        self.prefix = prefix
        self.shrink_delay_s = shrink_delay_s
        self.clock = clock
        # hold name -> since when it wants fewer nodes, as this replica saw it in this fencing term (TermRecord,
        # `guard`: the actuator's): one that leads again did not see the plans between, which may have wanted more
        self._fewer_since: TermRecord[str, float] = TermRecord(guard)
        # a mixed fleet: the GPU type of a node (its GRES type); None: one model, any node holds any tenant's GPUs
        self.node_type = node_type
        # hold name -> the shape of its jobs (choose's `shape`) that does not fit the GPUs the plan gives it, as
        # _apply_one last said: it says so when that starts and when it ends, not every cycle
        self._unfit_said: dict[str, tuple[int, int]] = {}

    # ---- what the plan asks for ----------------------------------------------------------------
    def hold_name(self, tenant: str) -> str:
        return hold_name(self.prefix, tenant)

    @property
    def pool_name(self) -> str:
        return pool_hold_name(self.prefix)

    def wanted(self, plan: Plan) -> dict[str, tuple[int, tuple[str, ...]]]:
        """hold name -> (GPUs the plan reserves, the accounts admitted), for every configured tenant of the
        hold tiers and for the pool (0 GPUs: no hold wanted). A pooled tenant holds nothing of its own: its GPUs
        are in the pool's."""
        pooled = set(plan.pooled)
        out: dict[str, tuple[int, tuple[str, ...]]] = {}
        pool_gpus, pool_accounts = 0, set()
        for t, tier in sorted(self.tier_of.items()):
            if tier not in self.tiers:
                continue
            gpus = int(plan.reservations.get(t, 0))
            if t in pooled:
                pool_gpus += gpus
                pool_accounts.add(self.account_of[t])
                gpus = 0
            out[self.hold_name(t)] = (gpus, (self.account_of[t],))
        out[self.pool_name] = (pool_gpus, tuple(sorted(pool_accounts)))
        return out

    def wanted_by_type(self, plan: Plan) -> dict[str, dict[str, int]]:
        """hold name -> {GPU type: GPUs}, from the plan's holds per type (``Plan.holds_by_type``; the pool: the sum
        of its members'). A hold not listed (a one-model plan, or a tenant the plan holds untyped) takes any node."""
        by_type = getattr(plan, "holds_by_type", None) or {}
        if self.node_type is None or not by_type:
            return {}
        out: dict[str, dict[str, int]] = {}
        pool: dict[str, int] = {}
        for t, types in by_type.items():
            if t not in self.tier_of or self.tier_of[t] not in self.tiers:
                continue
            if t in plan.pooled:
                for typ, g in types.items():
                    pool[typ] = pool.get(typ, 0) + int(g)
            else:
                out[self.hold_name(t)] = {typ: int(g) for typ, g in types.items() if int(g) > 0}
        if pool:
            out[self.pool_name] = {typ: g for typ, g in pool.items() if g > 0}
        return out

    def choose_typed(self, nodes: list[Node], jobs: list[RunningJob], current: tuple[str, ...], gpus: int,
                     accounts: tuple[str, ...], freed: dict[str, int], others: set[str], keep: bool,
                     job_gpus: int = 1, by_type: dict[str, int] | None = None,
                     prefer: tuple[str, ...] = (), together: Together = (),
                     shape: tuple[int, int] | None = None) -> list[str]:
        """choose_typed_fit's nodes alone."""
        return self.choose_typed_fit(nodes, jobs, current, gpus, accounts, freed, others, keep, job_gpus, by_type,
                                     prefer, together, shape)[0]

    def choose_typed_fit(self, nodes: list[Node], jobs: list[RunningJob], current: tuple[str, ...], gpus: int,
                         accounts: tuple[str, ...], freed: dict[str, int], others: set[str], keep: bool,
                         job_gpus: int = 1, by_type: dict[str, int] | None = None,
                         prefer: tuple[str, ...] = (), together: Together = (),
                         shape: tuple[int, int] | None = None) -> tuple[list[str], bool]:
        """`_choose`, per GPU type when the hold is typed (`by_type`: type -> GPUs): each type's GPUs in whole
        nodes of that type only (Slurm 22.05 cannot reserve a GRES type, so the node list is what makes a hold
        an a100 hold). While a shrink waits (`keep`), the current nodes of a type no longer held stay too.
        `together`: (GPU types, GPUs) of the held accounts' pending jobs that ask several types at once
        (--gres=gpu:a100:1,gpu:t4:1): Slurm starts one only on a node that has them all, so a type's GPUs for them
        are taken first from its nodes that have them all (of a100 nodes, the a100+t4 one, not an a100-only one
        that cannot start them), the rest from any node of the type. `shape`: the hold's job asks several nodes
        (_choose); (the nodes, whether a type's choice dropped it)."""
        if not by_type or self.node_type is None:
            return self._choose(nodes, jobs, current, gpus, accounts, freed, others, keep, job_gpus, prefer, shape)
        # one entry per set of types, GPUs summed: each entry is checked against every node of a type, and a
        # tenant's 20,000 pending two-type jobs, an entry each, took 2 s per type and call over 1,000 nodes
        merged: dict[frozenset[str], int] = {}
        for need, k in together:
            merged[need] = merged.get(need, 0) + k
        together = tuple(merged.items())
        typ_of = {n.name: self.node_type(n) for n in nodes}
        out: list[str] = []
        dropped = False

        def pick(of: list[Node], cur: tuple[str, ...], g: int) -> list[str]:
            nonlocal dropped
            got, lost = self._choose(of, jobs, cur, g, accounts, freed, others, keep, job_gpus, prefer, shape)
            dropped |= lost
            return got

        for typ, g in sorted(by_type.items()):
            of_type = [n for n in nodes if typ_of[n.name] == typ]
            cur = tuple(c for c in current if typ_of.get(c) == typ)
            has = {n.name: {t.casefold() for t in gres_gpu_types(n.gres) if t} for n in of_type}
            both = [n for n in of_type if any(need <= has[n.name] for need, _ in together)]
            g_both = min(g, sum(k for need, k in together if any(need <= has[n.name] for n in of_type)))
            if g_both > 0 and both:
                first = pick(both, tuple(c for c in cur if c in {n.name for n in both}), g_both)
                left = g - sum(n.gpus for n in both if n.name in first)
                rest = [n for n in of_type if n.name not in first]
                out += first + pick(rest, tuple(c for c in cur if c not in first), max(0, left))
                continue
            out += pick(of_type, cur, g)
        if keep:
            out += [c for c in current if typ_of.get(c) not in by_type]
        return sorted(set(out)), dropped

    def job_gpus(self, plan: Plan) -> dict[str, int]:
        """hold name -> GPUs of the job it is sized for (the pool: its smallest member's), from the plan."""
        out = {self.hold_name(t): plan.job_gpus((t,)) for t in self.tier_of if t not in plan.pooled}
        out[self.pool_name] = plan.job_gpus(plan.pooled)
        return out

    def ours(self, all_res: list[Reservation]) -> list[Reservation]:
        return [r for r in all_res if r.name == self.prefix or r.name.startswith(self.prefix + "-")]

    def choose(self, nodes: list[Node], jobs: list[RunningJob], current: tuple[str, ...], gpus: int,
               accounts: tuple[str, ...], freed: dict[str, int], others: set[str], keep: bool,
               job_gpus: int = 1, prefer: tuple[str, ...] = (), shape: tuple[int, int] | None = None) -> list[str]:
        """_choose's nodes."""
        return self._choose(nodes, jobs, current, gpus, accounts, freed, others, keep, job_gpus, prefer, shape)[0]

    def _choose(self, nodes: list[Node], jobs: list[RunningJob], current: tuple[str, ...], gpus: int,
                accounts: tuple[str, ...], freed: dict[str, int], others: set[str], keep: bool,
                job_gpus: int = 1, prefer: tuple[str, ...] = (), shape: tuple[int, int] | None = None
                ) -> tuple[list[str], bool]:
        """Whole nodes covering `gpus`: the current ones first (no churn; all of them when `keep`), then
        nodes that can be cleared (no job there of another account that cannot be preempted: as the hold
        stops new starts they empty, and the rest can be preempted), then those with the least such work;
        among equals, where the held accounts already run, GPUs are free or the plan's preemptions free them.
        Never a node in someone else's reservation, never a down or drained one, and a current node kept only while
        a job of `job_gpus` GPUs still fits beside that work (whole_nodes.usable). `prefer`: nodes that win a tie
        before the name does (a window's nodes picked again at its lead time stay where they are among equals).
        `shape` (nodes, GPUs per node): the job the hold is sized for runs on several nodes (-N 2 --gres=gpu:4: 8
        GPUs, 4 on each of 2 nodes): whole nodes with room for its GPUs per node, as many as its nodes per job
        (whole_nodes.pick), and a current node is kept while its GPUs per node fit there. Sized as one job of 8
        GPUs, no node of 4 was ever kept (the hold moved whenever another ranked first), and 12 GPUs for one of 3
        nodes x 4 were 2 nodes of 8, where it cannot start. It takes that shape only while those nodes take no more
        than `gpus` rounded up to whole nodes (whole_nodes.fits), as the plan counts the hold at `gpus`: -N 10
        --gres=gpu:1 on nodes of 8 would take 80 GPUs for a hold of 10. Where they would, it takes whole nodes for
        `gpus` as without a shape. Returns (the nodes, whether the shape was dropped so: _apply_one says so)."""
        preemptible = {self.account_of[t] for t, tier in self.tier_of.items() if tier == "low"}
        held_here: dict[str, int] = {}
        firm: dict[str, int] = {}  # GPUs of other accounts' jobs that cannot be preempted, per node
        for j in jobs:
            if not j.running:
                continue
            for n in j.nodes:
                if j.account in accounts:
                    held_here[n] = held_here.get(n, 0) + j.gpus
                elif j.account not in preemptible:
                    firm[n] = firm.get(n, 0) + j.gpus
        usable = [n for n in nodes if n.healthy and n.gpus > 0 and n.name not in others]
        score = {n.name: held_here.get(n.name, 0) + (n.gpus - n.gpus_used) + freed.get(n.name, 0) for n in usable}
        per_node = job_gpus if shape is None else shape[1]
        current = tuple(c for c in current if c in whole_nodes.usable(usable, current, firm, per_node))
        order = whole_nodes.rank(usable, current, firm, score, prefer)
        if shape is not None and not whole_nodes.fits(order, whole_nodes.pick(order, current, gpus, False, shape),
                                                      gpus):
            # the plan counts the hold at `gpus`: whole nodes per node asked would take more than it counted
            # (-N 16 --gres=gpu:1 sized 16 GPUs: 16 nodes), unseen by the capacity, the pool and other holds
            return whole_nodes.pick(order, current, gpus, keep, None), True
        return whole_nodes.pick(order, current, gpus, keep, shape), False

    # ---- doing it --------------------------------------------------------------------------------
    def apply(self, plan: Plan, rep: ActionReport, jobs: list[RunningJob],
              covered: dict[str, int] | None = None,
              covered_by_type: dict[str, dict[str, int]] | None = None,
              together: dict[str, Together] | None = None,
              shapes: dict[str, tuple[int, int]] | None = None) -> None:
        """`together`: account -> (GPU types, GPUs) of its pending jobs asking several types at once (choose_typed).
        `shapes`: account -> (nodes, GPUs per node) of its largest job where that asks several nodes: a hold sized
        for it (Plan.hold_job_gpus = nodes x GPUs per node) takes whole nodes per node asked (choose).
        `covered`: account -> GPUs its active windows' reservations hold (daemon/actuators/slurm/windows.py);
        a hold for that account holds only the rest. `covered_by_type` (a mixed fleet): account -> GPU type -> GPUs
        of those reservations' nodes of that type; a typed hold for that account holds only the rest of each type
        (a pooled tenant's window on h100 leaves the pool its hold beyond the window, per type)."""
        try:
            all_res = parse_reservations(self.read("scontrol", "-o", "show", "reservation"))
            nodes = parse_nodes(self.read("scontrol", ALL_NODES, "-d", "-o", "show", "nodes"))
        except Exception as exc:  # the next cycle reads again; nothing was changed
            rep.errors.append(f"hold: cannot read reservations/nodes: {exc}")
            return
        wanted = self.wanted(plan)
        if covered:
            wanted = {k: (max(g - sum(covered.get(a, 0) for a in accts), 0), accts) for k, (g, accts) in wanted.items()}
        typed = self.wanted_by_type(plan)
        if covered_by_type:
            for name, types in list(typed.items()):
                accts = wanted.get(name, (0, ()))[1]
                typed[name] = {typ: g - sum(covered_by_type.get(a, {}).get(typ, 0) for a in accts)
                               for typ, g in types.items()}
                typed[name] = {typ: g for typ, g in typed[name].items() if g > 0}
        job_gpus = self.job_gpus(plan)
        ours = {r.name: r for r in self.ours(all_res)}
        # a hold under the name an earlier version gave a tenant: released below like any stray, and the
        # tenant's hold (under its name now) starts from its nodes instead of picking others
        renamed = {legacy_hold_name(self.prefix, t): self.hold_name(t) for t in self.tier_of}
        inherit: dict[str, tuple[str, ...]] = {}
        for name, stray in ours.items():
            if name not in wanted:
                new = renamed.get(name)
                if new in wanted and new not in ours and wanted[new][0] > 0:
                    inherit[new] = stray.nodes
                    why = f"the hold of this tenant is named {new} now"
                else:
                    why = "no configured tenant of the hold tiers has this name"
                self._delete(rep, stray, jobs, why)
                self._fewer_since.pop(name, None)
        foreign = {n for r in all_res if r.name not in ours for n in r.nodes}
        freed = freed_by(plan)
        todo = [name for name in wanted if wanted[name][0] > 0 or name in ours]
        for gone in set(self._unfit_said) - set(todo):   # no hold now: one made again says its shape again
            del self._unfit_said[gone]
        has = {name: ours[name].nodes if name in ours else inherit.get(name, ()) for name in todo}
        claimed: set[str] = set()
        for i, name in enumerate(todo):
            # never a node of a foreign reservation, one another hold already took, or one a later hold has
            later = {n for other in todo[i + 1:] for n in has[other]}
            gpus, accounts = wanted[name]
            target = self._apply_one(rep, name, gpus, accounts, ours.get(name), nodes, jobs, freed,
                                     foreign | claimed | later, job_gpus.get(name, 1), inherit.get(name, ()),
                                     typed.get(name), tuple(x for a in accounts for x in (together or {}).get(a, ())),
                                     shape_of(accounts, job_gpus.get(name, 1), shapes or {}))
            claimed |= set(target)

    def _apply_one(self, rep: ActionReport, name: str, gpus: int, accounts: tuple[str, ...], mine: Reservation | None,
                   nodes: list[Node], jobs: list[RunningJob], freed: dict[str, int], others: set[str],
                   job_gpus: int = 1, inherited: tuple[str, ...] = (),
                   by_type: dict[str, int] | None = None, together: Together = (),
                   shape: tuple[int, int] | None = None) -> list[str]:
        """`inherited`: the nodes of this tenant's hold under its old name (released just before), where a new
        hold starts. `by_type`: the hold's GPUs per type in a mixed fleet (nodes of each type only). `shape`: the
        hold's job asks several nodes (choose)."""
        current = tuple(n for n in (mine.nodes if mine else inherited) if n not in others)
        account = ",".join(accounts)
        size = {n.name: n.gpus for n in nodes}
        need_nodes, unfit = self.choose_typed_fit(nodes, jobs, current, gpus, accounts, freed, others, keep=False,
                                                  job_gpus=job_gpus, by_type=by_type, together=together,
                                                  shape=shape)
        now = self.clock()
        fewer = gpus <= 0 or sum(size.get(n, 0) for n in need_nodes) < sum(size.get(n, 0) for n in current)
        if fewer and mine is not None:
            since = self._fewer_since.setdefault(name, now)
            may_shrink = now - since >= self.shrink_delay_s
            if may_shrink:
                del self._fewer_since[name]  # shrinking now; a later wish for fewer waits its own delay
        else:
            self._fewer_since.pop(name, None)
            may_shrink = True
        if not may_shrink:
            target, kept_unfit = self.choose_typed_fit(nodes, jobs, current, gpus, accounts, freed, others,
                                                       keep=True, job_gpus=job_gpus, by_type=by_type,
                                                       together=together, shape=shape)
            unfit |= kept_unfit
        else:
            target = need_nodes
        shape = self._say_unfit(rep, name, gpus, shape if unfit and gpus > 0 else None, shape)
        if not target:
            if mine is not None and may_shrink:
                self._delete(rep, mine, jobs, "the plan holds no GPUs for it now")
            return list(mine.nodes) if mine is not None and not may_shrink else []
        if gpus > sum(size.get(n, 0) for n in target):
            rep.actions.append(f"hold {name}: only {plural(len(target), 'usable node')} for {plural(gpus, 'GPU')}")
        if mine is None:
            per = "" if shape is None else f" (its jobs ask {plural(shape[0], 'node')} of {shape[1]} GPUs each)"
            rep.actions.append(f"hold {plural(gpus, 'GPU')} as {plural(len(target), 'whole node')} for account "
                               f"{account}{per}")
            self.scontrol(rep, "create", "reservation", f"ReservationName={name}", "StartTime=now",
                          "Duration=UNLIMITED", f"Accounts={account}", f"Nodes={','.join(target)}",
                          "Flags=IGNORE_JOBS,MAGNETIC")
            return target
        args = []
        if tuple(sorted(mine.accounts)) != tuple(sorted(accounts)):
            args.append(f"Accounts={account}")
        if sorted(mine.nodes) != sorted(target):
            dropped = set(mine.nodes) - set(target)
            self._detach(rep, [j for j in jobs if j.reservation == name and set(j.nodes) & dropped])
            args.append(f"Nodes={','.join(target)}")
        if "MAGNETIC" not in mine.flags:
            args.append("Flags+=MAGNETIC")
        if args:
            rep.actions.append(f"resize hold {name}: {len(mine.nodes)} -> {plural(len(target), 'node')} for "
                               f"{plural(gpus, 'GPU')}")
            self.scontrol(rep, "update", f"ReservationName={name}", *args)
        return target

    def _say_unfit(self, rep: ActionReport, name: str, gpus: int, unfit: tuple[int, int] | None,
                   shape: tuple[int, int] | None) -> tuple[int, int] | None:
        """Say when a hold's jobs' shape (`unfit`: the shape that does not fit; None: none) starts not to fit the
        GPUs the plan counts for it (it then holds whole nodes for those GPUs, and the job may not start in it: the
        plan would have to count its nodes' GPUs), and when that ends; not every cycle. The shape the hold is
        made with: None while it does not fit."""
        said = self._unfit_said.get(name)
        if unfit is not None and unfit != said:
            self._unfit_said[name] = unfit
            rep.actions.append(f"hold {name}: its jobs' shape ({plural(unfit[0], 'node')} of "
                               f"{plural(unfit[1], 'GPU')} each) does not fit its hold ({plural(gpus, 'GPU')}): it "
                               "holds whole nodes for those GPUs")
        elif unfit is None and said is not None:
            del self._unfit_said[name]
            if gpus > 0:
                rep.actions.append(f"hold {name}: its jobs' shape ({plural(said[0], 'node')} of "
                                   f"{plural(said[1], 'GPU')} each) fits its hold ({plural(gpus, 'GPU')}) "
                                   "again: it holds a node per node they ask")
        return None if unfit is not None else shape

    def release(self, rep: ActionReport, jobs: list[RunningJob]) -> None:
        """Delete every hold this daemon made (by name prefix); no job is stopped."""
        try:
            ours = self.ours(parse_reservations(self.read("scontrol", "-o", "show", "reservation")))
        except Exception as exc:
            rep.errors.append(f"hold: cannot read reservations: {exc}")
            return
        for r in ours:
            self._delete(rep, r, jobs, "the daemon stops")
        self._fewer_since.clear()
        self._unfit_said.clear()

    def _detach(self, rep: ActionReport, jobs: list[RunningJob]) -> None:
        for j in jobs:
            self.scontrol(rep, "update", f"JobId={j.job_id}", "ReservationName=")

    def _delete(self, rep: ActionReport, r: Reservation, jobs: list[RunningJob], why: str) -> None:
        rep.actions.append(f"release hold {r.name} ({plural(len(r.nodes), 'node')}): {why}")
        self._detach(rep, [j for j in jobs if j.reservation == r.name])
        self.scontrol(rep, "delete", f"ReservationName={r.name}")

