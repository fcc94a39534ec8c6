"""Kueue Workloads admitted with no live pod: quota Kueue holds for nothing, said in the log.

Kueue reserves a Workload's quota when it admits it and keeps it until the Workload finishes, is deactivated or is
evicted. A batch Job whose pods can never be made (a ServiceAccount that does not exist, a pod an admission policy or
a namespace ResourceQuota refuses) stays admitted with no pod: without Kueue's ``waitForPodsReady`` (off by default),
for good. A tenant with ``edit`` makes one with a Job (Kueue's roles let only a batch admin create a Workload itself).
The plan sees no pod of it (no use, free nodes) while Kueue admits nothing else into the quota it holds: the other
tenants' Workloads that would borrow it wait, and their start-time estimates say they start now. The daemon cannot
give that quota back (the only Workload field it writes is its estimate's annotations; ``waitForPodsReady`` evicts
such a Workload: docs/kubernetes.md), so it says so: one line per Workload, once it has had no live pod for
``after_s``, naming its GPUs. Read from the same page-at-a-time list as the plan's demand (Podless.watch), so the
Workloads are listed once per cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Callable

from daemon.actuators.k8s.workloads import Malformed, workload_gpus, workload_live

log = logging.getLogger("gpu_autoscaler.actuator.kueue.workloads")

PODLESS_S = 600.0   # how long an admitted Workload has no live pod before it is said (pods are made within seconds)
# the owners whose pods name them (a batch Job's pods, a plain pod Kueue queues; a JobSet's pods are its child Jobs' but
# carry its UID in a label, which workloads.pod_owners reads): a Workload of another owner (a RayJob's pods are its
# RayCluster's) has pods the daemon cannot tie to it
JUDGED_OWNERS = frozenset({("batch/v1", "Job"), ("v1", "Pod"), ("jobset.x-k8s.io/v1alpha2", "JobSet")})


def admitted_live(wl: dict) -> bool:
    """Whether Kueue holds quota for the Workload now: admitted, and live (active, not finished, not being
    deleted: workloads.workload_live)."""
    return bool((wl.get("status") or {}).get("admission")) and workload_live(wl)


class Podless:
    """The admitted Workloads of tenant namespaces with no live pod, as the cycles read them."""

    def __init__(self, tenant_of_ns: dict[str, str], resource: str, after_s: float = PODLESS_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tenant_of = tenant_of_ns
        self.resource = resource
        self.after_s = after_s
        self.clock = clock
        self.since: dict[str, float] = {}   # uid -> when first read admitted with no live pod (clock)
        self.said: set[str] = set()         # uids said, while they stay so

    def watch(self, items: Iterable[dict], owners: set[tuple[str, str]]) -> Iterator[dict]:
        """`items` passed on as they come; each admitted tenant Workload neither it nor its owner among `owners`
        (workloads.pod_owners: (namespace, UID) of the live pods and of what they name as owners) is podless, where
        its owners are those whose pods name them (JUDGED_OWNERS: a batch Job, a pod, a JobSet; or none); another's
        is not judged. Once the list is read through, those podless for `after_s` are said, each once while it stays
        so."""
        now = self.clock()
        podless: dict[str, float] = {}
        lines: dict[str, str] = {}
        for wl in items:
            meta = wl.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            owned = [r for r in meta.get("ownerReferences") or [] if isinstance(r, dict)]
            judged = all((r.get("apiVersion"), r.get("kind")) in JUDGED_OWNERS for r in owned)
            if uid and judged and meta.get("namespace") in self.tenant_of and admitted_live(wl):
                ns = meta.get("namespace")
                if not {(ns, uid), *((ns, str(r.get("uid"))) for r in owned)} & owners:
                    podless[uid] = self.since.get(uid, now)
                    if now - podless[uid] >= self.after_s and uid not in self.said:
                        lines[uid] = self._line(wl, now - podless[uid])
            yield wl
        for uid in sorted(lines, key=lines.get):
            log.warning("%s", lines[uid])
        self.since = podless
        self.said = (self.said | set(lines)) & set(podless)

    def _line(self, wl: dict, for_s: float) -> str:
        meta = wl.get("metadata") or {}
        try:
            gpus = f"{workload_gpus(wl, self.resource)} {self.resource}"
        except Malformed:
            gpus = "its resources"
        return (f"Kueue Workload {meta.get('namespace')}/{meta.get('name')} is admitted and has had no live pod for "
                f"{for_s:.0f} s: Kueue holds its quota ({gpus}) for nothing and admits no other Workload into it, "
                "while the plan reads no use of it (a Job whose pods cannot be made: its events say why); Kueue's "
                "waitForPodsReady evicts such a Workload (docs/kubernetes.md)")
