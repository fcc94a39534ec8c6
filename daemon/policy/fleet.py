"""Holds per GPU type on a mixed fleet (issue 24): the high tier's guarantee per type, each tenant's hold split
over the types its work accepts, and what the plan says per type.

The engine sizes each tenant's hold in GPUs as on a one-model cluster (forecast peak, headroom, hysteresis, whole
jobs, fitted to the capacity); this module then says on which types those GPUs are held, because a hold on a
type the tenant's jobs cannot use protects nothing:

- a tenant's hold is shared among the sets of types its work accepts (its jobs' ``accepts``, weighted by the GPUs
  they ask for, or by its typed forecast series ``tenant@spec`` when the forecast has them), and each set's share
  goes to the set's types in order of preference, as far as each type has room (its GPUs less what is already
  held there), then to the most preferred type anyway;
- work that accepts only types no node has is held for nowhere (its share is dropped from the hold) and said so
  in the plan's notes for those types: nothing is ever preempted for it;
- the high tier's guarantee is ``fleet.reserve_share[type]`` (else ``policy.reserve_share``) of each type;
- a recurring window's GPUs are held first on the types it names, its tenant's alone (``TypedHolds.window``,
  Plan.window_holds_by_type): only the hold beyond them is split as above, and a pooled tenant's part of it stays
  in the high tier's pool on each type, as on one model.

Pure: numpy and pandas only, one pass over the jobs (pandas factorises the accept tuples); the per-tenant loop
runs over held tenants only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.config.fleet import ANY, UNKNOWN_TYPE
from daemon.policy import reservation
from daemon.policy.state import ClusterState, Nodes
from daemon.text import plural
from forecaster.types import Forecast

SERIES_SEP = "@"   # a typed forecast series: "<tenant>@<spec>", spec = "h100", "v100m16|v100m32" or "*" (any type)
ANY_SPEC = "*"


def series_name(tenant: str, accepts: tuple[str, ...]) -> str:
    """The forecast series of a tenant's demand for one set of types (``ANY`` = "<tenant>@*")."""
    return f"{tenant}{SERIES_SEP}{'|'.join(accepts) if accepts else ANY_SPEC}"


def split_series(name: str) -> tuple[str, tuple[str, ...] | None]:
    """(tenant, accepts) of a series name; accepts None for a plain tenant series (a one-model cluster's).
    Type names never contain "@", so the last "@" splits (a tenant name may contain one)."""
    if SERIES_SEP not in name:
        return name, None
    tenant, spec = name.rsplit(SERIES_SEP, 1)
    return tenant, (() if spec == ANY_SPEC else tuple(p for p in spec.split("|") if p))


def is_typed(state: ClusterState) -> bool:
    """A mixed fleet: the source reports a type per node (a one-model cluster reports none)."""
    return state.nodes is not None and state.nodes.gpu_type is not None and len(state.nodes) > 0


@dataclasses.dataclass(frozen=True)
class TypedHolds:
    types: tuple[str, ...]      # the types nodes report, sorted
    node_type: np.ndarray       # type index per node
    cap: np.ndarray             # healthy GPUs per type
    pool: np.ndarray            # the high tier's guarantee per type
    hold: np.ndarray            # (tenants x types) GPUs held
    used: np.ndarray            # (tenants x types) GPUs running
    res: np.ndarray             # GPUs held per tenant (= hold.sum(1)): the engine's, less work no node can take
    notes: dict[str, tuple[str, ...]]
    # (tenants x types) of `hold`, the GPUs its windows hold there (its alone: a pooled tenant's hold beyond them
    # on each type is the pool's); None without windows
    window: np.ndarray | None = None

    def nodes_of(self, nodes: Nodes, t: int) -> Nodes:
        """The per-node view restricted to type ``t``'s nodes (jobs elsewhere are then no candidates)."""
        m = self.node_type == t
        return dataclasses.replace(nodes, names=nodes.names[m], gpus=nodes.gpus[m], free=nodes.free[m],
                                   draining=nodes.draining[m], held_by=nodes.held_by[m],
                                   gpu_type=nodes.gpu_type[m] if nodes.gpu_type is not None else None)


def _rank(types: tuple[str, ...], accepts: tuple[str, ...], room: np.ndarray,
          used: np.ndarray | None = None) -> list[int]:
    """Type indices a set accepts, most preferred first; ANY: where the tenant runs now first (holding GPUs it
    already uses displaces nobody), then the roomiest types."""
    if not accepts:
        u = np.zeros_like(room) if used is None else used
        return [int(i) for i in np.lexsort((-room, -u))]
    pos = {t: i for i, t in enumerate(types)}
    return [pos[t] for t in accepts if t in pos and t != UNKNOWN_TYPE]


def factorize_types(gpu_type: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code per node, the types sorted): `pd.factorize` of the types as strings. An object array of str (as
    sources and the simulator give) is factorized as it is: converting 1,213 names to a string array and wrapping
    them in a Series was half of `split`'s time in a replay of a 1,213-node fleet, every step."""
    if gpu_type.dtype == object and pd.api.types.infer_dtype(gpu_type, skipna=False) == "string":
        return pd.factorize(gpu_type, sort=True)
    return pd.factorize(np.asarray(gpu_type.astype(str), dtype=object), sort=True)


def split(state: ClusterState, res: np.ndarray, protected: np.ndarray, cfg: Config,
          typed_peak: dict[int, dict[tuple[str, ...], float]] | None = None,
          last_by_type: dict[str, dict[str, int]] | None = None,
          windows: dict[int, dict[str, int]] | None = None) -> TypedHolds:
    """Per type: capacity, the high tier's guarantee and each held tenant's hold (see the module's doc).

    ``typed_peak`` (tenant index -> accept set -> forecast peak) weighs a tenant's sets when the forecast has typed
    series; otherwise its jobs' GPUs do; a held tenant with neither keeps the split of its last hold
    (``last_by_type``), else is held on any type. ``windows`` (tenant index -> GPU type -> GPUs its windows hold
    now) are held first, on the types they name, whole (a window was checked against each type's capacity when it
    was declared); only the tenant's hold beyond them is split over its sets, as any other hold."""
    nodes = state.nodes
    assert nodes is not None and nodes.gpu_type is not None
    n = len(state.tenants)
    codes, uniq = factorize_types(nodes.gpu_type)
    types = tuple(str(t) for t in uniq)
    T = len(types)
    node_type = codes.astype(np.int64)
    gpus = np.asarray(nodes.gpus, dtype=np.int64)
    cap = np.bincount(node_type, weights=gpus, minlength=T).astype(np.int64)
    share = np.array([cfg.fleet.reserve_share.get(t, cfg.policy.reserve_share) for t in types])
    pool = np.array([reservation.high_pool(int(c), float(s)) for c, s in zip(cap, share)], dtype=np.int64)
    jobs = state.jobs
    used = np.zeros((n, T), dtype=np.int64)
    if len(jobs):
        run = np.flatnonzero(jobs.running)
        pos, node_of, g = jobs.parts(nodes, run)   # a job on several nodes: its GPUs on each of them
        on = node_of >= 0
        key = jobs.tenant[run[pos[on]]] * T + node_type[node_of[on]]
        used = np.bincount(key, weights=g[on], minlength=n * T).reshape(n, T).astype(np.int64)
    # demand per (held tenant, accept set)
    held = np.flatnonzero((res > 0) & protected)
    sets: dict[int, dict[tuple[str, ...], float]] = {}
    if len(jobs) and held.size:
        mine = np.isin(jobs.tenant, held)
        acc = jobs.accepts[mine] if jobs.accepts is not None else None
        ten, g = jobs.tenant[mine], jobs.gpus[mine].astype(float)
        if acc is None:
            for t in np.unique(ten).tolist():
                sets[t] = {ANY: float(g[ten == t].sum())}
        else:
            acodes, auniq = pd.factorize(np.asarray(acc, dtype=object))  # (a Series around it cost as much again)
            A = len(auniq)
            w = np.bincount(ten * A + acodes, weights=g, minlength=n * A).reshape(n, A)
            for t in held.tolist():
                row = w[t]
                if row.any():
                    sets[t] = {tuple(auniq[a]) if auniq[a] else ANY: float(row[a]) for a in np.flatnonzero(row)}
    if typed_peak:
        for t, d in typed_peak.items():
            if res[t] > 0 and protected[t] and sum(d.values()) > 0:
                sets[t] = dict(d)
    hold = np.zeros((n, T), dtype=np.int64)
    room = cap.astype(float).copy()
    dropped: dict[str, list[str]] = {}
    new_res = res.astype(np.int64).copy()
    pos = {t: i for i, t in enumerate(types)}
    want_sets: dict[int, dict[tuple[str, ...], float]] = {}
    for t in held.tolist():
        d = sets.get(t)
        if d is None:
            prev = (last_by_type or {}).get(state.tenants[t])
            d = {(k,): float(v) for k, v in prev.items() if k in pos and v > 0} if prev else {}
        want_sets[t] = d or {ANY: 1.0}
    win = None
    if windows:
        win = np.zeros((n, T), dtype=np.int64)
        for t, by in sorted(windows.items()):
            if not (res[t] > 0 and protected[t]):
                continue
            left = int(res[t])
            for name, g in sorted(by.items()):
                i = pos.get(name)
                take = 0 if i is None else int(min(g, left, max(room[i], 0)))
                if take > 0:
                    win[t, i] += take
                    room[i] -= take
                    left -= take
        hold += win
    # the high tier first; within a tier the work with the fewest types to go to first (so that flexible work
    # does not take the only type constrained work can use), then larger holds
    is_high = np.array([state.tiers[i] == "high" for i in held], dtype=bool)
    choice = np.array([min(len(k) or T for k in want_sets[t]) for t in held.tolist()], dtype=np.int64)
    order = held[np.lexsort((-res[held], choice, ~is_high))] if held.size else held
    short: dict[str, int] = {}
    for t in order.tolist():
        want = int(res[t]) - (int(win[t].sum()) if win is not None else 0)
        if want <= 0:
            continue
        d = want_sets[t]
        total = sum(d.values())
        keys = list(d)
        exact = np.array([want * d[k] / total for k in keys])
        part = np.floor(exact).astype(np.int64)
        left = want - int(part.sum())
        if left > 0:
            part[np.argsort(-(exact - part), kind="stable")[:left]] += 1
        for k, g in zip(keys, part.tolist()):
            if g <= 0:
                continue
            prefs = [i for i in _rank(types, k, room, used[t]) if cap[i] > 0]
            if not prefs:   # no node has any type this work accepts: nothing held (or preempted) for it
                for name in (k or ("any",)):
                    dropped.setdefault(name, []).append(f"{state.tenants[t]} ({plural(g, 'GPU')})")
                new_res[t] -= g
                continue
            rest = g
            for i in prefs:
                take = int(min(rest, max(room[i], 0)))
                if take:
                    hold[t, i] += take
                    room[i] -= take
                    rest -= take
                if rest == 0:
                    break
            if rest:  # every accepted type is held in full: a hold beyond a type's GPUs would hold nothing more
                new_res[t] -= rest
                short[types[prefs[0]]] = short.get(types[prefs[0]], 0) + rest
    notes: dict[str, tuple[str, ...]] = {}
    for i, name in enumerate(types):
        h = int(hold[:, i].sum())
        notes[name] = (f"{plural(int(cap[i]), 'GPU')}, {int(pool[i])} guaranteed to the high tier "
                       f"({share[i]:.0%}), {h} held for {plural(int((hold[:, i] > 0).sum()), 'tenant')}, "
                       f"{int(used[:, i].sum())} in use",)
    for name, gpus_short in sorted(short.items()):
        notes[name] = notes.get(name, ()) + (f"holds short by {plural(gpus_short, 'GPU')}: every type that work "
                                             "accepts is held in full",)
    for name, who in sorted(dropped.items()):
        line = (f"work asking for {name!r}, which no healthy node has, is held for nowhere and nothing is "
                f"preempted for it: {', '.join(who[:5])}{' ...' if len(who) > 5 else ''}")
        notes[name] = notes.get(name, ()) + (line,)
    return TypedHolds(types, node_type, cap, pool, hold, used, np.maximum(new_res, 0), notes, win)


@functools.lru_cache(maxsize=8)
def series_index(names: tuple[str, ...], tenants: tuple[str, ...]
                 ) -> tuple[np.ndarray, tuple[tuple[str, ...] | None, ...]]:
    """Per forecast series: the index of its tenant in ``tenants`` (-1 where none) and its accept set (None for a
    plain tenant series). Cached: every cycle's forecast has the same series for the same tenants, and parsing
    thousands of names twice per plan was a third of plan()'s time on a 1,000 x 4 fleet. Read-only result."""
    index = {t: i for i, t in enumerate(tenants)}
    parsed = [split_series(name) for name in names]
    of = np.array([index.get(t, -1) for t, _ in parsed], dtype=np.int64)
    of.flags.writeable = False
    return of, tuple(acc for _, acc in parsed)


@functools.lru_cache(maxsize=8)
def series_groups(names: tuple[str, ...], tenants: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The series of known tenants grouped by tenant, for a per-tenant sum with one ``reduceat``: (series rows in
    tenant order, each group's first position, each group's tenant index). Cached as ``series_index``."""
    of = series_index(names, tenants)[0]
    rows = np.flatnonzero(of >= 0)
    rows = rows[np.argsort(of[rows], kind="stable")]
    starts = np.r_[0, np.flatnonzero(np.diff(of[rows])) + 1] if rows.size else np.zeros(0, dtype=np.int64)
    owner = of[rows[starts]] if rows.size else np.zeros(0, dtype=np.int64)
    for a in (rows, starts, owner):
        a.flags.writeable = False
    return rows, starts, owner


def tenant_values(forecast: Forecast, tenants: tuple[str, ...]) -> np.ndarray:
    """The forecast per tenant (tenants x horizon x quantiles). A forecast of typed series (``tenant@spec``, a
    mixed fleet's) is summed per tenant: a sum of quantiles, an upper bound of the sum's
    quantile, so a hold sized from it covers every type. A plain forecast is read as it is."""
    if not any(SERIES_SEP in t for t in forecast.tenants):
        return forecast.for_tenants(tenants)
    rows, starts, owner = series_groups(tuple(forecast.tenants), tuple(tenants))
    out = np.full((len(tenants), forecast.horizon, len(forecast.quantiles)), np.nan)
    if rows.size:
        vals = forecast.values[rows]
        seen_each = ~np.isnan(vals)
        vals = np.nan_to_num(vals)
        # most tenants have one or two series (one per accept set): their sum is that series or one addition, the
        # same in any order; reduceat on a 3-d array cost 4 of plan()'s 17 ms on a 1,000 x 4 fleet, so it is
        # kept for the groups of three or more only (where its own order of additions is the reference)
        sizes = np.diff(np.r_[starts, rows.size])
        sums, seen = vals[starts], seen_each[starts]
        two = np.flatnonzero(sizes == 2)
        sums[two] += vals[starts[two] + 1]
        seen[two] |= seen_each[starts[two] + 1]
        big = np.flatnonzero(sizes > 2)
        if big.size:
            first = np.repeat(starts[big], sizes[big])
            member = first + np.arange(first.size) - np.repeat(np.cumsum(sizes[big]) - sizes[big], sizes[big])
            at = np.r_[0, np.cumsum(sizes[big])[:-1]]
            sums[big] = np.add.reduceat(vals[member], at, axis=0)
            seen[big] = np.logical_or.reduceat(seen_each[member], at, axis=0)
        out[owner] = np.where(seen, sums, np.nan)  # the sum of the observed series; NaN where all are NaN
    return out


def tenant_series(names: Sequence[str], tenant: str) -> list[str]:
    """The series of `names` that are `tenant`'s: its plain series where there is one (a one-model cluster's,
    where a tenant may be named "a@b" beside "a"), else its typed ones (``tenant@spec``)."""
    if tenant in names:
        return [tenant]
    return [n for n in names if SERIES_SEP in n and n.rsplit(SERIES_SEP, 1)[0] == tenant]


def tenant_demand(frame: pd.DataFrame) -> pd.DataFrame:
    """Demand (time x series) per tenant: a mixed fleet's typed columns (``tenant@spec``) summed per tenant, as
    ``tenant_values`` sums the forecast, so every per-tenant view (console, API, shadow record) reads a tenant's
    whole demand, not a plain name its source never writes. NaN where every series of the tenant is NaN; a frame
    of plain columns is returned as it is."""
    names = [str(c) for c in frame.columns]
    if not any(SERIES_SEP in c for c in names):
        return frame
    owner = [split_series(c)[0] for c in names]
    return frame.T.groupby(owner, sort=False).sum(min_count=1).T


def typed_peaks(names: tuple[str, ...], peak: np.ndarray, tenants: tuple[str, ...]
                ) -> tuple[np.ndarray, dict[int, dict[tuple[str, ...], float]]]:
    """A forecast of typed series (``tenant@spec``) read per tenant: the sum of its series' peaks (NaN where it
    has none) and the peak per accept set, for ``split``. Sums run in series order (as one loop over them would)."""
    of, accs = series_index(tuple(names), tuple(tenants))
    peak = np.asarray(peak, dtype=float)
    ok = (of >= 0) & ~np.isnan(peak) & np.array([a is not None for a in accs], dtype=bool)
    rows = np.flatnonzero(ok)
    # bincount adds in array order from 0.0, as a loop would (0.0 + p == p exactly)
    total = np.bincount(of[rows], weights=peak[rows], minlength=len(tenants)).astype(float)
    total[np.bincount(of[rows], minlength=len(tenants)) == 0] = np.nan
    by: dict[int, dict[tuple[str, ...], float]] = {}
    for r, i, p in zip(rows.tolist(), of[rows].tolist(), peak[rows].tolist()):
        d = by.setdefault(i, {})
        acc = accs[r]
        d[acc] = d.get(acc, 0.0) + p   # type: ignore[index]
    return total, by


def gate_series(forecast: Forecast, state: ClusterState, tenants: tuple[str, ...], acting: frozenset[str]
                ) -> tuple[Forecast, np.ndarray, int, int]:
    """The skill gate's choice per typed series (daemon/forecasting/skill.py): `acting` names tenants (every
    series of theirs acts) or typed series (``tenant@spec``: that series only). Returns the forecast the plan
    reads, which tenants act on it for at least one series, and how many series (of how many such tenants) are
    planned on their demand now instead: a tenant acting for its a100 series and not for its t4 one is held the
    a100 forecast plus its t4 work's GPUs now (running and waiting, its jobs that accept that set), so its t4
    hold is demand now with headroom and nothing is preempted for its t4 forecast. A plain (untyped) forecast is
    read per tenant."""
    names = tuple(forecast.tenants)
    if not any(SERIES_SEP in t for t in names):
        return forecast, np.array([t in acting for t in tenants], dtype=bool), 0, 0
    of, accs = series_index(names, tuple(tenants))
    on = np.array([nm in acting or (i >= 0 and tenants[i] in acting) for nm, i in zip(names, of.tolist())],
                  dtype=bool)
    tenant_on = np.array([t in acting for t in tenants], dtype=bool)
    tenant_on[of[on & (of >= 0)]] = True
    off = np.flatnonzero(~on & (of >= 0) & tenant_on[np.maximum(of, 0)])
    if not off.size:
        return forecast, tenant_on, 0, 0
    now = _series_demand(state, {(int(of[r]), accs[r] or ANY) for r in off.tolist()})
    level = np.array([now[(int(of[r]), accs[r] or ANY)] for r in off.tolist()])
    values = np.array(forecast.values, dtype=float, copy=True)
    values[off] = level[:, None, None]
    # the plan reads a typed forecast's values only; its peak quantiles are dropped, not copied and gated too
    gated = dataclasses.replace(forecast, values=values, peaks=None)
    return gated, tenant_on, int(off.size), len(set(of[off].tolist()))


def _series_demand(state: ClusterState, want: set[tuple[int, tuple[str, ...]]]) -> dict[tuple[int, tuple[str, ...]],
                                                                                        float]:
    """GPUs now (running and waiting) of each (tenant index, accept set) in `want`, from the snapshot's jobs (a
    job without an accept set accepts any type)."""
    jobs = state.jobs
    out = {k: 0.0 for k in want}
    if not len(jobs):
        return out
    mine = np.isin(jobs.tenant, np.array(sorted({t for t, _ in want}), dtype=np.int64))
    acc = jobs.accepts[mine] if jobs.accepts is not None else [ANY] * int(mine.sum())
    for t, a, g in zip(jobs.tenant[mine].tolist(), acc, jobs.gpus[mine].tolist()):
        k = (t, tuple(a) if a else ANY)
        if k in out:
            out[k] += float(g)
    return out
