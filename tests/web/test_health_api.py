"""/api/v1/health on a real daemon (embedded simulator, real uvicorn): a tenant token sees only its own tenant's
findings, jobs and idle GPUs; an operator sees all."""

from __future__ import annotations

from contextlib import contextmanager

import httpx
import pytest

from tests.support.daemons import OP, T1, h


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


@contextmanager
def published(d, view: dict):
    """`view` as a health step's, published now in the running daemon's Snapshot, and taken back after: set and
    published under the runner's lock, between two cycles, as a cycle's end publishes it (set unlocked, it reached
    the Snapshot at some later cycle, and stayed there for the next test until another cycle ran)."""
    r = d.runtime.runner
    with r.lock:
        r.last_health = view
        r.publish()
    try:
        yield
    finally:
        with r.lock:                     # the daemon is shared with other tests
            r.last_health = None
            r.publish()


@pytest.mark.security
def test_a_tenant_token_sees_only_its_own_tenants_findings(api):
    d, base = api
    with published(d, VIEW):
        check(base)


def check(base: str) -> None:
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


# ---- the view as the health step really builds it (HealthRunner.run), not by hand ------------------------------
N = 60


def _trace(job: str, sched: str, host: str, gpu: str, act: float):
    import numpy as np

    from daemon.health.types import GpuTrace
    ns = job.split("/")[0] if sched == "kubernetes" else None
    return GpuTrace(job, sched, ns, host, gpu, np.full(N, act), np.full(N, 1e3), np.full(N, 79e3), np.zeros(N))


def health_view(cfg, traces, listed: dict[str, tuple[str, int, str]], now: float = 1_800_000_000.0) -> dict:
    """The view HealthRunner.run publishes for `traces` (conflicting claims refused by the real source's check) and
    the scheduler's jobs `listed` {job: (tenant, gpus, node)}."""
    from collections import defaultdict

    import numpy as np
    import pandas as pd
    from prometheus_client import CollectorRegistry

    from daemon.health.types import Telemetry
    from daemon.policy.state import ClusterState, Jobs
    from daemon.service.health import HealthRunner
    from daemon.sources.job_telemetry import JobTelemetrySource

    problems: defaultdict[str, list[str]] = defaultdict(list)
    act = {(t.job, t.host, t.gpu): t.activity for t in traces}
    JobTelemetrySource._conflicts(sorted(act), act, problems)
    tel = Telemetry(now, 60.0, N, tuple(traces), {j: "; ".join(w) for j, w in problems.items()})

    class Fixed:
        def read(self, end=None):
            return tel

    tenants = tuple(sorted({t for t, _, _ in listed.values()}))
    ids = list(listed)
    n = len(ids)
    jobs = Jobs(np.array(ids, dtype=object), np.array([tenants.index(listed[i][0]) for i in ids], dtype=np.int64),
                np.array([listed[i][1] for i in ids], dtype=np.int64), np.zeros(n, dtype=np.int8),
                np.ones(n, dtype=bool), np.full(n, 7200.0), np.zeros(n),
                np.array([listed[i][2] for i in ids], dtype=object))
    st = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=tenants, tiers=("normal",) * len(tenants),
                      capacity=64, used=np.zeros(len(tenants)), pending=np.zeros(len(tenants)), jobs=jobs)
    return HealthRunner(cfg, Fixed(), CollectorRegistry(), clock=lambda: now).run(st, [], acting=False,
                                                                                  budget=(0.0, 0.0)).view


@pytest.mark.security
def test_conflict_reason_names_no_other_tenant(api):
    """tenant-0001's pod and tenant-0002's pod both claim GPU n1:0 (a stale job mapping; a time-sliced GPU): both
    are refused, and the reason tenant-0001 reads names neither tenant-0002's pod nor its namespace."""
    d, base = api
    traces = [_trace("alpha/train-0", "kubernetes", "n1", "0", 0.0),
              _trace("beta/secret-llm-run", "kubernetes", "n1", "0", 0.9)]
    view = health_view(d.runtime.runner.cfg, traces, {"alpha/train-0": ("tenant-0001", 1, "n1"),
                                                      "beta/secret-llm-run": ("tenant-0002", 1, "n1")})
    assert {j["job"]: j["state"] for j in view["jobs"]} == {"alpha/train-0": "rejected",
                                                            "beta/secret-llm-run": "rejected"}
    with published(d, view):
        assert [j["job"] for j in httpx.get(f"{base}/api/v1/health", headers=h(OP)).json()["jobs"]] == \
            ["alpha/train-0", "beta/secret-llm-run"]
        mine = httpx.get(f"{base}/api/v1/health", headers=h(T1))
        rows = mine.json()["jobs"]
        assert [r["job"] for r in rows] == ["alpha/train-0"] and "also claimed by another job" in rows[0]["why"]
        assert "secret-llm-run" not in mine.text and "beta" not in mine.text
        page = httpx.get(f"{base}/ui/tenants/tenant-0001", headers=h(T1)).text
        assert "secret-llm-run" not in page


@pytest.mark.security
@pytest.mark.parametrize("tenant", ["unknown", "alpha"])
def test_unlisted_jobs_are_operator_only(tenant):
    """Pods the scheduler does not list (namespace alpha, which no tenant owns here) are shown to operators only:
    not to a tenant token *named* "unknown" (what the metrics call such jobs) nor to one named like the pods'
    namespace."""
    from daemon.config import Config
    from daemon.web.auth import Principal
    from daemon.web.backend import Snapshot
    from daemon.web.health_view import health_for

    cfg = Config(tenants=[{"name": tenant, "k8s_namespace": "team-u"}, {"name": "beta"}])
    traces = [_trace("alpha/other-team-pod", "kubernetes", "n1", "0", 0.0),
              _trace("team-u/mine", "kubernetes", "n1", "1", 0.0)]
    view = health_view(cfg, traces, {"team-u/mine": (tenant, 1, "n1")})
    snap = Snapshot(cfg=cfg, health=view)
    mine = health_for(snap, Principal("eve", "tenant", tenant))
    assert [o["job"] for o in mine["outcomes"]] == ["team-u/mine"]
    assert [j["job"] for j in mine["jobs"]] == ["team-u/mine"]
    assert [(r["tenant"], r["idle_gpus"]) for r in mine["idle"]] == [(tenant, 1)]
    assert "other-team-pod" not in str(mine)
    every = health_for(snap, Principal("ops", "operator", None))
    assert {o["job"] for o in every["outcomes"]} == {"alpha/other-team-pod", "team-u/mine"}
    assert {(r["tenant"], r["idle_gpus"]) for r in every["idle"]} == {(None, 1), (tenant, 1)}
