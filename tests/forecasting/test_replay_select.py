"""`retrain --select-by replay` replays every LSTM variant on the same LSTM: within the replay the LSTM's past peaks
at each recalibration are computed once for all of them (forecaster/memo.py), also in the replay's forecast
prefetch thread, with the costs exactly as without the sharing; and `retrain.replay_refresh_every` sets how often
a candidate recalibrates (most of the replay's time)."""

import numpy as np

from daemon.config import Config
from daemon.forecasting import retrain
from daemon.forecasting.replay_select import ReplayCluster, replay_scores
from daemon.sim.workloads import generate
from forecaster import memo
from forecaster.calibration import PeakCalibrated, Recalibrated
from forecaster.lstm import LSTMSpec
from tests.forecaster.test_memo import random_lstm


def count_past_peak_batches(lstm) -> list[int]:
    calls: list[int] = []
    inner = lstm._peaks_at
    lstm._peaks_at = lambda *a, **k: calls.append(1) or inner(*a, **k)
    return calls


def _case():
    w = generate(8, 48 * 7, 48, seed=3, high_share=0.25, step_s=60)
    cols = [str(c) for c in w.demand.columns]
    cluster = ReplayCluster(dict(zip(cols, w.tiers)), 48, 8, {c: int(g) for c, g in zip(cols, w.job_gpus)})
    cfg = Config(cycle={"horizon_steps": 6, "history_steps": 48 * 3}, forecaster={"season_steps": 48},
                 policy={"lead_time_steps": 6, "preempt_lead_steps": 3})
    return w.demand, cluster, cfg


def _scores(frame, cluster, cfg, lstm, refresh):
    def make(inner_conformal, moving):
        return lambda: PeakCalibrated(Recalibrated(lstm, refresh=refresh) if inner_conformal else lstm, (3, 6),
                                      refresh=refresh, moving_only=moving)

    models = {"lstm+peak": make(False, True), "lstm+peak_all": make(False, False),
              "lstm_conformal+peak": make(True, True)}
    return replay_scores(frame, 48 * 6, cfg, cluster, models, weights={"high": 4.0, "normal": 1.0, "low": 0.25})


def test_lstm_variants_share_their_past_peaks_in_a_replay_and_cost_exactly_the_same():
    frame, cluster, cfg = _case()
    alone_lstm = random_lstm()
    alone_calls = count_past_peak_batches(alone_lstm)
    alone = _scores(frame, cluster, cfg, alone_lstm, refresh=24)
    shared_lstm = random_lstm()
    shared_calls = count_past_peak_batches(shared_lstm)
    with memo.shared_past_peaks():
        shared = _scores(frame, cluster, cfg, shared_lstm, refresh=24)
    assert shared == alone
    assert any(row["preemptions"] or row["high_unmet_gpu_min"] for row in alone.values())   # something to rank
    # every candidate recalibrates at the same replay steps: shared, once for all three
    assert len(shared_calls) > 4 and len(alone_calls) == 3 * len(shared_calls)


def test_the_refresh_interval_sets_how_often_a_replayed_candidate_recalibrates():
    frame, cluster, cfg = _case()
    counts = {}
    for every in (4, 24):
        lstm = random_lstm()
        calls = count_past_peak_batches(lstm)
        replay_scores(frame, 48 * 6, cfg, cluster, {"lstm+peak": lambda: PeakCalibrated(lstm, (3, 6), refresh=every)},
                      weights={"high": 1.0})
        counts[every] = len(calls)
    assert counts[24] > 2 and counts[4] > 5 * counts[24]


def test_the_memo_keeps_no_more_than_its_byte_cap(monkeypatch):
    lstm = random_lstm()
    calls = count_past_peak_batches(lstm)
    frame, _, _ = _case()
    hist = frame.iloc[:200]
    one = lstm.peaks_at(hist, np.array([100, 120]), 6, (3, 6)).nbytes
    calls.clear()
    monkeypatch.setattr(memo, "MAX_BYTES", one)
    with memo.shared_past_peaks():
        a = lstm.peaks_at(hist, np.array([100, 120]), 6, (3, 6))
        lstm.peaks_at(hist, np.array([100, 130]), 6, (3, 6))      # over the cap: computed, not kept
        lstm.peaks_at(hist, np.array([100, 130]), 6, (3, 6))
        b = lstm.peaks_at(hist, np.array([100, 120]), 6, (3, 6))  # kept
        assert memo.memo_size() == 1
    assert len(calls) == 3 and np.array_equal(a, b, equal_nan=True)


def test_retrain_replays_its_candidates_within_one_shared_scope(monkeypatch):
    """`_replay_candidates` opens the scope around the whole replay (each candidate in turn)."""
    seen = []

    def fake_scores(*a, **k):
        seen.append(memo._MEMO.get() is not None)
        return {"reactive": {"cost": 0.0}}

    monkeypatch.setattr(retrain, "replay_scores", fake_scores)
    cfg = Config()
    retrain._replay_candidates(None, 0, cfg, ReplayCluster(), {"naive": None, "lstm": None}, {}, ["naive"],
                               ["lstm"],
                               {"naive": 1.0, "lstm": 2.0}, None, None, None,
                               LSTMSpec(season=48, horizon=6, context=24), {"lead": 6, "preempt": 3}, 100)
    assert seen == [True] and memo._MEMO.get() is None

