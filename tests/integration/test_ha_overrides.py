"""HA: operator overrides live in the lease's Redis, where every replica reads them each cycle.

Real redis-server throughout; the failover test runs two daemon processes and kills the leader with SIGKILL.
"""

import json
import signal
import time

import httpx
import pytest
import redis

from daemon.config import parse_config
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from daemon.state.overrides import Overrides
from daemon.state.store import StateStore
from tests.conftest import free_port
from tests.integration.test_ha_redis import Replica, _entries
from tests.support.daemons import ha_replica_toml
from tests.support.overrides import interleaved
from tests.support.services import redis_server, wait_for

pytestmark = pytest.mark.services

OP = "operator-token-0123456789"
OPH = {"Authorization": f"Bearer {OP}"}


def _toml(tmp_path, name, redis_url, port):
    return ha_replica_toml(tmp_path, name, port, f'redis_url = "{redis_url}"\n')


def _get(base, path):
    return httpx.get(f"{base}{path}", headers=OPH, timeout=10).json()


def test_a_pause_set_on_the_leader_holds_across_a_kill_9_takeover(r, redis_url, tmp_path):
    """Before: overrides lived in each replica's SQLite; the standby that took over had never heard of the
    pause and preempted again."""
    p1, p2 = free_port(), free_port()
    b1, b2 = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"
    reps = []
    try:
        r1 = Replica(tmp_path, "r1", _toml(tmp_path, "r1", redis_url, p1))
        reps.append(r1)
        wait_for(lambda: any(e["holder"] == "r1" for e in _entries(r)), timeout=90, what="r1 acting")
        r2 = Replica(tmp_path, "r2", _toml(tmp_path, "r2", redis_url, p2))
        reps.append(r2)
        wait_for(lambda: r2.text().count("STANDBY ") >= 2 and _get(b2, "/healthz")["role"] == "standby",
                 timeout=90, what="r2 standing by")
        # the control: in this cluster the leader does preempt
        wait_for(lambda: any(e["holder"] == "r1" and e["jobs"] for e in _entries(r)), timeout=60,
                 what="r1 preempting")

        resp = httpx.patch(f"{b1}/api/v1/overrides", json={"preemption_paused": True}, headers=OPH)
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        n, c2 = len(_entries(r)), _get(b2, "/healthz")["cycles"]
        wait_for(lambda: sum(e["holder"] == "r1" for e in _entries(r)[n:]) >= 2, timeout=20,
                 what="r1 applying plans after the pause")
        # every cycle r2 starts from now on began after the pause was written (one cycle at a time)
        wait_for(lambda: _get(b2, "/healthz")["cycles"] >= c2 + 2, timeout=20, what="r2 cycling")

        r1.proc.send_signal(signal.SIGKILL)
        r1.proc.wait()
        t_kill = time.time()
        wait_for(lambda: sum(e["holder"] == "r2" and "apply plan" in e["what"] for e in _entries(r)) >= 5,
                 timeout=30, what="r2 leading for five cycles")
        ledger = _entries(r)
        plan = _get(b2, "/api/v1/plan")
        overrides = _get(b2, "/api/v1/overrides")
        audit = _get(b2, "/api/v1/events?kind=operator_change")["events"]
        health = _get(b2, "/healthz")
    finally:
        for rep in reps:
            rep.close()

    acted = [e for e in ledger if e["holder"] == "r2"]
    assert acted and all(e["at"] > t_kill - 1 for e in acted)
    assert [e["jobs"] for e in acted if e["jobs"]] == []          # the pause held: the new leader preempts nothing
    assert plan["preemptions"] == []
    assert overrides["global"] == {"preemption_paused": True}
    assert len(audit) == 1
    ev = audit[0]
    assert (ev["who"], ev["scope"], ev["replica"]) == ("ops", "global", "r1")
    assert ev["changes"] == {"preemption_paused": {"from": None, "to": True}}
    assert health["role"] == "leader" and health["overrides"]["error"] is None
    assert answer["global"] == {"preemption_paused": True} and answer["stored"] == "Redis (gpuas:overrides)"


def _daemon(tmp_path, url, name, port):
    cfg = parse_config({"cluster": {"gpus": 256}, "cycle": {"interval_s": 0.5},
                        "source": {"kind": "simulator", "simulator": {"tenants": 16, "warmup_steps": 1500}},
                        "forecaster": {"kind": "seasonal_naive"}, "server": {"port": port},
                        "state": {"path": str(tmp_path / f"{name}.sqlite")},
                        "access": {"tokens": [{"name": "ops", "role": "operator", "token": OP}]},
                        "ha": {"enabled": True, "redis_url": url, "replica_id": name, "lease_ttl_s": 2}})
    return Daemon(build_runtime(cfg))


def test_a_change_sent_to_the_standby_is_applied_by_the_leader(r, redis_url, tmp_path):
    """Before: the standby saved it in its own SQLite file and no leader ever saw it."""
    p1, p2 = free_port(), free_port()
    lead, standby = _daemon(tmp_path, redis_url, "lead", p1), _daemon(tmp_path, redis_url, "standby", p2)
    b1, b2 = f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"
    started = []
    try:
        for d in (lead, standby):
            d.start()
            started.append(d)
            wait_for(lambda d=d: d.cycles_done >= 1, what="first cycle", timeout=60)
        assert (lead.role(), standby.role()) == ("leader", "standby")
        resp = httpx.patch(f"{b2}/api/v1/tenants/tenant-0003", json={"rate_override": 5, "floor_gpus": 16},
                           headers=OPH)
        assert resp.status_code == 200, resp.text
        wait_for(lambda: (_get(b1, "/api/v1/plan")["limits"]["tenant-0003"] or {}).get("rate") == 5,
                 what="the leader applying the standby's change", timeout=20)
        plan = _get(b1, "/api/v1/plan")
        assert plan["reservations"]["tenant-0003"] >= 16
        assert _get(b1, "/api/v1/tenants/tenant-0003")["override"] == {"rate_override": 5.0, "floor_gpus": 16}
        ev = _get(b1, "/api/v1/events?kind=operator_change")["events"]
        assert [(e["who"], e["tenant"], e["replica"]) for e in ev] == [("ops", "tenant-0003", "standby")]
        same = [{k: v for k, v in e.items() if k != "id"} for e in ev]  # row ids are each replica's own
        assert same == [{k: v for k, v in e.items() if k != "id"}
                        for e in _get(b2, "/api/v1/events?kind=operator_change")["events"]]
        assert resp.json()["applies"] == "at the leader's next cycle"
    finally:
        for d in started:
            d.stop()


def test_shared_store_down_refuses_changes_and_the_cycle_keeps_the_last_pause(tmp_path):
    """Redis unreachable: a change is refused with 503 (nothing stored locally either) and the cycle keeps
    planning with the pause it last read; a Redis that comes back empty gets the pause put back."""
    port, api = free_port(), free_port()
    base = f"http://127.0.0.1:{api}"
    d = None
    try:
        with redis_server(tmp_path, port=port) as (url, proc):
            d = _daemon(tmp_path, url, "solo", api)
            d.start()
            wait_for(lambda: d.role() == "leader" and d.cycles_done >= 1, what="leading", timeout=60)
            assert httpx.patch(f"{base}/api/v1/overrides", json={"preemption_paused": True},
                               headers=OPH).status_code == 200
            proc.kill()
            proc.wait()
            resp = httpx.patch(f"{base}/api/v1/tenants/tenant-0001", json={"floor_gpus": 8}, headers=OPH,
                               timeout=30)
            assert resp.status_code == 503
            assert resp.json()["error"].startswith("cannot store the change in Redis (gpuas:overrides)")
            assert "nothing was changed" in resp.json()["error"]
            # the console's forms: the same refusal, as a page that says so (not a 500)
            with httpx.Client(base_url=base, timeout=30) as console:
                assert console.post("/ui/login", data={"token": OP, "next": "/ui/"}).status_code == 303
                for path, form in (("/ui/overrides", {}), ("/ui/tenants/tenant-0001/override", {"floor_gpus": "8"})):
                    page = console.post(path, data=form)
                    assert page.status_code == 503, path
                    assert "Change not stored" in page.text and "nothing was changed" in page.text, path
            assert [e["scope"] for e in d.runtime.store.recent_events(kind="operator_change")] == ["global"]
            assert d.runtime.overrides.for_tenant("tenant-0001") == {}
            seen = d.cycles_done
            wait_for(lambda: d.cycles_done >= seen + 3, what="cycles without Redis", timeout=60)
            health = httpx.get(f"{base}/healthz").json()   # open: the store's error without its text
            assert health["status"] == "degraded" and health["overrides"]["error"].startswith("unreadable")
            assert "operator overrides: the shared store is unreadable" in health["reason"] and \
                "planning with those last read" in health["reason"]
            detail = d.health(detail=True)   # the operator's console
            assert "operator overrides: cannot read the operator overrides from Redis" in detail["reason"]
            assert d.runtime.overrides.inputs().paused_all
            assert d.last_result.plan is not None and d.last_result.plan.preemptions == ()
        # the same port, an empty Redis (no persistence): the pause this replica holds is put back
        with redis_server(tmp_path, port=port) as (url, _):
            c = redis.Redis.from_url(url)
            wait_for(lambda: c.get("gpuas:overrides") is not None, what="overrides put back", timeout=30)
            assert json.loads(c.get("gpuas:overrides")) == {"tenants": {}, "global": {"preemption_paused": True}}
            wait_for(lambda: httpx.get(f"{base}/healthz").json()["overrides"]["error"] is None, what="recovered",
                     timeout=30)
            assert httpx.patch(f"{base}/api/v1/tenants/tenant-0001", json={"floor_gpus": 8},
                               headers=OPH).status_code == 200
    finally:
        if d is not None:
            d.stop()


def test_two_writers_at_once_lose_neither_change(r, redis_url, tmp_path):
    """WATCH/MULTI: a write based on a document someone changed since is run again on the new one."""
    from daemon.state.overrides import RedisOverrideStore

    b = Overrides(StateStore(tmp_path / "b.db"), RedisOverrideStore(redis.Redis.from_url(redis_url)), replica="b")
    shared_a = interleaved(RedisOverrideStore)(redis.Redis.from_url(redis_url))
    shared_a.then = lambda: b.change_tenant("bob", "t1", {"floor_gpus": 4})
    a = Overrides(StateStore(tmp_path / "a.db"), shared_a, replica="a")
    out = a.change_tenant("alice", "t1", {"rate_override": 5})
    assert shared_a.runs == 2                                   # the first try was refused by EXEC
    assert out["override"] == {"floor_gpus": 4, "rate_override": 5.0}
    assert out["audit"]["changes"] == {"rate_override": {"from": None, "to": 5.0}}
    assert json.loads(r.get("gpuas:overrides"))["tenants"]["t1"] == {"floor_gpus": 4, "rate_override": 5.0}
    assert [json.loads(f[b"detail"])["who"] for _, f in r.xrange("gpuas:overrides:audit")] == ["bob", "alice"]
    for ov in (a, b):
        assert ov.refresh()
        assert ov.for_tenant("t1") == {"floor_gpus": 4, "rate_override": 5.0}
        assert [e["who"] for e in ov.store.events("operator_change")] == ["bob", "alice"]
        assert ov.refresh() and len(ov.store.events("operator_change")) == 2   # copied once, not every cycle


def test_healthz_says_an_unreadable_overrides_store_without_its_text(r, redis_url, tmp_path):
    """/healthz answers anyone (no token) and quoted the shared store's error whole: a malformed overrides document
    is said by what is wrong in it ("tenant 'team-secret-lab': not an object"), so anyone reaching the port read a
    tenant's name, where docs/security.md says /healthz carries none (bd06557 did this for a source's error). Now
    /healthz says the store is unreadable, and the operator's console has the text."""
    api = free_port()
    base = f"http://127.0.0.1:{api}"
    d = _daemon(tmp_path, redis_url, "solo", api)
    try:
        d.start()
        wait_for(lambda: d.role() == "leader" and d.cycles_done >= 1, what="leading", timeout=60)
        r.set("gpuas:overrides", json.dumps({"tenants": {"team-secret-lab": "x"}, "global": {}}))
        wait_for(lambda: d.runtime.overrides.problem() is not None, what="the store read as malformed", timeout=30)
        health = httpx.get(f"{base}/healthz").json()
        assert health["status"] == "degraded", health
        assert "team-secret-lab" not in json.dumps(health), health
        assert "operator overrides: the shared store is unreadable" in health["reason"], health
        assert health["overrides"]["error"] == "unreadable (the error is in the daemon's log and on the operator's " \
                                               "console)", health
        assert "team-secret-lab" in d.health(detail=True)["reason"]   # the operator's views
    finally:
        d.stop()
