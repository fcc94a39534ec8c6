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


# ---- a real Kubernetes control plane (tests/support/k8s_cluster.py), one per xdist worker ----------------------

K8S_STARTS: list[dict] = []  # this process's control-plane start timings; the summary prints them


@pytest.fixture(scope="session")
def kube(tmp_path_factory, pytestconfig):
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok on 127.0.0.1, started once per worker
    (session scope is per xdist worker) and stopped after. Not built: the test fails and says how to build."""
    from tests.support.k8s_cluster import ControlPlaneMissing, start_control_plane

    try:
        cp = start_control_plane(tmp_path_factory.mktemp("k8s"))
    except ControlPlaneMissing as exc:
        missing = str(exc)
    else:
        missing = None
    if missing:
        pytest.fail(missing, pytrace=False)
    K8S_STARTS.append({k: round(v, 1) for k, v in cp.timings.items()})
    workeroutput = getattr(pytestconfig, "workeroutput", None)  # an xdist worker: sent to the controller
    if workeroutput is not None:
        workeroutput["k8s_starts"] = K8S_STARTS
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def kueue(kube):
    """The worker's control plane with Kueue's manager, its CRDs and webhooks (started on first use)."""
    kube.start_kueue()
    K8S_STARTS[-1]["kueue"] = round(kube.timings["kueue"], 1)
    return kube


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    K8S_STARTS.extend(getattr(node, "workeroutput", {}).get("k8s_starts", []))


def pytest_terminal_summary(terminalreporter):
    for t in K8S_STARTS:
        parts = ", ".join(f"{k} {v} s" for k, v in t.items() if k != "ready")
        terminalreporter.write_line(f"Kubernetes control plane ready in {t['ready']} s ({parts})")
