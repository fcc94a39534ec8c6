"""Inference services in the replay: requests per second in, replicas out, each replica serving only after a cold
start (issue 40, item 1).

An inference tenant's demand column is its GPU NEED at the rate its autoscaler sees (the previous step's observed
rate, as an HPA or KEDA on the request rate sees the last window): ceil(rate x (1 + headroom) / replica_rps) x
gpus_per_replica. So the forecast bank, the policy engine, holds and preemption stay as they are: they forecast
and hold GPUs. What the replay adds per inference tenant:

- the replicas its own autoscaler asks for each step, by strategy (``Autoscaler``): static and reactive the need
  now (an HPA); predictive the larger of that and the forecast's peak need over the next cold start + drain steps
  (AWS predictive scaling only ever adds to reactive); perfect the true need's peak over those steps. Every
  strategy keeps an HPA's scale-down stabilization (``InferenceSpec.scale_down_stabilization_s``, 300 s as
  HPA's default) on the need now: the count is the max of the needs over that window and of the forecast's
  replicas now, so scale-up is at once, scale-down of the measured need waits, and replicas started for a
  forecast rise leave as soon as the forecast no longer asks for them (``Autoscaler.wanted``). Without the
  window a burst's replicas left the next quiet minute and the next burst, a cold start later, was throttled:
  ServeGen's over-dispersed minutes made static and reactive miss the SLO at any headroom, a baseline no operator
  runs;
- the plan holds GPUs for those replicas and preempts for them on the forecast at the autoscaler's quantile
  (``InferenceRun.plan_forecast``): a hold at a higher quantile than the replicas ask for keeps GPUs idle that no
  replica will start on, and preempts batch work for them;
- a replica is one job of ``gpus_per_replica`` GPUs; it serves from ``cold_start_s`` after it was placed
  (``SimCluster.ready_per_tenant``), and on scale-down the newest replicas (cold ones first) go;
- the gateway (``Gateway``): a token bucket per tenant admits at min(ready replicas x replica_rps, the plan's
  limit for the tenant) with a burst of that rate x ``burst_seconds`` (a fluid bucket at step granularity, tokens
  carried); what it refuses is throttled (a 429 with Retry-After). Admitted requests the ready replicas cannot
  serve in the step wait in a backlog served first the next step: they are late. Per step, served + throttled +
  late == arrivals.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from daemon.forecasting.units import InferenceSpec, need_frame
from forecaster.types import Forecast

__all__ = ["Autoscaler", "Gateway", "InferenceSpec", "need_frame"]  # the spec and need: one home below, for retrain


def rate_future(demand: pd.DataFrame, expected: pd.DataFrame | None, specs: Mapping[str, InferenceSpec]) -> np.ndarray:
    """The trace as a forecast that knows the services' future RATES but not the draws knows it (the perfect
    forecast's ``rates_only`` knob, daemon/sim/replay.py): every service's demand column is its need at the rate its
    arrivals were drawn from (``expected``: ServeGen's window rate, the mean of each minute's draw), on the same
    shift as its demand (``need_frame``); batch tenants' columns are their true demand. The ceiling of what a
    forecast of the rate can do: the per-minute draws around it are noise no causal forecast sees."""
    if not specs:
        raise ValueError("rates_only: the workload has no inference services, so there is no rate to know")
    if expected is None:
        raise ValueError("rates_only: the workload has no expected rates (only observed ones, as a user's own "
                         "--data): the rates its arrivals were drawn from are not known")
    missing = [c for c in specs if c not in expected.columns]
    if missing:
        raise ValueError(f"rates_only: no expected rate for the services {', '.join(missing)}")
    need = need_frame(expected.reindex(demand.index)[list(specs)], specs)
    out = demand.copy()
    for c in specs:
        out[c] = need[c]
    return out.to_numpy(dtype=float)


class Autoscaler:
    """The GPUs each inference tenant's own autoscaler asks for at a step, by strategy (the module's docstring).

    Stateful by one thing, the HPA's: a ring of each service's last needs (by step), whose max over the service's
    stabilization window is the least count asked for (``stabilize``); the forecast's replicas add to it unheld."""

    def __init__(self, strategy: str, cols: np.ndarray, specs: list[InferenceSpec], step_s: int,
                 drain_steps: int, quantile: float, foresight: int | None = None) -> None:
        self.strategy, self.cols, self.quantile = strategy, cols, quantile
        self.foresight = foresight   # perfect: the steps of the future it knows (None: all; 0: the need now only)
        self.gpus = np.array([s.gpus_per_replica for s in specs], dtype=float)
        # the lead a new replica needs: its cold start, plus the drain of what is preempted for it
        self.lead = np.array([s.cold_steps(step_s) for s in specs], dtype=np.int64) + int(drain_steps)
        self.window = np.array([s.stabilization_steps(step_s) for s in specs], dtype=np.int64)
        size = int(self.window.max()) if len(specs) else 1
        self.ring = np.full((size, len(specs)), np.nan)           # recommendations, row k % size holds step k's
        self.ring_step = np.full(size, np.iinfo(np.int64).min, dtype=np.int64)  # the step each row holds

    def stabilize(self, k: int, recommended: np.ndarray) -> np.ndarray:
        """Step ``k``'s recommendation per service in, the count asked for out: the max of the recommendations
        of the last ``window`` steps (this one included; a missing one is skipped, all missing stays missing).
        Scale-up is at once (this step's recommendation is in the max), scale-down waits until the window holds
        no larger one: an HPA's behavior.scaleDown.stabilizationWindowSeconds. A step asked again replaces its
        recommendation."""
        row = k % len(self.ring_step)
        self.ring[row], self.ring_step[row] = recommended, k
        age = k - self.ring_step                                   # steps since each row's recommendation
        inside = (age[:, None] >= 0) & (age[:, None] < self.window[None, :])
        return np.fmax.reduce(np.where(inside, self.ring, np.nan), axis=0)

    def wanted(self, k: int, demand: np.ndarray, fc: Forecast | None,
               on_forecast: np.ndarray | None = None, future: np.ndarray | None = None) -> np.ndarray:
        """GPUs per inference tenant (``cols`` of the demand) at step ``k``, asked once per step in step order;
        ``fc`` the forecast made at the step before (its first step is step k), None when there is none yet.
        ``on_forecast`` (one flag per service, the skill gate's verdict made with that forecast; None: all) says
        which services' predictive autoscaler may act on the forecast: a service whose forecast has shown no skill
        scales reactively, as AWS predictive scaling only ever adds to what its reactive scaling decides where the
        forecast has earned it. ``future``: what the perfect autoscaler knows of the steps ahead (None: the demand
        itself; ``rate_future``: the services' need at their drawn-from rates); the need now is always the demand's.
        The count asked is the larger of the need now stabilized (``stabilize``: the HPA's scale-down window) and
        the strategy's recommendation as it is now, NOT stabilized: the forecast's replicas are a floor set ahead
        (an HPA's minReplicas raised by a predictive controller, AWS predictive scaling's minimum capacity), which
        the HPA's window does not hold once the forecast falls; the window keeps what the service was measured to
        need. Stabilizing the forecast's peak too kept its p90 replicas a window past every forecast rise that
        did not come, on GPUs the low tier's batch was queued for (ServeGen, issue 40). For static and reactive
        the recommendation is the need now, so this is the HPA's count as before."""
        rec = self.recommend(k, demand, fc, on_forecast, future)
        return np.fmax(self.stabilize(k, demand[k, self.cols]), rec)

    def recommend(self, k: int, demand: np.ndarray, fc: Forecast | None,
                  on_forecast: np.ndarray | None, future: np.ndarray | None = None) -> np.ndarray:
        """The strategy's recommendation at step ``k``, before the stabilization (``wanted``'s arguments)."""
        now = demand[k, self.cols]
        if self.strategy == "perfect":
            out = now.copy()
            known = demand if future is None else future
            for j, (c, lead) in enumerate(zip(self.cols, self.lead)):
                # with foresight f it knows f steps ahead and repeats the last beyond: the peak is over those
                ahead = known[k: k + (lead if self.foresight is None else min(lead, self.foresight)) + 1, c]
                if np.isfinite(ahead).any():
                    out[j] = np.fmax(now[j], np.nanmax(ahead))
            return out
        if self.strategy != "predictive" or fc is None:
            return now
        q = fc.quantile(self.quantile)[self.cols]
        out = now.copy()
        for j, lead in enumerate(self.lead):
            if on_forecast is not None and not on_forecast[j]:
                continue
            ahead = q[j, : lead + 1]
            if np.isfinite(ahead).any():
                peak = np.ceil(np.nanmax(ahead) / self.gpus[j] - 1e-9) * self.gpus[j]  # whole replicas
                out[j] = np.fmax(now[j], peak)
        return out


@dataclass
class StepRequests:
    """One step's requests per inference tenant."""

    arrivals: np.ndarray
    served: np.ndarray        # served in the step they arrived
    throttled: np.ndarray     # refused by the gateway's token bucket (429 with Retry-After)
    late: np.ndarray          # admitted, but served at a later step (or still waiting)


class Gateway:
    """Per inference tenant: a token bucket refilled at min(ready replicas x R, the plan's limit) req/s, holding
    at most that rate x ``burst_seconds`` tokens (carried from step to step), and the backlog of admitted requests
    the ready replicas have not served yet (served first at the next step)."""

    def __init__(self, n: int, burst_seconds: float) -> None:
        self.burst_seconds = float(burst_seconds)
        self.tokens = np.zeros(n)
        self.backlog = np.zeros(n)

    def step(self, arrivals: np.ndarray, serve_rps: np.ndarray, limit_rps: np.ndarray, step_s: float) -> StepRequests:
        a = np.maximum(np.nan_to_num(np.asarray(arrivals, dtype=float), nan=0.0), 0.0)
        rate = np.minimum(serve_rps, limit_rps)
        self.tokens = np.minimum(self.tokens, rate * self.burst_seconds)   # the bucket shrinks with its rate
        can = self.tokens + rate * step_s
        admitted = np.minimum(a, can)
        self.tokens = np.minimum(can - admitted, rate * self.burst_seconds)
        capacity = serve_rps * step_s
        old = np.minimum(self.backlog, capacity)                             # yesterday's late ones first
        on_time = np.minimum(admitted, capacity - old)
        late = admitted - on_time
        self.backlog += late - old
        return StepRequests(a, on_time, a - admitted, late)


class InferenceRun:
    """One replay run's inference tenants: what their autoscalers ask for each step, and their requests through
    the gateway, counted per tier into the meter (``inf_requests``, ``inf_served``, ``inf_throttled``,
    ``inf_late``)."""

    def __init__(self, specs: Mapping[str, InferenceSpec], rates: pd.DataFrame, tenants: tuple[str, ...],
                 tiers: tuple[str, ...], strategy: str, *, step_s: int, drain_steps: int, quantile: float,
                 burst_seconds: float, limit_now, ahead_tiers: tuple[str, ...] | None = None,
                 foresight: int | None = None) -> None:
        names = [t for t in tenants if t in specs]
        pos = {t: i for i, t in enumerate(tenants)}
        self.names = tuple(names)
        self.cols = np.array([pos[t] for t in names], dtype=np.int64)
        sp = [specs[t] for t in names]
        self.warm = np.zeros(len(tenants), dtype=np.int64)
        self.warm[self.cols] = [s.cold_steps(step_s) for s in sp]
        self.rps = np.array([s.replica_rps for s in sp], dtype=float)
        self.step_s = step_s
        self.arrivals = rates[list(names)].to_numpy(dtype=float) * step_s
        self.tiers = np.array([tiers[c] for c in self.cols])
        # the services whose predictive autoscaler may start replicas ahead (policy.replica_ahead_tiers; None: all)
        self.ahead = frozenset(t for t, tier in zip(self.names, self.tiers)
                               if ahead_tiers is None or tier in ahead_tiers)
        self.scaler = Autoscaler(strategy, self.cols, sp, step_s, drain_steps, quantile, foresight)
        self.gateway = Gateway(len(names), burst_seconds)
        self.limit_now = limit_now       # plan -> {tenant: RateLimit}: the plan's limits (the first step's before any)

    def wanted(self, k: int, demand: np.ndarray, fc: Forecast | None,
               acting: frozenset[str] | None = None, future: np.ndarray | None = None) -> np.ndarray:
        """The GPUs every tenant asks for at step ``k``: batch tenants their demand, inference tenants what their
        autoscalers ask. ``acting``: the skill gate's tenants acting on ``fc`` (None: the gate is off, all do);
        a service outside ``ahead_tiers`` never acts on it. ``future``: what the perfect autoscaler knows ahead
        (``Autoscaler.wanted``)."""
        out = demand[k].astype(float).copy()
        ahead = self.ahead if acting is None else self.ahead & acting
        on = None if len(ahead) == len(self.names) else np.array([t in ahead for t in self.names], dtype=bool)
        out[self.cols] = self.scaler.wanted(k, demand, fc, on, future)
        return out

    def plan_forecast(self, fc: Forecast) -> Forecast:
        """The forecast the plan holds and preempts on: every quantile of a service's rows (and of its peaks) is
        its autoscaler's quantile, so the daemon holds GPUs for, and preempts batch work for, the replicas the
        service will ask for. Read at the plan's own quantile (policy.quantile, p90 by default, above the
        autoscaler's policy.replica_quantile), a service's hold covered replicas no autoscaler asks for: GPUs idle
        and batch jobs preempted for nothing (ServeGen, issue 40). Batch tenants' rows are unchanged."""
        pos = {t: i for i, t in enumerate(fc.tenants)}
        rows = np.array([pos[t] for t in self.names if t in pos], dtype=np.int64)
        if not rows.size:
            return fc
        j = fc.quantile_index(self.scaler.quantile)
        values = fc.values.copy()
        values[rows] = values[rows][:, :, j:j + 1]
        peaks = None
        if fc.peaks is not None:
            peaks = {}
            for k, p in fc.peaks.items():
                p = np.array(p, dtype=float)
                p[rows] = p[rows][:, j:j + 1]
                peaks[k] = p
        return dataclasses.replace(fc, values=values, peaks=peaks)

    def account(self, k: int, cluster, plan, meter=None) -> StepRequests:
        """Step ``k``'s requests through the gateway (the replicas ready after the cluster's step, the limits of
        the last plan); added to ``meter`` per tier when given (a measured step)."""
        ready = cluster.ready_per_tenant(self.warm)[self.cols]
        lim = self.limit_now(plan)
        limit = np.array([lim[t].rate for t in self.names], dtype=float)
        r = self.gateway.step(self.arrivals[k], ready * self.rps, limit, self.step_s)
        if meter is not None:
            gpus = cluster.running_per_tenant()[self.cols]
            if meter.inf_by_service is None:
                meter.inf_by_service = {t: {"tier": str(tier), "requests": 0.0, "throttled": 0.0, "gpu_min": 0.0}
                                        for t, tier in zip(self.names, self.tiers)}
            step_min = self.step_s / 60.0
            for j, t in enumerate(self.names):
                row = meter.inf_by_service[t]
                row["requests"] += float(r.arrivals[j])
                row["throttled"] += float(r.throttled[j])
                row["gpu_min"] += float(gpus[j]) * step_min
            for t in set(self.tiers.tolist()):
                m = self.tiers == t
                meter.inf_gpu[t] += float(gpus[m].sum())
                meter.inf_requests[t] += float(r.arrivals[m].sum())
                meter.inf_served[t] += float(r.served[m].sum())
                meter.inf_throttled[t] += float(r.throttled[m].sum())
                meter.inf_late[t] += float(r.late[m].sum())
        return r
