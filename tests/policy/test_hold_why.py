"""A hold that changes says why (Plan.hold_why, the `held` plan_change event): first day, `make run` showed a tenant
"held capacity for tenant-0007: 12 -> 0 GPUs" with no reason (its aged job had just started, so aging stopped
protecting it). One constructed plan per cause; each names only the tenant's own work, once, when the hold changes."""

import numpy as np
import pandas as pd

from daemon.config import Config, parse_config
from daemon.policy import PolicyMemory, plan
from daemon.policy.events import plan_events
from daemon.policy.hold_reason import HoldBasis, cause, hold_why
from daemon.policy.state import ClusterState, Jobs
from daemon.policy.types import OperatorInputs, Plan
from forecaster.types import Forecast
from tests.policy.test_aging import jobs

T0 = pd.Timestamp("2026-01-06T12:00:00Z")
TENANTS = ("hi", "lo", "fl")
CFG = Config(policy={"max_wait_steps": 10, "headroom": 0, "reserve_share": 0.1, "lead_time_steps": 12})


def _state(at=T0, lo_running=False, capacity=128, hi_demand=8.0) -> ClusterState:
    # hi (high) runs 8; lo (low) has one 8-GPU job queued 2 hours (aged) or just started; fl (normal) runs 4
    rows = [("h1", 0, 8, "high", True, 600.0, 0.0),
            ("l1", 1, 8, "low", lo_running, 60.0 if lo_running else 0.0, 0.0 if lo_running else 7200.0),
            ("f1", 2, 4, "normal", True, 600.0, 0.0)]
    used = np.array([8.0, 8.0 if lo_running else 0.0, 4.0])
    queued = np.array([hi_demand - 8.0, 0.0 if lo_running else 8.0, 0.0])
    return ClusterState(at, TENANTS, ("high", "low", "normal"), capacity, used, queued, jobs(rows))


def _fc(hi_peak: float, at=T0) -> Forecast:
    v = np.zeros((3, 30, 3))
    v[0] = hi_peak
    return Forecast(TENANTS, (0.5, 0.9, 0.99), v, at, 60, "test")


def _held(prev: Plan | None, p: Plan) -> dict[str, dict]:
    return {e["tenant"]: e for k, e in plan_events(prev, p) if k == "plan_change" and e["what"] == "held"}


def test_an_aged_job_that_started_says_so_when_its_hold_goes():
    """The first-day case: the aged job started, aging no longer protects it, the hold goes to 0."""
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG)
    assert p1.reservations["lo"] == 8
    assert p1.hold_why["lo"] == "aging protects its job that waited past max_wait"
    p2 = plan(_fc(16), _state(lo_running=True), p1.memory, CFG, last=p1)
    assert "lo" not in p2.reservations
    assert p2.hold_why["lo"] == "its aged job started (aging no longer protects it)"
    ev = _held(p1, p2)["lo"]
    assert ev["message"] == "held capacity for lo: 8 -> 0 GPUs: its aged job started (aging no longer protects it)"
    assert ev["why"] == p2.hold_why["lo"]
    assert Plan.from_dict(p2.to_dict()).hold_why == p2.hold_why   # kept across a restart (the state store)


def test_an_aged_job_that_left_the_queue_is_not_said_to_have_started():
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG)
    st = _state()
    gone = ClusterState(st.at, st.tenants, st.tiers, st.capacity, st.used, np.array([0.0, 0.0, 0.0]),
                        st.jobs.select(np.array([True, False, True])))   # its queued job was cancelled
    p2 = plan(_fc(16), gone, p1.memory, CFG, last=p1)
    assert p2.hold_why["lo"] == "its aged job left the queue (aging no longer protects it)"


def test_the_high_tiers_hold_says_its_forecast_peak_rose_or_fell():
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG)
    p2 = plan(_fc(64), _state(), p1.memory, CFG, last=p1)
    assert p2.reservations["hi"] == 64
    assert p2.hold_why["hi"] == "its forecast peak rose to 64 GPUs (p90 within 12 steps)"
    p3 = plan(_fc(24), _state(), p2.memory, CFG, last=p2)
    assert p3.reservations["hi"] == 24
    assert p3.hold_why["hi"] == "its forecast peak fell to 24 GPUs (p90 within 12 steps)"
    assert _held(p2, p3)["hi"]["message"].endswith(": its forecast peak fell to 24 GPUs (p90 within 12 steps)")


def test_the_high_tiers_hold_says_its_demand_now_where_that_is_above_the_forecast():
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG)
    p2 = plan(_fc(16), _state(hi_demand=40.0), p1.memory, CFG, last=p1)
    assert p2.reservations["hi"] == 40
    assert p2.hold_why["hi"] == "its demand now: 40 GPUs (running + queued)"


def test_a_full_cluster_says_the_hold_was_capped():
    p1 = plan(_fc(16), _state(capacity=64), PolicyMemory(), CFG)
    p2 = plan(_fc(96), _state(capacity=64), p1.memory, CFG, last=p1)
    held = p2.reservations["hi"]
    assert 16 < held < 96
    assert p2.hold_why["hi"] == ("its forecast peak rose to 96 GPUs (p90 within 12 steps); "
                                 f"the cluster is full (capped at {held} of 96)")


def test_an_operators_floor_says_so():
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG)
    p2 = plan(_fc(16), _state(), p1.memory, CFG, last=p1, ops=OperatorInputs(floors={"fl": 16}))
    assert p2.hold_why["fl"] == "an operator's floor of 16 GPUs"
    p3 = plan(_fc(16), _state(), p2.memory, CFG, last=p2)
    assert p3.hold_why["fl"] == "it is no longer protected (not in the high tier, aged or under a floor)"


def test_a_window_says_when_its_lead_time_began_and_when_it_ended():
    win = {"every": "daily", "at": "12:15", "duration_minutes": 60, "reclaim_before_minutes": 30}
    cfg = parse_config({"policy": {"max_wait_steps": 1000, "headroom": 0, "reserve_share": 0.1},
                        "tenants": [{"name": "hi", "tier": "high"}, {"name": "lo", "tier": "low"},
                                    {"name": "fl", "tier": "normal"}],
                        "windows": [{**win, "name": "fl-batch", "tenant": "fl", "gpus": 32}]})
    before = T0 - pd.Timedelta(minutes=30)                       # 11:30: the lead (from 11:45) has not begun
    p1 = plan(_fc(16, before), _state(before), PolicyMemory(), cfg)
    assert "fl" not in p1.reservations
    p2 = plan(_fc(16), _state(), p1.memory, cfg, last=p1)        # 12:00: in the lead time
    assert p2.reservations["fl"] == 32
    assert p2.hold_why["fl"] == "its window's lead time began"
    after = T0 + pd.Timedelta(minutes=90)                        # 13:30: the window (12:15-13:15) ended
    p3 = plan(_fc(16, after), _state(after), p2.memory, cfg, last=p2)
    assert "fl" not in p3.reservations
    assert p3.hold_why["fl"] == "its window ended"


def test_no_reason_without_a_change_and_none_names_another_tenant():
    p1 = plan(_fc(16), _state(), PolicyMemory(), CFG, ops=OperatorInputs(floors={"fl": 16}))
    assert set(p1.hold_why) == {"hi", "lo", "fl"}
    for t, why in p1.hold_why.items():
        assert not any(o in why.split() for o in TENANTS), why
    p2 = plan(_fc(16), _state(), p1.memory, CFG, last=p1, ops=OperatorInputs(floors={"fl": 16}))
    assert p2.reservations == p1.reservations
    assert p2.hold_why == {} and _held(p1, p2) == {}             # once, when the hold changes: no per-cycle spam


def test_an_aged_job_still_queued_but_not_admitted_says_it_waits_for_a_slot():
    """Aged work is bounded (aging_max_share): lo's aged job, admitted first, loses its slot while another tenant's
    aged job runs its grace period. It did not start nor leave: saying so would send the user looking for it."""
    cfg = Config(policy={"max_wait_steps": 10, "headroom": 0, "reserve_share": 0.1, "aging_max_share": 0.1})

    def state(fl_running: bool) -> ClusterState:
        rows = [("h1", 0, 8, "high", True, 600.0, 0.0), ("l1", 1, 8, "low", False, 0.0, 7300.0),
                ("f2", 2, 8, "normal", fl_running, 60.0 if fl_running else 0.0, 0.0 if fl_running else 7200.0)]
        return ClusterState(T0, TENANTS, ("high", "low", "normal"), 128, np.array([8.0, 0.0, 8.0 * fl_running]),
                            np.array([0.0, 8.0, 8.0 * (not fl_running)]), jobs(rows))

    p1 = plan(_fc(16), state(False), PolicyMemory(), cfg)
    assert p1.reservations.get("lo") == 8 and "fl" not in p1.reservations   # one slot of 12 GPUs: the longest waiter
    p2 = plan(_fc(16), state(True), p1.memory, cfg, last=p1)               # fl's aged job started: its grace period
    assert "lo" not in p2.reservations
    assert p2.hold_why["lo"] == "its aged job waits for an aging slot (aged work is bounded: aging_max_share)"
    assert "fl" not in p2.hold_why["lo"].split()


def test_a_hold_the_headroom_rounds_up_a_whole_job_says_so():
    """First-day walk (hday3, a Kubernetes cluster of 8-GPU jobs): "held capacity for llm-serving: 0 -> 16 GPUs: its
    forecast peak rose to 8 GPUs": the 5% headroom over one 8-GPU job is rounded up to a whole job more, which nothing
    said, so 16 read as a wrong number. The cause now says what the hold is and why it is more than the peak."""
    cfg = Config(policy={**CFG.policy.model_dump(), "headroom": 0.05})
    p = plan(_fc(8), _state(), PolicyMemory(), cfg)
    assert p.reservations["hi"] == 16
    assert p.hold_why["hi"] == ("its forecast peak rose to 8 GPUs (p90 within 12 steps); held 16: 5% headroom "
                                "(policy.headroom), in whole jobs of 8 GPUs")
    assert plan(_fc(8), _state(), PolicyMemory(), CFG).hold_why["hi"] == \
        "its forecast peak rose to 8 GPUs (p90 within 12 steps)"          # no headroom: 8 held, nothing to add


def _basis(**per) -> HoldBasis:
    """One tenant's HoldBasis: nothing held for it unless `per` says (each a scalar for its one row)."""
    row = {"high": False, "aged": False, "floor": 0, "window": 0, "peak": np.nan, "demand": np.nan, "want": 0, **per}
    return HoldBasis(**{k: np.array([v]) for k, v in row.items()}, quantile=0.9, steps=12)


def test_a_hold_gone_to_zero_names_its_cause_not_the_last_one_it_had():
    """Where a hold falls to 0 the cause is read from what the plan holds for now: a full cluster is not the aged
    job starting nor the tenant losing its protection, and a high tier's zero is its forecast (mutation testing: each
    of these rules could be dropped with the tests above passing)."""
    full = _basis(aged=True, want=8)   # still aged, but nothing left to hold it in
    assert cause(0, 8, 0, full, True, "queued", False) == "the cluster is full (capped at 0)"
    assert cause(0, 8, 0, _basis(high=True, want=24, peak=24.0), False, "gone", False) == \
        "the cluster is full (capped at 0)"
    assert cause(0, 16, 0, _basis(high=True, peak=0.0, demand=0.0), False, "gone", False) == \
        "its forecast peak fell to 0 GPUs (p90 within 12 steps)"


def test_a_window_holding_more_says_so_and_a_capped_hold_that_fell_names_the_cap_alone():
    """A low tenant's window growing its hold over the lead time says the window's GPUs; a hold that fell because the
    cluster filled says the cap, not the forecast it was sized on (which alone would have kept it)."""
    assert cause(0, 8, 16, _basis(window=16, want=16), False, "gone", True) == "its window holds 16 GPUs"
    capped = _basis(high=True, peak=48.0, want=48)
    assert cause(0, 64, 40, capped, False, "gone", False) == "the cluster is full (capped at 40 of 48)"


def test_a_tenant_whose_hold_stays_zero_or_has_no_cause_gets_no_reason():
    """No hold before (absent from the last plan) and none now is no change: nothing said, each cycle, for every
    unprotected tenant; and a change the plan cannot explain (no forecast, no reading) is left out, not said as ''."""
    b = HoldBasis(high=np.array([False, True]), aged=np.zeros(2, bool), floor=np.zeros(2), window=np.zeros(2),
                  peak=np.full(2, np.nan), demand=np.full(2, np.nan), want=np.array([0, 8]), quantile=0.9, steps=12)
    assert hold_why(("idle", "hi"), {"hi": 16}, np.array([0, 8]), b, {}, {}, Jobs.empty(), {}) == {}
