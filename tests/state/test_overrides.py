"""Operator changes at runtime: pure effect on plan(), persistence and audit, config reload (SIGHUP)."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.types import OperatorInputs
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from daemon.state.overrides import BadChange, Overrides
from daemon.state.store import StateStore
from tests.conftest import REPO, free_port
from tests.policy.test_engine import flat_forecast, make_state
from tests.support.services import stop, wait_for

CFG = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})


def _preempting_state():
    tiers = ["high", "low", "low"]
    jobs = [(0, 10, "high", True, 3600, 0)] + [(1, 10, "low", True, 600 * (i + 1), 0) for i in range(5)] \
        + [(2, 10, "low", True, 60, 0)]
    s = make_state(tiers, jobs, capacity=70)
    return s, flat_forecast(s.tenants, [30, 50, 10])


def test_global_pause_stops_every_preemption():
    s, fc = _preempting_state()
    assert plan(fc, s, PolicyMemory(), CFG).preemptions
    p = plan(fc, s, PolicyMemory(), CFG, ops=OperatorInputs(paused_all=True))
    assert p.preemptions == () and any("paused by an operator" in n for n in p.notes)
    assert p.reservations["t0"] == 40  # capacity is still held; only the preemptions wait


def test_tenant_pause_spares_only_that_tenants_jobs():
    s, fc = _preempting_state()
    base = {x.job_id for x in plan(fc, s, PolicyMemory(), CFG).preemptions}
    assert "j6" in base                                   # t2's job is the cheapest
    p = plan(fc, s, PolicyMemory(), CFG, ops=OperatorInputs(paused=frozenset({"t2"})))
    assert p.preemptions and all(x.tenant != "t2" for x in p.preemptions)


def test_tier_rate_and_floor_overrides():
    s, fc = _preempting_state()
    p = plan(fc, s, PolicyMemory(), CFG, ops=OperatorInputs(tiers={"t0": "normal"}, rates={"t1": 7.5},
                                                            floors={"t2": 20}))
    assert "t0" not in p.reservations and "t0" in p.quotas       # no longer high tier: no forecast hold
    assert p.limits["t1"].rate == 7.5 and "fixed limit for t1" in p.limits["t1"].reason
    assert p.reservations["t2"] == 20                            # held at least the floor
    assert all(x.tenant != "t2" for x in p.preemptions)          # a floored tenant is protected
    # the floor drives preemption now: t2 runs 10 of its 20
    assert sum(x.gpus for x in p.preemptions) >= 10


def test_changes_are_validated_persisted_and_audited(tmp_path):
    store = StateStore(tmp_path / "s.sqlite")
    ov = Overrides(store)
    for body, field in (({"tier": "gold"}, "tier"), ({"floor_gpus": -1}, "floor_gpus"), ({"bogus": 1}, "bogus"),
                        ({"rate_override": "5"}, "rate_override"), ({"floor_gpus": True}, "floor_gpus"),
                        ([], "body"), ({}, "body"), ({"preemption_paused": "yes"}, "preemption_paused")):
        with pytest.raises(BadChange) as exc:
            ov.change_tenant("ops", "t1", body)
        assert exc.value.field == field, body
    assert store.recent_events() == []                           # a refused change leaves no trace
    out = ov.change_tenant("ops", "t1", {"rate_override": 5, "floor_gpus": 8, "preemption_paused": True})
    assert out["override"] == {"rate_override": 5.0, "floor_gpus": 8, "preemption_paused": True}
    ov.change_tenant("alice-admin", "t1", {"rate_override": None})
    ov.change_global("ops", {"preemption_paused": True})
    store.close()
    again = Overrides(StateStore(tmp_path / "s.sqlite"))         # survives a restart
    assert again.inputs() == OperatorInputs(rates={}, floors={"t1": 8}, paused=frozenset({"t1"}), paused_all=True)
    ev = again.store.recent_events(kind="operator_change")
    assert [e["who"] for e in ev] == ["ops", "alice-admin", "ops"]
    assert ev[1]["tenant"] == "t1" and ev[1]["changes"] == {"rate_override": {"from": 5.0, "to": None}}
    assert ev[0]["scope"] == "global" and "T" in ev[0]["at"]


OP = "operator-token-0123456789"


def test_sighup_reloads_and_a_bad_file_keeps_the_running_config(tmp_path):
    port = free_port()
    cfg = tmp_path / "config.toml"

    def write(extra_policy="", token=OP):
        cfg.write_text(f"""
[cluster]
gpus = 128
[cycle]
interval_s = 0.5
[source.simulator]
tenants = 8
warmup_steps = 300
[server]
port = {port}
[state]
path = "{tmp_path / 'state.sqlite'}"
[forecaster]
kind = "seasonal_naive"
model_dir = "{tmp_path / 'models'}"
[policy]
reserve_share = 0.2
{extra_policy}
[[access.tokens]]
name = "ops"
role = "operator"
token = "{token}"
""")

    write()
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "run"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{base}/api/v1/plan", headers={"Authorization": f"Bearer {OP}"}).status_code == 200,
                 what="daemon", timeout=120)
        new_op = "rotated-operator-token-0123"
        write(token=new_op)
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: httpx.get(f"{base}/api/v1/plan", headers={"Authorization": f"Bearer {new_op}"}).status_code
                 == 200, what="reloaded token", timeout=30)
        assert httpx.get(f"{base}/api/v1/plan", headers={"Authorization": f"Bearer {OP}"}).status_code == 401
        write(extra_policy="reserve_shar = 0.3", token=OP)         # a typo: the reload must change nothing
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "gpuas_config_reload_ok 0.0" in httpx.get(f"{base}/metrics").text, what="reload error",
                 timeout=30)
        m = httpx.get(f"{base}/metrics").text
        assert 'gpuas_config_reloads_total{outcome="error"} 1.0' in m and 'outcome="ok"} 1.0' in m
        assert httpx.get(f"{base}/api/v1/plan", headers={"Authorization": f"Bearer {new_op}"}).status_code == 200
        assert proc.poll() is None
        time.sleep(0.2)
        lines = [ln for ln in (tmp_path / "log").read_text().splitlines() if "config reload failed" in ln]
        assert len(lines) == 1 and "policy.reserve_shar: unknown key" in lines[0]
    finally:
        stop(proc)


def test_a_tier_change_shows_as_pending_until_the_plan_made_with_it(tmp_path):
    """A tier change applies at the next cycle, but the tenant's record and page read it at once: on `make run` a
    normal-tier tenant set to high read "high tier" beside the plan's "normal tier limited to 50 req/s" and its
    quota (the high tier has none) until the next cycle. The record keeps the plan's tier, the change is its
    `override`, and the page says "high tier from the next cycle"; once a plan is made with it, the tier is high."""
    from daemon.shadow.record import tenants as shadow_tenants
    from tests.support.daemons import between_cycles

    port = free_port()
    cfg = Config(cluster={"gpus": 256}, cycle={"interval_s": 0.5},
                 source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 600}},
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"kind": "seasonal_naive"},
                 server={"port": port}, access={"tokens": [{"name": "ops", "role": "operator", "token": OP}]})
    d = Daemon(build_runtime(cfg))
    d.start()
    base, op = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {OP}"}
    try:
        wait_for(lambda: d.cycles_done >= 2, what="two cycles", timeout=60)
        rows = httpx.get(f"{base}/api/v1/tenants", headers=op).json()["tenants"]
        name = next(r["tenant"] for r in rows if r["tier"] != "high")
        url = f"{base}/api/v1/tenants/{name}"
        with between_cycles(d):                          # no cycle runs in the block: the change is not planned yet
            before = httpx.get(url, headers=op).json()
            assert httpx.patch(url, json={"tier": "high"}, headers=op).json()["applies"] == "at the next cycle"
            t = httpx.get(url, headers=op).json()
            assert t["tier"] == before["tier"] and t["override"]["tier"] == "high"
            assert (t["quota"], t["limit"]) == (before["quota"], before["limit"])
            page = httpx.get(f"{base}/ui/tenants/{name}", headers=op).text
            assert f'{before["tier"]} tier</span>' in page and "high tier from the next cycle" in page
        seen = d.cycles_done
        wait_for(lambda: d.cycles_done >= seen + 2, what="the next cycles", timeout=30)
        t = httpx.get(url, headers=op).json()
        assert t["tier"] == "high" and t["quota"] is None and "high tier" in t["limit"]["reason"], t["limit"]
        assert "from the next cycle" not in httpx.get(f"{base}/ui/tenants/{name}", headers=op).text
        # the shadow report counts the tenant with the tier its plans gave it (it said the source's tier, so a
        # tenant held as high-tier sat in the normal tier's row)
        with between_cycles(d):
            newest = StateStore(tmp_path / "state.sqlite").shadow_records(limit=1)[-1]
        assert shadow_tenants(newest, name)[name]["tier"] == "high"
    finally:
        d.stop()


def test_operator_changes_through_the_api_apply_at_the_next_cycle(tmp_path):
    port = free_port()
    cfg = Config(cluster={"gpus": 256}, cycle={"interval_s": 0.5},
                 source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 600}},
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"kind": "seasonal_naive"},
                 server={"port": port},
                 access={"tokens": [{"name": "ops", "role": "operator", "token": OP},
                                    {"name": "alice", "role": "tenant", "tenant": "tenant-0001",
                                     "token": "tenant-one-token-0123456789"}]})
    d = Daemon(build_runtime(cfg))
    d.start()
    base = f"http://127.0.0.1:{port}"
    op = {"Authorization": f"Bearer {OP}"}
    try:
        wait_for(lambda: d.cycles_done >= 1, what="first cycle", timeout=60)
        url = f"{base}/api/v1/tenants/tenant-0003"
        assert httpx.patch(url, json={"rate_override": 5}).status_code == 401
        r = httpx.patch(url, json={"rate_override": 5}, headers={"Authorization": "Bearer tenant-one-token-0123456789"})
        assert r.status_code == 403
        r = httpx.patch(f"{base}/api/v1/tenants/tenant-0001", json={"rate_override": 5},
                        headers={"Authorization": "Bearer tenant-one-token-0123456789"})
        assert r.status_code == 403                      # not even its own tenant: changes are for operators
        assert httpx.patch(f"{base}/api/v1/tenants/nobody", json={"tier": "high"}, headers=op).status_code == 404
        for body, field in (({"tier": "gold"}, "tier"), ({"floor_gpus": -2}, "floor_gpus"), ({"x": 1}, "x")):
            r = httpx.patch(url, json=body, headers=op)
            assert r.status_code == 400 and r.json()["field"] == field, body
        r = httpx.patch(url, content=b"{nope", headers=op)
        assert r.status_code == 400 and r.json()["field"] == "body"
        r = httpx.patch(url, json={"rate_override": 5, "floor_gpus": 16, "tier": "low"}, headers=op)
        assert r.status_code == 200 and r.json()["applies"] == "at the next cycle"
        seen = d.cycles_done
        wait_for(lambda: d.cycles_done >= seen + 2, what="next cycle", timeout=30)
        plan = httpx.get(f"{base}/api/v1/plan", headers=op).json()
        assert plan["limits"]["tenant-0003"]["rate"] == 5 and "fixed limit" in plan["limits"]["tenant-0003"]["reason"]
        assert plan["reservations"]["tenant-0003"] >= 16
        t = httpx.get(url, headers=op).json()
        assert t["tier"] == "low" and t["override"] == {"rate_override": 5.0, "floor_gpus": 16, "tier": "low"}
        assert httpx.patch(f"{base}/api/v1/overrides", json={"preemption_paused": True},
                           headers={"Authorization": "Bearer tenant-one-token-0123456789"}).status_code == 403
        assert httpx.patch(f"{base}/api/v1/overrides", json={"preemption_paused": 1}, headers=op).status_code == 400
        assert httpx.patch(f"{base}/api/v1/overrides", json={"preemption_paused": True}, headers=op).status_code == 200
        assert httpx.get(f"{base}/api/v1/overrides", headers=op).json()["global"] == {"preemption_paused": True}
        seen = d.cycles_done
        wait_for(lambda: d.cycles_done >= seen + 3, what="cycles", timeout=30)
        assert httpx.get(f"{base}/api/v1/plan", headers=op).json()["preemptions"] == []
        audit = httpx.get(f"{base}/api/v1/events?kind=operator_change", headers=op).json()["events"]
        assert [e["scope"] for e in audit] == ["global", "tenant"] and audit[1]["who"] == "ops"
        assert audit[1]["changes"]["floor_gpus"] == {"from": None, "to": 16}
    finally:
        d.stop()
