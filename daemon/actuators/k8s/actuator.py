"""Kubernetes through the official client (plain-namespace mode): PriorityClasses per tier, a GPU
ResourceQuota per tenant namespace that caps only non-preemptible pods, evictions for preemption, and
cordon + eviction for a failed node.

Tenants map to namespaces (``tenants[].k8s_namespace``, default: the tenant's
name); a job id is ``namespace/pod``. Only namespaces mapped to a configured
tenant are touched, never ``kube-*``; the one exception is the start-up sweep, which deletes our own
labelled quota from a namespace no configured tenant maps to any more (see ``sweep_quotas``). Every pod removal
goes through the Eviction API with a grace period, so PodDisruptionBudgets are honoured; a PDB
refusal (429) is reported and retried on a later cycle, never escalated to a
delete. DaemonSet pods and mirror (static) pods are never evicted. For
preemption only pods of the low PriorityClass are evicted, whatever the plan says.
With Kueue, see kueue.py: quotas become ClusterQueues and Kueue reclaims.
Every write (a PriorityClass, a quota, an eviction, a cordon, an Event) is checked against the fence right
before it is sent (``FenceGuard``, see daemon/ha/fencing.py); a batch stops at the first refusal.
The daemon's view of jobs and of where GPUs are (pods, nodes, node holds) is read here too: view.py; built by
from_config, it is kept by list-then-watch (informer.py), so a cycle reads a snapshot instead of listing. GPUs asked
through Dynamic Resource Allocation are read beside it (dra.py: ``KubernetesActuator.dra``) and put in the
Jobs and Nodes the plan reads: a DRA node's whole GPUs are its GPUs, a DRA pod's claims its running or pending
GPUs, so the plan preempts DRA pods (the same Eviction API calls) and holds DRA nodes as it does device-plugin ones.
"""

from __future__ import annotations

import datetime as dt
import logging

import urllib3
from kubernetes import client as k8s, config as kcfg
from kubernetes.client.exceptions import ApiException

from daemon.actuators.base import NO_FENCE, ActionReport, FencedApply, FenceGuard, TermRecord, stop_on_fence
from daemon.actuators.k8s import dra as dra_gpus, pod_affinity, rbac
from daemon.actuators.k8s.admission import AdmissionParams, params_spec
from daemon.actuators.k8s.flavors import MIG_PREFIX, node_type
from daemon.actuators.k8s.informer import DRA_KINDS, LIVE_PODS, ClusterView
from daemon.actuators.k8s.objects import evictable, gpu_quantity, holds_gpus, priority_class_name
from daemon.actuators.k8s.rbac import RbacRefusals
from daemon.actuators.k8s.view import drains_soon, never_starts, nodes_view, pods_as_jobs
from daemon.config import ConfigError, KubernetesActuatorConfig, TenantConfig
from daemon.config.fleet import FleetConfig
from daemon.config.names import tenant_namespaces
from daemon.policy.state import Jobs, Nodes
from daemon.policy.types import RATE_KINDS, Notification, Plan

log = logging.getLogger("gpu_autoscaler.actuator.kubernetes")

RETRY = object()  # _pod: the API did not answer whether the pod may be evicted; try again next cycle

PRIORITY_CLASSES = {
    "high": (1_000_000, "PreemptLowerPriority", "gpu-autoscaler: high tier, never preempted by the daemon"),
    "normal": (10_000, "PreemptLowerPriority", "gpu-autoscaler: normal tier"),
    "low": (0, "Never", "gpu-autoscaler: preemptible batch work"),
}


class DraUnread(RuntimeError):
    """The DRA kinds could not be read while the config names GPU DeviceClasses: the DRA nodes and pods are the
    plan's Nodes and Jobs, so a read without them is not the cluster (its DRA tenants would read as running
    nothing, their GPUs as no capacity): the cycle keeps its last plan and preempts nothing new. Not raised where
    the API answers 404 for them (_not_served: no DRA there, nothing missing)."""


def _not_served(why: str) -> bool:
    """Whether every DRA kind unread answered 404: the cluster serves no resource.k8s.io/v1 (before Kubernetes
    1.34, or the API turned off), so no GPU is asked through DRA there and none is missing. Any other answer (403
    not permitted, a watch down, an object unreadable) leaves GPUs that may be there unknown."""
    parts = [p for p in why.split("; ") if p]
    return bool(parts) and all(p.partition(": ")[2].startswith("404") or p.startswith("404") for p in parts)


class TimedApiClient(k8s.ApiClient):
    """The official ApiClient with a timeout on every request and no retries of its own (the next cycle is
    the retry). The client has no default timeout, so an API server that stops answering would hang the
    cycle; and a timeout or a refused connection surfaces as a urllib3 error, not an ApiException. Here both
    become ``ApiException(status=0)``, which every caller reports as that action's error. A 403 answer (RBAC
    refused the call) is also told to `refusals`, which logs the missing permission once (rbac.py)."""

    def __init__(self, configuration: k8s.Configuration | None = None, timeout_s: float = 10.0,
                 refusals: RbacRefusals | None = None) -> None:
        configuration = configuration or k8s.Configuration.get_default_copy()
        configuration.retries = 0
        super().__init__(configuration)
        self.timeout_s = timeout_s
        self.refusals = refusals  # None: the process's one record, rbac.REFUSALS

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):
        try:
            resp = super().call_api(method, url, header_params, body, post_params,
                                    _request_timeout if _request_timeout is not None else self.timeout_s)
        except urllib3.exceptions.HTTPError as exc:
            raise ApiException(status=0, reason=self._why(exc)) from None
        if resp.status == 403:  # the caller reports it as that action's error; the missing grant is logged once
            (self.refusals or rbac.REFUSALS).seen(method, url)
        return resp

    def _why(self, exc: urllib3.exceptions.HTTPError) -> str:
        """What went wrong, in the operator's words: nothing listens (refused) is not a slow server (timeout)."""
        cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason else exc
        host = self.configuration.host
        if isinstance(cause, urllib3.exceptions.NewConnectionError):
            return f"the API server {host} is unreachable (connection refused or no route)"
        if isinstance(cause, urllib3.exceptions.TimeoutError):
            return f"the API server {host} gave no answer within {self.timeout_s:g} s"
        return f"the API server {host} did not answer: {type(cause).__name__}"


def api_client(cfg: KubernetesActuatorConfig) -> k8s.ApiClient:
    """An API client from the in-cluster service account or a kubeconfig (actuators.kubernetes). A connection that
    cannot be set up is a ConfigError naming the key: the client's own words alone ("Service host/port is not set.",
    "Invalid kube-config file. No configuration found.") left a first-day user who ran the shipped ConfigMap's config
    outside the cluster, or named a kubeconfig that is not there, guessing which setting they came from."""
    try:
        if cfg.in_cluster:
            kcfg.load_incluster_config()
        else:
            kcfg.load_kube_config(config_file=str(cfg.kubeconfig) if cfg.kubeconfig else None)
    except kcfg.ConfigException as exc:
        if cfg.in_cluster:
            raise ConfigError(f"actuators.kubernetes.in_cluster = true, but this process is not in a pod with a "
                              f"ServiceAccount ({exc}); outside the cluster, set actuators.kubernetes.kubeconfig "
                              f"instead and in_cluster = false (docs/kubernetes.md, Try it from outside the cluster "
                              f"first)") from None
        where = (f"actuators.kubernetes.kubeconfig {cfg.kubeconfig}" if cfg.kubeconfig else
                 "actuators.kubernetes.kubeconfig unset, so $KUBECONFIG or ~/.kube/config")
        raise ConfigError(f"{where}: {exc}") from None
    return TimedApiClient(timeout_s=cfg.timeout_s)


class KubernetesActuator(FencedApply):
    name = "kubernetes"

    def __init__(self, api_client: k8s.ApiClient, cfg: KubernetesActuatorConfig, tenants: list[TenantConfig],
                 dry_run: bool = True, enforce_plan: bool = True, min_runtime_s: float = 0.0,
                 hold_label: str | None = None, fleet: FleetConfig | None = None,
                 view: ClusterView | None = None, gateway_limits: bool = True) -> None:
        self.core = k8s.CoreV1Api(api_client)
        # whether a gateway applies the plan's rate limits (ActuatorsConfig.gateway_limits): without, a tenant's
        # "throttled" Event would claim a limit nothing applies (_events)
        self.gateway_limits = gateway_limits
        # pods and nodes kept by list-then-watch (informer.py); None: listed on each read, as before
        self.view = view
        # a mixed fleet: node and pod GPU types (flavors.py); None: one model, as before
        self.resolver = fleet.resolver() if fleet is not None and fleet.typed else None
        self.scheduling = k8s.SchedulingV1Api(api_client)
        self.cfg = cfg
        self.dry_run = dry_run
        self.ns_of = tenant_namespaces(tenants)
        self.tenant_of = {ns: t for t, ns in self.ns_of.items()}
        self.min_runtime_s = min_runtime_s  # policy.preempt_min_runtime_s, re-checked on the live pod
        self.enforce_plan = enforce_plan  # False beside Kueue: quotas and reclaim are Kueue's, failover stays here
        self.hold_label = hold_label  # beside Kueue: the label and taint of its node holds (read back in cluster_nodes)
        self._retry: dict[str, str] = {}  # job id -> reason: failed-node evictions a PDB refused, retried each cycle
        self._never: set[str] = set()   # pods the view left out (never start, bound nowhere), as last logged
        self._dra: set[str] = set()     # pods asking for devices through DRA, as last logged
        # the DRA GPUs the last cluster_jobs read (dra.py; in its Jobs and Nodes), and what was last said of them
        self.dra: dra_gpus.DraGpus | None = None
        self._dra_said: dict[str, str] = {}
        self.resource_api = k8s.ResourceV1Api(api_client)
        self._bound = pod_affinity.BoundPods()   # the bound pods' rows for pod affinity, kept from cycle to cycle
        # job id -> (pod UID, PriorityClass) as the last cluster_jobs read it: what decisions were made on
        self._seen: dict[str, tuple[str, str]] = {}
        self.last_read: tuple[list, list] | None = None   # (pods, nodes) the last cluster_jobs read
        # namespace -> GPUs our quota caps (None: we have none there), as this replica wrote or read it in this
        # fencing term only (TermRecord): a replica leading again must not skip a cap another leader changed since
        self._quotas: TermRecord[str, int | None] = TermRecord(lambda: self.guard)
        self._classes_ok = False
        self._quotas_swept = False  # start-up: our quotas that no plan of this configuration can ask for are gone
        self.guard: FenceGuard = NO_FENCE
        # the admission policies' parameters (deploy/kubernetes/admission/), when the config names their object
        self.admission = (AdmissionParams(api_client, cfg.admission_params,
                                          params_spec(tenants, self.ns_of, cfg.gpu_resource, hold_label,
                                                      cfg.jobset_controller), dry_run)
                          if cfg.admission_params else None)

    @staticmethod
    def from_config(cfg: KubernetesActuatorConfig, tenants: list[TenantConfig], dry_run: bool = True,
                    enforce_plan: bool = True, min_runtime_s: float = 0.0,
                    hold_label: str | None = None, fleet: FleetConfig | None = None,
                    view: ClusterView | None = None, gateway_limits: bool = True) -> "KubernetesActuator":
        return KubernetesActuator(api_client(cfg), cfg, tenants, dry_run, enforce_plan, min_runtime_s, hold_label,
                                  fleet, view=view, gateway_limits=gateway_limits)

    def start_view(self) -> None:
        """The service starts: the watches of the view begin (KeepsClusterView)."""
        if self.view is not None:
            self.view.start()

    def stop_view(self) -> None:
        if self.view is not None:
            self.view.stop()

    def namespace(self, tenant: str) -> str | None:
        """The tenant's namespace, or None for a tenant that is not configured (never touched)."""
        return self.ns_of.get(tenant)

    def use_fence(self, guard: FenceGuard) -> None:
        """Check `guard` right before each write (ChecksFence)."""
        self.guard = guard

    def _may(self, what: str, jobs: tuple[str, ...] = ()) -> None:
        """Right before a write: raises FencingLost when this replica may not send it (never in a dry run)."""
        if not self.dry_run:
            self.guard.check(what, jobs)

    # ---- pieces -----------------------------------------------------------------------------
    def ensure_priority_classes(self, rep: ActionReport) -> None:
        if self._classes_ok:
            return
        for tier, (value, policy, desc) in PRIORITY_CLASSES.items():
            body = k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(
                                           name=priority_class_name(tier),
                                           labels={"app.kubernetes.io/managed-by": "gpu-autoscaler"}),
                                       value=value, preemption_policy=policy, global_default=False, description=desc)
            self._may(f"ensure PriorityClass {body.metadata.name}")
            rep.actions.append(f"ensure PriorityClass {body.metadata.name} value={value}")
            if self.dry_run:
                continue
            try:
                self.scheduling.create_priority_class(body)
            except ApiException as exc:
                if exc.status != 409:  # 409: exists already
                    rep.errors.append(f"PriorityClass {body.metadata.name}: {exc.status} {exc.reason}")
                    return
        self._classes_ok = not self.dry_run

    def quota_body(self, namespace: str, gpus: int) -> k8s.V1ResourceQuota:
        return k8s.V1ResourceQuota(
            metadata=k8s.V1ObjectMeta(name=self.cfg.quota_name, namespace=namespace,
                                      labels={"app.kubernetes.io/managed-by": "gpu-autoscaler"}),
            # only non-preemptible pods count: low-priority pods may borrow idle GPUs (they can be evicted)
            spec=k8s.V1ResourceQuotaSpec(
                hard={f"requests.{self.cfg.gpu_resource}": str(int(gpus))},
                scope_selector=k8s.V1ScopeSelector(match_expressions=[k8s.V1ScopedResourceSelectorRequirement(
                    scope_name="PriorityClass", operator="NotIn", values=[priority_class_name("low")])])))

    def set_quota(self, rep: ActionReport, tenant: str, gpus: int) -> None:
        ns = self.namespace(tenant)
        if ns is None:
            return  # not a configured tenant: its namespace is not ours to cap
        if self._quotas.get(ns) == gpus:
            return
        body = self.quota_body(ns, gpus)
        self._may(f"ResourceQuota {ns}/{self.cfg.quota_name} = {gpus}")
        rep.actions.append(f"ResourceQuota {ns}/{self.cfg.quota_name} requests.{self.cfg.gpu_resource}={gpus}")
        if self.dry_run:
            return
        try:
            try:
                self.core.replace_namespaced_resource_quota(self.cfg.quota_name, ns, body)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                self.core.create_namespaced_resource_quota(ns, body)
            self._quotas[ns] = gpus
        except ApiException as exc:
            rep.errors.append(f"ResourceQuota {ns}: {exc.status} {exc.reason}")

    def drop_quota(self, rep: ActionReport, ns: str, why: str = "the plan caps this tenant no longer") -> None:
        """The plan caps this tenant no longer (it is high-tier now, or no cap is wanted), or the daemon stops:
        delete our quota there, so no cap stays behind that no plan asked for. A quota without our label is
        left alone."""
        if ns in self._quotas and self._quotas[ns] is None:
            return
        try:
            cur = self.core.read_namespaced_resource_quota(self.cfg.quota_name, ns)
        except ApiException as exc:
            if exc.status == 404:
                self._quotas[ns] = None
            else:
                rep.errors.append(f"ResourceQuota {ns}: {exc.status} {exc.reason}")
            return
        if (cur.metadata.labels or {}).get("app.kubernetes.io/managed-by") != "gpu-autoscaler":
            self._quotas[ns] = None
            return
        if self._delete_our_quota(rep, ns, why):
            self._quotas[ns] = None

    def _delete_our_quota(self, rep: ActionReport, ns: str, why: str) -> bool | None:
        """Delete our quota in `ns` (the caller checked it is ours): True once it is gone (a 404 too), False when
        the API refused (reported), None in a dry run (nothing sent)."""
        self._may(f"delete ResourceQuota {ns}/{self.cfg.quota_name}")
        rep.actions.append(f"delete ResourceQuota {ns}/{self.cfg.quota_name}: {why}")
        if self.dry_run:
            return None
        try:
            self.core.delete_namespaced_resource_quota(self.cfg.quota_name, ns)
        except ApiException as exc:
            if exc.status != 404:
                rep.errors.append(f"ResourceQuota {ns}: {exc.status} {exc.reason}")
                return False
        return True

    def sweep_quotas(self, rep: ActionReport) -> None:
        """Start-up reconcile of the quotas an earlier run left: delete our ResourceQuotas (our label and name)
        that no plan of this configuration can ask for: in a namespace that is no configured tenant's (a
        removed tenant), and every one beside Kueue, where the caps are Kueue's queues. The quotas of
        configured tenants are reconciled by every plan (set or dropped). Never in kube-*. Retried each
        cycle until it succeeds once."""
        selector = "app.kubernetes.io/managed-by=gpu-autoscaler"
        try:
            items = self.core.list_resource_quota_for_all_namespaces(label_selector=selector).items
        except ApiException as exc:
            rep.errors.append(f"ResourceQuotas: cannot list ours: {exc.status} {exc.reason}")
            return
        failed = False
        for q in items:
            ns, name = q.metadata.namespace, q.metadata.name
            if name != self.cfg.quota_name or ns.startswith("kube-") or \
                    (q.metadata.labels or {}).get("app.kubernetes.io/managed-by") != "gpu-autoscaler":
                continue
            if self.enforce_plan and ns in self.tenant_of:
                continue
            why = "quotas are Kueue's here" if not self.enforce_plan else "not a configured tenant's namespace"
            if self._delete_our_quota(rep, ns, why) is False:
                failed = True
        self._quotas_swept = not failed

    def _pod(self, rep: ActionReport, job_id: str):
        """The live pod behind `job_id` if this daemon may evict it at all, else None (reason reported);
        RETRY when the API did not say (an error or no answer): the caller tries again next cycle."""
        ns, _, pod = job_id.partition("/")
        if not pod:
            rep.errors.append(f"job id {job_id!r} is not namespace/pod")
            return None
        if ns not in self.tenant_of:
            rep.errors.append(f"refused to evict {job_id}: namespace {ns!r} is not a tenant's")
            return None
        try:
            live = self.core.read_namespaced_pod(pod, ns)
        except ApiException as exc:
            if exc.status == 404:
                rep.actions.append(f"skip {job_id}: gone")
                return None
            rep.errors.append(f"read pod {job_id}: {exc.status} {exc.reason}")
            return RETRY
        if not evictable(live):
            rep.actions.append(f"skip {job_id}: DaemonSet or mirror pod")
            return None
        return live

    def _changed(self, job_id: str, live) -> str | None:
        """Why the live pod is not the one the cycle read (cluster_jobs) and decided on, or None when it is (or the
        cycle did not read it): another UID is another pod under the same name (a StatefulSet's, a re-created
        one); another PriorityClass changes what may be done to it. Checked right before an eviction, which then
        carries the UID as its precondition, so the API refuses it if the pod is replaced in between."""
        seen = self._seen.get(job_id)
        if seen is None:
            return None
        uid, pclass = seen
        if live.metadata.uid != uid:
            return f"not the pod the cycle read (UID {live.metadata.uid}, read {uid}): replaced, left alone"
        if (live.spec.priority_class_name or "") != pclass:
            return (f"its PriorityClass is {live.spec.priority_class_name!r} now, {pclass!r} when the cycle read it: "
                    "left alone")
        return None

    def _evict(self, rep: ActionReport, job_id: str, reason: str, uid: str | None = None) -> bool:
        """Eviction API with the configured grace period; False when refused (a PDB answers 429). `uid`: the pod
        just checked; the eviction's precondition, so a pod re-created under the name meanwhile is not evicted."""
        ns, _, pod = job_id.partition("/")
        body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=pod, namespace=ns,
                                                         annotations={"gpu-autoscaler/reason": reason[:250]}),
                              delete_options=k8s.V1DeleteOptions(
                                  grace_period_seconds=self.cfg.grace_period_s,
                                  preconditions=k8s.V1Preconditions(uid=uid) if uid else None))
        self._may(f"evict {job_id}", (job_id,))
        rep.actions.append(f"evict {job_id} (grace {self.cfg.grace_period_s} s)")
        if self.dry_run:
            return True
        try:
            self.core.create_namespaced_pod_eviction(pod, ns, body)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            if exc.status == 409 and uid:
                rep.actions.append(f"skip {job_id}: replaced before the eviction (its UID is not {uid})")
                return True
            why = "a PodDisruptionBudget refused it, retried next cycle" if exc.status == 429 else exc.reason
            rep.errors.append(f"evict {job_id}: {exc.status} {why}")
            if exc.status == 429:
                rep.not_freed.append(job_id)
            return False

    def evict(self, rep: ActionReport, job_id: str, reason: str) -> None:
        live = self._pod(rep, job_id)
        if live is None or live is RETRY:  # a plan preemption: the next plan asks again if still needed
            return
        if live.spec.priority_class_name != priority_class_name("low"):
            rep.errors.append(f"refused to evict {job_id}: PriorityClass {live.spec.priority_class_name!r} "
                              "is not preemptible")
            return
        if not holds_gpus(live):
            rep.actions.append(f"skip {job_id}: {live.status.phase}")
            return
        self._evict_if_unchanged(rep, job_id, reason, live)

    def _evict_if_unchanged(self, rep: ActionReport, job_id: str, reason: str, live) -> None:
        """The last checks of every eviction of a running pod the cycle chose (a preemption, a reclaim): not before
        policy.preempt_min_runtime_s (_too_young), and only the pod the cycle read, still in its PriorityClass
        (_changed; the eviction carries the UID as its precondition). A skip is said in the report."""
        if self._too_young(rep, job_id, live):
            return
        why = self._changed(job_id, live)
        if why is not None:
            rep.actions.append(f"skip {job_id}: {why}")
            return
        self._evict(rep, job_id, reason, live.metadata.uid)

    def _too_young(self, rep: ActionReport, job_id: str, live) -> bool:
        """Whether the live pod has run less than policy.preempt_min_runtime_s (said in the report): the minimum
        run time protects a pod from a health requeue as from a preemption."""
        started = live.status.start_time
        ran = (dt.datetime.now(dt.timezone.utc) - started).total_seconds() if started is not None else None
        if ran is not None and ran < self.min_runtime_s:
            rep.actions.append(f"skip {job_id}: ran {ran:.0f} s, under policy.preempt_min_runtime_s = "
                               f"{self.min_runtime_s:g}")
            return True
        return False

    # ---- actuator interface (apply: FencedApply) ----------------------------------------------
    def _apply(self, rep: ActionReport, plan: Plan) -> None:
        if self.admission is not None:  # first: the policies know the tiers before the high class exists
            self.admission.sync(rep, self._may)
        self.ensure_priority_classes(rep)  # Kueue takes workload priority from these too
        for jid, reason in list(self._retry.items()):  # failed-node pods a PDB or an API error held back
            live = self._pod(rep, jid)
            if live is None or (live is not RETRY and self._evict(rep, jid, reason)):
                del self._retry[jid]
        if not self._quotas_swept:
            self.sweep_quotas(rep)
        if not self.enforce_plan:
            return
        for tenant, gpus in sorted(plan.quotas.items()):
            self.set_quota(rep, tenant, gpus)
        if plan.quotas:  # a plan without any quota (no good plan yet) changes none
            for tenant, ns in sorted(self.ns_of.items()):
                if tenant not in plan.quotas:
                    self.drop_quota(rep, ns)
        for p in plan.preemptions:
            self.evict(rep, p.job_id, p.reason)

    def release_holds(self) -> ActionReport:
        """The daemon stops: our quota goes from every tenant namespace (a cap nobody keeps up to date would go on
        rejecting pods at admission at a stale number); no pod stops, a quota without our label stays. Beside
        Kueue there is none (the Kueue actuator lets its holds go)."""
        rep = ActionReport(self.name, self.dry_run)
        if self.enforce_plan:
            with stop_on_fence(rep):
                for ns in sorted(set(self.ns_of.values())):
                    self.drop_quota(rep, ns, "the daemon stops")
        return rep

    def lists_every_job(self) -> bool:
        """No: cluster_jobs lists the tenant namespaces' pods only; another namespace's are unknown, not absent."""
        return False

    def cluster_jobs(self, tenants: tuple[str, ...]) -> Jobs:
        """Pods of tenant namespaces that ask for GPUs, Pending or Running, as the policy's Jobs (view.py).
        Raises ApiException when the API does not answer, ViewStale when the watched view is stale, DraUnread when
        DRA GPU classes are configured and the DRA kinds could not be read (not served, not permitted, a watch
        down, an object unreadable: said in one line by _read_dra). With a view, this is the read that takes the
        cycle's snapshot."""
        anti_pods = None   # the pods with pod anti-affinity, as the view keeps them; listed: looked for in `pods`
        if self.view is not None:
            snap = self.view.snapshot()
            pods, nodes, anti_pods = snap.pods, snap.nodes, snap.anti_pods
            dra_objs, dra_why, dra_over, dra_over_ns = snap.dra, snap.dra_why, snap.dra_over, snap.dra_over_ns
        else:
            pods = self.core.list_pod_for_all_namespaces(field_selector=LIVE_PODS).items
            nodes = self.core.list_node().items
            dra_objs, dra_why, dra_over = self._list_dra()
            dra_over_ns = None
        self._seen = {f"{p.metadata.namespace}/{p.metadata.name}": (p.metadata.uid, p.spec.priority_class_name or "")
                      for p in pods if p.metadata.namespace in self.tenant_of}
        self.last_read = (pods, nodes)   # what this read took: the Kueue actuator reads its waiting Workloads beside it
        left_out: dict[str, str] = {}
        dra: dict[str, str] = {}
        plugin = self._plugin_nodes(nodes)
        if self.cfg.dra_device_classes:   # first: the DRA GPUs are in the Jobs
            dra.update(self._read_dra(pods, dra_objs, dra_why, dra_over, dra_over_ns, set(plugin)))
            # unread: an object the reader could not read, or the kinds failed but for 404 (a view built without
            # the DRA kinds, dra_why "", never is with DRA classes configured: wiring.py)
            if self.dra is None and (dra_objs is not None or (dra_why and not _not_served(dra_why))):
                raise DraUnread(self._dra_said.get("why", "DRA GPUs are not read") + ": the cluster's read is "
                                "refused (a cluster without its DRA GPUs is not the cluster); grant list and watch "
                                "on them (deploy/kubernetes/clusterrole.yaml), or set "
                                "actuators.kubernetes.dra_device_classes = {} where no GPU is asked through DRA")
        counted = self.dra if self.dra is not None and self.dra.supply else None
        jobs = pods_as_jobs(pods, self.tenant_of, self.cfg.gpu_resource, tenants, resolver=self.resolver,
                            never=never_starts(nodes, self.cfg.gpu_resource, self.resolver, self.hold_label,
                                               pods, self._bound, anti_pods, dra=counted),
                            left_out=left_out, node_names={n.metadata.name for n in nodes},
                            schedulers=tuple(self.cfg.scheduler_names),
                            uncounted=None if self.cfg.dra_device_classes else dra,
                            dra_gpus=counted.job_gpus() if counted else None,
                            dra_accepts=counted.accepts if counted else None,
                            plugin_types=tuple(sorted(set(plugin.values()))) if counted and self.resolver else None)
        if counted is not None:   # a DRA pod that never starts is no DRA demand either (the summary, the gauge)
            counted.drop(left_out)
        if self.dra is not None and self._dra_said.get("summary") != (line := self.dra.summary()):
            log.info("%s", line)
            self._dra_said["summary"] = line
        for pod in sorted(left_out.keys() - self._never):   # once per pod
            log.warning("pod %s %s", pod, left_out[pod])
        self._never = set(left_out)
        for pod in sorted(dra.keys() - self._dra):
            log.warning("pod %s %s", pod, dra[pod])
        self._dra = set(dra)
        return jobs

    def _plugin_nodes(self, nodes: list) -> dict[str, str]:
        """The nodes whose device plugin publishes GPUs (the GPU resource, or MIG instances), and their type ('' on a
        one-model cluster): dra.py leaves their slices out, and a device-plugin pod naming no type accepts these."""
        out = {}
        for n in nodes:
            alloc = (n.status.allocatable or {}) if n.status else {}
            if any(gpu_quantity(q) > 0 for r, q in alloc.items() if r == self.cfg.gpu_resource or
                   r.startswith(MIG_PREFIX)):
                out[n.metadata.name] = node_type(self.resolver, n) if self.resolver is not None else ""
        return out

    def _list_dra(self) -> tuple[dict[str, list] | None, str, dict[str, int] | None]:
        """Without a watched view: the DRA kinds listed (each read), or why not (the API's answer)."""
        if not self.cfg.dra_device_classes:
            return None, "", None
        try:
            objs = dict(zip(DRA_KINDS, (self.resource_api.list_resource_slice().items,
                                        self.resource_api.list_resource_claim_for_all_namespaces().items,
                                        self.resource_api.list_resource_claim_template_for_all_namespaces().items)))
        except ApiException as exc:
            return None, f"{exc.status} {exc.reason}", None
        return objs, "", None

    def _read_dra(self, pods: list, objs: dict[str, list] | None, why: str,
                  over: dict[str, int] | None, over_ns: dict[str, dict[str, int]] | None = None,
                  plugin_nodes: set[str] | None = None) -> dict[str, str]:
        """The DRA GPUs (dra.py) into ``self.dra``, which cluster_jobs and cluster_nodes put in the plan's Jobs and
        Nodes; `plugin_nodes`: the nodes whose device plugin publishes GPUs (read as it has them). Said in the
        log when it changes (the counts by cluster_jobs, once the pods that never start are out of them): why they
        are not read (a kind not served, not permitted, a watch down), and that they are partial (more objects
        than actuators.kubernetes.dra_max_objects, or of one namespace than dra_max_objects_per_namespace:
        `over_ns`, whose namespaces' pods are said not read rather than counted short). The pods whose DRA GPUs are
        not counted, and why (pod id -> line)."""
        said: dict[str, str] = {}
        now = dt.datetime.now(dt.timezone.utc)
        if objs is None:
            self.dra = None
            said["why"] = f"DRA GPUs are not read: {why} (resource.k8s.io/v1 {', '.join(DRA_KINDS)})"
        else:
            try:
                self.dra = dra_gpus.read_dra(pods, objs["resourceslices"], objs["resourceclaims"],
                                             objs["resourceclaimtemplates"], dict(self.cfg.dra_device_classes),
                                             self.tenant_of, self.resolver,
                                             partial_ns=dra_gpus.partial_namespaces(over_ns),
                                             plugin_nodes=plugin_nodes or set(),
                                             drains=lambda p: drains_soon(p, self.cfg.grace_period_s, now))
            except Exception as exc:   # noqa: BLE001 - read only: one object it cannot read never stops the pods'
                self.dra = None        # read the plan needs; the counts are unknown this cycle, said once
                said["why"] = (f"DRA GPUs are not read this cycle: an object could not be read "
                               f"({type(exc).__name__}: {str(exc)[:200]})")
            else:   # the counts' line is cluster_jobs's, once the pods that never start are out of them
                if "summary" in self._dra_said:
                    said["summary"] = self._dra_said["summary"]
            if over and self.dra is not None:
                per_ns = (f" or dra_max_objects_per_namespace ({self.cfg.dra_max_objects_per_namespace})"
                          if over_ns else "")
                said["over"] = ("DRA GPUs are partial: " + ", ".join(f"{n} {k}" for k, n in sorted(over.items()))
                                + f" beyond actuators.kubernetes.dra_max_objects ({self.cfg.dra_max_objects})"
                                + per_ns + " not read"
                                + (f", by namespace: {dra_gpus.over_by_namespace(over_ns)}" if over_ns else ""))
        for k, line in said.items():
            if self._dra_said.get(k) != line:
                log.warning("%s", line)
        self._dra_said = said
        return dict(self.dra.uncounted) if self.dra is not None else {}

    def cluster_nodes(self, tenants: tuple[str, ...]) -> Nodes:
        """Every node as the policy's Nodes: allocatable GPUs, the GPUs of the pods bound there, those of pods
        being deleted as draining, cordoned/NotReady/foreign-tainted nodes as 0 GPUs and closed, our hold label
        as the holder (view.py). Raises ApiException when the API does not answer, ViewStale when the watched
        view is stale; with a view, the cycle's snapshot (the one cluster_jobs took)."""
        if self.view is not None:
            snap = self.view.current()
            nodes, pods = snap.nodes, snap.pods
        else:
            nodes = self.core.list_node().items
            pods = self.core.list_pod_for_all_namespaces(field_selector=LIVE_PODS).items
        return nodes_view(nodes, pods, self.cfg.gpu_resource, tenants, self.hold_label, self.resolver,
                          drain_s=self.cfg.grace_period_s, dra_nodes=self.dra.node_rows() if self.dra else None)

    def node_names(self) -> set[str]:
        if self.view is not None:
            return {n.metadata.name for n in self.view.snapshot().nodes}
        return {n.metadata.name for n in self.core.list_node().items}

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        return [(f"{p.metadata.namespace}/{p.metadata.name}", self.tenant_of[p.metadata.namespace])
                for p in pods.items if p.status.phase in ("Running", "Pending")
                and p.metadata.namespace in self.tenant_of and evictable(p)]

    def node_down_confirmed(self, node: str) -> bool | None:
        """Whether the API sees `node` as failed (ReportsNodeHealth): its Ready condition False or Unknown (the
        node controller's verdict on a kubelet that stopped reporting) is True, Ready True is False; None
        when the API does not answer, does not know the node or shows no Ready condition."""
        try:
            live = self.core.read_node(node)
        except ApiException as exc:
            log.warning("cannot read node %s: %s %s", node, exc.status, exc.reason)
            return None
        ready = [c.status for c in ((live.status.conditions if live.status else None) or []) if c.type == "Ready"]
        if not ready:
            return None
        return ready[0] != "True"

    def fence_node(self, node: str, reason: str) -> ActionReport:
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            self._may(f"cordon {node}")
            rep.actions.append(f"cordon {node}")
            if not self.dry_run:
                try:
                    self.core.patch_node(node, {"spec": {"unschedulable": True}})
                except ApiException as exc:
                    rep.errors.append(f"cordon {node}: {exc.status} {exc.reason}")
        return rep

    def requeue(self, job_ids: list[str], reason: str) -> ActionReport:
        """Pods on a dead node: evicted through the Eviction API with the grace period (never a grace-0
        delete), so their controllers recreate them elsewhere; a PDB refusal is retried each cycle."""
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            for jid in job_ids:
                live = self._pod(rep, jid)
                if live is RETRY or (live is not None and not self._evict(rep, jid, reason)):
                    self._retry[jid] = reason
        return rep

    def reclaim(self, job_ids: list[str], reason: str) -> ActionReport:
        """Pods the health policy found idle or hung: evicted through the Eviction API with the grace period (a
        PDB's refusal is reported, not retried: the next cycle decides again on fresh telemetry). DaemonSet and
        mirror pods and pods outside tenant namespaces are never touched; a pod not running or younger than
        policy.preempt_min_runtime_s is skipped, and so is one that is not the pod the cycle read or not in its
        PriorityClass (_changed; the eviction carries the UID as its precondition), and a pod with no controller
        (ownerReferences) unless reclaim_bare_pods: nothing would recreate it. Each eviction is fenced."""
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            for jid in job_ids:
                live = self._pod(rep, jid)
                if live is None or live is RETRY:
                    continue
                if not holds_gpus(live):
                    rep.actions.append(f"skip {jid}: {live.status.phase}")
                    continue
                if not (live.metadata.owner_references or []) and not self.cfg.reclaim_bare_pods:
                    # nothing recreates a bare pod: its "requeue" would be its deletion
                    rep.actions.append(f"skip {jid}: no controller (ownerReferences), an eviction would delete it "
                                       "for good (actuators.kubernetes.reclaim_bare_pods)")
                    continue
                self._evict_if_unchanged(rep, jid, reason, live)
        return rep

    def notify(self, notes: list[Notification]) -> ActionReport:
        """One Kubernetes Event per notification in the tenant's namespace, so `kubectl get events` says why."""
        rep = ActionReport(self.name, self.dry_run)
        with stop_on_fence(rep):
            self._events(rep, notes)
        return rep

    def _events(self, rep: ActionReport, notes: list[Notification]) -> None:
        if not self.gateway_limits:   # no gateway applies the limits: telling tenants they are throttled is false
            notes = [n for n in notes if n.kind not in RATE_KINDS]
        for n in notes[:200]:
            ns = self.namespace(n.tenant)
            if ns is None:
                continue
            ev = k8s.CoreV1Event(
                metadata=k8s.V1ObjectMeta(generate_name="gpu-autoscaler-", namespace=ns),
                # the API server refuses (422) an Event whose involvedObject.namespace is not its own namespace, even
                # for the Namespace object itself (cluster-scoped): so it names the namespace twice
                involved_object=k8s.V1ObjectReference(kind="Namespace", name=ns, namespace=ns, api_version="v1"),
                reason="".join(w.capitalize() for w in n.kind.split("_")), message=n.message[:1000],
                type="Warning" if n.kind != "relaxed" else "Normal",
                source=k8s.V1EventSource(component="gpu-autoscaler"))
            self._may(f"event {ns}: {n.kind}")
            rep.actions.append(f"event {ns}: {n.kind}")
            if self.dry_run:
                continue
            try:
                self.core.create_namespaced_event(ns, ev)
            except ApiException as exc:
                rep.errors.append(f"event {ns}: {exc.status} {exc.reason}")
