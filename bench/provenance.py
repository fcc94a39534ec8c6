"""Which code a bench measured: the commit, and whether the tree had changes on top of it.

Every bench JSON carries this, so a number in the README can be traced to the code that produced it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit(root: Path = ROOT) -> str:
    """`git describe`-like: the short commit id, with "+changes" when tracked files differ from it."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{sha}+changes" if dirty else sha
