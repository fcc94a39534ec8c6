"""Whether a replay's shortage is capacity's, not forecasting's (pure: reads the replay JSON's runs).

The perfect forecast is the same engine fed the true future. Where even its best setting leaves high-tier demand
unmet, a better forecast cannot serve it: the cluster (or, on a mixed fleet, the types a tenant accepts) is too
small for that demand. Saying so in one line spares the reader the per-type unmet figures of every setting.
"""

from __future__ import annotations

# unmet high-tier demand under the perfect forecast counts as a shortage from this share of that demand on
SHARE = 0.01


def _high(s: dict) -> float:
    return s["tiers"]["high"]["unmet_gpu_min"]


def perfect_best(runs: list[dict]) -> dict | None:
    """The perfect-forecast setting with the least high-tier unmet demand (the highest utilization among equals),
    None where the replay ran no perfect forecast."""
    perf = [x for x in runs if x["strategy"] == "perfect"]
    return min(perf, key=lambda x: (_high(x), -x["utilization"])) if perf else None


def _parts(run: dict, typed: bool) -> list[tuple[str | None, float, float]]:
    """(type set or None, high-tier unmet, high-tier demand) of one run: per accepted-type set where `typed` (its
    ``by_spec``; none where the run has no such figures), else the high tier as a whole."""
    if typed:
        spec = run.get("by_spec") or {}
        return [(k, v["high_unmet_gpu_min"], v["high_demand_gpu_min"]) for k, v in spec.items()
                if "high_unmet_gpu_min" in v]
    h = run["tiers"]["high"]
    return [(None, h["unmet_gpu_min"], h.get("demand_gpu_min", h["unmet_gpu_min"]))]


def structural(runs: list[dict], share: float = SHARE) -> list[dict]:
    """The high-tier shortages no setting replayed avoids, the best perfect-forecast setting's included: per
    accepted-type set on a mixed fleet (the runs' ``by_spec`` high-tier figures), else for the high tier as a
    whole. Each is {"where": the type set or None, "unmet_gpu_min", "demand_gpu_min", "label": the setting that left
    the least, "strategy": its strategy}; a part counts where that least is at least ``share`` of its demand and at
    least one GPU-minute. The perfect forecast is not always the least: another setting (a forecast's headroom
    above the true future) may serve more, and then that part is not capacity's alone to the extent it did. Lower
    tiers are left out: the cluster is meant to leave their demand waiting when it is full."""
    best = perfect_best(runs)
    if best is None:
        return []
    spec = best.get("by_spec") or {}
    typed = bool(spec) and all("high_unmet_gpu_min" in v for v in spec.values())
    least: dict[str | None, tuple[float, float, dict]] = {}
    # the perfect forecast first, so that it is named where another setting only ties it
    for run in [best] + [r for r in runs if r is not best]:
        for k, u, d in _parts(run, typed):
            if k not in least or u < least[k][0]:
                least[k] = (u, d, run)
    parts = sorted(((k, u, d, r) for k, (u, d, r) in least.items()), key=lambda x: -x[1])
    return [{"where": k, "unmet_gpu_min": u, "demand_gpu_min": d, "label": r["label"], "strategy": r["strategy"]}
            for k, u, d, r in parts if u >= 1.0 and u >= share * d]


def line(short: list[dict]) -> str | None:
    """The one line that says capacity, not forecasting, is short; None where nothing is."""
    if not short:
        return None
    def on(x: dict) -> str:
        return f" on {x['where']}" if x["where"] else ""

    first, rest = short[0], short[1:]
    more = "".join(f", {x['unmet_gpu_min']:,.0f} GPU-min{on(x)}" for x in rest)
    if all(x.get("strategy", "perfect") == "perfect" for x in short):
        return (f"even the perfect forecast leaves {first['unmet_gpu_min']:,.0f} GPU-min of high-tier demand unmet"
                f"{on(first)}{more}: capacity, not forecasting, is short")
    by = ", ".join(dict.fromkeys(x["label"] for x in short))
    return (f"even the setting replayed that served the high tier best ({by}) leaves {first['unmet_gpu_min']:,.0f} "
            f"GPU-min of its demand unmet{on(first)}{more}, and the perfect forecast more: capacity, not forecasting, "
            "is short")
