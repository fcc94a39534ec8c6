"""The daemon's Kubernetes view and cycle at scale, on the real control plane (issue 38, item 6).

The test suite's control plane (tests/support/k8s_cluster.py: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kwok, and Kueue's manager) on 127.0.0.1, filled with KWOK GPU nodes of several models
(A100, H100, T4; 8 GPUs each) and Running pods spread over the tenants' namespaces: per node 7 one-GPU pods and 3
CPU-only ones, bound to their node at creation (``spec.nodeName``, so kube-scheduler has nothing to place; kwok
makes them Running); each pod is labelled app=<namespace>-svc<0-4> (a tenant's five services). Nodes and pods are
created by parallel requests; the bench says how long each took.

``--affinity-pods N`` adds N pending GPU pods over the tenants with required pod affinity or anti-affinity, for the
view's own judging of it (daemon/actuators/k8s/pod_affinity.py) at scale: half run beside one of their tenant's
services (podAffinity to its app label by hostname), half spread a service's replicas (podAntiAffinity to their own
app label by hostname). Each asks 2 GPUs, which no node of 7 one-GPU pods has free, so it stays Pending; their class
is the low tier's, so kube-scheduler preempts nothing for them.

Then, in a child process (its RSS is the daemon's, not the bench's), the daemon's own objects: the Kubernetes view
(daemon/actuators/k8s/informer.py: list then watch of pods and nodes), the kubernetes actuator (PriorityClasses,
evictions; enforce_plan off beside Kueue) and the Kueue actuator (node holds, ResourceFlavors, ClusterQueues,
Cohorts, LocalQueues), not in dry run. It measures:

  - the initial list + watch (view start to both kinds listed and watched), and one snapshot;
  - ``--cycles`` cycles back to back, each the cycle's Kubernetes part with the real policy in between: the
    source's two reads through the Kueue actuator, as the daemon's source reads beside Kueue (wiring.jobs_lister):
    cluster_jobs (the view's pods, and the Kueue Workloads listed a page at a time: the waiting ones are demand)
    and cluster_nodes, ``plan()`` on that state (no forecast: reactive holds, as a
    daemon whose forecaster is not ready; the forecast itself is bench/cycle_bench.py's), and both actuators'
    ``apply``. The first cycle writes the Kueue objects and holds nodes; the rest are the steady state;
  - API requests per cycle: counted by the daemon's client (method and resource), and the apiserver's own
    ``apiserver_request_total`` LIST/WATCH of pods and nodes before and after the cycles;
  - the daemon's RSS (peak and at the end).

    nice -n 10 python bench/k8s_scale_bench.py --nodes 1000 --pods 10000 --out bench/out/k8s_scale.json
    python bench/k8s_scale_bench.py --nodes 20 --pods 200 --cycles 3 --out /tmp/k8s_scale_small.json   # a try
    nice -n 10 python bench/k8s_scale_bench.py --nodes 500 --pods 5000 --affinity-pods 200 --out /tmp/k8s_aff.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import provenance  # bench/, next to this script
import targets

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODELS = ("a100", "h100", "t4")
TIERS = ("high", "normal", "normal", "low", "low")  # tenant i's tier: TIERS[i % 5]
GPU_PODS, CPU_PODS = 7, 3                           # per node of 8 GPUs
SERVICES = 5                                        # app labels per tenant: <namespace>-svc<0-4>


def rss_mib() -> tuple[float, float]:
    """(peak, now) RSS of this process in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    now = next((int(line.split()[1]) / 1024 for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:")), float("nan"))
    return peak, now


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


# ------------------------------------------------------------------------------------------------ the cluster
def app(ns: str, k: int) -> str:
    return f"{ns}-svc{k % SERVICES}"


def fill(cp, nodes: int, pods: int, tenants: int, workers: int, affinity_pods: int = 0) -> tuple[dict, list[str]]:
    """Tenant namespaces, PriorityClasses, `nodes` KWOK nodes and `pods` pods bound to them; waits for Ready and
    Running; then `affinity_pods` pending pods with required pod (anti-)affinity. Returns the timings and the
    namespaces."""
    from kubernetes import client as k8s, config as kcfg

    from daemon.actuators.base import ActionReport
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig
    from tests.support.k8s_cluster import GPU_MODELS, KWOK_NODE, PRODUCT_LABEL

    api = cp.api()
    conf = k8s.Configuration()
    kcfg.load_kube_config(config_file=str(cp.admin_kubeconfig), client_configuration=conf)
    conf.connection_pool_maxsize = workers * 2  # a client of its own, with a connection per worker
    core = k8s.CoreV1Api(k8s.ApiClient(conf))
    out: dict = {}
    t0 = time.monotonic()
    names = [cp.namespace(f"tenant{i:02d}") for i in range(tenants)]
    out["namespaces_s"] = round(time.monotonic() - t0, 1)
    KubernetesActuator(api, KubernetesActuatorConfig(), [], dry_run=False).ensure_priority_classes(
        ActionReport("kubernetes", False))

    def node(i: int) -> None:
        name = f"gpu-{i:04d}"
        cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
        core.create_node({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "annotations": {KWOK_NODE: "fake"},
                                       "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                                  PRODUCT_LABEL: GPU_MODELS[MODELS[i % len(MODELS)]]}},
                          "status": {"capacity": cap, "allocatable": cap}})

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(node, range(nodes)))
    out["nodes_create_s"] = round(time.monotonic() - t0, 1)
    per_node = GPU_PODS + CPU_PODS

    def pod(k: int) -> None:
        i, j = divmod(k, per_node)
        t = k % tenants
        ns = names[t]
        res = {"limits": {"nvidia.com/gpu": "1"}} if j < GPU_PODS else {"requests": {"cpu": "1"}}
        core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{k:05d}", "namespace": ns, "labels": {"app": app(ns, k // tenants)}},
            "spec": {"nodeName": f"gpu-{i % nodes:04d}", "priorityClassName": f"gpu-autoscaler-{TIERS[t % len(TIERS)]}",
                     "terminationGracePeriodSeconds": 5,
                     "tolerations": [{"operator": "Exists"}],  # bound before the node controller lifts its taints
                     "containers": [{"name": "main", "image": "registry.invalid/train:1", "resources": res}]}})

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(pod, range(pods)))
    out["pods_create_s"] = round(time.monotonic() - t0, 1)

    def not_yet(selector: str, lister) -> bool:
        return bool(lister(field_selector=selector, limit=1).items)

    t0 = time.monotonic()
    deadline = t0 + 1800
    while time.monotonic() < deadline and not_yet("status.phase!=Running", core.list_pod_for_all_namespaces):
        time.sleep(5)
    out["pods_running_after_create_s"] = round(time.monotonic() - t0, 1)
    left = core.list_pod_for_all_namespaces(field_selector="status.phase!=Running", limit=500)
    out["pods_not_running"] = len(left.items) + (left.metadata.remaining_item_count or 0)

    def pending(i: int) -> None:
        ns = names[i % tenants]
        term = {"labelSelector": {"matchLabels": {"app": app(ns, i // tenants)}},
                "topologyKey": "kubernetes.io/hostname"}
        kind, labels = ("podAffinity", {"app": f"{app(ns, i // tenants)}-client"}) if i % 2 == 0 else \
            ("podAntiAffinity", {"app": app(ns, i // tenants)})
        core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"aff{i:05d}", "namespace": ns, "labels": labels},
            "spec": {"priorityClassName": "gpu-autoscaler-low",
                     "affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                     "containers": [{"name": "main", "image": "registry.invalid/serve:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(pending, range(affinity_pods)))
    out["affinity_pods_create_s"] = round(time.monotonic() - t0, 1)
    return out, names


# --------------------------------------------------------------------------------------------- the daemon side
def watch_lag(cp, view, ns: str, n: int = 5) -> list[float]:
    """Milliseconds from a pod's create answered to the pod in the view's next snapshot (through the watch), for
    `n` pods made one after another (then deleted)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(cp.api())
    lags = []
    for k in range(n):
        name = f"lag-{k}"
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                        "spec": {"containers": [{"name": "main", "image": "registry.invalid/x:1"}]}})
        t0 = time.perf_counter()
        key = f"{ns}/{name}"
        while not any(f"{p.metadata.namespace}/{p.metadata.name}" == key for p in view.snapshot().pods):
            if time.perf_counter() - t0 > 60:
                break
            time.sleep(0.005)
        lags.append(round((time.perf_counter() - t0) * 1000, 1))
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    return lags


def child(a) -> None:
    """The daemon's objects, in a process of their own: view start, snapshot, cycles, requests, RSS."""
    import numpy as np
    import pandas as pd
    from kubernetes import client as k8s

    from daemon.actuators.k8s.actuator import KubernetesActuator, TimedApiClient
    from daemon.actuators.k8s.informer import ClusterView
    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.config import parse_config
    from daemon.policy.engine import plan
    from daemon.policy.state import ClusterState
    from daemon.policy.types import PolicyMemory
    from tests.support.k8s_cluster import ControlPlane

    calls: dict[str, int] = {}

    class Counting(TimedApiClient):
        """The daemon's client, counting each request by method and resource (a watch is WATCH)."""

        def call_api(self, method, url, *args, **kwargs):
            path = url.split("?")[0]
            parts = [p for p in path.split("/") if p]
            res = parts[-1]
            for i, p in enumerate(parts):  # .../namespaces/<ns>/<resource>[/<name>[/<sub>]]
                if p in ("pods", "nodes", "events", "priorityclasses", "resourcequotas", "resourceflavors",
                         "clusterqueues", "localqueues", "cohorts", "workloads"):
                    # the collection (a list), one object, or one object's subresource (eviction, status)
                    res = p if i == len(parts) - 1 else f"{p} (one)" if i == len(parts) - 2 else \
                        f"{p}/{parts[i + 2]}"
            verb = "WATCH" if "watch=True" in url or "watch=true" in url else method
            key = f"{verb} {res}"
            calls[key] = calls.get(key, 0) + 1
            return super().call_api(method, url, *args, **kwargs)

    cp = ControlPlane(Path(a.tmp), Path(a.tmp))
    cp.server, cp.admin_kubeconfig = a.server, Path(a.tmp) / "admin.kubeconfig"
    names = json.loads(a.namespaces)
    tenants = [{"name": ns, "tier": TIERS[i % len(TIERS)], "k8s_namespace": ns} for i, ns in enumerate(names)]
    cfg = parse_config({"cluster": {"gpus": a.nodes * 8}, "source": {"kind": "prometheus"},
                        "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                        "state": {"path": str(Path(a.tmp) / "bench.db")}, "tenants": tenants,
                        "actuators": {"enabled": ["kubernetes", "kueue"], "dry_run": False,
                                      "kubernetes": {"kubeconfig": str(cp.admin_kubeconfig)}}})
    from kubernetes import config as kcfg

    conf = k8s.Configuration()
    kcfg.load_kube_config(config_file=str(cp.admin_kubeconfig), client_configuration=conf)
    client = Counting(conf, timeout_s=cfg.actuators.kubernetes.timeout_s)
    out: dict = {"rss_mib_before_view": round(rss_mib()[1], 1)}
    lists0 = cp.request_counts()
    view = ClusterView(client, request_timeout_s=cfg.actuators.kubernetes.timeout_s)
    t0 = time.monotonic()
    view.start()
    synced = view.wait_synced(600)
    out["view_initial_list_watch_s"] = round(time.monotonic() - t0, 2)
    if not synced:
        raise SystemExit("the view did not sync within 600 s")
    t0 = time.perf_counter()
    snap = view.snapshot()
    out["snapshot_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    out["view_pods"], out["view_nodes"] = len(snap.pods), len(snap.nodes)
    out["rss_mib_after_view"] = round(rss_mib()[1], 1)
    a_cfg = cfg.actuators
    kub = KubernetesActuator(client, a_cfg.kubernetes, cfg.tenants, dry_run=False, enforce_plan=False,
                             min_runtime_s=cfg.policy.preempt_min_runtime_s, hold_label=a_cfg.kueue.hold_label,
                             view=view)
    kueue = KueueActuator(client, a_cfg.kueue, cfg.tenants, dry_run=False, conn=a_cfg.kubernetes,
                          min_runtime_s=cfg.policy.preempt_min_runtime_s, view=view)
    names_t = tuple(t.name for t in cfg.tenants)
    tiers = tuple(t.tier for t in cfg.tenants)
    memory, last = PolicyMemory(), None
    cycles = []
    before = cp.request_counts()
    for c in range(a.cycles):
        calls.clear()
        t0 = time.perf_counter()
        jobs = kueue.cluster_jobs(names_t)     # the daemon's source reads through this one (wiring.jobs_lister)
        nodes = kueue.cluster_nodes(names_t)
        t_read = time.perf_counter()
        run = jobs.running
        used = np.bincount(jobs.tenant[run], weights=jobs.gpus[run], minlength=len(names_t)).astype(float)
        pending = np.bincount(jobs.tenant[~run], weights=jobs.gpus[~run], minlength=len(names_t)).astype(float)
        state = ClusterState(at=pd.Timestamp.now(tz="UTC"), tenants=names_t, tiers=tiers,
                             capacity=int(nodes.gpus.sum()), used=used, pending=pending, jobs=jobs, nodes=nodes)
        p = plan(None, state, memory, cfg, last)
        memory, last = p.memory, p
        t_plan = time.perf_counter()
        reps = [kueue.apply(p), kub.apply(p)]
        t_end = time.perf_counter()
        cycles.append({"total_ms": (t_end - t0) * 1000, "read_ms": (t_read - t0) * 1000,
                       "plan_ms": (t_plan - t_read) * 1000, "act_ms": (t_end - t_plan) * 1000,
                       "jobs": int(len(jobs)), "reserved_gpus": int(sum(p.reservations.values())),
                       "preemptions": len(p.preemptions), "actions": sum(len(r.actions) for r in reps),
                       "errors": [e for r in reps for e in r.errors][:5], "requests": dict(calls)})
        print(f"cycle {c}: {cycles[-1]['total_ms']:.0f} ms, {sum(calls.values())} requests", file=sys.stderr)
    after = cp.request_counts()
    keys = sorted({k for k in after if k[0] in ("LIST", "WATCH") and k[1] in ("pods", "nodes")})
    out["apiserver_during_cycles"] = {f"{v} {r} ({s})": after.get((v, r, s), 0) - before.get((v, r, s), 0)
                                      for v, r, s in keys}
    out["apiserver_lists_view_start"] = {f"LIST {r}": before.get(("LIST", r, "cluster"), 0)
                                         - lists0.get(("LIST", r, "cluster"), 0) for r in ("pods", "nodes")}
    steady = [c["total_ms"] for c in cycles[1:]] or [c["total_ms"] for c in cycles]
    out["cycles"] = cycles
    out["cycle_p50_ms"] = round(pct(steady, 50), 1)
    out["cycle_p95_ms"] = round(pct(steady, 95), 1)
    out["cycle_max_ms"] = round(max(steady), 1)
    out["first_cycle_ms"] = round(cycles[0]["total_ms"], 1)
    for part in ("read", "plan", "act"):
        out[f"{part}_p50_ms"] = round(pct([c[f"{part}_ms"] for c in cycles[1:] or cycles], 50), 1)
    out["requests_per_steady_cycle_max"] = max(sum(c["requests"].values()) for c in cycles[1:] or cycles)
    out["full_lists_in_cycles"] = sum(v for c in cycles for k, v in c["requests"].items()
                                      if k in ("GET pods", "GET nodes"))
    out["view_lists"] = {r.kind: r.lists for r in view.reflectors}
    out["view_watches"] = {r.kind: r.watches for r in view.reflectors}
    out["watch_lag_ms"] = watch_lag(cp, view, names[0])
    peak, now = rss_mib()
    out["rss_mib_peak"], out["rss_mib_end"] = round(peak, 1), round(now, 1)
    view.stop()
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--tenants", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--workers", type=int, default=16, help="parallel create requests")
    ap.add_argument("--affinity-pods", type=int, default=0,
                    help="pending GPU pods with required pod affinity (half) or anti-affinity (half)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "k8s_scale.json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    ap.add_argument("--namespaces", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    from tests.support.k8s_cluster import start_control_plane

    res = provenance.started()
    res["targets"] = targets.K8S_SCALE
    res["input"] = {"nodes": a.nodes, "pods": a.pods, "tenants": a.tenants, "gpus_per_node": 8,
                    "models": list(MODELS), "gpu_pods_per_node": GPU_PODS, "cpu_pods_per_node": CPU_PODS,
                    "pod_labels": f"app=<namespace>-svc<0-{SERVICES - 1}>", "affinity_pods": a.affinity_pods}
    tmp = Path(tempfile.mkdtemp(prefix="k8s-scale-"))
    cp = start_control_plane(tmp)
    try:
        cp.start_kueue()
        res["control_plane_start_s"] = {k: round(v, 1) for k, v in cp.timings.items()}
        fill_t, names = fill(cp, a.nodes, a.pods, a.tenants, a.workers, a.affinity_pods)
        res["cluster"] = fill_t
        print(f"cluster filled: {fill_t}", file=sys.stderr)
        res["load_average_1min_before_daemon"] = provenance.load_average()
        proc = subprocess.run([sys.executable, __file__, "--child", "--tmp", str(tmp), "--server", cp.server,
                               "--namespaces", json.dumps(names), "--nodes", str(a.nodes),
                               "--cycles", str(a.cycles)], capture_output=True, text=True, timeout=3600,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        sys.stderr.write(proc.stderr[-4000:])
        if proc.returncode != 0:
            raise SystemExit(f"the daemon's side failed ({proc.returncode})")
        res["daemon"] = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        cp.stop()
    provenance.finished(res)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    d = res["daemon"]
    print(f"view {d['view_initial_list_watch_s']} s; cycle p50 {d['cycle_p50_ms']} ms p95 {d['cycle_p95_ms']} ms; "
          f"RSS peak {d['rss_mib_peak']} MiB; -> {a.out}")


if __name__ == "__main__":
    main()
