"""A tenant token reads its own tenant only: no other tenant's name, job ids or counts, in any event or reason.

Events are written once for the operator (a failed node's every job and tenant, the tenants a preemption
cleared GPUs for); the API and the console hand a tenant its own part of each.
"""

import dataclasses
import json
import re

import httpx
import pytest

from daemon.config import Config
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption, RateLimit
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import just_now
from tests.support.services import wait_for

pytestmark = [pytest.mark.security, pytest.mark.timeout(180)]

OP = "operator-token-0123456789"
WEBHOOK = "webhook-token-0123456789"
TA = "tenant-a-token-0123456789"
TB = "tenant-b-token-0123456789"


def h(token):
    return {"Authorization": f"Bearer {token}"}


def cfg(tmp_path, port, tokens=None, interval_s=1.0):
    tokens = tokens or [{"name": "alice", "role": "tenant", "tenant": "tenant-0001", "token": TA},
                        {"name": "bob", "role": "tenant", "tenant": "tenant-0002", "token": TB}]
    return Config(cluster={"gpus": 256}, cycle={"interval_s": interval_s},
                  source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 1500}},
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                  server={"port": port, "webhook_token": WEBHOOK},
                  access={"tokens": [{"name": "ops", "role": "operator", "token": OP}, *tokens]})


def names_in(text: str, names) -> set[str]:
    """Which of `names` appear in `text` as whole names (tenant-0001 is not inside tenant-00012)."""
    return {n for n in names if re.search(rf"(?<![\w.:@-]){re.escape(n)}(?![\w:@-]|\.\w)", text)}


def alert(node):
    return {"version": "4", "groupKey": "g", "truncatedAlerts": 0, "status": "firing", "receiver": "gpu-autoscaler",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "alerts": [{"status": "firing", "labels": {"alertname": "GPUNodeDown", "node": node}, "annotations": {},
                        "startsAt": just_now(), "endsAt": "0001-01-01T00:00:00Z",
                        "generatorURL": "http://prom/graph", "fingerprint": "abc"}]}


def tenant_token(t: str) -> str:
    return f"token-of-{t}-0123456789"


def test_a_failed_nodes_event_shows_a_tenant_only_its_own_jobs(tmp_path):
    """A real failover on the simulator, through the webhook: the node held jobs of several tenants. A tenant
    token used to get the whole `node_down` record (every tenant's name and every job id on the node)."""
    port = free_port()
    tokens = [{"name": f"user-{i}", "role": "tenant", "tenant": f"tenant-{i:04d}",
               "token": tenant_token(f"tenant-{i:04d}")} for i in range(16)]
    d = Daemon(build_runtime(cfg(tmp_path, port, tokens, interval_s=3600.0)))  # one cycle: nothing moves
    d.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: d.cycles_done >= 1, what="a cycle", timeout=60)
        sim = d.runtime.sim
        shared, on_node = None, []
        for i in range(sim.cluster.n_nodes):  # a node with jobs of three tenants or more
            on_node = d.runtime.jobs_on_node(sim.node_name(i))
            if len({t for _, t in on_node}) >= 3:
                shared = sim.node_name(i)
                break
        assert shared is not None, "no node with jobs of three tenants in this simulation"
        a = sorted({t for _, t in on_node})[0]
        mine = {j for j, t in on_node if t == a}
        others = {j for j, t in on_node if t != a}
        other_tenants = {t for _, t in on_node if t != a}
        r = httpx.post(f"{base}/alerts", json=alert(shared), headers=h(WEBHOOK))
        assert r.status_code == 200 and r.json()["actions"][0]["action"] == "node_down", r.text

        full = [e for e in httpx.get(f"{base}/api/v1/events?kind=node_down", headers=h(OP)).json()["events"]
                if e["node"] == shared]
        assert len(full) == 1 and set(full[0]["jobs"]) == mine | others    # the operator sees everything
        assert set(full[0]["tenants"]) == {t for _, t in on_node}

        ta = tenant_token(a)
        ev = httpx.get(f"{base}/api/v1/events?kind=node_down", headers=h(ta)).json()["events"]
        ev = [e for e in ev if e["node"] == shared]
        assert len(ev) == 1
        assert set(ev[0]["jobs"]) == mine and ev[0]["tenants"] == [a]
        body = json.dumps(ev)
        assert names_in(body, other_tenants) == set()
        assert not [j for j in others if re.search(rf"\b{re.escape(j)}\b", body)]

        # every way the tenant reads events: the tenant API, all events, the console's pages
        seen = {
            "tenant api": httpx.get(f"{base}/api/v1/tenants/{a}", headers=h(ta)).text,
            "events api": httpx.get(f"{base}/api/v1/events?limit=1000", headers=h(ta)).text,
            "console events": httpx.get(f"{base}/ui/events", headers=h(ta)).text,
            "console node_down": httpx.get(f"{base}/ui/events?kind=node_down", headers=h(ta)).text,
            "console tenant page": httpx.get(f"{base}/ui/tenants/{a}", headers=h(ta)).text,
        }
        assert shared in seen["console node_down"]
        for where, text in seen.items():
            assert names_in(text, other_tenants) == set(), where
            assert not [j for j in others if re.search(rf"\b{re.escape(j)}\b", text)], where
        # another tenant on the node reads its own jobs there, not a's
        b = sorted(other_tenants)[0]
        evb = [e for e in httpx.get(f"{base}/api/v1/events?kind=node_down", headers=h(tenant_token(b))).json()["events"]
               if e["node"] == shared]
        assert set(evb[0]["jobs"]) == {j for j, t in on_node if t == b} and evb[0]["tenants"] == [b]
    finally:
        d.stop()


B_REASON = ("low-priority job preempted to clear 24 GPUs ahead of forecast peak (p90 within 3 steps) for "
            "tenant-0002, tenant-0007")


@pytest.fixture
def planned(tmp_path):
    """A daemon serving HTTP with a plan and events put in place (no cycle runs: nothing changes under the test)."""
    port = free_port()
    d = Daemon(build_runtime(cfg(tmp_path, port)))
    rt = d.runtime
    limits = {t: RateLimit(50, 100, 1, "load 85%: normal tier 50 req/s") for t in
              ("tenant-0001", "tenant-0002", "tenant-0007")}
    rt.runner.last_plan = Plan(
        at="2026-01-06T13:30:00+00:00", capacity=256, load=0.9, high_pool=50, reservations={"tenant-0002": 24},
        quotas={}, limits=limits, stale=False, forecast_model="m", notes=(), memory=PolicyMemory(),
        preemptions=(Preemption("sim-41", "tenant-0001", 8, "sim-node-0003", B_REASON, "tenant-0002"),),
        notifications=(Notification("tenant-0001", "preempted", f"job sim-41 preempted and requeued: {B_REASON}"),))
    rt.runner.publish()  # what the web reads: the plan put in place, as a cycle's end would publish it
    s = rt.store
    at = "2026-01-06T13:30:00+00:00"
    s.log_event(at, "preemption", {"tenant": "tenant-0001", "job_id": "sim-41", "gpus": 8, "node": "sim-node-0003",
                                   "reason": B_REASON})
    s.log_event(at, "preemption", {"tenant": "tenant-0002", "job_id": "sim-77", "gpus": 8, "node": "sim-node-0004",
                                   "reason": "low-priority job preempted ... for tenant-0001"})
    s.log_event(at, "notification", {"tenant": "tenant-0001", "type": "protected",
                                     "message": "held ahead of tenant-0007's borrowing"})
    s.log_event(at, "plan_change", {"what": "held", "tenant": "tenant-0002", "from": 0, "to": 24,
                                    "message": "held capacity for tenant-0002: 0 -> 24 GPUs"})
    s.log_event(at, "mass_node_failure", {"nodes": ["sim-node-0001", "sim-node-0002"], "count": 9, "limit": 3,
                                          "tenants": ["tenant-0001", "tenant-0002"]})
    s.log_event(at, "operator_change", {"who": "ops", "scope": "tenant", "tenant": "tenant-0002", "changes": {},
                                        "message": "ops changed tenant-0002: tier normal -> high"})
    # written before jobs were kept per tenant: whose job is whose is unknown, so a tenant sees none
    s.log_event(at, "node_down", {"node": "sim-node-0009", "jobs": ["sim-90", "sim-91"],
                                  "tenants": ["tenant-0001", "tenant-0002"], "seconds": 0.1,
                                  "errors": ["slurm: requeue sim-91 (tenant-0002): failed"]})
    d._start_http()
    yield d, f"http://127.0.0.1:{port}"
    d.stop()


def test_no_event_or_reason_names_another_tenant(planned):
    d, base = planned
    others = {"tenant-0002", "tenant-0007"}
    ev = httpx.get(f"{base}/api/v1/events?limit=1000", headers=h(TA)).json()["events"]
    kinds = sorted(e["kind"] for e in ev)
    assert kinds == ["node_down", "notification", "preemption"]  # no other tenant's events, no mass failure
    text = json.dumps(ev)
    assert names_in(text, others) == set(), text
    pre = next(e for e in ev if e["kind"] == "preemption")
    assert pre["job_id"] == "sim-41" and pre["reason"].endswith("for protected tenants")
    old = next(e for e in ev if e["kind"] == "node_down")
    assert old["jobs"] == [] and old["tenants"] == ["tenant-0001"] and "sim-91" not in text
    assert old["errors"] == ["1 error during the failover (details for operators)"]
    assert next(e for e in ev if e["kind"] == "notification")["message"] == "held ahead of another tenant's borrowing"

    one = httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers=h(TA)).json()
    assert names_in(json.dumps(one), others) == set()
    assert one["preemptions"][0]["job_id"] == "sim-41" and "protected tenants" in one["preemptions"][0]["reason"]
    for path in ("/ui/tenants/tenant-0001", "/ui/events", "/ui/events?kind=preemption", "/ui/events?kind=node_down"):
        page = httpx.get(base + path, headers=h(TA))
        assert page.status_code == 200 and names_in(page.text, others) == set(), path

    # the operator still reads every event whole
    full = httpx.get(f"{base}/api/v1/events?limit=1000", headers=h(OP)).json()["events"]
    assert len(full) == 7 and B_REASON in json.dumps(full)
    op_view = httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers=h(OP)).json()
    assert op_view["preemptions"][0]["reason"] == B_REASON
    assert names_in(httpx.get(f"{base}/ui/events", headers=h(OP)).text, others) == others


def test_the_other_tenant_sees_only_its_own_side(planned):
    _, base = planned
    ev = httpx.get(f"{base}/api/v1/events?limit=1000", headers=h(TB)).json()["events"]
    assert sorted(e["kind"] for e in ev) == ["node_down", "operator_change", "plan_change", "preemption"]
    text = json.dumps(ev)
    assert names_in(text, {"tenant-0001", "tenant-0007"}) == set(), text
    assert "sim-41" not in text and "sim-90" not in text


def test_a_tenant_reads_why_its_own_hold_changed(planned):
    """First day: a tenant's events said "held capacity for tenant-0007: 12 -> 0 GPUs" and nothing more. The plan's
    cause (Plan.hold_why) rides in the event (`why`, and the message the console shows), to its own tenant only."""
    from daemon.policy.events import plan_events

    d, base = planned
    before = d.runtime.runner.last_plan
    before = dataclasses.replace(before, reservations={"tenant-0001": 12, "tenant-0002": 24})
    why = "its aged job started (aging no longer protects it)"
    after = dataclasses.replace(before, reservations={"tenant-0002": 32},
                                hold_why={"tenant-0001": why, "tenant-0002": "its window's lead time began"})
    for kind, row in plan_events(before, after):
        d.runtime.store.log_event(after.at, kind, row)
    ev = httpx.get(f"{base}/api/v1/events?kind=plan_change", headers=h(TA)).json()["events"]
    assert [(e["why"], e["message"]) for e in ev] == [(why, f"held capacity for tenant-0001: 12 -> 0 GPUs: {why}")]
    page = httpx.get(f"{base}/ui/events?kind=plan_change", headers=h(TA)).text
    assert f"12 -&gt; 0 GPUs: {why}" in page and "lead time" not in page   # tenant-0002's cause is not a's
