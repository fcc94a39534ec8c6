import dataclasses

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.ratelimits import rate_level
from daemon.policy.state import PRIORITY, ClusterState, Jobs
from forecaster.types import Forecast

AT = pd.Timestamp("2026-01-06T13:50:00Z")


def make_state(tiers, jobs_spec, capacity, pending=None, staleness=0.0, missing=()):
    """jobs_spec: list of (tenant index, gpus, priority name, running, runtime_s, wait_s)."""
    n = len(tiers)
    t = np.array([j[0] for j in jobs_spec], dtype=np.int64)
    g = np.array([j[1] for j in jobs_spec], dtype=np.int64)
    pr = np.array([PRIORITY[j[2]] for j in jobs_spec], dtype=np.int8)
    run = np.array([j[3] for j in jobs_spec], dtype=bool)
    jobs = Jobs(np.array([f"j{i}" for i in range(len(jobs_spec))], dtype=object), t, g, pr, run,
                np.array([j[4] for j in jobs_spec], dtype=float), np.array([j[5] for j in jobs_spec], dtype=float),
                np.array(["n0"] * len(jobs_spec), dtype=object))
    used = np.bincount(t[run], weights=g[run], minlength=n) if len(jobs_spec) else np.zeros(n)
    pend = np.bincount(t[~run], weights=g[~run], minlength=n) if len(jobs_spec) else np.zeros(n)
    if pending is not None:
        pend = pend + np.asarray(pending, dtype=float)
    names = tuple(f"t{i}" for i in range(n))
    return ClusterState(AT, names, tuple(tiers), capacity, used.astype(float), pend.astype(float), jobs,
                        staleness_s=staleness, missing=tuple(missing))


def flat_forecast(names, values, horizon=60):
    v = np.repeat(np.asarray(values, dtype=float)[:, None, None], horizon, axis=1)
    v = np.concatenate([v, v * 1.1, v * 1.2], axis=2)
    return Forecast(tuple(names), (0.5, 0.9, 0.99), v, AT, 60, "test")


CFG = Config()


def test_preempts_cheapest_low_jobs_ahead_of_a_high_peak():
    tiers = ["high", "low", "low"]
    jobs = [(0, 10, "high", True, 3600, 0)] + [(1, 10, "low", True, 600 * (i + 1), 0) for i in range(5)] \
        + [(2, 10, "low", True, 60, 0)]
    s = make_state(tiers, jobs, capacity=70)
    fc = flat_forecast(s.tenants, [30, 50, 10])       # p90 peak for t0 = 33 GPUs
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    p = plan(fc, s, PolicyMemory(), cfg)
    ids = [x.job_id for x in p.preemptions]
    assert p.reservations["t0"] == 40                 # held in whole jobs: t0's jobs take 10 GPUs
    assert p.hold_job_gpus == {"t0": 10}              # and the actuators are told so (whole_nodes.usable)
    assert ids == ["j6", "j1", "j2"]                  # newest (least work lost) first, enough for 30 GPUs
    assert all(x.tenant != "t0" for x in p.preemptions)
    assert any(n.kind == "preempted" and n.tenant == "t2" for n in p.notifications)


def test_min_runtime_exempts_young_jobs_like_preempt_exempt_time():
    tiers = ["high", "low", "low"]
    jobs = [(0, 10, "high", True, 3600, 0)] + [(1, 10, "low", True, 600 * (i + 1), 0) for i in range(5)] \
        + [(2, 10, "low", True, 60, 0)]
    s = make_state(tiers, jobs, capacity=70)
    fc = flat_forecast(s.tenants, [30, 50, 10])
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_min_runtime_s": 900})
    ids = [x.job_id for x in plan(fc, s, PolicyMemory(), cfg).preemptions]
    # j6 (60 s) and j1 (600 s) ran under 900 s: the next cheapest are taken instead
    assert ids == ["j2", "j3", "j4"]


def test_budget_caps_preemptions_per_cycle():
    tiers = ["high", "low"]
    jobs = [(1, 1, "low", True, 100 + i, 0) for i in range(100)]
    s = make_state(tiers, jobs, capacity=100)
    p = plan(flat_forecast(s.tenants, [50, 50]), s, PolicyMemory(), Config(policy={"preempt_budget_share": 0.05}))
    assert sum(x.gpus for x in p.preemptions) == 5
    assert any("budget" in n for n in p.notes)
    p2 = plan(flat_forecast(s.tenants, [50, 50]), s, PolicyMemory(), Config(policy={"preempt_budget_jobs": 3,
                                                                                       "preempt_budget_share": 1.0}))
    assert len(p2.preemptions) == 3


def test_stale_data_keeps_last_plan_and_preempts_nothing():
    tiers = ["high", "low"]
    jobs = [(1, 10, "low", True, 100, 0) for _ in range(10)]
    s = make_state(tiers, jobs, capacity=100)
    fc = flat_forecast(s.tenants, [60, 50])
    cfg = Config(policy={"preempt_budget_share": 1.0})
    good = plan(fc, s, PolicyMemory(), cfg)
    assert good.preemptions
    stale = make_state(tiers, jobs, capacity=100, staleness=10_000)
    p = plan(fc, stale, good.memory, cfg, last=good)
    assert p.stale and p.preemptions == () and p.reservations == good.reservations and p.limits == good.limits
    # held the same way too: a pooled hold does not split into per-tenant holds on a stale cycle
    assert p.pooled == good.pooled == ("t0",) and p.hold_job_gpus == good.hold_job_gpus
    assert "keeping last good plan" in p.notes[0]
    gaps = make_state(tiers, jobs, capacity=100, missing=("t0",))
    assert plan(fc, gaps, good.memory, CFG, last=good).stale   # 1 of 2 tenants silent > 20%


def test_a_stale_plan_keeps_every_hold_of_the_last_good_plan():
    """A stale cycle applies the last good plan again: every hold in it (a window's, a type's, the quotas), not
    only the reservations, or the actuators would let go of what a window holds on the first stale cycle."""
    tiers = ["high", "low"]
    jobs = [(1, 10, "low", True, 100, 0) for _ in range(10)]
    s = make_state(tiers, jobs, capacity=100)
    good = dataclasses.replace(
        plan(flat_forecast(s.tenants, [60, 50]), s, PolicyMemory(), CFG), quotas={"t1": 40},
        window_holds={"t1": 16}, window_holds_by_type={"t1": {"h100": 16}}, holds_by_type={"t0": {"h100": 8}},
        capacity_by_type={"h100": 100}, high_pool_by_type={"h100": 20}, shared_cap_by_type={"h100": 80},
        notes_by_type={"h100": ("x",)}, held_for={"high": 60, "floor": 16}, hold_job_gpus={"t0": 10, "t1": 8})
    stale = plan(flat_forecast(s.tenants, [60, 50]), make_state(tiers, jobs, capacity=100, staleness=10_000),
                 good.memory, CFG, last=good)
    assert stale.stale and stale.preemptions == ()
    for f in ("capacity", "load", "high_pool", "reservations", "quotas", "limits", "pooled", "hold_job_gpus",
              "holds_by_type", "capacity_by_type", "high_pool_by_type", "notes_by_type", "shared_cap_by_type",
              "held_for", "window_holds", "window_holds_by_type", "forecast_model"):
        assert getattr(stale, f) == getattr(good, f), f


def test_no_healthy_gpus_or_no_usage_reading_is_stale_data_not_an_idle_cluster():
    tiers = ["high", "low"]
    jobs = [(1, 10, "low", True, 100, 0) for _ in range(10)]
    good = plan(flat_forecast(("t0", "t1"), [60, 50]), make_state(tiers, jobs, capacity=100), PolicyMemory(), CFG)
    down = make_state(tiers, jobs, capacity=0)
    p = plan(flat_forecast(down.tenants, [60, 50]), down, good.memory, CFG, last=good)
    assert p.stale and "source reports no healthy GPUs" in p.notes[0] and p.reservations == good.reservations
    s = make_state(tiers, jobs, capacity=100)
    blind = ClusterState(s.at, s.tenants, s.tiers, s.capacity, np.full(2, np.nan), s.pending, s.jobs)
    p = plan(flat_forecast(s.tenants, [60, 50]), blind, good.memory, CFG, last=good)
    assert p.stale and "GPU usage unknown" in p.notes[0] and p.preemptions == ()
    assert p.reservations == good.reservations and p.limits == good.limits


def test_missing_forecast_is_not_zero_demand():
    tiers = ["high", "low"]
    s = make_state(tiers, [(0, 20, "high", True, 10, 0)], capacity=100)
    fc = flat_forecast(("other",), [5])              # says nothing about t0
    p = plan(fc, s, PolicyMemory(reservations={"t0": 40}), CFG)
    assert p.reservations["t0"] >= 20                # at least what it uses now, not zero
    p2 = plan(None, s, PolicyMemory(), CFG)
    assert p2.reservations["t0"] >= 20 and "no forecast" in p2.notes[0]


def test_a_silent_high_tenant_does_not_trigger_preemption():
    tiers = ["high", "high"] + ["low"] * 8
    jobs = [(0, 10, "high", True, 100, 0)] + [(2 + i, 10, "low", True, 100, 0) for i in range(8)]
    s = make_state(tiers, jobs, capacity=90)
    mem = PolicyMemory(reservations={"t1": 30})
    silent = ClusterState(s.at, s.tenants, s.tiers, s.capacity, np.where(np.arange(10) == 1, np.nan, s.used),
                          s.pending, s.jobs)                      # t1's exporter is silent: 1 of 10 missing
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0})
    p = plan(flat_forecast(s.tenants, [8] + [np.nan] + [10] * 8), silent, mem, cfg)
    assert not p.stale and p.reservations["t1"] == 30              # its reservation is kept, not zeroed
    assert p.preemptions == ()                                     # and its "0 in use" does not preempt anyone
    # not only because the cost-aware rule finds its unknown forecast worth nothing: without the rule, too
    off = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_cost_aware": False})
    p = plan(flat_forecast(s.tenants, [8] + [np.nan] + [10] * 8), silent, mem, off)
    assert p.reservations["t1"] == 30 and p.preemptions == ()


def test_reservation_hysteresis():
    tiers = ["high", "low"]
    s = make_state(tiers, [], capacity=1000)
    cfg = Config(policy={"headroom": 0.0, "hysteresis": 0.1})
    mem = PolicyMemory(reservations={"t0": 100})
    assert plan(flat_forecast(s.tenants, [90 / 1.1, 0]), s, mem, cfg).reservations["t0"] == 100   # 90 >= 100*(1-0.1)
    assert plan(flat_forecast(s.tenants, [80 / 1.1, 0]), s, mem, cfg).reservations["t0"] == 80
    assert plan(flat_forecast(s.tenants, [101 / 1.1, 0]), s, mem, cfg).reservations["t0"] == 101


def test_rate_levels_tighten_at_once_and_loosen_with_hysteresis():
    rl = CFG.ratelimits
    assert rate_level(0.5, 0, rl) == 0
    assert rate_level(0.81, 0, rl) == 1
    assert rate_level(0.93, 0, rl) == 2
    assert rate_level(0.88, 2, rl) == 2               # 0.88 > 0.90 - 0.05: stay tight
    assert rate_level(0.84, 2, rl) == 1
    assert rate_level(0.76, 1, rl) == 1
    assert rate_level(0.70, 2, rl) == 0
    assert rate_level(float("nan"), 2, rl) == 2       # no data is no reason to relax


def test_a_rate_level_applies_from_its_load_exactly():
    """"The last level whose `load` is reached applies": 80% of the GPUs in use is the 0.8 level (high 200, normal
    50 req/s), not the one below it; 79.9% is not."""
    rl = CFG.ratelimits
    assert rate_level(0.8, 0, rl) == 1 and rate_level(0.9, 0, rl) == 2 and rate_level(0.9, 1, rl) == 2
    assert rate_level(0.799, 0, rl) == 0
    tiers = ["high", "normal", "low"]
    s = make_state(tiers, [(1, 80, "normal", True, 10, 0)], capacity=100)
    p = plan(flat_forecast(s.tenants, [0, 80, 0]), s, PolicyMemory(), CFG)
    assert (p.limits["t0"].rate, p.limits["t1"].rate, p.limits["t2"].rate) == (200, 50, 100)


def test_limits_follow_the_seed_example():
    tiers = ["high", "normal", "low"]
    s = make_state(tiers, [(1, 85, "normal", True, 10, 0)], capacity=100)
    p = plan(flat_forecast(s.tenants, [0, 85, 0]), s, PolicyMemory(), CFG)
    assert (p.limits["t0"].rate, p.limits["t1"].rate, p.limits["t2"].rate) == (200, 50, 100)
    assert "85%" in p.limits["t1"].reason and any(n.kind == "throttled" for n in p.notifications)
    s = make_state(tiers, [(1, 95, "normal", True, 10, 0)], capacity=100)
    p = plan(flat_forecast(s.tenants, [0, 95, 0]), s, p.memory, CFG)
    assert p.limits["t2"].rate == 50 and p.limits["t2"].burst == 100


def test_anti_starvation_protects_a_tenant_that_waited_too_long():
    tiers = ["high", "low", "low"]
    step = CFG.cycle.resolution_s
    jobs = [(1, 10, "low", True, 5, 0), (2, 10, "low", True, 1, 0),
            (2, 10, "low", False, 0, (CFG.policy.max_wait_steps + 1) * step)]
    s = make_state(tiers, jobs, capacity=20)
    p = plan(flat_forecast(s.tenants, [0, 10, 10]), s, PolicyMemory(), Config(policy={"preempt_budget_share": 1.0}))
    assert p.reservations.get("t2", 0) >= 20
    assert [x.tenant for x in p.preemptions] == ["t1"]          # the aged tenant's own job is spared
    assert any(n.kind == "protected" and n.tenant == "t2" for n in p.notifications)


# ---- properties ------------------------------------------------------------------------------

job = st.tuples(st.integers(0, 5), st.integers(1, 8), st.sampled_from(["high", "normal", "low"]), st.booleans(),
                st.floats(0, 1e5), st.floats(0, 1e5))


@st.composite
def scenario(draw):
    tiers = draw(st.lists(st.sampled_from(["high", "normal", "low"]), min_size=6, max_size=6))
    jobs = draw(st.lists(job, max_size=40))
    # a job's priority follows its tenant's tier, as in the simulator
    jobs = [(t, g, tiers[t], r, rt, w) for t, g, _, r, rt, w in jobs]
    running = sum(g for _, g, _, r, _, _ in jobs if r)
    capacity = draw(st.integers(max(running, 1), max(running, 1) + 64))
    fc = draw(st.lists(st.floats(0, 200), min_size=6, max_size=6))
    budget = draw(st.floats(0, 1))
    stale = draw(st.booleans())
    return tiers, jobs, capacity, fc, budget, stale


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_plan_invariants(sc):
    tiers, jobs, capacity, fc, budget, stale = sc
    s = make_state(tiers, jobs, capacity, staleness=1e6 if stale else 0.0)
    cfg = Config(policy={"preempt_budget_share": budget})
    p = plan(flat_forecast(s.tenants, fc), s, PolicyMemory(), cfg)
    # never over capacity
    assert sum(p.reservations.values()) <= capacity
    # budgets respected
    assert sum(x.gpus for x in p.preemptions) <= int(budget * capacity)
    assert len(p.preemptions) <= cfg.policy.preempt_budget_jobs
    # only running low-priority jobs are ever preempted
    by_id = {f"j{i}": j for i, j in enumerate(jobs)}
    for x in p.preemptions:
        j = by_id[x.job_id]
        assert j[2] == "low" and j[3]
    # stale data: nothing new is preempted
    if stale:
        assert p.stale and p.preemptions == ()
    else:
        # the high tier's guarantee: what it asks for now, up to the pool, is reserved for it
        high = [i for i, t in enumerate(tiers) if t == "high"]
        want = sum(s.demand[i] for i in high)
        got = sum(p.reservations.get(f"t{i}", 0) for i in high)
        assert got >= min(want, p.high_pool)


def test_capacity_is_held_ahead_but_jobs_are_preempted_just_in_time():
    tiers = ["high", "low"]
    jobs = [(0, 10, "high", True, 100, 0)] + [(1, 10, "low", True, 100 + i, 0) for i in range(6)]
    s = make_state(tiers, jobs, capacity=70)
    cfg = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "lead_time_steps": 10, "preempt_lead_steps": 3,
                         "preempt_cost_aware": True})

    def peak_at(step):
        v = np.full((2, 60, 3), 10.0)
        v[1] = 60.0
        v[0, step:step + 5] = 40.0                     # the high tenant will need 40 GPUs around `step`
        return Forecast(s.tenants, (0.5, 0.9, 0.99), v, AT, 60, "test")

    far = plan(peak_at(7), s, PolicyMemory(), cfg)
    assert far.reservations["t0"] == 40 and far.preemptions == ()          # held, nobody preempted yet
    # the cost-aware rule preempts only for demand that arrives before a drain started now ends (2 minutes): 3
    # steps ahead is still too early
    assert plan(peak_at(2), s, far.memory, cfg).preemptions == ()
    near = plan(peak_at(1), s, far.memory, cfg)
    assert sum(p.gpus for p in near.preemptions) == 30                     # now it is inside the drain window
    # without the rule, the window is preempt_lead_steps
    off = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"preempt_cost_aware": False})})
    assert sum(p.gpus for p in plan(peak_at(2), s, far.memory, off).preemptions) == 30


def test_a_remembered_rate_level_the_config_no_longer_has_is_the_tightest_one():
    """After a reload drops levels, a stale cycle and the safe default still plan (they used to IndexError)."""
    from daemon.policy.safe import safe_default
    s = make_state(["high", "low"], [(1, 10, "low", True, 100, 0)], capacity=100, staleness=10_000)
    cfg = Config(ratelimits={"levels": [{"load": 0.0, "high": 100, "normal": 10, "low": 5}]})
    mem = PolicyMemory(rate_level=2)
    p = plan(None, s, mem, cfg)                      # stale, no last plan: limits from memory's level
    assert p.stale and p.limits["t1"].rate == 5 and p.limits["t1"].level == 0
    d = safe_default(AT.isoformat(), 100, s.tenants, s.tiers, mem, cfg, "plan too old")
    assert d.limits["t0"].rate == 100


def test_plan_gives_exactly_the_plans_it_gave_before_its_split():
    # tests/support/policy_golden.py: the simulated cluster planned by plan() with every branch in turn (aging,
    # placement, budgets, floors, pauses, tier and rate changes, a lost forecast, stale snapshots); digests of
    # every plan pinned (regenerate only for a deliberate change of the policy)
    import json

    from tests.support.policy_golden import FIXTURE, all_cases

    want = json.loads(FIXTURE.read_text())
    got = all_cases()
    assert got.keys() == want.keys()
    for case in want:
        first = next((k for k, (a, b) in enumerate(zip(got[case], want[case])) if a != b), None)
        assert first is None, f"{case}: plan {first} differs"
        assert len(got[case]) == len(want[case])


def test_a_preemption_reason_names_no_other_tenant():
    # the preempted tenant reads the reason (its notice, a Slurm comment, an Event in its namespace): whom the
    # GPUs were cleared for is the operator's (Preemption.for_tenant), never in the text
    tiers = ["high", "low", "low"]
    jobs = [(0, 10, "high", True, 3600, 0)] + [(1, 10, "low", True, 600 * (i + 1), 0) for i in range(5)] \
        + [(2, 10, "low", True, 60, 0)]
    s = make_state(tiers, jobs, capacity=70)
    p = plan(flat_forecast(s.tenants, [30, 50, 10]), s, PolicyMemory(),
             Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0}))
    assert p.preemptions
    for x in p.preemptions:
        assert "t0" not in x.reason and x.reason.endswith("for protected tenants")
    for n in p.notifications:
        if n.kind == "preempted":
            assert "t0" not in n.message


def _multi_node_state(job_gpus: int, nodes_asked: int, node_gpus: int = 8, n_nodes: int = 16):
    """A high tenant t0 with one pending job of `job_gpus` GPUs over `nodes_asked` nodes (Slurm -N), on
    `n_nodes` idle nodes of `node_gpus`."""
    from daemon.policy.state import Nodes

    s = make_state(["high", "low"], [(0, job_gpus, "high", False, 0, 60)], capacity=n_nodes * node_gpus)
    jobs = dataclasses.replace(s.jobs, nodes_asked=np.array([nodes_asked], dtype=np.int64))
    names = np.array([f"n{i:02d}" for i in range(n_nodes)], dtype=object)
    nodes = Nodes(names, np.full(n_nodes, node_gpus), np.full(n_nodes, node_gpus), np.zeros(n_nodes, dtype=int),
                  np.full(n_nodes, -1))
    return dataclasses.replace(s, jobs=jobs, nodes=nodes)


def test_a_hold_for_a_job_on_several_nodes_is_counted_at_a_whole_node_per_node_asked():
    """Slurm holds whole nodes, and the actuator holds no more GPUs than the plan counts (ba3e553): a -N 2 x 4 job's
    hold counted at its 8 GPUs was one 8-GPU node, where it cannot start; counted at two nodes' 16 it is the two
    nodes it can start in. A -N 16 x 1 job's nodes are 128 GPUs for its 16: counted at its 16 (no hold of eight
    times what it runs on; the actuator says its shape does not fit)."""
    cfg = Config(policy={"headroom": 0.0})
    two = _multi_node_state(8, 2)
    p = plan(flat_forecast(two.tenants, [7, 0]), two, PolicyMemory(), cfg)
    # the hold is 16, its job still 8 GPUs to the actuator (Plan.hold_job_gpus: holds.shape_of matches the job's
    # shape to it, and a kept node needs room for its GPUs per node, not for 16)
    assert p.hold_job_gpus["t0"] == 8 and p.reservations["t0"] == 16
    from daemon.actuators.slurm.holds import shape_of
    assert shape_of(("acct",), p.hold_job_gpus["t0"], {"acct": (2, 4)}) == (2, 4)    # so Slurm's hold takes it
    one = dataclasses.replace(two, jobs=dataclasses.replace(two.jobs, nodes_asked=None))
    q = plan(flat_forecast(one.tenants, [7, 0]), one, PolicyMemory(), cfg)
    assert q.hold_job_gpus["t0"] == 8 and q.reservations["t0"] == 8        # one node each: as before
    wide = _multi_node_state(16, 16)
    w = plan(flat_forecast(wide.tenants, [14, 0]), wide, PolicyMemory(), cfg)
    assert w.hold_job_gpus["t0"] == 16 and w.reservations["t0"] == 16
