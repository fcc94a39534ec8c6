"""Calibration (#10.4) and the forecast hot path: recalibrated candidates, spreads refreshed off the forecast call."""

import json
import threading
import time

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.forecasting.choose import build
from daemon.forecasting.retrain import retrain_on
from forecaster import backtest, registry
from forecaster.baselines import Naive
from forecaster.calibration import Recalibrated, SpreadRefresh
from forecaster.selection import make_baseline, resolve
from tests.support.torch_threads import torch_thread_calls

QS = (0.5, 0.9, 0.99)


def calming_walks(n=6, days=12, calm_from_day=6, season=48, seed=0):
    """Random walks around 100 whose steps shrink from sd 4 to sd 1 on `calm_from_day`: a baseline's spread
    from its own errors over the last week still carries the wild days, so it over-covers the calm ones."""
    rng = np.random.default_rng(seed)
    steps = days * season
    sd = np.where(np.arange(steps) < calm_from_day * season, 4.0, 1.0)
    x = 100 + np.cumsum(rng.normal(0, 1, (steps, n)) * sd[:, None], axis=0)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    return pd.DataFrame(np.maximum(x, 0), index=idx, columns=[f"t{i}" for i in range(n)])


def calming_noise(n=6, days=12, calm_from_day=5, season=48, seed=1):
    """A daily shape plus noise whose sd drops from 4 to 1 on `calm_from_day`: seasonal naive's spread from its
    own errors over the last week still carries the wild days, so it over-covers the calm ones."""
    rng = np.random.default_rng(seed)
    steps = days * season
    sd = np.where(np.arange(steps) < calm_from_day * season, 4.0, 1.0)
    shape = 50 + 20 * np.sin(2 * np.pi * np.arange(steps) / season)
    x = shape[:, None] + rng.normal(0, 1, (steps, n)) * sd[:, None]
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    return pd.DataFrame(np.maximum(x, 0), index=idx, columns=[f"t{i}" for i in range(n)])


def test_recalibrated_baseline_covers_its_nominal_share_where_its_own_spread_does_not():
    f = calming_noise()
    season, h = 48, 6
    b = "seasonal_naive_daily"
    models = {b: make_baseline(b, season, QS), b + "+conformal": make_baseline(b + "+conformal", season, QS)}
    assert isinstance(models[b + "+conformal"], Recalibrated) and models[b + "+conformal"].name.endswith("+conformal")
    res = backtest.run(f, models, start=len(f) - 2 * season, horizon=h, stride=2, history_steps=len(f), quantiles=QS,
                       season=season, max_origins=48)
    raw, recal = res.report["models"][b], res.report["models"][b + "+conformal"]
    assert raw["coverage_p90"] > 0.95                        # a week of its errors still holds the wild days
    assert 0.86 <= recal["coverage_p90"] <= 0.93, recal
    assert recal["wql"] < raw["wql"]                          # calibrated is also the better quantile forecast


def test_recalibration_uses_only_the_history_it_is_given():
    f = calming_walks(days=8)
    m = make_baseline("naive+conformal", 48, QS)
    a = m.predict(f.iloc[:300], 6).values
    g = f.copy()
    g.iloc[300:] = 1e6                                        # the future changes, the forecast from t=300 does not
    assert np.allclose(make_baseline("naive+conformal", 48, QS).predict(g.iloc[:300], 6).values, a)


def test_spread_refresh_recomputes_in_the_background_and_serves_the_last_spread_meanwhile():
    calls: list[str] = []
    gate = threading.Event()

    def compute(v):
        def f():
            calls.append(threading.current_thread().name)
            if v == 2:
                gate.wait(10)                                 # a slow refresh: the forecast must not wait for it
            return v
        return f

    s = SpreadRefresh(every=2, background=True)
    assert s.get("k", compute(1)) == 1 and calls == ["MainThread"]   # the first one at once
    assert s.get("k", compute(9)) == 1                                 # reused
    assert s.get("k", compute(2)) == 1                                 # due: refreshed off this call
    assert s.get("k", compute(3)) == 1                                 # still running: no second job
    gate.set()
    s.wait(10)
    assert calls == ["MainThread", "spread-refresh"] and s.get("k", compute(4)) == 2
    assert s.get("other", compute(5)) == 5                             # another tenant set: computed at once


def test_a_due_background_refresh_waits_for_its_release_not_the_forecast_that_found_it_due():
    """The forecast that finds the spread due must not share the cores with its refresh: the refresh is held until
    `start_pending_refreshes()` (the daemon's cycle, once its work is done)."""
    from forecaster.calibration import start_pending_refreshes

    calls: list[str] = []

    def compute(v):
        def f():
            calls.append(threading.current_thread().name)
            return v
        return f

    s = SpreadRefresh(every=1, background=True)
    assert s.get("k", compute(1)) == 1                                 # the first one at once
    assert s.get("k", compute(2)) == 1 and s.pending                   # due: held, the last spread served
    time.sleep(0.2)
    assert calls == ["MainThread"] and s._job is None                  # nothing runs until released
    assert start_pending_refreshes() >= 1 and not s.pending
    s._job[1].join(10)
    assert calls == ["MainThread", "spread-refresh"] and s.get("k", compute(3)) == 2
    assert start_pending_refreshes() == 0                               # released once only


def test_a_due_background_refresh_nobody_releases_starts_at_the_next_forecast():
    calls: list[int] = []

    def compute(v):
        return lambda: calls.append(v) or v

    s = SpreadRefresh(every=1, background=True)
    s.get("k", compute(1))
    assert s.get("k", compute(2)) == 1 and s.pending and s._job is None   # due, held
    assert s.get("k", compute(3)) == 1 and not s.pending                  # next forecast: the held one starts
    s._job[1].join(10)
    assert calls == [1, 2] and s.get("k", compute(4)) == 2              # the held history's spread, not 3's


def test_daemon_baseline_refreshes_its_spread_off_the_forecast_call():
    f = calming_walks(days=8)
    seen: list[str] = []
    daemon = make_baseline("naive", 48, QS, refresh=2, background=True)
    inner = daemon._error_quantiles

    def spy(*a, **k):
        seen.append(threading.current_thread().name)
        return inner(*a, **k)

    daemon._error_quantiles = spy
    hist = [f.iloc[: len(f) - 10 + i] for i in range(4)]
    daemon.predict(hist[0], 12)
    daemon.predict(hist[1], 12)
    due = daemon.predict(hist[2], 12)                         # due: the spread of hist[0] still serves
    daemon.spread.wait(30)
    nxt = daemon.predict(hist[3], 12)                         # now the spread refreshed from hist[2]
    assert seen == ["MainThread", "spread-refresh"]
    last = lambda h: h.to_numpy()[-1][:, None, None]          # noqa: E731
    fresh = Naive(QS)
    assert np.allclose(due.values - last(hist[2]), fresh.predict(hist[0], 12).values - last(hist[0]))
    assert np.allclose(nxt.values - last(hist[3]), fresh.predict(hist[2], 12).values - last(hist[2]))


def test_resolved_models_refresh_in_the_background(tmp_path):
    for name in ("naive", "seasonal_naive_daily", "naive+conformal"):
        m = resolve({"kind": "baseline", "name": name, "season": 48, "scored_on": "x"}, tmp_path, QS)
        assert m.spread.background and m.spread.every == 10, name


def test_a_replay_resolves_models_that_refresh_in_the_forecast_call(tmp_path):
    """The replay bench's forecaster: the same refresh every 10 forecasts, but done in the call, so the forecast
    that gets the new spread is always the 11th (a background refresh lands where thread timing puts it)."""
    f = calming_walks(n=2, days=3)
    for name in ("naive", "naive+conformal"):
        m = resolve({"kind": "baseline", "name": name, "season": 48, "scored_on": "x"}, tmp_path, QS, background=False)
        assert not m.spread.background and m.spread.every == 10, name
        for i in range(11):
            m.predict(f.iloc[: len(f) - 20 + i], 12)
        assert m.spread.refreshes == 2, name                  # the first spread, then the 11th forecast's


def test_retrain_scores_recalibrated_baselines_and_records_the_winners_coverage(tmp_path):
    f = calming_walks(n=2, days=9)
    cfg = Config(cycle={"horizon_steps": 6, "history_steps": 400}, forecaster={"season_steps": 48,
                 "model_dir": tmp_path}, retrain={"min_improvement": 0.95, "epochs": 1})
    # no blend here (tests/forecaster/test_ensemble.py and the test above cover the recalibrated blend): a small,
    # quick retrain
    out = retrain_on(f, cfg, model_dir=tmp_path, step_s=60, samples_per_epoch=256, progress=False, with_ets=False,
                     scored_on="simulator:default", blend=False)
    models = out.report["models"]
    for b in ("naive", "seasonal_naive_daily", "seasonal_naive_dw"):
        assert f"{b}+conformal" in models, b
    entry = registry.read_in_use(tmp_path)
    assert entry["recalibrated"] == entry["name"].endswith("+conformal") and entry["kind"] == "baseline"
    assert entry["coverage_p90"] == models[entry["name"]]["coverage_p90"]
    assert entry["peak_coverage_p90"] == models[entry["name"]]["peak_coverage_p90"]
    # a recalibrated baseline in use is run exactly so by the daemon
    m = registry.read_manifest(tmp_path)
    m["in_use"] = {**entry, "name": "naive+conformal", "recalibrated": True}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    fc, note = build(cfg)
    assert fc.name == "naive+conformal" and isinstance(fc, Recalibrated) and fc.spread.background


def test_a_recalibrated_blend_is_replayed_with_todays_inner_spreads_in_the_daemon_as_in_a_backtest():
    """Recalibrating a blend replays it at past origins; its partner's spread and the LSTM's shifts are those of
    today's history then (never refreshed from a truncated one), so the daemon serves what retrain scored."""
    import torch

    from forecaster.lstm import LSTMForecaster, QuantileLSTM
    from tests.forecaster.test_models import SPEC

    torch.manual_seed(0)
    lstm = LSTMForecaster(QuantileLSTM(SPEC), "t")
    f = calming_noise(n=3, days=6)
    entry = {"conformal": True, "recalibrated": True, "season": 48,
             "blend": {"lstm": "lstm_conformal", "baseline": "naive", "weight": 0.5}}
    from forecaster.calibration import spreads_in
    from forecaster.selection import wrap_lstm

    scored = wrap_lstm(lstm, entry)                                    # as retrain scores it
    daemon = wrap_lstm(lstm, entry, refresh=10, background=True)       # as the daemon runs it
    forwards = []
    plain = lstm.predict
    lstm.predict = lambda h, n: forwards.append(len(h)) or plain(h, n)
    a = scored.predict(f, 12).values
    # today's forecast and 16 past origins for the LSTM's own shifts; the blend's replay at those same origins
    # reuses them (no second forward pass)
    assert len(forwards) == 17
    b = daemon.predict(f, 12).values
    assert np.allclose(a, b)
    inner = spreads_in(daemon)
    assert len(inner) == 3 and all(s.refreshes == 1 for s in inner)    # one each, all from today's history
    for s in inner:
        s.wait()
    assert all(s.refreshes == 1 and s._job is None for s in inner)


def test_a_background_refresh_runs_with_the_releasing_threads_torch_thread_count(monkeypatch):
    """torch's thread count is per thread: a spread refresh (a recalibrated LSTM replayed at 16 past origins) ran
    in its new thread with one OpenMP thread per core whatever the daemon's cycle had set (forecaster/threads.py)."""
    with torch_thread_calls(monkeypatch, start=1) as calls:
        s = SpreadRefresh(every=1, background=True)
        s.get("k", lambda: 1)
        s.get("k", lambda: 2)          # due: pending until released
        s.wait(10)                     # released here, in this thread
    assert ("spread-refresh", 1) in calls and s.get("k", lambda: 3) == 2
