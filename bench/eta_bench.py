"""The start-time estimate (daemon/policy/eta.py) scored on the replay (daemon/sim/eta_replay.py): for every job
that waited and then started, the estimate made when it began to wait against its actual start, and again the ones
made 10, 30 and 60 minutes after (while it still waited: ``at_ages``); beside them the naive estimate (GPUs needed
ahead in the queue over the recent rate of GPUs freed). Issue 39's targets (bench/targets.py
ETA): the p90 covers 85-95% of starts, the median absolute error is at most half the naive's.

The replay runs the reactive strategy (the engine with no forecast): its holds read nothing ahead, and no model is
needed. One JSON per trace, rendered into docs/eta.md by bench/render_docs.py:

    nice -n 10 python bench/eta_bench.py --cases synthetic --days 1
    nice -n 10 python bench/eta_bench.py --cases helios --days 3 --breakdown   # a day of Helios has few waits (42)
    nice -n 10 python bench/eta_bench.py --cases helios --days 3 --start 2020-05-24 --suffix _second --breakdown
    nice -n 10 python bench/eta_bench.py --cases helios --days 3 --start 2020-05-04 --suffix _unseen --breakdown
    nice -n 10 python bench/eta_bench.py --cases helios --days 3 --start 2020-05-09 --suffix _heldout_a --breakdown
    nice -n 10 python bench/eta_bench.py --cases helios --days 3 --start 2020-05-19 --suffix _heldout_b --breakdown

The default Helios window starts 2020-05-14; the second one (from 2020-05-24) was looked at while the p50's blend
was chosen; the unseen one (from 2020-05-04) was run once, after: nothing was chosen on it (docs/eta.md). The
held-out ones (from 2020-05-09 and 2020-05-19) were first run once the p50's release levels were fixed.
``--breakdown`` adds where the error comes from (daemon/sim/eta_breakdown.py): the scored jobs' errors by tier,
GPUs, wait, jobs that overtook them and jobs ahead that left, the running jobs' end errors, and the replay scored
again with the unknowns made known (hindsight: evidence, not an estimator).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="synthetic,helios")
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--start", default=None, help="Helios: the first measured day (default 2020-05-14)")
    ap.add_argument("--suffix", default="", help="appended to the JSON's name (eta_<case><suffix>.json)")
    ap.add_argument("--breakdown", action="store_true", help="add where the error comes from (and hindsight)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))

    import provenance  # bench/, next to this script
    import targets

    from daemon.config import Config
    from daemon.forecasting.retrain import default_data_dir
    from daemon.sim import workloads
    from daemon.sim.eta_breakdown import BreakdownHook, HindsightHook, breakdown
    from daemon.sim.eta_replay import run_eta

    cfg = Config()
    for case in a.cases.split(","):
        if case not in ("synthetic", "helios"):
            print(f"--cases: unknown case {case!r} (synthetic, helios)", file=sys.stderr)
            return 2
        out = provenance.started()
        w = workloads.synthetic(40, 1024, a.days, seed=7, target_load=1.0) if case == "synthetic" else \
            workloads.helios(default_data_dir(), days=a.days, **({"start": a.start} if a.start else {}))
        steps = min(int(a.days * 1440), len(w.demand) - w.start - 1)
        t0 = time.perf_counter()
        run = dict(cfg=cfg, steps=steps, strategy="reactive", knobs={"headroom": 0.05})
        m, hook = run_eta(w, **run, hook_class=BreakdownHook if a.breakdown else None)
        out.update({"case": case, "workload": w.name, "days": a.days, "steps": steps, "strategy": "reactive",
                    "first_measured": str(w.demand.index[w.start]),
                    "headroom": 0.05, "replay_wall_s": round(time.perf_counter() - t0, 1),
                    "high_unmet_gpu_min": float(sum(m.unmet["high"]) * m.step_min),
                    "eta": hook.score.summary(), "targets": targets.ETA})
        if a.breakdown:
            out["breakdown"] = breakdown(hook)
            out["hindsight"] = {}
            for name, known in (("running_ends_known", {"ends"}), ("withdrawals_known", {"withdrawals"}),
                                ("both_known", {"ends", "withdrawals"})):
                _, hh = run_eta(w, **run, hook_class=HindsightHook, fates=hook.fates, known=frozenset(known))
                s = hh.score.summary()
                out["hindsight"][name] = {k: s[k] for k in ("p50_median_abs_error_min", "error_vs_naive",
                                                             "p90_coverage", "jobs_waited_and_started")}
        a.out.mkdir(parents=True, exist_ok=True)
        path = a.out / f"eta_{case}{a.suffix}.json"
        path.write_text(json.dumps(provenance.finished(out), indent=1) + "\n")
        print(path, json.dumps(out["eta"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
