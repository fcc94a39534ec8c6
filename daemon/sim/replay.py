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
PROGRESS_EVERY = 20  # a worker reports its steps to the parent's progress this often (a shared counter's lock)


def _run_group(group: list[int]) -> list[tuple[int, Meter]]:
    import torch

    torch.set_num_threads(1)  # one process per core: intra-op threads would only wait on each other
    j = _JOB
    runs = [j["runs"][i] for i in group]
    bank = _bank(j["model"], j["w"], j["cfg"], runs, j["forecast_every"], j["steps"]) \
        if any(s == "predictive" for s, _ in runs) else None
    done = j.get("done")

    def tick(i: int) -> None:
        if (i + 1) % PROGRESS_EVERY == 0:
            with done.get_lock():
                done.value += PROGRESS_EVERY

    try:
        out = []
        for i, (s, knobs) in zip(group, runs):
            out.append((i, run_strategy(s, j["w"], j["cfg"], bank if s == "predictive" else None, steps=j["steps"],
                                        knobs=knobs, check_invariants=j["check_invariants"],
                                        count_rule=j["count_rule"], progress=tick if done is not None else None)))
            if done is not None:
                with done.get_lock():
                    done.value += j["steps"] % PROGRESS_EVERY
        return out
    finally:
        if bank is not None:
            bank.close()


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
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        done_steps = ctx.Value("q", 0) if progress else None
        _JOB.update(w=w, cfg=cfg, model=model, steps=measured, runs=runs, forecast_every=forecast_every,
                    check_invariants=check_invariants, count_rule=count_rule, done=done_steps)
        done: dict[int, Meter] = {}
        groups = _groups(runs, workers)
        try:
            with ctx.Pool(min(workers, len(groups))) as pool:
                it = pool.imap_unordered(_run_group, groups)
                left = len(groups)
                while left:
                    try:
                        part = it.next(timeout=1.0)
                    except mp.TimeoutError:
                        part = None
                    except StopIteration:
                        break
                    if done_steps is not None:
                        bar.update(done_steps.value - bar.n)
                    if part is None:
                        continue
                    left -= 1
                    for i, m in part:
                        done[i] = m
                        bar.set_phase(f"{len(done)}/{len(runs)} settings done, last {m.label}")
                pool.close()
                pool.join()  # reaped, so their CPU time shows in getrusage(RUSAGE_CHILDREN)
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
