"""Kueue actuator: the official client's real HTTP requests, recorded by a capture server (no API server here).

Every object sent is validated against Kueue's own published CRD schema (v1beta1 openAPIV3Schema of the
ClusterQueue, Cohort, ResourceFlavor and LocalQueue CRDs, vendored in tests/support/data/kueue/, source and licence in
SOURCE.md), made strict: an object schema with `properties` rejects fields it does not define (a real API
server with strict field validation rejects them; without, it drops them silently). The CEL rules
(`x-kubernetes-validations`) that apply to these objects are checked in `cel_rules`.
"""

import dataclasses
from urllib.parse import unquote

import jsonschema
import pytest
import yaml
from kubernetes import client as k8s

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory, Preemption
from tests.actuators.test_k8s_actuator import _capture_servers, served  # noqa: F401 (autouse fixture)
from tests.conftest import REPO

CRD_DIR = REPO / "tests" / "support" / "data" / "kueue"
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
           "LocalQueue": crd_schema("localqueues", "LocalQueue"),
           "Cohort": crd_schema("cohorts", "Cohort")}
CLUSTER_QUEUE = SCHEMAS["ClusterQueue"]


def cel_rules(obj: dict) -> None:
    """The CRDs' x-kubernetes-validations that concern what the daemon sends, written out in Python."""
    spec = obj.get("spec", {})
    if obj["kind"] in ("ClusterQueue", "Cohort"):
        for rg in spec.get("resourceGroups", []):
            assert all(len(f["resources"]) == len(rg["coveredResources"]) for f in rg["flavors"]), \
                "flavors must have the same number of resources as the coveredResources"
        if obj["kind"] == "ClusterQueue" and not spec.get("cohort"):
            assert not any("borrowingLimit" in r for rg in spec.get("resourceGroups", [])
                           for f in rg["flavors"] for r in f["resources"]), \
                "borrowingLimit must be nil when cohort is empty"
    if obj["kind"] == "Cohort" and not spec.get("parentName"):  # Kueue's webhook (the CRD's description says so)
        assert not any(k in r for rg in spec.get("resourceGroups", []) for f in rg["flavors"] for r in f["resources"]
                       for k in ("borrowingLimit", "lendingLimit")), "limits need a parent Cohort"
    if obj["kind"] == "ClusterQueue":
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
    """The check can fail: a misspelt field, a bad enum, a negative-looking quantity string, a bad name; a
    Cohort with a field its schema lacks, or with a borrowing limit but no parent."""
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
    cohort = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort", "metadata": {"name": "c"},
              "spec": {"parentName": "root", "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                  {"name": "f", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}]}]}]}}
    validate(cohort)
    with pytest.raises(jsonschema.ValidationError):                     # a field the Cohort schema lacks (its
        validate({**cohort, "spec": {**cohort["spec"], "parent": "root"}})  # parent before Kueue 0.17: pruned)
    with pytest.raises(AssertionError):                                 # limits without a parent
        validate({**cohort, "spec": {"resourceGroups": cohort["spec"]["resourceGroups"]}})


TENANTS = [TenantConfig(name="team-high", tier="high", k8s_namespace="serving"),
           TenantConfig(name="team-a", tier="normal", k8s_namespace="research"),
           TenantConfig(name="batchy", tier="low", k8s_namespace="batch"),
           TenantConfig(name="ops", tier="normal", k8s_namespace="kube-system")]  # never touched
KEY = "gpu-autoscaler.io/hold"
API = "/apis/kueue.x-k8s.io/v1beta1"


class FakeCluster:
    """What the capture server answers: nodes (8 GPUs each), running pods, and Kueue objects, kept as a real
    API server would keep them for these requests: a node PATCH (strategic merge: labels merged, null deletes
    a key, the taint list replaced) needs the current resourceVersion and bumps it; Kueue objects are stored
    on POST/PUT and removed on DELETE. The requests themselves are the official client's, over the wire."""

    def __init__(self):
        self.nodes = {}
        self.pods = []
        self.workloads = []      # Kueue Workloads (the waiting ones are the plan's demand beside the pods)
        self.objs = {}           # (plural, namespace, name) -> body
        self.fail_patch = {}     # node -> HTTP status to answer instead
        self.lost = set()        # nodes whose patch is applied but answered 504 (the answer was lost)
        self.fail_write = {}     # (plural, name) -> HTTP status to answer a POST/PUT of that object with
        self.fail_list = 0       # HTTP status to answer every list of Kueue objects with (0: answer)
        self.conflicts = {}      # (plural, name) -> how many PUTs of it to answer 409 Conflict (moved under us)
        for i in range(1, 8):
            self.add_node(f"n{i}")
        self.nodes["n5"]["spec"]["unschedulable"] = True                                   # cordoned
        self.nodes["n6"]["spec"]["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]  # not ours
        self.nodes["n7"]["status"]["conditions"][0]["status"] = "False"                   # NotReady
        self.nodes["n2"]["spec"]["taints"] = [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]

    def add_node(self, name, gpus=8):
        self.nodes[name] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "resourceVersion": "1",
                                         "labels": {"kubernetes.io/hostname": name}},
                            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}

    def run(self, ns, name, node, gpus, priority_class=None, daemonset=False):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
               "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                   "requests": {"nvidia.com/gpu": str(gpus)}}}]}, "status": {"phase": "Running"}}
        if priority_class:
            pod["spec"]["priorityClassName"] = priority_class
        if daemonset:
            pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                                   "uid": "u1", "controller": True}]
        self.pods.append(pod)

    def held(self):
        return {n: d["metadata"]["labels"].get(KEY) for n, d in sorted(self.nodes.items())
                if d["metadata"]["labels"].get(KEY)}

    def patch_node(self, path, body):
        name = path.rsplit("/", 1)[1]
        node = self.nodes[name]
        if name in self.fail_patch:
            return self.fail_patch[name], {"kind": "Status", "code": self.fail_patch[name]}
        if body["metadata"].get("resourceVersion") != node["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        for k, v in body["metadata"].get("labels", {}).items():
            if v is None:
                node["metadata"]["labels"].pop(k, None)
            else:
                node["metadata"]["labels"][k] = v
        if "taints" in body.get("spec", {}):
            node["spec"]["taints"] = body["spec"]["taints"]
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        if name in self.lost:
            return 504, {"kind": "Status", "code": 504, "reason": "Timeout"}
        return 200, node

    def key(self, path):
        parts = path[len(API) + 1:].split("/")
        return (parts[2], parts[1], parts[3]) if parts[0] == "namespaces" else (parts[0], "", parts[1])

    def get(self, path, body):
        k = self.key(path)
        return (200, self.objs[k]) if k in self.objs else (404, {"kind": "Status", "code": 404})

    def refused(self, path, body):
        """POST .../<plural> or PUT .../<plural>/<name>: the answer to send when that object is to fail."""
        name = body["metadata"]["name"]
        parts = path.split("/")
        plural = parts[-2] if parts[-1] == name else parts[-1]
        code = self.fail_write.get((plural, name))
        return (code, {"kind": "Status", "code": code}) if code else None

    def put(self, path, body):
        if self.refused(path, body):
            return self.refused(path, body)
        k = self.key(path)
        if self.conflicts.get((k[0], k[2]), 0) > 0:
            self.conflicts[(k[0], k[2])] -= 1
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": "9"}}
        self.objs[self.key(path)] = body
        return 200, body

    def post(self, path, body):
        if self.refused(path, body):
            return self.refused(path, body)
        parts = path[len(API) + 1:].split("/")
        k = ((parts[2], parts[1], body["metadata"]["name"]) if parts[0] == "namespaces"
             else (parts[0], "", body["metadata"]["name"]))
        if k in self.objs:
            return 409, {"kind": "Status", "code": 409}
        self.objs[k] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return 201, self.objs[k]

    def delete(self, path, body):
        return ((200, {"kind": "Status"}) if self.objs.pop(self.key(path), None)
                else (404, {"kind": "Status", "code": 404}))

    def listing(self, path, body):
        if self.fail_list:
            return self.fail_list, {"kind": "Status", "code": self.fail_list}
        plural = path.rsplit("/", 1)[1]
        return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "List", "metadata": {},
                     "items": [o for (p, _, _), o in sorted(self.objs.items()) if p == plural]}

    def routes(self):
        return {
            ("GET", r"/api/v1/nodes"): lambda p, b: (200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                                                            "items": list(self.nodes.values())}),
            ("GET", r"/api/v1/pods"): lambda p, b: (200, {"apiVersion": "v1", "kind": "PodList", "metadata": {},
                                                           "items": self.pods}),
            ("PATCH", r"/api/v1/nodes/[^/]+"): self.patch_node,
            ("GET", API): (200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API[6:],
                                 "resources": [{"name": p, "singularName": "", "namespaced": p == "localqueues",
                                                "kind": "", "verbs": ["get"]}
                                               for p in ("resourceflavors", "clusterqueues", "cohorts",
                                                         "localqueues")]}),
            ("GET", API + r"/(resourceflavors|clusterqueues|cohorts|localqueues)"): self.listing,
            ("GET", API + r"/workloads"): (200, {"apiVersion": API[6:], "kind": "WorkloadList", "metadata": {},
                                                 "items": self.workloads}),
            ("GET", API + r"/.+"): self.get, ("PUT", API + r"/.+"): self.put,
            ("POST", API + r"/.+"): self.post, ("DELETE", API + r"/.+"): self.delete,
            ("GET", r"/api/v1/namespaces/batch/pods/low-1"): (200, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "low-1", "namespace": "batch"},
                "spec": {"containers": [{"name": "c"}], "priorityClassName": "gpu-autoscaler-low", "nodeName": "n1"},
                "status": {"phase": "Running"}}),
            ("POST", r"/api/v1/namespaces/batch/pods/low-1/eviction"): (201, {}),
        }


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def kueue(cluster=None, dry_run=False, clock=None, tenants=TENANTS):
    cluster = cluster or FakeCluster()
    api, cap = served(cluster.routes())
    return KueueActuator(api, KueueActuatorConfig(), tenants, dry_run, clock=clock or Clock()), cap, cluster


def plan(reserved, pool=12, capacity=56, pre=(), quotas=None):
    """`reserved`: GPUs held for team-high, or a dict tenant -> GPUs."""
    res = dict(reserved) if isinstance(reserved, dict) else ({"team-high": reserved} if reserved else {})
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=capacity, load=0.9, high_pool=pool,
                reservations=res,
                quotas={"team-a": 30, "batchy": 30} if quotas is None else quotas, limits={},
                preemptions=tuple(pre), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


def writes(pool):
    return [r for r in pool.sent if r["method"] in ("POST", "PUT", "PATCH", "DELETE")]


def objects(cluster, kind):
    return {(k[1], k[2]) if k[1] else k[2]: o for k, o in cluster.objs.items() if o["kind"] == kind}


def flavors(cq):
    return {f["name"]: f["resources"][0] for f in cq["spec"]["resourceGroups"][0]["flavors"]}


def test_whole_nodes_are_held_for_a_high_tenant_and_its_queue_admits_exactly_them():
    c = FakeCluster()
    c.run("serving", "infer-0", "n3", 4)   # team-high already runs on n3
    c.run("batch", "low-1", "n1", 8, "gpu-autoscaler-low")  # n1 full of low work, which this plan preempts
    c.run("research", "a-1", "n4", 8)      # n4 full of normal work
    c.run("research", "a-2", "n2", 2)      # n2 partly used
    act, pool, c = kueue(c)
    rep = act.apply(plan(12, pre=[Preemption("batch/low-1", "batchy", 8, "n1", "peak ahead")]))
    assert rep.ok, rep.errors
    # 12 GPUs = 2 whole 8-GPU nodes, scored as the Slurm holds score them (its GPUs there + free + freed by
    # the plan's preemptions): n1 (8 being freed) and n3 (4 its own + 4 free) over n2 (6 free) and n4 (0);
    # never the cordoned n5, the foreign-tainted n6, the NotReady n7
    assert c.held() == {"n1": "team-high", "n3": "team-high"}
    for n in ("n1", "n3"):
        assert {"key": KEY, "value": "team-high", "effect": "NoSchedule"} in c.nodes[n]["spec"]["taints"]
    patches = [r for r in pool.sent if r["method"] == "PATCH"]
    assert [r["path"] for r in patches] == ["/api/v1/nodes/n1", "/api/v1/nodes/n3"]
    assert patches[0]["headers"]["content-type"] == "application/strategic-merge-patch+json"
    assert patches[0]["body"]["metadata"]["resourceVersion"] == "1"    # optimistic: a concurrent change wins
    assert pool.sent[0]["path"] == API                                   # discovery: Kueue's CRDs served
    assert pool.sent[2]["query"] == "fieldSelector=status.phase%3DRunning"
    # the eviction comes after the nodes are tainted: the evicted pod cannot come back there
    order = [r["path"] for r in writes(pool)]
    assert order.index("/api/v1/namespaces/batch/pods/low-1/eviction") > order.index("/api/v1/nodes/n3")
    for o in c.objs.values():
        validate(o)
    rfs = objects(c, "ResourceFlavor")
    assert rfs["gpuas-hold-team-high"]["spec"] == {
        "nodeLabels": {KEY: "team-high"},
        "tolerations": [{"key": KEY, "operator": "Equal", "value": "team-high", "effect": "NoSchedule"}]}
    assert rfs["default-flavor"]["spec"] == {}
    cqs = objects(c, "ClusterQueue")
    own = cqs["gpuas-tenant-team-high"]
    assert [f["name"] for f in own["spec"]["resourceGroups"][0]["flavors"]] == ["gpuas-hold-team-high",
                                                                                "default-flavor"]
    assert flavors(own) == {"gpuas-hold-team-high": {"name": "nvidia.com/gpu", "nominalQuota": 16, "lendingLimit": 0},
                            "default-flavor": {"name": "nvidia.com/gpu", "nominalQuota": 0}}
    # every tenant has its own queue (a hold flavor can only sit in a queue of its tenant alone); nothing held
    # for team-a and batchy by this plan, so their hold flavors admit nothing
    assert sorted(cqs) == ["gpuas-high", "gpuas-low", "gpuas-tenant-batchy", "gpuas-tenant-team-a",
                           "gpuas-tenant-team-high"]
    for t in ("team-a", "batchy"):
        assert flavors(cqs[f"gpuas-tenant-{t}"])[f"gpuas-hold-{t}"]["nominalQuota"] == 0
    # 56 GPUs, 16 held: the normal tenants together capped at the plan's 30 (their Cohort's quota, never
    # borrowing from the rest of the tree), the other 10 unheld GPUs lendable by the high queue
    cohort = objects(c, "Cohort")["gpuas-normal"]
    assert cohort["spec"] == {"parentName": "gpu-autoscaler", "resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": "default-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 30,
                                                               "borrowingLimit": 0}]}]}]}
    assert flavors(cqs["gpuas-high"])["default-flavor"] == {"name": "nvidia.com/gpu", "nominalQuota": 10}
    assert flavors(cqs["gpuas-low"])["default-flavor"] == {"name": "nvidia.com/gpu", "nominalQuota": 0}
    assert {q["spec"]["preemption"]["reclaimWithinCohort"] for q in cqs.values()} == {"Never"}
    assert {k: q["spec"]["cohort"] for k, q in cqs.items()} == {
        "gpuas-high": "gpu-autoscaler", "gpuas-low": "gpu-autoscaler", "gpuas-tenant-team-high": "gpu-autoscaler",
        "gpuas-tenant-batchy": "gpu-autoscaler", "gpuas-tenant-team-a": "gpuas-normal"}
    lqs = {k: o["spec"]["clusterQueue"] for k, o in objects(c, "LocalQueue").items()}
    assert lqs == {("serving", "gpuas"): "gpuas-tenant-team-high", ("serving", "gpuas-low"): "gpuas-low",
                   ("research", "gpuas"): "gpuas-tenant-team-a", ("research", "gpuas-low"): "gpuas-low",
                   ("batch", "gpuas"): "gpuas-tenant-batchy", ("batch", "gpuas-low"): "gpuas-low"}
    assert not any("kube-system" in r["path"] for r in pool.sent)
    # unchanged plan: nothing written (the nodes are read again, nothing else)
    n = len(writes(pool))
    assert act.apply(plan(12)).ok and len(writes(pool)) == n


def test_new_hold_nodes_are_the_clearable_ones_first_as_on_slurm():
    """The Slurm holds' rule (whole_nodes.rank): a node where only evictable work of others runs comes before
    one with more free GPUs but work the daemon may not evict (another tenant's non-low pod, a pod outside the
    tenant namespaces, a DaemonSet pod even of the low class); the holder's own pods never count against it."""
    c = FakeCluster()
    c.run("research", "a-1", "n1", 2)                                   # normal work of team-a: firm 2, 6 free
    c.run("batch", "low-2", "n2", 2, "gpu-autoscaler-low")              # evictable
    c.run("serving", "infer-0", "n2", 4, "gpu-autoscaler-high")         # the holder's own: firm 0, 2 free
    c.run("monitoring", "probe", "n3", 1, "gpu-autoscaler-low")         # not a tenant namespace: firm 1, 7 free
    c.run("batch", "dcgm", "n4", 1, "gpu-autoscaler-low", daemonset=True)  # never evicted: firm 1, 7 free
    act, pool, c = kueue(c)
    assert act.apply(plan(8)).ok
    assert c.held() == {"n2": "team-high"}          # by free GPUs alone n3 (7 free) would have been taken
    assert act.apply(plan(24)).ok
    assert c.held() == {"n2": "team-high", "n3": "team-high", "n4": "team-high"}   # n1 (firm 2) last


def test_aged_normal_and_low_tenants_get_whole_node_holds_only_they_are_admitted_on():
    """The plan holds for any tier (aging, an operator's floor), as the simulator and Slurm do: a normal and a
    low tenant get nodes labelled and tainted for them, and a hold flavor that only their own ClusterQueue (only
    their namespace) has quota on, so only their workloads get its toleration. The normal tenant's queue stays
    under the normal cap (its Cohort). When aging ends the holds go after the shrink delay."""
    c = FakeCluster()
    c.run("research", "a-1", "n3", 4)                             # team-a (normal) already runs on n3
    clock = Clock()
    act, pool, c = kueue(c, clock=clock)
    rep = act.apply(plan({"team-a": 8, "batchy": 16}, quotas={"team-a": 38, "batchy": 46}))
    assert rep.ok, rep.errors
    held = c.held()
    assert sorted(held.values()) == ["batchy", "batchy", "team-a"] and held["n3"] == "team-a"   # where team-a runs
    for n, who in held.items():
        assert {"key": KEY, "value": who, "effect": "NoSchedule"} in c.nodes[n]["spec"]["taints"]
    for o in c.objs.values():
        validate(o)
    cqs = objects(c, "ClusterQueue")
    assert flavors(cqs["gpuas-tenant-team-a"])["gpuas-hold-team-a"] == {"name": "nvidia.com/gpu", "nominalQuota": 8,
                                                                        "lendingLimit": 0}
    assert flavors(cqs["gpuas-tenant-batchy"])["gpuas-hold-batchy"]["nominalQuota"] == 16
    assert cqs["gpuas-tenant-team-a"]["spec"]["cohort"] == "gpuas-normal"
    # a hold flavor is in exactly one ClusterQueue, whose namespaces are its tenant's only
    ns_of = {"team-high": "serving", "team-a": "research", "batchy": "batch"}
    for t, ns in ns_of.items():
        users = [q for q in cqs.values() if f"gpuas-hold-{t}" in flavors(q)]
        assert [u["metadata"]["name"] for u in users] == [f"gpuas-tenant-{t}"]
        assert users[0]["spec"]["namespaceSelector"]["matchExpressions"][0]["values"] == [ns]
        assert c.objs[("localqueues", ns, "gpuas")]["spec"]["clusterQueue"] == f"gpuas-tenant-{t}"
    # normal cap over the 32 unheld GPUs: min(quotas) = 38 -> 32, nothing left for the high queue to lend
    cohort = objects(c, "Cohort")["gpuas-normal"]
    assert cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 32
    assert flavors(cqs["gpuas-high"])["default-flavor"]["nominalQuota"] == 0
    assert act.apply(plan({}, quotas={"team-a": 56, "batchy": 56})).ok and c.held() == held   # not at once
    clock.t += 300
    assert act.apply(plan({}, quotas={"team-a": 56, "batchy": 56})).ok and c.held() == {}
    cqs = objects(c, "ClusterQueue")
    assert flavors(cqs["gpuas-tenant-team-a"])["gpuas-hold-team-a"]["nominalQuota"] == 0
    assert flavors(cqs["gpuas-tenant-batchy"])["gpuas-hold-batchy"]["nominalQuota"] == 0


def test_a_pooled_high_tier_holds_one_pool_only_the_pooled_tenants_queues_can_use():
    """Plan.pooled (policy.pool_high_tier, the default): the high tenants' GPUs are held together as whole
    nodes labelled for the pool (as one Slurm reservation for all their accounts, and as the simulator pools);
    the pool flavor's quota is a Cohort's that only the pooled tenants' queues are in and list, lent to nobody
    else. A plan without the pool lets it go after the shrink delay, the tenant's own hold comes at once."""
    import dataclasses

    tenants = [*TENANTS, TenantConfig(name="team-high2", tier="high", k8s_namespace="serving2")]
    c = FakeCluster()
    c.run("serving2", "h2-0", "n3", 4)                       # team-high2 runs on n3: the pool's own work
    c.run("research", "a-1", "n1", 1)                        # normal work (not evictable) on n1 and n2
    c.run("research", "a-2", "n2", 1)
    clock = Clock()
    act, pool, c = kueue(c, clock=clock, tenants=tenants)
    pooled = dataclasses.replace(plan({"team-high": 8, "team-high2": 4}), pooled=("team-high", "team-high2"))
    rep = act.apply(pooled)
    assert rep.ok, rep.errors
    held = c.held()
    assert held == {"n3": "gpu-autoscaler.pool", "n4": "gpu-autoscaler.pool"}   # 12 GPUs: 2 whole nodes, clearable
    for o in c.objs.values():
        validate(o)
    assert objects(c, "ResourceFlavor")["gpuas-pool-hold"]["spec"] == {
        "nodeLabels": {KEY: "gpu-autoscaler.pool"},
        "tolerations": [{"key": KEY, "operator": "Equal", "value": "gpu-autoscaler.pool", "effect": "NoSchedule"}]}
    assert objects(c, "Cohort")["gpuas-pool"]["spec"] == {"parentName": "gpu-autoscaler", "resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": "gpuas-pool-hold", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16,
                                                                "lendingLimit": 0}]}]}]}
    cqs = objects(c, "ClusterQueue")
    for t in ("team-high", "team-high2"):
        q = cqs[f"gpuas-tenant-{t}"]
        assert q["spec"]["cohort"] == "gpuas-pool"
        assert [f["name"] for f in q["spec"]["resourceGroups"][0]["flavors"]] == [
            f"gpuas-hold-{t}", "gpuas-pool-hold", "default-flavor"]
        assert flavors(q)[f"gpuas-hold-{t}"]["nominalQuota"] == 0 and flavors(q)["gpuas-pool-hold"]["nominalQuota"] == 0
    assert sorted(k for k, q in cqs.items() if "gpuas-pool-hold" in flavors(q)) == [
        "gpuas-tenant-team-high", "gpuas-tenant-team-high2"]
    assert flavors(cqs["gpuas-high"])["default-flavor"]["nominalQuota"] == 56 - 16 - 30
    # the plan holds per tenant again: team-high's own node at once, the pool's nodes after the delay
    single = plan({"team-high": 8})
    assert act.apply(single).ok
    assert sorted(c.held().values()) == ["gpu-autoscaler.pool", "gpu-autoscaler.pool", "team-high"]
    clock.t += 300
    assert act.apply(single).ok and list(c.held().values()) == ["team-high"]
    cqs = objects(c, "ClusterQueue")
    assert cqs["gpuas-tenant-team-high"]["spec"]["cohort"] == "gpu-autoscaler"
    assert "gpuas-pool-hold" not in flavors(cqs["gpuas-tenant-team-high"])
    assert objects(c, "Cohort")["gpuas-pool"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
        "nominalQuota"] == 0
    # pooled again, then the daemon stops: every node let go, the pool's quota 0
    assert act.apply(pooled).ok and "gpu-autoscaler.pool" in c.held().values()
    assert objects(c, "Cohort")["gpuas-pool"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
        "nominalQuota"] > 0
    assert act.release_holds().ok and c.held() == {}
    assert objects(c, "Cohort")["gpuas-pool"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
        "nominalQuota"] == 0


def test_hold_grows_at_once_shrinks_after_the_delay_and_goes_on_stop():
    clock = Clock()
    act, pool, c = kueue(clock=clock)
    assert act.apply(plan(12)).ok and len(c.held()) == 2
    assert act.apply(plan(20)).ok and len(c.held()) == 3                      # grows at once
    first = dict(c.held())
    assert act.apply(plan(4)).ok and c.held() == first                        # fewer: not at once,
    clock.t += 299
    assert act.apply(plan(4)).ok and c.held() == first                        # nor before 300 s
    clock.t += 1
    assert act.apply(plan(4)).ok and len(c.held()) == 1
    kept = next(iter(c.held()))
    released = [n for n in first if n != kept]
    for n in released:
        assert KEY not in c.nodes[n]["metadata"]["labels"]
        assert not any(t["key"] == KEY for t in c.nodes[n]["spec"].get("taints", []))
    if "n2" in first:                                                         # a taint that is not ours stays
        assert {"key": "spot", "value": "yes", "effect": "PreferNoSchedule"} in c.nodes["n2"]["spec"]["taints"]
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 8
    assert act.release_holds().ok
    assert c.held() == {}
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 0
    assert flavors(objects(c, "ClusterQueue")["gpuas-high"])["default-flavor"]["nominalQuota"] == 56 - 30
    patched = {r["path"].rsplit("/", 1)[1] for r in pool.sent if r["method"] == "PATCH"}
    assert patched <= set(first)                                              # no other node was ever touched


def test_start_up_reconciles_nodes_and_deletes_stale_objects_of_our_label_only():
    c = FakeCluster()
    # left by an earlier run: n4 held for team-high, n2 for a tenant no longer configured
    for n, who in (("n4", "team-high"), ("n2", "old-team")):
        c.nodes[n]["metadata"]["labels"][KEY] = who
        c.nodes[n]["spec"]["taints"] = [{"key": KEY, "value": who, "effect": "NoSchedule"}]
    mine = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
    stale = [("localqueues", "gone", "gpuas", {"clusterQueue": "gpuas-tenant-old-team"}),
             ("clusterqueues", "", "gpuas-tenant-old-team", {}), ("resourceflavors", "", "gpuas-hold-old-team", {})]
    for plural, ns, name, spec in stale:
        kind = {"localqueues": "LocalQueue", "clusterqueues": "ClusterQueue",
                "resourceflavors": "ResourceFlavor"}[plural]
        c.objs[(plural, ns, name)] = {"kind": kind, "metadata": {"name": name, "labels": mine,
                                                               **({"namespace": ns} if ns else {})}, "spec": spec}
    c.objs[("clusterqueues", "", "someone-elses")] = {"kind": "ClusterQueue", "metadata": {"name": "someone-elses"},
                                                      "spec": {}}
    # the high tenant's LocalQueue from before node holds pointed at the tier queue (clusterQueue is immutable)
    c.objs[("localqueues", "serving", "gpuas")] = {"kind": "LocalQueue", "metadata": {
        "name": "gpuas", "namespace": "serving", "labels": mine, "resourceVersion": "3"},
        "spec": {"clusterQueue": "gpuas-high"}}
    # the layout before aged holds: one ClusterQueue gpuas-normal for every normal tenant
    c.objs[("clusterqueues", "", "gpuas-normal")] = {"kind": "ClusterQueue", "metadata": {
        "name": "gpuas-normal", "labels": mine, "resourceVersion": "2"}, "spec": {"cohort": "gpu-autoscaler"}}
    c.objs[("localqueues", "research", "gpuas")] = {"kind": "LocalQueue", "metadata": {
        "name": "gpuas", "namespace": "research", "labels": mine, "resourceVersion": "3"},
        "spec": {"clusterQueue": "gpuas-normal"}}
    act, pool, c = kueue(c)
    rep = act.apply(plan(8))
    assert rep.ok, rep.errors
    assert c.held() == {"n4": "team-high"}                 # adopted (no churn); the stray one released
    assert not any(t["key"] == KEY for t in c.nodes["n2"]["spec"]["taints"])
    lists = [r for r in pool.sent if r["method"] == "GET" and
             r["path"].endswith(("localqueues", "clusterqueues", "cohorts", "resourceflavors"))]
    assert {unquote(r["query"]) for r in lists} == {"labelSelector=app.kubernetes.io/managed-by=gpu-autoscaler"}
    deleted = [r["path"] for r in pool.sent if r["method"] == "DELETE"]
    assert deleted[:4] == [API + "/namespaces/gone/localqueues/gpuas", API + "/clusterqueues/gpuas-normal",
                           API + "/clusterqueues/gpuas-tenant-old-team", API + "/resourceflavors/gpuas-hold-old-team"]
    assert ("clusterqueues", "", "someone-elses") in c.objs               # no label of ours: never deleted
    assert c.objs[("localqueues", "serving", "gpuas")]["spec"]["clusterQueue"] == "gpuas-tenant-team-high"
    assert c.objs[("localqueues", "research", "gpuas")]["spec"]["clusterQueue"] == "gpuas-tenant-team-a"
    assert API + "/namespaces/serving/localqueues/gpuas" in deleted       # re-created, not replaced
    assert API + "/namespaces/research/localqueues/gpuas" in deleted
    n = len(lists)
    act.apply(plan(8))
    assert len([r for r in pool.sent if r["path"].endswith("clusterqueues") and r["method"] == "GET"]) == n // 4


def test_a_failed_node_patch_is_reported_not_counted_and_retried():
    c = FakeCluster()
    c.run("serving", "infer-0", "n3", 4)
    for n in ("n1", "n2", "n4"):
        c.run("research", f"a-{n}", n, 1)                                 # n3 is the best node for team-high
    c.fail_patch["n3"] = 500
    act, pool, c = kueue(c)
    rep = act.apply(plan(8))
    assert any("hold n3" in e and "500" in e for e in rep.errors)
    assert c.held() == {}                                                 # nothing held that the API refused
    cq = objects(c, "ClusterQueue")["gpuas-tenant-team-high"]
    assert flavors(cq)["gpuas-hold-team-high"]["nominalQuota"] == 0      # so the queue admits nothing there
    del c.fail_patch["n3"]
    assert act.apply(plan(8)).ok                                          # retried on the next cycle
    assert c.held() == {"n3": "team-high"}
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 8


def test_a_patch_whose_answer_was_lost_is_adopted_then_released_when_no_plan_asks():
    c = FakeCluster()
    c.lost.add("n1")
    clock = Clock()
    act, pool, c = kueue(c, clock=clock)
    rep = act.apply(plan(8))
    assert any("hold n1" in e and "504" in e for e in rep.errors)
    assert c.held() == {"n1": "team-high"}                                # it did happen
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 0
    c.lost.clear()
    n = len([r for r in pool.sent if r["method"] == "PATCH"])
    assert act.apply(plan(8)).ok                                          # read back: adopted, not patched again
    assert len([r for r in pool.sent if r["method"] == "PATCH"]) == n
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 8
    assert act.apply(plan(0)).ok and c.held() == {"n1": "team-high"}      # the plan stops asking: shrink delay
    clock.t += 300
    assert act.apply(plan(0)).ok and c.held() == {}


def test_a_refused_kueue_object_write_is_reported_and_written_the_next_cycle():
    """Per action: a ClusterQueue the API refuses (500) is that object's error, the other objects are written;
    the next cycle writes it. A start-up sweep whose list fails is reported and done by a later cycle."""
    c = FakeCluster()
    mine = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
    c.objs[("clusterqueues", "", "gpuas-tenant-old-team")] = {"kind": "ClusterQueue", "metadata": {
        "name": "gpuas-tenant-old-team", "labels": mine}, "spec": {}}
    c.fail_write[("clusterqueues", "gpuas-tenant-team-high")] = 500
    c.fail_list = 503
    act, pool, c = kueue(c)
    rep = act.apply(plan(8))
    assert sorted(rep.errors) == ["ClusterQueue gpuas-tenant-team-high: 500 Internal Server Error",
                                  "Kueue objects: cannot list or delete stale ones: 503 Service Unavailable"]
    assert ("clusterqueues", "", "gpuas-tenant-team-high") not in c.objs
    assert ("clusterqueues", "", "gpuas-tenant-batchy") in c.objs and c.held() != {}   # the rest was done
    assert ("clusterqueues", "", "gpuas-tenant-old-team") in c.objs
    c.fail_write.clear()
    c.fail_list = 0
    rep = act.apply(plan(8))
    assert rep.ok, rep.errors
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"] == 8
    assert ("clusterqueues", "", "gpuas-tenant-old-team") not in c.objs
    n = len(writes(pool))
    assert act.apply(plan(8)).ok and len(writes(pool)) == n                # and then nothing more to do


def test_a_kueue_object_that_moves_under_a_write_is_read_and_written_again_keeping_kueues_finalizer():
    """On the real control plane Kueue's controller adds its finalizer to a new flavor or queue between our read
    and our replace, and the replace is answered 409 Conflict (seen in CI). The write is tried again within the
    cycle, and a replace keeps the finalizer and annotations Kueue put there."""
    c = FakeCluster()
    act, pool, c = kueue(c)
    assert act.apply(plan(8)).ok
    k = ("clusterqueues", "", "gpuas-tenant-team-high")
    fin = ["kueue.x-k8s.io/resource-in-use"]
    c.objs[k]["metadata"] = {**c.objs[k]["metadata"], "finalizers": fin, "annotations": {"kueue": "x"}}
    c.conflicts[("clusterqueues", "gpuas-tenant-team-high")] = 2            # two moves, the third write lands
    rep = act.apply(plan(16))                                                # a hold grows at once
    assert rep.ok, rep.errors
    assert flavors(c.objs[k])["gpuas-hold-team-high"]["nominalQuota"] == 16
    assert c.objs[k]["metadata"]["finalizers"] == fin and c.objs[k]["metadata"]["annotations"] == {"kueue": "x"}
    c.conflicts[("clusterqueues", "gpuas-tenant-team-high")] = 5            # it keeps moving: one error, no loop
    rep = act.apply(plan(24))
    assert rep.errors == ["ClusterQueue gpuas-tenant-team-high: 409 Conflict"]


def _held_8_then_nodes_unreadable():
    """An actuator that held 8 GPUs for team-high, whose node reads now answer 503: (actuator, its Kueue objects'
    capture pool, the nodes' capture pool, cluster)."""
    c = FakeCluster()
    act, pool, c = kueue(c)
    assert act.apply(plan(8)).ok
    routes = c.routes()
    routes[("GET", r"/api/v1/nodes")] = (503, {"kind": "Status", "code": 503})
    api, pool2 = served(routes)
    act.nodes.core = k8s.CoreV1Api(api)
    return act, pool, pool2, c


def hold_quota(c):
    return flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-high"])["gpuas-hold-team-high"]["nominalQuota"]


def test_nodes_unreadable_change_nothing():
    act, pool, pool2, c = _held_8_then_nodes_unreadable()
    rep = act.apply(plan(24))
    assert any("cannot read nodes" in e for e in rep.errors)
    assert not [r for r in pool2.sent if r["method"] == "PATCH"]
    assert hold_quota(c) == 8


def test_nodes_unreadable_at_stop_release_nothing_and_keep_the_quotas():
    """The daemon stops and the nodes cannot be read: no node was un-held, so the hold flavors keep their quota
    (before, it went to 0 beside nodes still held for the tenant)."""
    act, pool, pool2, c = _held_8_then_nodes_unreadable()
    sent = len(writes(pool))
    rep = act.release_holds()
    assert any("cannot read nodes" in e for e in rep.errors)
    assert writes(pool2) == [] and len(writes(pool)) == sent          # no node patched, no Kueue object written
    assert hold_quota(c) == 8


def test_kueue_dry_run_writes_nothing():
    act, pool, _ = kueue()
    rep = act.apply(plan(12, pre=[Preemption("batch/low-1", "batchy", 8, "n1", "x")]))
    act2, pool2, _ = kueue(dry_run=True)
    rep2 = act2.apply(plan(12, pre=[Preemption("batch/low-1", "batchy", 8, "n1", "x")]))
    assert rep2.actions == rep.actions and rep.actions
    assert writes(pool2) == []


def test_beside_kueue_the_kubernetes_actuator_sets_no_quota_and_evicts_nothing():
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.config import KubernetesActuatorConfig
    from tests.actuators.test_k8s_actuator import NO_QUOTAS

    api, pool = served({("POST", r"/apis/scheduling.k8s.io/v1/priorityclasses"): (201, {}),
                        ("GET", r"/api/v1/resourcequotas"): NO_QUOTAS})
    act = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=False, enforce_plan=False)
    p = plan(20, pre=[Preemption("research/x", "team-a", 2, "", "y")])
    assert act.apply(Plan(**{**p.__dict__, "quotas": {"team-a": 40}})).ok
    # PriorityClasses, and the start-up look for quotas of ours an earlier plain-namespace run left
    assert {r["path"] for r in pool.sent} == {"/apis/scheduling.k8s.io/v1/priorityclasses", "/api/v1/resourcequotas"}
    assert not [r for r in pool.sent if r["method"] in ("PUT", "DELETE", "PATCH")]


def test_stopping_before_any_plan_still_releases_nodes_an_earlier_run_held():
    c = FakeCluster()
    c.nodes["n4"]["metadata"]["labels"][KEY] = "team-high"
    c.nodes["n4"]["spec"]["taints"] = [{"key": KEY, "value": "team-high", "effect": "NoSchedule"}]
    act, pool, c = kueue(c)
    assert act.release_holds().ok
    assert c.held() == {} and c.nodes["n4"]["spec"]["taints"] == []
    assert [r["path"] for r in writes(pool)] == ["/api/v1/nodes/n4"]      # nothing else touched


def test_tenant_names_become_valid_distinct_label_values_and_names():
    import re

    from daemon.actuators.k8s.objects import name_part

    names = ["team-high", "Team_High", "team.high", "TEAM-HIGH", "a" * 80, "a" * 81, "ÄÖ", "-x-"]
    parts = [name_part(n) for n in names]
    assert parts[0] == "team-high"                                    # a valid name stays as it is
    assert len(set(parts)) == len(parts)                              # never two tenants on one label value
    for p in parts:
        assert len(p) <= 47 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", p), p
    # issue 36: a tenant (and so its namespace) named as another's hashed part is not that other tenant
    twin = name_part("ML Team")                                       # ml-team-<6 hex>
    assert name_part(twin) != twin and name_part(twin).startswith(twin + "-")
    assert name_part("ml-team-v2") == "ml-team-v2"


def test_the_daemon_builds_both_kubernetes_actuators_from_one_config(tmp_path):
    """From the config as the daemon reads it: a kubeconfig, `kubernetes` + `kueue` enabled. The Kueue
    actuator holds nodes and evicts (with the policy's minimum run time and the timed client); the
    Kubernetes one beside it sets no quota and evicts nothing."""
    from kubernetes import client

    from daemon.actuators.k8s.actuator import KubernetesActuator, TimedApiClient
    from daemon.config import parse_config
    from daemon.service.wiring import _actuators

    c = FakeCluster()
    api, pool = served(c.routes())
    kc = tmp_path / "kubeconfig"
    kc.write_text(f"apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                  f"clusters: [{{name: k, cluster: {{server: '{api.configuration.host}'}}}}]\n"
                  "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    cfg = parse_config({"tenants": [{"name": "team-high", "tier": "high", "k8s_namespace": "serving"},
                                    {"name": "batchy", "tier": "low", "k8s_namespace": "batch"}],
                        "policy": {"preempt_min_runtime_s": 120, "pool_high_tier": False},
                        "actuators": {"enabled": ["kubernetes", "kueue"], "dry_run": False,
                                      "kubernetes": {"kubeconfig": str(kc), "timeout_s": 4},
                                      "kueue": {"hold_shrink_delay_s": 60}}})
    before = client.Configuration.get_default_copy()
    try:
        kube, kq = _actuators(cfg, None)
    finally:
        client.Configuration.set_default(before)
    assert isinstance(kube, KubernetesActuator) and not kube.enforce_plan
    assert isinstance(kq, KueueActuator) and kq.holders == ["batchy", "team-high"]
    assert kq.pods.min_runtime_s == 120 and kq.nodes.shrink_delay_s == 60
    # both read the nodes back with the hold label (held_by of ListsClusterNodes), whichever the runtime asks
    assert kube.hold_label == kq.pods.hold_label == cfg.actuators.kueue.hold_label
    assert isinstance(kq.custom.api_client, TimedApiClient) and kq.custom.api_client.timeout_s == 4
    # one watched view of pods and nodes for both (tests/k8s/test_view_watch.py: on the real apiserver); the capture
    # server serves no watch, so the reads here are its lists
    assert kube.view is not None and kube.view is kq.pods.view is kq.nodes.view
    kq.pods.view = kq.nodes.view = None
    p = Plan(**{**plan(8).__dict__, "quotas": {"batchy": 40}})
    assert kq.apply(p).ok and c.held() == {"n1": "team-high"}
    assert pool.sent[0]["headers"]["authorization"] == "Bearer t"          # the kubeconfig's credentials


def test_a_list_answer_with_no_resource_version_makes_the_view_stale_in_one_line():
    """A list the view could not watch from (no metadata.resourceVersion: no Kubernetes apiserver answers so, the
    capture server here does): the view is stale and says why, in one line, instead of a KeyError."""
    from daemon.actuators.k8s.informer import ClusterView, ViewStale

    api, _ = served(FakeCluster().routes())
    view = ClusterView(api, sync_timeout_s=30)
    try:
        with pytest.raises(ViewStale, match=r"(pods|nodes): ValueError: the list of (pods|nodes) has no "
                                            r"metadata.resourceVersion to watch from \(for \d+ s\)"):
            view.snapshot()
    finally:
        view.stop()


def test_a_held_node_the_holder_can_never_use_is_let_go_as_in_the_simulator():
    """Work of another tenant that cannot be evicted on a held node (here a normal pod that tolerated the taint)
    leaves room for smaller jobs only: the hold keeps the node while the holder's job (Plan.hold_job_gpus) still
    fits beside it, and moves to another node once it does not, as the simulator's holds do."""
    c = FakeCluster()
    act, pool, c = kueue(c)
    assert act.apply(plan(8)).ok
    ((node, who),) = c.held().items()
    assert who == "team-high"
    c.run("research", "a-9", node, 4)                     # team-a's normal pod: 4 of the node's 8 GPUs, firm
    sized = dataclasses.replace(plan(8), hold_job_gpus={"team-high": 4})
    assert act.apply(sized).ok
    assert c.held() == {node: "team-high"}                # a 4-GPU job still fits beside it: kept, no churn
    sized = dataclasses.replace(plan(8), hold_job_gpus={"team-high": 8})
    assert act.apply(sized).ok
    held = c.held()
    assert node not in held and list(held.values()) == ["team-high"]   # an 8-GPU job never fits there: moved
