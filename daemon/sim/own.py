"""This cluster's own history as a replay workload (`gpu-autoscaler simulate --data FILE` / `--from-source`).

The history is read exactly as `retrain --data` reads it (daemon.forecasting.retrain.read_history_file: CSV or
parquet, wide or long; each column's unit by daemon/forecasting/units.py, as retrain and backtest read it), or
from the configured source. Tiers and job sizes come from the config's `[[tenants]]` (`tier`, `job_gpus`) or from
flags for tenants the config does not name; capacity and node size from `[cluster]`. The last `days` of the
history are replayed; everything before is the forecaster's history and is where the forecaster is chosen (as
`retrain` chooses, or the quick baseline-only choice the daemon makes at start-up).

Input that would make the replay mean nothing is refused with one line naming the problem (``DataError``).
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.forecasting.errors import DataError
from daemon.forecasting.retrain import read_history_file
from daemon.forecasting.units import InferenceSpec, gpu_columns, split_unit
from daemon.sim.contention import check as check_contention
from daemon.sim.workloads import Workload
from daemon.text import agree, plural
from forecaster.baselines import Forecaster

log = logging.getLogger("gpu_autoscaler.sim.own")

TIERS = ("high", "normal", "low")


def parse_pairs(items: Iterable[str], flag: str, kind: str) -> dict[str, str]:
    """`NAME=VALUE` flags (repeatable) as a dict; the tenant name may itself hold `=` (the last one splits)."""
    out: dict[str, str] = {}
    for it in items:
        name, sep, val = it.rpartition("=")
        if not sep or not name or not val:
            raise DataError(f"{flag} wants NAME={kind}, got {it!r}")
        out[name] = val
    return out


def tenant_settings(cfg: Config, tier_flags: Mapping[str, str], job_flags: Mapping[str, str],
                    source: tuple[Mapping[str, str], Mapping[str, int]] | None = None
                    ) -> tuple[dict[str, str], dict[str, int]]:
    """Tier and job size per named tenant: the config's `[[tenants]]` first, the flags for the others (a flag for
    a tenant the config names overrides it: the replay asks "what if"); beneath both, `source`'s (tiers, job
    sizes): the embedded simulator's own tenants, as the daemon plans them on `run --sim`."""
    tiers: dict[str, str] = dict(source[0]) if source else {}
    jobs: dict[str, int] = dict(source[1]) if source else {}
    tiers.update({t.name: t.tier for t in cfg.tenants})
    jobs.update({t.name: t.job_gpus for t in cfg.tenants if t.job_gpus is not None})
    for n, t in tier_flags.items():
        if t not in TIERS:
            raise DataError(f"--tier {n}={t}: the tier is one of {', '.join(TIERS)}")
        tiers[n] = t
    for n, g in job_flags.items():
        try:
            jobs[n] = int(g)
        except ValueError:
            raise DataError(f"--job-gpus {n}={g}: not a whole number of GPUs") from None
        if jobs[n] < 1:
            raise DataError(f"--job-gpus {n}={g}: a job has at least 1 GPU")
    return tiers, jobs


def rate_columns(frame: pd.DataFrame, cfg: Config, where: str) -> tuple[pd.DataFrame, dict[str, InferenceSpec],
                                                                        pd.DataFrame | None]:
    """The frame in GPUs with plain tenant names, the inference services' specs and rates, read as retrain and
    backtest read them (daemon/forecasting/units.py: gpu_columns). Refused besides (one line): a service on a
    `[fleet] pools` config, which the replay does not run yet."""
    out, specs, rates = gpu_columns(frame, cfg, where)
    if specs and cfg.fleet.pools:
        raise DataError(f"{where}: inference services ({_some(sorted(specs))}) on a [fleet] pools config are "
                        "not replayed yet: replay them without [fleet]")
    return out, specs, rates


def window_steps(days: float, step_s: int) -> int:
    return int(round(days * 86400 / step_s))


def own_workload(frame: pd.DataFrame, cfg: Config, *, days: float, step_s: int, where: str,
                 tier_flags: Mapping[str, str] | None = None, job_flags: Mapping[str, str] | None = None,
                 default_job_gpus: int = 1, name: str | None = None,
                 source: tuple[Mapping[str, str], Mapping[str, int]] | None = None) -> tuple[Workload, dict]:
    """The replay workload of a tenant x time history: the last `days` are measured, the rest is history.

    Tenants the config and the flags do not name are replayed as the daemon treats them (tier normal) with
    `default_job_gpus`; they are listed in the returned notes. Refused (DataError, one line): no tenant the
    config or flags know; less than one season (forecaster.season_steps) before the window; total demand above
    the cluster's GPUs at every step of the window. The notes' `contention` says whether the window's demand ever
    contends (daemon/sim/contention.py): if not, no strategy can differ and nothing may be recommended. `source`:
    the tiers and job sizes the source itself knows (simulator_settings), beneath the config's and the flags'."""
    tiers, jobs = tenant_settings(cfg, tier_flags or {}, job_flags or {}, source)
    frame, specs, rates = rate_columns(frame, cfg, where)
    for n, sp in specs.items():   # a service's job is one replica
        jobs[n] = sp.gpus_per_replica
    cols = [str(c) for c in frame.columns]
    fleet = _fleet_columns(cols, cfg, where) if cfg.fleet.pools else None
    if fleet is not None:
        cols = [t for t, _ in fleet]
    frame.columns = pd.Index(cols, name="tenant")
    known = [c for c in cols if c in tiers]
    if not known:
        named = sorted(tiers)
        it = "the source" if where.startswith("source ") else "the file"
        raise DataError(f"{where}: no tenant the config knows: {it} has {_some(cols)}; the config and flags name "
                        f"{_some(named) if named else 'none'} (add [[tenants]] or --tier NAME=TIER)")
    unknown = [c for c in cols if c not in tiers]
    season = cfg.forecaster.season_steps
    measured = window_steps(days, step_s)
    if measured < 1:
        raise DataError(f"{where}: --days {days:g} is less than one {step_s} s step")
    if len(frame) < season + measured:
        raise DataError(f"{where}: {len(frame) * step_s / 86400:.2f} days of history, the replay needs "
                        f"{(season + measured) * step_s / 86400:.2f}: a season ({season} steps) before the "
                        f"{days:g}-day window")
    gpn = cfg.cluster.gpus_per_node
    cap = cfg.cluster.gpus
    typed: dict = {}
    if fleet is not None:  # the simulated fleet is [fleet] pools: its GPUs are the capacity, not cluster.gpus
        pools = cfg.fleet.pools
        cap = sum(p.nodes * p.gpus_per_node for p in pools)
        typed = dict(node_types=[p.type for p in pools for _ in range(p.nodes)],
                     node_gpus=np.array([p.gpus_per_node for p in pools for _ in range(p.nodes)], dtype=np.int64),
                     accepts=[a for _, a in fleet])
    demand = np.ceil(frame.astype(float))  # GPUs are whole: a fractional mean still occupies the next GPU up
    start = len(demand) - measured
    check_values(demand, start, cap, where)
    total = demand.iloc[start:].sum(axis=1, min_count=1).to_numpy(dtype=float)
    if np.all(np.nan_to_num(total, nan=np.inf) > cap):
        key = "fleet.pools" if fleet is not None else "cluster.gpus"
        raise DataError(f"{where}: demand is above the cluster's {cap} GPUs ({key}) at every step of the "
                        f"replayed window (least {np.nanmin(total):.0f}): the replay would mean nothing; check "
                        f"{key} or the file's units")
    pools = cfg.fleet.pools if fleet is not None else ()
    type_gpus: dict[str, int] = {}
    for p in pools:
        type_gpus[p.type] = type_gpus.get(p.type, 0) + p.nodes * p.gpus_per_node
    contention = check_contention(demand.iloc[start:], cap, cfg.policy.reserve_share,
                                  gpus_per_node=max([gpn, *(p.gpus_per_node for p in pools)]),
                                  accepts=[a for _, a in fleet] if fleet is not None else None,
                                  type_gpus=type_gpus or None, where=where,
                                  capacity_key="fleet.pools" if fleet is not None else "cluster.gpus")
    tier_of = tuple(tiers.get(c, "normal") for c in cols)
    # a job fits on one node: on a fleet, the largest node of a type the tenant accepts (as the simulated source)
    biggest = {p.type: max(q.gpus_per_node for q in cfg.fleet.pools if q.type == p.type) for p in cfg.fleet.pools}
    fit = [max(biggest[t] for t in (a or biggest)) for _, a in fleet] if fleet is not None else [gpn] * len(cols)
    job = np.array([min(max(1, int(jobs.get(c, default_job_gpus))), f) for c, f in zip(cols, fit)], dtype=np.int64)
    clipped = sorted(c for c, f in zip(cols, fit) if jobs.get(c, default_job_gpus) > f)
    w = Workload(name or f"own-{Path(where).stem}", demand, tier_of, job, cap, start, gpus_per_node=gpn, **typed,
                 inference=specs or None, rates=rates)
    notes = {"tenants_unnamed": unknown, "job_gpus_clipped_to_node": clipped,
             "tiers": {t: int(sum(x == t for x in tier_of)) for t in TIERS}, "contention": contention.to_dict(),
             # named in the config or the flags but with no series here: not replayed (a typo'd name's column is
             # replayed as tier normal, in tenants_unnamed)
             "tenants_not_in_data": sorted(({t.name for t in cfg.tenants} | set(tier_flags or {})
                                           | set(job_flags or {})) - set(cols)),
             "gaps": gaps(demand, start)}
    if specs:
        notes["inference"] = {n: {"gpus_per_replica": s.gpus_per_replica, "replica_rps": s.replica_rps,
                                  "cold_start_s": s.cold_start_s, "headroom": s.headroom,
                                  "scale_down_stabilization_s": s.scale_down_stabilization_s}
                              for n, s in specs.items()}
    if unknown:  # notes["tenants_unnamed"]: the caller tells the user (simulate: one line), so only debug here
        log.debug("%s: %d tenant(s) not named in the config or flags, replayed as tier normal with %d-GPU jobs: %s",
                  where, len(unknown), default_job_gpus, _some(unknown))
    return w, notes


# A cell is one tenant's GPUs at one step. Queued demand may exceed the cluster for a while, but a cell over this
# many times its GPUs is a unit or export error, and the simulator's memory and time grow with it (2e6 GPUs in
# one cell of a 16-GPU cluster took 725 MB; 1e300 printed a report of 5e300 GPU-minutes unmet).
CELL_MAX_CAPACITIES = 10


def check_values(demand: pd.DataFrame, start: int, cap: int, where: str) -> None:
    """Refuse (DataError, one line naming the column and time) a value that is not finite or above
    CELL_MAX_CAPACITIES x the cluster's GPUs, and a replayed window with no value at all."""
    vals = demand.to_numpy(dtype=float)
    bad = ~np.isfinite(vals) & ~np.isnan(vals) | (vals > CELL_MAX_CAPACITIES * cap)
    if bad.any():
        r, c = (int(i[0]) for i in np.nonzero(bad))
        raise DataError(f"{where}: column {demand.columns[c]!r} at {demand.index[r]}: {vals[r, c]:g} GPUs, over "
                        f"{CELL_MAX_CAPACITIES} x the cluster's {cap} GPUs (or not a finite number): check the "
                        "file's units")
    if np.isnan(vals[start:]).all():
        raise DataError(f"{where}: no value at all in the replayed window ({demand.index[start]} to "
                        f"{demand.index[-1]}): every tenant's demand is missing there; check --days or the file")


def _fleet_columns(cols: list[str], cfg: Config, where: str) -> list[tuple[str, tuple[str, ...]]]:
    """(tenant, accepted types) of each column on a `[fleet] pools` config: a `tenant@spec` series (as the daemon
    writes its typed history; `@*` = any type) accepts the spec's types in order, a plain tenant any type. Refused
    (one line): a type no pool has (its work could never run), or a tenant in two columns (the simulator gives a
    tenant one set of accepted types; sum or rename its series)."""
    from daemon.policy.fleet import split_series

    have = {p.type for p in cfg.fleet.pools}
    resolve = cfg.fleet.resolver()  # `@P100` is type p100: case (and aliases) as the daemon reads model names
    out: list[tuple[str, tuple[str, ...]]] = []
    for c in cols:
        tenant, acc = split_series(c)
        named = {(resolve(a) if resolve.types else a.lower()): a for a in acc or ()}
        acc = tuple(named)
        missing = [named[t] for t in acc if t not in have]
        if missing:
            raise DataError(f"{where}: column {c!r} accepts {', '.join(missing)}, which no [fleet] pools node has "
                            f"(pools: {', '.join(sorted(have))})")
        out.append((tenant, acc))
    seen = [t for t, _ in out]
    twice = sorted({t for t in seen if seen.count(t) > 1})
    if twice:
        raise DataError(f"{where}: tenant(s) in more than one column: {_some(twice)}; the replay gives a tenant one "
                        "set of accepted types (sum or rename its series)")
    return out


def gaps(demand: pd.DataFrame, start: int) -> dict | None:
    """The replayed window's steps with no sample of some tenant (None: every step has all of them). The simulator
    holds a tenant's jobs as they were through a gap (no change, never read as zero) and counts none of its demand
    unmet there, so those steps are not measured: the user is told, with the longest gap of every tenant at once."""
    miss = np.isnan(demand.iloc[start:].to_numpy(dtype=float))
    some = miss.any(axis=1)
    if not some.any():
        return None
    every = miss.all(axis=1)
    run, best, best_end = 0, 0, -1
    for i, m in enumerate(every):
        run = run + 1 if m else 0
        if run > best:
            best, best_end = run, i
    tenants = [str(c) for c, m in zip(demand.columns, miss.any(axis=0)) if m]
    out = {"steps": int(some.sum()), "of": int(len(some)), "tenants": tenants, "steps_no_tenant": int(every.sum()),
           "longest_gap_steps": best,
           "longest_gap_from": str(demand.index[start + best_end - best + 1]) if best else None}
    every_ = "" if not best else (f"; of every tenant: {plural(out['steps_no_tenant'], 'step', fmt=',')}, the "
                                  f"longest {best} from {out['longest_gap_from']}")
    out["message"] = (f"{out['steps']:,} of the {out['of']:,} replayed steps ({out['steps'] / out['of']:.1%}) "
                      f"{agree(out['steps'], 'has', 'have')} no sample of {plural(len(tenants), 'tenant')} "
                      f"({_some(tenants)}{every_}): through a gap the replay holds a tenant's jobs as they were "
                      "(never read as zero) and counts none of its demand unmet, so the figures measure the other "
                      "steps")
    return out


def _some(names: list[str], n: int = 6) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


def read_file(path: Path, cfg: Config) -> pd.DataFrame:
    """The history file as `retrain --data` reads it, on the cycle's step (cycle.resolution_s); an idle column of
    a tenant the config lists stays (0 demand where it has no value), as the daemon keeps a listed tenant."""
    from daemon.policy.fleet import split_series

    listed = {t.name for t in cfg.tenants}
    return read_history_file(path, cfg.cycle.resolution_s,
                             keep=lambda c: split_unit(c)[0] in listed
                             or (bool(cfg.fleet.pools) and split_series(c)[0] in listed))


def history_store_path(cfg: Config) -> Path:
    """The daemon's rolling history store (daemon/sources/history.py), where wiring puts it."""
    return cfg.history.path or cfg.state.path.with_name(f"{cfg.state.path.stem}-history.sqlite")


def read_history_store(path: Path, step_s: int) -> pd.DataFrame | None:
    """The daemon's history store as a time x tenant frame, read-only (the running daemon's file is never
    written: History() would start it over on a step it does not expect). None when it is absent, empty or at
    another step."""
    import sqlite3

    if not Path(path).exists():
        return None
    try:
        # the URI by pathlib: a state path with ?, # or % is quoted, not read as the URI's query or fragment
        db = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            names = [n for _, n in db.execute("SELECT col, name FROM tenants ORDER BY col")]
            rows = db.execute("SELECT step, vals FROM steps ORDER BY step").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        log.warning("history store %s not read: %s", path, exc)
        return None
    if meta.get("step_s") != str(step_s) or not rows or not names:
        return None
    # as History() loads it: up to the last step read, and no wider than the store's rows (a step far off them, in
    # a damaged file, made this array terabytes; a row that is not float32s, or wider than the names, is refused)
    until = int(meta["fetched_until"]) if str(meta.get("fetched_until", "")).lstrip("-").isdigit() else rows[-1][0]
    rows = [(s, b) for s, b in rows if until - 4 * len(rows) < s <= until]
    if not rows:
        return None
    first, last = rows[0][0], rows[-1][0]
    vals = np.full((last - first + 1, len(names)), np.nan)
    for step, blob in rows:
        if len(blob) % 4 or len(blob) // 4 > len(names):
            log.warning("history store %s not read: step %s holds %d bytes for %d tenants", path, step, len(blob),
                        len(names))
            return None
        v = np.frombuffer(blob, dtype=np.float32)
        vals[step - first, :len(v)] = v
    idx = pd.date_range(pd.Timestamp(first * step_s, unit="s", tz="UTC"), periods=len(vals), freq=f"{step_s}s",
                        name="time")
    return pd.DataFrame(vals, index=idx, columns=pd.Index(names, name="tenant"))


def simulator_settings(cfg: Config, days: float) -> tuple[dict[str, str], dict[str, int]]:
    """The embedded simulator's tenants' tiers and job sizes (the source's own, as `run --sim` plans them), for a
    replay of its history (`simulate --from-source` without a config naming them)."""
    from daemon.forecasting.retrain import replay_cluster

    rc = replay_cluster(cfg, days)
    return dict(rc.tiers), dict(rc.job_gpus)


def read_source(cfg: Config, days: float, *, until: float | None = None, source=None) -> tuple[pd.DataFrame, str]:
    """`days` of history up to `until` (unix seconds; default now) from the configured source, and where it came
    from: the daemon's own history store when it holds the whole window up to `until` (nothing asked of
    Prometheus), else the Prometheus range (source.prometheus.demand_query over the window, read in chunks as the
    daemon backfills); or the embedded simulator's demand. Steps before the first sample are dropped; a source
    that cannot serve `days` (nothing, or its first sample later than the start asked) is refused with one line."""
    from daemon.forecasting.retrain import simulator_history

    step_s = cfg.cycle.resolution_s
    want = window_steps(days, step_s)
    if cfg.source.kind == "simulator":
        frame = simulator_history(cfg, days)
        where = "source simulator"
    else:
        import time

        from daemon.sources.prometheus import PrometheusSource

        t = time.time() if until is None else float(until)
        end = pd.Timestamp(np.floor(t / step_s) * step_s, unit="s", tz="UTC")
        path = history_store_path(cfg)
        stored = read_history_store(path, step_s) if cfg.history.incremental else None
        if stored is not None:
            stored = stored.loc[:end]
        late = pd.Timedelta(seconds=max(cfg.cycle.stale_after_s, step_s))
        if stored is not None and len(stored) >= want and stored.index[-1] >= end - late:
            win = stored.iloc[-want:]
            if win.iloc[0].notna().any():  # the window's first step was read (not a gap before the backfill)
                return win, f"history store {path}"
        src = source if source is not None else PrometheusSource(cfg, clock=lambda: t)
        frame = src.history_range(pd.Timedelta(days=days) - pd.Timedelta(seconds=step_s))
        where = "source prometheus"
    rows = frame.dropna(how="all")
    if rows.empty or frame.shape[1] == 0:
        raise DataError(f"{where}: no demand at all over the last {days:g} days")
    frame = frame.loc[rows.index[0]:]
    if len(frame) < want:
        raise DataError(f"{where}: cannot serve {days:g} days: its history starts at {rows.index[0]} "
                        f"({len(frame) * step_s / 86400:.2f} days)")
    return frame, where


@dataclass
class Choice:
    """The forecaster chosen for the replayed window, and by how much it won: ``line()`` is what the replay prints
    (one short line), ``details()`` what its JSON keeps (every score and the full reason)."""

    model: Forecaster
    name: str
    why: str
    scores: dict[str, float] = field(default_factory=dict)  # candidate -> its score (lower is better)
    unit: str = "wQL"
    how: str = "as retrain chooses"
    winner: str | None = None  # the candidate's name in `scores` (the model's own name may differ)

    def runner_up(self) -> tuple[str, float] | None:
        """The best-scored candidate other than the winner, and the winner's margin over it: the share of the
        runner-up's score the winner saves (negative where the winner was kept though it scored worse)."""
        won = self.winner or self.name
        others = {k: v for k, v in self.scores.items() if k != won and np.isfinite(v)}
        if not others or won not in self.scores:
            return None
        best = min(others, key=lambda k: others[k])
        ref = abs(others[best])
        return best, (others[best] - self.scores[won]) / ref if ref > 0 else 0.0

    def line(self) -> str:
        """Winner, runner-up and margin, in one line (the candidates' scores and the reason go to the JSON)."""
        ru = self.runner_up()
        vs = (f"runner-up {ru[0]}, {ru[1]:+.1%} on {self.unit}" if ru is not None
              else "no runner-up scored")
        return f"forecaster: {self.name} ({self.how}); {vs}; details in the JSON's forecaster_choice"

    def details(self) -> dict:
        ru = self.runner_up()
        return {"name": self.name, "how": self.how, "why": self.why, "unit": self.unit,
                "runner_up": ru[0] if ru else None, "margin": ru[1] if ru else None,
                "scores": {k: (v if np.isfinite(v) else None) for k, v in self.scores.items()}}


def quick_history_short(n: int, cfg: Config, step_s: int) -> str | None:
    """Why `n` steps before the window are too few for --quick-forecaster's choice (a season and a horizon ahead of
    the end the baselines are scored on), with how much more is needed; None when enough."""
    from forecaster.selection import startup_holdout, steps_needed

    season, horizon = cfg.forecaster.season_steps, cfg.cycle.horizon_steps
    need = steps_needed(season + horizon, lambda m: startup_holdout(m, season, horizon))
    if n >= need:
        return None
    more = need - n
    return (f"--quick-forecaster chooses on the history before the window: it has {n} steps, the choice needs "
            f"{need} (a season of {season}, the {horizon}-step horizon and the end the baselines are scored on): "
            f"replay {math.ceil(more * step_s / 864) / 100:.2f} days fewer (--days), or give {more} more steps of "
            "history")


def choose_forecaster(before: pd.DataFrame, cfg: Config, step_s: int, *, quick: bool = False,
                      epochs: int | None = None, progress: bool = False, services: Iterable[str] = ()) -> Choice:
    """The forecaster for the replayed window, chosen on the history before it only, with the inference
    ``services``' columns forecast on their window means as the daemon forecasts them (forecaster.services,
    daemon/forecasting/services.py): the replay's predictive row runs what the daemon runs.
    """
    choice = _choose_main(before, cfg, step_s, quick=quick, epochs=epochs, progress=progress)
    from daemon.forecasting.services import with_services

    model, note = with_services(cfg, choice.model, services, background=False)
    if note:
        choice.model, choice.name, choice.why = model, model.name, f"{choice.why}; {note}"
    return choice


def _choose_main(before: pd.DataFrame, cfg: Config, step_s: int, *, quick: bool = False,
                 epochs: int | None = None, progress: bool = False) -> Choice:
    """The main forecaster (every tenant but the services) for the replayed window, on the history before it only.

    Default: as `retrain` chooses (daemon.forecasting.retrain.retrain_on): an LSTM trained on that history, the
    configured model in use, and every baseline scored on its held-out end; the best runs, as the daemon would run
    it. The models are written to a temporary copy of forecaster.model_dir, never to it. ``quick``: the
    baseline-only choice the daemon makes at start-up (forecaster.selection.StartupSelection), no training.
    ``progress``: name the phases on stderr (training and scoring show their done/total and ETA)."""
    from forecaster.progress import phase
    from forecaster.selection import StartupSelection, resolve

    if quick:
        sel = StartupSelection(cfg.forecaster.season_steps, tuple(cfg.forecaster.quantiles))
        short = quick_history_short(len(before), cfg, step_s)
        if short is not None:   # before the phase: it said "done", then 'not selected yet: 1440 steps ...'
            raise DataError(short)
        with phase("choosing the forecaster (quick: the baselines on the history's end)", enabled=progress):
            chosen = sel.select(before, cfg.cycle.horizon_steps)
        if chosen is None:
            raise DataError(f"the history before the window cannot choose a forecaster: {sel.why}")
        # refresh the spread in the forecast call (not a background thread): the same history, the same numbers
        from forecaster.selection import make_baseline

        best = min((k for k, v in sel.scores.items() if np.isfinite(v)), key=lambda k: sel.scores[k])
        model = make_baseline(best, cfg.forecaster.season_steps, tuple(cfg.forecaster.quantiles), refresh=10,
                              background=False)
        return Choice(model, model.name, f"quick (baselines only): {sel.why}", dict(sel.scores), "wQL",
                      "quick, baselines only", best)
    from daemon.forecasting.retrain import retrain_on
    from forecaster import registry

    note = ""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "models"
        src = Path(cfg.forecaster.model_dir)
        if src.is_dir():
            # the configured model is scored too (as retrain scores it), where the history before the window is
            # long enough for it: a model that needs more history than there is would only fail the backtest
            n = len(before)
            holdout = min(cfg.forecaster.season_steps, max(cfg.cycle.horizon_steps * 4, n // 5))
            try:
                need = registry.load_current(src).min_history
            except registry.ModelError:
                need = 0
            if need <= n - holdout:
                shutil.copytree(src, d)
            else:
                note = (f"; the model in {src} was not scored: it needs {need} steps of history, "
                        f"{n - holdout} before the scored window")
        with phase("choosing the forecaster (an LSTM trained on the history before the window, and the "
                   "baselines)", enabled=progress):
            out = retrain_on(before, cfg, model_dir=d, step_s=step_s, epochs=epochs, progress=progress,
                             with_ets=False, scored_on=f"own history, {len(before)} steps before the window")
        entry = out.in_use or {}
        if not entry:
            raise DataError(f"no forecaster chosen on the history before the window: {out.message}")
        model = resolve(entry, d, tuple(cfg.forecaster.quantiles), background=False)
        rep = out.report
        unit = {"wql": "wQL", "peak": "peak loss", "replay": "replay cost"}.get(rep.get("select_by"), "wQL")
        return Choice(model, model.name, entry.get("why", out.message) + note,
                      {k: float(v) for k, v in (rep.get("ranked") or {}).items()}, unit, "as retrain chooses",
                      rep.get("winner"))
