"""The replay benchmark: static, reactive, predictive and perfect-forecast strategies, each swept over its own
knob, compared on their Pareto frontiers with every tier measured, on the same simulated physics.

Cases (all through the daemon's own policy engine and the simulated actuator, nodes on):
  synthetic  40 tenants, 1,024 GPUs, embedded simulator (seed 7, not the model's training seed)
  helios     Helios "Earth" May 2020: 16 VCs (32 tenants: 8-GPU and small-job parts), 2 largest-quota VCs high
  alibaba    Alibaba GPU 2023 pod list, QoS classes as tenants (LS/Guaranteed high, Burstable normal, BE low)
  scale      1,000 tenants, 100,000 GPUs, 7 days (--scale-days), each strategy once (target: < 15 min on 2 cores)

Targets (issue #26, bench/targets.py), per trace at the utilization of the reactive frontier's best point:
predictive has at most 50% of reactive's high-tier unmet GPU-minutes, no more normal-tier unmet, no more
preemptions than the perfect forecast's point, at most twice reactive's GPU-minutes preempted and then idle;
utilization >= 85% on synthetic. The sweep cases count the cost-aware rule's decisions (each plan made again with
the rule off, ``cost_rule`` per setting).

    nice -n 10 python bench/replay_bench.py [--cases synthetic,helios,alibaba,scale] [--days 2] [--out bench/out]
                                            [--forecast-every 1] [--scale-days 7] [--workers 2]
                                            [--high-vcs 2 | --high-vc VC ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)
import targets  # noqa: E402
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir, retrain_on  # noqa: E402
from daemon.sim import report, workloads  # noqa: E402
from daemon.sim.replay import (  # noqa: E402
    GATE_MARGIN,
    REPLAY_KNOBS,
    STRATEGIES,
    default_sweep,
    perfect_knob_error,
    run_replay,
)
from forecaster.registry import load_current  # noqa: E402
from forecaster.selection import resolve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its reaped children (the worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


SYNTHETIC_SEED = 7   # the published synthetic workload's seed; --seed draws another, written with --suffix


def load(case: str, days: float, data: Path, scale_days: float = 7.0, high_vcs: int = 2,
         high_vc_names: list[str] | None = None, start: str | None = None, seed: int = SYNTHETIC_SEED):
    if case == "synthetic":
        return workloads.synthetic(40, 1024, days, seed=seed, target_load=1.0), 1
    if case == "helios":  # a week of the trace before the measured window to fit the forecaster on
        return workloads.helios(data, **({"start": start} if start else {}), days=days, history_days=7,
                                high_vcs=high_vcs, high_vc_names=high_vc_names), 1
    if case == "alibaba":
        return workloads.alibaba(data, days=days, history_days=5), 1
    if case == "scale":
        return workloads.synthetic(1000, 100_000, scale_days, seed=8, target_load=1.0), 5
    raise SystemExit(f"unknown case {case}")


def fit_forecaster(w, cfg: Config, shipped: Path, epochs: int):
    """The forecaster for one trace, chosen on that trace's own history before the measured window, as
    `gpu-autoscaler retrain` chooses: an LSTM trained on that history, the best baseline, or the shipped model
    (trained on the simulator), whichever scores best on the held-out end of that history. Returns the model
    and the in-use entry that says which it is and why."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "models"
        shutil.copytree(shipped, d)
        out = retrain_on(w.demand.iloc[: w.start], cfg, model_dir=d, step_s=60, epochs=epochs, progress=False,
                         with_ets=False, scored_on=f"trace:{w.name}, {w.start} steps before the window")
        entry = out.in_use or {}
        # spreads recomputed in the forecast call, not in a background thread: the same trace, the same numbers
        model = resolve(entry, d, tuple(cfg.forecaster.quantiles), background=False) if entry else load_current(shipped)
    return model, entry


def reuse_choice(path: Path, case: str, w, cfg: Config, model_dir: Path):
    """The forecaster `path` (a committed replay JSON) chose, for a run of the same case on the same history (the
    same window start and high tier: the choice is made on the history before the window only); one line naming
    what differs otherwise."""
    try:
        d = json.loads(path.read_text())
        entry = dict(d["forecaster_choice"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--choice-from {path}: not a replay JSON with a forecaster_choice ({exc})") from None
    high = sorted({str(t).split("/")[0] for t, tier in zip(w.demand.columns, w.tiers) if tier == "high"})
    here = {"case": case, "window_start": str(w.demand.index[w.start]), "high_tier": high}
    for k, v in here.items():
        if d.get(k) != v:
            raise SystemExit(f"--choice-from {path}: its {k} is {d.get(k)!r}, this run's {v!r}: another history")
    if entry.get("kind") != "baseline":
        raise SystemExit(f"--choice-from {path}: it chose {d.get('forecaster')!r}, an LSTM fitted in that run and "
                         "not kept; fit again (no --choice-from) or use --shipped-model")
    entry["reused_from"] = path.name
    return resolve(entry, model_dir, tuple(cfg.forecaster.quantiles), background=False), entry


def another_modes_suffix(suffix: str) -> bool:
    """A suffix that --also-every (`_every<N>`) or --shipped-model writes beside the published runs: a run of another
    workload or of chosen settings under it would be read as that one."""
    return suffix.startswith("_every") or suffix == "_shipped_model"


def parse_settings(text: str) -> list[tuple[str, dict]]:
    """`--settings`: a JSON list of [strategy, {knob: value}] pairs (or @FILE holding one). Every knob must be a
    `policy` field with a valid value, and what runs is the validated value (``"240"`` runs as 240, never as a
    string the replay would trip on after the forecaster is fitted), so that a typo is an error here, not a
    setting silently run at the default or a failure an hour in."""
    from daemon.config.models import PolicyConfig

    try:
        raw = Path(text[1:]).read_text() if text.startswith("@") else text
    except OSError as exc:
        raise SystemExit(f"--settings: cannot read {text[1:]}: {exc.strerror or exc}") from None
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--settings is not JSON: {exc}") from None
    if not isinstance(items, list) or not items:
        raise SystemExit("--settings: give a non-empty JSON list of [strategy, {knob: value}] (an empty one would "
                         "run nothing; the sweep is what runs without --settings)")
    out, seen = [], set()
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and item[0] in STRATEGIES and isinstance(item[1], dict)):
            raise SystemExit(f"--settings: each item is [strategy, {{knob: value}}] with a strategy of {STRATEGIES}; "
                             f"got {item!r}")
        bad = sorted(set(item[1]) - set(PolicyConfig.model_fields) - set(REPLAY_KNOBS))
        if bad:
            raise SystemExit(f"--settings: {bad} are not policy knobs (nor {', '.join(REPLAY_KNOBS)}, the replay's "
                             "own)")
        unset = sorted(k for k, v in item[1].items() if v is None)
        if unset:
            raise SystemExit(f"--settings: {item!r}: {unset} without a value (leave a knob out to run its default)")
        why = perfect_knob_error(item[0], item[1])
        if why is not None:
            raise SystemExit(f"--settings: {item!r}: {why}")
        policy = {k: v for k, v in item[1].items() if k not in REPLAY_KNOBS}
        try:
            valid = PolicyConfig.model_validate({**PolicyConfig().model_dump(), **policy})
        except ValueError as exc:
            raise SystemExit(f"--settings: {item!r}: {exc}") from None
        knobs = {k: (item[1][k] if k in REPLAY_KNOBS else getattr(valid, k)) for k in item[1]}
        key = (item[0], tuple(sorted(knobs.items())))
        if key in seen:
            raise SystemExit(f"--settings: {item!r} is given twice")
        seen.add(key)
        out.append((item[0], knobs))
    return out


# --gate-margins: predictive's settings run ungated and with the skill gate at each margin, over the knobs the
# equal-utilization comparison needs and no more (these replays are slow): the policy's quantile (p90) over the same
# six headrooms as reactive, so that a gate which plans every tenant reactively can reach each of reactive's points
# (with p50 and p90 at three headrooms only, reactive's best point on Helios, headroom 0.25, had no gated twin).
# `--gate-quantiles` adds others: on synthetic no p90 point comes within 0.5 pt of reactive's best (p90 holds more),
# so the ungated gain the gate should keep was unmeasured; a p50 point reaches it
GATE_HEADROOMS = (0.0, 0.05, 0.1, 0.15, 0.25, 0.4)
GATE_QUANTILES = (0.9,)


def gate_sweep(margins: list[float], headrooms: list[float] | None = None,
               quantiles: tuple[float, ...] = GATE_QUANTILES) -> list[tuple[str, dict]]:
    """The skill gate's sweep: reactive's headrooms, and predictive's grid (each of `quantiles` over the headrooms)
    ungated and gated at each margin; `headrooms`: predictive's only at these (a smaller run where the forecasts are
    slow to make)."""
    grid = [{"quantile": q, "headroom": h} for q in quantiles for h in GATE_HEADROOMS
            if headrooms is None or h in headrooms]
    return [("reactive", {"headroom": h}) for h in GATE_HEADROOMS] + [("predictive", k) for k in grid] + \
        [("predictive", {**k, GATE_MARGIN: m}) for m in margins for k in grid]


def worth_weights(a, weights: list[float]) -> int:
    """The cost-aware rule's worth weight against the rule off, with the perfect forecast (no forecast error: what
    the weighing itself costs or saves), on each sweep case."""
    out = provenance.started()
    out.update(weights=weights, cases={})
    for case in [c for c in a.cases.split(",") if c != "scale"]:   # the sweep cases only
        w, _ = load(case, a.days, default_data_dir(), a.scale_days, a.high_vcs, a.high_vc, a.start, a.seed)
        steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
        settings = [("perfect", {"headroom": h, **k}) for h in (0.05, 0.15)
                    for k in [{"preempt_cost_aware": False}, *({"preempt_worth_weight": x} for x in weights)]]
        runs = run_replay(w, Config(), None, steps=steps, settings=settings, workers=a.workers)
        out["cases"][case] = {"workload": w.name, "steps": steps, "runs": [m.summary() for m in runs]}
        for m in runs:
            s = m.summary()
            print(f"{case} {s['label']}: util {s['utilization']:.4f}, high {s['tiers']['high']['unmet_gpu_min']:.0f}, "
                  f"normal {s['tiers']['normal']['unmet_gpu_min']:.0f}, preemptions {s['preemptions']}", flush=True)
    provenance.finished(out)
    path = a.out / f"replay_worth_weight{a.suffix}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="synthetic,helios,alibaba,scale")
    ap.add_argument("--days", type=float, default=2.0, help="measured days per sweep case (scale: always 7)")
    ap.add_argument("--scale-days", type=float, default=7.0, help="measured days of the scale case")
    ap.add_argument("--forecast-every", type=int, default=1, help="forecast every N steps in the sweep cases and "
                    "shift the last forecast in between (1: every step, as the daemon forecasts every cycle)")
    ap.add_argument("--also-every", type=int, default=None, metavar="N",
                    help="sweep cases: then replay again forecasting every N steps with the same fitted forecaster, "
                    "written beside as replay_<case>_every<N>.json (no figure), so the two paces differ in nothing "
                    "else")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--suffix", default="", help="write replay_<case><suffix>.json and no figure (a second run of "
                    "the same cases, e.g. at the other --forecast-every, beside the published one)")
    ap.add_argument("--figures", type=Path, default=ROOT / "docs")
    ap.add_argument("--model-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--workers", type=int, default=2,
                    help="processes the settings run in (one torch thread each; same results as 1)")
    ap.add_argument("--fit-epochs", type=int, default=None, help="epochs of the LSTM fitted on each trace's history "
                    "(default: retrain.epochs, as `gpu-autoscaler retrain` trains it)")
    ap.add_argument("--shipped-model", action="store_true", help="forecast every trace with the shipped model "
                    "instead of the one chosen on the trace's own history")
    ap.add_argument("--high-vcs", type=int, default=2,
                    help="helios: the N VCs with the largest quota are the high tier")
    ap.add_argument("--high-vc", action="append", default=None, metavar="VC",
                    help="helios, repeatable: exactly these VCs are the high tier (instead of --high-vcs)")
    ap.add_argument("--worth-weights", default=None, metavar="W,W,...",
                    help="instead of the sweep: the perfect forecast at headroom 0.05 and 0.15 with the cost-aware "
                    "rule off and at each policy.preempt_worth_weight, per case (replay_worth_weight.json)")
    ap.add_argument("--start", default=None, metavar="DATE",
                    help="helios: the measured window's first day (default 2020-05-14; another day and tier mapping "
                    "is a window the published figures do not use: write it with --suffix)")
    ap.add_argument("--seed", type=int, default=None,
                    help="synthetic: the workload's seed (default 7; another is a workload the published figures do "
                    "not use: write it with --suffix)")
    ap.add_argument("--settings", default=None, metavar="JSON",
                    help="instead of the sweep: these [strategy, {policy knob: value}] settings (a JSON list, or "
                    "@FILE), with the forecaster fitted as for the sweep: a what-if on one knob (e.g. an aging or "
                    "preemption setting) for the three strategies, written as replay_<case><suffix>.json (needs "
                    "--suffix)")
    ap.add_argument("--choice-from", type=Path, default=None, metavar="JSON",
                    help="instead of fitting: the forecaster a committed replay of the same case, window and high "
                    "tier chose (its forecaster_choice; a baseline, since a fitted LSTM version is not kept), "
                    "which a fit on the same history would choose again")
    ap.add_argument("--gate-margins", default=None, metavar="M,M,...",
                    help="instead of the sweep: the skill gate's sweep (reactive, predictive ungated and gated at each "
                    "policy.skill_gate.margin), compared at reactive's best point per variant against issue 40's "
                    "checks (needs --suffix)")
    ap.add_argument("--gate-headrooms", default=None, metavar="H,H,...",
                    help="with --gate-margins: predictive only at these of reactive's headrooms (the forecasts of a "
                    "fitted LSTM are slow to make on a loaded box)")
    ap.add_argument("--gate-quantiles", default=None, metavar="Q,Q,...",
                    help="with --gate-margins: predictive's quantiles, each over the headrooms (default 0.9, the "
                    "policy's; add 0.5 where no p90 point reaches reactive's utilization, as on synthetic)")
    a = ap.parse_args()
    if a.gate_quantiles is not None:
        try:
            a.gate_quantiles = tuple(float(x) for x in a.gate_quantiles.split(","))
        except ValueError:
            raise SystemExit(f"--gate-quantiles: give quantiles separated by commas, not {a.gate_quantiles!r}") \
                from None
        if a.gate_margins is None or not a.gate_quantiles or any(not 0 < q < 1 for q in a.gate_quantiles):
            raise SystemExit("--gate-quantiles goes with --gate-margins, each quantile in (0, 1)")
    else:
        a.gate_quantiles = GATE_QUANTILES
    if a.gate_headrooms is not None:
        try:
            a.gate_headrooms = [float(x) for x in a.gate_headrooms.split(",")]
        except ValueError:
            raise SystemExit(f"--gate-headrooms: give headrooms separated by commas, not {a.gate_headrooms!r}") \
                from None
        if a.gate_margins is None or not set(a.gate_headrooms) <= set(GATE_HEADROOMS):
            raise SystemExit(f"--gate-headrooms goes with --gate-margins and names some of {list(GATE_HEADROOMS)}")
    if a.gate_margins is not None:
        if not a.suffix or another_modes_suffix(a.suffix) or a.suffix == "_unseen" or a.settings or a.also_every:
            raise SystemExit("--gate-margins writes its own sweep beside the published runs: give it a --suffix of "
                             "its own (not _unseen, _shipped_model or _every*), and no --settings or --also-every")
        try:
            a.gate_margins = [float(x) for x in a.gate_margins.split(",")]
        except ValueError:
            raise SystemExit(f"--gate-margins: give margins in [0, 1) separated by commas, not {a.gate_margins!r}") \
                from None
        if not a.gate_margins or any(not 0 <= m < 1 for m in a.gate_margins):
            raise SystemExit(f"--gate-margins: each margin is in [0, 1), got {a.gate_margins}")
    if a.fit_epochs is None:
        a.fit_epochs = Config().retrain.epochs
    if a.settings is not None:
        if not a.suffix or another_modes_suffix(a.suffix) or a.suffix == "_unseen" or a.also_every:
            raise SystemExit("--settings writes a what-if beside the published runs: give it a --suffix of its own "
                             "(not _unseen, _shipped_model or _every*) and no --also-every")
        if "scale" in a.cases.split(",") or a.worth_weights:
            raise SystemExit("--settings replays the sweep cases (synthetic, helios, alibaba): name them with --cases "
                             "(not scale, which runs each strategy once), and not with --worth-weights")
        a.settings = parse_settings(a.settings)
    if a.start and (a.cases != "helios" or not a.suffix):
        raise SystemExit("--start moves the Helios window: use it with --cases helios and a --suffix")
    if a.seed is not None and (a.cases != "synthetic" or not a.suffix or a.seed == SYNTHETIC_SEED
                               or another_modes_suffix(a.suffix)):
        raise SystemExit(f"--seed draws another synthetic workload than the published one (seed {SYNTHETIC_SEED}): "
                         "use it with --cases synthetic and a --suffix of its own (e.g. _unseen)")
    if a.seed is None:
        a.seed = SYNTHETIC_SEED
    # one torch thread per process: on 2 shared cores, 2 intra-op threads mostly wait on each other
    # (an LSTM forecast for 1,000 tenants: 44-69 ms median with 1 thread, 147-426 ms with 2, same output)
    torch.set_num_threads(1)
    commit = provenance.commit()  # the code imported now, whatever is committed while the bench runs
    if a.worth_weights:
        return worth_weights(a, [float(x) for x in a.worth_weights.split(",")])
    cfg = Config()
    model = load_current(a.model_dir)
    data = default_data_dir()
    summary = {}
    for case in a.cases.split(","):
        w, every = load(case, a.days, data, a.scale_days, a.high_vcs, a.high_vc, a.start, a.seed)
        every = max(every, a.forecast_every) if case != "scale" else every
        try:
            w.request_shape = workloads.azure_shape(data)
        except OSError:
            pass
        steps = min(int((a.scale_days if case == "scale" else a.days) * 1440), len(w.demand) - w.start - 1)
        chosen, fit_s = {"name": model.name, "why": "the shipped model (--shipped-model, or the scale case)"}, 0.0
        case_model = model
        if case != "scale" and a.choice_from is not None:
            case_model, chosen = reuse_choice(a.choice_from, case, w, cfg, a.model_dir)
            print(f"{case}: forecaster {chosen['name']}, as {a.choice_from.name} chose on the same history")
        elif case != "scale" and not a.shipped_model:
            t1 = time.perf_counter()
            case_model, chosen = fit_forecaster(w, cfg, a.model_dir, a.fit_epochs)
            fit_s = time.perf_counter() - t1
            print(f"{case}: forecaster {chosen.get('name', case_model.name)}: {chosen.get('why', '')} ({fit_s:.0f} s)")
        if case == "scale":
            settings = [(s, {}) for s in STRATEGIES]
        elif a.gate_margins is not None:
            settings = gate_sweep(a.gate_margins, a.gate_headrooms, a.gate_quantiles)
        else:
            settings = a.settings if a.settings is not None else default_sweep()
        paces = [(every, a.suffix)]
        if a.also_every and case != "scale" and a.also_every != every:
            paces.append((a.also_every, f"{a.suffix}_every{a.also_every}"))
        done = []   # per pace: (json written, runs, wall s, CPU s, load at start); the first is the main pace
        for pace, suffix in paces:
            t2 = time.perf_counter()
            load0 = os.getloadavg()[0]
            cpu0 = cpu_seconds()
            runs = run_replay(w, cfg, case_model, steps=steps, settings=settings, forecast_every=pace,
                              progress=True, workers=a.workers, count_rule=case != "scale")
            seconds = time.perf_counter() - t2  # the replay itself; fitting the forecaster is apart
            cpu = cpu_seconds() - cpu0
            meta = {"case": case, "commit": commit, "workload": w.name, "tenants": len(w.tiers),
                    "capacity": w.capacity, "gpus_per_node": w.gpus_per_node, "steps": steps,
                    "forecaster": case_model.name, "forecaster_choice": chosen, "forecaster_fit_seconds": fit_s,
                    "forecaster_fit_epochs": a.fit_epochs if fit_s else None,
                    "window_start": str(w.demand.index[w.start]), "high_tier": sorted(
                        {str(t).split("/")[0] for t, tier in zip(w.demand.columns, w.tiers) if tier == "high"}),
                    **({"workload_seed": a.seed} if case == "synthetic" else {}),
                    "forecast_every": pace, "wall_seconds": seconds, "replay_cpu_seconds": cpu,
                    "workers": a.workers, "cpus": os.cpu_count(),
                    "loadavg_1m_start": load0, "loadavg_1m_end": os.getloadavg()[0],
                    "tiers": {t: int(sum(x == t for x in w.tiers)) for t in ("high", "normal", "low")},
                    "targets": targets.REPLAY_SCALE if case == "scale" else targets.REPLAY_BY_CASE.get(case, {})}
            if suffix != a.suffix:
                meta["same_forecaster_as"] = f"replay_{case}{a.suffix}.json"
            if a.gate_margins is not None:   # the gate's checks, per variant, instead of issue 26's
                meta["targets"] = targets.REPLAY_GATED_BY_CASE.get(case, targets.REPLAY_GATED)
                meta["gate_margins"] = a.gate_margins
            # chosen settings, not a sweep: no point at equal utilization to compare
            what_if = None if a.settings is None else {
                "verdict": "a --settings what-if: its settings are chosen, not swept, so no point is compared at "
                           "equal utilization"}
            if a.gate_margins is not None:
                what_if = report.gate_compare([r.summary() for r in runs], a.gate_margins, meta["targets"])
            done.append((report.to_json(runs, meta, a.out / f"replay_{case}{suffix}.json", what_if), runs, seconds,
                         cpu, load0))
        out, runs, seconds, cpu, load0 = done[0]
        title = report.replay_title(w.name, len(w.tiers), w.capacity, steps / 1440,
                                    f"{w.gpus_per_node}-GPU nodes, forecaster {case_model.name}")
        if not a.suffix:
            report.pareto_figure(runs, a.figures / f"replay_{case}.png", title)
        summary[case] = out
        print(f"\n== {case}: {title} ({seconds:.0f} s wall with {a.workers} worker processes, replay CPU "
              f"{cpu:.0f} s, load average {load0:.1f} -> {os.getloadavg()[0]:.1f})")
        print(report.table(runs, legend=len(summary) == 1))   # the legend under the first table
        if a.gate_margins is None:
            print("\n".join(report.comparison_lines(out["comparison"])))
        else:
            for variant, c in out["comparison"].items():
                print(f"-- {variant}:")
                print("\n".join(report.comparison_lines(c)) if c.get("predictive_point") else c.get("verdict", c))
    (a.out / f"replay_summary_{'_'.join(summary)}{a.suffix}.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nwrote {a.out}/replay_*.json" + ("" if a.suffix else f" and {a.figures}/replay_*.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
