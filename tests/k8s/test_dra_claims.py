"""A tenant's pods asking for GPUs through Dynamic Resource Allocation (resource.k8s.io/v1), on the real apiserver,
kube-scheduler and kube-controller-manager (its resourceclaim controller makes each pod's claim from its template):
the test publishes ResourceSlices for two fake nodes as a driver would, the scheduler allocates their devices to
the pods' claims and binds the pods, and the daemon's view (daemon/actuators/k8s/dra.py) reads the supply per node
by type, the GPUs allocated, and the pending pods' demand; a request it cannot judge is said once per pod. The DRA
nodes are the plan's Nodes and the DRA pods its Jobs (the plan making room for them: test_dra_preemption.py)."""

from __future__ import annotations

import contextlib
import logging
import uuid

import pytest
from kubernetes import client as k8s

from daemon.config import parse_config
from tests.support.k8s_cluster import gpu_pod
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.security]

A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"


def _dra_pod(ns: str, name: str, template: str, gpus: int = 0) -> dict:
    pod = gpu_pod(ns, name, gpus)
    main = pod["spec"]["containers"][0]
    if not gpus:
        del main["resources"]["limits"]
    main["resources"]["claims"] = [{"name": "gpus"}]
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return pod


def _runtime(kube, tmp_path, tenants, classes: dict[str, str]):
    """The daemon wired as `run` wires it (the watched view, the kubernetes and kueue actuators), with a mixed fleet
    whose aliases type the DRA devices' productName, and `classes` as its GPU DeviceClasses."""
    from daemon.service.wiring import build_runtime

    cfg = parse_config({"cluster": {"gpus": 16}, "source": {"kind": "prometheus"},
                        "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                        "state": {"path": str(tmp_path / "s.db")},
                        "fleet": {"types": ["a100", "h100"], "aliases": {A100: "a100", H100: "h100"}},
                        "tenants": [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                    for t in tenants],
                        "actuators": {"enabled": ["kubernetes", "kueue"], "dry_run": True,
                                      "kubernetes": {"kubeconfig": str(kube.admin_kubeconfig),
                                                     "dra_device_classes": classes}}})
    rt = build_runtime(cfg, with_store=False)
    return rt, rt.actuators[-2]


def _slice(name: str, driver: str, node: str, product: str, generation: int = 1, devices: int = 2) -> dict:
    """A node's devices as a DRA driver publishes them: one pool per node, whole GPUs typed by productName, and a
    MIG device (type mig), which is no whole GPU."""
    devs = [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                                                "uuid": {"string": f"GPU-{node}-{i}"}}} for i in range(devices)]
    devs.append({"name": "mig-0", "attributes": {"type": {"string": "mig"}, "productName": {"string": product}}})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "devices": devs,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}}}


def _template(name: str, request: dict) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}}


def test_the_view_reads_dra_supply_used_and_pending_demand_and_says_what_it_cannot_judge(kube, tmp_path, caplog):
    """Two fake nodes whose driver publishes 2 GPUs each (an A100 node, an H100 node; each with a MIG device beside,
    and the A100 pool's older generation of 4 GPUs left behind), a DeviceClass of the driver's whole GPUs, and pods
    whose claim templates ask for 2 of them: the scheduler allocates and binds two, one per node; a third (another
    tenant's) waits. The view reads supply {A100 node: 2 dra:a100, H100 node: 2 dra:h100}, 4 allocated, both bound
    pods at 2, the waiting one's 2 as its tenant's demand. A pod asking for All the class's devices, one selecting
    them by CEL and one of a class that is not a GPU class are not counted, each said once over two cycles. None of
    the plan reads: the bound pods are running Jobs of 2 on their nodes, the waiting one a pending Job of 2 of its
    tenant accepting the class's DRA types, the DRA nodes 2 GPUs each of their DRA type; the uncounted pods are no
    Jobs. The old code read none of it as the plan's (read only: no Job, no GPU on a DRA node)."""
    caplog.set_level(logging.INFO, logger="gpu_autoscaler.actuator.kubernetes")
    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "low"}, nodes=2, gpus=0)
    a, b = ns["team-a"], ns["team-b"]
    uid = uuid.uuid4().hex[:6]
    driver, cls = f"gpu-{uid}.example.com", f"gpu-{uid}.nvidia.com"   # unique: slices and classes are cluster-wide
    rt, kub = _runtime(kube, tmp_path, tenants, {cls: driver})
    names = tuple(t.name for t in tenants)
    slices = [_slice(f"{nodes[0]}-{uid}", driver, nodes[0], A100), _slice(f"{nodes[1]}-{uid}", driver, nodes[1], H100),
              _slice(f"{nodes[0]}-{uid}-old", driver, nodes[0], A100, generation=0, devices=4)]
    whole = f'device.driver == "{driver}" && device.attributes["{driver}"].type == "gpu"'
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": cls},
                                  "spec": {"selectors": [{"cel": {"expression": whole}}]}})
    try:
        for s in slices:
            resource.create_resource_slice(s)
        two = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 2}
        for n in (a, b):
            resource.create_namespaced_resource_claim_template(n, _template("two-gpus", two))
        resource.create_namespaced_resource_claim_template(b, _template("all-gpus", {"deviceClassName": cls,
                                                                                     "allocationMode": "All"}))
        resource.create_namespaced_resource_claim_template(b, _template("h100-by-cel", {
            "deviceClassName": cls, "count": 1,
            "selectors": [{"cel": {"expression": f'device.attributes["{driver}"].productName == "{H100}"'}}]}))
        resource.create_namespaced_resource_claim_template(b, _template("a-nic", {"deviceClassName": f"nic-{uid}"}))
        for name in ("train-1", "train-2"):
            core.create_namespaced_pod(b, _dra_pod(b, name, "two-gpus"))
        bound = lambda: {core.read_namespaced_pod(p, b).spec.node_name for p in ("train-1", "train-2")}  # noqa: E731
        wait_for(lambda: bound() == set(nodes), timeout=90, what="both DRA pods bound, one per node")
        core.create_namespaced_pod(a, _dra_pod(a, "waits", "two-gpus"))
        core.create_namespaced_pod(b, _dra_pod(b, "all", "all-gpus"))
        core.create_namespaced_pod(b, _dra_pod(b, "by-cel", "h100-by-cel"))
        core.create_namespaced_pod(b, _dra_pod(b, "nic", "a-nic"))
        wait_for(lambda: kub.cluster_jobs(names) is not None and kub.dra is not None
                 and f"{b}/nic" in kub.dra.uncounted and f"{a}/waits" in kub.dra.pending
                 and len(kub.dra.running) == 2, timeout=60, what="the DRA pods in the view")
        jobs = kub.cluster_jobs(names)
        kub.cluster_jobs(names)
        dra = kub.dra
        assert dra.supply == {nodes[0]: {"dra:a100": 2}, nodes[1]: {"dra:h100": 2}}, dra.supply
        assert dra.used == {nodes[0]: 2, nodes[1]: 2}, dra.used
        assert sorted(dra.running.values()) == [(nodes[0], 2), (nodes[1], 2)], dra.running
        assert dra.pending == {f"{a}/waits": 2} and dra.pending_by_tenant() == {"team-a": 2}, dra.pending
        assert sorted(dra.uncounted) == [f"{b}/all", f"{b}/by-cel", f"{b}/nic"], dra.uncounted
        # the plan's: the DRA pods are Jobs, the DRA nodes' whole GPUs its Nodes', typed by their DRA type
        rows = {i: (names[t], g, r, n, a_) for i, t, g, r, n, a_ in zip(jobs.ids, jobs.tenant, jobs.gpus, jobs.running,
                                                                         jobs.node, jobs.accepts)}
        on = {p: core.read_namespaced_pod(p, b).spec.node_name for p in ("train-1", "train-2")}
        assert rows == {f"{b}/{p}": ("team-b", 2, True, on[p], ()) for p in on} | {
            f"{a}/waits": ("team-a", 2, False, "", ("dra:a100", "dra:h100"))}, rows
        view = kub.cluster_nodes(names)
        got = {n: (int(g), int(f), t) for n, g, f, t in zip(view.names, view.gpus, view.free, view.gpu_type)
               if n in nodes}
        assert got == {nodes[0]: (2, 0, "dra:a100"), nodes[1]: (2, 0, "dra:h100")}, got
        said = sorted(r.getMessage() for r in caplog.records if "that the daemon does not count" in r.getMessage())
        assert said == [
            f"pod {b}/all asks for devices through DRA that the daemon does not count: request gpu asks for All "
            f"devices of {cls}, not a count",
            f"pod {b}/by-cel asks for devices through DRA that the daemon does not count: request gpu selects devices "
            f"of {cls} by CEL, which the daemon cannot judge",
            f"pod {b}/nic asks for devices through DRA that the daemon does not count: request gpu names DeviceClass "
            f"nic-{uid}, not one of the GPU classes (actuators.kubernetes.dra_device_classes)"], said
        summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DRA GPUs: ")]
        assert summary[-1] == ("DRA GPUs: 4 on 2 nodes (2 dra:a100, 2 dra:h100), 4 "
                               "allocated, pending per tenant: team-a 2"), summary
        assert len(summary) == len(set(summary)), summary   # said when it changes, not each cycle
    finally:
        rt.close()
        for s in slices:
            resource.delete_resource_slice(s["metadata"]["name"])
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)


def test_a_pod_asking_for_a_device_plugin_gpu_beside_its_claim_is_a_job_of_both(kube, tmp_path):
    """A DRA pod asking for one device-plugin GPU beside its claim of 2 asks for both on one node (the scheduler
    needs both there): here no node has both, so it never starts and is no Job (said once; where a node has both it is
    a Job of 3: tests/actuators/test_k8s_dra_rows.py); a DRA-only pod is one of 2, counted once; a node with
    device-plugin GPUs is no DRA node. The first code read the first as a Job of 1 and the second as no Job; the
    next read the first as a Job of 3 waiting for a node no cluster here has."""
    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    served = {r.name for r in resource.get_api_resources().resources}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served, served
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "normal"}, nodes=1)
    b = ns["team-b"]
    cls = f"gpu-{uuid.uuid4().hex[:6]}.nvidia.com"
    rt, kub = _runtime(kube, tmp_path, tenants, {cls: cls})
    names = tuple(t.name for t in tenants)
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": cls}, "spec": {}})
    dra_node = kube.gpu_node(f"{nodes[0]}-dra", gpus=0)   # a DRA node: 2 GPUs in its slice, no nvidia.com/gpu
    nodes.append(dra_node)
    wait_for(lambda: kube.node_ready(dra_node), timeout=60, what="the DRA node Ready")
    dra_slice = _slice(f"{dra_node}-s", cls, dra_node, A100)
    try:
        resource.create_resource_slice(dra_slice)
        resource.create_namespaced_resource_claim_template(b, _template("two-gpus", {
            "deviceClassName": cls, "allocationMode": "ExactCount", "count": 2}))
        core.create_namespaced_pod(b, _dra_pod(b, "dra-only", "two-gpus"))
        core.create_namespaced_pod(b, _dra_pod(b, "dra-and-one", "two-gpus", gpus=1))
        wait_for(lambda: kub.cluster_jobs(names) is not None and f"{b}/dra-and-one" in kub._never, timeout=60,
                 what="dra-and-one read as never starting")
        wait_for(lambda: len(kub.cluster_jobs(names)) == 1, timeout=60, what="dra-only's claim read")
        jobs = kub.cluster_jobs(names)
        assert dict(zip(jobs.ids.tolist(), jobs.gpus.tolist())) == {f"{b}/dra-only": 2}, (jobs.ids, jobs.gpus)
        # dra-and-one waits for good (no node has both); dra-only waits or runs on the DRA node, 2 either way
        assert kub.dra.job_gpus() == {f"{b}/dra-only": 2}, kub.dra
        assert kub.dra.supply == {dra_node: {"dra:a100": 2}}, kub.dra.supply
    finally:
        rt.close()
        resource.delete_resource_slice(dra_slice["metadata"]["name"])
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)


def test_the_claims_kept_are_capped_and_the_view_says_the_counts_are_partial(kube, caplog):
    """A tenant can create claims without end, and each one the view keeps is memory: the view keeps at most
    actuators.kubernetes.dra_max_objects of each DRA kind, counts those beyond (at the list and as the watch goes),
    and the actuator says the DRA counts are partial. The old code kept no claim at all (no DRA watch)."""
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.actuators.k8s.informer import Reflector
    from daemon.config import KubernetesActuatorConfig

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")
    api = kube.api()
    resource = k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal"}, nodes=1)
    a = ns["team-a"]

    def claim(name: str) -> None:
        resource.create_namespaced_resource_claim(a, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    for name in ("c1", "c2", "c3"):
        claim(name)
    r = Reflector("resourceclaims", resource.list_resource_claim_for_all_namespaces, watch_s=2,
                  field_selector=f"metadata.namespace={a}", max_objects=2, model=k8s.ResourceV1ResourceClaim)
    assert r.step() and sorted(r.store) == [f"{a}/c1", f"{a}/c2"] and r.over == 1, (sorted(r.store), r.over)
    claim("c4")
    resource.delete_namespaced_resource_claim("c3", a)
    resource.delete_namespaced_resource_claim("c1", a)
    r.step()   # the watch, until the server ends it (2 s): c4 beyond the cap, c3 (not kept) and c1 gone
    assert sorted(r.store) == [f"{a}/c2"] and r.over == 1, (sorted(r.store), r.over)
    assert isinstance(r.store[f"{a}/c2"], k8s.ResourceV1ResourceClaim)
    # the actuator's line, once while it holds
    kub = KubernetesActuator(api, KubernetesActuatorConfig(dra_max_objects=2), tenants)
    objs = {"resourceslices": [], "resourceclaims": list(r.store.values()), "resourceclaimtemplates": []}
    for _ in range(2):
        kub._read_dra([], objs, "", {"resourceclaims": r.over})
    said = [m.getMessage() for m in caplog.records if "partial" in m.getMessage()]
    assert said == ["DRA GPUs are partial: 1 resourceclaims beyond actuators.kubernetes.dra_max_objects (2) not "
                    "read"], said
    kube.delete_nodes(nodes)


def test_an_eviction_of_a_dra_pod_frees_its_devices_for_the_pod_that_waits(kube):
    """The Eviction API works for a DRA pod as for any (the actuator's evict: low PriorityClass, the UID as its
    precondition): the evicted pod goes, the resourceclaim controller lets its claim go, the scheduler gives the
    devices to the pod that waited, and the view reads it so."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "high", "team-b": "low"}, nodes=1, gpus=0)
    a, b = ns["team-a"], ns["team-b"]
    uid = uuid.uuid4().hex[:6]
    driver = cls = f"gpu-{uid}.nvidia.com"
    slices = [_slice(f"{nodes[0]}-{uid}", driver, nodes[0], H100)]
    kub = KubernetesActuator(api, KubernetesActuatorConfig(dra_device_classes={cls: driver}, grace_period_s=0),
                             tenants, dry_run=False)
    names = tuple(t.name for t in tenants)
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": cls},
                                  "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}})
    try:
        resource.create_resource_slice(slices[0])
        rep = ActionReport("kubernetes", False)
        kub.ensure_priority_classes(rep)
        assert rep.ok, rep.errors
        two = {"deviceClassName": cls, "count": 2}
        for n in (a, b):
            resource.create_namespaced_resource_claim_template(n, _template("two-gpus", two))
        low = _dra_pod(b, "low", "two-gpus")
        low["spec"]["priorityClassName"] = "gpu-autoscaler-low"
        core.create_namespaced_pod(b, low)
        wait_for(lambda: core.read_namespaced_pod("low", b).status.phase == "Running", timeout=90, what="low Running")
        core.create_namespaced_pod(a, _dra_pod(a, "high", "two-gpus"))
        kub.cluster_jobs(names)
        assert kub.dra.running == {f"{b}/low": (nodes[0], 2)} and kub.dra.pending == {f"{a}/high": 2}, kub.dra
        rep = ActionReport("kubernetes", False)
        kub.evict(rep, f"{b}/low", "room for team-a")
        assert rep.ok and rep.actions == [f"evict {b}/low (grace 0 s)"], (rep.actions, rep.errors)
        wait_for(lambda: kub.cluster_jobs(names) is not None and kub.dra.running == {f"{a}/high": (nodes[0], 2)},
                 timeout=90, what="the waiting pod bound to the freed devices")
        assert kub.dra.pending == {} and kub.dra.used == {nodes[0]: 2}, kub.dra
    finally:
        resource.delete_resource_slice(slices[0]["metadata"]["name"])
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)


def test_a_tenants_claim_of_more_gpus_than_any_node_has_is_no_demand_and_is_said(kube):
    """The apiserver takes a request of any count up to 2^63-1 (a tenant may create the template and the pod): a
    pod asking for more DRA GPUs than any node's slices publish never starts (its devices are all on one node), so
    it is said and not counted; the old code read 2^63-1 GPUs of pending demand for it (gpuas_dra_gpus{pending})."""
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal", "team-b": "normal"}, nodes=1, gpus=0)
    a, b = ns["team-a"], ns["team-b"]
    uid = uuid.uuid4().hex[:6]
    driver = cls = f"gpu-{uid}.nvidia.com"
    slices = [_slice(f"{nodes[0]}-{uid}", driver, nodes[0], H100)]
    kub = KubernetesActuator(api, KubernetesActuatorConfig(dra_device_classes={cls: driver}), tenants)
    try:
        resource.create_resource_slice(slices[0])
        resource.create_namespaced_resource_claim_template(a, _template("huge", {"deviceClassName": cls,
                                                                                "count": 2 ** 63 - 1}))
        resource.create_namespaced_resource_claim_template(b, _template("two", {"deviceClassName": cls, "count": 2}))
        core.create_namespaced_pod(a, _dra_pod(a, "huge", "huge"))
        core.create_namespaced_pod(b, _dra_pod(b, "fits", "two"))
        kub.cluster_jobs(tuple(t.name for t in tenants))
        assert kub.dra.supply == {nodes[0]: {"dra:gpu": 2}}, kub.dra.supply
        assert kub.dra.pending == {f"{b}/fits": 2}, kub.dra.pending
        assert kub.dra.uncounted == {f"{a}/huge": f"asks for {2 ** 63 - 1} GPUs through DRA, more than any node's "
                                                  "slices publish (2): it never starts, not counted"}, kub.dra.uncounted
    finally:
        resource.delete_resource_slice(slices[0]["metadata"]["name"])
        kube.delete_nodes(nodes)


def test_the_view_keeps_of_a_tenants_claims_and_templates_only_what_it_reads(kube):
    """A tenant with edit may write a ResourceClaim or a template up to the apiserver's object size (here ~1 MB: 32
    requests of CEL selectors of 10 KB, annotations, opaque driver config, constraints), and the view keeps up to
    dra_max_objects (20,000) of each: 20 GB. It keeps of each only what dra.py reads (requests' class, mode and count,
    that there are selectors; the allocation's results): a few KB, and the pod's request is still said to be judged
    by CEL. The old code kept the whole object."""
    import json

    from daemon.actuators.k8s.dra import read_dra
    from daemon.actuators.k8s.informer import ClusterView

    api = kube.api()
    resource = k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal"}, nodes=1, gpus=0)
    a = ns["team-a"]
    cel = "device.driver == 'gpu.nvidia.com' " + "&& true " * 1240   # just under the 10,240 bytes allowed
    spec = {"devices": {
        "requests": [{"name": f"r{i}", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1,
                                                   "selectors": [{"cel": {"expression": cel}}] * 3}}
                     for i in range(32)],
        "constraints": [{"requests": [f"r{i}" for i in range(32)], "matchAttribute": "gpu.nvidia.com/uuid"}],
        "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"x": "y" * 9000}}}] * 8}}
    meta = {"name": "fat", "annotations": {"x": "y" * 100_000}, "labels": {"l": "v"}}
    resource.create_namespaced_resource_claim(a, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                                  "metadata": meta, "spec": spec})
    resource.create_namespaced_resource_claim_template(a, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta,
        "spec": {"metadata": {"annotations": {"x": "y" * 100_000}}, "spec": spec}})
    view = ClusterView(api, dra_max_objects=10)
    for r in view.dra:
        r.relist()
    kept = {r.kind: r.store[f"{a}/fat"] for r in view.dra if r.kind != "resourceslices"}
    size = {k: len(json.dumps(api.sanitize_for_serialization(o))) for k, o in kept.items()}
    assert all(n < 8000 for n in size.values()), size
    pods = [_model_pod(a, "by-claim", {"resourceClaimName": "fat"}), _model_pod(a, "by-template",
                                                                            {"resourceClaimTemplateName": "fat"})]
    got = read_dra(pods, [], [kept["resourceclaims"]], [kept["resourceclaimtemplates"]],
                   {"gpu.nvidia.com": "gpu.nvidia.com"}, {a: "team-a"})
    assert sorted(got.uncounted) == [f"{a}/by-claim", f"{a}/by-template"], got.uncounted
    assert all("request r0 selects devices of gpu.nvidia.com by CEL" in w for w in got.uncounted.values()), got
    kube.delete_nodes(nodes)


def _model_pod(ns: str, name: str, ref: dict):
    """A pending pod naming a claim or a template, as the client's model (read_dra reads the view's models)."""
    import json

    raw = {"metadata": {"namespace": ns, "name": name},
           "spec": {"containers": [{"name": "main", "image": "x"}], "resourceClaims": [{"name": "gpus", **ref}]},
           "status": {"phase": "Pending"}}
    return k8s.ApiClient().deserialize(json.dumps(raw), "V1Pod", "application/json")


def test_one_tenants_claims_never_push_another_tenants_out_of_the_view(kube, caplog):
    """The view keeps at most dra_max_objects claims cluster-wide; a tenant may create claims without end. Here the
    cap is 4, and team-a (its namespace lists first) creates 6 claims: with at most 2 of one namespace kept
    (dra_max_objects_per_namespace), team-b's claim is still read and its pending pod's 1 GPU counted, while team-a's
    pod whose claim is beyond its namespace's cap is said not read (not 'does not exist') and the partial line names
    the namespace. The old code filled the cap with team-a's claims: team-b's pod read as naming a claim that does
    not exist, its GPU uncounted."""
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.actuators.k8s.informer import ClusterView
    from daemon.service.wiring import _cluster_view

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")
    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal", "team-b": "normal"}, nodes=1, gpus=0)
    a, b = ns["team-a"], ns["team-b"]
    assert a < b   # the list is in key order: team-a's claims come first
    # the cap is cluster-wide: the claims of the tests before (their namespaces being deleted) gone first
    wait_for(lambda: not resource.list_resource_claim_for_all_namespaces().items
             and not resource.list_resource_claim_template_for_all_namespaces().items, timeout=60,
             what="no claim or claim template left of the tests before")
    cls = "gpu.nvidia.com"

    def claim(n: str, name: str) -> None:
        resource.create_namespaced_resource_claim(n, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}})

    def pod(n: str, name: str, claim_name: str) -> None:
        p = _dra_pod(n, name, "unused")
        p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
        core.create_namespaced_pod(n, p)
    for i in range(6):
        claim(a, f"c{i}")
    claim(b, "mine")
    # the node's GPUs, published by the class's driver: a claim of a driver without any is no demand
    caps_slice = _slice(f"{nodes[0]}-caps", cls, nodes[0], H100)
    resource.create_resource_slice(caps_slice)
    pod(a, "beyond", "c5")
    pod(b, "waits", "mine")
    full = parse_config({"cluster": {"gpus": 8}, "source": {"kind": "prometheus"},
                         "forecaster": {"kind": "seasonal_naive"}, "server": {"enabled": False},
                         "tenants": [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace}
                                     for t in tenants],
                         "actuators": {"enabled": ["kubernetes"], "kubernetes": {
                             "kubeconfig": str(kube.admin_kubeconfig), "dra_device_classes": {cls: cls},
                             "dra_max_objects": 4, "dra_max_objects_per_namespace": 2}}})
    view = _cluster_view(full)
    assert isinstance(view, ClusterView)
    for r in (view.pods, view.nodes, *view.dra):
        r.relist()
    try:
        kub = KubernetesActuator(api, full.actuators.kubernetes, tenants, view=view)
        kub.cluster_jobs(tuple(t.name for t in tenants))
        assert kub.dra.pending == {f"{b}/waits": 1}, (kub.dra.pending, kub.dra.uncounted)
        assert kub.dra.uncounted == {f"{a}/beyond": "asks for devices through DRA that the daemon does not count: "
                                                    "claim c5 is not read (its namespace has more resourceclaims than "
                                                    "the view keeps: "
                                                    "actuators.kubernetes.dra_max_objects_per_namespace)"}, \
            kub.dra.uncounted
        said = [m.getMessage() for m in caplog.records if "partial" in m.getMessage()]
        assert said == ["DRA GPUs are partial: 4 resourceclaims beyond actuators.kubernetes.dra_max_objects (4) or "
                        f"dra_max_objects_per_namespace (2) not read, by namespace: {a} 4"], said
        # as the watch goes: a kept claim and one beyond go, team-a's new claim takes the room, team-b's is kept
        r = next(r for r in view.dra if r.kind == "resourceclaims")
        resource.delete_namespaced_resource_claim("c0", a)
        resource.delete_namespaced_resource_claim("c5", a)
        claim(a, "c6")
        claim(b, "also")
        r.watch_s = 2
        r.step()   # the watch, until the server ends it (2 s)
        assert sorted(r.store) == [f"{a}/c1", f"{a}/c6", f"{b}/also", f"{b}/mine"], sorted(r.store)
        assert r.over_ns == {a: 3} and r.over == 3 and r.kept_ns == {a: 2, b: 2}, (r.over_ns, r.kept_ns)
    finally:
        view.stop()   # cluster_jobs started its watch threads: else they outlive the test and the apiserver
    resource.delete_resource_slice(caps_slice["metadata"]["name"])
    kube.delete_nodes(nodes)


def test_a_dra_pod_whose_node_filters_keep_it_off_every_node_with_its_devices_is_no_demand(kube, caplog):
    """A tenant's pending DRA pod asking 1 GPU the cluster's slices publish, but selecting (nodeSelector) a node
    whose slices publish none, or not tolerating the taint of the one node that has them, never starts: the scheduler
    allocates a pod's claims on the node it picks, and no node passes both. Each is said once and is no demand (no
    hold, no preemption, no aging for it, not in the DRA pending count); a pod that tolerates the taint and asks what
    the node publishes is demand (here 2, while the devices are taken: it waits). The old code judged a DRA pod's
    node filters by its device-plugin GPUs only (none: any node passed, the GPU-less node too), so both read as
    pending demand of 1 of their tenant's tier, for the plan to make room and hold GPUs for."""
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    caplog.set_level(logging.INFO, logger="gpu_autoscaler.actuator.kubernetes")
    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal"}, nodes=1, gpus=0)   # nodes[0]: no GPU of either kind
    a = ns["team-a"]
    uid = uuid.uuid4().hex[:6]
    driver = cls = f"gpu-{uid}.nvidia.com"
    dra_node = kube.gpu_node(f"{nodes[0]}-dra", gpus=0)
    nodes.append(dra_node)
    core.patch_node(dra_node, {"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}})
    wait_for(lambda: kube.node_ready(dra_node), timeout=60, what="the DRA node Ready")
    dra_slice = _slice(f"{dra_node}-{uid}", driver, dra_node, H100)
    kub = KubernetesActuator(api, KubernetesActuatorConfig(dra_device_classes={cls: driver}), tenants)
    names = tuple(t.name for t in tenants)
    tolerates = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    try:
        resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                      "metadata": {"name": cls}, "spec": {}})
        resource.create_resource_slice(dra_slice)
        for t, n in (("one", 1), ("two", 2)):
            resource.create_namespaced_resource_claim_template(a, _template(t, {"deviceClassName": cls, "count": n}))
        pods = {"runs": ("two", tolerates, None), "waits": ("two", tolerates, None),
                "on-the-cpu-node": ("one", tolerates, {"kubernetes.io/hostname": nodes[0]}),
                "untolerated": ("one", None, None)}
        for name, (template, tols, selector) in pods.items():
            p = _dra_pod(a, name, template)
            p["spec"]["tolerations"], p["spec"]["nodeSelector"] = tols, selector
            core.create_namespaced_pod(a, p)
        wait_for(lambda: kub.cluster_jobs(names) is not None and len(kub.dra.running) == 1, timeout=90,
                 what="one of the 2-GPU pods bound to the DRA node")
        for _ in range(2):   # said once, not each cycle
            jobs = kub.cluster_jobs(names)
        (bound, _), = kub.dra.running.items()
        waiting = ({f"{a}/runs", f"{a}/waits"} - {bound}).pop()
        assert {i: (int(g), bool(r)) for i, g, r in zip(jobs.ids, jobs.gpus, jobs.running)} == \
            {bound: (2, True), waiting: (2, False)}, (jobs.ids, jobs.gpus)
        assert kub.dra.pending == {waiting: 2}, kub.dra.pending
        said = sorted(m.getMessage() for m in caplog.records if "can never start" in m.getMessage())
        assert said == [
            f"pod {a}/on-the-cpu-node selects nodes by kubernetes.io/hostname={nodes[0]}, which only nodes too small "
            "for it have: it can never start, so it is no demand (no hold, no preemption, no aging for it)",
            f"pod {a}/untolerated is kept off every node it fits otherwise by a taint it does not tolerate: "
            "dedicated=gpu:NoSchedule (1 node): it can never start, so it is no demand (no hold, no preemption, no "
            "aging for it)"], said
        summary = [m.getMessage() for m in caplog.records if m.getMessage().startswith("DRA GPUs: ")]
        assert summary[-1] == "DRA GPUs: 2 on 1 nodes (2 dra:gpu), 2 allocated, pending per tenant: team-a 2", summary
    finally:
        resource.delete_resource_slice(dra_slice["metadata"]["name"])
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)


def _made_claim(core, ns: str, pod: str) -> str:
    """The claim the resourceclaim controller made from the pod's template (its status.resourceClaimStatuses), once
    made."""
    def made() -> str | None:
        st = core.read_namespaced_pod(pod, ns).status.resource_claim_statuses or []
        return st[0].resource_claim_name if st else None
    wait_for(made, timeout=60, what=f"{pod}'s claim made from its template")
    return made()


@contextlib.contextmanager
def _full_dra_node(kube, taken: bool = True):
    """One normal tenant, one node whose slice publishes 2 GPUs of a driver of the test's own (its DeviceClass), a
    claim template of 2 (`two`) and, if `taken`, a pod of it (`a-runs`) bound there, taking both; yields (core,
    resource API, the tenant's namespace, a dry-run actuator, the tenant names, the class, a list the test adds the
    claims it finalized to). After: those claims' finalizers go (so the namespace can), then the slice, the class,
    the node."""
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    api = kube.api()
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    tenants, ns, nodes = kube.tenants({"team-a": "normal"}, nodes=1, gpus=0)
    a = ns["team-a"]
    driver = cls = f"gpu-{uuid.uuid4().hex[:6]}.nvidia.com"
    dra_slice = _slice(f"{nodes[0]}-{cls[4:10]}", driver, nodes[0], H100)
    kub = KubernetesActuator(api, KubernetesActuatorConfig(dra_device_classes={cls: driver}), tenants)
    finalized: list[str] = []
    try:
        resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                      "metadata": {"name": cls}, "spec": {}})
        resource.create_resource_slice(dra_slice)
        resource.create_namespaced_resource_claim_template(a, _template("two", {"deviceClassName": cls, "count": 2}))
        if taken:
            core.create_namespaced_pod(a, _dra_pod(a, "a-runs", "two"))
            wait_for(lambda: core.read_namespaced_pod("a-runs", a).spec.node_name, timeout=60, what="a-runs bound")
        yield core, resource, a, kub, tuple(t.name for t in tenants), cls, finalized
    finally:
        for c in finalized:
            try:
                resource.patch_namespaced_resource_claim(c, a, {"metadata": {"finalizers": None}})
            except k8s.exceptions.ApiException:
                pass
        resource.delete_resource_slice(dra_slice["metadata"]["name"])
        resource.delete_device_class(cls)
        kube.delete_nodes(nodes)


def test_a_pending_pods_claim_held_in_deletion_by_its_tenants_finalizer_is_no_demand(kube):
    """A tenant may put a finalizer of its own on its claim and delete it: the claim stays, being deleted, for as long
    as the tenant likes, and kube-scheduler allocates no device to a claim being deleted, so a pending pod naming it
    (resourceClaimName), or whose claim made from its template (status.resourceClaimStatuses) is, never starts. Each
    is said (not counted) and no demand; the pod beside them whose claim is whole stays demand. The old code read
    the claim's request (or the template's) as the pod's pending demand, for as long as the finalizer stayed."""
    keep = {"metadata": {"finalizers": ["example.com/keep"]}}
    with _full_dra_node(kube) as (core, resource, a, kub, names, cls, going):
        # a claim of its own, finalized and deleted, then a pod naming it
        resource.create_namespaced_resource_claim(a, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "going", "finalizers": ["example.com/keep"]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": 1}}]}}})
        going.append("going")
        resource.delete_namespaced_resource_claim("going", a)
        named = _dra_pod(a, "named", "unused")
        named["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "going"}]
        core.create_namespaced_pod(a, named)
        # two pods of the template waiting for the devices: one's made claim is finalized and deleted
        core.create_namespaced_pod(a, _dra_pod(a, "made", "two"))
        core.create_namespaced_pod(a, _dra_pod(a, "waits", "two"))
        claim = _made_claim(core, a, "made")
        resource.patch_namespaced_resource_claim(claim, a, keep)
        going.append(claim)
        resource.delete_namespaced_resource_claim(claim, a)
        wait_for(lambda: kub.cluster_jobs(names) is not None and f"{a}/made" in kub.dra.uncounted
                 and f"{a}/named" in kub.dra.uncounted, timeout=60, what="both read as being deleted")
        assert kub.dra.pending == {f"{a}/waits": 2}, kub.dra.pending
        assert kub.dra.uncounted == {
            f"{a}/named": "asks for devices through DRA that the daemon does not count: claim going is being deleted "
                          "(the scheduler allocates no device to it: the pod never starts while it is)",
            f"{a}/made": f"asks for devices through DRA that the daemon does not count: claim {claim} is being deleted "
                         "(the scheduler allocates no device to it: the pod never starts while it is)"}, \
            kub.dra.uncounted
        jobs = kub.cluster_jobs(names)
        assert sorted(jobs.ids.tolist()) == [f"{a}/a-runs", f"{a}/waits"], jobs.ids
        # kube-scheduler's PreEnqueue holds both back ("resourceclaim ... is being deleted"): never placed
        assert all(core.read_namespaced_pod(n, a).spec.node_name is None for n in ("named", "made"))


def test_a_pod_naming_the_claim_made_for_another_pods_template_is_not_counted_twice(kube):
    """The resourceclaim controller makes a claim from a pending pod's template (its name in the pod's
    status.resourceClaimStatuses, which any reader of the namespace sees); a second pod of the tenant may name that
    claim (resourceClaimName): both wait for the one claim's devices, which it is allocated once. The claim is
    counted once, on the first pod; the old code counted the first pod's template and the second pod's claim by name,
    twice the devices (and a third pod of another template made its own claim: counted, as it asks for its own)."""
    with _full_dra_node(kube) as (core, _, a, kub, names, _, _):
        core.create_namespaced_pod(a, _dra_pod(a, "b-waits", "two"))
        core.create_namespaced_pod(a, _dra_pod(a, "d-own", "two"))
        twin = _dra_pod(a, "c-twin", "unused")
        twin["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": _made_claim(core, a, "b-waits")}]
        core.create_namespaced_pod(a, twin)
        _made_claim(core, a, "d-own")
        kub.cluster_jobs(names)
        assert kub.dra.pending == {f"{a}/b-waits": 2, f"{a}/d-own": 2}, kub.dra.pending


def test_a_claim_whose_devices_must_share_an_attribute_no_node_has_enough_of_is_no_demand(kube, caplog):
    """A claim's constraint (matchAttribute) has kube-scheduler allocate its requests' devices only where that many
    share one value of the attribute; a device without it shares none. A tenant's claim of 2 GPUs that must share
    their uuid (each device its own), or an attribute no device publishes, is never allocated: those pods stay
    unbound while one whose 2 GPUs must share their productName binds on the node's 2 free devices. The two are said
    once and no demand; the old code dropped the constraints unread and counted each as 2 GPUs of pending demand."""
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kubernetes")
    with _full_dra_node(kube, taken=False) as (core, resource, a, kub, names, cls, _):
        def pod(name: str, attribute: str) -> None:
            resource.create_namespaced_resource_claim_template(a, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                "spec": {"spec": {"devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, "count": 2}}],
                    "constraints": [{"matchAttribute": f"{cls}/{attribute}"}]}}}})
            core.create_namespaced_pod(a, _dra_pod(a, name, name))
        pod("same-uuid", "uuid")
        pod("same-nvlink", "nvlinkDomain")
        for name in ("same-uuid", "same-nvlink"):   # the scheduler tried them and found no node
            wait_for(lambda n=name: any(c.type == "PodScheduled" and c.status == "False" for c in
                                        core.read_namespaced_pod(n, a).status.conditions or []),
                     timeout=60, what=f"the scheduler's verdict on {name}")
        pod("same-product", "productName")
        wait_for(lambda: core.read_namespaced_pod("same-product", a).spec.node_name, timeout=60,
                 what="same-product bound on the free devices")
        for _ in range(2):
            jobs = kub.cluster_jobs(names)
        assert {i: (int(g), bool(r)) for i, g, r in zip(jobs.ids, jobs.gpus, jobs.running)} == \
            {f"{a}/same-product": (2, True)}, (jobs.ids, jobs.gpus)
        assert all(core.read_namespaced_pod(n, a).spec.node_name is None for n in ("same-uuid", "same-nvlink"))
        said = sorted(m.getMessage() for m in caplog.records if "can never start" in m.getMessage())
        assert said == [
            f"pod {a}/same-{w} asks for GPUs through DRA (2 of {cls}, 2 sharing one value of {cls}/{attr}) that no "
            "node's slices publish (its devices are all on its one node): it can never start, so it is no demand (no "
            "hold, no preemption, no aging for it)" for w, attr in (("nvlink", "nvlinkDomain"), ("uuid", "uuid"))], \
            said
