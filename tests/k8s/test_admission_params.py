"""The admission policies' parameters as the daemon writes them (daemon/actuators/k8s/admission.py): what they say
about each tenant namespace, and how the kubernetes actuator keeps the AdmissionParams object on the real apiserver
(created once, put back when edited or deleted, never when it is not ours, never by a replica that lost its fence).
What the policies do with them: test_admission_policies.py."""

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import FenceGuard, FencingLost
from daemon.actuators.k8s.actuator import KubernetesActuator, tenant_namespaces
from daemon.actuators.k8s.admission import GROUP, KIND, PLURAL, VERSION, params_spec
from daemon.actuators.k8s.objects import POOL_VALUE, name_part
from daemon.config import KubernetesActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory

pytestmark = pytest.mark.xdist_group("k8s")

HOLD = "gpu-autoscaler.io/hold"
JOBSET = KubernetesActuatorConfig().jobset_controller  # the JobSet controller's user: its child Jobs need no queue
TENANTS = [TenantConfig(name="serving", tier="high"), TenantConfig(name="web", tier="normal", k8s_namespace="shared"),
           TenantConfig(name="Team_X", tier="low", k8s_namespace="shared"), TenantConfig(name="batch", tier="low"),
           TenantConfig(name="sys", tier="high", k8s_namespace="kube-system")]


def _plan() -> Plan:
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.5, high_pool=0, reservations={}, quotas={},
                limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(),
                memory=PolicyMemory())


def test_each_tenant_namespace_gets_its_tier_and_the_holds_its_pods_may_tolerate():
    spec = params_spec(TENANTS, tenant_namespaces(TENANTS), "nvidia.com/gpu", HOLD, JOBSET)
    assert spec == {"gpuResource": "nvidia.com/gpu", "kueue": True, "holdKey": HOLD, "jobsetController": JOBSET,
                    "namespaces": {
        "serving": {"tier": "high", "holds": sorted(["serving", POOL_VALUE])},  # the pool is the high tier's
        # two tenants in one namespace: the higher tier, both holds (a hashed name's value, as node_holds writes it)
        "shared": {"tier": "normal", "holds": sorted(["web", name_part("Team_X")])},
        "batch": {"tier": "low", "holds": ["batch"]}}}  # never a kube-* namespace
    assert name_part("Team_X") != "Team_X"
    # plain namespaces (no Kueue): no holds, and GPU pods need no queue name
    plain = params_spec(TENANTS, tenant_namespaces(TENANTS), "example.com/gpu", None, JOBSET)
    assert plain == {"gpuResource": "example.com/gpu", "kueue": False,
                     "namespaces": {"serving": {"tier": "high"}, "shared": {"tier": "normal"},
                                    "batch": {"tier": "low"}}}


def _actuator(kube, name: str, dry_run: bool = False, tenants=TENANTS) -> KubernetesActuator:
    return KubernetesActuator(kube.api(), KubernetesActuatorConfig(admission_params=name), tenants,
                              dry_run=dry_run, enforce_plan=False, hold_label=HOLD)


def _read(kube, name: str) -> dict | None:
    try:
        return k8s.CustomObjectsApi(kube.api()).get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _writes(rep) -> list[str]:
    return [a for a in rep.actions if "admission params" in a]


class Refuse(FenceGuard):
    def check(self, what, jobs=()):
        raise FencingLost(f"not the leader: {what}")


def test_the_daemon_keeps_its_admission_params_on_the_apiserver(kube, admission_crd):
    custom = k8s.CustomObjectsApi(kube.api())
    name = "gpuas-params-test"
    want = params_spec(TENANTS, tenant_namespaces(TENANTS), "nvidia.com/gpu", HOLD, JOBSET)
    try:
        # a replica that lost its fence writes nothing (and says why); a dry run says what it would write
        standby = _actuator(kube, name)
        standby.use_fence(Refuse())
        rep = standby.apply(_plan())
        assert any("not the leader: create admission params" in e for e in rep.errors), rep.errors
        dry = _actuator(kube, name, dry_run=True).apply(_plan())
        assert _writes(dry) == [f"create admission params {KIND} {name}: 3 tenant namespaces"]
        assert _read(kube, name) is None
        # the leader creates it, before the PriorityClasses (the policies know the tiers first)
        act = _actuator(kube, name)
        rep = act.apply(_plan())
        assert rep.ok, rep.errors
        assert rep.actions[0] == f"create admission params {KIND} {name}: 3 tenant namespaces"
        got = _read(kube, name)
        assert got["spec"] == want and got["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-autoscaler"}
        # unchanged: read, not written
        rep = act.apply(_plan())
        assert rep.ok and _writes(rep) == [], rep.actions
        assert _read(kube, name)["metadata"]["resourceVersion"] == got["metadata"]["resourceVersion"]
        # edited by hand: put back; deleted: made again
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name,
                                           {"spec": {"namespaces": {"batch": {"tier": "high"}}}})
        rep = act.apply(_plan())
        assert rep.ok and _writes(rep) == [f"update admission params {KIND} {name}: 3 tenant namespaces"]
        assert _read(kube, name)["spec"] == want
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        rep = act.apply(_plan())
        assert rep.ok and _writes(rep) == [f"create admission params {KIND} {name}: 3 tenant namespaces"]
        assert _read(kube, name)["spec"] == want
        # the config changes (batch is high-tier now): the next cycle writes it
        moved = [TenantConfig(name="batch", tier="high")]
        rep = _actuator(kube, name, tenants=moved).apply(_plan())
        assert rep.ok and _readback_tier(kube, name, "batch") == "high"
    finally:
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _readback_tier(kube, name, ns):
    return _read(kube, name)["spec"]["namespaces"][ns]["tier"]


def test_an_object_that_is_not_the_daemons_is_left_alone(kube, admission_crd):
    custom = k8s.CustomObjectsApi(kube.api())
    name = "someone-elses"
    theirs = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name},
              "spec": {"gpuResource": "nvidia.com/gpu", "kueue": False, "namespaces": {}}}
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, theirs)
    try:
        rep = _actuator(kube, name).apply(_plan())
        assert [e for e in rep.errors if "admission params" in e] == [
            f"admission params {KIND} {name} exists without the label app.kubernetes.io/managed-by=gpu-autoscaler: "
            f"not the daemon's, left alone (delete it, or name another in actuators.kubernetes.admission_params)"]
        assert _read(kube, name)["spec"]["namespaces"] == {}
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def test_without_the_crd_one_line_says_what_to_install(kube):
    rep = _actuator(kube, "gpu-autoscaler").apply(_plan())
    errors = [e for e in rep.errors if "admission params" in e]
    assert errors == [f"admission params {KIND} gpu-autoscaler: create failed: 404 Not Found (is its CRD, "
                      f"deploy/kubernetes/admission/params-crd.yaml, installed?)"], rep.errors
    # the rest of the cycle goes on: the PriorityClasses are there
    assert any(a.startswith("ensure PriorityClass gpu-autoscaler-high") for a in rep.actions)
