"""HA: the operator's windows live where the overrides do (the lease's Redis; real redis-server), so the replica
that takes over plans with them, and two replicas that each add half of an overlap cannot both succeed."""

import json

import pytest
import redis

from daemon.config import WindowConfig
from daemon.config.windows import problems
from daemon.state.overrides import Overrides, RedisOverrideStore, WindowRefused
from daemon.state.store import StateStore

pytestmark = pytest.mark.services


def _w(name, tenant, gpus, at="14:00"):
    return WindowConfig.model_validate({"name": name, "tenant": tenant, "gpus": gpus, "every": "daily", "at": at,
                                        "timezone": "Europe/Paris", "duration_minutes": 60})


def _check(ws):
    return problems(ws.values(), {"gpu": 32}, False)


def _replica(tmp_path, redis_url, name):
    return Overrides(StateStore(tmp_path / f"{name}.db"), RedisOverrideStore(redis.Redis.from_url(redis_url)),
                     replica=name)


def test_a_takeover_keeps_the_windows_and_their_audit(r, redis_url, tmp_path):
    leader = _replica(tmp_path, redis_url, "a")
    out = leader.change_window("ops", "eod", _w("eod", "t1", 16), _check)
    assert out["stored"] == "Redis (gpuas:overrides)" and out["audit"]["replica"] == "a"
    assert json.loads(r.get("gpuas:overrides"))["windows"]["eod"]["gpus"] == 16
    # the leader dies; a new replica (its own SQLite, never told of the change) takes over
    successor = _replica(tmp_path, redis_url, "b")
    assert [w.name for w in successor.cycle_inputs().windows] == ["eod"]
    assert successor.cycle_inputs().windows[0].gpus == 16
    ev = successor.store.recent_events(kind="operator_change")
    assert [(e["who"], e["window"], e["replica"]) for e in ev] == [("ops", "eod", "a")]
    # it changes and deletes them as the old leader could; a restart of it reads them back from Redis
    successor.change_window("ops", "eod", _w("eod", "t1", 8), _check)
    assert _replica(tmp_path, redis_url, "c").inputs().windows[0].gpus == 8
    successor.change_window("ops", "eod", None, _check)
    assert _replica(tmp_path, redis_url, "d").inputs().windows == ()
    # the tenants' overrides and the windows live in one document: neither write loses the other
    successor.change_tenant("ops", "t1", {"floor_gpus": 4})
    successor.change_window("ops", "x", _w("x", "t2", 4), _check)
    doc = json.loads(r.get("gpuas:overrides"))
    assert doc["tenants"] == {"t1": {"floor_gpus": 4}} and list(doc["windows"]) == ["x"]


def test_two_replicas_adding_halves_of_an_overlap_do_not_both_succeed(r, redis_url, tmp_path):
    a, b = _replica(tmp_path, redis_url, "a"), _replica(tmp_path, redis_url, "b")
    a.change_window("ops", "one", _w("one", "t1", 20), _check)
    # b has not re-read the store since: its check runs on the document the write is based on, Redis's
    with pytest.raises(WindowRefused, match="one .20. and two .20. overlap"):
        b.change_window("ops", "two", _w("two", "t2", 20, at="14:30"), _check)
    assert list(json.loads(r.get("gpuas:overrides"))["windows"]) == ["one"]
    b.refresh()
    assert [e["window"] for e in b.store.recent_events(kind="operator_change")] == ["one"]   # no trace of "two"
