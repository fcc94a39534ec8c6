"""The scores table `retrain` and `backtest` print: its columns stay in line under their heads whatever the names.
retrain on a user's history named candidates up to 39 characters ('seasonal_naive_daily+conformal+peak_all'): the
first column was 30 wide, so their rows' figures sat up to nine places right of their heads."""

from forecaster import backtest


def _m(wql: float) -> dict:
    return {"wql": wql, "mase": 1.0, "coverage_p90": 0.9, "coverage_p90_strict": 0.88, "peak_coverage_p90": 0.5,
            "seconds_per_forecast": 0.01, "peak": {"lead": {"loss": 0.1, "coverage_p90": 0.9,
                                                              "coverage_p90_moving": 0.8}}}


def test_every_rows_figures_end_under_their_heads_with_long_model_names():
    report = {"peak_windows": {"lead": 10}, "models": {"naive": _m(0.2),
                                                       "seasonal_naive_daily+conformal+peak_all": _m(0.1)}}
    lines = backtest.table(report).splitlines()
    head, rows = lines[0], lines[1:3]
    ends = [head.index(h) + len(h) for h in ("wQL", "MASE", "p90 cov", "< p90", "peak p90", "lead10 loss", "ms/fc")]
    for row in rows:
        row_ends = {i + 1 for i, (a, b) in enumerate(zip(row, row[1:] + " ")) if a != " " and b == " "}
        assert set(ends) <= row_ends and len(row) == len(head), (head, row)


def test_a_tenant_without_a_season_of_samples_scores_without_a_numpy_warning():
    """A daemon on a Prometheus scraping for less than a day printed numpy's "RuntimeWarning: Mean of empty slice"
    with the source line among its log lines: the MASE scale of a tenant with no two samples a season apart. Its
    scale is NaN, quietly."""
    import warnings

    import numpy as np
    import pandas as pd

    idx = pd.date_range("2026-01-01", periods=96, freq="min", tz="UTC")
    f = pd.DataFrame({"old": np.arange(96.0), "new": np.r_[np.full(60, np.nan), np.ones(36)]}, index=idx)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = backtest.seasonal_scale(f, 48)
    assert s[0] == 48.0 and np.isnan(s[1])
