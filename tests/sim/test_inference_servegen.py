"""The ServeGen workload (daemon/sim/servegen.py): arrivals drawn per minute from each window's rate and CV,
deterministic per seed; a malformed trace file is one clear line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.sim.servegen import draw_arrivals, draw_arrivals_fitted, servegen
from forecaster import traces
from tests.conftest import SHARED_DATA

SERVEGEN = SHARED_DATA / "servegen-2025" / "m-small"


def _windows(rate: list[float], cv: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    idx = pd.date_range("2025-01-06", periods=len(rate), freq="600s", tz="UTC", name="time")
    return pd.DataFrame({"c": rate}, index=idx), pd.DataFrame({"c": cv}, index=idx)


def test_arrivals_are_deterministic_per_seed_and_their_window_mean_is_the_rate():
    """Per window, the mean of the minutes' counts over many windows is rate x 60 (within 3 standard errors of the
    drawn variance), at a CV of 1 (Poisson) and 4 (over-dispersed: negative binomial); the same seed gives the
    same counts, another seed others."""
    n = 3000
    rate, cv = _windows([2.0] * n + [5.0] * n, [1.0] * n + [4.0] * n)
    a = draw_arrivals(rate, cv, seed=11)
    assert a.shape == (2 * n * 10, 1) and (a["c"] >= 0).all() and (a["c"] == a["c"].round()).all()
    assert a.equals(draw_arrivals(rate, cv, seed=11))
    assert not a.equals(draw_arrivals(rate, cv, seed=12))
    for part, r, c in ((a["c"].iloc[: n * 10], 2.0, 1.0), (a["c"].iloc[n * 10:], 5.0, 4.0)):
        mean, var = r * 60, min(r * 60 * c ** 2, 9 * (r * 60) ** 2)
        assert abs(part.mean() - mean) < 3 * np.sqrt(var / part.size)
        assert part.var() == pytest.approx(var, rel=0.15)


def test_an_idle_window_has_no_arrivals_and_a_huge_cv_is_capped_at_the_window():
    rate, cv = _windows([0.0, 1.0], [0.0, 500.0])
    a = draw_arrivals(pd.concat([rate] * 2000), pd.concat([cv] * 2000), seed=1).to_numpy().reshape(-1, 2, 10)
    assert (a[:, 0] == 0).all()
    busy = a[:, 1].reshape(-1)
    assert busy.var() == pytest.approx(9 * 60.0 ** 2, rel=0.15)    # not 60 x 500^2: a minute holds <= its window


@pytest.mark.parametrize("row,text,why", [
    ("0,abc,1,Gamma,1,1", "rate 'abc'", "not a number"),
    ("0,-1,1,Gamma,1,1", "rate '-1'", "not a number"),
    ("0,1,1,Gamma,1,1\n300,1,1,Gamma,1,1", "row 2: timestamp 300", "10-minute window"),
])
def test_a_malformed_servegen_file_is_one_line_naming_file_and_row(tmp_path, row, text, why):
    root = tmp_path / "servegen-2025" / "m-small"
    root.mkdir(parents=True)
    (root / "chunk-0-trace.csv").write_text(row + "\n")
    with pytest.raises(ValueError) as e:
        traces.servegen_windows(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "chunk-0-trace.csv" in msg and text in msg and why in msg


@pytest.mark.skipif(not SERVEGEN.exists(), reason="ServeGen m-small not in ../shared/data")
def test_the_servegen_workload_keeps_busy_clients_scales_them_under_their_limit_and_adds_batch():
    w, notes = servegen(SHARED_DATA, days=0.25, history_days=1.0, cold_start_s=300)
    rate, _ = traces.servegen_windows(SHARED_DATA)
    kept = [c for c in w.demand.columns if c in (w.inference or {})]
    assert len(kept) + len(notes.idle) == rate.shape[1]
    assert set(notes.high) <= set(kept) and 1 <= len(notes.high) <= 0.2 * len(kept) + 1
    assert {w.tiers[list(w.demand.columns).index(c)] for c in notes.high} == {"high"}
    # the biggest client by mean rate is high, and scaled so its p99 fits under the high tier's 200 req/s
    window = rate.iloc[-int(1.25 * 144):].interpolate(method="time")   # the trace's gaps filled, as the workload does
    top = window.mean().idxmax()
    assert top in notes.high and notes.rate_factor[top] == pytest.approx(0.9 * 200 / window[top].quantile(0.99))
    assert all(v.cold_steps(60) == 5 for v in w.inference.values())
    batch = [c for c in w.demand.columns if c not in w.inference]
    assert len(batch) == 20 and w.capacity % 8 == 0
    total = w.demand.iloc[w.start:].sum(axis=1)
    assert (total > w.capacity).any() and (total < w.capacity).any()   # peaks contend
    again, _ = servegen(SHARED_DATA, days=0.25, history_days=1.0, cold_start_s=300)
    assert again.rates.equals(w.rates)


def test_a_window_where_every_client_is_at_zero_is_a_gap_not_idle_load(tmp_path):
    """One client at 0 is idle (data/README.md); every client at 0 at once, between windows of load, is a gap in
    the collection: missing, never zero load."""
    root = tmp_path / "servegen-2025" / "m-small"
    root.mkdir(parents=True)
    (root / "chunk-0-trace.csv").write_text("0,10,1,Gamma,1,1\n600,0,,,,\n1200,0,,,,\n1800,30,1,Gamma,1,1\n")
    (root / "chunk-1-trace.csv").write_text("0,4,1,Gamma,1,1\n600,0,,,,\n1200,6,1,Gamma,1,1\n1800,8,1,Gamma,1,1\n")
    rate, cv = traces.servegen_windows(tmp_path)
    assert rate.iloc[1].isna().all() and cv.iloc[1].isna().all()      # both at 0: a gap
    assert rate.iloc[2].tolist() == [0.0, 6.0]                          # one at 0: idle
    assert traces.servegen_gaps(rate.fillna(0.0)).tolist() == [False, True, False, False]


@pytest.mark.skipif(not SERVEGEN.exists(), reason="ServeGen m-small not in ../shared/data")
def test_the_workload_fills_the_traces_gaps_between_the_windows_either_side():
    w, notes = servegen(SHARED_DATA, days=1.0, history_days=0.5, cold_start_s=300)
    gaps = pd.DatetimeIndex(notes.gap_windows_filled)
    assert len(gaps) > 0 and notes.to_dict()["gap_windows_filled"]       # the last day has gaps (02:00, 05:00)
    total = w.rates.sum(axis=1).resample("10min").mean()
    assert (total.loc[gaps] > 0.5 * total.median()).all()               # the services' load goes on through them


def _patterns(rate: pd.DataFrame, family: list[str], shape: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.DataFrame({"c": family}, index=rate.index),
            pd.DataFrame({"c": [np.nan if s is None else s for s in shape]}, index=rate.index))


def test_fitted_arrivals_hold_each_window_s_requests_and_bunch_by_the_family_s_shape():
    """As ServeGen's generator: a window of rate r holds ceil(r x 600) requests, spread over its minutes by the
    fitted family's shape (Gamma shape 0.1: inter-arrival CV ~3.2, bunched; shape 10: CV ~0.3, near even);
    deterministic per seed."""
    n = 400
    rate, cv = _windows([1.5] * (2 * n) + [0.7] * n, [3.2] * n + [0.3] * n + [2.0] * n)
    fam, shp = _patterns(rate, ["Gamma"] * (2 * n) + ["Weibull"] * n, [0.1] * n + [10.0] * n + [0.5] * n)
    a = draw_arrivals_fitted(rate, cv, fam, shp, seed=3)
    assert a.equals(draw_arrivals_fitted(rate, cv, fam, shp, seed=3))
    assert not a.equals(draw_arrivals_fitted(rate, cv, fam, shp, seed=4))
    per_window = a["c"].to_numpy().reshape(-1, 10)
    assert (per_window[: 2 * n].sum(axis=1) == 900).all() and (per_window[2 * n:].sum(axis=1) == 420).all()
    bunched, even = per_window[:n].var(axis=1).mean(), per_window[n: 2 * n].var(axis=1).mean()
    assert bunched > 20 * even and even < 90 / 4     # a Poisson minute of 90 would vary by 90


def test_a_windows_requests_are_spaced_by_its_own_family_not_the_other_one():
    """The same shape 0.5 is a Gamma of inter-arrival CV^2 2 and a Weibull of CV^2 5 (Gamma(5) / Gamma(2)^2 - 1):
    a minute's count of a window of 1,200 requests varies about CV^2 x 0.9 times its mean (its window's total is
    fixed), 1.8 and 4.5, so a draw that read one family as the other would show the other's."""
    n = 300
    rate, cv = _windows([2.0] * (2 * n), [1.5] * (2 * n))
    fam, shp = _patterns(rate, ["Gamma"] * n + ["Weibull"] * n, [0.5] * (2 * n))
    w = draw_arrivals_fitted(rate, cv, fam, shp, seed=3)["c"].to_numpy().reshape(-1, 10)
    dispersion = w.var(axis=1) / w.mean(axis=1)
    assert 1.3 < dispersion[:n].mean() < 2.4, dispersion[:n].mean()
    assert 3.5 < dispersion[n:].mean() < 5.5, dispersion[n:].mean()


def test_a_window_without_a_fitted_family_is_drawn_from_its_rate_and_cv():
    """The trace's gap windows (interpolated, no family) and a client's windows without one: the moments' draw."""
    rate, cv = _windows([2.0, 2.0, 0.0], [1.0, 1.0, 0.0])
    fam, shp = _patterns(rate, ["", "Gamma", ""], [None, 1.0, None])
    a = draw_arrivals_fitted(rate, cv, fam, shp, seed=5).to_numpy().reshape(-1, 10)
    moments = draw_arrivals(rate, cv, seed=5).to_numpy().reshape(-1, 10)
    assert (a[0] == moments[0]).all() and a[1].sum() == 1200 and (a[2] == 0).all()


def test_a_window_of_more_requests_than_a_draw_holds_is_drawn_from_its_rate_and_cv(monkeypatch):
    """A trace's window of many requests (10^5 a second: 6 x 10^7) was drawn request by request, alone in its chunk:
    arrays of GiBs. Past CHUNK_REQUESTS it is drawn as a window without a fitted family (memory, not time: 60,000
    requests past a bound of 1,000)."""
    import tracemalloc

    from daemon.sim import servegen as sg
    monkeypatch.setattr(sg, "CHUNK_REQUESTS", 1_000)
    rate, cv = _windows([100.0, 1.5], [1.0, 1.0])
    fam, shp = _patterns(rate, ["Gamma", "Gamma"], [0.5, 0.5])
    tracemalloc.start()
    try:
        a = draw_arrivals_fitted(rate, cv, fam, shp, seed=5).to_numpy().reshape(-1, 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 400_000, peak                                    # 60,000 requests: 3.4 MB drawn one by one
    moments = draw_arrivals(rate, cv, seed=5).to_numpy().reshape(-1, 10)
    assert (a[0] == moments[0]).all() and a[1].sum() == 900        # the small window is still drawn by its family


@pytest.mark.parametrize("row,text", [
    ("0,1,1,Pareto,1,1", "pat_name 'Pareto'"),
    ("0,1,1,Gamma,-2,1", "pat_arg1 '-2'"),
    ("0,1,1,Weibull,x,1", "pat_arg1 'x'"),
    # numbers > 0 whose draws overflow a float (the drawn window was numpy's 'list' argument must have no negative
    # elements, naming nothing)
    ("0,1,1,Weibull,0.001,1", "pat_arg1 '0.001' is not a Weibull shape from 0.02"),
    ("0,1,1,Gamma,1e308,1", "is not a Gamma shape from 0 to 1e+06"),
])
def test_a_malformed_fitted_pattern_is_one_line_naming_file_and_row(tmp_path, row, text):
    root = tmp_path / "servegen-2025" / "m-small"
    root.mkdir(parents=True)
    (root / "chunk-0-trace.csv").write_text("600,0,0,,0,0\n" + row.replace("0,", "1200,", 1) + "\n")
    with pytest.raises(ValueError) as e:
        traces.servegen_patterns(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "chunk-0-trace.csv" in msg and "row 2" in msg and text in msg


def test_the_real_trace_s_patterns_line_up_with_its_rates():
    """Every window with load has a fitted family and every idle one none, on the trace's own index."""
    rate, _ = traces.servegen_windows(SHARED_DATA)
    fam, shp = traces.servegen_patterns(SHARED_DATA)
    assert fam.index.equals(rate.index) and list(fam.columns) == list(rate.columns)
    loaded = rate.fillna(0.0).to_numpy() > 0
    assert (fam.to_numpy()[loaded] != "").all() and (fam.to_numpy()[~loaded] == "").all()
    assert (shp.to_numpy()[loaded] > 0).all()
