"""Renders every table of measured numbers in README.md and docs/*.md from the committed bench JSON in bench/out/,
and the configuration key table from the config models, so the docs carry the benches' numbers and nothing typed.

A rendered block sits between two markers, each on a line of its own:

    <!-- generated:NAME -->
    ...what render_docs.py wrote; edit the JSON or this script, never the text...
    <!-- /generated:NAME -->

    python bench/render_docs.py            # rewrite every block in place
    python bench/render_docs.py --check    # exit 1 naming the stale or malformed blocks; changes nothing
    python bench/render_docs.py --undescribed   # config keys that have no Field(description=...)

A bench's goals are in its JSON (``targets``, written from bench/targets.py); whether each is met is computed
here from the goal and the measured value. Fast: it reads JSON and imports the config models, nothing else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
MARKER = re.compile(r"<!-- (/?)generated:([A-Za-z0-9_-]+) -->")

BLOCKS: dict[str, Callable[[], str]] = {}


def block(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(f: Callable[[], str]) -> Callable[[], str]:
        BLOCKS[name] = f
        return f
    return register


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ---------------------------------------------------------------------------------------------------- helpers

@cache
def load(name: str) -> dict:
    return json.loads((OUT / name).read_text())


def n(x: float) -> str:
    return f"{x:,.0f}"


def pct(x: float, digits: int = 1) -> str:
    return f"{100 * x:.{digits}f}%"


def ms(x: float) -> str:
    return f"{x:,.0f} ms"


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def value_at(d: dict, path: str):
    for part in path.split("."):
        d = d[part]
    return d


OPS: dict[str, Callable] = {"<": lambda v, t: v < t, "<=": lambda v, t: v <= t, ">": lambda v, t: v > t,
                            ">=": lambda v, t: v >= t, "==": lambda v, t: v == t,
                            "in": lambda v, t: t[0] <= v <= t[1]}


def met(target: dict, d: dict) -> bool:
    """Whether ``d`` (the JSON, or the entry ``target["scope"]`` names) meets ``target``."""
    return OPS[target["op"]](value_at(d, target["metric"]), target["value"])


def goal(target: dict) -> str:
    """A target as a person writes it: "< 10 ms", "in 0.87-0.93"."""
    v, unit = target["value"], target.get("unit", "")
    if target["op"] == "in":
        return f"in {v[0]:g}-{v[1]:g}"
    return f"{target['op']} {v:,g}{' ' + unit if unit else ''}"


def relative_met(target: dict, pred: float, react: float) -> bool:
    """Replay goals compare predictive with reactive; where reactive's is 0 the predictive one must be 0 too."""
    if react == 0:
        return pred == 0
    return OPS[target["op"]](pred / react, target["value"])


def load_avg(d: dict) -> str:
    """The 1-minute load average at the start and the end of a bench, however that bench named it."""
    pairs = (("load_average_1min_at_start", "load_average_1min_at_end"), ("loadavg_1m_start", "loadavg_1m_end"),
             ("load_avg_at_start", "load_avg_at_end"))
    for a, b in pairs:
        if a in d and b in d:
            x, y = (v[0] if isinstance(v, list) else v for v in (d[a], d[b]))
            return f"load average {x:.1f} at the start, {y:.1f} at the end"
    if "load_average_1min" in d:
        return f"load average {d['load_average_1min']:.1f}"
    return "load average not recorded"


def source(files: list[str], d: dict | None = None) -> str:
    """Where a block's numbers come from: the JSON files, the commit they measured and how busy the box was."""
    names = ", ".join(f"`bench/out/{f}`" for f in files)
    if d is None:
        return f"*From {names}.*"
    return f"*From {names}: commit {d.get('commit', 'not recorded')}, {load_avg(d)}.*"


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def listing(names: list[str]) -> str:
    if not names:
        return "none"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# ------------------------------------------------------------------------------------------- configuration keys

def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        inner = " or ".join(_type_name(a) for a in args)
        return f"{inner}, optional" if len(args) < len(typing.get_args(tp)) else inner
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        k, v = typing.get_args(tp)
        return f"table of {_type_name(k)} to {_type_name(v)}"
    return getattr(tp, "__name__", str(tp))


def _bounds(field) -> str:
    marks = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "min_length": "length >=", "pattern": "matches"}
    out = []
    for m in field.metadata:
        for attr, sym in marks.items():
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sym} `{v}`" if attr == "pattern" else f"{sym} {v:g}" if isinstance(v, float)
                           else f"{sym} {v}")
    return ", ".join(out)


def _toml(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Path):
        return json.dumps(str(v))
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        return f"{v:g}" if abs(v) < 1e6 else f"{int(v)}"
    if hasattr(v, "model_dump"):
        v = v.model_dump(mode="json")
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) if not isinstance(x, dict) else
                               "{" + ", ".join(f"{k} = {_toml(y)}" for k, y in x.items()) + "}" for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(y)}" for k, y in v.items()) + "}"
    return json.dumps(v)


def _model_of(tp):
    """The pydantic model a field holds (directly or as a list of them), else None."""
    from pydantic import BaseModel

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, False
    if typing.get_origin(tp) is list:
        (arg,) = typing.get_args(tp)
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, True
    return None, False


def config_keys() -> list[tuple[str, str, str, str | None]]:
    """(dotted key, type, default, description) of every leaf of the config, in the models' order. A list of
    tables (``[[tenants]]``) shows as ``tenants[].name``; a sub-table's keys are listed under it, not the table."""
    sys.path.insert(0, str(ROOT))
    from pydantic_core import PydanticUndefined

    from daemon.config import Config

    rows: list[tuple[str, str, str, str | None]] = []

    def walk(model, prefix: str) -> None:
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            sub, many = _model_of(field.annotation)
            if sub is not None and not (many and name == "levels"):
                walk(sub, f"{key}[]." if many else f"{key}.")
                continue
            if field.default is PydanticUndefined and field.default_factory is None:
                default = "required"
            else:
                default = f"`{_toml(field.get_default(call_default_factory=True))}`"
            tp = _type_name(field.annotation)
            bounds = _bounds(field)
            rows.append((key, tp + (f"; {bounds}" if bounds else ""), default, field.description))

    walk(Config, "")
    return rows


def undescribed() -> list[str]:
    return [k for k, _, _, desc in config_keys() if not desc]


@block("config-keys")
def config_keys_block() -> str:
    rows = config_keys()
    out = ["Every key of the config file, from the config models' own definitions (type, bounds, default and "
           "description). A key marked *(no description yet)* has none in the model."]
    section = None
    for key, tp, default, desc in rows:
        top = key.split(".")[0].split("[")[0]
        if top != section:
            section = top
            out += ["", f"**`[{section}]`**", "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        text = (desc or "*(no description yet)*").replace("|", "\\|")
        out.append(f"| `{key}` | {tp} | {default.replace('|', chr(92) + '|')} | {text} |")
    return "\n".join(out)


PROMETHEUS_SIGNALS = (("demand per tenant: GPUs allocated, busy or idle", "demand_query"),
                      ("tenants with a stale GPU series", "missing_query"),
                      ("capacity (also: \"this step was scraped\")", "capacity_query"),
                      ("freshness", "freshness_query"),
                      ("every node seen in the last day (which node names an alert may name)", "known_nodes_query"))


@block("prometheus-queries")
def prometheus_queries() -> str:
    sys.path.insert(0, str(ROOT))
    from daemon.config import PrometheusConfig

    fields = PrometheusConfig.model_fields
    rows = [[what, f"`{key}`", "`" + str(fields[key].default).replace("|", "\\|") + "`"]
            for what, key in PROMETHEUS_SIGNALS]
    return table(["signal", "key", "default PromQL"], rows)


# ------------------------------------------------------------------------------------------------- forecaster

MODEL_NAMES = {"naive": "naive", "exp_smoothing": "exponential smoothing", "seasonal_naive_daily": "seasonal naive",
               "seasonal_naive_dw": "daily+weekly seasonal naive", "holt_winters": "Holt-Winters",
               "lstm": "LSTM", "lstm_conformal": "recalibrated LSTM", "current": "the shipped LSTM"}


def model_name(key: str, blend: dict | None = None) -> str:
    """A backtest's model key as the docs name it: ``exp_smoothing+conformal`` -> "exponential smoothing,
    recalibrated"; a blend names its parts."""
    recal = key.endswith("+conformal")
    base = key.removesuffix("+conformal")
    if base == "lstm_blend" and not blend:
        name = "the LSTM blend"
    elif base == "lstm_blend":
        name = (f"blend: {blend['weight']:g} {MODEL_NAMES.get(blend['lstm'], blend['lstm'])} + "
                f"{1 - blend['weight']:g} {MODEL_NAMES.get(blend['baseline'], blend['baseline'])}")
    else:
        name = MODEL_NAMES.get(base, base)
    return f"{name}, recalibrated" if recal else name


REPLAY_MODEL_NAMES = {"lstm": "an LSTM fitted on the trace's history", "lstm_conformal": "that LSTM, recalibrated",
                      "current": "the shipped LSTM"}


def replay_model_name(key: str, blend: dict | None) -> str:
    return REPLAY_MODEL_NAMES.get(key) or model_name(key, blend)


TRACES = {"alibaba": "Alibaba GPU 2023, GPUs alive per QoS class",
          "azure": "Azure LLM 2023, requests per 10 s, code + conversation",
          "helios": "Helios Earth, running + pending GPUs per VC, May 2020",
          "servegen": "ServeGen m-small, requests/s per client"}


def _step(s: float) -> str:
    return f"{s / 60:g} min" if s >= 60 else f"{s:g} s"


def _gain(g: float) -> str:
    return f"**{pct(g)} better**" if g > 0 else f"{pct(-g)} worse"


@block("forecast-traces")
def forecast_traces() -> str:
    d = load("forecast_traces.json")
    tg = {k: v for k, v in d["targets"].items() if v.get("scope") == "traces"}
    rows, verdicts = [], {k: [] for k in tg}
    for name, t in d["traces"].items():
        rep = t["report"]
        scored = f" ({rep['tenants']} scored)" if rep["tenants"] != t["tenants"] else ""
        pick = "the new LSTM, recalibrated" if t["winner"] == "lstm_conformal" else (
            "the new LSTM" if t["winner"] == "lstm" else model_name(t["winner"], t.get("blend")))
        row = [TRACES.get(name, name), f"{_step(t['step_s'])}, {t['horizon_steps']}, {t['tenants']}{scored}",
               f"{t['lstm_wql']:.4f} ({model_name(t['lstm_variant'], t.get('blend'))})",
               f"{model_name(t['best_baseline'])} {t['best_baseline_wql']:.4f}", _gain(t["gain_vs_best_baseline"]),
               pick, f"{t['in_use_coverage_p90']:.3f} ({t['in_use_coverage_p90_strict']:.3f})",
               f"{t['in_use_peak_coverage_p90']:.3f}"]
        for k, target in tg.items():
            ok = met(target, t)
            verdicts[k].append((name, ok))
            row.append(verdict(ok))
        rows.append(row)
    header = ["trace", "step, horizon, tenants", "LSTM family wQL", "best fair baseline", "LSTM vs best",
              "`retrain`'s pick", "pick: p90 coverage (strictly under)", "pick: peak p90",
              *[tg[k]["what"] for k in tg]]
    out = [table(header, rows), ""]
    by = {k: ([x for x, ok in v if ok], [x for x, ok in v if not ok]) for k, v in verdicts.items()}
    title = {k: TRACES[k].split(",")[0].split(" ")[0] for k in d["traces"]}
    say = lambda names: listing([title[x] for x in names])  # noqa: E731
    for k, target in tg.items():
        yes, no = by[k]
        out.append(f"- *{target['what']}* ({goal(target)}): met on {say(yes)}" +
                   (f", not on {say(no)}." if no else "."))
    tr = d["traces"]
    peaks = sorted((t["in_use_peak_coverage_p90"], title[k]) for k, t in tr.items())
    out.append(f"- The realised peak over the horizon stays at or under the in-use model's p90 peak "
               f"{pct(peaks[0][0], 0)}-{pct(peaks[-1][0], 0)} of the time ("
               + ", ".join(f"{nm} {v:.3f}" for v, nm in peaks) + ").")
    won = [k for k, t in tr.items() if t["winner"] == "lstm_conformal"]
    if won:
        out.append("- Where the recalibrated LSTM won, recalibration moved its coverage: the bare LSTM covers "
                   + ", ".join(f"{tr[k]['report']['models']['lstm']['coverage_p90']:.3f} on {title[k]}" for k in won)
                   + "; the recalibrated one " + ", ".join(f"{tr[k]['in_use_coverage_p90']:.3f}" for k in won) + ".")
    if "azure" in tr:
        a, m = tr["azure"], tr["azure"]["report"]["models"]
        rep = a["report"]
        out.append(f"- Azure: the pick's p90 coverage comes from {n(rep['origins'] * rep['tenants'] * rep['horizon'])} "
                   f"scored steps ({rep['origins']} overlapping origins x {rep['tenants']} tenants x {rep['horizon']} "
                   f"steps, {rep['stride']} steps apart). Recalibrated exponential smoothing covers "
                   f"{m['exp_smoothing+conformal']['coverage_p90']:.3f} "
                   f"(wQL {m['exp_smoothing+conformal']['wql']:.4f}); "
                   f"the recalibrated LSTM alone {m['lstm_conformal']['coverage_p90']:.3f} "
                   f"(wQL {m['lstm_conformal']['wql']:.4f}). Naive alone scores {m['naive']['wql']:.4f}: "
                   f"against it the LSTM family would lead by {pct(1 - a['lstm_wql'] / m['naive']['wql'])}.")
    if "helios" in tr:
        h, m = tr["helios"], tr["helios"]["report"]["models"]
        out.append(f"- Helios: the in-use {model_name(h['winner'])} forecast's p90 is the last value, and on 5-minute "
                   f"GPU counts that value often does not change: {h['in_use_coverage_p90']:.3f} of the actual steps "
                   f"are at or under it but only {h['in_use_coverage_p90_strict']:.3f} strictly under. Recalibrated "
                   f"naive covers {m['naive+conformal']['coverage_p90']:.3f} (wQL {m['naive+conformal']['wql']:.4f}); "
                   f"the LSTM family's best form covers {h['lstm_coverage_p90']:.3f} at "
                   f"{_gain(h['gain_vs_best_baseline']).strip('*')} than the best baseline.")
    out += ["", source(["forecast_traces.json"], d)]
    return "\n".join(out)


TIMING_ROWS = (("lstm", "LSTM"), ("lstm_conformal", "LSTM, recalibrated (conformal)"),
               ("blend", "blend: recalibrated LSTM + naive"), ("blend_recalibrated", "the same blend, recalibrated"),
               ("seasonal_naive_daily", "seasonal naive (daily)"), ("naive+conformal", "naive, recalibrated"),
               ("exp_smoothing", "exponential smoothing"),
               ("exp_smoothing+conformal", "exponential smoothing, recalibrated"),
               ("holt_winters", "Holt-Winters"), ("holt_winters+conformal", "Holt-Winters, recalibrated"))


@block("forecast-timing")
def forecast_timing() -> str:
    d = load("forecast_traces.json")
    ts, tg = d["timing_shipped"], d["targets"]
    rows = []
    for key, label in TIMING_ROWS:
        r = ts["daemon"].get(key)
        if r is None:
            continue
        target = tg.get(f"{key}_p95")
        tenants = ts["holt_winters_tenants"] if key.startswith("holt_winters") else ts["tenants"]
        p95 = ms(r["ms_p95"]) + (f" (max {ms(r['ms_max'])})" if r["ms_max"] > 2 * r["ms_p95"] else "")
        rows.append([f"{label}, {n(tenants)} tenants", ms(r["ms_median"]), p95, ms(r["first_call_ms"]),
                     ms(r["background_refresh_ms_max"]) if r["background_refresh_ms_max"] else "–",
                     f"{goal(target)}: {verdict(met(target, d))}" if target else "–"])
    out = [table(["model in use", "median", "p95", "first call (computes the spread at once)",
                  "background recomputation (max)", "goal (p95)"], rows), ""]
    hw = ts["daemon"].get("holt_winters")
    es = ts["daemon"].get("exp_smoothing")
    if hw:
        out.append(f"Holt-Winters re-estimates its smoothing parameters every 24 forecasts, inside the forecast call: "
                   f"that call took {hw['ms_max'] / 1000:.1f} s for {ts['holt_winters_tenants']} tenants "
                   f"({ts['holt_winters_history_steps']:,} steps of history), against the 30 s default cycle interval.")
    if es:
        out.append(f"Exponential smoothing filters the whole history for every tenant at each call "
                   f"({ms(es['ms_median'])} median); choosing its weight runs with the spread, in the background "
                   f"({es['background_refresh_ms_max'] / 1000:.1f} s at most here).")
    old = load("forecast_timing.json")
    med = [r["ms_median"] for r in old["daemon"].values()]
    p95 = [r["ms_p95"] for r in old["daemon"].values()]
    out += ["", f"An earlier `--only-timing` run (`bench/out/forecast_timing.json`, {load_avg(old)} from other work "
            f"on the box) measured the first {len(med)} rows at {min(med):.0f}-{max(med):.0f} ms median and "
            f"{min(p95):.0f}-{max(p95):.0f} ms p95. Recomputing at every forecast took "
            f"{n(old['conformal_refresh_ms_median'])} ms for the conformal shifts and "
            f"{n(old['seasonal_naive_refresh_ms_median'])} ms for seasonal naive's error quantiles: what the "
            f"background thread now does every 10th forecast. With {old['threads']} torch threads on the loaded box "
            f"the bare LSTM took {n(old['lstm_ms_median'])} ms median ({n(old['lstm_ms_p95'])} ms p95), against "
            f"{n(old['daemon']['lstm']['ms_median'])} ms with one: the intra-op threads wait on each other, which is "
            f"why the daemon forecasts with one (`forecaster.torch_threads`).",
            "", source(["forecast_traces.json"], d)]
    return "\n".join(out)


@block("forecast-retrain")
def forecast_retrain() -> str:
    d = load("forecast_retrain_timing.json")
    target = d["targets"]["retrain_10min"]
    w = d["wql"]
    runner_up = sorted((v, k) for k, v in w.items() if k != d["winner"])[:4]
    rows = []
    for sel, r in (d.get("by_select") or {d.get("select_by", "wql"): d}).items():
        rule, _, every = sel.partition("/")
        sel = rule + (f"` with `retrain.replay_forecast_every = {every}" if every else "")
        if not r.get("finished", True):   # stopped at the bench's limit (--rule-timeout-s)
            over = OPS[target["op"]](r["timeout_s"], target["value"]) is False
            rows.append([f"`retrain --select-by {sel}` end to end, {n(r['tenants'])} tenants x {r['days']:g} days "
                         f"at 1 min", f"not finished after {r['timeout_s']:.0f} s (stopped there; load "
                         f"{r['load_average_1min']:.1f})", f"{goal(target)}: "
                         + ("not met" if over else "not measured")])
            continue
        rows.append([f"`retrain --select-by {sel}` end to end, {n(r['tenants'])} tenants x {r['days']:g} days at "
                     f"1 min (winner {model_name(r['winner'], r.get('blend'))}"
                     + (f"; {r['select_note']}" if r.get("select_note") else "") + ")",
                     f"{r['retrain_seconds']:.0f} s (training {r['train_seconds']:.0f} s, {r['epochs']} epochs; "
                     f"load {r.get('load_average_1min', d.get('load_average_1min', float('nan'))):.1f} at its end)",
                     f"{goal(target)}: {verdict(met(target, r))}"])
    rows.append([f"peak RSS (`--select-by {d.get('select_by', 'wql')}`)", f"{d['rss_peak_mib'] / 1024:.2f} GiB", "–"])
    return "\n".join([
        table(["measure", "measured", "goal"], rows),
        "",
        f"The winner there was {model_name(d['winner'], d.get('blend'))} (wQL {w[d['winner']]:.4f}); next: "
        + ", ".join(f"{model_name(k, d.get('blend'))} {v:.4f}" for v, k in runner_up) + ".",
        "", source(["forecast_retrain_timing.json"], d)])


@block("shipped-model-scores")
def shipped_model_scores() -> str:
    d = load("shipped_model_rescore.json")
    models = d["report"]["models"]
    manifest = json.loads((ROOT / "models" / "manifest.json").read_text())
    fallback = manifest.get("in_use", {}).get("fallback")
    rows = []
    for key, m in sorted(models.items(), key=lambda kv: kv[1]["wql"]):
        label = model_name(key) + (" (the manifest's `fallback`)" if key == fallback else "") + (
            " (trained by this run, not shipped)" if key == "lstm" else "")
        rows.append([label, f"{m['wql']:.4f}", f"{m['coverage_p90']:.3f}", f"{m['peak_coverage_p90']:.3f}"])
    return "\n".join([f"`{d['command']}`, commit {d['commit']}: {d['what']}.", "",
                      table(["model", "wQL", "p90 coverage", "peak p90 coverage"], rows), "",
                      "*From `bench/out/shipped_model_rescore.json` and `models/manifest.json`.*"])


# ------------------------------------------------------------------------------ the peak the policy acts on (#26)

def f4(x) -> str:
    return "n/a" if x is None or x != x else f"{x:.4f}"


def f3(x) -> str:
    return "n/a" if x is None or x != x else f"{x:.3f}"


def mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and x == x]
    return sum(xs) / len(xs) if xs else float("nan")


CALIBRATION_BASES = ("naive", "recent_max", "lstm", "lstm_blend")
COVER_GOAL = (0.87, 0.93)   # issue #26.3: the hold's p90 covers 87-93% of realised lead-window peaks where it moves


@block("forecast-peak-calibration")
def forecast_peak_calibration() -> str:
    """Each base forecaster bare, with its peaks recalibrated where the series moved (+peak) and on every window
    (+peak_all): held-out p90 peak coverage against issue #26.3's 87-93% where the series moves."""
    if not (OUT / "forecast_peak_calibration.json").exists():
        return "Not measured yet."
    d = load("forecast_peak_calibration.json")
    lo, hi = COVER_GOAL
    out = [f"`python bench/forecast_bench.py --peak-calibration --cases synthetic,helios` (seed 0, "
           f"{d['fit_epochs']} epochs, as the replay bench fits): one `retrain` on the history before each replay "
           "case's measured window, "
           "every candidate scored on the held-out end of that history as `retrain` scores it. Coverage: the share "
           "of realised peaks at or under the forecast's p90 peak; \"moves\": among the windows where the series "
           f"moves; the goal is {pct(lo, 0)}-{pct(hi, 0)} of the lead window's where it moves.", ""]
    for case, c in d["cases"].items():
        m = c["models"]
        names = [f"{b}{v}" for b in CALIBRATION_BASES for v in ("", "+peak", "+peak_all") if f"{b}{v}" in m]
        if c["selected"] in m and c["selected"] not in names:
            names.append(c["selected"])
        rows = []
        for k in names:
            x = m[k]
            mv = x["lead_coverage_p90_moving"]
            rows.append([f"`{k}`" + (" (selected)" if k == c["selected"] else ""), f4(x["peak_loss"]),
                         f4(x["lead_coverage_p90"]), f4(mv),
                         f"{f4(x['lead_high_coverage_p90_moving'])} of {n(x.get('lead_high_moving') or 0)}",
                         f4(x["preempt_coverage_p90_moving"]),
                         "met" if mv is not None and lo <= mv <= hi else "**not met**"])
        inside = sorted(k for k, x in m.items() if x["lead_coverage_p90_moving"] is not None
                        and lo <= x["lead_coverage_p90_moving"] <= hi)
        sel = m.get(c["selected"], {})
        out += [f"- **{case}** ({c['tenants']} tenants, {n(c['history_steps'])} steps of history, lead windows "
                f"that move: {n(sel.get('lead_moving') or 0)}): selected by {c['select_by']} loss `{c['selected']}`, "
                f"lead p90 coverage where it moves {f4(sel.get('lead_coverage_p90_moving'))}; candidates within the "
                f"goal: {', '.join(f'`{k}`' for k in inside) if inside else 'none'}.", "",
                table(["candidate", "peak loss", "lead p90 coverage", "where it moves",
                       "high tier, where it moves (of windows)",
                       "preempt window, where it moves", "lead goal"], rows), ""]
    out.append(source(["forecast_peak_calibration.json"], d))
    return "\n".join(out)


@block("forecast-peak-objective")
def forecast_peak_objective() -> str:
    d = load("forecast_peak_objective.json")
    out = [f"`python bench/forecast_bench.py --peak-objective --fit-epochs {d['fit_epochs']}` "
           f"({d['fit_epochs']} epochs x {n(d['samples_per_epoch'])} "
           f"windows, seeds {', '.join(map(str, d['seeds']))}): `retrain` on the history before each replay case's "
           "measured window, ranked by the peak loss, without a blend or Holt-Winters (what the replay bench fits); "
           "the bare LSTM with and without the peak head, scored on the held-out end of that history as `retrain` "
           "scores. "
           "Peak loss: the mean over the two lead windows of the peak's weighted quantile loss; lead coverage: "
           "the share of realised 10-step peaks at or under the p90 peak, and among the windows where the series "
           "moves (mv).", ""]
    rows, notes = [], []

    def variant(r: dict) -> str:
        return f"peak head, weight {r.get('peak_weight') or 1:g}" if r["peak_head"] else "per-step only"

    for case, c in d["cases"].items():
        names = list(dict.fromkeys(variant(r) for r in c["runs"]))
        by = {v: [r for r in c["runs"] if variant(r) == v] for v in names}
        for r in c["runs"]:
            ls, pa = r["lstm"], r["lstm+peak_all"]
            rows.append([case, str(r["seed"]), variant(r), f4(ls["wql"]),
                         f4(ls["peak_loss"]), f4(ls["lead_loss"]), f3(ls["lead_coverage_p90"]),
                         f3(ls["lead_coverage_p90_moving"]), f4(ls["preempt_loss"]), f4(pa["peak_loss"]),
                         f"`{r['best_baseline_by_peak']}` {f4(r['baseline']['peak_loss'])}"])
        m = {h: mean([r["lstm"]["peak_loss"] for r in by[h]]) for h in by}
        w = {h: mean([r["lstm"]["wql"] for r in by[h]]) for h in by}
        cov = {h: mean([r["lstm"]["lead_coverage_p90"] for r in by[h]]) for h in by}
        spread = {h: [r["lstm"]["peak_loss"] for r in by[h]] for h in by}
        off = "per-step only"
        for h in names:
            if h == off or off not in by:
                continue
            notes.append(f"- {case}, {h}: the mean peak loss over {len(by[h])} seeds moves from {f4(m[off])} to "
                         f"{f4(m[h])} ({pct(m[h] / m[off] - 1)}; the seeds alone spread it over "
                         f"{f4(min(spread[off]))}-{f4(max(spread[off]))} without the head, "
                         f"{f4(min(spread[h]))}-{f4(max(spread[h]))} with it), the mean lead p90 coverage from "
                         f"{f3(cov[off])} to {f3(cov[h])}, the mean wQL from {f4(w[off])} to {f4(w[h])}.")
    out += [table(["case", "seed", "LSTM", "wQL", "peak loss", "lead loss", "lead p90", "lead mv", "preempt loss",
                   "+peak_all peak loss", "best baseline by peak loss"], rows), "", *notes, "",
            source(["forecast_peak_objective.json"], d)]
    return "\n".join(out)


RULES = ("wql", "peak", "replay")


@block("forecast-select-compare")
def forecast_select_compare(fname: str = "forecast_select_compare.json", extra_flags: str = "") -> str:
    d = load(fname)
    pace = d.get("replay_forecast_every", 1)
    flag = ((f" --cases {','.join(d['cases'])} --replay-forecast-every {pace}" if pace != 1 else "") + extra_flags
            + f" --fit-epochs {d['fit_epochs']}")   # the default moved from 4 to retrain.epochs: say which ran
    out = [f"`python bench/forecast_bench.py --select-compare{flag}` (seeds {', '.join(map(str, d['seeds']))}, "
           f"{d['fit_epochs']} epochs x {n(d['samples_per_epoch'])} windows): one `retrain` per case and seed on the "
           "history before the measured window scores every candidate; each rule picks its winner from those "
           "scores; each winner is replayed over the measured window, forecasting every step, at the default "
           "policy (quantile 0.9, headroom 0.05) and over predictive's sweep. Cost: 4 x high + normal + 0.25 x low "
           "unmet GPU-minutes + work lost (`retrain.replay_tier_weights`).", ""]
    rows, per_rule = [], {r: [] for r in RULES}
    for case, c in d["cases"].items():
        for label, key in (("reactive", "default_reactive"), ("perfect forecast", "default_perfect")):
            x = c[key]
            rows.append([case, "", label, "", "", "", n(x["high_unmet"]), n(x["normal_unmet"]), n(x["low_unmet"]),
                         n(x["preemptions"]), n(x["cost"])])
        for seed, sd in c["seeds"].items():
            for rule in RULES:
                name = sd["winners"][rule]
                rp = sd["replays"][name]
                h, x = rp["held_out_scores"], rp["default_point"]
                per_rule[rule].append((case, x["cost"]))
                rows.append([case, seed, f"by {rule}: `{name}`", f4(h["wql"]), f4(h["peak_loss"]),
                             f3(h["lead_coverage_p90_moving"]), n(x["high_unmet"]), n(x["normal_unmet"]),
                             n(x["low_unmet"]), n(x["preemptions"]), n(x["cost"])])
    out.append(table(["case", "seed", "forecaster", "held-out wQL", "held-out peak loss", "lead p90 where it moves",
                      "high unmet", "normal unmet", "low unmet", "preemptions", "cost"], rows))
    cases = list(d["cases"])
    means = {r: {case: mean([v for c, v in per_rule[r] if c == case]) for case in cases} for r in RULES}
    best = {case: min(RULES, key=lambda r: means[r][case]) for case in cases}
    out += ["", "Mean cost over the seeds at the default policy: " + "; ".join(
        f"{case}: " + ", ".join(f"by {r} {n(means[r][case])}" for r in RULES) + f" (lowest: by {best[case]})"
        for case in cases) + "."]
    cmp_rows = []
    for case, c in d["cases"].items():
        for seed, sd in c["seeds"].items():
            for rule in RULES:
                cm = sd["replays"][sd["winners"][rule]]["comparison"]
                if not cm or not cm.get("predictive_point"):
                    continue
                t = cm["targets"]
                cmp_rows.append([case, seed, f"by {rule}", cm["predictive_point"],
                                 f"{n(cm['high_unmet']['predictive'])} vs {n(cm['high_unmet']['reactive'])}",
                                 f"{n(cm['normal_unmet']['predictive'])} vs {n(cm['normal_unmet']['reactive'])}",
                                 f"{cm['preemptions']['predictive']} vs {cm['preemptions']['reactive']}",
                                 ", ".join(k for k, ok in t.items() if ok) or "none"])
    if cmp_rows:
        out += ["", "At reactive's best point (equal utilization, `daemon.sim.report.compare`):", "",
                table(["case", "seed", "rule", "predictive point", "high unmet (pred. vs reactive)",
                       "normal unmet", "preemptions", "targets met"], cmp_rows)]
    out += ["", source([fname], d)]
    return "\n".join(out)


@block("forecast-select-compare-every5")
def forecast_select_compare_every5() -> str:
    """The same comparison with retrain's replay selection forecasting every 5 steps (the peaks carried between)."""
    if not (OUT / "forecast_select_compare_every5.json").exists():
        return "Not measured yet."
    docs = [load(f) for f in ("forecast_select_compare.json", "forecast_select_compare_every5.json")]
    seen: dict = {}   # (case, rule) -> {(seed, winner, cost)}: one pick measured alike in both files counts once
    for d in docs:
        for case, c in d["cases"].items():
            for seed, sd in c["seeds"].items():
                for rule in RULES:
                    name = sd["winners"][rule]
                    seen.setdefault((case, rule), set()).add(
                        (seed, name, sd["replays"][name]["default_point"]["cost"]))
    pooled = []
    for case in dict.fromkeys(k[0] for k in seen):
        by = {r: [x[2] for x in seen[(case, r)]] for r in RULES}
        order = sorted(RULES, key=lambda r: mean(by[r]))
        pooled.append(f"{case}: " + ", ".join(f"by {r} {n(mean(by[r]))} ({len(by[r])})" for r in order))
    commits = ", ".join(str(d.get("commit")) for d in docs)
    return "\n".join([forecast_select_compare("forecast_select_compare_every5.json"), "",
                      "Pooled over both comparisons, the mean cost at the default policy, lowest first (in brackets "
                      "how many distinct measurements: a rule's pick measured alike in both counts once; the runs "
                      "differ in code and candidates, commits " + commits + "): " + "; ".join(pooled) + "."])


def _seeds_in_both(base: dict, d: dict):
    """(case, seed, base's run, d's run) for each case and seed both select-compare files measured."""
    for case, c in d["cases"].items():
        for seed, sd in c["seeds"].items():
            b = base["cases"].get(case, {}).get("seeds", {}).get(seed)
            if b is not None:
                yield case, seed, b, sd


@block("forecast-select-compare-epochs8")
def forecast_select_compare_epochs8() -> str:
    """The same comparison with the LSTM candidates fitted for retrain's epochs (the published one fitted 4): whether
    each rule still picks what it picked, per case and seed measured in both."""
    fname = "forecast_select_compare_epochs8.json"
    d, base = load(fname), load("forecast_select_compare.json")
    lines = []
    for case, seed, b, sd in _seeds_in_both(base, d):
        parts = []
        for rule in RULES:
            now, before = sd["winners"][rule], b["winners"][rule]
            cost_now = sd["replays"][now]["default_point"]["cost"]
            cost_before = b["replays"][before]["default_point"]["cost"]
            parts.append(f"by {rule} `{now}` " + ("(the same pick" if now == before else f"(was `{before}`")
                         + f"; cost {n(cost_before)} -> {n(cost_now)})")
        lines.append(f"- {case}, seed {seed}, {base['fit_epochs']} -> {d['fit_epochs']} epochs: " + ", ".join(parts)
                     + ".")
    flags = f" --cases {','.join(d['cases'])} --seeds {','.join(map(str, d['seeds']))}"
    return "\n".join([forecast_select_compare(fname, flags),
                      "", "Against the published comparison (the first table, fitted "
                      f"{base['fit_epochs']} epochs), for the seeds both ran:", "", *lines])


@block("forecast-select-refresh")
def forecast_select_refresh() -> str:
    """The replay rule's pick when its candidates recalibrate less often (a cheaper, less faithful replay)."""
    base, d = load("forecast_select_compare.json"), load("forecast_select_compare_refresh60.json")
    every = (base.get("replay_refresh_every", 10), d["replay_refresh_every"])
    rows = []
    for case, seed, b, sd in _seeds_in_both(base, d):
        picks = []
        for x in (b, sd):
            name = x["winners"]["replay"]
            picks.append((name, x["ranked_by_replay"][name]["cost"], x["replays"][name]["default_point"]["cost"]))
        shared = [m for m in b["ranked_by_replay"] if m in sd["ranked_by_replay"] and m != "reactive"]
        moved = "; ".join(f"`{m}` {n(b['ranked_by_replay'][m]['cost'])} -> {n(sd['ranked_by_replay'][m]['cost'])}"
                          for m in shared)
        rows.append([case, seed, *[f"`{nm}` (held-out {n(h)}; measured {n(mc)})" for nm, h, mc in picks], moved])
    out = [f"`python bench/forecast_bench.py --select-compare --replay-refresh-every {every[1]} --fit-epochs "
           f"{d['fit_epochs']}`: the replay rule's "
           f"winner when each replayed candidate recalibrates every {every[1]} forecasts, against every {every[0]} "
           "(the table above); held-out: its replay cost on the window before (what it was chosen by); measured: "
           "its cost over the measured window at the default policy.", "",
           table(["case", "seed", f"by replay, every {every[0]}", f"by replay, every {every[1]}",
                  f"held-out replay cost of each candidate, every {every[0]} -> {every[1]}"], rows), "",
           source(["forecast_select_compare_refresh60.json"], d)]
    return "\n".join(out)


# ----------------------------------------------------------------------------------- policy, failover, HA, cycle

@block("policy")
def policy() -> str:
    d = load("policy.json")
    p, target = d["plan"], d["targets"]["plan_p95"]
    out = [table(["measure", "median", "p95", "goal (p95)"],
                 [[f"`plan()` for {n(p['tenants'])} tenants, {n(p['gpus'])} GPUs, {n(p['jobs'])} jobs "
                   f"({n(p['preemptions'])} preemptions chosen)", f"{p['median_ms']:.2f} ms", f"{p['p95_ms']:.2f} ms",
                   f"{goal(target)}: {verdict(met(target, d))}"]]), ""]
    r = d["redis"]
    if "error" not in r:
        names = {"lua_token_bucket": "our Lua token bucket", "limits_moving_window": "`limits` moving window",
                 "limits_fixed_window": "`limits` fixed window"}
        out.append(table(["limiter on loopback Redis", "1 client, decisions/s", "4 clients, decisions/s"],
                         [[names.get(k, k), n(v["1_clients_per_s"]), n(v["4_clients_per_s"])] for k, v in r.items()]))
        ours, mw = r["lua_token_bucket"], r["limits_moving_window"]
        rel = [ours[f"{c}_clients_per_s"] / mw[f"{c}_clients_per_s"] - 1 for c in (1, 4)]
        out += ["", "In this run ours made " + " and ".join(
            f"{pct(abs(x), 0)} {'more' if x > 0 else 'fewer'} decisions per second ({c})"
            for x, c in zip(rel, ("1 client", "4 clients"))) + " than the `limits` moving window."]
    out += ["", source(["policy.json"], d)]
    return "\n".join(out)


@block("failover")
def failover() -> str:
    d = load("failover.json")
    va, dw, h, tg = d["via_alertmanager"], d["direct_webhook"], d["healthz_ms"], d["targets"]
    goal_ = tg["via_alertmanager_5s"]
    rows = [["Alertmanager -> webhook", va["jobs"], ms(va["receipt_to_requeued_s"] * 1000),
             f"{ms(va['alertmanager_post_to_requeued_s'] * 1000)} from the post to Alertmanager",
             "yes" if va["cycle_still_in_flight"] else "no", f"{goal(goal_)}: {verdict(met(goal_, d))}"],
            ["webhook (direct)", dw["jobs"], ms(dw["receipt_to_requeued_s"] * 1000),
             f"{ms(dw['http_round_trip_s'] * 1000)} HTTP round trip", "yes" if dw["cycle_still_in_flight"] else "no",
             f"{goal(tg['direct_webhook_5s'])}: {verdict(met(tg['direct_webhook_5s'], d))}"]]
    hz, st = tg["healthz_p99_100ms"], tg["no_stranded_jobs"]
    return "\n".join([
        f"The cycle in flight: {n(d['cycle_preemptions'])} preemptions on {n(d['gpus'])} GPUs "
        f"({n(d['nodes'])} nodes), {d['per_job_ms']:g} ms per preemption in the stand-in scheduler, "
        f"{d['cycle_actuation_s']:.1f} s of actuation.",
        "", table(["failover path", "jobs requeued", "receipt -> jobs requeued", "end to end",
                   "cycle still in flight when done", "goal"], rows), "",
        f"`/healthz` during that cycle: {n(h['n'])} requests, p50 {h['p50']:.1f} ms, p99 {h['p99']:.1f} ms, "
        f"max {h['max']:.1f} ms (goal: p99 {goal(hz)}, {verdict(met(hz, d))}). Jobs left on the dead nodes: "
        f"{d['stranded_jobs_after']} ({verdict(met(st, d))}).",
        "", source(["failover.json"], d)])


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


CYCLE_COLUMNS = (("cycle-1000.json", "incremental", "{t} x {d} d"),
                 ("cycle-1000.json", "incremental-torch-threads-cores", "{t} x {d} d, torch threads = cores"),
                 ("cycle-1000.json", "full-reread", "{t} x {d} d, full re-read"),
                 ("cycle-10000.json", "incremental", "{t} x {d} d"),
                 ("cycle-10000-12h.json", "incremental", "{t} x {d} d (baseline forecaster)"),
                 ("cycle-10000-12h.json", "full-reread", "{t} x {d} d, full re-read"))


def _days(days: float) -> str:
    return f"{days * 24:g} h" if days < 1 else f"{days:g}"


@block("cycle")
def cycle() -> str:
    cols = []
    for f, sc, label in CYCLE_COLUMNS:
        d = load(f)
        if sc in d["scenarios"]:
            days = _days(d["days"])
            cols.append((d, d["scenarios"][sc], label.format(t=n(d["tenants"]), d=days).replace(" h d", " h")))

    def pair(a: float, b: float) -> str:
        return f"{n(a)} / {n(b)}"

    spec = [("cycle p50 / p95 (ms)", lambda s: pair(s["total_p50_ms"], s["total_p95_ms"])),
            ("- collect", lambda s: pair(s["collect_p50_ms"], s["collect_p95_ms"])),
            ("- forecast", lambda s: pair(s["forecast_p50_ms"], s["forecast_p95_ms"])),
            ("- plan", lambda s: pair(s["plan_p50_ms"], s["plan_p95_ms"])),
            ("- act (dry run)", lambda s: pair(s["act_p50_ms"], s["act_p95_ms"])),
            ("- rest (state store, metrics)", lambda s: pair(s["other_p50_ms"], s["other_p95_ms"])),
            ("samples read per cycle, mean / max", lambda s: pair(s["samples_mean"], s["samples_max"])),
            ("max samples per cycle / tenants", lambda s: f"{s['samples_per_tenant_max']:,.2f}"),
            ("Prometheus per cycle: engine / HTTP handler (ms)",
             lambda s: f"{s['prom_engine_ms_mean']:,.1f} / {s['prom_http_ms_mean']:,.1f}"),
            ("cold start to first plan (s)", lambda s: f"{s['cold_start_s']:.1f}"),
            ("- first collect (backfill)", lambda s: f"{s['cold_parts_s']['first_collect']:.1f}"),
            ("- first forecast", lambda s: f"{s['cold_parts_s']['first_forecast']:.1f}"),
            ("- start, imports, build runtime",
             lambda s: f"{sum(s['cold_parts_s'][k] for k in ('python_start', 'imports', 'build_runtime')):.1f}"),
            ("samples in the first cycle", lambda s: n(s["first_cycle_samples"])),
            ("daemon RSS peak / end (GiB)", lambda s: f"{s['rss_peak_gib']:.2f} / {s['rss_end_gib']:.2f}")]
    rows = [[label, *(f(s) for _, s, _ in cols)] for label, f in spec]
    d0 = load("cycle-1000.json")
    tg = d0["targets"]
    for k, target in tg.items():
        rows.append([f"goal: {target['what']} {goal(target)}",
                     *(verdict(met(d["targets"][k], s)) for d, s, _ in cols)])
    loads = [x for f in ("cycle-1000.json", "cycle-10000.json", "cycle-10000-12h.json")
             for key in ("load_avg_at_start", "load_avg_at_end") for x in load(f)[key]]
    out = [table(["tenants x history (days)", *(c[2] for c in cols)], rows), ""]
    base, inc = d0["scenarios"]["incremental"], d0["scenarios"]
    thr, full = inc.get("incremental-torch-threads-cores"), inc.get("full-reread")
    if full:
        out.append(f"- Re-reading the whole window every cycle, as the daemon did before the incremental history, "
                   f"reads {n(full['samples_max'])} samples and takes {full['total_p50_ms'] / 1000:.1f} s per cycle "
                   f"(p50), with Prometheus spending {full['prom_http_ms_mean'] / 1000:.1f} s per cycle in its HTTP "
                   f"handlers.")
    if thr:
        out.append(f"- With torch's own default (one thread per core) the forecast took {n(thr['forecast_p50_ms'])} ms "
                   f"p50 / {n(thr['forecast_p95_ms'])} ms p95 instead of {n(base['forecast_p50_ms'])} / "
                   f"{n(base['forecast_p95_ms'])} ms: on a machine whose cores are busy the threads of one small "
                   f"batch wait on each other.")
    big = load("cycle-10000.json")["scenarios"].get("incremental")
    if big:
        t0, t1 = d0["tenants"], load("cycle-10000.json")["tenants"]
        out.append(f"- From {n(t0)} to {n(t1)} tenants: collect x{big['collect_p50_ms'] / base['collect_p50_ms']:.0f} "
                   f"(p50), samples per cycle x{big['samples_max'] / base['samples_max']:.0f}, Prometheus's own time "
                   f"x{big['prom_engine_ms_mean'] / base['prom_engine_ms_mean']:.0f}, forecast "
                   f"x{big['forecast_p50_ms'] / base['forecast_p50_ms']:.0f}, plan {base['plan_p50_ms']:.0f} -> "
                   f"{big['plan_p50_ms']:.0f} ms, the rest {base['other_p50_ms']:.0f} -> {big['other_p50_ms']:.0f} ms; "
                   f"cold start {big['cold_start_s']:.0f} s, of which {big['cold_parts_s']['first_collect']:.0f} s "
                   f"reading {n(big['first_cycle_samples'])} samples.")
        phases = {k: big[f"{k}_p50_ms"] for k in ("collect", "forecast", "plan", "act", "other")}
        worst = max(phases, key=phases.get)
        out.append(f"- At {n(t1)} tenants the largest phase is {worst} ({n(phases[worst])} ms p50), the first to "
                   f"break the cycle goal on its own; the 12-hour columns forecast with the seasonal-naive fallback "
                   f"(the shipped LSTM needs more history).")
    def made(f: str) -> str:
        d = load(f)
        kind = d.get("forecaster_kind")
        return (f"`{f}` (commit {d.get('commit') or 'not recorded'}"
                + (f", `--forecaster {kind}`" if kind and kind != "auto" else "") + ")")

    out += ["", f"*From {made('cycle-1000.json')}, {made('cycle-10000.json')} and {made('cycle-10000-12h.json')} in "
                f"bench/out; 1-minute load average {min(loads):.1f} to {max(loads):.1f} during the runs.*"]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------------ replay

REPLAY_CASES = ("synthetic", "helios", "alibaba")


def replay(case: str) -> dict:
    return load(f"replay_{case}.json")


def replay_header(d: dict) -> str:
    t = d["tiers"]
    every = d["forecast_every"]
    return (f"**{d['case']}**: {sum(t.values())} tenants ({t['high']} high, {t['normal']} normal, {t['low']} low), "
            f"{n(d['capacity'])} GPUs on {d['gpus_per_node']}-GPU nodes, {d['steps'] / 1440:.0f} days measured "
            f"({n(d['steps'])} minutes), {len(d['runs'])} settings, {d['wall_seconds']:.0f} s wall for the replay, "
            f"forecaster {d['forecaster']}"
            + (f" (its LSTM candidates trained {d['forecaster_fit_epochs']} epochs)" if d.get("forecaster_fit_epochs")
               else "")
            + ", forecast "
            + ("every step, as the daemon does" if every == 1 else f"every {every} steps and shifted in between")
            + f", commit {d.get('commit', 'not recorded')}, load average "
            f"{d['loadavg_1m_start']:.1f} -> {d['loadavg_1m_end']:.1f}")


def replay_settings_table(d: dict) -> str:
    shown = {label for labels in d["frontiers"].values() for label in labels}
    rows = []
    for r in d["runs"]:
        if r["label"] not in shown:
            continue
        h, nm, lo = (r["tiers"][t] for t in ("high", "normal", "low"))
        starve = max(x["longest_starvation_min"] for x in r["tiers"].values())
        rows.append([r["label"], pct(r["utilization"]), f"{n(h['unmet_gpu_min'])} ({n(h['minutes_with_unmet'])})",
                     n(nm["unmet_gpu_min"]), n(lo["unmet_gpu_min"]),
                     f"{h['wait_p99_min']:.0f} / {nm['wait_p99_min']:.0f} / {lo['wait_p99_min']:.0f}", f"{starve:.0f}",
                     f"{n(r['preemptions'])} ({n(r['preemptions_for']['high'])})", n(r["work_lost_gpu_min"]),
                     f"{r['high_held_gpus_mean']:.0f}", n(r["idle_while_queued_gpu_min"]),
                     n(r["preempted_idle_gpu_min"])])
    return table(["setting", "util", "high unmet GPU-min (min)", "normal unmet", "low unmet",
                  "wait p99 high / normal / low, min", "longest starvation, min", "preemptions (for the high tier)",
                  "work lost GPU-min", "high-tier GPUs held (mean)", "idle while queued GPU-min",
                  "preempted, left idle GPU-min"], rows)


def _run_metric(r: dict, metric: str) -> float:
    return {"high_unmet": r["tiers"]["high"]["unmet_gpu_min"], "normal_unmet": r["tiers"]["normal"]["unmet_gpu_min"],
            "preemptions": r["preemptions"], "preempted_idle": r["preempted_idle_gpu_min"],
            "utilization": r["utilization"]}[metric]


METRIC_NAMES = {"high_unmet": "high-tier unmet", "normal_unmet": "normal-tier unmet", "preemptions": "preemptions",
                "preempted_idle": "GPU-min preempted, then idle", "utilization": "utilization"}


def _base(d: dict, t: dict) -> dict | None:
    """The setting a relative replay goal compares with: reactive's point, or the perfect forecast's point."""
    c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
    label = c["reactive_point"] if t.get("relative_to", "reactive") == "reactive" else c.get("perfect_point")
    return by.get(label) if label else None


def replay_verdict(d: dict, t: dict, run: dict) -> bool | None:
    """One of the JSON's goals for ``run``; None where the setting it is relative to did not run."""
    v = _run_metric(run, t["metric"])
    if not t.get("relative_to"):
        return OPS[t["op"]](v, t["value"])
    base = _base(d, t)
    return None if base is None else relative_met(t, v, _run_metric(base, t["metric"]))


def replay_verdicts(d: dict, run: dict | None = None) -> dict[str, bool | None]:
    """Each of the JSON's goals for the predictive comparison point (or for ``run``)."""
    c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
    pred = run or by[c["predictive_point"]]
    return {k: replay_verdict(d, t, pred) for k, t in d.get("targets", {}).items()}


def verdict3(ok: bool | None) -> str:
    return "no perfect-forecast setting at this utilization" if ok is None else verdict(ok)


def _change(t: dict, pred: float, react: float) -> str:
    if t["metric"] == "normal_unmet":
        return f"{100 * (pred / react - 1):+.0f}%" if react else "–"
    return pct(pred / react, 0) if react else "–"


def replay_comparison(d: dict) -> str:
    c = d["comparison"]
    if not c.get("predictive_point"):
        return f"No comparison: {c.get('verdict', 'no reactive or predictive runs')}."
    by = {r["label"]: r for r in d["runs"]}
    react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
    perf = by.get(c.get("perfect_point") or "")
    tg = d.get("targets", {})
    shown = {t["metric"]: t for t in tg.values()}
    rows = []
    for k in ("high_unmet", "normal_unmet", "preemptions", "preempted_idle", "utilization"):
        t = shown.get(k)
        rv, pv = _run_metric(react, k), _run_metric(pred, k)
        fv = _run_metric(perf, k) if perf else None
        fmt = pct if k == "utilization" else n
        if t and t.get("relative_to") == "perfect":
            pcell = f"{fmt(pv)} ({_change(t, pv, fv)} of the perfect forecast's)" if fv is not None else fmt(pv)
        elif k == "utilization":
            pcell = fmt(pv)
        else:
            pcell = f"{fmt(pv)} ({_change({'metric': k}, pv, rv)})"
        # what the perfect forecast reaches on the same goal: the rest of the way is forecast error
        fcell = "–" if fv is None else fmt(fv) + (f": {verdict3(replay_verdict(d, t, perf))}" if t else "")
        rows.append([t["what"] if t else METRIC_NAMES[k], fmt(rv), pcell, fcell,
                     verdict3(replay_verdict(d, t, pred)) if t else "no goal"])
    meets = ", ".join(c["predictive_settings_meeting_all"]) or "none"
    out = [f"At equal utilization: reactive's best point {c['reactive_point']} ({pct(c['reactive_utilization'])}) "
           f"against {c['predictive_point']} ({pct(c['predictive_utilization'])}), beside the perfect forecast's "
           + (f"point {c['perfect_point']} ({pct(c['perfect_utilization'])})" if perf else "(none at this utilization)")
           + ":", "",
           table(["target", "reactive", "predictive", "perfect forecast (same engine)", "verdict"], rows), "",
           f"(added rows, not targets: preemptions made for the high tier "
           f"{n(c['preemptions_for_high_tier']['reactive'])} "
           f"vs {n(c['preemptions_for_high_tier']['predictive'])}; GPUs held for the high tier on average "
           f"{c['high_held_gpus_mean']['reactive']:.0f} vs {c['high_held_gpus_mean']['predictive']:.0f}; "
           f"low-tier unmet {n(c['low_unmet']['reactive'])} vs {n(c['low_unmet']['predictive'])}; work lost "
           f"{n(c['work_lost_gpu_min']['reactive'])} vs {n(c['work_lost_gpu_min']['predictive'])} GPU-min; predictive "
           f"settings at this utilization that meet all targets at once: {meets})"]
    twin = c.get("perfect_same_knobs")
    if twin:
        out += ["", f"The perfect forecast with the predictive point's own knobs, {twin['label']} "
                f"({pct(twin['utilization'])}): high-tier unmet {n(twin['high_unmet'])}, normal-tier unmet "
                f"{n(twin['normal_unmet'])}, {n(twin['preemptions'])} preemptions, {n(twin['preempted_idle'])} GPU-min "
                "preempted and then idle."]
    if "perfect_targets" in c:
        rel = [t for t in tg.values() if t.get("relative_to")] or [
            {"metric": m, "what": m} for m in ("high_unmet", "normal_unmet", "preemptions")]
        prow = []
        for label in c["perfect_targets"]:
            r = by[label]
            cells = []
            for t in rel:
                b = _base(d, t)
                pv, rv = _run_metric(r, t["metric"]), _run_metric(b, t["metric"]) if b else 0
                cells.append(f"{n(pv)} ({_change(t, pv, rv)})" + (f": {verdict3(replay_verdict(d, t, r))}"
                                                                  if "op" in t else ""))
            prow.append([label, pct(r["utilization"]), *cells])
        if not prow:
            prow.append(["(none at this utilization)", "", *([""] * len(rel))])
        out += ["", "The same targets for the perfect forecast (the same engine fed the true future), every setting "
                "at this utilization (preemptions against the perfect forecast's point):", "",
                table(["perfect-forecast setting", "util", *(METRIC_NAMES[t["metric"]] for t in rel)], prow)]
    return "\n".join(out)


def _replay_case_block(case: str) -> Callable[[], str]:
    def render() -> str:
        d = replay(case)
        return "\n".join([replay_header(d), "", replay_settings_table(d), "", replay_comparison(d), "",
                          source([f"replay_{case}.json"])])
    return render


for _case in REPLAY_CASES:
    BLOCKS[f"replay-{_case}"] = _replay_case_block(_case)


# each what-if file, and the knob its predictive settings are summarised by (None: per knob-set only)
WHAT_IFS = (("replay_helios_preempt_leads.json", "preempt_lead_steps"), ("replay_synthetic_aging_knobs.json", None))


def _span(xs: list[float], fmt: Callable[[float], str]) -> str:
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)} to {fmt(hi)}"


def _knob_set(r: dict) -> tuple:
    """A run's knobs without the forecast quantile, which only predictive has: the key that pairs a predictive
    setting with the perfect forecast's (and reactive's) run of the same knobs, whatever order they were given in."""
    return tuple(sorted((k, v) for k, v in r["knobs"].items() if k != "quantile"))


def _knob_text(key: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in key) or "defaults"


def _ratio(a: float, b: float) -> str:
    return pct(a / b, 0) if b else "–"


def _what_if_groups(d: dict, f: str) -> dict[tuple, dict[str, dict]]:
    """Per knob-set, each strategy's run; a knob-set with two runs of one strategy (two predictive quantiles) would
    pair the perfect forecast with only one of them, so it is refused."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in d["runs"]:
        g = groups.setdefault(_knob_set(r), {})
        if r["strategy"] in g:
            raise ValueError(f"{f}: two {r['strategy']} runs with the knobs {_knob_text(_knob_set(r))}")
        g[r["strategy"]] = r
    return groups


@block("replay-what-if")
def replay_what_if() -> str:
    """`replay_bench.py --settings` runs: each setting, then per knob-set predictive's preemptions against the
    perfect forecast's with the same knobs (the third target, which the sweep's comparison checks only at one
    point)."""
    out = []
    for f, by in WHAT_IFS:
        d = load(f)
        rows = []
        for r in d["runs"]:
            t = r["tiers"]
            pf = r["preemptions_for"]
            rows.append([r["label"], pct(r["utilization"]), n(t["high"]["unmet_gpu_min"]),
                         n(t["normal"]["unmet_gpu_min"]), n(t["low"]["unmet_gpu_min"]),
                         f"{n(r['preemptions'])} ({n(pf['high'])} / {n(pf['normal'])} / {n(pf['low'])})",
                         n(r["preempted_idle_gpu_min"]), n(r["idle_while_queued_gpu_min"])])
        pairs = {k: g for k, g in _what_if_groups(d, f).items() if "predictive" in g and "perfect" in g}
        cmp_rows = []
        for k, g in pairs.items():
            p, q = g["predictive"], g["perfect"]
            gap = {tier: p["preemptions_for"][tier] - q["preemptions_for"][tier] for tier in ("high", "normal", "low")}
            cmp_rows.append([_knob_text(k), n(p["preemptions"]), n(q["preemptions"]),
                             _ratio(p["preemptions"], q["preemptions"]),
                             f"{p['preemptions'] - q['preemptions']:+,} ({gap['high']:+,} / {gap['normal']:+,} / "
                             f"{gap['low']:+,})"])
        out += [f"**{d['case']}**, forecaster {d['forecaster']}, {d['steps'] / 1440:.0f} days, {len(d['runs'])} "
                f"settings:", "",
                table(["setting", "util", "high unmet GPU-min", "normal unmet", "low unmet",
                       "preemptions (for high / normal / low)", "preempted, left idle GPU-min",
                       "idle while queued GPU-min"], rows), ""]
        if cmp_rows:
            out += [table(["knobs (both strategies)", "predictive preemptions", "perfect forecast's",
                           "predictive / perfect", "predictive - perfect (for high / normal / low)"], cmp_rows), ""]
        if by:   # predictive's settings beside the perfect forecast's, summarised per value of the knob varied
            vals: dict[object, list[dict]] = {}
            for k, g in pairs.items():
                v = dict(k).get(by)
                if v is not None:
                    vals.setdefault(v, []).append(g)
            srows = [[f"{by} = {v}", str(len(gs)),
                      _span([g["predictive"]["tiers"]["high"]["unmet_gpu_min"] for g in gs], n),
                      _span([g["predictive"]["preemptions"] / g["perfect"]["preemptions"] for g in gs
                             if g["perfect"]["preemptions"]] or [float("nan")], lambda r: pct(r, 0)),
                      _span([g["predictive"]["preempted_idle_gpu_min"] for g in gs], n),
                      _span([g["perfect"]["preempted_idle_gpu_min"] for g in gs], n)]
                     for v, gs in sorted(vals.items(), key=lambda kv: str(kv[0]).zfill(12))]
            out += [table([f"predictive, by {by}", "settings", "high unmet GPU-min", "preemptions / perfect's",
                           "preempted, left idle GPU-min", "the perfect forecast's preempted, left idle"], srows),
                    ""]
        out += [source([f], d), ""]
    out += [_what_if_seeds()]
    return "\n".join(out).rstrip("\n")


# `replay_bench.py --settings @bench/whatif/<file>.json --suffix _<file>`: the perfect forecast told the true future
# only `foresight_steps` ahead, or only a share of the rises in it (`rises_seen`), at the knobs of a published
# comparison's points; each beside the sweep whose comparison it is checked against (the same window and tiers)
FORESIGHT_FILES = (("replay_helios_foresight.json", "replay_helios.json"),
                   ("replay_helios_rises.json", "replay_helios.json"),
                   ("replay_helios_unseen_foresight.json", "replay_helios_unseen.json"),
                   ("replay_helios_unseen_rises.json", "replay_helios_unseen.json"),
                   ("replay_synthetic_foresight.json", "replay_synthetic.json"))
# what each target's metric is called in the table's last column
SHORT = {"high_unmet": "high tier", "normal_unmet": "normal tier", "preemptions": "preemptions",
         "preempted_idle": "preempted idle", "utilization": "utilization"}
_SAME = ("utilization", "preemptions", "preempted_idle_gpu_min")


def _same_run(a: dict, b: dict) -> bool:
    return a["tiers"] == b["tiers"] and all(a[k] == b[k] for k in _SAME)


def _points(f: str, pub_name: str) -> tuple[dict, dict, dict, dict]:
    """A what-if file, and its sweep's reactive and perfect-forecast points and targets; the what-if's reactive run
    must be the published one (same engine, same window), or the two were measured apart and are not compared."""
    d, pub = load(f), load(pub_name)
    cmp_ = pub["comparison"]
    by_label = {x["label"]: x for x in pub["runs"]}
    r, pf = by_label[cmp_["reactive_point"]], by_label[cmp_["perfect_point"]]
    mine = next((x for x in d["runs"] if x["label"] == r["label"]), None)
    if mine is None or not _same_run(mine, r):
        raise ValueError(f"{f}: its {r['label']} is not the published one in {pub_name}: measure both at one commit")
    again = next((x for x in d["runs"] if x["label"] == pf["label"]), None)
    if again is not None and not _same_run(again, pf):
        raise ValueError(f"{f}: its {pf['label']} is not the published one in {pub_name}: measure both at one commit")
    return d, r, pf, pub["targets"]


def _base_label(x: dict) -> str:
    """A run's label without the perfect forecast's own knobs (its knob set), as the replay writes labels."""
    from daemon.sim.replay import PERFECT_KNOBS, Meter

    return Meter(x["strategy"], {k: v for k, v in x["knobs"].items() if k not in PERFECT_KNOBS}).label


def _seen_share(x: dict) -> float | None:
    """The share of the high tier's rises a rises_seen run saw coming (the replay's count, not the share asked)."""
    c = x.get("rises_high")
    return c["seen"] / c["rises"] if c and c["rises"] else None


def _missed(x: dict, r: dict, pf: dict, tg: dict) -> list[str]:
    """The targets run ``x`` misses against reactive's point ``r`` and the perfect forecast's ``pf`` (and equal
    utilization, if it is below reactive's point less the tolerance)."""
    from daemon.sim.report import UTIL_TOLERANCE, verdicts

    missed = [SHORT[tg[k]["metric"]] for k, v in verdicts(tg, x, r, pf).items() if v is not True]
    if x["utilization"] < r["utilization"] - UTIL_TOLERANCE:
        missed.append("equal utilization")
    return missed


def _rises_bracket(f: str, pub_name: str, foresight: int) -> tuple[float | None, float | None]:
    """At this foresight, the share of the high tier's rises seen by the run with the fewest seen that meets every
    target, and by the run with the most seen under that which misses one (None where there is none): between the
    two lies what the perfect forecast has to see, as far as these runs tell. Returns (below, need)."""
    from daemon.sim.replay import FORESIGHT, RISES_SEEN

    d, r, pf, tg = _points(f, pub_name)
    runs = [x for x in d["runs"] if x["strategy"] == "perfect" and x["knobs"].get(FORESIGHT) == foresight
            and RISES_SEEN in x["knobs"] and _seen_share(x) is not None]
    meet = [_seen_share(x) for x in runs if not _missed(x, r, pf, tg)]
    need = min(meet) if meet else None
    miss = [_seen_share(x) for x in runs if _missed(x, r, pf, tg) and (need is None or _seen_share(x) < need)]
    return (max(miss) if miss else None), need


def _foresight_case(f: str, pub_name: str, drain: int) -> list[str]:
    """One what-if file of the perfect forecast's own knobs, checked against its sweep's comparison points."""
    from daemon.sim.replay import FORESIGHT, RISES_SEEN

    d, r, pf, tg = _points(f, pub_name)
    rows, least_f, least_r, same0 = [], {}, {}, []
    rh, rn, ri = r["tiers"]["high"]["unmet_gpu_min"], r["tiers"]["normal"]["unmet_gpu_min"], r["preempted_idle_gpu_min"]
    for x in d["runs"]:
        if x["strategy"] == "reactive":
            continue
        missed = _missed(x, r, pf, tg)
        fs, share, seen_share = x["knobs"].get(FORESIGHT), x["knobs"].get(RISES_SEEN), _seen_share(x)
        base = _base_label(x)
        if x["strategy"] == "perfect" and share is None and fs is not None:
            least_f.setdefault(base, None)
            if not missed:
                least_f[base] = min(fs, least_f[base] if least_f[base] is not None else fs)
        elif x["strategy"] == "perfect" and share is not None:
            key = f"{base} seeing {'the whole horizon' if fs is None else f'{fs} steps'} ahead"
            least_r.setdefault(key, None)
            if not missed and seen_share is not None:
                least_r[key] = min(seen_share, least_r[key] if least_r[key] is not None else seen_share)
        if x["strategy"] == "perfect" and fs == 0 and share is None:
            # seeing nothing ahead, the engine is reactive at the same headroom: the sweep's run, number for number
            twin = next((y for y in load(pub_name)["runs"] if y["strategy"] == "reactive"
                         and y["knobs"] == {"headroom": x["knobs"].get("headroom")}), None)
            same0.append(f"{twin['label'] if twin else 'no reactive run at its headroom'}: "
                         f"{'the same numbers' if twin and _same_run(twin, x) else 'different numbers'}")
        hi, nm, idle = x["tiers"]["high"]["unmet_gpu_min"], x["tiers"]["normal"]["unmet_gpu_min"], \
            x["preempted_idle_gpu_min"]
        perfect = x["strategy"] == "perfect"
        rows.append([base, ("the whole horizon" if fs is None else str(fs)) if perfect else "–",
                     (f"{pct(share, 0)} asked, " + (f"{pct(seen_share, 0)} came" if seen_share is not None
                                                     else "not counted") if share is not None else "all")
                     if perfect else "–",
                     pct(x["utilization"]), f"{n(hi)} ({_ratio(hi, rh)})",
                     f"{n(nm)} ({(nm / rn - 1) * 100:+.1f}%)" if rn else n(nm),
                     f"{n(x['preemptions'])} ({_ratio(x['preemptions'], pf['preemptions'])})",
                     f"{n(idle)} ({_ratio(idle, ri)})", "**all met**" if not missed else "misses " + ", ".join(missed)])
    where = f", window from {d['window_start'][:10]}, high tier {', '.join(d['high_tier'])}" \
        if "unseen" in pub_name else ""
    said = [f"**{d['case']}**{where}: against reactive's point {r['label']} ({pct(r['utilization'])}; high-tier "
            f"unmet {n(rh)}, normal-tier {n(rn)}, {n(ri)} GPU-min preempted and left idle) and the perfect forecast's "
            f"point {pf['label']} ({n(pf['preemptions'])} preemptions), from `bench/out/{pub_name}`."]
    if least_f:
        said.append("The least foresight that meets every target, per knob set: "
                    + "; ".join(f"{k} {f'{v} steps' if v is not None else 'none of these'}"
                                for k, v in least_f.items()) + f" (a preemption drains for {drain} steps).")
    if least_r:
        said.append("The least share of the high tier's rises seen (as they came) that meets every target, per knob "
                    "set: " + "; ".join(f"{k}: {pct(v, 0) if v is not None else 'none of these'}"
                                        for k, v in least_r.items()) + ".")
    if same0:
        said.append("Seeing nothing ahead (foresight 0), against the sweep's reactive run at the same headroom: "
                    + "; ".join(same0) + ".")
    return [" ".join(said), "",
            table(["setting", "foresight, steps", "rises seen", "util", "high unmet GPU-min (of reactive's)",
                   "normal unmet (against reactive's)", "preemptions (of the perfect point's)",
                   "preempted, left idle GPU-min (of reactive's)", "targets, at equal utilization"], rows),
            "", source([f], d), ""]


@block("replay-foresight")
def replay_foresight() -> str:
    """How far ahead, and how many of the rises, the perfect forecast must see for the engine to meet #26's targets:
    each setting checked, target by target, against the published comparison's reactive point and perfect-forecast
    point (the sweep's own JSON), at that utilization. The what-if's reactive run must be the published one (same
    engine, same window), or the two files were measured apart and are not compared."""
    from daemon.config import Config

    drain = Config().source.simulator.drain_steps
    out = []
    for f, pub_name in FORESIGHT_FILES:
        out += _foresight_case(f, pub_name, drain)
    return "\n".join(out).rstrip("\n")


# the rises what-if (and its sweep) of each rises_bench case, where one was run: replay_<case>_rises.json
RISES_WHAT_IF = {f.removeprefix("replay_").removesuffix("_rises.json"): (f, pub)
                 for f, pub in FORESIGHT_FILES if f.endswith("_rises.json")}


@block("replay-rises")
def replay_rises() -> str:
    """bench/rises_bench.py: what an alarm after each high-tier rise sees of the next rises, the drain ahead, beside
    the share of rises the perfect forecast had to see (the rises what-if) to meet every target."""
    d = load("rises.json")
    rows, said = [], []
    for case, c in d["cases"].items():
        by = c["by_after"]
        cells = [f"{pct(by[str(a)]['recall'], 0)} / {pct(by[str(a)]['alarm_share'], 0)} / "
                 f"{pct(by[str(a)]['precision'], 0)}" for a in d["after_steps"]]
        where = f"{case} (from {c['window_start'][:10]}; {', '.join(c['high_tier'])})"
        rows.append([where, n(by[str(d['after_steps'][0])]["rises"]), *cells])
        if case in RISES_WHAT_IF:
            below, need = _rises_bracket(*RISES_WHAT_IF[case], c["drain_steps"])
            if need is None:
                said.append(f"**{case}**: no share of rises seen in its what-if meets every target")
                continue
            gap = (f"between {pct(below, 0)} (a target missed) and {pct(need, 0)} (all met)" if below is not None
                   else f"at most {pct(need, 0)}")
            reach = [a for a in d["after_steps"] if by[str(a)]["recall"] >= need]
            if reach:
                a = reach[0]
                said.append(f"**{case}**: the perfect forecast had to see {gap} of the high tier's rises the drain "
                            f"ahead, with no false alarm; an alarm after each rise sees {pct(by[str(a)]['recall'], 0)} "
                            f"when it lasts {a} steps, alarming at {pct(by[str(a)]['alarm_share'], 0)} of the steps, "
                            f"{pct(1 - by[str(a)]['precision'], 0)} of its alarms followed by no rise within the drain")
            else:
                a = max(d["after_steps"], key=lambda a: by[str(a)]["recall"])
                verdict = "short of it" if below is None or by[str(a)]["recall"] <= below else \
                    "inside that bracket, so these runs cannot tell whether it would do"
                said.append(f"**{case}**: the perfect forecast had to see {gap} of the high tier's rises the drain "
                            f"ahead, with no false alarm; an alarm after each rise sees at most "
                            f"{pct(by[str(a)]['recall'], 0)} ({verdict}; lasting {a} steps, alarming at "
                            f"{pct(by[str(a)]['alarm_share'], 0)} of the steps, {pct(1 - by[str(a)]['precision'], 0)} "
                            "of its alarms followed by no rise within the drain)")
    head = ["case (high tier)", "rises"] + [f"alarm lasting {a} steps: rises seen / steps alarming / alarms "
                                            "followed by a rise" for a in d["after_steps"]]
    return "\n".join([table(head, rows), "", *[f"- {x}." for x in said], "",
                      source(["rises.json", *[f for f, _ in RISES_WHAT_IF.values()]], d)])


SEED_FILES = ("replay_synthetic.json", "replay_synthetic_unseen.json")   # their sweeps run the same knobs
SEED_POINT = (("reactive", {"headroom": 0.15}), ("predictive", {"quantile": 0.5, "headroom": 0.15,
                                                                "preempt_cost_aware": False}),
              ("predictive", {"quantile": 0.9, "headroom": 0.15, "preempt_cost_aware": False}),
              ("perfect", {"headroom": 0.15, "preempt_cost_aware": False}))


def _what_if_seeds() -> str:
    """The synthetic comparison's knobs (bench/whatif/synthetic_point_seeds.json) on workloads drawn with other
    seeds, beside the published seed and the unseen one: how much predictive's preemptions against the perfect
    forecast's with the same knobs move from one workload (and its chosen forecaster) to another."""
    files = [*SEED_FILES, *sorted(p.name for p in OUT.glob("replay_synthetic_seed*_point.json"))]
    rows = []
    for f in files:
        d = load(f)
        by = {(r["strategy"], tuple(sorted(r["knobs"].items()))): r for r in d["runs"]}
        want = [(s, tuple(sorted(k.items()))) for s, k in SEED_POINT]
        missing = [w for w in want if w not in by]
        if missing:
            raise ValueError(f"{f} has no run of {missing}")
        rs = [by[w] for w in want]
        perf = rs[3]["preemptions"]
        rows.append([str(d.get("workload_seed", "–")), d["forecaster"],
                     " / ".join(n(r["preemptions"]) for r in rs),
                     " / ".join(_ratio(r["preemptions"], perf) for r in rs[1:3]),
                     " / ".join(n(r["tiers"]["high"]["unmet_gpu_min"]) for r in rs),
                     " / ".join(pct(r["utilization"]) for r in rs), d.get("commit", "not recorded")])
    return "\n".join([
        "The synthetic comparison's knobs (headroom 0.15; predictive at p50 and p90, the cost-aware rule off) on "
        "workloads drawn with other seeds, each with the forecaster chosen on its own history (same knobs, not "
        "each workload's own comparison point):", "",
        table(["seed", "forecaster", "preemptions: reactive / p50 / p90 / perfect", "p50 / p90 against the perfect "
               "forecast's", "high unmet GPU-min: reactive / p50 / p90 / perfect", "util: reactive / p50 / p90 / "
               "perfect", "commit"], rows), "", source(files)])


@block("skill-gate-replay")
def skill_gate_replay() -> str:
    """The skill gate in the replay (issue 40, item 2): bench/gate_docs.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gate_docs

    return gate_docs.render(load, lambda f: (OUT / f).exists(), pct, n, table, replay_header,
                            lambda files, d: source(files, d))


@block("replay-forecasters")
def replay_forecasters() -> str:
    out = []
    for case in REPLAY_CASES:
        d = replay(case)
        ch = d["forecaster_choice"]
        scores = sorted(ch.get("scores", {}).items(), key=lambda kv: kv[1])
        blend = ch.get("blend")
        chosen = replay_model_name(scores[0][0], blend)
        others = ", ".join(f"{replay_model_name(k, blend)} {v:.4f}" for k, v in scores[1:])
        out.append(f"- **{case}**: {chosen} ({scores[0][1]:.4f}; {others}), scored on {ch.get('scored_on', '?')}.")
    out += ["", "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json` "
                "(`forecaster_choice`).*"]
    return "\n".join(out)


@block("replay-summary")
def replay_summary() -> str:
    data = {c: replay(c) for c in REPLAY_CASES}
    names = {}
    for d in data.values():
        for k, t in d.get("targets", {}).items():
            names.setdefault(k, t)
    rows = []
    for k, t in names.items():
        row = [t["what"]]
        for case, d in data.items():
            c = d["comparison"]
            by = {r["label"]: r for r in d["runs"]}
            pred = by[c["predictive_point"]]
            pv = _run_metric(pred, t["metric"])
            if t.get("relative_to"):
                base = _base(d, t)
                if base is None:
                    row.append(f"{n(pv)}, no perfect-forecast setting at this utilization")
                    continue
                rv = _run_metric(base, t["metric"])
                whose = "" if t["relative_to"] == "reactive" else " (perfect forecast)"
                nums = f"{n(pv)} vs {n(rv)}{whose}, {_change(t, pv, rv)}"
            else:
                nums = pct(pv)
            row.append(f"{verdict(replay_verdict(d, t, pred))} ({nums})" if k in d.get("targets", {}) else (
                f"{nums} (no goal)" if t.get("relative_to") else "–"))
        rows.append(row)
    for what, key in (("(added, not a target) a predictive setting meeting all at once",
                       "predictive_settings_meeting_all"),
                      ("(added, not a target) a perfect-forecast setting meeting all at once",
                       "perfect_settings_meeting_all")):
        rows.append([what, *(listing(d["comparison"].get(key, [])) if d.get("targets") else "–"
                             for d in data.values())])
    head = ["target", *(f"{c}" + ("" if data[c].get("targets") else " (no target)") for c in REPLAY_CASES)]
    return "\n".join([table(head, rows), "",
                      "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json`.*"])


SIZING_CASES = ("synthetic", "helios", "alibaba", "servegen")


def _binding(z: dict, slo: dict) -> str:
    """The SLO part nearest its limit at the found size (what a smaller cluster would break first)."""
    parts = {"high": z["high_unmet_share"] / slo["high"] if slo["high"] else 0.0,
             "normal": z["normal_unmet_share"] / slo["normal"] if slo["normal"] else 0.0}
    return max(parts, key=lambda k: parts[k])


def _sizing_row(case: str, z: dict, slo: dict) -> list[str]:
    if not z["met"]:
        big = [t for t in z.get("tries", []) if t.get("nodes") == z["largest_nodes_tried"]]
        why = "" if not big or big[0].get("high_throttled_share") is None else \
            f" (high requests {pct(big[0]['high_throttled_share'], 2)} throttled there)"
        return [case, z["strategy"], f"**not met**: {z['largest_nodes_tried']} nodes (the largest tried) miss{why}",
                "–", "–", "–", "–", "–", "–", str(z["replays"])]
    below = {True: "misses", False: "**also meets** (not the smallest)", None: "–"}[z["one_node_less_misses"]]
    if z.get("monotone_in_tries") is False:
        below += "; **not monotone**: " + z["note"].split("here: ")[-1].split(" (")[0]
    return [case, z["strategy"], f"{n(z['gpus'])} ({z['nodes']} nodes)", n(z["gpu_hours"]),
            pct(z["allocated_utilization"]), pct(z["busy_utilization"]),
            f"{pct(z['high_unmet_share'], 3)} / {pct(z['normal_unmet_share'], 2)}"
            + ("" if z.get("high_throttled_share") is None else
               f"; high requests {pct(z['high_throttled_share'], 3)} throttled"), _binding(z, slo), below,
            str(z["replays"])]


@block("replay-sizing")
def replay_sizing() -> str:
    """bench/sizing_bench.py: each strategy's smallest cluster for the SLO per trace, and the issue's targets."""
    rows, notes, files = [], [], []
    for case in SIZING_CASES:
        f = f"sizing_{case}.json"
        if not (OUT / f).exists():
            continue
        d = load(f)
        files.append(f)
        rows += [_sizing_row(case, z, d["slo"]) for z in d["strategies"].values()]
        sv = "; ".join(f"{'saves' if v >= 0 else 'needs'} {pct(abs(v))} {'of' if v >= 0 else 'more than'} {s}'s GPUs"
                       if v is not None else f"no comparison with {s} (not met)"
                       for s, v in d["savings"].items() if s in ("static", "reactive"))
        how = " (chosen among the baselines)" if d.get("forecaster_fit_epochs") is None else ""
        notes.append(f"- **{case}** ({d['window'][0][:16]} to {d['window'][1][:16]}, {d['steps']:,} steps, forecaster "
                     f"{d['forecaster']}{how}; the trace's own size {d['own_nodes']} nodes; commit {d['commit']}, "
                     f"{load_avg(d)}, {d['bench_wall_seconds'] / 60:.0f} min): predictive {sv}.")
        if "service_headroom" in d:  # inference services: each strategy sized at its best HPA headroom
            hr = ", ".join(f"{k} {v:g}" for k, v in d["service_headroom"].items())
            notes.append(f"  - services' cold start {d['service_cold_start_min']:g} min; each strategy at the "
                         f"services' HPA headroom of {', '.join(d['by_service_headroom'])} with the fewest GPUs "
                         f"(the first tried where it met at none): {hr}.")
        for t in d["targets"].values():
            got = "not measured (a strategy missed the SLO)" if t["saving"] is None else (
                f"{verdict(t['met'])}: {pct(t['saving'])}, {'+' if t['gap'] >= 0 else ''}"
                f"{100 * t['gap']:.1f} points against the goal")
            notes.append(f"  - target: {t['what']}: {got}.")
    if not files:
        return "*No `bench/out/sizing_*.json` yet: run `python bench/sizing_bench.py`.*"
    head = ["trace", "strategy", "GPUs at the SLO", "GPU-hours", "allocated util.", "busy util.",
            "high / normal unmet", "nearest its limit", "one node less", "replays"]
    return "\n".join([table(head, rows), "", *notes, "", source(files)])


@block("replay-findings")
def replay_findings() -> str:
    out = []
    data = {c: replay(c) for c in REPLAY_CASES}
    for case, d in data.items():
        c, by = d["comparison"], {r["label"]: r for r in d["runs"]}
        react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
        bits = []
        # predictive settings that meet the high-tier goal, and how far below reactive's utilization they run
        hi = d.get("targets", {}).get("high_unmet_at_most_half")
        if hi and not replay_verdicts(d)["high_unmet_at_most_half"]:
            ok = [r for r in d["runs"] if r["strategy"] == "predictive"
                  and relative_met(hi, _run_metric(r, "high_unmet"), _run_metric(react, "high_unmet"))]
            if ok:
                gaps = [100 * (react["utilization"] - r["utilization"]) for r in ok]
                bits.append(f"{len(ok)} predictive settings leave at most half of reactive's high-tier unmet demand, "
                            f"at {min(gaps):.1f} to {max(gaps):.1f} points below reactive's utilization (outside the "
                            f"half-point tolerance)")
        aged = [x["preemptions"] - x["preemptions_for"]["high"] for x in (react, pred)]
        bits.append(f"preemptions made for tenants protected by aging, not for the high tier: {n(aged[0])} of "
                    f"reactive's {n(react['preemptions'])}, {n(aged[1])} of predictive's {n(pred['preemptions'])}")
        bits.append(f"preempted GPUs left idle: {n(pred['preempted_idle_gpu_min'])} GPU-min predictive against "
                    f"{n(react['preempted_idle_gpu_min'])} reactive")
        best = max(d["runs"], key=lambda r: r["utilization"])
        static = [r for r in d["runs"] if r["strategy"] == "static"]
        top_static = max(static, key=lambda r: r["utilization"])
        pool = next((r for r in static if r["knobs"].get("reserve_share") == 0.2), None)
        bits.append(f"static's best utilization {pct(top_static['utilization'])}, "
                    + ("the highest of all settings" if top_static is best else
                       f"{100 * (best['utilization'] - top_static['utilization']):.1f} points under the highest "
                       f"({best['label']})")
                    + (f"; with a 20% pool it leaves {n(_run_metric(pool, 'high_unmet'))} GPU-min of high-tier demand "
                       f"unmet" if pool else ""))
        better = [label for label in c.get("perfect_targets", {})
                  if _run_metric(by[label], "high_unmet") > _run_metric(pred, "high_unmet")]
        if better:
            bits.append("perfect-forecast settings at this utilization that leave more high-tier demand unmet than "
                        f"the predictive point: {listing(better)}")
        out.append(f"- **{case}**: " + "; ".join(bits) + ".")
    syn = data["synthetic"]
    frontier = set(syn["frontiers"]["reactive"])
    starve = [max(x["longest_starvation_min"] for x in r["tiers"].values())
              for r in syn["runs"] if r["label"] in frontier]
    sys.path.insert(0, str(ROOT))
    from daemon.config import PolicyConfig

    out.append(f"- The longest summed wait of any job, for reactive on synthetic (its frontier): {min(starve):.0f} to "
               f"{max(starve):.0f} minutes, against `max_wait_steps = {PolicyConfig().max_wait_steps}`.")
    out += ["", "*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json`.*"]
    return "\n".join(out)


def _same_setting(d: dict, r: dict, drop: str, **change) -> dict | None:
    """The run of `d` of r's strategy whose knobs are r's without knob `drop` and with `change`: the same setting
    with one knob back at its default (and others set)."""
    knobs = {k: v for k, v in r["knobs"].items() if k != drop} | change
    return next((x for x in d["runs"] if x["strategy"] == r["strategy"] and x["knobs"] == knobs), None)


@block("replay-cost-rule")
def replay_cost_rule() -> str:
    """What the cost-aware rule changed: per plan (the same plan made again with the rule off, counted by the
    replay) and end to end (settings run with the rule on and off)."""
    out = []
    for case in REPLAY_CASES:
        d = replay(case)
        # weight 1, the default (the sweep's larger weight is the block above's)
        counted = [r for r in d["runs"] if r.get("cost_rule") and r["knobs"].get("preempt_worth_weight", 1) == 1]
        if not counted:
            continue
        refused = [r["cost_rule"]["refused"] for r in counted]
        changed = [r["cost_rule"]["steps_changed"] / r["steps"] for r in counted]
        out.append(f"- **{case}**: over the {len(counted)} settings with the rule on at weight 1 (predictive and "
                   "perfect), "
                   f"{n(min(refused))} to {n(max(refused))} job preemptions refused per setting, in "
                   f"{pct(min(changed))} to {pct(max(changed))} of the plans.")
        rows = []
        for off in (r for r in d["runs"] if r["knobs"].get("preempt_cost_aware") is False):
            on = _same_setting(d, off, "preempt_cost_aware")
            if on is None or not on.get("cost_rule"):
                continue
            x = on["cost_rule"]
            rows.append([on["label"], f"{n(x['steps_changed'])}", f"{n(x['refused'])} ({n(x['jobs_refused'])})",
                         n(x["other_choice"]),
                         *(f"{fmt(_run_metric(off, m))} -> {fmt(_run_metric(on, m))}"
                           for m, fmt in (("utilization", pct), ("high_unmet", n), ("normal_unmet", n),
                                          ("preemptions", n), ("preempted_idle", n)))])
        if rows:
            out += ["", table(["setting (rule on)", "plans changed", "job preemptions refused (distinct jobs)",
                               "made instead", "util, rule off -> on", "high-tier unmet", "normal-tier unmet",
                               "preemptions", "GPU-min preempted, then idle"], rows), ""]
    out += ["*From `bench/out/replay_synthetic.json`, `replay_helios.json` and `replay_alibaba.json` "
            "(`cost_rule` per setting). Per plan: the same plan made again with the rule off; a job refused at "
            "several steps counts at each, and once in brackets. End to end: the same setting run with the rule "
            "off.*"]
    return "\n".join(out)


@block("replay-worth-weight")
def replay_worth_weight() -> str:
    """The cost-aware rule's worth weight against the rule off, with the perfect forecast."""
    if not (OUT / "replay_worth_weight.json").exists():
        return "Not measured yet."
    d = load("replay_worth_weight.json")
    rows = []
    for case, c in d["cases"].items():
        for r in c["runs"]:
            rows.append([case, r["label"], pct(r["utilization"]), *(n(_run_metric(r, m)) for m in
                                                                   ("high_unmet", "normal_unmet")),
                         n(r["tiers"]["low"]["unmet_gpu_min"]), n(r["preemptions"]), n(r["work_lost_gpu_min"]),
                         n(r["preempted_idle_gpu_min"])])
    return "\n".join([table(["case", "perfect-forecast setting", "util", "high unmet", "normal unmet", "low unmet",
                              "preemptions", "work lost GPU-min", "preempted, then idle GPU-min"], rows), "",
                       source(["replay_worth_weight.json"], d)])


@block("replay-worth-weight-fitted")
def replay_worth_weight_fitted() -> str:
    """The cost-aware rule at the sweep's larger worth weight against weight 1 and the rule off, with each case's
    fitted forecaster (predictive) and the perfect forecast, per setting of the published sweep."""
    out, shown, skipped = [], [], []
    for case in REPLAY_CASES:
        d = replay(case)
        heavy = [r for r in d["runs"] if r["knobs"].get("preempt_worth_weight", 1) != 1
                 and r["knobs"].get("preempt_cost_aware", True)]
        if not heavy:
            skipped.append(case)
            continue
        rows, counts, pairs = [], {}, []
        for r in heavy:
            one = _same_setting(d, r, "preempt_worth_weight")
            off = _same_setting(d, r, "preempt_worth_weight", preempt_cost_aware=False)
            if one is None or off is None:
                continue
            pairs.append((one, r))
            w = r["knobs"]["preempt_worth_weight"]
            rows.append([one["label"], f"{w:g}", *(" / ".join(fmt(_run_metric(x, m)) for x in (off, one, r))
                                                   for m, fmt in (("utilization", pct), ("high_unmet", n),
                                                                  ("normal_unmet", n), ("preemptions", n),
                                                                  ("preempted_idle", n)))])
            c = counts.setdefault(r["strategy"], {"n": 0, **{f"{m}_{s}": 0 for m in ("high", "pre", "normal")
                                                             for s in ("less", "more")}})
            c["n"] += 1
            for m, key in (("high_unmet", "high"), ("preemptions", "pre"), ("normal_unmet", "normal")):
                c[f"{key}_less"] += _run_metric(r, m) < _run_metric(one, m)
                c[f"{key}_more"] += _run_metric(r, m) > _run_metric(one, m)
        if not rows:
            skipped.append(case)
            continue
        shown.append(case)
        said = "; ".join(f"{s}, {c['n']} settings: less high-tier unmet in {c['high_less']} (more in "
                         f"{c['high_more']}), fewer preemptions in {c['pre_less']} (more in {c['pre_more']}), less "
                         f"normal-tier unmet in {c['normal_less']} (more in {c['normal_more']})"
                         for s, c in counts.items())
        ruled = [x for p in pairs for x in p if x["strategy"] == "predictive" and x.get("cost_rule")]
        if ruled and all(x["cost_rule"]["steps_changed"] == 0 for x in ruled):
            said += (". With this forecaster the rule changed no plan in any of these predictive settings, at weight "
                     "1 or at the larger weight: each made the same preemptions as the same plan with the rule off, "
                     "so this trace says nothing about the weight with it")
        out += [f"- **{case}** (forecaster {d['forecaster']}), the larger weight against weight 1 at the same "
                f"setting: {said}.", "",
                table(["setting (weight 1)", "weight", "util: off / 1 / weight", "high-tier unmet",
                       "normal-tier unmet", "preemptions", "GPU-min preempted, then idle"], rows), ""]
    if not out:
        return "Not measured yet: the committed replays predate the sweep's worth weight."
    if skipped:
        out.append(f"Not in this sweep's committed replay: {', '.join(skipped)} (run before the weight was added).")
        out.append("")
    out.append(source([f"replay_{c}.json" for c in shown]))
    return "\n".join(out)


@block("replay-forecast-every")
def replay_forecast_every() -> str:
    """The published replays against the same replays forecasting at the other pace (every step, as the daemon,
    or every 5 steps, shifted in between)."""
    rows: list[list[str]] = []
    note: list[str] = []
    bullets: list[str] = []
    for case in ("synthetic", "helios"):
        d = replay(case)
        other_name = next((f.name for f in sorted(OUT.glob(f"replay_{case}_every*.json"))), None)
        if other_name is None:
            continue
        o = load(other_name)
        for x in sorted((d, o), key=lambda x: x["forecast_every"]):
            c, by = x["comparison"], {r["label"]: r for r in x["runs"]}
            p = by[c["predictive_point"]]
            v = replay_verdicts(x)
            met_n = sum(ok is True for ok in v.values())
            rows.append([case, f"{x['forecast_every']}" + (" (published)" if x is d else ""),
                         f"{x['wall_seconds']:.0f} s / {x['replay_cpu_seconds']:.0f} s", c["predictive_point"],
                         pct(p["utilization"]), n(_run_metric(p, "high_unmet")), n(_run_metric(p, "normal_unmet")),
                         n(p["preemptions"]), n(p["preempted_idle_gpu_min"]), f"{met_n} of {len(v)}"])
        every = {x["forecast_every"]: {r["label"]: r for r in x["runs"] if r["strategy"] == "predictive"}
                 for x in (d, o)}
        fast, slow = every[min(every)], every[max(every)]
        pairs = [(fast[k], slow[k]) for k in fast if k in slow]
        if pairs:
            def count(metric: str, more: bool) -> int:
                return sum((_run_metric(a, metric) > _run_metric(b, metric)) if more else
                           (_run_metric(a, metric) < _run_metric(b, metric)) for a, b in pairs)
            bullets.append(f"- **{case}**, the same {len(pairs)} predictive settings forecasting every {min(every)} "
                           f"against every {max(every)} steps: more preemptions in {count('preemptions', True)}, "
                           f"less high-tier unmet in {count('high_unmet', False)} (more in "
                           f"{count('high_unmet', True)}), less normal-tier unmet in {count('normal_unmet', False)}, "
                           f"more GPU-min preempted and then idle in {count('preempted_idle', True)}.")
        files = f"`bench/out/replay_{case}.json` and `bench/out/{other_name}`"
        same = o.get("same_forecaster_as") == f"replay_{case}.json" and o.get("commit") == d.get("commit")
        note.append(f"{case} from {files} (" + ("the same fitted forecaster, one run, commit "
                                                 f"{d.get('commit')}" if same else
                                                 f"commits {d.get('commit')} and {o.get('commit')}") + ")")
    if not rows:
        return "No replay at the other pace is committed."
    return "\n".join([table(["trace", "forecast every (steps)", "replay wall / CPU", "predictive point", "util",
                              "high-tier unmet", "normal-tier unmet", "preemptions", "preempted, then idle GPU-min",
                              "targets met"], rows), "", *bullets, "", "*" + "; ".join(note) + ".*"])


@block("replay-unseen")
def replay_unseen() -> str:
    """The check on a window and tier mapping the published figures do not use (issue #26)."""
    files = [f for case in ("helios", "synthetic") for f in sorted(OUT.glob(f"replay_{case}_unseen*.json"))
             # a second pace of the same window is not another window, nor a what-if on it (FORESIGHT_FILES)
             if "_every" not in f.name and f.name not in {w for w, _ in FORESIGHT_FILES}]
    if not files:
        return "No replay of another window is committed."
    out = []
    for f in files:
        d = load(f.name)
        what = (f"Synthetic workload seed {d['workload_seed']}" if "workload_seed" in d
                else f"Window from {d['window_start'][:10]}, high tier {', '.join(d['high_tier'])}")
        out += [f"{what}: " + replay_header(d), "", replay_comparison(d), "", source([f.name])]
    return "\n".join(out)


@block("replay-shipped-model")
def replay_shipped_model() -> str:
    d = load("replay_synthetic_shipped_model.json")
    fitted = replay("synthetic")
    c = d["comparison"]
    by = {r["label"]: r for r in d["runs"]}
    react, pred = by[c["reactive_point"]], by[c["predictive_point"]]
    v = replay_verdicts(d)
    parts = []
    for k, t in d["targets"].items():
        base = _base(d, t) if t.get("relative_to") else None
        if base is not None:
            pv, rv = _run_metric(pred, t["metric"]), _run_metric(base, t["metric"])
            parts.append(f"{t['what']}: {n(pv)} against {n(rv)} ({_change(t, pv, rv)}, {verdict3(v[k])})")
    same = fitted["forecaster"] == d["forecaster"]
    pace = "every step" if d["forecast_every"] == 1 else f"every {d['forecast_every']} steps"
    how = f"commit {d.get('commit', 'not recorded')}, forecasting {pace}"
    lead = (f"The selection picked the shipped LSTM ({d['forecaster']}) on the synthetic history itself, so the run "
            f"with `--shipped-model` ({how}) has the same forecaster: " if same else
            f"With the shipped LSTM instead (`--shipped-model`, {how}) ")
    out = [lead + f"the comparison point is {c['predictive_point']} at {pct(pred['utilization'])} against "
           f"reactive's {pct(react['utilization'])}: " + "; ".join(parts) + "."]
    other = replay_verdicts(fitted)
    if not same and other.get("high_unmet_at_most_half") != v.get("high_unmet_at_most_half"):
        out.append("Whether the synthetic high-tier target is met depends on which of the two forecasters the "
                   f"selection picks (their wQL on the history: fitted {fitted['forecaster_choice']['wql']:.4f}, "
                   f"shipped {fitted['forecaster_choice']['scores'].get('current', float('nan')):.4f}).")
    out += ["", source(["replay_synthetic_shipped_model.json"])]
    return "\n".join(out)


@block("replay-scale")
def replay_scale() -> str:
    d = load("replay_scale.json")
    rows = [[r["strategy"], f"{r['wall_s']:.0f} s", f"{r['cpu_s']:.0f} s", f"{r['decision_ms_mean']:.1f}",
             pct(r["utilization"]), n(r["tiers"]["high"]["unmet_gpu_min"]), n(r["tiers"]["normal"]["unmet_gpu_min"]),
             n(r["tiers"]["low"]["unmet_gpu_min"]), n(r["preemptions"]), n(r["work_lost_gpu_min"])]
            for r in d["runs"]]
    target = d["targets"]["scale_15min"]
    return "\n".join([
        f"{n(d['tenants'])} tenants, {n(d['capacity'])} GPUs on {n(d['capacity'] // d['gpus_per_node'])} "
        f"{d['gpus_per_node']}-GPU nodes, {n(d['steps'])} steps ({d['steps'] / 1440:g} days), forecaster "
        f"{d['forecaster']} every {d['forecast_every']} steps, {d['workers']} worker processes on {d['cpus']} cores, "
        f"{load_avg(d)}:", "",
        table(["strategy", "wall", "CPU", "decision ms/cycle", "util", "high unmet GPU-min", "normal unmet",
               "low unmet", "preemptions", "work lost GPU-min"], rows), "",
        f"The whole case took {d['wall_seconds']:.0f} s ({d['wall_seconds'] / 60:.1f} min) of wall time, generating "
        f"the workload included, and {d['replay_cpu_seconds']:.0f} s of CPU: goal {goal(target)} "
        f"({target['what']}), {verdict(met(target, d))}. A row's wall time is its own run's, so the rows do not add "
        f"up; {d['cpus']} idle cores could not do it in less than {d['replay_cpu_seconds'] / d['cpus']:.0f} s (the CPU "
        f"time over the cores), which was not measured.",
        "", source(["replay_scale.json"], d)])


# --------------------------------------------------------------------------------------------------------- eta

ETA_CASES = (("synthetic", "eta_synthetic.json"), ("helios", "eta_helios.json"))


@block("eta")
def eta() -> str:
    """The start-time estimate scored on the replay (bench/eta_bench.py), per trace, against issue 39's targets."""
    rows, notes, used = [], [], []
    for case, f in ETA_CASES:
        if not (OUT / f).exists():
            notes.append(f"- {case}: not measured yet.")
            continue
        d = load(f)
        used.append(f)
        e = d["eta"]

        def mins(x):
            return "-" if x is None else f"{x:.1f}"

        cov = e["p90_coverage"]
        rows.append([f"{case} ({d['days']:g} day, {d['strategy']})", n(e["jobs_waited_and_started"]),
                     mins(e["median_wait_min"]), mins(e["p50_median_abs_error_min"]),
                     mins(e["naive_median_abs_error_min"]), "-" if cov is None else pct(cov),
                     f"{e['p50_known']} / {e['jobs_waited_and_started']}"])
        for t in d["targets"].values():
            v = e.get(t["metric"])
            if v is None:
                notes.append(f"- {case}: {t['what']} ({goal(t)}): not measured (no value).")
                continue
            shown = pct(v) if t["metric"] == "p90_coverage" else f"{v:.2f}"
            notes.append(f"- {case}: {t['what']} ({goal(t)}): {shown}, {verdict(met(t, e))}.")
    out = [table(["trace", "jobs waited and started", "median wait, min", "p50 median abs error, min",
                  "naive median abs error, min", "p90 coverage", "p50 known"], rows) if rows else "", "", *notes]
    if used:   # each trace's run names its own commit and load
        out += ["", " ".join(source([f], load(f)) for f in used)]
    return "\n".join(out).strip("\n") + "\n"


# ------------------------------------------------------------------------------------------------------- aging

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


# ---------------------------------------------------------------------------------------------- results summary

@block("results-at-a-glance")
def results() -> str:
    def shown(v: float, unit: str) -> str:
        return (f"{v:.3g} {unit}" if v < 10 else f"{v:,.0f} {unit}").strip()

    rows = []
    ft = load("forecast_traces.json")
    t15 = ft["targets"]["lstm_15pct_better"]
    ok = [name for name, t in ft["traces"].items() if met(t15, t)]
    rows.append(["[forecast](docs/benchmarks.md#forecaster): LSTM family against the best fair baseline (wQL), "
                 "real traces",
                 ", ".join(f"{TRACES[k].split(',')[0]} {_gain(t['gain_vs_best_baseline']).replace('**', '')}"
                           for k, t in ft["traces"].items()),
                 f"{pct(t15['value'], 0)} better", f"met on {len(ok)} of {len(ft['traces'])}"])
    short = {"high_unmet": "high-tier unmet", "normal_unmet": "normal-tier unmet", "preemptions": "preemptions",
             "preempted_idle": "preempted, then idle"}
    for case in ("synthetic", "helios"):
        d = replay(case)
        v = replay_verdicts(d)
        c = d["comparison"]
        rel = {k: t for k, t in d["targets"].items() if t.get("relative_to")}
        whose = {"reactive": "reactive's", "perfect": "the perfect forecast's"}

        def measured(t: dict) -> str:
            other = c[t["metric"]].get(t["relative_to"])
            return (f"{short[t['metric']]} {_change(t, c[t['metric']]['predictive'], other)}"
                    + ("" if t["relative_to"] == "reactive" else " of the perfect forecast's")
                    if other is not None else f"{short[t['metric']]}: no perfect-forecast setting to compare")

        rows.append([f"[replay](docs/replay.md#what-the-numbers-say), {case}: predictive against reactive at equal "
                     "utilization",
                     "; ".join(measured(t) for t in rel.values()),
                     "; ".join(f"no more than {whose[t['relative_to']]}" if t["value"] == 1 else
                               f"{t['op']} {pct(t['value'], 0)} of {whose[t['relative_to']]}" for t in rel.values()),
                     "; ".join(verdict3(v[k]) for k in rel)])
    lstm = ft["targets"]["lstm_p95"]
    rows.append(["[forecast call](docs/benchmarks.md#forecaster), LSTM, 1,000 tenants, p95",
                 ms(value_at(ft, lstm["metric"])), goal(lstm), verdict(met(lstm, ft))])
    for f, key, page, what in (("policy.json", "plan_p95", "benchmarks.md#policy-and-rate-limiting", "policy"),
                               ("failover.json", "via_alertmanager_5s", "benchmarks.md#failover-under-load",
                                "node failover under load"),
                               ("ha-takeover.json", "takeover_2_intervals", "high-availability.md#measured-takeover",
                                "HA"),
                               ("forecast_retrain_timing.json", "retrain_10min", "benchmarks.md#forecaster", "retrain"),
                               ("replay_scale.json", "scale_15min", "benchmarks.md#scale", "replay at scale")):
        d = load(f)
        t = d["targets"][key]
        label = t["what"]
        if d.get("by_select"):   # retrain timed per ranking rule: the default's stands for it here
            sys.path.insert(0, str(ROOT))
            from daemon.config.models import RetrainConfig

            sel = RetrainConfig().select_by
            d = {**d, **d["by_select"].get(sel, {})}
            label += f" (default `--select-by {sel}`; every rule: [forecaster](docs/benchmarks.md#forecaster))"
        rows.append([f"[{what}](docs/{page}): {label}", shown(value_at(d, t["metric"]), t.get("unit", "")), goal(t),
                     verdict(met(t, d))])
    cy = load("cycle-1000.json")
    s = cy["scenarios"]["incremental"]
    keys = ("cycle_p95_1s", "cold_start_60s", "rss_1_5gib")
    ts = [cy["targets"][k] for k in keys]
    rows.append([f"[the whole cycle against Prometheus](docs/benchmarks.md#the-whole-cycle-against-a-real-prometheus), "
                 f"{n(cy['tenants'])} tenants x {cy['days']:g} days: " + "; ".join(t["what"] for t in ts),
                 "; ".join(shown(value_at(s, t["metric"]), t["unit"]) for t in ts), "; ".join(goal(t) for t in ts),
                 "; ".join(verdict(met(t, s)) for t in ts)])
    return table(["measure", "measured", "goal", "verdict"], rows)


# -------------------------------------------------------------------------------------------------- the engine

@block("windows-synthetic")
def windows_synthetic() -> str:
    """bench/windows_bench.py: the windows proposed from the 7 days before the measured window on synthetic,
    replayed with predictive (the high tier's proposals; the high and normal tiers'), against predictive without
    windows and the perfect forecast."""
    d = load("windows_synthetic.json")
    names = {"predictive": "predictive, no windows",
             "predictive_with_high_tier_windows": "predictive + the high tier's proposed windows",
             "predictive_with_high_and_normal_tier_windows": "predictive + the high and normal tiers' proposed windows",
             "perfect": "perfect forecast, no windows"}
    rows = [[names[k], n(r["high_unmet_gpu_min_at_1400_tenants"]), n(r["of_which_12_16_utc"]),
             n(r["high_unmet_gpu_min"]), n(r["normal_unmet_gpu_min"]), n(r["preemptions"]), n(r["held_idle_gpu_min"]),
             pct(r["utilization"])] for k, r in d["runs"].items()]
    lines = []
    for key, what in (("high", "the high tier's windows"), ("high_normal", "the high and normal tiers' windows")):
        v = d["verdict"][key]
        cut = "no high-tier unmet at the 14:00 tenants without windows" if v["cut"] is None else \
            (f"14:00 tenants' high-tier unmet cut by {pct(v['cut'])}" if v["cut"] >= 0 else
             f"14:00 tenants' high-tier unmet rose by {pct(-v['cut'])}") \
            + f" (target: cut >= {pct(d['target']['cut'], 0)})"
        lines.append(f"- {what}: {verdict(v['met'])}: {cut}; normal-tier unmet "
                     f"{v['normal_unmet_delta_gpu_min']:+,.0f} GPU-min, preemptions {v['preemptions_delta']:+d}.")
    props = [f"{p['tenant']} ({p['tier']}) {p['gpus']} GPUs {p['every']} {p['at']} {p['timezone']}, "
             f"{p['duration_minutes']:.0f} min, seen {p['days_seen']}/{p['days_checked']} days" for p in d["proposals"]]
    return "\n".join([
        f"Synthetic ({d['workload']}, seed {d['seed']}), {d['measured_days']:g} measured day(s) after "
        f"{d['history_days']} days of history; forecaster {d['forecaster']} ({d['forecaster_choice']}). "
        f"High-tier tenants with the 14:00 peak: {listing(d['tenants_with_1400_peak']['high'])}.", "",
        table(["run", "high unmet at 14:00 tenants (GPU-min)", "of which 12:00-16:00 UTC", "high unmet (GPU-min)",
               "normal unmet (GPU-min)", "preemptions", "held idle (GPU-min)", "utilization"], rows), "",
        f"Target: {d['target']['what']}.", "", *lines, "",
        f"Proposed ({len(props)}): " + "; ".join(props) + ".", "",
        source(["windows_synthetic.json"], d)])


class DocError(Exception):
    pass


# folders that are not Python packages: what they hold (the packages say it in their own docstrings)
FOLDERS = {
    "models": "the shipped default model and its manifest; `retrain` writes new versions beside it",
    "bench": "benchmarks, their goals (targets.py), their JSON (out/), and render_docs.py, which renders every "
             "table of measured numbers in the docs from that JSON",
    "deploy": "config example, Prometheus scrape job, alert, recording and forecast rules with their promtool "
              "tests, Alertmanager route, Grafana dashboard, Redis ACL users (redis/users.acl)",
    "systemd": "gpu-autoscaler.service (Type=notify, watchdog, sandbox), the retrain service and its timer",
    "scripts": "install-services.sh: the Debian servers the tests start",
    "tests": "one folder per package; integration/ where every test starts a real server; support/ for the "
             "helpers (real servers, headless Chromium, the Kubernetes capture server) and data",
    "docs": "one page per concern",
}


def _summary(pkg: Path) -> str:
    """The first sentence of a package's docstring, on one line (its `__init__.py` says the rest)."""
    import ast
    import re

    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s+(?=[A-Z`(])", para, maxsplit=1)[0].rstrip(".")


def _wrapped(label: str, text: str, width: int = 116) -> list[str]:
    import textwrap

    lines = textwrap.wrap(text, width - 16) or [""]
    return [f"{label:<16}{lines[0]}"] + [" " * 16 + ln for ln in lines[1:]]


@block("cycle-fleet")
def cycle_fleet_block() -> str:
    """The daemon's whole cycle on a mixed fleet against a real Prometheus: one forecast series per (tenant, type);
    beside it the same bench without types, run right after on the same box (the load's share of the numbers)."""
    d = load("cycle-1000x4types.json")
    b = load("cycle-1000-untyped-baseline.json")
    s, sb = d["scenarios"]["incremental"], b["scenarios"]["incremental"]
    caps = ", ".join(f"{t} {n(g)}" for t, g in s["plan_capacity_by_type"].items())

    def both(f: Callable[[dict], str]) -> list[str]:
        return [f(s), f(sb)]

    rows = [["cycle p50 / p95 (ms)", *both(lambda x: f"{n(x['total_p50_ms'])} / {n(x['total_p95_ms'])}")]]
    rows += [[f"- {k}", *both(lambda x, k=k: f"{n(x[f'{k}_p50_ms'])} / {n(x[f'{k}_p95_ms'])}")]
             for k in ("collect", "forecast", "plan")]
    rows += [["forecast series", *both(lambda x: n(x.get("forecast_series", 0)))],
             ["samples read per cycle, mean / max", *both(lambda x: f"{n(x['samples_mean'])} / {n(x['samples_max'])}")],
             ["cold start to first plan (s)", *both(lambda x: f"{x['cold_start_s']:.1f}")],
             ["daemon RSS peak / end (GiB)", *both(lambda x: f"{x['rss_peak_gib']:.2f} / {x['rss_end_gib']:.2f}")]]
    rows += [[f"goal: {t['what']} {goal(t)}", verdict(met(t, s)), verdict(met(t, sb))]
             for t in d["targets"].values()]
    days = (_days(d["days"]) + " d").replace(" h d", " h")
    missed = [t for t in d["targets"].values() if not met(t, s)]

    def by(t: dict) -> str:   # how far a missed goal is: the measured value against the goal's
        v = value_at(s, t["metric"])
        return f"{t['what']}: {n(v)} {t.get('unit', '')} against {goal(t)} (x{v / t['value']:.2f})"

    summary = (f"On this run the mixed fleet meets {len(d['targets']) - len(missed)} of its {len(d['targets'])} "
               f"goals" + (f"; not met: {'; '.join(by(t) for t in missed)}." if missed else ", all of them."))
    fc = s.get("forecaster", "")
    if d.get("settle_between_cycles"):
        summary += (f" Between cycles the bench waited for the forecaster's background spread refresh (every 10th "
                    f"forecast; the daemon's cycles are 30 s apart, the bench's back to back): the longest refresh "
                    f"took {n(s['refresh_ms_max'])} ms, the longest wait {n(s['settle_ms_max'])} ms, in no cycle's "
                    f"time.")
    return "\n".join([f"`bench/cycle_bench.py --types {d['types']}`: {n(d['tenants'])} tenants x {d['types']} GPU "
                      f"types, {days} of history at 1 min in a real Prometheus (recording rules), "
                      f"{s['cycles']} cycles after the cold start, dry run; the plan's GPUs per type: {caps}; "
                      f"{n(s['plan_tenants_held_by_type'])} tenants held per type in the last plan. "
                      f"The forecaster: {fc.removeprefix('forecaster: ')}.", "",
                      table(["p50 / p95 (ms), or as said", f"{d['types']} types (tenant@type series)",
                             "one model (tenant series)"], rows), "", summary, "",
                      source(["cycle-1000x4types.json"], d), "",
                      source(["cycle-1000-untyped-baseline.json"], b)])


@block("fleet")
def fleet_block() -> str:
    """A mixed fleet (issue 24): type-aware against type-blind plans on the same simulated fleet."""
    d = load("fleet.json")
    out: list[str] = []
    names = {"synthetic": "Synthetic mixed fleet", "alibaba": "Alibaba GPU 2023, gpuspec33 on the node list's mix"}
    for case, c in d["cases"].items():
        mix = ", ".join(f"{f['type']} {f['nodes']}x{f['gpus_per_node']}" for f in c["fleet"])
        out += [f"**{names.get(case, case)}** ({c['tenants']} tenants, {n(c['capacity'])} GPUs on {c['nodes']} "
                f"nodes: {mix}; {n(c['steps'])} measured minutes, perfect forecast)", ""]
        rows = []
        for r in c["runs"]:
            t = r["tiers"]
            rows.append([r["mode"], f"{r['knobs'].get('headroom', 0):g}", pct(r["utilization"]),
                         pct(t["high"]["unmet_share"], 2), pct(t["normal"]["unmet_share"], 2),
                         pct(t["low"]["unmet_share"], 2), n(r["held_unusable_gpu_min"]), n(r["preemptions"]),
                         n(r["preempted_gpus_unusable_by_beneficiary"])])
        out += [table(["plan", "headroom", "utilization", "high unmet", "normal unmet", "low unmet",
                       "GPU-min held on types the holder cannot use", "preemptions",
                       "GPUs preempted for a job that cannot use them"], rows), ""]
        eq = c["equal_utilization"]
        variants = list(dict.fromkeys(r["mode"] for r in c["runs"]))
        if eq.get("high", {}).get("utilization") is not None:
            out += [table(["tier", "at utilization", *(f"unmet, {v}" for v in variants)],
                          [[t, pct(e["utilization"]), *(pct(e[v], 2) for v in variants)]
                           for t, e in eq.items() if e.get("utilization") is not None]), ""]
        share = c.get("guarantee_from_history")
        if share:
            out += ["`aware+guarantee`: `fleet.reserve_share` sized from the history window, "
                    + ", ".join(f"{t} {pct(v, 0)}" for t, v in share.items()) + ".", ""]
        mid = {r["mode"]: r for r in c["runs"] if r["knobs"].get("headroom") == 0.1}
        if len(mid) == len(variants):
            first = mid[variants[0]]
            specs = sorted(first["by_spec"], key=lambda s: -first["by_spec"][s]["demand_gpu_min"])
            out += [table(["work that accepts", "demand GPU-min", *(f"unmet, {v}" for v in variants)],
                          [[s.replace("|", " or "), n(first["by_spec"][s]["demand_gpu_min"]),
                            *(n(mid[v]["by_spec"][s]["unmet_gpu_min"]) for v in variants)] for s in specs]), "",
                    table(["GPU type", "GPUs", *(f"in use (mean), {v}" for v in variants)],
                          [[t, n(x["capacity"]), *(f"{mid[v]['types'][t]['in_use_mean']:.1f}" for v in variants)]
                           for t, x in first["types"].items()]), "",
                    "*Unmet GPU-minutes per accepted-type set (every tier) and GPUs in use per type, at headroom "
                    "0.1.*", ""]
    lat = d["plan_latency"]
    out += [f"`plan()` on a typed snapshot of {n(lat['tenants'])} tenants x {lat['types']} types ({n(lat['gpus'])} "
            f"GPUs, {n(lat['jobs'])} jobs): median {lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms "
            "(goal: median < 20 ms).", "", source(["fleet.json"], d)]
    return "\n".join(out)


@block("folder-map")
def folder_map() -> str:
    """Where things are: the top-level folders, and each package of daemon/, from their own docstrings."""
    out = []
    for name in ("daemon", "forecaster", "gateway"):
        out += _wrapped(f"{name}/", _summary(ROOT / name))
        if name == "daemon":
            for sub in sorted(p for p in (ROOT / "daemon").iterdir() if (p / "__init__.py").exists()):
                out += _wrapped(f"  {sub.name}/", _summary(sub))
                for subsub in sorted(p for p in sub.iterdir() if (p / "__init__.py").exists()):
                    out += _wrapped(f"    {subsub.name}/", _summary(subsub))
    for name, text in FOLDERS.items():
        out += _wrapped(f"{name}/", text)
    return "```\n" + "\n".join(out) + "\n```"


def blocks_in(text: str, where: str) -> list[tuple[str, int, int]]:
    """(name, start of the content, end of the content) of every block, checking that the markers pair up: each
    opening is closed by a marker of the same name before any other marker, and each sits on a line of its own."""
    found, open_ = [], None
    for m in MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end < 0 else line_end
        if text[line_start:m.start()].strip() or text[m.end():line_end].strip():
            raise DocError(f"{where}: marker {m.group(0)} must be on a line of its own")
        if not closing:
            if open_ is not None:
                raise DocError(f"{where}: generated:{name} opens inside generated:{open_[0]}")
            open_ = (name, line_end + 1)
        else:
            if open_ is None:
                raise DocError(f"{where}: /generated:{name} closes a block that was not opened")
            if open_[0] != name:
                raise DocError(f"{where}: /generated:{name} closes generated:{open_[0]}")
            found.append((name, min(open_[1], line_start), line_start))
            open_ = None
    if open_ is not None:
        raise DocError(f"{where}: generated:{open_[0]} is never closed")
    return found


def render_text(text: str, where: str) -> tuple[str, list[str], list[str]]:
    """The text with every block rendered; the names of the blocks in it, and of those that were stale."""
    names, stale, parts, pos = [], [], [], 0
    for name, start, end in blocks_in(text, where):
        if name not in BLOCKS:
            raise DocError(f"{where}: generated:{name} is not a block bench/render_docs.py knows")
        body = BLOCKS[name]().rstrip("\n") + "\n"
        names.append(name)
        if text[start:end] != body:
            stale.append(name)
        parts += [text[pos:start], body]
        pos = end
    parts.append(text[pos:])
    return "".join(parts), names, stale


def run(root: Path = ROOT, check: bool = False) -> list[str]:
    """Renders (or, with check, only compares) every block; returns the problems, one line each."""
    problems, seen = [], {}
    for path in doc_files(root):
        where = str(path.relative_to(root))
        text = path.read_text()
        try:
            new, names, stale = render_text(text, where)
        except DocError as exc:
            problems.append(str(exc))
            continue
        except (OSError, KeyError, ValueError) as exc:
            problems.append(f"{where}: a block could not be rendered: {exc!r}")
            continue
        for name in names:
            if name in seen:
                problems.append(f"{where}: generated:{name} is also in {seen[name]}")
            seen[name] = where
        if check:
            problems += [f"{where}: generated:{name} is stale (run: python bench/render_docs.py)" for name in stale]
        elif new != text:
            path.write_text(new)
    problems += [f"generated:{name} is rendered by bench/render_docs.py but appears in no page"
                 for name in BLOCKS if name not in seen]
    return problems


@block("health-replay")
def health_replay() -> str:
    """bench/health_bench.py: the daemon's plan() and health step (assess: detect, decide) on the simulator, per
    tier, with the health step off, reporting only, and requeueing by the configured actions."""
    d = load("health.json")
    h, bud = d["health"], d["budget"]
    names = {"off": "no health step", "report": "findings, report only", "requeue": "findings, requeue (defaults)"}
    rows = []
    for r in d["runs"]:
        ded = r["dedicated_bound"]
        for mode in ("off", "report", "requeue"):
            x = r["modes"][mode]
            t = x["tiers"]
            every = "every cycle" if r["every"] == 1 else f"every {r['every']} cycles"
            rows.append([r["strategy"], pct(r["idle_share"], 0), every, names[mode],
                         pct(x["alloc_util"]), pct(x["busy_util"]),
                         " / ".join(n(t[k]["unmet_gpu_min"]) for k in ("high", "normal", "low")),
                         " / ".join(n(t[k]["preempted_by_plan"]) for k in ("high", "normal", "low")),
                         " / ".join(n(t[k]["reclaimed"]) for k in ("high", "normal", "low")),
                         f"{n(sum(t[k]['lost_gpu_min_plan'] for k in t))} / "
                         f"{n(sum(t[k]['lost_gpu_min_reclaim'] for k in t))}",
                         f"{pct(ded['alloc_util'])} / {pct(ded['busy_util'])}"])
    acts = ", ".join(f"{k} {v}" for k, v in h["idle_actions"].items())
    return "\n".join([
        f"{d['workload']}, {d['days']:g} days, {n(d['capacity'])} GPUs shared, seed {d['seed']}. Idle or hung for "
        f"{h['idle_action_minutes']:g} min: {acts}; reclaims and the plan's preemptions share the budget "
        f"({pct(bud['share'], 0)} of the GPUs and {n(bud['jobs'])} jobs per {bud['window_s']:g} s). Per tier: "
        "high / normal / low.", "",
        table(["strategy", "idle share (model)", "health step", "run", "allocated", "busy",
               "unmet GPU-min", "preempted by the plan", "reclaimed by health", "GPU-min lost: plan / reclaim",
               "dedicated bound: allocated / busy"], rows), "",
        source(["health.json"], d)])


OWN_RUNS = {"quick": "`--quick-forecaster`", "default": "default forecaster choice",
            "quick-recommend": "`--quick-forecaster --recommend`", "default-recommend": "`--recommend`"}


def _mmss(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{int(s // 60)} min {int(round(s % 60)):02d} s" if s >= 60 else f"{s:.0f} s"


@block("own-replay-timing")
def own_replay_timing() -> str:
    """bench/own_replay_bench.py: the own-cluster replay of a day on the 1,213-node fleet, phase by phase."""
    d = load("own_replay.json")
    i = d["input"]
    rows = []
    # a sweep (--recommend) is its own bench run, in its own file where it was measured
    extra = [load("own_replay_recommend.json")] if (OUT / "own_replay_recommend.json").exists() else []
    for dd, which in [(d, "before"), (d, "after")] + [(e, "after") for e in extra]:
        for r, run in dd.get(which, {}).items():
            ph = run["phases"]
            replay = next((v["seconds"] for k, v in ph.items() if k.startswith("replay ")), None)
            report = ph.get("writing the report and the figure", {}).get("seconds")
            t = next((t for t in dd["targets"].values() if t["metric"] == f"{r}.wall_s"), None)
            g = "-" if t is None else (f"{goal(t)}: {verdict(met(t, dd['after']))}" if which == "after"
                                       else goal(t))
            code = (f"before ({dd.get('before_commit', '?')})" if which == "before"
                    else f"after ({dd.get('commit', '?')})")
            rows.append([OWN_RUNS.get(r, r), code, _mmss(run["wall_s"]), _mmss(run["cpu_s"]),
                         _mmss(run.get("forecaster_chosen_at_s")),
                         _mmss(replay), _mmss(report), f"{run['load_average_1min_at_start']:.1f}",
                         f"{len(run.get('forecaster_line') or ''):,}", g])
    out = [f"A day of 1-minute steps ({n(i['days_replayed'] * 1440)} steps, {i['history_days']:g} days of history "
           f"before it) of the Alibaba GPU 2023 pods (`gpuspec33`) as {i['tenants']} `tenant@spec` columns, on "
           f"the trace's fleet: {n(i['nodes'])} nodes of {i['types']} types, {n(i['gpus'])} GPUs (demand scaled "
           f"to the fleet, peak {n(i['peak_demand_gpus'])} GPUs). `simulate --data` as a user runs it (every "
           "strategy once), on this shared "
           f"{d['cpus']}-core box, which other sessions were using: the wall time is mostly the share of the two "
           "cores this run got (the load average), the CPU time (the process and its workers) is its own work. "
           "\"Forecaster chosen\": when its line came, from the start.",
           "", table(["run", "code", "wall", "CPU", "forecaster chosen", "replay", "report", "load at start",
                      "forecaster line (chars)", "goal"], rows)]
    if d.get("speedup"):
        out += ["", "Before / after, wall time: " + ", ".join(f"{OWN_RUNS.get(r, r)} {x:.2f}x"
                                                          for r, x in d["speedup"].items()) + "."]
    ip = d.get("in_process")
    if ip:
        b, a = ip["threads_before"], ip["threads_after"]
        out += ["", f"Reading the history and building the workload: {ip['data_loading_s']:.1f} s. An LSTM training "
                f"batch, back to back: {b['seconds_per_batch']:.2f} s with {b['threads']} torch threads (before: "
                f"min(4, CPUs)), {a['seconds_per_batch']:.2f} s with {a['threads']} (now: the CPUs the load "
                f"average leaves idle), at load averages {b['load_average_1min']:.1f} and "
                f"{a['load_average_1min']:.1f}."]
    for e in extra:
        out += ["", source(["own_replay_recommend.json"], e)]
    out += ["", source(["own_replay.json"], d)]
    return "\n".join(out)


@block("replay-inference")
def replay_inference() -> str:
    """ServeGen's services beside batch at each cold start (bench/inference_bench.py): every strategy's requests and
    GPUs, and per predictive replica quantile the gap to perfect closed and the batch tiers' unmet against
    reactive's at equal GPU-hours."""
    d = load("inference_servegen.json")
    tg = d["targets"]
    rows, gaps = [], []

    def qname(q: float | None) -> str:
        return "" if q is None else f" (replicas at p{100 * q:g})"

    def row(c: dict, label: str, r: dict) -> list[str]:
        hi, nr = r["tiers"]["high"], r["tiers"]["normal"]
        svc = sum(t["inf_gpu_min"] for t in r["tiers"].values()) / 60
        return [f"{c['cold_start_min']:g} min", label, n(hi["inf_throttled"]),
                pct(hi["inf_throttled"] / hi["inf_requests"], 3) if hi["inf_requests"] else "-",
                pct(nr["inf_throttled"] / nr["inf_requests"], 3) if nr["inf_requests"] else "-",
                n(hi["inf_late"] + nr["inf_late"]), n(svc), n(r["tiers"]["normal"]["unmet_gpu_min"]),
                n(r["tiers"]["low"]["unmet_gpu_min"]), pct(r["utilization"])]

    def gap(c: dict, label: str, g: dict, r: dict) -> list[str]:
        eq, g0 = g.get("high_throttled_gap_closed_equal_gpu"), g.get("high_throttled_gap_closed")
        judged = c["cold_start_min"] >= tg["from_cold_start_min"]
        v = ("-" if not judged else "no point at equal GPU-hours" if eq is None
             else f"{verdict(eq >= tg['gap_closed_min'])}; goal {pct(tg['gap_closed_goal'], 0)}: "
                  f"{verdict(eq >= tg['gap_closed_goal'])}")
        at = g.get("reactive_high_throttled_at_predictive_gpu")
        un = g.get("reactive_unmet_gpu_min_at_predictive_gpu")
        ok = g.get("batch_unmet_no_higher_equal_gpu")
        unmet = "-" if un is None else " / ".join(
            f"{n(r['tiers'][t]['unmet_gpu_min'])} vs {'-' if un[t] is None else n(un[t])}" for t in ("normal", "low"))
        return [f"{c['cold_start_min']:g} min", label, "-" if g0 is None else pct(g0), "-" if at is None else n(at),
                "-" if eq is None else pct(eq), v, unmet,
                "-" if not judged or un is None else "no point at equal GPU-hours" if ok is None else verdict(ok)]

    for c in d["cases"]:
        q0 = c.get("replica_quantile")
        for s in ("reactive", "predictive", "perfect"):
            rows.append(row(c, s + (qname(q0) if s == "predictive" else ""), c["runs"][s]))
        gaps.append(gap(c, "predictive" + qname(q0), c, c["runs"]["predictive"]))
        for q, r in c.get("predictive_at_replica_quantile", {}).items():
            rows.append(row(c, "predictive" + qname(float(q)), r))
            gaps.append(gap(c, "predictive" + qname(float(q)), r, r))
    days = f"{d['days']:g} day{'s' if d['days'] != 1 else ''}"
    out = [f"ServeGen m-small, {days} replayed after 2 days of history, seed {d['seed']}, the forecaster the "
           f"daemon chooses at start-up ({', '.join(sorted({c['forecaster'] for c in d['cases']}))}); the same "
           f"cluster ({', '.join(sorted({n(c['capacity_gpus']) for c in d['cases']}))} GPUs) for every strategy.", "",
           table(["cold start", "strategy", "high-tier throttled", "share", "normal-tier throttled share",
                  "late (high + normal)", "services' GPU-hours", "normal-tier unmet GPU-min",
                  "low-tier (batch) unmet GPU-min", "utilization"], rows), "",
           table(["cold start", "predictive", "gap to perfect closed (default headroom)",
                  "reactive's high-tier throttled at predictive's GPU-hours", "gap closed at equal GPU-hours",
                  f"target >= {pct(tg['gap_closed_min'], 0)} (cold starts >= {tg['from_cold_start_min']:g} min)",
                  "normal / low unmet GPU-min: predictive vs reactive at its GPU-hours",
                  "target: batch unmet no higher"], gaps), "", source(["inference_servegen.json"], d)]
    return "\n".join(out)


@block("k8s-scale")
def k8s_scale() -> str:
    """bench/k8s_scale_bench.py: the daemon's Kubernetes view and cycle on the real control plane."""
    d = load("k8s_scale.json")
    i, c, v, tg = d["input"], d["cluster"], d["daemon"], d["targets"]
    per = i["gpu_pods_per_node"] + i["cpu_pods_per_node"]
    steady = v["cycles"][1:] or v["cycles"]
    reqs = sorted({k for cy in steady for k in cy["requests"]})
    first = v["cycles"][0]["requests"]
    api = ", ".join(f"{k}: {n(x)}" for k, x in v["apiserver_during_cycles"].items()) or "none"
    p95, relist = tg["cycle_p95_2s"], tg["no_relist"]
    rows = [["view: first list and watch of pods and nodes", f"{v['view_initial_list_watch_s']:.1f} s", "-"],
            ["one snapshot (both kinds)", f"{v['snapshot_ms']:.2f} ms", "-"],
            ["first cycle (writes the Kueue objects, holds nodes)", ms(v["first_cycle_ms"]), "-"],
            [f"cycle p50 / p95 / max, {len(steady)} steady cycles",
             f"{ms(v['cycle_p50_ms'])} / {ms(v['cycle_p95_ms'])} / {ms(v['cycle_max_ms'])}",
             f"p95 {goal(p95)}: {verdict(met(p95, d))}"],
            ["of which reads / plan / act (p50)",
             f"{ms(v['read_p50_ms'])} / {ms(v['plan_p50_ms'])} / {ms(v['act_p50_ms'])}", "-"],
            ["full lists of pods or nodes in the cycles (the daemon's client)", n(v["full_lists_in_cycles"]),
             f"{goal(relist)}: {verdict(met(relist, d))}"],
            ["requests per steady cycle, most (the daemon's client)", n(v["requests_per_steady_cycle_max"]), "-"],
            ["a new pod in the view's snapshot after its create is answered, median (of "
             f"{len(v['watch_lag_ms'])})", f"{sorted(v['watch_lag_ms'])[len(v['watch_lag_ms']) // 2]:.1f} ms", "-"],
            ["daemon RSS: before the view / with it / peak",
             f"{v['rss_mib_before_view']:,.0f} / {v['rss_mib_after_view']:,.0f} / {v['rss_mib_peak']:,.0f} MiB", "-"]]
    out = [f"{n(i['nodes'])} KWOK nodes of {i['gpus_per_node']} GPUs ({', '.join(m.upper() for m in i['models'])}, "
           f"round robin) and {n(i['pods'])} pods over {i['tenants']} tenant namespaces ({per} a node: "
           f"{i['gpu_pods_per_node']} of 1 GPU, {i['cpu_pods_per_node']} CPU-only), bound at creation. Made with "
           f"parallel requests: nodes in {c['nodes_create_s']:.0f} s, pods in {c['pods_create_s']:.0f} s, all "
           f"Running {c['pods_running_after_create_s']:.0f} s after that ({n(c['pods_not_running'])} not). "
           f"The view held {n(v['view_pods'])} pods and {n(v['view_nodes'])} nodes.",
           "", table(["what", "measured", "goal"], rows), "",
           f"The first cycle's requests: {', '.join(f'{k} {x}' for k, x in sorted(first.items()))}. Steady cycles' "
           f"requests: {', '.join(reqs) or 'none (the plan did not change, so there was nothing to write)'}. "
           f"The apiserver's own count of LISTs and WATCHes of pods and nodes during the cycles (a watch counts when "
           f"it ends): {api}. The view listed once in all ({', '.join(f'{k} {x}' for k, x in v['view_lists'].items())}"
           f"), in {', '.join(f'{n(x)} pages of {k[5:]}' for k, x in v['apiserver_lists_view_start'].items())}. "
           f"The plan held {n(v['cycles'][0]['reserved_gpus'])} GPUs (no forecast: reactive holds) and preempted "
           f"{n(sum(cy['preemptions'] for cy in v['cycles']))} pods. The load average was "
           f"{d['load_average_1min_before_daemon']:.1f} when the daemon's side started, on this shared "
           f"{d['cpus']}-core box that runs the control plane too.",
           "", source(["k8s_scale.json"], d)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming stale or malformed blocks")
    ap.add_argument("--undescribed", action="store_true", help="list the config keys without a description")
    a = ap.parse_args(argv)
    if a.undescribed:
        print("\n".join(undescribed()))
        return 0
    problems = run(check=a.check)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
