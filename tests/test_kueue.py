"""Kueue actuator: the official client's real HTTP requests, recorded by a capture server (no API server here).

The objects are checked against a JSON schema written here from Kueue's documented v1beta1 fields
(ClusterQueue, ResourceFlavor, LocalQueue): names, types, enums, required fields, and no field Kueue
does not define. It is not Kueue's own published CRD schema (that is not vendored in this repository).
"""

import jsonschema

from daemon.actuators.kueue import KueueActuator
from daemon.config import KueueActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.test_kubernetes import _capture_servers, served  # noqa: F401 (autouse fixture)

QUANTITY = {"anyOf": [{"type": "integer", "minimum": 0},
                      {"type": "string", "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                                                    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"}]}
DNS = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"}
META = {"type": "object", "required": ["name"], "properties": {"name": DNS, "namespace": DNS, "labels": {"type": "object"},
                                                             "resourceVersion": {"type": "string"}}}
SELECTOR = {"type": "object", "additionalProperties": False, "properties": {
    "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    "matchExpressions": {"type": "array", "items": {
        "type": "object", "required": ["key", "operator"], "additionalProperties": False,
        "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                       "values": {"type": "array", "items": {"type": "string"}}}}}}}
CLUSTER_QUEUE = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kueue.x-k8s.io/v1beta1"}, "kind": {"const": "ClusterQueue"}, "metadata": META,
        "spec": {"type": "object", "additionalProperties": False, "properties": {
            "cohort": DNS, "namespaceSelector": SELECTOR,
            "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
            "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]},
            "preemption": {"type": "object", "additionalProperties": False, "properties": {
                "reclaimWithinCohort": {"enum": ["Never", "LowerPriority", "Any"]},
                "withinClusterQueue": {"enum": ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]}}},
            "resourceGroups": {"type": "array", "maxItems": 16, "items": {
                "type": "object", "required": ["coveredResources", "flavors"], "additionalProperties": False,
                "properties": {
                    "coveredResources": {"type": "array", "minItems": 1, "maxItems": 64, "items": {"type": "string"}},
                    "flavors": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
                        "type": "object", "required": ["name", "resources"], "additionalProperties": False,
                        "properties": {"name": DNS, "resources": {"type": "array", "minItems": 1, "maxItems": 64, "items": {
                            "type": "object", "required": ["name", "nominalQuota"], "additionalProperties": False,
                            "properties": {"name": {"type": "string"}, "nominalQuota": QUANTITY,
                                           "borrowingLimit": QUANTITY, "lendingLimit": QUANTITY}}}}}}}}}}}}}
RESOURCE_FLAVOR = {"type": "object", "required": ["apiVersion", "kind", "metadata"], "properties": {
    "apiVersion": {"const": "kueue.x-k8s.io/v1beta1"}, "kind": {"const": "ResourceFlavor"}, "metadata": META,
    "spec": {"type": "object", "additionalProperties": False, "properties": {
        "nodeLabels": {"type": "object"}, "nodeTaints": {"type": "array"}, "tolerations": {"type": "array"}}}}}
LOCAL_QUEUE = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "properties": {
    "apiVersion": {"const": "kueue.x-k8s.io/v1beta1"}, "kind": {"const": "LocalQueue"},
    "metadata": {**META, "required": ["name", "namespace"]},
    "spec": {"type": "object", "required": ["clusterQueue"], "additionalProperties": False,
             "properties": {"clusterQueue": DNS}}}}
SCHEMAS = {"ClusterQueue": CLUSTER_QUEUE, "ResourceFlavor": RESOURCE_FLAVOR, "LocalQueue": LOCAL_QUEUE}

TENANTS = [TenantConfig(name="team-high", tier="high", k8s_namespace="serving"),
           TenantConfig(name="team-a", tier="normal", k8s_namespace="research"),
           TenantConfig(name="ops", tier="normal", k8s_namespace="kube-system")]  # never touched


def kueue(routes=None, dry_run=False):
    api, cap = served(routes or {("POST", r"/apis/kueue\.x-k8s\.io/v1beta1/.*"): (201, {})})
    return KueueActuator(api, KueueActuatorConfig(), TENANTS, dry_run), cap


def plan(reserved, pool=12, capacity=64, pre=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=capacity, load=0.9, high_pool=pool,
                reservations={"team-high": reserved} if reserved else {}, quotas={}, limits={},
                preemptions=tuple(pre), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


def sent_objects(pool):
    return [r["body"] for r in pool.sent if r["method"] in ("POST", "PUT")]


def gpu(cq):
    return cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]


def test_cluster_queues_in_a_cohort_follow_the_forecast_and_validate():
    act, pool = kueue()
    rep = act.apply(plan(20, pre=[Preemption("research/x", "team-a", 2, "", "y")]))
    assert rep.ok, rep.errors
    objs = sent_objects(pool)
    for o in objs:
        jsonschema.validate(o, SCHEMAS[o["kind"]])
    cqs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterQueue"}
    assert set(cqs) == {"gpuas-high", "gpuas-normal", "gpuas-low"}
    assert {c["spec"]["cohort"] for c in cqs.values()} == {"gpu-autoscaler"}
    # the forecast holds 20 GPUs for the high tier: all of its nominal quota, none of it lendable
    assert gpu(cqs["gpuas-high"]) == {"name": "nvidia.com/gpu", "nominalQuota": 20, "lendingLimit": 0}
    assert gpu(cqs["gpuas-normal"]) == {"name": "nvidia.com/gpu", "nominalQuota": 44, "borrowingLimit": 0}
    assert gpu(cqs["gpuas-low"]) == {"name": "nvidia.com/gpu", "nominalQuota": 0}   # borrows, no limit
    assert cqs["gpuas-high"]["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cqs["gpuas-low"]["spec"]["preemption"]["reclaimWithinCohort"] == "Never"
    sel = cqs["gpuas-high"]["spec"]["namespaceSelector"]["matchExpressions"][0]
    assert sel["key"] == "kubernetes.io/metadata.name" and sel["values"] == ["serving"]
    lqs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
           for o in objs if o["kind"] == "LocalQueue"}
    assert lqs == {("serving", "gpuas"): "gpuas-high", ("serving", "gpuas-low"): "gpuas-low",
                   ("research", "gpuas"): "gpuas-normal", ("research", "gpuas-low"): "gpuas-low"}
    assert not any("kube-system" in r["path"] for r in pool.sent)
    assert not any("eviction" in r["path"] or r["method"] == "DELETE" for r in pool.sent)  # Kueue reclaims
    assert any("reclaimWithinCohort" in a for a in rep.actions)
    paths = {r["path"] for r in pool.sent if r["method"] == "POST"}
    assert "/apis/kueue.x-k8s.io/v1beta1/clusterqueues" in paths
    assert "/apis/kueue.x-k8s.io/v1beta1/namespaces/serving/localqueues" in paths


def test_forecast_receding_lends_the_pool_and_updates_in_place():
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "x", "resourceVersion": "41"}}
    routes = {("POST", r"/apis/kueue\.x-k8s\.io/v1beta1/.*"): (201, {}),
              ("GET", r"/apis/kueue\.x-k8s\.io/v1beta1/clusterqueues/.*"): (200, cq),
              ("PUT", r"/apis/kueue\.x-k8s\.io/v1beta1/clusterqueues/.*"): (200, cq)}
    act, pool = kueue(routes)
    assert act.apply(plan(20)).ok
    n = len(pool.sent)
    assert act.apply(plan(20)).ok and len(pool.sent) == n       # unchanged: nothing sent
    assert act.apply(plan(4)).ok
    puts = [r for r in pool.sent if r["method"] == "PUT"][3:]   # the first apply replaced the three existing ones
    assert [p["path"].rsplit("/", 1)[1] for p in puts] == ["gpuas-high", "gpuas-normal"]
    high = puts[0]["body"]
    jsonschema.validate(high, CLUSTER_QUEUE)
    assert high["metadata"]["resourceVersion"] == "41"
    # 4 GPUs forecast: the guaranteed pool (12) stays nominal, the 8 beyond the forecast may be lent
    assert gpu(high) == {"name": "nvidia.com/gpu", "nominalQuota": 12, "lendingLimit": 8}


def test_kueue_dry_run_writes_nothing():
    act, pool = kueue()
    rep = act.apply(plan(20))
    assert rep.actions
    act2, pool2 = kueue(dry_run=True)
    assert act2.apply(plan(20)).actions == rep.actions and pool2.sent == []


def test_beside_kueue_the_kubernetes_actuator_sets_no_quota_and_evicts_nothing():
    from daemon.actuators.kubernetes import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig

    api, pool = served({("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses"): (201, {})})
    act = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=False, enforce_plan=False)
    p = plan(20, pre=[Preemption("research/x", "team-a", 2, "", "y")])
    assert act.apply(Plan(**{**p.__dict__, "quotas": {"team-a": 40}})).ok
    assert {r["path"] for r in pool.sent} == {"/apis/scheduling.k8s.io/v1/priorityclasses"}


def test_on_stop_the_forecast_hold_is_lent_out():
    from daemon.actuators.base import HoldsCapacity

    cq = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "x", "resourceVersion": "7"}}
    routes = {("POST", r"/apis/kueue\.x-k8s\.io/v1beta1/.*"): (201, {}),
              ("GET", r"/apis/kueue\.x-k8s\.io/v1beta1/clusterqueues/.*"): (200, cq),
              ("PUT", r"/apis/kueue\.x-k8s\.io/v1beta1/clusterqueues/.*"): (200, cq)}
    act, pool = kueue(routes)
    assert isinstance(act, HoldsCapacity)
    assert act.release_holds().actions == []              # nothing applied yet: nothing to release
    assert act.apply(plan(20)).ok
    assert act.release_holds().ok
    last = [r for r in pool.sent if r["method"] == "PUT"][-1]
    assert last["path"].endswith("/clusterqueues/gpuas-high")
    assert gpu(last["body"]) == {"name": "nvidia.com/gpu", "nominalQuota": 12, "lendingLimit": 12}
