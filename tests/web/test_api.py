"""/api/v1 and access control against a daemon on the embedded simulator (real uvicorn, real HTTP)."""

import httpx
import pytest

from daemon.config import ConfigError, parse_config
from daemon.policy.events import plan_events
from daemon.policy.types import Plan, PolicyMemory, Preemption, RateLimit
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from daemon.web.auth import Access
from tests.conftest import free_port
from tests.support.daemons import OP, T1, T2, TOKENS, api_cfg, h, just_now
from tests.support.services import wait_for

ENDPOINTS = ["/plan", "/api/v1/plan", "/api/v1/tenants", "/api/v1/tenants/tenant-0001", "/api/v1/events",
             "/api/v1/openapi.json"]


def test_without_a_token_only_health_and_metrics_answer(api):
    _, base = api
    assert httpx.get(f"{base}/healthz").status_code == 200
    assert httpx.get(f"{base}/metrics").status_code == 200
    for path in ENDPOINTS:
        r = httpx.get(base + path)
        assert r.status_code == 401, path
        assert r.headers["www-authenticate"] == "Bearer" and "token" in r.json()["error"]
        assert httpx.get(base + path, headers=h("not-a-token-at-all-xx")).status_code == 401, path
        assert httpx.get(base + path, headers=h(OP[:-1])).status_code == 401, path  # a prefix is not the token


def test_operator_sees_everything(api):
    d, base = api
    plan = httpx.get(f"{base}/api/v1/plan", headers=h(OP)).json()
    assert plan["capacity"] == 256 and "memory" not in plan
    assert all(lim["reason"] for lim in plan["limits"].values())
    tenants = httpx.get(f"{base}/api/v1/tenants", headers=h(OP)).json()["tenants"]
    assert len(tenants) == 16 and {t["tenant"] for t in tenants} >= {"tenant-0001", "tenant-0002"}
    one = httpx.get(f"{base}/api/v1/tenants/tenant-0003", headers=h(OP)).json()
    assert one["tenant"] == "tenant-0003" and one["limit"]["reason"]
    assert (len(one["forecast"]["p50"]) == d.cfg.cycle.horizon_steps
            and len(one["forecast"]["p90"]) == d.cfg.cycle.horizon_steps)
    assert all(a <= b for a, b in zip(one["forecast"]["p50"], one["forecast"]["p90"])
               if a is not None and b is not None)
    assert len(one["usage"]["values"]) == 240
    assert httpx.get(f"{base}/api/v1/events", headers=h(OP)).status_code == 200
    assert httpx.get(f"{base}/plan", headers=h(OP)).json()["capacity"] == 256


def test_tenant_token_sees_only_its_tenant(api):
    _, base = api
    assert httpx.get(f"{base}/api/v1/plan", headers=h(T1)).status_code == 403
    assert httpx.get(f"{base}/plan", headers=h(T1)).status_code == 403
    tenants = httpx.get(f"{base}/api/v1/tenants", headers=h(T1)).json()["tenants"]
    assert [t["tenant"] for t in tenants] == ["tenant-0001"]
    assert httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers=h(T1)).status_code == 200
    r = httpx.get(f"{base}/api/v1/tenants/tenant-0002", headers=h(T1))
    assert r.status_code == 403 and "tenant-0001" in r.json()["error"]
    # an unknown name answers like another tenant's: a tenant token cannot probe which tenants exist
    assert httpx.get(f"{base}/api/v1/tenants/nobody", headers=h(T1)).status_code == 403
    assert httpx.get(f"{base}/api/v1/events?tenant=tenant-0002", headers=h(T2)).status_code == 200
    assert httpx.get(f"{base}/api/v1/events?tenant=tenant-0002", headers=h(T1)).status_code == 403
    for ev in httpx.get(f"{base}/api/v1/events", headers=h(T1)).json()["events"]:
        assert ev.get("tenant") == "tenant-0001" or "tenant-0001" in ev.get("tenants", [])
    # the console's cookie carries the same token
    r = httpx.get(f"{base}/api/v1/tenants/tenant-0001", cookies={"gpuas_token": T1})
    assert r.status_code == 200


def test_unknown_tenant_and_bad_input(api):
    _, base = api
    r = httpx.get(f"{base}/api/v1/tenants/nobody", headers=h(OP))
    assert r.status_code == 404 and "nobody" in r.json()["error"]
    r = httpx.get(f"{base}/api/v1/tenants/bad%20name", headers=h(OP))
    assert r.status_code == 400 and r.json()["field"] == "tenant"
    for q, field in (("limit=abc", "limit"), ("limit=0", "limit"), ("limit=5000", "limit"), ("kind=Bogus!", "kind"),
                     ("before=-1", "before")):
        r = httpx.get(f"{base}/api/v1/events?{q}", headers=h(OP))
        assert r.status_code == 400 and r.json()["field"] == field and r.json()["error"].startswith(field), q
    assert httpx.get(f"{base}/api/v1/events?tenant=nobody", headers=h(OP)).status_code == 404


def test_events_newest_first_and_filtered(api):
    d, base = api
    store = d.runtime.store
    store.log_event("2026-01-04T13:00:00+00:00", "node_down", {"node": "sim-node-0001", "jobs": [],
                                                               "tenants": ["tenant-0001"]})
    store.log_event("2026-01-04T13:00:01+00:00", "preemption", {"tenant": "tenant-0002", "job_id": "x", "gpus": 8,
                                                                "node": "n", "reason": "test"})
    ev = httpx.get(f"{base}/api/v1/events?limit=1000", headers=h(OP)).json()["events"]
    ids = [e["id"] for e in ev]
    assert ids == sorted(ids, reverse=True)
    mine = httpx.get(f"{base}/api/v1/events?kind=node_down", headers=h(T1)).json()["events"]
    assert "sim-node-0001" in [e["node"] for e in mine]
    for e in httpx.get(f"{base}/api/v1/events?kind=preemption&limit=1000", headers=h(T1)).json()["events"]:
        assert e["tenant"] == "tenant-0001"  # never tenant-0002's
    pre = [e for e in httpx.get(f"{base}/api/v1/events?kind=preemption&limit=1000", headers=h(T2)).json()["events"]
           if e["reason"] == "test"]
    assert len(pre) == 1 and pre[0]["tenant"] == "tenant-0002"
    page = httpx.get(f"{base}/api/v1/events?limit=1&before={pre[0]['id']}", headers=h(OP)).json()["events"]
    assert page[0]["id"] < pre[0]["id"]


def test_openapi_describes_every_endpoint(api):
    _, base = api
    spec = httpx.get(f"{base}/api/v1/openapi.json", headers=h(T1)).json()
    assert spec["openapi"].startswith("3.")
    for path in ("/api/v1/plan", "/api/v1/tenants", "/api/v1/tenants/{tenant}", "/api/v1/events"):
        assert "200" in spec["paths"][path]["get"]["responses"], path
        assert "401" in spec["paths"][path]["get"]["responses"], path
    assert "404" in spec["paths"]["/api/v1/tenants/{tenant}"]["get"]["responses"]


@pytest.mark.parametrize("entry, key", [
    ({"name": "x", "role": "tenant", "token": OP}, "access.tokens.0"),
    ({"name": "x", "role": "operator", "tenant": "t", "token": OP}, "access.tokens.0"),
    ({"name": "x", "role": "operator", "token": "short"}, "access.tokens.0.token"),
    ({"name": "x", "role": "operator"}, "access.tokens.0"),
    ({"name": "x", "role": "root", "token": OP}, "access.tokens.0.role"),
])
def test_bad_access_config_names_the_key(entry, key):
    with pytest.raises(ConfigError) as exc:
        parse_config({"access": {"tokens": [entry]}})
    assert f"config: {key}" in str(exc.value)


def test_token_files_and_shared_tokens(tmp_path):
    f = tmp_path / "op.token"
    f.write_text(OP + "\n")
    acc = Access(parse_config({"access": {"tokens": [{"name": "ops", "role": "operator",
                                                      "token_file": str(f)}]}}).access)
    assert acc.lookup(OP).name == "ops" and acc.lookup(OP + "x") is None and acc.lookup("") is None
    with pytest.raises(ConfigError, match="access.tokens.ops.token_file"):
        Access(parse_config({"access": {"tokens": [{"name": "ops", "role": "operator",
                                                    "token_file": str(tmp_path / "missing")}]}}).access)
    with pytest.raises(ConfigError, match="share one token"):
        Access(parse_config({"access": {"tokens": [
            {"name": "a", "role": "operator", "token": OP},
            {"name": "b", "role": "tenant", "tenant": "t", "token": OP}]}}).access)


def _plan(level, reservations, preemptions=(), notes=()):
    return Plan(at="2026-01-04T14:00:00+00:00", capacity=64, load=0.85, high_pool=12, reservations=reservations,
                quotas={}, limits={"a": RateLimit(50, 100, level, "why")}, preemptions=tuple(preemptions),
                notifications=(), stale=False, forecast_model="m", notes=tuple(notes),
                memory=PolicyMemory(reservations, level))


def test_plan_events_are_what_changed():
    before = _plan(0, {"a": 8})
    after = _plan(1, {"a": 16, "b": 8}, [Preemption("j1", "c", 8, "n1", "peak ahead")])
    ev = plan_events(before, after)
    kinds = [k for k, _ in ev]
    assert kinds.count("preemption") == 1 and ev[0][1]["reason"] == "peak ahead" and ev[0][1]["tenant"] == "c"
    changes = {d.get("tenant", d["what"]): (d["from"], d["to"]) for k, d in ev if k == "plan_change"}
    assert changes == {"rate_level": (0, 1), "a": (8, 16), "b": (0, 8)}
    assert plan_events(after, after) == [("preemption", ev[0][1])]


def test_embedded_demo_prints_an_operator_token(tmp_path):
    import re
    import subprocess
    import sys
    import threading

    from tests.conftest import REPO
    from tests.support.services import stop

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "run", "--sim", "--port", str(port), "--interval",
                             "0.5"], cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        token = None
        for line in proc.stderr:
            m = re.search(r"operator token for this run: (\S+)", line)
            if m:
                token = m.group(1)
                break
        assert token
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{base}/api/v1/plan", headers=h(token)).json()["capacity"] > 0, what="plan",
                 timeout=120)
        assert httpx.get(f"{base}/api/v1/plan").status_code == 401
    finally:
        stop(proc)


def test_openapi_is_valid_and_the_answers_match_it(api):
    """The served description passes openapi-spec-validator, and real answers validate against its schemas."""
    from jsonschema import Draft202012Validator
    from openapi_spec_validator import validate

    _, base = api
    spec = httpx.get(f"{base}/api/v1/openapi.json", headers=h(OP)).json()
    validate(spec)

    def check(path: str, method: str, body: object, status: str = "200") -> None:
        schema = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
        doc = {**schema, "components": spec["components"]}  # local $refs resolve against the document root
        Draft202012Validator(doc).validate(body)

    check("/api/v1/plan", "get", httpx.get(f"{base}/api/v1/plan", headers=h(OP)).json())
    check("/api/v1/tenants", "get", httpx.get(f"{base}/api/v1/tenants", headers=h(OP)).json())
    check("/api/v1/tenants/{tenant}", "get", httpx.get(f"{base}/api/v1/tenants/tenant-0001", headers=h(OP)).json())
    check("/api/v1/events", "get", httpx.get(f"{base}/api/v1/events", headers=h(OP)).json())
    check("/api/v1/tenants/{tenant}", "get", httpx.get(f"{base}/api/v1/tenants/nobody", headers=h(OP)).json(), "404")
    check("/api/v1/events", "get", httpx.get(f"{base}/api/v1/events?limit=0", headers=h(OP)).json(), "400")


def test_cluster_history_covers_the_last_hours_of_plans(tmp_path):
    import dataclasses

    import pandas as pd

    from daemon.web.views import cluster_view

    d = Daemon(build_runtime(api_cfg(tmp_path, free_port())))
    try:
        start = pd.Timestamp("2026-01-04T08:00:00Z")
        for k in range(0, 6 * 60, 10):  # a plan every 10 minutes for 6 hours
            at = (start + pd.Timedelta(minutes=k)).isoformat()
            d.runtime.store.save_cycle(dataclasses.replace(_plan(0, {"a": 8}), at=at), "m")
        b = d.backend
        hist = cluster_view(b.snapshot(), b)["history"]  # 240 steps of 60 s: the last 4 hours
        assert hist[0]["at"] == (start + pd.Timedelta(minutes=110)).isoformat()
        assert hist[-1]["at"] == (start + pd.Timedelta(minutes=350)).isoformat() and len(hist) == 25
        assert cluster_view(b.snapshot(), b)["model"]["quality"] is None  # no live scorer: no number is made up
    finally:
        d.runtime.close()


def test_openapi_covers_answers_off_the_happy_path(api, tmp_path):
    """Events filtered by an unknown tenant are a 404, and a configured tenant before the first plan has no
    limit (null): both must be what the description says."""
    from jsonschema import Draft202012Validator

    _, base = api
    spec = httpx.get(f"{base}/api/v1/openapi.json", headers=h(OP)).json()

    def check(path: str, status: str, body: object) -> None:
        schema = spec["paths"][path]["get"]["responses"][status]["content"]["application/json"]["schema"]
        Draft202012Validator({**schema, "components": spec["components"]}).validate(body)

    r = httpx.get(f"{base}/api/v1/events?tenant=nobody", headers=h(OP))
    assert r.status_code == 404
    check("/api/v1/events", "404", r.json())

    d = Daemon(build_runtime(api_cfg(tmp_path, free_port(), tenants=[{"name": "cfg-only", "tier": "high"}])))
    d._start_http()  # no cycle: no plan yet
    try:
        r = httpx.get(f"http://127.0.0.1:{d.cfg.server.port}/api/v1/tenants/cfg-only", headers=h(OP))
        assert r.status_code == 200 and r.json()["limit"] is None
        check("/api/v1/tenants/{tenant}", "200", r.json())
    finally:
        d.stop()


def test_every_api_v1_route_is_in_the_description(api):
    """A route under /api/v1 the server answers must be described: POST /api/v1/alerts (the webhook's second
    path) was not. Its answers (here 403: no webhook token configured) follow the description too."""
    from jsonschema import Draft202012Validator

    from daemon.web.app import build_app

    d, base = api
    spec = httpx.get(f"{base}/api/v1/openapi.json", headers=h(OP)).json()
    served = {(r.path, m.lower()) for r in build_app(d.backend).routes if r.path.startswith("/api/v1/")
              for m in (r.methods or ()) if m != "HEAD"}
    described = {(p, m) for p, ops in spec["paths"].items() for m in ops}
    assert served - described == set()
    r = httpx.post(f"{base}/api/v1/alerts", json={"alerts": []})
    assert r.status_code == 403
    schema = spec["paths"]["/api/v1/alerts"]["post"]["responses"]["403"]["content"]["application/json"]["schema"]
    Draft202012Validator({**schema, "components": spec["components"]}).validate(r.json())


@pytest.mark.security
def test_tokens_are_compared_as_fixed_length_digests():
    """hmac.compare_digest on the raw strings returns early when the lengths differ (it leaks the token's
    length); the daemon keeps only each token's SHA-256 and compares 32 bytes with 32 bytes."""
    import hashlib

    from daemon.web.auth import Secret, digest

    acc = Access(parse_config({"access": {"tokens": TOKENS}}).access)
    for (secret, who), entry in zip(acc.entries, TOKENS):
        assert isinstance(secret, Secret) and secret.digest == hashlib.sha256(entry["token"].encode()).digest()
        assert len(secret.digest) == 32 and entry["token"].encode() not in repr(vars(who)).encode()
    assert {len(digest(t)) for t in ("", "x", OP, OP * 50)} == {32}
    s = Secret(OP)
    assert s.matches(OP) and s.matches(f"  {OP}\n")
    for other in ("", OP[:1], OP[:-1], OP + "x", OP * 3, OP.upper(), None):   # every length, refused
        assert not s.matches(other), other
        assert acc.lookup(other) is None


@pytest.mark.security
def test_one_bearer_parser_with_a_case_insensitive_scheme():
    from daemon.web.auth import bearer

    assert bearer(f"Bearer {OP}") == OP and bearer(f"bearer {OP}") == OP and bearer(f"BeArEr\t{OP} ") == OP
    for bad in (None, "", "Bearer", "Bearer   ", f"Basic {OP}", OP, f"Bearer{OP}"):
        assert bearer(bad) is None, bad


@pytest.mark.security
def test_webhook_and_api_take_the_scheme_in_any_case(tmp_path):
    """The webhook had its own parser that wanted exactly "Bearer "; RFC 7235 makes the scheme case-insensitive
    and /api/v1 already took any case."""
    port = free_port()
    c = api_cfg(tmp_path, port)
    c = c.model_copy(update={"server": c.server.model_copy(update={"webhook_token": "webhook-token-0123456789"}),
                             "cycle": c.cycle.model_copy(update={"interval_s": 3600.0})})
    d = Daemon(build_runtime(c))
    d._start_http()
    base = f"http://127.0.0.1:{port}"
    body = {"version": "4", "groupKey": "g", "status": "firing", "receiver": "r",
            "alerts": [{"status": "firing", "labels": {"alertname": "SomethingElse"},
                        "startsAt": just_now()}]}
    try:
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = httpx.post(f"{base}/alerts", json=body, headers={"Authorization": f"{scheme} webhook-token-0123456789"})
            assert r.status_code == 200, (scheme, r.text)
            assert httpx.get(f"{base}/api/v1/tenants", headers={"Authorization": f"{scheme} {T1}"}).status_code == 200
        for bad in ("Bearer webhook-token-012345678", "Bearer webhook-token-0123456789x",
                    "Basic webhook-token-0123456789"):
            assert httpx.post(f"{base}/alerts", json=body, headers={"Authorization": bad}).status_code == 401, bad
    finally:
        d.stop()


def test_plan_carries_the_whole_forecaster_note(api):
    """The start-up line names the forecaster short; the whole note (why this model) is in /api/v1/plan."""
    d, base = api
    plan = httpx.get(f"{base}/api/v1/plan", headers=h(OP)).json()
    assert plan["forecaster_note"] == d.runtime.forecaster_note and plan["forecaster_note"].startswith("forecaster: ")
