"""`gpu-autoscaler propose-windows --data FILE`: the recurring windows the daemon would propose from a history file,
before it runs. The console and the API propose them from the daemon's history store only (the Prometheus source
writes it), so a user deciding on a CSV of their cluster's demand had no way to see them. The same computation
(daemon/web/window_proposals.py: the proposer and its replayed evidence), printed with a `[[windows]]` snippet per
proposal to paste into the config."""

from __future__ import annotations

import json
from pathlib import Path

import click

from daemon.cli_common import _fail, _load


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, dict):   # a mixed fleet's GPUs per type
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(str(v))


def window_toml(window: dict) -> str:
    """A proposal's window as the config declares one (docs/windows.md)."""
    return "\n".join(["[[windows]]", *(f"{k} = {_toml_value(v)}" for k, v in window.items() if v is not None)])


def proposal_line(p: dict) -> str:
    ev = p.get("evidence") or {}
    gpus = p["gpus"] if not isinstance(p["gpus"], dict) else ", ".join(f"{k}={v}" for k, v in p["gpus"].items())
    out = (f"{p['name']}: {p['tenant']}, {gpus} GPUs {p['every']} at {p['at']} {p['timezone']} for "
           f"{p['duration_minutes']:.0f} min (seen on {p['days_seen']} of {p['days_checked']} days)")
    if "unmet_gpu_min_without" in ev:
        out += (f"; replayed over {ev['replayed_days']:g} days, its unmet GPU-min {ev['unmet_gpu_min_without']:,.0f} "
                f"without, {ev['unmet_gpu_min_with']:,.0f} with, held idle {ev['held_idle_gpu_min']:,.0f}")
    if ev.get("verdict"):
        out += f": {ev['verdict']}"
    return out


@click.command(name="propose-windows")
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="History file (the formats of simulate --data: time + one column per tenant, or long "
                   "time,tenant,value).")
@click.option("--timezone", default="UTC", show_default=True, help="Time zone of the proposed windows' start times.")
@click.option("--json", "as_json", is_flag=True, help="Print the proposals as the API gives them.")
@click.pass_context
def propose_windows(ctx: click.Context, data: Path, timezone: str, as_json: bool) -> None:
    """The recurring windows proposed from a history file (a tenant's daily peak), each with its replayed evidence
    and a [[windows]] snippet; nothing is declared."""
    cfg = _load(ctx)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from daemon.forecasting.errors import DataError
    from daemon.sim.own import read_file
    from daemon.web.window_proposals import compute

    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        _fail(f"propose-windows: --timezone {timezone!r} is no time zone (e.g. UTC, Europe/Paris)")
    try:
        frame = read_file(data, cfg)
    except DataError as exc:
        _fail(f"propose-windows: {exc}", 1)
    declared = [w.model_dump(mode="json") for w in cfg.windows]
    click.echo("finding recurring peaks and replaying them (a minute or two for a week of a few tenants)...",
               err=True)
    res = compute(frame, cfg, declared, timezone)
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    props = res.get("proposals", [])
    if not props:
        why = res.get("why") or f"no recurring peak found (proposed when {res['significance']})"
        click.echo(f"no window proposed from {data}: {why}")
        return
    click.echo(f"{len(props)} window(s) proposed from {data} (history to {res['history_end']}):")
    for p in props:
        click.echo("  " + proposal_line(p))
    if res.get("evidence_note"):
        click.echo(f"  ({res['evidence_note']})")
    click.echo("\n# to hold one, add it to the config (docs/windows.md):")
    for p in props:
        click.echo(window_toml(p["window"]) + "\n")
