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
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from daemon.config import Config, ConfigError, load_config
from gateway.configfile import format_validation_error

if TYPE_CHECKING:
    from daemon.service.loop import Daemon

log = logging.getLogger("gpu_autoscaler.reload")

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
        raise ConfigError(format_validation_error(exc, origin)) from None
    return merged, kept


def reload_config(daemon: "Daemon", path: Path | str | None) -> bool:
    m = daemon.runtime.metrics
    if path is None:
        log.error("config reload: the daemon runs without a config file; nothing to re-read")
        m.config_reloads.labels("error").inc()
        return False
    try:
        new = load_config(path)
        from daemon.web.auth import Access

        Access(new.access)  # token files must be readable
        cfg, kept = merge(daemon.cfg, new, f"{path} (merged with the running config)")
    except ConfigError as exc:
        log.error("config reload failed, keeping the running config: %s", exc)
        m.config_reloads.labels("error").inc()
        m.config_reload_ok.set(0)
        return False
    with daemon.runtime.runner.lock:  # between cycles
        daemon.cfg = daemon.runtime.cfg = daemon.runtime.runner.cfg = cfg
    m.config_reloads.labels("ok").inc()
    m.config_reload_ok.set(1)
    log.info("config reloaded from %s%s", path,
             f"; changed but kept until a restart: {', '.join(kept)}" if kept else "")
    return True
