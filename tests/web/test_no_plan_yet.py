"""The console before the daemon's first good plan (a source down from the start, as `run` with the README's minimal
config and no Prometheus): a tenant's page says there is no plan yet, not "its last good plan (of None)", and says
why its queue is unknown rather than that the source reports none."""

from starlette.testclient import TestClient

from daemon.config import Config
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from tests.support.daemons import OP
from tests.support.web_backend import SnapshotBackend, with_tokens

REASON = "source unavailable: prometheus http://prometheus.monitoring:9090: Name or service not known"


class DegradedBackend(SnapshotBackend):
    def health(self, detail: bool = False) -> dict:
        return {"status": "degraded", "reason": REASON}


def test_a_tenant_page_before_the_first_plan_says_there_is_none_yet():
    cfg = with_tokens(Config(tenants=[{"name": "llm-serving", "tier": "high"}]))
    client = TestClient(build_app(DegradedBackend(Snapshot(cfg=cfg, cycle=2))))
    client.cookies.set("gpuas_token", OP)
    r = client.get("/ui/tenants/llm-serving")
    assert r.status_code == 200, r.text[-300:]
    assert "(of None)" not in r.text
    assert "last good plan" not in r.text
    assert "No good plan yet" in r.text and "Name or service not known" in r.text
    assert "The source reports no job queue" not in r.text
    assert "queue is unknown" in r.text


def test_the_cluster_page_before_the_first_plan_says_why_it_is_empty():
    """Its charts were drawn empty and the rate level table said level 0 was "in force", where no plan had set any
    (with no plan nothing is applied): now the level is –, and one line says why the charts are empty."""
    cfg = with_tokens(Config(tenants=[{"name": "llm-serving", "tier": "high"}]))
    client = TestClient(build_app(DegradedBackend(Snapshot(cfg=cfg, cycle=2))))
    client.cookies.set("gpuas_token", OP)
    text = client.get("/ui/").text
    assert "◀ in force" not in text
    assert '<div class="v" id="rate-level">–</div>' in text
    assert 'id="no-plan-yet"' in text and "first cycle that reads the source" in text
