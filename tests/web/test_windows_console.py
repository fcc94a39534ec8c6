"""The console's windows page (real uvicorn, real HTTP): an operator adds and deletes windows with its forms, a
refused one says why on the page, and a tenant sees its own tenant's windows only, with no form."""

import httpx

from tests.support.daemons import OP, T1, T2

FORM = {"name": "eod", "tenant": "tenant-0001", "gpus": "64", "every": "daily", "at": "14:00",
        "timezone": "Europe/Paris", "duration_minutes": "120", "reclaim_before_minutes": "30",
        "borrowable_before": "on"}


def _console(base, token):
    c = httpx.Client(base_url=base, timeout=30)
    assert c.post("/ui/login", data={"token": token, "next": "/ui/windows"}).status_code == 303
    return c


def test_operators_add_and_delete_windows_in_the_console_and_tenants_see_their_own(api):
    _, base = api
    op, t1, t2 = _console(base, OP), _console(base, T1), _console(base, T2)
    try:
        r = op.post("/ui/windows", data=FORM)
        assert r.status_code == 303 and r.headers["location"] == "/ui/windows?saved=1"
        page = op.get("/ui/windows").text
        assert "eod" in page and "daily 14:00 Europe/Paris" in page and 'id="window-form"' in page
        refused = op.post("/ui/windows", data={**FORM, "name": "more", "gpus": "250", "at": "14:30"})
        assert refused.status_code == 409 and "eod (64) and more (250) overlap" in refused.text
        bad = op.post("/ui/windows", data={**FORM, "name": "typo", "gpus": "sixteen"})
        assert bad.status_code == 400 and "gpus: not a number of GPUs" in bad.text
        # a type given twice was the last one, the first dropped: refused, as the API refuses it
        twice = op.post("/ui/windows", data={**FORM, "name": "twice", "gpus": "h100=2,h100=8"})
        assert twice.status_code == 400 and "the GPU type &#39;h100&#39; is given twice" in twice.text, twice.text
        mine = t1.get("/ui/windows").text
        assert "eod" in mine and 'id="window-form"' not in mine
        assert "eod" not in t2.get("/ui/windows").text
        assert t1.post("/ui/windows/eod/delete").status_code == 403        # a tenant changes nothing
        assert op.post("/ui/windows/eod/delete").status_code == 303
        assert ">eod<" not in op.get("/ui/windows").text
    finally:
        for c in (op, t1, t2):
            c.close()
