"""The `gpu-autoscaler` command: a clear message, not a traceback, when only the gateway is installed.

The base install (`pip install gpu-autoscaler[gateway]`) carries what a gateway replica needs; the
daemon's own dependencies (torch, statsmodels, kubernetes, ...) come with the `daemon` extra.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

# import name -> distribution, for the daemon extra in pyproject.toml
DAEMON_MODULES = {
    "click": "click", "numpy": "numpy", "pandas": "pandas", "torch": "torch", "statsmodels": "statsmodels",
    "apscheduler": "apscheduler", "prometheus_client": "prometheus-client",
    "prometheus_api_client": "prometheus-api-client", "uvicorn": "uvicorn", "sdnotify": "sdnotify",
    "jinja2": "jinja2",
}


def missing_daemon_modules() -> list[str]:
    return [dist for mod, dist in DAEMON_MODULES.items() if find_spec(mod) is None]


def main() -> None:
    missing = missing_daemon_modules()
    if missing:
        sys.stderr.write(f"gpu-autoscaler: the daemon is not installed (missing: {', '.join(missing)}). "
                         "Install it with: pip install 'gpu-autoscaler[daemon]'\n")
        sys.exit(2)
    from daemon.cli import main as cli_main

    cli_main()
