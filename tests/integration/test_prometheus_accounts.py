"""On Slurm the exporter names a GPU's tenant by its job's Slurm account (node-exporter's `tenant`, or a site's
relabelling into `source.prometheus.tenant_label`), and the Slurm actuator maps accounts to tenants
(tenants[].slurm_account): the Prometheus source reads the accounts as the actuator does (as it reads namespaces
beside a Kubernetes actuator, tests/integration/test_prometheus_namespaces.py), on a real Prometheus scraping the
exporter."""

from __future__ import annotations

import pytest

from daemon.config import Config
from daemon.sources.prometheus import PrometheusSource
from tests.support.services import prometheus_scraping_gpus

pytestmark = [pytest.mark.services, pytest.mark.security]

# team-a's jobs run under account acct-high (3 GPUs); an account called team-a, no tenant's (2 GPUs); team-b's
# account is its name (1 GPU)
HELD = {0: "acct-high", 1: "acct-high", 2: "acct-high", 3: "team-a", 4: "team-a", 5: "team-b"}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with prometheus_scraping_gpus(tmp_path_factory.mktemp("accounts"), "account", HELD) as url:
        yield url


def config(url: str, actuators: list[str]) -> Config:
    q = {"demand_query": 'count by (account) (DCGM_FI_DEV_GPU_UTIL{$exporter, account!=""})',
         "missing_query": 'count by (account) (last_over_time(DCGM_FI_DEV_GPU_UTIL{$exporter, account!=""}[15m]) '
                          'unless on (Hostname, gpu) DCGM_FI_DEV_GPU_UTIL{$exporter})'}
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0,
                                                                "tenant_label": "account", **q}},
                  cycle={"history_steps": 60, "resolution_s": 1},
                  actuators={"enabled": actuators, "dry_run": True},
                  tenants=[{"name": "team-a", "tier": "high", "slurm_account": "acct-high"}, {"name": "team-b"}])


def test_a_tenants_gpus_are_its_accounts_and_an_account_called_like_it_is_not_it(prom):
    """team-a's 3 GPUs under acct-high were an unknown tenant 'acct-high''s, and an account called team-a passed its 2
    GPUs off as team-a's demand (forecast, held for and preempted for as the high tier's). With the Slurm actuator
    mapping the accounts, team-a has its 3, and the account called team-a is no tenant's, as the actuator names
    its jobs (@account:team-a)."""
    st = PrometheusSource(config(prom, ["slurm"])).collect(60).state
    assert dict(zip(st.tenants, st.used.tolist())) == {"team-a": 3, "team-b": 1, "@account:team-a": 2}
    # metrics only (no actuator maps an account): the label's values are the tenants' names, as before
    st = PrometheusSource(config(prom, ["log"])).collect(60).state
    assert dict(zip(st.tenants, st.used.tolist())) == {"acct-high": 3, "team-a": 2, "team-b": 1}
