"""Renderer for docs/forecasting.md's "whom the gate trusts on ServeGen": bench/inference_breakdown_bench.py's
services one by one (throttled requests and GPU-minutes per strategy) and the skill gate's per-tenant verdicts."""

from __future__ import annotations

from bench.render.common import block, exists, load, n, pct, source, table

FILE = "inference_breakdown_servegen.json"
SHOWN = 10   # services per cold start in the table, by reactive's throttled requests (the rest summed)
RUNS = ("reactive", "product", "product_gated", "perfect")


def _ratio(v: dict | None) -> str:
    if not v or not v.get("scored") or v.get("forecast_loss") is None or not v.get("reactive_loss"):
        return "-"
    return pct(v["forecast_loss"] / v["reactive_loss"], 0)


def _on_share(case: dict, t: str) -> float:
    g = (case["runs"]["product_gated"].get("skill_gate_by_tenant") or {}).get(t) or {}
    return g.get("steps_on_forecast", 0) / max(case["steps"], 1)


def _verdict(case: dict, t: str) -> dict | None:
    g = (case["runs"]["product_gated"].get("skill_gate_by_tenant") or {}).get(t) or {}
    return g.get("verdict")


def _scored_at(case: dict, t: str) -> str:
    """" at p99" where the gate scored service `t` at its tier's policy.skill_gate.service_quantile (runs before
    that key, or with its tier not listed: scored at policy.quantile, nothing said)."""
    q = (case["skill_gate"].get("service_quantile") or {}).get(case["runs"]["reactive"]["services"][t]["tier"])
    return f" at p{100 * q:g}" if q else ""


def _case(case: dict) -> list[str]:
    runs = case["runs"]
    svc = runs["reactive"]["services"]
    order = sorted(svc, key=lambda t: -svc[t]["throttled"])
    rows = []
    for t in order[:SHOWN]:
        thr = " / ".join(n(runs[r]["services"][t]["throttled"]) for r in RUNS)
        gpu = " / ".join(n(runs[r]["services"][t]["gpu_min"]) for r in RUNS[:3])
        rows.append([t, svc[t]["tier"], thr, gpu, pct(_on_share(case, t), 0), _ratio(_verdict(case, t))])
    rest = order[SHOWN:]
    if rest:
        thr = " / ".join(n(sum(runs[r]["services"][t]["throttled"] for t in rest)) for r in RUNS)
        gpu = " / ".join(n(sum(runs[r]["services"][t]["gpu_min"] for t in rest)) for r in RUNS[:3])
        rows.append([f"the other {len(rest)}", "", thr, gpu, "", ""])
    high = [t for t in order if svc[t]["tier"] == "high"]
    top = max(high, key=lambda t: svc[t]["throttled"]) if high else None
    tot = {r: runs[r]["tiers"]["high"]["inf_throttled"] for r in RUNS}
    out = [f"**Cold start {case['cold_start_min']:g} min** (replicas at p{100 * case['replica_quantile']:.0f}; "
           f"{case['capacity_gpus']:,} GPUs): the high tier throttles {n(tot['reactive'])} requests under reactive, "
           f"{n(tot['product'])} under the product with the gate off, {n(tot['product_gated'])} with it on, "
           f"{n(tot['perfect'])} under the perfect forecast.", ""]
    if top is not None:
        s = {r: runs[r]["services"][top] for r in RUNS}
        out += [f"Of reactive's, {pct(s['reactive']['throttled'] / max(tot['reactive'], 1), 0)} are {top}'s; the "
                f"forecast cuts them to {n(s['product']['throttled'])} with "
                f"{s['product']['gpu_min'] / max(s['reactive']['gpu_min'], 1):.1f}x its reactive GPU-minutes; the "
                f"gate kept it on the forecast {pct(_on_share(case, top), 0)} of the steps (its forecast's replicas "
                f"lose {_ratio(_verdict(case, top))} of the reactive holds'{_scored_at(case, top)} at the end; it "
                f"needs <= "
                f"{pct(1 - case['skill_gate']['margin'], 0)}), and gated it throttles "
                f"{n(s['product_gated']['throttled'])}.", ""]
    out.append(table(["service", "tier", "throttled: reactive / product / gated / perfect",
                      "GPU-min: reactive / product / gated", "gated: steps on the forecast",
                      "gate's loss ratio at the end"], rows))
    tiers = dict(case["tiers"]) if isinstance(case.get("tiers"), list) else (case.get("tiers") or {})
    batch = case["batch_tenants"]
    high = [t for t in batch if tiers.get(t) == "high"]
    unmet = "; ".join(f"{tier}: " + " / ".join(n(runs[r]["tiers"][tier]["unmet_gpu_min"]) for r in RUNS)
                      for tier in ("normal", "low"))
    out += [""]
    if high:   # the only batch verdicts the plan reads (a normal or low tenant's holds follow no forecast)
        q = (case["skill_gate"].get("batch_quantile") or {}).get("high")
        out += ["High-tier batch tenants (the only batch verdicts the plan reads"
                + (f"; scored at p{100 * q:g}" if q else "") + "): "
                + "; ".join(f"{t} on the forecast {pct(_on_share(case, t), 0)} of the steps, its forecast's holds "
                            f"losing {_ratio(_verdict(case, t))} of the reactive holds' at the end" for t in high)
                + f" (it needs <= {pct(1 - case['skill_gate']['margin'], 0)}).", ""]
    rest = [t for t in batch if t not in high]
    on = [t for t in rest if (_verdict(case, t) or {}).get("acting")]
    share = sum(_on_share(case, t) for t in rest) / max(len(rest), 1)
    ratios = sorted(v["forecast_loss"] / v["reactive_loss"] for t in rest
                    if (v := _verdict(case, t)) and v.get("scored") and v.get("reactive_loss"))
    mid = ratios[len(ratios) // 2] if ratios else None
    out += [(f"The other batch tenants (normal and low, whose verdicts change nothing): {len(on)} of {len(rest)} "
             if high else f"Batch tenants: {len(on)} of {len(rest)} ")
            + f"end the day on the forecast ({pct(share, 0)} of their "
            f"steps" + (f"; the forecast's holds lose {pct(ratios[0], 0)} to {pct(ratios[-1], 0)} of the reactive "
                        f"holds', median {pct(mid, 0)}" if ratios else "")
            + f"). Unmet GPU-minutes, reactive / product / gated / perfect: {unmet}; preemptions "
            + " / ".join(n(runs[r]["preemptions"]) for r in RUNS) + "."]
    return out


@block("skill-gate-servegen")
def skill_gate_servegen() -> str:
    if not exists(FILE):
        return "Not measured yet: `nice -n 10 python bench/inference_breakdown_bench.py`."
    d = load(FILE)
    out = [f"`{d['command']}` (ServeGen m-small beside the synthetic batch tenants, {d['days']:g} day after "
           f"{d['history_days']:g} days of history, seed {d['seed']}; gate at its defaults):", ""]
    for case in d["cases"]:
        out += _case(case) + [""]
    out.append(source([FILE], d))
    return "\n".join(out)
