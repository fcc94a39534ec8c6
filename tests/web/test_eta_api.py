"""/api/v1/eta on a real daemon (embedded simulator, real uvicorn): the estimates with their age; a tenant token
sees its own jobs only, an operator all, narrowed to a tenant or one job when asked."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.daemons import OP, T1, h


def row(job: str, tenant: str, p50: float | None) -> dict:
    return {"job_id": job, "tenant": tenant, "gpus": 1, "position": 0, "p50_s": p50, "p90_s": p50,
            "basis": "run-length history" if p50 is not None else "unknown: no basis", "p50_at": None,
            "p90_at": None}


@pytest.mark.security
def test_a_tenant_sees_its_own_jobs_estimates_with_their_age(api):
    d, base = api
    r = d.runtime.runner
    view = {"made_at": time.time() - 30.0,
            "jobs": [row("11", "tenant-0001", 120.0), row("22", "tenant-0002", None), row("12", "tenant-0001", None)]}
    # held across the requests: no cycle of the live loop replaces the view while they read it
    with r.lock:
        kept = r.last_eta
        r.last_eta = view
        r.publish()
        try:
            every = httpx.get(f"{base}/api/v1/eta", headers=h(OP)).json()
            assert [j["job_id"] for j in every["jobs"]] == ["11", "22", "12"]
            assert 30.0 <= every["age_s"] < 120.0 and every["made_at"].endswith("+00:00")
            mine = httpx.get(f"{base}/api/v1/eta", headers=h(T1)).json()
            assert [j["job_id"] for j in mine["jobs"]] == ["11", "12"]
            assert mine["jobs"][1]["p50_s"] is None and mine["jobs"][1]["basis"].startswith("unknown")
            one = httpx.get(f"{base}/api/v1/eta?job=11", headers=h(T1)).json()
            assert [j["job_id"] for j in one["jobs"]] == ["11"]
            assert httpx.get(f"{base}/api/v1/eta?job=22", headers=h(T1)).json()["jobs"] == []
            assert httpx.get(f"{base}/api/v1/eta?tenant=tenant-0002", headers=h(T1)).status_code == 403
            narrowed = httpx.get(f"{base}/api/v1/eta?tenant=tenant-0002", headers=h(OP)).json()
            assert [j["job_id"] for j in narrowed["jobs"]] == ["22"]
            assert httpx.get(f"{base}/api/v1/eta").status_code == 401
            page = httpx.get(f"{base}/ui/tenants/tenant-0001", headers=h(T1))
            assert page.status_code == 200 and "When will my jobs start?" in page.text
            assert "<td>11</td>" in page.text and "<td>12</td>" in page.text and "<td>22</td>" not in page.text
            spec = httpx.get(f"{base}/api/v1/openapi.json", headers=h(T1)).json()
            assert "200" in spec["paths"]["/api/v1/eta"]["get"]["responses"]
        finally:
            r.last_eta = kept
            r.publish()
