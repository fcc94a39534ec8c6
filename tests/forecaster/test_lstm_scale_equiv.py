"""The LSTM's inputs and the baselines' error matrix were restructured for 10,000 tenants (the season means a
block of strided windows at a time instead of one [B, season] fancy index; the errors one origin's slice at a
time): these check the new code gives the same numbers as the code it replaced, kept here as the reference, bit
for bit. (Batching the LSTM forward itself was tried and left out: float32 GEMM kernels round differently by
batch size, so a batched forecast is not the same forecast.)"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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
