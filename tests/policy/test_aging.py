"""Anti-starvation that holds (cumulative wait, a grace period for what aging started) and a preemption
budget in time, not per cycle."""

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.aging import age
from daemon.policy.state import PRIORITY, ClusterState, Jobs
from daemon.sim.replay import run_strategy
from daemon.sim.workloads import Workload
from forecaster.types import Forecast

T0 = pd.Timestamp("2026-01-06T12:00:00Z")


def jobs(rows):
    """rows: (id, tenant index, gpus, priority, running, runtime_s, wait_s)."""
    ids, ten, g, pr, run, rt, w = zip(*rows)
    return Jobs(np.array(ids, dtype=object), np.array(ten), np.array(g),
                np.array([PRIORITY[p] for p in pr], dtype=np.int8),
                np.array(run), np.array(rt, dtype=float), np.array(w, dtype=float),
                np.array(["n1" if r else "" for r in run], dtype=object))


def test_wait_adds_up_across_requeues():
    mem = {}, {}, {}
    # 50 min queued, then it runs (the stint is banked), then it is requeued and waits 80 min more
    for running, wait in ((False, 3000.0), (True, 0.0), (False, 4800.0)):
        a = age(jobs([("j1", 0, 1, "low", running, 60.0 if running else 0.0, wait)]), *mem, 7200, 1800, "t")
        mem = a.waited, a.stint, a.aged_jobs
    assert a.total_wait_s[0] == pytest.approx(7800.0)           # 130 min >= max_wait: aged, not 80 min
    assert a.aged_jobs == {"j1": "t"}


def test_a_job_started_through_aging_is_exempt_for_the_grace_period_then_starts_over():
    pend = age(jobs([("j1", 0, 1, "low", False, 0.0, 8000.0)]), {}, {}, {}, 7200, 1800, "t1")
    mem = pend.waited, pend.stint, pend.aged_jobs
    ran = age(jobs([("j1", 0, 1, "low", True, 600.0, 0.0)]), *mem, 7200, 1800, "t2")
    assert ran.exempt.tolist() == [True] and ran.aged_jobs == {"j1": "t1"}
    done = age(jobs([("j1", 0, 1, "low", True, 1900.0, 0.0)]), ran.waited, ran.stint, ran.aged_jobs, 7200, 1800, "t3")
    assert done.exempt.tolist() == [False] and done.waited == {} and done.aged_jobs == {}


def state(job_rows, used, at=T0):
    return ClusterState(at, ("hi", "lo"), ("high", "low"), 64, np.array(used, dtype=float), np.zeros(2),
                        jobs(job_rows))


def spike(st, gpus=64):
    v = np.zeros((2, 60, 3))
    v[0] = gpus
    return Forecast(st.tenants, (0.5, 0.9, 0.99), v, st.at, 60, "test")


def test_aged_start_is_not_the_next_cycles_cheapest_victim():
    cfg = Config(policy={"preempt_budget_share": 1.0, "max_wait_steps": 10, "aging_min_run_s": 1800, "headroom": 0,
                         "aging_cumulative": True})
    rows = [("old", 1, 8, "low", True, 86400.0, 0.0), ("fresh", 1, 8, "low", False, 0.0, 900.0)]
    st = state(rows, [0, 8])
    p1 = plan(spike(st), st, PolicyMemory(), cfg)
    assert "fresh" in p1.memory.aged_jobs                       # 15 min >= max_wait (10 steps)
    # next cycle it runs (just started: the cheapest job to preempt), and a high-tier peak needs everything
    st2 = state([("old", 1, 8, "low", True, 86460.0, 0.0), ("fresh", 1, 8, "low", True, 60.0, 0.0)], [0, 16],
                T0 + pd.Timedelta("1min"))
    p2 = plan(spike(st2), st2, p1.memory, cfg)
    assert [p.job_id for p in p2.preemptions] == ["old"]
    cfg0 = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"aging_min_run_s": 0})})
    assert [p.job_id for p in plan(spike(st2), st2, p1.memory, cfg0).preemptions][0] == "fresh"
    # aging_cumulative = false: the current stint only, nothing remembered, no grace period
    off = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"aging_cumulative": False})})
    q = plan(spike(st), st, PolicyMemory(), off)
    assert q.memory.waited == q.memory.stint == q.memory.aged_jobs == {} and q.memory.aged_since
    assert [p.job_id for p in plan(spike(st2), st2, q.memory, off).preemptions][0] == "fresh"


def test_budget_is_per_unit_of_time_not_per_cycle():
    cfg = Config(policy={"preempt_budget_share": 0.125, "preempt_budget_jobs": 100, "preempt_budget_window_s": 60,
                         "headroom": 0})
    rows = [(f"j{i}", 1, 1, "low", True, 1000.0 + i, 0.0) for i in range(60)]
    st = state(rows, [0, 60])
    p = plan(spike(st), st, PolicyMemory(), cfg, now=1000.0)
    assert len(p.preemptions) == 8                              # 12.5% of 64 GPUs per minute
    # an alert-triggered cycle 1 s later gets what one second refilled, not a fresh budget
    p = plan(spike(st), st, p.memory, cfg, now=1001.0)
    assert len(p.preemptions) == 0
    p = plan(spike(st), st, p.memory, cfg, now=1031.0)
    assert len(p.preemptions) == 4                              # half a window: half the budget
    p = plan(spike(st), st, p.memory, cfg, now=5000.0)
    assert len(p.preemptions) == 8                              # the bucket holds one window at most
    p = plan(spike(st), st, p.memory, cfg, now=10.0)            # the clock jumped back: nothing refills
    assert len(p.preemptions) == 0


def frame(cols, steps):
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC")
    return pd.DataFrame(cols, index=idx).rename_axis(columns="tenant")


def longest_zero_run(x):
    best = cur = 0
    for v in x:
        cur = cur + 1 if v == 0 else 0
        best = max(best, cur)
    return best


def service_runs(s):
    """Lengths of the stretches in which the tenant had GPUs."""
    return np.diff(np.flatnonzero(np.diff(np.r_[0, (s > 0).astype(int), 0])))[::2]


def test_low_tenant_is_served_under_sustained_high_tier_pressure():
    # 32 GPUs; the high tier wants all of them except one minute in twenty (16); a low tenant wants 8.
    # The defaults (cumulative wait, grace period, bounded admission ahead of the high tier's borrowing):
    # the low tenant gets GPUs within max_wait plus the time until the high tier next frees a node (high-
    # priority work is never preempted), and keeps them for the grace period. Without aging it is never
    # served; with the wait counted per queue stint only, what aging starts is preempted again at once.
    steps = 700
    t = np.arange(steps)
    w = Workload("t", frame({"hi": np.where(t % 20 == 0, 16.0, 32.0), "lo": np.full(steps, 8.0)}, steps),
                 ("high", "low"), np.array([8, 1]), 32, start=100)
    served, high_unmet = {}, {}
    for name, pol in (("default", {"max_wait_steps": 30}), ("off", {"max_wait_steps": 100_000}),
                      ("per_stint", {"max_wait_steps": 30, "aging_cumulative": False})):
        cfg = Config(policy={"headroom": 0.0, "preempt_budget_share": 0.5, **pol})
        m = run_strategy("reactive", w, cfg, steps=599, check_invariants=True)
        served[name] = np.asarray(m.served["low"])
        high_unmet[name] = m.summary()["tiers"]["high"]["unmet_gpu_min"]
    assert served["off"].sum() == 0
    s = served["default"]
    assert longest_zero_run(s) <= 30 + 20
    runs = service_runs(s)
    assert s.sum() > 0.25 * 8 * 599 and (runs[:-1] >= 30).all()   # each service lasts the grace period
    assert (service_runs(served["per_stint"]) < 30).all()         # preempted again as soon as the high tier asks


def test_aged_job_takes_the_high_tiers_hold_beyond_its_guarantee_not_the_guarantee():
    # 32 GPUs on 4 nodes; the high tier runs 20 GPUs and holds 25 (headroom 0.25): every node. Its guarantee
    # is the static pool (20% = 6 GPUs). A low tenant asks for one 8-GPU job from minute 20. By default the
    # job waits max_wait (30 min) and then gets a node the high tier held but did not use; the high tier
    # loses nothing. Without aging, or with the high tier's hold served first, it never runs.
    steps = 400
    t = np.arange(steps)
    w = Workload("t", frame({"hi": np.full(steps, 20.0), "lo": np.where(t < 120, 0.0, 8.0)}, steps),
                 ("high", "low"), np.array([4, 8]), 32, start=100)
    first, high_unmet = {}, {}
    for name, pol in (("default", {}), ("off", {"max_wait_steps": 100_000}),
                      ("high_first", {"aging_before_high": False})):
        cfg = Config(policy={"headroom": 0.25, "max_wait_steps": 30, **pol})
        m = run_strategy("reactive", w, cfg, steps=299, check_invariants=True)
        s = np.asarray(m.served["low"])
        first[name] = int(np.flatnonzero(s)[0]) - 20 if s.any() else None     # minutes after it first asked
        high_unmet[name] = m.summary()["tiers"]["high"]["unmet_gpu_min"]
    assert first["off"] is None and first["high_first"] is None
    assert 30 <= first["default"] <= 30 + 2
    assert high_unmet["default"] == high_unmet["off"] == 0


def pending(rows):
    """rows: (id, tenant, gpus, running, runtime_s); all low priority, wait given separately."""
    return jobs([(i, t, g, "low", r, rt, 0.0) for i, t, g, r, rt in rows])


def test_admission_is_one_job_per_starving_tenant_longest_wait_first_and_bounded():
    from daemon.policy.aging import Aging, admit

    j = pending([("a1", 0, 4, False, 0), ("a2", 0, 4, False, 0), ("b1", 1, 8, False, 0), ("c1", 2, 4, False, 0),
                 ("d1", 3, 2, True, 60.0), ("d2", 3, 2, False, 0), ("e1", 4, 2, False, 0)])
    wait = np.array([900.0, 1200.0, 1000.0, 700.0, 0.0, 5000.0, 100.0])   # e1 has not waited max_wait (600 s)
    exempt = np.array([False, False, False, False, True, False, False])    # d1 was started by aging: in grace
    ag = Aging(wait, exempt, {}, {}, {})
    eligible = np.ones(6, dtype=bool)
    a = admit(ag, j, 6, eligible, 600.0, room=100)
    # a: its longest waiter (a2) only; d: already has an aged job in grace; e: under max_wait
    assert a.job.tolist() == [1, 2, 3, -1, -1, -1] and a.gpus.tolist() == [4, 8, 4, 0, 0, 0]
    assert a.in_grace.tolist() == [0, 0, 0, 2, 0, 0] and a.waiting == 0
    # the bound (aged work running plus admitted): 2 GPUs in grace + a2 (4) + b1 (8) = 14 <= 15 < 18
    b = admit(ag, j, 6, eligible, 600.0, room=15)
    assert b.gpus.tolist() == [4, 8, 0, 0, 0, 0] and b.waiting == 1
    # admitted in order of wait: c1 (shorter wait) does not overtake b1, which does not fit yet
    c = admit(ag, j, 6, eligible, 600.0, room=8)
    assert c.gpus.tolist() == [4, 0, 0, 0, 0, 0] and c.waiting == 2
    # nothing aged running: the longest waiter goes even when its job alone is over the bound
    none_running = Aging(wait, np.zeros(7, dtype=bool), {}, {}, {})
    d = admit(none_running, j, 6, eligible, 600.0, room=0)
    assert d.gpus.tolist() == [0, 0, 0, 2, 0, 0]                            # d2 waited longest (5000 s)
    # the high tier never ages
    e = admit(ag, j, 6, np.array([False, True, True, True, True, True]), 600.0, room=100)
    assert e.gpus.tolist() == [0, 8, 4, 0, 0, 0]


def test_events_table_has_retention(tmp_path):
    from daemon.policy.types import Plan
    from daemon.state.store import StateStore

    clock = [1_000_000.0]
    st = StateStore(tmp_path / "s.sqlite", events_keep_s=3600, events_max_rows=1000, clock=lambda: clock[0])
    p = Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=0.5, high_pool=1, reservations={}, quotas={}, limits={},
             preemptions=(), notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())
    st.log_event("2020-01-01T00:00:00+00:00", "old", {})          # `at` may be any clock (simulated time)
    clock[0] += 3000
    st.log_events("2020-01-01T00:00:00+00:00", [("newer", {})] * 1500)
    st.save_cycle(p, "x")
    kinds = [e["kind"] for e in st.events()]
    assert len(kinds) == 1000 and "old" not in kinds                # the row cap
    clock[0] += 3601
    st.log_event("2026-01-01T00:00:00+00:00", "latest", {})
    st.save_cycle(p, "x")
    assert [e["kind"] for e in st.events()] == ["latest"]            # older than events_keep_s: gone
    st.close()


def test_the_protected_notice_says_the_grace_period_is_that_jobs_alone():
    # `make run`: tenant-0007 read "once started not preempted for 1800s", then its other jobs were preempted the
    # minutes after its aged job started; the notice now says whose protection it is
    cfg = Config(policy={"max_wait_steps": 10})
    st = state([("lo-1", 1, 8, "low", False, 0.0, 900.0)], [0, 0])
    (n,) = [x for x in plan(None, st, PolicyMemory(), cfg).notifications if x.kind == "protected"]
    assert n.tenant == "lo" and n.message.endswith("(that job only: other jobs of the tenant stay preemptible)")
