"""DCGM-shaped history for a real Prometheus (promtool's OpenMetrics backfill, services.backfilled_prometheus):
the mixed-fleet tests read their demand and usage per (tenant, type) from series shaped as dcgm-exporter writes
them, so they share one writer of that shape; scraped_gpus serves the same series live, to a real Prometheus
scraping them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Callable, Container, Iterator

import httpx

from tests.support.services import metrics_target, prometheus_server, scrape_config, wait_for

EXPORTER = 'job="dcgm-exporter",'   # the exporter's scrape job, as the default exporter_selector selects


def fleet_openmetrics(nodes: dict[str, tuple[str, int]], alloc: Callable[[int], dict[str, list[tuple[str, list]]]],
                      minutes: int, t0: int, skip: Container[int] = ()) -> str:
    """One DCGM_FI_DEV_GPU_UTIL series per GPU, labelled with its node (Hostname) and model (modelName), a minute
    apart from `t0` for `minutes` minutes. `nodes`: node -> (model name, GPUs). `alloc(m)`: node -> [(tenant, the
    utilisation of each GPU allocated to it)] at minute m: those GPUs carry the tenant's namespace, in order from
    gpu 0; the node's other GPUs carry none, at 0. A minute in `skip` has no sample at all (nothing scraped)."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for m in range(minutes):
        if m in skip:
            continue
        ts = t0 + 60 * m
        for node, rows in alloc(m).items():
            model, n = nodes[node]
            g = 0
            for tenant, utils in rows:
                for v in utils:
                    lines.append(f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="{node}",gpu="{g}",modelName="{model}",'
                                 f'namespace="{tenant}"}} {v} {ts}')
                    g += 1
            for g in range(g, n):
                lines.append(f'DCGM_FI_DEV_GPU_UTIL{{{EXPORTER}Hostname="{node}",gpu="{g}",'
                             f'modelName="{model}"}} 0 {ts}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def scraped_gpus(tmp: Path, owners: dict[str, list[str]]) -> Iterator[str]:
    """A real Prometheus scraping, every second under the job dcgm-exporter, one target with a DCGM_FI_DEV_GPU_UTIL
    series per GPU: `owners` is node -> the namespace (tenant) of each of its GPUs, from gpu 0. Yields its URL once
    every GPU is scraped and a fresh step or two have passed."""
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{n}",gpu="{g}",namespace="{t}"}} 80'
             for n, ts in owners.items() for g, t in enumerate(ts)]
    target = metrics_target("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n" + "\n".join(lines) + "\n")
    try:
        with prometheus_server(tmp, scrape_config(target)) as (url, _):
            def count() -> float:
                r = httpx.get(f"{url}/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_UTIL)"}).json()
                return sum(float(s["value"][1]) for s in r["data"]["result"])
            wait_for(lambda: count() == len(lines), what="every node scraped", timeout=30)
            time.sleep(2.1)   # a fresh step or two after the first scrape
            yield url
    finally:
        target.shutdown()
        target.server_close()
