"""The health step's actions through the real actuators: Kubernetes through the official client's real requests
(tests/support/k8s_capture.py: what an API server would receive), every act behind the fence, and a tenant's
view (API) of findings limited to its own."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import Config, KubernetesActuatorConfig, TenantConfig
from daemon.ha.fencing import FencedActuator
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.state import ClusterState, Jobs
from daemon.service.health import HealthRunner
from tests.support.k8s_capture import capture_server

N, STEP = 90, 60.0
TENANTS = ("team-low", "team-high")


def pod(ns, name, pclass, owner=None):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
         "spec": {"containers": [{"name": "c"}], "priorityClassName": pclass, "nodeName": "gpu-node-7"},
         "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}
    if owner:
        p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1" if owner == "Job" else "apps/v1", "kind": owner,
                                             "name": "x", "uid": "u1"}]
    return p


ROUTES = {
    # the cycle's read of the jobs (cluster_jobs) lists the nodes too: a pending pod no node can take is no demand
    ("GET", r"/api/v1/nodes"): (200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": []}),
    ("GET", r"/api/v1/namespaces/batch/pods/train-1"): (200, pod("batch", "train-1", "gpu-autoscaler-low",
                                                                 owner="Job")),
    ("GET", r"/api/v1/namespaces/batch/pods/bare-1"): (200, pod("batch", "bare-1", "gpu-autoscaler-low")),
    ("POST", r"/api/v1/namespaces/batch/pods/bare-1/eviction"): (201, {}),
    ("GET", r"/api/v1/namespaces/batch/pods/dcgm-exporter-x"): (200, pod("batch", "dcgm-exporter-x", "",
                                                                           owner="DaemonSet")),
    ("POST", r"/api/v1/namespaces/batch/pods/train-1/eviction"): (201, {}),
    ("POST", r"/api/v1/namespaces/batch/pods/dcgm-exporter-x/eviction"): (201, {}),
    ("POST", r"/api/v1/namespaces/.+/events"): lambda path, body: (201, {**body, "metadata": {"name": "e1",
                                                                                              **body["metadata"]}}),
}


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Telem:
    """Hand-made telemetry (the Prometheus read is tested on a real server in tests/integration)."""

    def __init__(self, clock: Clock, idle_minutes: dict[str, float], gpus: int = 8) -> None:
        self.clock, self.idle, self.gpus = clock, idle_minutes, gpus   # GPUs seen per job (the jobs hold 8)

    def read(self, end=None) -> Telemetry:
        gpus = []
        for i, (job, m) in enumerate(sorted(self.idle.items())):
            a = np.full(N, 0.9)
            a[N - int(m):] = 0.0
            ns = job.split("/")[0]
            for k in range(self.gpus):
                gpus.append(GpuTrace(job, "kubernetes", ns, "gpu-node-7", str(8 * i + k), a.copy(), np.full(N, 1e3),
                                     np.full(N, 79e3), np.zeros(N)))
        return Telemetry(self.clock(), STEP, N, tuple(gpus))


class Fence:
    def __init__(self) -> None:
        self.ok = True
        self.asked: list[str] = []

    def fence(self, what, jobs=()):
        self.asked.append(what)
        return (self.ok, "" if self.ok else "lease lost to replica b")

    def term(self):
        return 1


def state(ids: list[str]) -> ClusterState:
    n = len(ids)
    jobs = Jobs(np.array(ids, dtype=object), np.zeros(n, dtype=np.int64), np.full(n, 8, dtype=np.int64),
                np.zeros(n, dtype=np.int8), np.ones(n, dtype=bool), np.full(n, 7200.0), np.zeros(n),
                np.array(["gpu-node-7"] * n, dtype=object))
    return ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=TENANTS, tiers=("low", "high"), capacity=64,
                        used=np.zeros(2), pending=np.zeros(2), jobs=jobs)


def setup(capture):
    api, cap = capture
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace="batch"),
               TenantConfig(name="team-high", tier="high", k8s_namespace="serving")]
    cfg = Config(source={"kind": "prometheus"}, tenants=[t.model_dump() for t in tenants], health={"enabled": True})
    k8s_act = KubernetesActuator(api, KubernetesActuatorConfig(grace_period_s=20), tenants, dry_run=False)
    fence = Fence()
    clock = Clock(1_800_000_000.0)
    telem = Telem(clock, {"batch/train-1": 70, "batch/dcgm-exporter-x": 80})
    runner = HealthRunner(cfg, telem, CollectorRegistry(), clock=clock)
    return runner, FencedActuator(k8s_act, fence), fence, cap, clock, telem


def evictions(cap):
    return [r for r in cap.sent if r["path"].endswith("/eviction")]


def test_an_idle_low_priority_pod_is_evicted_through_the_eviction_api_and_a_daemonset_pod_never():
    with capture_server(ROUTES) as capture:
        runner, act, fence, cap, clock, _ = setup(capture)
        st = state(["batch/train-1", "batch/dcgm-exporter-x"])
        first = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        assert {o["verdict"] for o in first.view["outcomes"]} == {"warn"} and evictions(cap) == []
        events = [r for r in cap.sent if r["path"].endswith("/events")]
        assert events and all(e["body"]["reason"] == "HealthIdle" for e in events)   # told: a Kubernetes Event
        # the API server refuses (422) an Event whose involvedObject is in another namespace than its own
        assert all(e["body"]["involvedObject"]["namespace"] == "batch" for e in events)
        clock.t += 60
        second = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        assert {o["verdict"] for o in second.view["outcomes"]} == {"requeue"}
        ev = evictions(cap)
        assert [e["path"] for e in ev] == ["/api/v1/namespaces/batch/pods/train-1/eviction"]
        assert ev[0]["body"]["deleteOptions"]["gracePeriodSeconds"] == 20
        assert ev[0]["body"]["metadata"]["annotations"]["gpu-autoscaler/reason"].startswith("health: idle for")
        assert not any(r["method"] == "DELETE" for r in cap.sent)
        assert any("skip batch/dcgm-exporter-x: DaemonSet" in a for r in second.reports for a in r.actions)
        # fenced twice: the call (FencedActuator) and the eviction request itself (the actuator's guard)
        assert any(w.startswith("kubernetes: reclaim ['batch/train-1']") for w in fence.asked)
        assert "kubernetes: evict batch/train-1" in fence.asked


@pytest.mark.security
def test_a_replica_that_lost_its_lease_tells_nobody_and_evicts_nothing():
    with capture_server(ROUTES) as capture:
        runner, act, fence, cap, clock, _ = setup(capture)
        st = state(["batch/train-1"])
        runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        fence.ok = False
        clock.t += 60
        res = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        assert evictions(cap) == []
        assert any(r.fenced for r in res.reports)
        assert any(w.startswith("kubernetes: reclaim") for w in fence.asked)


@pytest.mark.security
def test_health_events_are_logged_and_a_tenant_reads_only_its_own(tmp_path):
    from daemon.state.store import StateStore
    from daemon.web import views
    from daemon.web.auth import Principal
    from daemon.web.backend import Snapshot

    routes = {**ROUTES, ("GET", r"/api/v1/namespaces/serving/pods/infer-1"): (200, pod("serving", "infer-1",
                                                                                      "gpu-autoscaler-high",
                                                                                      owner="Job"))}
    with capture_server(routes) as capture:
        runner, act, _, _, clock, telem = setup(capture)
        telem.idle = {"batch/train-1": 70, "serving/infer-1": 70}
        st = state(["batch/train-1", "serving/infer-1"])
        st.jobs.tenant[1], st.jobs.priority[1] = 1, 2          # infer-1 is team-high's, high priority
        store = StateStore(tmp_path / "s.sqlite")
        runner.run(st, [act], acting=True, budget=(64.0, 10.0), log_events=store.log_events)
        clock.t += 60
        runner.run(st, [act], acting=True, budget=(64.0, 10.0), log_events=store.log_events)
        rows = store.recent_events(50)
        kinds = sorted((r["kind"], r["tenant"], r["finding"]) for r in rows)
        assert kinds == [("health_reclaim", "team-low", "idle"), ("health_warning", "team-high", "idle"),
                         ("health_warning", "team-low", "idle")]
        snap = Snapshot(cfg=runner.cfg)
        mine = views.for_viewer(snap, Principal("alice", "tenant", "team-low"), rows)
        assert {(e["kind"], e["tenant"]) for e in mine} == {("health_warning", "team-low"),
                                                            ("health_reclaim", "team-low")}
        assert "infer-1" not in str(mine)


def test_a_job_whose_telemetry_was_refused_is_neither_told_nor_evicted():
    class Refused(Telem):
        def read(self, end=None) -> Telemetry:
            t = super().read(end)
            why = "3 activity sample(s) on gpu-node-7:0 NaN, infinite, negative or over 1"
            return Telemetry(t.end, t.step_s, t.n, t.gpus, {"batch/train-1": why})

    with capture_server(ROUTES) as capture:
        runner, act, _, cap, clock, _ = setup(capture)
        runner.telemetry = Refused(clock, {"batch/train-1": 80})
        st = state(["batch/train-1"])
        for _ in range(3):
            res = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
            clock.t += 60
        assert res.view["outcomes"] == [] and cap.sent == []          # no Event, no eviction, not even a read
        assert res.view["jobs"][0]["state"] == "rejected" and "NaN" in res.view["jobs"][0]["why"]


@pytest.mark.security
def test_a_pod_whose_telemetry_covers_half_its_gpus_is_neither_told_nor_evicted():
    """The pod holds 8 GPUs; the exporter labels 4 of them (the others unlabelled, or their series lost): the 4 idle
    GPUs are no evidence about the job, so nothing is sent, not even a warning, and operators see it as partial."""
    with capture_server(ROUTES) as capture:
        runner, act, _, cap, clock, _ = setup(capture)
        runner.telemetry = Telem(clock, {"batch/train-1": 80}, gpus=4)
        st = state(["batch/train-1"])
        for _ in range(3):
            res = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
            clock.t += 60
        assert evictions(cap) == [] and cap.sent == []
        assert [o["verdict"] for o in res.view["outcomes"]] == ["partial_telemetry"]
        assert "covers 4 of the job's 8 GPU(s)" in res.view["outcomes"][0]["message"]
        assert res.view["jobs"][0]["state"] == "partial"


@pytest.mark.security
def test_a_bare_pod_is_not_evicted_by_default():
    """A pod with no controller, idle past the threshold at low tier: an eviction would delete it for good (nothing
    recreates it), so it is skipped and reported; the Job's pod next to it is evicted."""
    with capture_server(ROUTES) as capture:
        runner, act, _, cap, clock, _ = setup(capture)
        runner.telemetry = Telem(clock, {"batch/bare-1": 80, "batch/train-1": 70})
        st = state(["batch/bare-1", "batch/train-1"])
        runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        clock.t += 60
        res = runner.run(st, [act], acting=True, budget=(64.0, 10.0))
        assert [e["path"] for e in evictions(cap)] == ["/api/v1/namespaces/batch/pods/train-1/eviction"]
        assert any(a.startswith("skip batch/bare-1: no controller") for r in res.reports for a in r.actions)


def _with_uid(p, uid, pclass=None):
    p = {**p, "metadata": {**p["metadata"], "uid": uid}}
    if pclass is not None:
        p["spec"] = {**p["spec"], "priorityClassName": pclass}
    return p


def test_a_pod_replaced_under_the_same_name_or_moved_to_another_class_is_not_evicted():
    """Issue 36: the reclaim re-reads the pod right before the eviction and compares it with the pod the cycle read
    (cluster_jobs): another UID (re-created under the name) or another PriorityClass is left alone; the pod still
    the one read is evicted with its UID as the eviction's precondition, and a 409 (replaced in between) is a skip."""
    read = _with_uid(pod("batch", "train-1", "gpu-autoscaler-low", owner="Job"), "uid-read")
    live = {"pod": read}
    def eviction(path, body):
        sent = (body["deleteOptions"].get("preconditions") or {}).get("uid")
        return (409, {"kind": "Status", "code": 409, "reason": "Conflict"}) if sent != live["pod"]["metadata"]["uid"] \
            else (201, {})

    routes = {**ROUTES,
              ("GET", r"/api/v1/pods"): (200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [read]}),
              ("GET", r"/api/v1/namespaces/batch/pods/train-1"): lambda path, body: (200, live["pod"]),
              ("POST", r"/api/v1/namespaces/batch/pods/train-1/eviction"): eviction}
    with capture_server(routes) as (api, cap):
        tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace="batch")]
        act = KubernetesActuator(api, KubernetesActuatorConfig(grace_period_s=20), tenants, dry_run=False)
        act.cluster_jobs(("team-low",))
        live["pod"] = _with_uid(read, "uid-new")                                      # re-created under the name
        rep = act.reclaim(["batch/train-1"], "health: idle")
        assert evictions(cap) == [] and any("not the pod the cycle read" in a for a in rep.actions), rep.actions
        live["pod"] = _with_uid(read, "uid-read", "gpu-autoscaler-high")              # same pod, now high
        rep = act.reclaim(["batch/train-1"], "health: idle")
        assert evictions(cap) == [] and any("PriorityClass" in a for a in rep.actions), rep.actions
        live["pod"] = read                                                            # the pod the cycle read
        rep = act.reclaim(["batch/train-1"], "health: idle")
        (ev,) = evictions(cap)
        assert ev["body"]["deleteOptions"]["preconditions"] == {"uid": "uid-read"} and rep.ok, rep.errors
        # replaced between the re-read and the eviction: the API refuses the precondition, nothing is evicted
        live["pod"] = read
        routes[("GET", r"/api/v1/namespaces/batch/pods/train-1")] = lambda path, body: (
            200, live.update(pod=_with_uid(read, "uid-newer")) or read)
        rep = act.reclaim(["batch/train-1"], "health: idle")
        assert rep.ok and any("replaced before the eviction" in a for a in rep.actions), (rep.actions, rep.errors)
