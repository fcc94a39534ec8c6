"""The skill gate per GPU type (issue 40, item 2) in /api/v1 and the console: on a mixed fleet a tenant's verdict
lists each type's (one line per type), and a tenant token reads its own verdicts only."""

import dataclasses
import html
import re

import pytest
from starlette.testclient import TestClient

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.forecasting.skill import decide
from daemon.service.wiring import build_runtime
from daemon.web.app import build_app
from tests.support.daemons import OP, T1, T2, h
from tests.support.web_backend import SnapshotBackend, with_tokens


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def typed_snap(tmp_path_factory):
    """One simulated cycle with the gate on, its plan's verdicts replaced by the gate's on scores of two typed
    series per tenant (a100: skill; t4: none), as the cycle decides them on a mixed fleet."""
    tmp = tmp_path_factory.mktemp("gate-types")
    cfg = Config(cluster={"gpus": 128}, cycle={"horizon_steps": 5, "history_steps": 600},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=4, high_share=1.0, warmup_steps=800)),
                 forecaster={"season_steps": 60, "model_dir": tmp / "none"},
                 policy={"skill_gate": {"enabled": True, "min_scored": 3, "window": 50}},
                 state={"path": tmp / "s.sqlite"})
    rt = build_runtime(cfg)
    try:
        plan = rt.runner.run_once().plan
        snap = dataclasses.replace(rt.runner.snapshot, cfg=with_tokens(rt.runner.snapshot.cfg))
    finally:
        rt.close()
    tenants = snap.state.tenants
    scores = {f"{t}@{k}": sc for t in tenants for k, sc in (("a100", (1.0, 10.0, 12)), ("t4", (8.0, 1.0, 12)))}
    verdicts = decide(scores, tenants, {}, cfg.policy.skill_gate)
    plan = dataclasses.replace(plan, forecast_acting={t: v.to_dict() for t, v in verdicts.items()})
    return dataclasses.replace(snap, plan=plan)


def test_the_api_lists_each_types_verdict_and_a_tenant_reads_its_own_only(typed_snap):
    client = TestClient(build_app(SnapshotBackend(typed_snap)))
    mine = client.get("/api/v1/tenants/tenant-0001", headers=h(T1)).json()["acting_on_forecast"]
    assert mine["acting"] and mine["why"] == "forecast for a100; reactive for t4"
    assert mine["by_type"]["a100"]["acting"] and mine["by_type"]["a100"]["why"].startswith("forecast: ")
    assert not mine["by_type"]["t4"]["acting"] and mine["by_type"]["t4"]["why"].startswith("reactive: ")
    listed = client.get("/api/v1/tenants", headers=h(T1)).json()["tenants"]
    assert [t["tenant"] for t in listed] == ["tenant-0001"] and listed[0]["acting_on_forecast"] == mine
    assert client.get("/api/v1/tenants/tenant-0002", headers=h(T1)).status_code in (403, 404)
    plan = client.get("/api/v1/plan", headers=h(OP)).json()["forecast_acting"]
    assert plan["tenant-0002"]["by_type"].keys() == {"a100", "t4"}
    assert client.get("/api/v1/plan", headers=h(T2)).status_code == 403


def test_the_console_shows_one_line_per_type(typed_snap):
    client = TestClient(build_app(SnapshotBackend(typed_snap)))
    client.cookies.set("gpuas_token", T1)
    page = client.get("/ui/tenants/tenant-0001").text
    lines = [_text(x).strip() for x in re.findall(r'<li class="acting-type">(.*?)</li>', page, re.S)]
    assert len(lines) == 2, lines
    assert lines[0].startswith("a100: yes — forecast: its holds lose 10%")
    assert lines[1].startswith("t4: no — reactive: the forecast's holds lose 800%")
    assert lines[1].endswith("your t4 work is held for its demand now with headroom")
    assert "Acting on forecast: yes" in _text(page)
    # a tenant's token: its own page (the tenants table is the operator's), no other tenant's verdict
    assert "tenant-0002" not in _text(client.get("/ui/tenants").text)
    # the operator's tenants table: a line per type under each tenant's verdict
    client.cookies.set("gpuas_token", OP)
    table = client.get("/ui/tenants").text
    row = table[table.index('<tr id="row-tenant-0001">'):]
    row = _text(row[:row.index("</tr>")])
    assert "a100: yes forecast: its holds lose 10%" in row and "t4: no reactive: the forecast's holds lose 800%" in row
