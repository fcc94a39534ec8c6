"""On Slurm the exporter names a GPU's tenant by its job's Slurm account (node-exporter's `tenant`, or a site's
relabelling into `source.prometheus.tenant_label`), and the Slurm actuator maps accounts to tenants
(tenants[].slurm_account): the Prometheus source reads the accounts as the actuator does (as it reads namespaces
beside a Kubernetes actuator, tests/integration/test_prometheus_namespaces.py), on a real Prometheus scraping the
exporter."""

from __future__ import annotations

import time

import httpx
import pytest

from daemon.config import Config
from daemon.sources.prometheus import PrometheusSource
from tests.support.services import metrics_target, prometheus_server, wait_for

pytestmark = [pytest.mark.services, pytest.mark.security]

# team-a's jobs run under account acct-high (3 GPUs); an account called team-a, no tenant's (2 GPUs); team-b's
# account is its name (1 GPU)
HELD = {0: "acct-high", 1: "acct-high", 2: "acct-high", 3: "team-a", 4: "team-a", 5: "team-b"}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accounts")
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{Hostname="node-a",gpu="{g}"'
             + (f',account="{HELD[g]}"' if g in HELD else "") + "} 50" for g in range(8)]
    real = metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "\n".join(lines) + "\n")
    target = f"127.0.0.1:{real.server_address[1]}"
    cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
           f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: ['{target}']\n")
    try:
        with prometheus_server(tmp, cfg) as (url, _):
            def count() -> float:
                r = httpx.get(f"{url}/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_UTIL)"}).json()
                return float(r["data"]["result"][0]["value"][1]) if r["data"]["result"] else 0.0
            wait_for(lambda: count() == 8, what="the exporter scraped", timeout=30)
            time.sleep(2.1)
            yield url
    finally:
        real.shutdown()
        real.server_close()


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
