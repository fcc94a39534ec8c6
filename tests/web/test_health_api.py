"""/api/v1/health on a real daemon (embedded simulator, real uvicorn): a tenant token sees only its own tenant's
findings, jobs and idle GPUs; an operator sees all."""

from __future__ import annotations

import httpx
import pytest

from tests.support.daemons import OP, T1, h
from tests.support.services import wait_for


def outcome(job: str, tenant: str | None, verdict: str) -> dict:
    return {"kind": "idle", "job": job, "scheduler": "slurm", "tenant": tenant, "tier": "low", "gpus": ["n1:0"],
            "since": 0.0, "until": 1800.0, "minutes": 30.0, "numbers": {"max_activity": 0.0},
            "summary": f"job {job} idle", "verdict": verdict, "action": "requeue", "due_in_minutes": 30.0,
            "message": f"job {job} idle; it will be requeued in 30 min if it stays so"}


VIEW = {"at": "2026-01-06T13:30:00Z", "error": None, "window_minutes": 70.0,
        "outcomes": [outcome("11", "tenant-0001", "warn"), outcome("22", "tenant-0002", "warn"),
                     outcome("99", None, "unknown_job")],
        "jobs": [{"job": "11", "tenant": "tenant-0001", "state": "ok"},
                 {"job": "22", "tenant": "tenant-0002", "state": "ok"}],
        "idle": [{"tenant": "tenant-0001", "tier": "low", "idle_gpus": 1},
                 {"tenant": "tenant-0002", "tier": "low", "idle_gpus": 4}]}


@pytest.mark.security
def test_a_tenant_token_sees_only_its_own_tenants_findings(api):
    d, base = api
    d.runtime.runner.last_health = VIEW       # what a health cycle publishes; the next cycle's Snapshot carries it
    try:
        check(base)
    finally:
        d.runtime.runner.last_health = None   # the daemon is shared with other tests


def check(base: str) -> None:
    wait_for(lambda: httpx.get(f"{base}/api/v1/health", headers=h(OP)).json()["outcomes"], what="published",
             timeout=30)
    every = httpx.get(f"{base}/api/v1/health", headers=h(OP)).json()
    assert [o["job"] for o in every["outcomes"]] == ["11", "22", "99"] and len(every["idle"]) == 2
    mine = httpx.get(f"{base}/api/v1/health", headers=h(T1)).json()
    assert [o["job"] for o in mine["outcomes"]] == ["11"]
    assert [j["job"] for j in mine["jobs"]] == ["11"] and mine["idle"] == [VIEW["idle"][0]]
    assert "tenant-0002" not in httpx.get(f"{base}/api/v1/health", headers=h(T1)).text
    r = httpx.get(f"{base}/api/v1/health?tenant=tenant-0002", headers=h(T1))
    assert r.status_code == 403
    narrowed = httpx.get(f"{base}/api/v1/health?tenant=tenant-0002", headers=h(OP)).json()
    assert [o["job"] for o in narrowed["outcomes"]] == ["22"]
    assert httpx.get(f"{base}/api/v1/health").status_code == 401
    # the console: a tenant's page lists its own findings with the evidence and what happens when, nobody else's
    page = httpx.get(f"{base}/ui/tenants/tenant-0001", headers=h(T1))
    assert page.status_code == 200 and "GPU job health" in page.text
    assert "job 11 idle; it will be requeued in 30 min" in page.text and "max_activity 0" in page.text
    assert "job 22" not in page.text and "tenant-0002" not in page.text
    # the cluster page (operator): allocated-but-idle GPUs per tenant and tier, every finding
    cluster = httpx.get(f"{base}/ui/", headers=h(OP)).text
    assert "Allocated but idle GPUs" in cluster
    assert "<td>tenant-0002</td><td>low</td><td class=\"num\">4</td>" in cluster and "job 99 idle" in cluster
