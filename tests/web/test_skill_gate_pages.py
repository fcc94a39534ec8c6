"""The console's pages say what the plan holds a tenant for when the skill gate (policy.skill_gate) plans it
reactively: found on `make run` with the gate on, where the tenant page said "Capacity is held for the p90 peak over
the next 10 minutes" beside "Acting on forecast: no ... held for your demand now with headroom". The same cycle
serves the cluster page's live forecast quality card's test."""

import dataclasses
import html
import re

import pytest
from starlette.testclient import TestClient

from daemon.web.app import build_app
from tests.support.daemons import OP
from tests.support.web_backend import SnapshotBackend, gated_cycle


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def first_cycle(tmp_path_factory):
    """One cycle of the simulator with the gate on: nothing scored yet, so every tenant is planned reactively."""
    yield gated_cycle(tmp_path_factory.mktemp("gate"), tenants=6, high_share=0.4)


def _client(snap) -> TestClient:
    client = TestClient(build_app(SnapshotBackend(snap)))
    client.cookies.set("gpuas_token", OP)
    return client


def test_a_reactive_tenants_page_does_not_say_its_capacity_is_held_for_the_forecast_peak(first_cycle):
    plan, snap = first_cycle
    st = snap.state
    high = [t for t, tier in zip(st.tenants, st.tiers) if tier == "high"]
    assert high and all(not plan.forecast_acting[t]["acting"] for t in high)
    text = _text(_client(snap).get(f"/ui/tenants/{high[0]}").text)
    assert "Acting on forecast: no" in text
    assert "Capacity is held for the p90 peak" not in text
    assert "Capacity is not held for this forecast: the skill gate plans you reactively" in text


def test_the_cluster_page_says_the_high_tiers_holds_follow_the_forecast_only_where_the_gate_acts_on_it(first_cycle):
    """It said "for the high tier's forecast peak" while the gate planned every high-tier tenant reactively."""
    plan, snap = first_cycle
    st = snap.state
    high = [t for t, tier in zip(st.tenants, st.tiers) if tier == "high"]
    assert len(high) > 1 and plan.held_for.get("high", 0) > 0
    text = _text(_client(snap).get("/ui/").text)
    assert "for the high tier's forecast peak" not in text
    assert (f"for the high tier's demand now with headroom: the skill gate plans all {len(high)} high-tier tenants "
            "reactively") in text
    # one of them on its forecast: the page says how many
    acting = {**plan.forecast_acting, high[0]: {**plan.forecast_acting[high[0]], "acting": True}}
    one = dataclasses.replace(snap, plan=dataclasses.replace(plan, forecast_acting=acting))
    text = _text(_client(one).get("/ui/").text)
    assert f"the forecast peak of the 1 of its {len(high)} tenants the skill gate acts on the forecast for" in text
    # the gate off: as before
    off = dataclasses.replace(snap, plan=dataclasses.replace(plan, forecast_acting={}))
    assert "for the high tier's forecast peak" in _text(_client(off).get("/ui/").text)


def test_a_tenant_outside_the_high_tier_is_told_its_verdict_changes_nothing(first_cycle):
    """Found on `make run` with the gate on: a low-tier tenant's page said "Acting on forecast: no — reactive: ...:
    held for your demand now with headroom, and nothing preempted for your forecast" (or "yes" once scored), while
    only the high tier's holds and preemptions follow a forecast: a low tenant is held nothing on its demand either."""
    plan, snap = first_cycle
    st = snap.state
    other = [t for t, tier in zip(st.tenants, st.tiers) if tier != "high"]
    high = [t for t, tier in zip(st.tenants, st.tiers) if tier == "high"]
    assert other and high
    client = _client(snap)
    tier = dict(zip(st.tenants, st.tiers))[other[0]]
    text = _text(client.get(f"/ui/tenants/{other[0]}").text)
    assert "Acting on forecast: no" in text
    assert "held for your demand now with headroom" not in text
    assert (f"Only the high tier's holds and preemptions follow a forecast: for a {tier}-tier tenant this verdict "
            "changes nothing") in text
    assert "Capacity is not held for this forecast" not in text
    # a high-tier tenant's page keeps saying what reactive means for it
    assert "held for your demand now with headroom" in _text(client.get(f"/ui/tenants/{high[0]}").text)
    table = client.get("/ui/tenants").text
    row = table[table.index(f'<tr id="row-{other[0]}">'):]
    assert "(read for the high tier only)" in row[:row.index("</tr>")]
    row = table[table.index(f'<tr id="row-{high[0]}">'):]
    assert "(read for the high tier only)" not in row[:row.index("</tr>")]


def test_the_live_forecast_quality_card_says_yes_or_no_not_pythons_true_or_false(first_cycle):
    """make run's cluster page read "fallback to baseline False" once the forecasts were scored."""
    _, snap = first_cycle
    scored = dataclasses.replace(snap, quality_summary={"fallback to baseline": False, "forecasts scored": 18})
    text = _text(_client(scored).get("/ui/").text)
    assert "fallback to baseline no" in text and "False" not in text
    fell = dataclasses.replace(snap, quality_summary={"fallback to baseline": True})
    assert "fallback to baseline yes" in _text(_client(fell).get("/ui/").text)


def test_the_live_forecast_quality_card_says_when_the_first_scores_come(first_cycle):
    """make run's cluster page read "Live forecast quality: not scored yet on this daemon." for its first hour, with
    nothing saying when that would change: a forecast is scored once its horizon (here 5 steps of 60 s) has passed."""
    _, snap = first_cycle
    assert snap.quality_summary is None
    text = _text(_client(snap).get("/ui/").text)
    assert ("Live forecast quality: not scored yet on this daemon (a forecast is scored once its horizon, 5 min of "
            "the cluster's time, has passed)") in text, text
