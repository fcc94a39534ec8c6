"""A window in progress is listed as open, not with a "next start" already past (found on `make run`: a window
declared at 14:00 Europe/Paris while the simulator's clock read 14:55 Paris time was listed with the next start
"2026-01-06T14:00:00+01:00", the occurrence under way, beside the plan's note "open until 16:00")."""

import datetime as dt

from starlette.testclient import TestClient

from daemon.config import Config, WindowConfig
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from daemon.web.windows_api import window_view
from tests.support.daemons import OP
from tests.support.web_backend import SnapshotBackend, with_tokens

W = {"name": "eod", "tenant": "tenant-0001", "gpus": 8, "every": "daily", "at": "14:00",
     "timezone": "Europe/Paris", "duration_minutes": 120}


def test_a_window_under_way_says_until_when_and_one_to_come_does_not():
    w = WindowConfig.model_validate(W)
    during = window_view(w, "api", dt.datetime(2026, 1, 6, 13, 55, tzinfo=dt.timezone.utc))   # 14:55 Paris
    assert during["next_start"] == "2026-01-06T14:00:00+01:00"
    assert during["open_until"] == "2026-01-06T16:00:00+01:00"
    before = window_view(w, "api", dt.datetime(2026, 1, 6, 12, 0, tzinfo=dt.timezone.utc))
    assert before["next_start"] == "2026-01-06T14:00:00+01:00" and before["open_until"] is None
    after = window_view(w, "api", dt.datetime(2026, 1, 6, 15, 0, tzinfo=dt.timezone.utc))   # 16:00 Paris: ended
    assert after["next_start"] == "2026-01-07T14:00:00+01:00" and after["open_until"] is None


def test_the_windows_page_says_a_window_is_open_now():
    now = dt.datetime.now(dt.timezone.utc)
    start = (now - dt.timedelta(minutes=10)).replace(second=0, microsecond=0)
    w = {**W, "at": start.strftime("%H:%M"), "timezone": "UTC", "tenant": "tenant-0001"}
    cfg = with_tokens(Config(tenants=[{"name": "tenant-0001"}], windows=[w]))
    client = TestClient(build_app(SnapshotBackend(Snapshot(cfg=cfg, plan=None, state=None, cycle=1))))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/windows").text
    cell = text[text.index('class="muted next-start"'):]
    cell = cell[cell.index(">") + 1:cell.index("</td>")]
    end = start + dt.timedelta(minutes=120)
    assert cell == f"open now (from {start.isoformat()}) until {end.isoformat()}", cell
