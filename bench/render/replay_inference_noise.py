"""How far the multi-seed runs' batch-tier misses are from noise (docs/replay.md, under the seeds table of
bench/inference_bench.py --seeds): computed from the runs the JSON holds, nothing measured apart.

Issue 40's check "each batch tier's unmet no higher than reactive's" is read per run, against reactive read off at
the gated run's service GPU-hours. A run's difference has three sources of spread the check does not see: the draw
(seed to seed), the path of one replay (the same draw at another cold start: reactive's batch unmet does not move
with the cold start, the gated run's does), and the read-off (reactive's points are a headroom apart, joined by a
straight line). This block puts a number on each and sets every miss against them."""

from __future__ import annotations

import math
import statistics

from bench.render.common import n

BATCH = ("normal", "low")


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _gated(r: dict) -> dict:
    return r["predictive_product_gated"]


def _rel(r: dict, t: str | None) -> float | None:
    """The gated run's unmet of batch tier ``t`` (None: normal + low) relative to reactive's read off at its
    service GPU-hours; None where reactive's headrooms do not span them."""
    g = _gated(r)
    un = g.get("reactive_unmet_gpu_min_at_predictive_gpu") or {}
    tiers = BATCH if t is None else (t,)
    if any(un.get(x) is None for x in tiers):
        return None
    theirs = sum(un[x] for x in tiers)
    mine = sum(g["tiers"][x]["unmet_gpu_min"] for x in tiers)
    return None if theirs <= 0 else (mine - theirs) / theirs


def _within_draw_sd(runs: list[dict], t: str) -> tuple[float, int] | None:
    """The pooled standard deviation of ``_rel`` across each draw's cold starts (the draws with two or more), and
    its degrees of freedom."""
    by: dict[int, list[float]] = {}
    for r in runs:
        v = _rel(r, t)
        if v is not None:
            by.setdefault(r["seed"], []).append(v)
    groups = [v for v in by.values() if len(v) > 1]
    dof = sum(len(v) - 1 for v in groups)
    if not dof:
        return None
    return math.sqrt(sum(statistics.variance(v) * (len(v) - 1) for v in groups) / dof), dof


def _reactive_same_each_cold_start(runs: list[dict]) -> bool:
    """Whether every draw's reactive batch unmet (at each headroom) is the same at each of its cold starts."""
    seen: dict[int, list] = {}
    for r in runs:
        key = [r["runs"]["reactive"]["tiers"][t]["unmet_gpu_min"] for t in BATCH] + [
            p["unmet_gpu_min"][t] for p in r["reactive_headrooms"].values() for t in BATCH]
        if seen.setdefault(r["seed"], key) != key:
            return False
    return True


def _read_off_error(runs: list[dict], t: str) -> tuple[float, float, int] | None:
    """Reactive's own curve against the straight line the read-off draws: per draw (its first run), each inner
    headroom point's unmet relative to the line through the points either side of it (over two headroom steps; a
    read-off joins one). Mean, standard deviation and how many points."""
    devs, done = [], set()
    for r in runs:
        if r["seed"] in done:
            continue
        done.add(r["seed"])
        react = r["runs"]["reactive"]
        pts = sorted([(sum(x["inf_gpu_min"] for x in react["tiers"].values()), react["tiers"][t]["unmet_gpu_min"])]
                     + [(p["service_gpu_min"], p["unmet_gpu_min"][t]) for p in r["reactive_headrooms"].values()])
        for (g0, v0), (g1, v1), (g2, v2) in zip(pts, pts[1:], pts[2:]):
            line = v0 + (v2 - v0) * (g1 - g0) / (g2 - g0) if g2 > g0 else v0
            if line > 0:
                devs.append((v1 - line) / line)
    if len(devs) < 2:
        return None
    return statistics.mean(devs), statistics.stdev(devs), len(devs)


def _where(r: dict, t: str) -> str:
    """A tier's unmet split into its batch jobs' and its services' (gated vs reactive's read-off), where the JSON
    has the split: whose unmet the miss is."""
    g = _gated(r)
    svc = g.get("reactive_services_unmet_gpu_min_at_predictive_gpu") or {}
    whole = (g.get("reactive_unmet_gpu_min_at_predictive_gpu") or {}).get(t)
    mine = g["tiers"][t].get("inf_unmet_gpu_min")
    if svc.get(t) is None or whole is None or mine is None:
        return ""
    batch = g["tiers"][t]["unmet_gpu_min"] - mine
    return (f"; its batch jobs' {n(batch)} vs {n(whole - svc[t])}, its services' {n(mine)} vs {n(svc[t])}"
            if mine or svc[t] else "")


def _normal_split(runs: list[dict]) -> tuple[int, int, int] | None:
    """Over the runs with the services' split: how many, in how many the normal tier's batch jobs' unmet is above
    reactive's read-off, and in how many its services' is below (None: no run has the split)."""
    k = above = below = 0
    for r in runs:
        g = _gated(r)
        svc = (g.get("reactive_services_unmet_gpu_min_at_predictive_gpu") or {}).get("normal")
        whole = (g.get("reactive_unmet_gpu_min_at_predictive_gpu") or {}).get("normal")
        mine = g["tiers"]["normal"].get("inf_unmet_gpu_min")
        if svc is None or whole is None or mine is None:
            continue
        k += 1
        above += g["tiers"]["normal"]["unmet_gpu_min"] - mine > whole - svc
        below += mine < svc
    return (k, above, below) if k else None


def seeds_noise(d: dict) -> str:
    """The block's paragraph (empty with fewer than two readable runs)."""
    runs = d["runs"]
    rel = {t: [v for v in (_rel(r, t) for r in runs) if v is not None] for t in (*BATCH, None)}
    if len(rel[None]) < 2:
        return ""
    name = {"normal": "normal", "low": "low", None: "normal + low"}
    spread = "; ".join(f"{name[t]} {_signed(statistics.mean(v))} (sd {100 * statistics.stdev(v):.1f} pt, above 0 "
                       f"in {sum(x > 0 for x in v)})" for t, v in rel.items())
    # how many runs above 0 a normal spread with each tier's mean and sd gives: what the per-run check can expect
    expect = {t: len(v) * 0.5 * (1 + math.erf(statistics.mean(v) / (statistics.stdev(v) * math.sqrt(2))))
              for t, v in rel.items() if statistics.stdev(v) > 0}
    within = {t: _within_draw_sd(runs, t) for t in BATCH}
    same = _reactive_same_each_cold_start(runs)
    parts = [f"**How far the misses are from noise.** Each batch tier's unmet relative to reactive's read-off, over "
             f"the {len(rel[None])} runs (mean, its standard deviation from run to run, and the runs above "
             f"reactive's): {spread}."]
    if len(expect) == len(rel):
        parts.append("A normal spread with those means and sds puts "
                     + ", ".join(f"{expect[t]:.1f}" for t in rel) + f" of {len(rel[None])} runs above 0 ("
                     + ", ".join(name[t] for t in rel)
                     + "): the misses a per-run check should expect of a mean gain of that size and spread.")
    if all(w is not None for w in within.values()):
        parts.append(
            ("Reactive's batch unmet is the same at every cold start of a draw (its replicas serve later, they take "
             "the same GPUs), " if same else "Across the cold starts of a draw, ")
            + "the gated run's moves from one cold start to another by a pooled sd of "
            + " and ".join(f"{within[t][0] * 100:.1f} pt ({t}, {within[t][1]} degrees of freedom)" for t in BATCH)
            + ": the path of one replay, which no single run averages out.")
    misses = []
    for r in runs:
        for t in BATCH:
            v, un = _rel(r, t), (_gated(r).get("reactive_unmet_gpu_min_at_predictive_gpu") or {}).get(t)
            if v is None or v <= 0:
                continue
            g = _gated(r)
            other = [x for x in BATCH if x != t][0]
            d_other = g["tiers"][other]["unmet_gpu_min"] - g["reactive_unmet_gpu_min_at_predictive_gpu"][other]
            w = within[t]
            misses.append(
                f"seed {r['seed']} at {r['cold_start_min']:g} min, {t} "
                f"{g['tiers'][t]['unmet_gpu_min'] - un:+,.0f} GPU-min ({_signed(v)}"
                + (f", {v / w[0]:.1f} within-draw sd" if w is not None and w[0] > 0 else "")
                + f"{_where(r, t)}; {other} {d_other:+,.0f} in the same run)")
    if misses:
        parts.append("The misses: " + "; ".join(misses) + ".")
    split = _normal_split(runs)
    if split is not None:
        k, above, below = split
        parts.append(f"Taken apart, the normal tier's batch jobs' unmet is above reactive's in {above} of {k} runs "
                     f"and its services' below reactive's in {below} of {k}: where the normal tier's batch jobs pay "
                     "for the services' replicas ahead, its services' gain can hide it from the tier's check.")
    err = {t: _read_off_error(runs, t) for t in BATCH}
    if all(e is not None for e in err.values()):
        parts.append("The read-off: reactive's own points depart from the straight line through the points either "
                     "side of them (over two headroom steps; a read-off joins one) by "
                     + " and ".join(f"{_signed(err[t][0])} on average, sd {100 * err[t][1]:.1f} pt ({t}, "
                                    f"{err[t][2]} points)" for t in BATCH)
                     + "; a curve that bends upwards (a negative average) puts the line above it, in the gated "
                       "run's favour.")
    return " ".join(parts)
