"""A Backend (daemon/web/backend.py) over a given Snapshot, for tests of the HTTP app without a daemon: the app is
built by `daemon.web.app.build_app` as the service builds it, on a snapshot and shadow records the test made."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from daemon.config import Config
from daemon.state.overrides import Overrides
from daemon.web.backend import Snapshot
from tests.support.daemons import TOKENS


class SnapshotBackend:
    """Serves `snap`; `records` (a list, or a function of the limit) are the shadow records. `shadow_reads` counts
    the reads of the shadow records."""

    def __init__(self, snap: Snapshot, records: list[dict] | Callable[[int | None], list[dict]] = ()) -> None:
        self.snap = snap
        self._records = records
        self.shadow_reads = 0
        self._overrides = Overrides(None)
        self.registry = CollectorRegistry()

    def snapshot(self) -> Snapshot:
        return self.snap

    def config(self) -> Config:
        return self.snap.cfg

    def health(self, detail: bool = False) -> dict:
        return {"status": "ok", "reason": None}

    def events(self, limit: int = 100, kind: str | None = None, tenant: str | None = None,
               before: int | None = None) -> list[dict]:
        return []

    def plan_history(self, limit: int) -> list[dict]:
        return []

    def shadow_records(self, limit: int | None = None) -> list[dict]:
        self.shadow_reads += 1
        recs = self._records(limit) if callable(self._records) else list(self._records)
        return recs if limit is None else recs[-limit:]

    def overrides(self) -> Overrides:
        return self._overrides

    def submit_alerts(self, payload: Any, received: float) -> Future:
        f: Future = Future()
        f.set_result([])
        return f

    def metrics_registry(self) -> CollectorRegistry:
        return self.registry

    def webhook_rejected(self, reason: str) -> None:
        pass


def with_tokens(cfg: Config) -> Config:
    """`cfg` with the test tokens (tests/support/daemons.py TOKENS: an operator, tenant-0001, tenant-0002)."""
    return cfg.model_copy(update={"access": type(cfg.access)(tokens=TOKENS)})


def gated_config(tmp, tenants: int, high_share: float | None = None) -> Config:
    """A small simulated cluster (`tenants` tenants, `high_share` of them high tier; None: the simulator's default)
    with the skill gate on, deciding after 3 scored forecasts: the config of the gate's cycle tests."""
    from daemon.config import SimulatorConfig, SourceConfig

    sim = SimulatorConfig(tenants=tenants, warmup_steps=800, **({} if high_share is None else
                                                               {"high_share": high_share}))
    return Config(cluster={"gpus": 128}, cycle={"horizon_steps": 5, "history_steps": 600},
                  source=SourceConfig(simulator=sim), forecaster={"season_steps": 60, "model_dir": tmp / "none"},
                  policy={"skill_gate": {"enabled": True, "min_scored": 3, "window": 50}},
                  state={"path": tmp / "s.sqlite"})


def gated_cycle(tmp, tenants: int, high_share: float):
    """One cycle of `gated_config`'s cluster, run and closed: its plan and the snapshot the app serves, with the
    test tokens. Nothing is scored after one cycle, so every tenant is planned reactively."""
    import dataclasses

    from daemon.service.wiring import build_runtime

    rt = build_runtime(gated_config(tmp, tenants, high_share))
    try:
        plan = rt.runner.run_once().plan
        return plan, dataclasses.replace(rt.runner.snapshot, cfg=with_tokens(rt.runner.snapshot.cfg))
    finally:
        rt.close()
