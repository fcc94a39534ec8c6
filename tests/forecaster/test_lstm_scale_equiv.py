"""The LSTM's inputs and the baselines' error matrix were restructured for 10,000 tenants (the season means a
block of strided windows at a time instead of one [B, season] fancy index; the errors one origin's slice at a
time): these check the new code gives the same numbers as the code it replaced, kept here as the reference, bit
for bit. (Batching the LSTM forward itself was tried and left out: float32 GEMM kernels round differently by
batch size, so a batched forecast is not the same forecast.)"""

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from forecaster.lstm import season_means


def reference_season_means(values, origins, tenants, season):
    """make_windows's scale before the change (commit f51a4de)."""
    o = np.asarray(origins)[:, None]
    scale_idx = o - season + 1 + np.arange(season)[None, :]
    with np.errstate(all="ignore"):
        return np.nanmean(values[np.clip(scale_idx, 0, None), np.asarray(tenants)[:, None]], axis=1)


@settings(max_examples=200, deadline=None)
@given(steps=st.integers(1, 40), n=st.integers(1, 6), season=st.integers(1, 25), pairs=st.integers(0, 30),
       chunk=st.integers(1, 9), seed=st.integers(0, 2**31))
@pytest.mark.filterwarnings("ignore:Mean of empty slice")
def test_season_means_equal_the_reference(steps, n, season, pairs, chunk, seed):
    """Windows inside the history and reaching before its first step (clipped to it), in blocks of any size,
    NaN gaps and all-NaN windows: the same means, bit for bit."""
    rng = np.random.default_rng(seed)
    v = rng.gamma(2.0, 3.0, (steps, n))
    v[rng.uniform(size=v.shape) < 0.3] = np.nan
    origins = rng.integers(0, steps, pairs)
    tenants = rng.integers(0, n, pairs)
    got = season_means(v, origins, tenants, season, chunk)
    assert np.array_equal(got, reference_season_means(v, origins, tenants, season), equal_nan=True)


def reference_errors_at(values, origins, point):
    """calibration.errors_at before the change (commit aa12a2a)."""
    h = point.shape[2]
    idx = origins[:, None] + np.arange(h)[None, :]
    return values[:, idx].transpose(1, 0, 2) - point


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 6), steps=st.integers(2, 40), h=st.integers(1, 8), k=st.integers(0, 12),
       fortran=st.booleans(), seed=st.integers(0, 2**31))
def test_errors_at_equal_the_reference(n, steps, h, k, fortran, seed):
    """Per-origin slices instead of one fancy index: the same errors, C-contiguous as before (what nansum and the
    quantile sort read in memory order), for a [tenant, time] array in either layout (history.to_numpy().T is
    the transposed one); origins whose horizon runs past the end still raise."""
    from forecaster.calibration import errors_at

    rng = np.random.default_rng(seed)
    v = rng.normal(size=(steps, n)).T if fortran else rng.normal(size=(n, steps))
    v[rng.uniform(size=v.shape) < 0.2] = np.nan
    origins = rng.integers(0, steps + 2, k)
    point = rng.normal(size=(k, n, h))
    try:
        want = reference_errors_at(v, origins, point)
    except IndexError:
        with pytest.raises((IndexError, ValueError)):
            errors_at(v, origins, point)
        return
    got = errors_at(v, origins, point)
    assert np.array_equal(got, want, equal_nan=True) and got.strides == want.strides


def reference_nan_quantiles(x, quantiles, axis=0):
    """calibration.nan_quantiles before the change (commit 7cf03b5): one full sort."""
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)
    s = np.sort(x, axis=-1)
    n = np.isfinite(s).sum(axis=-1)
    q = np.asarray(quantiles, dtype=float)
    pos = (np.maximum(n, 1) - 1)[..., None] * q
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0)[..., None])
    frac = pos - lo
    a = np.take_along_axis(s, lo, axis=-1)
    b = np.take_along_axis(s, hi, axis=-1)
    out = a + (b - a) * frac
    out[n == 0] = np.nan
    return out, n


# +-inf inputs make inf - inf in both versions: numpy warns, the NaN it gives is part of what is compared
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(0, 7), min_size=1, max_size=3).flatmap(   # one axis long enough that a partition
    lambda sh: st.integers(0, 300).map(lambda k: [k, *sh[1:]])),             # is not a full sort
       axis=st.integers(0, 2), nan=st.sampled_from(
    [0.0, 0.1, 0.5, 1.0]), inf=st.booleans(), ties=st.booleans(), qs=st.lists(st.floats(0, 1), min_size=1,
                                                                               max_size=4), seed=st.integers(0, 2**31))
@example(shape=[3, 200], axis=1, nan=0.0, inf=False, ties=False, qs=[0.5, 0.9, 0.99], seed=1)
def test_nan_quantiles_equal_the_reference(shape, axis, nan, inf, ties, qs, seed):
    """A partition at the ranks read instead of a full sort (when few ranks are read): the same quantiles and
    counts, with NaN gaps (any number per slice), +-inf, ties and empty slices."""
    from forecaster.calibration import nan_quantiles

    axis = axis % len(shape)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, shape).astype(float) if ties else rng.normal(size=shape)
    x[rng.uniform(size=x.shape) < nan] = np.nan
    if inf and x.size:
        x.flat[rng.integers(0, x.size, 2)] = [np.inf, -np.inf]
    try:
        want, wn = reference_nan_quantiles(x, tuple(qs), axis)
    except IndexError:   # an empty axis to take quantiles over: an error, in both
        with pytest.raises(IndexError):
            nan_quantiles(x, tuple(qs), axis)
        return
    got, gn = nan_quantiles(x, tuple(qs), axis)
    assert np.array_equal(gn, wn) and np.array_equal(got, want, equal_nan=True)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 5), steps=st.integers(10, 60), h=st.integers(1, 6), gaps=st.sampled_from([0.0, 0.2, 0.9]),
       seed=st.integers(0, 2**31))
def test_exp_smoothing_alpha_losses_equal_the_reference(n, steps, h, gaps, seed):
    """ExpSmoothing picks its alpha from these sums: written in place instead of nansum(abs(errors_at(...))) of a
    repeated point array, bit for bit the same sums (so the same alpha, ties included)."""
    from forecaster.baselines import ExpSmoothing
    from forecaster.calibration import errors_at, recent_origins
    from forecaster.series import ffill

    rng = np.random.default_rng(seed)
    v = rng.poisson(3, (n, steps)).astype(float)
    v[rng.uniform(size=v.shape) < gaps] = np.nan
    m = ExpSmoothing()
    ends = recent_origins(steps, h, first=1, window=steps, max_origins=16)
    if not ends.size:
        return
    ff = ffill(v)
    want = [float(np.nansum(np.abs(errors_at(v, ends, m._point(v, ff, ends, h, a))))) for a in m.ALPHAS]
    assert m.alpha_losses(v, ends, h) == want


def test_recalibrated_baseline_computes_its_error_quantiles_once_per_history(monkeypatch):
    """A recalibrated baseline's spread and its conformal shift each needed the baseline's error quantiles of the
    same history, and computed them twice; now once per history content (a changed history computes again), with
    the same forecast as two fresh models that share nothing."""
    import pandas as pd

    from forecaster.baselines import ExpSmoothing
    from forecaster.selection import make_baseline

    calls = []
    real = ExpSmoothing._compute_error_quantiles

    def counted(self, vals, ff, horizon):
        calls.append(vals.shape)
        return real(self, vals, ff, horizon)

    rng = np.random.default_rng(5)
    v = rng.poisson(4, (600, 7)).astype(float)
    v[rng.uniform(size=v.shape) < 0.1] = np.nan
    hist = pd.DataFrame(v, index=pd.date_range("2026-01-01", periods=600, freq="60s", tz="UTC"),
                        columns=[f"t{i}" for i in range(7)])
    want = make_baseline("exp_smoothing+conformal", 120, (0.5, 0.9)).predict(hist, 10)
    monkeypatch.setattr(ExpSmoothing, "_compute_error_quantiles", counted)
    m = make_baseline("exp_smoothing+conformal", 120, (0.5, 0.9))
    got = m.predict(hist, 10)
    assert len(calls) == 1
    assert np.array_equal(got.values, want.values, equal_nan=True)
    changed = hist.copy()
    changed.iloc[-1, 0] += 1.0
    m.predict(changed, 10)
    assert len(calls) == 2
