"""Gateway security review: crafted request targets (the proxy reached any host), the gateway's credentials
forwarded upstream, and the degrade cache serving one user's answer to another. Real uvicorn, real HTTP
servers and a real redis-server, all on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.app import build_app
from gateway.config import parse_gateway_config
from tests.conftest import REPO, free_port
from tests.support.services import stop, wait_for

KEY_A = "a-key-for-tenant-a-000001"
KEY_C = "c-key-for-tenant-c-000003"
ALICE = "alice-key-of-acme-0000001"
BOB = "bob-key-of-acme-000000002"


class Recorder:
    """A real HTTP server on 127.0.0.1 (threads) that records every TCP connection it accepts and every
    request (method, target as sent, headers), and answers with its name and the target."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.connections = 0
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.bodies: list[bytes] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    body = b""
                    while size := int(self.rfile.readline().split(b";")[0], 16):
                        body += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                else:
                    body = self.rfile.read(int(self.headers.get("content-length") or 0))
                outer.bodies.append(body)
                outer.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                body = json.dumps({"upstream": name, "target": self.path}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *a):
                pass

        class S(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request, client_address):
                outer.connections += 1
                return True

        self.server = S(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def standalone_gateway(tmp: Path, toml: str):
    """`python -m gateway` (real uvicorn) with this config; yields (base URL, port)."""
    port = free_port()
    cfg = tmp / f"gateway-{port}.toml"
    cfg.write_text(toml)
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(cfg), "--port", str(port)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(base + "/", timeout=5).status_code == 401, what="gateway")
        yield base, port
    finally:
        stop(proc)


def raw_get(port: int, target: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    """GET with exactly this request target, over a plain socket (HTTP clients normalise targets)."""
    head = b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    head += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head)
        while chunk := s.recv(65536):
            data += chunk
    return (int(data.split(b" ", 2)[1]) if data else 0), data


def _limit(r, tenant: str, rate="0.001", burst="1") -> None:
    r.hset(f"gpuas:limit:{tenant}", mapping={"rate": rate, "burst": burst, "reason": "test limit"})
    r.delete(f"gpuas:bucket:{tenant}")


# ---- 1. the proxy sent requests to any host the caller named ---------------------------------------------------

@pytest.mark.services
@pytest.mark.security
def test_a_crafted_request_target_never_reaches_another_host(r, redis_url, tmp_path):
    """`http://upstream` + `@127.0.0.1:VICTIM/x` was `http://upstream@127.0.0.1:VICTIM/x`: the upstream became a
    user name and any tenant reached any host and port the gateway can reach, with its own headers (API key
    included). Both upstreams (main, and cheaper for an over-limit tenant) get only origin-form targets now,
    and neither ever sees the gateway's credentials."""
    victim, main, cheap = Recorder("victim"), Recorder("main"), Recorder("cheap")
    _limit(r, "c")   # c: one request to the main upstream, then every one goes to the cheaper upstream
    toml = (f'upstream = "{main.url}"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n[[keys]]\ntenant = "c"\nkey = "{KEY_C}"\n'
            f'[degrade]\ncheaper_upstream = "{cheap.url}"\n')
    v = victim.port
    crafted = [f"@127.0.0.1:{v}/x", f"//127.0.0.1:{v}/x", f"http://127.0.0.1:{v}/x", f"/%2F%2F127.0.0.1:{v}/x",
               f"\\\\127.0.0.1:{v}/x", f"@127.0.0.1:{v}", f"@127.0.0.1:{v}/x?q=1", f"http://127.0.0.1:{v}",
               f".127.0.0.1:{v}/x", "*", f"/x/../../127.0.0.1:{v}/x", "/%2e%2e/admin"]
    try:
        with standalone_gateway(tmp_path, toml) as (base, port):
            first_c = httpx.get(base + "/v1/first", headers={"X-API-Key": KEY_C})
            answers = {}
            for creds in ({"Authorization": f"Bearer {KEY_A}"}, {"X-API-Key": KEY_A},
                          {"Authorization": f"Bearer {KEY_C}"}, {"X-API-Key": KEY_C}):
                for target in crafted:
                    answers[(target, tuple(creds.values()))] = raw_get(port, target.encode(), creds)
            normal = httpx.get(base + "/v1/x%2Fy?q=1&r=a%20b", headers={"Authorization": f"Bearer {KEY_A}"})
            degraded = httpx.get(base + "/v1/gen?m=2", headers={"Authorization": f"Bearer {KEY_C}"})
    finally:
        for s in (victim, main, cheap):
            s.close()
    assert victim.connections == 0 and victim.requests == [], victim.requests
    for (target, _), (status, data) in answers.items():
        if not target.startswith("/"):
            assert status == 400 and b"must be a path starting with /" in data, (target, data[:300])
    assert answers[("/%2e%2e/admin", (KEY_A,))][0] == 400                  # would leave an upstream path prefix
    # the targets that are paths went to the configured upstreams, as paths there (http.server itself
    # collapses a leading // to /)
    sent = [p for _, p, _ in main.requests + cheap.requests]
    assert f"/127.0.0.1:{v}/x" in sent and f"/%2F%2F127.0.0.1:{v}/x" in sent
    # a normal request still works, path and query as sent, to the main and (over limit) the cheaper upstream
    assert first_c.status_code == 200 and first_c.json() == {"upstream": "main", "target": "/v1/first"}
    assert normal.status_code == 200 and normal.json() == {"upstream": "main", "target": "/v1/x%2Fy?q=1&r=a%20b"}
    assert degraded.status_code == 200 and degraded.headers["x-degraded"] == "cheaper-upstream"
    assert degraded.json() == {"upstream": "cheap", "target": "/v1/gen?m=2"}
    # the gateway's own credentials end at the gateway
    assert main.requests and cheap.requests
    for _, path, headers in main.requests + cheap.requests:
        assert "authorization" not in headers and "x-api-key" not in headers, (path, headers)
        assert KEY_A not in json.dumps(headers) and KEY_C not in json.dumps(headers)


@pytest.mark.services
@pytest.mark.security
def test_an_upstream_path_prefix_is_kept_and_cannot_be_left(r, redis_url):
    """An upstream with a path (`http://model/base` or `.../base/`) gets `/base` + the request's path and query;
    dot segments (which httpx resolves, so `/../admin` would become `/admin`) are refused."""
    from gateway.proxy import ProxyApp

    up = Recorder("main")
    cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys": [{"tenant": "a", "key": KEY_A}],
                                "keys_from_redis": False})

    async def go(prefix: str):
        app = build_app(cfg, ProxyApp(up.url + prefix))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            ok = await c.get("/v1/x%2Fy?q=1", headers={"X-API-Key": KEY_A})
            root = await c.get("/", headers={"X-API-Key": KEY_A})
            # httpx's own client would resolve the dots before sending; the ASGI scope here is what uvicorn
            # gives for a raw `GET /v1/../../admin` (raw_path as sent)
            scope_dots = await c.get("/v1/%2E%2E/%2e%2e/admin", headers={"X-API-Key": KEY_A})
            return ok, root, scope_dots

    try:
        for prefix in ("/base", "/base/"):
            ok, root, dots = asyncio.run(go(prefix))
            assert ok.status_code == 200 and ok.json()["target"] == "/base/v1/x%2Fy?q=1"
            assert root.status_code == 200 and root.json()["target"] == "/base/"
            assert dots.status_code == 400
        assert all(p.startswith("/base/") for _, p, _ in up.requests) and len(up.requests) == 4
    finally:
        up.close()


def test_an_upstream_url_with_a_query_or_fragment_is_a_config_error():
    from gateway.keys import GatewayConfigError

    for bad in ("http://model:8000/base?x=1", "http://model:8000/#frag"):
        with pytest.raises(GatewayConfigError, match=r"upstream: .*no query or fragment"):
            parse_gateway_config({"upstream": bad})


# ---- 4. the degrade cache served one user's answer to another user of the same tenant --------------------------

def _profile_app():
    """An app that answers each caller with their own profile (by key and session cookie); the headers an
    answer carries are chosen by path."""
    per_path = {"/private": {"cache-control": "private, max-age=60"}, "/nostore": {"cache-control": "No-Store"},
                "/vary-cookie": {"vary": "Accept-Encoding, Cookie"}, "/vary-auth": {"vary": "authorization"},
                "/vary-star": {"vary": "*"}, "/vary-ok": {"vary": "accept-encoding, Accept"},
                "/public": {"cache-control": "public, max-age=60"}}

    async def profile(request):
        who = (request.headers.get("x-api-key") or request.headers.get("authorization") or "")[:5]
        return JSONResponse({"profile": who, "session": request.cookies.get("s"), "path": request.url.path,
                             "query": request.url.query}, headers=per_path.get(request.url.path, {}))

    return Starlette(routes=[Route("/{p:path}", profile)])


def _cached_gateway(redis_url, **degrade):
    # a generous Redis timeout: these tests are about what the cache keeps, not the breaker (a loaded box made a
    # put time out at the default 0.5 s, and the breaker then skipped the next ones)
    cfg = parse_gateway_config({"redis": {"url": redis_url, "timeout_s": 10}, "keys_from_redis": False,
                                "keys": [{"tenant": "acme", "key": ALICE}, {"tenant": "acme", "key": BOB},
                                         {"tenant": "a", "key": KEY_A}],
                                "degrade": {"cache": True, **degrade}})
    return lambda: build_app(cfg, _profile_app())


def _run(make_app, reqs):
    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app()), base_url="http://gw") as c:
            return [await c.get(u, headers=h) for u, h in reqs]

    return asyncio.run(go())


@pytest.mark.services
@pytest.mark.security
def test_two_users_of_one_tenant_never_get_each_others_cached_answer(r, redis_url):
    """Alice and Bob have keys of the same tenant: Alice's cached profile was Bob's over-limit answer (marked
    X-Degraded: cache). And one key used by two sessions (cookies) shared one answer too."""
    _limit(r, "acme")
    app = _cached_gateway(redis_url)
    alice, bob, alice_again, alice_bearer = _run(app, [
        ("/profile", {"X-API-Key": ALICE}),
        ("/profile", {"X-API-Key": BOB}),                      # over limit: no answer of Bob's is cached
        ("/profile", {"X-API-Key": ALICE}),                    # over limit: Alice's own answer
        ("/profile", {"Authorization": f"Bearer {ALICE}"}),    # same key, other header: not the same caller
    ])
    assert alice.status_code == 200 and alice.json()["profile"] == ALICE[:5]
    assert bob.status_code == 429 and ALICE[:5] not in bob.text and "x-degraded" not in bob.headers
    assert alice_again.status_code == 200 and alice_again.headers["x-degraded"] == "cache"
    assert alice_again.json() == alice.json()
    assert alice_bearer.status_code == 429

    _limit(r, "acme")
    s1, s2, s1_again, none = _run(app, [
        ("/me", {"X-API-Key": ALICE, "Cookie": "s=one"}),
        ("/me", {"X-API-Key": ALICE, "Cookie": "s=two"}),      # another session of the same key
        ("/me", {"X-API-Key": ALICE, "Cookie": "s=one"}),
        ("/me", {"X-API-Key": ALICE}),
    ])
    assert s1.status_code == 200 and s1.json()["session"] == "one"
    assert s2.status_code == 429 and "one" not in s2.text
    assert s1_again.status_code == 200 and s1_again.headers["x-degraded"] == "cache" and s1_again.json() == s1.json()
    assert none.status_code == 429


@pytest.mark.services
@pytest.mark.security
def test_private_no_store_and_vary_by_anything_else_answers_are_not_cached(r, redis_url):
    """`Cache-Control: private` and `Vary: Cookie` (or Authorization, or *) say an answer is about the one
    request that got it; the cache kept them (only `no-store` was honoured). Vary by Accept/Accept-Encoding
    (part of the cache key) and public answers are still kept."""
    app = _cached_gateway(redis_url)
    got = {}
    for path in ("/private", "/nostore", "/vary-cookie", "/vary-auth", "/vary-star", "/vary-ok", "/public"):
        _limit(r, "acme")
        got[path] = _run(app, [(path, {"X-API-Key": ALICE, "Cookie": "s=1"})] * 2)
    for path in ("/private", "/nostore", "/vary-cookie", "/vary-auth", "/vary-star"):
        first, second = got[path]
        assert (first.status_code, second.status_code) == (200, 429), path
    for path in ("/vary-ok", "/public"):
        first, second = got[path]
        assert second.status_code == 200 and second.headers["x-degraded"] == "cache", path
        assert second.json() == first.json()
    # nothing of the refused ones reached Redis
    stored = [k for k in r.hkeys("gpuas:rcache:acme") if k != b"#bytes"]
    assert len(stored) == 2


def _cache_state(r, tenant: str) -> tuple[int, int, int]:
    """(entries in the index, sum of the stored entries' sizes, the running total the script keeps)."""
    data = r.hgetall(f"gpuas:rcache:{tenant}")
    total = int(data.pop(b"#bytes", 0))
    return r.zcard(f"gpuas:rcache-idx:{tenant}"), sum(len(v) for v in data.values()), total


@pytest.mark.services
@pytest.mark.security
def test_a_tenant_varying_its_query_string_stays_under_its_cache_caps(r, redis_url):
    """Every distinct query was its own Redis key until its TTL: one tenant could fill the Redis that holds the
    buckets and the lease (and then the gateway failed open for everyone). Now a tenant holds at most
    cache_max_entries_per_tenant entries and cache_max_bytes_per_tenant bytes, the oldest evicted first."""
    _limit(r, "a", rate="inf", burst="inf")       # every request allowed (and so cached)
    app = _cached_gateway(redis_url)               # the defaults: 256 entries, 8 MiB
    answers = _run(app, [(f"/q?i={i}", {"X-API-Key": KEY_A}) for i in range(1000)])
    assert all(x.status_code == 200 for x in answers)
    cache_keys = sorted(k.decode() for k in r.scan_iter("gpuas:*cache*"))
    assert cache_keys == ["gpuas:rcache-idx:a", "gpuas:rcache:a"], cache_keys[:5]
    entries, size, total = _cache_state(r, "a")
    assert entries == 256 and size == total

    r.flushdb()
    _limit(r, "a", rate="inf", burst="inf")
    app = _cached_gateway(redis_url, cache_max_entries_per_tenant=500, cache_max_bytes_per_tenant=20_000,
                          cache_max_bytes=4096)
    _run(app, [(f"/q?i={i}", {"X-API-Key": KEY_A}) for i in range(1000)])
    entries, size, total = _cache_state(r, "a")
    assert size == total and 0 < size <= 20_000 and entries < 500   # the byte cap binds here
    # the newest answers are the ones kept: over limit, the last query is served from the cache, the first not
    _limit(r, "a")
    allowed, newest, oldest = _run(app, [("/other", {"X-API-Key": KEY_A}), ("/q?i=999", {"X-API-Key": KEY_A}),
                                         ("/q?i=0", {"X-API-Key": KEY_A})])
    assert allowed.status_code == 200
    assert newest.status_code == 200 and newest.headers["x-degraded"] == "cache" and newest.json()["query"] == "i=999"
    assert oldest.status_code == 429


@pytest.mark.services
def test_the_cache_can_live_in_its_own_redis(r, redis_url, tmp_path):
    """degrade.cache_redis_url: the cached answers never touch the Redis that holds the buckets."""
    import redis as sync_redis

    from tests.support.services import redis_server

    with redis_server(tmp_path) as (cache_url, _):
        _limit(r, "acme")
        fresh, cached = _run(_cached_gateway(redis_url, cache_redis_url=cache_url),
                             [("/profile", {"X-API-Key": ALICE})] * 2)
        other = sync_redis.Redis.from_url(cache_url)
        assert sorted(k.decode() for k in other.keys("*")) == ["gpuas:rcache-idx:acme", "gpuas:rcache:acme"]
    assert fresh.status_code == 200 and cached.headers["x-degraded"] == "cache" and cached.json() == fresh.json()
    assert not list(r.scan_iter("gpuas:*cache*"))


@pytest.mark.services
def test_a_cached_answer_expires_after_its_ttl(r, redis_url):
    """Entries of one tenant share one hash; each still ends after cache_ttl_s."""
    import time

    app = _cached_gateway(redis_url, cache_ttl_s=0.3)
    _limit(r, "acme")
    fresh, cached = _run(app, [("/profile", {"X-API-Key": ALICE})] * 2)
    time.sleep(0.4)
    [late] = _run(app, [("/profile", {"X-API-Key": ALICE})])
    assert fresh.status_code == 200 and cached.headers["x-degraded"] == "cache" and late.status_code == 429


def test_cache_caps_are_validated():
    from gateway.keys import GatewayConfigError

    with pytest.raises(GatewayConfigError, match=r"degrade: .*cache_max_bytes .* is larger than "
                                                 r"cache_max_bytes_per_tenant"):
        parse_gateway_config({"degrade": {"cache_max_bytes": 2000, "cache_max_bytes_per_tenant": 1000}})
    with pytest.raises(GatewayConfigError, match=r"degrade.cache_max_entries_per_tenant: "):
        parse_gateway_config({"degrade": {"cache_max_entries_per_tenant": 0}})
    with pytest.raises(GatewayConfigError, match=r"degrade.cache_redis_url: .*not a redis://"):
        parse_gateway_config({"degrade": {"cache_redis_url": "http://cache:6379"}})


@pytest.mark.services
def test_a_tenants_cache_that_lost_half_of_its_keys_starts_afresh(r, redis_url):
    """The entries and their index expire together; if Redis evicts (or someone deletes) one of them, the next
    store starts the tenant's cache afresh instead of failing on every request or leaving entries no cap sees."""
    _limit(r, "a", rate="inf", burst="inf")
    app = _cached_gateway(redis_url)
    _run(app, [(f"/q?i={i}", {"X-API-Key": KEY_A}) for i in range(3)])
    r.delete("gpuas:rcache-idx:a")
    [again] = _run(app, [("/q?i=9", {"X-API-Key": KEY_A})])
    assert again.status_code == 200
    assert _cache_state(r, "a")[0] == 1 and _cache_state(r, "a")[1] == _cache_state(r, "a")[2]
    r.hset("gpuas:rcache:a", "#bytes", 10**9)          # a running total that disagrees with the entries
    [more] = _run(app, [("/q?i=10", {"X-API-Key": KEY_A})])
    assert more.status_code == 200 and _cache_state(r, "a")[0] <= 1


# ---- request hygiene: header names, path parameters, X-Forwarded-For, the body's size ---------------------------

@pytest.mark.services
@pytest.mark.security
def test_a_header_name_with_an_underscore_never_reaches_the_upstream(r, redis_url, tmp_path):
    """`X_Tenant: b` went upstream beside the gateway's own `x-tenant: a`; a server that maps header names to
    CGI variables (HTTP_X_TENANT) reads both as X-Tenant, so a tenant could claim another. Names with an
    underscore are dropped; everything else still goes."""
    up = Recorder("main")
    toml = (f'upstream = "{up.url}"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    try:
        with standalone_gateway(tmp_path, toml) as (_, port):
            status, _ = raw_get(port, b"/v1/x", {"X-API-Key": KEY_A, "X_Tenant": "b", "x_api_key": "z",
                                                 "X-Custom": "kept"})
    finally:
        up.close()
    assert status == 200
    [(_, _, headers)] = up.requests
    assert not any("_" in k for k in headers), headers
    assert headers["x-tenant"] == "a" and headers["x-custom"] == "kept"


@pytest.mark.services
@pytest.mark.security
def test_a_path_parameter_is_refused_before_the_upstream(r, redis_url, tmp_path):
    """`/..;/admin` passed the dot-segment check, and Tomcat or Jetty strip `;params` before resolving the path:
    `/base/..;/admin` is `/admin` there. Any `;` in the path (escaped or not) is a 400 now."""
    up = Recorder("main")
    toml = (f'upstream = "{up.url}/base"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    try:
        with standalone_gateway(tmp_path, toml) as (_, port):
            refused = {t: raw_get(port, t, {"X-API-Key": KEY_A})[0]
                       for t in (b"/..;/admin", b"/v1/..;/..;/admin", b"/v1/x;jsessionid=1", b"/v1/%2e%2e%3b/admin",
                                 b"/v1/..%3B/admin")}
            ok = raw_get(port, b"/v1/x?a=b;c", {"X-API-Key": KEY_A})[0]   # a ; in the query is the query's
    finally:
        up.close()
    assert refused == dict.fromkeys(refused, 400)
    assert ok == 200 and [p for _, p, _ in up.requests] == ["/base/v1/x?a=b;c"]


@pytest.mark.services
@pytest.mark.security
def test_x_forwarded_for_gets_the_peer_and_a_clients_own_value_is_not_passed_on(r, redis_url, tmp_path):
    """A client's `X-Forwarded-For: 10.9.9.9` went upstream as it was, so an upstream that logs or limits by it
    saw whatever address the client chose. Now the peer is appended, and what came before is kept only from a
    trusted proxy; X-Real-IP and Forwarded from anyone else are dropped."""
    up = Recorder("main")
    base = (f'upstream = "{up.url}"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    spoof = {"X-API-Key": KEY_A, "X-Forwarded-For": "10.9.9.9", "X-Real-IP": "10.9.9.9", "Forwarded": "for=10.9.9.9"}
    try:
        with standalone_gateway(tmp_path, base) as (_, port):
            plain = raw_get(port, b"/v1/x", spoof)[0]
        with standalone_gateway(tmp_path, 'trusted_proxies = ["127.0.0.1/32"]\n' + base) as (_, port):
            proxied = raw_get(port, b"/v1/y", spoof)[0]
    finally:
        up.close()
    assert plain == proxied == 200
    [(_, _, untrusted), (_, _, trusted)] = up.requests
    assert untrusted["x-forwarded-for"] == "127.0.0.1"
    assert "x-real-ip" not in untrusted and "forwarded" not in untrusted
    assert trusted["x-forwarded-for"] == "10.9.9.9, 127.0.0.1" and trusted["x-real-ip"] == "10.9.9.9"


def raw_post(port: int, headers: dict[str, str], body: bytes, chunked: bool) -> tuple[int, bytes]:
    """POST `body` over a plain socket, with Content-Length or as one chunk of a chunked body."""
    head = b"POST /v1/gen HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    head += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())
    if chunked:
        data = head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    else:
        data = head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    return raw_exchange(port, data)


def raw_exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send these bytes as they are, read the answer to the end: (status, answer)."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                out += chunk
    return (int(out.split(b" ", 2)[1]) if out else 0), out


@pytest.mark.services
@pytest.mark.security
def test_a_request_body_over_max_body_bytes_is_refused_413(r, redis_url, tmp_path):
    """There was no limit: any tenant could stream gigabytes through the gateway. `max_body_bytes` now refuses a
    larger body with 413, declared in Content-Length or counted as a chunked body arrives; the upstream gets no
    whole request with it. A body within the limit still goes through."""
    up = Recorder("main")
    toml = (f'upstream = "{up.url}"\nkeys_from_redis = false\nmax_body_bytes = 1000\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    key = {"X-API-Key": KEY_A}
    try:
        with standalone_gateway(tmp_path, toml) as (_, port):
            sized = raw_post(port, key, b"x" * 1001, chunked=False)
            chunked = raw_post(port, key, b"y" * 5000, chunked=True)
            fits = raw_post(port, key, b"z" * 1000, chunked=False)
    finally:
        up.close()
    assert sized[0] == 413 and b"larger than 1000 bytes" in sized[1]
    assert chunked[0] == 413
    assert fits[0] == 200
    # only the one that fits reached the upstream as a request with its body
    assert [h.get("content-length") for _, _, h in up.requests if h.get("content-length")] == ["1000"]


@pytest.mark.services
@pytest.mark.security
def test_a_request_with_both_content_length_and_transfer_encoding_is_refused(r, redis_url, tmp_path):
    """uvicorn (h11) takes a request with both headers by its chunked body, as RFC 9112 says, and the proxy sent
    the client's Content-Length upstream beside the de-chunked body: the upstream read `hello` as the whole
    request and acted on it while the client had sent `hello world` (and the client got a 500). Such a request
    is a smuggling attempt or a broken client (RFC 9112 6.3: handle it as an error); it is a 400 now, and the
    upstream sees nothing. A plain chunked body still goes through whole."""
    up = Recorder("main")
    toml = (f'upstream = "{up.url}"\nkeys_from_redis = false\n[redis]\nurl = "{redis_url}"\n'
            f'[[keys]]\ntenant = "a"\nkey = "{KEY_A}"\n')
    both = (b"POST /v1/gen HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-API-Key: " + KEY_A.encode()
            + b"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    try:
        with standalone_gateway(tmp_path, toml) as (_, port):
            status, out = raw_exchange(port, both)
            time.sleep(0.3)   # an upstream request, had one been sent, is recorded by now
            smuggled = list(up.requests)
            chunked = raw_post(port, {"X-API-Key": KEY_A}, b"hello world", chunked=True)
    finally:
        up.close()
    assert status == 400, out
    assert smuggled == [], "the upstream got a request framed by the client's Content-Length"
    assert chunked[0] == 200 and len(up.requests) == 1 and up.bodies == [b"hello world"]


def test_max_body_bytes_defaults_to_a_few_mib_and_must_be_positive():
    from gateway.keys import GatewayConfigError

    assert parse_gateway_config({}).max_body_bytes == 8 * 1024 * 1024
    with pytest.raises(GatewayConfigError, match=r"max_body_bytes: "):
        parse_gateway_config({"max_body_bytes": 0})


@pytest.mark.services
def test_an_in_process_app_reading_a_chunked_body_past_the_limit_gives_413(r, redis_url):
    """The app behind the middleware reads the body itself (here Starlette's request.body()): past the limit its
    read fails, its own error answer is dropped, and the client gets the 413."""
    async def echo(request):
        return JSONResponse({"size": len(await request.body())})

    cfg = parse_gateway_config({"redis": {"url": redis_url}, "keys": [{"tenant": "a", "key": KEY_A}],
                                "keys_from_redis": False, "max_body_bytes": 100})

    async def chunks(n):
        for _ in range(n):
            yield b"x" * 40

    async def go():
        app = build_app(cfg, Starlette(routes=[Route("/e", echo, methods=["POST"])]))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            big = await c.post("/e", content=chunks(3), headers={"X-API-Key": KEY_A})
            small = await c.post("/e", content=chunks(2), headers={"X-API-Key": KEY_A})
            return big, small

    big, small = asyncio.run(go())
    assert big.status_code == 413 and small.status_code == 200 and small.json() == {"size": 80}
