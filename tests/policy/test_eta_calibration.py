"""The p90 start estimate calibrated on the jobs that already started (daemon/policy/eta_calibration.py): a known
ratio is covered, a job that has not started by the time of the estimate is never used, the tier falls back to
every tier's, and without enough started jobs the model's p90 stands."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.policy.eta import Eta
from daemon.policy.eta_calibration import Calibration, calibrate

TIERS = {"n": "normal", "l": "low"}


def _eta(job: str, tenant: str, p50: float | None, p90: float | None) -> Eta:
    return Eta(job, tenant, 1, 0, p50, p90, "time limit")


def test_a_known_ratio_is_covered():
    """Jobs that start after 3x the wait their model p90 said: a new job's p90 is 3x its model p90, and the p50 is
    left as it was."""
    cal = Calibration(floor_s=60.0)
    for i in range(60):
        cal.observe("normal", made_at=1000.0 * i, started_at=1000.0 * i + 3 * 200.0, p90_model_s=200.0)
    (e,) = calibrate([_eta("J", "n", 100.0, 400.0)], TIERS, cal.factors(1e9))
    assert e.p90_s == pytest.approx(1200.0) and e.p50_s == 100.0 and e.p90_model_s == 400.0
    assert "x3.00" in e.basis


def test_a_random_stream_is_covered_about_90_percent():
    """Actual waits of (model p90 wait) x a ratio drawn from one distribution: the calibrated p90 of new jobs
    drawn from it covers 85-95% of them (the model's own p90 covered a third)."""
    rng = np.random.default_rng(3)
    cal = Calibration(keep=500, floor_s=60.0)
    for i in range(500):
        p90 = float(rng.uniform(60, 3600))
        cal.observe("normal", 0.0, p90 * float(rng.lognormal(0.3, 0.8)), p90)
    f = cal.factors(1e9)
    p90s = rng.uniform(60, 3600, 2000)
    actual = p90s * rng.lognormal(0.3, 0.8, 2000)
    got = calibrate([_eta(str(i), "n", 0.0, float(p)) for i, p in enumerate(p90s)], TIERS, f)
    covered = np.mean([a <= e.p90_s for a, e in zip(actual, got)])
    assert 0.85 <= covered <= 0.95
    assert np.mean(actual <= p90s) < 0.4


def test_a_job_that_has_not_started_by_the_estimate_is_never_used():
    """20 jobs started by t=10000 at 2x their model p90; 40 more start later, at 10x. An estimate made at 10000
    scales by 2: the later ones are not read, even though they were handed over already."""
    cal = Calibration(min_all=20, min_tier=50, floor_s=60.0)
    for i in range(20):
        cal.observe("normal", made_at=float(i), started_at=float(i) + 1200.0, p90_model_s=600.0)
    for i in range(40):
        cal.observe("normal", made_at=9000.0, started_at=10001.0 + i, p90_model_s=60.0)   # 1001+ s: ratio > 16
    assert cal.factors(10000.0).by_tier[""][0] == pytest.approx(2.0)
    assert "" in cal.factors(10000.0).by_tier and "normal" not in cal.factors(10000.0).by_tier
    assert cal.factors(20000.0).by_tier["normal"][0] > 10    # once they started, they count


def test_a_tier_with_too_few_reads_every_tiers_and_too_few_in_all_keeps_the_model():
    cal = Calibration(min_all=20, min_tier=50, floor_s=60.0)
    for _ in range(19):
        cal.observe("normal", 0.0, 1200.0, 600.0)
    a, b = calibrate([_eta("A", "n", 0.0, 600.0), _eta("B", "l", None, None)], TIERS, cal.factors(1e9))
    assert a.p90_s == 600.0 and b.p90_s is None and "scaled" not in a.basis     # 19 < 20: the model's p90 stands
    for _ in range(40):
        cal.observe("normal", 0.0, 1200.0, 600.0)
    cal.observe("low", 0.0, 6000.0, 600.0)
    a, b, c = calibrate([_eta("A", "n", 0.0, 600.0), _eta("B", "l", 100.0, 300.0), _eta("C", "l", None, None)],
                        TIERS, cal.factors(1e9))
    assert a.p90_s == pytest.approx(1200.0)          # normal: its own 59 (>= 50)
    assert b.p90_s == pytest.approx(600.0)           # low: 1 of its own, every tier's 60: the 90th percentile is 2
    assert c.p90_s is None and c.p50_s is None       # unknown stays unknown


def test_the_p90_keeps_the_models_spread_over_the_p50_and_a_job_that_fits_now_gets_a_cycle():
    cal = Calibration(min_all=20, min_tier=20, floor_s=60.0)
    for _ in range(20):
        cal.observe("normal", 0.0, 60.0, 6000.0)       # started after one cycle, told 100 min: ratio 0.01
        cal.observe("low", 0.0, 600.0, 0.0)            # told "fits now", started after 10 min: ratio 10
    a, b = calibrate([_eta("A", "n", 300.0, 1200.0), _eta("B", "l", 0.0, 0.0)], TIERS, cal.factors(1e9))
    assert a.p90_s == 1200.0      # 1200 s x 0.01 = 12 s, floored at the p50 times the model's own 1200/300
    assert b.p90_s == pytest.approx(600.0)            # "now" counts as one cycle (60 s), x 10


def test_a_scale_far_below_one_keeps_the_models_spread_over_the_p50():
    """make run's case: the jobs started a cycle after an estimate whose model p90 said 50 min (the model serves
    the high tier's whole forecast growth first), so the p90's scale is 0.02. A new job with model p50 20 min and
    p90 40 min: its p90 was 48 s, clamped to the p50 (p90 = p50: nothing said about how sure). It keeps the model's
    own p90/p50 of 2: 40 min. A job the model says fits now: a cycle times its ratio."""
    cal = Calibration(floor_s=60.0)
    for _ in range(24):
        cal.observe("normal", 0.0, 60.0, p90_model_s=3000.0, p50_model_s=2000.0)
    f = cal.factors(1e9)
    assert f.by_tier[""][0] == pytest.approx(0.02)
    a, b = calibrate([_eta("A", "n", 1200.0, 2400.0), _eta("B", "n", 0.0, 120.0)], TIERS, f)
    assert a.p50_s == 1200.0 and a.p90_s == pytest.approx(2400.0)
    assert b.p50_s == 0.0 and b.p90_s == pytest.approx(120.0)         # 60 s x 120 / 60


def test_bad_settings_are_refused_with_one_line():
    with pytest.raises(ValueError, match="q must be in"):
        Calibration(q=1.5)


def test_the_p50_is_scaled_by_the_median_ratio_only_when_asked():
    """Started jobs waited 1x, 2x and 4x their model p50 (20 each): the median ratio is 2. Asked, a p50 of 300 s
    becomes 600 s; by default (the daemon) the p50 stays the model's."""
    cal = Calibration(min_all=20, floor_s=60.0)
    for r in (1.0, 2.0, 4.0):
        for _ in range(20):
            cal.observe("normal", 0.0, 300.0 * r, p90_model_s=600.0, p50_model_s=300.0)
    f = cal.factors(1e9)
    (kept,) = calibrate([_eta("A", "n", 300.0, 600.0)], TIERS, f)
    (scaled,) = calibrate([_eta("A", "n", 300.0, 600.0)], TIERS, f, p50=True)
    assert kept.p50_s == 300.0 and scaled.p50_s == pytest.approx(600.0)
    assert kept.p90_s == scaled.p90_s == pytest.approx(1200.0)       # 90th percentile of 0.5, 1, 2 (x20): 2
    assert "p50 x2.00" in scaled.basis and "p50" not in kept.basis.split(";")[-1]


def _blend_history(cal: Calibration, model_off: float, n: int = 100, started_at: float = 0.0) -> None:
    """`n` started jobs that waited 600 s: the naive estimate said 600, the model 600 x `model_off`."""
    for _ in range(n):
        cal.observe("normal", 0.0, 600.0 + started_at, p90_model_s=1200.0, p50_model_s=600.0 * model_off,
                    naive_s=600.0)


def test_the_p50_leans_on_the_naive_estimate_where_it_erred_less():
    """100 started jobs the naive estimate got right and the model 3x too late: the weight is 0, a new job's p50
    is its naive estimate (its model p50 kept in p50_model_s), and the basis says so. A job with no naive
    estimate keeps its model p50."""
    cal = Calibration(floor_s=60.0)
    _blend_history(cal, model_off=3.0)
    f = cal.factors(1e9)
    assert f.blend["normal"] == 0.0
    a, b = calibrate([_eta("A", "n", 900.0, 1800.0), _eta("B", "n", 900.0, 1800.0)], TIERS, f,
                     naive={"A": 300.0, "B": None})
    assert a.p50_s == pytest.approx(300.0) and a.p50_model_s == 900.0 and "queue's rate" in a.basis
    assert b.p50_s == 900.0 and "queue's rate" not in b.basis
    assert a.p90_s >= a.p50_s


def test_the_p50_stays_the_models_where_the_model_erred_less():
    """The same jobs with the model right and the naive estimate 3x too late (a tie goes to the model too)."""
    cal = Calibration(floor_s=60.0)
    for _ in range(100):
        cal.observe("normal", 0.0, 600.0, p90_model_s=1200.0, p50_model_s=600.0, naive_s=1800.0)
    f = cal.factors(1e9)
    assert f.blend["normal"] == 1.0
    (a,) = calibrate([_eta("A", "n", 900.0, 1800.0)], TIERS, f, naive={"A": 300.0})
    assert a.p50_s == 900.0


def test_the_blend_waits_for_enough_started_jobs_and_never_for_later_ones():
    """99 started jobs are too few (the model alone); jobs that start after the estimate's time are not used, so
    the weight learned at 1000 s rests on the jobs started by then only."""
    cal = Calibration(floor_s=60.0)
    _blend_history(cal, model_off=3.0, n=99)
    assert "normal" not in cal.factors(1e9).blend and "" not in cal.factors(1e9).blend
    _blend_history(cal, model_off=3.0, n=1, started_at=5000.0)
    assert "normal" not in cal.factors(1000.0).blend
    assert cal.factors(1e9).blend["normal"] == 0.0
    # another tier with no history of its own takes every tier's weight
    (low,) = calibrate([_eta("L", "l", 900.0, 1800.0)], TIERS, cal.factors(1e9), naive={"L": 300.0})
    assert low.p50_s == pytest.approx(300.0)


def test_a_blend_that_barely_wins_leaves_the_model():
    """Half the jobs waited 750 s, half 1200 s; the model said 700, the naive estimate 1000: the model's median
    absolute error is 275 s (50 and 500), the best blend's (w = 0.75: 775 s) 225 s (25 and 425), 0.82 of it, not
    0.8: the model stays."""
    cal = Calibration(floor_s=60.0)
    for waited in (750.0, 1200.0) * 50:
        cal.observe("normal", 0.0, waited, p90_model_s=1200.0, p50_model_s=700.0, naive_s=1000.0)
    assert cal.factors(1e9).blend["normal"] == 1.0


def test_a_start_before_the_first_estimate_teaches_nothing():
    cal = Calibration(min_tier=1, min_all=1)
    cal.observe("normal", made_at=100.0, started_at=50.0, p90_model_s=100.0)
    assert cal.factors(1e9).by_tier == {}


def test_a_job_that_started_at_its_estimate_waited_one_cycle_and_teaches_a_scale_of_one():
    """60 jobs that fit now (model p50 and p90 0) and started at the estimate's own time: each waited one cycle
    (floor_s) against a model wait of one cycle, so both scales are 1 and a new job that fits now is told one cycle,
    at the p90 and (scaled) at the p50, not 0."""
    cal = Calibration(floor_s=60.0)
    for _ in range(60):
        cal.observe("normal", 1000.0, 1000.0, p90_model_s=0.0, p50_model_s=0.0)
    f = cal.factors(1e9)
    assert f.by_tier["normal"][:2] == (1.0, 1.0)
    (a,) = calibrate([_eta("A", "n", 0.0, 0.0)], TIERS, f, p50=True)
    assert (a.p50_s, a.p90_s) == (60.0, 60.0)


def test_the_blend_replaces_the_model_at_exactly_blend_gain_of_its_error_and_a_tie_goes_to_the_larger_weight():
    """'At most BLEND_GAIN of the model's own': every job waited 100 s, the model said 200 (off 100), the naive
    estimate 180 (off 80 = 0.8 x 100, the naive estimate alone the best blend): w = 0. And where w = 0.25 and 0.5
    err alike (waited 75, model 200, naive 0: both off 25), the larger weight (more of the model's) is taken."""
    cal = Calibration()
    for _ in range(100):
        cal.observe("normal", 0.0, 100.0, p90_model_s=200.0, p50_model_s=200.0, naive_s=180.0)
    assert cal.factors(1e9).blend["normal"] == 0.0
    cal = Calibration()
    for _ in range(100):
        cal.observe("normal", 0.0, 75.0, p90_model_s=200.0, p50_model_s=200.0, naive_s=0.0)
    assert cal.factors(1e9).blend["normal"] == 0.5


def test_each_tier_blends_by_its_own_weight_once_it_has_enough_jobs():
    """The low tier's started jobs the naive estimate got right, the normal tier's the model: every tier's together
    err alike at any weight (the model stays, w = 1), but a low job's p50 is its naive estimate (its tier's w = 0)."""
    cal = Calibration(floor_s=60.0)
    for _ in range(100):
        cal.observe("low", 0.0, 100.0, p90_model_s=300.0, p50_model_s=300.0, naive_s=100.0)
        cal.observe("normal", 0.0, 100.0, p90_model_s=300.0, p50_model_s=100.0, naive_s=300.0)
    f = cal.factors(1e9)
    assert (f.blend[""], f.blend["low"], f.blend["normal"]) == (1.0, 0.0, 1.0)
    low, normal = calibrate([_eta("L", "l", 900.0, 1800.0), _eta("N", "n", 900.0, 1800.0)], TIERS, f,
                            naive={"L": 300.0, "N": 300.0})
    assert low.p50_s == pytest.approx(300.0) and normal.p50_s == 900.0


def test_an_estimate_made_later_in_a_wait_is_scaled_by_the_estimates_made_that_far_in():
    """60 jobs came 1x their model p90 from their first estimate, but 3x from the one made 30 minutes into their
    wait (the model grows too sure as the wait goes on). An estimate 30 min (or 45) into a wait is scaled x3, a
    first one x1. A bucket with too few (10 min: 5) reads every later age's together; with none at all, the
    first estimates'. Only estimates of jobs started by the time of the factors count."""
    cal = Calibration(floor_s=60.0)
    for i in range(60):
        cal.observe("normal", 0.0, 1000.0 + i, p90_model_s=1000.0 + i)
        cal.observe_aged("normal", 1800.0, 1800.0, 1800.0 + 3 * 600.0, p90_model_s=600.0)
    for _ in range(5):
        cal.observe_aged("normal", 600.0, 600.0, 600.0 + 600.0, p90_model_s=600.0)    # 1x, too few alone
    f = cal.factors(1e9)
    first, at30, at45, at10 = calibrate([_eta(j, "n", 0.0, 600.0) for j in "ABCD"], TIERS, f,
                                        age_s={"B": 1800.0, "C": 2700.0, "D": 600.0})
    assert first.p90_s == pytest.approx(600.0) and at30.p90_s == pytest.approx(1800.0) == at45.p90_s
    assert "estimates 30 min into their wait" in at30.basis
    assert at10.p90_s == pytest.approx(1800.0) and "10 min or more" in at10.basis    # the 65 later ones' q90: 3
    assert calibrate([_eta("E", "n", 0.0, 600.0)], TIERS, cal.factors(2000.0), age_s={"E": 1800.0})[0].p90_s \
        == pytest.approx(600.0)       # at 2000 none of the 30-min estimates' jobs had started (3600): the first's


def test_a_later_estimates_p50_blends_by_the_weight_learned_that_far_into_a_wait_only_when_asked():
    """100 started jobs the model got right from their first estimate (w = 1) and the naive estimate from the one
    made 30 minutes into their wait (the model 3x late there: w = 0). With `aged_blend` (measured in the replay) a
    job 30 min (or 45) into its wait takes its naive estimate, a first estimate the model's p50; without it (the
    daemon's) every age blends by the first estimates' weight. A bucket with none reads every later age's together
    (10 min: w = 0 too); only jobs started by the time of the factors count (at 2000 s none of the later estimates'
    had: the first estimates' weight)."""
    cal = Calibration(floor_s=60.0)
    for _ in range(100):
        cal.observe("normal", 0.0, 600.0, p90_model_s=1200.0, p50_model_s=600.0, naive_s=1800.0)
        cal.observe_aged("normal", 1800.0, 1800.0, 2400.0, p90_model_s=1200.0, p50_model_s=1800.0, naive_s=600.0)
    f = cal.factors(1e9)
    assert f.weight("normal") == 1.0
    assert f.weight("normal", 1800.0) == f.weight("normal", 2700.0) == f.weight("normal", 600.0) == 0.0
    etas = [_eta("A", "n", 900.0, 1800.0), _eta("B", "n", 900.0, 1800.0)]
    naive, ages = {"A": 300.0, "B": 300.0}, {"B": 1800.0}
    first, at30 = calibrate(etas, TIERS, f, naive=naive, age_s=ages, aged_blend=True)
    assert first.p50_s == 900.0 and at30.p50_s == pytest.approx(300.0) and "queue's rate" in at30.basis
    assert [e.p50_s for e in calibrate(etas, TIERS, f, naive=naive, age_s=ages)] == [900.0, 900.0]
    assert cal.factors(2000.0).weight("normal", 1800.0) == 1.0
