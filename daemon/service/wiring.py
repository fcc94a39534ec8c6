"""Wiring: turn a validated Config into a source, a forecaster, actuators, a store and a cycle runner."""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from daemon.actuators.base import (
    Actuator,
    KeepsClusterView,
    ListsClusterJobs,
    ListsClusterNodes,
    ListsNodeJobs,
    ListsQueuedJobs,
    NodeDirectory,
)
from daemon.actuators.log import LogActuator
from daemon.config import Config, ConfigError
from daemon.forecasting.choose import build as build_forecaster
from daemon.service.cycle import CycleRunner
from daemon.service.telemetry import DaemonMetrics
from daemon.sources.base import Source
from daemon.sources.history import History
from daemon.state.overrides import ConfigMapOverrideStore, Overrides, RedisOverrideStore, SharedStore
from daemon.state.store import StateStore
from daemon.web.backend import HISTORY_STEPS

log = logging.getLogger("gpu_autoscaler.runtime")


class NodeListError(Exception):
    """No scheduler or source could list the nodes right now."""


@dataclass
class Runtime:
    source: Source
    actuators: list[Actuator]
    runner: CycleRunner
    metrics: DaemonMetrics
    store: StateStore | None
    sim: object | None = None  # SimulatedCluster when the source is the embedded simulator
    overrides: Overrides | None = None  # operator changes at runtime, applied at the next cycle
    history: History | None = None  # the source's rolling demand history store (read API: read(), tenants())
    lease: object | None = None  # daemon.ha.lease.RedisLease when ha.enabled: only its holder acts
    _nodes: tuple[float, frozenset[str]] | None = field(default=None, repr=False)
    _nodes_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def cfg(self) -> Config:
        """The config in force: the runner holds the one reference (swapped by Daemon.use_config only)."""
        return self.runner.cfg

    @property
    def forecaster_note(self) -> str:
        """Which forecaster is in use and why (held by the runner, which publishes it with each cycle)."""
        return self.runner.forecaster_note

    def node_directories(self) -> list[NodeDirectory]:
        """Who can list the cluster's nodes, best first: live schedulers, the simulator, the metrics source."""
        live = [a for a in self.actuators if isinstance(a, NodeDirectory) and not a.dry_run]
        rest = [x for x in (self.sim, self.source) if isinstance(x, NodeDirectory)]
        return live + rest + [a for a in self.actuators if isinstance(a, NodeDirectory) and a.dry_run]

    def known_nodes(self, refresh: bool = False) -> frozenset[str]:
        """The node names the scheduler (or source) knows, cached for ``failover.node_cache_s``.

        Raises NodeListError when nobody can say: then no alert can be checked, so none is acted on.
        """
        with self._nodes_lock:
            now = time.monotonic()
            if self._nodes is not None:
                age = now - self._nodes[0]
                if age < self.cfg.failover.node_cache_s and not (refresh and age > 2.0):  # refresh at most every 2 s
                    return self._nodes[1]
            errors = []
            for d in self.node_directories():
                try:
                    names = frozenset(d.node_names())
                except Exception as exc:
                    errors.append(f"{getattr(d, 'name', type(d).__name__)}: {exc}")
                    continue
                self._nodes = (now, names)
                return names
            raise NodeListError("cannot list the cluster's nodes: "
                                + ("; ".join(errors) or "no scheduler or source knows them"))

    def node_known(self, node: str) -> bool:
        if node in self.known_nodes():
            return True
        return node in self.known_nodes(refresh=True)  # a node added since the last look

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        """(job id, tenant) of the jobs placed on `node`, asked of whoever knows best."""
        for act in self.actuators:
            if isinstance(act, ListsNodeJobs) and not act.dry_run:
                return act.jobs_on_node(node)
        if self.sim is not None:
            return self.sim.jobs_on_node(node)
        st = self.runner.last_state
        if st is None:
            return []
        mask = st.jobs.running & (st.jobs.node == node)
        return [(str(j), st.tenants[int(t)]) for j, t in zip(st.jobs.ids[mask], st.jobs.tenant[mask])]

    def close(self) -> None:
        for act in self.actuators:
            if isinstance(act, KeepsClusterView):
                act.stop_view()
        if self.store is not None:
            self.store.close()
        if self.history is not None:
            self.history.close()


def _cluster_view(cfg: Config):
    """The Kubernetes view of pods and nodes, kept by list-then-watch (one for the kubernetes and kueue actuators)."""
    from daemon.actuators.k8s.actuator import api_client
    from daemon.actuators.k8s.informer import ClusterView

    k = cfg.actuators.kubernetes
    return ClusterView(api_client(k), request_timeout_s=k.timeout_s,
                       dra_max_objects=k.dra_max_objects if k.dra_device_classes else None,
                       dra_max_per_namespace=k.dra_max_objects_per_namespace)


def actuator_names(cfg: Config) -> list[str]:
    """The actuators `build_runtime` makes for `cfg`, by name and in order, without making any: the simulated
    cluster's own first where the source is the simulator (it is always there: it applies the plan to the cluster it
    simulates), then `actuators.enabled`. What check-config names, so that it says what `run` will start."""
    names = [n for n in cfg.actuators.enabled if n != "simulator"]
    return (["simulator"] if cfg.source.kind == "simulator" else []) + names


def _actuators(cfg: Config, sim) -> list[Actuator]:
    out: list[Actuator] = []
    view = None  # the Kubernetes view, made for the first Kubernetes actuator and shared
    a = cfg.actuators
    for name in a.enabled:
        if name == "log":
            out.append(LogActuator())
        elif name == "simulator":
            if sim is None:
                raise ConfigError("actuators.enabled: 'simulator' needs source.kind = 'simulator'")
        elif name == "redis":
            from daemon.actuators.redis_limits import RedisLimitsActuator
            from gateway.keys import GatewayConfigError, digest_map

            try:
                keys = digest_map(cfg.gateway.keys, "gateway.keys")
            except GatewayConfigError as exc:
                raise ConfigError(str(exc)) from None
            out.append(RedisLimitsActuator(a.redis.url, a.redis.prefix, dry_run=a.dry_run, api_keys=keys or None,
                                           forget_after_s=cfg.cycle.forget_tenant_after_s))
        elif name == "slurm":
            from daemon.actuators.slurm.actuator import SlurmActuator

            out.append(SlurmActuator(a.slurm, cfg.tenants, dry_run=a.dry_run,
                                     min_runtime_s=cfg.policy.preempt_min_runtime_s, fleet=cfg.fleet,
                                     cycle_s=cfg.cycle.interval_s, window_min_lead_s=cfg.window_min_lead_s()))
        elif name == "kubernetes":
            from daemon.actuators.k8s.actuator import KubernetesActuator

            view = view or _cluster_view(cfg)
            # beside Kueue, quotas and reclaim are Kueue's: this one keeps failover, PriorityClasses and Events
            out.append(KubernetesActuator.from_config(a.kubernetes, cfg.tenants, dry_run=a.dry_run,
                                                      enforce_plan="kueue" not in a.enabled,
                                                      min_runtime_s=cfg.policy.preempt_min_runtime_s,
                                                      hold_label=a.kueue.hold_label if "kueue" in a.enabled else None,
                                                      fleet=cfg.fleet, view=view,
                                                      gateway_limits=a.gateway_limits))
        elif name == "kueue":
            from daemon.actuators.k8s.kueue import KueueActuator

            view = view or _cluster_view(cfg)
            out.append(KueueActuator.from_config(a.kubernetes, a.kueue, cfg.tenants, dry_run=a.dry_run,
                                                 min_runtime_s=cfg.policy.preempt_min_runtime_s, fleet=cfg.fleet,
                                                 view=view))
    if sim is not None:
        from daemon.sim.actuator import SimulatorActuator

        # the simulated cluster is the system being driven: it always obeys the plan
        out.insert(0, SimulatorActuator(sim.cluster, sim.tenants, node_index=sim.node_index, lock=sim.lock))
    return out


def jobs_lister(actuators: list) -> Any:
    """The actuator the source reads the cluster's jobs (and nodes) from: the first that lists them, but one that
    also knows the jobs with no pod yet comes first (beside Kueue, the Kueue actuator: its jobs are the pods and the
    Workloads that wait for admission, the plan's demand too); None when none lists jobs."""
    listers = [a for a in actuators if isinstance(a, ListsClusterJobs)]
    return next((a for a in listers if isinstance(a, ListsQueuedJobs)), listers[0] if listers else None)


def limit_torch_threads(n: int) -> None:
    """Size torch's intra-op pool for the cycle's forecast, when a torch model is loaded.

    torch defaults to one thread per core; the forecast is a small batch, and on a machine whose cores are
    busy with Prometheus, the scheduler or other daemons those threads wait on each other. Measured in
    bench/cycle_bench.py (1,000 tenants, loaded 2-core machine): forecast p50 867 ms with the default,
    107 ms with 1 thread.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


def shadow_log(lease: Any, cfg: Config, store: StateStore | None):
    """Where dry-run cycles' shadow records go: the HA lease's Redis, which every replica reads (a takeover keeps
    them), else the state store (daemon/shadow/log.py)."""
    from daemon.shadow.log import RedisShadowLog, StoreShadowLog

    if lease is not None and cfg.ha.backend == "redis":
        return RedisShadowLog(lease.client, cfg.ha.prefix, cfg.state.shadow_max_rows, lease=lease,
                              keep_s=cfg.state.shadow_keep_days * 86400)
    return StoreShadowLog(store) if store is not None else None


def _shared_overrides(lease: Any, cfg: Config) -> SharedStore | None:
    """Under HA the operator's overrides live in the lease backend, where every replica reads them
    (daemon/state/overrides.py); one replica keeps them in its SQLite store."""
    if lease is None:
        return None
    if cfg.ha.backend == "kubernetes":
        return ConfigMapOverrideStore(lease.api.api_client, cfg.ha.namespace, f"{cfg.ha.lease_name}-overrides")
    return RedisOverrideStore(lease.client, cfg.ha.prefix)


def _history_store(cfg: Config, with_store: bool, sim_steps: bool = False) -> History | None:
    """The daemon's rolling history store (daemon/sources/history.py) at `history.path`, next to the state store by
    default; without a store, Prometheus's in memory only and the simulator's none (nothing else reads it).

    Its window is `history.keep_steps`, at least `cycle.history_steps` (the forecaster reads that much of it). Unset,
    the simulator's is what the window proposals read whole (daemon/web/window_proposals.py), its warm-up
    (`source.simulator.warmup_steps`) written there at the first cycle, and Prometheus's `cycle.history_steps`: a
    longer one costs memory per series and backfill at the first start, which an operator chooses."""
    hc = cfg.history
    if sim_steps and not (with_store and hc.incremental):
        return None
    path = (hc.path or cfg.state.path.with_name(f"{cfg.state.path.stem}-history.sqlite")) if with_store else None
    steps = cfg.cycle.history_steps
    if hc.keep_steps is not None:
        steps = max(steps, hc.keep_steps)
    elif sim_steps:
        from daemon.forecasting.windows_proposed import store_steps

        steps = max(steps, store_steps(cfg))
    return History(cfg.cycle.resolution_s, steps, path, overlap_steps=hc.overlap_steps,
                   chunk_steps=hc.backfill_chunk_steps, series="typed" if cfg.fleet.typed else "plain")


def build_runtime(cfg: Config, *, with_store: bool = True, metrics: DaemonMetrics | None = None) -> Runtime:
    sim = None
    history: History | None = None
    if cfg.source.kind == "simulator":
        from daemon.sim.source import SimulatedCluster

        history = _history_store(cfg, with_store, sim_steps=True)
        sim = SimulatedCluster(cfg, history=history)
    actuators = _actuators(cfg, sim)
    metrics = metrics or DaemonMetrics()
    lease = None
    if cfg.ha.enabled:
        from daemon.ha.fencing import fence_all

        h = cfg.ha
        if h.backend == "kubernetes":
            from daemon.actuators.k8s.actuator import api_client
            from daemon.ha.lease_k8s import KubernetesLease

            lease = KubernetesLease(api_client(cfg.actuators.kubernetes), h.namespace, h.lease_name, h.replica_id,
                                    h.lease_ttl_s, h.renew_every_s, h.safety_margin)
        else:
            import redis

            from daemon.ha.lease import RedisLease

            client = redis.Redis.from_url(h.redis_url or cfg.actuators.redis.url, socket_timeout=2,
                                          socket_connect_timeout=2)
            lease = RedisLease(client, h.prefix, h.replica_id, h.lease_ttl_s, h.renew_every_s, h.safety_margin)
        actuators = fence_all(actuators, lease, on_refused=metrics.fenced.inc)
    if sim is not None:
        source: Source = sim
    else:
        from daemon.sources.prometheus import PrometheusSource

        # the scheduler knows the jobs, the queue and where GPUs are (from the same actuator, so node names
        # match); Prometheus knows the GPUs
        lister = jobs_lister(actuators)
        jobs_from = lister.cluster_jobs if lister is not None else None
        nodes_from = lister.cluster_nodes if isinstance(lister, ListsClusterNodes) else None
        if cfg.history.incremental:
            history = _history_store(cfg, with_store)
        source = PrometheusSource(cfg, jobs_provider=jobs_from, history=history, nodes_provider=nodes_from,
                                  jobs_whole=lister is not None and lister.lists_every_job())
    forecaster, note = build_forecaster(cfg)
    log.debug("%s", note)  # the CLI's start-up line says it, short; /api/v1/plan has it whole
    limit_torch_threads(cfg.forecaster.torch_threads)
    store = StateStore(cfg.state.path, events_keep_s=cfg.state.events_keep_days * 86400,
                       events_max_rows=cfg.state.events_max_rows,
                       shadow_keep_s=cfg.state.shadow_keep_days * 86400,
                       shadow_max_rows=cfg.state.shadow_max_rows) if with_store else None
    runner = CycleRunner(cfg, source, forecaster, actuators, store, metrics, forecaster_note=note,
                         history=history.frame(HISTORY_STEPS) if history is not None and sim is None else None)
    if lease is not None:
        runner.may_act = lease.is_leader
    if sim is not None:   # the simulator's jobs run and wait on its clock, a minute a cycle (daemon/service/eta.py)
        runner.eta.on_snapshot_clock(cfg.cycle.resolution_s)
    if sim is None:   # the embedded simulator has no per-job telemetry (config validation refuses it)
        from daemon.service.health import HealthRunner
        from daemon.sources.job_telemetry import JobTelemetrySource

        def health_runner(c: Config) -> HealthRunner:
            return HealthRunner(c, JobTelemetrySource(c), metrics.registry)

        # built now when health is on; otherwise when a reload turns it on (CycleRunner.use_config)
        runner.health_factory = health_runner
        if cfg.health.enabled:
            runner.health = health_runner(cfg)
    runner.shadow_log = shadow_log(lease, cfg, store)
    overrides = Overrides(store, _shared_overrides(lease, cfg),
                          replica=lease.replica_id if lease is not None else None)
    runner.operator_inputs = overrides.cycle_inputs  # under HA: re-read from the lease backend every cycle
    return Runtime(source, actuators, runner, metrics, store, sim, overrides, history, lease=lease)
