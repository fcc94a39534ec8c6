"""The plan's rows of GPUs asked through Dynamic Resource Allocation (daemon/actuators/k8s/dra.py, view.py,
node_holds.py) on the official client's models: DRA nodes as Nodes, DRA pods as Jobs, DRA nodes in the node holds.
The real control plane's end-to-end case is tests/k8s/test_dra_preemption.py."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from daemon.actuators.k8s.dra import read_dra
from daemon.actuators.k8s.node_holds import NodeHolds
from daemon.actuators.k8s.view import nodes_view, pods_as_jobs
from daemon.config.fleet import FleetConfig
from tests.actuators.test_k8s_dra import API, CLASS, DRIVER, _claim, _model, _slice, _template

NOW = dt.datetime(2026, 1, 6, 12, 0, tzinfo=dt.timezone.utc)
A100 = "NVIDIA A100-SXM4-80GB"


def _pod(ns: str, name: str, *, template: str | None = None, claim: str | None = None, node: str | None = None,
         gpus: int = 0, tier: str = "low", deleting: bool = False) -> object:
    """A pod as the view keeps it: DRA claims (a template's claim named as the resourceclaim controller names it),
    device-plugin GPUs beside."""
    spec: dict = {"containers": [{"name": "main", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {}}}], "priorityClassName": f"gpu-autoscaler-{tier}"}
    status: dict = {"phase": "Running" if node else "Pending", "startTime": "2026-01-06T11:00:00Z"}
    if template or claim:
        ref = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
        spec["resourceClaims"] = [{"name": "gpus", **ref}]
        if template and node:
            status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}]
    if node:
        spec["nodeName"] = node
    meta = {"namespace": ns, "name": name, "creationTimestamp": "2026-01-06T11:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-06T12:00:05Z"
    return _model({"metadata": meta, "spec": spec, "status": status}, "V1Pod")


def _node(name: str, gpus: int = 0) -> object:
    alloc = {"cpu": "64", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return _model({"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": A100}}, "spec": {},
                   "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}, "V1Node")


def _held(ns: str, name: str, n: int, pool: str, first: int = 0) -> object:
    return _claim(ns, name, {"exactly": {"deviceClassName": CLASS, "count": n}},
                  [f"gpu-{i}" for i in range(first, first + n)], pool=pool)


def test_dra_nodes_and_pods_become_rows_and_what_dra_py_leaves_out_stays_out():
    """n1: a DRA node of 8 GPUs, 4 held by a running low pod and 2 by one being deleted (due within the grace: a
    drain); n2: a node whose device plugin publishes GPUs too (its slices and the DRA pod bound there not counted,
    said); a pending pod asking 8 accepts its class's DRA types; one of a class whose driver publishes no GPU never
    starts (said, no demand). The old code had no node rows, no job GPUs and counted the last as demand."""
    other = "other.example.com"
    slices = [_slice("n1", 8), _slice("n2", 4)]
    claims = [_held("a", "low-gpus", 4, "n1"), _held("a", "going-gpus", 2, "n1", first=4),
              _held("a", "mixed-gpus", 2, "n2")]
    tmpl = [_template("a", "four", {"exactly": {"deviceClassName": CLASS, "count": 4}}),
            _template("b", "eight", {"exactly": {"deviceClassName": CLASS, "count": 8}}),
            _template("b", "other", {"exactly": {"deviceClassName": "other-class", "count": 1}})]
    pods = [_pod("a", "low", template="four", node="n1"), _pod("a", "going", template="four", node="n1", deleting=True),
            _pod("a", "mixed", template="four", node="n2"), _pod("b", "waits", template="eight", tier="high"),
            _pod("b", "elsewhere", template="other")]
    got = read_dra(pods, slices, claims, tmpl, {CLASS: DRIVER, "other-class": other}, {"a": "team-a", "b": "team-b"},
                   plugin_nodes={"n2"}, drains=lambda p: True)
    assert got.node_rows() == {"n1": ("dra:gpu", 8, 6, 2)}, got.node_rows()
    assert got.job_gpus() == {"a/low": 4, "b/waits": 8}, got.job_gpus()
    assert got.accepts == {"b/waits": ("dra:gpu",)}, got.accepts
    assert sorted(got.uncounted) == ["a/mixed", "b/elsewhere"], got.uncounted
    assert "whose device plugin publishes GPUs too" in got.uncounted["a/mixed"]
    assert "publish no GPU on any node: it never starts" in got.uncounted["b/elsewhere"]
    # not due within the grace: still in use, no drain
    late = read_dra(pods, slices, claims, tmpl, {CLASS: DRIVER}, {"a": "team-a", "b": "team-b"},
                    plugin_nodes={"n2"}, drains=lambda p: False)
    assert late.node_rows() == {"n1": ("dra:gpu", 8, 6, 0)}, late.node_rows()


def test_a_dra_pod_is_a_job_of_its_claims_and_device_plugin_gpus_and_a_dra_node_a_node_of_its_slices():
    """Jobs: a bound DRA pod runs on its node with its claims' GPUs; a pending pod asking 1 nvidia.com/gpu and 8
    through DRA is one job of 9 (never counted twice, the scheduler needs both), judged against the nodes by its
    device-plugin GPU only (no node has 9 nvidia.com/gpu: it is not 'never starts'); a DRA pod dra.py did not count is
    no job. On a mixed fleet a DRA pod accepts its DRA types and a device-plugin pod naming no type only the
    device-plugin nodes' types, so neither kind's demand preempts the other's pods. Nodes: the DRA node's whole GPUs,
    allocated and draining, typed by its DRA type. The old code: no DRA job, the DRA node 0 GPUs."""
    from daemon.actuators.k8s.view import never_starts

    resolver = FleetConfig(types=["a100"], aliases={A100: "a100"}).resolver()
    nodes = [_node("n1"), _node("n2", gpus=4)]
    pods = [_pod("a", "low", template="four", node="n1"), _pod("b", "both", template="eight", gpus=1, tier="high"),
            _pod("b", "plain", gpus=2, tier="high"), _pod("b", "untold", template="other")]
    tenants = {"a": "team-a", "b": "team-b"}
    jobs = pods_as_jobs(pods, tenants, "nvidia.com/gpu", ("team-a", "team-b"), now=NOW, resolver=resolver,
                        never=never_starts(nodes, "nvidia.com/gpu", resolver), node_names={"n1", "n2"},
                        dra_gpus={"a/low": 4, "b/both": 8}, dra_accepts={"b/both": ("dra:a100",)},
                        plugin_types=("a100",))
    rows = {i: (int(g), bool(r), n, a) for i, g, r, n, a in zip(jobs.ids, jobs.gpus, jobs.running, jobs.node,
                                                                 jobs.accepts)}
    assert rows == {"a/low": (4, True, "n1", ()), "b/both": (9, False, "", ("dra:a100",)),
                    "b/plain": (2, False, "", ("a100",))}, rows
    view = nodes_view(nodes, pods, "nvidia.com/gpu", ("team-a", "team-b"), None, resolver, now=NOW,
                      dra_nodes={"n1": ("dra:a100", 8, 6, 2)})
    got = {n: (int(g), int(f), int(d), t) for n, g, f, d, t in zip(view.names, view.gpus, view.free, view.draining,
                                                                      view.gpu_type)}
    assert got == {"n1": (8, 2, 2, "dra:a100"), "n2": (4, 4, 0, "a100")}, got   # 6 allocated, 2 draining
    one = nodes_view(nodes, pods, "nvidia.com/gpu", ("team-a", "team-b"), None, now=NOW,
                     dra_nodes={"n1": ("dra:gpu", 8, 6, 2)})
    assert one.gpus.tolist() == [8, 4] and one.free.tolist() == [2, 4] and one.gpu_type is None


def test_a_node_hold_counts_a_dra_nodes_gpus_and_its_dra_pods():
    """The Kueue actuator's node holds read a DRA node as its slices' GPUs and the DRA pods bound there as using them,
    a low pod's as what a preemption may take, another tier's as firm; the old code read the node as 0 GPUs, which
    no hold takes."""
    nodes = [_node("n1"), _node("n2", gpus=8)]
    pods = [_pod("a", "low", template="four", node="n1"), _pod("b", "serve", template="four", node="n1", tier="high")]
    snap = SimpleNamespace(nodes=nodes, pods=pods)
    holds = NodeHolds(API, label="gpu-autoscaler/hold", gpu_resource="nvidia.com/gpu",
                      tenants_ns={"team-a": "a", "team-b": "b"}, shrink_delay_s=0, dry_run=True,
                      view=SimpleNamespace(snapshot=lambda: snap))
    dra = SimpleNamespace(running={"a/low": ("n1", 4), "b/serve": ("n1", 4)},
                          node_rows=lambda: {"n1": ("dra:gpu", 8, 8, 0)})
    holds.dra = lambda: dra
    read, by_tenant, firm = holds.read()
    assert {n.name: (n.gpus, n.used) for n in read} == {"n1": (8, 8), "n2": (8, 0)}
    assert by_tenant == {"team-a": {"n1": 4}, "team-b": {"n1": 4}} and firm == {"team-b": {"n1": 4}}, firm


def test_on_one_model_a_dra_pod_is_judged_by_its_device_plugin_gpus_and_a_closed_dra_node_has_no_room():
    """Mutation testing found both rules untested off a mixed fleet: without a resolver, a pending pod asking 1
    nvidia.com/gpu and 8 through DRA judged at 9 against the device-plugin nodes (4 at most) read as never starting,
    no demand; and a cordoned DRA node's slices counted as GPUs the plan may hold and make room on."""
    from daemon.actuators.k8s.view import never_starts

    nodes = [_node("n1"), _node("n2", gpus=4)]
    pods = [_pod("b", "both", template="eight", gpus=1, tier="high")]
    jobs = pods_as_jobs(pods, {"b": "team-b"}, "nvidia.com/gpu", ("team-b",), now=NOW,
                        never=never_starts(nodes, "nvidia.com/gpu"), node_names={"n1", "n2"},
                        dra_gpus={"b/both": 8})
    assert jobs.ids.tolist() == ["b/both"] and jobs.gpus.tolist() == [9]
    nodes[0].spec.unschedulable = True
    view = nodes_view(nodes, [], "nvidia.com/gpu", ("team-b",), None, now=NOW, dra_nodes={"n1": ("dra:gpu", 8, 2, 0)})
    assert view.gpus.tolist() == [0, 4] and view.free.tolist() == [0, 4], (view.gpus, view.free)


def test_a_dra_node_of_several_types_is_its_most_numerous_and_drains_no_more_than_it_uses_and_a_hold_types_it_so():
    """Mutation testing found three rules untested: a node with 6 DRA GPUs of one type and 2 of another is the
    first's (not the least numerous); its draining GPUs are at most those allocated; and on a mixed fleet the Kueue
    node holds type a DRA node by its DRA type, as the plan's Nodes do, not by its device-plugin product label (a hold
    of dra:a100 GPUs would otherwise find none there)."""
    from daemon.actuators.k8s.dra import DraGpus

    rows = DraGpus(supply={"n1": {"dra:b": 2, "dra:a": 6}}, used={"n1": 2}, draining={"n1": 4}).node_rows()
    assert rows == {"n1": ("dra:a", 8, 2, 2)}, rows
    resolver = FleetConfig(types=["a100"], aliases={A100: "a100"}).resolver()
    snap = SimpleNamespace(nodes=[_node("n1"), _node("n2", gpus=8)], pods=[])
    holds = NodeHolds(API, label="gpu-autoscaler/hold", gpu_resource="nvidia.com/gpu", tenants_ns={"team-a": "a"},
                      shrink_delay_s=0, dry_run=True, resolver=resolver, view=SimpleNamespace(snapshot=lambda: snap))
    holds.dra = lambda: SimpleNamespace(running={}, node_rows=lambda: {"n1": ("dra:a100", 8, 0, 0)})
    read, _, _ = holds.read()
    assert {n.name: (n.gpu_type, n.gpus) for n in read} == {"n1": ("dra:a100", 8), "n2": ("a100", 8)}


def test_the_actuator_reads_a_node_whose_device_plugin_publishes_gpus_as_the_device_plugin_has_it(monkeypatch):
    """The actuator hands the nodes whose device plugin publishes GPUs (or MIG instances) to the DRA read: a node of 4
    nvidia.com/gpu whose DRA driver also publishes its 4 is 4 GPUs, not 8, and a MIG node's slices are not counted
    beside its instances (mutation testing: the plugin nodes not handed, or MIG left out of them, passed every unit
    test; read_dra's own rule was tested alone)."""
    from kubernetes import client as k8s

    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    act = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")),
                             KubernetesActuatorConfig(dra_device_classes={CLASS: DRIVER}), [], dry_run=True)
    monkeypatch.setattr(act.core, "list_pod_for_all_namespaces", lambda **_k: SimpleNamespace(items=[]))
    mig = _model({"metadata": {"name": "n2"}, "spec": {}, "status": {
        "allocatable": {"nvidia.com/mig-1g.10gb": "7"}, "conditions": [{"type": "Ready", "status": "True"}]}}, "V1Node")
    monkeypatch.setattr(act.core, "list_node", lambda **_k: SimpleNamespace(items=[_node("n1", gpus=4), mig]))
    monkeypatch.setattr(act.resource_api, "list_resource_slice",
                        lambda **_k: SimpleNamespace(items=[_slice("n1", 4), _slice("n2", 1)]))
    monkeypatch.setattr(act.resource_api, "list_resource_claim_for_all_namespaces",
                        lambda **_k: SimpleNamespace(items=[]))
    monkeypatch.setattr(act.resource_api, "list_resource_claim_template_for_all_namespaces",
                        lambda **_k: SimpleNamespace(items=[]))
    act.cluster_jobs(())
    assert act.dra is not None and act.dra.supply == {}, act.dra
    assert act.cluster_nodes(()).gpus.tolist() == [4, 0]


def test_the_actuator_reads_a_dra_pod_being_deleted_within_the_grace_as_draining(monkeypatch):
    """The actuator hands the DRA read its drain rule (view.drains_soon over the grace period): a DRA pod being
    deleted and due now frees its claim's 2 GPUs as a drain (mutation testing: no rule handed, so none drained, passed
    every test, the real control plane's too)."""
    from kubernetes import client as k8s

    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig, TenantConfig

    act = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")),
                             KubernetesActuatorConfig(dra_device_classes={CLASS: DRIVER}),
                             [TenantConfig(name="team-a", tier="low", k8s_namespace="a")], dry_run=True)
    going = _pod("a", "going", template="four", node="n3", deleting=True)
    lists = {(act.core, "list_pod_for_all_namespaces"): [going], (act.core, "list_node"): [_node("n3")],
             (act.resource_api, "list_resource_slice"): [_slice("n3", 8)],
             (act.resource_api, "list_resource_claim_for_all_namespaces"): [_held("a", "going-gpus", 2, "n3")],
             (act.resource_api, "list_resource_claim_template_for_all_namespaces"): []}
    for (api, name), items in lists.items():
        monkeypatch.setattr(api, name, lambda items=items, **_k: SimpleNamespace(items=items))
    act.cluster_jobs(("team-a",))
    assert act.dra.draining == {"n3": 2} and act.dra.node_rows() == {"n3": ("dra:gpu", 8, 2, 2)}, act.dra


def test_on_a_mixed_fleet_the_actuator_gives_a_device_plugin_pod_naming_no_type_the_device_plugin_types(monkeypatch):
    """With DRA nodes read, a pending device-plugin pod that names no GPU type accepts the device-plugin nodes' types
    only: read as any type, its demand would preempt DRA pods whose GPUs it cannot use (mutation testing: the plugin
    types not handed by the actuator passed every test; pods_as_jobs' own rule was tested alone)."""
    from kubernetes import client as k8s

    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig, TenantConfig

    fleet = FleetConfig(types=["a100", "h100"], aliases={A100: "a100", "NVIDIA H100 80GB HBM3": "h100"})
    act = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")),
                             KubernetesActuatorConfig(dra_device_classes={CLASS: DRIVER}),
                             [TenantConfig(name="team-b", tier="high", k8s_namespace="b")], dry_run=True, fleet=fleet)
    lists = {(act.core, "list_pod_for_all_namespaces"): [_pod("b", "plain", gpus=2, tier="high")],
             (act.core, "list_node"): [_node("n1", gpus=8), _node("n3")],
             (act.resource_api, "list_resource_slice"): [_slice("n3", 8)],
             (act.resource_api, "list_resource_claim_for_all_namespaces"): [],
             (act.resource_api, "list_resource_claim_template_for_all_namespaces"): []}
    for (api, name), items in lists.items():
        monkeypatch.setattr(api, name, lambda items=items, **_k: SimpleNamespace(items=items))
    jobs = act.cluster_jobs(("team-b",))
    assert act.dra.node_rows() == {"n3": ("dra:h100", 8, 0, 0)}, act.dra
    assert jobs.ids.tolist() == ["b/plain"] and list(jobs.accepts) == [("a100",)], jobs.accepts
