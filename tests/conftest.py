import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

# Before anything imports torch (libgomp reads it once, when loaded); inherited by the daemons the tests start.
# torch's OpenMP threads otherwise spin while they wait for work: with the suite's parallel workers (`-n` in
# pyproject.toml) and the servers sharing the cores, the spinning threads took the CPU from the ones with work.
# Measured on the 2-core box under load: test_lstm_beats_seasonal_naive_on_held_out_data 68.7 s spinning, 3.1 s
# passive; the same test timed out at 300 s in a 4-worker run. The wait policy changes no result, only who waits.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("GPU_AUTOSCALER_DATA", REPO.parent / "shared" / "data"))


pytest_plugins = ["tests.support.fixtures"]


_PORT_BASE, _PORT_SLICE = 12000, 2500   # below Linux's ephemeral range (32768-60999 by default)
_next_port: list[int] = []


def free_port() -> int:
    """A port no other test worker and no outgoing connection will take before the server binds it.

    Port 0 hands out a port from the ephemeral range, which the kernel also gives every outgoing connection
    and every other worker's port-0 probe: CI once lost a slurmd's port ("Address already in use") between
    the probe and slurmd's bind while four workers and a control plane ran. So each xdist worker takes its
    own slice below the ephemeral range, and hands each port out once (a counter), checked free by a bind."""
    if not _next_port:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        idx = int(worker[2:]) if worker[2:].isdigit() else 0
        _next_port.append(_PORT_BASE + (idx % 8) * _PORT_SLICE)
    start = _next_port[0]
    lo = start - (start - _PORT_BASE) % _PORT_SLICE
    for _ in range(_PORT_SLICE):
        port = _next_port[0]
        _next_port[0] = lo + (port + 1 - lo) % _PORT_SLICE
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port left in {lo}-{lo + _PORT_SLICE - 1}")


def need_binary(name: str) -> str:
    """Service tests are real: in CI the binaries are installed by `make services`; a missing one fails."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} not installed: `make services` should have installed it")
        pytest.skip(f"{name} not installed (run `make services`)")
    return path


def assert_promtool_rules(rules: str, unit_tests: str) -> None:
    """A shipped rule file in deploy/prometheus passes `promtool check rules` and its own `promtool test rules`."""
    need_binary("promtool")
    d = REPO / "deploy" / "prometheus"
    r = subprocess.run(["promtool", "check", "rules", rules], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", unit_tests], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


@pytest.fixture
def tmp_cfg(tmp_path):
    """A config writer: tmp_cfg('''toml''') -> Path."""

    def write(text: str) -> Path:
        p = tmp_path / "config.toml"
        p.write_text(text)
        return p

    return write


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    """A real redis-server on a free port, one per test module."""
    from tests.support.services import redis_server

    with redis_server(tmp_path_factory.mktemp("redis")) as (url, _):
        yield url


@pytest.fixture
def r(redis_url):
    """A client of that server, flushed before each test."""
    import redis

    c = redis.Redis.from_url(redis_url)
    c.flushdb()
    return c
