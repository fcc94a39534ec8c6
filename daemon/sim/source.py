"""The embedded simulated cluster: a source and an actuator in one, so `run --sim` needs no servers."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy.fleet import series_name
from daemon.policy.state import PRIORITY, ClusterState
from daemon.sim.cluster import SimCluster
from daemon.sim.workloads import fleet_accepts, generate
from daemon.sources.base import Collected, SourceError
from daemon.sources.history import History

log = logging.getLogger("gpu_autoscaler.sim")


class SimulatedCluster:
    """Generates demand ahead of time and advances one step per collect().

    ``warmup_steps`` of history exist before the first cycle (the forecaster reads its ``cycle.history_steps``),
    as they would on a real cluster. With ``history`` (the daemon's rolling history store, daemon/sources/history.py,
    built by the wiring as for Prometheus) every collect() updates the store from the demand played so far, the
    backfill of the first one included: the window proposals read it (daemon/web/window_proposals.py).
    """

    def __init__(self, cfg: Config, extra_steps: int = 7 * 1440, history: History | None = None) -> None:
        sc = cfg.source.simulator
        self.cfg = cfg
        self.step_s = cfg.cycle.resolution_s
        self.warmup = sc.warmup_steps
        total = self.warmup + extra_steps
        pools = cfg.fleet.pools  # a mixed fleet (issue 24): nodes per type from [fleet] pools
        gpus = sum(p.nodes * p.gpus_per_node for p in pools) if pools else cfg.cluster.gpus
        self.work = generate(sc.tenants, total, gpus, seed=sc.seed, step_s=self.step_s,
                             high_share=sc.high_share, low_share=sc.low_priority_share,
                             target_load=sc.target_load, peak_share=sc.peak_share, start=sc.start_time)
        self.tenants = tuple(self.work.demand.columns)
        declared = {t.name: t.tier for t in cfg.tenants}
        if declared:
            # a tenant's tier is config, as with every other source: the simulator's own share only picks the rest
            self.work = replace(self.work, tiers=tuple(declared.get(n, t) for n, t in zip(self.tenants,
                                                                                         self.work.tiers)))
            unknown = sorted(set(declared) - set(self.tenants))
            if unknown:
                log.warning("[[tenants]] %s: no such simulated tenant (the simulator has %s to %s); their tiers "
                            "change nothing", ", ".join(unknown), self.tenants[0], self.tenants[-1])
        prio = np.array([PRIORITY[t] for t in self.work.tiers], dtype=np.int8)
        typed: dict = {}
        self.series = self.tenants   # the history's columns: tenants, or on a mixed fleet "tenant@accepted types"
        job = self.work.job_gpus
        if pools:
            types = [p.type for p in pools]
            accepts = fleet_accepts(self.work.tiers, list(dict.fromkeys(types)))
            biggest = {t: max(p.gpus_per_node for p in pools if p.type == t) for t in types}
            job = np.array([min(int(j), max(biggest[t] for t in (a or biggest))) for j, a in zip(job, accepts)])
            typed = dict(node_types=[p.type for p in pools for _ in range(p.nodes)],
                         node_gpus=[p.gpus_per_node for p in pools for _ in range(p.nodes)], accepts=accepts)
            self.series = tuple(series_name(t, a) for t, a in zip(self.tenants, accepts))
        self.cluster = SimCluster(list(self.tenants), prio, gpus, job,
                                  gpus_per_node=cfg.cluster.gpus_per_node, drain_steps=sc.drain_steps,
                                  checkpoint_steps=sc.checkpoint_steps, max_wait_steps=cfg.policy.max_wait_steps,
                                  **typed)
        self.values = self.work.demand.to_numpy()
        self.pos = self.warmup  # index of the next step to play
        # bring the cluster to a steady state over the last hours of warm-up
        for k in range(max(0, self.warmup - 240), self.warmup):
            self.cluster.step(self.values[k])
        self.blackout = False  # tests flip this to simulate an unreachable source
        self.history = history
        # the cycle (collect, apply) and a node failover (in its own worker) both touch the cluster's arrays
        self.lock = threading.RLock()

    @property
    def now(self) -> pd.Timestamp:
        return self.work.demand.index[self.pos - 1]

    def node_name(self, node: int) -> str:
        return f"sim-node-{node:04d}"

    def node_index(self, name: str) -> int | None:
        if name.startswith("sim-node-"):
            try:
                i = int(name.rsplit("-", 1)[1])
            except ValueError:
                return None
            return i if 0 <= i < self.cluster.n_nodes else None
        return None

    def node_names(self) -> set[str]:
        return {self.node_name(i) for i in range(self.cluster.n_nodes)}

    def advance(self) -> None:
        if self.pos >= len(self.values):
            raise RuntimeError("simulated trace exhausted")
        self.cluster.step(self.values[self.pos])
        self.pos += 1

    def collect(self, history_steps: int) -> Collected:
        with self.lock:
            self.advance()
            if self.blackout:
                raise SourceError("simulated source blackout")
            if self.history is not None:   # as the Prometheus source: what is new since the last read, to the store
                self.history.update(self._played, self.now.timestamp(), self.series)
            lo = max(0, self.pos - history_steps)
            return Collected(self._series(self.work.demand.iloc[lo:self.pos]), self.snapshot())

    def _series(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The demand's columns as the history names them (on a mixed fleet "tenant@accepted types")."""
        if self.series is not self.tenants:
            frame = frame.set_axis(pd.Index(self.series, name="tenant"), axis=1)
        return frame

    def _played(self, start_s: float, end_s: float, names) -> pd.DataFrame:
        """The history store's Fetch: the demand played so far from start_s to end_s (none before the first generated
        step, nothing of the future)."""
        played = self.work.demand.iloc[:self.pos]
        return self._series(played.loc[pd.Timestamp(start_s, unit="s", tz="UTC"):
                                       pd.Timestamp(end_s, unit="s", tz="UTC")])

    def jobs_on_node(self, node: str) -> list[tuple[str, str]]:
        idx = self.node_index(node)
        if idx is None:
            return []
        with self.lock:
            c = self.cluster
            return [(f"sim-{c.j_id[p]}", self.tenants[c.j_tenant[p]]) for p in c.running_on(idx)]

    def snapshot(self) -> ClusterState:
        names = np.vectorize(lambda x: self.node_name(x) if x >= 0 else "", otypes=[object])
        return self.cluster.state(self.tenants, self.work.tiers, self.now, self.step_s,
                                  job_id=lambda ids: np.array([f"sim-{j}" for j in ids], dtype=object),
                                  node_name=lambda nodes: names(nodes) if len(nodes) else np.array([], dtype=object))
