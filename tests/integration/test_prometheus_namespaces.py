"""On Kubernetes the DCGM exporter names a GPU's tenant by its pod's namespace, and the Kubernetes actuator maps
namespaces to tenants (tenants[].k8s_namespace): the Prometheus source reads the namespaces as the actuator does,
on a real Prometheus scraping the exporter."""

from __future__ import annotations

import pytest

from daemon.config import Config
from daemon.sources.prometheus import PrometheusSource
from tests.support.services import prometheus_scraping_gpus

pytestmark = [pytest.mark.services, pytest.mark.security]

# team-a's pods run in namespace ml-prod (3 GPUs); another tenant's namespace is called team-a (2 GPUs); team-b is
# its own namespace's (1 GPU)
HELD = {0: "ml-prod", 1: "ml-prod", 2: "ml-prod", 3: "team-a", 4: "team-a", 5: "team-b"}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with prometheus_scraping_gpus(tmp_path_factory.mktemp("namespaces"), "namespace", HELD) as url:
        yield url


def config(url: str, actuators: list[str]) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0}},
                  cycle={"history_steps": 60, "resolution_s": 1},
                  actuators={"enabled": actuators, "dry_run": True},
                  tenants=[{"name": "team-a", "tier": "high", "k8s_namespace": "ml-prod"}, {"name": "team-b"}])


def test_a_tenants_gpus_are_its_namespaces_and_a_namespace_called_like_it_is_not_it(prom):
    """team-a's 3 GPUs in ml-prod were an unknown tenant 'ml-prod''s, team-a's demand read as the 2 GPUs of a namespace
    called team-a (forecast, held for and preempted for as the high tier's), and team-a's own work read as none.
    With the Kubernetes actuator mapping the namespaces, team-a has its 3, and the namespace called team-a is no
    tenant's."""
    st = PrometheusSource(config(prom, ["kubernetes"])).collect(60).state
    used = dict(zip(st.tenants, st.used.tolist()))
    assert used == {"team-a": 3, "team-b": 1, "@namespace:team-a": 2}
    # metrics only (no actuator maps a namespace): the label's values are the tenants' names, as before
    st = PrometheusSource(config(prom, ["log"])).collect(60).state
    assert dict(zip(st.tenants, st.used.tolist())) == {"ml-prod": 3, "team-a": 2, "team-b": 1}
