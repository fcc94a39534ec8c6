"""The leader lease on Kubernetes: a coordination.k8s.io/v1 Lease, written with optimistic concurrency.

The Lease object's ``holderIdentity`` is ``<replica id>#<nonce>`` and its ``leaseTransitions``, raised by one
at every change of holder, is the fencing token. Taking it over (free, or its ``renewTime`` +
``leaseDurationSeconds`` past) and renewing it are ``replace`` calls carrying the ``resourceVersion`` that
was read: the API server refuses (409) a write based on a version someone else has changed since, so two
replicas can never both win one term. The fence reads the Lease right before each act: this replica must be
the holder, with its own token and enough time left. Unlike the Redis backend this check is a read, not
atomic with the act, and there is no ledger: the Kubernetes API cannot check a token on a pod eviction.

Each replica also renews a Lease object of its own, ``<name>-replica-<hash of its holder>``, as the sign it is
alive (``peers()``): a stopping leader keeps the scheduler's holds while another replica is alive to take over.
A clean stop deletes it; those of replicas that died are deleted by the next replica that starts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
from typing import Callable

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.ha.lease import Lease

log = logging.getLogger("gpu_autoscaler.leader")


class KubernetesLease(Lease):
    store = "the Kubernetes API"
    transient = (urllib3.exceptions.HTTPError, OSError)

    def __init__(self, api_client: k8s.ApiClient, namespace: str, name: str = "gpu-autoscaler-leader",
                 replica_id: str | None = None, ttl_s: float = 15.0, renew_every_s: float | None = None,
                 safety_margin: float = 0.3, on_elected: Callable[[int], None] | None = None,
                 on_lost: Callable[[int], None] | None = None,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        super().__init__(replica_id, ttl_s, renew_every_s, safety_margin, on_elected, on_lost)
        self.api = k8s.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.clock = clock
        self.duration_s = max(1, math.ceil(ttl_s))
        self.beat_prefix = f"{name}-replica-"
        self.beat_name = self.beat_prefix + hashlib.sha256(self.holder.encode()).hexdigest()[:16]
        self._swept = False

    def _read(self) -> k8s.V1Lease | None:
        try:
            return self.api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise OSError(f"read lease {self.namespace}/{self.name}: {exc.status} {exc.reason}") from None

    def _left_s(self, spec: k8s.V1LeaseSpec) -> float:
        """Seconds the lease has left; <= 0 when it lapsed or was never held."""
        last = spec.renew_time or spec.acquire_time
        if last is None or not spec.holder_identity:
            return -1.0
        if last.tzinfo is None:
            last = last.replace(tzinfo=dt.timezone.utc)
        return (last - self.clock()).total_seconds() + (spec.lease_duration_seconds or 0)

    def _write(self, lease: k8s.V1Lease | None, body: k8s.V1Lease) -> bool:
        """Create or replace; False when someone else wrote first (409) - that is a 'no', not an error."""
        try:
            if lease is None:
                self.api.create_namespaced_lease(self.namespace, body)
            else:
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise OSError(f"write lease {self.namespace}/{self.name}: {exc.status} {exc.reason}") from None

    def _try_acquire(self) -> int:
        lease = self._read()
        if lease is not None and self._left_s(lease.spec) > 0:
            return 0
        now = self.clock()
        token = ((lease.spec.lease_transitions or 0) if lease is not None else 0) + 1
        meta = lease.metadata if lease is not None else k8s.V1ObjectMeta(name=self.name, namespace=self.namespace)
        body = k8s.V1Lease(metadata=meta, spec=k8s.V1LeaseSpec(
            holder_identity=self.holder, lease_duration_seconds=self.duration_s, acquire_time=now, renew_time=now,
            lease_transitions=token))
        return token if self._write(lease, body) else 0

    def _mine(self, lease: k8s.V1Lease | None) -> bool:
        return (lease is not None and lease.spec.holder_identity == self.holder
                and lease.spec.lease_transitions == self.token)

    def _try_renew(self) -> bool:
        lease = self._read()
        if not self._mine(lease):
            return False
        lease.spec.renew_time = self.clock()
        if self._write(lease, lease):
            return True
        return self._mine(self._read())  # a conflicting write: still ours means try again next tick

    def _release(self) -> None:
        lease = self._read()
        if self._mine(lease):
            lease.spec.holder_identity = None
            lease.spec.renew_time = None
            self._write(lease, lease)

    # ---- liveness: one Lease object per replica --------------------------------------------------
    def _call(self, what: str, fn: Callable[[], object]) -> object:
        """None on 404, False on 409, else the answer; any other failure is OSError (transient)."""
        try:
            return fn()
        except ApiException as exc:
            if exc.status in (404, 409):
                return None if exc.status == 404 else False
            raise OSError(f"{what}: {exc.status} {exc.reason}") from None

    def _beat(self) -> None:
        if not self._swept:
            self._sweep()
        now = self.clock()
        mine = self._call("read own liveness lease",
                          lambda: self.api.read_namespaced_lease(self.beat_name, self.namespace))
        if mine is None:
            body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=self.beat_name, namespace=self.namespace),
                               spec=k8s.V1LeaseSpec(holder_identity=self.holder, lease_duration_seconds=self.duration_s,
                                                    acquire_time=now, renew_time=now))
            self._call("create own liveness lease", lambda: self.api.create_namespaced_lease(self.namespace, body))
        else:
            mine.spec.renew_time = now
            self._call("renew own liveness lease",
                       lambda: self.api.replace_namespaced_lease(self.beat_name, self.namespace, mine))

    def _unbeat(self) -> None:
        self._call("delete own liveness lease", lambda: self.api.delete_namespaced_lease(self.beat_name,
                                                                                           self.namespace))

    def _replica_leases(self) -> list[k8s.V1Lease]:
        got = self._call("list leases", lambda: self.api.list_namespaced_lease(self.namespace))
        return [x for x in (got.items if got else []) if (x.metadata.name or "").startswith(self.beat_prefix)]

    def _sweep(self) -> None:
        """Delete the liveness leases of replicas that died without a clean stop (lapsed 10 durations ago)."""
        for x in self._replica_leases():
            if x.spec is not None and self._left_s(x.spec) < -10 * self.duration_s:
                self._call("delete a lapsed liveness lease",
                           lambda n=x.metadata.name: self.api.delete_namespaced_lease(n, self.namespace))
                log.info("leader lease: deleted %s, the liveness lease of a replica gone since", x.metadata.name)
        self._swept = True

    def _live_holders(self) -> list[str]:
        return [x.spec.holder_identity for x in self._replica_leases()
                if x.spec is not None and x.spec.holder_identity and self._left_s(x.spec) > 0]

    def fence(self, what: str, jobs: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
        if self.token is None or not self.is_leader():
            return False, f"not the leader (replica {self.replica_id})"
        try:
            lease = self._read()
        except self.transient as exc:
            return False, f"cannot check the fencing token in the Kubernetes API: {exc}"
        if not self._mine(lease) or self._left_s(lease.spec) < self.min_left_s:
            return False, f"fencing token {self.token} is stale or about to expire"
        return True, ""
