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


def structural(runs: list[dict], share: float = SHARE) -> list[dict]:
    """The high-tier shortages even the best perfect-forecast setting leaves: per accepted-type set on a mixed
    fleet (its run's ``by_spec`` high-tier figures), else for the high tier as a whole. Each is {"where": the type
    set or None, "unmet_gpu_min", "demand_gpu_min", "label": the perfect setting}; a part counts where its unmet is
    at least ``share`` of its demand and at least one GPU-minute. Lower tiers are left out: the cluster is meant
    to leave their demand waiting when it is full."""
    best = perfect_best(runs)
    if best is None:
        return []
    spec = best.get("by_spec") or {}
    if spec and all("high_unmet_gpu_min" in v for v in spec.values()):
        parts = [(k, v["high_unmet_gpu_min"], v["high_demand_gpu_min"]) for k, v in spec.items()]
    else:  # one model, or a JSON written before by_spec had the high tier's part
        h = best["tiers"]["high"]
        parts = [(None, h["unmet_gpu_min"], h.get("demand_gpu_min", h["unmet_gpu_min"]))]
    return [{"where": k, "unmet_gpu_min": u, "demand_gpu_min": d, "label": best["label"]}
            for k, u, d in sorted(parts, key=lambda x: -x[1]) if u >= 1.0 and u >= share * d]


def line(short: list[dict]) -> str | None:
    """The one line that says capacity, not forecasting, is short; None where nothing is."""
    if not short:
        return None
    def on(x: dict) -> str:
        return f" on {x['where']}" if x["where"] else ""

    first, rest = short[0], short[1:]
    more = "".join(f", {x['unmet_gpu_min']:,.0f} GPU-min{on(x)}" for x in rest)
    return (f"even the perfect forecast leaves {first['unmet_gpu_min']:,.0f} GPU-min of high-tier demand unmet"
            f"{on(first)}{more}: capacity, not forecasting, is short")
