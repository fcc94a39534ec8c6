"""The config sections the plan is computed from: the cluster, its tenants, the cycle, the policy, the
rate limits and the simulator."""

from __future__ import annotations

from pydantic import Field, field_validator

from daemon.config.models_base import Tier
from gateway.configfile import Strict as _Strict


class ClusterConfig(_Strict):
    name: str = Field("default", description="this cluster's name: a model is used only on the cluster it was scored "
                      "on (`<source.kind>:<name>`; the shipped one on \"simulator:default\"), so renaming makes "
                      "forecaster.kind = auto score the baselines until retrain scores a model here")
    gpus: int = Field(1024, gt=0,
                      description="GPUs in the cluster (simulator, or a fallback when the source cannot tell; "
                                  "unset, a daemon whose source is down from the start sizes nothing from it)")
    gpus_per_node: int = Field(8, gt=0, description="GPUs per node of the simulated cluster and of the synthetic "
                               "replay: holds take whole nodes of this size and a job fits on one node. With "
                               "Slurm or Kubernetes the nodes are the scheduler's own and this is not read")


class InferenceConfig(_Strict):
    gpus_per_replica: int = Field(ge=1, description="GPUs of one replica (one job)")
    replica_rps: float = Field(gt=0, description="requests/s one ready replica serves")
    cold_start_s: float = Field(ge=0, description="seconds from a replica's placement to its first served request")
    headroom: float = Field(0.1, ge=0, description="the service's autoscaler's headroom over the rate it sees")
    scale_down_stabilization_s: float = Field(300.0, ge=0, description="the service's autoscaler scales down only "
                                              "to the largest replica count it recommended over this window "
                                              "(an HPA's behavior.scaleDown.stabilizationWindowSeconds, 300 s by "
                                              "default); scale-up is at once; 0 scales down at once")


class TenantConfig(_Strict):
    name: str = Field(min_length=1, description="the tenant as the source names it (with Prometheus: a value of "
                      "source.prometheus.tenant_label, by default the pod's namespace; beside a kubernetes or kueue "
                      "actuator a namespace is read as the tenant whose k8s_namespace it is), without '@' (it "
                      "separates a "
                      "tenant from its GPU types in the forecast's series); a listed tenant with no GPUs is 0, not "
                      "absent. Kubernetes: only listed tenants' namespaces are ever touched")
    tier: Tier = Field("normal", description="high: shares the guaranteed pool (policy.reserve_share) and gets GPUs "
                       "held for its forecast peak; each tier has its own req/s in ratelimits.levels. Unlisted "
                       "tenants are normal; which jobs may be preempted comes from the scheduler's job priority")
    slurm_account: str | None = Field(None, description="Slurm account whose jobs are this tenant's, and that its "
                                      "hold reservations admit; default: the tenant's name. Matched ignoring "
                                      "case, as Slurm does (it prints its accounts lower-case). Beside a slurm "
                                      "actuator, Prometheus' tenant label values are read as accounts too")
    k8s_namespace: str | None = Field(None, description="namespace whose pods are this tenant's (its quota, queues "
                                      "and evictions); default: the tenant's name. A `kube-*` namespace is never "
                                      "touched")
    rate_override: float | None = Field(None, gt=0, description="fixed req/s for this tenant, ignores load levels")
    job_gpus: int | None = Field(None, ge=1, description="GPUs of this tenant's typical job, read only by "
                                 "`simulate --data/--from-source` (the replay of this cluster's history); default: "
                                 "its --job-gpus flag, else --default-job-gpus (1)")
    inference: InferenceConfig | None = Field(None, description="`simulate`, `retrain` and `backtest` "
                                              "`--data`: this tenant is an inference service whose column holds "
                                              "requests/s, read as its GPU need; a "
                                              "`[tenants.inference]` table with gpus_per_replica, replica_rps, "
                                              "cold_start_s (and headroom, default 0.1, scale_down_stabilization_s, "
                                              "default 300) turns them into replicas "
                                              "(docs/own-cluster.md). The daemon forecasts it on its window "
                                              "means (forecaster.services)")

    @field_validator("name")
    @classmethod
    def _no_series_separator(cls, v: str) -> str:
        # "@" splits a forecast series "<tenant>@<GPU types>" (daemon/policy/fleet.py): the policy read a tenant
        # "a@b"'s series as tenant a's (its forecast added to a's holds, none left for "a@b"), the skill gate and the
        # start estimates did too, and on a mixed fleet with a type "b" a tenant token of "a@b" read a's series
        if "@" in v:
            raise ValueError(f"{v!r} holds '@', which separates a tenant from its GPU types in the forecast's series "
                             "(<tenant>@<types>): rename it")
        return v


class CycleConfig(_Strict):
    interval_s: float = Field(30.0, gt=0, description="seconds from the start of one cycle to the next (an alert "
                              "can run one sooner; an overrun cycle is followed at once). /healthz says unhealthy "
                              "when no cycle completed within max(3 x interval_s, 10 s)")
    resolution_s: int = Field(60, gt=0, description="step of the demand series and of the forecast")
    history_steps: int = Field(2880, ge=60, description="how much history the forecaster reads each cycle")
    horizon_steps: int = Field(60, ge=1, description="steps (of resolution_s) forecast each cycle; the policy's "
                               "lead times are cut to it, and a model in use that forecasts fewer steps is refused")
    stale_after_s: float = Field(180.0, gt=0, description="data older than this is stale: no new preemptions")
    max_missing_share: float = Field(0.2, ge=0, le=1, description="share of tenants without a fresh sample that "
                                                                  "makes the snapshot stale")
    max_plan_age_s: float = Field(1800.0, gt=0, description="a last good plan older than this gives way to the safe "
                                                            "default: no holds beyond the static pool, no preemptions")
    forget_tenant_after_s: float = Field(86400.0, gt=0, description="a tenant absent from every plan this long is "
                                         "forgotten: its per-tenant series leave /metrics and its `<prefix>:limit:"
                                         "<tenant>` key (one the redis actuator wrote) is deleted from Redis (the "
                                         "actuator reads this at start; the series follow a reload)")


class SkillGateConfig(_Strict):
    """Act on the forecast per tenant only where it has shown skill (daemon/forecasting/skill.py,
    docs/forecasting.md#the-skill-gate)."""

    enabled: bool = Field(False, description="plan a tenant on the forecast only while its forecast's holds lose "
                          "less (acting quantile's pinball loss of the peak over the lead windows) than the "
                          "reactive hold (demand now with headroom) on the same scored windows; other tenants, and "
                          "all until min_scored windows are scored, are planned reactively")
    margin: float = Field(0.1, ge=0, lt=1, description="the forecast is acted on when its loss is at most "
                          "(1 - margin) x the reactive loss: better by this share, since what it costs in "
                          "preemptions and idle holds is not in the loss")
    hysteresis: float = Field(0.05, ge=0, lt=1, description="a tenant acting on the forecast goes back to reactive "
                              "only when its loss exceeds (1 - margin + hysteresis) x the reactive loss")
    min_scored: int = Field(10, ge=1, description="forecasts scored for both rules (in every lead window) before "
                            "a tenant may act on the forecast (at most `window`)")
    window: int = Field(600, ge=1, description="the last scored forecasts the gate decides on (one is kept every "
                        "cycle.horizon_steps / 12 steps: by default 5 min, so 600 is 50 hours, and a daily rise the "
                        "forecast saw coming stays in the evidence until the next one)")
    service_quantile: dict[Tier, float] = Field(
        default_factory=lambda: {"high": 0.99},
        description="per tier, the quantile whose pinball loss scores an inference service's holds (a tenant with a "
        "`[tenants.inference]` table, or a replayed service); other tiers' services and every batch tenant are "
        "scored at policy.quantile. A service's shortfall is requests refused (429s), not a job that waits, and the "
        "high tier's SLO allows 0.1% of them: at 0.99 a GPU short weighs 99 GPUs idle (at 0.9, 9). {} scores every "
        "tenant at policy.quantile")
    batch_quantile: dict[Tier, float] = Field(
        default_factory=lambda: {"high": 0.5},
        description="per tier, the quantile whose pinball loss scores a batch tenant's holds (a tenant that is no "
        "inference service); tiers not listed are scored at policy.quantile. A batch hold's GPU held idle is a lower "
        "tier's job kept waiting or preempted, a GPU short one of this tier's jobs waiting: at 0.5 both weigh one "
        "GPU-minute, as the replay counts every tier (at 0.9 a GPU short weighs 9 idle, and a forecast that wins "
        "there can still cost the lower tiers more than it saves). The holds are still made at policy.quantile. {} "
        "scores them at policy.quantile")

    @field_validator("service_quantile", "batch_quantile")
    @classmethod
    def _quantiles_inside(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {t: q for t, q in v.items() if not 0 < q < 1}
        if bad:
            raise ValueError(f"each quantile must be between 0 and 1 (exclusive); got {bad}")
        return v


class PolicyConfig(_Strict):
    reserve_share: float = Field(0.2, ge=0, le=1, description="guaranteed pool for the high tier")
    lead_time_steps: int = Field(10, ge=0, description="how far ahead capacity is held for a predicted peak")
    preempt_lead_steps: int = Field(3, ge=1, description="how far ahead jobs are preempted (>= checkpoint drain)")
    quantile: float = Field(0.9, gt=0, lt=1, description="forecast quantile that is reserved for")
    headroom: float = Field(0.05, ge=0, le=1, description="a high-tier hold is the larger of its forecast peak and "
                            "its demand now, plus this share, rounded up to whole jobs of its largest job: with "
                            "8-GPU jobs a peak of 8 holds 16 (the hold_why event says so); 0: no headroom")
    preempt_budget_share: float = Field(0.02, ge=0, le=1,
                                        description="GPUs preempted per budget window, share of cluster, in whole "
                                        "GPUs: below one job's GPUs no such job is ever preempted (2% of 32 GPUs "
                                        "is 0; the plan's note says so)")
    preempt_budget_jobs: int = Field(500, ge=0, description="jobs preempted per budget window")
    preempt_budget_window_s: float = Field(30.0, gt=0, description="the budget refills over this much time, "
                                           "whatever triggers cycles (a token bucket holding one window)")
    hysteresis: float = Field(0.05, ge=0, lt=1, description="a hold grows at once and shrinks only once its target is "
                              "this share below the next smaller hold in whole jobs; 0: holds follow the target")
    max_wait_steps: int = Field(120, ge=1, description="wait of a low- or normal-priority job (all its queue stints) "
                                "after which it is admitted ahead of the high tier's borrowing (aging)")
    aging_cumulative: bool = Field(True, description="aging sums a job's wait over all its queue stints (requeues) "
                                   "and exempts a job aging started for aging_min_run_s; off: the current stint only")
    aging_min_run_s: float = Field(1800.0, ge=0, description="a job started through aging is not preempted "
                                   "before it has run this long")
    aging_before_high: bool = Field(True, description="aged jobs are held for before the high tier's forecast "
                                    "beyond its guarantee (min(static pool, its own hold)); off: after it")
    aging_max_share: float = Field(0.1, ge=0, le=1, description="aged work (admitted, or running its grace period) "
                                   "is bounded to this share of the GPUs; the longest waiter always gets one job")
    min_preempt_gpus: int = Field(1, ge=1, description="deficits smaller than this are not worth a preemption")
    preempt_min_runtime_s: float = Field(0.0, ge=0, description="a job younger than this is never preempted "
                                         "(like Slurm's PreemptExemptTime); the Slurm actuator re-checks it")
    preempt_quantile: float | None = Field(None, gt=0, lt=1, description="forecast quantile jobs are preempted for "
                                           "within preempt_lead_steps; none: `quantile`, as the hold. Lower: the "
                                           "hold covers the high quantile, preemption only the likely demand")
    replica_quantile: float | None = Field(None, gt=0, lt=1, description="read by `simulate` and the replay: "
                                           "forecast quantile an inference service's predictive replica autoscaler "
                                           "scales to (the peak over its cold start plus drain); none: `quantile`, "
                                           "as the hold. Lower: fewer replicas started ahead, more GPUs left to "
                                           "batch (docs/replay.md)")
    replica_ahead_tiers: list[Tier] = Field(default_factory=lambda: ["high", "normal", "low"],
                                            description="read by `simulate` and the replay: the tiers whose "
                                            "inference services' predictive replica autoscaler starts replicas ahead "
                                            "on the forecast; a service in another tier scales on its need now, as "
                                            "reactive (only the high tier's replicas ahead have holds and preemption "
                                            "behind them; others take the GPUs of their own tier's batch)")
    pool_high_tier: bool = Field(True, description="hold the high tier's reservations as one pool that any high-tier "
                                 "tenant may use (one Slurm reservation for all their accounts), not one hold each")
    preempt_cost_aware: bool = Field(True, description="preempt for forecast demand (not for jobs waiting now) only "
                                     "when it is forecast to arrive before the drain ends and the GPU-minutes it would "
                                     "use the cleared GPUs for exceed the work the preemption loses since the job's "
                                     "last checkpoint plus its drain (docs/replay.md#cost-aware-preemption)")
    preempt_worth_weight: float = Field(1.0, gt=0, description="cost-aware rule: what a GPU-minute of forecast "
                                        "protected demand served is worth against a GPU-minute of work a preemption "
                                        "loses (1: even; retrain's replay cost weighs a high-tier GPU-minute unmet "
                                        "as 4, retrain.replay_tier_weights)")
    preempt_drain_s: float | None = Field(None, ge=0, description="seconds a preempted job keeps its GPUs while it "
                                          "checkpoints and stops (Slurm GraceTime); none: the simulator's "
                                          "drain_steps x cycle.resolution_s, so the replay and the daemon agree")
    checkpoint_interval_s: float | None = Field(None, gt=0, description="seconds between a job's checkpoints: a "
                                                "preemption loses the work since the last one; none: the simulator's "
                                                "checkpoint_steps x cycle.resolution_s")
    skill_gate: SkillGateConfig = Field(default_factory=SkillGateConfig)


class RateLevel(_Strict):
    load: float = Field(ge=0, le=1.5, description="cluster load at which this level starts")
    high: float = Field(gt=0)
    normal: float = Field(gt=0)
    low: float = Field(gt=0)

    def rate(self, tier: Tier) -> float:
        return float(getattr(self, tier))


def _default_levels() -> list[RateLevel]:
    return [
        RateLevel(load=0.0, high=1000, normal=100, low=100),
        RateLevel(load=0.8, high=200, normal=50, low=100),
        RateLevel(load=0.9, high=200, normal=50, low=50),
    ]


class RateLimitConfig(_Strict):
    levels: list[RateLevel] = Field(default_factory=_default_levels, description="per-tier req/s by cluster load "
                                    "(GPUs in use / healthy GPUs): the last level whose `load` is reached applies; "
                                    "loads strictly increasing from 0.0. Default: from 0.8 the high tier drops to "
                                    "200 req/s and normal to 50, from 0.9 low to 50 too")
    hysteresis: float = Field(0.05, ge=0, lt=0.5, description="load must fall this far below a level to loosen")
    burst_seconds: float = Field(2.0, gt=0, description="bucket size as seconds of rate")

    @field_validator("levels")
    @classmethod
    def _sorted_from_zero(cls, v: list[RateLevel]) -> list[RateLevel]:
        if not v:
            raise ValueError("at least one level is needed")
        loads = [lvl.load for lvl in v]
        if loads != sorted(loads) or len(set(loads)) != len(loads):
            raise ValueError("levels must have strictly increasing load")
        if loads[0] != 0.0:
            raise ValueError("the first level must start at load 0.0")
        return v


class SimulatorConfig(_Strict):
    seed: int = Field(42, description="random seed of the synthetic demand: the same seed and settings give the same "
                      "cluster, run after run")
    tenants: int = Field(40, gt=0, description="simulated tenants, named tenant-0000, tenant-0001, ...")
    high_share: float = Field(0.1, ge=0, le=1, description="share of the simulated tenants in the high tier (at least "
                              "one when above 0): the first ones by name, twice as big on average, and at least 60% "
                              "of them with the 14:00 peak; a simulated tenant listed in [[tenants]] takes the tier "
                              "given there")
    low_priority_share: float = Field(0.5, ge=0, le=1, description="share of normal-tier demand that is preemptible")
    target_load: float = Field(0.85, gt=0, le=2, description="mean demand as a share of GPUs")
    peak_share: float = Field(0.3, ge=0, le=1, description="tenants with a daily 14:00 peak")
    drain_steps: int = Field(2, ge=0, description="steps a preempted job holds its GPUs while it checkpoints")
    checkpoint_steps: int = Field(30, ge=1, description="steps between a simulated job's checkpoints: a preempted "
                                  "job loses the work done since its last one (counted as lost GPU-steps)")
    start_time: str = Field("2026-01-04T13:30:00Z", description="simulated time (ISO 8601, UTC) of the first "
                            "generated step; the first cycle comes warmup_steps later, so with the defaults at 13:30, "
                            "half an hour before the 14:00 peak")
    warmup_steps: int = Field(11520, ge=0, description="history generated before the first cycle (8 days at the "
                              "default step): the forecaster reads its cycle.history_steps, the history store keeps "
                              "it whole, so the window proposals (7 days and a day before them) show from the "
                              "first cycle")
