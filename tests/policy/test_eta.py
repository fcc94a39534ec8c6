"""The start-time estimate (daemon/policy/eta.py) on a queue small enough to work out by hand.

Two 4-GPU nodes. n0 is unheld: job A (tenant a, 2 GPUs, time limit 600 s, 100 s run: ends at 500) and 2 GPUs free.
n1 is held for the high tenant h: job B (h, 2 GPUs, limit 1000 s, 200 s run: ends at 800) and 2 held GPUs free.
Pending, in the scheduler's order: P1 (tenant n, normal, 2 GPUs, waited 300 s), P2 (n, normal, 3 GPUs, waited
200 s), P3 (l, low, 1 GPU, waited 500 s: low comes after normal even though it waited longest).
Tenant n's finished runs: 200, 300, 400, 500, 600 s (median 400, 90th percentile 560); a and l have no history.

By hand, p50: P1 fits the 2 unheld GPUs now (0) and runs 400 s; at 400 its 2 GPUs come back: P2 (3) does not
fit, P3 (1) does (400); at 500 A's 2 come back: 1 + 2 = 3, P2 starts (500). B's GPUs (800) go back to h's hold
and never serve these jobs. The hold matters: without it P3 would fit the 2 held GPUs at 0.
p90: P1 at 0 runs 560 s; at 500 A's 2 GPUs come back: P3 starts (500), 1 left; at 560 P1's 2: P2 starts (560).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from daemon.policy import eta
from daemon.policy.eta import (
    Eta,
    FreedRate,
    RunLengths,
    estimate,
    forecast_growth,
    free_to_pending,
    moved,
    naive_waits,
    scheduler_order,
)
from daemon.policy.eta_calibration import Calibration, calibrate
from daemon.policy.state import UNHELD, ClusterState, Jobs, Nodes

TENANTS = ("a", "h", "n", "l")
TIERS = ("normal", "high", "normal", "low")


def _state(hold: bool = True) -> ClusterState:
    jobs = Jobs(ids=np.array(["A", "B", "P1", "P2", "P3"], dtype=object),
                tenant=np.array([0, 1, 2, 2, 3]), gpus=np.array([2, 2, 2, 3, 1]),
                priority=np.array([1, 2, 1, 1, 0], dtype=np.int8),
                running=np.array([True, True, False, False, False]),
                runtime_s=np.array([100.0, 200.0, 0, 0, 0]), wait_s=np.array([0, 0, 300.0, 200.0, 500.0]),
                node=np.array(["n0", "n1", "", "", ""], dtype=object))
    nodes = Nodes(names=np.array(["n0", "n1"], dtype=object), gpus=np.array([4, 4]), free=np.array([2, 2]),
                  draining=np.array([0, 0]), held_by=np.array([UNHELD, 1 if hold else UNHELD]))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=8,
                        used=np.array([2.0, 2, 0, 0]), pending=np.array([0.0, 0, 5, 1]), jobs=jobs, nodes=nodes)


def _history() -> RunLengths:
    rl = RunLengths(min_samples=5)
    for r in (200, 300, 400, 500, 600):
        rl.observe("n", r)
    return rl


LIMITS = {"A": 600.0, "B": 1000.0}


def test_the_eta_on_a_hand_computed_queue():
    got = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS, resolution_s=0.0)}
    assert [got[j].position for j in ("P1", "P2", "P3")] == [0, 1, 2]
    assert {j: got[j].p50_s for j in got} == {"P1": 0.0, "P2": 500.0, "P3": 400.0}
    assert {j: got[j].p90_s for j in got} == {"P1": 0.0, "P2": 560.0, "P3": 500.0}
    assert "time limit" in got["P2"].basis and "run-length history" in got["P2"].basis


def test_releases_within_a_minute_are_taken_together_at_the_last_of_them_on_a_big_cluster():
    """The p90's releases at 500 and 560 s are one step at the default resolution (60 s) once the cluster runs
    EXACT_BELOW jobs or more (here forced): P3, which fits after the first, is told 560, a minute late at most and
    never early; 30 s keeps them apart. With a few running jobs (the default here) every release is its own step."""
    got = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS, exact_below=0)}
    assert {j: got[j].p90_s for j in got} == {"P1": 0.0, "P2": 560.0, "P3": 560.0}
    assert {j: got[j].p50_s for j in got} == {"P1": 0.0, "P2": 500.0, "P3": 400.0}
    apart = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS, resolution_s=30.0,
                                           exact_below=0)}
    assert apart["P3"].p90_s == 500.0
    small = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS)}
    assert small["P3"].p90_s == 500.0


def test_gpus_held_for_another_tenant_are_not_free_for_the_job():
    free_for_all = {e.job_id: e.p50_s for e in estimate(_state(hold=False), _history(), time_limit_s=LIMITS)}
    assert free_for_all["P3"] == 0.0     # the 2 GPUs h holds would take it at once


def test_higher_tiers_forecast_growth_eats_free_gpus_first():
    """h's forecast adds 2 GPUs (p50) and 4 (p90): the 2 unheld GPUs free now go to it, so P1 waits for A (500)."""
    got = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS, growth={"h": (2.0, 4.0)})}
    assert got["P1"].p50_s == 500.0
    # p90: growth of 4 eats the 2 free now and A's 2 at 500; nothing else frees unheld GPUs (B's go to h's hold)
    assert got["P1"].p90_s is None and "p90 unknown" in got["P1"].basis


def test_unknown_when_there_is_no_basis():
    """No time limits and no history: no running job has an end, the queue's head does not fit now: unknown."""
    got = {e.job_id: e for e in estimate(_state(), RunLengths())}
    assert got["P1"].p50_s == 0.0                      # it fits the free GPUs now: that needs no basis
    assert got["P2"].p50_s is None and got["P2"].p90_s is None
    assert "neither a time limit nor a run-length history" in got["P2"].basis


def test_run_lengths_condition_on_the_time_already_run():
    rl = _history()
    assert rl.remaining("n", 0, 0.5) == 400.0
    assert rl.remaining("n", 450, 0.5) == 100.0        # runs >= 450: 500, 600; median 550, less 450
    assert rl.remaining("n", 700, 0.5) is None         # past every run seen: no basis
    assert rl.remaining("a", 0, 0.5) is None           # no history


def test_scheduler_order_ages_low_work():
    prio = np.array([0, 1, 2, 0])
    wait = np.array([900.0, 10.0, 5.0, 100.0])
    assert list(scheduler_order(prio, wait)) == [2, 1, 0, 3]
    assert list(scheduler_order(prio, wait, max_wait_s=600)) == [2, 0, 1, 3]


def test_forecast_growth_counts_above_demand_and_hold():
    s = _state()
    g = forecast_growth({"h": (5.0, 7.0), "n": (3.0, 9.0)}, s, {"h": 4})
    assert g == {"h": (1.0, 3.0), "n": (0.0, 4.0)}


def test_the_p90_is_scaled_by_how_late_past_starts_came():
    """Normal jobs started after twice the wait their model p90 said (60 of them): a normal job's p90 doubles. The low
    tier has 1 of the 50 it needs of its own: it reads every tier's (61, the 90th percentile also 2). P1 fits now:
    one cycle (60 s), doubled. The p50s are the model's."""
    cal = Calibration(floor_s=60.0)
    for i in range(60):
        cal.observe("normal", made_at=0.0, started_at=1000.0, p90_model_s=500.0)
    cal.observe("low", made_at=0.0, started_at=9000.0, p90_model_s=500.0)
    model = estimate(_state(), _history(), time_limit_s=LIMITS, resolution_s=0.0)
    got = {e.job_id: e for e in calibrate(model, dict(zip(TENANTS, TIERS)), cal.factors(9000.0))}
    assert {j: got[j].p90_s for j in got} == {"P1": 120.0, "P2": 1120.0, "P3": 1000.0}
    assert {j: got[j].p90_model_s for j in got} == {"P1": 0.0, "P2": 560.0, "P3": 500.0}
    assert {j: got[j].p50_s for j in got} == {"P1": 0.0, "P2": 500.0, "P3": 400.0}     # the p50s are unchanged
    assert "scaled x2.00" in got["P2"].basis
    fresh = calibrate(estimate(_state(), _history(), time_limit_s=LIMITS, resolution_s=0.0), {},
                      Calibration().factors(9000.0))
    assert {e.job_id: e.p90_s for e in fresh} == {"P1": 0.0, "P2": 560.0, "P3": 500.0}   # no history: the model's


def test_a_windows_hold_to_come_is_not_free_for_others():
    """Tenant a's window holds 1 GPU from 300 s on: at 400, of P1's 2 GPUs one goes to the window and P3 takes the
    other; at 500 A's 2 do not make the 3 P2 needs, and nothing else is known to free up: P2 is unknown (500
    without the window)."""
    got = {e.job_id: e for e in estimate(_state(), _history(), time_limit_s=LIMITS, windows=[(300.0, "a", 1.0)])}
    assert {j: got[j].p50_s for j in got} == {"P1": 0.0, "P2": None, "P3": 400.0}
    assert {e.job_id: e.p50_s for e in estimate(_state(), _history(), time_limit_s=LIMITS,
                                                windows=[(900.0, "a", 1.0)])}["P2"] == 500.0   # after P2's start


def test_remaining_for_many_runs_is_numpys_quantile_of_the_runs_that_lasted_as_long():
    """The vectorised remaining run (every running job of a tenant at once) against np.quantile on each job's own
    survivors, written the slow way: equal, and NaN past every run seen."""
    rng = np.random.default_rng(3)
    rl = RunLengths()
    runs = rng.lognormal(7.0, 1.0, size=60)
    for r in runs:
        rl.observe("t", float(r))
    elapsed = np.r_[rng.uniform(0, runs.max(), size=200), runs[:5], runs.max() + 1.0]
    for q in (0.5, 0.9):
        got = rl.remaining_many("t", elapsed, q)
        for e, g in zip(elapsed, got):
            left = runs[runs >= e]
            if left.size == 0:
                assert np.isnan(g)
            else:
                assert g == pytest.approx(max(float(np.quantile(left, q)) - e, 0.0), abs=1e-6)
        assert rl.usual("t", q) == pytest.approx(rl.remaining("t", 0.0, q), abs=1e-9)
    assert np.isnan(RunLengths().remaining_many("t", np.array([1.0]), 0.5)).all()
    assert RunLengths().usual("t", 0.5) is None


def test_the_naive_estimate_by_hand():
    """Jobs of 2, 4 and 1 GPUs in the scheduler's order, 3 GPUs free, 1 GPU freed every 60 s: the first fits
    now (0 s), the second needs 3 more (180 s), the third 4 more (240 s); nothing freed lately: unknown."""
    etas = [Eta("a", "n", 2, 0, 0.0, 0.0, ""), Eta("b", "n", 4, 1, 0.0, 0.0, ""), Eta("c", "n", 1, 2, 0.0, 0.0, "")]
    assert naive_waits(etas, 3.0, 1 / 60) == pytest.approx({"a": 0.0, "b": 180.0, "c": 240.0})
    assert naive_waits(etas, 3.0, 0.0) == {"a": 0.0, "b": None, "c": None}


def test_a_job_larger_than_the_cluster_is_ahead_of_nobody_in_the_naive_estimate():
    """A tenant's Workload of a million 8-GPU pods, first in the order (it has waited longest, as it never starts):
    the jobs after it needed 8 million GPUs more in the naive estimate, a p50 of centuries wherever the calibration
    blends it in. On a 64-GPU cluster it is unknown and the others' waits are as without it."""
    etas = [Eta("huge", "x", 8_000_000, 0, None, None, ""), Eta("a", "n", 2, 1, 0.0, 0.0, ""),
            Eta("b", "n", 4, 2, 0.0, 0.0, "")]
    assert naive_waits(etas, 3.0, 1 / 60, capacity=64) == pytest.approx({"huge": None, "a": 0.0, "b": 180.0})


def test_the_rate_gpus_free_up_is_over_the_last_hour_or_since_the_first_observation():
    """The naive estimate's rate (one helper for the daemon and the replay): observed at 0 (nothing), 60 (2 GPUs)
    and 120 s (4): 6 GPUs in 120 s before an hour has passed. At 3660 the 2 of 60 s are an hour old and out (an hour
    of 60 s cycles is 60 of them, not 61): 4 in 3600 s. Nothing observed yet, or no time passed: 0."""
    r = FreedRate()
    assert r.rate(0.0) == 0.0
    r.observe(0.0, 0.0)
    assert r.rate(0.0) == 0.0
    r.observe(60.0, 2.0)
    r.observe(120.0, 4.0)
    assert r.rate(120.0) == pytest.approx(6 / 120)
    assert r.rate(3659.0) == pytest.approx(6 / 3600)
    assert r.rate(3660.0) == pytest.approx(4 / 3600)
    assert r.rate(3720.0) == 0.0
    with pytest.raises(ValueError, match="window_s"):
        FreedRate(0.0)


def test_a_start_after_draining_gpus_come_back_says_so():
    """A job that starts once GPUs draining now come back (preempted jobs' GPUs, free after the drain) has that as
    its basis, not an empty one: on `make run` the API's second job read `"basis": ""` at 120 s. Here the two free
    unheld GPUs of n0 are draining, with no time limit or history: P1 starts at the drain time, and says why."""
    st = _state()
    st = ClusterState(at=st.at, tenants=st.tenants, tiers=st.tiers, capacity=st.capacity, used=st.used,
                      pending=st.pending, jobs=st.jobs,
                      nodes=Nodes(names=st.nodes.names, gpus=st.nodes.gpus, free=np.array([0, 2]),
                                  draining=np.array([2, 0]), held_by=st.nodes.held_by))
    got = {e.job_id: e for e in estimate(st, RunLengths(), drain_s=120.0)}
    assert got["P1"].p50_s == 120.0 and got["P1"].basis == "GPUs draining now"
    bare = ClusterState(at=st.at, tenants=st.tenants, tiers=st.tiers, capacity=8, used=st.used, pending=st.pending,
                        jobs=st.jobs, draining=2.0)
    assert {e.job_id: e for e in estimate(bare, RunLengths(), drain_s=120.0)}["P3"].basis == "GPUs draining now"


def _n_holds_n1() -> ClusterState:
    """_state with n1 (B's node, 2 GPUs free) held for tenant n instead of h."""
    st = _state()
    return dataclasses.replace(st, nodes=dataclasses.replace(st.nodes, held_by=np.array([UNHELD, 2])))


def test_a_job_takes_its_tenants_own_hold_before_gpus_free_to_all():
    """P1 (n) fits both n's own hold on n1 and n0's 2 unheld GPUs: it takes its own, so P3 (l) starts now on n0."""
    got = {e.job_id: e.p50_s for e in estimate(_n_holds_n1(), _history(), time_limit_s=LIMITS)}
    assert got["P1"] == 0.0 and got["P3"] == 0.0, got


def test_the_highest_tiers_growth_eats_first_and_blocks_only_the_tiers_below_the_one_still_unserved():
    """h (high) and a (normal) each forecast 2 GPUs more; n0's 2 unheld GPUs go to h's growth first, a's stays
    unserved: the normal tier's P1 still starts on n's own hold now, the low tier's P3 waits behind a's growth."""
    got = {e.job_id: e.p50_s for e in estimate(_n_holds_n1(), _history(), time_limit_s=LIMITS,
                                               growth={"h": (2.0, 2.0), "a": (2.0, 2.0)})}
    assert got["P1"] == 0.0 and got["P3"] != 0.0, got


def test_a_running_job_ends_at_the_sooner_of_its_time_limit_and_its_tenants_history():
    """A (tenant a) has a limit of 5,000 s, 100 s run, and a's history (n's runs) says 140, 220, 300, 380 and 460 s
    more at the p50's levels (P50_LEVELS): its GPUs come back in fifths then, so P3 (1 GPU) starts at 300 and P2
    (3 GPUs) at 460 with the rest and P1's (back at n's median run, 400), not at A's limit."""
    rl = _history()
    for r in (200, 300, 400, 500, 600):
        rl.observe("a", r)
    got = {e.job_id: e.p50_s for e in estimate(_state(), rl, time_limit_s={"A": 5000.0, "B": 1000.0})}
    assert got == {"P1": 0.0, "P2": 460.0, "P3": 300.0}, got


def test_the_p90_start_is_never_before_the_p50():
    """Without a node view, 4 GPUs: R1 and R2 (tenants r and q, each with runs of 50-96 s: its GPUs back in fifths
    at 54, 62, 70, 91 and 96 s at the p50's levels, all at 96 at the 90th percentile) run 2 each; Y (4 GPUs) is
    first in the queue, Z (2 GPUs, 1,000 s runs) second. At the p50 three fifths of each are back at 70 and Z takes
    those 2 GPUs (Y then waits until Z's end, 1,070); at the 90th percentile both end at 96 and Y starts then. A p90
    start before the p50's is no p90: it is the p50's."""
    jobs = Jobs(ids=np.array(["R1", "R2", "Y", "Z"], dtype=object), tenant=np.array([0, 1, 2, 3]),
                gpus=np.array([2, 2, 4, 2]), priority=np.array([1, 1, 1, 1], dtype=np.int8),
                running=np.array([True, True, False, False]), runtime_s=np.zeros(4),
                wait_s=np.array([0, 0, 500.0, 100.0]), node=np.array(["", "", "", ""], dtype=object))
    st = ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=("r", "q", "y", "z"), tiers=("normal",) * 4,
                      capacity=4, used=np.array([2.0, 2, 0, 0]), pending=np.array([0.0, 0, 4, 2]), jobs=jobs)
    rl = RunLengths(min_samples=5)
    for r in (50, 60, 70, 96, 96):
        rl.observe("r", r)
        rl.observe("q", r)
    for _ in range(5):
        rl.observe("z", 1000.0)
    got = {e.job_id: e for e in estimate(st, rl)}
    assert (got["Y"].p50_s, got["Y"].p90_s) == (1070.0, 1070.0), got["Y"]


def test_without_a_node_view_only_a_holds_unused_gpus_are_kept_from_others():
    """8 GPUs, h holds 4 and runs 2, n runs 2: 4 free, of which h's hold keeps 2. n's 2-GPU job starts now, its
    3-GPU job does not (the hold's 2 are not its): not with n's running job's 2 at its limit (300 s) either, only
    once h's job's 2 come back too (900 s; without a node view every release is unheld)."""
    jobs = Jobs(ids=np.array(["H", "N", "P", "Q"], dtype=object), tenant=np.array([0, 1, 1, 1]),
                gpus=np.array([2, 2, 2, 3]), priority=np.array([2, 1, 1, 1], dtype=np.int8),
                running=np.array([True, True, False, False]), runtime_s=np.zeros(4),
                wait_s=np.array([0, 0, 200.0, 100.0]), node=np.array(["", "", "", ""], dtype=object))
    st = ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=("h", "n"), tiers=("high", "normal"),
                      capacity=8, used=np.array([2.0, 2.0]), pending=np.array([0.0, 5.0]), jobs=jobs)
    got = {e.job_id: e.p50_s for e in estimate(st, RunLengths(), reservations={"h": 4},
                                               time_limit_s={"N": 300.0, "H": 900.0})}
    assert got == {"P": 0.0, "Q": 900.0}, got


def test_a_windows_hold_begun_already_is_the_snapshots_not_taken_again():
    """A window's hold that begins now or began (0 or fewer seconds from now) is in the snapshot's holds already:
    the estimate is the same as without it (taking it again would keep P1 off n0's 2 free GPUs)."""
    base = [(e.p50_s, e.p90_s) for e in estimate(_state(), _history(), time_limit_s=LIMITS)]
    for t in (0.0, -60.0):
        got = [(e.p50_s, e.p90_s) for e in estimate(_state(), _history(), time_limit_s=LIMITS,
                                                    windows=[(t, "a", 2.0)])]
        assert got == base, (t, got)


def test_releases_are_batched_from_exact_below_running_jobs_on():
    """_state runs 2 jobs: at exact_below = 2 the releases a minute apart are one (P3's p90 560, as in
    test_releases_within_a_minute_are_taken_together_at_the_last_of_them_on_a_big_cluster), at 3 they are not."""
    at = {n: {e.job_id: e.p90_s for e in estimate(_state(), _history(), time_limit_s=LIMITS, exact_below=n)}["P3"]
          for n in (2, 3)}
    assert at == {2: 560.0, 3: 500.0}


def test_low_work_that_waited_max_wait_exactly_is_aged_as_in_the_simulator():
    assert list(scheduler_order(np.array([0, 1]), np.array([600.0, 10.0]), max_wait_s=600)) == [0, 1]


def test_a_job_that_ended_at_once_is_a_run_of_zero_seconds():
    rl = RunLengths(min_samples=3)
    for r in (0.0, 0.0, 0.0, -1.0, float("nan")):
        rl.observe("t", r)
    assert rl.samples("t") == 3 and rl.usual("t", 0.5) == 0.0


def test_gpus_free_to_pending_work_are_the_unheld_nodes_or_the_capacity_less_unused_holds():
    st = _state()
    st = dataclasses.replace(st, nodes=dataclasses.replace(st.nodes, free=np.array([2, 1])))
    assert free_to_pending(st) == 2.0                  # n0's 2; n1's 1 is h's
    bare = ClusterState(at=st.at, tenants=TENANTS, tiers=TIERS, capacity=8, used=np.array([2.0, 2, 0, 0]),
                        pending=np.zeros(4), draining=1)
    assert free_to_pending(bare, {"h": 3}) == 2.0      # 8 - 4 used - 1 draining - h's 1 unused
    assert free_to_pending(bare, {"h": 2}) == 3.0


def test_an_estimate_is_rewritten_when_a_side_moved_five_minutes_or_became_known_or_unknown():
    assert moved(None, (0.0, 60.0))
    assert not moved((100.0, 200.0), (399.0, 200.0)) and moved((100.0, 200.0), (400.0, 200.0))
    assert moved((100.0, None), (100.0, 200.0)) and moved((100.0, 200.0), (100.0, None))
    assert not moved((None, None), (None, None))


def _multinode(free: tuple[int, int, int], asked: tuple[int, ...] = (2, 2)) -> ClusterState:
    """Three 8-GPU nodes, none held. Running (time limits, no history): R1 fills n1 to its `free` (ends at 300),
    R2 fills n2 (ends at 600); n0 has `free[0]` free. Pending in order: M then Q, tenant n, 8 GPUs each, asking
    `asked` nodes (-N 2 --gres=gpu:4 for 2)."""
    used = [8 - f for f in free]
    jobs = Jobs(ids=np.array(["R0", "R1", "R2", "M", "Q"], dtype=object), tenant=np.array([0, 0, 0, 2, 2]),
                gpus=np.array([max(used[0], 0), used[1], used[2], 8, 8]), priority=np.array([1, 1, 1, 1, 1],
                                                                                          dtype=np.int8),
                running=np.array([True, True, True, False, False]), runtime_s=np.array([0.0, 100.0, 100.0, 0, 0]),
                wait_s=np.array([0, 0, 0, 300.0, 200.0]), node=np.array(["n0", "n1", "n2", "", ""], dtype=object),
                nodes_asked=np.array([1, 1, 1, *asked]))
    nodes = Nodes(names=np.array(["n0", "n1", "n2"], dtype=object), gpus=np.array([8, 8, 8]),
                  free=np.array(free), draining=np.array([0, 0, 0]), held_by=np.array([UNHELD] * 3))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=24,
                        used=np.array([float(sum(used)), 0, 0, 0]), pending=np.array([0.0, 0, 16, 0]), jobs=jobs,
                        nodes=nodes)


MULTI_LIMITS = {"R0": 900.0, "R1": 400.0, "R2": 700.0}


def test_a_job_on_several_nodes_starts_only_where_that_many_nodes_have_its_gpus_per_node():
    """-N 2 --gres=gpu:4 jobs M and Q (8 GPUs each, 4 per node) on 8-GPU nodes, by hand:
    8 free on n0 alone (n1, n2 full): M does not start at 0 (counted as 8 free GPUs, it did); at 300 R1 frees n1,
    and M takes 4 on n0 and 4 on n1, leaving 4 + 4: Q starts then too (p50 = p90: time limits only).
    4 + 4 free on n0 and n1: M starts at once on them; Q waits for two nodes with 4 free: n1's 4 at 300 is one,
    n2's 8 at 600 the second: Q starts at 600.
    The same queue of one-node 8-GPU jobs keeps the pools' rule (one-node jobs exactly as before): 8 free now, M
    at 0."""
    got = {e.job_id: e for e in estimate(_multinode((8, 0, 0)), RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert {j: (got[j].p50_s, got[j].p90_s) for j in ("M", "Q")} == {"M": (300.0, 300.0), "Q": (300.0, 300.0)}
    got = {e.job_id: e for e in estimate(_multinode((4, 4, 0)), RunLengths(), time_limit_s=MULTI_LIMITS)}
    assert {j: (got[j].p50_s, got[j].p90_s) for j in ("M", "Q")} == {"M": (0.0, 0.0), "Q": (600.0, 600.0)}
    one = {e.job_id: e for e in estimate(_multinode((8, 0, 0), asked=(1, 1)), RunLengths(),
                                         time_limit_s=MULTI_LIMITS)}
    assert {j: one[j].p50_s for j in ("M", "Q")} == {"M": 0.0, "Q": 300.0}


def _running_on_two_nodes(asked: int) -> ClusterState:
    """Two 8-GPU nodes, both full with R (tenant a, -N 2 --gres=gpu:8: 16 GPUs, squeue's node 'gn[1-2]', time
    limit 100 s, just started); pending P of tenant n, 8 GPUs on ``asked`` nodes."""
    on = np.empty(2, dtype=object)
    on[0], on[1] = ("gn1", "gn2"), ()
    jobs = Jobs(ids=np.array(["R", "P"], dtype=object), tenant=np.array([0, 2]), gpus=np.array([16, 8]),
                priority=np.array([1, 1], dtype=np.int8), running=np.array([True, False]),
                runtime_s=np.array([0.0, 0.0]), wait_s=np.array([0.0, 60.0]),
                node=np.array(["gn[1-2]", ""], dtype=object), nodes_asked=np.array([2, asked]),
                on_nodes=on)
    nodes = Nodes(names=np.array(["gn1", "gn2"], dtype=object), gpus=np.array([8, 8]), free=np.array([0, 0]),
                  draining=np.array([0, 0]), held_by=np.array([UNHELD, UNHELD]))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=16,
                        used=np.array([16.0, 0, 0, 0]), pending=np.array([0.0, 0, 8, 0]), jobs=jobs, nodes=nodes)


def test_a_running_job_on_several_nodes_gives_back_its_gpus_on_each_of_its_nodes_at_its_end():
    """By hand: R (2 x 8 on gn1, gn2) ends at its 100 s limit, giving back 8 on gn1 and 8 on gn2; P (8 GPUs on one
    node, or -N 2 x 4) starts then, at 100 (p50 = p90: the limit alone). The old code found R on no node (its
    node is the hostlist 'gn[1-2]'): it gave back nothing and P was 'unknown: not enough GPUs'."""
    for asked in (1, 2):
        got = {e.job_id: e for e in estimate(_running_on_two_nodes(asked), RunLengths(), time_limit_s={"R": 100.0})}
        assert (got["P"].p50_s, got["P"].p90_s) == (100.0, 100.0), asked


def test_jobs_parts_splits_a_job_on_several_nodes_over_them():
    st = _running_on_two_nodes(1)
    pos, at, g = st.jobs.parts(st.nodes, np.array([0]))
    assert (pos.tolist(), at.tolist(), g.tolist()) == ([0, 0], [0, 1], [8, 8])
    odd = dataclasses.replace(st.jobs, gpus=np.array([5, 8]), node=np.array(["gn1", ""], dtype=object),
                              on_nodes=None)   # no column: the job on its node, as before
    pos, at, g = odd.parts(st.nodes, np.array([0, 1]))
    assert (pos.tolist(), at.tolist(), g.tolist()) == ([0, 1], [0, -1], [5, 8])


def _gpus_over_four_nodes(spread: bool) -> ClusterState:
    """Four 4-GPU nodes, none held: R0 uses 1 GPU of n0 (time limit: ends at 900), R1-R3 3 of n1-n3 (end at 300, 400,
    500). Pending in order: P asks 6 GPUs on 4 nodes, then Q 5 on 4 (tenant n), Slurm's --gpus=6 -N 4 and --gpus=5
    -N 4 where `spread`, else as the per-node column had them (each node its share, rounded up: 2 each)."""
    jobs = Jobs(ids=np.array(["R0", "R1", "R2", "R3", "P", "Q"], dtype=object), tenant=np.array([0, 0, 0, 0, 2, 2]),
                gpus=np.array([1, 3, 3, 3, 6, 5]), priority=np.ones(6, dtype=np.int8),
                running=np.array([True] * 4 + [False] * 2), runtime_s=np.zeros(6),
                wait_s=np.array([0, 0, 0, 0, 300.0, 200.0]),
                node=np.array(["n0", "n1", "n2", "n3", "", ""], dtype=object), nodes_asked=np.array([1, 1, 1, 1, 4, 4]),
                spread=np.array([False] * 4 + [True] * 2) if spread else None)
    nodes = Nodes(names=np.array(["n0", "n1", "n2", "n3"], dtype=object), gpus=np.full(4, 4),
                  free=np.array([3, 1, 1, 1]), draining=np.zeros(4, dtype=int), held_by=np.full(4, UNHELD))
    return ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=16,
                        used=np.array([10.0, 0, 0, 0]), pending=np.array([0.0, 0, 11, 0]), jobs=jobs, nodes=nodes)


def test_a_slurm_gpus_job_on_several_nodes_starts_where_each_node_has_one_and_together_they_have_its_gpus():
    """Slurm's --gpus=6 -N 4 is not 2 GPUs on each of 4 nodes: cons_tres gives each node one at least and the first
    as many as are free (on slurmctld 22.05, 3 + 1 + 1 + 1 free starts it as gpu:3 and gpu:1 x 3:
    tests/integration/test_slurm_multinode.py). By hand, free 3, 1, 1, 1: P starts now, taking every free GPU; Q
    (5 on 4 nodes) waits for a fourth node with one free: n1, n2, n3 free 3 each by 500, n0 its 1 at 900, when Q
    starts. Read as 2 per node (the old rule), P waited for R3's end at 500 (a fourth node with 2 free) and Q for
    900 too."""
    limits = {"R0": 900.0, "R1": 300.0, "R2": 400.0, "R3": 500.0}
    got = {e.job_id: e for e in estimate(_gpus_over_four_nodes(True), RunLengths(), time_limit_s=limits)}
    assert (got["P"].p50_s, got["P"].basis) == (0.0, "fits the GPUs free now")
    assert got["Q"].p50_s == 900.0 and got["Q"].p90_s == 900.0
    even = {e.job_id: e for e in estimate(_gpus_over_four_nodes(False), RunLengths(), time_limit_s=limits)}
    assert (even["P"].p50_s, even["Q"].p50_s) == (500.0, 900.0)


def test_a_slurm_gpus_job_takes_one_gpu_on_each_node_and_the_rest_where_most_are_free():
    """_on_nodes for --gpus=6 -N 4 (``spread``): the 4 nodes with the most free, as many as free on each in turn,
    one left for each node after (3 + 1 + 1 + 1 of 3, 1, 1, 1 free; 3 + 1 + 1 + 1 of 4 free each, as Slurm starts it
    on empty nodes); 2 + 1 + 1 (4 GPUs) of 2, 1, 1 and a node with none is no place for -N 4; 9 on 2 nodes of 4 free
    each is none."""
    def on(free, g, k):
        f = np.array(free, dtype=float)
        return eta._on_nodes(f, np.ones(f.shape[0], bool), np.full(f.shape[0], UNHELD), [2, UNHELD], g, k,
                             spread=True)
    assert on([3, 1, 1, 1], 6, 4) == ((0, 3.0), (1, 1.0), (2, 1.0), (3, 1.0))
    assert on([4, 4, 4, 4], 6, 4) == ((0, 3.0), (1, 1.0), (2, 1.0), (3, 1.0))
    assert on([1, 2, 1, 0], 4, 4) == () and on([1, 2, 1, 0], 4, 3) == ((1, 2.0), (0, 1.0), (2, 1.0))
    assert on([4, 4], 9, 2) == ()


def test_the_p50_waits_for_the_first_of_many_ends_not_for_every_jobs_median_end():
    """Without a node view, 4 GPUs run four 1-GPU jobs of tenant a, just started, whose runs lasted 100, 200, 300,
    400 and 500 s; P (1 GPU) waits. Each job's median end is 300 s, and the p50 said P starts then, as if all four
    ended at their median together; but P needs only the first of four ends (for runs spread evenly over 100-500 s,
    that comes at 164 s at the median). Now each gives back its GPU in fifths at its run's 10th-90th percentiles
    (140, 220, 300, 380, 460 s): 1.6 GPUs are back by 220, when P starts. The p90 stays every job's 90th percentile
    end (460)."""
    jobs = Jobs(ids=np.array(["R0", "R1", "R2", "R3", "P"], dtype=object), tenant=np.array([0, 0, 0, 0, 2]),
                gpus=np.ones(5, dtype=np.int64), priority=np.ones(5, dtype=np.int8),
                running=np.array([True] * 4 + [False]), runtime_s=np.zeros(5), wait_s=np.array([0, 0, 0, 0, 60.0]),
                node=np.array([""] * 5, dtype=object))
    st = ClusterState(at=pd.Timestamp("2026-01-05T00:00:00Z"), tenants=TENANTS, tiers=TIERS, capacity=4,
                      used=np.array([4.0, 0, 0, 0]), pending=np.array([0.0, 0, 1, 0]), jobs=jobs)
    rl = RunLengths(min_samples=5)
    for r in (100, 200, 300, 400, 500):
        rl.observe("a", r)
    (p,) = estimate(st, rl)
    assert (p.p50_s, p.p90_s) == (220.0, 460.0)
