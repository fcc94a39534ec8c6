"""Recommended settings from a replay (pure: reads the replay JSON that `simulate` writes, nothing else).

Among the predictive settings on the predictive Pareto frontier (utilization against high-tier unmet demand,
daemon.sim.report.frontier), the one that best meets an objective: by default the least high-tier unmet demand
at no more than reactive's normal-tier unmet demand and no more preemptions than reactive's. Reactive's figures
are its point in the comparison at equal utilization (report.compare: its frontier's best point at its highest
utilization). If no predictive setting meets the constraints, or the best one is no better than reactive on the
minimized figure, predictive does not help on this history and reactive is recommended.

A replay is chaotic (daemon/sim/noise.py): where the replay JSON carries ``noise_replay`` (simulate --recommend
replays reactive's setting and the best predictive one once more on the history changed by next to nothing), the
larger of how far those two moved on the deciding figure is the noise of one replay; a gain over reactive within it
(or one the second replay does not repeat) is no reason to switch, and reactive, the setting with nothing to
configure, is recommended, saying so and what would settle it.

The objective is configurable: ``--minimize METRIC`` and any number of ``--subject-to "METRIC OP BOUND"``, where
BOUND is a number, ``reactive`` or ``F*reactive`` (e.g. ``preemptions<=1.5*reactive``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from daemon.sim import shortage
from daemon.sim.report import METRICS, OPS, UTIL_TOLERANCE, frontier
from daemon.text import plural


def _high_throttled(s: dict) -> float:
    """The share of the high tier's inference requests throttled (0 where no service was replayed)."""
    hi = s["tiers"]["high"]
    n = hi.get("inf_requests") or 0
    return float(hi.get("inf_throttled") or 0) / n if n else 0.0


# what a recommendation prints and compares, read from one setting's summary, in the order printed: a target's
# metrics (report.METRICS, read the same way) and three more
_MORE = {
    "work_lost_gpu_min": lambda s: s["work_lost_gpu_min"],
    "high_wait_p99_min": lambda s: s["tiers"]["high"]["wait_p99_min"],
    "high_throttled": _high_throttled,
}
FIGURES = {k: {**METRICS, **_MORE}[k] for k in ("utilization", "high_unmet", "normal_unmet", "low_unmet", "preemptions",
                                                 "work_lost_gpu_min", "preempted_idle", "high_wait_p99_min",
                                                 "high_throttled")}
LOWER_IS_BETTER = {k for k in FIGURES if k != "utilization"}


class ObjectiveError(ValueError):
    pass


class NoContention(ObjectiveError):
    """The replay's demand never contended for GPUs (its `contention`, daemon/sim/contention.py): every strategy
    served it all, so there is nothing to recommend."""


class ReplayError(ObjectiveError):
    """The document is not a replay JSON (simulate's --json output): bad input, not an unmet objective."""


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Tier(_Open):
    unmet_gpu_min: float
    wait_p99_min: float | None = None


class _Tiers(_Open):
    high: _Tier
    normal: _Tier
    low: _Tier


class _Run(_Open):
    strategy: str
    label: str
    knobs: dict[str, bool | int | float]
    utilization: float
    preemptions: int
    work_lost_gpu_min: float
    preempted_idle_gpu_min: float
    tiers: _Tiers


class _NoiseReplay(_Open):
    """Settings replayed once more on the history changed by next to nothing (daemon/sim/noise.py)."""
    perturbation: dict[str, Any]
    runs: list[_Run]


class _Replay(_Open):
    """The fields of a replay JSON (daemon.sim.report.to_json) a recommendation reads; others pass through."""
    runs: list[_Run] = []
    noise_replay: _NoiseReplay | None = None
    comparison: dict[str, Any] | None = None
    workload: str = "the replay"
    forecaster: str | None = None


def parse_replay(doc: Any) -> dict:
    """The replay document checked for the shape `recommend` reads (a hand-edited or truncated file fails here
    with the path of the first bad field, not with a TypeError deep in the frontier)."""
    if isinstance(doc, dict) and "runs" not in doc and "savings" in doc and "slo" in doc:
        # simulate --min-gpus writes its report beside the replay's JSON (<name>_min_gpus.json): no runs to rank
        raise ReplayError("not a replay JSON: a --min-gpus report (the smallest cluster each strategy needs for one "
                          "SLO), which has no settings to recommend from; recommend reads the JSON of a replay "
                          "(simulate without --min-gpus, e.g. --sweep)")
    try:
        return _Replay.model_validate(doc).model_dump()
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(x) for x in e["loc"]) or "the document"
        raise ReplayError(f"not a replay JSON (simulate --json's output): {where}: {e['msg']} "
                          f"({exc.error_count()} problem{'s' if exc.error_count() > 1 else ''})") from None


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    bound: float | None = None      # a fixed bound, or
    factor: float = 1.0             # factor * reactive's value (bound is None)

    def text(self) -> str:
        if self.bound is not None:
            return f"{self.metric} {self.op} {self.bound:g}"
        return f"{self.metric} {self.op} {'' if self.factor == 1 else f'{self.factor:g}*'}reactive"

    def ok(self, s: dict, reactive: dict) -> bool:
        v = FIGURES[self.metric](s)
        b = self.bound if self.bound is not None else self.factor * FIGURES[self.metric](reactive)
        return bool(OPS[self.op](v, b))


@dataclass(frozen=True)
class Objective:
    minimize: str = "high_unmet"
    constraints: tuple[Constraint, ...] = field(default_factory=lambda: (
        Constraint("normal_unmet", "<="), Constraint("preemptions", "<=")))

    def text(self) -> str:
        c = ", ".join(x.text() for x in self.constraints)
        return f"least {self.minimize}" + (f" at {c}" if c else "")


_CON = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=|<|>)\s*(?:(reactive)|([0-9.]+)\s*\*\s*reactive|([0-9.eE+-]+))\s*$")


def parse_constraint(text: str) -> Constraint:
    m = _CON.match(text)
    if not m:
        raise ObjectiveError(f"--subject-to {text!r}: want METRIC OP BOUND, BOUND a number, reactive or F*reactive "
                             "(e.g. 'preemptions<=1.5*reactive')")
    metric, op, rel, factor, num = m.groups()
    if metric not in FIGURES:
        raise ObjectiveError(f"--subject-to {text!r}: unknown metric {metric!r}; one of {', '.join(FIGURES)}")
    try:
        if num is not None:
            return Constraint(metric, op, bound=float(num))
        return Constraint(metric, op, factor=1.0 if rel else float(factor))
    except ValueError:
        raise ObjectiveError(f"--subject-to {text!r}: {num or factor!r} is not a number") from None


def objective(minimize: str | None = None, subject_to: tuple[str, ...] | list[str] | None = None) -> Objective:
    """The objective from the flags; no flags: the default (least high-tier unmet at no more than reactive's
    normal-tier unmet and preemptions). ``subject_to`` given replaces the default constraints."""
    m = minimize or "high_unmet"
    if m not in LOWER_IS_BETTER:
        raise ObjectiveError(f"--minimize {m!r}: one of {', '.join(sorted(LOWER_IS_BETTER))}")
    if subject_to is None:
        return Objective(m)
    return Objective(m, tuple(parse_constraint(x) for x in subject_to))


def reactive_point(runs: list[dict], comparison: dict | None) -> dict | None:
    """Reactive's point in the comparison at equal utilization (by label), else chosen as report.compare does."""
    reactive = [x for x in runs if x["strategy"] == "reactive"]
    if not reactive:
        return None
    label = (comparison or {}).get("reactive_point")
    hit = next((x for x in reactive if x["label"] == label), None)
    if hit is not None:
        return hit
    rf = frontier(reactive)
    top = max(p["utilization"] for p in rf)
    return min((p for p in rf if p["utilization"] >= top - 0.01), key=lambda p: p["tiers"]["high"]["unmet_gpu_min"])


def static_point(runs: list[dict], util: float | None) -> dict | None:
    """Static's setting beside reactive: the least high-tier unmet among those at reactive's utilization (less the
    tolerance), else the static setting with the highest utilization."""
    st = [x for x in runs if x["strategy"] == "static"]
    if not st:
        return None
    ok = [p for p in st if util is None or p["utilization"] >= util - UTIL_TOLERANCE]
    if ok:
        return min(ok, key=lambda x: (x["tiers"]["high"]["unmet_gpu_min"], -x["utilization"]))
    return max(st, key=lambda x: x["utilization"])


def figures(s: dict | None) -> dict | None:
    if s is None:
        return None
    return {"label": s["label"], **{k: f(s) for k, f in FIGURES.items()}}


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


# a replay of one predictive setting (simulate --data without --sweep) is no ground for "does not help on this
# history": on a user's day that one setting lost to reactive while simulate --recommend found one that beat it
NOT_SWEPT = ("predictive did not beat reactive at the one predictive setting replayed, which does not say it cannot: "
             "simulate --sweep (or --recommend) tries each strategy's settings")


def snippet(s: dict, helps: bool, exp: dict, reactive: dict | None, static: dict | None, obj: str,
            source: str, forecaster: str | None = None, short: str | None = None, one_setting: bool = False,
            noise: dict | None = None) -> str:
    """The recommended setting as a config snippet (the `[policy]` keys the replay swept), its expected figures
    and reactive's and static's beside them as comments."""
    def line(name: str, f: dict | None) -> str:
        if f is None:
            return f"#   {name:<12} (not replayed)"
        return (f"#   {name:<12} util {100 * f['utilization']:5.1f}%  high unmet {f['high_unmet']:9.0f}  "
                f"normal unmet {f['normal_unmet']:9.0f}  low unmet {f['low_unmet']:9.0f}  "
                f"preemptions {f['preemptions']:6d} jobs  work lost {f['work_lost_gpu_min']:8.0f}")

    head = [f"# recommended by gpu-autoscaler from {source}", f"# objective: {obj}"]
    if s["strategy"] == "predictive" and forecaster:
        head.append(f"# replayed with the forecaster {forecaster} (forecaster.kind = \"auto\" uses the one retrain "
                    "scores best on this cluster)")
    if noise and noise.get("within"):
        head += [f"# {noise['verdict']}; recommended: reactive", f"# {noise['settle']}"]
    elif not helps and one_setting:
        head.append(f"# {NOT_SWEPT}; recommended: reactive")
    elif not helps:
        head.append("# predictive does not help on this history: no predictive setting on its frontier beats "
                    "reactive under the objective; recommended: reactive")
    if short:
        head.append(f"# {short}")
    # unmet demand and work lost in GPU-minutes, preemptions in jobs (the header named GPU-min for all of them)
    head += ["# expected over the replayed window (unmet and work lost in GPU-min):", line("recommended", exp),
             line("reactive", reactive), line("static", static)]
    knobs = s["knobs"]
    body = ['[forecaster]', 'kind = "none"   # reactive: the policy plans on current demand only', ""] \
        if s["strategy"] == "reactive" else []
    body += ["[policy]"] + [f"{k} = {_toml_value(v)}" for k, v in knobs.items()]
    if not knobs:
        body.append("# the configured [policy] as it is")
    return "\n".join(head + body) + "\n"


def value_text(metric: str, v: float) -> str:
    """One figure with its unit, as the verdict says it."""
    if metric == "high_throttled":
        return f"{100 * v:.3f}% of requests"
    if metric == "preemptions":
        return f"{v:,.0f} jobs"
    if metric == "high_wait_p99_min":
        return f"{v:,.1f} min"
    return f"{v:,.0f} GPU-min"


def _noise_number(metric: str, v: float) -> str:
    return f"{100 * v:.3f} points" if metric == "high_throttled" else value_text(metric, v)


# what would settle a gain within the noise
SETTLE = ("what would settle it: a longer history: replay more --days, or --recommend again on the next weeks' history "
          "(a gain that is real adds up over every day replayed, the noise of one replay need not)")


def noise_of(nr: dict | None, best: dict, reactive: dict, metric: str) -> dict:
    """The noise of one replay on ``metric`` from the settings replayed once more (the replay JSON's ``noise_replay``,
    daemon/sim/noise.py): the larger of how far reactive's point and ``best`` moved; ``within``: the gain of ``best``
    over reactive is no larger, or the second replay does not have ``best`` ahead at all."""
    fn = FIGURES[metric]
    by = {x["label"]: x for x in (nr or {}).get("runs", ())}
    b2, r2 = by.get(best["label"]), by.get(reactive["label"])
    if b2 is None or r2 is None:
        return {"measured": False, "metric": metric,
                "line": (f"the noise of one replay was not measured ({reactive['label']} and {best['label']} not "
                         "replayed once more): simulate --recommend measures it, and a gain within it is no reason "
                         "to switch")}
    rv, bv, rv2, bv2 = fn(reactive), fn(best), fn(r2), fn(b2)
    noise = max(abs(rv2 - rv), abs(bv2 - bv))
    gain, gain2 = rv - bv, rv2 - bv2
    within = gain <= noise or gain2 <= 0
    what = nr["perturbation"].get("text") or "the history changed by next to nothing"
    n = len(nr["runs"])
    line = (f"the noise of one replay: +-{_noise_number(metric, noise)} of {metric}, measured by "
            f"{plural(n, 'more replay')} ({', '.join(x['label'] for x in nr['runs'])}) with {what}: "
            f"reactive {value_text(metric, rv)} -> {value_text(metric, rv2)}, "
            f"{best['label']} {value_text(metric, bv)} -> {value_text(metric, bv2)}")
    if within:
        verdict = (f"{best['label']} has {metric} {value_text(metric, bv)} against reactive's "
                   f"{value_text(metric, rv)}: within the noise of one replay (+-{_noise_number(metric, noise)})"
                   + ("" if gain <= noise else ", and the second replay has it behind")
                   + ", so not a reason to switch")
    else:
        verdict = None
        line += f"; the gain, {_noise_number(metric, gain)}, exceeds it"
    return {"measured": True, "metric": metric, "noise": noise, "gain": gain, "gain_replayed_again": gain2,
            "within": within, "perturbation": nr["perturbation"], "replays": n,
            "settings": {"reactive": {"label": reactive["label"], "value": rv, "replayed_again": rv2},
                         "predictive": {"label": best["label"], "value": bv, "replayed_again": bv2}},
            "line": line, "verdict": verdict, "settle": SETTLE if within else None}


def _services(runs: list[dict]) -> bool:
    """Whether the replay measured the high tier's inference requests (a service of that tier was replayed)."""
    return any((x["tiers"]["high"].get("inf_requests") or 0) > 0 for x in runs)


def recommend(replay: dict, obj: Objective | None = None) -> dict:
    """The recommendation for one replay JSON (daemon.sim.report.to_json's output). Where the high tier's
    inference requests were replayed, the high tier's unmet demand is its GPUs' and its requests throttled: when
    minimizing high_unmet, a tie on it is decided by high_throttled (its requests throttled), so a forecast that
    throttles fewer of the high tier's requests on the same GPUs is not called no help."""
    obj = obj or Objective()
    replay = parse_replay(replay)
    c = replay.get("contention")
    if isinstance(c, dict) and c.get("contends") is False:  # simulate --data wrote it with a warning
        raise NoContention(c.get("message") or "the replay's demand never contended for GPUs: nothing to recommend")
    runs = replay["runs"]
    reactive = reactive_point(runs, replay.get("comparison"))
    if reactive is None:
        raise ObjectiveError("the replay has no reactive setting: replay with --strategies including reactive")
    static = static_point(runs, reactive["utilization"])
    pred = [x for x in runs if x["strategy"] == "predictive"]
    one = FIGURES[obj.minimize]
    tie = obj.minimize == "high_unmet" and _services(runs)
    front = frontier(pred, also=_high_throttled if tie else None) if pred else []
    feasible = [p for p in front if all(c.ok(p, reactive) for c in obj.constraints)]

    def key(p: dict) -> tuple[float, ...]:
        return (one(p), _high_throttled(p)) if tie else (one(p),)

    def said(p: dict) -> str:
        return f"{one(p):g}" + (f" and high_throttled {_high_throttled(p):.3%}" if tie else "")

    best = min(feasible, key=lambda p: (*key(p), -p["utilization"], p["preemptions"])) if feasible else None
    helps = best is not None and key(best) < key(reactive)
    noise = None
    if helps:  # the figure that decides it (high_throttled where high_unmet ties), against one replay's noise
        metric = obj.minimize if one(best) < one(reactive) else "high_throttled"
        noise = noise_of(replay.get("noise_replay"), best, reactive, metric)
    obj_text = obj.text() + (", then the least high_throttled (the share of the high tier's requests throttled)"
                             if tie else "")
    if not pred:
        why = "no predictive setting was replayed (no forecaster, or --strategies without predictive)"
    elif not feasible:
        why = (f"none of the {plural(len(front), 'predictive setting')} on its frontier meets "
               + ", ".join(c.text() for c in obj.constraints))
    elif not helps:
        why = (f"the best predictive setting that meets the constraints ({best['label']}) has {obj.minimize} "
               f"{said(best)}, reactive {said(reactive)}")
    else:
        why = (f"{best['label']}: {obj.minimize} {said(best)} against reactive's {said(reactive)}, "
               f"the least among the {len(feasible)} predictive settings on its frontier that meet the constraints")
    within = bool(noise and noise.get("within"))
    if within:  # reactive, the setting with nothing to configure
        helps = False
    chosen = best if helps else reactive
    exp, rf, sf = figures(chosen), figures(reactive), figures(static)
    source = replay.get("workload", "the replay")
    short = shortage.structural(runs)
    short_line = shortage.line(short)
    return {"recommended": chosen["label"], "strategy": chosen["strategy"], "knobs": dict(chosen["knobs"]),
            "predictive_helps": helps, "within_noise": within, "noise": noise, "objective": obj_text, "why": why,
            "capacity_short": short, "capacity_short_line": short_line,
            "expected": exp, "reactive": rf, "static": sf,
            "predictive_frontier": [p["label"] for p in front], "feasible": [p["label"] for p in feasible],
            "predictive_settings": len(pred),
            "snippet": snippet(chosen, helps, exp, rf, sf, obj_text, source, replay.get("forecaster"), short_line,
                               one_setting=len(pred) == 1, noise=noise)}


# the summary's figures: (header, unit, key in figures(), format)
_SUMMARY = (("util", "%", "utilization", lambda v: f"{100 * v:.1f}%"),
            ("high unmet", "GPU-min", "high_unmet", "{:,.0f}".format),
            ("normal unmet", "GPU-min", "normal_unmet", "{:,.0f}".format),
            ("low unmet", "GPU-min", "low_unmet", "{:,.0f}".format),
            ("preemptions", "jobs", "preemptions", "{:,d}".format),
            ("work lost", "GPU-min", "work_lost_gpu_min", "{:,.0f}".format))


def summary_lines(rec: dict) -> list[str]:
    """The short summary printed first: the verdict, the recommended setting's figures against reactive's and
    static's (GPU-minutes over the replayed window), why, and whether capacity rather than forecasting is short."""
    noise = rec.get("noise") or {}
    verdict = (f"recommended: {rec['recommended']}" if rec["predictive_helps"]
               else f"{noise['verdict']}; recommended: {rec['recommended']}" if noise.get("within")
               else f"{NOT_SWEPT}; recommended: {rec['recommended']}" if rec.get("predictive_settings") == 1
               else f"predictive does not help on this history; recommended: {rec['recommended']}")
    # a unit under each head, as the replay's table has: the figures are over the whole replayed window
    cols = _SUMMARY
    if any((rec.get(n) or {}).get("high_throttled") for n in ("expected", "reactive", "static")):
        # the high tier's services were replayed: their requests throttled are part of its figures
        cols = (*_SUMMARY[:2], ("high thr", "% req", "high_throttled", lambda v: f"{100 * v:.3f}%"), *_SUMMARY[2:])
    rows = [("", *(h for h, _, _, _ in cols), "setting"), ("", *(u for _, u, _, _ in cols), "")]
    for name in ("expected", "reactive", "static"):
        f = rec.get(name)
        if f is not None:
            rows.append(("recommended" if name == "expected" else name,
                         *(fmt(f.get(k, 0.0)) for _, _, k, fmt in cols), f["label"]))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    grid = ["  " + "  ".join([r[0].ljust(w[0]), *(x.rjust(n) for x, n in zip(r[1:-1], w[1:-1])), r[-1]]).rstrip()
            for r in rows]
    out = [verdict, *grid, f"why: {rec['why']}"]
    out += [x for x in (noise.get("line"), noise.get("settle")) if x]
    if rec.get("capacity_short_line"):
        out.append(rec["capacity_short_line"])
    return out


def text(rec: dict) -> str:
    """What the terminal shows: the summary (verdict, figures, why), then the snippet."""
    return "\n".join(summary_lines(rec)) + f"\n\n{rec['snippet']}"


__all__ = ["Constraint", "FIGURES", "METRICS", "Objective", "ObjectiveError", "objective", "parse_constraint",
           "recommend", "text"]
