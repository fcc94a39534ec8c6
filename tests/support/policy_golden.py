"""A fixed run of plan() on the simulated cluster, pinned as digests of every plan it made: the guard for
refactoring the policy (a split of plan() must change none of its output).

Each case drives the embedded simulator with a deterministic forecaster and the policy's branches switched on
in turn (aging, placement, budgets, a pooled or per-tenant high tier, operator floors, pauses, tier and rate
changes, a missing forecast, stale snapshots). `python -m tests.support.policy_golden --write` regenerates the pins,
only for a deliberate change of the policy's behaviour.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.types import OperatorInputs, Plan
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.source import SimulatedCluster
from forecaster.baselines import SeasonalNaive

FIXTURE = Path(__file__).parent / "data" / "policy_golden.json"
# Plan fields of a mixed fleet (issue 24), empty when no node carries a type
TYPED_FIELDS = ("holds_by_type", "capacity_by_type", "high_pool_by_type", "notes_by_type", "shared_cap_by_type")
SIM = {"tenants": 24, "seed": 7, "warmup_steps": 1500, "target_load": 1.05, "peak_share": 0.5}
CASES = {
    "default": {},
    "plain": {"policy": {"aging_cumulative": False, "aging_before_high": False, "pool_high_tier": False,
                         "preempt_quantile": 0.5, "preempt_budget_share": 0.2}},
    "tight": {"policy": {"headroom": 0.0, "hysteresis": 0.0, "max_wait_steps": 20, "preempt_min_runtime_s": 0,
                         "lead_time_steps": 10, "preempt_lead_steps": 3, "min_preempt_gpus": 1}},
    "counts": {},  # a source with no per-node view: preemption by GPU counts only
    # the high tier over its guarantee while jobs starve: aged work is held for ahead of the high tier's borrowing
    "pressure": {"sim": {"high_share": 0.3, "target_load": 1.4, "peak_share": 0.9},
                 "policy": {"max_wait_steps": 15, "aging_max_share": 0.3, "reserve_share": 0.1,
                            "min_preempt_gpus": 1}},
}


def _ops(k: int, tenants: tuple[str, ...]) -> OperatorInputs | None:
    """Operator changes that come and go during the run."""
    if k % 40 < 10:
        return None
    return OperatorInputs(tiers={tenants[1]: "high", tenants[2]: "low"} if k % 40 < 25 else {},
                          rates={tenants[3]: 7.5},
                          floors={tenants[4]: 16, tenants[5]: 3} if k % 20 < 12 else {},
                          paused=frozenset({tenants[6]}) if k % 30 < 15 else frozenset(),
                          paused_all=30 <= k % 80 < 36)


def _plan_record(p: Plan) -> str:
    """Everything the plan says, as canonical JSON (floats kept exact by repr)."""
    d = dataclasses.asdict(p)
    # a one-model cluster leaves the typed fields empty, and a source without a scheduler view caps nothing: the
    # record (and digest) is what it was before those fields; so do the skill gate while it is off and no windows
    for key in (*TYPED_FIELDS, "demand_capped", "capacity_dropped", "forecast_acting", "windows", "window_holds",
                "window_holds_by_type"):
        if not d.get(key):
            d.pop(key, None)
    d.pop("hold_why", None)  # why a hold changed: words about `reservations` (tests/policy/test_hold_why.py)
    d.pop("held_for", None)  # the held GPUs by reason: a reading of `reservations` (tests/policy/test_held_for.py)

    def fix(x):
        if isinstance(x, float):
            return repr(x)
        if isinstance(x, dict):
            return {str(k): fix(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
        if isinstance(x, (list, tuple)):
            return [fix(v) for v in x]
        if isinstance(x, (np.integer, np.floating)):
            return fix(x.item())
        if isinstance(x, frozenset):
            return sorted(fix(v) for v in x)
        return x

    return json.dumps(fix(d), sort_keys=True)


def drive(case: str, cycles: int = 90) -> list[str]:
    extra = dict(CASES[case])
    sim_cfg = {**SIM, **extra.pop("sim", {})}
    cfg = Config.model_validate({"cluster": {"gpus": 192}, "source": {"simulator": sim_cfg},
                                 "forecaster": {"kind": "seasonal_naive"}, **extra})
    sim = SimulatedCluster(cfg, extra_steps=cycles + 10)
    act = SimulatorActuator(sim.cluster, sim.tenants, node_index=sim.node_index, lock=sim.lock)
    model = SeasonalNaive(cfg.forecaster.season_steps, tuple(cfg.forecaster.quantiles))
    memory, last = PolicyMemory(), None
    out = []
    for k in range(cycles):
        got = sim.collect(cfg.cycle.history_steps)
        state = got.state
        fc = None if k % 17 == 5 else model.predict(got.history, cfg.cycle.horizon_steps)  # a forecast lost
        if case == "counts":
            state = dataclasses.replace(state, nodes=None)
        if k % 23 == 11:  # a stale snapshot: the last good plan stands
            state = dataclasses.replace(state, staleness_s=cfg.cycle.stale_after_s + 60)
        p = plan(fc, state, memory, cfg, last, _ops(k, sim.tenants))
        if not p.stale:
            memory, last = p.memory, p
        act.apply(p)
        out.append(hashlib.sha256(_plan_record(p).encode()).hexdigest()[:16])
    return out


def all_cases() -> dict[str, list[str]]:
    return {case: drive(case) for case in CASES}


if __name__ == "__main__":
    got = all_cases()
    if "--write" in sys.argv:
        FIXTURE.write_text(json.dumps(got, indent=1) + "\n")
        print(f"wrote {FIXTURE}")
    else:
        print(json.dumps({c: len(set(v)) for c, v in got.items()}))
