"""The layers, checked on the source: which package may import which, and no import cycles.

An AST walk over every module of `daemon`, `gateway` and `forecaster` that sees every import: at the top, inside
functions and under `TYPE_CHECKING` (a cycle hidden in a function or a type hint is still a cycle in the design).
`from pkg import name` counts as an import of the module `pkg.name` where that is a module, else of `pkg`.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGES = ("daemon", "gateway", "forecaster")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module `name` imports, ours resolved to modules, others to their top-level name."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                found.add(sub if sub in MODULES else mod)
    out = set()
    for mod in found:
        if mod.split(".")[0] in PACKAGES:
            while mod not in MODULES and "." in mod:  # `import daemon.x.y` names a module; keep the longest known
                mod = mod.rpartition(".")[0]
            out.add(mod)
        else:
            out.add(mod.split(".")[0])
    out.discard(name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _under(mod: str, *prefixes: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_imports_inside_functions_and_under_type_checking(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from daemon.service.loop import Daemon\n"
                   "def f():\n    from daemon.web import views\n    import daemon.policy.engine\n")
    assert {"daemon.service.loop", "daemon.web.views", "daemon.policy.engine"} <= _imports("x.m", src)


def test_no_import_cycles():
    assert _cycles() == []


def test_the_gateway_imports_nothing_of_the_daemon_or_the_forecaster():
    bad = {m: sorted(d for d in deps if _under(d, "daemon", "forecaster"))
           for m, deps in GRAPH.items() if _under(m, "gateway")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_forecaster_library_imports_nothing_of_the_daemon():
    bad = {m: sorted(d for d in deps if _under(d, "daemon", "gateway"))
           for m, deps in GRAPH.items() if _under(m, "forecaster")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_web_layer_never_imports_the_service():
    bad = {m: sorted(d for d in deps if _under(d, "daemon.service"))
           for m, deps in GRAPH.items() if _under(m, "daemon.web")}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_config_imports_nothing_else_of_the_daemon():
    bad = {m: sorted(d for d in deps if _under(d, "daemon") and not _under(d, "daemon.config"))
           for m, deps in GRAPH.items() if _under(m, "daemon.config")}
    assert {m: d for m, d in bad.items() if d} == {}


POLICY_MAY = ("daemon.config", "daemon.policy", "daemon.text", "forecaster.types", "gateway.configfile", "gateway.keys",
              "gateway.contract")


def test_the_policy_imports_only_config_forecaster_types_numpy_and_pandas():
    allowed_outside = {"numpy", "pandas"} | set(sys.stdlib_module_names) | {"__future__"}
    bad = defaultdict(list)
    for m, deps in GRAPH.items():
        if not _under(m, "daemon.policy"):
            continue
        for d in deps:
            ours = d.split(".")[0] in PACKAGES
            if (ours and not _under(d, *POLICY_MAY)) or (not ours and d not in allowed_outside):
                bad[m].append(d)
    assert dict(bad) == {}


@pytest.mark.parametrize("module", ["daemon.policy", "daemon.config"])
def test_importing_the_policy_loads_no_client_library(module):
    heavy = ("redis", "httpx", "starlette", "kubernetes", "uvicorn", "torch")
    code = (f"import sys, {module}; bad = [m for m in {heavy!r} if m in sys.modules]; print(bad); "
            "sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stdout + res.stderr


HEALTH_MAY = ("daemon.config", "daemon.health", "daemon.text", "forecaster.types", "gateway.configfile", "gateway.keys",
              "gateway.contract")


def test_the_health_package_is_pure_like_the_policy():
    """daemon/health (detectors, findings, reclaim policy) imports only config, forecaster types, numpy and pandas:
    it is tested on hand-made series and runs the same in the daemon, the simulator and the replay."""
    allowed_outside = {"numpy", "pandas"} | set(sys.stdlib_module_names) | {"__future__"}
    bad = defaultdict(list)
    for m, deps in GRAPH.items():
        if not _under(m, "daemon.health"):
            continue
        for d in deps:
            ours = d.split(".")[0] in PACKAGES
            if (ours and not _under(d, *HEALTH_MAY)) or (not ours and d not in allowed_outside):
                bad[m].append(d)
    assert "daemon.health.detect" in GRAPH and dict(bad) == {}


def test_the_words_module_is_the_lowest_layer():
    """daemon/text.py (counts with their nouns) is imported by the policy, the health checks, the actuators, the
    service and the CLI alike: it may import nothing of ours, and nothing outside the standard library."""
    deps = GRAPH["daemon.text"]
    assert deps <= set(sys.stdlib_module_names) | {"__future__"}, deps


def test_the_history_units_are_below_the_simulator_and_retrain():
    """daemon/forecasting/units.py (a history file's columns and units: a service's requests/s as its GPU need) is
    read alike by `simulate --data`, `retrain --data` and `backtest --data`: it imports nothing of the simulator or
    of retrain (which would load torch), so both may import it."""
    deps = GRAPH["daemon.forecasting.units"]
    assert not [d for d in deps if _under(d, "daemon.sim", "daemon.forecasting.retrain", "daemon.service")], deps
    assert "daemon.forecasting.units" in GRAPH["daemon.sim.own"] | GRAPH["daemon.sim.inference"]
    assert "daemon.forecasting.units" in GRAPH["daemon.forecasting.retrain"]
