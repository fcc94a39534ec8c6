"""The console over real HTTP: login and cookies, who sees which page, the operator's form, the SVG charts.

The same pages in a real browser (headless Chromium) are in tests/support/browser.py.
"""

import re
import time

import httpx
import pytest

from daemon.web.console.charts import Band, Chart, Line
from tests.conftest import REPO, free_port
from tests.support.browser import chromium, logged_in
from tests.support.daemons import OP, T1, sim_process
from tests.support.services import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ui(api):  # a daemon on the embedded simulator with operator and tenant tokens (tests/web/test_api.py)
    return api


def login(base, token):
    c = httpx.Client(base_url=base)
    r = c.post("/ui/login", data={"token": token, "next": "/ui/"})
    assert r.status_code == 303, r.text
    return c, r


def test_without_a_token_every_page_sends_to_the_login_form(ui):
    _, base = ui
    for path in ("/ui/", "/ui/tenants", "/ui/tenants/tenant-0001", "/ui/events"):
        r = httpx.get(base + path)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next="), path
    r = httpx.get(f"{base}/ui/login")
    assert r.status_code == 200 and "tenant-0" not in r.text and 'name="token"' in r.text
    assert httpx.post(f"{base}/ui/tenants/tenant-0001/override", data={"rate_override": "1"}).status_code == 303


def test_login_sets_a_strict_httponly_cookie(ui):
    _, base = ui
    r = httpx.post(f"{base}/ui/login", data={"token": "wrong-token-0123456789"})
    assert r.status_code == 401 and "not valid" in r.text and "set-cookie" not in r.headers
    c, r = login(base, OP)
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie
    page = c.get("/ui/")
    assert page.status_code == 200 and 'id="load-chart"' in page.text and 'id="cluster-forecast-chart"' in page.text
    # a crafted `next` cannot send the browser elsewhere
    r = httpx.post(f"{base}/ui/login", data={"token": OP, "next": "//evil.example/x"})
    assert r.headers["location"] == "/ui/"
    assert c.post("/ui/logout").headers["set-cookie"].startswith('gpuas_token="";')


@pytest.mark.security
def test_another_sites_page_cannot_sign_the_browser_in_or_out(ui):
    """The sign-in and sign-out forms check the Origin as the operator's forms do. A page elsewhere posting the
    sign-in form with a tenant's token got a 303 and that token's cookie, replacing an operator's in the browser
    (SameSite does not stop a cookie set by a top-level navigation's answer): the console then showed the tenant's
    view. The console's own forms (its origin, or no Origin) still work."""
    _, base = ui
    evil = {"Origin": "http://evil.example"}
    r = httpx.post(f"{base}/ui/login", data={"token": T1, "next": "/ui/"}, headers=evil)
    assert r.status_code == 403 and "set-cookie" not in r.headers and "Cross-site form" in r.text
    c, _ = login(base, OP)
    r = c.post("/ui/logout", headers=evil)
    assert r.status_code == 403 and "set-cookie" not in r.headers
    assert c.get("/ui/").status_code == 200   # still signed in
    r = httpx.post(f"{base}/ui/login", data={"token": T1, "next": "/ui/"}, headers={"Origin": base})
    assert r.status_code == 303 and r.headers["set-cookie"].startswith("gpuas_token=")
    assert c.post("/ui/logout", headers={"Origin": base}).status_code == 303


def test_pages_load_nothing_from_outside(ui):
    _, base = ui
    c, _ = login(base, OP)
    for path in ("/ui/", "/ui/tenants", "/ui/tenants/tenant-0001", "/ui/events", "/ui/login"):
        r = c.get(path)
        assert "default-src 'none'" in r.headers["content-security-policy"], path
        assert r.headers["x-frame-options"] == "DENY"
        assert not re.search(r"""(src|href|action)\s*=\s*["']?(https?:)?//""", r.text), path
        assert "<script" not in r.text.lower(), path


def test_tenant_sees_its_own_page_only(ui):
    _, base = ui
    c, _ = login(base, T1)
    r = c.get("/ui/")
    assert r.status_code == 303 and r.headers["location"] == "/ui/tenants/tenant-0001"
    assert c.get("/ui/tenants").headers["location"] == "/ui/tenants/tenant-0001"
    own = c.get("/ui/tenants/tenant-0001")
    assert own.status_code == 200 and 'id="forecast-chart"' in own.text and 'id="reason-text"' in own.text
    assert "override-form" not in own.text                     # operators only
    other = c.get("/ui/tenants/tenant-0002")
    assert other.status_code == 403 and "tenant-0002" not in other.text.split("<main>")[1].split("may only")[0]
    assert c.get("/ui/tenants/nobody").status_code == 403
    assert c.post("/ui/tenants/tenant-0001/override", data={"rate_override": "1"}).status_code == 403
    ev = c.get("/ui/events")
    assert ev.status_code == 200
    assert not re.search(r"tenant-00(0[02-9]|1\d)", ev.text)  # no other tenant's name in its event list


def test_operator_pages_and_errors(ui):
    d, base = ui
    c, _ = login(base, OP)
    tenants = c.get("/ui/tenants")
    assert tenants.status_code == 200 and tenants.text.count('href="/ui/tenants/tenant-') == 16
    page = c.get("/ui/tenants/tenant-0003")
    assert page.status_code == 200
    m = re.search(r'id="reason-text">([^<]*)<', page.text)
    assert m and re.fullmatch(r"cluster load \d+% \(level \d, &gt;= \d+%\): \w+ tier limited to [\d.]+ req/s"
                              r"|normal operation: \w+ tier limit [\d.]+ req/s", m.group(1)), m and m.group(1)
    assert re.search(r'<polygon class="b-p90" data-series="p50–p90" points="[\d., ]+"', page.text)
    assert c.get("/ui/tenants/nobody").status_code == 404
    assert c.get("/ui/tenants/bad%20name").status_code == 400
    assert c.get("/ui/events?kind=Bad!").status_code == 400
    # whatever an event carries is text, never markup
    d.runtime.store.log_event("2026-01-04T13:00:00+00:00", "notification",
                              {"tenant": "tenant-0003", "type": "x", "message": "<img src=x onerror=alert(1)>"})
    page = c.get("/ui/events?kind=notification").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    assert "&lt;img" in c.get("/ui/tenants/tenant-0003").text
    # a bearer header works as well as the cookie
    assert httpx.get(f"{base}/ui/events", headers={"Authorization": f"Bearer {OP}"}).status_code == 200


def test_operator_form_changes_a_tenant(ui):
    d, base = ui
    c, _ = login(base, OP)
    r = c.post("/ui/tenants/tenant-0004/override", data={"tier": "", "rate_override": "abc", "floor_gpus": ""})
    assert r.status_code == 400 and "rate_override: not a number" in r.text
    r = c.post("/ui/tenants/tenant-0004/override", data={"tier": "", "rate_override": "", "floor_gpus": "-3"})
    assert r.status_code == 400 and "floor_gpus" in r.text
    r = c.post("/ui/tenants/tenant-0004/override", data={"tier": "high", "rate_override": "7", "floor_gpus": "",
                                                        "preemption_paused": "1"}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403
    r = c.post("/ui/tenants/tenant-0004/override", data={"tier": "high", "rate_override": "7", "floor_gpus": "",
                                                        "preemption_paused": "1"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/tenants/tenant-0004?saved=1"
    assert d.runtime.overrides.for_tenant("tenant-0004") == {"tier": "high", "rate_override": 7.0,
                                                             "preemption_paused": True}
    assert "applies at the next cycle" in c.get(r.headers["location"]).text
    ev = d.runtime.store.recent_events(1, kind="operator_change")[0]
    assert ev["who"] == "ops" and ev["tenant"] == "tenant-0004"
    assert "ops changed tenant-0004" in c.get("/ui/events?kind=operator_change").text


def test_operator_pauses_and_resumes_all_preemptions(ui):
    d, base = ui
    c, _ = login(base, OP)
    t, _ = login(base, T1)
    assert t.post("/ui/overrides", data={"preemption_paused": "1"}).status_code == 403
    assert c.post("/ui/overrides", data={"preemption_paused": "1"},
                  headers={"Origin": "http://evil.example"}).status_code == 403
    r = c.post("/ui/overrides", data={"preemption_paused": "1"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/?saved=1"
    assert d.runtime.overrides.inputs().paused_all
    page = c.get("/ui/?saved=1").text
    assert 'id="paused">Preemptions paused by an operator' in page and "applies at the next cycle" in page
    assert c.post("/ui/overrides", data={"preemption_paused": ""}).status_code == 303
    assert not d.runtime.overrides.inputs().paused_all and 'id="paused"' not in c.get("/ui/").text
    audit = d.runtime.store.recent_events(2, kind="operator_change")
    assert [e["changes"]["preemption_paused"]["to"] for e in audit] == [None, True]


def test_pages_say_when_the_source_is_down(ui):
    d, base = ui
    c, _ = login(base, OP)
    d.runtime.sim.blackout = True
    try:
        wait_for(lambda: d.last_result.outcome == "source_error", what="a cycle without source", timeout=30)
        r = c.get("/ui/")
        assert re.search(r'id="health-reason">Degraded: source unavailable: simulated source blackout', r.text)
        t = c.get("/ui/tenants/tenant-0001")
        assert 'id="stale">The daemon is holding its last good plan' in t.text and 'id="reason-text"' in t.text
        assert "simulated source blackout" in t.text                         # an operator reads the error
        own, _ = login(base, T1)                  # the tenant, on its own page: only that the source is down
        mine = own.get("/ui/tenants/tenant-0001").text
        assert "simulated source blackout" not in mine
        assert 'id="stale">' in mine and "source unavailable (the error is in the daemon" in mine
    finally:
        d.runtime.sim.blackout = False
    wait_for(lambda: d.last_result.outcome == "ok", what="source back", timeout=30)
    assert 'id="health-reason"' not in c.get("/ui/").text


def test_chart_breaks_lines_at_missing_values_and_draws_the_band():
    ch = Chart("c", "t", [Line("usage", [-3, -2, -1, 0], [1.0, None, 2.0, 3.0], "s-used")],
               [Band("p50–p90", [1, 2], [1.0, 2.0], [2.0, 4.0], "b-p90")])
    svg = str(ch.svg())
    assert svg.count('<circle class="s-used"') == 1 and svg.count('<polyline class="s-used"') == 1
    assert svg.count('<polygon class="b-p90"') == 1 and ">now<" in svg
    empty = str(Chart("e", "nothing").svg())
    assert "<svg" in empty and "polyline" not in empty


def test_chart_axis_tops_fit_the_values_with_round_gridlines():
    """The cluster page of `make run` drew a 1,024-GPU cluster's capacity under a 2,000 top (its upper half empty),
    and the demand chart's gridlines read 625 and 1,875. The top is four round steps just above the values."""
    import re

    def ticks(top_value: float) -> list[str]:
        svg = str(Chart("c", "t", [Line("capacity", [-2, -1, 0], [top_value] * 3, "s-cap")]).svg())
        return re.findall(r'<text class="tick" x="[0-9.]+" y="[0-9.]+" text-anchor="end">([^<]+)</text>', svg)

    assert ticks(1024) == ["0", "300", "600", "900", "1,200"]          # 1,024 + 8%: 1,106
    assert ticks(1740) == ["0", "500", "1,000", "1,500", "2,000"]       # the demand chart's peak
    assert ticks(130) == ["0", "40", "80", "120", "160"]
    assert ticks(0.5) == ["0", "0.15", "0.3", "0.45", "0.6"]           # not rounded to 0.2 and 0.5
    assert ticks(5) == ["0", "1.5", "3", "4.5", "6"]
    for v in (1, 7, 64, 99, 100, 333, 1024, 5000, 99_999):
        tops = ticks(v)
        top = float(tops[-1].replace(",", ""))
        assert v * 1.08 <= top * (1 + 1e-9) <= v * 1.08 * 1.5 + 1e-9 or v < 10, (v, tops)


# ---- in a real browser: headless Chromium against `run --sim` --------------------------------------------------

ARTEFACTS = REPO / "reports" / "browser"


BROWSER_SETTINGS = """
[cluster]
gpus = 256
[cycle]
interval_s = 1.0
[source.simulator]
seed = 3
tenants = 16
warmup_steps = 600
[forecaster]
kind = "seasonal_naive"
[ratelimits]
levels = [{load = 0.0, high = 1000, normal = 100, low = 100}, {load = 0.3, high = 200, normal = 50, low = 25}]
"""


@pytest.fixture(scope="module")
def sim_daemon(tmp_path_factory, redis_url):
    """`gpu-autoscaler run --sim` as a process; rate levels that throttle from 30% load, so tenants are throttled: the
    redis actuator beside it (a real redis-server) is the gateway that applies them, without which no tenant is."""
    tmp = tmp_path_factory.mktemp("browser")
    settings = f'{BROWSER_SETTINGS}[actuators]\nenabled = ["log", "redis"]\n[actuators.redis]\nurl = "{redis_url}"\n'

    def throttled(base: str) -> bool:
        r = httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers={"Authorization": f"Bearer {OP}"})
        return r.status_code == 200 and r.json()["limit"]["throttled"] and r.json()["forecast"] is not None

    with sim_process(tmp, settings, throttled, "daemon with a throttled tenant", timeout=120) as base:
        yield base


def test_browser_operator_sees_the_throttled_tenant_and_its_forecast(sim_daemon):
    base = sim_daemon
    with chromium() as new_page:
        page = new_page()
        assert page.goto(f"{base}/ui/") == 200                  # redirected to the login form
        assert page.eval("location.pathname") == "/ui/login"
        assert page.submit("form[action='/ui/login']", {"token": OP}) == 200
        assert page.eval("location.pathname") == "/ui/"
        assert page.eval("document.querySelectorAll('#load-chart polyline, #load-chart circle').length") >= 2
        assert page.eval("document.querySelector('#cluster-forecast-chart polygon.b-p90').getBBox().width") > 100
        assert page.eval("document.querySelector('#rate-level').textContent.trim()") == "1"
        page.screenshot(ARTEFACTS / "cluster.png")

        assert page.goto(f"{base}/ui/tenants/tenant-0001") == 200
        reason = page.eval("document.querySelector('#reason-text').textContent")
        assert re.fullmatch(r"cluster load \d+% \(level 1, >= 30%\): high tier limited to 200 req/s", reason), reason
        assert page.eval("document.querySelector('#limit-reason').classList.contains('throttled')")
        assert "— throttled" in page.eval("document.querySelector('#limit-reason').innerText")
        # the forecast chart is drawn: a p50 line and a p50-p90 band right of "now", the usage line left of it
        box = page.eval("""(() => { const s = document.querySelector('#forecast-chart');
            const b = (q) => { const e = q ? s.querySelector(q) : s; if (!e) return null;
                               const r = e.getBoundingClientRect(); return {x: r.x, w: r.width, h: r.height}; };
            return {svg: b(null), band: b('polygon.b-p90'), p50: b('polyline.s-p50'), """
                        "usage: b('polyline.s-used')}; })()")
        assert box["svg"]["w"] > 600 and box["svg"]["h"] > 150
        assert box["band"] and box["p50"]["w"] > 50 and box["usage"]["w"] > 300
        assert box["p50"]["x"] > box["usage"]["x"] + box["usage"]["w"] - 5   # forecast starts where usage ends
        page.screenshot(ARTEFACTS / "tenant-throttled.png")

        # an operator throttles another tenant through the form; the next cycle's plan carries it, with its reason
        assert page.goto(f"{base}/ui/tenants/tenant-0002") == 200
        assert page.submit("#override-form", {"rate_override": "5"}) == 200
        assert (page.eval("document.querySelector('#notice').textContent")
                == "Change saved; it applies at the next cycle.")
        deadline = time.monotonic() + 30
        while page.eval("document.querySelector('#reason-text').textContent") != "fixed limit for tenant-0002: 5 req/s":
            assert time.monotonic() < deadline, "override not applied within 30 s"
            time.sleep(0.5)
            page.goto(f"{base}/ui/tenants/tenant-0002")
        page.screenshot(ARTEFACTS / "tenant-overridden.png")

        assert page.goto(f"{base}/ui/events") == 200
        assert page.eval("document.querySelectorAll('#events tr').length") > 1
        assert page.eval("document.querySelector('#events tr.ev-operator_change') !== null")
        page.screenshot(ARTEFACTS / "events.png")
        outside = [u for u in page.requested_urls() if not u.startswith(base) and not u.startswith("about:")]
        assert outside == []                                     # nothing fetched from anywhere else
    for name in ("cluster.png", "tenant-throttled.png", "tenant-overridden.png", "events.png"):
        assert (ARTEFACTS / name).stat().st_size > 10_000, name


def test_browser_tenant_token_cannot_open_another_tenants_page(sim_daemon):
    base = sim_daemon
    with chromium() as new_page:
        page = logged_in(new_page, base, T1)
        assert page.eval("location.pathname") == "/ui/tenants/tenant-0001"   # sent to its own tenant
        assert page.eval("document.querySelector('#forecast-chart') !== null")
        assert page.goto(f"{base}/ui/tenants/tenant-0002") == 403
        assert page.eval("document.querySelector('#problem').textContent") == "Not your tenant"
        assert page.eval("document.querySelector('#forecast-chart') === null")
        assert page.eval("document.body.innerText.includes('alice may only see tenant tenant-0001')")
        page.screenshot(ARTEFACTS / "tenant-forbidden.png")
        assert page.goto(f"{base}/ui/") == 200 and page.eval("location.pathname") == "/ui/tenants/tenant-0001"
        assert page.goto(f"{base}/api/v1/tenants/tenant-0002") == 403           # the API says the same
        # after logging out nothing but the login form answers
        assert page.goto(f"{base}/ui/tenants/tenant-0001") == 200
        assert page.submit("header form", {}) == 200 and page.eval("location.pathname") == "/ui/login"
        page.goto(f"{base}/ui/tenants/tenant-0001")
        assert page.eval("location.pathname") == "/ui/login"
    assert (ARTEFACTS / "tenant-forbidden.png").stat().st_size > 5_000


def test_pages_before_the_first_cycle(tmp_path):
    """A daemon that has not planned yet (HTTP up, no cycle run): pages render and say so; no number is made up."""
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime
    from tests.support.daemons import api_cfg

    port = free_port()
    d = Daemon(build_runtime(api_cfg(tmp_path, port)))
    d._start_http()  # the HTTP server only: the scheduler (and so the cycle) is not started
    try:
        c = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {OP}"})
        r = c.get("/ui/")
        assert r.status_code == 200 and "none yet" in r.text and 'id="load-chart"' in r.text
        assert c.get("/api/v1/plan").json() == {"plan": None}
        assert c.get("/api/v1/tenants").json() == {"tenants": []}
        assert c.get("/ui/tenants/tenant-0001").status_code == 404
        assert c.get("/ui/events").status_code == 200
    finally:
        d.stop()


def test_bad_paging_is_a_400_and_an_oversized_login_form_a_413(ui):
    """`before` past SQLite's integer range or not ASCII digits used to be a 500; the login form (no token
    needed) used to be read whole, however large, before its first 8 KiB were parsed."""
    _, base = ui
    c = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {OP}"})
    for raw in ("99999999999999999999", "%C2%B2", "abc", "0"):
        r = c.get(f"/ui/events?before={raw}")
        assert r.status_code == 400 and "before" in r.text, raw
    assert c.get("/ui/events?before=5").status_code == 200
    big = httpx.post(f"{base}/ui/login", content=b"token=x&next=/ui/&pad=" + b"a" * 100_000,
                     headers={"content-type": "application/x-www-form-urlencoded"})
    assert big.status_code == 413 and "set-cookie" not in big.headers


def test_cluster_page_with_a_plan_from_before_the_levels_shrank(tmp_path):
    """The plan in force (restored at start, or kept across a SIGHUP that removed rate levels) may name a level
    the config no longer has; the cluster page was a 500 (IndexError) until the next cycle."""
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime
    from tests.support.daemons import api_cfg
    from tests.web.test_api import _plan

    port = free_port()
    d = Daemon(build_runtime(api_cfg(tmp_path, port, ratelimits={"levels": [{"load": 0.0, "high": 100, "normal": 10,
                                                                              "low": 5}]})))
    d.runtime.runner.last_plan = _plan(2, {"a": 8})   # level 2 of the three levels it was made with
    d.runtime.runner.publish()                         # as the end of a cycle would
    d._start_http()
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/ui/", headers={"Authorization": f"Bearer {OP}"})
        assert r.status_code == 200, r.text[-300:]
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/plan", headers={"Authorization": f"Bearer {OP}"}).json()[
            "rate_level"] == 2
    finally:
        d.stop()


@pytest.mark.security
def test_behind_a_tls_proxy_forms_check_the_origin_against_public_url(tmp_path):
    """The browser says `Origin: https://console.example`, the request arrives as http://127.0.0.1:PORT: the
    check against the request's own URL refused every operator form behind the proxy (403)."""
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime
    from tests.support.daemons import api_cfg

    port = free_port()
    cfg = api_cfg(tmp_path, port)
    cfg = cfg.model_copy(update={"server": cfg.server.model_copy(update={"public_url": "https://console.example"})})
    d = Daemon(build_runtime(cfg))
    d._start_http()
    try:
        c, _ = login(f"http://127.0.0.1:{port}", OP)
        form = {"preemption_paused": "1"}
        for origin in ("https://console.example", "https://console.example:443", "HTTPS://Console.Example"):
            r = c.post("/ui/overrides", data=form, headers={"Origin": origin})
            assert r.status_code == 303 and r.headers["location"] == "/ui/?saved=1", origin
        for origin in ("https://evil.example", "http://console.example", "https://console.example:8443",
                       f"http://127.0.0.1:{port}", "null", "https://console.example.evil.example"):
            r = c.post("/ui/overrides", data=form, headers={"Origin": origin})
            assert r.status_code == 403 and "Cross-site form" in r.text, origin
        assert d.runtime.overrides.inputs().paused_all
    finally:
        d.stop()


@pytest.mark.parametrize("url, message", [
    ("ftp://console.example", "URL scheme should be 'http' or 'https'"),
    ("console.example", "Input should be a valid URL"),
    ("https://admin:pw@console.example", "no user or password"),
])
def test_public_url_is_validated(url, message):
    from daemon.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=f"config: server.public_url: .*{message}"):
        parse_config({"server": {"public_url": url}})
