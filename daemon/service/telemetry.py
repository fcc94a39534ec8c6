"""The daemon's own Prometheus metrics: what it forecast, reserved, limited and preempted, and its health.

Label values are bounded: an alert name the failover config does not list is counted as `other` (a webhook
post may carry any name, and each would be a new series for ever), and a tenant absent from every plan for
`cycle.forget_tenant_after_s` loses its per-tenant series.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from daemon.policy.types import Plan
from forecaster.types import Forecast

OTHER_ALERT = "other"
FORGET_AFTER_S = 86400.0  # cycle.forget_tenant_after_s's default


class DaemonMetrics:
    def __init__(self, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.clock = clock
        self.cycle_seconds = Histogram("gpuas_cycle_duration_seconds",
                                       "Wall time of one collect-forecast-plan-act cycle",
                                       registry=r, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30))
        self.cycles = Counter("gpuas_cycles", "Cycles by outcome (ok, stale, source_error, error)", ["outcome"],
                              registry=r)
        self.staleness = Gauge("gpuas_data_staleness_seconds", "Age of the newest sample behind the last snapshot",
                               registry=r)
        self.source_up = Gauge("gpuas_source_up", "1 when the last collect succeeded", registry=r)
        self.plan_stale = Gauge("gpuas_plan_stale", "1 while the daemon is holding its last good plan", registry=r)
        self.last_good = Gauge("gpuas_last_good_plan_timestamp_seconds", "When the plan in force was made", registry=r)
        self.load = Gauge("gpuas_cluster_load_ratio", "GPUs in use / healthy GPUs", registry=r)
        self.capacity = Gauge("gpuas_cluster_capacity_gpus", "Healthy GPUs", registry=r)
        self.demand_capped = Gauge("gpuas_demand_capped_gpus", "GPUs of tenants' reported demand above their running "
                                   "jobs' GPUs on the scheduler, left out of the plan (the plan's demand_capped says "
                                   "whose)", registry=r)
        self.capacity_dropped = Gauge("gpuas_capacity_dropped_gpus", "GPUs the metrics report on nodes the "
                                      "scheduler does not list, left out of capacity", registry=r)
        self.dra_gpus = Gauge("gpuas_dra_gpus", "GPUs asked through Dynamic Resource Allocation (in the plan's "
                              "Jobs and Nodes: docs/kubernetes.md): the drivers' devices (supply), those allocated to "
                              "claims (allocated), those the pending pods' claims ask (pending); absent while not "
                              "read", ["state"], registry=r)
        self.dra_uncounted = Gauge("gpuas_dra_uncounted_pods", "Pods whose DRA requests the daemon cannot judge (All, "
                                   "CEL selectors, a class not configured), said once each in the log", registry=r)
        self.rate_level = Gauge("gpuas_rate_level", "Index of the load level in force", registry=r)
        # unknown until the first snapshot (a source down from the start): NaN, never 0 (an idle, empty cluster)
        for g in (self.load, self.capacity, self.staleness):
            g.set(float("nan"))
        self.fallback = Gauge("gpuas_forecaster_fallback", "1 when a baseline stands in for the model", registry=r)
        self.forecast = Gauge("gpuas_forecast_peak_gpus", "Peak forecast over the lead time", ["tenant", "quantile"],
                              registry=r)
        self.reservation = Gauge("gpuas_reservation_gpus", "GPUs held for a tenant", ["tenant"], registry=r)
        self.limit = Gauge("gpuas_rate_limit_rps", "Token-bucket rate per tenant", ["tenant"], registry=r)
        self.forecast_acting = Gauge("gpuas_forecast_acting", "1 while the skill gate (policy.skill_gate) plans the "
                                     "tenant on the forecast, 0 while it plans it reactively; absent while the gate "
                                     "is off. On a mixed fleet one per GPU type the tenant's work asks for "
                                     "(gpu_type; empty on a one-model cluster)", ["tenant", "gpu_type"], registry=r)
        self.preemptions = Counter("gpuas_preemptions", "Jobs preempted", ["tenant"], registry=r)
        self.actuator_errors = Counter("gpuas_actuator_errors", "Actuator failures", ["actuator"], registry=r)
        self.alerts = Counter("gpuas_alerts", "Alertmanager alerts received", ["alertname", "outcome"], registry=r)
        self.webhook_rejected = Counter("gpuas_webhook_rejected", "Webhook posts refused", ["reason"], registry=r)
        self.failover_seconds = Histogram("gpuas_node_failover_seconds", "Alert receipt to jobs requeued", registry=r,
                                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10))
        self.config_reloads = Counter("gpuas_config_reloads", "Config reloads (SIGHUP) by outcome (ok, error)",
                                      ["outcome"], registry=r)
        self.config_reload_ok = Gauge("gpuas_config_reload_ok", "0 while the last reload failed (running config kept)",
                                      registry=r)
        self.config_reload_ok.set(1)
        self.breaker_open = Gauge("gpuas_failover_breaker_open",
                                  "1 while mass node-down reports keep failover off (monitoring problem?)", registry=r)
        self.leader = Gauge("gpuas_leader", "1 while this replica may act (the leader, or the only replica); "
                            "0 on a standby", registry=r)
        self.leader.set(1)
        self.not_freed = Counter("gpuas_evictions_refused", "Evictions the cluster refused (a PodDisruptionBudget "
                                 "answered 429): those jobs' GPUs were not freed", ["actuator"], registry=r)
        self.fenced = Counter("gpuas_fenced_refusals", "Actions refused because this replica's fencing token was "
                              "stale", registry=r)
        self.state_write_errors = Counter("gpuas_state_write_errors", "Cycles whose plan could not be saved "
                                          "(disk full, I/O error)", registry=r)
        self.safe_default = Gauge("gpuas_safe_default",
                                  "1 while the last good plan is older than cycle.max_plan_age_s and the safe default "
                                  "(static pool only, no preemptions) is enforced", registry=r)
        self._tenants: set[str] = set()
        self._last_seen: dict[str, float] = {}          # tenant -> when a plan last had it (self.clock)
        self._forecast_labels: dict[str, set[str]] = {}  # tenant -> quantile labels it has a series for
        # per-tenant children by label values, with the value last set: labels() validates and locks on every
        # call, and a plan sets 4 series per tenant (10,000 tenants: 400 ms a cycle); a child is looked up once
        # and set only when its value changed. forget_tenants drops a tenant's entries with its series.
        self._kids: dict[str, dict[tuple[str, ...], list]] = {"reservation": {}, "limit": {}, "forecast": {},
                                                           "forecast_acting": {}}

    def count_alert(self, alertname: str, outcome: str, configured: Iterable[str]) -> None:
        """One alert received; names the failover config does not list share one `other` series."""
        self.alerts.labels(alertname if alertname and alertname in set(configured) else OTHER_ALERT, outcome).inc()

    def forget_tenants(self, present: Iterable[str], forget_after_s: float) -> list[str]:
        """Mark `present` as seen now; drop every per-tenant series of a tenant not seen for `forget_after_s`.

        Returns the tenants forgotten. A tenant that comes back gets new series (its preemption count from 0).
        """
        now = self.clock()
        for t in present:
            self._last_seen[t] = now
        gone = [t for t, seen in self._last_seen.items() if now - seen > forget_after_s]
        for t in gone:
            del self._last_seen[t]
            self._tenants.discard(t)
            for m in (self.reservation, self.limit, self.preemptions):
                m.remove(t)  # a no-op when the tenant never had that series
            for name in ("reservation", "limit"):
                self._kids[name].pop((t,), None)
            for key in [k for k in self._kids["forecast_acting"] if k[0] == t]:
                self.forecast_acting.remove(*key)
                del self._kids["forecast_acting"][key]
            for q in self._forecast_labels.pop(t, ()):
                self.forecast.remove(t, q)
                self._kids["forecast"].pop((t, q), None)
        return gone

    def _set(self, name: str, labels: tuple[str, ...], value: float) -> None:
        """Set the `name` gauge's child for `labels` to `value` (see `_kids`)."""
        kids = self._kids[name]
        hit = kids.get(labels)
        if hit is None:
            child = getattr(self, name).labels(*labels)
            child.set(value)
            kids[labels] = [child, value]
            if name == "forecast":
                self._forecast_labels.setdefault(labels[0], set()).add(labels[1])
        elif hit[1] != value:
            hit[0].set(value)
            hit[1] = value

    def observe_dra(self, supply: int | None, allocated: int = 0, pending: int = 0, uncounted: int = 0) -> None:
        """The DRA GPUs the Kubernetes view read this cycle; `supply` None: not read (the series go)."""
        if supply is None:
            self.dra_gpus.clear()
            self.dra_uncounted.set(0)
            return
        for state, v in (("supply", supply), ("allocated", allocated), ("pending", pending)):
            self.dra_gpus.labels(state).set(v)
        self.dra_uncounted.set(uncounted)

    def observe_plan(self, plan: Plan, forecast: Forecast | None, lead: int, fallback: bool,
                     forget_after_s: float = FORGET_AFTER_S) -> list[str]:
        """Export the plan; returns the tenants (and forecast series) forgotten now, whose series kept elsewhere
        (forecast quality, job health) the cycle drops too."""
        present = set(plan.limits) | set(plan.reservations) | {p.tenant for p in plan.preemptions} \
            | set(plan.forecast_acting)
        if forecast is not None:
            present.update(forecast.tenants)
        gone = self.forget_tenants(present, forget_after_s)
        self.plan_stale.set(1 if plan.stale else 0)
        self.fallback.set(1 if fallback else 0)
        if plan.stale:
            return gone
        if math.isfinite(plan.load):
            self.load.set(plan.load)
        self.capacity.set(plan.capacity)
        self.demand_capped.set(sum(plan.demand_capped.values()))
        self.capacity_dropped.set(plan.capacity_dropped)
        self.rate_level.set(plan.memory.rate_level)
        for t in self._tenants - set(plan.reservations):
            self._set("reservation", (t,), 0)
        for t, r in plan.reservations.items():
            self._set("reservation", (t,), r)
        self._tenants = set(plan.reservations)
        for t, lim in plan.limits.items():
            self._set("limit", (t,), lim.rate)
        for p in plan.preemptions:
            self.preemptions.labels(p.tenant).inc()
        # one series per verdict: a tenant's, or on a mixed fleet one per type it has (by_type); a series whose
        # verdict is gone (the gate turned off, a type the tenant no longer asks for) is dropped
        acting = {}
        for t, v in plan.forecast_acting.items():
            by = v.get("by_type")
            if by:
                acting.update({(t, k): 1.0 if x.get("acting") else 0.0 for k, x in by.items()})
            else:
                acting[(t, "")] = 1.0 if v.get("acting") else 0.0
        for key in [k for k in self._kids["forecast_acting"] if k not in acting]:
            self.forecast_acting.remove(*key)
            del self._kids["forecast_acting"][key]
        for key, value in acting.items():
            self._set("forecast_acting", key, value)
        if forecast is not None:
            tenants = forecast.tenants
            for q in forecast.quantiles:
                # the peak the hold acts on: the forecast's own peak quantile where it carries one for the window
                peaks = np.asarray(forecast.peak_over(max(1, lead), q), dtype=float)
                label = f"{q:g}"
                ok = np.isfinite(peaks)
                for i, v in zip(np.flatnonzero(ok).tolist(), peaks[ok].tolist()):
                    self._set("forecast", (tenants[i], label), v)
        return gone
