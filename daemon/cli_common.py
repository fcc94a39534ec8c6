"""What every command of the command line shares: loading the config (one line on a bad one) and failing with
one line. Its own module so the commands can live in modules of their own without importing the group."""

from __future__ import annotations

import sys

import click

from daemon.config import Config, ConfigError, load_config


def _load(ctx: click.Context, sim: bool = False) -> Config:
    try:
        cfg = load_config(ctx.obj["config"])
    except ConfigError as exc:
        click.echo(f"gpu-autoscaler: config error: {exc}", err=True)
        sys.exit(2)
    return _as_sim(cfg) if sim else cfg


def _as_sim(cfg: Config) -> Config:
    """`cfg` over the embedded simulated cluster whatever its source (`--sim`)."""
    return cfg.model_copy(update={"source": cfg.source.model_copy(update={"kind": "simulator"})})


def _fail(msg: str, code: int = 2) -> None:
    click.echo(f"gpu-autoscaler: {msg}", err=True)
    sys.exit(code)
