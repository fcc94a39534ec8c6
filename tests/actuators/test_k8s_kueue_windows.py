"""A recurring window on Kueue (issue 39): the plan made before the lead time holds nothing for the window's tenant,
the plan made in it holds the window's GPUs, and the Kueue actuator turns that into whole held nodes and the
tenant's hold flavor quota (the official client against the capture server of tests/actuators/test_k8s_kueue.py)."""

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.policy.engine import plan
from daemon.policy.state import ClusterState
from daemon.policy.types import PolicyMemory
from tests.actuators.test_k8s_actuator import _capture_servers  # noqa: F401 (autouse fixture)
from tests.actuators.test_k8s_kueue import TENANTS, flavors, kueue, objects, validate


def _plan_at(cfg, hhmm: str):
    names = tuple(t.name for t in TENANTS)
    st = ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=names,
                      tiers=tuple(t.tier for t in TENANTS), capacity=32, used=np.zeros(len(names)),
                      pending=np.zeros(len(names)))
    return plan(None, st, PolicyMemory(), cfg)


def test_the_tenants_hold_flavor_quota_is_raised_at_the_windows_lead_time():
    cfg = parse_config({"tenants": [t.model_dump() for t in TENANTS],
                        "windows": [{"name": "eod", "tenant": "team-a", "gpus": 16, "every": "daily", "at": "14:00",
                                     "duration_minutes": 60, "reclaim_before_minutes": 30}]})
    act, _, c = kueue()
    before, during = _plan_at(cfg, "13:00"), _plan_at(cfg, "13:40")
    assert "team-a" not in before.reservations and during.reservations["team-a"] == 16
    assert act.apply(before).ok
    assert flavors(objects(c, "ClusterQueue")["gpuas-tenant-team-a"])["gpuas-hold-team-a"]["nominalQuota"] == 0
    assert "team-a" not in c.held().values()
    rep = act.apply(during)
    assert rep.ok, rep.errors
    cq = objects(c, "ClusterQueue")["gpuas-tenant-team-a"]
    assert flavors(cq)["gpuas-hold-team-a"] == {"name": "nvidia.com/gpu", "nominalQuota": 16, "lendingLimit": 0}
    assert list(c.held().values()).count("team-a") == 2                # two whole 8-GPU nodes
    for o in c.objs.values():
        validate(o)
