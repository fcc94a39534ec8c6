"""Kueue's CRDs missing, or of another version, on a real API server (daemon/actuators/k8s/kueue.py
``api_problem``): the Kueue actuator says so in one line naming the group, version or CRD, and writes nothing.
The API server is one of this test's own (etcd and kube-apiserver only, a few seconds), since the worker's shared
control plane has Kueue's CRDs once any test used Kueue."""

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig, TenantConfig
from daemon.policy.types import Plan, PolicyMemory
from tests.support.k8s_cluster import find_binaries, start_control_plane
from tests.support.services import wait_for

pytestmark = pytest.mark.xdist_group("k8s")

PLAN = Plan(at="2026-01-01T00:00:00+00:00", capacity=16, load=0.5, high_pool=8, reservations={"team-high": 8},
            quotas={"team-a": 4}, limits={}, preemptions=(), notifications=(), stale=False, forecast_model="x",
            notes=(), memory=PolicyMemory())


def _crd(plural, versions=("v1beta1", "v1beta2")):
    """Kueue 0.17's CRD for `plural` (built beside the binaries), serving only `versions`."""
    crd = yaml.safe_load((find_binaries().parent / "share" / "kueue" / "crds" / f"kueue.x-k8s.io_{plural}.yaml")
                         .read_text())
    crd["spec"]["versions"] = [v for v in crd["spec"]["versions"] if v["name"] in versions]
    return crd


def _put(ext, crd):
    try:
        cur = ext.read_custom_resource_definition(crd["metadata"]["name"])
    except ApiException as exc:
        if exc.status != 404:
            raise
        ext.create_custom_resource_definition(crd)
    else:
        crd["metadata"]["resourceVersion"] = cur.metadata.resource_version
        ext.replace_custom_resource_definition(crd["metadata"]["name"], crd)


def test_kueue_crds_missing_or_of_another_version_are_one_line_naming_them_and_nothing_is_written(tmp_path):
    cp = start_control_plane(tmp_path, api_only=True)
    try:
        ext = k8s.ApiextensionsV1Api(cp.api())
        tenants = [TenantConfig(name="team-high", tier="high", k8s_namespace="serving"),
                   TenantConfig(name="team-a", tier="normal")]
        act = KueueActuator(cp.api(), KueueActuatorConfig(), tenants, dry_run=False)

        def said():
            rep = act.apply(PLAN)
            assert not rep.actions, rep.actions                           # nothing written
            assert len(rep.errors) == 1 and "\n" not in rep.errors[0], rep.errors
            return rep.errors[0]

        assert said().startswith("Kueue's CRDs are not installed: the API server serves no kueue.x-k8s.io API "
                                 "(needed at v1beta1: localqueues.kueue.x-k8s.io, clusterqueues.kueue.x-k8s.io, "
                                 "cohorts.kueue.x-k8s.io, resourceflavors.kueue.x-k8s.io)")
        # a Kueue that serves v1beta2 only
        for p in ("resourceflavors", "cohorts", "clusterqueues", "localqueues"):
            _put(ext, _crd(p, ("v1beta2",)))
        wait_for(lambda: "not served" in said(), timeout=30, what="the v1beta2-only CRDs discovered")
        assert said().startswith("Kueue's API kueue.x-k8s.io/v1beta1 is not served: the API server has "
                                 "kueue.x-k8s.io/v1beta2 only (a Kueue of another version)")
        # v1beta1 served again, but for the Cohort
        for p in ("resourceflavors", "clusterqueues", "localqueues"):
            _put(ext, _crd(p))
        wait_for(lambda: said().startswith("Kueue's CRD cohorts.kueue.x-k8s.io is missing"), timeout=30,
                 what="the three CRDs at v1beta1 discovered")                # discovery sees them one by one
        assert said().startswith("Kueue's CRD cohorts.kueue.x-k8s.io is missing at v1beta1 (the API server serves "
                                 "clusterqueues, localqueues, resourceflavors of kueue.x-k8s.io/v1beta1)")
    finally:
        cp.stop()
