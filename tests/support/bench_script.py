"""A bench script (bench/<name>.py) imported as a module, the way it runs: bench/ on the path (its scripts import
``provenance`` and ``targets`` from beside them), under a name of its own so that it never shadows another import."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from tests.conftest import REPO


def load_bench(monkeypatch, name: str) -> ModuleType:
    """bench/<name>.py as a module; `monkeypatch` takes bench/ off the path again after the test."""
    path = REPO / "bench" / f"{name}.py"
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
