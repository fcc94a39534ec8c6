"""A mixed fleet on Kubernetes and Kueue (issue 24), through the official client's real HTTP requests against the
capture server: node types from the product label and MIG resources, pod types from nodeSelector and affinity,
node holds per type, and Kueue flavors per type validated against the vendored CRD schemas."""

from kubernetes import client as k8s

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.flavors import PRODUCT_LABEL, pod_accepts
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.objects import name_part
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig
from daemon.config.fleet import FleetConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.actuators.test_k8s_actuator import _capture_servers, served  # noqa: F401 (autouse fixture)
from tests.actuators.test_k8s_kueue import TENANTS, Clock, FakeCluster, objects, validate

A100, T4 = "NVIDIA-A100-SXM4-80GB", "Tesla-T4"
FLEET = FleetConfig(types=["a100", "t4", "mig-1g.10gb"], aliases={"NVIDIA A100-SXM4-80GB": "a100", "Tesla T4": "t4"})
NAMES = tuple(t.name for t in TENANTS)


def typed_cluster():
    """n1, n2: a100 (8 each); n3, n4: t4 (8 each); n5-n7 unusable (a100); n8: 7 MIG 1g.10gb instances; n9: a
    product nobody configured."""
    c = FakeCluster()
    for n in ("n1", "n2", "n5", "n6", "n7"):
        c.nodes[n]["metadata"]["labels"][PRODUCT_LABEL] = A100
    for n in ("n3", "n4"):
        c.nodes[n]["metadata"]["labels"][PRODUCT_LABEL] = T4
    c.add_node("n8", gpus=0)
    c.nodes["n8"]["metadata"]["labels"][PRODUCT_LABEL] = A100
    c.nodes["n8"]["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "7"
    c.add_node("n9")
    c.nodes["n9"]["metadata"]["labels"][PRODUCT_LABEL] = "NVIDIA-H200"
    c.nodes["n9"]["spec"]["unschedulable"] = True
    return c


def pending(c, ns, name, spec_extra, resources=None):
    c.pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                   "spec": {"containers": [{"name": "c", "resources": {
                       "requests": resources or {"nvidia.com/gpu": "1"}}}], **spec_extra},
                   "status": {"phase": "Pending"}})


def affinity(required=None, preferred=()):
    aff = {}
    if required is not None:
        aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": op, "values": vals}]} for op, vals in required]}
    if preferred:
        aff["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In",
                                                               "values": [v]}]}} for w, v in preferred]
    return {"affinity": {"nodeAffinity": aff}}


def test_node_and_pod_types_are_read_from_labels_selectors_and_affinity():
    c = typed_cluster()
    c.run("serving", "infer", "n1", 2)
    pending(c, "research", "sel", {"nodeSelector": {PRODUCT_LABEL: T4}})
    pending(c, "research", "any", {})
    pending(c, "research", "either", affinity([("In", [T4, A100])], preferred=[(10, A100)]))
    pending(c, "research", "not-t4", affinity([("NotIn", [T4])]))
    pending(c, "research", "pref-only", affinity(preferred=[(5, T4)]))
    pending(c, "batch", "mig", {}, {"nvidia.com/mig-1g.10gb": "2"})
    api, _ = served(c.routes())
    act = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=True, fleet=FLEET)
    nodes = act.cluster_nodes(NAMES)
    types = dict(zip(nodes.names, nodes.gpu_type))
    assert types == {"n1": "a100", "n2": "a100", "n3": "t4", "n4": "t4", "n5": "a100", "n6": "a100", "n7": "a100",
                     "n8": "mig-1g.10gb", "n9": "unknown"}
    assert dict(zip(nodes.names, nodes.gpus))["n8"] == 7                 # MIG instances count as GPUs
    jobs = act.cluster_jobs(NAMES)
    got = dict(zip(jobs.ids, jobs.accepts))
    assert got == {"serving/infer": (), "research/sel": ("t4",), "research/any": (),
                   "research/either": ("a100", "t4"),            # In, reordered by the preferred weight
                   "research/not-t4": ("a100", "mig-1g.10gb"),   # NotIn: every other configured type
                   "research/pref-only": ("t4", "a100", "mig-1g.10gb"),
                   "batch/mig": ("mig-1g.10gb",)}
    assert dict(zip(jobs.ids, jobs.gpus))["batch/mig"] == 2
    assert act.resolver.unmatched == {"NVIDIA-H200"}                # reported, and the node kept as unknown
    # a one-model cluster reads exactly as before: no types
    plain = KubernetesActuator(api, KubernetesActuatorConfig(), TENANTS, dry_run=True)
    assert plain.cluster_nodes(NAMES).gpu_type is None and plain.cluster_jobs(NAMES).accepts is None


def test_pod_accepts_without_a_label_is_any():
    r = FLEET.resolver()
    p = k8s.V1Pod(spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c")], node_selector={"zone": "a"}))
    assert pod_accepts(r, p) == ()


def plan(reservations, by_type, capacity_by_type=None, quotas=None, pooled=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=32, load=0.9, high_pool=8, reservations=reservations,
                quotas={"team-a": 10} if quotas is None else quotas, limits={}, preemptions=(), notifications=(),
                stale=False, forecast_model="x", notes=(), memory=PolicyMemory(), pooled=pooled,
                holds_by_type=by_type, capacity_by_type=capacity_by_type or {})


def kueue(c):
    api, cap = served(c.routes())
    return KueueActuator(api, KueueActuatorConfig(), TENANTS, dry_run=False, clock=Clock(), fleet=FLEET), cap


def rg(cq):
    return [(f["name"], f["resources"][0]) for f in cq["spec"]["resourceGroups"][0]["flavors"]]


def test_a_t4_hold_takes_t4_nodes_and_kueue_gets_a_flavor_per_type():
    c = typed_cluster()
    c.run("batch", "low-1", "n1", 8, "gpu-autoscaler-low")
    c.run("serving", "infer-0", "n2", 4)     # team-high runs on the a100 n2: a type-blind hold would take n2
    act, pool = kueue(c)
    rep = act.apply(plan({"team-high": 8, "team-a": 8, "batchy": 7},
                         {"team-high": {"t4": 8}, "team-a": {"a100": 8}, "batchy": {"mig-1g.10gb": 7}}))
    assert rep.ok, rep.errors
    held = c.held()
    assert held["n3"] == "team-high" or held["n4"] == "team-high"          # a t4 node, not an a100 one
    assert [n for n, v in held.items() if v == "team-high"] in (["n3"], ["n4"])
    assert [n for n, v in held.items() if v == "team-a"] in (["n1"], ["n2"])
    assert [n for n, v in held.items() if v == "batchy"] == ["n8"]                  # the MIG node
    for o in c.objs.values():
        validate(o)                                                        # the vendored CRDs, made strict
    rfs = objects(c, "ResourceFlavor")
    assert rfs["default-flavor.a100"]["spec"] == {"nodeLabels": {PRODUCT_LABEL: A100}}
    assert rfs["default-flavor.t4"]["spec"] == {"nodeLabels": {PRODUCT_LABEL: T4}}
    assert rfs["gpuas-hold-team-high.t4"]["spec"]["nodeLabels"] == {
        "gpu-autoscaler.io/hold": "team-high", PRODUCT_LABEL: T4}
    assert "default-flavor" not in rfs
    mig = name_part("mig-1g.10gb")                                        # "mig-1g-10gb-<hash>": no '.' in names
    assert rfs[f"default-flavor.{mig}"]["spec"] == {}                     # the resource itself selects the nodes
    assert rfs[f"gpuas-hold-batchy.{mig}"]["spec"]["nodeLabels"] == {"gpu-autoscaler.io/hold": "batchy"}
    cqs = objects(c, "ClusterQueue")
    # a MIG profile is its own resource: a resource group of its own in each queue, with its hold's instances
    groups = cqs["gpuas-tenant-batchy"]["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [["nvidia.com/gpu"], ["nvidia.com/mig-1g.10gb"]]
    assert groups[1]["flavors"] == [
        {"name": f"gpuas-hold-batchy.{mig}", "resources": [{"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 7,
                                                              "lendingLimit": 0}]},
        {"name": f"default-flavor.{mig}", "resources": [{"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 0}]}]
    own = rg(cqs["gpuas-tenant-team-high"])
    # its holds first (types in [fleet] order), then the unheld type flavors; per type its own quota
    assert [n for n, _ in own] == ["gpuas-hold-team-high.a100", "gpuas-hold-team-high.t4",
                                   "default-flavor.a100", "default-flavor.t4"]
    assert own[1][1] == {"name": "nvidia.com/gpu", "nominalQuota": 8, "lendingLimit": 0}
    assert own[0][1]["nominalQuota"] == 0 and own[2][1]["nominalQuota"] == 0
    assert dict(rg(cqs["gpuas-tenant-team-a"]))["gpuas-hold-team-a.a100"]["nominalQuota"] == 8
    # capacity per type (the usable nodes: a100 n1 n2 = 16, t4 n3 n4 = 16), 8 held of each: 8 + 8 unheld;
    # the normal cap (10) split in proportion (5 + 5), the high queue the rest of each type
    high = dict(rg(cqs["gpuas-high"]))
    assert high == {"default-flavor.a100": {"name": "nvidia.com/gpu", "nominalQuota": 3},
                    "default-flavor.t4": {"name": "nvidia.com/gpu", "nominalQuota": 3}}
    normal = objects(c, "Cohort")["gpuas-normal"]
    assert [r["resources"][0]["nominalQuota"] for r in normal["spec"]["resourceGroups"][0]["flavors"]] == [5, 5]
    assert normal["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] == 0   # MIG: all held
    assert cqs["gpuas-high"]["spec"]["cohort"] == "gpu-autoscaler"
    assert act.unknown_types == ["NVIDIA-H200"]                            # n9's product: reported


def test_typed_quotas_follow_the_plans_capacity_per_type_and_split_the_cap_by_largest_remainder():
    c = typed_cluster()
    act, _ = kueue(c)
    q = act.typed_quotas(plan({}, {}, capacity_by_type={"a100": 24, "t4": 8}, quotas={"team-a": 7}))
    assert q["normal"] == {"a100": 5, "t4": 2, "mig-1g.10gb": 0}               # 7 * 24/32 = 5.25
    assert q["high"] == {"a100": 19, "t4": 6, "mig-1g.10gb": 0}
    assert sum(q["normal"].values()) == 7
