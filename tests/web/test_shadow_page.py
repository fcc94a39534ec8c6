"""The console's "What it would have done" page (issue #27) in a real browser (headless Chromium) against
`run --sim` in dry run: it renders the shadow report of the recorded cycles, and a tenant token sees only its own
tenant."""

import os
import subprocess
import sys

import pytest

from daemon.shadow.report import shadow_report
from daemon.state.store import StateStore
from tests.conftest import REPO, free_port
from tests.support.browser import chromium
from tests.support.daemons import OP, T1
from tests.support.services import stop, wait_for

pytestmark = pytest.mark.timeout(240)

ARTEFACTS = REPO / "reports" / "browser"
T2 = "tenant-two-token-0123456789"


@pytest.fixture(scope="module")
def dry_daemon(tmp_path_factory):
    """`run --sim` with actuators in dry run (the default) that runs its first cycle and then waits (a long
    interval): the recorded cycles stay what the page and the store are compared on."""
    tmp = tmp_path_factory.mktemp("shadow")
    port = free_port()
    state = tmp / "state.sqlite"
    cfg = tmp / "config.toml"
    cfg.write_text(f"""
[cluster]
gpus = 256
[cycle]
interval_s = 3600
[source.simulator]
seed = 3
tenants = 16
[forecaster]
kind = "seasonal_naive"
[actuators]
dry_run = true
[server]
port = {port}
[state]
path = "{state}"
[[access.tokens]]
name = "ops"
role = "operator"
token = "{OP}"
[[access.tokens]]
name = "alice"
role = "tenant"
tenant = "tenant-0001"
token = "{T1}"
[[access.tokens]]
name = "bob"
role = "tenant"
tenant = "tenant-0002"
token = "{T2}"
""")
    log = open(tmp / "daemon.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "run", "--sim"], cwd=tmp,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT)

    def recorded() -> bool:
        if not state.exists():
            return False
        s = StateStore(state)
        try:
            return len(s.shadow_records()) >= 1
        finally:
            s.close()

    try:
        wait_for(recorded, what="a dry-run cycle recorded", timeout=120)
        s = StateStore(state)
        records = s.shadow_records()
        s.close()
        yield f"http://127.0.0.1:{port}", records
    finally:
        stop(proc)
        log.close()


def cells(page, row_id: str) -> list[str]:
    return page.eval(f"Array.from(document.getElementById({row_id!r}).cells).map(c => c.textContent.trim())")


def test_browser_operator_sees_the_shadow_report_of_the_recorded_cycles(dry_daemon):
    base, records = dry_daemon
    rep = shadow_report(records)
    assert rep["cycles"] >= 1 and rep["hold_cycles"] > 0, "the first cycle holds GPUs for the high tier"
    with chromium() as new_page:
        page = new_page()
        page.goto(f"{base}/ui/login")
        assert page.submit("form[action='/ui/login']", {"token": OP}) == 200
        assert page.goto(f"{base}/ui/shadow") == 200
        assert page.eval("document.querySelector('h1').textContent") == "What it would have done"
        assert page.eval("document.querySelector('header a[href=\"/ui/shadow\"]') !== null")
        assert page.eval("document.querySelector('#span').textContent").startswith(f"{rep['cycles']} dry-run cycles")
        # one row per tenant, and each row's figures are the report's on the store's records
        assert page.eval("document.querySelectorAll('#shadow-tenants tr[id]').length") == len(rep["tenants"]) == 16
        for name, a in rep["tenants"].items():
            c = cells(page, f"tenant-{name}")
            assert c[0] == name and c[1] == a["tier"]
            assert [int(c[2]), int(c[3]), int(c[4]), int(c[5]), int(c[6])] == [
                a["hold_cycles"], round(a["waits_avoided_gpu_min"]), a["preemptions"], round(a["work_lost_gpu_min"]),
                a["preemptions_for"]]
        for tier, a in rep["tiers"].items():
            c = cells(page, f"tier-{tier}")
            assert int(c[2]) == a["hold_cycles"] and int(c[4]) == a["preemptions"]
        page.screenshot(ARTEFACTS / "shadow.png")
        outside = [u for u in page.requested_urls() if not u.startswith(base) and not u.startswith("about:")]
        assert outside == []
    assert (ARTEFACTS / "shadow.png").stat().st_size > 10_000


@pytest.mark.security
def test_browser_tenant_token_sees_only_its_own_tenant_on_the_shadow_page(dry_daemon):
    base, records = dry_daemon
    for token, mine, other in ((T1, "tenant-0001", "tenant-0002"), (T2, "tenant-0002", "tenant-0001")):
        with chromium() as new_page:
            page = new_page()
            page.goto(f"{base}/ui/login")
            assert page.submit("form[action='/ui/login']", {"token": token}) == 200
            assert page.goto(f"{base}/ui/shadow") == 200
            rows = page.eval("Array.from(document.querySelectorAll('#shadow-tenants tr[id]')).map(r => r.id)")
            assert rows == [f"tenant-{mine}"]
            body = page.eval("document.body.innerText")
            assert other not in body and "tenant-0000" not in body
            # its tier row is its own figures, not the tier's across tenants
            mine_rep = shadow_report(records, tenant=mine)
            tier = mine_rep["tenants"][mine]["tier"]
            assert page.eval("Array.from(document.querySelectorAll('#shadow-tiers tr[id]')).map(r => r.id)") \
                == [f"tier-{tier}"]
            assert int(cells(page, f"tier-{tier}")[2]) == mine_rep["tenants"][mine]["hold_cycles"]
            page.screenshot(ARTEFACTS / f"shadow-{mine}.png")
