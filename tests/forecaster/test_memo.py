"""Past peak forecasts shared within a scoring run (forecaster/memo.py): the backtest of candidates that wrap the
same model must score exactly as without the sharing, compute each model's past peaks once per history, and
never cache outside the scope (the daemon)."""

import contextlib

import numpy as np
import torch

from forecaster import backtest, memo
from forecaster.baselines import ExpSmoothing
from forecaster.calibration import PeakCalibrated, Recalibrated
from forecaster.ensemble import Blend
from forecaster.lstm import LSTMForecaster, LSTMSpec, QuantileLSTM
from tests.forecaster.test_lstm import noisy_frame

QS = (0.5, 0.9, 0.99)


def random_lstm() -> LSTMForecaster:
    spec = LSTMSpec(context=24, horizon=6, season=48, hidden=16, step_s=60, anchor="last", anchors=(3, 6, 12),
                    peak_windows=(3, 6))
    torch.manual_seed(5)
    net = QuantileLSTM(spec)
    with torch.no_grad():
        for prm in net.parameters():
            prm.normal_(0.0, 0.3)
    return LSTMForecaster(net, "rand")


def candidates(lstm, base):
    return {"lstm+peak": PeakCalibrated(lstm, (3, 6), origins=32),
            "lstm+peak_all": PeakCalibrated(lstm, (3, 6), origins=32, moving_only=False),
            "lstm_conformal+peak": PeakCalibrated(Recalibrated(lstm), (3, 6), origins=32),
            "blend+peak": PeakCalibrated(Blend(lstm, base, 0.5), (3, 6), origins=32),
            "es+peak": PeakCalibrated(base, (3, 6), origins=32)}


def count_forwards(lstm) -> list[int]:
    calls: list[int] = []
    inner = lstm.model.forward_all
    lstm.model.forward_all = lambda x, *a: calls.append(len(x)) or inner(x, *a)
    return calls


def test_a_backtest_scores_the_same_with_shared_past_peaks_and_computes_them_once(monkeypatch):
    frame = noisy_frame(n_tenants=5, steps=48 * 8, seed=2)
    kw = dict(start=48 * 6, horizon=6, history_steps=48 * 5, quantiles=QS, season=48, max_origins=4,
              peak_windows={"lead": 6, "preempt": 3})
    lstm = random_lstm()
    calls = count_forwards(lstm)
    shared = backtest.run(frame, candidates(lstm, ExpSmoothing(QS)), **kw).report
    past = 32 * frame.shape[1]            # a batch of past origins x tenants (a forecast's own batch is 5)
    n_shared = calls.count(past)
    monkeypatch.setattr(backtest, "shared_past_peaks", contextlib.nullcontext)
    lstm2 = random_lstm()
    calls2 = count_forwards(lstm2)
    alone = backtest.run(frame, candidates(lstm2, ExpSmoothing(QS)), **kw).report
    for name, m in alone["models"].items():
        assert shared["models"][name]["wql"] == m["wql"]
        assert shared["models"][name]["peak"] == m["peak"]
    # four candidates replay the LSTM at the same past origins of each backtest origin's history: once, not 4x
    assert n_shared == 4 and calls2.count(past) == 4 * 4


def test_past_peaks_are_recomputed_for_other_data_and_never_kept_outside_a_scoring_run():
    lstm = random_lstm()
    calls = count_forwards(lstm)
    hist = noisy_frame(n_tenants=3, steps=48 * 3, seed=1)
    ends = np.array([60, 80, 100])
    a = lstm.peaks_at(hist, ends, 6, (3, 6))
    b = lstm.peaks_at(hist, ends, 6, (3, 6))
    assert len(calls) == 2 and np.array_equal(a, b)            # the daemon: no cache at all
    with memo.shared_past_peaks():
        c = lstm.peaks_at(hist, ends, 6, (3, 6))
        c[:] = -1.0                                          # a caller writing into its copy changes nothing
        d = lstm.peaks_at(hist, ends, 6, (3, 6))
        assert len(calls) == 3 and np.array_equal(d, a)
        other = hist.copy()
        other.iloc[-1, 0] += 5.0                             # a revised sample: a new request
        lstm.peaks_at(other, ends, 6, (3, 6))
        lstm.peaks_at(hist, ends[:2], 6, (3, 6))             # other origins: a new request
        assert len(calls) == 5 and memo.memo_size() == 3
    assert memo.memo_size() == 0
    lstm.peaks_at(hist, ends, 6, (3, 6))
    assert len(calls) == 6
