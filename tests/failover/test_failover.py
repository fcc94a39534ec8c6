"""Node failover that cannot run away: exact node names, configured alert names, a circuit breaker, a token."""

import json

import httpx
import pytest

from daemon.config import FailoverConfig
from daemon.failover import alerts
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import TOKEN, alert, payload, sim_cfg
from tests.support.services import wait_for

AUTH = {"Authorization": f"Bearer {TOKEN}"}
KNOWN = {"gpu-node-1", "gpu-node-2", "gpu-node-3"}


def parsed(*alist):
    return alerts.parse(json.dumps(payload(list(alist))).encode())


@pytest.mark.parametrize("name,what", [
    ("gpu[0001-1024]", "'['"), ("gpu-node-1,gpu-node-2", "','"), ("gpu-*", "'*'"), ("gpu node", "' '"),
    ("gpu-node-1\n", "'\\n'"), ("gpu-node-9", "not a node known"), ("", "empty node name"),
])
def test_a_node_name_that_is_not_exactly_one_known_node_is_refused(name, what):
    p = parsed(alert("GPUClusterLoadHigh"), alert("GPUNodeDown", node=name))
    with pytest.raises(alerts.PayloadError) as e:
        alerts.actions(p, FailoverConfig(), KNOWN.__contains__)
    assert "alerts.1.labels.node" in str(e.value) and what in str(e.value), str(e.value)


def test_only_configured_alert_names_fence_a_node():
    p = parsed(alert("GPUNodeDown", node="gpu-node-1"), alert("GPUXidErrors", node="gpu-node-2"),
               alert("NodeDown", node="gpu-node-3"), alert("GPUNodeDown", status="resolved", node="gpu-node-1"))
    kinds = [(a.kind, a.node) for a in alerts.actions(p, FailoverConfig(), KNOWN.__contains__)]
    assert kinds == [("node_down", "gpu-node-1"), ("ignore", None), ("ignore", None), ("node_up", "gpu-node-1")]
    cfg = FailoverConfig(node_down_alerts=["GPUNodeDown", "GPUXidErrors"])
    assert [a.kind for a in alerts.actions(p, cfg, KNOWN.__contains__)][:2] == ["node_down", "node_down"]


def test_an_alert_older_than_the_window_is_stale_and_a_bad_time_is_refused():
    import datetime as dt

    now = dt.datetime(2026, 12, 6, 3, 0, tzinfo=dt.timezone.utc)
    old = {"startsAt": "2026-12-06T02:49:59.123456789Z"}                    # 10 min 1 s: Alertmanager's nanoseconds
    fresh = {"startsAt": "2026-12-06T02:55:00+00:00"}
    p = parsed({**alert("GPUNodeDown", node="gpu-node-1"), **old}, {**alert("GPUNodeDown", node="gpu-node-2"), **fresh},
               {**alert("GPUClusterLoadHigh"), **old},
               {**alert("GPUNodeDown", status="resolved", node="gpu-node-3"), **old, "endsAt": "2026-12-06T02:59:00Z"})
    acts = alerts.actions(p, FailoverConfig(), KNOWN.__contains__, now=now)
    assert [(a.kind, a.node) for a in acts] == [("stale", "gpu-node-1"), ("node_down", "gpu-node-2"),
                                                ("stale", None), ("node_up", "gpu-node-3")]
    assert 600 < acts[0].age_s < 602
    assert alerts.actions(p, FailoverConfig(max_alert_age_s=3600), KNOWN.__contains__, now=now)[0].kind == "node_down"
    with pytest.raises(alerts.PayloadError, match="alerts.1.startsAt: 'yesterday' is not an RFC 3339 time"):
        alerts.actions(parsed(alert("GPUNodeDown", node="gpu-node-1"),
                              {**alert("GPUNodeDown", node="gpu-node-2"), "startsAt": "yesterday"}),
                       FailoverConfig(), KNOWN.__contains__, now=now)


def test_an_old_alert_posted_fences_nothing_and_is_counted_and_logged_once(daemon, caplog):
    d, base = daemon
    node = running_nodes(d)[0]
    old = {**alert("GPUNodeDown", node=d.runtime.sim.node_name(node)), "startsAt": "2026-01-06T13:30:00Z"}
    with caplog.at_level("WARNING", logger="gpu_autoscaler.service"):
        r = httpx.post(f"{base}/alerts", json=payload([old, old]), headers=AUTH)
    assert r.status_code == 200
    assert [a["action"] for a in r.json()["actions"]] == ["refused", "refused"]
    assert "over failover.max_alert_age_s" in r.json()["actions"][0]["reason"]
    assert d.runtime.sim.cluster.node_ok[node] and not d.runtime.store.events("node_down")
    assert 'gpuas_alerts_total{alertname="GPUNodeDown",outcome="stale"} 2.0' in httpx.get(f"{base}/metrics").text
    assert len([m for m in caplog.messages if "older than failover.max_alert_age_s" in m]) == 1


def test_breaker_counts_distinct_nodes_in_a_window():
    b = alerts.Breaker(FailoverConfig(breaker_max_nodes=3, breaker_max_share=0.5, breaker_window_s=60))
    assert b.admit(["a"], 0, 100)[0] and b.admit(["a", "b"], 1, 100)[0] and b.admit(["c"], 2, 100)[0]
    ok, count, lim = b.admit(["d"], 3, 100)
    assert (ok, count, lim) == (False, 4, 3)
    assert not b.admit(["e"], 30, 100)[0]            # stays open for the window after the last trip
    assert b.admit(["f"], 100, 100)[0]               # old reports aged out, one new node: act again
    # the share limit binds on a small cluster, but one dead node is always handled
    small = alerts.Breaker(FailoverConfig(breaker_max_nodes=10, breaker_max_share=0.1, breaker_window_s=60))
    assert small.limit(20) == 2 and small.limit(5) == 1


def running_nodes(d):
    """Nodes with running jobs, read under the simulator's lock: the running daemon's cycle steps (and grows) these
    arrays, and a read mid-step could pair one step's `size` with another's."""
    with d.runtime.sim.lock:
        c = d.runtime.sim.cluster
        return [i for i in range(c.n_nodes) if ((c.j_node[: c.size] == i) & (c.j_state[: c.size] == 2)).any()]


def test_range_in_a_node_label_fences_nothing(daemon):
    d, base = daemon
    c = d.runtime.sim.cluster
    before = c.node_ok.copy()
    for bad in ("sim-node-[0000-0031]", "sim-node-0001,sim-node-0002", "sim-node-*", "sim-node-0099"):
        r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=bad)]), headers=AUTH)
        assert r.status_code == 400 and "alerts.0.labels.node" in r.json()["error"], r.text
    # one bad name in a post refuses the good ones with it
    good = d.runtime.sim.node_name(running_nodes(d)[0])
    r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=good),
                                                   alert("GPUNodeDown", node="sim-node-0001 sim-node-0002")]),
                   headers=AUTH)
    assert r.status_code == 400 and "alerts.1.labels.node" in r.json()["error"]
    assert (c.node_ok == before).all() and not d.runtime.store.events("node_down")
    assert 'gpuas_webhook_rejected_total{reason="bad_node"} 5.0' in httpx.get(f"{base}/metrics").text


def test_mass_report_trips_the_breaker_and_fences_nothing(daemon):
    d, base = daemon
    c = d.runtime.sim.cluster
    names = [d.runtime.sim.node_name(i) for i in range(6)]   # 32 nodes: limit min(3, 10% = 3)
    r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=n) for n in names]), headers=AUTH)
    assert r.status_code == 200
    acts = r.json()["actions"]
    assert all(a["action"] == "refused" and "mass node failure reported: monitoring problem?" in a["reason"]
               for a in acts)
    assert c.node_ok[:6].all() and not d.runtime.store.events("node_down")
    assert d.runtime.store.events("mass_node_failure")[-1]["count"] == 6
    assert "gpuas_failover_breaker_open 1.0" in httpx.get(f"{base}/metrics").text
    # while open, even a single report is only alerted on
    r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=d.runtime.sim.node_name(7))]),
                   headers=AUTH)
    assert r.json()["actions"][0]["action"] == "refused" and c.node_ok[7]


def test_one_node_down_still_fails_over(daemon):
    d, base = daemon
    node = running_nodes(d)[0]
    r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=d.runtime.sim.node_name(node))]),
                   headers=AUTH)
    assert r.status_code == 200 and r.json()["actions"][0]["action"] == "node_down"
    assert not d.runtime.sim.cluster.node_ok[node]


def test_webhook_without_a_token_is_refused_unless_explicitly_allowed(tmp_path):
    for allow, code in ((False, 403), (True, 200)):
        port = free_port()
        cfg = sim_cfg(tmp_path / str(allow), port)
        cfg = cfg.model_copy(update={"server": cfg.server.model_copy(
            update={"webhook_token": None, "allow_unauthenticated_webhook": allow})})
        d = Daemon(build_runtime(cfg))
        d.start()
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(lambda: httpx.get(f"{base}/healthz", timeout=1).status_code == 200, what="daemon", timeout=30)
            r = httpx.post(f"{base}/alerts", json=payload([alert("GPUClusterLoadHigh")]))
            assert r.status_code == code, r.text
            if code == 403:
                assert "allow_unauthenticated_webhook" in r.json()["error"]
        finally:
            d.stop()


def test_node_list_unreadable_means_503_and_nothing_done(daemon, monkeypatch):
    d, base = daemon

    def down():
        raise OSError("scheduler unreachable")

    monkeypatch.setattr(d.runtime.sim, "node_names", down)
    monkeypatch.setattr(d.runtime, "_nodes", None)
    r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=d.runtime.sim.node_name(1))]),
                   headers=AUTH)
    assert r.status_code == 503 and "cannot list the cluster's nodes" in r.json()["error"]
    assert d.runtime.sim.cluster.node_ok[1] and not d.runtime.store.events("node_down")


def test_failover_does_not_wait_for_a_cycle_in_flight(daemon):
    d, base = daemon
    node = running_nodes(d)[0]
    with d.runtime.runner.lock:                      # a cycle is in flight (and stays so during the failover)
        h = httpx.get(f"{base}/healthz", timeout=5)
        r = httpx.post(f"{base}/alerts", json=payload([alert("GPUNodeDown", node=d.runtime.sim.node_name(node))]),
                       headers=AUTH, timeout=10)
        assert r.status_code == 200 and r.json()["actions"][0]["action"] == "node_down"
        assert not d.runtime.sim.cluster.node_ok[node] and len(d.runtime.sim.cluster.stranded()) == 0
        assert d.runtime.runner.lock.locked()        # done before the cycle let go
    assert h.status_code == 200
