"""The console's shadow page under load (issue 36): the report is counted once per cycle for every viewer, in a
worker of its own, so tenants' page loads neither repeat the work nor hold up an operator's write."""

import asyncio
import dataclasses
import threading

import httpx
import pytest
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.shadow.report import shadow_report
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from daemon.web.console.routes import SHADOW_CYCLES
from tests.support.daemons import OP, T1, T2, h
from tests.support.web_backend import SnapshotBackend, with_tokens
from tests.web.test_shadow_page import synthetic_records

pytestmark = pytest.mark.timeout(120)

RECORDS = synthetic_records(200, tenants=12)


def _snap(cycle: int = 1) -> Snapshot:
    return Snapshot(cfg=with_tokens(Config()), cycle=cycle)


class _Blocking(SnapshotBackend):
    """Shadow records that are read only once `release` is set (a read as slow as the test wants); counts the
    handlers that took a snapshot, i.e. got as far as asking for the report."""

    def __init__(self) -> None:
        super().__init__(_snap(), self._blocked)
        self.release = threading.Event()
        self.snapshots = 0

    def snapshot(self) -> Snapshot:
        self.snapshots += 1
        return super().snapshot()

    def _blocked(self, limit):
        assert self.release.wait(60), "never released"
        return RECORDS


@pytest.mark.security
def test_an_operator_patch_completes_while_tenant_page_loads_are_stuck_in_the_report():
    """Before: each page load ran its report in the default thread pool (40 threads), the one the operator's
    PATCH runs in; 45 stuck loads left the PATCH waiting for a thread until they ended."""
    n = 45
    backend = _Blocking()
    app = build_app(backend)

    async def scenario() -> tuple[int, list[int]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as c:
            # distinct windows: no two loads could share one report, however the page caches
            loads = [asyncio.create_task(c.get("/ui/shadow", params={"cycles": 10 + k}, headers=h(OP)))
                     for k in range(n)]
            while backend.snapshots < n:            # every load has asked for its report...
                await asyncio.sleep(0)
            for _ in range(100):                    # ...and gone on to wait for it
                await asyncio.sleep(0)
            assert backend.shadow_reads >= 1 and not any(t.done() for t in loads)
            try:
                patch = await asyncio.wait_for(
                    c.patch("/api/v1/overrides", json={"preemption_paused": True}, headers=h(OP)), timeout=20)
                stuck = not any(t.done() for t in loads)   # the loads were still waiting while it was answered
            finally:
                backend.release.set()
            pages = await asyncio.gather(*loads)
            return patch.status_code, [stuck] + [p.status_code for p in pages]

    try:
        status, rest = asyncio.run(scenario())
    finally:
        backend.release.set()
    assert status == 200 and rest[0] is True
    assert set(rest[1:]) == {200}
    assert backend.overrides().inputs().paused_all


def test_the_report_is_counted_once_per_cycle_for_every_viewer():
    backend = SnapshotBackend(_snap(cycle=1), RECORDS)
    client = TestClient(build_app(backend))
    everyone = shadow_report(RECORDS[-SHADOW_CYCLES:])
    for token in (OP, T1, T2, OP, T1):
        r = client.get("/ui/shadow", headers=h(token))
        assert r.status_code == 200
    assert backend.shadow_reads == 1                   # five page loads of one cycle: one read and count
    mine = client.get("/ui/shadow", headers=h(T1)).text
    assert 'id="tenant-tenant-0001"' in mine and "tenant-0002" not in mine
    # a tenant's ?cycles= is not a window of its own (each would be a read of every tenant's records)
    client.get("/ui/shadow", params={"cycles": 7}, headers=h(T2))
    assert backend.shadow_reads == 1
    backend.snap = dataclasses.replace(backend.snap, cycle=2)    # the next cycle: counted again, once
    for token in (T2, OP, T1):
        assert client.get("/ui/shadow", headers=h(token)).status_code == 200
    assert backend.shadow_reads == 2
    op = client.get("/ui/shadow", headers=h(OP)).text
    assert f"{everyone['cycles']} dry-run cycles" in op


def test_the_shadow_page_skips_a_corrupt_record_and_says_which(caplog):
    records = [dict(r, id=k + 1) for k, r in enumerate(RECORDS[:50])]
    bad = {k: v for k, v in records[20].items() if k != "seen_at"}
    records[20] = bad
    backend = SnapshotBackend(_snap(), records)
    client = TestClient(build_app(backend))
    for token in (OP, T1):
        r = client.get("/ui/shadow", headers=h(token))
        assert r.status_code == 200
        assert "49 dry-run cycles" in r.text
        assert "1 corrupt shadow record skipped (record 21: no &#39;seen_at&#39;)" in r.text
    warned = [m for m in caplog.messages if "shadow record 21 skipped" in m]
    assert warned == ["shadow record 21 skipped: no 'seen_at'"]      # once, however many page loads


def test_no_counting_thread_outlives_its_count():
    """The pool lived for the process: every app a test built left an idle "shadow-report" thread behind (helper
    hleak's leak check found it after three web modules), and a fork from such a process copies it. It now lives
    while a count is queued or running; a later count makes a new one."""
    import time

    from daemon.web.shadow_reports import ShadowReports

    def alive() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("shadow-report") and t.is_alive()]

    def gone() -> bool:
        deadline = time.monotonic() + 10
        while alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        return not alive()

    assert gone(), alive()      # none left by the tests before (they ran their counts to the end)
    reports = ShadowReports(lambda limit: RECORDS[-limit:])
    first = reports.totals(1, 50).result(timeout=30)
    assert gone(), alive()
    again = reports.totals(2, 50).result(timeout=30)      # the next cycle's count: a pool again, then none
    assert gone(), alive()
    assert reports.counted == 2 and first.cycles == again.cycles > 0
