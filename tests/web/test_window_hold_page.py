"""A tenant's page and record say which of its held GPUs its recurring window holds (docs/windows.md).

Found on a run --sim with a low-tier tenant's window (32 GPUs, held from 14:00 for 14:30): its own page read "32 GPUs
held for you" and "Capacity is held for the p90 peak over the next 10 minutes (high tier and protected tenants
only)", with no word of the window, and a high-tier tenant's open window was its "share of the pool"."""

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import parse_config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import ClusterState
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from forecaster.types import Forecast
from tests.support.daemons import OP, T1, T2, h
from tests.support.web_backend import SnapshotBackend, with_tokens

T0 = pd.Timestamp("2026-01-12T14:10:00Z")
TENANTS = ("tenant-0001", "tenant-0002", "tenant-0003")


def _snapshot() -> Snapshot:
    cfg = with_tokens(parse_config({
        "tenants": [{"name": "tenant-0001", "tier": "low"}, {"name": "tenant-0002", "tier": "high"},
                    {"name": "tenant-0003"}],
        "windows": [{"name": "t1-batch", "tenant": "tenant-0001", "gpus": 32, "every": "daily", "at": "14:30",
                     "duration_minutes": 60},
                    {"name": "t2-peak", "tenant": "tenant-0002", "gpus": 64, "every": "daily", "at": "14:00",
                     "duration_minutes": 60},
                    {"name": "t2-late", "tenant": "tenant-0002", "gpus": 8, "every": "daily", "at": "20:00",
                     "duration_minutes": 60}]}))
    st = ClusterState(T0, TENANTS, ("low", "high", "normal"), 256, np.array([0.0, 40.0, 8.0]), np.zeros(3))
    v = np.zeros((3, 30, 3))
    v[1] = 16.0
    fc = Forecast(TENANTS, (0.5, 0.9, 0.99), v, T0, 60, "test")
    p = plan(fc, st, PolicyMemory(), cfg)
    assert p.window_holds == {"tenant-0001": 32, "tenant-0002": 64}, p.notes
    return Snapshot(cfg=cfg, plan=p, state=st, forecast=fc, cycle=1)


def test_a_tenants_page_and_record_name_the_window_that_holds_its_gpus():
    client = TestClient(build_app(SnapshotBackend(_snapshot())))
    low = client.get("/api/v1/tenants/tenant-0001", headers=h(T1)).json()
    assert low["held"] == 32
    assert low["window_hold"] == {"gpus": 32, "windows": [{"name": "t1-batch", "start": "2026-01-12T14:30:00+00:00",
                                                           "end": "2026-01-12T15:30:00+00:00", "open": False}]}
    high = client.get("/api/v1/tenants/tenant-0002", headers=h(T2)).json()
    assert high["window_hold"]["gpus"] == 64 and high["held"] >= 64
    assert [(w["name"], w["open"]) for w in high["window_hold"]["windows"]] == [("t2-peak", True)]  # not t2-late
    assert client.get("/api/v1/tenants/tenant-0003", headers=h(OP)).json()["window_hold"] is None
    client.cookies.set("gpuas_token", T1)
    page = client.get("/ui/tenants/tenant-0001").text
    assert ('id="window-hold">32 of the 32 GPUs held for you are your recurring window\'s: t1-batch, opens '
            "2026-01-12T14:30:00+00:00") in page.replace("&#39;", "'")
    assert "t2-peak" not in page                                   # another tenant's window is never named
    client.cookies.set("gpuas_token", T2)
    page = client.get("/ui/tenants/tenant-0002").text
    assert "t2-peak, open until 2026-01-12T15:00:00+00:00" in page and "t1-batch" not in page
