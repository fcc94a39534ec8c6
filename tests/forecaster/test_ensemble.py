"""The LSTM + baseline blend (#10.3): fitted only before the scored window, resolved by the daemon as scored."""

import numpy as np
import pytest

from daemon.config import Config
from daemon.forecasting.retrain import retrain_on
from forecaster import registry
from forecaster.baselines import Naive, SeasonalNaive
from forecaster.ensemble import Blend, combine, fit_blend
from forecaster.lstm import Conformal, LSTMForecaster, QuantileLSTM
from forecaster.selection import resolve
from forecaster.train import train
from tests.forecaster.test_models import SPEC, periodic_frame

QS = (0.5, 0.9, 0.99)


def test_combine_weights_orders_and_keeps_the_side_that_has_a_forecast():
    a = np.array([[[1.0, 2.0, 3.0]], [[np.nan, np.nan, np.nan]]])
    b = np.array([[[3.0, 4.0, 9.0]], [[5.0, 6.0, 7.0]]])
    out = combine(a, b, 0.25)
    assert np.allclose(out[0, 0], [2.5, 3.5, 7.5])
    assert np.allclose(out[1, 0], [5.0, 6.0, 7.0])            # the LSTM has nothing: the baseline alone
    both_missing = combine(np.full((1, 1, 3), np.nan), np.full((1, 1, 3), np.nan), 0.5)
    assert np.isnan(both_missing).all()                        # nothing known stays unknown, never zero


def test_fit_blend_finds_the_weight_that_cancels_opposite_biases():
    rng = np.random.default_rng(0)
    actual = rng.uniform(10, 20, size=(8, 3, 6))
    spread = np.array([0.0, 1.0, 2.0])
    over = actual[..., None] + 2.0 + spread                  # always 2 too high
    under = actual[..., None] - 2.0 + spread                 # always 2 too low
    far = actual[..., None] + 9.0 + spread
    ch = fit_blend({"lstm": over, "naive": under, "holt_winters": far}, actual, QS, lstms=("lstm",),
                   baselines=["naive", "holt_winters"])
    assert (ch.lstm, ch.baseline, ch.weight) == ("lstm", "naive", 0.5)
    assert ch.val_wql == min(ch.scores.values()) and len(ch.scores) == 6
    with pytest.raises(ValueError, match="no scored combination"):
        fit_blend({"lstm": over}, actual, QS, lstms=("lstm",), baselines=["naive"])


def test_blend_forecast_is_the_weighted_mix_of_its_two_models():
    f = periodic_frame()
    lstm = LSTMForecaster(QuantileLSTM(SPEC), "t")
    base = SeasonalNaive(48, SPEC.quantiles)
    got = Blend(lstm, base, 0.75).predict(f, 12)
    want = 0.75 * lstm.predict(f, 12).values + 0.25 * base.predict(f, 12).values
    assert np.allclose(got.values, want) and got.model == "lstm:t+seasonal_naive_48@0.75"
    assert (np.diff(got.values, axis=2) >= 0).all()
    with pytest.raises(ValueError, match="weight"):
        Blend(lstm, base, 1.5)


def _cfg():
    return Config(cycle={"horizon_steps": 12, "history_steps": 400}, forecaster={"season_steps": 48},
                  retrain={"min_improvement": 0.0, "epochs": 1})


def test_the_blend_is_fitted_without_the_held_out_window(tmp_path):
    # the same history with the held-out window replaced by something else entirely: the blend (partner,
    # weight, validation loss) must not move, since it may only be fitted on what precedes that window
    f = periodic_frame(n_tenants=4, steps=48 * 14, seed=2, noise=0.1)
    g = f.copy()
    g.iloc[-48:] = g.iloc[-48:].to_numpy()[::-1] * 3.0
    kw = dict(step_s=60, samples_per_epoch=256, epochs=1, progress=False, scored_on="simulator:default", with_ets=False,
              promote=False)
    a = retrain_on(f, _cfg(), model_dir=tmp_path / "a", **kw)
    b = retrain_on(g, _cfg(), model_dir=tmp_path / "b", **kw)
    assert a.report["blend"] is not None and a.report["blend"] == b.report["blend"]
    assert "lstm_blend" in a.report["models"]                # and it was scored on the held-out window
    assert "lstm_blend+conformal" in a.report["models"]      # also recalibrated (tests/forecaster/test_calibration.py)
    assert a.report["models"]["lstm_blend"]["wql"] != b.report["models"]["lstm_blend"]["wql"]


def test_a_blend_in_use_is_run_by_the_daemon_exactly_as_scored(tmp_path):
    f = periodic_frame(n_tenants=4, steps=48 * 8, seed=3)
    res = train(f, SPEC, epochs=1, samples_per_epoch=256, batch_size=64, progress=False)
    v = registry.save_version(tmp_path, res.model, {"metrics": {}}, version="v1")
    entry = {"kind": "lstm", "name": "lstm:v1", "version": v, "scored_on": "simulator:default", "step_s": 60,
             "horizon": 12, "season": 48, "quantiles": list(QS), "conformal": True,
             "blend": {"lstm": "lstm_conformal", "baseline": "naive", "weight": 0.25, "val_wql": 0.1}}
    registry.set_in_use(tmp_path, entry)
    model = resolve(registry.read_in_use(tmp_path), tmp_path, QS)
    assert isinstance(model, Blend) and isinstance(model.lstm, Conformal) and isinstance(model.baseline, Naive)
    lstm = Conformal(registry.load_version(tmp_path, v))
    want = combine(lstm.predict(f, 12).values, Naive(QS).predict(f, 12).values, 0.25)
    assert np.allclose(model.predict(f, 12).values, want)


def test_a_baseline_reuses_its_spread_only_for_refresh_forecasts():
    from forecaster.selection import make_baseline

    f = periodic_frame(n_tenants=3, steps=48 * 6, seed=4)
    fresh = make_baseline("naive", 48, QS)
    reuse = make_baseline("naive", 48, QS, refresh=3)
    assert np.allclose(reuse.predict(f.iloc[:-5], 12).values, fresh.predict(f.iloc[:-5], 12).values)
    later = f.iloc[:-1]
    spread_old = reuse.predict(later, 12).values - later.to_numpy()[-1][:, None, None]  # 2nd call: old spread
    spread_new = fresh.predict(later, 12).values - later.to_numpy()[-1][:, None, None]
    assert not np.allclose(spread_old, spread_new)            # it reused the spread computed 4 steps earlier
    assert np.allclose(make_baseline("naive", 48, QS, refresh=3).predict(later, 12).values,
                       fresh.predict(later, 12).values)      # and a new one computes it afresh
