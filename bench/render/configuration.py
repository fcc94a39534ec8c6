"""Renderers for docs/configuration.md: the configuration key table, read from the config models (their
descriptions, types and bounds), and the Prometheus queries the daemon sends by default."""

from __future__ import annotations

import json
import sys
import types
import typing
from pathlib import Path

from bench.render.common import ROOT, block, table


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
