"""Re-read and validate the config file at runtime (SIGHUP, `systemctl reload`).

A bad file changes nothing: the running config stays, the log gets one line
naming the problem, and `gpuas_config_reloads_total{outcome="error"}` counts it.
Sections that shape what the daemon is connected to (cluster, tenants, source,
forecaster, actuators, server, state, failover, retrain, gateway keys, ha, and the cycle interval) only
change with a restart; the reload says so when they differ.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.config import Config, ConfigError, load_config

if TYPE_CHECKING:
    from daemon.service import Daemon

log = logging.getLogger("gpu_autoscaler.reload")

RESTART_ONLY = ("cluster", "tenants", "source", "forecaster", "actuators", "server", "state", "failover", "retrain",
                "gateway", "ha")


def merge(running: Config, new: Config) -> tuple[Config, list[str]]:
    """The config to run with: `new` for what can change live, `running` for the rest; and what was kept."""
    kept = [k for k in RESTART_ONLY if getattr(new, k) != getattr(running, k)]
    update = {k: getattr(running, k) for k in RESTART_ONLY}
    cycle = new.cycle
    if cycle.interval_s != running.cycle.interval_s:
        kept.append("cycle.interval_s")
        cycle = cycle.model_copy(update={"interval_s": running.cycle.interval_s})
    update["cycle"] = cycle
    return new.model_copy(update=update), kept


def reload_config(daemon: "Daemon", path: Path | str | None) -> bool:
    m = daemon.runtime.metrics
    if path is None:
        log.error("config reload: the daemon runs without a config file; nothing to re-read")
        m.config_reloads.labels("error").inc()
        return False
    try:
        new = load_config(path)
        from daemon.api.auth import Access

        Access(new.access)  # token files must be readable
    except ConfigError as exc:
        log.error("config reload failed, keeping the running config: %s", exc)
        m.config_reloads.labels("error").inc()
        m.config_reload_ok.set(0)
        return False
    cfg, kept = merge(daemon.cfg, new)
    with daemon.runtime.runner.lock:  # between cycles
        daemon.cfg = daemon.runtime.cfg = daemon.runtime.runner.cfg = cfg
    m.config_reloads.labels("ok").inc()
    m.config_reload_ok.set(1)
    log.info("config reloaded from %s%s", path,
             f"; changed but kept until a restart: {', '.join(kept)}" if kept else "")
    return True
