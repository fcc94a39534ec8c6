"""The simulated actuator keeps its dry run, as every actuator does: the same actions reported, nothing changed.

(The daemon drives the embedded simulator for real, since it is the simulated system; the dry run is the
actuator's own mode, for a caller that wants to see what a plan would do to it.)
"""

import numpy as np

from daemon.policy.state import PRIORITY
from daemon.policy.types import Plan, PolicyMemory, Preemption
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster


def _cluster():
    prio = np.array([PRIORITY["high"], PRIORITY["low"]])
    c = SimCluster(["hi", "lo"], prio, 32, np.array([8, 2]), gpus_per_node=8)
    c.step(np.array([0.0, 24.0]))                                  # the low tenant runs twelve 2-GPU jobs
    return c


def _snapshot(c):
    n = c.size
    return (c.j_state[:n].copy(), c.j_node[:n].copy(), c.node_holder.copy(), c.node_ok.copy(),
            np.array(c.reservations), c.total_preemptions)


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_dry_run_reports_the_same_actions_and_changes_nothing():
    live, dry = _cluster(), _cluster()
    ids = [f"sim-{int(j)}" for j in live.j_id[live.running_on(0)]]   # the low jobs on node 0
    assert ids
    p = Plan(at="2026-01-01T00:00:00+00:00", capacity=32, load=0.8, high_pool=8, reservations={"hi": 8},
             quotas={"lo": 24}, limits={}, preemptions=tuple(Preemption(j, "lo", 2, "n0", "x") for j in ids),
             notifications=(), stale=False, forecast_model="t", notes=(), memory=PolicyMemory())
    before = _snapshot(dry)
    a_live = SimulatorActuator(live, ("hi", "lo"), node_index=lambda name: 1)
    a_dry = SimulatorActuator(dry, ("hi", "lo"), dry_run=True, node_index=lambda name: 1)
    r_live, r_dry = a_live.apply(p), a_dry.apply(p)
    assert r_dry.dry_run and r_dry.actions == r_live.actions and r_dry.actions
    assert _same(_snapshot(dry), before)
    assert not _same(_snapshot(live), before)                      # the same plan does change a live cluster
    assert a_dry.requeue(ids[:1], "node failed").actions == [f"requeue {ids[0]}: node failed"]
    assert a_dry.fence_node("n1", "down").actions == ["fence n1"]
    assert _same(_snapshot(dry), before)
