"""An API request's RBAC attributes, derived from its method and URL as the API server's authorizer does
(daemon/actuators/k8s/rbac.py), and the once-per-permission log line. On a real API server's 403:
tests/k8s/test_deploy_rbac.py."""

import logging

import pytest

from daemon.actuators.k8s.rbac import Permission, RbacRefusals, permission

BASE = "https://127.0.0.1:6443"


@pytest.mark.parametrize("method, path, want", [
    ("PATCH", "/api/v1/nodes/n1", Permission("patch", "", "nodes", "")),
    ("GET", "/api/v1/nodes", Permission("list", "", "nodes", "")),
    ("GET", "/api/v1/nodes?watch=true", Permission("watch", "", "nodes", "")),
    # the official client's watch, as the daemon's view sends it (a Python bool in the query)
    ("GET", "/api/v1/pods?fieldSelector=status.phase%21%3DSucceeded&watch=True&allowWatchBookmarks=True",
     Permission("watch", "", "pods", "")),
    ("GET", "/api/v1/pods?fieldSelector=status.phase%21%3DSucceeded", Permission("list", "", "pods", "")),
    ("GET", "/api/v1/namespaces/t/pods/p", Permission("get", "", "pods", "t")),
    ("POST", "/api/v1/namespaces/t/pods/p/eviction", Permission("create", "", "pods/eviction", "t")),
    ("DELETE", "/api/v1/namespaces/t/resourcequotas", Permission("deletecollection", "", "resourcequotas", "t")),
    ("PUT", "/apis/coordination.k8s.io/v1/namespaces/g/leases/l", Permission("update", "coordination.k8s.io",
                                                                             "leases", "g")),
    ("DELETE", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/q", Permission("delete", "kueue.x-k8s.io",
                                                                          "clusterqueues", "")),
    ("GET", "/api/v1/namespaces/t", Permission("get", "", "namespaces", "")),
    ("GET", "/version", None),
])
def test_a_request_is_the_verb_group_resource_and_namespace_rbac_checks(method, path, want):
    assert permission(method, BASE + path) == want


def test_each_refused_permission_is_logged_once_naming_the_manifest_that_grants_it(caplog):
    r = RbacRefusals()
    caplog.set_level(logging.INFO, logger="gpu_autoscaler.rbac")
    for _ in range(3):
        r.seen("PATCH", BASE + "/api/v1/nodes/n1")
        r.seen("PATCH", BASE + "/api/v1/nodes/n2")
        r.seen("PUT", BASE + "/apis/coordination.k8s.io/v1/namespaces/g/leases/l")
    assert [x.getMessage() for x in caplog.records] == [
        "RBAC: gpu-autoscaler may not patch nodes (403 from the API server); grant it in "
        "deploy/kubernetes/clusterrole.yaml",
        "RBAC: gpu-autoscaler may not update leases.coordination.k8s.io in namespace g (403 from the API server); "
        "grant it in deploy/kubernetes/role.yaml"]
    assert r.logged() == {("patch", "", "nodes"), ("update", "coordination.k8s.io", "leases")}
