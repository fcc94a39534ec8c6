"""Helpers every docs page's renderers share: the block registry, loading bench/out/*.json, number formats,
goal verdicts, tables, and the names of models and traces. A page reads bench/out/ only through load, exists
and out_glob, so a test that points OUT at a copy moves every page; the replay helpers README and forecasting
reuse come from replay.py."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def exists(name: str) -> bool:
    """Whether bench/out/ holds ``name``: the pages read OUT only through load, exists and out_glob, so a test that
    points OUT at a copy moves every page with it."""
    return (OUT / name).exists()


def out_glob(pattern: str) -> list[Path]:
    """The files of bench/out/ matching ``pattern``, sorted (see exists)."""
    return sorted(OUT.glob(pattern))


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


class DocError(Exception):
    pass


def _days(days: float) -> str:
    return f"{days * 24:g} h" if days < 1 else f"{days:g}"
