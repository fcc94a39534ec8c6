"""Re-read and validate the config file at runtime (SIGHUP, `systemctl reload`).

A bad file changes nothing: the running config stays, the log gets one line
naming the problem, and `gpuas_config_reloads_total{outcome="error"}` counts it.
Sections that shape what the daemon is connected to (cluster, tenants, source,
forecaster, actuators, server, state, failover, retrain, gateway keys, ha, history) only change with a
restart, and so do the cycle's interval and the shape of its series (step, history length, horizon, staleness
limit): the source, its history and the model were built for them at start-up, and a policy that read a new
staleness limit while the source judged by the old one would disagree with it. The reload names what it kept.
The merged config is then validated as start-up validates it, so a reload can never run a config that
start-up would refuse.

Pure: this module reads, validates and merges, and returns a new Config (or raises ConfigError). Checks that
need more than the config (token files readable by the web layer) and the swap itself are the service's
(`Daemon.reload` and `Daemon.use_config`, daemon/service/loop.py).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from daemon.config import Config, ConfigError, load_config
from gateway.configfile import format_validation_error

RESTART_ONLY = ("cluster", "tenants", "source", "forecaster", "actuators", "server", "state", "failover", "retrain",
                "gateway", "ha", "history")
# cycle keys the source, the history and the model were built for at start-up
RESTART_ONLY_CYCLE = ("interval_s", "resolution_s", "history_steps", "horizon_steps", "stale_after_s")


def merge(running: Config, new: Config, origin: str = "config reload") -> tuple[Config, list[str]]:
    """The config to run with: `new` for what can change live, `running` for the rest; and what was kept.

    ConfigError when the merged whole fails a check across sections (the same checks start-up runs).
    """
    kept = [k for k in RESTART_ONLY if getattr(new, k) != getattr(running, k)]
    sections = {k: getattr(new, k) for k in type(new).model_fields}
    sections.update({k: getattr(running, k) for k in RESTART_ONLY})
    cycle_kept = {k: getattr(running.cycle, k) for k in RESTART_ONLY_CYCLE
                  if getattr(new.cycle, k) != getattr(running.cycle, k)}
    kept += [f"cycle.{k}" for k in cycle_kept]
    sections["cycle"] = type(new.cycle).model_validate({**new.cycle.model_dump(), **cycle_kept})
    try:
        merged = type(new).model_validate(sections)  # the cross-section validators run again on the whole
    except ValidationError as exc:
        msg = format_validation_error(exc, origin)
        if kept:  # checked against what runs: a window for a tenant added in the same edit read as "not one of
            # [[tenants]]" while the file lists it
            msg += (f" (checked against the running {', '.join(kept)}: the file's differ, and apply only at a "
                    "restart)")
        raise ConfigError(msg) from None
    return merged, kept


def reread(path: Path | str, running: Config) -> tuple[Config, list[str]]:
    """Read and validate the file at `path`, merged with the `running` config: the config to run with, and
    the restart-only keys the file changed but that were kept. ConfigError when the file, or the merged
    whole, would be refused at start-up. Nothing is swapped in here: the caller does that (Daemon.reload,
    daemon/service/loop.py), after its own checks."""
    return merge(running, load_config(path), f"{path} (merged with the running config)")
