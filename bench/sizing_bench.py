"""The GPUs each strategy needs for the same SLO (issue 40, item 3), per trace: the smallest cluster in whole nodes
on which static (a 20% pool), reactive, predictive (the skill gate on) and the perfect forecast each meet the SLO
(high tier <= 0.1% of its demand unmet, normal <= 2%) over the replayed window (daemon/sim/sizing.py), with the
forecaster chosen on the trace's own history before the window as bench/replay_bench.py chooses it. Writes
bench/out/sizing_<trace>.json: every size tried, the found size's GPUs, GPU-hours, allocated and busy utilization,
predictive's savings and the issue's targets (bench/targets.py SIZING) met or not. On a trace with inference
services (servegen) every strategy is sized at each setting of its services' knobs (the HPA headroom and
scale-down stabilization window, and predictive's replica quantile; sizing.sweep) and its figure is its fewest
GPUs over them, the setting named.

    nice -n 10 python bench/sizing_bench.py [--cases synthetic,helios,alibaba,servegen] [--days 1] [--out bench/out]
                                            [--quick-forecaster | --seasonal-windows] [--suffix _lstm]
                                            [--headrooms 0.5,1,2,3] [--replica-quantiles 0.5,0.9]
                                            [--stabilizations 300,900]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import provenance  # noqa: E402  (bench/, next to this script)
import targets  # noqa: E402
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference_bench import seasonal_windows  # noqa: E402
from replay_bench import fit_forecaster, load  # noqa: E402

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.sim import sizing  # noqa: E402
from daemon.sim.own import choose_forecaster  # noqa: E402
from daemon.sim.servegen import servegen  # noqa: E402

# ServeGen's services' cold start in the sizing: the middle of the inference bench's 1-9 min sweep
SERVEGEN_COLD_START_MIN = 5.0
ROOT = Path(__file__).resolve().parent.parent


def verdicts(case: str, savings: dict) -> dict:
    """Each of the case's targets: met or not, with the gap (what predictive saves less the goal)."""
    out = {}
    for key, t in targets.SIZING.get(case, {}).items():
        got = savings.get(t["against"])
        out[key] = {**t, "saving": got, "met": None if got is None else got >= t["at_least"],
                    "gap": None if got is None else got - t["at_least"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="synthetic,helios,alibaba")
    ap.add_argument("--days", type=float, default=1.0, help="measured days per trace")
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--model-dir", type=Path, default=ROOT / "models")
    ap.add_argument("--fit-epochs", type=int, default=None, help="epochs of the LSTM fitted on each trace's history")
    ap.add_argument("--forecast-every", type=int, default=1)
    ap.add_argument("--headrooms", type=lambda v: tuple(map(float, v.split(","))), default=sizing.SERVICE_HEADROOMS,
                    help="the services' HPA headrooms each strategy is sized at (inference traces)")
    ap.add_argument("--stabilizations", type=lambda v: tuple(map(float, v.split(","))),
                    default=sizing.SERVICE_STABILIZATIONS,
                    help="the services' HPA scale-down stabilization windows (s) every strategy is sized at")
    ap.add_argument("--replica-quantiles", type=lambda v: tuple(map(float, v.split(","))),
                    default=sizing.REPLICA_QUANTILES, help="predictive's replica autoscaler's forecast quantiles")
    ap.add_argument("--suffix", default="", help="write sizing_<trace><suffix>.json (another forecaster choice beside "
                    "the published run)")
    ap.add_argument("--seasonal-windows", action="store_true",
                    help="the forecaster is the daily seasonal naive (recalibrated) on the trace's 10-minute windows, "
                    "the one that closed the inference gap at p90 in bench/inference_bench.py, not the one chosen "
                    "on the history (servegen only)")
    ap.add_argument("--quick-forecaster", action="store_true",
                    help="choose among the baselines on the history before the window (the daemon's start-up choice, "
                    "no LSTM trained): on the loaded shared box an LSTM's training and forecasts take the hour")
    ap.add_argument("--flat-rate-limits", action="store_true",
                    help="every strategy's gateway keeps ratelimits' first level whatever the load, as the static "
                    "strategy's does (its plan never tightens): a comparison where only the capacity policy differs "
                    "(needs --suffix)")
    a = ap.parse_args()
    if a.flat_rate_limits and not a.suffix:
        ap.error("--flat-rate-limits writes its own JSON beside the published run: give it a --suffix")
    torch.set_num_threads(1)
    epochs = a.fit_epochs if a.fit_epochs is not None else Config().retrain.epochs
    cfg, data, slo = Config(), default_data_dir(), sizing.SLO()
    if a.flat_rate_limits:   # the load levels the plan tightens by are gone: every plan's limits are level 0's
        cfg = cfg.model_copy(update={"ratelimits": cfg.ratelimits.model_copy(
            update={"levels": cfg.ratelimits.levels[:1]})})
    commit = provenance.commit()  # the code imported now, whatever is committed while the bench runs
    for case in a.cases.split(","):
        out = {**provenance.started(), "commit": commit}
        if case == "servegen":  # the inference services beside synthetic batch, as bench/inference_bench.py builds them
            tight = {t: min(lvl.rate(t) for lvl in Config().ratelimits.levels) for t in ("high", "normal")}
            w, _ = servegen(data, days=a.days, cold_start_s=SERVEGEN_COLD_START_MIN * 60, tight_limits=tight,
                            gpus_per_node=cfg.cluster.gpus_per_node)
        else:
            w, _ = load(case, a.days, data)
        steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
        t0 = time.perf_counter()
        if a.seasonal_windows:
            if case != "servegen":
                ap.error("--seasonal-windows: servegen only (its rates come in 10-minute windows)")
            model = seasonal_windows(cfg)
            chosen = {"name": model.name, "why": "--seasonal-windows: set, not chosen on the history"}
        elif a.quick_forecaster:
            # as the daemon and `simulate` choose: the services (if any) on their own window model
            c = choose_forecaster(w.demand.iloc[: w.start], cfg, 60, quick=True, services=list(w.inference or ()))
            model, chosen = c.model, c.details()
        else:
            model, chosen = fit_forecaster(w, cfg, a.model_dir, epochs)
        fit_s = time.perf_counter() - t0
        print(f"{case}: forecaster {chosen.get('name', model.name)} ({fit_s:.0f} s)", flush=True)
        t1 = time.perf_counter()
        say = lambda line: print(f"  {line}", flush=True)  # noqa: E731
        swept = None
        if w.inference:  # each strategy at each setting of its services' knobs, its fewest GPUs over them
            settings = sizing.service_settings(headrooms=a.headrooms, quantiles=a.replica_quantiles,
                                               stabilizations=a.stabilizations)
            swept = sizing.sweep(w, cfg, model, steps=steps, settings=settings, slo=slo,
                                 forecast_every=a.forecast_every, progress=say)
            found = sizing.chosen(swept)
        else:
            found = sizing.size_all(w, cfg, model, steps=steps, slo=slo, forecast_every=a.forecast_every,
                                    progress=say)
        sv = sizing.savings(found)
        out.update(case=case, workload=w.name, tenants=len(w.tiers), gpus_per_node=w.gpus_per_node,
                   own_nodes=sizing.node_count(w), own_gpus=w.capacity, steps=steps,
                   window=[str(w.demand.index[w.start]), str(w.demand.index[w.start + steps - 1])],
                   forecaster=model.name, forecaster_choice=chosen, forecaster_fit_seconds=fit_s,
                   forecaster_fit_epochs=None if a.quick_forecaster else epochs, forecast_every=a.forecast_every,
                   flat_rate_limits=a.flat_rate_limits,
                   slo=dataclasses.asdict(slo),
                   sizing_seconds=time.perf_counter() - t1,
                   strategies={s: z.summary() for s, z in found.items()}, savings=sv, targets=verdicts(case, sv))
        if swept is not None:  # the setting each strategy was sized at, and every setting's search
            out.update(service_cold_start_min=SERVEGEN_COLD_START_MIN, service_settings=settings,
                       strategies={s: x.summary() for s, x in swept.items()})
        provenance.finished(out)
        a.out.mkdir(parents=True, exist_ok=True)
        path = a.out / f"sizing_{case}{a.suffix}.json"
        path.write_text(json.dumps(out, indent=2) + "\n")
        print("\n".join(sizing.lines(found) if swept is None else sizing.swept_lines(swept)))
        print(f"wrote {path} ({out['bench_wall_seconds']:.0f} s, load {out['load_average_1min_at_start']:.1f} -> "
              f"{out['load_average_1min_at_end']:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
