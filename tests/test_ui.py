"""The console over real HTTP: login and cookies, who sees which page, the operator's form, the SVG charts.

The same pages in a real browser (headless Chromium) are in tests/browser.py.
"""

import re

import httpx
import pytest

from daemon.runtime import build_runtime
from daemon.service import Daemon
from daemon.ui.charts import Band, Chart, Line
from tests.conftest import free_port
from tests.services import wait_for
from tests.test_api import OP, T1, api_cfg

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    port = free_port()
    d = Daemon(build_runtime(api_cfg(tmp, port)))
    d.start()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: d.cycles_done >= 2, what="two cycles", timeout=60)
    yield d, base
    d.stop()


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


def test_chart_breaks_lines_at_missing_values_and_draws_the_band():
    ch = Chart("c", "t", [Line("usage", [-3, -2, -1, 0], [1.0, None, 2.0, 3.0], "s-used")],
               [Band("p50–p90", [1, 2], [1.0, 2.0], [2.0, 4.0], "b-p90")])
    svg = str(ch.svg())
    assert svg.count('<circle class="s-used"') == 1 and svg.count('<polyline class="s-used"') == 1
    assert svg.count('<polygon class="b-p90"') == 1 and ">now<" in svg
    empty = str(Chart("e", "nothing").svg())
    assert "<svg" in empty and "polyline" not in empty
