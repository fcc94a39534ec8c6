"""The inference bench: ServeGen m-small's 43 LLM API clients as inference services beside synthetic batch tenants
(daemon/sim/servegen.py), replayed through reactive, predictive and the perfect forecast at cold starts of 1, 3, 5
and 9 minutes (issue 40, item 1).

Every strategy runs on the same cluster for the same window (equal GPU-hours of capacity). The services' own
GPU-hours differ by strategy (predictive and perfect ask for replicas ahead), so reactive also runs at several HPA
headrooms (`REACTIVE_HEADROOMS`, the services' demand recomputed at each, the cluster and the batch unchanged), and
reactive's high-tier throttled requests are interpolated at predictive's service GPU-hours: the comparison at equal
GPU-hours. Per cold start and strategy the JSON keeps every tier's requests (arrived, served, throttled, late),
the services' GPU-minutes and the GPU figures; per cold start, the share of the gap from reactive's high-tier
throttled requests to the perfect forecast's that predictive closes, at the default headroom and at equal
GPU-hours (issue 40's target: at least 25%, the goal 50%, for every cold start of 3 minutes or more), and
reactive's batch tiers' (normal, low) unmet GPU-minutes read off at predictive's GPU-hours the same way (the target:
predictive's no higher). The predictive replica autoscaler scales to the forecast's `--replica-quantiles` (the
config key policy.replica_quantile): the first is the predictive row, each other one runs beside it with the same
figures; `predictive_high_tier_ahead` is the first quantile's autoscaler starting replicas ahead for the high tier's
services only (policy.replica_ahead_tiers = [high]), with the same figures; `predictive_batch_reactive` is the first
quantile's run with the plan acting on the forecast for the services only (the replay knob forecast_for = services:
the batch tenants planned as the skill gate plans a tenant it does not trust), and `predictive_seasonal` the same
autoscaler and plan with one change, the forecaster: the daily seasonal naive, recalibrated (`SEASONAL`), each with
the same figures; `predictive_windows` (with `--window-forecaster`) changes the forecaster only, too: the one
`retrain` chooses (retrain_on, promotion off) on the services' GPU need averaged into the trace's 10-minute windows
over the history before the window (the series the forecast_traces row scores the LSTM on), run at the replay's
minute through forecaster.resampled.Resampled (each minute reads its window's forecast), fitted once per bench run,
and `predictive_windows_seasonal` the daily seasonal naive (recalibrated) on the same windows at each replica
quantile, the last quantile's also with the batch tenants planned reactively
(`predictive_windows_seasonal_batch_reactive`).
`predictive_product` (at each replica quantile) is what the daemon and `simulate` run since forecaster.services:
the start-up choice for the batch tenants, the services' columns forecast on their window means
(daemon/forecasting/services.py), chosen on the history before the window only.
The forecaster is otherwise the one the daemon chose at start-up before forecaster.services (the baselines scored on
the history before the window, every tenant at the minute: forecaster.services.kind = "same"). `--history-days`
(default 2) sets that history: 2 days is the least that retrain accepts at 10-minute windows.

The ceiling of any forecast of the rate (`perfect_rate`, a bench label, not a strategy a user picks): the perfect
forecast with its `rates_only` knob knows the services' future window RATES (the means ServeGen's per-minute
arrivals are drawn from), never the draws, on the same physics, at the workload's headroom and at each of
REACTIVE_HEADROOMS. Per cold start the JSON keeps each point, the share of reactive's gap to the perfect forecast it
closes at its own service GPU-hours (reactive read off there), the largest of those, and perfect-rate read off at
predictive's service GPU-hours (its throttled requests interpolated between its headrooms): what a forecast of the
rate could close at predictive's budget. `perfect_rate.nowcast` knows the rate of the minute before only (foresight
0, at the workload's headroom): what a perfect estimate of the rate now, with no foresight, closes.

    nice -n 10 python bench/inference_bench.py [--days 1] [--cold-starts 1,3,5,9] [--seed 7] [--workers 2]
        [--replica-quantiles 0.5,0.9] [--history-days 2] [--window-forecaster [--epochs N]]
    nice -n 10 python bench/inference_bench.py --only-gated-product --replica-quantiles 0.5,0.9 --seeds 7,8,9,10,11
        [--cold-starts 3,5,9] [--arrivals fitted]   # the gated product per draw: inference_servegen_seeds[_fitted].json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir, retrain_on  # noqa: E402
from daemon.sim.own import choose_forecaster  # noqa: E402
from daemon.sim.replay import FORECAST_FOR, FORESIGHT, RATES_ONLY, replica_quantile, run_replay  # noqa: E402
from daemon.sim.servegen import servegen  # noqa: E402
from daemon.sim.sizing import gated, with_service_headroom as with_headroom  # noqa: E402
from forecaster import traces  # noqa: E402
from forecaster.composite import seasonal_windows as services_seasonal_windows  # noqa: E402
from forecaster.resampled import Resampled, window_means  # noqa: E402
from forecaster.selection import make_baseline, resolve  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("reactive", "predictive", "perfect")
TIERS = ("high", "normal", "low")
BATCH_TIERS = ("normal", "low")   # the tiers batch work runs in beside the services (the target: no higher unmet)
REACTIVE_HEADROOMS = (0.2, 0.35, 0.5, 0.75, 1.0)   # besides the workload's own 0.1
PERFECT_RATE = ("perfect", {RATES_ONLY: True})      # the perfect forecast knowing the services' rates, not the draws
SEASONAL = "seasonal_naive_daily+conformal"          # predictive_seasonal's forecaster (one change: the forecaster)
RATE_NOWCAST = ("perfect", {RATES_ONLY: True, FORESIGHT: 0})   # and knowing only the rate now, none ahead
WINDOW_S = traces.SERVEGEN_WINDOW_S   # predictive_windows' forecaster runs on the trace's 10-minute windows
_WINDOW_MODELS: dict = {}             # (data, days, history days, seed) -> (model, entry): the need is the same at
                                      # every cold start, so the model is fitted once per run of the bench


def seasonal_windows(cfg: Config) -> Resampled:
    """A fresh daily seasonal naive (recalibrated) on the trace's 10-minute windows, run at the replay's minute: the
    forecaster of the predictive_windows_seasonal rows (and of bench/sizing_bench.py --seasonal-windows). Fresh per
    run: its recalibration and Resampled's last inner forecast are state."""
    return services_seasonal_windows(WINDOW_S, tuple(cfg.forecaster.quantiles), background=False)


def window_forecaster(w, cfg: Config, key: tuple, epochs: int | None = None):
    """The forecaster `retrain` puts in use on the services' history before the window, averaged into the trace's
    10-minute windows (the services' GPU need per window: the series the forecast_traces row scores the LSTM on),
    run at the replay's step through forecaster.resampled.Resampled. Trained and chosen by retrain_on, promotion
    off (the daemon's cycle runs at 60 s steps; a 600 s model is what retrain would choose here, not what it runs).
    Returns the model and what was chosen and why."""
    if key in _WINDOW_MODELS:
        return _WINDOW_MODELS[key]
    hist = window_means(w.demand.iloc[: w.start][list(w.inference)], WINDOW_S)
    # the forecast covers the daemon's horizon from any minute of a window: one window more than the horizon holds
    horizon = -(-cfg.cycle.horizon_steps * cfg.cycle.resolution_s // WINDOW_S) + 1
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "models"
        out = retrain_on(hist, cfg, model_dir=d, step_s=WINDOW_S, epochs=epochs, progress=False, horizon=horizon,
                         promote=False, with_ets=False,
                         scored_on=f"trace:servegen m-small, the services' {len(hist)} windows before the window")
        entry = out.in_use
        model = Resampled(resolve(entry, d, tuple(cfg.forecaster.quantiles), background=False), WINDOW_S)
    rep = out.report
    info = {"candidate": rep["winner"], "name": entry["name"], "why": entry["why"], "step_s": WINDOW_S,
            "horizon_windows": horizon, "history_windows": len(hist), "lstm_variant": rep["lstm_variant"],
            "best_baseline": rep["best_baseline"],
            "gain_vs_best_baseline": rep["gain_vs_best_baseline"], "wql": entry["wql"]}
    _WINDOW_MODELS[key] = (model, info)
    return model, info


def service_gpu_min(run: dict) -> float:
    return sum(t["inf_gpu_min"] for t in run["tiers"].values())


def at_equal_gpu(points: list[tuple[float, float]], gpu: float) -> float | None:
    """Reactive's high-tier throttled requests at ``gpu`` service GPU-minutes, linear between its headrooms'
    (gpu, throttled) points; None outside their span (no extrapolation)."""
    pts = sorted(points)
    for (g0, t0), (g1, t1) in zip(pts, pts[1:]):
        if g0 <= gpu <= g1:
            return t0 if g1 == g0 else t0 + (t1 - t0) * (gpu - g0) / (g1 - g0)
    return None


def gap_closed(reactive: float, predictive: float, perfect: float) -> float | None:
    """The share of reactive's excess over the perfect forecast that predictive removes (None: no gap)."""
    gap = reactive - perfect
    return (reactive - predictive) / gap if gap > 0 else None


def perfect_rate_ceiling(rows: dict[str, dict], nowcast: dict, pred: dict, perfect: dict, reactive: dict,
                         points: list[dict]) -> dict:
    """The rate-knowing perfect forecast (``rows``: its run per headroom) against reactive's gap to the perfect
    forecast: each point's share closed at its own service GPU-hours (reactive read off there; None outside reactive's
    span), the largest, and the share closed at predictive's service GPU-hours (perfect-rate's throttled requests
    read off between its points, reactive's likewise): the most a forecast of the rate closes at that budget."""
    thr_o = perfect["tiers"]["high"]["inf_throttled"]
    react = [(p["service_gpu_min"], p["high_inf_throttled"]) for p in points]
    for r in [*rows.values(), nowcast]:
        eq = at_equal_gpu(react, service_gpu_min(r))
        r["reactive_high_throttled_at_its_gpu"] = eq
        r["high_throttled_gap_closed_equal_gpu"] = None if eq is None else gap_closed(
            eq, r["tiers"]["high"]["inf_throttled"], thr_o)
    closed = [r["high_throttled_gap_closed_equal_gpu"] for r in rows.values()
              if r["high_throttled_gap_closed_equal_gpu"] is not None]
    gpu = service_gpu_min(pred)
    at_pred = at_equal_gpu([(service_gpu_min(r), r["tiers"]["high"]["inf_throttled"]) for r in rows.values()], gpu)
    eq_pred = at_equal_gpu(react, gpu)
    return {"label": "perfect-rate: the perfect forecast knowing the services' future window rates, not the draws",
            "at_headroom": rows, "nowcast": nowcast, "gap_closed_equal_gpu_max": max(closed) if closed else None,
            "high_throttled_at_predictive_gpu": at_pred,
            "gap_closed_at_predictive_gpu": None if at_pred is None or eq_pred is None else gap_closed(
                eq_pred, at_pred, thr_o)}


def run_row(m) -> dict:
    """One run's figures kept in the JSON: utilization, preemptions and every tier's requests and GPU-minutes."""
    s = m.summary()
    return {"utilization": s["utilization"], "preemptions": s["preemptions"],
            "tiers": {t: {k: s["tiers"][t][k] for k in ("inf_requests", "inf_served", "inf_throttled", "inf_late",
                                                         "inf_gpu_min", "inf_unmet_gpu_min", "demand_gpu_min",
                                                         "unmet_gpu_min")}
                      for t in TIERS}}


def with_replica_quantile(cfg: Config, q: float) -> Config:
    """``cfg`` with the predictive replica autoscaler at the forecast's quantile ``q`` (policy.replica_quantile)."""
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"replica_quantile": q})})


def versus_reactive(pred: dict, perfect: dict, reactive: dict, points: list[dict]) -> dict:
    """A predictive run against reactive's: the gap to perfect closed at the default headroom and at equal service
    GPU-hours, and reactive's batch tiers' (low, normal) unmet GPU-minutes at predictive's service GPU-hours, read
    off between reactive's headrooms (``points``: service_gpu_min, high_inf_throttled, unmet_gpu_min)."""
    thr = {k: r["tiers"]["high"]["inf_throttled"] for k, r in (("p", pred), ("o", perfect), ("r", reactive))}
    gpu = service_gpu_min(pred)
    eq = at_equal_gpu([(p["service_gpu_min"], p["high_inf_throttled"]) for p in points], gpu)
    unmet = {t: at_equal_gpu([(p["service_gpu_min"], p["unmet_gpu_min"][t]) for p in points], gpu)
             for t in BATCH_TIERS}
    # the services' part of it, where every point has it (the rest is the tier's batch jobs'): whether a tier's
    # unmet above reactive's is its batch's or its services'
    svc = None if any("inf_unmet_gpu_min" not in p for p in points) else {
        t: at_equal_gpu([(p["service_gpu_min"], p["inf_unmet_gpu_min"][t]) for p in points], gpu) for t in BATCH_TIERS}
    return {"high_throttled_gap_closed": gap_closed(thr["r"], thr["p"], thr["o"]),
            "reactive_high_throttled_at_predictive_gpu": eq,
            "high_throttled_gap_closed_equal_gpu": None if eq is None else gap_closed(eq, thr["p"], thr["o"]),
            "reactive_unmet_gpu_min_at_predictive_gpu": unmet,
            **({"reactive_services_unmet_gpu_min_at_predictive_gpu": svc} if svc is not None else {}),
            "batch_unmet_no_higher_equal_gpu": None if any(v is None for v in unmet.values()) else all(
                pred["tiers"][t]["unmet_gpu_min"] <= unmet[t] for t in BATCH_TIERS)}


def reactive_points(case: dict) -> list[dict]:
    """Reactive's (service GPU-minutes, high-tier throttled, unmet per tier) at the workload's headroom and at each
    of REACTIVE_HEADROOMS, from a case's ``runs.reactive`` and ``reactive_headrooms``: the points `versus_reactive`
    reads off between."""
    reactive = case["runs"]["reactive"]
    own = {"service_gpu_min": service_gpu_min(reactive), "high_inf_throttled": reactive["tiers"]["high"][
        "inf_throttled"], "unmet_gpu_min": {t: reactive["tiers"][t]["unmet_gpu_min"] for t in TIERS}}
    if all("inf_unmet_gpu_min" in reactive["tiers"][t] for t in TIERS):
        own["inf_unmet_gpu_min"] = {t: reactive["tiers"][t]["inf_unmet_gpu_min"] for t in TIERS}
    return [own, *case["reactive_headrooms"].values()]


def gated_product_row(w, cfg: Config, q: float) -> dict:
    """The product's choice (as `predictive_product`) at replica quantile ``q`` with the skill gate on (`gated`:
    policy.skill_gate.enabled): predictive acts on the forecast only per tenant where it has shown skill, so the
    batch tenants whose forecast has none are planned reactively by the product's own rule (issue 40, item 2).
    Keeps the gate's per-tenant counts (``skill_gate``) beside the figures."""
    product = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True, services=list(w.inference))
    (m,) = run_replay(w, gated(with_replica_quantile(cfg, q)), product.model, steps=len(w.demand) - w.start,
                      strategies=("predictive",), workers=1)
    return {"forecaster": product.name, "replica_quantile": q, "skill_gate_enabled": True, **run_row(m),
            "skill_gate": m.summary().get("skill_gate")}


def servegen_workload(cold_min: float, days: float, seed: int, data: Path, history_days: float, cfg: Config,
                      arrivals: str = "moments"):
    """The bench's workload at one cold start: ServeGen's services beside the synthetic batch tenants, the requests
    drawn by ``arrivals`` (daemon/sim/servegen.py: "moments" or "fitted")."""
    tight = {t: min(lvl.rate(t) for lvl in cfg.ratelimits.levels) for t in ("high", "normal")}
    return servegen(data, days=days, history_days=history_days, seed=seed, cold_start_s=cold_min * 60,
                    tight_limits=tight, gpus_per_node=cfg.cluster.gpus_per_node, arrivals=arrivals)


def add_gated_product(path: Path, data: Path, q: float) -> None:
    """Adds `predictive_product_gated` at replica quantile ``q`` to every case of the committed JSON at ``path``
    (run with the JSON's days, history and seed) without re-running its other rows; the row records its own
    commit, load and wall time, since the rest of the JSON was measured on an earlier commit."""
    doc = json.loads(path.read_text())
    for case in doc["cases"]:
        print(f"gated product, cold start {case['cold_start_min']:g} min...", file=sys.stderr, flush=True)
        prov = provenance.started()
        cfg = Config()
        w, _ = servegen_workload(case["cold_start_min"], doc["days"], doc["seed"], data, doc["history_days"], cfg)
        row = gated_product_row(w, cfg, q)
        row.update(versus_reactive(row, case["runs"]["perfect"], case["runs"]["reactive"], reactive_points(case)))
        row["provenance"] = provenance.finished(prov) | {
            "command": "python bench/inference_bench.py " + " ".join(sys.argv[1:])}
        case["predictive_product_gated"] = row
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def seed_checks(row: dict, gap_min: float) -> dict:
    """The checks of one multi-seed run (a `gated_product_row` with `versus_reactive`'s figures): the gap closed
    at equal GPU-hours at least ``gap_min``, each batch tier's unmet no higher than reactive's read off there, and
    the two batch tiers' together no higher. None where reactive's headrooms do not span the row's GPU-hours."""
    eq, un = row["high_throttled_gap_closed_equal_gpu"], row["reactive_unmet_gpu_min_at_predictive_gpu"]
    spanned = all(un[t] is not None for t in BATCH_TIERS)
    return {"gap_closed_min": None if eq is None else eq >= gap_min,
            "each_batch_tier_no_higher": row["batch_unmet_no_higher_equal_gpu"],
            "batch_tiers_together_no_higher": None if not spanned else sum(
                row["tiers"][t]["unmet_gpu_min"] for t in BATCH_TIERS) <= sum(un[t] for t in BATCH_TIERS)}


def seeds_summary(runs: list[dict]) -> dict:
    """How many of the multi-seed runs meet each check, and all of them (a check that could not be read counts
    as not met and is counted apart)."""
    names = list(runs[0]["checks"]) if runs else []
    return {"runs": len(runs), "met": {k: sum(r["checks"][k] is True for r in runs) for k in names},
            "unreadable": {k: sum(r["checks"][k] is None for r in runs) for k in names},
            "all_met": sum(all(v is True for v in r["checks"].values()) for r in runs)}


def seed_run(seed: int, cold_min: float, days: float, history_days: float, data: Path, q: float,
             workers: int, arrivals: str = "moments") -> dict:
    """The gated product (`gated_product_row` at replica quantile ``q``) on the workload drawn with ``seed`` at one
    cold start, against reactive and the perfect forecast on the same draw: reactive at the workload's headroom
    and at each of REACTIVE_HEADROOMS (its throttled requests and batch unmet depend on the draw, and its
    throttled requests on the cold start, so they are run for each), read off at the product's service GPU-hours
    by `versus_reactive`."""
    t0 = time.perf_counter()
    cfg = Config()
    w, _ = servegen_workload(cold_min, days, seed, data, history_days, cfg, arrivals)
    steps = len(w.demand) - w.start
    reactive, perfect = run_replay(w, with_replica_quantile(cfg, q), None, steps=steps,
                                   strategies=("reactive", "perfect"), workers=workers)
    case = {"runs": {"reactive": run_row(reactive), "perfect": run_row(perfect)}, "reactive_headrooms": {}}
    for h in REACTIVE_HEADROOMS:
        (m,) = run_replay(with_headroom(w, h), cfg, None, steps=steps, strategies=("reactive",), workers=1)
        r = run_row(m)
        case["reactive_headrooms"][f"{h:g}"] = {"service_gpu_min": service_gpu_min(r),
                                               "high_inf_throttled": r["tiers"]["high"]["inf_throttled"],
                                               "utilization": r["utilization"], "preemptions": r["preemptions"],
                                               "unmet_gpu_min": {t: r["tiers"][t]["unmet_gpu_min"] for t in TIERS},
                                               "inf_unmet_gpu_min": {t: r["tiers"][t]["inf_unmet_gpu_min"]
                                                                     for t in TIERS}}
    row = gated_product_row(w, cfg, q)
    row.update(versus_reactive(row, case["runs"]["perfect"], case["runs"]["reactive"], reactive_points(case)))
    return {"seed": seed, "cold_start_min": cold_min, "capacity_gpus": w.capacity, "steps": steps, **case,
            "predictive_product_gated": row, "checks": seed_checks(row, SEED_TARGETS["gap_closed_min"]),
            "wall_s": time.perf_counter() - t0}


SEED_TARGETS = {"gap_closed_min": 0.25, "gap_closed_goal": 0.5, "from_cold_start_min": 3}


def run_seeds(seeds: list[int], colds: list[float], a, q: float) -> Path:
    """The gated product over several seeds of the workload's draw (issue 40: checked on draws the bench does not
    use), one run per seed and cold start, into its own JSON (inference_servegen_seeds.json), written after every
    run so a stopped bench keeps what it measured."""
    doc = {**provenance.started(), "bench": "inference_seeds", "days": a.days, "history_days": a.history_days,
           "seeds": seeds, "cold_starts_min": colds, "replica_quantile": q, "arrivals": a.arrivals,
           "command": "python bench/inference_bench.py " + " ".join(sys.argv[1:]), "targets": SEED_TARGETS,
           "runs": []}
    path = a.out / ("inference_servegen_seeds.json" if a.arrivals == "moments"
                    else f"inference_servegen_seeds_{a.arrivals}.json")
    for seed in seeds:
        for c in colds:
            print(f"seed {seed}, cold start {c:g} min...", file=sys.stderr, flush=True)
            doc["runs"].append(seed_run(seed, c, a.days, a.history_days, a.data_dir or default_data_dir(), q,
                                        a.workers, a.arrivals))
            doc["summary"] = seeds_summary(doc["runs"])
            a.out.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({k: v for k, v in doc.items() if k != "_t0"}, indent=2) + "\n")
    doc["complete"] = True
    return provenance.write(doc, a.out, path.name)


def run_case(cold_min: float, days: float, seed: int, data: Path, workers: int, quantiles: list[float],
             history_days: float = 2.0, epochs: int | None = None, windows: bool = False) -> dict:
    """One cold start: reactive, perfect and predictive with its replica autoscaler at ``quantiles[0]`` (the runs
    under ``runs``), predictive at each further quantile (``predictive_at_replica_quantile``), and reactive at
    each of REACTIVE_HEADROOMS for the comparison at equal GPU-hours."""
    cfg = Config()
    w, notes = servegen_workload(cold_min, days, seed, data, history_days, cfg)
    t0 = time.perf_counter()
    choice = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True)
    steps = len(w.demand) - w.start
    main = run_replay(w, with_replica_quantile(cfg, quantiles[0]), choice.model, steps=steps,
                      settings=[(s, {}) for s in STRATEGIES] + [PERFECT_RATE, RATE_NOWCAST], workers=workers)
    runs = main[:len(STRATEGIES)]
    rate_rows = {f"{w.inference[next(iter(w.inference))].headroom:g}": run_row(main[-2])}
    nowcast = run_row(main[-1])
    out = {"cold_start_min": cold_min, "workload": w.name, "capacity_gpus": w.capacity, "steps": steps,
           "gpu_hours": w.capacity * steps / 60, "forecaster": choice.name, "replica_quantile": quantiles[0],
           "wall_s": time.perf_counter() - t0, "inference": notes.to_dict(),
           "runs": {m.name: run_row(m) for m in runs}, "predictive_at_replica_quantile": {}}
    for q in quantiles[1:]:
        (m,) = run_replay(w, with_replica_quantile(cfg, q), choice.model, steps=steps, strategies=("predictive",),
                          workers=1)
        out["predictive_at_replica_quantile"][f"{q:g}"] = run_row(m)
    # the same autoscaler starting replicas ahead for the high tier's services only (policy.replica_ahead_tiers)
    high_only = with_replica_quantile(cfg, quantiles[0])
    high_only = high_only.model_copy(update={"policy": high_only.policy.model_copy(
        update={"replica_ahead_tiers": ["high"]})})
    (m,) = run_replay(w, high_only, choice.model, steps=steps, strategies=("predictive",), workers=1)
    out["predictive_high_tier_ahead"] = run_row(m)
    # the plan acting on the forecast for the services only, the batch tenants planned reactively (the replay's
    # forecast_for knob): what of predictive's batch unmet above reactive's the batch tenants' forecast costs
    (m,) = run_replay(w, with_replica_quantile(cfg, quantiles[0]), choice.model, steps=steps,
                      settings=[("predictive", {FORECAST_FOR: "services"})], workers=1)
    out["predictive_batch_reactive"] = run_row(m)
    # one change, the forecaster: the daily seasonal naive (recalibrated), which sees yesterday's rise at this hour
    seasonal = make_baseline(SEASONAL, cfg.forecaster.season_steps, tuple(cfg.forecaster.quantiles), refresh=10,
                             background=False)
    (m,) = run_replay(w, with_replica_quantile(cfg, quantiles[0]), seasonal, steps=steps, strategies=("predictive",),
                      workers=1)
    out["predictive_seasonal"] = {"forecaster": seasonal.name, **run_row(m)}
    # the product's choice (what the daemon and `simulate` now run): the start-up choice for the batch tenants and
    # the services on their window means (forecaster.services, daemon/forecasting/services.py), chosen on the
    # history before the window only, at each replica quantile
    out["predictive_product"] = {}
    for q in quantiles:
        product = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True, services=list(w.inference))
        (m,) = run_replay(w, with_replica_quantile(cfg, q), product.model, steps=steps, strategies=("predictive",),
                          workers=1)
        out["predictive_product"][f"{q:g}"] = {"forecaster": product.name, "replica_quantile": q, **run_row(m)}
    # the last of them with the skill gate on (the product's way to plan a tenant reactively where the forecast
    # has shown no skill, issue 40 item 2)
    out["predictive_product_gated"] = gated_product_row(w, cfg, quantiles[-1])
    if windows:  # one change, the forecaster: the one retrain chooses on the services' 10-minute windows
        wmodel, winfo = window_forecaster(w, cfg, (str(data), days, history_days, seed), epochs)
        (m,) = run_replay(w, with_replica_quantile(cfg, quantiles[0]), wmodel, steps=steps,
                          strategies=("predictive",), workers=1)
        out["predictive_windows"] = {"forecaster": wmodel.name, "choice": winfo, **run_row(m)}
        # and the daily seasonal naive (recalibrated) on the same windows, at every replica quantile
        out["predictive_windows_seasonal"] = {}
        for q in quantiles:
            wseason = seasonal_windows(cfg)
            (m,) = run_replay(w, with_replica_quantile(cfg, q), wseason, steps=steps, strategies=("predictive",),
                              workers=1)
            out["predictive_windows_seasonal"][f"{q:g}"] = {"forecaster": wseason.name, "replica_quantile": q,
                                                            **run_row(m)}
        # the last of them with the batch tenants planned reactively (forecast_for = services): what of its batch
        # unmet above reactive's the batch tenants' forecast costs
        q = quantiles[-1]
        wseason = seasonal_windows(cfg)
        (m,) = run_replay(w, with_replica_quantile(cfg, q), wseason, steps=steps,
                          settings=[("predictive", {FORECAST_FOR: "services"})], workers=1)
        out["predictive_windows_seasonal_batch_reactive"] = {"forecaster": wseason.name, "replica_quantile": q,
                                                             **run_row(m)}
    reactive = out["runs"]["reactive"]
    out["reactive_headrooms"] = {}
    for h in REACTIVE_HEADROOMS:
        m, rate_m = run_replay(with_headroom(w, h), cfg, None, steps=steps, settings=[("reactive", {}), PERFECT_RATE],
                               workers=workers)
        rate_rows[f"{h:g}"] = run_row(rate_m)
        s = m.summary()
        row = {"service_gpu_min": sum(s["tiers"][t]["inf_gpu_min"] for t in TIERS),
               "high_inf_throttled": s["tiers"]["high"]["inf_throttled"], "utilization": s["utilization"],
               "unmet_gpu_min": {t: s["tiers"][t]["unmet_gpu_min"] for t in TIERS}}
        out["reactive_headrooms"][f"{h:g}"] = row
    points = reactive_points(out)
    out.update(versus_reactive(out["runs"]["predictive"], out["runs"]["perfect"], reactive, points))
    for r in [*out["predictive_at_replica_quantile"].values(), out["predictive_high_tier_ahead"],
              out["predictive_batch_reactive"], out["predictive_seasonal"], *out["predictive_product"].values(),
              out["predictive_product_gated"],
              *([out["predictive_windows"], *out["predictive_windows_seasonal"].values(),
                 out["predictive_windows_seasonal_batch_reactive"]] if windows else [])]:
        r.update(versus_reactive(r, out["runs"]["perfect"], reactive, points))
    out["perfect_rate"] = perfect_rate_ceiling(rate_rows, nowcast, out["runs"]["predictive"], out["runs"]["perfect"],
                                               reactive, points)
    out["wall_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--cold-starts", default="1,3,5,9", help="minutes, comma-separated")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--replica-quantiles", default=None,
                    help="the predictive replica autoscaler's forecast quantiles (policy.replica_quantile), comma-"
                         "separated: the first is the predictive row, the others run beside it (default: the config's)")
    ap.add_argument("--history-days", type=float, default=2.0,
                    help="days of the trace before the window (the forecasters are chosen and fitted on them)")
    ap.add_argument("--window-forecaster", action="store_true",
                    help="also run predictive_windows: the forecaster retrain chooses on the services' 10-minute "
                         "windows (an LSTM trained once per bench run: minutes)")
    ap.add_argument("--epochs", type=int, default=None, help="predictive_windows' LSTM (default: retrain.epochs)")
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--only-gated-product", action="store_true",
                    help="add predictive_product_gated (at the last --replica-quantiles) to the committed "
                         "inference_servegen.json in --out, run with its days, history and seed, its other rows "
                         "left as they are")
    ap.add_argument("--seeds", default=None,
                    help="with --only-gated-product: the gated product on the workload drawn with each of these "
                         "seeds (comma-separated) at --cold-starts (default here 3,5,9), against reactive and the "
                         "perfect forecast on the same draw, into inference_servegen_seeds.json")
    ap.add_argument("--arrivals", choices=("moments", "fitted"), default="moments",
                    help="with --seeds: how the requests are drawn (daemon/sim/servegen.py); fitted writes "
                         "inference_servegen_seeds_fitted.json")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    if a.seeds and not a.only_gated_product:
        ap.error("--seeds goes with --only-gated-product")
    if a.arrivals != "moments" and not a.seeds:
        ap.error("--arrivals goes with --seeds")
    if a.only_gated_product:
        q = float(a.replica_quantiles.split(",")[-1]) if a.replica_quantiles else replica_quantile(Config())
        if a.seeds:
            colds = "3,5,9" if a.cold_starts == ap.get_default("cold_starts") else a.cold_starts
            run_seeds([int(x) for x in a.seeds.split(",")], [float(x) for x in colds.split(",")], a, q)
            return
        add_gated_product(a.out / "inference_servegen.json", a.data_dir or default_data_dir(), q)
        return
    doc = {**provenance.started(), "bench": "inference", "days": a.days, "history_days": a.history_days, "seed": a.seed,
           "command": "python bench/inference_bench.py " + " ".join(sys.argv[1:]),
           "targets": {"gap_closed_min": 0.25, "gap_closed_goal": 0.5, "from_cold_start_min": 3,
                       "batch_unmet_no_higher": True}, "cases": []}
    quantiles = ([float(x) for x in a.replica_quantiles.split(",")] if a.replica_quantiles
                 else [replica_quantile(Config())])
    doc["replica_quantiles"] = quantiles
    for c in (float(x) for x in a.cold_starts.split(",")):
        print(f"cold start {c:g} min...", file=sys.stderr, flush=True)
        doc["cases"].append(run_case(c, a.days, a.seed, a.data_dir or default_data_dir(), a.workers,
                                     quantiles, a.history_days, a.epochs, a.window_forecaster))
    provenance.write(doc, a.out, "inference_servegen.json")


if __name__ == "__main__":
    main()
