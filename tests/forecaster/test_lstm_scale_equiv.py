"""The LSTM's inputs were restructured for 10,000 tenants (the season means a block of strided windows at a time
instead of one [B, season] fancy index): this checks the new code gives the same numbers as the code it replaced,
kept here as the reference, bit for bit. (Batching the forward itself was tried and left out: float32 GEMM
kernels round differently by batch size, so a batched forecast is not the same forecast.)"""

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
