"""The embedded simulator takes a tenant's tier from [[tenants]], as every other source does.

Before, `make run` with `[[tenants]] name = "tenant-0001", tier = "high"` was accepted and ignored: the simulator
kept its own tier for tenant-0001 (by `source.simulator.high_share`), so the plan, the console and the skill gate
treated it as low.
"""

import logging

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.sim.source import SimulatedCluster


def _cfg(tenants: list[dict]) -> Config:
    return Config(cluster={"gpus": 64}, source=SourceConfig(simulator=SimulatorConfig(tenants=3, warmup_steps=30)),
                  tenants=tenants)


def test_a_declared_tier_replaces_the_simulators_own_and_the_others_keep_theirs():
    own = SimulatedCluster(_cfg([]), extra_steps=10).collect(10).state
    assert own.tenants == ("tenant-0000", "tenant-0001", "tenant-0002")
    assert own.tiers[1] != "high"
    got = SimulatedCluster(_cfg([{"name": "tenant-0001", "tier": "high"}]), extra_steps=10).collect(10).state
    assert got.tiers == (own.tiers[0], "high", own.tiers[2])


def test_a_declared_tenant_the_simulator_does_not_have_is_named_in_one_line(caplog):
    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.sim"):
        SimulatedCluster(_cfg([{"name": "tenant-0007", "tier": "high"}]), extra_steps=10)
    lines = [r.getMessage() for r in caplog.records if "tenant-0007" in r.getMessage()]
    assert len(lines) == 1 and "no such simulated tenant" in lines[0], lines
