"""Windows proposed from history (issue 39, item 2): a constructed daily peak (with noise) is found at its hour and
size, noise alone gives none, a weekday-only peak is proposed for weekdays, and a proposal declares as a window."""

import numpy as np
import pandas as pd

from daemon.config.windows import WindowConfig
from daemon.forecasting.windows_proposed import propose, propose_series

IDX = pd.date_range("2026-11-23", periods=8 * 1440, freq="min", tz="UTC", name="time")  # a Monday, 8 days


def _noise(seed: int, level: float = 20.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    ar = np.zeros(len(IDX))
    eps = rng.normal(0, 1.5, len(IDX))
    for k in range(1, len(IDX)):
        ar[k] = 0.9 * ar[k - 1] + eps[k]
    return level + ar


def _peak(at_h: float, gpus: float, weekdays_only: bool = False) -> np.ndarray:
    minute = IDX.hour * 60 + IDX.minute
    bump = ((minute >= at_h * 60) & (minute < at_h * 60 + 60)).astype(float) * gpus
    if weekdays_only:
        bump = bump * (IDX.day_of_week < 5)
    return np.asarray(bump)


def test_a_constructed_daily_peak_is_found_at_its_hour_with_its_size():
    s = pd.Series(np.round(_noise(1) + _peak(14, 30)), index=IDX)
    p = propose_series(s, "team-a", timezone="Europe/Paris")
    assert p is not None
    assert p.tenant == "team-a" and p.every == "daily"
    # 14:00 UTC is 15:00 in Paris in November; the window opens at the peak (within a 15-minute bin) and lasts it
    assert p.at in ("14:45", "15:00"), p.at
    assert 60 <= p.duration_minutes <= 75
    assert 45 <= p.gpus <= 60, p.gpus          # the level (~20) plus the peak (30), a high quantile with noise
    assert p.days_seen >= 7 and p.days_checked >= 7
    w = WindowConfig.model_validate(p.to_window())   # accepting it declares a valid window
    assert w.tenant == "team-a" and w.timezone == "Europe/Paris" and w.total_gpus() == p.gpus


def test_noise_alone_gives_no_proposal():
    for seed in range(4):
        s = pd.Series(np.round(_noise(10 + seed)), index=IDX)
        assert propose_series(s, "team-n") is None, seed


def test_a_peak_on_a_few_days_only_is_not_proposed():
    s = _noise(3) + _peak(9, 30)
    keep = IDX.day.isin([23, 26, 29])            # 3 of the days only
    s = pd.Series(np.round(np.where(keep, s, _noise(3))), index=IDX)
    assert propose_series(s, "team-b") is None


def test_a_weekday_peak_is_proposed_for_weekdays_and_a_typed_series_names_its_type():
    frame = pd.DataFrame({"team-w@a100|t4": np.round(_noise(4) + _peak(10, 24, weekdays_only=True)),
                          "team-n": np.round(_noise(5))}, index=IDX)
    ps = propose(frame)
    assert [p.tenant for p in ps] == ["team-w"]
    p = ps[0]
    assert p.every == "weekdays" and p.at in ("09:45", "10:00") and p.gpu_type == "a100"
    assert p.to_window()["gpus"] == {"a100": p.gpus}
    assert propose(frame, exclude=("team-w",)) == []


def test_two_weeks_of_history_are_decomposed_with_the_weekly_season_too():
    idx = pd.date_range("2026-11-16", periods=15 * 1440, freq="min", tz="UTC", name="time")
    rng = np.random.default_rng(6)
    minute = idx.hour * 60 + idx.minute
    peak = np.where((minute >= 20 * 60) & (minute < 21 * 60), 16.0, 0.0)
    weekend = np.where(idx.day_of_week >= 5, -5.0, 0.0)       # a weekly swing MSTL takes apart from the peak
    s = pd.Series(np.round(20 + weekend + peak + rng.normal(0, 1.5, len(idx))), index=idx)
    p = propose_series(s, "team-m")
    assert p is not None and p.method == "MSTL(daily, weekly)"
    assert p.at in ("19:45", "20:00") and 30 <= p.gpus <= 42


def test_a_series_name_splits_at_its_last_at_sign_as_the_policy_reads_it():
    """A tenant whose name holds '@' (one the source reports; the config refuses them) is read as the policy reads
    its series (daemon/policy/fleet.split_series: the last '@'), by the proposals and by the start estimates."""
    import numpy as np
    import pandas as pd

    from daemon.forecasting.windows_proposed import split_series
    from daemon.policy.fleet import split_series as policy_split
    from daemon.service.eta import peaks_of
    from forecaster.types import Forecast

    assert split_series("a@b@h100|a100") == ("a@b", "h100") == (policy_split("a@b@h100|a100")[0], "h100")
    assert split_series("team") == ("team", None) and split_series("team@a100") == ("team", "a100")
    v = np.ones((2, 3, 1))
    fc = Forecast(("a@b@h100", "a@h100"), (0.9,), v * np.array([5.0, 7.0])[:, None, None],
                  pd.Timestamp("2026-01-01", tz="UTC"), 60, "m")
    assert peaks_of(fc, (0.9,)) == {"a@b": (5.0,), "a": (7.0,)}
