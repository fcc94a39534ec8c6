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
from pydantic import StrictFloat, StrictStr, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12
from urllib3.util.retry import Retry

from daemon.cluster import ClusterState, Jobs
from daemon.config import Config
from daemon.sources.base import Collected, SourceError
from forecaster.series import to_frame

log = logging.getLogger("gpu_autoscaler.source.prometheus")
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range


class ResponseTooLarge(requests.RequestException):
    """The body ran past source.prometheus.max_response_mb (read in chunks, never held whole)."""


class CappedSession(requests.Session):
    """A requests session that stops reading a body at ``max_bytes``.

    It is handed to PrometheusConnect (its ``session=`` argument), which keeps doing the HTTP: retries,
    headers, TLS, timeouts. Only the body read is bounded here, so a runaway answer costs at most
    ``max_bytes`` of memory before it becomes a SourceError.
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes

    def request(self, method, url, *args, **kwargs):  # type: ignore[override]
        kwargs["stream"] = True
        resp = super().request(method, url, *args, **kwargs)
        try:
            declared = int(resp.headers.get("Content-Length") or 0)
            if declared > self.max_bytes:
                raise ResponseTooLarge(f"response of {declared} bytes is over the {self.max_bytes}-byte cap")
            body, size = [], 0
            for chunk in resp.iter_content(1 << 16):
                size += len(chunk)
                if size > self.max_bytes:
                    raise ResponseTooLarge(f"response is over the {self.max_bytes}-byte cap")
                body.append(chunk)
            resp._content = b"".join(body)
        finally:
            resp.close()
        return resp


# Prometheus sends a sample as a JSON pair [unix seconds, "value as a string"]; labels are strings.
_Sample = tuple[StrictFloat, StrictStr]


class _VectorItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    value: _Sample


class _MatrixItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    values: list[_Sample]


_VECTOR = TypeAdapter(list[_VectorItem])
_MATRIX = TypeAdapter(list[_MatrixItem])


def _shape_error(exc: ValidationError, what: str) -> str:
    e = exc.errors(include_url=False)[0]
    where = ".".join(str(x) for x in e["loc"])
    return f"malformed {what} at result.{where}: {e['msg']} ({exc.error_count()} problem(s))"


def _numbers(raw: list[str], query: str) -> np.ndarray:
    """Sample values as floats; NaN, infinities and negative counts are refused, not guessed at."""
    try:
        v = np.asarray(raw, dtype=float)
    except ValueError as exc:
        raise SourceError(f"non-numeric sample value for {query!r}: {exc}") from None
    bad = ~np.isfinite(v) | (v < 0)
    if bad.any():
        first = raw[int(np.argmax(bad))]
        raise SourceError(f"{int(bad.sum())} sample(s) NaN, infinite or negative for {query!r} "
                          f"(first: {first!r}); refusing the whole answer")
    return v


class PrometheusSource:
    def __init__(self, cfg: Config, clock: Callable[[], float] = time.time,
                 jobs_provider: Callable[[tuple[str, ...]], Jobs] | None = None) -> None:
        self.cfg = cfg
        pc = cfg.source.prometheus
        self.pc = pc
        retry = Retry(total=pc.retries, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=("GET",))
        session = CappedSession(int(pc.max_response_mb * 2**20))
        session.verify = not pc.disable_ssl
        self.prom = PrometheusConnect(url=pc.url, headers=pc.headers or None, disable_ssl=pc.disable_ssl, retry=retry,
                                      timeout=pc.timeout_s, session=session)
        self.clock = clock
        self.jobs_provider = jobs_provider
        self.step_s = cfg.cycle.resolution_s
        self.tiers = {t.name: t.tier for t in cfg.tenants}
        self.known: list[str] = [t.name for t in cfg.tenants]

    # ---- queries ----------------------------------------------------------------------------
    def _call(self, fn, query: str, *args, **kwargs) -> object:
        """One request through PrometheusConnect; every way it can fail becomes a SourceError."""
        try:
            return fn(query, *args, **kwargs)
        except requests.exceptions.JSONDecodeError:
            why = "the answer is not JSON (an HTML error page or a proxy in the way?)"
        except (requests.RequestException, PrometheusApiClientException) as exc:
            why = str(exc)
        except (KeyError, TypeError, IndexError) as exc:
            why = f"the answer has no data.result ({type(exc).__name__}: {exc})"
        if len(why) > 300:
            why = why[:300] + "..."
        raise SourceError(f"prometheus {self.pc.url}: {why} [query {query!r}]")

    def _instant(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant vector, checked: labels are strings, every value a finite count >= 0."""
        raw = self._call(self.prom.custom_query, query, params={"time": f"{at:.3f}"})
        try:
            items = _VECTOR.validate_python(raw)
        except ValidationError as exc:
            raise SourceError(f"prometheus {self.pc.url}: {_shape_error(exc, 'instant vector')} [query {query!r}]") from None
        values = _numbers([it["value"][1] for it in items], query)
        return [(it["metric"], float(v)) for it, v in zip(items, values)]

    def _range(self, query: str, start: float, end: float) -> list[tuple[dict[str, str], np.ndarray, np.ndarray]]:
        """A range matrix, chunked under the point limit and checked like _instant: (labels, times, values)."""
        out: list[tuple[dict[str, str], np.ndarray, np.ndarray]] = []
        chunk = min(MAX_POINTS, self.pc.chunk_steps) * self.step_s
        t = start
        while t <= end:
            hi = min(end, t + chunk - self.step_s)
            raw = self._call(self.prom.custom_query_range, query, dt.datetime.fromtimestamp(t, dt.timezone.utc),
                             dt.datetime.fromtimestamp(hi, dt.timezone.utc), f"{self.step_s}s")
            try:
                items = _MATRIX.validate_python(raw)
            except ValidationError as exc:
                raise SourceError(f"prometheus {self.pc.url}: {_shape_error(exc, 'range matrix')} "
                                  f"[query {query!r}]") from None
            for it in items:
                vals = it["values"]
                ts = np.fromiter((p[0] for p in vals), dtype=float, count=len(vals))
                out.append((it["metric"], ts, _numbers([p[1] for p in vals], query)))
            t = hi + self.step_s
        return out

    def _label(self, labels: dict[str, str]) -> str | None:
        return labels.get(self.pc.tenant_label)

    def _range_frame(self, start: float, end: float) -> pd.DataFrame:
        parts = [(ts, np.full(len(ts), tenant, dtype=object), v) for labels, ts, v in
                 self._range(self.pc.demand_query, start, end) if (tenant := self._label(labels)) is not None]
        samples = pd.DataFrame({"time": np.concatenate([p[0] for p in parts]) if parts else np.zeros(0),
                                "tenant": np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=object),
                                "value": np.concatenate([p[2] for p in parts]) if parts else np.zeros(0)})
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
        current = {self._label(lb): v for lb, v in self._instant(self.pc.demand_query, now)
                   if self._label(lb) is not None}
        used = np.array([current.get(t, np.nan) for t in tenants], dtype=float)
        missing = tuple(t for t, u in zip(tenants, used) if not np.isfinite(u))
        cap = self._instant(self.pc.capacity_query, now)
        capacity = int(cap[0][1]) if cap else 0
        fresh = self._instant(self.pc.freshness_query, now)
        newest = fresh[0][1] if fresh else float("-inf")
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
