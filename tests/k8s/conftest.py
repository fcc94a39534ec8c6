import pytest


@pytest.fixture(autouse=True)
def _clean_control_plane(request):
    """Each test's namespaces, pods and nodes go after it: the control plane is shared by the worker's tests."""
    yield
    if "kube" in request.fixturenames:
        request.getfixturevalue("kube").cleanup()
