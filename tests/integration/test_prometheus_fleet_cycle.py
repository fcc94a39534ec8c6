"""A mixed fleet end to end on a real Prometheus (issue 24): DCGM-shaped series with modelName for two types (and
one model no type names), backfilled by promtool; the daemon built from its config (build_runtime, dry run) runs
one cycle and forecasts per (tenant, type): the high tier's hold is on the type its series use, the plan's
capacity per type is what Prometheus reports, the live state stays per tenant, the unknown model is reported."""

import logging
import time

import numpy as np
import pytest

from daemon.config import Config
from daemon.service.wiring import build_runtime
from tests.support.dcgm import fleet_openmetrics
from tests.support.services import backfilled_prometheus

pytestmark = pytest.mark.services

MINUTES = 90
T0 = (int(time.time()) // 3600 - 4) * 3600      # 4 hours ago, on the hour
A100, T4, H200 = "NVIDIA A100-SXM4-80GB", "Tesla T4", "NVIDIA H200"   # H200 is in no [fleet] type or alias
LATE = 70                                       # team-a's first t4 GPU
CHUNK = 30                                      # history.backfill_chunk_steps: LATE is in the third chunk
NODES = {"a1": (A100, 4), "a2": (A100, 4), "t1": (T4, 4), "h1": (H200, 2)}


def alloc(m):
    """node -> [(tenant, GPUs allocated)] at minute m: the high tier (team-a) on a100 (and one t4 from minute
    LATE on, after the history's first backfill chunks), team-b on t4 (and on the unknown model)."""
    return {"a1": [("team-a", 2 + m % 3)], "a2": [("team-a", 1)],
            "t1": [("team-b", 2 + m % 2)] + ([("team-a", 1)] if m >= LATE else []), "h1": [("team-b", 1)]}


def openmetrics() -> str:
    return fleet_openmetrics(NODES, lambda m: {node: [(t, [50] * n) for t, n in rows]
                                               for node, rows in alloc(m).items()}, MINUTES, T0)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled_prometheus(tmp_path_factory.mktemp("prom-fleet-cycle"), openmetrics()) as (url, proc):
        yield url


def config(url, tmp_path, typed=True, incremental=True):
    return Config(source={"kind": "prometheus", "prometheus": {"url": url, "timeout_s": 5, "retries": 0}},
                  cycle={"history_steps": MINUTES, "stale_after_s": 120, "horizon_steps": 30},
                  forecaster={"kind": "seasonal_naive"},
                  history={"incremental": incremental, "backfill_chunk_steps": CHUNK},
                  state={"path": str(tmp_path / "state.sqlite")},
                  tenants=[{"name": "team-a", "tier": "high"}, {"name": "team-b"}, {"name": "team-idle"}],
                  fleet={"types": ["a100", "t4"], "aliases": {A100: "a100", T4: "t4"}} if typed else {})


def one_cycle(cfg, minute=MINUTES - 1):
    rt = build_runtime(cfg)
    rt.source.clock = lambda: T0 + 60 * minute + 1
    try:
        return rt, rt.runner.run_once()
    finally:
        if rt.history is not None:
            rt.history.close()


@pytest.mark.parametrize("incremental", [True, False])
def test_one_cycle_plans_per_tenant_and_type(prom, tmp_path, caplog, incremental):
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.source.prometheus")
    rt, res = one_cycle(config(prom, tmp_path, incremental=incremental))
    plan = res.plan
    assert res.outcome == "ok", plan.notes
    # the forecast read the typed history: one series per (tenant, type) it ran on (as the simulator's, one per set
    # of types a tenant's work accepts), the unknown model's GPUs kept; no series for a type a tenant never used
    hist = res.collected.history
    assert sorted(hist.columns) == ["team-a@a100", "team-a@t4", "team-b@t4", "team-b@unknown"]
    np.testing.assert_array_equal(hist["team-a@a100"].to_numpy(), [3 + m % 3 for m in range(MINUTES)])
    np.testing.assert_array_equal(hist["team-b@t4"].to_numpy(), [2 + m % 2 for m in range(MINUTES)])
    assert (hist["team-b@unknown"] == 1).all()
    # a (tenant, type) first seen in a later chunk held 0 of that type before, not a gap
    np.testing.assert_array_equal(hist["team-a@t4"].to_numpy(), [int(m >= LATE) for m in range(MINUTES)])
    assert set(res.forecast.tenants) == set(hist.columns)
    # the live state stays per tenant: used summed over its types; a configured tenant with no GPU is there at 0
    state = res.collected.state
    assert state.tenants == ("team-a", "team-b", "team-idle")
    m = MINUTES - 1
    assert list(state.used) == [3 + m % 3 + 1, 2 + m % 2 + 1, 0] and state.missing == ()
    # per type: the high tier's hold on a100, the only type its series use; capacity as Prometheus reports it
    assert set(plan.holds_by_type["team-a"]) <= {"a100", "t4"} and plan.holds_by_type["team-a"]["a100"] > 0
    assert plan.holds_by_type["team-a"]["a100"] >= plan.holds_by_type["team-a"].get("t4", 0)
    assert plan.capacity_by_type == rt.source.capacity_by_type() == {"a100": 8, "t4": 4, "unknown": 2}
    # the model no [fleet] type names is reported, once
    warned = [r.getMessage() for r in caplog.records if H200 in r.getMessage()]
    assert len(warned) == 1, warned


def test_untyped_config_keeps_plain_tenant_series(prom, tmp_path):
    """No [fleet] types: the history is per tenant and the plan says nothing per type, as before issue 24."""
    _, res = one_cycle(config(prom, tmp_path, typed=False))
    assert list(res.collected.history.columns) == ["team-a", "team-b", "team-idle"]
    assert res.collected.state.nodes is None
    assert res.plan.holds_by_type == {} and res.plan.capacity_by_type == {}


def test_switching_fleet_types_starts_the_history_file_over(prom, tmp_path):
    """The history file on disk is per tenant or per (tenant, type): a file written under the other kind is started
    over, so turning [fleet] types on or off leaves no columns that no fetch fills (their NaN would count those
    tenants missing for the whole window)."""
    _, res = one_cycle(config(prom, tmp_path, typed=False))
    assert list(res.collected.history.columns) == ["team-a", "team-b", "team-idle"]
    _, res = one_cycle(config(prom, tmp_path, typed=True))
    assert all("@" in c for c in res.collected.history.columns)
    assert res.collected.state.missing == () and res.outcome == "ok"
    _, res = one_cycle(config(prom, tmp_path, typed=False))
    assert list(res.collected.history.columns) == ["team-a", "team-b", "team-idle"]
    assert res.collected.state.missing == () and res.outcome == "ok"


def test_zeros_before_a_late_type_survive_a_restart(prom, tmp_path):
    """The 0s written before a (tenant, type) first appeared (in an update after the backfill) are on disk too: a
    restarted daemon reads the file and only the newest step again, and still sees 0 there, not a gap."""
    one_cycle(config(prom, tmp_path), minute=LATE - 5)   # the backfill: team-a has no t4 yet
    one_cycle(config(prom, tmp_path))                     # reads the new steps only: team-a@t4 appears
    _, res = one_cycle(config(prom, tmp_path))            # a restart: the file, then the newest step again
    np.testing.assert_array_equal(res.collected.history["team-a@t4"].to_numpy(),
                                  [int(m >= LATE) for m in range(MINUTES)])
