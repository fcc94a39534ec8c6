"""An exporter silent past 15 minutes reads as missing, not zero load, on a real Prometheus (security read hsec8).

Prometheus scrapes the DCGM exporter's job on two targets: node-a's exporter (8 GPUs, all team-b's) and node-b's,
which is never up (nothing listens on its port), so node-b has no series at all, as a node whose exporter crashed
more than 15 minutes ago (missing_query only lists GPUs seen in the last 15 minutes). The scheduler's view lists
both nodes up, team-a (high tier) running an 8-GPU job on node-b, team-b eight 1-GPU jobs on node-a. With the
capacity answered per node, team-a is missing (NaN in used and at the history's last step), not idle; node-b's
GPUs are not capacity; and the plan preempts nothing for team-a, which read as 0 would take team-b's GPUs.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import httpx
import numpy as np
import pytest

from daemon.config import Config
from daemon.policy.engine import plan
from daemon.policy.state import Jobs, Nodes
from daemon.policy.types import PolicyMemory
from daemon.sources.prometheus import PrometheusSource
from forecaster.types import Forecast
from tests.conftest import free_port
from tests.support.services import metrics_target, prometheus_server, wait_for

pytestmark = [pytest.mark.services, pytest.mark.security]

BY_NODE = "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("silent-node")
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{Hostname="node-a",gpu="{g}",namespace="team-b"}} 80' for g in range(8)]
    node_a = metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "\n".join(lines) + "\n")
    targets = f"'127.0.0.1:{node_a.server_address[1]}', '127.0.0.1:{free_port()}'"   # node-b: nothing listens
    cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
           f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
    try:
        with prometheus_server(tmp, cfg) as (url, _):
            def ups() -> list[float]:
                r = httpx.get(f"{url}/api/v1/query", params={"query": 'up{job="dcgm-exporter"}'}).json()
                return sorted(float(s["value"][1]) for s in r["data"]["result"])
            wait_for(lambda: ups() == [0.0, 1.0], what="node-a scraped, node-b's target down", timeout=30)
            time.sleep(2.1)
            yield url
    finally:
        node_a.shutdown()
        node_a.server_close()


def scheduler():
    def jobs(tenants: tuple[str, ...]) -> Jobs:
        a, b = tenants.index("team-a"), tenants.index("team-b")
        n = 9
        return Jobs(ids=np.array([str(i) for i in range(n)], dtype=object), tenant=np.array([a] + [b] * 8),
                    gpus=np.array([8] + [1] * 8), priority=np.array([2] + [0] * 8, dtype=np.int8),
                    running=np.ones(n, dtype=bool), runtime_s=np.full(n, 600.0), wait_s=np.zeros(n),
                    node=np.array(["node-b"] + ["node-a"] * 8, dtype=object))

    def nodes(tenants: tuple[str, ...]) -> Nodes:
        return Nodes(names=np.array(["node-a", "node-b"], dtype=object), gpus=np.array([8, 8]),
                     free=np.array([0, 0]), draining=np.zeros(2, dtype=np.int64), held_by=np.array([-1, -1]))
    return jobs, nodes


def config(url: str, **prometheus) -> Config:
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0,
                                                               **prometheus}},
                  cycle={"history_steps": 60, "resolution_s": 1, "max_missing_share": 0.5},
                  policy={"preempt_budget_share": 1.0, "headroom": 0.0},
                  tenants=[{"name": "team-a", "tier": "high"}, {"name": "team-b", "tier": "low"}])


def test_a_tenant_on_a_node_without_series_is_missing_and_nothing_is_preempted_for_it(prom, caplog):
    jobs, nodes = scheduler()
    cfg = config(prom, capacity_query=BY_NODE)
    src = PrometheusSource(cfg, jobs_provider=jobs, nodes_provider=nodes)
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
        got = src.collect(60)
        src.collect(60)
    st = got.state
    assert st.tenants == ("team-a", "team-b")
    assert np.isnan(st.used[0]) and st.missing == ("team-a",), "team-a's 8-GPU job on node-b read as 0 GPUs"
    assert st.used[1] == 8 and st.capacity == 8   # node-b's GPUs are not capacity (as before)
    # the history's last step is this cycle's used; the older steps are as Prometheus says (0: no series)
    assert np.isnan(got.history["team-a"].iloc[-1]) and got.history["team-b"].iloc[-1] == 8
    assert (got.history["team-a"].iloc[:-1].dropna() == 0).all()
    said = [r.getMessage() for r in caplog.records if "node-b" in r.getMessage()]
    assert len(said) == 1 and "missing, not idle" in said[0], said   # once per change, not every cycle
    # the plan preempts nothing for the missing tenant, though its forecast is its 8 GPUs; read as 0 (the old
    # reading) the same plan clears team-b's GPUs for it
    v = np.repeat(np.array([8.0, 8.0])[:, None, None], 60, axis=1)
    fc = Forecast(st.tenants, (0.5, 0.9, 0.99), np.concatenate([v, v * 1.1, v * 1.2], axis=2), st.at, 1, "flat")
    mem = PolicyMemory(reservations={"team-a": 8})
    p = plan(fc, st, mem, cfg)
    assert not p.stale and p.preemptions == ()
    blind = dataclasses.replace(st, used=np.nan_to_num(st.used), missing=())
    assert {x.tenant for x in plan(fc, blind, mem, cfg).preemptions} == {"team-b"}


def test_with_the_default_capacity_query_the_nodes_query_tells_the_silent_node(prom):
    """The default capacity_query, count(...), names no node: the nodes reporting now are read from nodes_query
    (its default, by Hostname), so team-a is missing there too, not 0 (it read 0 before nodes_query was read)."""
    jobs, nodes = scheduler()
    st = PrometheusSource(config(prom), jobs_provider=jobs, nodes_provider=nodes).collect(60).state
    assert np.isnan(st.used[0]) and st.used[1] == 8 and st.missing == ("team-a",)


def test_a_nodes_answer_whose_names_are_none_of_the_schedulers_says_nothing_new(prom):
    """nodes_query grouped by a label the scheduler's names are not (the GPU index here): a silent node cannot be
    told, and team-a reads as Prometheus says (0), as before."""
    jobs, nodes = scheduler()
    cfg = config(prom, nodes_query="count by (Hostname) (label_replace(DCGM_FI_DEV_GPU_UTIL{$exporter}, "
                                   '"Hostname", "$1", "gpu", "(.*)"))')
    st = PrometheusSource(cfg, jobs_provider=jobs, nodes_provider=nodes).collect(60).state
    assert st.used.tolist() == [0, 8] and st.missing == ()
