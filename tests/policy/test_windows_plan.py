"""A recurring window in the pure plan (issue 39): on a mixed fleet its GPUs are held on the types it names; an
operator's (API) window replaces the config's of the same name; the plan carries the windows in force."""

import numpy as np
import pandas as pd

from daemon.config import WindowConfig, parse_config
from daemon.policy.engine import plan
from daemon.policy.state import UNHELD, ClusterState, Nodes
from daemon.policy.types import OperatorInputs, Plan, PolicyMemory

WIN = {"name": "eod", "tenant": "win", "every": "daily", "at": "14:00", "duration_minutes": 60,
       "reclaim_before_minutes": 30}


def _state(hhmm: str, typed: bool) -> ClusterState:
    names = np.array(["h0", "h1", "a0", "a1"], dtype=object)
    nodes = Nodes(names=names, gpus=np.full(4, 8), free=np.full(4, 8), draining=np.zeros(4, dtype=np.int64),
                  held_by=np.full(4, UNHELD), gpu_type=np.array(["h100", "h100", "a100", "a100"], dtype=object)
                  if typed else None)
    return ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=("win", "other"),
                        tiers=("normal", "low"), capacity=32, used=np.zeros(2), pending=np.zeros(2), nodes=nodes)


def test_a_typed_window_is_held_on_the_types_it_names():
    cfg = parse_config({"tenants": [{"name": "win"}, {"name": "other", "tier": "low"}],
                        "fleet": {"types": ["h100", "a100"], "pools": [{"type": "h100", "nodes": 2},
                                                                        {"type": "a100", "nodes": 2}]},
                        "windows": [{**WIN, "gpus": {"h100": 8, "a100": 8}}]})
    p = plan(None, _state("13:45", True), PolicyMemory(), cfg)
    assert p.reservations["win"] == 16 and p.holds_by_type["win"] == {"h100": 8, "a100": 8}
    assert "win" not in plan(None, _state("13:00", True), PolicyMemory(), cfg).reservations


def test_an_operators_window_replaces_the_configs_and_the_plan_carries_them():
    cfg = parse_config({"tenants": [{"name": "win"}, {"name": "other", "tier": "low"}],
                        "windows": [{**WIN, "gpus": 8}]})
    ops = OperatorInputs(windows=(WindowConfig.model_validate({**WIN, "gpus": 16}),))
    p = plan(None, _state("13:45", False), PolicyMemory(), cfg, ops=ops)
    assert p.reservations["win"] == 16 and [w["gpus"] for w in p.windows] == [16]
    assert Plan.from_dict(p.to_dict()).windows == p.windows
    assert "windows" not in plan(None, _state("13:45", False), PolicyMemory(),
                                 parse_config({"tenants": [{"name": "win"}]})).to_dict()
