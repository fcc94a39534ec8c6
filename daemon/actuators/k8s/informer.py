"""The daemon's Kubernetes view of pods and nodes, kept by list-then-watch instead of two full lists per cycle.

At 1,000 nodes and 10,000 pods a full list of every pod costs the apiserver and the daemon seconds each cycle
(bench/k8s_scale_bench.py). Here each kind is listed once (in pages), then watched from the list's resourceVersion
with bookmarks, in a thread of its own (``Reflector``); the cycle's reads of jobs and nodes take one ``Snapshot`` of
both stores under one lock; a node the daemon patched is in the store from the patch's answer. The watch is
re-opened from the last resourceVersion when the server ends it (its timeout); a 410 Gone (the version was compacted
away) leads to a fresh list; any other failure to a reconnect with a growing, jittered backoff.

A view whose watch is down is **stale**: ``ClusterView.snapshot`` raises ``ViewStale`` naming the kind, since
when and why, so the cycle keeps its last plan and preempts nothing new (the source reports a SourceError, as for
an apiserver that does not answer). Missing data is never an empty cluster.

Pods: live ones only (``LIVE_PODS``, as the lists before); nodes: all. With ``dra_max_objects``, the DRA kinds too
(DRA_KINDS, read by dra.py), at most that many of each, in reflectors whose staleness the snapshot says
(``Snapshot.dra_why``) rather than raise ViewStale for (the actuator refuses the read for it unless the kinds are
not served: actuator.DraUnread). Objects are the official client's models
without the fields the daemon never reads (POD_DROPPED, NODE_DROPPED: most of their size), and are replaced, never
changed, so a snapshot stays consistent while the watch goes on.
"""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kubernetes import client as k8s, watch as kwatch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("gpu_autoscaler.actuator.kubernetes.view")

LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"  # pods that hold (or wait for) their GPUs
PAGE = 500                # objects per list page: each page answers within the request timeout at any size
WATCH_S = 300             # the server ends each watch after about this (then it is re-opened, no list)
BACKOFF_S = (0.5, 30.0)   # first and longest wait before reconnecting after a failure
NOT_LISTED = "not listed yet"


# what the daemon never reads of a pod or a node (view.py, node_holds.py, objects.py, flavors.py), dropped from the
# view: the server's field bookkeeping, a pod's conditions (but the scheduler's verdict: keep_verdict), container
# statuses and volumes, a node's image list
POD_DROPPED = (("metadata", "managedFields"), ("status", "containerStatuses"),
               ("status", "initContainerStatuses"), ("status", "ephemeralContainerStatuses"), ("spec", "volumes"))
NODE_DROPPED = (("metadata", "managedFields"), ("status", "images"))
# a ResourceClaim's devices' status (what the driver writes of each: network data and the like) is never read
CLAIM_DROPPED = (("metadata", "managedFields"), ("status", "devices"))
DRA_KINDS = ("resourceslices", "resourceclaims", "resourceclaimtemplates")
# what a tenant writes in its claims and templates that dra.py never reads: up to the apiserver's object size each
# (1.5 MB: annotations, opaque driver config, constraints, 32 requests of 32 CEL selectors of 10 KB), times
# dra_max_objects (20,000) kept
DRA_UNREAD = (("metadata", "annotations"), ("metadata", "labels"), ("metadata", "ownerReferences"))
CLAIM_SPEC_UNREAD = ("config",)
CONSTRAINT_KEPT = ("matchAttribute", "distinctAttribute", "requests")   # of each constraint (dra.py judges them)
REQUEST_UNREAD = ("tolerations", "capacity")
SELECTORS_KEPT = [{"cel": {"expression": "(not kept: dra.py reads only that there are selectors)"}}]


def trim_claim_spec(spec) -> None:
    """Of a ResourceClaimSpec (a claim's, or a template's claim), only what dra.py reads: each request's name,
    class, allocation mode and count, whether it has selectors (one short one stands for them all), and of each
    constraint the attribute it matches and the requests it names."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return
    for k in CLAIM_SPEC_UNREAD:
        devices.pop(k, None)
    if isinstance(devices.get("constraints"), list):   # at most 32, of names only
        devices["constraints"] = [{k: c[k] for k in CONSTRAINT_KEPT if k in c}
                                  for c in devices["constraints"] if isinstance(c, dict)]
    for req in devices.get("requests") or []:
        if not isinstance(req, dict):
            continue
        for part in (req.get("exactly"), *(req.get("firstAvailable") or [])):
            if isinstance(part, dict):
                for k in REQUEST_UNREAD:
                    part.pop(k, None)
                if part.get("selectors"):
                    part["selectors"] = SELECTORS_KEPT


def trim_claim(raw: dict) -> None:
    """A ResourceClaim as the view keeps it: its requests (trim_claim_spec) and its allocation's results only."""
    trim_claim_spec(raw.get("spec"))
    st = raw.get("status")
    if isinstance(st, dict):
        st.pop("reservedFor", None)
        alloc = st.get("allocation")
        if isinstance(alloc, dict):
            alloc.pop("nodeSelector", None)
            if isinstance(alloc.get("devices"), dict):
                alloc["devices"].pop("config", None)


def trim_template(raw: dict) -> None:
    """A ResourceClaimTemplate as the view keeps it: the requests of the claim it makes (trim_claim_spec)."""
    spec = raw.get("spec")
    if isinstance(spec, dict):
        spec.pop("metadata", None)
        trim_claim_spec(spec.get("spec"))


def keep_verdict(raw: dict) -> None:
    """Of a pod's conditions, only the scheduler's verdict that it found no node (PodScheduled False: type, status,
    reason, message; view.scheduler_verdict reads it), so the view holds one small condition per unplaced pod, none
    for a placed one."""
    st = raw.get("status")
    if not isinstance(st, dict) or "conditions" not in st:
        return
    kept = [{k: c.get(k) for k in ("type", "status", "reason", "message")} for c in st.pop("conditions") or []
            if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"]
    if kept:
        st["conditions"] = kept


def has_pod_anti_affinity(pod) -> bool:
    """Whether a pod has pod anti-affinity: the pods the view marks (Snapshot.anti_pods), normally few, whose required
    anti-affinity keeps a pending pod it matches out of their domains (pod_affinity.BoundAnti)."""
    aff = pod.spec.affinity if pod.spec is not None else None
    return aff is not None and aff.pod_anti_affinity is not None


def _newer(a: str | None, b: str | None) -> bool:
    """Whether version `a` is newer than `b`: etcd's revisions are numbers; anything else counts as not newer."""
    return bool(a and b and a.isdigit() and b.isdigit() and int(a) > int(b))


def _body(resp) -> str:
    return resp.data.decode("utf-8", errors="replace") if isinstance(resp.data, bytes) else str(resp.data)


class ViewStale(RuntimeError):
    """The view cannot be trusted now (not listed yet, or a watch down): the cycle must not act on it."""


@dataclass(frozen=True)
class Snapshot:
    """Both stores at one instant: what one cycle reads."""

    pods: list
    nodes: list
    at: float  # time.time() when taken
    # the pods with pod anti-affinity (has_pod_anti_affinity), kept as the watch goes: a cycle that needs them need
    # not look at every pod (at 100,000 pods that took 0.1 s a cycle)
    anti_pods: list | None = None
    # the DRA kinds (DRA_KINDS -> their objects) when the view keeps them and all are fresh; else None, and
    # dra_why says why (not kept: ""); dra_over: the kinds with objects beyond the cap, and how many
    dra: dict[str, list] | None = None
    dra_why: str = ""
    dra_over: dict[str, int] | None = None
    dra_over_ns: dict[str, dict[str, int]] | None = None   # kind -> namespace -> its objects beyond the caps


class Reflector:
    """One kind (pods or nodes) listed, then watched, in a store of key -> object.

    ``step()`` is one turn of the loop (a list, or one watch until it ends), so a test can drive it on a real
    apiserver without a thread; ``run()`` repeats it with backoff until stopped."""

    def __init__(self, kind: str, list_func: Callable, *, field_selector: str | None = None,
                 request_timeout_s: float = 10.0, watch_s: int = WATCH_S,
                 dropped: tuple[tuple[str, ...], ...] = (("metadata", "managedFields"),),
                 trim: Callable[[dict], None] | None = None, mark: Callable[[object], bool] | None = None,
                 max_objects: int | None = None, model: type | None = None,
                 max_per_namespace: int | None = None) -> None:
        self.kind = kind
        # at most this many objects kept (a kind tenants create, such as ResourceClaims: each one is memory here),
        # and at most `max_per_namespace` of one namespace (so one tenant's objects never fill the cap and push
        # another's out); those beyond are counted in `over`, per namespace in `over_ns`, not kept
        self.max_objects = max_objects
        self.max_per_namespace = max_per_namespace
        self.capped = max_objects is not None or max_per_namespace is not None
        self.over = 0
        self.over_ns: dict[str, int] = {}
        self.kept_ns: dict[str, int] = {}
        self.mark = mark
        self.marked: dict[str, object] = {}   # key -> object, those of the store `mark` says yes to
        self.trim = trim
        self.dropped = dropped
        self.list_func = list_func
        self.field_selector = field_selector
        self.request_timeout_s = request_timeout_s
        self.watch_s = watch_s
        self.api_client = list_func.__self__.api_client  # a bound method of CoreV1Api: its client deserializes
        # V1Pod, V1Node; `model` where the client's name for it is not the list's less 'List' (ResourceClaim's
        # model is ResourceV1ResourceClaim)
        self.model_type = model or kwatch.Watch().get_return_type(list_func)
        self.store: dict[str, object] = {}
        self.rv: str | None = None      # resume the watch from here; None: list first
        self.lists = 0                  # full lists done (a test and the bench count them)
        self.watches = 0                # watches opened
        self.fresh = False              # listed, and the watch is up or about to be re-opened
        self.why_stale = NOT_LISTED
        self.stale_since = time.time()
        self.lock = threading.Lock()    # the ClusterView's: shared, so a snapshot sees both kinds at once
        self._resp = None               # the open watch's response: stop() closes it to end a blocked read
        self._stopped = threading.Event()

    def _model(self, raw: dict):
        """The official client's model of one object, without the fields the daemon never reads (`dropped`): they
        are most of a pod's or node's size, and the view holds every one."""
        for path in self.dropped:
            parent = raw
            for part in path[:-1]:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
        if self.trim is not None:
            self.trim(raw)
        return self.api_client.deserialize(json.dumps(raw), self.model_type, "application/json")

    @staticmethod
    def key(obj) -> str:
        m = obj.metadata
        return f"{m.namespace}/{m.name}" if m.namespace else m.name

    def _kwargs(self) -> dict:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def _stale(self, why: str) -> None:
        with self.lock:
            if self.fresh:
                self.stale_since = time.time()
            self.fresh = False
            self.why_stale = why

    def observe(self, obj) -> None:
        """An object this process just wrote (a node hold's patch answer), in the store at once, so its next write
        is made from that version and not refused (409) while the watch's event for it is on its way. Kept only
        if newer than the stored one (resourceVersions compared as etcd's numbers where they are numbers)."""
        key = self.key(obj)
        with self.lock:
            have = self.store.get(key)
            if have is not None and _newer(have.metadata.resource_version, obj.metadata.resource_version):
                return
            self._put(key, obj)

    def _put(self, key: str, obj) -> None:
        """`obj` into the store, and into ``marked`` or out of it (under the lock)."""
        self.store[key] = obj
        if self.mark is not None:
            if self.mark(obj):
                self.marked[key] = obj
            else:
                self.marked.pop(key, None)

    def _fits(self, kept: int, kept_ns: dict[str, int], ns: str) -> bool:
        """Whether one more object of namespace `ns` is kept, with `kept` kept of which `kept_ns` per namespace."""
        if self.max_objects is not None and kept >= self.max_objects:
            return False
        return not (self.max_per_namespace is not None and ns and kept_ns.get(ns, 0) >= self.max_per_namespace)

    def _count(self, counts: dict[str, int], ns: str, by: int) -> None:
        n = counts.get(ns, 0) + by
        if n > 0:
            counts[ns] = n
        else:
            counts.pop(ns, None)

    def relist(self) -> None:
        """A full list, in pages of PAGE, replacing the store; the watch resumes from its resourceVersion."""
        items: list = []
        over_ns: dict[str, int] = {}
        kept_ns: dict[str, int] = {}
        cont = None
        while True:
            resp = self.list_func(limit=PAGE, _continue=cont, _request_timeout=self.request_timeout_s,
                                  _preload_content=False, **self._kwargs())
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=f"{resp.reason}: {_body(resp)[:300]!r}")
            page = json.loads(_body(resp))
            if not self.capped:   # pods, nodes: every one kept, nothing counted
                items += [self._model(o) for o in page.get("items") or []]
            else:
                for o in page.get("items") or []:
                    ns = (o.get("metadata") or {}).get("namespace") or ""
                    if self._fits(len(items), kept_ns, ns):
                        items.append(self._model(o))
                        self._count(kept_ns, ns, 1)
                    else:
                        self._count(over_ns, ns, 1)
            cont = page["metadata"].get("continue")
            if not cont:
                break
        rv = page["metadata"].get("resourceVersion")
        if not rv:  # a watch could not resume from anything: not an answer a Kubernetes apiserver gives
            raise ValueError(f"the list of {self.kind} has no metadata.resourceVersion to watch from")
        store = {self.key(o): o for o in items}
        marked = {k: o for k, o in store.items() if self.mark(o)} if self.mark is not None else {}
        with self.lock:
            self.store, self.marked = store, marked
            self.over_ns, self.kept_ns = over_ns, kept_ns
            self.over = sum(over_ns.values())
            self.rv = rv
            self.lists += 1
            self.fresh = True
            self.why_stale = ""

    def watch_once(self) -> None:
        """One watch from ``rv`` until the server ends it (normal: fresh stays) or it fails (raises)."""
        resp = self.list_func(watch=True, resource_version=self.rv, allow_watch_bookmarks=True,
                              timeout_seconds=self.watch_s, _preload_content=False,
                              _request_timeout=(self.request_timeout_s, self.watch_s + 30), **self._kwargs())
        self.watches += 1
        self._resp = resp
        with self.lock:
            if not self.fresh:
                self.fresh, self.why_stale = True, ""  # the watch is up again from a version we hold
        try:
            if not 200 <= resp.status <= 299:
                raise ApiException(status=resp.status, reason=f"{resp.reason}: {_body(resp)[:300]!r}")
            for line in kwatch.watch.iter_resp_lines(resp):
                if self._stopped.is_set():
                    return
                if not line.strip():
                    continue
                ev = json.loads(line)
                kind, raw = ev["type"], ev["object"]
                if kind == "ERROR":
                    raise ApiException(status=raw.get("code", 0), reason=f"{raw.get('reason')}: {raw.get('message')}")
                if kind == "BOOKMARK":
                    self.rv = raw["metadata"]["resourceVersion"]
                    continue
                obj = self._model(raw)
                key, ns = self.key(obj), obj.metadata.namespace or ""
                with self.lock:
                    if kind == "DELETED":
                        if self.store.pop(key, None) is None:
                            self._count(self.over_ns, ns, -1)   # one of those beyond the cap went
                        elif self.capped:
                            self._count(self.kept_ns, ns, -1)
                        self.marked.pop(key, None)
                    elif self.capped and key not in self.store and not self._fits(len(self.store), self.kept_ns, ns):
                        if kind == "ADDED":
                            self._count(self.over_ns, ns, 1)
                    else:
                        if self.capped and key not in self.store:
                            self._count(self.kept_ns, ns, 1)
                            if kind != "ADDED":   # one beyond the cap when it came, kept now there is room
                                self._count(self.over_ns, ns, -1)
                        self._put(key, obj)
                    self.over = sum(self.over_ns.values())
                    self.rv = obj.metadata.resource_version
        finally:
            self._resp = None
            resp.close()
            resp.release_conn()

    def step(self) -> bool:
        """One turn: a list when none is held, else one watch. False when it failed (the view is stale now)."""
        try:
            if self.rv is None:
                self.relist()
            else:
                self.watch_once()
            return True
        except ApiException as exc:
            if exc.status == 410:  # the version is gone from the server's history: list again
                self.rv = None
                self._stale(f"the watch expired (410 {exc.reason}); listing again")
            else:  # status 0: no answer (the client's reason says so)
                self._stale(f"{exc.status} {exc.reason}" if exc.status else str(exc.reason))
        except Exception as exc:  # a connection that broke, a read timeout: reconnect from the version held
            self._stale(f"{type(exc).__name__}: {exc}")
        return False

    def run(self) -> None:
        """Until stop(): steps, with a jittered backoff that doubles after each failure in a row."""
        wait, said = BACKOFF_S[0], ""
        while not self._stopped.is_set():
            if self.step():
                if said and self.fresh:
                    log.info("Kubernetes view of %s is up to date again", self.kind)
                    said = ""
                wait = BACKOFF_S[0]
                continue
            if self._stopped.is_set():
                return
            if self.why_stale != said:  # once per reason, not per retry
                log.warning("Kubernetes view of %s is stale (%s): retrying with backoff", self.kind, self.why_stale)
                said = self.why_stale
            self._stopped.wait(wait * random.uniform(0.8, 1.2))
            wait = min(wait * 2, BACKOFF_S[1])

    def stop(self) -> None:
        self._stopped.set()
        self._stale("stopped")
        resp = self._resp
        conn = getattr(resp, "connection", None) or getattr(resp, "_connection", None)
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:  # a close would wait for the blocked read; a shutdown ends it at once (the reader sees EOF)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ClusterView:
    """Pods (live) and nodes, each kept by a Reflector thread; one consistent Snapshot per cycle.

    Started by the service (``start``) or by the first snapshot. The first snapshot waits for the first lists (up
    to ``sync_timeout_s``, 10,000 pods take seconds) unless one fails; stopped with the daemon."""

    def __init__(self, api_client: k8s.ApiClient, *, request_timeout_s: float = 10.0,
                 sync_timeout_s: float = 120.0, watch_s: int = WATCH_S, dra_max_objects: int | None = None,
                 dra_max_per_namespace: int | None = None) -> None:
        """`dra_max_objects`: also keep the DRA kinds (DRA_KINDS: ResourceSlices, ResourceClaims and their
        templates, for dra.py), at most this many of each, and of one namespace at most `dra_max_per_namespace`
        (ResourceSlices have none); None: not kept."""
        core = k8s.CoreV1Api(api_client)
        self.pods = Reflector("pods", core.list_pod_for_all_namespaces, field_selector=LIVE_PODS,
                              request_timeout_s=request_timeout_s, watch_s=watch_s, dropped=POD_DROPPED,
                              trim=keep_verdict, mark=has_pod_anti_affinity)
        self.nodes = Reflector("nodes", core.list_node, request_timeout_s=request_timeout_s, watch_s=watch_s,
                               dropped=NODE_DROPPED)
        self.lock = threading.Lock()
        self.pods.lock = self.nodes.lock = self.lock
        # the DRA kinds: their staleness is said in the snapshot (dra_why), not raised here: a cluster without
        # resource.k8s.io/v1 (before 1.34, 404) is still planned for; the actuator refuses any other (DraUnread)
        self.dra: tuple[Reflector, ...] = ()
        if dra_max_objects is not None:
            res = k8s.ResourceV1Api(api_client)
            self.dra = tuple(Reflector(kind, f, request_timeout_s=request_timeout_s, watch_s=watch_s,
                                       dropped=CLAIM_DROPPED + DRA_UNREAD if kind == "resourceclaims" else
                                       (("metadata", "managedFields"), *DRA_UNREAD), max_objects=dra_max_objects,
                                       trim={"resourceclaims": trim_claim,
                                             "resourceclaimtemplates": trim_template}.get(kind),
                                       model=k8s.ResourceV1ResourceClaim if kind == "resourceclaims" else None,
                                       max_per_namespace=dra_max_per_namespace)
                             for kind, f in zip(DRA_KINDS, (res.list_resource_slice,
                                                            res.list_resource_claim_for_all_namespaces,
                                                            res.list_resource_claim_template_for_all_namespaces)))
            for r in self.dra:
                r.lock = self.lock
        self.sync_timeout_s = sync_timeout_s
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self._last: Snapshot | None = None

    @property
    def reflectors(self) -> tuple[Reflector, Reflector]:
        return self.pods, self.nodes

    def start(self) -> None:
        """The two watch threads (once; daemon threads, so a one-shot command never hangs on them)."""
        with self._start_lock:
            if self._threads:
                return
            for r in (*self.reflectors, *self.dra):
                t = threading.Thread(target=r.run, name=f"k8s-watch-{r.kind}", daemon=True)
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        for r in (*self.reflectors, *self.dra):
            r.stop()
        for t in self._threads:
            t.join(timeout=5)

    def wait_synced(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(r.fresh for r in self.reflectors):
                return True
            time.sleep(0.05)
        return False

    def _first_sync(self) -> None:
        """Before the first lists: wait for them (up to sync_timeout_s), so a cycle at start-up reads the cluster
        rather than failing for a list still on its way; not once a list failed (the apiserver down: said now)."""
        deadline = time.monotonic() + self.sync_timeout_s

        def waiting(rs) -> bool:
            return all(r.fresh or (r.lists == 0 and r.why_stale == NOT_LISTED) for r in rs)
        # the DRA kinds are waited for until listed or failed (a cluster without them answers 404 at once), never
        # beyond the pods' and nodes' own wait
        while time.monotonic() < deadline and (
                (not all(r.fresh for r in self.reflectors) and waiting(self.reflectors))
                or any(not r.fresh and r.lists == 0 and r.why_stale == NOT_LISTED for r in self.dra)):
            if not waiting(self.reflectors):
                break
            time.sleep(0.05)

    def snapshot(self) -> Snapshot:
        """Both stores as of now; raises ViewStale, saying which kind, since when and why, when either cannot be
        trusted (not listed yet, or its watch down)."""
        self.start()
        self._first_sync()
        with self.lock:
            stale = [r for r in self.reflectors if not r.fresh]
            if not stale:
                dra, why, over, over_ns = self._dra()
                self._last = Snapshot(pods=list(self.pods.store.values()), nodes=list(self.nodes.store.values()),
                                      at=time.time(), anti_pods=list(self.pods.marked.values()), dra=dra,
                                      dra_why=why, dra_over=over, dra_over_ns=over_ns)
                return self._last
            why = "; ".join(f"{r.kind}: {r.why_stale} (for {max(0.0, time.time() - r.stale_since):.0f} s)"
                            for r in stale)
        raise ViewStale(f"the Kubernetes view is stale, not used this cycle: {why}")

    def _dra(self) -> tuple[dict[str, list] | None, str, dict[str, int] | None, dict[str, dict[str, int]] | None]:
        """The DRA kinds' objects, why they are not given, and those beyond the caps, per namespace too (under the
        lock)."""
        if not self.dra:
            return None, "", None, None
        stale = [r for r in self.dra if not r.fresh]
        if stale:
            return None, "; ".join(f"{r.kind}: {r.why_stale}" for r in stale), None, None
        return ({r.kind: list(r.store.values()) for r in self.dra}, "",
                {r.kind: r.over for r in self.dra if r.over}, {r.kind: dict(r.over_ns) for r in self.dra if r.over})

    def current(self, reuse_s: float = 10.0) -> Snapshot:
        """The cycle's snapshot: the one the cycle's job read took (``snapshot``), so the jobs and the nodes the
        cycle plans on are one instant; a new one when none was taken within `reuse_s` or the view is stale now
        (ViewStale). The node holds, which write, read the latest (``snapshot``) instead."""
        last = self._last
        if last is not None and time.time() - last.at < reuse_s and all(r.fresh for r in self.reflectors):
            return last
        return self.snapshot()
