"""The `gpu-autoscaler` command: a clear message, not a traceback, when only the gateway is installed.

The base install (`pip install gpu-autoscaler[gateway]`) carries what a gateway replica needs; the
daemon's own dependencies (torch, statsmodels, kubernetes, ...) come with the `daemon` extra. Which ones those
are is read from the installed package's own metadata (the `daemon` extra of pyproject.toml), so the check
cannot drift from the extra.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

DIST = "gpu-autoscaler"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*["']daemon["']""")


def daemon_requirements() -> list[str]:
    """Distribution names the `daemon` extra asks for, in its order; [] when the package's metadata is not
    installed (a source checkout on PYTHONPATH: nothing to check against)."""
    try:
        reqs = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for req in reqs:
        spec, _, marker = req.partition(";")
        m = _NAME.match(spec)
        if m and _EXTRA.search(marker) and m.group(1) not in out:
            out.append(m.group(1))
    return out


def installed(dist: str) -> bool:
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_daemon_modules() -> list[str]:
    return [dist for dist in daemon_requirements() if not installed(dist)]


def main() -> None:
    missing = missing_daemon_modules()
    if missing:
        sys.stderr.write(f"gpu-autoscaler: the daemon is not installed (missing: {', '.join(missing)}). "
                         "Install it with: pip install 'gpu-autoscaler[daemon]'\n")
        sys.exit(2)
    from daemon.cli import main as cli_main

    cli_main()
