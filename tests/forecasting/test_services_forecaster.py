"""The inference services' own forecaster in the daemon (forecaster.services, daemon/forecasting/services.py): the
config refuses a window that does not fit the cycle in one line, build() routes the services to the daily seasonal
naive on their window means, and a daemon cycle's forecast of a service sees yesterday's window at this hour."""

from __future__ import annotations

import dataclasses
import tomllib

import numpy as np
import pytest

from daemon.config import Config, ConfigError, SimulatorConfig, SourceConfig, parse_config
from daemon.forecasting.choose import build
from daemon.service.wiring import build_runtime


def load_text(text: str, origin: str) -> Config:
    return parse_config(tomllib.loads(text), origin)


SERVICE = {"gpus_per_replica": 1, "replica_rps": 5.0, "cold_start_s": 300.0}


def test_a_services_window_that_is_not_whole_cycle_steps_is_one_line():
    with pytest.raises(ConfigError) as e:
        load_text("[cycle]\nresolution_s = 120\n[forecaster.services]\nwindow_s = 900\n", "bad.toml")
    msg = str(e.value)
    assert "forecaster.services.window_s = 900 is not a multiple of cycle.resolution_s = 120" in msg
    assert "\n" not in msg and "Traceback" not in msg
    with pytest.raises(ConfigError, match="does not divide a day"):
        load_text("[forecaster.services]\nwindow_s = 7000\n", "bad.toml")
    with pytest.raises(ConfigError, match="needs cycle.history_steps >= 1460"):
        load_text("[cycle]\nhistory_steps = 1000\n[forecaster.services]\nkind = \"seasonal_windows\"\n",
                         "bad.toml")
    # kind = "same" does not read the window
    load_text("[cycle]\nresolution_s = 120\n[forecaster.services]\nkind = \"same\"\nwindow_s = 900\n", "ok.toml")


def test_build_routes_the_services_to_their_window_model_and_same_keeps_one_model(tmp_path):
    tenants = [{"name": "chat", "inference": SERVICE}, {"name": "batch"}]
    model, note = build(Config(tenants=tenants, forecaster={"model_dir": tmp_path, "kind": "seasonal_naive"}))
    assert model.services == {"chat"} and model.services_model.name == "seasonal_naive_144+conformal@600s"
    assert "services (1): seasonal_naive_144+conformal@600s" in note
    same, _ = build(Config(tenants=tenants, forecaster={"model_dir": tmp_path, "kind": "seasonal_naive",
                                                        "services": {"kind": "same"}}))
    assert same.name == "seasonal_naive_1440"
    alone, _ = build(Config(tenants=[{"name": "batch"}], forecaster={"model_dir": tmp_path,
                                                                    "kind": "seasonal_naive"}))
    assert alone.name == "seasonal_naive_1440"


def test_a_daemon_cycle_forecasts_a_service_from_yesterdays_window_at_this_hour(tmp_path):
    """The service's last two hours are flat at 10; yesterday, 30-40 minutes after this hour, its minutes alternated
    0 and 100 (a window mean of 50). The window model forecasts 50 for each minute of that window ahead (yesterday's
    window mean), where a flat level forecasts 10 and a seasonal naive at the minute 0 / 100."""
    cfg = Config(cluster={"gpus": 256}, tenants=[{"name": "tenant-0003", "inference": SERVICE}],
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=2880)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)
    collect = rt.runner.source.collect
    marks = {}

    def constructed(steps):
        got = collect(steps)
        h = got.history.copy()
        end = h.index[-1]
        # the window of yesterday starting 30 minutes after the next whole window from now
        first = end.floor("10min") + np.timedelta64(10, "m")
        rise = first + np.timedelta64(30, "m")
        marks["rise"] = rise
        y = (h.index >= rise - np.timedelta64(1, "D")) & (h.index < rise - np.timedelta64(1, "D") +
                                                          np.timedelta64(10, "m"))
        col = np.full(len(h), 10.0)
        col[y] = np.where(np.arange(y.sum()) % 2 == 0, 0.0, 100.0)
        h["tenant-0003"] = col
        return dataclasses.replace(got, history=h)

    rt.runner.source.collect = constructed
    res = rt.runner.run_once()
    assert res.outcome == "ok"
    fc = res.forecast
    assert "services: seasonal_naive_144+conformal@600s" in fc.model
    i = fc.tenants.index("tenant-0003")
    ahead = fc.issued_at + np.timedelta64(1, "m") * np.arange(1, fc.horizon + 1)
    inside = (ahead >= marks["rise"]) & (ahead < marks["rise"] + np.timedelta64(10, "m"))
    assert inside.sum() == 10
    p50 = fc.values[i, :, fc.quantile_index(0.5)]
    assert p50[inside] == pytest.approx(np.full(10, 50.0), abs=1.0)     # yesterday's window mean, every minute
    assert p50[~inside & (ahead < marks["rise"])] == pytest.approx(10.0, abs=1.0)   # the flat level before it


def test_a_main_lstm_falling_back_behind_the_services_composite_still_counts_as_a_fallback(tmp_path):
    """The composite wraps the main model: its WithFallback (an LSTM that failed) must still light the fallback
    metric and the API's reason, and the services' own hand-over (too little history) is said there too."""
    from daemon.forecasting.choose import WithFallback, baseline
    from forecaster.composite import ServicesComposite, seasonal_windows

    cfg = Config(cluster={"gpus": 256}, tenants=[{"name": "tenant-0003", "inference": SERVICE}],
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=300)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    rt = build_runtime(cfg)

    class Broken:
        name, min_history = "broken-lstm", 0

        def predict(self, history, horizon):
            raise RuntimeError("weights exploded")

    rt.runner.forecaster = ServicesComposite(WithFallback(Broken(), baseline(cfg)), seasonal_windows(600, (0.5, 0.9,
                                             0.99)), ["tenant-0003"], services_min_history=1460)
    res = rt.runner.run_once()
    assert res.outcome == "ok" and rt.metrics.fallback._value.get() == 1
    err = rt.runner.snapshot.fallback_error
    assert "broken-lstm failed: weights exploded" in err and "steps of history < 1460" in err


def test_with_services_leaves_reactive_alone_and_needs_a_day_of_windows_at_the_cycles_step(tmp_path):
    """`none` (reactive, the replay's baseline row) stays without any forecast, services or not; the services' model
    waits for a day of windows counted in the cycle's steps (1,460 at 60 s, 730 at 120 s); a replay's model
    recomputes its spreads in the forecast call (reproducible), the daemon's in a thread."""
    from daemon.forecasting.choose import NoForecast
    from daemon.forecasting.services import with_services
    from forecaster.composite import ServicesComposite

    cfg = Config(tenants=[{"name": "chat", "inference": SERVICE}], forecaster={"model_dir": tmp_path})
    none = NoForecast()
    assert with_services(cfg, none, ["chat"]) == (none, "")
    main = build(Config(forecaster={"model_dir": tmp_path, "kind": "seasonal_naive"}))[0]
    model, _ = with_services(cfg, main, ["chat"])
    assert isinstance(model, ServicesComposite) and model.services_min_history == 1460
    assert model.services_model.inner.spread.background is False
    assert with_services(cfg, main, ["chat"], background=True)[0].services_model.inner.spread.background is True
    slow = Config(tenants=[{"name": "chat", "inference": SERVICE}], cycle={"resolution_s": 120},
                  forecaster={"model_dir": tmp_path})
    assert with_services(slow, main, ["chat"])[0].services_min_history == 730


def test_seasonal_windows_needs_exactly_its_history_steps():
    load_text("[cycle]\nhistory_steps = 1460\n[forecaster.services]\nkind = \"seasonal_windows\"\n", "ok.toml")
    with pytest.raises(ConfigError, match="needs cycle.history_steps >= 1460"):
        load_text("[cycle]\nhistory_steps = 1459\n[forecaster.services]\nkind = \"seasonal_windows\"\n", "bad.toml")


def test_when_live_quality_replaces_the_main_model_the_services_keep_their_own(tmp_path):
    """The quality fallback swaps the main model for the best baseline; the services stay on their window model."""
    from forecaster.composite import ServicesComposite
    from forecaster.selection import StartupSelection

    cfg = Config(cluster={"gpus": 256}, tenants=[{"name": "tenant-0003", "inference": SERVICE}],
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=300)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})
    runner = build_runtime(cfg).runner

    class Degraded:
        def observe(self, fc, history):
            pass

        def fallback_due(self):
            return "coverage 0.2 < 0.5"

        def reset(self):
            self.was_reset = True

    runner.quality = Degraded()
    runner._score_forecasts(None, None)
    assert isinstance(runner.forecaster, ServicesComposite) and runner.forecaster.services == {"tenant-0003"}
    assert isinstance(runner.forecaster.main, StartupSelection) and runner.quality.was_reset
