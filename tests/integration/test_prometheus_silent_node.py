"""An exporter silent past 15 minutes reads as missing, not zero load, on a real Prometheus (security read hsec8).

Prometheus scrapes the DCGM exporter's job on two targets: node-a's exporter (8 GPUs, all team-b's) and node-b's,
which is never up (nothing listens on its port), so node-b has no series at all, as a node whose exporter crashed
more than 15 minutes ago (missing_query only lists GPUs seen in the last 15 minutes). The scheduler's view lists
both nodes up, team-a (high tier) running an 8-GPU job on node-b, team-b eight 1-GPU jobs on node-a. With the
capacity answered per node, team-a is missing (NaN in used and at the history's last step), not idle; node-b's
GPUs are not capacity; and the plan preempts nothing for team-a, which read as 0 would take team-b's GPUs.

A partly silent node (prom_lost_gpu): node-b's exporter answers, but its exposition lacks one GPU's series (a GPU
fallen off the bus, DCGM restarted with it excluded), so node-b counts 7 GPUs where its running jobs hold 8; the
tenant whose job sat on that GPU is missing, not 0, and nothing is preempted for the load it hid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

import httpx
import numpy as np
import pytest

from daemon.config import Config, TenantConfig
from daemon.policy.engine import plan
from daemon.policy.state import Jobs, Nodes
from daemon.policy.types import PolicyMemory
from daemon.sources.prometheus import PrometheusSource
from forecaster.types import Forecast
from tests.conftest import free_port
from tests.support.services import metrics_target, prometheus_server, wait_for

pytestmark = [pytest.mark.services, pytest.mark.security]

BY_NODE = "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{$exporter})"


@contextlib.contextmanager
def scraping(tmp, *expositions: str, down: int = 0):
    """A real Prometheus scraping the DCGM exporter's job on a target per exposition (each answers its text) and on
    `down` targets nothing listens on; yields its url once every target's `up` is in and one more scrape passed."""
    live = [metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + text) for text in expositions]
    targets = ", ".join([f"'127.0.0.1:{t.server_address[1]}'" for t in live]
                        + [f"'127.0.0.1:{free_port()}'" for _ in range(down)])
    cfg = ("global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
           f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
    try:
        with prometheus_server(tmp, cfg) as (url, _):
            def ups() -> list[float]:
                r = httpx.get(f"{url}/api/v1/query", params={"query": 'up{job="dcgm-exporter"}'}).json()
                return sorted(float(s["value"][1]) for s in r["data"]["result"])
            wait_for(lambda: ups() == [0.0] * down + [1.0] * len(live), what="every target scraped", timeout=30)
            time.sleep(2.1)
            yield url
    finally:
        for t in live:
            t.shutdown()
            t.server_close()


def gpus(node: str, tenant: str, indices) -> str:
    return "".join(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{g}",namespace="{tenant}"}} 80\n' for g in indices)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """node-a's exporter (8 GPUs, team-b's) and node-b's target, where nothing listens."""
    with scraping(tmp_path_factory.mktemp("silent-node"), gpus("node-a", "team-b", range(8)), down=1) as url:
        yield url


@pytest.fixture(scope="module")
def prom_lost_gpu(tmp_path_factory):
    """node-a's exporter (8 GPUs, team-b's) and node-b's, whose exposition lacks GPU 7's series (fallen off the
    bus, or excluded when DCGM restarted): GPUs 0-6 report, team-c's."""
    with scraping(tmp_path_factory.mktemp("lost-gpu"), gpus("node-a", "team-b", range(8)),
                  gpus("node-b", "team-c", range(7))) as url:
        yield url


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


def lost_gpu_scheduler():
    """node-a: team-b's eight 1-GPU jobs; node-b: team-a's (high) 1-GPU job, on the GPU whose series is gone, and
    team-c's seven 1-GPU jobs. Both nodes up, 8 GPUs each, all in use."""
    def jobs(tenants: tuple[str, ...]) -> Jobs:
        a, b, c = (tenants.index(t) for t in ("team-a", "team-b", "team-c"))
        n = 16
        return Jobs(ids=np.array([str(i) for i in range(n)], dtype=object), tenant=np.array([a] + [b] * 8 + [c] * 7),
                    gpus=np.ones(n, dtype=np.int64), priority=np.array([2] + [0] * 8 + [1] * 7, dtype=np.int8),
                    running=np.ones(n, dtype=bool), runtime_s=np.full(n, 600.0), wait_s=np.zeros(n),
                    node=np.array(["node-b"] + ["node-a"] * 8 + ["node-b"] * 7, dtype=object))
    return jobs, scheduler()[1]


@pytest.mark.parametrize("capacity_query", [BY_NODE, None], ids=["capacity-by-node", "default-nodes-query"])
def test_a_tenant_on_a_gpu_whose_series_is_gone_is_missing_and_nothing_is_preempted_for_it(prom_lost_gpu, caplog,
                                                                                        capacity_query):
    """node-b reports 7 GPUs where its running jobs hold 8: team-a, whose only job sat on the lost GPU, is missing,
    not 0 (it read 0 before: the GPU was never seen, as one lost more than 15 minutes ago, so the missing query
    does not list it); team-c on node-b is missing too (which job held the lost GPU is not known); team-b on
    node-a is as read. One line names node-b and its unseen GPU; the plan preempts nothing for team-a's hidden
    load, while read as 0 the same plan clears team-b's GPUs for its forecast."""
    jobs, nodes = lost_gpu_scheduler()
    extra = {"capacity_query": capacity_query} if capacity_query else {}
    cfg = config(prom_lost_gpu, **extra)
    cfg = cfg.model_copy(update={"tenants": [*cfg.tenants, TenantConfig(name="team-c", tier="normal")],
                                 "cycle": cfg.cycle.model_copy(update={"max_missing_share": 0.7})})
    src = PrometheusSource(cfg, jobs_provider=jobs, nodes_provider=nodes)
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
        got = src.collect(60)
        src.collect(60)
    st = got.state
    assert st.tenants == ("team-a", "team-b", "team-c")
    assert np.isnan(st.used[0]), "team-a's job on node-b's lost GPU read as 0 GPUs"
    assert np.isnan(st.used[2]) and st.used[1] == 8 and st.missing == ("team-a", "team-c")
    assert st.capacity == 15   # the lost GPU is not capacity
    assert np.isnan(got.history["team-a"].iloc[-1]) and np.isnan(got.history["team-c"].iloc[-1])
    assert got.history["team-b"].iloc[-1] == 8
    said = [r.getMessage() for r in caplog.records if "node-b" in r.getMessage()]
    assert len(said) == 1 and "(node-b: 1 of 8 unseen)" in said[0] and "missing, not idle" in said[0], said
    v = np.repeat(np.array([8.0, 8.0, 7.0])[:, None, None], 60, axis=1)
    fc = Forecast(st.tenants, (0.5, 0.9, 0.99), np.concatenate([v, v * 1.1, v * 1.2], axis=2), st.at, 1, "flat")
    mem = PolicyMemory(reservations={"team-a": 8})
    p = plan(fc, st, mem, cfg)
    assert not p.stale and p.preemptions == ()
    blind = dataclasses.replace(st, used=np.array([0.0, 8.0, 7.0]), missing=())   # as the old code read it
    assert {x.tenant for x in plan(fc, blind, mem, cfg).preemptions} == {"team-b"}
