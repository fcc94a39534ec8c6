"""/api/v1/events and the console's events page take `kind` from the kinds the daemon writes: a typo (found on a
first day: ?kind=nodedown) answered 200 with no events, as if none had happened; and node_down_unconfirmed, which the
failover writes, had no filter on the page."""

from starlette.testclient import TestClient

from daemon.config import Config
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from daemon.web.views import EVENT_KINDS
from tests.support.daemons import OP, h
from tests.support.web_backend import SnapshotBackend, with_tokens


def _client() -> TestClient:
    snap = Snapshot(cfg=with_tokens(Config()), plan=None, state=None, cycle=1)
    return TestClient(build_app(SnapshotBackend(snap)))


def test_an_unknown_event_kind_is_a_400_naming_the_field_and_the_kinds():
    c = _client()
    r = c.get("/api/v1/events?kind=nodedown", headers=h(OP))
    assert r.status_code == 400 and r.json()["field"] == "kind"
    assert "node_down, node_down_unconfirmed" in r.json()["error"] and "'nodedown'" in r.json()["error"]
    for kind in EVENT_KINDS:
        assert c.get(f"/api/v1/events?kind={kind}", headers=h(OP)).status_code == 200, kind
    c.cookies.set("gpuas_token", OP)
    page = c.get("/ui/events?kind=nodedown")
    assert page.status_code == 400 and "not an event kind" in page.text
    assert 'node_down_unconfirmed' in c.get("/ui/events").text
