import asyncio
import threading
import time

import httpx
import pytest
import redis
import redis.asyncio as aredis
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from daemon.actuators.redis_limits import RedisLimitsActuator
from daemon.policy.types import Notification, Plan, PolicyMemory, RateLimit
from gateway.bucket import AsyncTokenBucket, TokenBucket
from gateway.contract import key_digest, limit_key
from gateway.identity import Identity
from gateway.middleware import RateLimitMiddleware

pytestmark = pytest.mark.services
KEY_A = "key-of-tenant-a-0123456789"


def make_plan(limits, notes=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=100, load=0.5, high_pool=20, reservations={"a": 3},
                quotas={}, limits=limits, preemptions=(), notifications=tuple(notes), stale=False,
                forecast_model="x", notes=(), memory=PolicyMemory())


def test_publishes_limits_idempotently(r, redis_url):
    act = RedisLimitsActuator(redis_url, dry_run=False)
    plan = make_plan({"a": RateLimit(50, 100, 1, "load 85%"), "b": RateLimit(200, 400, 1, "load 85%")})
    rep = act.apply(plan)
    assert rep.ok and len(rep.actions) == 3 and rep.actions[2] == "set gpuas:reservations for 1 tenant"
    assert float(r.hget(limit_key("gpuas", "a"), "rate")) == 50
    assert r.hget(limit_key("gpuas", "b"), "reason") == b"load 85%"
    assert act.apply(plan).actions == []                  # nothing changed: nothing written
    fresh = RedisLimitsActuator(redis_url, dry_run=False)  # a restarted daemon reads what is there
    assert fresh.apply(plan).actions == []
    r.delete(limit_key("gpuas", "a"))
    assert len(RedisLimitsActuator(redis_url, dry_run=False).apply(plan).actions) == 1


def test_dry_run_writes_nothing(r, redis_url):
    act = RedisLimitsActuator(redis_url, dry_run=True)
    rep = act.apply(make_plan({"a": RateLimit(50, 100, 1, "x")}))
    assert rep.dry_run and rep.actions and not r.exists(limit_key("gpuas", "a"))
    act.notify([Notification("a", "throttled", "hi")])
    assert not r.exists("gpuas:notifications")


def test_notifications_reach_the_stream(r, redis_url):
    act = RedisLimitsActuator(redis_url, dry_run=False)
    act.notify([Notification("a", "preempted", "job 1 preempted: peak ahead")])
    entries = r.xrange("gpuas:notifications")
    assert len(entries) == 1 and entries[0][1][b"tenant"] == b"a"
    assert b"peak ahead" in r.get("gpuas:notice:a")


def test_token_bucket_rate_and_retry_after(r, redis_url):
    RedisLimitsActuator(redis_url, dry_run=False).apply(make_plan({"a": RateLimit(10, 5, 1, "tight")}))
    tb = TokenBucket(r)
    got = [tb.acquire("a") for _ in range(6)]
    assert [d.allowed for d in got] == [True] * 5 + [False]
    assert 0.05 < got[-1].retry_after_s <= 0.1 + 1e-6 and got[-1].reason == "tight"
    time.sleep(0.25)
    assert sum(tb.acquire("a").allowed for _ in range(5)) == 2   # refilled at 10/s: 2 tokens in 0.25s


def test_token_bucket_is_atomic_across_replicas(r, redis_url):
    RedisLimitsActuator(redis_url, dry_run=False).apply(make_plan({"a": RateLimit(0.001, 20, 1, "x")}))
    allowed = []

    def replica():
        tb = TokenBucket(redis.Redis.from_url(redis_url))
        allowed.append(sum(tb.acquire("a").allowed for _ in range(50)))

    threads = [threading.Thread(target=replica) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 20


def test_middleware_returns_429_with_reason(r, redis_url):
    RedisLimitsActuator(redis_url, dry_run=False).apply(
        make_plan({"a": RateLimit(1, 2, 1, "cluster load 85% (level 1): normal tier limited to 50 req/s")}))

    async def hello(_):
        return PlainTextResponse("ok")

    async def go():
        app = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]),
                                  AsyncTokenBucket(aredis.Redis.from_url(redis_url)),
                                  Identity({key_digest(KEY_A): "a"}))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            codes = [await c.get("/", headers={"Authorization": f"Bearer {KEY_A}"}) for _ in range(3)]
            missing = await c.get("/")
        return codes, missing

    codes, missing = asyncio.run(go())
    assert [x.status_code for x in codes] == [200, 200, 429]
    deny = codes[-1]
    assert int(deny.headers["retry-after"]) >= 1
    assert "normal tier limited" in deny.headers["x-ratelimit-reason"]
    assert deny.json()["reason"].startswith("cluster load")
    assert codes[0].headers["x-ratelimit-limit"] == "1"
    assert missing.status_code == 401


def test_middleware_fails_open_when_redis_is_down():
    async def hello(_):
        return PlainTextResponse("ok")

    async def go():
        dead = aredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
        ident = Identity({key_digest(KEY_A): "a"})
        app = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), AsyncTokenBucket(dead), ident)
        closed = RateLimitMiddleware(Starlette(routes=[Route("/", hello)]), AsyncTokenBucket(dead), ident,
                                     fail_open=False)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c:
            a = await c.get("/", headers={"X-API-Key": KEY_A})
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=closed), base_url="http://gw") as c:
            b = await c.get("/", headers={"X-API-Key": KEY_A})
        return a, b

    a, b = asyncio.run(go())
    assert a.status_code == 200 and a.headers["x-ratelimit-degraded"] == "1"
    assert b.status_code == 503


def test_a_flushed_redis_is_republished_by_the_running_daemon(r, redis_url):
    """Redis restarted without its data (or flushed) between two cycles: the next cycle writes the limits and
    the API key digests again. The actuator used to trust its own cache until the daemon restarted, so the
    gateways fell back to the default bucket and answered 401 to every key the daemon publishes."""
    from gateway.contract import keys_key

    act = RedisLimitsActuator(redis_url, dry_run=False, api_keys={key_digest(KEY_A): "a"})
    plan = make_plan({"a": RateLimit(50, 100, 1, "load 85%")})
    assert act.apply(plan).ok
    r.flushdb()
    assert act.apply(plan).ok
    assert float(r.hget(limit_key("gpuas", "a"), "rate")) == 50
    assert r.hgetall(keys_key("gpuas")) == {key_digest(KEY_A).encode(): b"a"}
    assert act.apply(plan).actions == []   # and then nothing to write again


def test_reservations_hash_follows_the_plan_and_drops_released_tenants(r, redis_url):
    """`<prefix>:reservations` was written only when a limit changed, and a tenant whose hold ended kept its
    old value there: a hold no plan asked for any more."""
    lim = {"a": RateLimit(50, 100, 1, "x")}
    act = RedisLimitsActuator(redis_url, dry_run=False)
    plan = make_plan(lim)
    assert act.apply(plan).ok
    assert r.hgetall("gpuas:reservations") == {b"a": b"3"}
    held_b = Plan(**{**plan.__dict__, "reservations": {"b": 5}})
    rep = act.apply(held_b)                               # same limits, other holds
    assert rep.ok and rep.actions == ["set gpuas:reservations for 1 tenant"]
    assert r.hgetall("gpuas:reservations") == {b"b": b"5"}
    assert act.apply(held_b).actions == []                # unchanged: nothing written
    assert act.apply(Plan(**{**plan.__dict__, "reservations": {}})).ok
    assert not r.exists("gpuas:reservations")


def test_a_replica_leading_again_rewrites_the_holds_another_leader_changed(r, redis_url):
    """HA: a publishes the holds (a: 3), is paused; b leads with the same limits and other holds (a: 8); a leads
    again with its plan. Before, a skipped the write (its record said a: 3, and b's holds-only write left the
    version a checks as it was) and the hash went on saying 8: a hold no plan of the leader asked for."""
    lim = {"a": RateLimit(50, 100, 1, "x")}
    plan = make_plan(lim)
    a, b = RedisLimitsActuator(redis_url, dry_run=False), RedisLimitsActuator(redis_url, dry_run=False)
    assert a.apply(plan).ok and r.hgetall("gpuas:reservations") == {b"a": b"3"}
    rep = b.apply(Plan(**{**plan.__dict__, "reservations": {"a": 8}}))
    assert rep.ok and rep.actions == ["set gpuas:reservations for 1 tenant"], rep
    assert r.hgetall("gpuas:reservations") == {b"a": b"8"}
    rep = a.apply(plan)
    assert rep.ok and rep.actions == ["set gpuas:reservations for 1 tenant"], rep
    assert r.hgetall("gpuas:reservations") == {b"a": b"3"}, "the other leader's holds stayed"
    assert a.apply(plan).actions == []                    # then unchanged: nothing written


def test_keys_of_tenants_gone_longer_than_the_limit_are_deleted(r, redis_url):
    """`<prefix>:limit:<tenant>` keys of tenants who left stayed in Redis for ever; now the actuator deletes
    its own once the tenant has been absent from the plans for forget_after_s, and keeps everyone else's."""
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    lim = RateLimit(50, 100, 1, "load 85%")
    act = RedisLimitsActuator(redis_url, dry_run=False, forget_after_s=3600, clock=clock)
    assert act.apply(make_plan({"stay": lim, "leave": lim})).ok
    # keys the actuator did not write: another prefix, and one under its prefix without the fields it writes
    r.hset("other:limit:leave", mapping={"rate": 1, "burst": 1, "updated": 0})
    r.hset(limit_key("gpuas", "manual"), mapping={"rate": 5, "burst": 5})
    now[0] += 1800
    assert act.apply(make_plan({"stay": lim})).ok
    assert r.exists(limit_key("gpuas", "leave"))               # gone half an hour: kept
    now[0] += 1900                                             # gone 3700 s > 3600 s
    rep = act.apply(make_plan({"stay": lim}))
    assert rep.ok and rep.actions == ["delete gpuas:limit:leave: tenant absent for over 3600s"]
    assert not r.exists(limit_key("gpuas", "leave"))
    assert r.exists(limit_key("gpuas", "stay")) and float(r.hget(limit_key("gpuas", "stay"), "rate")) == 50
    assert r.exists("other:limit:leave") and r.exists(limit_key("gpuas", "manual"))
    assert act.apply(make_plan({"stay": lim})).actions == []  # nothing left to do
    # the tenant comes back: its key is written again
    assert act.apply(make_plan({"stay": lim, "leave": lim})).ok and r.exists(limit_key("gpuas", "leave"))


def test_a_restarted_daemon_still_forgets_tenants_that_left_before(r, redis_url):
    """When a tenant was last seen is kept in its key (`seen`), so a restart does not start the count over
    and a present tenant's key, refreshed while it is there, is never taken for a departed one."""
    now = [1000.0]
    clock = lambda: now[0]  # noqa: E731
    lim = RateLimit(50, 100, 1, "x")
    RedisLimitsActuator(redis_url, dry_run=False, forget_after_s=3600, clock=clock).apply(
        make_plan({"stay": lim, "leave": lim}))
    first = RedisLimitsActuator(redis_url, dry_run=False, forget_after_s=3600, clock=clock)
    now[0] += 1800                                             # 'leave' has left; 'stay' is still planned
    assert first.apply(make_plan({"stay": lim})).actions == []
    assert r.exists(limit_key("gpuas", "leave"))
    now[0] += 7200                                             # the daemon was down for two hours
    restarted = RedisLimitsActuator(redis_url, dry_run=False, forget_after_s=3600, clock=clock)
    rep = restarted.apply(make_plan({"stay": lim}))
    assert rep.actions == ["delete gpuas:limit:leave: tenant absent for over 3600s"]
    assert not r.exists(limit_key("gpuas", "leave")) and r.exists(limit_key("gpuas", "stay"))


def test_dry_run_reports_but_deletes_nothing(r, redis_url):
    now = [1000.0]
    lim = RateLimit(50, 100, 1, "x")
    RedisLimitsActuator(redis_url, dry_run=False, clock=lambda: now[0]).apply(make_plan({"leave": lim}))
    now[0] += 86400 + 1
    rep = RedisLimitsActuator(redis_url, dry_run=True, clock=lambda: now[0]).apply(make_plan({}))
    assert "delete gpuas:limit:leave: tenant absent for over 86400s" in rep.actions
    assert r.exists(limit_key("gpuas", "leave"))


@pytest.mark.security
def test_a_preempted_tenants_notice_does_not_name_whom_it_made_room_for(r, redis_url):
    """The notices a preemption plan publishes (`<prefix>:notice:<tenant>`, the notifications stream), read by
    the preempted tenant, do not name the protected tenant its job made room for."""
    from daemon.config import Config
    from daemon.policy import plan
    from tests.policy.test_engine import flat_forecast, make_state

    tiers = ["high", "low", "low"]
    jobs = [(0, 10, "high", True, 3600, 0)] + [(1, 10, "low", True, 600 * (i + 1), 0) for i in range(5)]
    state = make_state(tiers, jobs, capacity=60)
    p = plan(flat_forecast(state.tenants, [30, 50, 10]), state, PolicyMemory(),
             Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
    told = [n for n in p.notifications if n.kind == "preempted"]
    assert told and all(n.tenant == "t1" for n in told)
    RedisLimitsActuator(redis_url, dry_run=False).notify(told)
    notice = r.get("gpuas:notice:t1").decode()
    entries = [e[1][b"message"].decode() for e in r.xrange("gpuas:notifications")]
    for text in (notice, *entries):
        assert "t0" not in text
        assert "ahead of forecast peak (p90 within 3 steps) for protected tenants" in text
