"""Small pure checks the a10 audit found untested: the daemon refuses a model whose step or horizon does not fit
its cycle, and the backtest's peak coverage compares the realised peak with the forecast's p90 peak."""

import numpy as np
import pandas as pd
import pytest

from forecaster import backtest
from forecaster.registry import ModelError
from forecaster.selection import check_runnable
from forecaster.types import Forecast

ENTRY = {"name": "lstm", "scored_on": "prometheus:c1", "step_s": 60, "horizon": 60}


def test_a_model_with_another_step_or_a_shorter_horizon_is_refused_with_the_reason():
    check_runnable(ENTRY, 60, 60)
    check_runnable(ENTRY, 60, 30)                              # a longer forecast than asked is cut, not refused
    with pytest.raises(ModelError, match="forecasts at 60 s steps but cycle.resolution_s is 300 s"):
        check_runnable(ENTRY, 300, 60)
    with pytest.raises(ModelError, match="forecasts 60 steps but cycle.horizon_steps is 120"):
        check_runnable(ENTRY, 60, 120)


class Fixed:
    """Forecasts a constant per quantile (p50 = 5, p90 = 10, p99 = 20), whatever the history."""
    name, min_history = "fixed", 1

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        vals = np.broadcast_to(np.array([5.0, 10.0, 20.0]), (history.shape[1], horizon, 3)).copy()
        return Forecast(tuple(history.columns), (0.5, 0.9, 0.99), vals, history.index[-1], 60, self.name)


def test_peak_coverage_compares_the_realised_peak_with_the_forecast_p90_peak():
    idx = pd.date_range("2026-01-01", periods=40, freq="min", tz="UTC")
    # tenant a peaks at 9 in every window (under the p90 of 10), tenant b at 11 once per 4-step window (over it),
    # while b's steps are under the p90 three times in four: step coverage 0.75, peak coverage 0
    a = np.where(np.arange(40) % 4 == 0, 9.0, 1.0)
    b = np.where(np.arange(40) % 4 == 1, 11.0, 1.0)
    frame = pd.DataFrame({"a": a, "b": b}, index=idx)
    res = backtest.run(frame, {"fixed": Fixed()}, start=8, horizon=4, stride=4, history_steps=8,
                       quantiles=(0.5, 0.9, 0.99), season=4)
    m = res.report["models"]["fixed"]
    assert m["peak_coverage_p90"] == pytest.approx(0.5)        # a's peaks all covered, b's never
    assert m["coverage_p90"] == pytest.approx((1.0 + 0.75) / 2)


def test_a_model_scored_for_other_lead_windows_is_used_and_the_log_says_to_retrain(tmp_path, caplog):
    import json
    import shutil

    from daemon.config import Config
    from daemon.forecasting.choose import build
    from tests.conftest import REPO

    shutil.copytree(REPO / "models", tmp_path / "m")
    man = json.loads((tmp_path / "m" / "manifest.json").read_text())
    man["in_use"]["peak_windows"] = {"lead": 10, "preempt": 3}
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(man))
    fc, _ = build(Config(forecaster={"model_dir": tmp_path / "m"}))
    assert fc.name == man["in_use"]["name"] and "lead windows" not in caplog.text
    fc, _ = build(Config(forecaster={"model_dir": tmp_path / "m"}, policy={"lead_time_steps": 20}))
    assert fc.name == man["in_use"]["name"] and "was scored for lead windows" in caplog.text


def test_a_model_dir_with_no_manifest_is_said_so_not_a_manifest_without_in_use(tmp_path, monkeypatch):
    """`run --sim` from outside the checkout (forecaster.model_dir "models" is relative) warned "no model scored on
    any cluster yet (no `in_use` in the manifest)": there was no manifest at all, and the line did not say where
    it looked. Now it names the file it looked for and the working directory a relative one is read from."""
    import json

    from daemon.config import Config
    from daemon.forecasting.choose import build

    monkeypatch.chdir(tmp_path)
    _, note = build(Config(forecaster={"model_dir": "models"}))
    assert "no model manifest (models/manifest.json, relative to the working directory " in note, note
    assert str(tmp_path) in note and "in_use" not in note
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "manifest.json").write_text(json.dumps({"format": 1, "current": None, "versions": []}))
    _, note = build(Config(forecaster={"model_dir": "models"}))
    assert "no model scored on any cluster yet (no `in_use` in the manifest)" in note, note
