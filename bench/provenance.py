"""Which code a bench measured: the commit, and whether the tree had changes on top of it.

Every bench JSON carries this, so a number in the README can be traced to the code that produced it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = ("bench/out", "docs", "README.md")   # what benches write and render_docs.py renders: no code a bench runs


def commit(root: Path = ROOT) -> str:
    """`git describe`-like: the short commit id, with "+changes" when tracked files differ from it. Files no
    bench runs (OUTPUTS: other benches' JSON, the docs rendered from them) are left out: a bench started while
    another's JSON waits to be committed measures the commit's code."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in OUTPUTS)],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{sha}+changes" if dirty else sha


def load_average() -> float:
    """The 1-minute load average: on the shared 2-core box a bench's timings move with it, so every JSON keeps it."""
    return os.getloadavg()[0]


def started() -> dict:
    """What a bench records before it measures: the code, the machine's size and how busy it is."""
    return {"commit": commit(), "cpus": os.cpu_count(), "load_average_1min_at_start": load_average(),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "_t0": time.monotonic()}


def finished(out: dict) -> dict:
    """Adds the load average at the end and the bench's own wall time to what `started` recorded."""
    t0 = out.pop("_t0")
    out["load_average_1min_at_end"] = load_average()
    out["bench_wall_seconds"] = round(time.monotonic() - t0, 1)
    return out


def write(doc: dict, out_dir: Path, name: str) -> Path:
    """`finished(doc)` written as indented JSON to `out_dir`/`name` (made if missing), and said on stderr: how a
    bench that keeps one JSON ends."""
    finished(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return path

