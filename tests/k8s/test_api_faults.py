"""The API server down, on the real control plane: a daemon (Prometheus source, Kubernetes actuator) reaches the
apiserver of tests/support/k8s_cluster.py through a TCP gate (tests/support/tcp_gate.py) that the test closes, so
the apiserver is really unreachable for it (connection refused), then reachable again.

- Down at start: the daemon starts, /healthz says degraded and why, the log says it in one line per cycle; once
  the apiserver answers, the daemon is ok.
- Down mid-run, after a good cycle: the cycle keeps the last good plan (never a plan on an empty job list) and
  makes no preemption; the tenants' pods are untouched; the next cycle after it is back is ok again.
"""

import logging
import time
from urllib.parse import urlsplit

import httpx
import pytest
from kubernetes import client as k8s

from daemon.config import Config
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.k8s_cluster import gpu_pod, kubeconfig, pod_running
from tests.support.services import metrics_target, prometheus_server, scrape_config, wait_for
from tests.support.tcp_gate import TcpGate

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.services]


@pytest.fixture
def world(kube, tmp_path):
    """Two tenants (namespaces), a KWOK node of 8 GPUs with a low tenant's 4-GPU Job pod Running on it, a
    dcgm-style exporter for that node scraped by a real Prometheus, and a gate to the apiserver (open)."""
    low, high = kube.namespace("low"), kube.namespace("high")
    node = kube.gpu_node(f"{low}-n1", "a100", gpus=8)
    wait_for(lambda: kube.node_ready(node), timeout=60, what="KWOK node Ready")
    core = k8s.CoreV1Api(kube.api())
    pc = k8s.SchedulingV1Api(kube.api())
    try:
        pc.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": "gpu-autoscaler-low"}, "value": 0,
                                  "preemptionPolicy": "Never"})
    except k8s.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    spec = gpu_pod(low, "x", 4, "gpu-autoscaler-low", {"kubernetes.io/hostname": node})["spec"]
    spec["restartPolicy"] = "Never"
    k8s.BatchV1Api(kube.api()).create_namespaced_job(low, {"apiVersion": "batch/v1", "kind": "Job",
                                                           "metadata": {"name": "train"},
                                                           "spec": {"template": {"spec": spec}}})
    wait_for(lambda: core.list_namespaced_pod(low).items, timeout=60, what="the Job's pod")
    pod = core.list_namespaced_pod(low).items[0].metadata.name
    wait_for(lambda: pod_running(core, low, pod), timeout=60, what="the Job's pod Running")
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    owner = f',namespace="{low}"'
    lines += [f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{g}"{owner if g < 4 else ""}}} 90' for g in range(8)]
    target = metrics_target("\n".join(lines) + "\n")
    api = urlsplit(kube.server)
    gate = TcpGate((api.hostname, api.port))
    kc = kubeconfig(tmp_path / "daemon.kubeconfig", f"https://127.0.0.1:{gate.port}", kube.tmp / "ca.crt",
                    kube.tmp / "admin.crt", kube.tmp / "admin.key")
    try:
        with prometheus_server(tmp_path, scrape_config(target)) as (url, _):
            cfg = Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 2, "retries": 0}},
                         cycle={"history_steps": 60, "resolution_s": 1, "interval_s": 1},
                         forecaster={"kind": "seasonal_naive"},
                         tenants=[{"name": high, "tier": "high"}, {"name": low, "tier": "low"}],
                         state={"path": tmp_path / "state.sqlite"},
                         server={"port": free_port(), "webhook_token": "t0ken-for-tests-only"},
                         actuators={"enabled": ["kubernetes"], "dry_run": False,
                                    "kubernetes": {"kubeconfig": str(kc), "timeout_s": 3}})
            q = cfg.source.prometheus.query("capacity")
            wait_for(lambda: httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"],
                     timeout=30, what="the exporter scraped")
            time.sleep(1.1)
            yield {"cfg": cfg, "gate": gate, "low": low, "pod": pod, "core": core}
    finally:
        gate.close()
        target.shutdown()
        target.server_close()


def test_the_apiserver_down_at_start_the_daemon_starts_degraded_and_says_so(world, caplog):
    cfg, gate = world["cfg"], world["gate"]                            # the gate is closed: nothing answers
    d = Daemon(build_runtime(cfg))
    base = f"http://127.0.0.1:{cfg.server.port}"
    with caplog.at_level(logging.ERROR, logger="gpu_autoscaler"):
        d.start()
        try:
            wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).json()["status"] == "degraded", timeout=60,
                     what="/healthz degraded")
            assert "ViewStale" not in httpx.get(f"{base}/healthz", timeout=2).text      # open: no error text
            h = d.health(detail=True)                                       # the operator's views: the detail
            # the daemon's watched view (daemon/actuators/k8s/informer.py) could not list: stale, and why
            assert h["reason"].startswith("source unavailable: cannot read the scheduler's jobs: ViewStale: the "
                                          "Kubernetes view is stale, not used this cycle: "), h
            assert f"the API server https://127.0.0.1:{gate.port} is unreachable" in h["reason"], h
            lines = [r.getMessage() for r in caplog.records if "cannot read the scheduler's jobs" in r.getMessage()]
            assert lines and all("\n" not in m for m in lines), lines          # one line each, no traceback
            assert not any(r.exc_info for r in caplog.records), "a traceback was logged"
            gate.open()                                                   # the apiserver answers: ok again
            wait_for(lambda: httpx.get(f"{base}/healthz", timeout=2).json()["status"] == "ok", timeout=60,
                     what="/healthz ok once the apiserver answers")
        finally:
            d.stop()


def test_the_apiserver_down_mid_run_keeps_the_plan_and_preempts_nothing(world):
    cfg, gate, core, low, pod = world["cfg"], world["gate"], world["core"], world["low"], world["pod"]
    gate.open()
    rt = build_runtime(cfg, with_store=False)
    try:
        good = rt.runner.run_once()
        assert good.outcome == "ok", good.error
        assert f"{low}/{pod}" in set(good.collected.state.jobs.ids)          # the real pod, read through the gate
        view = next(a for a in rt.actuators if getattr(a, "view", None) is not None).view
        gate.close()
        # the watched view's connections are cut: it says so before the cycle reads it (not a race with the cycle)
        wait_for(lambda: not view.pods.fresh and not view.nodes.fresh, timeout=30, what="the view stale")
        down = rt.runner.run_once()
        assert down.outcome == "source_error" and "cannot read the scheduler's jobs" in down.error, down.error
        assert down.plan is good.plan and rt.runner.last_plan is good.plan  # the last good plan is kept
        assert down.reports == [] or not any(a.startswith("evict ") for r in down.reports for a in r.actions)
        gate.open()
        live = core.read_namespaced_pod(pod, low)
        assert live.metadata.deletion_timestamp is None and live.status.phase == "Running"
        # the DRA kinds too: with DRA GPU classes configured (the default) a cycle refuses a view without them
        wait_for(lambda: view.wait_synced(0.1) and all(r.fresh for r in view.dra), timeout=60,
                 what="the view up again (its reconnect backoff)")
        back = rt.runner.run_once()
        assert back.outcome == "ok", back.error
    finally:
        rt.close()   # its view's watch threads: else they retry the stopped apiserver for the worker's life
