"""The control plane and the gateways share one Redis with two ACL users (deploy/redis/users.acl): a gateway's
credential could write the lease, the operator's overrides, their audit and the API-key map. On a real
redis-server loaded with the shipped ACL file: the gateway's user is refused every control-plane write and still
does its job; the daemon's user does all of its own."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from daemon.actuators.redis_limits import RedisLimitsActuator
from daemon.config import ConfigError, parse_config
from daemon.ha.lease import RedisLease
from daemon.policy.types import Notification, Plan, PolicyMemory, RateLimit
from daemon.shadow.log import RedisShadowLog
from daemon.state.overrides import Overrides, OverridesUnavailable, RedisOverrideStore
from gateway.app import build_app
from gateway.config import parse_gateway_config
from gateway.contract import key_digest
from tests.conftest import REPO
from tests.support.services import redis_server

DAEMON_PW = "daemon-password-0000000001"
GATEWAY_PW = "gateway-password-000000001"
KEY_A = "a-key-for-tenant-a-000001"
SHIPPED = REPO / "deploy" / "redis" / "users.acl"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _sha(pw: str) -> str:
    return hashlib.sha256(pw.encode()).hexdigest()


def _with_passwords(text: str) -> str:
    return (text.replace("#REPLACE-WITH-SHA256-OF-THE-DAEMON-PASSWORD", "#" + _sha(DAEMON_PW))
                .replace("#REPLACE-WITH-SHA256-OF-THE-GATEWAY-PASSWORD", "#" + _sha(GATEWAY_PW)))


@contextlib.contextmanager
def acl_redis(tmp_path):
    """A real redis-server loaded with the shipped ACL file (its placeholders replaced by two passwords' hashes);
    yields (the daemon's URL, the gateway's URL, a URL naming no user)."""
    acl = tmp_path / "users.acl"
    acl.write_text(_with_passwords(SHIPPED.read_text()))
    with redis_server(tmp_path, aclfile=acl, ready_login=f"gpuas-daemon:{DAEMON_PW}") as (url, _):
        host = url.removeprefix("redis://")
        yield f"redis://gpuas-daemon:{DAEMON_PW}@{host}", f"redis://gpuas-gateway:{GATEWAY_PW}@{host}", url


def _plan(limits):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=100, load=0.5, high_pool=20, reservations={"a": 3},
                quotas={}, limits=limits, preemptions=(), notifications=(), stale=False, forecast_model="x",
                notes=(), memory=PolicyMemory())


def _app():
    async def hello(request):
        return JSONResponse({"tenant": request.headers.get("x-tenant")}, headers={"cache-control": "max-age=60"})

    return Starlette(routes=[Route("/{p:path}", hello)])


@pytest.mark.services
@pytest.mark.security
def test_a_gateways_redis_credential_cannot_write_the_control_plane(tmp_path):
    """With the gateways' credential one could raise a tenant to high with a 512-GPU floor, pause every
    preemption, plant an operator event and add an API key (and take the lease, rewrite limits, fill the shadow
    stream). The gateway user is refused each (NOPERM), by command and from a script, and still reads the
    limits and the published keys and writes its buckets and cache; the daemon user does all of its own."""
    with acl_redis(tmp_path) as (daemon_url, gateway_url, anonymous):
        dm, gw = redis.Redis.from_url(daemon_url), redis.Redis.from_url(gateway_url)

        # the daemon's user: lease and fencing, limits and the key map, notices, overrides and audit, shadow
        lease = RedisLease(dm, replica_id="a", ttl_s=60)
        assert lease.tick() and lease.is_leader()
        assert lease.fence("redis: apply")[0]
        act = RedisLimitsActuator(daemon_url, dry_run=False, api_keys={key_digest(KEY_A): "a"})
        rep = act.apply(_plan({"a": RateLimit(0.001, 1, 1, "test limit")}))
        assert rep.ok, rep.errors
        assert act.notify([Notification("a", "throttled", "slow down")]).ok
        ov = Overrides(None, RedisOverrideStore(dm), replica="a")
        ov.change_tenant("alice", "b", {"tier": "low"})
        ov.change_global("alice", {"preemption_paused": False})
        assert RedisShadowLog(dm, "gpuas", lease=lease).append({"at": "2026-01-01T00:00:00+00:00"})
        control = {k: dm.dump(k) for k in ("gpuas:overrides", "gpuas:overrides:audit", "gpuas:apikeys",
                                           "gpuas:limit:a", "gpuas:leader", "gpuas:leader:token", "gpuas:shadow")}
        assert all(v is not None for v in control.values()), control

        # the gateway's user: each control-plane write refused
        raised = json.dumps({"tenants": {"a": {"tier": "high", "floor_gpus": 512}}, "global": {}})
        paused = json.dumps({"tenants": {}, "global": {"preemption_paused": True}})
        fake = {"at": "2026-01-01T00:00:00+00:00", "kind": "operator_change",
                "detail": json.dumps({"who": "alice", "scope": "global", "message": "alice paused everything"})}
        attempts = {
            "raise a to high, 512-GPU floor": lambda: gw.set("gpuas:overrides", raised),
            "pause every preemption": lambda: gw.set("gpuas:overrides", paused),
            "plant an operator event": lambda: gw.xadd("gpuas:overrides:audit", fake),
            "add an API key": lambda: gw.hset("gpuas:apikeys", key_digest("a-forged-key-of-mine-0001"), "a"),
            "drop the overrides": lambda: gw.delete("gpuas:overrides"),
            "take the lease": lambda: gw.set("gpuas:leader", "mallory#1|999"),
            "end the lease": lambda: gw.delete("gpuas:leader"),
            "write the shadow stream": lambda: gw.xadd("gpuas:shadow", {"r": "x"}),
            "lift a limit": lambda: gw.hset("gpuas:limit:a", "rate", "inf"),
            "forget a limit": lambda: gw.delete("gpuas:limit:a"),
            "a limit as a script's KEY": lambda: gw.eval("return redis.call('HSET', KEYS[1], 'rate', 'inf')", 1,
                                                         "gpuas:limit:a"),
        }
        refused = {}
        for what, attempt in attempts.items():
            with pytest.raises(redis.exceptions.NoPermissionError) as exc:
                attempt()
            refused[what] = str(exc.value)
        # a script writing a key it does not declare is refused too (Redis says it with ERR, not NOPERM)
        with pytest.raises(redis.exceptions.ResponseError, match="can't access"):
            gw.eval("return redis.call('HSET', 'gpuas:apikeys', ARGV[1], 'a')", 0, key_digest("a-forged-key-001"))
        with pytest.raises(redis.exceptions.ResponseError, match="can't run this command"):
            gw.eval("return redis.call('SET', 'gpuas:overrides', ARGV[1])", 0, raised)
        with pytest.raises(OverridesUnavailable):
            Overrides(None, RedisOverrideStore(gw), replica="m").change_global("mallory", {"preemption_paused": True})
        # and no credential at all gets nothing (the default user is off)
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis.from_url(anonymous).set("gpuas:overrides", raised)
        assert {k: dm.dump(k) for k in control} == control   # nothing of the control plane changed

        # the gateway still works with its credential: the published key, the published limit, its bucket and
        # its degrade cache
        cfg = parse_gateway_config({"redis": {"url": gateway_url, "timeout_s": 10}, "degrade": {"cache": True}})

        async def go():
            app = build_app(cfg, _app())
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
                return [await c.get("/v1/x", headers=h) for h in ({"X-API-Key": KEY_A}, {"X-API-Key": KEY_A},
                                                                  {"X-API-Key": "not-a-key-of-anyone-00"})]

        first, second, unknown = asyncio.run(go())
        assert first.status_code == 200 and first.json() == {"tenant": "a"}, first.text
        assert "x-ratelimit-degraded" not in first.headers   # the limiter ran; no fail-open
        assert first.headers["x-ratelimit-limit"] == "0.001"
        assert second.status_code == 200 and second.headers["x-degraded"] == "cache"   # over limit, cached
        assert second.headers["x-ratelimit-reason"] == "test limit"
        assert unknown.status_code == 401
        assert dm.exists("gpuas:bucket:a") and dm.exists("gpuas:rcache:a")
        lease.stop()


def test_the_shipped_acl_file_is_what_redis_acl_writes(tmp_path):
    """deploy/redis/users.acl is `gpu-autoscaler redis-acl` for the default prefixes, and with password files
    the command writes their SHA-256 in place of the placeholders (never the password itself)."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "daemon.cli", *a, "redis-acl"], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, timeout=120,
                                    env=ENV)
    plain = run()
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == SHIPPED.read_text()
    (tmp_path / "d").write_text(DAEMON_PW + "\n")
    (tmp_path / "g").write_text(GATEWAY_PW)
    cfg = tmp_path / "c.toml"
    cfg.write_text("")
    hashed = subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "redis-acl",
                             "--daemon-password-file", "d", "--gateway-password-file", "g"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=ENV)
    assert hashed.returncode == 0, hashed.stderr
    assert hashed.stdout == _with_passwords(SHIPPED.read_text())
    assert DAEMON_PW not in hashed.stdout and GATEWAY_PW not in hashed.stdout


def test_a_daemon_redis_url_with_the_gateways_user_is_refused():
    """The daemon's control state (ha.redis_url, or its default actuators.redis.url) and the limits it writes
    must not use the gateways' credential: such a config does not load (check-config exits 2 with this line)."""
    gw = "redis://gpuas-gateway:pw@redis:6379/0"
    with pytest.raises(ConfigError, match=r"ha.redis_url logs in as 'gpuas-gateway', the gateways' Redis user"):
        parse_config({"ha": {"enabled": True, "redis_url": gw}})
    with pytest.raises(ConfigError, match=r"actuators.redis.url logs in as 'gpuas-gateway'"):
        parse_config({"actuators": {"enabled": ["log", "redis"], "redis": {"url": gw}}})
    with pytest.raises(ConfigError, match=r"actuators.redis.url \(ha.redis_url's default\) logs in as 'gw'"):
        parse_config({"ha": {"enabled": True},
                      "actuators": {"redis": {"url": "redis://gw:pw@redis/0", "gateway_user": "gw"}}})
    ok = parse_config({"ha": {"enabled": True, "redis_url": "redis://gpuas-daemon:pw@redis:6379/0"},
                       "actuators": {"enabled": ["log", "redis"], "redis": {"url": "redis://gpuas-daemon:pw@r/0"}}})
    assert ok.daemon_redis_urls() == {"actuators.redis.url": "redis://gpuas-daemon:pw@r/0",
                                      "ha.redis_url": "redis://gpuas-daemon:pw@redis:6379/0"}


def test_check_config_warns_loudly_when_the_daemon_logs_in_as_redis_default_user(tmp_path):
    """No user in a daemon Redis URL is Redis' default user, which can write everything: unless the gateways log
    in as their own user, their credential writes the control plane too. check-config says so, per URL."""
    def check(toml: str) -> subprocess.CompletedProcess:
        cfg = tmp_path / "c.toml"
        cfg.write_text('[source]\nkind = "prometheus"\n' + toml)
        return subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "check-config"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300, env=ENV)

    default = check('[actuators]\nenabled = ["log", "redis"]\n[ha]\nenabled = true\n')
    assert default.returncode == 0, default.stderr
    warned = [ln for ln in default.stderr.splitlines() if "logs in as Redis' default user" in ln]
    assert len(warned) == 2 and warned[0].startswith("warning: actuators.redis.url logs in as")
    assert "gpuas-daemon" in warned[0] and "docs/security.md" in warned[0]
    own = check('[actuators]\nenabled = ["log", "redis"]\n[actuators.redis]\n'
                'url = "redis://gpuas-daemon:pw@127.0.0.1:6379/0"\n[ha]\nenabled = true\n')
    assert own.returncode == 0 and "default user" not in own.stderr
    gw = check('[ha]\nenabled = true\nredis_url = "redis://gpuas-gateway:pw@127.0.0.1:6379/0"\n')
    assert gw.returncode == 2 and "ha.redis_url logs in as 'gpuas-gateway'" in gw.stderr


def test_the_gateway_warns_when_it_logs_in_to_redis_as_the_default_user(caplog):
    """A gateway whose redis.url names no user logs in as Redis' default user (everything writable unless the
    ACL file turned it off): it says so at start; logging in as its own user it does not."""
    import logging

    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.gateway"):
        build_app(parse_gateway_config({"redis": {"url": "redis://127.0.0.1:1/0"}}), _app())
    assert any("logs in as Redis' default user" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.gateway"):
        build_app(parse_gateway_config({"redis": {"url": f"redis://gpuas-gateway:{GATEWAY_PW}@127.0.0.1:1/0"}}),
                  _app())
    assert not caplog.records


def test_the_acl_follows_the_configured_prefixes():
    """Another actuators.redis.prefix (the gateways') and ha.prefix: the daemon owns both, the gateway's patterns
    follow the first; glob characters in a prefix match only themselves; a prefix an ACL cannot hold is refused
    with the key's name."""
    from daemon.config.redis_acl import acl_file

    text = acl_file("gw1", "ctl")
    daemon_line, gateway_line = text.splitlines()[1:]
    assert "~ctl:* ~gw1:* &ctl:* &gw1:*" in daemon_line
    assert "%R~gw1:limit:* %R~gw1:apikeys ~gw1:bucket:* ~gw1:rcache:* ~gw1:rcache-idx:*" in gateway_line
    assert "ctl" not in gateway_line
    assert "%R~a\\*b:limit:*" in acl_file("a*b", "a*b")
    with pytest.raises(ValueError, match=r"ha.prefix: 'two words' cannot be written in an ACL key pattern"):
        acl_file("gpuas", "two words")
