"""The console's "What it would have done" page (issue #27) in a real browser (headless Chromium) against
`run --sim` in dry run: it renders the shadow report of the recorded cycles, and a tenant token sees only its own
tenant."""

import threading
import time

import httpx
import pandas as pd
import pytest

from daemon.shadow.report import shadow_report
from daemon.state.store import StateStore, pack
from daemon.web.console.routes import SHADOW_CYCLES
from tests.conftest import REPO
from tests.support.browser import chromium
from tests.support.daemons import OP, T1, T2, sim_process

pytestmark = pytest.mark.timeout(240)

ARTEFACTS = REPO / "reports" / "browser"


def synthetic_records(n: int, tenants: int = 40) -> list[dict]:
    """`n` one-minute dry-run records (columnar, as make_record writes them) for `tenants` tenants, ending an
    hour ago. Tier "high" holds for tenant k in cycle c when (c + k) % (k + 2) == 0: tier-mates hold in different
    cycles and different amounts, so a tier row built from the tier's tenants differs from one tenant's row."""
    names = [f"tenant-{i:04d}" for i in range(tenants)]
    tiers = [("high", "normal", "low")[i % 3] for i in range(tenants)]
    t0 = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(minutes=n + 60)
    out = []
    for c in range(n):
        at = (t0 + pd.Timedelta(minutes=c)).isoformat()
        seen = [float((c * 7 + k * 3) % 11) for k in range(tenants)]
        hold = [(k % 5 + 4) if (c + k) % (k + 2) == 0 else 0 for k in range(tenants)]
        nan = [float("nan")] * tenants
        cols = {"used": [x / 2 for x in seen], "pending": [0.0] * tenants, "seen": seen, "hold": hold,
                "quota": nan, "rate": [100.0] * tenants, "level": [c % 2] * tenants, "request_rate": nan,
                "fc_next": [x + 1 for x in seen], "fc_peak": [x + 3 for x in seen], "tier": tiers,
                "limit_reason": [-1] * tenants}
        pre = [{"job_id": f"j{c}", "tenant": names[(c * 3 + 2) % tenants], "gpus": 2, "node": "n1", "reason": "r",
                "for_tenant": names[(c * 7) % tenants], "lost_gpu_min": 1.5}] if c % 3 == 0 else []
        out.append({"v": 2, "at": at, "cycle": c + 1, "seen_at": at, "step_s": 60, "horizon_steps": 5,
                    "lead_time_steps": 2, "quantile": 0.9, "model": "m", "capacity": 256, "load": 0.5,
                    "rate_level": 0, "notes": [], "names": names, "cols": cols, "reasons": [],
                    "preemptions": pre})
    return out


SETTINGS = """
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
"""


def prefill(state, records: list[dict]) -> None:
    """Records written straight into the state store (one transaction, not one fsync each)."""
    s = StateStore(state)
    try:
        now = time.time()
        with s._db:
            s._db.executemany("INSERT INTO shadow(at, record, logged) VALUES(?,?,?)",
                              [(r["at"], pack(r), now) for r in records])
    finally:
        s.close()


def start_daemon(tmp, records: list[dict] = ()):
    """`run --sim` with actuators in dry run (the default) that runs its first cycle and then waits (a long
    interval): the recorded cycles stay what the page and the store are compared on. `records`: shadow records
    added to the store after its first cycle (a simulated run starts a fresh store, daemon/state/sim_store.py, so
    they cannot be there before it starts). Yields (base URL, the store's records once they are all in)."""
    state = tmp / "state.sqlite"

    def recorded(_: str) -> bool:
        if not state.exists():
            return False
        s = StateStore(state)
        try:
            return len(s.shadow_records()) >= 1
        finally:
            s.close()

    with sim_process(tmp, SETTINGS, recorded, "a dry-run cycle recorded", timeout=120) as base:
        if records:
            prefill(state, records)
        s = StateStore(state)
        records = s.shadow_records()
        s.close()
        yield base, records


@pytest.fixture(scope="module")
def dry_daemon(tmp_path_factory):
    yield from start_daemon(tmp_path_factory.mktemp("shadow"))


@pytest.fixture(scope="module")
def busy_daemon(tmp_path_factory):
    """The same daemon over 5,000 more dry-run cycles of 40 tenants recorded (three and a half days of 1-min
    cycles)."""
    yield from start_daemon(tmp_path_factory.mktemp("shadow-busy"), synthetic_records(5000))


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
            assert [int(c[2]), int(c[3]), int(c[4]), int(c[5]), int(c[6]), int(c[7])] == [
                a["cycles"], a["hold_cycles"], round(a["waits_avoided_gpu_min"]), a["preemptions"],
                round(a["work_lost_gpu_min"]), a["preemptions_for"]]
        for tier, a in rep["tiers"].items():
            c = cells(page, f"tier-{tier}")
            assert int(c[2]) == a["cycles"] and int(c[3]) == a["hold_cycles"] and int(c[5]) == a["preemptions"]
        page.screenshot(ARTEFACTS / "shadow.png")
        outside = [u for u in page.requested_urls() if not u.startswith(base) and not u.startswith("about:")]
        assert outside == []
    assert (ARTEFACTS / "shadow.png").stat().st_size > 10_000


@pytest.mark.security
def test_browser_tenant_token_sees_only_its_own_tenant_on_the_shadow_page(busy_daemon):
    # over 1,440 recorded cycles where tier-mates hold in different cycles: a tier row built from the tier's
    # tenants would differ from the tenant's own row (checked below), so the page's tier row must be its own
    base, records = busy_daemon
    newest = records[-SHADOW_CYCLES:]
    everyone = shadow_report(newest)
    for token, mine, other in ((T1, "tenant-0001", "tenant-0002"), (T2, "tenant-0002", "tenant-0001")):
        mine_rep = shadow_report(newest, tenant=mine, private=True)
        own = mine_rep["tenants"][mine]
        tier = own["tier"]
        whole = everyone["tiers"][tier]
        # (a tier's hold_cycles count cycles with a hold for any of its tenants: the tier's other figures differ)
        key = ("hold_cycles", "waits_avoided_gpu_min", "preemptions")
        assert whole["tenants"] > 1 and [whole[k] for k in key] != [own[k] for k in key], \
            "the case must tell them apart"
        with chromium() as new_page:
            page = new_page()
            page.goto(f"{base}/ui/login")
            assert page.submit("form[action='/ui/login']", {"token": token}) == 200
            assert page.goto(f"{base}/ui/shadow") == 200
            rows = page.eval("Array.from(document.querySelectorAll('#shadow-tenants tr[id]')).map(r => r.id)")
            assert rows == [f"tenant-{mine}"]
            body = page.eval("document.body.innerText")
            assert other not in body and "tenant-0000" not in body
            # its tier row is its own figures, cell for cell, not the tier's across tenants
            assert page.eval("Array.from(document.querySelectorAll('#shadow-tiers tr[id]')).map(r => r.id)") \
                == [f"tier-{tier}"]
            tier_cells, own_cells = cells(page, f"tier-{tier}"), cells(page, f"tenant-{mine}")
            assert tier_cells[2:] == own_cells[2:]
            assert [int(tier_cells[2]), int(tier_cells[3]), int(tier_cells[4]), int(tier_cells[5])] == [
                own["cycles"], own["hold_cycles"], round(own["waits_avoided_gpu_min"]), own["preemptions"]]
            page.screenshot(ARTEFACTS / f"shadow-{mine}.png")


@pytest.mark.security
def test_a_tenant_page_does_not_count_others_jobs_preempted_for_it(busy_daemon):
    # the records hold other tenants' jobs preempted for tenant-0001: the operator sees how many, the tenant does
    # not (whom a preemption made room for is the operator's to know)
    base, records = busy_daemon
    newest = records[-SHADOW_CYCLES:]
    n_for = shadow_report(newest)["tenants"]["tenant-0001"]["preemptions_for"]
    assert n_for > 0, "the case must preempt others' jobs for tenant-0001"
    ten = httpx.Client(base_url=base, timeout=60)
    assert ten.post("/ui/login", data={"token": T1, "next": "/ui/"}).status_code == 303
    r = ten.get("/ui/shadow")
    assert r.status_code == 200 and "tenant-tenant-0001" in r.text
    assert "preempted for it" not in r.text and "for-it" not in r.text
    op = httpx.Client(base_url=base, timeout=60)
    assert op.post("/ui/login", data={"token": OP, "next": "/ui/"}).status_code == 303
    text = op.get("/ui/shadow").text
    assert "preempted for it" in text and f'<td class="num for-it">{n_for}</td>' in text


@pytest.mark.security
def test_shadow_page_bounds_work_per_request(busy_daemon):
    # a tenant token asks for 100,000 cycles: it gets the newest SHADOW_CYCLES at most, and the report runs off the
    # event loop: /healthz (the liveness probe) keeps answering within a second all along
    base, records = busy_daemon
    assert len(records) > SHADOW_CYCLES
    c = httpx.Client(base_url=base, timeout=120)
    assert c.post("/ui/login", data={"token": T1, "next": "/ui/"}).status_code == 303
    got: dict = {}

    def ask() -> None:
        got["r"] = c.get("/ui/shadow", params={"cycles": 100_000})

    worst = 0.0
    polls = 0
    pages = []
    for _ in range(3):  # three requests in a row: each must leave /healthz answering
        th = threading.Thread(target=ask)
        th.start()
        while th.is_alive():
            t = time.monotonic()
            assert httpx.get(f"{base}/healthz", timeout=10).status_code in (200, 503)
            worst = max(worst, time.monotonic() - t)
            polls += 1
            time.sleep(0.02)
        th.join()
        pages.append(got["r"])
    assert worst < 1.0, f"/healthz took {worst:.2f} s while the shadow report ran ({polls} polls)"
    for r in pages:
        assert r.status_code == 200, r.text[:500]
        assert f"{SHADOW_CYCLES} dry-run cycles" in r.text and f"the newest {SHADOW_CYCLES} at most" in r.text
