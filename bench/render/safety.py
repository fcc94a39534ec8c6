"""Renderer for docs/safety.md: the aging (starvation guard) bench."""

from __future__ import annotations

from bench.render.common import block, listing, load, n, source, table


@block("aging")
def aging() -> str:
    d = load("aging.json")
    runs = d["runs"]

    def label(r: dict) -> str:
        knobs = ", ".join(f"{k} {v:g}" for k, v in r["knobs"].items())
        return f"{r['case']} {r['strategy']} ({knobs})"

    rows, pairs = [], {}
    for r in runs:
        first = label(r) not in pairs
        pairs.setdefault(label(r), {})["on" if r["aging"] == "default" else "off"] = r
        u, j, t = r["unmet_gpu_min"], r["job_starvation_min"], r["tenant_starvation_min"]
        rows.append([label(r) if first else "", "on" if r["aging"] == "default" else "off", n(u["high"]),
                     n(u["normal"]), n(u["low"]), f"{j['normal']:.0f} / {j['low']:.0f}",
                     f"{t['normal']:.0f} / {t['low']:.0f}", n(r["preemptions"])])
    mw = d["max_wait_steps"]
    out = [f"Commit {d['commit']}, `max_wait_steps = {mw}`, {d['days']:g}-day replays; aging on is the default "
           "policy, off is `max_wait_steps` beyond the trace.", "",
           table(["trace, setting", "aging", "high unmet GPU-min", "normal unmet", "low unmet",
                  "longest wait per job normal / low, min", "per tenant normal / low, min", "preemptions"], rows), ""]
    on_off = [(k, v["on"], v["off"]) for k, v in pairs.items() if "on" in v and "off" in v]
    normal_tenant = max(r["tenant_starvation_min"]["normal"] for r in runs)
    over = [k for k, on, _ in on_off if on["tenant_starvation_min"]["low"] > mw]
    longer = [k for k, on, off in on_off if on["tenant_starvation_min"]["low"] > off["tenant_starvation_min"]["low"]]
    out.append(f"- **Per tenant**: no normal-tier tenant had work queued and nothing running for longer than "
               f"{normal_tenant:.0f} minutes. For the low tier, with aging on, that stretch is above "
               f"`max_wait_steps` in {len(over)} of the {len(on_off)} runs"
               + (f" ({listing(over)})" if over else "") + "; it is longer with aging than without in "
               + (listing(longer) if longer else "none of them") + ".")
    job_over = [k for k, on, _ in on_off if on["job_starvation_min"]["low"] > mw]
    job_shorter = [k for k, on, off in on_off if on["job_starvation_min"]["low"] < off["job_starvation_min"]["low"]]
    out.append(f"- **Per job**: aging shortens the longest summed wait of a low-priority job in {len(job_shorter)} of "
               f"the {len(on_off)} runs; it stays above `max_wait_steps` in {len(job_over)} of them "
               + "(" + "; ".join(f"{k}: {off['job_starvation_min']['low']:.0f} -> "
                                 f"{on['job_starvation_min']['low']:.0f} min" for k, on, off in on_off) + ").")
    out.append("- **Preemptions** without -> with aging: " + "; ".join(
        f"{k} {n(off['preemptions'])} -> {n(on['preemptions'])}" for k, on, off in on_off) + ".")

    def moved(tier: str) -> str:
        return "; ".join(f"{k} {100 * (on['unmet_gpu_min'][tier] / off['unmet_gpu_min'][tier] - 1):+.0f}%"
                         if off["unmet_gpu_min"][tier] else f"{k} {n(off['unmet_gpu_min'][tier])} -> "
                         f"{n(on['unmet_gpu_min'][tier])}" for k, on, off in on_off)
    out.append(f"- **Unmet demand**, aging on against off: normal tier {moved('normal')}; low tier {moved('low')}; "
               f"high tier {moved('high')}.")
    out += ["", source(["aging.json"])]
    return "\n".join(out)
