"""Fixtures shared by several test packages: a running daemon on the embedded simulator with HTTP.

Loaded for every test by `pytest_plugins` in tests/conftest.py, so a test names the fixture and imports
nothing (importing a fixture from another test module made ruff see a redefinition).
"""

import httpx
import pytest

from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import api_cfg, sim_cfg
from tests.support.services import wait_for


@pytest.fixture
def daemon(tmp_path):
    port = free_port()
    d = Daemon(build_runtime(sim_cfg(tmp_path, port)))
    d.start()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{base}/healthz", timeout=1).status_code == 200, what="daemon healthy", timeout=30)
    yield d, base
    d.stop()


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    port = free_port()
    d = Daemon(build_runtime(api_cfg(tmp, port)))
    d.start()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: d.cycles_done >= 2, what="two cycles", timeout=60)
    yield d, base
    d.stop()
