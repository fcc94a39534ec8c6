"""Replay a demand trace minute by minute through the daemon's own policy engine and the simulated actuator.

Every strategy sees the same trace on an identical simulated cluster (same physics: node placement, whole-node
holds, drains, lost work):

- static:     the seed's setup: one pool of `reserve_share` of the GPUs for the whole high tier (nobody else
              starts there), fixed rate limits, no preemption;
- reactive:   the policy engine with no forecast: it holds what is asked right now plus `headroom`, and
              preempts only once high-priority work is already waiting;
- predictive: the policy engine with the forecaster (the `quantile` peak over the lead time, plus `headroom`);
- perfect:    the same engine fed the true future demand (a perfect forecast). It is not a bound on what any
              policy can reach: the engine's other choices (lead time, budget, holds) stay as they are. With
              `foresight_steps` (a replay knob, not a policy one) it knows the true future only that many steps
              ahead and repeats the last of them beyond: how far ahead a forecast must see rises for the engine
              to meet the targets (0: it sees the demand now only). With `rises_seen` it sees only that share of
              the rises coming (each drawn once), and meets the others when they come. With `rates_only` it knows
              the inference services' future RATES only (what their arrivals are drawn from), not the draws:
              the most a forecast of the rate could do (daemon/sim/inference.py `rate_future`).

Each strategy can be run at several settings of its own knob (a sweep); the report compares them on their
Pareto frontiers (utilization against high-tier unmet demand), with every tier measured.

This module runs a sweep's settings (`run_replay`, in forked workers with ``workers > 1``). The rest is split by
what it serves, and imported from here as before: the knobs that are not policy fields and the perfect forecast's
view of the future (daemon/sim/replay_knobs.py), the per-setting measures (daemon/sim/meter.py), the predictive
settings' forecasts (daemon/sim/forecast_bank.py), one setting's step-by-step loop (daemon/sim/strategy.py
`run_strategy`) and the sweep's settings (daemon/sim/sweep.py `default_sweep`).
"""

from __future__ import annotations

from daemon.config import Config
from daemon.sim.forecast_bank import ForecastBank
from daemon.sim.meter import TIERS, Meter
from daemon.sim.replay_knobs import (
    FORECAST_FOR,
    FORESIGHT,
    GATE_MARGIN,
    PERFECT_KNOBS,
    RATES_ONLY,
    REPLAY_KNOBS,
    RISES_SEED,
    RISES_SEEN,
    STRATEGIES,
    perfect_knob_error,
    rises,
    seen_future,
)
from daemon.sim.strategy import inference_run, per_step_config, replica_quantile, run_strategy, static_plan
from daemon.sim.sweep import LONG_PREEMPT_LEAD, WORTH_WEIGHT, default_sweep
from daemon.sim.workloads import Workload
from forecaster.baselines import Forecaster

# what the modules split out of this one (see the docstring) give: still imported from here
__all__ = [
    "FORECAST_FOR",
    "FORESIGHT",
    "ForecastBank",
    "GATE_MARGIN",
    "LONG_PREEMPT_LEAD",
    "Meter",
    "PERFECT_KNOBS",
    "RATES_ONLY",
    "REPLAY_KNOBS",
    "RISES_SEED",
    "RISES_SEEN",
    "STRATEGIES",
    "TIERS",
    "WORTH_WEIGHT",
    "default_sweep",
    "inference_run",
    "per_step_config",
    "perfect_knob_error",
    "replica_quantile",
    "rises",
    "run_strategy",
    "seen_future",
    "static_plan",
    "ReplayWorkerError",
    "replay_name",
    "replay_workers",
    "run_replay",
]


def _groups(runs: list[tuple[str, dict]], workers: int = 1) -> list[list[int]]:
    """Settings that run together in one process. The predictive settings share a forecast bank, so they form
    groups of their own (run first: forecasting makes them the longest): one group, or with ``workers > 1`` one
    per worker, each making its own bank (a forecast is made once per group, not once per setting: the sweep's 58
    predictive settings in one group kept one core busy long after the other had run out of work). Every other
    setting is a group of its own."""
    pred = [i for i, (s, _) in enumerate(runs) if s == "predictive"]
    parts = max(1, min(workers, len(pred)))
    return [pred[j::parts] for j in range(parts) if pred[j::parts]] + \
        [[i] for i, (s, _) in enumerate(runs) if s != "predictive"]


def _bank(model: Forecaster, w: Workload, cfg: Config, runs: list[tuple[str, dict]], every: int,
          steps: int) -> ForecastBank:
    """One bank for the predictive settings of `runs`: kept whole only when several settings reuse it."""
    n = sum(s == "predictive" for s, _ in runs)
    return ForecastBank(model, w.demand, every, cfg.cycle.horizon_steps, cfg.cycle.history_steps, keep=n > 1,
                        prefetch=True, stop=w.start + steps)


_JOB: dict = {}  # what a worker process needs, inherited through fork (a DataFrame and a model are not re-pickled)
PROGRESS_EVERY = 20  # a worker reports its steps to the parent this often (its heartbeat too)
# a worker that says nothing (no setting begun, no PROGRESS_EVERY steps done, no result) for this long is taken as
# hung: run_replay stops the workers and fails naming it. A step takes milliseconds to seconds (a forecast of a
# thousand tenants on one thread); ten minutes of silence is no slow step
WORKER_SILENT_S = 600.0


class ReplayWorkerError(RuntimeError):
    """A replay worker process died or stopped answering; the message names it and the setting it ran."""


def _run_group(group: list[int], say=None) -> list[tuple[int, Meter]]:
    """Run the settings `group` (indexes into the job's runs) in this process. `say(message)`: tell the parent
    (the setting begun, steps done), which is also how it knows this worker is alive."""
    j = _JOB
    runs = [j["runs"][i] for i in group]
    bank = _bank(j["model"], j["w"], j["cfg"], runs, j["forecast_every"], j["steps"]) \
        if any(s == "predictive" for s, _ in runs) else None

    def tick(i: int) -> None:
        if (i + 1) % PROGRESS_EVERY == 0:
            say(("steps", PROGRESS_EVERY))

    try:
        out = []
        for i, (s, knobs) in zip(group, runs):
            if say is not None:
                say(("setting", i))
            out.append((i, run_strategy(s, j["w"], j["cfg"], bank if s == "predictive" else None, steps=j["steps"],
                                        knobs=knobs, check_invariants=j["check_invariants"],
                                        count_rule=j["count_rule"], progress=tick if say is not None else None)))
            if say is not None:
                say(("steps", j["steps"] % PROGRESS_EVERY))
        return out
    finally:
        if bank is not None:
            bank.close()


def _worker(conn) -> None:
    """A forked worker: runs the groups the parent sends (their indexes into _groups' list) until it sends None,
    answering each with its meters, or with the error it raised."""
    import torch

    # first, before any torch work: one process per core, so intra-op threads would only wait on each other; and
    # a forked child must not start an OpenMP parallel region on its main thread once the parent has used one
    # (libgomp's pool is inherited without its threads: the child waits on them for ever, pytorch#17199)
    torch.set_num_threads(1)
    while True:
        g = conn.recv()
        if g is None:
            return
        try:
            part = _run_group(_JOB["groups"][g], conn.send)
        except Exception as exc:  # the parent raises it (as Pool did), with this process's traceback
            import pickle
            import traceback

            text = traceback.format_exc()
            try:   # one that does not come back whole (its args are not its constructor's) failed the parent's recv
                pickle.loads(pickle.dumps(exc))
                conn.send(("error", g, exc, text))
            except Exception:  # not picklable, or not unpicklable: its text
                conn.send(("error", g, RuntimeError(f"{type(exc).__name__}: {exc}"), text))
            return
        conn.send(("done", g, part))


def _exit_text(code: int | None) -> str:
    import signal

    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _run_workers(runs: list[tuple[str, dict]], groups: list[list[int]], n: int, bar, steps: int) -> dict[int, Meter]:
    """Run `groups` in `n` forked worker processes, each given the next group when it answers the last. Every
    message is drained as it comes (a result waits on no full pipe), and no wait is for ever: a worker that dies,
    or says nothing for WORKER_SILENT_S, stops the others and raises ReplayWorkerError naming it and the setting
    it was running."""
    import multiprocessing as mp
    import time
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    label = [Meter(s, k).label for s, k in runs]
    done: dict[int, Meter] = {}
    procs, conns = [], []
    running: dict[int, int] = {}       # worker -> the group it runs
    setting: dict[int, int] = {}       # worker -> the setting it said it began
    heard: dict[int, float] = {}       # worker -> when it last said anything
    todo = list(range(len(groups)))
    steps_done = 0

    def lost(wid: int, what: str) -> ReplayWorkerError:
        g = running[wid]
        now = label[setting[wid]] if wid in setting else label[groups[g][0]]
        share = ", ".join(label[i] for i in groups[g])
        return ReplayWorkerError(f"replay worker {wid + 1} of {len(procs)} (pid {procs[wid].pid}) {what} while "
                                 f"running setting {now!r} (its share: {share}); "
                                 f"{len(done)}/{len(runs)} settings were done")

    def give(wid: int) -> None:
        g = todo.pop(0) if todo else None
        if g is None:
            running.pop(wid, None)
            try:
                conns[wid].send(None)
            except OSError:  # it is gone after its last answer: nothing of it is missing
                pass
            return
        running[wid], heard[wid] = g, time.monotonic()
        setting.pop(wid, None)
        conns[wid].send(g)

    try:
        for _ in range(n):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(there,), daemon=True)
            p.start()
            there.close()
            procs.append(p)
            conns.append(here)
        for wid in range(n):
            give(wid)
        while running:
            ready = set(wait([conns[w] for w in running] + [procs[w].sentinel for w in running], timeout=1.0))
            for wid in list(running):
                c, gone, failed = conns[wid], procs[wid].sentinel in ready, None
                if c in ready or gone:
                    try:
                        while wid in running and c.poll():
                            msg = c.recv()
                            heard[wid] = time.monotonic()
                            if msg[0] == "steps":
                                steps_done += msg[1]
                            elif msg[0] == "setting":
                                setting[wid] = msg[1]
                            elif msg[0] == "error":
                                failed = msg
                                break
                            else:
                                for i, m in msg[2]:
                                    done[i] = m
                                    bar.set_phase(f"{len(done)}/{len(runs)} settings done, last {m.label}")
                                give(wid)
                    except (EOFError, OSError):  # its end of the pipe closed: it is gone
                        gone = True
                if failed is not None:  # the setting's own error, raised here as Pool did
                    where = f"in replay worker {wid + 1} (pid {procs[wid].pid}):\n{failed[3]}"
                    raise failed[2] from RuntimeError(where)
                if wid in running and gone:
                    procs[wid].join(5.0)
                    raise lost(wid, f"died ({_exit_text(procs[wid].exitcode)})")
                if wid in running and time.monotonic() - heard[wid] > WORKER_SILENT_S:
                    raise lost(wid, f"said nothing for {WORKER_SILENT_S:g} s (hung?)")
            bar.update(min(steps_done, steps * len(runs)) - bar.n)
        for p in procs:  # reaped, so their CPU time shows in getrusage(RUSAGE_CHILDREN); every answer is in, so
            p.join(60.0)  # one that does not end is stopped below
    finally:
        for p in procs:
            if p.exitcode is None:
                p.terminate()
        for p in procs:
            p.join(5.0)
            if p.exitcode is None:
                p.kill()
                p.join()
        for c in conns:
            c.close()
    return done


def replay_workers() -> int:
    """Worker processes for a sweep: the CPUs this process may run on (a sweep's settings are independent)."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call (macOS)
        return max(1, os.cpu_count() or 1)


def replay_name(w: Workload, runs: list[tuple[str, dict]]) -> str:
    """The progress phase's name: the workload and what is replayed."""
    return f"replay {w.name} ({len(runs)} setting{'s' if len(runs) != 1 else ''})"


def run_replay(w: Workload, cfg: Config, model: Forecaster | None, *, steps: int, strategies=STRATEGIES,
               settings: list[tuple[str, dict]] | None = None, forecast_every: int = 1, progress: bool = False,
               check_invariants: bool = False, workers: int = 1, count_rule: bool = False) -> list[Meter]:
    """Run each (strategy, knobs) setting; with no `settings`, each strategy once at the configured policy.

    ``workers > 1`` runs the settings in that many forked processes (each with one torch thread); every
    setting is computed exactly as in one process, so the meters are the same, only the wall time changes.
    ``count_rule``: count the cost-aware rule's decisions (``run_strategy``). ``progress``: one named phase over
    every setting's steps on stderr (forecaster.progress: a bar on a terminal, else a plain line every 30 s and
    every 10%, each with done/total and the ETA of the whole sweep)."""
    from forecaster.progress import Progress

    runs = settings if settings is not None else [(s, {}) for s in strategies]
    if model is None:
        runs = [(s, k) for s, k in runs if s != "predictive"]
    measured = min(steps, len(w.demand) - w.start)
    bar = Progress(replay_name(w, runs), measured * len(runs), unit="steps", enabled=progress)
    if workers > 1 and len(runs) > 1:
        groups = _groups(runs, workers)
        _JOB.update(w=w, cfg=cfg, model=model, steps=measured, runs=runs, forecast_every=forecast_every,
                    check_invariants=check_invariants, count_rule=count_rule, groups=groups)
        try:
            done = _run_workers(runs, groups, min(workers, len(groups)), bar, measured)
        finally:
            _JOB.clear()
            bar.close()
        return [done[i] for i in range(len(runs))]
    bank = _bank(model, w, cfg, runs, forecast_every, steps) if any(s == "predictive" for s, _ in runs) else None
    out = []
    try:
        for j, (s, knobs) in enumerate(runs):
            bar.set_phase(f"{j + 1}/{len(runs)} {Meter(s, knobs).label}")
            out.append(run_strategy(s, w, cfg, bank if s == "predictive" else None, steps=steps, knobs=knobs,
                                    progress=(lambda _i: bar.update(1)) if progress else None,
                                    check_invariants=check_invariants, count_rule=count_rule))
    finally:
        if bank is not None:
            bank.close()
        bar.close()
    return out
