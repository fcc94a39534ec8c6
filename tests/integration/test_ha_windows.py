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


def test_an_accepted_proposal_and_the_hold_it_plans_survive_a_takeover(r, redis_url, tmp_path):
    """A proposal accepted on the old leader (the API's accept is the window's PUT, parse_window on its `window`) is
    in the successor's inputs, and the successor, with a fresh memory, plans the window's hold as the old leader
    did: the same reservation and the same GPUs held apart as the window's (Plan.window_holds), at the lead time."""
    import numpy as np
    import pandas as pd

    from daemon.config import parse_config
    from daemon.forecasting.windows_proposed import propose_series
    from daemon.policy.engine import plan
    from daemon.policy.state import ClusterState
    from daemon.policy.types import PolicyMemory
    from daemon.state.overrides import parse_window
    from tests.forecasting.test_windows_proposed import IDX, _noise, _peak

    p = propose_series(pd.Series(np.round(_noise(1, level=4.0) + _peak(14, 12)), index=IDX), "t1", timezone="UTC")
    assert p is not None and p.gpus <= 32
    body = p.to_window()
    leader = _replica(tmp_path, redis_url, "a")
    leader.change_window("ops", p.name, parse_window(p.name, body), _check)
    successor = _replica(tmp_path, redis_url, "b")
    assert [w.model_dump(mode="json") for w in successor.cycle_inputs().windows] == \
        [WindowConfig.model_validate(body).model_dump(mode="json")]
    cfg = parse_config({"tenants": [{"name": "t1", "tier": "high"}, {"name": "t2", "tier": "high"}],
                        "cluster": {"gpus": 32}})
    start = pd.Timestamp(f"2026-12-07T{body['at']}:00+00:00")
    st = ClusterState(at=start - pd.Timedelta(minutes=10), tenants=("t1", "t2"), tiers=("high", "high"),
                      capacity=32, used=np.zeros(2), pending=np.zeros(2))
    old = plan(None, st, PolicyMemory(), cfg, ops=leader.cycle_inputs())
    new = plan(None, st, PolicyMemory(), cfg, ops=successor.cycle_inputs())
    assert old.window_holds == new.window_holds == {"t1": p.gpus}
    assert new.reservations["t1"] >= p.gpus and new.reservations == old.reservations
    assert [w["name"] for w in new.windows] == [p.name]
