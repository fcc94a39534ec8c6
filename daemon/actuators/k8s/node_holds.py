"""Whole-node holds on Kubernetes: the nodes held for a tenant carry our label and a NoSchedule taint.

What the simulator models, and what a Slurm reservation (IGNORE_JOBS, MAGNETIC) does, is a hold of whole
nodes: ``ceil(reserved GPUs / GPUs per node)`` nodes per tenant, on which only that tenant's work may
start while work already running there keeps running. On Kubernetes the daemon does this to the nodes:

- label ``<hold_label>=<tenant>`` (the Kueue ResourceFlavor of the hold selects these nodes) and
- taint ``<hold_label>=<tenant>:NoSchedule`` (no pod starts there unless it tolerates it; Kueue adds the
  toleration only to workloads admitted on the tenant's hold flavor; pods already running stay).

Nodes are chosen by the Slurm holds' rule (whole_nodes.rank): the ones the hold already has first (no churn),
then nodes that can be cleared (no GPU pod of another owner there that the daemon may not evict: a pod outside
the tenant namespaces, a DaemonSet or mirror pod, or one whose PriorityClass is not ``gpu-autoscaler-low``),
then those with the least such work; among equals, where the tenant already runs, GPUs are free or the plan's
preemptions free them; never a cordoned or NotReady node,
never one with a NoSchedule/NoExecute taint that is not ours, never one held for another tenant. A hold
grows at once and shrinks only after wanting fewer nodes for ``shrink_delay_s``.

Only nodes that carry our label are ever un-held; they are read back from the API every cycle, so a hold
left by a crash, a failed patch or an old config is kept, resized or released to match the plan. Each
node is patched with its ``resourceVersion``, so a concurrent change makes the patch fail (409) instead of
overwriting it; a failed patch is reported and the next cycle starts again from what the API shows.
Each patch is checked against the fence right before it is sent (``guard``, see daemon/ha/fencing.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators import whole_nodes
from daemon.actuators.base import NO_FENCE, ActionReport, FenceGuard, TermRecord
from daemon.actuators.k8s import flavors
from daemon.actuators.k8s.informer import ClusterView
from daemon.actuators.k8s.objects import (
    POOL_VALUE,
    evictable,
    gpu_quantity,
    name_part,
    node_usable,
    pod_gpus,
    priority_class_name,
)
from daemon.config.fleet import TypeResolver
from daemon.policy.hand_over import hand_over
from daemon.text import plural


@dataclass(frozen=True)
class HoldNode:
    name: str
    gpus: int                  # allocatable GPUs
    used: int                  # GPUs requested by running pods on it
    usable: bool               # Ready, schedulable, no foreign NoSchedule/NoExecute taint
    holder: str | None         # our label's value, None when not held by us
    resource_version: str
    taints: tuple[dict, ...]   # every taint, as sent back to the API
    gpu_type: str = ""         # a mixed fleet: the node's GPU type (flavors.node_type); "" when untyped


class NodeHolds:
    def __init__(self, api_client: k8s.ApiClient, *, label: str, gpu_resource: str, tenants_ns: dict[str, str],
                 shrink_delay_s: float, dry_run: bool, clock: Callable[[], float] = time.monotonic,
                 resolver: TypeResolver | None = None, view: ClusterView | None = None) -> None:
        self.api = api_client
        self.view = view  # the watched view (informer.py): the cycle's snapshot instead of two lists
        self.core = k8s.CoreV1Api(api_client)
        self.label = label
        self.resource = gpu_resource
        self.tenant_of_ns = {ns: t for t, ns in tenants_ns.items()}
        self.shrink_delay_s = shrink_delay_s
        self.dry_run = dry_run
        self.clock = clock
        # holder -> since when its hold wants fewer nodes, as this replica saw it in this fencing term (TermRecord):
        # one that leads again did not see the plans between, which may have wanted more
        self._fewer_since: TermRecord[str, float] = TermRecord(lambda: self.guard)
        self.resolver = resolver  # a mixed fleet: holds per GPU type on nodes of that type; None: any node
        self.held_by_type: dict[str, dict[str, int]] = {}  # hold value -> {type: GPUs on its nodes}, last apply
        self.products: dict[str, str] = {}  # GPU type -> its nodes' product label value, as last read
        self.capacity_by_type: dict[str, int] = {}  # GPU type -> GPUs of its usable nodes, as last read
        self.guard: FenceGuard = NO_FENCE  # the Kueue actuator's (use_fence): raises FencingLost before a patch
        # the DRA GPUs the cycle read (dra.py's DraGpus, from the kubernetes actuator): a DRA node's whole GPUs and its
        # pods' claims count as a device-plugin node's GPUs and pods', so a hold takes DRA nodes too; None: none read
        self.dra: Callable[[], object | None] = lambda: None

    # ---- reading ---------------------------------------------------------------------------------
    def read(self) -> tuple[list[HoldNode], dict[str, dict[str, int]], dict[str | None, dict[str, int]]]:
        """Nodes; GPUs per node per tenant of the running pods; and GPUs per node of the running pods the
        daemon may not evict, per owner (a tenant, or None outside the tenant namespaces). Raises ApiException
        (ViewStale with a watched view that is stale)."""
        if self.view is not None:  # the latest the view has: the holds are patched from these versions
            snap = self.view.snapshot()
            nodes_raw = snap.nodes
            pods = [p for p in snap.pods if p.status is not None and p.status.phase == "Running"]
        else:
            nodes_raw = self.core.list_node().items
            pods = self.core.list_pod_for_all_namespaces(field_selector="status.phase=Running").items
        used: dict[str, int] = {}
        by_tenant: dict[str, dict[str, int]] = {}
        firm: dict[str | None, dict[str, int]] = {}
        low = priority_class_name("low")
        dra = self.dra()
        dra_running = dra.running if dra is not None else {}
        dra_rows = dra.node_rows() if dra is not None else {}
        for p in pods:
            node = p.spec.node_name
            g = pod_gpus(p, self.resource) + (flavors.pod_mig_gpus(p) if self.resolver is not None else 0)
            on, claimed = dra_running.get(f"{p.metadata.namespace}/{p.metadata.name}", (None, 0))
            g += claimed if on == node else 0
            if not node or not g:
                continue
            used[node] = used.get(node, 0) + g
            t = self.tenant_of_ns.get(p.metadata.namespace)
            if t is not None:
                mine = by_tenant.setdefault(t, {})
                mine[node] = mine.get(node, 0) + g
            # what a preemption may take: the kubernetes actuator evicts only low-class pods of tenant namespaces
            if t is None or p.spec.priority_class_name != low or not evictable(p):
                stuck = firm.setdefault(t, {})
                stuck[node] = stuck.get(node, 0) + g
        nodes = []
        for n in nodes_raw:
            taints = tuple(self.api.sanitize_for_serialization(t) for t in (n.spec.taints or []))
            dra_type, dra_gpus, _, _ = dra_rows.get(n.metadata.name, ("", 0, 0, 0))
            typ = ((dra_type if dra_gpus else flavors.node_type(self.resolver, n)) if self.resolver is not None
                   else "")
            product = (n.metadata.labels or {}).get(flavors.PRODUCT_LABEL)
            if typ and product:
                self.products.setdefault(typ, product)
            gpus = (flavors.node_gpus(n, self.resource, typ) if typ
                    else gpu_quantity((n.status.allocatable or {}).get(self.resource, 0))) + dra_gpus
            nodes.append(HoldNode(n.metadata.name, gpus, used.get(n.metadata.name, 0), node_usable(n, self.label),
                                  (n.metadata.labels or {}).get(self.label), n.metadata.resource_version or "",
                                  taints, typ))
        return nodes, by_tenant, firm

    def _read_or_say(self, rep: ActionReport) -> tuple[list[HoldNode], dict[str, dict[str, int]],
                                                       dict[str | None, dict[str, int]]] | None:
        """read(), or None with the API's refusal as the report's one error line (apply and release_all then change
        nothing: no node is held or released on nodes this replica did not see)."""
        try:
            return self.read()
        except ApiException as exc:
            rep.errors.append(f"node holds: cannot read nodes/pods: {exc.status} {exc.reason}")
            return None

    # ---- choosing --------------------------------------------------------------------------------
    @staticmethod
    def choose(nodes: list[HoldNode], current: set[str], gpus: int, mine: dict[str, int], freed: dict[str, int],
               firm: dict[str, int], keep: bool, job_gpus: int = 1) -> list[str]:
        """Whole nodes covering `gpus` by the Slurm holds' rule (whole_nodes.rank): current ones first (all of
        them when `keep`), then the least work of others that cannot be evicted (`firm`), then where the
        tenant runs, GPUs are free or the plan's preemptions free them. A current node is kept only while a job of
        `job_gpus` GPUs still fits beside the work there that cannot be evicted (whole_nodes.usable)."""
        score = {n.name: mine.get(n.name, 0) + (n.gpus - n.used) + freed.get(n.name, 0) for n in nodes}
        current = whole_nodes.usable(nodes, current, firm, job_gpus)
        return whole_nodes.pick(whole_nodes.rank(nodes, current, firm, score), current, gpus, keep)

    def choose_typed(self, nodes: list[HoldNode], current: set[str], gpus: int, mine: dict[str, int],
                     freed: dict[str, int], firm: dict[str, int], keep: bool, job_gpus: int = 1,
                     by_type: dict[str, int] | None = None) -> list[str]:
        """`choose`, per GPU type when the hold is typed (`by_type`: type -> GPUs): each type's GPUs in whole
        nodes of that type. While a shrink waits (`keep`), current nodes of a type no longer held stay too."""
        if not by_type:
            return self.choose(nodes, current, gpus, mine, freed, firm, keep, job_gpus)
        out: set[str] = set()
        for typ, g in sorted(by_type.items()):
            if g <= 0:
                continue
            of_type = [n for n in nodes if n.gpu_type == typ]
            names = {n.name for n in of_type}
            out |= set(self.choose(of_type, current & names, g, mine, freed, firm, keep, job_gpus))
        if keep:
            typ_of = {n.name: n.gpu_type for n in nodes}
            out |= {c for c in current if typ_of.get(c) not in by_type}
        return sorted(out)

    # ---- doing it --------------------------------------------------------------------------------
    def apply(self, rep: ActionReport, wanted: dict[str, int], freed: dict[str, int],
              members: dict[str, set[str]] | None = None,
              job_gpus: dict[str, int] | None = None,
              by_type: dict[str, dict[str, int]] | None = None) -> dict[str, int] | None:
        """Hold `wanted` GPUs as whole nodes, per hold: its label value (``name_part`` of a tenant, or a pool's
        value) -> GPUs. `members`: per hold, the tenants whose pods are its own (default: the tenant whose
        ``name_part`` the value is); `job_gpus`: per hold, the GPUs of the job it is sized for (default 1). Returns
        the GPUs each hold's nodes now hold (what its hold flavor may admit), or None when the nodes could not be
        read (nothing was changed). `by_type`: per hold, GPUs per GPU type (a mixed fleet): each type's on nodes
        of that type only; a hold not in it takes any node. The GPUs held per (hold, type) are then in
        ``held_by_type``."""
        got = self._read_or_say(rep)
        if got is None:
            return None
        nodes, by_tenant, firm_of = got
        if members is None:
            members = {name_part(t): {t} for t in self.tenant_of_ns.values()}
        held: dict[str, set[str]] = {t: set() for t in wanted}
        strays = []
        for n in nodes:
            if n.holder is None:
                continue
            if n.holder in held:
                held[n.holder].add(n.name)
            else:
                strays.append(n)
        for n in strays:  # held for a tenant that is not configured (any more): let it go now
            self._patch(rep, n, None, f"release {n.name}: held for {n.holder!r}, not a tenant that may hold")
        size = {n.name: n.gpus for n in nodes}
        if POOL_VALUE in held and POOL_VALUE in members:
            self._hand_over(rep, nodes, held, wanted, members, by_tenant, firm_of, job_gpus or {}, by_type or {})
        if self.resolver is not None:
            self.capacity_by_type = {}
            for n in nodes:
                if n.usable:
                    self.capacity_by_type[n.gpu_type] = self.capacity_by_type.get(n.gpu_type, 0) + n.gpus
        taken = {n for names in held.values() for n in names}
        now = self.clock()
        result: dict[str, int] = {}
        self.held_by_type = {}
        for t in sorted(wanted):
            gpus, current = wanted[t], held[t]
            # a node that went NotReady, was cordoned or got a foreign taint leaves the hold (as in the simulator)
            free_nodes = [n for n in nodes if n.usable and n.gpus > 0 and (n.name in current or n.name not in taken)]
            own = members.get(t, set())
            mine: dict[str, int] = {}  # the holders' GPUs per node
            for who in own:
                for n, g in by_tenant.get(who, {}).items():
                    mine[n] = mine.get(n, 0) + g
            firm: dict[str, int] = {}  # others' GPUs that cannot be evicted, per node (the holders' own are not)
            for owner, per_node in firm_of.items():
                if owner not in own:
                    for n, g in per_node.items():
                        firm[n] = firm.get(n, 0) + g
            jg = (job_gpus or {}).get(t, 1)
            typed = (by_type or {}).get(t)
            need = (self.choose_typed(free_nodes, current, gpus, mine, freed, firm, keep=False, job_gpus=jg,
                                      by_type=typed) if gpus > 0 else [])
            ok = {n.name for n in free_nodes}
            fewer = sum(size[n] for n in need) < sum(size[n] for n in current if n in ok)
            if fewer:
                since = self._fewer_since.setdefault(t, now)
                may_shrink = now - since >= self.shrink_delay_s
                if may_shrink:
                    del self._fewer_since[t]
            else:
                self._fewer_since.pop(t, None)
                may_shrink = True
            target = set(need) if may_shrink else set(self.choose_typed(free_nodes, current, gpus, mine, freed,
                                                                        firm, keep=True, job_gpus=jg, by_type=typed))
            if gpus > sum(size[n] for n in target):
                rep.actions.append(f"node hold {t}: only {plural(len(target), 'usable node')} for "
                                   f"{plural(gpus, 'GPU')}")
            now_held = set(current)
            for n in sorted(current - target):
                if self._patch(rep, self._node(nodes, n), None, f"release {n} from the hold of {t}"):
                    now_held.discard(n)
            for n in sorted(target - current):
                if self._patch(rep, self._node(nodes, n), t, f"hold {n} ({plural(size[n], 'GPU')}) for {t}"):
                    now_held.add(n)
            taken |= now_held
            result[t] = sum(size[n] for n in now_held)
            typ_of = {n.name: n.gpu_type for n in nodes}
            per: dict[str, int] = {}
            for n in now_held:
                per[typ_of[n]] = per.get(typ_of[n], 0) + size[n]
            self.held_by_type[t] = per
        return result

    def _hand_over(self, rep: ActionReport, nodes: list[HoldNode], held: dict[str, set[str]], wanted: dict[str, int],
                   members: dict[str, set[str]], by_tenant: dict[str, dict[str, int]],
                   firm_of: dict[str | None, dict[str, int]], job_gpus: dict[str, int],
                   by_type: dict[str, dict[str, int]]) -> None:
        """A pooled tenant whose own hold grows (its window's, held apart from the pool: Plan.window_holds) takes
        first the pool's nodes where its pods run, of the GPUs the shrinking pool gives up, as the simulator does
        (daemon/sim/cluster_holds.py, Holds._hand_over): its pods stay where they are and the pool lets go of
        nodes its tenant keeps using. Per hold in name order, the nodes the one hand-over rule picks
        (daemon/policy/hand_over.py: where it runs most and its job still fits beside others' pods that cannot be
        evicted); updates ``held``. A mixed fleet (`by_type` for the hold and the pool): per GPU type, the pool's
        nodes of a type where the hold grows and the pool shrinks (Holds._hand_over_typed)."""
        pool = members[POOL_VALUE]
        pool_by = by_type.get(POOL_VALUE)
        for value in sorted(wanted):
            own = members.get(value, set())
            if value == POOL_VALUE or not own or not own <= pool:
                continue
            if pool_by is not None and value in by_type:
                for typ, g in sorted(by_type[value].items()):
                    of_type = [n for n in nodes if n.gpu_type == typ]
                    self._hand_over_one(rep, of_type, held, value, own, g, pool_by.get(typ, 0), by_tenant, firm_of,
                                        job_gpus)
            elif pool_by is None:
                self._hand_over_one(rep, nodes, held, value, own, wanted[value], wanted.get(POOL_VALUE, 0),
                                    by_tenant, firm_of, job_gpus)

    def _hand_over_one(self, rep: ActionReport, nodes: list[HoldNode], held: dict[str, set[str]], value: str,
                       own: set[str], want: int, pool_want: int, by_tenant: dict[str, dict[str, int]],
                       firm_of: dict[str | None, dict[str, int]], job_gpus: dict[str, int]) -> None:
        """`_hand_over` of one hold among `nodes` (all of them, or one type's): it asks `want` GPUs, the pool
        `pool_want`. The nodes are those the one hand-over rule picks (daemon/policy/hand_over.py, which the
        simulator calls too), over the pool's usable nodes by name. Only usable nodes count as held (what the
        pool can spare, what the hold has), as in ``apply`` and in the simulator: a NotReady or cordoned node
        leaves its hold."""
        usable = sorted((n for n in nodes if n.usable), key=lambda n: n.name)
        pool = [n for n in usable if n.name in held[POOL_VALUE]]
        spare = sum(n.gpus for n in pool) - pool_want
        grow = want - sum(n.gpus for n in usable if n.name in held[value])
        if grow <= 0 or spare <= 0:
            return
        mine: dict[str, int] = {}
        for who in own:
            for n, g in by_tenant.get(who, {}).items():
                mine[n] = mine.get(n, 0) + g
        firm: dict[str, int] = {}
        for owner, per_node in firm_of.items():
            if owner not in own:
                for n, g in per_node.items():
                    firm[n] = firm.get(n, 0) + g
        picked = hand_over([n.gpus for n in pool], [mine.get(n.name, 0) for n in pool],
                           [firm.get(n.name, 0) for n in pool], grow=grow, spare=spare,
                           job_gpus=int(job_gpus.get(value, 1)))
        for n in (pool[i] for i in picked):
            if self._patch(rep, n, value, f"hand {n.name} over from the pool to the hold of {value} "
                                          "(its window's; its pods run there)"):
                held[POOL_VALUE].discard(n.name)
                held[value].add(n.name)

    def release_all(self, rep: ActionReport) -> bool:
        """Un-hold every node carrying our label; no pod is stopped. False when the nodes could not be read (none
        was released)."""
        got = self._read_or_say(rep)
        if got is None:
            return False
        nodes = got[0]
        for n in nodes:
            if n.holder is not None:
                self._patch(rep, n, None, f"release {n.name}: the daemon stops")
        self._fewer_since.clear()
        return True

    @staticmethod
    def _node(nodes: list[HoldNode], name: str) -> HoldNode:
        return next(n for n in nodes if n.name == name)

    def _patch(self, rep: ActionReport, node: HoldNode, value: str | None, action: str) -> bool:
        """Label and taint `node` with the hold's label value (None: remove both), keeping every other taint."""
        if not self.dry_run:
            self.guard.check(action)
        rep.actions.append(action)
        if self.dry_run:
            return True
        taints = [t for t in node.taints if t.get("key") != self.label]
        if value is not None:
            taints.append({"key": self.label, "value": value, "effect": "NoSchedule"})
        body = {"metadata": {"labels": {self.label: value}, "resourceVersion": node.resource_version},
                "spec": {"taints": taints}}
        try:
            done = self.core.patch_node(node.name, body)
            if self.view is not None and done is not None:
                self.view.nodes.observe(done)  # the next read (a release at stop) patches from this version
            return True
        except ApiException as exc:  # reported; the next cycle reads the node again
            rep.errors.append(f"{action}: {exc.status} {exc.reason}")
            return False
