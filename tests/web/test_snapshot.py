"""The web layer reads one cycle's snapshot (daemon/web/backend.py): an answer never mixes the cycle in flight
with the one before it, and /plan is /api/v1/plan. Real uvicorn and HTTP on the embedded simulator; the
cycles are run by the test (no cycle thread), so nothing moves under an answer but what the test starts."""

import threading

import httpx
import pytest

from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import OP, api_cfg, h


class Paused:
    """The model in use, held in predict() until released: the cycle in flight has collected a new state and
    not yet planned."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name
        self.entered, self.release = threading.Event(), threading.Event()

    def predict(self, history, horizon):
        self.entered.set()
        assert self.release.wait(60), "never released"
        return self.inner.predict(history, horizon)


@pytest.fixture
def served(tmp_path):
    port = free_port()
    d = Daemon(build_runtime(api_cfg(tmp_path, port)))
    d._start_http()  # HTTP only: the scheduler and the cycle thread are not started
    d.cycle()
    yield d, f"http://127.0.0.1:{port}"
    d.stop()


def read(base: str) -> dict:
    c = httpx.Client(base_url=base, headers=h(OP))
    return {"plan": c.get("/api/v1/plan").json(), "tenants": c.get("/api/v1/tenants").json()["tenants"],
            "one": c.get("/api/v1/tenants/tenant-0003").json()}


def used(answer: dict) -> list:
    return [t["used"] for t in answer["tenants"]]


def test_a_request_during_a_cycle_reads_the_cycle_before_it_whole(served):
    """The cycle kept its state where readers saw it as soon as it was collected, and its plan only at the
    end: an answer in between paired the new usage with the old plan's limits and holds."""
    d, base = served
    before = read(base)
    runner = d.runtime.runner
    paused = runner.forecaster = Paused(runner.forecaster)
    cycle = threading.Thread(target=d.cycle)
    cycle.start()
    try:
        assert paused.entered.wait(60), "the cycle never reached its forecast"
        during = read(base)
    finally:
        paused.release.set()
        cycle.join(60)
    after = read(base)
    assert after["plan"]["at"] != before["plan"]["at"] and used(after) != used(before)  # the cycle changed both
    assert during == before


def test_plan_and_api_v1_plan_are_one_body(served):
    """/plan answered the plan's summary (counts, no limits) and /api/v1/plan the plan itself: one plan, two
    shapes. /plan is now the API's body, which carries the live forecast quality /plan had."""
    _, base = served
    c = httpx.Client(base_url=base, headers=h(OP))
    legacy, api = c.get("/plan").json(), c.get("/api/v1/plan").json()
    assert legacy == api
    assert api["capacity"] == 256 and all(lim["reason"] for lim in api["limits"].values())
    assert {"scored", "wql", "coverage_p90", "tenants"} <= set(api["forecast_quality"])
    assert api["forecaster_note"].startswith("forecaster: ") and "memory" not in api
