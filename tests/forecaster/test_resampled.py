"""A forecaster fitted on 10-minute windows, run on a one-minute history (forecaster/resampled.py): the windows it
is given and the window each minute of the horizon reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.resampled import Resampled, window_means
from forecaster.types import Forecast


class WindowIndex:
    """An inner forecaster whose forecast for the i-th window ahead is 100 x (i + 1) + the last window's mean, so a
    test reads which window each fine step got, and from which history."""

    name = "window-index"

    def __init__(self) -> None:
        self.seen: list[pd.DataFrame] = []

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        self.seen.append(history)
        last = history.to_numpy(dtype=float)[-1]
        v = last[:, None] + 100.0 * np.arange(1, horizon + 1)[None, :]
        return Forecast(tuple(history.columns), (0.5, 0.9), np.repeat(v[:, :, None], 2, axis=2),
                        history.index[-1], 600, self.name)


def minutes(start: str, n: int) -> pd.DataFrame:
    idx = pd.date_range(start, periods=n, freq="min", tz="UTC", name="time").as_unit("us")
    return pd.DataFrame({"svc": np.arange(n, dtype=float)}, index=idx)


def test_window_means_average_whole_windows_only():
    # 00:03 .. 00:32: the window 00:00 lacks 00:00-00:02, the window 00:30 is still filling; 00:10 and 00:20 whole
    w = window_means(minutes("2025-01-01 00:03", 30), 600)
    assert list(w.index.strftime("%H:%M")) == ["00:10", "00:20"]
    assert w["svc"].tolist() == [11.5, 21.5]          # the means of 7..16 and 17..26


def test_a_window_missing_a_minute_is_left_out():
    h = minutes("2025-01-01 00:00", 30).drop(pd.Timestamp("2025-01-01 00:14", tz="UTC"))
    assert list(window_means(h, 600).index.strftime("%H:%M")) == ["00:00", "00:20"]


def test_each_minute_reads_the_forecast_of_its_window():
    inner = WindowIndex()
    # last observation 00:32: the windows forecast are 00:30 (filling), 00:40, 00:50, ...
    fc = Resampled(inner, 600).predict(minutes("2025-01-01 00:03", 30), 25)
    assert inner.seen[0]["svc"].tolist() == [11.5, 21.5]
    v = fc.quantile(0.5)[0]
    # 00:33-00:39 in the window 00:30 (the first ahead), 00:40-00:49 the second, 00:50-00:57 the third
    assert v.tolist() == [121.5] * 7 + [221.5] * 10 + [321.5] * 8
    assert fc.step_s == 60 and fc.horizon == 25 and fc.issued_at == pd.Timestamp("2025-01-01 00:32", tz="UTC")


def test_the_last_minute_of_a_window_makes_it_whole():
    inner = WindowIndex()
    fc = Resampled(inner, 600).predict(minutes("2025-01-01 00:00", 30), 3)   # 00:00 .. 00:29: three whole windows
    assert inner.seen[0]["svc"].tolist() == [4.5, 14.5, 24.5]
    assert fc.quantile(0.5)[0].tolist() == [124.5] * 3                        # 00:30-00:32: the next window


def test_steps_past_the_inner_horizon_take_its_last_window():
    class Short(WindowIndex):
        spec = type("Spec", (), {"horizon": 2})()

    inner = Short()
    fc = Resampled(inner, 600).predict(minutes("2025-01-01 00:00", 30), 35)
    assert inner.seen and fc.quantile(0.5)[0].tolist() == [124.5] * 10 + [224.5] * 25


def test_an_lstm_at_ten_minutes_forecasts_a_one_minute_history():
    """The LSTM refuses a history at another step than it was trained at; through Resampled it forecasts it."""
    torch = pytest.importorskip("torch")
    from forecaster.lstm import LSTMForecaster, LSTMSpec, QuantileLSTM

    torch.manual_seed(0)
    spec = LSTMSpec(context=6, horizon=3, season=12, quantiles=(0.5, 0.9), step_s=600)
    lstm = LSTMForecaster(QuantileLSTM(spec))
    h = minutes("2025-01-01 00:00", 600)                    # 60 whole windows at 60 s steps
    with pytest.raises(ValueError, match="600s steps"):
        lstm.predict(h, 3)
    fc = Resampled(lstm, 600).predict(h, 25)
    assert fc.values.shape == (1, 25, 2) and fc.step_s == 60 and np.isfinite(fc.values).all()


def test_a_step_that_does_not_divide_the_window_is_one_line():
    idx = pd.date_range("2025-01-01", periods=20, freq="7min", tz="UTC")
    with pytest.raises(ValueError, match="420 s steps does not divide into 600 s windows"):
        window_means(pd.DataFrame({"svc": np.ones(20)}, index=idx), 600)


def test_the_inner_forecast_is_made_again_only_when_a_window_changes():
    inner = WindowIndex()
    r = Resampled(inner, 600)
    h = minutes("2025-01-01 00:00", 40)
    for end in range(31, 40):          # 00:30 .. 00:38: the window 00:30 still filling, the same whole windows
        r.predict(h.iloc[:end], 20)
    assert len(inner.seen) == 1
    fc = r.predict(h, 20)              # 00:39 completes the window 00:30
    assert len(inner.seen) == 2 and fc.quantile(0.5)[0][0] == 134.5
    g = h.copy()
    g.iloc[5, 0] = -1.0                # a past window revised: forecast again
    r.predict(g, 20)
    assert len(inner.seen) == 3
