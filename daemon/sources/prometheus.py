"""Prometheus source: per-tenant GPU demand from DCGM-exporter metrics, through prometheus-api-client.

Every PromQL expression is configurable. Gaps are reported as gaps: a tenant
that has no sample at an instant is NaN there (and listed as missing), never 0.
The scheduler's view (jobs, queue) comes from a job provider when one is
configured (the Slurm actuator); without one, demand is the GPUs in use.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Callable

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from daemon.cluster import ClusterState, Jobs
from daemon.config import Config
from daemon.sources.base import Collected, SourceError
from forecaster.series import to_frame

log = logging.getLogger("gpu_autoscaler.source.prometheus")
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range


class PrometheusSource:
    def __init__(self, cfg: Config, clock: Callable[[], float] = time.time,
                 jobs_provider: Callable[[tuple[str, ...]], Jobs] | None = None) -> None:
        self.cfg = cfg
        pc = cfg.source.prometheus
        self.pc = pc
        retry = Retry(total=pc.retries, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=("GET",))
        self.prom = PrometheusConnect(url=pc.url, headers=pc.headers or None, disable_ssl=pc.disable_ssl, retry=retry,
                                      timeout=pc.timeout_s)
        self.clock = clock
        self.jobs_provider = jobs_provider
        self.step_s = cfg.cycle.resolution_s
        self.tiers = {t.name: t.tier for t in cfg.tenants}
        self.known: list[str] = [t.name for t in cfg.tenants]

    # ---- queries ----------------------------------------------------------------------------
    def _instant(self, query: str, at: float) -> list[dict]:
        try:
            return self.prom.custom_query(query, params={"time": f"{at:.3f}"})
        except (requests.RequestException, PrometheusApiClientException, ValueError) as exc:
            raise SourceError(f"prometheus {self.pc.url}: {exc}") from None

    def _range(self, query: str, start: float, end: float) -> list[dict]:
        out: list[dict] = []
        chunk = MAX_POINTS * self.step_s
        t = start
        while t <= end:
            hi = min(end, t + chunk - self.step_s)
            try:
                out.extend(self.prom.custom_query_range(query, dt.datetime.fromtimestamp(t, dt.timezone.utc),
                                                        dt.datetime.fromtimestamp(hi, dt.timezone.utc),
                                                        f"{self.step_s}s"))
            except (requests.RequestException, PrometheusApiClientException, ValueError) as exc:
                raise SourceError(f"prometheus {self.pc.url}: {exc}") from None
            t = hi + self.step_s
        return out

    def _label(self, series: dict) -> str | None:
        return series.get("metric", {}).get(self.pc.tenant_label)

    def _range_frame(self, start: float, end: float) -> pd.DataFrame:
        rows = []
        for s in self._range(self.pc.demand_query, start, end):
            tenant = self._label(s)
            if tenant is None:
                continue
            for ts, v in s.get("values", []):
                rows.append((float(ts), tenant, float(v)))
        samples = pd.DataFrame(rows, columns=["time", "tenant", "value"])
        samples["time"] = pd.to_datetime(samples["time"], unit="s", utc=True)
        lo = pd.Timestamp(start, unit="s", tz="UTC")
        hi = pd.Timestamp(end, unit="s", tz="UTC")
        frame = to_frame(samples, self.step_s, start=lo, end=hi)
        for t in self.known:  # configured tenants with no data at all are columns of NaN, not absent
            if t not in frame.columns:
                frame[t] = np.nan
        return frame

    def history_range(self, span: pd.Timedelta) -> pd.DataFrame:
        end = self._aligned(self.clock())
        return self._range_frame(end - span.total_seconds(), end)

    def _aligned(self, t: float) -> float:
        return float(np.floor(t / self.step_s) * self.step_s)

    # ---- Source interface ---------------------------------------------------------------------
    def collect(self, history_steps: int) -> Collected:
        now = self._aligned(self.clock())
        history = self._range_frame(now - (history_steps - 1) * self.step_s, now)
        tenants = tuple(sorted(set(history.columns) | set(self.known)))
        history = history.reindex(columns=list(tenants))
        current = {self._label(s): float(s["value"][1]) for s in self._instant(self.pc.demand_query, now)
                   if self._label(s) is not None}
        used = np.array([current.get(t, np.nan) for t in tenants], dtype=float)
        missing = tuple(t for t, u in zip(tenants, used) if not np.isfinite(u))
        cap = self._instant(self.pc.capacity_query, now)
        capacity = int(float(cap[0]["value"][1])) if cap else 0
        fresh = self._instant(self.pc.freshness_query, now)
        newest = float(fresh[0]["value"][1]) if fresh else float("-inf")
        staleness = max(0.0, self.clock() - newest) if np.isfinite(newest) else float("inf")
        jobs = self.jobs_provider(tenants) if self.jobs_provider else Jobs.empty()
        pending = np.zeros(len(tenants))
        if len(jobs):
            q = ~jobs.running
            pending = np.bincount(jobs.tenant[q], weights=jobs.gpus[q], minlength=len(tenants)).astype(float)
        tiers = tuple(self.tiers.get(t, "normal") for t in tenants)
        # a tenant that is only missing now is NaN now: the policy treats unknown as unknown
        state = ClusterState(at=pd.Timestamp(now, unit="s", tz="UTC"), tenants=tenants, tiers=tiers,
                             capacity=capacity, used=used, pending=pending, jobs=jobs, staleness_s=staleness,
                             missing=missing)
        if missing:
            log.warning("no fresh sample for %d tenants: %s", len(missing), ", ".join(missing[:10]))
        return Collected(history, state)

    def node_names(self) -> set[str]:
        """Nodes that reported GPUs within a day (``known_nodes_query``, grouped by ``node_label``)."""
        return {n for s in self._instant(self.pc.known_nodes_query, self.clock())
                if (n := s.get("metric", {}).get(self.pc.node_label))}
