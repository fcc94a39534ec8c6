"""Per-job GPU telemetry from Prometheus: the DCGM exporter's per-GPU series with their job labels.

Kubernetes: the exporter labels a GPU with the pod using it (`pod`, `namespace`, `container`). Slurm: with the
job from its `--hpc-job-mapping-dir` (`hpc_job`). A series with neither is a free GPU and is skipped. Four range
queries per cycle (all configurable, [health]): activity (DCGM_FI_PROF_GR_ENGINE_ACTIVE, falling back to
DCGM_FI_DEV_GPU_UTIL / 100), framebuffer used and free, and the last XID, each restricted to the exporter's own
series by `source.prometheus.exporter_selector` (the `$exporter` in the queries), as every query is.

What cannot be trusted is refused per job with a clear reason, never guessed at: a NaN, infinite or negative
sample, an activity over 1, series for one GPU that disagree, or a GPU claimed by two jobs at the same step (a job
mapping file that names a GPU twice). Such a job gets no finding, and nothing acts on it. The HTTP goes through
prometheus-api-client with the same capped session and URL redaction as daemon/sources/prometheus.py.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from typing import Callable

import numpy as np
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import StrictStr, TypeAdapter, ValidationError
from typing_extensions import TypedDict
from urllib3.util.retry import Retry

from daemon.config import Config
from daemon.health.types import GpuTrace, Scheduler, Telemetry
from daemon.sources.base import SourceError
from daemon.sources.prometheus import CappedSession, ResponseTooLarge
from daemon.sources.pushgateway import pushed_selector
from daemon.sources.redact import redact_text, redact_url

log = logging.getLogger("gpu_autoscaler.source.job_telemetry")

FIELDS = ("activity", "fb_used", "fb_free", "xid")


class _MatrixItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    values: list[tuple[float, StrictStr]]   # NaN allowed here: it is refused per job with a reason


_MATRIX = TypeAdapter(list[_MatrixItem])


class _VectorItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    value: tuple[float, StrictStr]


_VECTOR = TypeAdapter(list[_VectorItem])


def from_push(labels: dict[str, str], groups: list[dict[str, str]]) -> bool:
    """Whether a series may be one of the Pushgateway `groups`': it carries every label of one (its instance too,
    where the group's path names one). A group whose path names no instance gives its series whatever instance the
    push's body names, a real exporter's too (daemon/sources/pushgateway.py), so any instance passes it. Either way
    the series is not the exporter's telemetry: that group's, or one of the exporter's it cannot be told from."""
    return any(all(labels.get(k, "") == v for k, v in g.items() if k != "instance")
               and (not g.get("instance") or labels.get("instance", "") == g["instance"]) for g in groups)

Key = tuple[str, str, str]   # (job, host, gpu)

# Two series for one GPU of one job agree when they differ by at most this share of the larger value (or of 1):
# 0.02 of activity, 2% of the framebuffer's MiB, an XID code exactly.
DUPLICATE_TOLERANCE = 0.02


class JobTelemetrySource:
    """Reads one window of per-GPU telemetry each cycle: `read()` gives a `Telemetry` (daemon/health/types.py)."""

    def __init__(self, cfg: Config, clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.hc = cfg.health
        pc = cfg.source.prometheus
        self.shown_url = redact_url(pc.url)
        retry = Retry(total=pc.retries, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=("GET",))
        session = CappedSession(int(pc.max_response_mb * 2**20))
        session.verify = not pc.disable_ssl
        self.prom = PrometheusConnect(url=pc.url, headers=pc.headers or None, disable_ssl=pc.disable_ssl,
                                      retry=retry, timeout=pc.timeout_s, session=session)
        self.clock = clock
        self.step_s = float(cfg.cycle.resolution_s)

    def use_config(self, cfg: Config) -> None:
        """A reload: new queries, labels and thresholds; the connection (URL, TLS, headers) is kept."""
        self.cfg, self.hc = cfg, cfg.health
        self.step_s = float(cfg.cycle.resolution_s)

    def _range(self, query: str, start: float, end: float) -> list[_MatrixItem]:
        return self._ask(query, lambda: self.prom.custom_query_range(
            query, dt.datetime.fromtimestamp(start, dt.timezone.utc), dt.datetime.fromtimestamp(end, dt.timezone.utc),
            f"{self.step_s:g}s"), _MATRIX, "range matrix")

    def _pushed_groups(self, start: float, end: float) -> list[dict[str, str]]:
        """The labels of the Pushgateway groups that passed the exporter selector from `start` to `end`
        (daemon/sources/prometheus.py pushed_selector): a push keeps the job its path names, so their series read as
        the exporter's, and a tenant could push its own idle job's GPUs busy (the series then disagreed: refused,
        never reclaimed) or another job's under its labels."""
        sel = pushed_selector(self.cfg.source.prometheus.exporter_selector)
        if sel is None:   # the selector takes every scrape job's series, knowingly
            return []
        query = f"last_over_time({sel}[{int(np.ceil(end - start + self.step_s))}s])"
        items = self._ask(query, lambda: self.prom.custom_query(query, params={"time": f"{end:.3f}"}), _VECTOR,
                          "instant vector")
        return [{k: v for k, v in it["metric"].items() if k != "__name__"} for it in items]

    def _ask(self, query: str, call: Callable[[], object], shape: TypeAdapter, what: str) -> list:
        try:
            raw = call()
        except ResponseTooLarge as exc:
            why = str(exc)
        except requests.exceptions.JSONDecodeError:
            why = "the answer is not JSON (an HTML error page or a proxy in the way?)"
        except (requests.RequestException, PrometheusApiClientException) as exc:
            why = str(exc)[:300]
        except (KeyError, TypeError, IndexError) as exc:
            why = f"the answer has no data.result ({type(exc).__name__}: {exc})"
        else:
            try:
                return shape.validate_python(raw)
            except ValidationError as exc:
                e = exc.errors(include_url=False)[0]
                why = f"malformed {what} at result.{'.'.join(map(str, e['loc']))}: {e['msg']}"
        raise SourceError(redact_text(f"prometheus {self.shown_url}: {why} [query {query!r}]"))

    def _job_of(self, labels: dict[str, str]) -> tuple[str, Scheduler, str | None] | None:
        hc = self.hc
        if labels.get(hc.slurm_job_label):
            return labels[hc.slurm_job_label], "slurm", None
        pod, ns = labels.get(hc.pod_label), labels.get(hc.namespace_label)
        if pod and ns:
            return f"{ns}/{pod}", "kubernetes", ns
        return None

    def read(self, end: float | None = None) -> Telemetry:
        """One window ending at `end` (default: now, on the step grid) of health.window_minutes()."""
        hc = self.hc
        now = self.clock() if end is None else end
        end = float(np.floor(now / self.step_s) * self.step_s)
        n = int(round(hc.window_minutes() * 60 / self.step_s)) + 1
        start = end - (n - 1) * self.step_s
        grids: dict[str, dict[Key, np.ndarray]] = {}
        meta: dict[Key, tuple[Scheduler, str | None]] = {}
        problems: dict[str, list[str]] = defaultdict(list)
        pushed = self._pushed_groups(start, end)
        dropped: dict[str, int] = defaultdict(int)
        for name in FIELDS:
            query = self.cfg.source.prometheus.selects(getattr(hc, f"{name}_query"))
            grids[name] = self._grid(name, query, start, n, meta, problems, pushed, dropped)
        if pushed:
            first = ", ".join(f'{k}="{v}"' for k, v in sorted(pushed[0].items()))
            bare = sum(not g.get("instance") for g in pushed)
            log.warning("per-job telemetry: %d Pushgateway group(s) pass the exporter selector (first: {%s}); %d "
                        "series (of %d jobs) that may be theirs are not read as the exporter's%s. Drop the DCGM names "
                        "on the Pushgateway's scrape job (metric_relabel_configs)", len(pushed), first,
                        sum(dropped.values()), len(dropped),
                        f" ({bare} name no instance in their path, so any series with their other labels may be "
                        "theirs, the exporter's own too)" if bare else "")
        keys = sorted(grids["activity"])   # a GPU without activity is not telemetry of a job
        self._conflicts(keys, grids["activity"], problems)
        nan = np.full(n, np.nan)
        gpus = tuple(GpuTrace(job, meta[(job, host, gpu)][0], meta[(job, host, gpu)][1], host, gpu,
                              grids["activity"][(job, host, gpu)],
                              *(grids[f].get((job, host, gpu), nan) for f in ("fb_used", "fb_free", "xid")))
                     for job, host, gpu in keys)
        rejected = {job: "; ".join(dict.fromkeys(why)) for job, why in problems.items()}
        for job, why in rejected.items():
            log.warning("job %s: telemetry refused, nothing acts on it: %s", job, why)
        return Telemetry(end, self.step_s, n, gpus, rejected)

    def _grid(self, name: str, query: str, start: float, n: int, meta: dict, problems: dict,
              pushed: list[dict[str, str]] = (), dropped: dict[str, int] | None = None) -> dict[Key, np.ndarray]:
        """{(job, host, gpu): values on the grid}. The same GPU of the same job in several series (two scrape jobs
        of one exporter) is kept only while the series agree (within DUPLICATE_TOLERANCE wherever two have a
        sample); series that disagree are refused, never averaged: an average lets extra series (a tenant's pod
        exposing the DCGM names with a victim's labels) pull a busy GPU under the idle threshold, or an idle one
        over it."""
        hc = self.hc
        series: dict[Key, list[np.ndarray]] = {}
        for item in self._range(query, start, start + (n - 1) * self.step_s):
            labels = item["metric"]
            who = self._job_of(labels)
            if who is None:
                continue   # a free GPU
            job, sched, tenant = who
            if pushed and from_push(labels, pushed):
                if dropped is not None:
                    dropped[job] += 1
                continue   # a pushed series: whatever it says of the job is not telemetry
            host, gpu = labels.get(hc.host_label, ""), labels.get(hc.gpu_label, "")
            if not host or not gpu:
                problems[job].append(f"a {name} series without the {hc.host_label!r} or {hc.gpu_label!r} label")
                continue
            ts = np.array([p[0] for p in item["values"]], dtype=float)
            try:
                v = np.array([p[1] for p in item["values"]], dtype=float)
            except ValueError as exc:
                problems[job].append(f"non-numeric {name} on {host}:{gpu}: {exc}")
                continue
            bad = ~np.isfinite(v) | (v < 0) | ((v > 1.0) if name == "activity" else False)
            if bad.any():
                first = int(np.argmax(bad))
                what = "NaN, infinite, negative or over 1" if name == "activity" else "NaN, infinite or negative"
                problems[job].append(f"{int(bad.sum())} {name} sample(s) on {host}:{gpu} {what} "
                                     f"(first {float(v[first])!r} at {ts[first]:.0f})")
                v = np.where(bad, np.nan, v)
            key = (job, host, gpu)
            meta.setdefault(key, (sched, tenant))
            i = np.rint((ts - start) / self.step_s).astype(np.int64)
            ok = (i >= 0) & (i < n) & np.isfinite(v)
            row = np.full(n, np.nan)
            row[i[ok]] = v[ok]
            series.setdefault(key, []).append(row)
        out: dict[Key, np.ndarray] = {}
        for key, rows in series.items():
            if len(rows) == 1:
                out[key] = rows[0]
                continue
            m = np.vstack(rows)
            present = np.isfinite(m)
            hi, lo = np.fmax.reduce(m, axis=0), np.fmin.reduce(m, axis=0)   # NaN-ignoring, no warning
            both = present.sum(axis=0) > 1
            scale = np.maximum(1.0, np.maximum(np.abs(hi), np.abs(lo)))
            off = both & (hi - lo > DUPLICATE_TOLERANCE * scale)
            if off.any():
                j = int(np.argmax(off))
                problems[key[0]].append(f"{len(rows)} {name} series for GPU {key[1]}:{key[2]} disagree "
                                        f"({float(lo[j]):g} vs {float(hi[j]):g} at one step): a second exporter "
                                        "or a scrape of something else under the DCGM names?")
            count = present.sum(axis=0)
            out[key] = np.where(count > 0, np.where(present, m, 0.0).sum(axis=0) / np.maximum(count, 1), np.nan)
        return out

    @staticmethod
    def _conflicts(keys: list[Key], act: dict[Key, np.ndarray], problems: dict) -> None:
        """A GPU with samples for two jobs at the same step: both jobs are refused (which one uses it is
        unknown, so neither may be called idle on its numbers).

        The reason each job gets names no other job: it is shown to that job's tenant (API, console), and the
        other job may be another tenant's (its pod name, namespace or Slurm job id). The full pair goes to the
        log, which is the operators'."""
        by_gpu: dict[tuple[str, str], list[str]] = defaultdict(list)
        for job, host, gpu in keys:
            by_gpu[(host, gpu)].append(job)
        for (host, gpu), jobs in by_gpu.items():
            if len(jobs) < 2:
                continue
            seen = np.vstack([np.isfinite(act[(j, host, gpu)]) for j in jobs])
            both = seen.sum(axis=0) > 1
            if both.any():
                overlap = [j for j, row in zip(jobs, seen) if (row & both).any()]
                log.warning("GPU %s:%s is claimed by jobs %s at the same time: all refused", host, gpu,
                            ", ".join(overlap))
                for j in overlap:
                    problems[j].append(f"GPU {host}:{gpu} is also claimed by another job at the same time (a job "
                                       "mapping file that names a GPU twice, or a shared/time-sliced GPU?)")
