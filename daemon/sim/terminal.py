"""What `simulate` prints after a replay (pure: reads the replay JSON's document, returns lines).

The summary comes first, as a person reads it: the recommended setting with its figures against reactive's and
static's and why, whether capacity rather than forecasting is short, the comparison at equal utilization. The
table of every setting (85 rows and more in a sweep) is printed on request (``table``); the JSON has it all.
"""

from __future__ import annotations

from daemon.sim import recommend as rec, report, shortage
from daemon.text import plural


def replay_lines(doc: dict, recommendation: dict | None = None, sweep: bool = False, table: bool = False,
                 legend: bool = False, json_path: str = "the JSON") -> list[str]:
    """The lines for one replay: ``doc`` is report.to_json's output, ``recommendation`` recommend.recommend's (its
    snippet ends the output). The table prints without a sweep (a row per strategy: it is the summary), with
    ``table`` or ``legend`` (the legend says what each column is, under it)."""
    out: list[str] = []
    if recommendation is not None:
        out += rec.summary_lines(recommendation)
    else:
        short = shortage.line(shortage.structural(doc["runs"]))
        out += [short] if short else []
    out += report.comparison_lines(doc.get("comparison") or {})
    if table or legend or not sweep:
        out.append(report.table(doc["runs"], legend=legend))
        if not legend:   # a first run prints the table alone: "idleQ", "forHi", "preIdle" said nothing
            out.append("(--legend says what each column is)")
        for s in doc["runs"]:  # a typed replay: unmet GPU-minutes per accepted-type set
            if s.get("by_spec") is not None:
                out.append(f"{s['label']} unmet by accepted types: " + ", ".join(
                    f"{k} {v['unmet_gpu_min']:.0f}/{v['demand_gpu_min']:.0f} GPU-min" for k, v in s["by_spec"].items()))
    else:
        out.append(f"the table of all {len(doc['runs'])} settings: --table (--legend says what each column is), "
                   f"or {json_path}")
    shown = doc["runs"] if table or legend or not sweep else \
        [s for s in doc["runs"] if s["label"] in _named(doc, recommendation)]
    out += gate_lines(shown, report.has_inference(doc["runs"]))
    if report.has_inference(doc["runs"]):  # the services' requests per tier (a few columns)
        runs, head = doc["runs"], "inference requests per tier (arrived = served + throttled + late):"
        if sweep and not (table or legend):  # as the table above: the settings named, not the whole sweep's rows
            named = _named(doc, recommendation)
            runs = [s for s in runs if s["label"] in named]
            head = (f"inference requests per tier (arrived = served + throttled + late), the settings named above "
                    f"(all {len(doc['runs'])}: --table):")
        out += [head, report.table(runs, legend=legend, columns=report.INFERENCE_COLUMNS)]
    if recommendation is not None:
        out += ["", recommendation["snippet"].rstrip("\n")]
    return out


def gate_lines(runs: list[dict], services: bool) -> list[str]:
    """One line per setting the skill gate ran in (policy.skill_gate.enabled, predictive): the share of steps it
    planned on the forecast. Without it, a config that turned the gate on printed the same table as one with it
    off, and only the JSON said whether the forecast was acted on at all."""
    out = []
    for s in runs:
        g = s.get("skill_gate")
        if not g:
            continue
        if "read_tenant_steps" in g:
            read, on = g["read_tenant_steps"], g["read_tenant_steps_on_forecast"]
            n = g["read_tenants"]
            whose = (f"the {plural(n, 'tenant')} whose verdict the plan reads (the high tier"
                     f"{' and the inference services' if services else ''})")
        else:   # a JSON from before the read/all split: all tenants only
            read, on, whose = g.get("tenant_steps", 0), g.get("tenant_steps_on_forecast", 0), "all tenants"
        share = f"{on / read:.1%}" if read else "none"
        rest = "" if read and on == read else "; reactive for the rest"   # none left at 100%
        out.append(f"skill gate, {s['label']}: acted on the forecast for {share} of the steps of {whose}{rest}")
    return out


def _named(doc: dict, recommendation: dict | None) -> set[str]:
    """The settings the summary and the comparison name: the recommended one, reactive's and static's beside it,
    and the comparison's points."""
    cmp_ = doc.get("comparison") or {}
    named = {cmp_.get(k) for k in ("reactive_point", "predictive_point", "perfect_point")}
    for k in ("expected", "reactive", "static"):
        named.add(((recommendation or {}).get(k) or {}).get("label"))
    return {x for x in named if x}
