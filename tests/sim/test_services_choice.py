"""The replay runs the product's forecaster for inference services (daemon/sim/own.py choose_forecaster with
``services``, as `simulate --data` and `--trace servegen` call it): the services on their window means, chosen on
the history before the window, and each forecast made from the history before its step only."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.sim.forecast_bank import ForecastBank
from daemon.sim.own import choose_forecaster
from tests.sim.test_inference_own import LOW, SERVICE, WINDOW_DAYS
from tests.sim.test_own_replay import CONFIG, simulate, write

START = pd.Timestamp("2026-01-03 12:00", tz="UTC")     # the replayed window starts here


def demand(future: float) -> pd.DataFrame:
    """Three days at one minute: batch `b` at 4, service `svc` flat at 10 but for 12:30-12:40, which yesterday
    alternated 0 and 100 by the minute (a window mean of 50) and today (after the window start) is ``future``."""
    idx = pd.date_range("2026-01-01", periods=3 * 1440, freq="min", tz="UTC", name="time")
    svc = np.full(len(idx), 10.0)
    yday = (idx >= START - pd.Timedelta("1D") + pd.Timedelta("30min")) & \
        (idx < START - pd.Timedelta("1D") + pd.Timedelta("40min"))
    svc[yday] = np.where(np.arange(yday.sum()) % 2 == 0, 0.0, 100.0)
    svc[(idx >= START + pd.Timedelta("30min")) & (idx < START + pd.Timedelta("40min"))] = future
    b = 4.0 + np.sin(np.arange(len(idx)) / 50.0)
    return pd.DataFrame({"b": b, "svc": svc}, index=idx)


def test_the_replay_forecasts_a_service_from_yesterdays_window_never_from_the_future():
    cfg = Config()
    start = int(demand(0.0).index.get_indexer([START])[0])
    got = {}
    for future in (200.0, 1000.0):
        d = demand(future)
        choice = choose_forecaster(d.iloc[:start], cfg, 60, quick=True, services=["svc"])
        assert "services: seasonal_naive_144+conformal@600s" in choice.name
        assert "services (1)" in choice.why
        bank = ForecastBank(choice.model, d, 1, cfg.cycle.horizon_steps, cfg.cycle.history_steps)
        fc = bank._make(start - 1)                      # the forecast the replay's first step reads
        got[future] = fc.values[fc.tenants.index("svc"), :, fc.quantile_index(0.5)]
    ahead = START + pd.Timedelta("1min") * np.arange(0, 60)
    inside = (ahead >= START + pd.Timedelta("30min")) & (ahead < START + pd.Timedelta("40min"))
    assert got[200.0][inside] == pytest.approx(np.full(10, 50.0), abs=1.0)   # yesterday's window, not today's 200
    assert got[200.0] == pytest.approx(got[1000.0])                          # the future is never read


def test_simulate_data_runs_the_services_on_their_window_model(tmp_path):
    n = 700   # 500 minutes before the window: what the quick choice needs at this config's season of 100
    cols = {"lo": np.full(n, 10.0), "svc[req/s]": np.r_[np.full(n - 80, 5.0), np.full(80, 35.0)]}
    csv, toml = write(tmp_path, cols, config=CONFIG + SERVICE + LOW)
    r = simulate(toml, "--data", str(csv), "--days", f"{WINDOW_DAYS}", "--strategies", "predictive",
                 "--quick-forecaster", "--out", str(tmp_path / "out"), "--workers", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "out" / "own-history.json").read_text())
    assert "services: seasonal_naive_144+conformal@600s" in doc["forecaster"]
    assert "services (1)" in doc["forecaster_choice"]["why"]
