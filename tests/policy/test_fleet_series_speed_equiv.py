"""The typed-series reads that plan() does each cycle on a mixed fleet (the per-tenant sum of a forecast's
``tenant@spec`` series and the peak per accept set) were made faster (cached name parsing, the sum one group rank
at a time instead of reduceat): these check the fast code against the code it replaced, kept here verbatim as the
reference, on random forecasts (tenant names with "@", unknown tenants, any-type series, NaN, inf)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from daemon.policy import fleet
from daemon.policy.fleet import tenant_values as _tenant_values
from forecaster.types import Forecast


def reference_tenant_values(forecast: Forecast, tenants: tuple[str, ...]) -> np.ndarray:
    """engine._tenant_values before the speed-up (commit 8a7f7d8)."""
    index = {t: i for i, t in enumerate(tenants)}
    of = np.array([index.get(fleet.split_series(name)[0], -1) for name in forecast.tenants], dtype=np.int64)
    keep = of >= 0
    of, vals = of[keep], forecast.values[keep]
    out = np.full((len(tenants), forecast.horizon, len(forecast.quantiles)), np.nan)
    if of.size:
        order = np.argsort(of, kind="stable")
        of, vals = of[order], vals[order]
        starts = np.r_[0, np.flatnonzero(np.diff(of)) + 1]
        sums = np.add.reduceat(np.nan_to_num(vals), starts, axis=0)
        seen = np.logical_or.reduceat(~np.isnan(vals), starts, axis=0)
        out[of[starts]] = np.where(seen, sums, np.nan)
    return out


def reference_typed_peaks(names, peak, tenants):
    """fleet.typed_peaks before the speed-up."""
    index = {t: i for i, t in enumerate(tenants)}
    total = np.full(len(tenants), np.nan)
    by: dict = {}
    for name, p in zip(names, peak.tolist()):
        tenant, acc = fleet.split_series(name)
        i = index.get(tenant)
        if i is None or acc is None or p != p:
            continue
        total[i] = p if total[i] != total[i] else total[i] + p
        by.setdefault(i, {})[acc] = by.get(i, {}).get(acc, 0.0) + float(p)
    return total, by


TENANTS = ["a", "b", "c@x", "d", "e"]          # "c@x": a tenant name with the separator in it
SPECS = ["t4", "h100", "t4|h100", "*", "v100m16|v100m32", "h100|t4"]
VALUE = st.one_of(st.floats(0, 1e6, allow_nan=False), st.just(float("nan")), st.just(float("inf")),
                  st.integers(0, 64).map(float))


@st.composite
def typed_forecast(draw):
    plain = draw(st.booleans()) and draw(st.booleans())  # sometimes a plain (one-model) series among them
    n = draw(st.integers(0, 14))
    names = []
    for _ in range(n):
        t = draw(st.sampled_from(TENANTS + ["zz"]))   # "zz": a tenant the state does not know
        names.append(t if plain and draw(st.booleans()) else f"{t}@{draw(st.sampled_from(SPECS))}")
    h, q = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    vals = np.array(draw(st.lists(VALUE, min_size=n * h * q, max_size=n * h * q)), dtype=float).reshape(n, h, q)
    tenants = tuple(draw(st.permutations(TENANTS))[:draw(st.integers(1, len(TENANTS)))])
    return Forecast(tuple(names), tuple(np.linspace(0.5, 0.99, q)), vals, None, 60, "m"), tenants


# huge drawn values overflow to inf in both versions alike: numpy warns, the inf is compared
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=300, deadline=None)
@given(typed_forecast())
def test_tenant_values_equal_the_reference(case):
    f, tenants = case
    if not any(fleet.SERIES_SEP in t for t in f.tenants):
        return  # a plain forecast takes for_tenants in both, untouched
    got = _tenant_values(f, tenants)
    want = reference_tenant_values(f, tenants)
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)   # bit for bit: same additions in the same order


# huge drawn values overflow to inf in both versions alike: numpy warns, the inf is compared
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@settings(max_examples=300, deadline=None)
@given(typed_forecast())
def test_typed_peaks_equal_the_reference(case):
    f, tenants = case
    peak = f.values[:, :, 0].max(axis=1) if f.values.size else np.zeros(len(f.tenants))
    total, by = fleet.typed_peaks(f.tenants, peak, tenants)
    rtotal, rby = reference_typed_peaks(f.tenants, peak, tenants)
    assert np.array_equal(total, rtotal, equal_nan=True)
    assert by == rby
    # the accept sets in the same order: split() hands out a hold's remainder in this order
    assert {i: list(d) for i, d in by.items()} == {i: list(d) for i, d in rby.items()}


def test_cached_parse_follows_the_tenant_order_and_cannot_be_written():
    """The cache is keyed on both the series and the tenants: the same series read for another tenant order are
    placed by that order, and the cached arrays are read-only (a caller cannot corrupt the next cycle's read)."""
    names = ("a@t4", "b@h100", "a@h100")
    v = np.arange(3, dtype=float).reshape(3, 1, 1)
    f = Forecast(names, (0.5,), v, None, 60, "m")
    assert _tenant_values(f, ("a", "b"))[:, 0, 0].tolist() == [2.0, 1.0]
    assert _tenant_values(f, ("b", "a"))[:, 0, 0].tolist() == [1.0, 2.0]
    of, _ = fleet.series_index(names, ("b", "a"))
    assert of.tolist() == [1, 0, 1]
    for a in (of, *fleet.series_groups(names, ("b", "a"))):
        assert not a.flags.writeable


@given(st.floats(allow_nan=False), st.floats(allow_nan=False), st.integers(-5, 50), st.text(max_size=20))
def test_rate_limit_to_dict_is_what_asdict_gave(rate, burst, level, reason):
    """RateLimit.to_dict writes its fields out instead of dataclasses.asdict (a plan saves one per tenant each
    cycle): the same dict, keys in the same order (the saved plan's JSON)."""
    from dataclasses import asdict

    from daemon.policy.types import RateLimit

    lim = RateLimit(rate, burst, level, reason)
    assert list(lim.to_dict().items()) == list(asdict(lim).items())
    assert set(lim.to_dict()) == {f.name for f in __import__("dataclasses").fields(RateLimit)}


# the node-type and node-name reads of split() were made faster for the replay of a 1,213-node fleet (issue 37,
# item 7): checked against the code they replaced
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["t4", "g2", "A100", "h100", None, 3]), min_size=1, max_size=40),
       st.sampled_from(["object", "str"]))
def test_factorized_node_types_are_the_old_ones(types, kind):
    import pandas as pd

    arr = np.array([str(t) for t in types]) if kind == "str" else np.array(types, dtype=object)
    want_codes, want_uniq = pd.factorize(pd.Series(arr.astype(str)), sort=True)
    codes, uniq = fleet.factorize_types(arr)
    assert codes.tolist() == want_codes.tolist() and [str(t) for t in uniq] == [str(t) for t in want_uniq]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.lists(st.integers(-3, 35), max_size=50), st.booleans())
def test_node_index_of_named_by_index_is_the_old_lookup(n, jobs, shuffled):
    import pandas as pd

    from daemon.policy.state import Nodes

    names = np.arange(n)
    if shuffled:   # not the index: the general lookup
        names = names[::-1].copy()
    z = np.zeros(n, dtype=np.int64)
    nodes = Nodes(names=names, gpus=z + 8, free=z, draining=z, held_by=z - 1)
    jn = np.array(jobs, dtype=np.int64)
    want = pd.Index(names).get_indexer(jn).astype(np.int64) if len(jn) else np.zeros(0, dtype=np.int64)
    assert nodes.index_of(jn).tolist() == want.tolist()
