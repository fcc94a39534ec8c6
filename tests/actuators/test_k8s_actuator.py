"""No Kubernetes API server can run here. These tests drive the official `kubernetes` client for real against
a capture server on 127.0.0.1 (tests/support/k8s_capture.py) that records the exact HTTP requests it sends (method,
path, query, headers, JSON body) and answers with canned API responses. What is checked is what a real API
server would receive."""

import contextlib

import pytest
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.objects import priority_class_name
from daemon.config import KubernetesActuatorConfig, TenantConfig
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption
from tests.support.k8s_capture import capture_server

_stacks: list[contextlib.ExitStack] = []


@pytest.fixture(autouse=True)
def _capture_servers():
    with contextlib.ExitStack() as stack:
        _stacks.append(stack)
        yield
        _stacks.pop()


def served(routes, timeout_s=None):
    """(ApiClient, capture) for a capture server that lives as long as the running test."""
    return _stacks[-1].enter_context(capture_server(routes, timeout_s))


def pod(ns, name, pclass, phase="Running"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"containers": [{"name": "c"}], "priorityClassName": pclass, "nodeName": "gpu-node-7"},
            "status": {"phase": phase}}


def actuator(routes, dry_run=False):
    api, cap = served(routes)
    tenants = [TenantConfig(name="team-low", tier="low", k8s_namespace="batch"),
               TenantConfig(name="team-high", tier="high", k8s_namespace="serving"),
               TenantConfig(name="ops", tier="normal", k8s_namespace="kube-system")]  # never touched
    return KubernetesActuator(api, KubernetesActuatorConfig(grace_period_s=20), tenants, dry_run), cap


def plan(preemptions=(), quotas=None):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=64, load=0.9, high_pool=12, reservations={"team-high": 12},
                quotas=quotas if quotas is not None else {"team-low": 40}, limits={}, preemptions=tuple(preemptions),
                notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())


NO_QUOTAS = (200, {"apiVersion": "v1", "kind": "ResourceQuotaList", "metadata": {}, "items": []})
BASE = {
    ("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses"): (201, {}),
    ("GET", r"/api/v1/resourcequotas"): NO_QUOTAS,
    ("PUT", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler"): (404, {"kind": "Status", "code": 404}),
    ("POST", r"/api/v1/namespaces/batch/resourcequotas"): (201, {}),
    ("GET", r"/api/v1/namespaces/batch/pods/train-1"): (200, pod("batch", "train-1", "gpu-autoscaler-low")),
    ("GET", r"/api/v1/namespaces/serving/pods/infer-1"): (200, pod("serving", "infer-1", "gpu-autoscaler-high")),
    ("POST", r"/api/v1/namespaces/batch/pods/train-1/eviction"): (201, {}),
}


def test_apply_sends_priority_classes_quota_and_eviction():
    act, pool = actuator(BASE)
    rep = act.apply(plan([Preemption("batch/train-1", "team-low", 8, "gpu-node-7", "peak ahead for team-high"),
                          Preemption("serving/infer-1", "team-high", 8, "gpu-node-7", "must be refused")]))
    pcs = [r for r in pool.sent if r["path"].endswith("/priorityclasses")]
    assert [r["body"]["metadata"]["name"] for r in pcs] == [priority_class_name(t) for t in ("high", "normal", "low")]
    low = pcs[2]["body"]
    assert low["value"] == 0 and low["preemptionPolicy"] == "Never" and low["globalDefault"] is False
    quota = [r for r in pool.sent if r["method"] == "POST" and r["path"].endswith("/resourcequotas")][0]["body"]
    assert quota["kind"] == "ResourceQuota" if "kind" in quota else True
    assert quota["metadata"] == {"name": "gpu-autoscaler", "namespace": "batch",
                                 "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}}
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "40"}
    ev = [r for r in pool.sent if r["path"].endswith("/eviction")]
    assert len(ev) == 1 and ev[0]["path"] == "/api/v1/namespaces/batch/pods/train-1/eviction"
    body = ev[0]["body"]
    assert ev[0]["headers"]["user-agent"].startswith("OpenAPI-Generator/")   # the official client, over the wire
    assert body["metadata"]["name"] == "train-1" and body["deleteOptions"]["gracePeriodSeconds"] == 20
    assert body["metadata"]["annotations"]["gpu-autoscaler/reason"] == "peak ahead for team-high"
    assert any("refused to evict serving/infer-1" in e for e in rep.errors)
    assert not any(r["path"].startswith("/api/v1/namespaces/serving/pods/infer-1/eviction") for r in pool.sent)
    assert not any("/nodes" in r["path"] for r in pool.sent)     # this mode holds no nodes (Kueue mode does)


def test_quota_is_not_resent_when_unchanged_and_existing_classes_are_fine():
    routes = dict(BASE)
    routes[("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses")] = (409, {"kind": "Status", "code": 409})
    routes[("PUT", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler")] = (200, {})
    act, pool = actuator(routes)
    assert act.apply(plan()).ok
    n = len(pool.sent)
    assert act.apply(plan()).ok
    assert len(pool.sent) == n                       # idempotent: nothing new sent
    act.apply(plan(quotas={"team-low": 32}))
    puts = [r for r in pool.sent if r["method"] == "PUT"]
    assert puts[-1]["body"]["spec"]["hard"]["requests.nvidia.com/gpu"] == "32"


def test_dry_run_sends_nothing_that_writes():
    act, pool = actuator(BASE, dry_run=True)
    rep = act.apply(plan([Preemption("batch/train-1", "team-low", 8, "", "x")]))
    assert rep.dry_run and any(a.startswith("evict") for a in rep.actions)
    assert all(r["method"] == "GET" for r in pool.sent)


def _quota(ns, labelled=True, name="gpu-autoscaler"):
    meta = {"name": name, "namespace": ns, "resourceVersion": "1"}
    if labelled:
        meta["labels"] = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta,
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}}


def _quota_routes(items):
    deleted = []

    def delete(path, body):
        deleted.append(path)
        return 200, {"kind": "Status"}

    routes = {**BASE, ("GET", r"/api/v1/resourcequotas"): (200, {"apiVersion": "v1", "kind": "ResourceQuotaList",
                                                                  "metadata": {}, "items": items}),
              ("DELETE", r"/api/v1/namespaces/[^/]+/resourcequotas/[^/]+"): delete}
    return routes, deleted


def test_stopping_deletes_our_quotas_and_no_other():
    """release_holds (the daemon stops, actuators.release_holds_on_stop): our quota goes from each tenant
    namespace; one without our label stays; nothing in kube-*; beside Kueue nothing is touched."""
    from daemon.actuators.base import HoldsCapacity

    routes, deleted = _quota_routes([])
    routes[("GET", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler")] = (200, _quota("batch"))
    routes[("GET", r"/api/v1/namespaces/serving/resourcequotas/gpu-autoscaler")] = (
        200, _quota("serving", labelled=False))
    act, pool = actuator(routes)
    assert isinstance(act, HoldsCapacity)
    rep = act.release_holds()
    assert rep.ok, rep.errors
    assert deleted == ["/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler"]
    assert rep.actions == ["delete ResourceQuota batch/gpu-autoscaler: the daemon stops"]
    assert not any("kube-system" in r["path"] for r in pool.sent)
    dry, pool = actuator(routes, dry_run=True)
    assert dry.release_holds().actions == rep.actions and len(deleted) == 1
    beside = KubernetesActuator(served(routes)[0], KubernetesActuatorConfig(), [], dry_run=False, enforce_plan=False)
    assert beside.release_holds().actions == [] and len(deleted) == 1


def test_start_up_deletes_our_quotas_no_plan_of_this_config_can_ask_for():
    """A removed tenant's quota (our label, our name) is deleted at start-up; a configured tenant's is the plan's
    to keep; another name, no label of ours, or kube-* is never touched. Beside Kueue every one of ours goes
    (the caps are Kueue's queues there). Once done, not listed again; a failed list is retried next cycle."""
    items = [_quota("gone"), _quota("batch"), _quota("serving", labelled=False), _quota("other", name="theirs"),
             _quota("kube-system")]
    routes, deleted = _quota_routes(items)
    act, pool = actuator(routes)
    rep = act.apply(plan())
    assert rep.ok, rep.errors
    lst = [r for r in pool.sent if r["path"] == "/api/v1/resourcequotas"]
    assert [r["query"] for r in lst] == ["labelSelector=app.kubernetes.io/managed-by%3Dgpu-autoscaler"]
    assert deleted == ["/api/v1/namespaces/gone/resourcequotas/gpu-autoscaler"]
    assert any("delete ResourceQuota gone/gpu-autoscaler: not a configured tenant's namespace" in a
               for a in rep.actions)
    act.apply(plan())
    assert len([r for r in pool.sent if r["path"] == "/api/v1/resourcequotas"]) == 1
    # beside Kueue: the configured tenant's quota goes too
    routes, deleted = _quota_routes(items)
    api, pool = served(routes)
    kube = KubernetesActuator(api, KubernetesActuatorConfig(), [TenantConfig(name="team-low", tier="low",
                                                                             k8s_namespace="batch")],
                              dry_run=False, enforce_plan=False)
    assert kube.apply(plan()).ok
    assert sorted(deleted) == ["/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler",
                               "/api/v1/namespaces/gone/resourcequotas/gpu-autoscaler"]
    # dry run: reported, nothing deleted; a list that fails is an error and is tried again next cycle
    routes, deleted = _quota_routes(items)
    act, pool = actuator(routes, dry_run=True)
    assert any(a.startswith("delete ResourceQuota gone/") for a in act.apply(plan()).actions) and deleted == []
    routes, deleted = _quota_routes(items)
    routes[("GET", r"/api/v1/resourcequotas")] = (503, {"kind": "Status", "code": 503})
    act, pool = actuator(routes)
    assert any("cannot list ours: 503" in e for e in act.apply(plan()).errors)
    routes[("GET", r"/api/v1/resourcequotas")] = (200, {"apiVersion": "v1", "kind": "ResourceQuotaList",
                                                        "metadata": {}, "items": items})
    assert act.apply(plan()).ok and deleted == ["/api/v1/namespaces/gone/resourcequotas/gpu-autoscaler"]


def test_node_failure_cordons_and_evicts_with_grace_never_deletes():
    pods = {"train-1": pod("batch", "train-1", "gpu-autoscaler-low"),
            "infer-1": pod("serving", "infer-1", "gpu-autoscaler-high")}
    routes = {
        ("GET", r"/api/v1/pods"): (200, {"apiVersion": "v1", "kind": "PodList", "metadata": {},
                                         "items": [pods["train-1"], pods["infer-1"],
                                                   pod("kube-system", "coredns-1", "system-cluster-critical")]}),
        ("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses"): (201, {}),
        ("GET", r"/api/v1/resourcequotas"): NO_QUOTAS,
        ("GET", r"/api/v1/namespaces/batch/pods/train-1"): (200, pods["train-1"]),
        ("GET", r"/api/v1/namespaces/serving/pods/infer-1"): (200, pods["infer-1"]),
        ("PATCH", r"/api/v1/nodes/gpu-node-7"): (200, {"apiVersion": "v1", "kind": "Node",
                                                       "metadata": {"name": "gpu-node-7"}}),
        ("POST", r"/api/v1/namespaces/batch/pods/train-1/eviction"): (201, {}),
        # a PodDisruptionBudget says not now
        ("POST", r"/api/v1/namespaces/serving/pods/infer-1/eviction"): (429, {"kind": "Status", "code": 429}),
        ("POST", r"/api/v1/namespaces/.+/events"): lambda path, body: (
            201, {**body, "metadata": {"name": "e1", **body["metadata"]}}),
    }
    act, pool = actuator(routes)
    jobs = act.jobs_on_node("gpu-node-7")
    assert pool.sent[0]["query"] == "fieldSelector=spec.nodeName%3Dgpu-node-7"
    # kube-system is not a tenant's (DaemonSet and mirror pods: tests/k8s/test_unevictable.py)
    assert jobs == [("batch/train-1", "team-low"), ("serving/infer-1", "team-high")]
    assert act.fence_node("gpu-node-7", "down").ok
    patch = [r for r in pool.sent if r["method"] == "PATCH"][0]
    assert patch["body"] == {"spec": {"unschedulable": True}}
    assert patch["headers"]["content-type"] == "application/strategic-merge-patch+json"
    rep = act.requeue([j for j, _ in jobs], "node down")
    assert not any(r["method"] == "DELETE" for r in pool.sent)          # never a delete, never grace 0
    ev = [r for r in pool.sent if r["path"].endswith("/eviction")]
    assert [e["path"] for e in ev] == ["/api/v1/namespaces/batch/pods/train-1/eviction",
                                       "/api/v1/namespaces/serving/pods/infer-1/eviction"]
    assert all(e["body"]["deleteOptions"]["gracePeriodSeconds"] == 20 for e in ev)
    assert any("evict serving/infer-1: 429" in e for e in rep.errors)    # reported ...
    routes[("POST", r"/api/v1/namespaces/serving/pods/infer-1/eviction")] = (201, {})
    assert act.apply(plan(quotas={})).ok                                  # ... and retried on the next cycle
    ev = [r for r in pool.sent if r["path"].endswith("/eviction")]
    assert ev[-1]["path"] == "/api/v1/namespaces/serving/pods/infer-1/eviction"
    n = len(ev)
    act.apply(plan(quotas={}))
    assert len([r for r in pool.sent if r["path"].endswith("/eviction")]) == n  # done: not sent again
    act.notify([Notification("team-low", "node_failed", "1 job requeued")])
    evt = [r for r in pool.sent if r["path"].endswith("/events")][0]
    assert evt["path"] == "/api/v1/namespaces/batch/events" and evt["body"]["reason"] == "NodeFailed"
    assert evt["body"]["source"]["component"] == "gpu-autoscaler"


def test_quota_caps_only_non_preemptible_pods_in_tenant_namespaces_only():
    act, pool = actuator(BASE)
    # a tenant seen in metrics but not configured, and kube-system, get no quota
    assert act.apply(plan(quotas={"team-low": 40, "unknown-team": 4, "kube-system": 2})).ok
    posts = [r for r in pool.sent if r["method"] in ("POST", "PUT") and "resourcequotas" in r["path"]]
    assert {r["path"].split("/")[4] for r in posts} == {"batch"}
    spec = [r for r in posts if r["method"] == "POST"][0]["body"]["spec"]
    assert spec["scopeSelector"] == {"matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["gpu-autoscaler-low"]}]}


def test_node_names_come_from_the_node_list_and_a_glob_is_refused():
    from daemon.config import FailoverConfig
    from daemon.failover import alerts

    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-7"}}
    act, cap = actuator({("GET", r"/api/v1/nodes"): (
        200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
              "items": [node, {**node, "metadata": {"name": "gpu-node-8"}}]})})
    names = act.node_names()
    assert names == {"gpu-node-7", "gpu-node-8"} and cap.sent[-1]["method"] == "GET"
    p = alerts.parse(('{"version":"4","status":"firing","receiver":"r","groupKey":"k","alerts":[{"status":"firing",'
                      '"labels":{"alertname":"GPUNodeDown","kubernetes_node":"gpu-node-*"},"startsAt":"x"}]}').encode())
    with pytest.raises(alerts.PayloadError, match="alerts.0.labels.kubernetes_node"):
        alerts.actions(p, FailoverConfig(), names.__contains__)


def test_a_quota_the_plan_no_longer_asks_for_is_deleted_ours_only():
    """team-high was capped before (say it was normal-tier then); the plan caps only team-low now. Our
    quota in its namespace goes; a quota of the same name without our label is somebody else's."""
    ours = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {
        "name": "gpu-autoscaler", "namespace": "serving", "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    routes = dict(BASE)
    routes[("GET", r"/api/v1/namespaces/serving/resourcequotas/gpu-autoscaler")] = (200, ours)
    routes[("DELETE", r"/api/v1/namespaces/serving/resourcequotas/gpu-autoscaler")] = (200, {"kind": "Status"})
    act, pool = actuator(routes)
    rep = act.apply(plan())
    assert rep.ok, rep.errors
    dels = [r["path"] for r in pool.sent if r["method"] == "DELETE"]
    assert dels == ["/api/v1/namespaces/serving/resourcequotas/gpu-autoscaler"]
    assert not any("kube-system" in r["path"] for r in pool.sent)
    n = len(pool.sent)
    assert act.apply(plan()).ok and len(pool.sent) == n          # gone: not asked again
    # a plan without any quota (no good plan yet) deletes nothing
    act2, pool2 = actuator(routes)
    assert act2.apply(plan(quotas={})).ok and not [r for r in pool2.sent if r["method"] == "DELETE"]
    # somebody else's quota of that name is left alone
    theirs = {**ours, "metadata": {**ours["metadata"], "labels": {}}}
    routes[("GET", r"/api/v1/namespaces/serving/resourcequotas/gpu-autoscaler")] = (200, theirs)
    act3, pool3 = actuator(routes)
    assert act3.apply(plan()).ok and not [r for r in pool3.sent if r["method"] == "DELETE"]


def test_an_api_server_that_does_not_answer_is_an_error_per_action_retried_next_cycle():
    """The official client has no default timeout: the daemon's client gives every request one, so a hung API
    server costs one action an error instead of hanging the cycle; the failed-node evictions are retried."""
    import threading
    import time as _time


    hang = threading.Event()
    hang.set()

    def slow_read(path, body):
        if hang.is_set():
            _time.sleep(1.5)
        return 200, pod("batch", "train-1", "gpu-autoscaler-low")

    routes = {("GET", r"/api/v1/namespaces/batch/pods/train-1"): slow_read,
              ("POST", r"/api/v1/namespaces/batch/pods/train-1/eviction"): (201, {}),
              ("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses"): (201, {}),
              ("GET", r"/api/v1/resourcequotas"): NO_QUOTAS}
    api, pool = served(routes, timeout_s=0.3)
    act = KubernetesActuator(api, KubernetesActuatorConfig(), [TenantConfig(name="team-low", tier="low",
                                                                            k8s_namespace="batch")], dry_run=False)
    t0 = _time.monotonic()
    rep = act.requeue(["batch/train-1"], "node down")
    assert _time.monotonic() - t0 < 1.4                          # did not wait for the answer
    assert any("read pod batch/train-1: 0 the API server http://127.0.0.1:" in e and "gave no answer within 0.3 s" in e
               for e in rep.errors), rep.errors
    assert not [r for r in pool.sent if r["path"].endswith("/eviction")]
    hang.clear()
    rep = act.apply(plan(quotas={}))                             # next cycle: retried
    assert [r["path"] for r in pool.sent if r["path"].endswith("/eviction")] == [
        "/api/v1/namespaces/batch/pods/train-1/eviction"]
    assert act.apply(plan(quotas={})).ok                         # done: not sent again
    assert len([r for r in pool.sent if r["path"].endswith("/eviction")]) == 1


def test_api_client_from_a_kubeconfig_has_the_configured_timeout(tmp_path):
    from daemon.actuators.k8s.actuator import TimedApiClient, api_client

    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                  "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
                  "users: [{name: u, user: {token: t}}]\n"
                  "contexts: [{name: c, context: {cluster: k, user: u}}]\n")
    from kubernetes import client

    before = client.Configuration.get_default_copy()
    try:
        api = api_client(KubernetesActuatorConfig(kubeconfig=kc, timeout_s=2.5))
    finally:
        client.Configuration.set_default(before)   # load_kube_config sets the process-wide default
    assert isinstance(api, TimedApiClient) and api.timeout_s == 2.5
    # nothing listens on port 1: refused at once, and it is an ApiException (status 0), not a urllib3 error
    with pytest.raises(ApiException) as exc:
        KubernetesActuator(api, KubernetesActuatorConfig(), []).node_names()
    assert exc.value.status == 0


def test_a_node_the_api_cannot_say_about_does_not_block_the_failover():
    routes = {("GET", r"/api/v1/nodes/gone"): (404, {"kind": "Status", "code": 404}),
              ("GET", r"/api/v1/nodes/odd"): (200, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "odd"},
                                                     "status": {}})}
    act, _ = actuator(routes)
    assert act.node_down_confirmed("gone") is None and act.node_down_confirmed("odd") is None


def test_no_throttled_event_where_no_gateway_applies_the_limits():
    """First-day walk (hday3, Kubernetes with Kueue, no Redis gateway): at load 100% the plan's rate level rose and the
    Kubernetes actuator would tell every tenant, as a Warning Event in its namespace, "cluster load 100% ...: high
    tier limited to 200 req/s", a limit nothing applies without the redis actuator. Without it the rate-limit
    notifications send no Event; the others still do."""
    routes = {("POST", r"/api/v1/namespaces/.+/events"): lambda path, body: (
        201, {**body, "metadata": {"name": "e1", **body["metadata"]}})}
    notes = [Notification("team-low", "throttled", "cluster load 100%: low tier limited to 50 req/s"),
             Notification("team-low", "relaxed", "cluster load 70%: low tier limited to 100 req/s"),
             Notification("team-low", "preempted", "your job was preempted")]
    sent = {}
    for enforced in (True, False):
        api, cap = served(routes)
        act = KubernetesActuator(api, KubernetesActuatorConfig(), [TenantConfig(name="team-low", tier="low",
                                 k8s_namespace="batch")], dry_run=False, gateway_limits=enforced)
        assert act.notify(notes).ok
        sent[enforced] = [r["body"]["reason"] for r in cap.sent if r["path"].endswith("/events")]
    assert sent == {True: ["Throttled", "Relaxed", "Preempted"], False: ["Preempted"]}
