"""Idle is zero, missing is missing, on a real Prometheus scraping two live DCGM-style exporters.

node-a carries team-a (two GPUs allocated, one of them idle at 0%) and two free GPUs; node-b carries
team-b. team-c is configured but holds no GPU. Then node-b's exporter stops: its scrape fails
(up == 0), Prometheus marks its series stale, and team-b becomes missing while the others stay known.
Run twice: with the default raw queries, and reading the shipped recording rules' series.
"""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer

import httpx
import numpy as np
import pytest

from daemon.config import Config, PrometheusConfig, SourceConfig
from daemon.sources.prometheus import PrometheusSource
from tests.conftest import REPO
from tests.support.services import metrics_target, prometheus_server, wait_for

RULES = REPO / "deploy" / "prometheus" / "gpu-autoscaler-recording.yml"

pytestmark = pytest.mark.services


def exporter(node: str, gpus: list[tuple[str, float]]) -> ThreadingHTTPServer:
    """A /metrics endpoint shaped like dcgm-exporter: one series per GPU, namespace while allocated."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for g, (ns, util) in enumerate(gpus):
        ns_label = f',namespace="{ns}"' if ns else ""
        lines.append(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{g}"{ns_label}}} {util}')
    return metrics_target("\n".join(lines) + "\n")


@pytest.mark.parametrize("rules", [False, True], ids=["raw-queries", "recording-rules"])
def test_idle_is_zero_and_a_failed_scrape_is_missing(tmp_path, rules):
    node_a = exporter("node-a", [("team-a", 90), ("team-a", 0), ("", 0), ("", 0)])
    node_b = exporter("node-b", [("team-b", 70), ("", 0)])
    targets = ", ".join(f"'127.0.0.1:{s.server_address[1]}'" for s in (node_a, node_b))
    prom_cfg = (f"global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\n  evaluation_interval: 1s\n"
                f"scrape_configs:\n"
                f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
    if rules:
        prom_cfg += f"rule_files: ['{RULES}']\n"
    try:
        with prometheus_server(tmp_path, prom_cfg) as (url, _):
            pc = PrometheusConfig(url=url, timeout_s=2, retries=0, recording_rules=rules)
            cfg = Config(source=SourceConfig(kind="prometheus", prometheus=pc),
                         cycle={"history_steps": 60, "resolution_s": 1},
                         tenants=[{"name": "team-a"}, {"name": "team-b"}, {"name": "team-c"}])
            src = PrometheusSource(cfg)

            def count(q):
                r = httpx.get(f"{url}/api/v1/query", params={"query": q}).json()["data"]["result"]
                return float(r[0]["value"][1]) if r else 0

            wait_for(lambda: count(pc.query("capacity")) == 6, what="both exporters scraped", timeout=30)
            # the demand series too: with recording rules the capacity's may be evaluated before the demand's
            # (a busy box made the cycle read no demand at all once: used [0, 0, 0])
            wait_for(lambda: count(f"count({pc.query('demand')})") == 2, what="team-a's and team-b's demand",
                     timeout=30)
            time.sleep(1.1)   # one more step on the grid
            st = src.collect(60).state
            assert st.tenants == ("team-a", "team-b", "team-c")
            assert list(st.used) == [2, 1, 0]          # the idle allocated GPU counts; team-c is idle, not missing
            assert st.missing == () and st.capacity == 6

            node_b.shutdown()
            node_b.server_close()
            wait_for(lambda: count('count(up{job="dcgm-exporter"} == 0)') == 1, what="node-b scrape failing",
                     timeout=30)
            wait_for(lambda: count(f"count({pc.query('missing')})") == 1, what="team-b's GPU stale", timeout=30)
            time.sleep(1.1)
            got = src.collect(60)
            st = got.state
            assert st.missing == ("team-b",)
            assert st.used[0] == 2 and np.isnan(st.used[1]) and st.used[2] == 0
            assert st.capacity == 4
            assert np.isnan(got.history["team-b"].iloc[-1]) and got.history["team-c"].iloc[-1] == 0
    finally:
        node_a.shutdown()
        node_a.server_close()
