"""The cluster page (issue 37): why the GPUs held exceed the high tier's pool (the plan's split: the high tier's
forecast, aged tenants, operators' floors), and a rate level that throttles everyone said once, not as a list of
every tenant."""

import dataclasses
import re

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.policy.types import OperatorInputs
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from forecaster.types import Forecast
from tests.policy.test_aging import jobs
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens

T0 = pd.Timestamp("2026-01-06T12:00:00Z")
IDLE = tuple(f"idle-{k}" for k in range(6))
TENANTS = ("hi", "lo", "fl") + IDLE
LEVELS = [{"load": 0.0, "high": 500, "normal": 100, "low": 50}, {"load": 0.02, "high": 400, "normal": 80, "low": 40},
          {"load": 0.05, "high": 300, "normal": 60, "low": 30}]


def _snapshot() -> Snapshot:
    """hi (high) forecast to peak at 64 GPUs above a pool of 12; lo (low) with a job queued 2 hours (aged); fl
    (normal) with an operator's floor of 16; six idle normal tenants; load 9%, so rate level 2 of LEVELS."""
    n = len(TENANTS)
    rows = [("h1", 0, 8, "high", True, 600.0, 0.0), ("l1", 1, 8, "low", False, 0.0, 7200.0),
            ("f1", 2, 4, "normal", True, 600.0, 0.0)]
    used = np.zeros(n)
    used[[0, 2]] = [8, 4]
    pending = np.zeros(n)
    pending[1] = 8
    st = ClusterState(T0, TENANTS, ("high", "low", "normal") + ("normal",) * len(IDLE), 128, used, pending, jobs(rows))
    v = np.zeros((n, 30, 3))
    v[0] = 64.0
    fc = Forecast(TENANTS, (0.5, 0.9, 0.99), v, T0, 60, "test")
    cfg = with_tokens(Config(policy={"max_wait_steps": 10, "headroom": 0, "reserve_share": 0.1},
                             ratelimits={"levels": LEVELS}))
    p = plan(fc, st, PolicyMemory(), cfg, ops=OperatorInputs(floors={"fl": 16}))
    assert p.memory.rate_level == 2
    return Snapshot(cfg=cfg, plan=p, state=st, forecast=fc, cycle=1)


def _page(snap: Snapshot) -> str:
    client = TestClient(build_app(SnapshotBackend(snap)))
    client.cookies.set("gpuas_token", OP)
    r = client.get("/ui/")
    assert r.status_code == 200, r.text[-300:]
    return r.text


def test_the_cluster_page_says_why_the_held_gpus_exceed_the_high_tier_pool():
    snap = _snapshot()
    p = snap.plan
    held = sum(p.reservations.values())
    assert held > p.high_pool                                    # the puzzle: 632 held against a pool of 204
    text = _page(snap)
    assert f"Why {held} GPUs are held" in text
    got = {k: int(re.search(rf'id="held-{k}">(\d+)<', text).group(1)) for k in ("high", "aged", "floor")}
    assert got == {"high": p.reservations["hi"], "aged": 8, "floor": 16}
    assert sum(got.values()) == held
    assert f"{p.reservations['hi'] - p.high_pool} beyond its guarantee (the high-tier pool, {p.high_pool})" in text
    client = TestClient(build_app(SnapshotBackend(snap)))
    assert client.get("/api/v1/plan", headers=h(OP)).json()["held_for"] == {**got, "window": 0}
    assert 'id="held-window"' not in text                         # no window holds: no row for them


def test_the_cluster_page_says_a_windows_gpus_are_held_for_the_window_not_as_a_floor():
    """make run with a low-tier tenant's window (32 GPUs) and no floor set: the page said "for operators' floors
    32 (floor_gpus set on a tenant)"; a high-tier tenant's window was said to be held for the forecast peak."""
    from daemon.config import parse_config

    snap = _snapshot()
    win = {"every": "daily", "at": "12:15", "duration_minutes": 60, "reclaim_before_minutes": 30}
    cfg = with_tokens(parse_config({
        "policy": {"max_wait_steps": 10, "headroom": 0, "reserve_share": 0.1}, "ratelimits": {"levels": LEVELS},
        "tenants": [{"name": "hi", "tier": "high"}, {"name": "lo", "tier": "low"}, {"name": "fl"}],
        "windows": [{**win, "name": "lo-batch", "tenant": "lo", "gpus": 32},
                    {**win, "name": "hi-peak", "tenant": "hi", "gpus": 96}]}))
    p = plan(snap.forecast, snap.state, PolicyMemory(), cfg)
    assert p.window_holds == {"lo": 32, "hi": 96}, p.notes
    text = _page(dataclasses.replace(snap, cfg=cfg, plan=p))
    got = {k: int(re.search(rf'id="held-{k}">(\d+)<', text).group(1)) for k in ("high", "window", "aged", "floor")}
    assert got["window"] == 128 and got["floor"] == 0
    assert got["high"] == p.reservations["hi"] - 96
    assert sum(got.values()) == sum(p.reservations.values())
    assert "for recurring windows" in text


def test_a_rate_level_that_throttles_everyone_is_said_once_and_holders_are_listed():
    """Before: "Tenants holding capacity or throttled" listed every tenant at rate level 2."""
    snap = _snapshot()
    text = _page(snap)
    table = text[text.index('id="tenant-table"'):]
    table = table[:table.index("</table>")]
    listed = set(re.findall(r'/ui/tenants/([\w.-]+)"', table))
    assert listed == {"hi", "lo", "fl"}                         # the holders; no idle tenant
    assert text.count("The plan limits all tenants (no gateway applies it) at rate level 2") == 1   # no redis
    assert "(from load 5%): high 300, normal 60, low 30 req/s" in text
    gw = dataclasses.replace(snap, cfg=snap.cfg.model_copy(update={"actuators": snap.cfg.actuators.model_copy(
        update={"enabled": ["log", "redis"]})}))
    assert _page(gw).count("All tenants throttled at rate level 2") == 1        # a gateway applies the limits
    # an operator's fixed limit throttles one tenant its own way: it is listed, and the level line says so
    fixed = dataclasses.replace(snap.plan, limits={**snap.plan.limits, "idle-3": dataclasses.replace(
        snap.plan.limits["idle-3"], reason="fixed limit for idle-3: 5 req/s")})
    text = _page(dataclasses.replace(snap, plan=fixed))
    table = text[text.index('id="tenant-table"'):]
    assert "idle-3" in table[:table.index("</table>")] and "keeps its own" in text


def test_at_level_0_no_throttle_line():
    snap = _snapshot()
    calm = dataclasses.replace(snap.plan, memory=dataclasses.replace(snap.plan.memory, rate_level=0))
    assert 'id="throttled-all"' not in _page(dataclasses.replace(snap, plan=calm))


def test_a_tenant_charts_title_and_legend_name_what_is_plotted():
    """Before: the title said "GPUs used (running + queued)" and the legend "usage" for the one demand series."""
    snap = _snapshot()
    idx = pd.date_range(end=T0, periods=5, freq="60s")
    snap = dataclasses.replace(snap, history=pd.DataFrame({t: np.arange(5.0) for t in TENANTS}, index=idx))
    client = TestClient(build_app(SnapshotBackend(snap)))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/tenants/lo").text                    # a low-tier tenant
    chart = text[text.index('id="forecast-chart"'):]
    chart = chart[:chart.index("</figure>")]
    title = re.search(r"<title>(.*?)</title>", chart).group(1)
    keys = re.findall(r'<span class="key s-used">(.*?)</span>', chart)
    series = re.findall(r'class="s-used" data-series="(.*?)"', chart)
    assert keys == ["demand (GPUs running + queued)"] and set(series) == set(keys)
    assert keys[0] in title and "usage" not in chart


def test_the_tenant_tables_name_their_units():
    """The cluster page's and the tenants page's tables headed their GPU counts 'used', 'held' and 'quota' beside
    a 'req/s' column: a number of GPUs or of requests? Each count now says GPUs."""
    snap = _snapshot()
    client = TestClient(build_app(SnapshotBackend(snap)))
    client.cookies.set("gpuas_token", OP)
    for path, table_id in (("/ui/", "tenant-table"), ("/ui/tenants", None)):
        text = client.get(path).text
        if table_id:
            text = text[text.index(f'id="{table_id}"'):]
        heads = re.findall(r"<th[^>]*>([^<]*)</th>", text[:text.index("</tr>")])
        assert heads[2:6] == ["GPUs used", "GPUs held", "quota, GPUs", "req/s"], (path, heads)


def test_rate_limits_no_gateway_applies_are_said_not_enforced():
    """First-day walk (hday3, Kubernetes with Kueue and no Redis gateway): the page read "All tenants throttled at rate
    level 2 ..." with nothing applying a limit; it now says they are not enforced, and only where no redis actuator
    is enabled."""
    snap = _snapshot()
    text = _page(snap)
    assert 'id="limits-unenforced"' in text and "Not enforced on this cluster" in text
    gw = dataclasses.replace(snap, cfg=snap.cfg.model_copy(update={"actuators": snap.cfg.actuators.model_copy(
        update={"enabled": ["log", "redis"]})}))
    assert 'id="limits-unenforced"' not in _page(gw)


def test_every_page_of_a_dry_run_on_a_real_cluster_says_nothing_was_done():
    """First-day walk (hday3, Kubernetes in dry run): the events page listed "preemption job research-batch/... (8
    GPUs)" eleven times and the tenant's page "preempted and requeued", with nothing on any page saying it was a dry
    run and the pod still running. Each page now says so; not on the embedded simulator (its cluster obeys the
    plan), nor once the actuators act."""
    snap = _snapshot()

    def pages(source: str, dry: bool) -> list[str]:
        cfg = snap.cfg.model_copy(update={"source": snap.cfg.source.model_copy(update={"kind": source}),
                                          "actuators": snap.cfg.actuators.model_copy(update={"dry_run": dry})})
        client = TestClient(build_app(SnapshotBackend(dataclasses.replace(snap, cfg=cfg))))
        client.cookies.set("gpuas_token", OP)
        return [client.get(u).text for u in ("/ui/", "/ui/tenants/lo", "/ui/events", "/ui/shadow")]

    assert all('id="dry-run"' in t and "no pod was evicted" in t for t in pages("prometheus", True))
    assert not any('id="dry-run"' in t for t in pages("simulator", True) + pages("prometheus", False))


def test_the_api_says_no_tenant_is_throttled_where_no_gateway_applies_the_limits():
    """First-day walk (hday3, no Redis gateway): the API said `throttled: true` of every tenant at rate level 2, a
    limit nothing applied. It now gives the plan's limit with `throttled: false` and `enforced: false`, and no
    "throttled" notification; with the redis actuator the limit throttles (enforced once out of dry run)."""
    snap = _snapshot()

    def api(s: Snapshot) -> tuple[dict, dict]:
        client = TestClient(build_app(SnapshotBackend(s)))
        hdr = h(OP)
        return client.get("/api/v1/plan", headers=hdr).json(), client.get("/api/v1/tenants/lo", headers=hdr).json()

    def acting(enabled: list[str], dry: bool) -> Snapshot:
        return dataclasses.replace(snap, cfg=snap.cfg.model_copy(update={"actuators": snap.cfg.actuators.model_copy(
            update={"enabled": enabled, "dry_run": dry})}))

    p, lo = api(snap)
    assert lo["limit"]["level"] == 2 and lo["limit"]["rate"] == LEVELS[2]["low"]   # the limit the plan would set
    assert lo["throttled"] is False and lo["limit"]["throttled"] is False and lo["limit"]["enforced"] is False
    assert not any(x["limits"][t]["throttled"] for x in (p,) for t in x["limits"])
    assert not [n for n in lo["notifications"] if n["type"] == "throttled"]
    assert not [n for n in p["notifications"] if n["kind"] == "throttled"]
    p, lo = api(acting(["log", "redis"], True))   # a gateway, in dry run: it would throttle, enforced not yet
    assert lo["throttled"] is True and lo["limit"]["enforced"] is False
    assert [n for n in lo["notifications"] if n["type"] == "throttled"]
    p, lo = api(acting(["log", "redis"], False))
    assert lo["throttled"] is True and lo["limit"]["enforced"] is True and p["limits"]["lo"]["enforced"] is True
