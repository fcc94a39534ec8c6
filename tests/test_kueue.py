"""Kueue actuator: the official client's real HTTP requests, recorded by a capture server (no API server here).

Every object sent is validated against Kueue's own published CRD schema (v1beta1 openAPIV3Schema of the
ClusterQueue, ResourceFlavor and LocalQueue CRDs, vendored in tests/data/kueue/, source and licence in
SOURCE.md), made strict: an object schema with `properties` rejects fields it does not define (a real API
server with strict field validation rejects them; without, it drops them silently). The CEL rules
(`x-kubernetes-validations`) that apply to these objects are checked in `cel_rules`.
"""

from pathlib import Path

import jsonschema
import pytest
import yaml

from daemon.actuators.kueue import KueueActuator
from daemon.config import KueueActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.test_kubernetes import _capture_servers, served  # noqa: F401 (autouse fixture)

CRD_DIR = Path(__file__).parent / "data" / "kueue"
DNS = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def strict(schema):
    """The CRD schema with unknown fields rejected (metadata stays free-form, as in the CRD)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def crd_schema(plural: str, kind: str) -> dict:
    s = strict(yaml.safe_load((CRD_DIR / f"{plural}.v1beta1.yaml").read_text()))
    s["properties"]["apiVersion"] = {"const": "kueue.x-k8s.io/v1beta1"}
    s["properties"]["kind"] = {"const": kind}
    # object names: the API server's rule (DNS-1123 subdomain), not the CRD's
    s["properties"]["metadata"] = {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": DNS},
        "namespace": {"type": "string", "maxLength": 63, "pattern": DNS}}}
    return s


SCHEMAS = {"ClusterQueue": crd_schema("clusterqueues", "ClusterQueue"),
           "ResourceFlavor": crd_schema("resourceflavors", "ResourceFlavor"),
           "LocalQueue": crd_schema("localqueues", "LocalQueue")}
CLUSTER_QUEUE = SCHEMAS["ClusterQueue"]


def cel_rules(obj: dict) -> None:
    """The CRDs' x-kubernetes-validations that concern what the daemon sends, written out in Python."""
    spec = obj.get("spec", {})
    if obj["kind"] == "ClusterQueue":
        for rg in spec.get("resourceGroups", []):
            assert all(len(f["resources"]) == len(rg["coveredResources"]) for f in rg["flavors"]), \
                "flavors must have the same number of resources as the coveredResources"
        if not spec.get("cohort"):
            assert not any("borrowingLimit" in r for rg in spec.get("resourceGroups", [])
                           for f in rg["flavors"] for r in f["resources"]), "borrowingLimit must be nil when cohort is empty"
        pre = spec.get("preemption", {})
        assert not (pre.get("reclaimWithinCohort", "Never") == "Never"
                    and pre.get("borrowWithinCohort", {}).get("policy", "Never") != "Never")
    if obj["kind"] == "ResourceFlavor":
        for t in spec.get("nodeTaints", []):
            assert t["effect"] in ("NoSchedule", "PreferNoSchedule", "NoExecute")
        for t in spec.get("tolerations", []):
            assert "key" in t or t.get("operator") == "Exists"
            assert "tolerationSeconds" not in t or t.get("effect") == "NoExecute"
            assert t.get("operator", "Equal") in ("Equal", "Exists")
            assert not (t.get("operator") == "Exists" and "value" in t)
            assert t.get("effect", "NoSchedule") in ("NoSchedule", "PreferNoSchedule", "NoExecute")


def validate(obj: dict) -> None:
    jsonschema.validate(obj, SCHEMAS[obj["kind"]])
    cel_rules(obj)


def test_the_vendored_schema_rejects_what_kueue_rejects():
    """The check can fail: a misspelt field, a bad enum, a negative-looking quantity string, a bad name."""
    good = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"},
            "spec": {"cohort": "c", "preemption": {"reclaimWithinCohort": "Any"},
                     "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                         {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}]}]}}
    validate(good)
    bad = [("spec", "cohorts", "c"), ("preemption", "reclaimWithinCohort", "Sometimes"),
           ("res", "nominalQuota", "4 GPUs"), ("res", "lendingLimt", 1), ("metadata", "name", "Q_1")]
    for where, key, value in bad:
        obj = yaml.safe_load(yaml.safe_dump(good))
        tgt = {"spec": obj["spec"], "preemption": obj["spec"]["preemption"], "metadata": obj["metadata"],
               "res": obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]}[where]
        tgt[key] = value
        with pytest.raises(jsonschema.ValidationError):
            validate(obj)


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
        validate(o)
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
    validate(high)
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
