"""How much of the high tier's rises its own demand series could foresee: the ceiling of the simplest signal in it.

The replay's foresight what-ifs (docs/replay.md, "How far ahead a forecast must see") find that on Helios the engine
meets #26's targets when the forecast sees most high-tier rises as far ahead as a preemption drains, and no false
alarm. A rise is a step whose demand (running + pending GPUs) is above the step before. The one regularity a series
of counts offers at that range is that rises come in bursts; this measures what a forecaster built on it would
catch: after each rise it expects another for the next `after` steps, so at step s it alarms when a rise came in
the `after` steps up to s, and a rise at step t is seen the drain ahead when it alarmed at t - drain. Per case, over
the high tier's series in the replay's measured window: the rises, the share of them seen so (recall), the share of
steps it alarms at, and the share of alarms a rise follows within the drain (precision). Other forecasters (the
LSTM with its calendar, the baselines) are scored on the same peaks in docs/forecasting.md; this is the burst
signal alone, which they may learn from.

    python bench/rises_bench.py [--cases helios,helios_unseen,synthetic] [--days 2] [--out bench/out]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import provenance  # noqa: E402  (bench/, next to this script)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.config import Config  # noqa: E402
from daemon.forecasting.retrain import default_data_dir  # noqa: E402
from daemon.sim import workloads  # noqa: E402
from daemon.sim.replay import rises  # noqa: E402

AFTER = (1, 5, 10, 30)   # steps an after-rise alarm lasts
# the cases as the replay bench loads them: the published Helios window, the one its figures do not use, synthetic
CASES = {
    "helios": dict(start=None, high_vc_names=None),
    "helios_unseen": dict(start="2020-05-24", high_vc_names=["vchbv", "vcMod"]),
    "synthetic": dict(seed=7),
}


def after_rise_alarm(values: np.ndarray, first: int, drain: int, after: int) -> dict:
    """``values`` [step, series]; the steps scored are ``first`` on (earlier ones are history the alarm may read).

    Per series: a rise at t (values[t] > values[t-1], both observed). The alarm at s is on when a rise came at some
    step in [s - after + 1, s]; the rise at t is seen when the alarm at t - drain is on. Returns the rises scored,
    those seen, the steps scored, those alarming and those alarming with a rise in (s, s + drain]."""
    rise = rises(values)
    steps, n = rise.shape
    # alarm[s]: a rise in the `after` steps up to s (a running count over the rises)
    c = np.cumsum(rise, axis=0)
    lagged = np.vstack([np.zeros((after, n), dtype=c.dtype), c[:-after]]) if after < steps else np.zeros_like(c)
    alarm = (c - lagged) > 0
    # a rise in (s, s + drain]: the rises' count from s + 1 to s + drain
    ahead = np.vstack([c[drain:], np.repeat(c[-1:], drain, axis=0)]) - c
    rise_soon = ahead > 0
    scored = np.arange(steps) >= first
    seen_ahead = np.zeros_like(rise)
    if drain < steps:
        seen_ahead[drain:] = alarm[:-drain] if drain else alarm
    # the last steps' "rise soon" looks past the window's end only as far as the trace goes
    tail = np.arange(steps) + drain < steps
    counted = rise & scored[:, None]
    return {"rises": int(counted.sum()), "seen": int((counted & seen_ahead).sum()),
            "steps": int(scored.sum() * n), "alarm_steps": int((alarm & scored[:, None]).sum()),
            "alarm_steps_scored": int((alarm & (scored & tail)[:, None]).sum()),
            "true_alarms": int((alarm & rise_soon & (scored & tail)[:, None]).sum())}


def measure(case: str, days: float, data: Path, drain: int) -> dict:
    spec = CASES[case]
    if case == "synthetic":
        w = workloads.synthetic(40, 1024, days, seed=spec["seed"], target_load=1.0)
    else:
        kw = {"start": spec["start"]} if spec["start"] else {}
        w = workloads.helios(data, **kw, days=days, history_days=7, high_vcs=2, high_vc_names=spec["high_vc_names"])
    high = [i for i, t in enumerate(w.tiers) if t == "high"]
    v = w.demand.to_numpy(dtype=float)[:, high]
    out = {"case": case, "workload": w.name, "window_start": str(w.demand.index[w.start]), "drain_steps": drain,
           "high_tier": [str(w.demand.columns[i]) for i in high], "measured_steps": int(len(v) - w.start),
           "by_after": {}}
    for a in AFTER:
        r = after_rise_alarm(v, w.start, drain, a)
        r["recall"] = r["seen"] / r["rises"] if r["rises"] else None
        r["alarm_share"] = r["alarm_steps"] / r["steps"] if r["steps"] else None
        r["precision"] = r["true_alarms"] / r["alarm_steps_scored"] if r["alarm_steps_scored"] else None
        out["by_after"][str(a)] = r
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--days", type=float, default=2.0, help="measured days, as the replay bench's sweep cases")
    ap.add_argument("--data", type=Path, default=None, help="the traces (default: ../shared/data)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    a = ap.parse_args()
    cases = [c for c in a.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown or not cases:
        raise SystemExit(f"--cases: choose from {', '.join(CASES)} (got {a.cases!r})")
    data = a.data or default_data_dir()
    drain = Config().source.simulator.drain_steps
    res = {"commit": provenance.commit(), "load_average_1min": provenance.load_average(), "after_steps": list(AFTER),
           "cases": {c: measure(c, a.days, data, drain) for c in cases}}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / "rises.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    for c, r in res["cases"].items():
        print(c, {k: (v["rises"], round(v["recall"] or 0, 3), round(v["alarm_share"] or 0, 3),
                      round(v["precision"] or 0, 3)) for k, v in r["by_after"].items()})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
