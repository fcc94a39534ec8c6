"""The peak over the policy's lead windows: scored (hand-computed cases, gaps never read as zero), carried by the
forecast, trained for and calibrated."""

import numpy as np
import pandas as pd
import pytest

from daemon.config import PolicyConfig
from forecaster import backtest
from forecaster.metrics import DEFAULT_PEAK_WINDOWS, moves, peak_report, peak_scores, realised_peaks
from forecaster.types import Forecast

NAN = np.nan


def test_the_default_windows_are_the_policys():
    pc = PolicyConfig()
    assert DEFAULT_PEAK_WINDOWS == {"lead": pc.lead_time_steps, "preempt": pc.preempt_lead_steps}


def test_realised_peak_is_the_peak_of_what_was_seen_and_a_mostly_missing_window_is_not_scored():
    a = np.array([[1.0, NAN, 5.0, 2.0],     # 2 of 3 seen: the peak of those
                  [NAN, NAN, NAN, 3.0],     # none of 3 seen: not scored
                  [NAN, 2.0, NAN, NAN],     # 1 of 3 seen: under half, not scored
                  [NAN, 0.0, 0.0, 9.0]])    # seen zeros are zeros
    got = realised_peaks(a, 3)
    assert got[0] == 5.0 and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == 0.0
    # a missing step read as zero would score rows 1 and 2 (peak 0 and 2); over all 4 steps row 1 has 1 of 4 seen
    assert np.isnan(realised_peaks(a, 4)[1]) and realised_peaks(a, 4)[0] == 5.0
    assert realised_peaks(a, 3, min_observed=0.3)[2] == 2.0   # the share is a knob: 1 of 3 seen is enough at 0.3


def test_a_gap_is_not_a_move():
    a = np.array([[5.0, NAN, 5.0], [5.0, NAN, 0.0], [NAN, NAN, NAN], [4.0, 4.0, 4.0]])
    last = np.array([5.0, 5.0, 5.0, NAN])   # the last tenant: no value before the window, compared within it
    assert moves(a, last, 3).tolist() == [False, True, False, False]
    assert moves(a, np.array([4.0, 5.0, 5.0, 3.0]), 3).tolist() == [True, True, False, True]


def test_peak_loss_and_coverage_by_hand():
    qs = (0.5, 0.9)
    pred = np.array([[8.0, 12.0], [5.0, 3.5]])
    real = np.array([10.0, 4.0])
    # pinball: peak 10: 0.5 * 2 + 0.1 * 2 = 1.2; peak 4: 0.5 * 1 + 0.9 * 0.5 = 0.95; wQL = 2 * 2.15 / 14 / 2
    s = peak_scores(pred, real, qs, moving=np.array([True, False]))
    assert s["loss"] == pytest.approx(2.15 / 14)
    assert s["coverage_p90"] == 0.5 and s["coverage_p90_strict"] == 0.5 and s["scored"] == 2
    assert s["coverage_p90_moving"] == 1.0 and s["moving"] == 1


def test_peak_report_with_a_tenant_with_gaps_by_hand():
    qs = (0.5, 0.9)
    # one origin, three tenants, four steps ahead; windows: lead 3 steps, preempt 1 step
    actual = np.array([[[2.0, NAN, 6.0, 1.0],       # a (normal): lead peak 6 (2 of 3 seen), preempt 2
                        [NAN, NAN, 5.0, 7.0],       # b (high): 1 of 3 seen, nothing of the first step: not scored
                        [5.0, NAN, 5.0, 5.0]]])     # c (high): flat through a gap: scored, does not move
    last = np.array([[2.0, 4.0, 5.0]])
    pred = np.zeros((1, 3, 2, 2))
    pred[0, 0, 0] = [5.0, 7.0]      # a lead: 0.5 * 1 + 0.1 * 1 = 0.6
    pred[0, 0, 1] = [2.0, 3.0]      # a preempt: 0 + 0.1 * 1 = 0.1
    pred[0, 1] = [[1.0, 1.0], [1.0, 1.0]]   # b: never scored (it would lose badly against a zero-read peak of 5)
    pred[0, 2, 0] = [4.0, 4.5]      # c lead: 0.5 * 1 + 0.9 * 0.5 = 0.95; not covered
    pred[0, 2, 1] = [5.0, 6.0]      # c preempt: 0 + 0.1 * 1 = 0.1; covered
    rep = peak_report(pred, actual, last, qs, {"lead": 3, "preempt": 1}, np.array(["normal", "high", "high"]))
    lead, pre = rep["lead"], rep["preempt"]
    assert lead["steps"] == 3 and lead["scored"] == 2 and pre["scored"] == 2
    assert lead["loss"] == pytest.approx(2 * (0.6 + 0.95) / (6 + 5) / 2)
    assert pre["loss"] == pytest.approx(2 * (0.1 + 0.1) / (2 + 5) / 2)
    assert rep["loss"] == pytest.approx((lead["loss"] + pre["loss"]) / 2)
    assert lead["coverage_p90"] == 0.5 and pre["coverage_p90"] == 1.0
    # where the series moves: a's lead window only (c is flat through its gap, a's first step equals its last)
    assert lead["moving"] == 1 and lead["coverage_p90_moving"] == 1.0
    assert pre["moving"] == 0 and np.isnan(pre["coverage_p90_moving"])
    hi = lead["by_tier"]["high"]
    assert hi["scored"] == 1 and hi["loss"] == pytest.approx(2 * 0.95 / 5 / 2) and hi["coverage_p90"] == 0.0
    assert lead["by_tier"]["normal"]["loss"] == pytest.approx(2 * 0.6 / 6 / 2)


class _Fixed:
    """Forecasts the last value seen times (1, 1.5) for every step: p50 and p90."""

    name = "fixed"
    min_history = 1

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        last = history.ffill().iloc[-1].to_numpy(dtype=float)
        v = np.repeat(np.stack([last, 1.5 * last], axis=1)[:, None, :], horizon, axis=1)
        return Forecast(tuple(map(str, history.columns)), (0.5, 0.9), v, history.index[-1], 60, self.name)


def test_backtest_scores_the_peak_with_gaps_never_as_zero():
    idx = pd.date_range("2026-01-01", periods=8, freq="min", tz="UTC", name="time")
    f = pd.DataFrame({"a": [4, 4, 4, 4, 10, 2, 2, 2], "b": [4, 4, 4, 4, NAN, NAN, 3, 9.0]}, index=idx)
    rep = backtest.run(f, {"fixed": _Fixed()}, start=4, horizon=4, history_steps=4, quantiles=(0.5, 0.9), season=2,
                       stride=4, peak_windows={"lead": 3, "preempt": 1}, tiers={"a": "high"}).report
    pk = rep["models"]["fixed"]["peak"]
    # a: lead peak 10 against p50 4, p90 6: 0.5 * 6 + 0.9 * 4 = 6.6, not covered; preempt: the same step
    # b: lead window (NaN, NaN, 3) has 1 of 3 seen: not scored; preempt window (NaN): not scored
    assert pk["lead"]["scored"] == 1 and pk["preempt"]["scored"] == 1
    assert pk["lead"]["loss"] == pytest.approx(2 * 6.6 / 10 / 2) and pk["lead"]["coverage_p90"] == 0.0
    assert pk["lead"]["by_tier"]["high"]["scored"] == 1 and pk["lead"]["by_tier"]["normal"]["scored"] == 0
    assert rep["peak_windows"] == {"lead": 3, "preempt": 1}


def test_a_forecast_serves_its_own_peak_where_it_has_one():
    v = np.array([[[1.0, 2.0], [3.0, 5.0], [2.0, 4.0]], [[NAN, NAN], [NAN, NAN], [NAN, NAN]]])
    fc = Forecast(("a", "b"), (0.5, 0.9), v, pd.Timestamp("2026-01-01", tz="UTC"), 60, "m")
    assert fc.peak_over(2, 0.9).tolist()[0] == 5.0 and np.isnan(fc.peak_over(2, 0.9)[1])
    assert fc.peak_over(99, 0.5)[0] == 3.0            # clipped to the horizon
    own = Forecast(fc.tenants, fc.quantiles, v, fc.issued_at, 60, "m", peaks={2: np.array([[4.0, 7.0], [1.0, 2.0]])})
    assert own.peak_over(2, 0.9).tolist() == [7.0, 2.0] and own.peak_over(3, 0.9)[0] == 5.0
    assert own.peak_over(2, 0.5, ("b", "x", "a"))[[0, 2]].tolist() == [1.0, 4.0]
    assert np.isnan(own.peak_over(2, 0.5, ("b", "x", "a"))[1])
    with pytest.raises(ValueError):
        Forecast(fc.tenants, fc.quantiles, v, fc.issued_at, 60, "m", peaks={2: np.zeros((3, 2))})


def test_a_shifted_forecast_carries_what_its_own_peak_adds_by_hand():
    """Read 2 steps after it was made (a replay forecasting every few steps), a forecast's own peak is what it
    added to the largest per-step quantile, added to the shifted steps' largest; a tenant with no finite step
    keeps its peak; a window it had no own peak for still falls back to the steps."""
    from daemon.sim.replay import ForecastBank

    v = np.array([[[1.0, 2.0], [3.0, 5.0], [2.0, 4.0]], [[NAN, NAN], [NAN, NAN], [NAN, NAN]]])
    at = pd.Timestamp("2026-01-01", tz="UTC")
    own = Forecast(("a", "b"), (0.5, 0.9), v, at, 60, "m", peaks={2: np.array([[4.0, 7.0], [1.0, 2.0]])})
    assert own.shifted(0) is own
    two = own.shifted(2)
    assert two.values[0].tolist() == [[2.0, 4.0]] * 3 and np.isnan(two.values[1]).all()
    # a: added [4 - 3, 7 - 5] = [1, 2] to the steps' largest [3, 5]; shifted, the steps' largest is [2, 4]
    assert two.peaks[2].tolist() == [[3.0, 6.0], [1.0, 2.0]]
    assert two.peak_over(3, 0.9)[0] == 4.0 and not two.has_peak(3)
    assert own.shifted(1).peaks[2][0].tolist() == [4.0, 7.0]            # the steps' largest did not move
    assert Forecast(own.tenants, own.quantiles, v, at, 60, "m").shifted(1).peaks is None
    # as where they are made: never below 0, never lower at a higher quantile (the hold reads p90, preemption p50)
    w = np.array([[[10.0, 20.0], [10.0, 20.0], [5.0, 11.0], [5.0, 11.0]]])
    cross = Forecast(("a",), (0.5, 0.9), w, at, 60, "m", peaks={2: np.array([[19.0, 19.0]])}).shifted(2)
    assert cross.peaks[2].tolist() == [[14.0, 14.0]]                      # 5 + 9 and 11 - 1 = 10, raised to 14
    low = Forecast(("a",), (0.5, 0.9), w, at, 60, "m", peaks={2: np.array([[2.0, 5.0]])}).shifted(2)
    assert low.peaks[2].tolist() == [[0.0, 0.0]]                          # 5 - 8 and 11 - 15: no negative demand

    class Fixed:  # a forecaster that always says `own`
        def predict(self, history, horizon):
            return own

    demand = pd.DataFrame({"a": np.ones(10), "b": np.ones(10)})
    bank = ForecastBank(Fixed(), demand, 5, 3, 10)
    assert bank.at(5) is own and bank.at(7).peaks[2].tolist() == two.peaks[2].tolist()


def blips(n=8, steps=48 * 20, seed=0, p=0.06):
    """A flat level with one-step spikes to three times it at random steps (6% of them): under the per-step p90,
    so the per-step quantiles, fitted as well as they can be, never see them; but over 10 steps a spike comes
    with probability 1 - 0.94^10 = 46%, so the peak's p90 is the spike."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    level = 10.0 * (1 + np.arange(n))
    v = level[None, :] * (1 + 0.05 * rng.normal(size=(steps, n)))
    v = np.where(rng.uniform(size=(steps, n)) < p, 3 * level[None, :], v)
    return pd.DataFrame(v, index=idx, columns=pd.Index([f"t{i}" for i in range(n)], name="tenant"))


def test_the_peak_head_learns_the_peak_the_per_step_loss_cannot_see():
    import torch

    from forecaster.lstm import LSTMForecaster, LSTMSpec
    from forecaster.train import train

    torch.set_num_threads(1)
    f = blips()
    hold = 48 * 4
    scores = {}
    for name, windows in (("per-step", ()), ("peak head", (10, 3))):
        spec = LSTMSpec(context=24, horizon=12, season=48, hidden=16, step_s=60, anchor="last", peak_windows=windows)
        r = train(f.iloc[:-hold], spec, epochs=6, samples_per_epoch=2048, progress=False, seed=0, zero_init=True,
                  weight_by_scale=True)
        rep = backtest.run(f, {name: LSTMForecaster(r.model, name)}, start=len(f) - hold, horizon=12,
                           history_steps=48 * 3, quantiles=spec.quantiles, season=48,
                           peak_windows={"lead": 10, "preempt": 3}).report
        scores[name] = rep["models"][name]
    old, new = scores["per-step"], scores["peak head"]
    # the per-step wQL cannot tell the two apart (the same per-step head, trained the same way) ...
    assert abs(new["wql"] / old["wql"] - 1) < 0.03, (new["wql"], old["wql"])
    # ... but the peak over the lead window, what the policy holds for, is far better forecast and covered
    assert new["peak"]["lead"]["loss"] < 0.7 * old["peak"]["lead"]["loss"], (new["peak"], old["peak"])
    assert new["peak"]["lead"]["coverage_p90"] > old["peak"]["lead"]["coverage_p90"] + 0.1
    assert new["peak"]["preempt"]["loss"] < old["peak"]["preempt"]["loss"]


def test_the_lstm_forecast_carries_its_peak_and_old_specs_load_without_one():
    import torch

    from forecaster.lstm import LSTMForecaster, LSTMSpec, QuantileLSTM

    torch.manual_seed(0)
    spec = LSTMSpec(context=24, horizon=12, season=48, hidden=8, step_s=60, peak_windows=(10, 3))
    assert LSTMSpec.from_dict(spec.to_dict()) == spec
    old = {k: v for k, v in spec.to_dict().items() if k != "peak_windows"}
    assert LSTMSpec.from_dict(old).peak_windows == ()
    f = blips(n=3, steps=48 * 2)
    f.iloc[-30:, 2] = np.nan                          # a tenant with no recent sample: no forecast, no peak
    fc = LSTMForecaster(QuantileLSTM(spec)).predict(f, 12)
    assert set(fc.peaks) == {10, 3}
    # untrained, the peak head's correction is zero: the peak is the largest per-step quantile over the window
    top = np.fmax.reduce(fc.values[:, :10, :], axis=1)
    assert np.allclose(fc.peaks[10][:2], top[:2], rtol=1e-5) and np.isnan(fc.peaks[10][2]).all()
    assert set(LSTMForecaster(QuantileLSTM(spec)).predict(f, 5).peaks) == {3}   # a window past the horizon: none


def test_the_policy_holds_for_the_forecasts_own_peak_when_it_carries_one():
    from daemon.config import Config
    from daemon.policy import PolicyMemory, plan
    from tests.policy.test_engine import flat_forecast, make_state

    s = make_state(["high", "low"], [(0, 10, "high", True, 3600, 0), (1, 10, "low", True, 600, 0)], capacity=100)
    cfg = Config(policy={"headroom": 0.0, "lead_time_steps": 10, "preempt_lead_steps": 3})
    fc = flat_forecast(s.tenants, [30, 10])            # per-step p90 33 for t0: held in whole jobs of 10 -> 40
    assert plan(fc, s, PolicyMemory(), cfg).reservations["t0"] == 40
    own = Forecast(fc.tenants, fc.quantiles, fc.values, fc.issued_at, 60, "m",
                   peaks={10: np.array([[30.0, 52.0, 60.0], [10.0, 11.0, 12.0]])})
    assert plan(own, s, PolicyMemory(), cfg).reservations["t0"] == 60   # its own p90 peak over 10 steps: 52


def jumps(n=6, steps=3000, seed=0, p=0.03):
    """GPU-count-like series: flat, with jumps of 4-15 at random steps (3% of them, 60% up). Most 10-step windows do
    not move, and any p90 at the last value covers those; where the series moves the naive peak is far under."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    size = rng.choice([-1, 1], size=(steps, n), p=[0.4, 0.6]) * rng.integers(4, 16, size=(steps, n))
    v = np.maximum(100 + np.cumsum(np.where(rng.uniform(size=(steps, n)) < p, size, 0), axis=0), 0).astype(float)
    f = pd.DataFrame(v, index=idx, columns=pd.Index([f"s{i}" for i in range(n)], name="tenant"))
    f.iloc[2000:2030, 1] = np.nan                      # a tenant with a gap in the scored window
    return f


def walks(n=6, steps=3000, seed=0):
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    v = np.maximum(200 + np.cumsum(rng.normal(0, 2, size=(steps, n)), axis=0), 0)
    f = pd.DataFrame(v, index=idx, columns=pd.Index([f"w{i}" for i in range(n)], name="tenant"))
    f.iloc[2000:2030, 1] = np.nan
    return f


def _peak_backtest(f):
    from forecaster.selection import make_baseline

    models = {m: make_baseline(m, 48, (0.5, 0.9, 0.99), peak_windows=(10, 3))
              for m in ("naive", "naive+peak", "naive+peak_all")}
    rep = backtest.run(f, models, start=2000, horizon=12, history_steps=1500, quantiles=(0.5, 0.9, 0.99), season=48,
                       stride=5, max_origins=200, peak_windows={"lead": 10, "preempt": 3}).report
    return {k: m["peak"] for k, m in rep["models"].items()}


def test_the_conformal_peak_covers_its_share_of_realised_peaks_where_the_series_moves():
    pk = _peak_backtest(jumps())
    # naive's p90 at the last value covers the flat windows, but under 60% of the peaks where the series moves
    assert pk["naive"]["lead"]["coverage_p90_moving"] < 0.65 and pk["naive"]["lead"]["moving"] > 250
    # learnt from the windows where each tenant moved: 87-93% of those peaks under the p90 peak
    assert 0.87 <= pk["naive+peak"]["lead"]["coverage_p90_moving"] <= 0.93
    assert 0.85 <= pk["naive+peak"]["preempt"]["coverage_p90_moving"] <= 0.95
    # learnt from every window, the peak loss is lower but the moves stay under-covered: the choice is retrain's
    assert pk["naive+peak_all"]["lead"]["loss"] < pk["naive+peak"]["lead"]["loss"]
    assert pk["naive+peak_all"]["lead"]["coverage_p90_moving"] < 0.7
    # on a random walk every window moves: naive's peak p90 covers too little, the calibrated one its share
    pk = _peak_backtest(walks())
    assert pk["naive"]["lead"]["coverage_p90"] < 0.85
    assert 0.87 <= pk["naive+peak"]["lead"]["coverage_p90"] <= 0.93
    assert pk["naive+peak"]["lead"]["loss"] < pk["naive"]["lead"]["loss"]


def test_a_gap_in_the_calibration_history_is_not_a_move():
    from forecaster.selection import make_baseline

    idx = pd.date_range("2026-01-01", periods=1200, freq="min", tz="UTC", name="time")
    f = pd.DataFrame({"flat": 50.0, "walk": 50 + np.cumsum(np.random.default_rng(0).normal(0, 1, 1200))}, index=idx)
    for k in range(300, 1150, 100):                    # silences in the window the shifts are learnt from
        f.iloc[k:k + 30, 0] = np.nan
    m = make_baseline("naive+peak", 48, (0.5, 0.9, 0.99), peak_windows=(10,))
    fc = m.predict(f, 12)
    # flat through its gaps: nothing moved, no shift; read as zeros, each gap's end would be a jump of +50
    assert m.last_shift[0].tolist() == [[0.0, 0.0, 0.0]] and fc.peak_over(10, 0.9)[0] == 50.0
    zeros = f.fillna(0.0)
    m0 = make_baseline("naive+peak", 48, (0.5, 0.9, 0.99), peak_windows=(10,))
    m0.predict(zeros, 12)
    assert m0.last_shift[0, 0, 1] > 10                 # what reading the gap as zero would have held for
