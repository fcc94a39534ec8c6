"""The in-cluster deployment's RBAC (deploy/kubernetes/) on the real API server (tests/support/k8s_cluster.py).

The manifests' ServiceAccount, ClusterRole, Role and bindings, ConfigMap and Secret are applied as shipped (only
the namespace and the cluster-scoped names made unique per test); a token is made for the ServiceAccount with the
TokenRequest API; the daemon is wired from the ConfigMap's own config.toml (build_runtime, as `run` does) with a
kubeconfig holding that token, and drives every Kubernetes call of a full cycle with the kubernetes and kueue
actuators and the kubernetes HA backend on: the leader Lease and the replicas' liveness Leases, the overrides
ConfigMap, the view (nodes, pods), PriorityClasses, the start-up sweeps, node holds, Kueue's objects, a plan's
eviction, a tenant's Event, a waiting Kueue Workload read and its start estimate patched on, a job-health
reclaim, a dead node's cordon and its pods' eviction, and the release on stop. Not one call is refused (no 403: the
RBAC record stays empty and every report is clean) and the API server shows each write. A SelfSubjectAccessReview
as the ServiceAccount then shows what it may not do. And one cycle as `run` makes it (CycleRunner.run_once, a real
Prometheus for the GPUs) runs clean with that token.

With one verb taken out of the ClusterRole, the daemon logs the missing permission once, naming the manifest,
goes on with everything else, and does not log it again the next cycle.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import tomllib
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s, utils as kutils
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s import rbac
from daemon.actuators.k8s.objects import POOL_VALUE
from daemon.config import TenantConfig
from daemon.config.models import parse_config
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption
from daemon.service.wiring import build_runtime
from tests.conftest import REPO
from tests.integration.test_prometheus_scrape import exporter
from tests.support.k8s_cluster import gpu_pod, kubeconfig, pod_running
from tests.support.services import prometheus_server, wait_for

pytestmark = pytest.mark.xdist_group("k8s")

MANIFESTS = REPO / "deploy" / "kubernetes"
SHIPPED_NS = "gpu-autoscaler"
OP_TOKEN = "op-" + "x" * 29
PARAMS = "gpu-autoscaler"   # the AdmissionParams object (cluster-scoped: one per control plane, the CRD's per test)
ADM = ("gpu-autoscaler.io", "v1alpha1", "admissionparams")


def manifests() -> dict[str, dict]:
    """The documents kustomization.yaml lists, by kind (one of each), but the admission policies' (admission/: their
    CRD is the admission_crd fixture's, the policies are test_admission_policies.py's) and the tiers' PriorityClasses
    (cluster-wide, the same for every test: test_the_shipped_priority_classes_...)."""
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    docs = [d for f in kust["resources"] if not f.startswith("admission/") and f != "priorityclasses.yaml"
            for d in yaml.safe_load_all((MANIFESTS / f).read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one document of each kind"
    return by_kind


class Install:
    """The manifests' RBAC objects, ServiceAccount, ConfigMap and Secret on the test's control plane, in a fresh
    namespace standing for gpu-autoscaler; cluster-scoped objects get a unique name and are deleted by close()."""

    def __init__(self, kube, tmp_path: Path, drop_verb: tuple[str, str] | None = None) -> None:
        self.kube = kube
        self.admin = kube.api()
        self.ns = kube.namespace("gpuas")
        self.uid = self.ns[-8:]
        docs = copy.deepcopy(manifests())
        assert docs["Namespace"]["metadata"]["name"] == SHIPPED_NS
        for kind in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Secret"):
            assert docs[kind]["metadata"]["namespace"] == SHIPPED_NS
            docs[kind]["metadata"]["namespace"] = self.ns
        cr, crb = docs["ClusterRole"], docs["ClusterRoleBinding"]
        cr["metadata"]["name"] = crb["metadata"]["name"] = crb["roleRef"]["name"] = f"gpu-autoscaler-{self.uid}"
        for b in (crb, docs["RoleBinding"]):
            assert [(s["kind"], s["name"], s["namespace"]) for s in b["subjects"]] == \
                [("ServiceAccount", "gpu-autoscaler", SHIPPED_NS)]
            b["subjects"][0]["namespace"] = self.ns
        if drop_verb is not None:   # (resource, verb): that verb taken out of the ClusterRole's rule for it
            resource, verb = drop_verb
            rule = next(r for r in cr["rules"] if resource in r["resources"] and verb in r["verbs"])
            rule["verbs"].remove(verb)
        docs["Secret"]["stringData"] = {k: OP_TOKEN for k in docs["Secret"]["stringData"]}
        self.cluster_names = [cr["metadata"]["name"]]
        try:
            for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap",
                         "Secret"):
                kutils.create_from_dict(self.admin, docs[kind])
        except BaseException:
            self.close()
            raise
        self.docs = docs
        # the rest passes the real API server's validation too (a dry run: no replica of the image is started)
        for kind in ("Namespace", "Deployment", "Service"):
            if kind != "Namespace":
                assert docs[kind]["metadata"]["namespace"] == SHIPPED_NS
                docs[kind]["metadata"]["namespace"] = self.ns
            kutils.create_from_dict(self.admin, docs[kind], dry_run="All")
        tok = k8s.CoreV1Api(self.admin).create_namespaced_service_account_token(
            "gpu-autoscaler", self.ns, k8s.AuthenticationV1TokenRequest(
                spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
        self.kubeconfig = kubeconfig(tmp_path / "sa.kubeconfig", kube.server, kube.tmp / "ca.crt",
                                     token=tok.status.token)
        self.sa_api = kube.api(self.kubeconfig)
        self.tmp = tmp_path

    def config(self, tenants, prefix: str, prometheus: str | None = None):
        """The ConfigMap's config.toml as the daemon would read it, pointed at this cluster: the tenants' test
        namespaces, the ServiceAccount's kubeconfig instead of the pod's mount, the HA namespace, files in tmp,
        acting (not dry run), and a Kueue tree of the test's own."""
        data = tomllib.loads(self.docs["ConfigMap"]["data"]["config.toml"])
        assert data["actuators"]["enabled"] == ["log", "kubernetes", "kueue"] and data["ha"]["backend"] == "kubernetes"
        assert data["actuators"]["kubernetes"]["in_cluster"] is True and data["ha"]["namespace"] == SHIPPED_NS
        params = data["actuators"]["kubernetes"]["admission_params"]
        assert params == PARAMS, "the name the shipped bindings' paramRef and the ClusterRole's resourceNames give"
        data["tenants"] = [{"name": t.name, "tier": t.tier, "k8s_namespace": t.k8s_namespace} for t in tenants]
        data["actuators"]["dry_run"] = False
        data["actuators"]["kubernetes"] = {"in_cluster": False, "kubeconfig": str(self.kubeconfig),
                                           "grace_period_s": 5, "reclaim_bare_pods": True,
                                           "admission_params": params}
        data["actuators"]["kueue"] = {"queue_prefix": prefix, "cohort": f"c{self.uid}", "hold_shrink_delay_s": 0}
        data["ha"]["namespace"] = self.ns
        data["forecaster"] = {"kind": "seasonal_naive"}
        for key in ("webhook_token_file", "metrics_token_file"):
            (self.tmp / key).write_text(OP_TOKEN)
            data["server"][key] = str(self.tmp / key)
        (self.tmp / "op").write_text(OP_TOKEN)
        data["access"]["tokens"][0]["token_file"] = str(self.tmp / "op")
        data["state"] = {"path": str(self.tmp / "state.sqlite")}
        data.setdefault("policy", {})["preempt_min_runtime_s"] = 0
        if prometheus is not None:   # the cluster's GPUs as a DCGM exporter shows them, at a test's pace
            data["source"]["prometheus"] |= {"url": prometheus, "timeout_s": 2, "retries": 0}
            data["cycle"] = {"history_steps": 60, "resolution_s": 1}
        return parse_config(data)

    def close(self) -> None:
        api = k8s.RbacAuthorizationV1Api(self.admin)
        for name in self.cluster_names:
            for delete in (api.delete_cluster_role_binding, api.delete_cluster_role):
                try:
                    delete(name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise


@pytest.fixture
def refusals(monkeypatch):
    """A fresh record of the process's RBAC refusals (rbac.REFUSALS), so a line logged by another test's client
    cannot hide or fake this one's."""
    fresh = rbac.RbacRefusals()
    monkeypatch.setattr(rbac, "REFUSALS", fresh)
    return fresh


def _plan(reservations, preemptions=(), notifications=()):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=sum(reservations.values()),
                reservations=reservations, quotas={"batchy": 0}, limits={}, preemptions=tuple(preemptions),
                notifications=tuple(notifications), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())


def _actuator(rt, name):
    return next(a for a in rt.actuators if a.name == name)


def _evicted(core, ns, name):
    try:
        return core.read_namespaced_pod(name, ns).metadata.deletion_timestamp is not None
    except ApiException as exc:
        return exc.status == 404


def _exists(read, *args):
    try:
        read(*args)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def _ok(rep):
    assert rep.errors == [], rep.errors
    return rep


def test_a_full_cycle_with_every_kubernetes_actuator_runs_on_the_shipped_rbac_and_nothing_more_is_granted(
        kueue, admission_crd, tmp_path, refusals):
    inst = Install(kueue, tmp_path)
    admin = kueue.api()
    core, custom = k8s.CoreV1Api(admin), k8s.CustomObjectsApi(admin)
    coord, sched = k8s.CoordinationV1Api(admin), k8s.SchedulingV1Api(admin)
    try:
        tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"})
        batch = ns["batchy"]
        prefix = f"q{inst.uid}"
        # what the start-up sweeps must delete: a stale flavor and quota of ours, a dead replica's liveness Lease
        stale_rf = f"{prefix}-hold-gone"
        custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "resourceflavors", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "spec": {},
            "metadata": {"name": stale_rf, "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}}})
        old_ns = kueue.namespace("gone")
        core.create_namespaced_resource_quota(old_ns, {
            "metadata": {"name": "gpu-autoscaler", "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
        long_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
        dead = "gpu-autoscaler-leader-replica-dead0000"
        coord.create_namespaced_lease(inst.ns, k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=dead), spec=k8s.V1LeaseSpec(
            holder_identity="gone#1", lease_duration_seconds=15, acquire_time=long_ago, renew_time=long_ago)))

        cfg = inst.config(tenants, prefix)
        rt = build_runtime(cfg, with_store=False)
        kube_act, kueue_act = _actuator(rt, "kubernetes"), _actuator(rt, "kueue")
        lease = rt.lease
        # leader election: the Lease taken, then renewed; each replica's liveness Lease made, a dead one's swept
        assert lease.tick() and lease.tick() and lease.is_leader()
        assert coord.read_namespaced_lease("gpu-autoscaler-leader", inst.ns).spec.holder_identity == lease.holder
        assert not _exists(coord.read_namespaced_lease, dead, inst.ns)
        assert lease.peers() == [] or lease.holder not in lease.peers()
        # the operator's overrides in the ConfigMap: created, changed again, read back by the cycle
        rt.overrides.change_global("ops", {"preemption_paused": True})
        rt.overrides.change_global("ops", {"preemption_paused": False})
        assert rt.overrides.refresh() and rt.overrides.problem() is None

        # first cycle: the admission policies' parameters, PriorityClasses, the sweeps, the holds, Kueue's objects
        _ok(kube_act.apply(_plan({})))
        params = custom.get_cluster_custom_object(*ADM, PARAMS)
        assert params["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-autoscaler"
        assert {n: e["tier"] for n, e in params["spec"]["namespaces"].items()} == {
            ns["team-high"]: "high", batch: "low"}
        _ok(kueue_act.apply(_plan({"team-high": 8})))
        assert {p.metadata.name for p in sched.list_priority_class().items} >= {
            "gpu-autoscaler-high", "gpu-autoscaler-normal", "gpu-autoscaler-low"}
        assert not _exists(custom.get_cluster_custom_object, "kueue.x-k8s.io", "v1beta1", "resourceflavors", stale_rf)
        assert not _exists(core.read_namespaced_resource_quota, "gpu-autoscaler", old_ns)
        held = [n for n in nodes if (core.read_node(n).metadata.labels or {}).get("gpu-autoscaler.io/hold")]
        assert len(held) == 1
        assert _exists(custom.get_cluster_custom_object, "kueue.x-k8s.io", "v1beta1", "clusterqueues",
                       kueue_act.tenant_queue("team-high"))
        assert _exists(custom.get_namespaced_custom_object, "kueue.x-k8s.io", "v1beta1", batch, "localqueues",
                       f"{prefix}-low")

        # the tenants' pods, one per use: a plan's preemption, a job-health reclaim, a dead node's pod
        free = [n for n in nodes if n not in held][0]
        on = {"kubernetes.io/hostname": free}
        for name in ("victim", "idle", "stranded"):
            core.create_namespaced_pod(batch, gpu_pod(batch, name, 2, "gpu-autoscaler-low", on))
        for name in ("victim", "idle", "stranded"):
            wait_for(lambda n=name: pod_running(core, batch, n), timeout=60, what=f"{name} Running")

        # second cycle: the view, the plan (its preemption, a tenant told), job health, failover, as the cycle does
        jobs = rt.runner.source.jobs_provider(("team-high", "batchy"))
        assert sorted(jobs.ids.tolist()) == [f"{batch}/idle", f"{batch}/stranded", f"{batch}/victim"]
        # the DRA kinds (ResourceSlices, claims, templates) read with the role, by the actuator the jobs are read from
        # (beside Kueue, the Kueue one: its jobs are the pods and the waiting Workloads)
        assert kueue_act.dra is not None
        view = rt.runner.source.nodes_provider(("team-high", "batchy"))
        assert dict(zip(view.names.tolist(), view.free.tolist()))[free] == 2
        note = Notification("batchy", "preempted", "victim makes room for team-high")
        # someone made the low tenant high-tier in the parameters: the daemon reads them and puts them back (update)
        custom.patch_cluster_custom_object(*ADM, PARAMS, {"spec": {"namespaces": {batch: {"tier": "high"}}}})
        plan = _plan({"team-high": 8}, [Preemption(f"{batch}/victim", "batchy", 2, free, "room for team-high")], [note])
        for act in (kube_act, kueue_act):
            _ok(act.apply(plan))
            _ok(act.notify([note]))
        # a Workload Kueue can never admit (more GPUs than there are) carrying an estimate of ours from before: not a
        # queued job, and the estimate patched off it
        custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", batch, "workloads", {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "huge", "annotations": {
                "gpu-autoscaler.io/eta-p50": "2027-01-15T08:10:00Z", "gpu-autoscaler.io/eta-reason": "time limit"}},
            "spec": {"queueName": f"{prefix}-low", "podSets": [{"name": "main", "count": 8, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/train:1",
                                                          "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}})
        assert len(kueue_act.queued_jobs(("team-high", "batchy"))) == 0
        _ok(kueue_act.show_eta([], 1_800_000_000.0))
        notes = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", batch, "workloads",
                                                    "huge")["metadata"].get("annotations") or {}
        assert not any(k.startswith("gpu-autoscaler.io/eta-") for k in notes), notes
        _ok(kube_act.reclaim([f"{batch}/idle"], "idle for an hour"))
        assert free in kube_act.node_names() and kube_act.node_down_confirmed(free) is False
        assert (f"{batch}/stranded", "batchy") in kube_act.jobs_on_node(free)   # (with idle, while it goes)
        _ok(kube_act.fence_node(free, "GPUNodeDown"))
        _ok(kube_act.requeue([f"{batch}/stranded"], "its node is down"))
        for name in ("victim", "idle", "stranded"):
            wait_for(lambda n=name: _evicted(core, batch, n), timeout=60, what=f"{name} evicted")
        assert core.read_node(free).spec.unschedulable is True
        assert custom.get_cluster_custom_object(*ADM, PARAMS)["spec"]["namespaces"][batch]["tier"] == "low"
        events = core.list_namespaced_event(batch).items
        assert any(e.source.component == "gpu-autoscaler" and e.reason == "Preempted" for e in events)

        # the daemon stops: holds released, its liveness Lease deleted, the leader Lease let go
        for act in (kueue_act, kube_act):
            _ok(act.release_holds())
        assert not any((core.read_node(n).metadata.labels or {}).get("gpu-autoscaler.io/hold") for n in nodes)
        lease.stop(release=True)
        assert not coord.read_namespaced_lease("gpu-autoscaler-leader", inst.ns).spec.holder_identity
        assert [x.metadata.name for x in coord.list_namespaced_lease(inst.ns).items] == ["gpu-autoscaler-leader"]
        rt.close()
        assert refusals.logged() == set()            # not one call was refused (403) in the whole run

        # what the ServiceAccount may not do
        authz = k8s.AuthorizationV1Api(inst.sa_api)

        def may(verb, resource, namespace=None, group="", name=None, sub=None):
            review = k8s.V1SelfSubjectAccessReview(spec=k8s.V1SelfSubjectAccessReviewSpec(
                resource_attributes=k8s.V1ResourceAttributes(verb=verb, resource=resource, group=group,
                                                             namespace=namespace, name=name, subresource=sub)))
            return authz.create_self_subject_access_review(review).status.allowed

        assert may("patch", "nodes") and may("create", "pods", batch, sub="eviction")   # the review itself works
        assert may("update", "configmaps", inst.ns, name="gpu-autoscaler-leader-overrides")
        assert not may("get", "secrets", inst.ns, name="gpu-autoscaler-tokens")        # not even its own
        assert not may("get", "secrets", batch) and not may("list", "secrets")
        assert not may("delete", "nodes") and not may("create", "nodes")
        assert not may("patch", "pods", batch) and not may("create", "pods", batch)
        assert not may("delete", "pods", batch) and not may("update", "pods", batch)
        assert not may("update", "configmaps", inst.ns, name="gpu-autoscaler-config")  # its own config: mounted only
        assert not may("get", "configmaps", batch)
        assert not may("update", "priorityclasses", group="scheduling.k8s.io")
        # DRA: its kinds listed and watched, nothing of them written, no DeviceClass read
        for kind in ("resourceslices", "resourceclaims", "resourceclaimtemplates"):
            assert may("list", kind, group="resource.k8s.io") and may("watch", kind, group="resource.k8s.io")
            for verb in ("create", "update", "patch", "delete"):
                assert not may(verb, kind, batch, group="resource.k8s.io")
        assert not may("list", "deviceclasses", group="resource.k8s.io")
        # Kueue's Workloads: listed and patched (their start estimate), never updated, deleted or made
        assert may("patch", "workloads", batch, group="kueue.x-k8s.io")
        for verb in ("update", "delete", "create", "get"):
            assert not may(verb, "workloads", batch, group="kueue.x-k8s.io")
        assert not may("create", "clusterroles", group="rbac.authorization.k8s.io")
        assert not may("update", "leases", "kube-system", group="coordination.k8s.io")
        # the admission policies: it writes their parameters, by that name only, and cannot touch the policies
        assert may("create", "admissionparams", group=ADM[0]) and may("update", "admissionparams", group=ADM[0],
                                                                       name=PARAMS)
        assert not may("update", "admissionparams", group=ADM[0], name="other")
        assert not may("delete", "admissionparams", group=ADM[0], name=PARAMS)
        assert not may("list", "admissionparams", group=ADM[0])
        for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
            assert not may("update", kind, group="admissionregistration.k8s.io")
            assert not may("delete", kind, group="admissionregistration.k8s.io")
        assert not may("delete", "customresourcedefinitions", group="apiextensions.k8s.io")
    finally:
        inst.close()


def test_a_verb_rbac_refuses_is_logged_once_naming_the_permission_and_the_daemon_goes_on(
        kueue, admission_crd, tmp_path, refusals, caplog):
    inst = Install(kueue, tmp_path, drop_verb=("nodes", "patch"))
    core, custom = k8s.CoreV1Api(kueue.api()), k8s.CustomObjectsApi(kueue.api())
    try:
        tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"})
        prefix = f"r{uuid.uuid4().hex[:6]}"
        rt = build_runtime(inst.config(tenants, prefix), with_store=False)
        kube_act, kueue_act = _actuator(rt, "kubernetes"), _actuator(rt, "kueue")
        assert rt.lease.tick()                                  # the leader: its writes are sent
        caplog.set_level(logging.INFO, logger="gpu_autoscaler.rbac")
        reports = []
        for _ in range(3):                                      # three cycles, each wanting a node held
            reports += [kube_act.apply(_plan({})), kueue_act.apply(_plan({"team-high": 8}))]
        lines = [r.getMessage() for r in caplog.records if r.name == "gpu_autoscaler.rbac"]
        assert lines == ["RBAC: gpu-autoscaler may not patch nodes (403 from the API server); grant it in "
                         "deploy/kubernetes/clusterrole.yaml"]
        assert refusals.logged() == {("patch", "", "nodes")}
        # each cycle reports its refused hold as that action's error, and does all the rest
        held_errors = [e for r in reports[1::2] for e in r.errors]
        assert len(held_errors) == 3 and all("403" in e for e in held_errors), held_errors
        assert all(r.errors == [] for r in reports[0::2])
        assert not any((core.read_node(n).metadata.labels or {}).get("gpu-autoscaler.io/hold") for n in nodes)
        cq = custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues",
                                              kueue_act.tenant_queue("team-high"))
        # the queues are written anyway, with no GPUs counted for the hold that was refused
        assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] in (0, "0")
        rt.close()
    finally:
        inst.close()


@pytest.mark.services
def test_one_daemon_cycle_with_prometheus_and_every_kubernetes_actuator_is_allowed_by_the_shipped_rbac(
        kueue, admission_crd, tmp_path, refusals):
    """The cycle itself (CycleRunner.run_once, as `run` does each interval), not its calls one by one: a real
    Prometheus scrapes a DCGM-style exporter on the KWOK nodes, the view reads the pods and nodes with the
    ServiceAccount's token, the plan holds a node for the high tier, and every actuator's report is clean."""
    inst = Install(kueue, tmp_path)
    core = k8s.CoreV1Api(kueue.api())
    gpus = []
    try:
        tenants, ns, nodes = kueue.tenants({"team-high": "high", "batchy": "low"})
        # the exporter labels a GPU with its pod's namespace, which the shipped config reads as the tenant's name
        tenants = [TenantConfig(name=t.k8s_namespace, tier=t.tier, k8s_namespace=t.k8s_namespace) for t in tenants]
        gpus = [exporter(n, [(ns["team-high"] if n == nodes[0] else ns["batchy"], 80)] * 4 + [("", 0)] * 4)
                for n in nodes]
        targets = ", ".join(f"'127.0.0.1:{g.server_address[1]}'" for g in gpus)
        prom_cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                    f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
        with prometheus_server(tmp_path, prom_cfg) as (url, _):
            cfg = inst.config(tenants, f"p{inst.uid}", prometheus=url)
            rt = build_runtime(cfg, with_store=False)
            for name, node in (("serve", nodes[0]), ("batch", nodes[1])):   # each tenant's pod, where it runs
                owner = ns["team-high"] if name == "serve" else ns["batchy"]
                core.create_namespaced_pod(owner, gpu_pod(owner, name, 4, None, {"kubernetes.io/hostname": node}))
                wait_for(lambda o=owner, n=name: pod_running(core, o, n), timeout=60, what=f"{name} Running")
            assert rt.lease.tick()
            wait_for(lambda: rt.runner.source.collect(60).state.capacity == 16, timeout=60, what="16 GPUs scraped")
            res = rt.runner.run_once()                    # start-up: PriorityClasses, sweeps, queues, holds
            assert res.outcome == "ok" and res.acted, res.error
            assert [r.errors for r in res.reports if r.errors] == []
            res = rt.runner.run_once()
            assert res.outcome == "ok" and res.acted, res.error
            assert sorted(res.collected.state.jobs.ids.tolist()) == sorted(
                [f"{ns['team-high']}/serve", f"{ns['batchy']}/batch"])
            assert sorted(res.collected.state.nodes.names.tolist()) == sorted(nodes)
            assert [r.errors for r in res.reports if r.errors] == []
            assert {r.actuator for r in res.reports} >= {"kubernetes", "kueue"}
            assert res.plan.reservations.get(ns["team-high"]), res.plan.notes    # the high tier's use held ...
            assert [(core.read_node(n).metadata.labels or {}).get("gpu-autoscaler.io/hold") for n in nodes] == \
                [POOL_VALUE, None]             # ... on the node it runs on (the high tier is one pool by default)
            for act in rt.actuators:
                if hasattr(act, "release_holds"):
                    assert act.release_holds().errors == []
            rt.lease.stop(release=True)
            rt.close()
        assert refusals.logged() == set()
    finally:
        for g in gpus:
            g.shutdown()
            g.server_close()
        inst.close()
