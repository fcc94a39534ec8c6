"""The skill gate (issue 40, item 2) in the console, in a real browser (headless Chromium) against `run --sim` with
policy.skill_gate on: each tenant's page says "Acting on forecast: yes/no" and why, the tenants table says it for
every tenant, and the shadow page counts the cycles each tenant acted on the forecast."""

import re

import httpx
import pytest

from tests.conftest import REPO
from tests.support.browser import chromium, logged_in
from tests.support.daemons import OP, sim_process

pytestmark = pytest.mark.timeout(300)

ARTEFACTS = REPO / "reports" / "browser"

# one-second cycles, a 5-step horizon and 3 scored forecasts: the gate decides on scores within a minute
SETTINGS = """
[cluster]
gpus = 256
[cycle]
interval_s = 1.0
horizon_steps = 5
[source.simulator]
seed = 3
tenants = 8
warmup_steps = 600
[forecaster]
kind = "seasonal_naive"
season_steps = 60
[actuators]
dry_run = true
[policy.skill_gate]
enabled = true
min_scored = 3
window = 50
"""

WHY = re.compile(r"(forecast|reactive): \S")


def _api_acting(base: str) -> dict:
    r = httpx.get(f"{base}/api/v1/plan", headers={"Authorization": f"Bearer {OP}"}, timeout=10)
    return (r.json().get("forecast_acting") or {}) if r.status_code == 200 else {}


@pytest.fixture(scope="module")
def gated_daemon(tmp_path_factory):
    """The daemon once every tenant's gate has decided on scored windows (not "n of 3 forecasts scored")."""
    def decided(base: str) -> bool:
        acting = _api_acting(base)
        return bool(acting) and all(v["scored"] >= 3 for v in acting.values())

    with sim_process(tmp_path_factory.mktemp("gate"), SETTINGS, decided, "every tenant's gate decided",
                     timeout=180) as base:
        yield base


def test_browser_operator_sees_per_tenant_whether_the_plan_acts_on_its_forecast_and_why(gated_daemon):
    base = gated_daemon
    with chromium() as new_page:
        page = logged_in(new_page, base, OP)

        # the tenants table: a column that says yes or no, and why, for every tenant
        assert page.goto(f"{base}/ui/tenants") == 200
        rows = page.eval("Array.from(document.querySelectorAll('#tenant-table tr[id]')).map(r => "
                         "[r.id.slice(4), r.querySelector('td.acting').innerText.trim()])")
        assert len(rows) == 8
        for _, text in rows:
            yes_no, why = text.split(" ", 1)
            assert yes_no in ("yes", "no") and WHY.match(why), text
            assert why.startswith("forecast: " if yes_no == "yes" else "reactive: "), text
        page.screenshot(ARTEFACTS / "tenants-skill-gate.png")

        # a tenant's page says it in words; it is the plan's (the API's) verdict, read on the same cycle's plan
        name = rows[0][0]
        text = ""
        for _ in range(20):   # the daemon plans every second: read the page and the API until one plan is read
            before = _api_acting(base)[name]
            assert page.goto(f"{base}/ui/tenants/{name}") == 200
            text = page.eval("document.querySelector('#acting-on-forecast').innerText")
            if _api_acting(base)[name] == before:
                break
        m = re.fullmatch(r"Acting on forecast: (yes|no) — (.+)\.", text.strip())
        assert m, text
        assert m.group(1) == ("yes" if before["acting"] else "no") and m.group(2).startswith(before["why"])
        if not before["acting"]:
            assert "held for your demand now with headroom, and nothing preempted for your forecast" in text
        page.screenshot(ARTEFACTS / "tenant-skill-gate.png")

        # the shadow page counts the gated cycles acted on the forecast: a share for every tenant and tier
        assert page.goto(f"{base}/ui/shadow") == 200
        shares = page.eval("Array.from(document.querySelectorAll('#shadow-tenants tr[id] td.on-forecast, "
                           "#shadow-tiers tr[id] td.on-forecast')).map(c => c.textContent.trim())")
        assert len(shares) >= 8 and all(re.fullmatch(r"\d+%", s) for s in shares), shares
        page.screenshot(ARTEFACTS / "shadow-skill-gate.png")
