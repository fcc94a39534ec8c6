"""Job health on the real API server (daemon/service/health.py through daemon/actuators/k8s/actuator.py): a
low-priority Job's pod the detectors find idle past the action threshold is told (a real Event in its namespace)
and then evicted through the Eviction API with the configured grace period: the API server marks it with the
``DisruptionTarget`` condition of an eviction and a deletionTimestamp the grace period ahead, and kwok ends it.
The telemetry is hand-made (its Prometheus read is tested on a real server in tests/integration); the request
shapes are pinned in tests/health/test_health_actions.py."""

import datetime as dt
import threading

import numpy as np
import pandas as pd
import pytest
from kubernetes import client as k8s, watch
from prometheus_client import CollectorRegistry

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.config import Config, KubernetesActuatorConfig, TenantConfig
from daemon.health.types import GpuTrace, Telemetry
from daemon.policy.state import ClusterState
from daemon.policy.types import Plan, PolicyMemory
from tests.support.k8s_cluster import gpu_pod, pod_running
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

N, STEP, GRACE = 90, 60.0, 30


class Idle:
    """`job`'s 8 GPUs on `node`: busy, then idle for the last `minutes` of the window ending at `clock()`."""

    def __init__(self, clock, job, node, minutes):
        self.clock, self.job, self.node, self.minutes = clock, job, node, minutes

    def read(self, end=None) -> Telemetry:
        a = np.full(N, 0.9)
        a[N - self.minutes:] = 0.0
        gpus = tuple(GpuTrace(self.job, "kubernetes", self.job.split("/")[0], self.node, str(k), a.copy(),
                              np.full(N, 1e3), np.full(N, 79e3), np.zeros(N)) for k in range(8))
        return Telemetry(self.clock(), STEP, N, gpus)


def test_an_idle_low_priority_pod_is_told_then_evicted_through_the_eviction_api_with_its_grace_period(kube):
    core, batch = k8s.CoreV1Api(kube.api()), k8s.BatchV1Api(kube.api())
    ns = kube.namespace("batch")
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace=ns)]
    node = kube.gpu_node(f"{ns}-n1", "a100", gpus=8)
    wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(grace_period_s=GRACE), tenants, dry_run=False)
    rep = act.apply(Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.5, high_pool=0, reservations={},
                         quotas={}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
                         notes=(), memory=PolicyMemory()))                 # the PriorityClasses the pod names
    assert rep.ok, rep.errors
    pod = gpu_pod(ns, "x", 8, "gpu-autoscaler-low", {"kubernetes.io/hostname": node})
    pod["spec"]["restartPolicy"] = "Never"
    batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
                                     "spec": {"backoffLimit": 0, "template": {"spec": pod["spec"]}}})
    wait_for(lambda: core.list_namespaced_pod(ns).items, timeout=60, what="the Job's pod")
    name = core.list_namespaced_pod(ns).items[0].metadata.name
    wait_for(lambda: pod_running(core, ns, name), timeout=60, what="the Job's pod Running")
    job = f"{ns}/{name}"

    jobs = act.cluster_jobs(("team-low",))                                  # the cycle's read of the pods
    assert list(jobs.ids) == [job] and list(jobs.node) == [node]
    # the window's 90 minutes are this pod's run (kwok's pods start now: its run time is set as a 2-hour-old one's)
    jobs.runtime_s[:] = 7200.0
    state = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=("team-low",), tiers=("low",), capacity=8,
                         used=np.array([8.0]), pending=np.zeros(1), jobs=jobs)
    from daemon.service.health import HealthRunner

    now = [dt.datetime.now(dt.timezone.utc).timestamp()]
    cfg = Config(source={"kind": "prometheus"}, tenants=[t.model_dump() for t in tenants], health={"enabled": True})
    runner = HealthRunner(cfg, Idle(lambda: now[0], job, node, 70), CollectorRegistry(), clock=lambda: now[0])

    first = runner.run(state, [act], acting=True, budget=(64.0, 10.0))      # told first, never evicted at once
    assert [o["verdict"] for o in first.view["outcomes"]] == ["warn"]
    told = [e for e in core.list_namespaced_event(ns).items if e.source.component == "gpu-autoscaler"]
    assert [e.reason for e in told] == ["HealthIdle"] and name in told[0].message
    assert core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is None

    seen: list = []
    rv = core.read_namespaced_pod(name, ns).metadata.resource_version
    w = watch.Watch()

    def follow():
        for ev in w.stream(core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
                           resource_version=rv, timeout_seconds=90):
            seen.append((ev["type"], ev["object"]))
            if ev["type"] == "DELETED":
                return
    t = threading.Thread(target=follow, daemon=True)
    t.start()
    now[0] += 60
    sent = dt.datetime.now(dt.timezone.utc)
    second = runner.run(state, [act], acting=True, budget=(64.0, 10.0))
    assert [o["verdict"] for o in second.view["outcomes"]] == ["requeue"]
    assert any(a == f"evict {job} (grace {GRACE} s)" for r in second.reports for a in r.actions), second.reports
    t.join(timeout=90)
    w.stop()
    assert seen and seen[-1][0] == "DELETED", [e for e, _ in seen]        # kwok ended it
    marked = [p for e, p in seen if e == "MODIFIED" and p.metadata.deletion_timestamp is not None]
    assert marked, [e for e, _ in seen]
    p = marked[0]
    assert p.metadata.deletion_grace_period_seconds == GRACE
    ahead = (p.metadata.deletion_timestamp - sent).total_seconds()
    assert GRACE - 5 <= ahead <= GRACE + 5, ahead
    # the Eviction API's mark (a DELETE would not set it)
    cond = [c for _, q in seen for c in (q.status.conditions or []) if c.type == "DisruptionTarget"]
    assert cond and cond[0].reason == "EvictionByEvictionAPI", [(c.type, c.reason) for c in cond]
