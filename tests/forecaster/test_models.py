import json

import numpy as np
import pandas as pd
import pytest
import torch

from daemon.config import Config
from daemon.forecasting.choose import build
from forecaster import backtest, registry
from forecaster.baselines import HoltWinters, SeasonalNaive
from forecaster.lstm import LSTMForecaster, LSTMSpec, QuantileLSTM
from forecaster.metrics import coverage, weighted_quantile_loss
from forecaster.selection import StartupSelection, make_baseline
from forecaster.series import ffill, fill_short_gaps, to_frame
from forecaster.train import train

SPEC = LSTMSpec(context=24, horizon=12, season=48, hidden=16, step_s=60)


def periodic_frame(n_tenants=6, steps=48 * 12, seed=0, noise=0.1):
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    cols = {}
    for i in range(n_tenants):
        level = 10 * (i + 1)
        day = np.sin(2 * np.pi * t / 48 + i)
        ar = np.zeros(steps)
        e = rng.normal(0, noise * level, steps)
        for k in range(1, steps):
            ar[k] = 0.95 * ar[k - 1] + e[k]
        cols[f"t{i}"] = np.maximum(level * (1 + 0.5 * day) + ar, 0)
    return pd.DataFrame(cols, index=idx).rename_axis(columns="tenant")


def test_to_frame_keeps_missing_as_nan_not_zero():
    s = pd.DataFrame({"time": pd.to_datetime(["2026-01-01T00:00Z", "2026-01-01T00:01Z", "2026-01-01T00:05Z"]),
                      "tenant": ["a", "a", "a"], "value": [4.0, 6.0, 8.0]})
    f = to_frame(s, 60)
    assert len(f) == 6
    assert f["a"].isna().sum() == 3 and (f["a"].fillna(-1) != 0).all()


def test_fill_short_gaps_bridges_only_short_ones():
    idx = pd.date_range("2026-01-01", periods=12, freq="min", tz="UTC")
    v = [1, np.nan, 3, np.nan, np.nan, np.nan, np.nan, np.nan, 9, 10, np.nan, 12]
    out = fill_short_gaps(pd.DataFrame({"a": v}, index=idx), max_gap_steps=2)["a"].to_numpy()
    assert out[1] == 1 and out[10] == 10
    assert np.isnan(out[3:8]).all()
    assert not (out[np.isfinite(out)] == 0).any()


def test_seasonal_naive_repeats_last_season_and_orders_quantiles():
    f = periodic_frame(noise=0.0)
    fc = SeasonalNaive(48).predict(f, 12)
    expect = f.to_numpy()[-48:-36].T
    assert np.allclose(fc.quantile(0.5), expect, atol=1e-9)
    assert (np.diff(fc.values, axis=2) >= 0).all()


def test_seasonal_naive_unknown_tenant_stays_unknown():
    f = periodic_frame()
    f["dark"] = np.nan
    fc = SeasonalNaive(48).predict(f, 12)
    assert np.isnan(fc.values[-1]).all()
    assert np.isfinite(fc.values[:-1]).all()


def test_holt_winters_tracks_a_seasonal_series():
    f = periodic_frame(n_tenants=2, noise=0.01)
    hw = HoltWinters(48, agg=4, fit_window_seasons=8)
    fc = hw.predict(f.iloc[:-12], 12)
    wql = weighted_quantile_loss(fc.values, f.iloc[-12:].to_numpy().T, fc.quantiles)
    assert wql < 0.1


def test_metrics():
    a = np.array([[1.0, 2.0, np.nan]])
    perfect = np.repeat(a[..., None], 3, axis=2)
    assert weighted_quantile_loss(np.nan_to_num(perfect), a, (0.1, 0.5, 0.9)) == 0.0
    assert weighted_quantile_loss(np.zeros((1, 3, 1)), a, (0.5,)) > 0
    assert coverage(np.array([[1.0, 1.0, 5.0]]), a) == 0.5
    assert coverage(np.array([[1.0, 3.0, 5.0]]), a, strict=True) == 0.5   # a tie at the p90 is not under it


def test_training_is_deterministic_with_a_seed():
    f = periodic_frame()
    a = train(f, SPEC, epochs=2, samples_per_epoch=512, batch_size=64, seed=3, progress=False)
    b = train(f, SPEC, epochs=2, samples_per_epoch=512, batch_size=64, seed=3, progress=False)
    for (ka, va), (kb, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_lstm_beats_seasonal_naive_on_held_out_data():
    f = periodic_frame(n_tenants=8, steps=48 * 20, seed=1, noise=0.15)
    cut = 48 * 16
    res = train(f.iloc[:cut], SPEC, epochs=12, samples_per_epoch=4096, batch_size=128, seed=0, progress=False,
                patience=3)
    models = {"lstm": LSTMForecaster(res.model), "snaive": SeasonalNaive(48, SPEC.quantiles)}
    bt = backtest.run(f, models, start=cut, horizon=12, stride=6, history_steps=48 * 4, quantiles=SPEC.quantiles,
                      season=48)
    m = bt.report["models"]
    assert m["lstm"]["wql"] < m["snaive"]["wql"]


def test_lstm_forecast_shape_and_missing_tenant():
    model = LSTMForecaster(QuantileLSTM(SPEC))
    f = periodic_frame()
    f.iloc[-30:, 0] = np.nan
    fc = model.predict(f, 12)
    assert fc.values.shape == (6, 12, 3)
    assert np.isnan(fc.values[0]).all()          # no recent sample: no forecast
    assert np.isfinite(fc.values[1:]).all()
    assert (np.diff(fc.values[1:], axis=2) >= 0).all()
    with pytest.raises(ValueError, match="history"):
        model.predict(f.iloc[:20], 12)


def _saved(tmp_path):
    res = train(periodic_frame(), SPEC, epochs=1, samples_per_epoch=256, batch_size=64, progress=False)
    v = registry.save_version(tmp_path, res.model, {"metrics": {"wql": 1.0}}, version="v1")
    registry.promote(tmp_path, v, "test")
    return v


def test_registry_round_trip(tmp_path):
    v = _saved(tmp_path)
    m = registry.load_current(tmp_path)
    assert m.version == v and m.spec == SPEC
    meta = json.loads((tmp_path / v / "meta.json").read_text())
    assert len(meta["sha256"]) == 64 and meta["spec"]["season"] == 48


def test_corrupt_model_is_refused_and_daemon_falls_back(tmp_path, caplog):
    v = _saved(tmp_path)
    registry.set_in_use(tmp_path, {"kind": "lstm", "name": f"lstm:{v}", "version": v, "scored_on": "simulator:default",
                                   "step_s": 60, "horizon": 60, "season": 48})
    p = tmp_path / v / "model.pt"
    data = bytearray(p.read_bytes())
    data[200] ^= 0xFF
    p.write_bytes(bytes(data))
    with pytest.raises(registry.ModelError, match="checksum mismatch"):
        registry.load_current(tmp_path)
    cfg = Config(forecaster={"model_dir": tmp_path})
    fc, note = build(cfg)
    assert isinstance(fc, StartupSelection) and "checksum mismatch" in note
    with pytest.raises(registry.ModelError):
        build(Config(forecaster={"model_dir": tmp_path, "kind": "lstm"}))


def test_mismatched_model_is_refused(tmp_path):
    v = _saved(tmp_path)
    meta_p = tmp_path / v / "meta.json"
    meta = json.loads(meta_p.read_text())
    meta["spec"]["hidden"] = 32
    meta_p.write_text(json.dumps(meta))
    with pytest.raises(registry.ModelError, match="does not match"):
        registry.load_current(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(registry.ModelError, match="unreadable manifest"):
        registry.load_current(tmp_path)


def test_backtest_writes_json_and_png(tmp_path):
    f = periodic_frame()
    bt = backtest.run(f, {"snaive": SeasonalNaive(48)}, start=48 * 10, horizon=12, stride=12, history_steps=200,
                      quantiles=(0.5, 0.9, 0.99), season=48)
    j, p = backtest.write_report(bt, tmp_path)
    rep = json.loads(j.read_text())
    assert rep["origins"] == 8 and "h1-12" in rep["models"]["snaive"]["wql_by_horizon"]
    assert p.read_bytes()[:4] == b"\x89PNG"


def test_two_versions_saved_in_one_second_get_distinct_names(tmp_path):
    res = train(periodic_frame(), SPEC, epochs=1, samples_per_epoch=64, batch_size=64, progress=False)
    a = registry.save_version(tmp_path, res.model, {})
    b = registry.save_version(tmp_path, res.model, {})
    assert a != b and (tmp_path / a).is_dir() and (tmp_path / b).is_dir()


# --- fair baselines: quantiles from each baseline's own h-step errors (forecaster/calibration.py) ---

from forecaster.baselines import ExpSmoothing, Naive, SeasonalNaiveDW, hw_forecasts, standard_baselines  # noqa: E402
from forecaster.calibration import conformal_shift, nan_quantiles  # noqa: E402


def test_nan_quantiles_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 7, 5))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:, 0, 0] = np.nan
    got, n = nan_quantiles(x, (0.1, 0.5, 0.9, 0.99), axis=0)
    with np.errstate(all="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore")
        want = np.moveaxis(np.nanquantile(x, (0.1, 0.5, 0.9, 0.99), axis=0), 0, -1)
    assert np.allclose(got, want, equal_nan=True) and n[0, 0] == 0


@pytest.mark.parametrize("name", ["naive", "seasonal_naive_daily", "holt_winters"])
def test_baseline_p90_coverage_is_near_nominal(name):
    # AR(1) noise around a daily shape: h-step errors grow with h, one-step residuals would understate them
    f = periodic_frame(n_tenants=6, steps=48 * 24, seed=2, noise=0.1)
    m = standard_baselines(48, (0.5, 0.9, 0.99), len(f), ets_agg=4)[name]
    bt = backtest.run(f, {name: m}, start=48 * 12, horizon=12, stride=5, history_steps=48 * 8,
                      quantiles=(0.5, 0.9, 0.99), season=48, max_origins=80)
    cov = bt.report["models"][name]["coverage_p90"]
    assert 0.84 <= cov <= 0.95, cov


def test_quantiles_widen_with_the_horizon_step():
    # a random walk: the naive forecast's error after h steps has spread ~ sqrt(h)
    rng = np.random.default_rng(0)
    idx = pd.date_range("2026-01-01", periods=3000, freq="min", tz="UTC")
    f = pd.DataFrame({"rw": 1000 + np.cumsum(rng.normal(0, 1, 3000))}, index=idx)
    fc = Naive((0.05, 0.5, 0.95), error_window=2500).predict(f, 25)
    width = fc.values[0, :, 2] - fc.values[0, :, 0]
    assert width[-1] > 3 * width[0]
    assert 3.0 < width[0] < 4.0           # 2 x 1.645 sigma at one step
    # Holt-Winters too: its spread at step h comes from its own h-step errors (one-step residuals scaled by a
    # constant, as it once was, give the same width at every step)
    hw = standard_baselines(48, (0.05, 0.5, 0.95), len(f), ets_agg=4)["holt_winters"].predict(f, 25)
    hw_width = hw.values[0, :, 2] - hw.values[0, :, 0]
    assert hw_width[-1] > 2.5 * hw_width[0], hw_width


def test_holt_winters_multi_step_recursion_matches_statsmodels():
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    rng = np.random.default_rng(0)
    t = np.arange(400)
    y = 10 + 3 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.3, 400) + 0.01 * t
    fit = ExponentialSmoothing(y, trend="add", damped_trend=True, seasonal="add", seasonal_periods=24,
                               initialization_method="heuristic").fit()
    lvl, tr, se = (np.asarray(a) for a in (fit.level, fit.trend, fit.season))
    phi = float(fit.params["damping_trend"])
    ours = hw_forecasts(lvl, tr, se, phi, 24, np.array([400]), 50)[0]
    theirs = np.asarray(fit.forecast(50))
    steps = np.arange(1, 51)
    assert np.allclose(ours[steps % 24 != 0], theirs[steps % 24 != 0])
    # an earlier origin: one step ahead is statsmodels' own fitted value
    ends = np.arange(30, 399)
    assert np.allclose(hw_forecasts(lvl, tr, se, phi, 24, ends, 1)[:, 0], np.asarray(fit.fittedvalues)[ends])


def test_daily_weekly_naive_uses_both_seasons():
    idx = pd.date_range("2026-01-05", periods=48 * 7 * 3, freq="min", tz="UTC")
    t = np.arange(len(idx))
    week = np.where((t // 48) % 7 >= 5, 0.3, 1.0)        # "weekends" are quiet
    f = pd.DataFrame({"a": 100 * week * (1 + 0.5 * np.sin(2 * np.pi * t / 48))}, index=idx)
    h = 48 * 11 + 40                                     # a Friday evening: tomorrow is a quiet day
    cut = f.iloc[:h]
    dw = SeasonalNaiveDW(48).predict(cut, 48)
    d = SeasonalNaive(48).predict(cut, 48)
    actual = f.iloc[h:h + 48].to_numpy().T
    err_dw = np.abs(dw.quantile(0.5) - actual).mean()
    err_d = np.abs(d.quantile(0.5) - actual).mean()
    assert err_dw < err_d
    assert "seasonal_naive_dw" in standard_baselines(48, (0.5, 0.9), 48 * 8)
    assert "seasonal_naive_dw" not in standard_baselines(48, (0.5, 0.9), 48 * 6)


def test_holt_winters_is_offered_only_where_the_history_holds_two_seasons():
    # with less, the seasonal fit cannot run and the model would be the last value with no spread at all,
    # scored under Holt-Winters' name (the daemon's default 2-day history of 1-minute steps is exactly that)
    assert "holt_winters" not in standard_baselines(1440, (0.5, 0.9), 2880)
    assert "holt_winters" in standard_baselines(1440, (0.5, 0.9), 2880 + 30)
    f = periodic_frame(n_tenants=2, steps=48 * 2, seed=3, noise=0.1)
    short = HoltWinters(48, (0.5, 0.9), agg=4).predict(f, 12)
    assert np.allclose(short.quantile(0.9), short.quantile(0.5))   # what the gate keeps out of the scoring



def _counts(rate: float, steps: int, tenants: int, seed: int) -> pd.DataFrame:
    """Requests per 10 s around a steady rate: each step's value is mostly noise."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-01-01", periods=steps, freq="10s", tz="UTC")
    return pd.DataFrame(rng.poisson(rate, size=(steps, tenants)).astype(float), index=idx,
                        columns=[f"t{i}" for i in range(tenants)])


def test_exp_smoothing_levels_match_statsmodels():
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing

    vals = _counts(30, 300, 4, 0).to_numpy().T.copy()       # [tenant, time]
    vals[1, :40] = np.nan                                   # starts late
    vals[2, :40] = np.nan                                   # starts late too (filtered with tenant 1)
    vals[3, 100:130] = np.nan                               # a gap: the level holds, it is not fed the last value
    for a in (0.1, 0.5, 1.0):
        got = ExpSmoothing.levels(vals, a)
        for i in range(4):
            seen = np.flatnonzero(np.isfinite(vals[i]))
            y = vals[i, seen]
            fit = SimpleExpSmoothing(y, initialization_method="known", initial_level=y[0]).fit(
                smoothing_level=a, optimized=False)
            # statsmodels' fitted value at t is the level after t - 1; ours after t
            assert np.allclose(got[i, seen[:-1]], np.asarray(fit.fittedvalues)[1:])
            assert np.isnan(got[i, :seen[0]]).all()
        assert np.allclose(got[3, 100:130], got[3, 99])       # held through the gap
    assert a == 1.0 and np.allclose(got[0], vals[0])            # a = 1: the last value


def test_exp_smoothing_smooths_noise_and_stays_naive_on_a_walk():
    qs = (0.5, 0.9, 0.99)
    noisy = _counts(30, 600, 3, 1)
    es = ExpSmoothing(qs)
    start = 480
    bt = backtest.run(noisy, {"naive": Naive(qs), "exp_smoothing": es}, start=start, horizon=30,
                      history_steps=start, quantiles=qs, season=60)
    wql = {k: v["wql"] for k, v in bt.report["models"].items()}
    assert wql["exp_smoothing"] < 0.8 * wql["naive"], wql
    assert es.spread._value[1] < 0.5                       # the level is smoothed, not the last value
    rng = np.random.default_rng(2)
    walk = noisy.copy()
    walk[:] = 1000 + np.cumsum(rng.normal(0, 5, walk.shape), axis=0)
    a = ExpSmoothing(qs).predict(walk, 30)
    assert np.allclose(a.values, Naive(qs).predict(walk, 30).values)   # no noise to remove: a = 1, the last value
    # what a recalibration replays (forecasts_at) is the same model: the chosen weight, not the last value
    at = ExpSmoothing(qs).forecasts_at(noisy, np.array([len(noisy)]), 30)[0]
    assert np.allclose(at, ExpSmoothing(qs).predict(noisy, 30).values)
    assert not np.allclose(at, Naive(qs).forecasts_at(noisy, np.array([len(noisy)]), 30)[0])


@pytest.mark.filterwarnings("error::RuntimeWarning")   # a tenant with nothing seen has no scale, not a warning
def test_exp_smoothing_never_turns_missing_data_into_load():
    f = _counts(30, 400, 3, 3)
    f.iloc[:, 0] = np.nan                                  # never reported
    f.iloc[:150, 1] = np.nan                               # started late
    f.iloc[-20:, 2] = np.nan                               # went quiet: the last level is carried, not zero
    fc = ExpSmoothing((0.5, 0.9)).predict(f, 12)
    assert np.isnan(fc.values[0]).all()
    assert np.isfinite(fc.values[1:]).all() and (fc.quantile(0.5)[1:] > 10).all()
    v = f.to_numpy().T
    point = ExpSmoothing((0.5, 0.9))._point(v, ffill(v), np.array([v.shape[1]]), 12, 0.1)[0]
    assert np.allclose(point[2], ExpSmoothing.levels(v, 0.1)[2, -21])   # the level after its last sample, held
    young = f.copy()
    young.iloc[:-5, 1] = np.nan                            # five samples so far: a level from them, not from zeros
    lvl = ExpSmoothing.levels(young.to_numpy().T, 0.02)[1, -1]
    seen = young.iloc[-5:, 1].to_numpy()
    assert seen.min() <= lvl <= seen.max()
    assert "exp_smoothing" in standard_baselines(60, (0.5, 0.9), 400)
    assert make_baseline("exp_smoothing+conformal", 60, (0.5, 0.9)).predict(f, 12).values.shape == (3, 12, 2)


def test_recent_max_is_the_most_used_over_the_last_window_by_hand_and_a_gap_is_never_zero():
    from forecaster.baselines import RecentMax

    idx = pd.date_range("2026-01-01", periods=8, freq="min", tz="UTC")
    f = pd.DataFrame({"a": [1, 5, 2, np.nan, 3, 1, 1, 1.0], "b": [np.nan, np.nan, np.nan, 4, np.nan, 2, np.nan, np.nan],
                      "c": [np.nan] * 8}, index=idx)
    v = f.to_numpy().T
    point = RecentMax((0.5, 0.9), window=3)._point(v, ffill(v), np.array([1, 3, 5, 8]), 2)    # [origin, tenant, h]
    # a: max(1); max(1, 5, 2); max(2, 2 carried over the gap, 3); max(1, 1, 1). b: nothing seen yet twice; 4 (the
    # gap carries it); 2. c: never reported, NaN throughout
    assert point[:, 0, 0].tolist() == [1, 5, 3, 1] and point[2:, 1, 1].tolist() == [4, 2]
    assert np.isnan(point[:2, 1]).all() and np.isnan(point[:, 2]).all()
    assert np.isnan(make_baseline("recent_max", 60, (0.5, 0.9)).predict(f, 4).values[2]).all()
    with pytest.raises(ValueError):
        RecentMax(window=0)
    # a one-step dip between two jobs: naive forecasts the dip, the recent max the level the next job returns to
    dip = pd.DataFrame({"a": [8.0] * 30 + [0.0]}, index=pd.date_range("2026-01-01", periods=31, freq="min", tz="UTC"))
    vd = dip.to_numpy().T
    assert RecentMax()._point(vd, vd, np.array([31]), 1)[0, 0, 0] == 8.0
    assert Naive()._point(vd, vd, np.array([31]), 1)[0, 0, 0] == 0.0
    assert "recent_max" in standard_baselines(60, (0.5, 0.9), 400)


def test_conformal_shift_restores_nominal_coverage():
    rng = np.random.default_rng(1)
    actual = rng.normal(10, 2, size=(40, 3, 12))
    pred = np.broadcast_to(np.array([10.0, 10.5, 11.0])[None, None, None, :], (40, 3, 12, 3)).copy()
    shift = conformal_shift(pred, actual, (0.5, 0.9, 0.99))
    fixed = pred + shift[None, :, None, :]
    cov90 = (actual <= fixed[..., 1]).mean()
    assert abs(cov90 - 0.9) < 0.01 and (actual <= pred[..., 1]).mean() < 0.7


def test_conformal_recalibration_brings_p90_coverage_near_nominal():
    from forecaster.lstm import Conformal

    f = periodic_frame(n_tenants=6, steps=48 * 16, seed=4, noise=0.15)
    res = train(f.iloc[: 48 * 10], SPEC, epochs=1, samples_per_epoch=256, batch_size=64, progress=False, seed=1)
    raw = LSTMForecaster(res.model, "raw")
    models = {"raw": raw, "conformal": Conformal(raw, origins=24)}
    bt = backtest.run(f, models, start=48 * 12, horizon=12, stride=4, history_steps=48 * 4,
                      quantiles=SPEC.quantiles, season=48, max_origins=40)
    m = bt.report["models"]
    assert abs(m["conformal"]["coverage_p90"] - 0.9) < abs(m["raw"]["coverage_p90"] - 0.9)
    assert 0.8 <= m["conformal"]["coverage_p90"] <= 0.97, m["conformal"]["coverage_p90"]
    assert 0 <= m["conformal"]["peak_coverage_p90"] <= 1


def test_old_specs_keep_their_scale_floor():
    d = SPEC.to_dict()
    d.pop("scale_floor")
    assert LSTMSpec.from_dict(d).scale_floor == 1.0


def test_holt_winters_fixed_parameter_filter_is_statsmodels_bit_for_bit():
    """`hw_filter` replaces statsmodels' fit(optimized=False) between re-estimations: the same states exactly, so
    every Holt-Winters forecast is the one statsmodels' filter gave."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    from forecaster.baselines import hw_filter

    rng = np.random.default_rng(3)
    for n, m in ((120, 24), (200, 48), (97, 12)):
        t = np.arange(n)
        y = 40 + 9 * np.sin(2 * np.pi * t / m) + rng.normal(0, 2, n) + 0.05 * t
        model = ExponentialSmoothing(y, trend="add", damped_trend=True, seasonal="add", seasonal_periods=m,
                                     initialization_method="heuristic")
        params = {k: float(v) for k, v in model.fit().params.items() if k in HoltWinters._PARAMS}
        fit = model.fit(optimized=False, **params)
        for ours, theirs in zip(hw_filter(y, m, params), (fit.level, fit.trend, fit.season)):
            assert np.array_equal(ours, np.asarray(theirs, dtype=float))



def _count_statsmodels_models(monkeypatch) -> list:
    """A list that gets one entry per statsmodels ExponentialSmoothing built from now on (the test's monkeypatch
    undoes it)."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    built = []
    real_init = ExponentialSmoothing.__init__

    def counting_init(self, *a, **k):
        built.append(1)
        real_init(self, *a, **k)

    monkeypatch.setattr(ExponentialSmoothing, "__init__", counting_init)
    return built


def test_holt_winters_builds_a_statsmodels_model_only_to_re_estimate(monkeypatch):
    """Between re-estimations Holt-Winters filtered with known parameters through statsmodels' fit(optimized=False):
    a model, a heuristic start, pandas frames and a results object per tenant and forecast (20 ms a tenant), most
    of retrain's time scoring holt_winters+conformal (1,780 such fits for 10 tenants at 24 origins). `hw_filter` does
    the filter; statsmodels is built only for the optimisation, every `refit_every` forecasts."""
    built = _count_statsmodels_models(monkeypatch)
    f = periodic_frame(n_tenants=2, steps=48 * 8)
    hw = HoltWinters(48, (0.5, 0.9), agg=4, refit_every=3)
    for end in range(48 * 6, 48 * 6 + 7):
        hw.predict(f.iloc[:end], 12)
    assert len(built) == 2 * 3      # two tenants, re-estimated at forecasts 1, 4 and 7


def test_a_recalibrated_holt_winters_re_estimates_once_per_refit_every_forecasts(monkeypatch):
    """A recalibrated Holt-Winters replays itself at 16 past origins per forecast, and those replays counted as
    forecasts: the parameters were re-optimised (a second a tenant) every 1.4 forecasts instead of every
    `refit_every` (24), in retrain's scoring (a refresh per forecast) as in the daemon (every 10: every 9 forecasts).
    Only a forecast from a newer history counts now."""
    built = _count_statsmodels_models(monkeypatch)
    f = periodic_frame(n_tenants=2, steps=48 * 8)
    m = make_baseline("holt_winters+conformal", 48, (0.5, 0.9))
    m.model.agg = 4
    for end in range(48 * 6, 48 * 6 + 5):
        m.predict(f.iloc[:end], 12)
    assert len(built) == 2          # one optimisation per tenant, at the first forecast


@pytest.mark.security
def test_a_model_whose_metadata_sizes_another_network_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """meta.json is not under the checksum (it holds it), and its spec sizes the network load_version builds before
    load_state_dict compares it with the weights: hidden 20,000 made a 10 GB network, allocated and initialised, to
    be refused after. Now the spec is shaped on torch's meta device and compared with model.pt first, in one line;
    context and season, which no weight bounds, are at most registry.MAX_SPEC_STEPS."""
    import forecaster.lstm as lstm

    v = _saved(tmp_path)
    meta_p = tmp_path / v / "meta.json"
    meta = json.loads(meta_p.read_text())
    built = []
    real = lstm.QuantileLSTM

    def spy(spec):
        if torch.get_default_device().type != "meta":
            built.append(spec.hidden)
        return real(spec)

    monkeypatch.setattr(lstm, "QuantileLSTM", spy)
    # hidden 4,000: about 400 MB built on the old code
    meta_p.write_text(json.dumps({**meta, "spec": {**meta["spec"], "hidden": 4_000}}))
    with pytest.raises(registry.ModelError) as got:
        registry.load_current(tmp_path)
    assert "\n" not in str(got.value) and "hidden 4000" in str(got.value) and "model.pt has" in str(got.value)
    assert built == [], "the network of the metadata's spec was built"
    for key in ("context", "season"):
        meta_p.write_text(json.dumps({**meta, "spec": {**meta["spec"], key: 10**9}}))
        with pytest.raises(registry.ModelError, match=rf"spec\.{key} = 1000000000 is not a number of steps"):
            registry.load_current(tmp_path)
    meta_p.write_text(json.dumps(meta))
    assert registry.load_current(tmp_path).version == v and built == [SPEC.hidden]
