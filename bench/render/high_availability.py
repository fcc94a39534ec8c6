"""Renderer for docs/high-availability.md: the leader takeover bench."""

from __future__ import annotations

from bench.render.common import block, goal, load, met, source, table, verdict


@block("ha-takeover")
def ha_takeover() -> str:
    d = load("ha-takeover.json")
    target = d["targets"]["takeover_2_intervals"]
    t = [r["takeover_s"] for r in d["rounds"]]
    return "\n".join([
        table(["rounds", "cycle interval", "lease TTL", "takeover min", "median", "max", "within 2 intervals",
               "goal (slowest round)"],
              [[len(t), f"{d['interval_s']:g} s", f"{d['lease_ttl_s']:g} s", f"{d['min_s']:.2f} s",
                f"{d['median_s']:.2f} s", f"{d['max_s']:.2f} s", f"{d['within_two_intervals']}/{len(t)}",
                f"{goal(target)}: {verdict(met(target, d))}"]]),
        "", source(["ha-takeover.json"], d)])
