"""Gateway identity (API key -> tenant, trusted proxies) and packaging, against a real redis-server."""

import asyncio
import json
import os
import re
import subprocess
import sys
from importlib import metadata

import httpx
import pytest
import redis.asyncio as aredis
from packaging.markers import default_environment
from packaging.requirements import Requirement
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from daemon.actuators.redis_limits import RedisLimitsActuator
from daemon.config import ConfigError, parse_config
from daemon.policy.types import Plan, PolicyMemory, RateLimit
from gateway.bucket import AsyncTokenBucket
from gateway.config import parse_gateway_config
from gateway.contract import key_digest, keys_key
from gateway.identity import Identity
from gateway.keys import GatewayConfigError
from gateway.middleware import RateLimitMiddleware
from tests.conftest import REPO

KEY_A = "a-key-for-tenant-a-000001"
KEY_B = "b-key-for-tenant-b-000002"
HEAVY = {"torch", "statsmodels", "kubernetes", "numpy", "pandas", "matplotlib", "apscheduler"}


async def _echo(request):
    return JSONResponse({"tenant": request.headers.get("x-tenant"), "state": request.scope["state"].get("tenant")})


def gateway(redis_url, identity, **kw):
    return RateLimitMiddleware(Starlette(routes=[Route("/", _echo)]),
                               AsyncTokenBucket(aredis.Redis.from_url(redis_url)), identity, **kw)


def calls(app, requests, client=("203.0.113.9", 4711)):
    """Run (headers) requests through the app as if from address `client`; the responses in order."""

    async def go():
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            return [await c.get("/", headers=h) for h in requests]

    return asyncio.run(go())


def make_plan(limits):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=100, load=0.5, high_pool=20, reservations={},
                quotas={}, limits=limits, preemptions=(), notifications=(), stale=False,
                forecast_model="x", notes=(), memory=PolicyMemory())


@pytest.mark.services
def test_api_key_names_the_tenant_and_unknown_callers_get_401(r, redis_url):
    app = gateway(redis_url, Identity({key_digest(KEY_A): "a", key_digest(KEY_B): "b"}))
    ok_bearer, ok_header, spoof, wrong, claim_only, none = calls(app, [
        {"Authorization": f"Bearer {KEY_A}"},
        {"X-API-Key": KEY_B},
        {"Authorization": f"Bearer {KEY_A}", "X-Tenant": "b"},    # a key for a, claiming b
        {"Authorization": "Bearer not-a-key-of-anyone-0000"},
        {"X-Tenant": "a"},                                         # a claim without a credential
        {},
    ])
    assert ok_bearer.status_code == 200 and ok_bearer.json() == {"tenant": "a", "state": "a"}
    assert ok_header.json()["tenant"] == "b"
    assert spoof.status_code == 200 and spoof.json()["tenant"] == "a"   # the app behind sees the key's tenant
    for resp, why in ((wrong, "unknown API key"), (claim_only, "not trusted"), (none, "no credential")):
        assert resp.status_code == 401 and why in resp.json()["error"]
        assert resp.headers["www-authenticate"].startswith("Bearer")
    # refused callers never reach Redis: rotating names or keys creates no bucket
    assert sorted(k.decode() for k in r.scan_iter("gpuas:bucket:*")) == ["gpuas:bucket:a", "gpuas:bucket:b"]


@pytest.mark.services
def test_x_tenant_only_from_trusted_proxies_and_only_for_known_tenants(r, redis_url):
    ident = Identity({key_digest(KEY_A): "a"}, trusted_proxies=["10.1.0.0/16", "127.0.0.1"])
    app = gateway(redis_url, ident)
    via_proxy, unknown = calls(app, [{"X-Tenant": "a"}, {"X-Tenant": "zz-rotated"}], client=("10.1.2.3", 5000))
    assert via_proxy.status_code == 200 and via_proxy.json()["tenant"] == "a"
    assert unknown.status_code == 401 and "unknown tenant" in unknown.json()["error"]
    [outside] = calls(app, [{"X-Tenant": "a"}], client=("10.2.0.1", 5000))
    assert outside.status_code == 401
    [no_opt_in] = calls(gateway(redis_url, Identity({key_digest(KEY_A): "a"})), [{"X-Tenant": "a"}],
                        client=("127.0.0.1", 1))
    assert no_opt_in.status_code == 401


@pytest.mark.services
def test_keys_published_by_the_daemon_are_used_and_revocation_takes_effect(r, redis_url):
    cfg = parse_config({"actuators": {"enabled": ["redis"], "dry_run": False, "redis": {"url": redis_url}},
                        "gateway": {"keys": [{"tenant": "a", "key": KEY_A},
                                             {"tenant": "b", "key_sha256": key_digest(KEY_B)}]}})
    from daemon.service.wiring import _actuators

    [act] = _actuators(cfg, None)
    rep = act.apply(make_plan({"a": RateLimit(100, 100, 0, "x")}))
    assert rep.ok and any("API key digests" in a for a in rep.actions)
    stored = {k.decode(): v.decode() for k, v in r.hgetall(keys_key("gpuas")).items()}
    assert stored == {key_digest(KEY_A): "a", key_digest(KEY_B): "b"}
    assert KEY_A.encode() not in b"".join(r.hkeys(keys_key("gpuas")))  # only digests leave the daemon
    assert not any("API key" in a for a in act.apply(make_plan({})).actions)  # unchanged: nothing written

    gw_cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys_refresh_s": 0.01})

    async def go():
        app = gateway(redis_url, Identity.from_config(gw_cfg, aredis.Redis.from_url(redis_url)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            before = [await c.get("/", headers={"X-API-Key": k}) for k in (KEY_A, KEY_B)]
            # the daemon's config now lists only b's key: a is revoked at the gateway's next refresh
            RedisLimitsActuator(redis_url, dry_run=False, api_keys={key_digest(KEY_B): "b"}).apply(make_plan({}))
            await asyncio.sleep(0.05)
            after = [await c.get("/", headers={"X-API-Key": k}) for k in (KEY_A, KEY_B)]
        return before, after

    (a, b), (a2, b2) = asyncio.run(go())
    assert (a.status_code, a.json()["tenant"], b.status_code, b.json()["tenant"]) == (200, "a", 200, "b")
    assert a2.status_code == 401 and b2.status_code == 200


def test_the_key_refresher_stops_when_cancelled_even_if_a_read_swallows_the_cancellation():
    """Not a claim about Redis (that is the test above, on a real server): a client library may end a cancelled
    read with an error or an answer instead of letting the CancelledError through. The refresher then has to stop
    on its own: in CI it went on re-reading every keys_refresh_s and asyncio.run's shutdown waited for it until
    the 300 s test timeout."""
    class Swallowing:   # a read that turns its cancellation into an answer (until told to let it through)
        reads, let_through = 0, False

        async def hgetall(self, key):
            Swallowing.reads += 1
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if Swallowing.let_through:
                    raise
                return {}

    async def go():
        ident = Identity({}, client=Swallowing(), refresh_s=0.01)
        task = asyncio.get_running_loop().create_task(ident._refresh_forever(asyncio.Event()))
        await asyncio.sleep(0.05)            # in its first read
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), 2)
            return True
        except TimeoutError:                 # still re-reading: end it so that this test fails instead of hanging
            Swallowing.let_through = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return False

    assert asyncio.run(go()), "the refresher kept re-reading after it was cancelled"
    assert Swallowing.reads == 1


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(GatewayConfigError, match=r"trusted_proxies: .*not an address"):
        parse_gateway_config({"trusted_proxies": ["10.0.0.0/33"]})
    with pytest.raises(GatewayConfigError, match=r"keys.0.key: .*at least 16"):
        parse_gateway_config({"keys": [{"tenant": "a", "key": "short"}]})
    with pytest.raises(GatewayConfigError, match=r"keys.0: .*exactly one of key"):
        parse_gateway_config({"keys": [{"tenant": "a", "key": KEY_A, "key_sha256": key_digest(KEY_A)}]})
    with pytest.raises(GatewayConfigError, match=r"keys.1: the same key is given to tenants 'a' and 'b'"):
        parse_gateway_config({"keys": [{"tenant": "a", "key": KEY_A}, {"tenant": "b", "key": KEY_A}]})
    with pytest.raises(GatewayConfigError, match=r"keys.0.key_file: cannot read"):
        parse_gateway_config({"keys": [{"tenant": "a", "key_file": str(tmp_path / "nope")}]})
    with pytest.raises(GatewayConfigError, match=r"fail_opn: unknown key"):
        parse_gateway_config({"fail_opn": True})
    with pytest.raises(ConfigError, match=r"gateway.keys.0.key_sha256"):
        parse_config({"gateway": {"keys": [{"tenant": "a", "key_sha256": "xyz"}]}})
    (tmp_path / "k").write_text(KEY_A + "\n")
    cfg = parse_gateway_config({"keys": [{"tenant": "a", "key_file": str(tmp_path / "k")}]})
    assert Identity.from_config(cfg).tenant_for_key(KEY_A) == "a"


# ---- packaging: the gateway is installable without the daemon's heavy dependencies ----------------------------

def _closure(extras: set[str]) -> set[str]:
    """Distributions `gpu-autoscaler[extras]` pulls in, from pyproject and the installed packages' metadata."""
    import tomllib

    proj = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(x) for x in proj["dependencies"]]
    for e in extras:
        todo += [Requirement(x) for x in proj["optional-dependencies"].get(e, [])]
    seen: set[str] = set()
    env = default_environment()
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
            continue
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for sub in map(Requirement, reqs):
            if sub.marker is None or any(sub.marker.evaluate({**env, "extra": x}) for x in [""] + sorted(req.extras)):
                todo.append(sub)
    return seen


def test_gateway_extra_pulls_no_heavy_dependency():
    gw = _closure({"gateway"})
    assert {"redis", "starlette", "pydantic", "uvicorn"} <= gw
    assert not (gw & HEAVY), gw & HEAVY
    assert {"torch", "statsmodels", "kubernetes"} <= _closure({"daemon"})


def test_fresh_venv_resolution_of_the_gateway_extra(tmp_path):
    """pip's own resolver, in a fresh venv, dry run: what `pip install .[gateway]` would install."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # ensurepip: no network needed
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--quiet", "--report",
                          str(report), f"{REPO}[gateway]"], env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    names = {i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(report.read_text())["install"]}
    assert {"redis", "starlette", "uvicorn", "gpu-autoscaler"} <= names
    assert not (names & HEAVY), names & HEAVY


def test_gateway_module_imports_nothing_heavy():
    code = ("import sys, gateway.app, gateway.contract, gateway.keys; "
            f"bad = sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules); print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


_BLOCK_OUTSIDE = """
import importlib.abc, importlib.metadata as md, sys
owners, allowed = md.packages_distributions(), set(sys.argv[1].split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.split(".")[0])
        if dists and not any(d.lower().replace("_", "-") in allowed for d in dists):
            raise ImportError("not in a gateway-only install: " + name)
sys.meta_path.insert(0, Block())
from gateway.app import build_app, main
from gateway.config import parse_gateway_config
build_app(parse_gateway_config({"upstream": "http://127.0.0.1:1", "degrade": {"cache": True,
                                "cheaper_upstream": "http://127.0.0.1:2"}}))
import uvicorn
print("loaded", sorted({m.split(".")[0] for m in sys.modules}))
"""


def test_the_gateway_loads_and_builds_with_nothing_but_its_extra():
    """Stronger than the sys.modules check: any module of a distribution outside `gpu-autoscaler[gateway]`'s
    closure fails to import (as in a gateway-only install), and the module still loads, builds the whole app
    (cache and cheaper upstream included) and finds its ASGI server."""
    allowed = _closure({"gateway"}) | {"gpu-autoscaler", "setuptools", "pip"}
    res = subprocess.run([sys.executable, "-c", _BLOCK_OUTSIDE, ",".join(sorted(allowed))], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = set(eval(res.stdout.split("loaded", 1)[1]))
    assert not loaded & (HEAVY | {"jinja2", "prometheus_client", "sdnotify", "pynvml"}), loaded & HEAVY


def test_cli_without_the_daemon_extra_says_what_to_install(monkeypatch, capsys):
    import daemon.entry as entry

    monkeypatch.setattr(entry, "installed", lambda dist: dist not in ("torch", "statsmodels"))
    with pytest.raises(SystemExit) as ex:
        entry.main()
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "missing: torch, statsmodels" in err and "pip install 'gpu-autoscaler[daemon]'" in err


def test_the_daemons_dependency_check_is_the_daemon_extra_of_the_package_metadata():
    import tomllib

    import daemon.entry as entry

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["daemon"]
    names = [re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group(0) for r in extra]
    assert entry.daemon_requirements() == names  # the installed metadata is the extra, in its order
    assert entry.missing_daemon_modules() == []   # and this install has all of it


# ---- degrade path (#14.5): a cached answer or a cheaper upstream instead of a bare 429 ----------------------

def _tight(r, *tenants):
    """One request per tenant, then over limit (the bucket refills in ~1000 s)."""
    for t in tenants:
        r.hset(f"gpuas:limit:{t}", mapping={"rate": 0.001, "burst": 1, "reason": "cluster load 91%: test limit"})


def _degrade_gateway(redis_url, **degrade):
    counter = {"n": 0}

    async def model(request):
        counter["n"] += 1
        body = (await request.body()).decode()
        headers = {"cache-control": "no-store"} if request.url.path == "/private" else {}
        return JSONResponse({"answer": f"{request.url.path}#{counter['n']}", "echo": body}, headers=headers)

    app = Starlette(routes=[Route("/{p:path}", model, methods=["GET", "HEAD", "POST"])])
    cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys": [{"tenant": "a", "key": KEY_A},
                                                                      {"tenant": "b", "key": KEY_B}],
                                "keys_from_redis": False, "degrade": degrade})
    from gateway.app import build_app

    return (lambda: build_app(cfg, app)), counter


def _run(make_app, reqs):
    """The requests, in order, through a gateway built inside this event loop (its Redis client is bound to it)."""

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app()), base_url="http://gw") as c:
            return [await c.request(m, u, headers=h, content=b) for m, u, h, b in reqs]

    return asyncio.run(go())


A = {"X-API-Key": KEY_A}
B = {"X-API-Key": KEY_B}


@pytest.mark.services
def test_degrade_is_off_by_default(r, redis_url):
    _tight(r, "a")
    app, _ = _degrade_gateway(redis_url)
    first, second = _run(app, [("GET", "/q?x=1", A, None)] * 2)
    assert first.status_code == 200 and second.status_code == 429 and "x-degraded" not in second.headers


@pytest.mark.services
def test_over_limit_answered_from_the_cache_of_an_identical_idempotent_request(r, redis_url):
    _tight(r, "a", "b")
    app, counter = _degrade_gateway(redis_url, cache=True)
    fresh, cached, other_path, other_tenant_first, other_tenant = _run(app, [
        ("GET", "/q?x=1", A, None),
        ("GET", "/q?x=1", A, None),     # over limit: the same answer, from the cache
        ("GET", "/q?x=2", A, None),     # over limit, never seen: 429
        ("GET", "/other", B, None),     # b's one allowed request
        ("GET", "/q?x=1", B, None),     # over limit: a's cached answer is not b's
    ])
    assert fresh.status_code == 200 and "x-degraded" not in fresh.headers
    assert cached.status_code == 200 and cached.headers["x-degraded"] == "cache"
    assert cached.json() == fresh.json() and counter["n"] == 2            # the model was not asked again
    assert "test limit" in cached.headers["x-ratelimit-reason"] and int(cached.headers["age"]) >= 0
    assert other_path.status_code == 429 and other_tenant_first.status_code == 200
    assert other_tenant.status_code == 429

    r.delete("gpuas:bucket:a")  # a fresh bucket: one more allowed request
    private = _run(app, [("GET", "/private", A, None)] * 2)                              # no-store: never cached
    assert [x.status_code for x in private] == [200, 429]
    r.delete("gpuas:bucket:a")
    posts = _run(app, [
        ("POST", "/gen", {**A, "Idempotency-Key": "k1"}, b"prompt"),
        ("POST", "/gen", {**A, "Idempotency-Key": "k1"}, b"prompt"),                    # identical: cached
        ("POST", "/gen", {**A, "Idempotency-Key": "k1"}, b"other prompt"),              # other body: 429
        ("POST", "/gen", A, b"prompt"),                                                 # no key: not idempotent
    ])
    assert [x.status_code for x in posts] == [200, 200, 429, 429]
    assert posts[1].headers["x-degraded"] == "cache" and "x-degraded" not in posts[0].headers
    assert posts[1].json() == posts[0].json() == {"answer": f"/gen#{counter['n']}", "echo": "prompt"}


@pytest.mark.services
def test_a_body_over_the_cache_cap_reaches_the_app_whole_and_is_not_cached(r, redis_url):
    _tight(r, "a")
    app, _ = _degrade_gateway(redis_url, cache=True, cache_max_bytes=16)
    big = b"x" * 5000
    first, second = _run(app, [("POST", "/gen", {**A, "Idempotency-Key": "k"}, big)] * 2)
    assert first.status_code == 200 and first.json()["echo"] == big.decode()   # nothing lost on the way
    assert second.status_code == 429                                            # too big to keep: not cached


class _ServedHTTP:
    """A real HTTP server on 127.0.0.1, in a thread, answering with a handler class until close()."""

    def _serve(self, handler):
        import http.server
        import threading

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Upstream(_ServedHTTP):
    """A real HTTP server on 127.0.0.1 (a thread) that names itself in each answer and echoes the body."""

    def __init__(self, name):
        import http.server

        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                n = int(self.headers.get("content-length") or 0)
                body = json.dumps({"upstream": name, "path": self.path, "echo": self.rfile.read(n).decode(),
                                   "tenant": self.headers.get("x-tenant")}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                outer.hits += 1

            do_GET = do_POST = _answer

            def log_message(self, *a):
                pass

        self.hits = 0
        self._serve(H)


@pytest.mark.services
def test_standalone_gateway_routes_over_limit_requests_to_the_cheaper_upstream(r, redis_url, tmp_path):
    from tests.conftest import free_port
    from tests.support.services import stop, wait_for

    main_up, cheap_up = _Upstream("main"), _Upstream("cheap")
    port = free_port()
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f'upstream = "{main_up.url}"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
                   f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n[degrade]\ncheaper_upstream = "{cheap_up.url}"\n')
    _tight(r, "a")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(cfg), "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(base + "/", timeout=1).status_code == 401, what="gateway")
        first = httpx.post(base + "/v1/gen?m=1", headers=A, content=b"hello")
        second = httpx.post(base + "/v1/gen?m=1", headers=A, content=b"hello again")
        spoofed = httpx.get(base + "/", headers={"X-Tenant": "a"})
    finally:
        stop(proc)
        main_up.close()
        cheap_up.close()
    log = proc.stdout.read().decode()
    assert first.status_code == 200 and first.json() == {"upstream": "main", "path": "/v1/gen?m=1", "echo": "hello",
                                                         "tenant": "a"}
    assert "x-degraded" not in first.headers
    assert second.status_code == 200 and second.headers["x-degraded"] == "cheaper-upstream"
    assert second.json()["upstream"] == "cheap" and second.json()["echo"] == "hello again"
    assert "test limit" in second.headers["x-ratelimit-reason"]
    assert spoofed.status_code == 401 and (main_up.hits, cheap_up.hits) == (1, 1)
    assert "a over limit, routed to the cheaper upstream" in log
    assert "HTTP Request:" not in log  # httpx does not log every proxied URL (query strings included) at INFO


def test_standalone_gateway_config_error_is_one_line(tmp_path):
    cfg = tmp_path / "gateway.toml"
    cfg.write_text('[degrade]\ncache = "yes please"\n')
    res = subprocess.run([sys.executable, "-m", "gateway", "--config", str(cfg)], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "degrade.cache" in res.stderr


def test_check_config_refuses_an_unreadable_gateway_key_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[server]\nenabled = false\n[[gateway.keys]]\ntenant = "a"\nkey_file = "{tmp_path / "missing"}"\n')
    res = subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "check-config"], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "gateway.keys.0.key_file: cannot read" in res.stderr, res.stderr


# ---- second review (h13r): websockets, the stand-alone proxy, published garbage, small buckets -------------

@pytest.mark.services
def test_websocket_upgrades_need_a_credential_and_a_token_too(r, redis_url):
    """A websocket scope goes through identity and the bucket like a request (it used to pass untouched, so the
    app behind believed any client's own X-Tenant)."""
    from starlette.routing import WebSocketRoute
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    async def ws(websocket):
        await websocket.accept()
        await websocket.send_json({"tenant": websocket.headers.get("x-tenant")})
        await websocket.close()

    _tight(r, "a")  # one connection, then over limit
    app = RateLimitMiddleware(Starlette(routes=[WebSocketRoute("/ws", ws)]),
                              AsyncTokenBucket(aredis.Redis.from_url(redis_url)), Identity({key_digest(KEY_A): "a"}))
    with TestClient(app) as c:
        for headers in ({}, {"X-Tenant": "a"}, {"X-API-Key": "not-a-key-of-anyone-0000"}):
            with pytest.raises(WebSocketDisconnect) as ex:
                with c.websocket_connect("/ws", headers=headers) as s:
                    s.receive_json()
            assert ex.value.code == 1008, headers
        with c.websocket_connect("/ws", headers={"X-API-Key": KEY_A, "X-Tenant": "b"}) as s:
            assert s.receive_json() == {"tenant": "a"}   # the key's tenant, not the claimed one
        with pytest.raises(WebSocketDisconnect) as ex:
            with c.websocket_connect("/ws", headers={"X-API-Key": KEY_A}) as s:
                s.receive_json()
        assert ex.value.code == 1013 and "test limit" in ex.value.reason
    assert sorted(k.decode() for k in r.scan_iter("gpuas:bucket:*")) == ["gpuas:bucket:a"]


@pytest.mark.services
def test_garbage_in_the_published_key_map_is_skipped_not_a_500(r, redis_url):
    """One malformed entry in `<prefix>:apikeys` (not hex, not UTF-8) must not break every request."""
    r.hset(keys_key("gpuas"), mapping={"z" * 64: "evil", key_digest(KEY_A): "a", key_digest(KEY_B): b"\xff\xfe"})
    cfg = parse_gateway_config({"redis": {"url": redis_url}})

    async def go():
        app = gateway(redis_url, Identity.from_config(cfg, aredis.Redis.from_url(redis_url)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return [await c.get("/", headers={"X-API-Key": k}) for k in (KEY_A, KEY_B)]

    a, b = asyncio.run(go())
    assert a.status_code == 200 and a.json()["tenant"] == "a"
    assert b.status_code == 401


@pytest.mark.services
def test_a_bucket_smaller_than_one_request_still_admits_the_rate(r, redis_url):
    """rate 0.25 req/s with burst_seconds 2 gives burst 0.5: the bucket must still admit one request every 4 s
    (it used to refuse every request forever while Retry-After promised 2 s)."""
    from gateway.bucket import TokenBucket
    from gateway.contract import bucket_key

    r.hset("gpuas:limit:slow", mapping={"rate": 0.25, "burst": 0.5, "reason": "fixed limit for slow: 0.25 req/s"})
    tb = TokenBucket(r)
    first, second = tb.acquire("slow"), tb.acquire("slow")
    assert first.allowed and not second.allowed
    assert 3.9 <= second.retry_after_s <= 4.0
    ts = float(r.hget(bucket_key("gpuas", "slow"), "ts"))
    r.hset(bucket_key("gpuas", "slow"), "ts", ts - second.retry_after_s - 0.01)  # as if that long had passed
    assert tb.acquire("slow").allowed


def test_a_closed_limiter_or_a_dead_upstream_does_not_tell_the_client_where_they_are():
    from gateway.proxy import ProxyApp
    from tests.conftest import free_port

    dead_port = free_port()

    async def go():
        dead = aredis.Redis(host="127.0.0.1", port=dead_port, socket_connect_timeout=0.2)
        closed = RateLimitMiddleware(Starlette(routes=[Route("/", _echo)]), AsyncTokenBucket(dead),
                                     Identity({key_digest(KEY_A): "a"}), fail_open=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=closed), base_url="http://gw") as c:
            limiter = await c.get("/", headers={"X-API-Key": KEY_A})
        proxy = ProxyApp(f"http://127.0.0.1:{dead_port}")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy), base_url="http://gw") as c:
            upstream = await c.get("/x")
        return limiter, upstream

    limiter, upstream = asyncio.run(go())
    assert limiter.status_code == 503 and limiter.json() == {"error": "rate limiter unavailable"}
    assert upstream.status_code == 502 and upstream.json() == {"error": "upstream unavailable"}
    assert str(dead_port) not in limiter.text + upstream.text


class _RawUpstream(_ServedHTTP):
    """A real HTTP server that answers with the raw request line's target, gzips /gz when asked, sets a cookie."""

    def __init__(self):
        import gzip
        import http.server

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"target": self.path, "tenant": self.headers.get("x-tenant"),
                                   "forwarded_for": self.headers.get("x-forwarded-for")}).encode() * (
                    20 if self.path.startswith("/gz") else 1)
                self.send_response(200)
                if self.path.startswith("/gz") and "gzip" in (self.headers.get("accept-encoding") or ""):
                    body = gzip.compress(body)
                    self.send_header("content-encoding", "gzip")
                self.send_header("content-type", "application/json")
                self.send_header("set-cookie", "session=s1; Path=/")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self._serve(H)


@pytest.fixture(scope="module")
def standalone(redis_url, tmp_path_factory):
    """`gpu-autoscaler-gateway` (real uvicorn) in front of a real HTTP upstream; X-Tenant trusted from 10.9.9.9."""
    from tests.conftest import free_port
    from tests.support.services import stop, wait_for

    up = _RawUpstream()
    port = free_port()
    cfg = tmp_path_factory.mktemp("gw") / "gateway.toml"
    cfg.write_text(f'upstream = "{up.url}"\nkeys_from_redis = false\ntrusted_proxies = ["10.9.9.9"]\n'
                   f'[redis]\nurl = "{redis_url}"\n[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(cfg), "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(base + "/", timeout=1).status_code == 401, what="gateway")
        yield base
    finally:
        stop(proc)
        up.close()


@pytest.mark.services
def test_standalone_trusts_x_tenant_by_the_tcp_peer_not_by_x_forwarded_for(standalone):
    """A client on 127.0.0.1 claiming to be the trusted proxy 10.9.9.9 in X-Forwarded-For is not believed
    (uvicorn's proxy-header rewriting made scope["client"] whatever the header said)."""
    spoof = httpx.get(standalone + "/", headers={"X-Tenant": "a", "X-Forwarded-For": "10.9.9.9"})
    assert spoof.status_code == 401


# r: the module's Redis, flushed, so no limit another test left (on this xdist worker) answers 429
@pytest.mark.services
def test_standalone_forwards_the_path_as_sent(r, standalone):
    """Percent-escapes reach the upstream unchanged: %2F is not a new path segment, %3F and %23 are no query
    or fragment, and the real query survives (it used to arrive as /x/y?z=1 with ?q=1 lost)."""
    resp = httpx.get(standalone + "/x%2Fy%3Fz=1%23w?q=1", headers=A)
    assert resp.status_code == 200 and resp.json()["target"] == "/x%2Fy%3Fz=1%23w?q=1"


# r: the module's Redis, flushed, so no limit another test left (on this xdist worker) answers 429
@pytest.mark.services
def test_standalone_passes_compressed_answers_and_cookies_through(r, standalone):
    """The upstream's gzip body arrives as sent, with its Content-Encoding (httpx used to decode it and the
    header still said gzip, so clients could not read it), and Set-Cookie is not dropped."""
    resp = httpx.get(standalone + "/gz", headers={**A, "Accept-Encoding": "gzip"})
    assert resp.status_code == 200 and resp.headers["content-encoding"] == "gzip"
    assert resp.text.startswith('{"target": "/gz"') and resp.cookies.get("session") == "s1"


@pytest.mark.services
def test_standalone_429_with_a_reason_holding_a_line_break(r, standalone):
    """A reason is free text (a config tenant's name goes into `fixed limit for NAME`); a line break in it made
    the real server (h11) refuse the header and answer 500 instead of the 429."""
    r.hset("gpuas:limit:a", mapping={"rate": 0.001, "burst": 1,
                                     "reason": "fixed limit for a\r\nX-Evil: 1: 0.001 req/s"})
    first = httpx.get(standalone + "/", headers=A)
    second = httpx.get(standalone + "/", headers=A)
    assert first.status_code == 200 and second.status_code == 429
    assert second.headers["x-ratelimit-reason"] == "fixed limit for a  X-Evil: 1: 0.001 req/s"
    assert "x-evil" not in second.headers and second.json()["reason"].startswith("fixed limit for a\r\n")


@pytest.mark.services
def test_an_unlimited_or_garbled_published_limit_is_a_decision_not_a_script_error(r, redis_url):
    """`high = inf` passes the daemon's config and is published as rate=inf, burst=inf; the script then failed
    (PEXPIRE of NaN), so every such request went through the fail-open path marked degraded (or got a 503 with
    fail_open = false). inf is unlimited; NaN or a negative value falls back to the default bucket."""
    r.hset("gpuas:limit:a", mapping={"rate": "inf", "burst": "inf", "reason": "unlimited"})
    r.hset("gpuas:limit:b", mapping={"rate": "nan", "burst": "-5", "reason": "garbled"})
    app = gateway(redis_url, Identity({key_digest(KEY_A): "a", key_digest(KEY_B): "b"}), fail_open=False)
    a1, a2, b1 = calls(app, [A, A, B])
    for resp in (a1, a2, b1):
        assert resp.status_code == 200 and "x-ratelimit-degraded" not in resp.headers, resp.text
    assert a2.headers["x-ratelimit-limit"] == "inf"
    assert b1.headers["x-ratelimit-limit"] == "100" and b1.headers["x-ratelimit-remaining"] == "199"  # the default


@pytest.mark.services
def test_a_cached_answer_is_only_given_to_a_request_that_accepts_its_encoding(r, redis_url):
    """The cache identity had Accept but not Accept-Encoding: a gzip answer cached for one client was the
    over-limit answer for a client that asked for identity."""
    from gateway.app import build_app
    from gateway.proxy import ProxyApp

    up = _RawUpstream()
    _tight(r, "a")
    cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys": [{"tenant": "a", "key": KEY_A}],
                                "keys_from_redis": False, "degrade": {"cache": True}})
    try:
        gz, plain = _run(lambda: build_app(cfg, ProxyApp(up.url)),
                         [("GET", "/gz", {**A, "Accept-Encoding": "gzip"}, None),
                          ("GET", "/gz", {**A, "Accept-Encoding": "identity"}, None)])
    finally:
        up.close()
    assert gz.status_code == 200 and gz.headers["content-encoding"] == "gzip"
    assert plain.status_code == 429 and "content-encoding" not in plain.headers


def test_a_limiter_outage_is_logged_once_not_per_request(caplog):
    """Fail-open let requests through without a single log line (only the response header said so); now one
    warning, not one per request."""
    import logging

    from gateway.bucket import limiter_client
    from tests.conftest import free_port

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.gateway")
    # the client the gateway builds: it fails at once (redis-py's default retries with backoff took 3-4 s a
    # request, so three requests could straddle the 10 s between two warnings)
    dead = limiter_client(f"redis://127.0.0.1:{free_port()}")
    app = RateLimitMiddleware(Starlette(routes=[Route("/", _echo)]), AsyncTokenBucket(dead),
                              Identity({key_digest(KEY_A): "a"}))
    responses = calls(app, [A, A, A])
    assert all(r.status_code == 200 and r.headers["x-ratelimit-degraded"] == "1" for r in responses)
    lines = [r.getMessage() for r in caplog.records if "rate limiter unavailable" in r.getMessage()]
    assert len(lines) == 1 and "let through" in lines[0]


@pytest.mark.services
def test_a_cached_answer_is_keyed_by_the_path_as_sent(r, redis_url):
    """The proxy sends /x%2Fy and /x/y upstream as two different targets; the cache keyed both by the decoded
    path, so one's answer was the over-limit answer for the other."""
    from gateway.app import build_app
    from gateway.proxy import ProxyApp

    up = _RawUpstream()
    _tight(r, "a")
    cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys": [{"tenant": "a", "key": KEY_A}],
                                "keys_from_redis": False, "degrade": {"cache": True}})
    try:
        escaped, plain = _run(lambda: build_app(cfg, ProxyApp(up.url)),
                              [("GET", "/x%2Fy", A, None), ("GET", "/x/y", A, None)])
    finally:
        up.close()
    assert escaped.status_code == 200 and escaped.json()["target"] == "/x%2Fy"
    assert plain.status_code == 429


@pytest.mark.services
def test_concurrent_requests_share_one_read_of_the_published_keys(r, redis_url):
    """When the refresh was due, every request in flight read `<prefix>:apikeys` itself (50 requests, 50
    HGETALLs); one read serves them all."""
    r.hset(keys_key("gpuas"), key_digest(KEY_A), "a")
    cfg = parse_gateway_config({"redis": {"url": redis_url}})

    async def go():
        app = gateway(redis_url, Identity.from_config(cfg, aredis.Redis.from_url(redis_url)))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            return await asyncio.gather(*[c.get("/", headers=A) for _ in range(50)])

    r.config_resetstat()
    responses = asyncio.run(go())
    assert all(x.status_code == 200 for x in responses)
    assert r.info("commandstats")["cmdstat_hgetall"]["calls"] == 1


@pytest.mark.services
def test_a_trusted_proxy_may_pass_the_clients_own_authorization_header_on(r, redis_url):
    """An authenticating proxy in front typically forwards the client's `Authorization` (the token it checked)
    with its X-Tenant; that header is no gateway key, and the request was refused 401 "unknown API key".
    From a trusted proxy, X-Tenant now decides when the Authorization header holds no gateway key; from
    anywhere else an unknown key stays a 401, and a valid key still names its own tenant."""
    ident = Identity({key_digest(KEY_A): "a", key_digest(KEY_B): "b"}, trusted_proxies=["10.1.0.0/16"])
    app = gateway(redis_url, ident)
    jwt = {"Authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "X-Tenant": "a"}
    proxied, keyed = calls(app, [jwt, {**B, "X-Tenant": "a"}], client=("10.1.2.3", 5000))
    assert proxied.status_code == 200 and proxied.json()["tenant"] == "a"
    assert keyed.status_code == 200 and keyed.json()["tenant"] == "b"
    [outside] = calls(app, [jwt], client=("10.2.0.1", 5000))
    assert outside.status_code == 401 and "unknown API key" in outside.json()["error"]


def test_an_upstream_that_is_not_an_http_url_is_a_config_error():
    """`upstream = "localhost:8000"` (no scheme) was accepted and every request became a 502 at run time."""
    for key, where in (({"upstream": "localhost:8000"}, "upstream"), ({"upstream": "http://"}, "upstream"),
                       ({"degrade": {"cheaper_upstream": "ftp://small"}}, "degrade.cheaper_upstream")):
        with pytest.raises(GatewayConfigError, match=rf"{where}: .*http\(s\) URL"):
            parse_gateway_config(key)
    assert parse_gateway_config({"upstream": "https://model:8443/base"}).upstream == "https://model:8443/base"


@pytest.mark.services
def test_tenant_names_outside_latin1_stay_distinct_for_the_app_behind(r, redis_url):
    """X-Tenant was encoded latin-1 with "replace": tenants 团队 and 小组 both reached the app as "??", so an app
    that keys data by X-Tenant could not tell them apart. The header now carries the name's UTF-8 bytes."""
    key_c, key_d = "c-key-for-tenant-c-000003", "d-key-for-tenant-d-000004"
    app = gateway(redis_url, Identity({key_digest(key_c): "团队", key_digest(key_d): "小组"}))
    c, d = calls(app, [{"X-API-Key": key_c}, {"X-API-Key": key_d}])
    assert c.json()["state"] == "团队" and d.json()["state"] == "小组"
    assert c.json()["tenant"].encode("latin-1").decode("utf-8") == "团队"   # Starlette reads headers as latin-1
    assert d.json()["tenant"].encode("latin-1").decode("utf-8") == "小组"
    # and a trusted proxy names such a tenant in X-Tenant the same way (UTF-8 bytes)
    trusted = gateway(redis_url, Identity({key_digest(key_c): "团队"}, trusted_proxies=["10.1.0.0/16"]))
    [via] = calls(trusted, [{"X-Tenant": "团队".encode("utf-8")}], client=("10.1.2.3", 5000))
    assert via.status_code == 200 and via.json()["state"] == "团队"
