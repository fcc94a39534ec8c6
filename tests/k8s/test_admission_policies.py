"""The shipped admission policies (deploy/kubernetes/admission/) on the real kube-apiserver: each closes a hole a tenant
could use (issue 38), with the parameters the daemon itself writes (daemon/actuators/k8s/admission.py).

The CRD and the policies are applied as shipped; only names and bindings are this test's: each test's
AdmissionParams object, policies and bindings get a name of its own (a test never meets what an earlier one left),
the bindings' paramRef names the object the daemon writes for the test, and their namespaceSelector also asks for a
label that only this test's namespaces carry, so the other tests' pods on this worker's control plane are never
judged by them. They are deleted after each test. Pods are created with dryRun=All, which goes through admission
(the refusals below are the policies') without storing anything; a Job is created for real where its controller's
pods are the point.

The params are a CRD's object, not a ConfigMap, for what these tests first met: with a ConfigMap, every rule stopped
refusing from the second test on, once the first test's bindings were deleted (kube-apiserver 1.36.1 stops a
built-in paramKind's informer for good when no binding names it: kubernetes/kubernetes#130887)."""

import json
import uuid

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import ActionReport
from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.admission import GROUP, KIND, PLURAL, VERSION
from daemon.actuators.k8s.kueue import KueueActuator
from daemon.actuators.k8s.objects import POOL_VALUE, name_part, priority_class_name
from daemon.config import KubernetesActuatorConfig, KueueActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.conftest import REPO
from tests.k8s.test_kueue_jobset import JS, _child_job, _jobset
from tests.support.k8s_cluster import gpu_pod
from tests.support.services import wait_for

# meant to share one worker, and so one control plane (--dist loadgroup); pytest-xdist 3.8.0 does not group them
# here, so each worker that runs one starts its own (tests/support/fixtures.py: kube)
pytestmark = pytest.mark.xdist_group("k8s")

POLICIES = REPO / "deploy" / "kubernetes" / "admission"
QUEUE = "kueue.x-k8s.io/queue-name"
HOLD = KueueActuatorConfig().hold_label
TEST_LABEL = "gpu-autoscaler.io/admission-test"


def _plan() -> Plan:
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


def shipped() -> list[dict]:
    """Every object in deploy/kubernetes/admission/, in file order."""
    return [d for f in sorted(POLICIES.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


class Admission:
    """The shipped policies on the control plane, bound to this test's namespaces, with the daemon's parameters."""

    def __init__(self, kube, tiers: dict[str, str]) -> None:
        self.kube = kube
        self.core = k8s.CoreV1Api(kube.api())
        self.batch = k8s.BatchV1Api(kube.api())
        self.apps = k8s.AppsV1Api(kube.api())
        self.adm = k8s.AdmissionregistrationV1Api(kube.api())
        self.run = uuid.uuid4().hex[:8]
        self.tenants = [TenantConfig(name=t, tier=tier, k8s_namespace=self.namespace(t)) for t, tier in tiers.items()]
        self.ns = {t.name: t.k8s_namespace for t in self.tenants}
        self.other = self.namespace("other")  # no tenant's
        self.params = f"gpuas-{self.run}"
        self.made: list[tuple[str, str]] = []

    def namespace(self, prefix: str) -> str:
        """A namespace the bindings select (the test's label)."""
        ns = self.kube.namespace(prefix)
        self.core.patch_namespace(ns, {"metadata": {"labels": {TEST_LABEL: self.run}}})
        return ns

    def write_params(self) -> KubernetesActuator:
        """The daemon's kubernetes actuator beside Kueue (node holds on) writes the parameters, as in a cycle; it
        also makes the PriorityClasses a pod must name."""
        act = KubernetesActuator(self.kube.api(), KubernetesActuatorConfig(admission_params=self.params),
                                 self.tenants, dry_run=False, enforce_plan=False, hold_label=HOLD)
        rep = act.apply(_plan())
        assert rep.ok, rep.errors
        return act

    def apply(self, skip: tuple[str, ...] = ()) -> None:
        """The shipped policies and bindings (but those named in `skip`), bindings narrowed to this test."""
        for doc in shipped():
            if doc["kind"] == "CustomResourceDefinition":
                continue  # the admission_crd fixture's (tests/k8s/conftest.py)
            name = doc["metadata"]["name"]
            # names of this test's own, so that no test meets what an earlier one left
            doc["metadata"]["name"] = f"{name}-{self.run}"
            if doc["kind"] == "ValidatingAdmissionPolicy":
                self.adm.create_validating_admission_policy(doc)
                self.made.append(("policy", doc["metadata"]["name"]))
            elif name not in skip:
                doc["spec"]["policyName"] += f"-{self.run}"
                doc["spec"]["paramRef"]["name"] = self.params
                doc["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] = {TEST_LABEL: self.run}
                self.adm.create_validating_admission_policy_binding(doc)
                self.made.append(("binding", doc["metadata"]["name"]))

    def delete(self) -> None:
        custom = k8s.CustomObjectsApi(self.kube.api())
        for kind, name in [*reversed(self.made), ("params", self.params)]:
            try:
                if kind == "binding":
                    self.adm.delete_validating_admission_policy_binding(name)
                elif kind == "policy":
                    self.adm.delete_validating_admission_policy(name)
                elif kind in ("clusterqueues", "resourceflavors"):
                    custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta1", kind, name)
                else:
                    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def queue(self, ns: str, name: str) -> None:
        """A LocalQueue `name` in `ns` on a ClusterQueue of 8 GPUs of this test's own, for the Jobs a test creates
        for real (the `kueue` fixture's manager runs). A GPU Job must carry a queue name (the queue-name rule), so
        Kueue's Job webhook suspends it, and the Job controller makes its pods only once Kueue has admitted it.
        Whether Kueue ran depended on whether an earlier test on the worker had started it: with it running and no
        queue, the Jobs stayed suspended and no pod was ever made."""
        custom, kq = k8s.CustomObjectsApi(self.kube.api()), ("kueue.x-k8s.io", "v1beta1")
        rf = cq = f"gpuas-{self.run}"
        custom.create_cluster_custom_object(*kq, "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": rf}, "spec": {}})
        self.made.append(("resourceflavors", rf))
        custom.create_cluster_custom_object(*kq, "clusterqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": rf, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]}})
        self.made.append(("clusterqueues", cq))
        custom.create_namespaced_custom_object(*kq, ns, "localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq}})

    # ---- asking the apiserver ----------------------------------------------------------------------------------
    def refusal(self, body: dict, api: k8s.ApiClient | None = None) -> str | None:
        """Create `body` (a Pod, a Job, a DaemonSet, a Kueue Workload or a JobSet) with dryRun=All: None when admitted,
        else the message of a policy's refusal. Any other error fails the test. `api`: sent by another user than the
        admin."""
        ns = body["metadata"]["namespace"]
        api = api or self.kube.api()
        try:
            if body["kind"] == "Pod":
                k8s.CoreV1Api(api).create_namespaced_pod(ns, body, dry_run="All")
            elif body["kind"] in ("Workload", "JobSet"):
                group = ("kueue.x-k8s.io", "v1beta2", ns, "workloads") if body["kind"] == "Workload" else (
                    "jobset.x-k8s.io", "v1alpha2", ns, "jobsets")
                k8s.CustomObjectsApi(api).create_namespaced_custom_object(*group, body, dry_run="All")
            elif body["kind"] == "DaemonSet":
                k8s.AppsV1Api(api).create_namespaced_daemon_set(ns, body, dry_run="All")
            else:
                k8s.BatchV1Api(api).create_namespaced_job(ns, body, dry_run="All")
        except ApiException as exc:
            msg = json.loads(exc.body)["message"]
            if exc.status == 403 and "ValidatingAdmissionPolicy" in msg:
                return msg
            raise
        return None

    def refused(self, body: dict, rule: str, api: k8s.ApiClient | None = None) -> str:
        """Wait until `body` is refused by the policy `rule` (a new policy, binding or parameter takes effect once
        the apiserver's informers have it); its message."""
        got: list[str] = []

        def check() -> bool:
            msg = self.refusal(body, api)
            if msg:
                got.append(msg)
            return bool(msg)
        wait_for(check, timeout=60, interval=0.2, what=f"{body['kind']} {body['metadata']['name']} refused by {rule}")
        assert f"ValidatingAdmissionPolicy 'gpu-autoscaler-{rule}-{self.run}'" in got[-1], got[-1]
        return got[-1]


@pytest.fixture
def admission(kube, admission_crd):
    adm = Admission(kube, {"team-high": "high", "team-normal": "normal", "team-low": "low"})
    adm.write_params()
    try:
        adm.apply()
        yield adm
    finally:
        adm.delete()


def job(ns: str, name: str, labels: dict | None = None, **spec) -> dict:
    """A batch Job of one 1-GPU pod; `spec`: more fields of its pod template's spec."""
    pod = gpu_pod(ns, "x", 1)["spec"] | {"restartPolicy": "Never"} | spec
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": 0, "template": {"spec": pod}}}


def job_events(adm: Admission, ns: str, name: str) -> list[str]:
    return [e.message or "" for e in adm.core.list_namespaced_event(
        ns, field_selector=f"involvedObject.kind=Job,involvedObject.name={name}").items]


def test_only_the_high_tiers_namespaces_may_use_the_high_priority_class(admission, kueue):
    adm, q = admission, {QUEUE: "gpuas"}
    high = priority_class_name("high")
    for who, tier in (("team-normal", "normal"), ("team-low", "low")):
        ns = adm.ns[who]
        msg = adm.refused(gpu_pod(ns, "jump", 1, priority_class=high, labels=q), "high-priority-class")
        assert (f"only the high tier's namespaces may use PriorityClass {high}" in msg
                and f"namespace {ns} is a {tier}-tier tenant's" in msg
                and "use gpu-autoscaler-normal or gpu-autoscaler-low" in msg), msg
    msg = adm.refused(gpu_pod(adm.other, "jump", 1, priority_class=high), "high-priority-class")
    assert f"namespace {adm.other} is no tenant's" in msg, msg
    # the high tier's own pod, and a normal tenant on its own class: admitted
    assert adm.refusal(gpu_pod(adm.ns["team-high"], "serve", 1, priority_class=high, labels=q)) is None
    assert adm.refusal(gpu_pod(adm.ns["team-normal"], "web", 1, priority_class=priority_class_name("normal"),
                               labels=q)) is None
    # through a controller: the Job itself is refused, so Kueue never makes a Workload of it
    ns = adm.ns["team-low"]
    adm.queue(ns, "gpuas")
    msg = adm.refused(job(ns, "sneak", q, priorityClassName=high), "high-priority-class")
    assert f"namespace {ns} is a low-tier tenant's" in msg, msg
    assert adm.refusal(job(adm.ns["team-high"], "serve", q, priorityClassName=high)) is None


def workload(ns: str, name: str, priority_class: str) -> dict:
    """A Kueue Workload of one 1-GPU pod on `priority_class`, as Kueue makes one for a job of any kind it manages."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": "gpuas", "priority": 1000,
                     "priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                          "name": priority_class},
                     "podSets": [{"name": "main", "count": 1, "template": {"spec": gpu_pod(ns, "x", 1)["spec"]}}]}}


def test_a_kueue_workload_on_the_high_class_is_refused_outside_the_high_tier(admission, kueue):
    """A Job on the high class that Kueue suspends makes no pod until it is admitted: the pod rule alone let Kueue
    admit it ahead of every other tenant's work as high-priority (its pods were refused only afterwards, the quota
    taken), and the start-time estimates read it as high-tier work. Kueue makes a Workload for every job kind it
    manages (a JobSet, a RayJob...), so the Workload is refused too."""
    adm, high = admission, priority_class_name("high")
    for who, tier in (("team-normal", "normal"), ("team-low", "low")):
        ns = adm.ns[who]
        msg = adm.refused(workload(ns, "jump", high), "high-priority-class")
        assert f"namespace {ns} is a {tier}-tier tenant's" in msg, msg
    assert adm.refusal(workload(adm.ns["team-high"], "serve", high)) is None
    assert adm.refusal(workload(adm.ns["team-low"], "own", priority_class_name("low"))) is None


def test_only_the_holding_tenants_namespace_may_tolerate_its_hold(admission):
    adm, q = admission, {QUEUE: "gpuas"}
    # the tolerations Kueue adds to what it admits on each hold's flavor (kueue.py: resource_flavors)
    kueue = KueueActuator(adm.kube.api(), KueueActuatorConfig(), adm.tenants, dry_run=True)
    flavors = {f["metadata"]["name"]: f["spec"].get("tolerations") for f in kueue.resource_flavors()}
    high_hold, low_hold = flavors[kueue.hold_flavor("team-high")], flavors[kueue.hold_flavor("team-low")]
    pool = flavors[kueue.pool_flavor]
    low, high = adm.ns["team-low"], adm.ns["team-high"]
    msg = adm.refused(gpu_pod(low, "squat", 1, tolerations=high_hold, labels=q), "hold-tolerations")
    assert (f"namespace {low} may not tolerate the node-hold taint {HOLD} ({HOLD}=team-high)" in msg
            and f"this one may tolerate {HOLD}=team-low" in msg and "Remove the toleration" in msg), msg
    # the key with Exists, and every taint: they tolerate every hold
    msg = adm.refused(gpu_pod(low, "any", 1, tolerations=[{"key": HOLD, "operator": "Exists"}], labels=q),
                      "hold-tolerations")
    assert f"({HOLD} Exists)" in msg, msg
    msg = adm.refused(gpu_pod(low, "all", 1, tolerations=[{"operator": "Exists"}], labels=q), "hold-tolerations")
    assert "(<every taint> Exists)" in msg, msg
    # the pool is the high tier's: a low tenant may not tolerate it; a namespace that is no tenant's holds none
    assert f"({HOLD}={POOL_VALUE})" in adm.refused(gpu_pod(low, "pool", 1, tolerations=pool, labels=q),
                                                    "hold-tolerations")
    assert "this namespace holds none" in adm.refused(gpu_pod(adm.other, "x", 1, tolerations=low_hold),
                                                      "hold-tolerations")
    # each holder's own, and the high tier's pool: admitted; so is a toleration of something else
    assert adm.refusal(gpu_pod(high, "own", 1, tolerations=high_hold, labels=q)) is None
    assert adm.refusal(gpu_pod(high, "pooled", 1, tolerations=pool, labels=q)) is None
    assert adm.refusal(gpu_pod(low, "own", 1, tolerations=low_hold, labels=q)) is None
    assert adm.refusal(gpu_pod(low, "gpu", 1, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}],
                               labels=q)) is None
    # an update may add tolerations: adding another's hold to a pod that runs is refused too
    adm.core.create_namespaced_pod(low, gpu_pod(low, "live", 1, tolerations=low_hold, labels=q))
    with pytest.raises(ApiException) as err:
        adm.core.patch_namespaced_pod("live", low, [{"op": "add", "path": "/spec/tolerations/-",
                                                     "value": high_hold[0]}])
    assert err.value.status == 403 and "gpu-autoscaler hold-tolerations" in err.value.body
    adm.core.patch_namespaced_pod("live", low, {"metadata": {"labels": {"touched": "yes"}}})  # what it had: kept


def test_a_gpu_pod_in_a_tenant_namespace_must_carry_a_kueue_queue_name(admission, kueue):
    adm = admission
    low = adm.ns["team-low"]
    msg = adm.refused(gpu_pod(low, "bypass", 1), "queue-name")
    assert (f"a Pod asking for nvidia.com/gpu or MIG instances in tenant namespace {low} must carry the label "
            f"{QUEUE}" in msg
            and "bypass Kueue" in msg), msg
    msg = adm.refused(job(low, "bypass"), "queue-name")
    assert f"a Job asking for nvidia.com/gpu or MIG instances in tenant namespace {low}" in msg, msg
    # a tenant cannot pass its bare pod off as a Job's: only the Job controller's own pods need no queue name
    forged = gpu_pod(low, "forged", 1)
    forged["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                              "uid": str(uuid.uuid4()), "controller": True}]
    adm.refused(forged, "queue-name")
    # with a queue name, without GPUs, or outside the tenant namespaces: admitted
    assert adm.refusal(gpu_pod(low, "queued", 1, labels={QUEUE: "gpuas-low"})) is None
    cpu = gpu_pod(low, "cpu", 1)
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert adm.refusal(cpu) is None
    assert adm.refusal(gpu_pod(adm.other, "elsewhere", 1)) is None
    # a Job with its queue name: admitted, and the pod its controller makes (no queue name of its own) too
    adm.queue(low, "gpuas")
    adm.batch.create_namespaced_job(low, job(low, "train", {QUEUE: "gpuas"}))
    wait_for(lambda: adm.core.list_namespaced_pod(low, label_selector="job-name=train").items, timeout=120,
             what="the Job controller's pod")
    assert not any("gpu-autoscaler" in m for m in job_events(adm, low, "train"))


JOBSET_CONTROLLER = KubernetesActuatorConfig().jobset_controller


def as_user(adm: Admission, ns: str, *users: str) -> list[k8s.ApiClient]:
    """A client of the admin's that impersonates each user (Impersonate-User), with a Role in `ns` letting them create
    Jobs and JobSets, as the JobSet controller's ClusterRole and a tenant's rights do."""
    rbac = k8s.RbacAuthorizationV1Api(adm.kube.api())
    rbac.create_namespaced_role(ns, {"metadata": {"name": "makes-jobs"}, "rules": [
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create"]}]})
    subjects = [{"kind": "ServiceAccount", "name": u.split(":")[3], "namespace": u.split(":")[2]}
                if u.startswith("system:serviceaccount:") else
                {"kind": "User", "name": u, "apiGroup": "rbac.authorization.k8s.io"} for u in users]
    rbac.create_namespaced_role_binding(ns, {"metadata": {"name": "makes-jobs"}, "subjects": subjects, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "makes-jobs"}})
    clients = []
    for u in users:
        client = adm.kube.api(adm.kube.admin_kubeconfig)  # a client of its own
        client.set_default_header("Impersonate-User", u)
        clients.append(client)
    return clients


def test_a_jobset_queued_on_itself_runs_its_child_jobs_made_by_the_jobset_controller(admission, kueue):
    """Kueue's docs put the queue name on the JobSet, and the JobSet controller copies only its replicated jobs'
    template labels onto the child Jobs it makes: the rule refused every one of them (a GPU Job without a queue
    name), so a JobSet queued as Kueue says never started. A child Job is admitted when the JobSet controller's user
    sends it (actuators.kubernetes.jobset_controller, in the daemon's params): the JobSet was checked."""
    adm = admission
    low = adm.ns["team-low"]
    controller, = as_user(adm, low, JOBSET_CONTROLLER)
    try:
        adm.refused(job(low, "bare"), "queue-name")  # the rule is in force
        js = _jobset(low, "train", "gpuas")
        assert adm.refusal(js) is None
        # created for real (Kueue suspends it and makes its Workload): its child Job names its real UID
        made = k8s.CustomObjectsApi(adm.kube.api()).create_namespaced_custom_object(*JS, low, "jobsets", js)
        workers = made["spec"]["replicatedJobs"][1]
        child = _child_job(made, workers, 0)
        assert QUEUE not in child["metadata"]["labels"] and adm.refusal(child, controller) is None
    finally:
        controller.close()


def test_a_gpu_jobset_needs_the_queue_name_and_a_tenant_cannot_claim_a_jobset_owner(admission, kueue):
    """A GPU JobSet without the queue name is refused like a Job (before, JobSets were not judged: it ran past
    Kueue once the JobSet controller's Jobs were exempt). A tenant's own Job naming a JobSet as its controller, with
    no queue name, is still refused: an ownerReference is the tenant's to write, the request's user is not."""
    adm = admission
    low = adm.ns["team-low"]
    tenant, controller = as_user(adm, low, "alice", JOBSET_CONTROLLER)
    try:
        bare = _jobset(low, "bypass", "gpuas")
        del bare["metadata"]["labels"][QUEUE]
        msg = adm.refused(bare, "queue-name", tenant)
        assert f"a JobSet asking for nvidia.com/gpu or MIG instances in tenant namespace {low}" in msg, msg
        cpu = [r for r in bare["spec"]["replicatedJobs"] if r["name"] == "launcher"]
        bare["spec"]["replicatedJobs"] = cpu
        assert adm.refusal(bare, tenant) is None  # a CPU JobSet needs none
        # the tenant's own CPU JobSet, created for real, and a GPU Job of its own naming it as controller (Kueue's
        # Job webhook refuses an owner that does not exist), as the JobSet controller's child would look
        made = k8s.CustomObjectsApi(tenant).create_namespaced_custom_object(*JS, low, "jobsets", bare)
        child = _child_job(made, _jobset(low, "x", "gpuas")["spec"]["replicatedJobs"][1], 0)
        adm.refused(child, "queue-name", tenant)
        # the controller's user alone is not enough either: a Job of no JobSet needs its queue name
        adm.refused(job(low, "no-owner"), "queue-name", controller)
    finally:
        tenant.close()
        controller.close()


def daemonset(ns: str, name: str, gpus: int) -> dict:
    """A DaemonSet whose pods ask for `gpus` nvidia.com/gpu (none: a CPU request), on nodes of a label no node
    carries (so that one created for real makes no pod)."""
    pod = gpu_pod(ns, "x", gpus)["spec"] | {"nodeSelector": {TEST_LABEL: "no-node"}}
    if not gpus:
        pod["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    sel = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": sel}, "template": {"metadata": {"labels": sel}, "spec": pod}}}


def owned_by_a_daemonset(pod: dict) -> dict:
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                           "uid": str(uuid.uuid4()), "controller": True}]
    return pod


def test_a_tenant_may_not_run_a_gpu_daemonset(admission):
    """The daemon never evicts a DaemonSet's pod (objects.evictable: it would come straight back), so a tenant's GPU
    DaemonSet would hold GPUs on every node that no plan could free, and make its nodes look firm to the holds."""
    adm, q = admission, {QUEUE: "gpuas"}
    low = adm.ns["team-low"]
    msg = adm.refused(daemonset(low, "squat", 1), "gpu-daemonsets")
    assert (f"a DaemonSet may not ask for nvidia.com/gpu or MIG instances in tenant namespace {low}" in msg
            and "never preempted" in msg and "GPU DaemonSets are the cluster's" in msg), msg
    # a GPU pod claiming a DaemonSet owner, as the DaemonSet controller or a tenant would make one: refused too
    msg = adm.refused(owned_by_a_daemonset(gpu_pod(low, "forged", 1, labels=q)), "gpu-daemonsets")
    want = f"a Pod owned by a DaemonSet may not ask for nvidia.com/gpu or MIG instances in tenant namespace {low}"
    assert want in msg, msg
    # a CPU DaemonSet in a tenant's namespace, and the cluster's GPU DaemonSet (an exporter's, in a namespace that
    # is no tenant's) and its pods: admitted
    assert adm.refusal(daemonset(low, "logs", 0)) is None
    assert adm.refusal(daemonset(adm.other, "dcgm-exporter", 1)) is None
    assert adm.refusal(owned_by_a_daemonset(gpu_pod(adm.other, "dcgm-exporter-x", 1))) is None
    # an update may add GPUs to a tenant's DaemonSet, or a DaemonSet owner to its GPU pod: refused too
    adm.apps.create_namespaced_daemon_set(low, daemonset(low, "grow", 0))
    with pytest.raises(ApiException) as err:
        adm.apps.patch_namespaced_daemon_set("grow", low, {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    assert err.value.status == 403 and "gpu-autoscaler gpu-daemonsets" in err.value.body
    adm.apps.patch_namespaced_daemon_set("grow", low, {"metadata": {"labels": {"touched": "yes"}}})  # no GPUs: kept
    adm.core.create_namespaced_pod(low, gpu_pod(low, "live", 1, labels=q))
    with pytest.raises(ApiException) as err:
        adm.core.patch_namespaced_pod("live", low, owned_by_a_daemonset({"metadata": {}}))
    assert err.value.status == 403 and "gpu-autoscaler gpu-daemonsets" in err.value.body


def test_a_gpu_daemonset_made_before_its_namespace_was_a_tenants_can_still_be_deleted(admission):
    """A GPU DaemonSet that was there before the rule (or before its namespace became a tenant's) may not be
    changed while it still asks for GPUs, but deleting it must not get stuck: the finalizers are removed by an
    update of the object being deleted."""
    adm = admission
    ns = adm.namespace("late")
    body = daemonset(ns, "old", 1)
    body["metadata"]["finalizers"] = ["gpu-autoscaler.io/admission-test"]
    adm.apps.create_namespaced_daemon_set(ns, body)  # no tenant's yet: admitted
    unstick = {"metadata": {"finalizers": None}}
    try:
        adm.tenants.append(TenantConfig(name="team-late", tier="low", k8s_namespace=ns))
        adm.write_params()
        adm.refused(daemonset(ns, "new", 1), "gpu-daemonsets")
        with pytest.raises(ApiException) as err:
            adm.apps.patch_namespaced_daemon_set("old", ns, {"metadata": {"labels": {"touched": "yes"}}})
        assert err.value.status == 403 and "gpu-autoscaler gpu-daemonsets" in err.value.body
        adm.apps.delete_namespaced_daemon_set("old", ns)
        adm.apps.patch_namespaced_daemon_set("old", ns, unstick)
    finally:  # a failure above leaves no DaemonSet that keeps its namespace from being deleted
        adm.delete()
        try:
            adm.apps.patch_namespaced_daemon_set("old", ns, unstick)
        except ApiException as exc:
            if exc.status != 404:
                raise
    wait_for(lambda: not adm.apps.list_namespaced_daemon_set(ns, field_selector="metadata.name=old").items,
             timeout=60, what="the old GPU DaemonSet gone")


def test_the_rules_follow_the_parameters_the_daemon_writes(kube, admission_crd):
    """A tenant that becomes high-tier in the daemon's config may use the high class once the daemon has written
    it; before that the same pod is refused. No rule judges anything until the parameters exist."""
    adm = Admission(kube, {"team-a": "normal"})
    try:
        adm.apply()
        ns = adm.ns["team-a"]
        KubernetesActuator(kube.api(), KubernetesActuatorConfig(), [], dry_run=False).ensure_priority_classes(
            ActionReport("kubernetes", False))
        pod = gpu_pod(ns, "p", 1, priority_class=priority_class_name("high"), labels={QUEUE: "gpuas"})
        assert adm.refusal(pod) is None  # no parameters yet (parameterNotFoundAction: Allow)
        adm.write_params()
        adm.refused(pod, "high-priority-class")
        adm.tenants = [TenantConfig(name="team-a", tier="high", k8s_namespace=ns)]
        adm.write_params()
        wait_for(lambda: adm.refusal(pod) is None, timeout=60, what="the high class admitted once team-a is high")
    finally:
        adm.delete()


def test_a_mig_instance_is_a_gpu_to_the_rules(admission, kueue):
    """On a fleet with MIG, a MIG instance (nvidia.com/mig-<profile>) is a GPU to the daemon's view and has its own
    quota in Kueue's queues. The rules checked only the GPU resource: a low tenant's pod asking for a MIG instance
    without a queue name, or naming its node, was admitted, and ran past Kueue's quotas and the node holds. A
    DaemonSet asking for one too."""
    adm = admission
    low = adm.ns["team-low"]

    def mig(name: str, **spec) -> dict:
        pod = gpu_pod(low, name, 0)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
        pod["spec"].update(spec)
        return pod
    adm.refused(mig("bypass"), "queue-name")
    queued = mig("queued")
    queued["metadata"]["labels"] = {QUEUE: "gpuas-low"}
    assert adm.refusal(queued) is None
    queued["spec"]["nodeName"] = "some-node"
    adm.refused(queued, "node-name")
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "migs", "namespace": low},
          "spec": {"selector": {"matchLabels": {"app": "migs"}},
                   "template": {"metadata": {"labels": {"app": "migs"}}, "spec": mig("x")["spec"]}}}
    adm.refused(ds, "gpu-daemonsets")


def test_a_gpu_pod_or_job_in_a_tenant_namespace_may_not_name_its_node(admission, kueue, kube):
    """A pod created with spec.nodeName is never scheduled: the kubelet starts it on that node, and checks only
    NoExecute taints, so the node hold's NoSchedule taint did not keep a low tenant's pod (queued, tolerating
    nothing) off the high tenant's held node, where it took the GPUs held for the high tier. Every other rule
    admitted it. Refused now, as a Job whose template names a node (before Kueue admits it on quota)."""
    adm = admission
    low, q = adm.ns["team-low"], {QUEUE: "gpuas-low"}
    (held,) = kube.tenants({"held": "high"}, nodes=1)[2]
    try:
        # the high tenant's hold on the node, as the Kueue actuator writes it (node_holds.py)
        value = name_part("team-high")
        adm.core.patch_node(held, {"metadata": {"labels": {HOLD: value}},
                                   "spec": {"taints": [{"key": HOLD, "value": value, "effect": "NoSchedule"}]}})
        pod = gpu_pod(low, "squat", 1, labels=q)
        pod["spec"]["nodeName"] = held
        msg = adm.refused(pod, "node-name")
        assert (f"a Pod asking for nvidia.com/gpu or MIG instances in tenant namespace {low} may not name its node "
                f"(spec.nodeName: {held})" in msg and "node holds' taints" in msg), msg
        msg = adm.refused(job(low, "squat", q, nodeName=held), "node-name")
        want = f"a Job asking for nvidia.com/gpu or MIG instances in tenant namespace {low} may not name its node"
        assert want in msg, msg
        # without nodeName, a CPU pod naming its node, and a namespace that is no tenant's: admitted
        assert adm.refusal(gpu_pod(low, "queued", 1, labels=q)) is None
        cpu = gpu_pod(low, "cpu", 1)
        cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        cpu["spec"]["nodeName"] = held
        assert adm.refusal(cpu) is None
        other = gpu_pod(adm.other, "elsewhere", 1)
        other["spec"]["nodeName"] = held
        assert adm.refusal(other) is None
    finally:
        kube.delete_nodes([held])


def anti(namespaces: list[str] | None = None, selector: dict | None = None, key: str = "topology.kubernetes.io/zone",
         kind: str = "podAntiAffinity", how: str = "required") -> dict:
    """A pod spec's affinity of one pod (anti-)affinity term against pods labelled app=train, by `key`; `how`
    required or preferred (weight 100)."""
    term: dict = {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": key}
    if namespaces is not None:
        term["namespaces"] = namespaces
    if selector is not None:
        term["namespaceSelector"] = selector
    if how == "preferred":
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_a_tenants_required_pod_anti_affinity_may_not_reach_other_namespaces(admission, kueue):
    """kube-scheduler keeps every pod a bound pod's required anti-affinity term matches off the nodes of that pod's
    domain: a low tenant's one pod with anti-affinity by a zone every GPU node shares, naming the high tenant's
    namespace (or namespaceSelector {}), kept the high tenant's GPU pods off every node, and every other rule admitted
    it. Refused now, on a pod (GPU or CPU) and a Job's template; a term kept to its own namespace, a preferred term,
    required pod affinity, and a namespace that is no tenant's are admitted."""
    adm, q = admission, {QUEUE: "gpuas-low"}
    low, high = adm.ns["team-low"], adm.ns["team-high"]

    def pod(name: str, ns: str = low, gpus: int = 1, **affinity) -> dict:
        p = gpu_pod(ns, name, gpus, labels=q)
        p["spec"]["affinity"] = anti(**affinity)
        if not gpus:
            p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        return p
    msg = adm.refused(pod("wall", selector={}), "pod-anti-affinity")
    assert (f"a Pod in tenant namespace {low} may not carry a required pod anti-affinity term reaching other "
            "namespaces (topologyKey topology.kubernetes.io/zone: namespaceSelector)" in msg
            and "other tenants' pods, off every node of its topology domain" in msg
            and f"list no namespace but {low} in namespaces" in msg), msg
    msg = adm.refused(pod("wall", namespaces=[low, high], key="kubernetes.io/hostname"), "pod-anti-affinity")
    assert f"(topologyKey kubernetes.io/hostname: namespaces {high})" in msg, msg
    adm.refused(pod("cpu-wall", gpus=0, namespaces=[high]), "pod-anti-affinity")
    # a namespaceSelector by labels: the policy cannot tell which namespaces it names, even its own alone
    adm.refused(pod("own-by-label", selector={"matchLabels": {"kubernetes.io/metadata.name": low}}),
                "pod-anti-affinity")
    # a Job is refused when it is created (its pod template), before Kueue admits it
    msg = adm.refused(job(low, "wall", q, affinity=anti(selector={})), "pod-anti-affinity")
    assert f"a Job in tenant namespace {low} may not carry a required pod anti-affinity term" in msg, msg
    adm.refused(job(low, "wall", q, affinity=anti(namespaces=[high])), "pod-anti-affinity")
    # its own namespace (no namespaces, or only its own), a preferred term, required pod affinity (it keeps only
    # its own pod off nodes), and a namespace that is no tenant's: admitted
    assert adm.refusal(pod("spread")) is None
    assert adm.refusal(pod("spread-own", namespaces=[low])) is None
    assert adm.refusal(pod("prefer", selector={}, how="preferred")) is None
    assert adm.refusal(pod("near", selector={}, kind="podAffinity")) is None
    assert adm.refusal(job(low, "spread", q, affinity=anti(namespaces=[low]))) is None
    assert adm.refusal(pod("system", ns=adm.other, selector={})) is None


def test_the_shipped_bindings_spare_the_system_namespaces_and_read_the_daemons_params():
    bindings = {d["metadata"]["name"]: d for d in shipped() if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    policies = {d["metadata"]["name"]: d for d in shipped() if d["kind"] == "ValidatingAdmissionPolicy"}
    assert set(bindings) == set(policies) == {f"gpu-autoscaler-{r}" for r in
                                              ("high-priority-class", "hold-tolerations", "queue-name",
                                               "gpu-daemonsets", "node-name", "pod-anti-affinity")}
    (crd,) = [d for d in shipped() if d["kind"] == "CustomResourceDefinition"]
    for p in policies.values():  # the kind the daemon writes (daemon/actuators/k8s/admission.py)
        assert p["spec"]["paramKind"] == {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND}
        assert p["spec"]["failurePolicy"] == "Fail"
    assert crd["spec"]["group"] == GROUP and crd["spec"]["names"]["plural"] == PLURAL
    assert crd["spec"]["scope"] == "Cluster"
    for b in bindings.values():
        assert b["spec"]["policyName"] == b["metadata"]["name"] and b["spec"]["validationActions"] == ["Deny"]
        assert b["spec"]["paramRef"] == {"name": "gpu-autoscaler", "parameterNotFoundAction": "Allow"}
        (expr,) = b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn"
        assert {"kube-system", "gpu-autoscaler"} <= set(expr["values"])
