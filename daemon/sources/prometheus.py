"""Prometheus source: per-tenant GPU demand from DCGM-exporter metrics, through prometheus-api-client.

Every PromQL expression is configurable. Demand is the GPUs allocated to a tenant, busy or idle.
Idle is zero, missing is missing: in a fresh scrape a tenant without GPUs is 0; a tenant whose GPU
series went stale (its node's scrape failed) is NaN there and listed as missing, never 0.
The scheduler's view (jobs, queue) comes from a job provider when one is
configured (the Slurm actuator), and where the GPUs are (per node: healthy,
free, draining, held) from a node provider (the same actuator), so the policy
can preempt by placement. A node read that fails leaves the state without a
node view (the policy then counts GPUs), never with "no nodes".
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from typing import Annotated, Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from pydantic import AllowInfNan, StrictFloat, StrictStr, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12
from urllib3.util.retry import Retry

from daemon.config import Config
from daemon.config.names import named_tenant, tenant_accounts, tenant_namespaces
from daemon.config.promql_selectors import EXPORTER, INGRESS, substitute
from daemon.policy.state import ClusterState, Jobs, Nodes
from daemon.sources.base import Collected, SourceError
from daemon.sources.history import History
from daemon.sources.pushgateway import Pushed, add_back, left_out_line, pushed_refusal, pushed_selector
from daemon.sources.redact import redact_text, redact_url
from daemon.sources.scheduler_bounds import bound_capacity, bound_demand, dropped_line, mark_silent, unlisted_line
from daemon.text import one_line, plural

log = logging.getLogger("gpu_autoscaler.source.prometheus")
SERIES_SEP = "@"     # a typed series: "<tenant>@<type>", as the policy names it (daemon/policy/fleet.py)
MAX_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range
# the tenants' GPUs at a step may exceed what capacity_query counts there by this factor (plus OVER_SLACK_GPUS) before
# the answers are refused as not counting the same GPUs: a demand query that sums something else (memory in MiB, a
# utilisation in %) would otherwise plan holds, and preempt, for a thousand times the cluster
OVER_FACTOR, OVER_SLACK_GPUS = 2.0, 8.0


# tenant_label values that are Kubernetes namespaces: the DCGM exporter's pod namespace, and the name a scrape without
# honor_labels gives it beside the exporter's own namespace
NAMESPACE_LABELS = ("namespace", "exported_namespace")
K8S_ACTUATORS = ("kubernetes", "kueue")


def namespace_tenants(cfg: Config) -> dict[str, str] | None:
    """{namespace: tenant} where the tenant label's values are namespaces (NAMESPACE_LABELS) and a Kubernetes
    actuator maps namespaces to tenants (tenants[].k8s_namespace, default the name; never kube-*, as the actuator);
    None otherwise (the values are the tenants' names)."""
    if cfg.source.prometheus.tenant_label not in NAMESPACE_LABELS or \
            not set(K8S_ACTUATORS) & set(cfg.actuators.enabled):
        return None
    return {ns: t for t, ns in tenant_namespaces(cfg.tenants).items()}


def account_tenants(cfg: Config) -> dict[str, str] | None:
    """{Slurm account: tenant} where a Slurm actuator reads jobs by account (tenants[].slurm_account, default the
    name) and the tenant label's values are not namespaces a Kubernetes actuator maps (namespace_tenants): on Slurm
    the exporter names a GPU by its job's account (node-exporter's `tenant`, or a site's relabelling); None
    otherwise."""
    if "slurm" not in cfg.actuators.enabled or namespace_tenants(cfg) is not None:
        return None
    return {acct: t for t, acct in tenant_accounts(cfg.tenants).items()}


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
_Sample = tuple[Annotated[StrictFloat, AllowInfNan(False)], StrictStr]


class _VectorItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    value: _Sample


class _MatrixItem(TypedDict):
    metric: dict[StrictStr, StrictStr]
    values: list[_Sample]


_VECTOR = TypeAdapter(list[_VectorItem])
_MATRIX = TypeAdapter(list[_MatrixItem])


class AnswerTooLarge(SourceError):
    """An answer over max_response_mb; a range read retries it with fewer steps per request."""


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
                 jobs_provider: Callable[[tuple[str, ...]], Jobs] | None = None,
                 history: History | None = None,
                 nodes_provider: Callable[[tuple[str, ...]], Nodes] | None = None, jobs_whole: bool = False) -> None:
        self.cfg = cfg
        pc = cfg.source.prometheus
        self.pc = pc
        self.shown_url = redact_url(pc.url)  # errors, logs, /healthz and the console: never the URL's user info
        retry = Retry(total=pc.retries, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504),
                      allowed_methods=("GET",))
        session = CappedSession(int(pc.max_response_mb * 2**20))
        session.verify = not pc.disable_ssl
        self.prom = PrometheusConnect(url=pc.url, headers=pc.headers or None, disable_ssl=pc.disable_ssl, retry=retry,
                                      timeout=pc.timeout_s, session=session)
        self.clock = clock
        self.jobs_provider = jobs_provider
        self.jobs_whole = jobs_whole   # the provider lists every job of the cluster (ListsClusterJobs.lists_every_job)
        self.nodes_provider = nodes_provider
        self.step_s = cfg.cycle.resolution_s
        self.tiers = {t.name: t.tier for t in cfg.tenants}
        self.known: list[str] = [t.name for t in cfg.tenants]
        # the label's values as the scheduler's actuator names them: namespaces (Kubernetes) or accounts (Slurm)
        self.tenant_of_ns = namespace_tenants(cfg)
        self.tenant_of_value, self.value_kind = ((self.tenant_of_ns, "namespace") if self.tenant_of_ns is not None
                                                 else (account_tenants(cfg), "account"))
        self.pushed = pushed_selector(pc.exporter_selector)   # Pushgateway groups that pass as the exporter
        self._push = Pushed()   # those standing at this cycle's time: their series are left out of its reads
        self._push_said: tuple = ()      # the groups' instances and their nodes, as last logged
        self._ingress_said: tuple = ()   # the ingress' groups' instances, as last logged
        self.resolver = cfg.fleet.resolver()   # GPU model names -> [fleet] types (window_by_type)
        self.typed = cfg.fleet.typed           # a mixed fleet: history per (tenant, type), nodes with a type
        self._reported_unknown: set[str] = set()
        self._capped: dict[str, int] = {}    # tenant -> GPUs of demand capped, as last logged (one line each)
        self._unlisted: dict[str, int] = {}  # names with no job on a whole view -> GPUs capped, as logged (one line)
        self._dropped: dict[str, int] = {}   # node -> GPUs left out of capacity, as last logged
        self._silent: dict[str, int] = {}   # GPUs unseen per node read as silent (mark_silent), as last logged
        hc = cfg.history
        if history is None and hc.incremental:   # in memory only; the runtime passes one persisted on disk
            history = History(self.step_s, max(cfg.cycle.history_steps, hc.keep_steps or 0),
                              overlap_steps=hc.overlap_steps,
                              chunk_steps=hc.backfill_chunk_steps, series="typed" if self.typed else "plain")
        self.history = history
        self.samples = 0        # samples read from Prometheus so far (bench, metrics)
        self._series_seen = 0   # most series in one range answer so far (sizes later requests)
        self.requests = 0

    # ---- queries ----------------------------------------------------------------------------
    def _call(self, fn, query: str, *args, **kwargs) -> object:
        """One request through PrometheusConnect; every way it can fail becomes a SourceError."""
        try:
            return fn(query, *args, **kwargs)
        except ResponseTooLarge as exc:
            raise AnswerTooLarge(f"prometheus {self.shown_url}: {exc} [query {query!r}]") from None
        except requests.exceptions.JSONDecodeError:
            why = "the answer is not JSON (an HTML error page or a proxy in the way?)"
        except (requests.RequestException, PrometheusApiClientException) as exc:
            why = str(exc)
        except (KeyError, TypeError, IndexError) as exc:
            why = f"the answer has no data.result ({type(exc).__name__}: {exc})"
        if len(why) > 300:
            why = why[:300] + "..."
        raise SourceError(redact_text(f"prometheus {self.shown_url}: {why} [query {query!r}]"))

    def _shaped(self, shape: TypeAdapter, raw: Any, what: str, query: str) -> list:
        """The answer's data.result checked against `shape` (labels strings, samples [time, "value"] pairs), or one
        SourceError line naming the server, the first misshapen place and the query."""
        try:
            return shape.validate_python(raw)
        except ValidationError as exc:
            raise SourceError(f"prometheus {self.shown_url}: {_shape_error(exc, what)} [query {query!r}]") from None

    def _instant(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant vector, checked: labels are strings, every value a finite count >= 0."""
        raw = self._call(self.prom.custom_query, query, params={"time": f"{at:.3f}"})
        self.requests += 1
        items = self._shaped(_VECTOR, raw, "instant vector", query)
        values = _numbers([it["value"][1] for it in items], query)
        self.samples += len(values)
        return [(it["metric"], float(v)) for it, v in zip(items, values)]

    def _range(self, query: str, start: float, end: float) -> Iterator[tuple[list[dict[str, str]], np.ndarray,
                                                                            np.ndarray, np.ndarray]]:
        """A range matrix, chunked under the point limit and checked like _instant, one answer at a time.

        Flat, for speed at thousands of series: per answer, (labels of each series, series index of each sample,
        sample times, sample values). A series split over answers appears once in each. Yielded as each answer
        is read, so that the caller folds it in before the next one is asked for: at 10,000 tenants a backfill
        chunk is millions of samples, and holding them all (then their concatenation) at once was the daemon's
        peak of memory.
        """
        steps = self._steps_per_request()
        t = start
        while t <= end:
            hi = min(end, t + (steps - 1) * self.step_s)
            try:
                raw = self._call(self.prom.custom_query_range, query, dt.datetime.fromtimestamp(t, dt.timezone.utc),
                                 dt.datetime.fromtimestamp(hi, dt.timezone.utc), f"{self.step_s}s")
            except AnswerTooLarge:
                if steps == 1:
                    raise
                steps = max(1, steps // 2)      # more series than expected: ask for fewer steps at a time
                log.info("answer over max_response_mb: %d steps per request for %r", steps, query)
                continue
            finally:
                self.requests += 1
            items = self._shaped(_MATRIX, raw, "range matrix", query)
            del raw   # the answer as parsed: its checked copy is what is read from here on
            flat = [p for it in items for p in it["values"]]
            self._series_seen = max(self._series_seen, len(items))
            labels = [it["metric"] for it in items]
            series = np.repeat(np.arange(len(items), dtype=np.int64), [len(it["values"]) for it in items])
            times = np.fromiter((p[0] for p in flat), dtype=float, count=len(flat))
            values = _numbers([p[1] for p in flat], query)
            self.samples += len(flat)
            del items, flat
            t = hi + self.step_s
            yield labels, series, times, values
            del labels, series, times, values   # the caller has summed them in: not held during the next read

    def _steps_per_request(self) -> int:
        """Steps per query_range request: at most chunk_steps, and few enough that the answer for the
        tenants known or seen so far fits max_response_mb (about 40 bytes a sample, with room to spare)."""
        budget = self.pc.max_response_mb * 2**20 / 40
        series = max(1, len(self.known), self._series_seen)
        return int(max(1, min(MAX_POINTS, self.pc.chunk_steps, budget // series)))

    def _label(self, labels: dict[str, str]) -> str | None:
        """The tenant a series names. Where its label is a namespace a Kubernetes actuator maps (namespace_tenants),
        the namespace's tenant, as the actuator reads the pods; a namespace called like a tenant whose namespace is
        another is ``@namespace:<name>``, no tenant ('@' is refused in a tenant's name). Read as the name it is, a
        tenant 'team-a' on namespace 'ml-prod' had 0 GPUs of demand (its GPUs an unknown 'ml-prod''s) and a
        namespace called 'team-a' passed its GPUs off as team-a's. Beside a Slurm actuator (account_tenants) the
        values are accounts, read as the actuator reads a job's: the account's tenant, ``@account:<name>`` for
        an account called like a tenant whose account is another."""
        v = labels.get(self.pc.tenant_label)
        if v is None or self.tenant_of_value is None:
            return v
        if self.value_kind == "account":
            v = v.lower()   # Slurm's accounts are case-insensitive (tenant_accounts: as Slurm spells them)
        return named_tenant(v, self.tenant_of_value, self.tiers, self.value_kind)

    def _grid(self, query: str, start: float, end: float, n: int,
              key: Callable[[dict[str, str]], object] | None = None) -> tuple[dict, np.ndarray]:
        """query_range on the step grid: {tenant label (None: none): row} and a rows x n array.

        Series that share a tenant are summed; a step with no sample stays NaN. `key` groups the series
        another way (window_by_type: by (tenant, GPU type)).
        """
        keys: dict = {}
        key = key or self._label
        total, seen = np.zeros((0, n)), np.zeros((0, n), dtype=bool)
        for answer in self._range(query, start, end):
            total, seen = self._fold(answer, keys, key, total, seen, start)
            del answer   # summed in: not held while the next one is read
        total[~seen] = np.nan
        return keys, total

    def _fold(self, answer: tuple[list[dict[str, str]], np.ndarray, np.ndarray, np.ndarray], keys: dict,
              key: Callable[[dict[str, str]], object], total: np.ndarray, seen: np.ndarray,
              start: float) -> tuple[np.ndarray, np.ndarray]:
        """One range answer summed into `total` (rows: `keys`, which it adds to) and marked in `seen`."""
        labels, series, ts, v = answer
        n = total.shape[1]
        row_of = np.array([keys.setdefault(key(lb), len(keys)) for lb in labels], dtype=np.int64)
        if len(keys) > len(total):   # series of new keys in this answer (usually all in the first one)
            more = len(keys) - len(total)
            total = np.vstack([total, np.zeros((more, n))])
            seen = np.vstack([seen, np.zeros((more, n), dtype=bool)])
        i = np.rint((ts - start) / self.step_s).astype(np.int64)
        ok = (i >= 0) & (i < n)
        if not ok.any():
            return total, seen
        i, series, v = i[ok], series[ok], v[ok]
        # the answer covers steps lo..hi-1 of the grid: summed on that part alone, then added in
        lo, hi = int(i.min()), int(i.max()) + 1
        flat = row_of[series] * (hi - lo) + (i - lo)
        size = len(keys) * (hi - lo)
        total[:, lo:hi] += np.bincount(flat, weights=v, minlength=size).reshape(len(keys), hi - lo)
        seen[:, lo:hi] |= np.bincount(flat, minlength=size).reshape(len(keys), hi - lo) > 0
        return total, seen

    def window(self, start: float, end: float, tenants: Iterable[str] = ()) -> pd.DataFrame:
        """Allocated GPUs per tenant on the step grid from start to end (inclusive).

        Idle is zero, missing is missing: at a step where the cluster was scraped (capacity_query has a
        value) a tenant without allocated GPUs is 0; a tenant with a GPU whose series went stale
        (missing_query: its node's scrape failed or the exporter dropped it) is NaN, and so is every
        tenant at a step with no scrape at all. Columns: every tenant seen, configured or in `tenants`.
        """
        n = int(round((end - start) / self.step_s)) + 1
        push, stood, refused = self._pushed_window(start, end, n)
        d_keys, demand, touched = self._read("demand", start, end, n, push, stood)
        _, capacity, _ = self._read("capacity", start, end, n, push, stood)
        fresh = (np.nan_to_num(capacity) > 0).any(axis=0) & ~refused
        self._within_capacity(demand, capacity, start, "demand", ~refused)
        m_keys, missing, m_touched = self._read("missing", start, end, n, push, stood)
        names = sorted((set(d_keys) | set(m_keys) | set(self.known) | set(tenants)) - {None})
        col = {t: j for j, t in enumerate(names)}
        values = np.zeros((n, len(names)))
        d = [(col[k], r) for k, r in d_keys.items() if k is not None]
        if d:
            cols, rows = map(list, zip(*d))
            values[:, cols] = np.nan_to_num(demand, nan=0.0, copy=False)[rows].T   # one copy of a window, not two
        m = [(col[k], r) for k, r in m_keys.items() if k is not None]
        if m:
            cols, rows = map(list, zip(*m))
            part = values[:, cols]
            part[np.nan_to_num(missing[rows].T) > 0] = np.nan
            values[:, cols] = part
        for t, hit in [*touched.items(), *m_touched.items()]:   # on a pushed group's instance while it stood
            if t in col:
                values[hit, col[t]] = np.nan
        values[~fresh, :] = np.nan
        idx = pd.date_range(pd.Timestamp(start, unit="s", tz="UTC"), periods=n, freq=f"{self.step_s}s", name="time")
        return pd.DataFrame(values, index=idx, columns=pd.Index(names, name="tenant"))

    def _query(self, which: str, push: Pushed | None = None, only: bool = False, placeholder: str = EXPORTER) -> str:
        """``<which>_query`` as sent, its placeholder's selector (the exporter's, or the ingress') narrowed by the
        Pushgateway groups `push` (default: this cycle's): their series left out, or (`only`) only the series at their
        instances read."""
        push = self._push if push is None else push
        sel = {EXPORTER: self.pc.exporter_selector, INGRESS: self.pc.ingress_selector}
        if push.instances:
            sel[placeholder] += ", " + (push.only() if only else push.excluded())
        return substitute(getattr(self.pc, f"{which}_query"), sel)

    def _read(self, which: str, start: float, end: float, n: int, push: Pushed, stood: np.ndarray,
              key: Callable[[dict[str, str]], object] | None = None) -> tuple[dict, np.ndarray, dict]:
        """(keys, rows, touched): _grid of ``<which>_query`` with the groups' series left out, and the series at their
        instances read apart: added back where no group stood, their keys `touched` where one did (add_back)."""
        keys, rows = self._grid(self._query(which, push), start, end, n, key)
        if not push.instances:
            return keys, rows, {}
        at_keys, at_rows = self._grid(self._query(which, push, only=True), start, end, n, key)
        rows, touched = add_back(keys, rows, at_keys, at_rows, stood)
        return keys, rows, touched

    def _unselectable(self, push: Pushed) -> Pushed:
        """`push` with a reason (Pushed.whole) where a query this source reads has no $exporter to narrow: a
        recorded series (recording_rules) has the job and instance aggregated away, pushed GPUs and all."""
        reads = ("demand_by_type", "capacity_by_type", "nodes_by_type") if self.typed else ("demand",)
        blind = [q for q in reads + ("missing", "capacity", "freshness", "nodes")
                 if EXPORTER not in getattr(self.pc, f"{q}_query")]
        if push.instances and not push.whole and blind:
            return dataclasses.replace(push, whole=f"{blind[0]}_query reads series without {EXPORTER} (recording "
                                       "rules aggregate the job and instance away), so their series cannot be left "
                                       "out of it")
        return push

    def _pushed_window(self, start: float, end: float, n: int) -> tuple[Pushed, np.ndarray, np.ndarray]:
        """(the groups that passed as the exporter from start to end, the steps where one stood, the steps read as not
        scraped). The groups' series are left out by their instances (Pushed). Where one whose series cannot be
        (Pushed.whole: no instance in its path, or past the bounds) stood, every tenant is missing, never the pushed
        GPUs. A group deleted since still has its steps in Prometheus, which a history read after it (the gap refused
        cycles left, a backfill) takes in."""
        none = np.zeros(n, dtype=bool)
        if self.pushed is None:
            return Pushed(), none, none
        keys, rows = self._grid(f"count({self.pushed}) by (instance)", start, end, n,
                                key=lambda lb: lb.get("instance", ""))
        here = {k: np.nan_to_num(rows[r]) > 0 for k, r in keys.items()}
        bare = here.pop("", none)
        stood = np.logical_or.reduce([none, *here.values()])
        push = self._unselectable(Pushed.of([{"instance": k} for k in here]))
        if push.whole:
            return Pushed(), none, stood | bare
        return push, stood, bare

    def _pushed_now(self, at: float) -> Pushed:
        """The groups passing as the exporter now, whose series this cycle's reads leave out. A SourceError (the plan
        is kept, nothing new preempted) where they cannot be left out (Pushed.whole, _unselectable): their series
        would be read as GPUs, demand, capacity and nodes of any tenant."""
        if self.pushed is None:
            return Pushed()
        push = self._unselectable(Pushed.of([labels for labels, _ in self._instant(self.pushed, at)]))
        if push.whole:
            raise SourceError(pushed_refusal(self.shown_url, self.pc.exporter_selector, list(push.groups),
                                             "refusing the answers", why=push.whole))
        self._report_pushed(push, at)
        return push

    def _report_pushed(self, push: Pushed, at: float) -> None:
        """One WARNING line when the groups left out, or the nodes their instances name, change (INFO once none
        stands): the nodes' GPUs are not counted while they stand, and their tenants read as missing."""
        nodes: tuple[str, ...] = ()
        if push.instances:
            nodes = tuple(sorted({n for labels, _ in self._instant(self._query("nodes", push, only=True), at)
                                  if (n := labels.get(self.pc.node_label))}))
        said = (push.instances, nodes)
        if said != self._push_said and push.instances:
            log.warning("%s", left_out_line(push, nodes))
        elif said != self._push_said:
            log.info("no Pushgateway group passes as the exporter's series any more")
        self._push_said = said

    def _within_capacity(self, demand: np.ndarray, capacity: np.ndarray, start: float, what: str,
                         judged: np.ndarray | None = None) -> None:
        """Refuse (SourceError naming the step and both totals) answers whose tenants hold more GPUs at a scraped
        step than OVER_FACTOR x capacity_query's count there (+ OVER_SLACK_GPUS): the two do not count the same
        GPUs (a query that sums memory or a percentage), and a plan on them would hold, and preempt, for GPUs that
        do not exist. Steps without a capacity sample are not judged (they are missing anyway), nor those `judged`
        leaves out (False)."""
        if demand.size == 0 or capacity.size == 0:
            return
        cap = np.nansum(capacity, axis=0)
        used = np.nansum(demand, axis=0)
        bad = (cap > 0) & (used > OVER_FACTOR * cap + OVER_SLACK_GPUS)
        if judged is not None:   # steps a Pushgateway group passed as the exporter are missing, not judged
            bad &= judged
        if bad.any():
            i = int(np.argmax(bad))
            at = pd.Timestamp(start + i * self.step_s, unit="s", tz="UTC")
            raise SourceError(f"prometheus {self.shown_url}: {what}_query counts {used[i]:,.0f} GPUs for the tenants "
                              f"at {at:%Y-%m-%d %H:%M} UTC, capacity_query {cap[i]:,.0f}: they do not count the "
                              "same GPUs (a query summing memory or a percentage?); refusing the answers "
                              f"[query {self.pc.query(what)!r}]")

    # ---- a mixed fleet: per (tenant, GPU type) ---------------------------------------------------
    def _type_of(self, labels: dict[str, str]) -> str:
        """The GPU type of a series: its ``type_label`` (DCGM's modelName) through [fleet] types and aliases; a
        name that matches none is ``unknown`` and remembered in unknown_types (reported, never dropped)."""
        return self.resolver(labels.get(self.pc.type_label))

    @property
    def unknown_types(self) -> list[str]:
        """Model names seen in the typed queries that no [fleet] type or alias matches (counted as unknown)."""
        return sorted(self.resolver.unmatched)

    def window_by_type(self, start: float, end: float, tenants: Iterable[str] = (),
                       which: str = "demand_by_type", flat: bool = False, types: Iterable[str] = ()) -> pd.DataFrame:
        """GPUs per (tenant, GPU type) on the step grid from start to end (inclusive): ``<which>_query``
        (demand_by_type, or usage_by_type). Columns: a two-level MultiIndex (tenant, type) over every tenant (as window)
        and every type, the configured ones and any seen (``unknown`` included); in a one-model cluster the one
        type is ``gpu``. As in window: idle is 0 at a scraped step (a tenant with no GPU of a type has 0 of it),
        a tenant that missing_query lists is NaN on every type there, and a step with no scrape is NaN.
        `flat`: one column level instead, named ``<tenant>@<type>`` as the policy names a typed forecast series
        (daemon/policy/fleet.py's series_name of a tenant's work on that one type). `types`: types listed even when
        none is configured or seen in this window (the history's older columns: 0 at a scraped step, not NaN)."""
        n = int(round((end - start) / self.step_s)) + 1
        types_extra = set(types)
        push, stood, refused = self._pushed_window(start, end, n)
        d_keys, demand, touched = self._read(which, start, end, n, push, stood,
                                             key=lambda lb: (self._label(lb), self._type_of(lb)))
        _, capacity, _ = self._read("capacity", start, end, n, push, stood)
        fresh = (np.nan_to_num(capacity) > 0).any(axis=0) & ~refused
        self._within_capacity(demand, capacity, start, which, ~refused)
        m_keys, missing, m_touched = self._read("missing", start, end, n, push, stood)
        gone: dict = {}   # tenants on a pushed group's instance while it stood, any type
        for t, hit in [*((k[0], h) for k, h in touched.items()), *m_touched.items()]:
            gone[t] = gone.get(t, False) | hit
        d_keys = {k: r for k, r in d_keys.items() if k[0] is not None}
        names = sorted((set(k[0] for k in d_keys) | set(m_keys) | set(self.known) | set(tenants)) - {None})
        types = list(self.cfg.fleet.types) or [self.resolver(None)]
        types += sorted(({k[1] for k in d_keys} | set(types_extra)) - set(types))
        cols = pd.MultiIndex.from_product([names, types], names=["tenant", "type"])
        at = {c: j for j, c in enumerate(cols)}
        values = np.zeros((n, len(cols)))
        for k, r in d_keys.items():
            values[:, at[k]] = np.nan_to_num(demand[r], nan=0.0)
        for t, r in m_keys.items():
            if t is None:
                continue
            stale = np.nan_to_num(missing[r]) > 0
            for typ in types:
                values[stale, at[(t, typ)]] = np.nan
        for t, hit in gone.items():
            for typ in (types if t in names else ()):
                values[hit, at[(t, typ)]] = np.nan
        values[~fresh, :] = np.nan
        self._report_unknown()
        idx = pd.date_range(pd.Timestamp(start, unit="s", tz="UTC"), periods=n, freq=f"{self.step_s}s", name="time")
        if flat:
            return pd.DataFrame(values, index=idx,
                                columns=pd.Index([f"{t}{SERIES_SEP}{typ}" for t, typ in cols], name="tenant"))
        return pd.DataFrame(values, index=idx, columns=cols)

    def _report_unknown(self) -> None:
        """Log each model name that no [fleet] type or alias matches once (a typo in an alias must be seen, and not
        every cycle); its GPUs are counted as type ``unknown``, never dropped."""
        new = self.resolver.unreported(self._reported_unknown)
        if new:
            log.warning("GPU models not in [fleet] types/aliases, counted as 'unknown': %s", new)

    def _typed_window(self, start: float, end: float, names: Iterable[str] = ()) -> pd.DataFrame:
        """The history's fetch on a mixed fleet: ``<tenant>@<type>`` columns (window_by_type, flat) for the names
        asked for (the history's columns: 0 at a scraped step, not NaN) and each (tenant, type) with GPUs in this
        window. Only types a tenant used get a series, as the simulator has one per set of types a tenant's work
        accepts: a forecast of series that are 0 throughout would cost (tenants x types) for nothing."""
        names = list(names)
        tenants, types = set(), set()
        for name in names:
            tenant, sep, typ = name.rpartition(SERIES_SEP)
            if sep:
                tenants.add(tenant)
                types.add(typ)
            else:
                tenants.add(name)
        frame = self.window_by_type(start, end, tenants, flat=True, types=types)
        active = (np.nan_to_num(frame.to_numpy()) > 0).any(axis=0) | frame.columns.isin(names)
        return frame.loc[:, active]

    def _nodes_by_type(self, at: float) -> Nodes:
        """A mixed fleet's node view from Prometheus (nodes_by_type_query), when no scheduler lists the nodes: each
        node's GPUs, its type (its GPUs' model; the most common one if it reports several) and its free GPUs (those
        no tenant holds). Nothing is held or draining as far as Prometheus knows."""
        book: dict[str, dict] = {}
        for labels, v in self._instant(self._query("nodes_by_type"), at):
            node = labels.get(self.pc.node_label)
            if not node:
                continue
            b = book.setdefault(node, {"gpus": 0, "free": 0, "types": {}})
            b["gpus"] += int(v)
            if not labels.get(self.pc.tenant_label):
                b["free"] += int(v)
            typ = self._type_of(labels)
            b["types"][typ] = b["types"].get(typ, 0) + int(v)
        self._report_unknown()
        names = sorted(book)
        return Nodes(names=np.array(names, dtype=object),
                     gpus=np.array([book[n]["gpus"] for n in names], dtype=np.int64),
                     free=np.array([book[n]["free"] for n in names], dtype=np.int64),
                     draining=np.zeros(len(names), dtype=np.int64),
                     held_by=np.full(len(names), -1, dtype=np.int64),
                     gpu_type=np.array([max(sorted(book[n]["types"]), key=book[n]["types"].get) for n in names],
                                       dtype=object))

    def usage_by_type(self, start: float, end: float, tenants: Iterable[str] = ()) -> pd.DataFrame:
        """GPUs in use (utilization above 0) per (tenant, type): usage_by_type_query, framed as window_by_type."""
        return self.window_by_type(start, end, tenants, which="usage_by_type")

    def capacity_by_type(self, at: float | None = None) -> dict[str, int]:
        """Healthy GPUs per type now (capacity_by_type_query); every configured type is listed, 0 when none."""
        out = {t: 0 for t in self.cfg.fleet.types}
        for labels, v in self._instant(self._query("capacity_by_type"), self.clock() if at is None else at):
            typ = self._type_of(labels)
            out[typ] = out.get(typ, 0) + int(v)
        return out

    def history_range(self, span: pd.Timedelta) -> pd.DataFrame:
        end = self._aligned(self.clock())
        return self.window(end - span.total_seconds(), end)

    def _aligned(self, t: float) -> float:
        return float(np.floor(t / self.step_s) * self.step_s)

    # ---- Source interface ---------------------------------------------------------------------
    def collect(self, history_steps: int) -> Collected:
        """History (incremental when a History is kept) and the live state.

        The live allocation is the newest history step (the same evaluation as an instant query at
        `now`), so a cycle reads each tenant's demand once; capacity and freshness are two instant queries.
        """
        now = self._aligned(self.clock())
        self._push = self._pushed_now(now)   # before the history takes in this window
        fetch, names = (self._typed_window, []) if self.typed else (self.window, self.known)
        if self.history is not None:
            self.history.update(fetch, now, names)
            history = self.history.frame(history_steps)
        else:
            history = fetch(now - (history_steps - 1) * self.step_s, now, names)
        # a mixed fleet's history is per (tenant, type), "<tenant>@<type>"; the live state stays per tenant
        # (a configured tenant with no GPU of any type in the window has no series but is in the state, at 0)
        owner = [c.rpartition(SERIES_SEP)[0] for c in history.columns] if self.typed else list(history.columns)
        tenants = tuple(dict.fromkeys(owner + self.known)) if self.typed else tuple(owner)
        cap = self._instant(self._query("capacity"), now)
        capacity = int(sum(v for _, v in cap))   # "this step was scraped"; the plan's capacity is bounded below
        fresh = self._instant(self._query("freshness"), now)
        newest = max((v for _, v in fresh), default=float("-inf"))
        staleness = max(0.0, self.clock() - newest) if np.isfinite(newest) else float("inf")
        scraped = capacity > 0 and staleness <= self.cfg.cycle.stale_after_s
        last_is_now = len(history) > 0 and history.index[-1].timestamp() == now
        if scraped and last_is_now:
            used = history.iloc[-1].to_numpy(dtype=float, copy=True)
            if self.typed:  # a tenant's GPUs summed over its types; missing on any type is missing
                codes = pd.factorize(pd.Index(owner))[0]   # in first-seen order, as `tenants`; the rest 0
                gaps = np.bincount(codes, weights=np.isnan(used), minlength=len(tenants)) > 0
                total = np.bincount(codes, weights=np.nan_to_num(used), minlength=len(tenants))
                used = np.where(gaps, np.nan, total)
        else:
            used = np.full(len(tenants), np.nan)
        jobs = self._jobs(tenants)
        nodes = self._nodes(tenants, now)
        if self.jobs_provider is not None and self.nodes_provider is not None and nodes is not None:
            before = used   # exporters silent (all or some GPUs) past the missing query's 15 minutes: tenants missing
            used, silent = mark_silent(used, self._reporting(cap, now), self.pc.node_label, nodes, jobs)
            history = self._history_silent(history, owner, tenants, np.isnan(used) & ~np.isnan(before), last_is_now)
            self._report_silent(silent)
        missing = tuple(t for t, u in zip(tenants, used) if not np.isfinite(u))
        used, capped, stray, unlisted = (bound_demand(used, tenants, jobs, self._covered(tenants, jobs), self.tiers)
                                         if self.jobs_provider is not None else (used, {}, {}, {}))   # by the jobs
        self._report_capped(capped, unlisted)
        dropped: dict[str, int] = {}
        if self.nodes_provider is not None and nodes is not None:   # the scheduler's nodes bound the capacity
            capacity, dropped = bound_capacity(cap, self.pc.node_label, nodes)
            self._report_dropped(dropped, stray)
        pending = np.zeros(len(tenants))
        if len(jobs):
            q = ~jobs.running
            pending = np.bincount(jobs.tenant[q], weights=jobs.gpus[q], minlength=len(tenants)).astype(float)
        tiers = tuple(self.tiers.get(t, "normal") for t in tenants)
        state = ClusterState(at=pd.Timestamp(now, unit="s", tz="UTC"), tenants=tenants, tiers=tiers,
                             capacity=capacity, used=used, pending=pending, jobs=jobs, staleness_s=staleness,
                             missing=missing, nodes=nodes, request_rate=self._request_rate(tenants, now),
                             capped=capped, capacity_dropped=sum(dropped.values()))
        if missing:
            log.warning("no fresh sample for %s: %s", plural(len(missing), "tenant"), ", ".join(missing[:10]))
        return Collected(history, state)

    @staticmethod
    def _history_silent(history: pd.DataFrame, owner: list[str], tenants: tuple[str, ...], silent: np.ndarray,
                        last_is_now: bool) -> pd.DataFrame:
        """The history with its last step (this cycle's `used`) NaN for the tenants mark_silent made missing, in a
        copy (the History's frame is read-only). Older steps stay as Prometheus says: which nodes the scheduler
        listed then is not known, so a silent node's tenants read 0 there once the missing query forgets them."""
        if not silent.any() or not last_is_now:
            return history
        gone = {tenants[i] for i in np.flatnonzero(silent)}
        vals = history.to_numpy(dtype=float, copy=True)
        vals[-1, [i for i, o in enumerate(owner) if o in gone]] = np.nan
        return pd.DataFrame(vals, index=history.index, columns=history.columns, copy=False)

    def _reporting(self, cap: list[tuple[dict[str, str], float]], at: float) -> list[tuple[dict[str, str], float]]:
        """GPUs reporting per node now, for mark_silent: the capacity answer where it names nodes (node_label on
        every series), else nodes_query's (one instant query; the default capacity_query, `count(...)`, and the
        recorded `cluster:gpuas_gpus:count` name none, and without this an exporter silent past the missing query's
        15 minutes read its tenants as idle). A failure raises as any query's does: the cycle is stale."""
        if cap and all(labels.get(self.pc.node_label) for labels, _ in cap):
            return cap
        return self._instant(self._query("nodes"), at)

    def _report_silent(self, silent: dict[str, tuple[int, int]]) -> None:
        """One log line when the silent nodes or their unseen GPUs change, not every cycle (a job starting or ending
        there moves only the GPUs in use, shown but not a change)."""
        unseen = {n: u for n, (u, _) in silent.items()}
        if unseen != self._silent and unseen:
            shown = ", ".join(f"{n}: {u} of {g} unseen" for n, (u, g) in list(silent.items())[:10])
            log.warning("no GPU series for %s in use by running jobs on %s the scheduler lists up (%s): their "
                        "tenants are missing, not idle (exporter down or its scrape broken, or a GPU lost: off the "
                        "bus, excluded, MIG re-partitioned?)", plural(sum(unseen.values()), "GPU"),
                        plural(len(unseen), "node"), shown)
        elif unseen != self._silent:
            log.info("every node the scheduler lists with running GPU jobs reports GPU series again")
        self._silent = unseen

    def _covered(self, tenants: tuple[str, ...], jobs: Jobs) -> np.ndarray:
        """Per tenant, whether the scheduler's view covers it: a configured tenant, or one it lists a job for. A
        namespace that is no tenant may have pods a Kubernetes view does not list (it lists tenants' pods only);
        its GPUs stay in the load, uncapped, and it gets no hold. A view listing every job (jobs_whole: squeue) covers
        every name: one with no job runs none here (another cluster's, a stale series; counted, "load=1500%")."""
        covered = np.array([self.jobs_whole or t in self.tiers for t in tenants], dtype=bool)
        covered[np.unique(jobs.tenant)] = True
        return covered

    def _report_capped(self, capped: dict[str, int], unlisted: dict[str, int]) -> None:
        """One log line per tenant whose capped demand changed, not every cycle; ``unlisted`` in one (unlisted_line)."""
        per = {t: g for t, g in capped.items() if t not in unlisted}
        for t in sorted(set(per) | set(self._capped)):
            now, before = per.get(t, 0), self._capped.get(t, 0)
            if now != before and now:
                log.warning("tenant %s: Prometheus reports %d GPU(s) more than its running jobs on the scheduler "
                            "hold; demand capped at its jobs' GPUs (series from outside the exporter?)", t, now)
            elif now != before:
                log.info("tenant %s: demand no longer above its jobs' GPUs on the scheduler", t)
        if unlisted != self._unlisted:
            log.log(logging.WARNING if unlisted else logging.INFO, "%s", unlisted_line(unlisted))
        self._capped, self._unlisted = per, unlisted

    def _report_dropped(self, dropped: dict[str, int], stray: dict[str, int]) -> None:
        """One log line when the GPUs left out of capacity (nodes the scheduler does not list) change."""
        if dropped != self._dropped and dropped:
            log.warning("%s", dropped_line(dropped, stray))
        elif dropped != self._dropped:
            log.info("every GPU the metrics report is on a node the scheduler lists again")
        self._dropped = dropped

    def _request_rate(self, tenants: tuple[str, ...], now: float) -> np.ndarray | None:
        """Requests per second per tenant (request_rate_query, one instant query), in `tenants` order, or None.

        None (unknown) when no query is configured or its answer is unusable (no answer, malformed, a value NaN,
        infinite or negative): the rates only feed the shadow report, so a bad answer is logged and the cycle goes
        on; it is never read as 0. A tenant absent from the answer is NaN (unknown), not 0: an ingress that has not
        seen a tenant says nothing of its rate. Series that share a tenant are summed; one without the tenant
        label is ignored.

        Only the ingress' own series are read (`{$ingress}`, source.prometheus.ingress_selector; a query without it
        is refused at config load): Prometheus scrapes tenant pods too, and a pod exposing the ingress' metric name
        for its namespace would add to its rate. The rates are read nowhere but the shadow report (not the plan,
        the limits, the skill gate or the inference sizing), so a forged rate would move a tenant's
        `throttled_share` there (its limit read as below its requests), the figure an operator weighs before
        setting limits or going live.
        """
        if self.pc.request_rate_query is None:
            return None
        try:
            sel = pushed_selector(self.pc.ingress_selector)
            push = Pushed.of([labels for labels, _ in self._instant(sel, now)]) if sel is not None else Pushed()
            if push.whole:   # a Pushgateway group passes as the ingress: its pushes would be any tenant's requests
                raise SourceError(pushed_refusal(self.shown_url, self.pc.ingress_selector, list(push.groups),
                                                 "the request rates are unknown while it does", "the ingress",
                                                 why=push.whole))
            answer = self._instant(self._query("request_rate", push, placeholder=INGRESS), now)
            # the series at a group's instance: its pushes, or an ingress scraped under that instance
            at = self._instant(self._query("request_rate", push, only=True, placeholder=INGRESS), now) \
                if push.instances else []
        except SourceError as exc:
            log.warning("request rates unknown this cycle: %s", exc)
            return None
        if push.instances != self._ingress_said and push.instances:
            log.warning("%s", left_out_line(push))
        self._ingress_said = push.instances
        col = {t: i for i, t in enumerate(tenants)}
        rate = np.full(len(tenants), np.nan)
        for labels, v in answer:
            i = col.get(self._label(labels))
            if i is not None:
                rate[i] = v if np.isnan(rate[i]) else rate[i] + v
        for labels, _ in at:
            if (i := col.get(self._label(labels))) is not None:
                rate[i] = np.nan
        return rate

    def _jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """The job provider's jobs; a failed read is a SourceError (the cycle keeps its last plan and preempts
        nothing new), never an empty queue."""
        if self.jobs_provider is None:
            return Jobs.empty()
        try:
            return self.jobs_provider(tenants)
        except Exception as exc:  # whatever the scheduler's client raises (SlurmError, ApiException, ...)
            raise SourceError(f"cannot read the scheduler's jobs: {one_line(exc)}") from None

    def _nodes(self, tenants: tuple[str, ...], now: float) -> Nodes | None:
        """The node provider's view, or None (no provider, or it failed: then the policy counts GPUs; a failed
        read is not an empty cluster with everything free). A mixed fleet with no provider reads each node's type
        from Prometheus (_nodes_by_type), so the plan still says its holds per type."""
        if self.nodes_provider is None:
            return self._nodes_by_type(now) if self.typed else None
        try:
            return self.nodes_provider(tenants)
        except Exception as exc:  # whatever the scheduler's client raises: this cycle goes on without placement
            log.warning("cannot read the scheduler's nodes (%s): this cycle preempts by GPU counts, "
                        "without placement", one_line(exc))
            return None

    def node_names(self) -> set[str]:
        """Nodes that reported GPUs within a day (``known_nodes_query``, grouped by ``node_label``)."""
        return {n for labels, _ in self._instant(self._query("known_nodes"), self.clock())
                if (n := labels.get(self.pc.node_label))}
