"""daemon/actuators/k8s/dra.py on the official client's models (deserialized from the JSON the apiserver serves):
the cases the real-cluster test (tests/k8s/test_dra_claims.py) does not reach."""

from __future__ import annotations

import json
from types import SimpleNamespace

from kubernetes import client as k8s

from daemon.actuators.k8s.dra import read_dra
from daemon.config.fleet import FleetConfig

API = k8s.ApiClient()
DRIVER = CLASS = "gpu.nvidia.com"


def _model(raw: dict, kind):
    return API.deserialize(json.dumps(raw), kind, "application/json")


def _slice(node: str | None, n: int = 2, generation: int = 1, qualified: bool = False) -> object:
    key = f"{DRIVER}/productName" if qualified else "productName"
    spec = {"driver": DRIVER, "pool": {"name": node or "shared", "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {key: {"string": "NVIDIA H100 80GB HBM3"}}}
                        for i in range(n)]}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return _model({"metadata": {"name": f"s-{node}-{generation}"}, "spec": spec}, "V1ResourceSlice")


def _claim(ns: str, name: str, request: dict, allocated: list[str] | None = None, pool: str = "n1") -> object:
    raw = {"metadata": {"namespace": ns, "name": name},
           "spec": {"devices": {"requests": [{"name": "gpu", **request}]}}}
    if allocated is not None:
        raw["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": pool, "device": d} for d in allocated]}}}
    return _model(raw, "ResourceV1ResourceClaim")


def _pod(ns: str, name: str, claim: str | None = None, template: str | None = None, node: str | None = None,
         gated: bool = False, made: str | None = None) -> object:
    ref = {"name": "gpus", **({"resourceClaimName": claim} if claim else {}),
           **({"resourceClaimTemplateName": template} if template else {})}
    spec = {"containers": [{"name": "main", "image": "x"}], "resourceClaims": [ref]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "wait"}]
    status = {"phase": "Running" if node else "Pending"}
    if made:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": made}]
    return _model({"metadata": {"namespace": ns, "name": name}, "spec": spec, "status": status}, "V1Pod")


def _template(ns: str, name: str, request: dict) -> object:
    return _model({"metadata": {"namespace": ns, "name": name},
                   "spec": {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}}},
                  "V1ResourceClaimTemplate")


def test_a_shared_claim_already_allocated_asks_for_no_more_and_its_gpus_are_on_the_running_pod():
    """Two pods of one tenant share a ResourceClaim (resourceClaimName): the bound one holds its 2 devices; the
    pending one needs no new device (the claim is allocated), so it is no demand. Read as a fresh claim it was 2."""
    shared = _claim("a", "shared", {"exactly": {"deviceClassName": CLASS, "count": 2}}, ["gpu-0", "gpu-1"])
    got = read_dra([_pod("a", "runs", claim="shared", node="n1"), _pod("a", "joins", claim="shared")],
                   [_slice("n1")], [shared], [], {CLASS: DRIVER}, {"a": "team-a"})
    assert got.running == {"a/runs": ("n1", 2)} and got.used == {"n1": 2}
    assert got.pending == {} and got.uncounted == {}



def test_a_claim_shared_by_many_pods_is_counted_once_running_or_pending():
    """A tenant's ResourceClaim named by several pods (resourceClaimName) holds or asks for its devices once: 3 bound
    pods of one allocated claim of 2 are 2 GPUs running (on the first pod), 3 pending pods of one claim not yet
    allocated are 2 GPUs of demand. The old code read 6 and 6: one claim and cheap pods, N times the GPUs."""
    held = _claim("a", "held", {"exactly": {"deviceClassName": CLASS, "count": 2}}, ["gpu-0", "gpu-1"])
    asked = _claim("a", "asked", {"exactly": {"deviceClassName": CLASS, "count": 2}})
    pods = [_pod("a", f"runs-{i}", claim="held", node="n1") for i in (2, 0, 1)] + \
        [_pod("a", f"waits-{i}", claim="asked") for i in (1, 2, 0)]
    got = read_dra(pods, [_slice("n1", 4)], [held, asked], [], {CLASS: DRIVER}, {"a": "team-a"})
    assert got.running == {"a/runs-0": ("n1", 2)} and got.used == {"n1": 2}, got.running
    assert got.pending == {"a/waits-0": 2} and got.pending_by_tenant() == {"team-a": 2}, got.pending
    assert got.uncounted == {}



def test_a_device_is_one_in_use_however_many_claims_name_it():
    """A claim of admin access (a monitoring pod's, in a namespace the cluster admin labelled for it) is allocated
    a device another claim holds, and a device of shared capacity (shareID) is allocated to several claims: each
    such device is one GPU in use on its node, and the admin-access pod holds none. The old code read 4 used of 2."""
    def claim(name: str, devices: list[str], admin: bool = False, share: str | None = None) -> object:
        raw = {"metadata": {"namespace": "a", "name": name},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
               "status": {"allocation": {"devices": {"results": [
                   {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": d,
                    **({"adminAccess": True} if admin else {}), **({"shareID": share} if share else {})}
                   for d in devices]}}}}
        return _model(raw, "ResourceV1ResourceClaim")
    claims = [claim("holds", ["gpu-0"]), claim("watches", ["gpu-0"], admin=True),
              claim("share-1", ["gpu-1"], share="1"), claim("share-2", ["gpu-1"], share="2")]
    pods = [_pod("a", "holds", claim="holds", node="n1"), _pod("a", "watches", claim="watches", node="n1")]
    got = read_dra(pods, [_slice("n1", 2)], claims, [], {CLASS: DRIVER}, {"a": "team-a"})
    assert got.used == {"n1": 2}, got.used
    assert got.running == {"a/holds": ("n1", 1)}, got.running


def test_a_bound_pod_reads_its_claim_made_from_a_template_by_the_name_the_pod_status_gives():
    """A template's claim is named by the resourceclaim controller (pod.status.resourceClaimStatuses): its
    allocation is the bound pod's."""
    made = _claim("a", "runs-gpus-x7", {"exactly": {"deviceClassName": CLASS, "count": 1}}, ["gpu-1"])
    got = read_dra([_pod("a", "runs", template="one", node="n1", made="runs-gpus-x7")], [_slice("n1")], [made],
                   [_template("a", "one", {"exactly": {"deviceClassName": CLASS}})], {CLASS: DRIVER},
                   {"a": "team-a"})
    assert got.running == {"a/runs": ("n1", 1)} and got.used == {"n1": 1}


def test_pending_demand_leaves_out_gated_pods_other_namespaces_and_says_a_missing_template_or_first_available():
    tmpl = [_template("a", "two", {"exactly": {"deviceClassName": CLASS, "count": 2}}),
            _template("a", "either", {"firstAvailable": [{"name": "big", "deviceClassName": CLASS, "count": 2}]}),
            _template("kube-system", "two", {"exactly": {"deviceClassName": CLASS, "count": 2}})]
    pods = [_pod("a", "waits", template="two"), _pod("a", "gated", template="two", gated=True),
            _pod("a", "nowhere", template="gone"), _pod("a", "either", template="either"),
            _pod("kube-system", "sys", template="two")]
    got = read_dra(pods, [_slice("n1")], [], tmpl, {CLASS: DRIVER}, {"a": "team-a"})
    assert got.pending == {"a/waits": 2} and got.pending_by_tenant() == {"team-a": 2}
    assert sorted(got.uncounted) == ["a/either", "a/nowhere"], got.uncounted
    assert "template gone does not exist" in got.uncounted["a/nowhere"]
    assert "firstAvailable" in got.uncounted["a/either"]


def test_supply_types_by_product_through_the_fleet_counts_newest_generation_and_no_slice_without_a_node():
    """productName qualified by the driver's domain is read too; a pool's older generation and a slice of devices
    of several nodes (allNodes) are not counted; another driver's slices are not either."""
    resolver = FleetConfig(types=["h100"], aliases={"NVIDIA H100 80GB HBM3": "h100"}).resolver()
    other = _model({"metadata": {"name": "nic"}, "spec": {"driver": "nic.example.com", "nodeName": "n1",
                                                          "pool": {"name": "n1", "generation": 1,
                                                                   "resourceSliceCount": 1},
                                                          "devices": [{"name": "eth0"}]}}, "V1ResourceSlice")
    got = read_dra([], [_slice("n1", 2, generation=3, qualified=True), _slice("n1", 8, generation=2), _slice(None, 4),
                        other], [], [], {CLASS: DRIVER}, {}, resolver)
    assert got.supply == {"n1": {"dra:h100": 2}}, got.supply
    assert read_dra([], [_slice("n1", 2)], [], [], {CLASS: DRIVER}, {}).supply == {"n1": {"dra:gpu": 2}}


def test_with_the_dra_kinds_not_read_a_dra_pod_is_said_naming_the_setting_that_turned_them_off():
    """actuators.kubernetes.dra_device_classes = {}: the view reads no DRA kind, and a DRA pod is said as before,
    naming the setting (the old line did not say why its GPUs went uncounted)."""
    from daemon.actuators.k8s.view import pods_as_jobs

    said: dict[str, str] = {}
    jobs = pods_as_jobs([_pod("a", "dra", template="two")], {"a": "team-a"}, "nvidia.com/gpu", ("team-a",),
                        uncounted=said)
    assert len(jobs) == 0
    assert said == {"a/dra": "asks for devices through DRA (spec.resourceClaims: gpus): GPUs asked through DRA are "
                             "not counted (actuators.kubernetes.dra_device_classes is empty), neither as demand nor as "
                             "used; it asks for no nvidia.com/gpu, so it is no job"}, said


def test_a_claim_or_template_beyond_the_views_cap_is_said_not_read_and_one_that_is_gone_said_gone():
    """In a namespace with more ResourceClaims than the view keeps, a missing claim is not read (a bound pod's too),
    but a missing template, a kind kept whole there, does not exist."""
    from daemon.actuators.k8s.dra import partial_namespaces

    partial = partial_namespaces({"resourceclaims": {"a": 3}})
    pods = [_pod("a", "by-claim", claim="beyond"), _pod("a", "by-template", template="gone"),
            _pod("a", "runs", claim="beyond", node="n1")]
    got = read_dra(pods, [_slice("n1")], [], [], {CLASS: DRIVER}, {"a": "team-a"}, partial_ns=partial)
    cap = "than the view keeps: actuators.kubernetes.dra_max_objects_per_namespace)"
    beyond = f"claim beyond is not read (its namespace has more resourceclaims {cap}"
    assert got.uncounted["a/by-claim"].endswith(beyond), got.uncounted
    assert got.uncounted["a/by-template"].endswith("template gone does not exist"), got.uncounted
    assert got.uncounted["a/runs"].startswith("its ResourceClaims are not all read"), got.uncounted
    assert got.running == {} and got.pending == {}


def test_a_dra_object_the_reader_cannot_read_leaves_the_counts_unknown_said_once_and_the_pods_read(caplog,
                                                                                                 monkeypatch):
    """An object the DRA reader cannot read (none found on a real apiserver, whose client models validate each
    field: read_dra made to raise stands in for one) does not escape _read_dra: the counts are unknown that cycle
    and the line is said once, not per cycle (cluster_jobs then refuses the read: the next test)."""
    import logging

    from daemon.actuators.k8s import actuator as k8s_actuator
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    act = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")),
                             KubernetesActuatorConfig(), [], dry_run=True)

    def unreadable(*_a, **_k):
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(k8s_actuator.dra_gpus, "read_dra", unreadable)
    objs = {"resourceslices": [_slice("n1")], "resourceclaims": [], "resourceclaimtemplates": []}
    with caplog.at_level(logging.WARNING, logger="daemon.actuators.k8s.actuator"):
        for _ in range(2):
            assert act._read_dra([], objs, "", None) == {}
            assert act.dra is None
    lines = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(lines) == 1 and "DRA GPUs are not read this cycle" in lines[0], lines


def test_a_pod_fits_the_largest_node_not_the_smallest_and_asking_all_of_it_is_demand():
    """Nodes of 2 and 4 DRA GPUs: pods asking 3 and 4 fit the 4-GPU node (a pod's devices are on one node), so both
    are demand; 5 fits none and is said. Judged on the smallest node, 3 and 4 read as never starting; 'at least the
    largest' left the pod asking all of n2 out."""
    tmpl = [_template("a", f"t{g}", {"exactly": {"deviceClassName": CLASS, "count": g}}) for g in (3, 4, 5)]
    pods = [_pod("a", f"asks-{g}", template=f"t{g}") for g in (3, 4, 5)]
    got = read_dra(pods, [_slice("n1", 2), _slice("n2", 4)], [], tmpl, {CLASS: DRIVER}, {"a": "team-a"})
    assert got.pending == {"a/asks-3": 3, "a/asks-4": 4}, (got.pending, got.uncounted)
    assert list(got.uncounted) == ["a/asks-5"], got.uncounted
    assert "more than any node's slices publish (4)" in got.uncounted["a/asks-5"]


def test_a_pods_gpus_are_the_sum_of_its_claims_and_requests_each_claim_once():
    """A pod naming two templates (2 GPUs and 1 + 2 in two requests) asks 5; one naming the same claim in two of its
    resourceClaims entries asks the claim's 2 once."""
    two = _template("a", "two", {"exactly": {"deviceClassName": CLASS, "count": 2}})
    both = _model({"metadata": {"namespace": "a", "name": "both"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "one", "exactly": {"deviceClassName": CLASS, "count": 1}},
        {"name": "two", "exactly": {"deviceClassName": CLASS, "count": 2}}]}}}}, "V1ResourceClaimTemplate")
    many = _pod("a", "many", template="two")
    many.spec.resource_claims.append(_model({"name": "more", "resourceClaimTemplateName": "both"},
                                            "V1PodResourceClaim"))
    twice = _pod("a", "twice", claim="mine")
    twice.spec.resource_claims.append(_model({"name": "again", "resourceClaimName": "mine"}, "V1PodResourceClaim"))
    mine = _claim("a", "mine", {"exactly": {"deviceClassName": CLASS, "count": 2}})
    got = read_dra([many, twice], [_slice("n1", 8)], [mine], [two, both], {CLASS: DRIVER}, {"a": "team-a"})
    assert got.pending == {"a/many": 5, "a/twice": 2} and got.uncounted == {}, (got.pending, got.uncounted)


def test_a_pending_pod_being_deleted_asks_for_nothing():
    """A pending pod with a deletionTimestamp (held by a finalizer) will not start: no demand."""
    tmpl = [_template("a", "two", {"exactly": {"deviceClassName": CLASS, "count": 2}})]
    going = _pod("a", "going", template="two")
    going.metadata.deletion_timestamp = "2026-12-07T00:00:00Z"
    got = read_dra([going, _pod("a", "stays", template="two")], [_slice("n1", 4)], [], tmpl, {CLASS: DRIVER},
                   {"a": "team-a"})
    assert got.pending == {"a/stays": 2} and got.uncounted == {}


def test_a_bound_pods_gpus_are_its_drivers_devices_and_a_claim_not_all_read_is_said_not_counted_short():
    """A bound pod's claim allocated a GPU and a NIC of another driver holds 1 GPU, not 2. A bound pod with one claim
    read and one beyond its namespace's cap is said not read (its 1 GPU read would be a short count); a bound pod
    whose claim is gone in a namespace the view reads whole holds nothing and is not said to be beyond the cap."""
    from daemon.actuators.k8s.dra import partial_namespaces

    raw = {"metadata": {"namespace": "a", "name": "gpu-and-nic"},
           "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
           "status": {"allocation": {"devices": {"results": [
               {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},
               {"request": "nic", "driver": "nic.example.com", "pool": "n1", "device": "eth0"}]}}}}
    nic = _model(raw, "ResourceV1ResourceClaim")
    got = read_dra([_pod("a", "runs", claim="gpu-and-nic", node="n1")], [_slice("n1")], [nic], [],
                   {CLASS: DRIVER}, {"a": "team-a"})
    assert got.running == {"a/runs": ("n1", 1)} and got.used == {"n1": 1}, (got.running, got.used)

    held = _claim("b", "held", {"exactly": {"deviceClassName": CLASS}}, ["gpu-1"])
    half = _pod("b", "half", claim="held", node="n1")
    half.spec.resource_claims.append(_model({"name": "more", "resourceClaimName": "beyond"}, "V1PodResourceClaim"))
    got = read_dra([half, _pod("a", "gone", claim="deleted", node="n1")], [_slice("n1")], [held], [],
                   {CLASS: DRIVER}, {"a": "team-a", "b": "team-b"},
                   partial_ns=partial_namespaces({"resourceclaims": {"b": 1}}))
    assert list(got.uncounted) == ["b/half"] and got.uncounted["b/half"].startswith("its ResourceClaims are not all")
    assert got.running == {}, got.running


def test_the_partial_line_names_the_namespaces_with_the_most_objects_beyond_first_and_counts_the_rest():
    from daemon.actuators.k8s.dra import SHOWN_NAMESPACES, over_by_namespace

    """The line is bounded: the 10 with the most objects beyond the caps, most first (cluster-scoped slices under
    '(cluster)'), then how many more namespaces."""
    over = {"resourceclaims": {f"ns-{i:02d}": i for i in range(1, 13)}, "resourceslices": {"": 20}}
    line = over_by_namespace(over)
    shown = ["(cluster) 20"] + [f"ns-{i:02d} {i}" for i in range(12, 3, -1)]
    assert SHOWN_NAMESPACES == 10 and line == ", ".join(shown) + " and 3 more namespaces", line
    assert over_by_namespace({"resourceclaims": {f"ns-{i}": 1 for i in range(10)}}).count(" more") == 0


def test_a_dra_read_that_fails_refuses_the_clusters_read_rather_than_read_its_dra_tenants_as_running_nothing(
        monkeypatch):
    """With GPU DeviceClasses configured the DRA nodes and pods are the plan's Nodes and Jobs: a DRA read refused
    (403 here; not served, a watch down, an object unreadable alike) must fail the cycle's read in one line (the
    source's SourceError: the last plan kept, nothing new preempted), not give a cluster whose DRA tenants run
    nothing and whose DRA nodes have no GPUs (missing read as zero). The old code returned the device-plugin pods
    alone."""
    import pytest
    from kubernetes.client.exceptions import ApiException

    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    act = KubernetesActuator(k8s.ApiClient(k8s.Configuration(host="https://k8s.invalid")),
                             KubernetesActuatorConfig(dra_device_classes={CLASS: DRIVER}), [], dry_run=True)
    empty = k8s.V1PodList(items=[])
    monkeypatch.setattr(act.core, "list_pod_for_all_namespaces", lambda **_k: empty)
    monkeypatch.setattr(act.core, "list_node", lambda **_k: k8s.V1NodeList(items=[]))

    def forbidden(**_k):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(act.resource_api, "list_resource_slice", forbidden)
    with pytest.raises(RuntimeError, match="DRA GPUs are not read: 403 Forbidden") as refused:
        act.cluster_jobs(())
    assert type(refused.value).__name__ == "DraUnread"
    assert "dra_device_classes = {}" in str(refused.value)

    def not_served(**_k):
        raise ApiException(status=404, reason="Not Found")

    # a cluster that serves no resource.k8s.io/v1 (before 1.34) has no GPU asked through DRA: nothing is missing
    monkeypatch.setattr(act.resource_api, "list_resource_slice", not_served)
    assert len(act.cluster_jobs(())) == 0 and act.dra is None
    # read, the same cluster is a cluster (no DRA object yet is no failure)
    monkeypatch.setattr(act.resource_api, "list_resource_slice", lambda **_k: k8s.V1ResourceSliceList(items=[]))
    monkeypatch.setattr(act.resource_api, "list_resource_claim_for_all_namespaces",
                        lambda **_k: k8s.V1ResourceClaimList(items=[]))
    monkeypatch.setattr(act.resource_api, "list_resource_claim_template_for_all_namespaces",
                        lambda **_k: k8s.V1ResourceClaimTemplateList(items=[]))
    assert len(act.cluster_jobs(())) == 0
    # listed, but an object the reader cannot read (a slice without its spec): refused as well, not read as no DRA
    # GPU (mutation testing: this case dropped from the refusal passed every test)
    monkeypatch.setattr(act.resource_api, "list_resource_slice",
                        lambda **_k: SimpleNamespace(items=[SimpleNamespace(spec=None)]))
    with pytest.raises(RuntimeError, match="an object could not be read"):
        act.cluster_jobs(())


def test_only_a_dra_api_that_answers_404_for_every_kind_is_not_served():
    """The watched view says each DRA kind's failure as 'kind: why' (the snapshot's dra_why), a listing as the bare
    answer: the cluster serves no resource.k8s.io/v1 only where every kind answered 404; one kind refused (403) beside
    404s is a DRA read that failed (mutation testing: any 404, or the bare form only, passed every test)."""
    from daemon.actuators.k8s.actuator import _not_served

    assert _not_served("404 Not Found")
    assert _not_served("resourceslices: 404 Not Found; resourceclaims: 404 Not Found; "
                       "resourceclaimtemplates: 404 Not Found")
    assert not _not_served("resourceslices: 404 Not Found; resourceclaims: 403 Forbidden")
    assert not _not_served("")
