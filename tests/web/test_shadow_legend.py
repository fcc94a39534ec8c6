"""The shadow page in the daemon's first hour (`make run`'s first 60 cycles): no decision's horizon has been seen
yet, so "at the peak" is – in every row, and the legend under the table says why (as shadow-report's legend does for
covPk), rather than leaving a column of dashes unexplained."""

from starlette.testclient import TestClient

from daemon.config import Config
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from tests.support.daemons import OP
from tests.support.web_backend import SnapshotBackend, with_tokens
from tests.web.test_shadow_page import synthetic_records


def test_the_legend_says_why_peak_coverage_is_a_dash_before_a_horizon_is_seen():
    recs = synthetic_records(3, tenants=6)          # horizon_steps 5: no decision's whole horizon among 3 records
    client = TestClient(build_app(SnapshotBackend(Snapshot(cfg=with_tokens(Config())), recs)))
    client.cookies.set("gpuas_token", OP)
    r = client.get("/ui/shadow")
    assert r.status_code == 200, r.text[-300:]
    assert '<td class="num">–</td>' in r.text
    legend = r.text[r.text.index("Waits avoided:"):]
    assert "– until" in legend and "horizon" in legend.split("– until", 1)[1][:200], legend[:1500]
