"""/api/v1/windows against a daemon on the embedded simulator (real uvicorn, real HTTP; 256 GPUs): operators
create, change and delete windows, audited; a tenant sees only its own and changes none; a window the cluster
cannot take is refused with the conflict named; the next cycle's plan carries the window."""

import httpx

from tests.support.daemons import OP, T1, T2, h
from tests.support.services import wait_for

W = {"tenant": "tenant-0001", "gpus": 64, "every": "daily", "at": "14:00", "timezone": "Europe/Paris",
     "duration_minutes": 120, "reclaim_before_minutes": 30}


def test_operators_manage_windows_and_a_tenant_sees_only_its_own(api):
    d, base = api
    r = httpx.put(f"{base}/api/v1/windows/eod", json=W, headers=h(OP))
    assert r.status_code == 200, r.text
    assert r.json()["audit"]["who"] == "ops" and r.json()["audit"]["window"] == "eod"
    assert "ops created window eod of tenant-0001" in r.json()["audit"]["message"]
    other = {**W, "tenant": "tenant-0002", "gpus": 8, "at": "03:00"}
    assert httpx.put(f"{base}/api/v1/windows/night", json=other, headers=h(OP)).status_code == 200
    listed = httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"]
    assert [(w["name"], w["source"], w["slurm_flag"]) for w in listed] == [("eod", "api", "DAILY"),
                                                                          ("night", "api", "DAILY")]
    assert listed[0]["next_start"].endswith("+01:00") and "T14:00:00" in listed[0]["next_start"]
    # a tenant: its own window only; another's is not there at all, and it changes none
    assert [w["name"] for w in httpx.get(f"{base}/api/v1/windows", headers=h(T1)).json()["windows"]] == ["eod"]
    assert httpx.get(f"{base}/api/v1/windows/eod", headers=h(T1)).json()["gpus"] == 64
    assert httpx.get(f"{base}/api/v1/windows/eod", headers=h(T2)).status_code == 404
    assert httpx.get(f"{base}/api/v1/windows", headers=h(T2)).json()["windows"][0]["name"] == "night"
    for token in (T1, T2):
        assert httpx.put(f"{base}/api/v1/windows/eod", json={**W, "gpus": 8}, headers=h(token)).status_code == 403
        assert httpx.delete(f"{base}/api/v1/windows/eod", headers=h(token)).status_code == 403
    assert httpx.get(f"{base}/api/v1/windows/eod", headers=h(OP)).json()["gpus"] == 64
    # the next cycle's plan carries it (what Slurm reserves ahead)
    wait_for(lambda: any(w["name"] == "eod" for w in d.last_result.plan.windows), what="the plan's windows",
             timeout=30)
    # changed, then deleted, each audited
    assert httpx.put(f"{base}/api/v1/windows/eod", json={**W, "gpus": 32}, headers=h(OP)).status_code == 200
    assert httpx.delete(f"{base}/api/v1/windows/eod", headers=h(OP)).status_code == 200
    assert httpx.delete(f"{base}/api/v1/windows/eod", headers=h(OP)).status_code == 404
    assert httpx.get(f"{base}/api/v1/windows/eod", headers=h(OP)).status_code == 404
    ev = [e for e in httpx.get(f"{base}/api/v1/events?kind=operator_change", headers=h(OP)).json()["events"]
          if e.get("window") == "eod"]
    assert [e["changes"].get("gpus", {}).get("to") for e in ev] == [None, 32, 64]   # newest first
    assert httpx.delete(f"{base}/api/v1/windows/night", headers=h(OP)).status_code == 200


def test_a_window_the_cluster_cannot_take_is_refused_with_the_conflict_named(api):
    _, base = api
    r = httpx.put(f"{base}/api/v1/windows/huge", json={**W, "gpus": 300}, headers=h(OP))
    assert r.status_code == 409 and "300 is more than the 256 GPUs" in r.json()["error"]
    assert httpx.put(f"{base}/api/v1/windows/a", json={**W, "gpus": 200}, headers=h(OP)).status_code == 200
    r = httpx.put(f"{base}/api/v1/windows/b", json={**W, "tenant": "tenant-0002", "gpus": 100, "at": "15:00"},
                  headers=h(OP))
    assert r.status_code == 409
    assert "a (200) and b (100) overlap from" in r.json()["error"] and "300 GPUs" in r.json()["error"]
    # b at 16:00 (a's end) with no reclaim_before: the plan still holds it a drain and a cycle ahead, while a is open
    r = httpx.put(f"{base}/api/v1/windows/b", json={**W, "tenant": "tenant-0002", "gpus": 100, "at": "16:00",
                                                   "reclaim_before_minutes": 0}, headers=h(OP))
    assert r.status_code == 409 and "a preemption's drain and a cycle ahead" in r.json()["error"], r.text
    assert [w["name"] for w in httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"]] == ["a"]
    r = httpx.put(f"{base}/api/v1/windows/c", json={**W, "at": "99:00"}, headers=h(OP))
    assert r.status_code == 400 and "not a time of day" in r.json()["error"]
    r = httpx.put(f"{base}/api/v1/windows/c", json={**W, "bogus": 1}, headers=h(OP))
    assert r.status_code == 400 and r.json()["field"] == "bogus"
    assert httpx.put(f"{base}/api/v1/windows/Bad%20Name", json=W, headers=h(OP)).status_code == 400
    # `^...$` took a final newline (`$` matches before one): "a%0A" was a window, its Slurm reservation "gpuas-win-a\n"
    assert httpx.put(f"{base}/api/v1/windows/zz%0A", json=W, headers=h(OP)).status_code == 400
    assert httpx.get(f"{base}/api/v1/windows/zz%0A", headers=h(OP)).status_code == 400
    assert httpx.delete(f"{base}/api/v1/windows/a", headers=h(OP)).status_code == 200


def test_hostile_window_bodies_get_one_line_each_and_nothing_is_stored(api):
    _, base = api

    def put(name, body=None, content=None):
        r = httpx.put(f"{base}/api/v1/windows/{name}", json=body, content=content,
                      headers={**h(OP), "content-type": "application/json"})
        assert "Traceback" not in r.text and "\n" not in r.json()["error"], r.text
        return r

    # refused before any check of the calendar
    r = put("w", content=b'{"tenant": "tenant-0001", "gpus": NaN}')
    assert r.status_code == 400 and r.json()["field"] == "gpus" and "finite" in r.json()["error"]
    r = put("w", {**W, "gpus": True})
    assert r.status_code == 400 and "not true or false" in r.json()["error"]
    assert put("w", {**W, "gpus": -4}).status_code == 400
    assert put("w", {**W, "duration_minutes": 1e300}).json()["field"] == "duration_minutes"
    r = put("w", {**W, "timezone": "Europe/Atlantis"})
    assert r.status_code == 400 and "not an IANA time zone" in r.json()["error"]
    r = put("w", content=b"[" * 70_000)
    assert r.status_code == 400 and r.json()["field"] == "body" and "over 65536 bytes" in r.json()["error"]
    cron = {k: v for k, v in W.items() if k != "at"} | {"every": None}
    r = put("w", {**cron, "cron": "0 14 30 2 *"})
    assert r.status_code == 400 and "never fires" in r.json()["error"]
    r = put("w", {**cron, "cron": "0 14 1 * 1"})
    assert r.status_code == 400 and "both the day of the month and the weekday" in r.json()["error"]
    # a window every minute: refused, named (it held the request for half a minute before, then was stored)
    r = put("w", {**cron, "cron": "* * * * *", "duration_minutes": 0.5, "reclaim_before_minutes": 0})
    assert r.status_code == 409 and "starts more than 336 times" in r.json()["error"]
    # a window named like the proposals' listing could be stored and never read back (GET lists the proposals)
    r = put("proposals", W)
    assert r.status_code == 400 and "'proposals' is reserved" in r.json()["error"]
    r = put("w", {**W, "tenant": "tënant-0001"})
    # the config lists no [[tenants]]: the line says which tenants it is checked against (it said '[[tenants]]')
    assert r.status_code == 409 and "is not a tenant the daemon has seen (the config lists none in [[tenants]])" \
        in r.json()["error"], r.json()
    assert httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"] == []


def test_a_windows_next_start_is_on_the_clock_the_plan_holds_it_by(api):
    """On the embedded simulator the plan holds a window by the simulator's own clock (a day in January 2026), not
    today's date: `make run`'s console and API said the next start on the wall clock, months from the start the
    plan was about to hold, so the window seemed not to be coming while its hold was already in place."""
    import datetime as dt

    d, base = api
    w = {**W, "tenant": "tenant-0003", "gpus": 8, "at": "10:00", "timezone": "UTC", "duration_minutes": 60}
    assert httpx.put(f"{base}/api/v1/windows/clock", json=w, headers=h(OP)).status_code == 200
    try:
        plan_at = dt.datetime.fromisoformat(httpx.get(f"{base}/api/v1/plan", headers=h(OP)).json()["at"])
        for got in (httpx.get(f"{base}/api/v1/windows/clock", headers=h(OP)).json(),
                    next(x for x in httpx.get(f"{base}/api/v1/windows", headers=h(OP)).json()["windows"]
                         if x["name"] == "clock")):
            start = dt.datetime.fromisoformat(got["next_start"])
            # the next 10:00 UTC after the plan's time (the one in progress, 60 min, counts): within a day of it
            assert plan_at - dt.timedelta(minutes=60) < start <= plan_at + dt.timedelta(days=1), (got, plan_at)
            assert start.hour == 10 and start.minute == 0
            assert dt.datetime.fromisoformat(got["held_from"]) == start - dt.timedelta(minutes=30)
        # no reclaim_before: the plan still holds it a preemption's drain and a cycle ahead, and says so
        assert httpx.put(f"{base}/api/v1/windows/clock", json={**w, "reclaim_before_minutes": 0},
                         headers=h(OP)).status_code == 200
        got = httpx.get(f"{base}/api/v1/windows/clock", headers=h(OP)).json()
        lead = dt.datetime.fromisoformat(got["next_start"]) - dt.datetime.fromisoformat(got["held_from"])
        assert lead >= dt.timedelta(seconds=1) and lead == dt.timedelta(seconds=d.cfg.window_min_lead_s()), got
    finally:
        assert httpx.delete(f"{base}/api/v1/windows/clock", headers=h(OP)).status_code == 200
