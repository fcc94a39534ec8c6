"""The config sections of the actuators that apply a plan: Redis, Slurm, Kubernetes and Kueue."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from daemon.config.models_base import Tier
from gateway.configfile import Strict as _Strict


class RedisActuatorConfig(_Strict):
    url: str = Field("redis://127.0.0.1:6379/0", description="the Redis the gateways read: per-tenant limits, API "
                     "key digests, notifications; also the HA lease's Redis unless ha.redis_url is set. Log in as "
                     "the daemon's own ACL user (`redis://gpuas-daemon:PASSWORD@host:6379/0`, "
                     "deploy/redis/users.acl), never as the gateways'")
    prefix: str = Field("gpuas", description="prefix of every key the redis actuator writes (`<prefix>:limit:"
                        "<tenant>`, `<prefix>:apikeys`, `<prefix>:notifications`, ...): the gateways' redis.prefix "
                        "must be the same")
    gateway_user: str = Field("gpuas-gateway", min_length=1, description="the Redis ACL user the gateways log in "
                              "as: a daemon Redis URL (this url, ha.redis_url) that logs in as it is refused, since "
                              "every gateway could then write the lease, the overrides and the key map")


class SlurmActuatorConfig(_Strict):
    mode: Literal["requeue", "suspend"] = Field("requeue",
                                                description="suspend keeps GPUs allocated; requeue frees them")
    bin_dir: Path = Field(Path("/usr/bin"), description="directory of scontrol, squeue, sinfo and scancel (run from "
                          "here, never looked up on PATH)")
    slurm_conf: Path | None = Field(None, description="SLURM_CONF for scontrol/squeue (default: Slurm's own)")
    timeout_s: float = Field(10.0, gt=0, description="a Slurm command still running after this many seconds is "
                             "killed and fails: that action's error, or for a read (squeue, sinfo) the cycle's")
    # a job's priority class comes from its QOS if mapped, else from its partition, else "normal"
    priority_by_qos: dict[str, Tier] = Field(
        default_factory=lambda: {"high": "high", "low": "low", "preemptible": "low"},
        description="job QOS -> priority class; only jobs of class low are ever preempted. Checked before "
                    "priority_by_partition; a job matched by neither is normal")
    priority_by_partition: dict[str, Tier] = Field(default_factory=lambda: {"high": "high", "low": "low"},
                                                   description="job partition -> priority class, for a job whose "
                                                               "QOS is not in priority_by_qos")
    drain_failed_nodes: bool = Field(True, description="drain a node reported down so nothing new lands on it")
    warn_signal: str = Field("USR1", pattern=r"^[A-Z0-9]+$", description="sent to the batch script before a preemption")
    # off by default: a batch script that does not trap the signal is killed by it (and not requeued)
    warn_lead_s: float = Field(0.0, ge=0, description="time between the warning and the requeue (0: no warning)")
    # holds: one whole-node reservation (Flags=IGNORE_JOBS,MAGNETIC) per tenant the plan reserves GPUs for
    holds: bool = Field(True, description="hold the plan's reserved GPUs with a Slurm reservation")
    hold_tiers: list[Tier] = Field(default_factory=lambda: ["high", "normal", "low"],
                                   description="tiers whose tenants get a hold when the plan reserves GPUs for them "
                                               "(with slurm enabled: every tier, as the plan and simulator hold)")
    hold_name_prefix: str = Field("gpuas-hold", pattern=r"^[A-Za-z0-9_.-]+$",
                                  description="reservations named so are the daemon's own; no other is touched")
    window_name_prefix: str = Field("gpuas-win", pattern=r"^[A-Za-z0-9_.-]+$",
                                    description="recurring windows' reservations are named <prefix>-<window> "
                                                "(docs/windows.md); no other is touched by them")
    max_array_tasks: int = Field(10_000, ge=1, description="the most pending job-array tasks of one tenant read as "
                                 "jobs each cycle, lowest ids first (the rest are said once in the log and are no "
                                 "demand until fewer wait): a bound on what one tenant's huge array costs every "
                                 "cycle; raise it where a tenant's arrays can want more GPUs than this many tasks "
                                 "hold")
    max_eta_writes: int = Field(200, ge=1, description="the most start estimates written into pending jobs' "
                                "AdminComment each cycle (one fenced scontrol update each), the accounts taken in "
                                "turn, within one the furthest off first (never written, or a side became known or "
                                "unknown, then the most moved), then the soonest to start: a tenant's 10,000 new "
                                "pending jobs were 10,000 updates in one cycle, ahead of the other tenants' "
                                "estimates and the next plan; the rest are written in the next cycles")
    hold_shrink_delay_s: float = Field(300.0, ge=0,
                                       description="a hold shrinks only after wanting fewer nodes this long")
    # at_lead by default: a job without a time limit (INFINITE, the default of a partition with no DefaultTime)
    # never starts on a reservation that exists and is not active yet, so one made ahead idles its nodes all day
    windows_reserved: Literal["ahead", "at_lead"] = Field(
        "at_lead", description="when a window's reservation is made (docs/windows.md): at_lead, for its next "
                               "occurrence only, at its lead time (its nodes free for any job before; none made "
                               "while the daemon is down); ahead, recurring (DAILY/WEEKLY/WEEKDAY), at the first "
                               "plan (it holds while the daemon is down, but starts no job without a time limit)")

    @model_validator(mode="after")
    def _windows_are_not_holds(self) -> "SlurmActuatorConfig":
        # the holds release every reservation named <hold prefix>-*: a window's named so would be released
        h, w = self.hold_name_prefix, self.window_name_prefix
        if w == h or w.startswith(h + "-") or h.startswith(w + "-"):
            raise ValueError(f"actuators.slurm.window_name_prefix = {w!r} and hold_name_prefix = {h!r}: one names "
                             "the other's reservations (the holds would release the windows'); pick apart names")
        return self


class KubernetesActuatorConfig(_Strict):
    in_cluster: bool = Field(False, description="connect with the pod's service account (the daemon runs in the "
                             "cluster) instead of a kubeconfig; the kubernetes HA backend uses the same connection")
    kubeconfig: Path | None = Field(None, description="kubeconfig file (its current context) when not in_cluster; "
                                    "unset: $KUBECONFIG or ~/.kube/config")
    gpu_resource: str = Field("nvidia.com/gpu", description="extended resource a GPU is requested as: counted on "
                              "pods and nodes, and capped by the tenant quotas (`requests.<resource>`)")
    quota_name: str = Field("gpu-autoscaler", description="name of the ResourceQuota written in each tenant "
                            "namespace (capping GPUs of pods not in the low PriorityClass); only quotas of this name "
                            "with the daemon's managed-by label are changed or deleted, so use no name of your own")
    grace_period_s: int = Field(30, ge=0, description="seconds an evicted pod gets to shut down (the Eviction's "
                                "grace period, for preemptions and for a failed node's pods)")
    timeout_s: float = Field(10.0, gt=0, description="every API request: no answer within this is that action's error")
    reclaim_bare_pods: bool = Field(False, description="job health's requeue may evict a pod with no controller "
                                    "(no ownerReferences): nothing recreates it, so the eviction deletes it for good; "
                                    "false: such a pod is skipped and reported")
    admission_params: str | None = Field(None, pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$",
                                         description="name of the cluster-scoped AdmissionParams object the "
                                         "admission policies read (deploy/kubernetes/admission/, whose bindings name "
                                         "gpu-autoscaler): the daemon writes each tenant namespace's tier and the node "
                                         "holds its pods may tolerate. Unset: not written")
    jobset_controller: str = Field("system:serviceaccount:jobset-system:jobset-controller-manager", min_length=1,
                                   description="the user the JobSet controller's requests come as (its "
                                   "ServiceAccount's): written in the AdmissionParams object beside Kueue, so the "
                                   "queue-name rule admits the child Jobs it makes for a JobSet (the JobSet carries "
                                   "the queue name, they do not); a tenant's own Job claiming a JobSet owner is "
                                   "still refused")
    scheduler_names: list[str] = Field(["default-scheduler"], min_length=1,
                                       description="the schedulers that place pods in this cluster (their "
                                       "spec.schedulerName: kube-scheduler's profiles, a second scheduler): a tenant's "
                                       "pending pod naming another is placed by none, so it is no demand (said once in "
                                       "the log)")
    dra_device_classes: dict[str, str] = Field({"gpu.nvidia.com": "gpu.nvidia.com"},
                                               description="GPUs asked through Dynamic Resource Allocation "
                                               "(resource.k8s.io/v1): each DeviceClass whose devices are GPUs -> the "
                                               "driver whose ResourceSlices publish them (NVIDIA's DRA driver: "
                                               "gpu.nvidia.com for both). Their nodes, bound pods and pending pods are "
                                               "the plan's Nodes and Jobs, preempted for and held as device-plugin "
                                               "ones; the counts are logged and exported (gpuas_dra_gpus; "
                                               "docs/kubernetes.md). While they cannot be read (403, a watch down) "
                                               "the cluster's read is refused and the last plan kept; a cluster "
                                               "serving no resource.k8s.io/v1 (404) has none. Empty: the DRA kinds "
                                               "are not watched")
    dra_max_objects: int = Field(20000, ge=1, description="the most ResourceSlices, ResourceClaims and "
                                 "ResourceClaimTemplates (each kind) the view keeps: tenants create claims, and "
                                 "each one kept is memory; those beyond are not read, and the DRA counts say they "
                                 "are partial")
    dra_max_objects_per_namespace: int = Field(1000, ge=1, description="the most ResourceClaims and "
                                               "ResourceClaimTemplates (each kind) of one namespace the view keeps, "
                                               "so one tenant's objects never fill dra_max_objects and push another "
                                               "tenant's out; the DRA GPUs of a pod whose claim or template is beyond "
                                               "it are said not read, not counted")


class KueueActuatorConfig(_Strict):
    """Kueue mode: ClusterQueues per tier in one cohort (connection: actuators.kubernetes)."""
    cohort: str = Field("gpu-autoscaler", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                        description="the Cohort at the root of the daemon's tree: the high, low and tenant "
                                    "ClusterQueues and the normal and pool Cohorts sit in it")
    flavor: str = Field("default-flavor", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="ResourceFlavor name")
    queue_prefix: str = Field("gpuas", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                              description="ClusterQueues <prefix>-<tier>, LocalQueues <prefix> and <prefix>-low")
    gpu_resource: str = Field("nvidia.com/gpu", description="resource the queues' quotas are given in and node "
                              "holds count; keep it equal to actuators.kubernetes.gpu_resource")
    hold_label: str = Field("gpu-autoscaler.io/hold",
                            pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                            description="node label and taint key of a whole-node hold (value: the tenant)")
    window_name_prefix: str = Field("gpuas-win", pattern=r"^[A-Za-z0-9_.-]+$",
                                    description="recurring windows' reservations are named <prefix>-<window> "
                                                "(docs/windows.md); no other is touched by them")
    hold_shrink_delay_s: float = Field(300.0, ge=0,
                                       description="a node hold shrinks only after wanting fewer nodes this long")
    max_workloads_per_tenant: int = Field(1000, ge=1,
                                          description="the plan's bound: the most waiting Kueue Workloads of one "
                                                      "tenant the plan counts as demand (holds, preemption, aging) "
                                                      "each cycle, those Kueue serves first (priority, then the "
                                                      "oldest); the rest are said once in the log and are no demand "
                                                      "until fewer wait. Smaller than max_queued_per_namespace: the "
                                                      "plan needs only the work that could start soon")
    max_queued_per_namespace: int = Field(10_000, ge=1,
                                          description="the estimate's bound: the most waiting Kueue Workloads of one "
                                                      "tenant namespace read as pending jobs for the start-time "
                                                      "estimates each cycle, those Kueue serves first (priority, then "
                                                      "the oldest); the rest are said in one log line and get no "
                                                      "estimate. Not the plan's demand: "
                                                      "max_workloads_per_tenant")


class ActuatorsConfig(_Strict):
    dry_run: bool = Field(True, description="every actuator reports what it would do (log, /plan, the console) and "
                          "changes nothing; set false to act. The embedded simulator is driven either way")
    enabled: list[Literal["log", "redis", "slurm", "kubernetes", "kueue", "simulator"]] = Field(
        default_factory=lambda: ["log"],
        description="what carries out the plan: log (to the log), redis (limits and API keys for the gateways), "
                    "slurm, kubernetes (quotas, evictions, failover), kueue (queues and node holds; kubernetes beside "
                    "it keeps failover, PriorityClasses and Events). simulator needs source.kind = simulator, whose "
                    "cluster is driven whether listed or not")
    release_holds_on_stop: bool = Field(True, description="release scheduler holds on stop (Slurm reservations, "
                                                "Kueue node holds, Kubernetes quotas)")
    redis: RedisActuatorConfig = Field(default_factory=RedisActuatorConfig)
    slurm: SlurmActuatorConfig = Field(default_factory=SlurmActuatorConfig)
    kubernetes: KubernetesActuatorConfig = Field(default_factory=KubernetesActuatorConfig)
    kueue: KueueActuatorConfig = Field(default_factory=KueueActuatorConfig)

    @property
    def gateway_limits(self) -> bool:
        """Whether anything applies the plan's rate limits once the daemon acts: only the redis actuator does (the
        gateways read its limits). The one rule for "throttled": without it a tenant told it is throttled, or an
        API or report that says so, claims a limit nothing applies (the Kubernetes Events, the API, the shadow
        report)."""
        return "redis" in self.enabled

    @property
    def limits_enforced(self) -> bool:
        """Whether a gateway applies the plan's rate limits now: `gateway_limits`, and not in dry run (where the
        redis actuator writes nothing)."""
        return self.gateway_limits and not self.dry_run
