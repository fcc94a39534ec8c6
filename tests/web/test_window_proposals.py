"""Windows proposed from the history (issue 39, item 2) on a daemon on the embedded simulator (real uvicorn, real
HTTP) that plays 8 days of warm-up, then a cycle a second, of tenant-0001 peaking at 14:00 UTC every day and
tenant-0002 without a peak (tests/support/peaked_sim.py), and writes them to its history store as `make run` does:
the API lists the one proposal with its evidence to operators only, the console shows it with an accept button, and
accepting it declares the window through the operator's path (audited); nothing is declared before. (The store
used to be written here by hand: the simulator wrote none.)"""

import datetime as dt

import httpx
import pytest

from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import OP, T1, api_cfg, h
from tests.support.peaked_sim import PEAKED, peaked_simulator
from tests.support.services import wait_for

# the evidence is two replays of 7 days (with and without the window) in the proposals' worker: minutes on a loaded box
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proposals")
    port = free_port()
    cfg = api_cfg(tmp, port)
    cfg = cfg.model_copy(update={"source": cfg.source.model_copy(update={"simulator": cfg.source.simulator.model_copy(
        update={"warmup_steps": 8 * 1440})})})
    with peaked_simulator():
        d = Daemon(build_runtime(cfg))
    d.start()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: d.cycles_done >= 1, what="a cycle", timeout=60)
    yield d, base
    d.stop()


def _proposals(base):
    out = {}

    def ready():
        r = httpx.get(f"{base}/api/v1/windows/proposals", headers=h(OP), timeout=30)
        out["r"] = r
        return r.status_code == 200
    wait_for(ready, what="the proposals computed", timeout=400)
    return out["r"].json()


def test_proposals_are_listed_to_operators_only_and_accepting_one_declares_it(daemon):
    d, base = daemon
    assert httpx.get(f"{base}/api/v1/windows/proposals", headers=h(T1)).status_code == 403
    assert httpx.get(f"{base}/api/v1/windows/proposals?timezone=Mars/Base", headers=h(OP)).status_code == 400
    res = _proposals(base)
    assert res["status"] == "ready", res
    assert dt.datetime.fromisoformat(res["history_end"]).tzinfo and "T" in res["history_end"], res["history_end"]
    [p] = res["proposals"]
    assert p["tenant"] == PEAKED and p["every"] == "daily" and p["at"] in ("13:45", "14:00")
    assert 55 <= p["gpus"] <= 70 and p["days_seen"] >= 5
    ev = p["evidence"]
    assert "unmet_gpu_min_without" in ev, res.get("evidence_note")
    assert ev["unmet_gpu_min_without"] >= ev["unmet_gpu_min_with"] and "held_idle_gpu_min" in ev
    assert httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"] == []   # nothing acted on
    # the console: a tenant sees no proposals; an operator sees it and accepts it
    t1 = httpx.Client(base_url=base, timeout=30)
    op = httpx.Client(base_url=base, timeout=30)
    try:
        for c, tok in ((t1, T1), (op, OP)):
            assert c.post("/ui/login", data={"token": tok, "next": "/ui/windows"}).status_code == 303
        assert 'id="proposal-table"' not in t1.get("/ui/windows").text
        page = op.get("/ui/windows").text
        assert 'id="proposal-table"' in page and f'/ui/windows/proposals/{p["name"]}/accept' in page
        # the evidence in GPU-minutes as the CLI prints it (103,306), not the JSON's float (103306.0)
        assert f"{ev['unmet_gpu_min_without']:,.0f} / {ev['unmet_gpu_min_with']:,.0f}" in page, page
        assert f"{ev['held_idle_gpu_min']:,.0f}</td>" in page
        assert t1.post(f"/ui/windows/proposals/{p['name']}/accept").status_code == 403
        r = op.post(f"/ui/windows/proposals/{p['name']}/accept")
        assert r.status_code == 303, r.text
    finally:
        t1.close()
        op.close()
    [w] = httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"]
    assert (w["name"], w["source"], w["gpus"], w["at"]) == (p["name"], "api", p["gpus"], p["at"])
    ev = [e for e in httpx.get(f"{base}/api/v1/events?kind=operator_change", headers=h(OP)).json()["events"]
          if e.get("window") == p["name"]]
    assert ev and ev[0]["who"] == "ops"
    # the tenant has its window now: it is proposed no more
    assert _proposals(base)["proposals"] == []
