"""DCGM-shaped history for a real Prometheus (promtool's OpenMetrics backfill, services.backfilled_prometheus):
the mixed-fleet tests read their demand and usage per (tenant, type) from series shaped as dcgm-exporter writes
them, so they share one writer of that shape."""

from __future__ import annotations

from typing import Callable, Container

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
