"""A mixed fleet read from a real Prometheus (issue 24): DCGM-shaped series with modelName, backfilled by promtool;
demand and usage per (tenant, type) read exactly, idle tenants 0 on every type, unknown models kept and reported."""

import time

import numpy as np
import pytest

from daemon.config import Config, PrometheusConfig, SourceConfig
from daemon.sources.prometheus import PrometheusSource
from tests.support.dcgm import fleet_openmetrics
from tests.support.services import backfilled_prometheus

pytestmark = pytest.mark.services

MINUTES = 60
T0 = (int(time.time()) // 3600 - 4) * 3600      # 4 hours ago, on the hour
A100, T4, H200 = "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA H200"   # H200 is in no [fleet] type or alias
# node -> (model, GPUs); every GPU is a series, labelled with the namespace of the pod it is allocated to
NODES = {"a1": (A100, 4), "a2": (A100, 4), "t1": (T4, 4), "h1": (H200, 2)}
GAP = range(40, 45)                              # no scrape at all here: every tenant missing


def alloc(m):
    """node -> [(tenant, GPUs allocated, GPUs busy)] at minute m."""
    return {
        "a1": [("team-a", 2 + m % 3, 1 + m % 3)],                  # one of team-a's a100 idles at 0%
        "a2": [("team-b", 4 if m >= 30 else 1, 1)],
        "t1": [("team-a", m % 2, m % 2), ("team-b", 2, 2)],        # team-a on t4 too, every other minute
        "h1": [("team-b", 1, 1)],                                  # an unknown model: counted, not dropped
    }


def expected(tenant, typ, busy=False):
    out = np.zeros(MINUTES)
    for m in range(MINUTES):
        for node, rows in alloc(m).items():
            model = {A100: "a100", T4: "t4", H200: "unknown"}[NODES[node][0]]
            out[m] += sum((b if busy else n) for t, n, b in rows if t == tenant and model == typ)
    out[list(GAP)] = np.nan
    return out


def openmetrics() -> str:
    return fleet_openmetrics(NODES, lambda m: {node: [(t, [75] * b + [0] * (n - b)) for t, n, b in rows]
                                               for node, rows in alloc(m).items()}, MINUTES, T0, skip=GAP)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled_prometheus(tmp_path_factory.mktemp("prom-fleet"), openmetrics()) as (url, proc):
        yield url


def source(url):
    cfg = Config(source=SourceConfig(kind="prometheus", prometheus=PrometheusConfig(url=url, timeout_s=2, retries=0)),
                 cycle={"history_steps": MINUTES, "stale_after_s": 120},
                 tenants=[{"name": "team-a", "tier": "high"}, {"name": "team-b"}, {"name": "team-idle"}],
                 fleet={"types": ["a100", "t4"], "aliases": {A100: "a100", T4: "t4"}})
    return PrometheusSource(cfg, clock=lambda: T0 + 60 * (MINUTES - 1) + 1)


def test_demand_per_tenant_and_type_is_read_exactly(prom):
    src = source(prom)
    got = src.window_by_type(T0, T0 + 60 * (MINUTES - 1))
    assert got.columns.names == ["tenant", "type"]
    assert list(got.columns.get_level_values("tenant").unique()) == ["team-a", "team-b", "team-idle"]
    assert list(got.columns.get_level_values("type").unique()) == ["a100", "t4", "unknown"]
    assert len(got) == MINUTES and got.index[0].timestamp() == T0
    for tenant in ("team-a", "team-b", "team-idle"):
        for typ in ("a100", "t4", "unknown"):
            np.testing.assert_array_equal(got[(tenant, typ)].to_numpy(), expected(tenant, typ),
                                          err_msg=f"{tenant} {typ}")
    # the idle tenant is 0 on every type at every scraped step, not missing
    assert (got["team-idle"].drop(got.index[list(GAP)]) == 0).all().all()
    # the H200 GPU is kept as unknown and its model name reported
    assert got[("team-b", "unknown")].iloc[0] == 1 and src.unknown_types == [H200]
    # one level, as the policy names typed forecast series
    flat = src.window_by_type(T0, T0 + 60 * (MINUTES - 1), flat=True)
    assert list(flat.columns[:3]) == ["team-a@a100", "team-a@t4", "team-a@unknown"]
    np.testing.assert_array_equal(flat["team-b@t4"].to_numpy(), expected("team-b", "t4"))


def test_usage_per_type_counts_busy_gpus_only(prom):
    src = source(prom)
    got = src.usage_by_type(T0, T0 + 60 * (MINUTES - 1))
    for tenant in ("team-a", "team-b"):
        for typ in ("a100", "t4"):
            np.testing.assert_array_equal(got[(tenant, typ)].to_numpy(), expected(tenant, typ, busy=True))


def test_capacity_per_type(prom):
    src = source(prom)
    assert src.capacity_by_type() == {"a100": 8, "t4": 4, "unknown": 2}
    assert src.unknown_types == [H200]
