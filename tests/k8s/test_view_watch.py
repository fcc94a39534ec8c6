"""The daemon's Kubernetes view on the real apiserver: pods and nodes listed once, then watched
(daemon/actuators/k8s/informer.py). Counted by the apiserver's own apiserver_request_total: after the first list,
cycles' reads make no LIST of pods or nodes; a pod created after the list is in the next snapshot; a watch that
has expired (410) leads to a new list; a watch that is cut makes the view stale, said, and refused to the cycle
until it is back."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from kubernetes import client as k8s

from daemon.actuators.k8s.informer import ClusterView, Reflector, ViewStale
from daemon.config import parse_config
from tests.support.k8s_cluster import gpu_pod, kubeconfig
from tests.support.services import wait_for
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.xdist_group("k8s")


def _lists(kube) -> dict[str, float]:
    """Cluster-wide LISTs of pods and of nodes the apiserver has served so far."""
    counts = kube.request_counts()
    return {r: counts.get(("LIST", r, "cluster"), 0.0) for r in ("pods", "nodes")}


def _runtime(kube, tmp_path, tenants: list[dict]):
    from daemon.service.wiring import build_runtime

    cfg = parse_config({"cluster": {"gpus": 16}, "source": {"kind": "prometheus"},
                        "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                        "state": {"path": str(tmp_path / "s.db")}, "tenants": tenants,
                        "actuators": {"enabled": ["kubernetes", "kueue"], "dry_run": True,
                                      "kubernetes": {"kubeconfig": str(kube.admin_kubeconfig)}}})
    return build_runtime(cfg, with_store=False)


def tenant_view(kube, tmp_path, tenants) -> tuple:
    """(the tenants' names, the runtime over them, its Kubernetes actuator): the daemon's view of `tenants`
    (kube.tenants' first value), as the view and hostile-pod tests read it; close the runtime after."""
    rt = _runtime(kube, tmp_path, [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                   for t in tenants])
    return tuple(t.name for t in tenants), rt, rt.actuators[-2]


def test_cycles_read_the_watched_view_with_no_list_after_the_first_and_see_a_new_pod(kube, tmp_path):
    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-a": "high"}, nodes=1)
    names = tuple(t.name for t in tenants)
    rt = _runtime(kube, tmp_path, [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                   for t in tenants])
    kub, kueue = rt.actuators[-2], rt.actuators[-1]
    try:
        before = _lists(kube)
        assert kub.cluster_jobs(names).ids.tolist() == []  # the first read: the view lists, once
        assert nodes[0] in kub.cluster_nodes(names).names.tolist()
        first = _lists(kube)
        core.create_namespaced_pod(ns["team-a"], gpu_pod(ns["team-a"], "late", 2))
        job = f"{ns['team-a']}/late"
        # the next cycles' reads see the pod (from the watch) ...
        wait_for(lambda: job in kub.cluster_jobs(names).ids.tolist(), timeout=60, what="the new pod in the view")
        for _ in range(3):  # three cycles of every reader: jobs, nodes, the Kueue node holds
            kub.cluster_jobs(names)
            kub.cluster_nodes(names)
            kueue.nodes.read()
        # ... and the apiserver served no LIST of pods or nodes for them (the old code: 2 pod lists a cycle)
        assert _lists(kube) == first, (before, first, _lists(kube))
        assert first["pods"] - before["pods"] >= 1 and first["nodes"] - before["nodes"] >= 1
        assert kub.view is kueue.pods.view and kub.view.pods.lists == 1 and kub.view.nodes.lists == 1
        # what the view holds of them: what the daemon reads, not the fields it never does (most of their size)
        wait_for(lambda: core.read_namespaced_pod("late", ns["team-a"]).status.conditions, timeout=60,
                 what="the pod's conditions on the server")
        snap = kub.view.snapshot()
        pod = next(p for p in snap.pods if p.metadata.name == "late")
        node = next(n for n in snap.nodes if n.metadata.name == nodes[0])
        assert pod.metadata.uid and pod.spec.containers and pod.status.phase
        assert pod.metadata.managed_fields is None and pod.status.conditions is None
        assert node.metadata.managed_fields is None and any(c.type == "Ready" for c in node.status.conditions)
    finally:
        rt.close()
        kube.delete_nodes(nodes)


def test_a_hold_patched_from_the_view_is_released_at_once_from_the_patch_answer(kube):
    """The Kueue node holds read the watched view: a hold made and released at once (a daemon stopping right after a
    cycle) releases that node, from the version its own patch answered, not the view's older one (a 409)."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.config import KueueActuatorConfig

    core = k8s.CoreV1Api(kube.api())
    tenants, ns, nodes = kube.tenants({"team-high": "high"}, nodes=1)
    view = ClusterView(kube.api())
    act = KueueActuator(kube.api(), KueueActuatorConfig(), tenants, dry_run=False, view=view)
    label = KueueActuatorConfig().hold_label
    try:
        rep = ActionReport("kueue", False)
        assert act.nodes.apply(rep, {"team-high": 8}, {}) == {"team-high": 8} and rep.ok, rep.errors
        assert (core.read_node(nodes[0]).metadata.labels or {}).get(label) == "team-high"
        rep = ActionReport("kueue", False)
        act.nodes.release_all(rep)
        assert rep.ok, rep.errors
        assert label not in (core.read_node(nodes[0]).metadata.labels or {})
        assert view.nodes.lists == 1
    finally:
        view.stop()
        kube.delete_nodes(nodes)


def test_an_expired_watch_410_leads_to_a_new_list(kube):
    """The Reflector is the pods' and nodes' one; its kind here is events, which the apiserver watches from etcd
    (no watch cache), so compacting etcd's history makes the real apiserver answer the resumed watch 410 Gone."""
    core = k8s.CoreV1Api(kube.api())
    ns = kube.namespace("exp")
    r = Reflector("events", core.list_event_for_all_namespaces, watch_s=5)
    assert r.step() and r.lists == 1 and r.fresh
    held = r.rv
    ev = {"metadata": {"generateName": "e-", "namespace": ns},
          "involvedObject": {"kind": "Namespace", "name": ns, "namespace": ns},
          "reason": "Test", "message": "after the list"}
    for _ in range(3):
        core.create_namespaced_event(ns, ev)
    assert kube.compact_etcd() > int(held)
    assert not r.step()  # the watch from the held version: 410
    assert not r.fresh and r.rv is None and "410" in r.why_stale, r.why_stale
    assert r.step() and r.lists == 2 and r.fresh  # listed again, with what was made meanwhile
    assert sum(1 for k in r.store if k.startswith(f"{ns}/")) == 3


def test_a_cut_watch_makes_the_view_stale_and_the_cycle_refuses_it_until_it_is_back(kube, tmp_path):
    api = urlparse(kube.server)
    relay = TcpGate((api.hostname, api.port)).open()
    conf = k8s.Configuration()
    from kubernetes import config as kcfg

    kc = kubeconfig(tmp_path / "relay.kubeconfig", f"https://127.0.0.1:{relay.port}", kube.tmp / "ca.crt",
                    kube.tmp / "admin.crt", kube.tmp / "admin.key")
    kcfg.load_kube_config(config_file=str(kc), client_configuration=conf)
    from daemon.actuators.k8s.actuator import KubernetesActuator, TimedApiClient
    from daemon.config import KubernetesActuatorConfig, TenantConfig

    view = ClusterView(TimedApiClient(conf, timeout_s=5), request_timeout_s=5, watch_s=60)
    act = KubernetesActuator(kube.api(), KubernetesActuatorConfig(), [TenantConfig(name="x", tier="low")],
                             view=view)
    try:
        view.start()
        assert view.wait_synced(60)
        act.cluster_jobs(("x",))  # fresh: read
        wait_for(lambda: view.pods.watches and view.nodes.watches, timeout=60, what="both watches open")
        opened = view.pods.watches
        relay.close()
        wait_for(lambda: not view.pods.fresh and not view.nodes.fresh, timeout=60, what="the view stale")
        with pytest.raises(ViewStale, match="the Kubernetes view is stale, not used this cycle: pods: .*nodes: "):
            act.cluster_jobs(("x",))
        with pytest.raises(ViewStale):
            act.cluster_nodes(("x",))  # not the last fresh snapshot either
        relay.open()  # reconnects (backoff) and resumes from the version it holds: fresh again, no new list
        wait_for(lambda: view.wait_synced(0.1), timeout=90, what="the view fresh again")
        act.cluster_jobs(("x",))
        assert view.pods.lists == 1 and view.pods.watches > opened
    finally:
        view.stop()
        relay.close()


def test_an_apiserver_down_at_start_is_said_at_the_first_read_not_waited_for(tmp_path):
    """No apiserver where the kubeconfig points: the first read fails at once with the reason (the daemon starts
    degraded and says so), instead of waiting the sync timeout for a list that cannot come."""
    import time

    from kubernetes import config as kcfg

    from daemon.actuators.k8s.actuator import TimedApiClient
    from tests.conftest import free_port

    port = free_port()  # nothing listens there
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n"
                  "users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n"
                  "    user: u\ncurrent-context: x\n")
    conf = k8s.Configuration()
    kcfg.load_kube_config(config_file=str(kc), client_configuration=conf)
    view = ClusterView(TimedApiClient(conf, timeout_s=2), request_timeout_s=2, sync_timeout_s=120)
    try:
        t0 = time.monotonic()
        with pytest.raises(ViewStale, match=r"the Kubernetes view is stale, not used this cycle: .*the API server "
                                            rf"https://127.0.0.1:{port} is unreachable"):
            view.snapshot()
        assert time.monotonic() - t0 < 60
    finally:
        view.stop()
