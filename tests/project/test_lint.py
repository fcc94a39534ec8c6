"""ruff (its rules and line length in pyproject.toml) is clean on the whole tree: CI runs it with the suite."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_ruff_finds_nothing():
    exe = Path(sys.executable).with_name("ruff")
    ruff = str(exe) if exe.exists() else shutil.which("ruff")
    assert ruff, "ruff is not installed (pip install -e '.[dev]')"
    res = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
