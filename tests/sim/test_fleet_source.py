"""The embedded simulated source on a mixed fleet from [fleet] pools (issue 24): typed nodes and jobs, history
per (tenant, accepted types) series, and the daemon's own cycle (forecast, plan, simulated actuator) on it."""

import numpy as np

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.fleet import split_series
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.source import SimulatedCluster
from forecaster.baselines import SeasonalNaive

FLEET = {"types": ["h100", "a100", "t4"], "reserve_share": {"h100": 0.3},
         "pools": [{"type": "h100", "nodes": 6}, {"type": "a100", "nodes": 8},
                   {"type": "t4", "nodes": 8, "gpus_per_node": 4}]}


def test_a_mixed_fleet_from_config_runs_the_cycle_with_typed_series_and_holds():
    cfg = Config.model_validate({"source": {"simulator": {"tenants": 12, "seed": 3, "warmup_steps": 1500,
                                                          "target_load": 1.1, "high_share": 0.25}},
                                 "forecaster": {"kind": "seasonal_naive"}, "fleet": FLEET})
    sim = SimulatedCluster(cfg, extra_steps=60)
    c = sim.cluster
    assert c.typed and c.capacity == 6 * 8 + 8 * 8 + 8 * 4
    act = SimulatorActuator(c, sim.tenants, node_index=sim.node_index, lock=sim.lock)
    model = SeasonalNaive(cfg.forecaster.season_steps, tuple(cfg.forecaster.quantiles))
    memory, last, held_any = PolicyMemory(), None, False
    for _ in range(30):
        got = sim.collect(cfg.cycle.history_steps)
        # history per (tenant, accepted types): "tenant@h100", "tenant@h100|a100", "tenant@*"
        parsed = [split_series(c_) for c_ in got.history.columns]
        assert all(acc is not None for _, acc in parsed) and [t for t, _ in parsed] == list(sim.tenants)
        assert got.state.nodes.gpu_type is not None and got.state.jobs.accepts is not None
        fc = model.predict(got.history, cfg.cycle.horizon_steps)
        p = plan(fc, got.state, memory, cfg, last)
        assert p.capacity_by_type == {"a100": 64, "h100": 48, "t4": 32}
        assert p.high_pool_by_type["h100"] == int(48 * 0.3)
        for tenant, by in p.holds_by_type.items():
            assert sum(by.values()) == p.reservations[tenant]
            i = sim.tenants.index(tenant)
            acc = c.tenant_accepts[i]
            assert not acc or set(by) <= set(acc)          # held only on types its work accepts
        held_any |= bool(p.holds_by_type)
        act.apply(p)
        memory, last = p.memory, p
        c.check_invariants()
        assert c.useless_held().sum() == 0
    assert held_any


def test_without_pools_the_simulated_source_is_the_one_model_cluster():
    cfg = Config.model_validate({"source": {"simulator": {"tenants": 6, "warmup_steps": 300}}})
    sim = SimulatedCluster(cfg, extra_steps=5)
    got = sim.collect(60)
    assert not sim.cluster.typed and list(got.history.columns) == list(sim.tenants)
    assert got.state.nodes.gpu_type is None and got.state.jobs.accepts is None
    assert np.isfinite(got.history.to_numpy()).all()
