import pytest


@pytest.fixture(autouse=True)
def _clean_control_plane(request):
    """Each test's namespaces, pods and nodes go after it: the control plane is shared by the worker's tests."""
    yield
    if "kube" in request.fixturenames:
        request.getfixturevalue("kube").cleanup()


ADMISSION_CRD = "deploy/kubernetes/admission/params-crd.yaml"


@pytest.fixture
def admission_crd(kube):
    """The shipped AdmissionParams CRD (deploy/kubernetes/admission/params-crd.yaml), once Established; deleted after,
    and gone before the next test (a CRD being deleted cannot be created again)."""
    import yaml
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from tests.conftest import REPO
    from tests.support.services import wait_for

    ext = k8s.ApiextensionsV1Api(kube.api())
    doc = yaml.safe_load((REPO / ADMISSION_CRD).read_text())
    name = doc["metadata"]["name"]

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def established() -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)
    ext.create_custom_resource_definition(doc)
    try:
        wait_for(established, timeout=60, what=f"CRD {name} Established")
        yield name
    finally:
        try:
            ext.delete_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        wait_for(gone, timeout=60, what=f"CRD {name} deleted")
