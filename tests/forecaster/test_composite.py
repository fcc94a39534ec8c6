"""Two forecasters behind one (forecaster/composite.py): the services' columns to the services' model, the rest to
the main model, one forecast out in the history's order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.composite import ServicesComposite, merge, model_of
from forecaster.types import Forecast

Q = (0.5, 0.9)


class Const:
    """Forecasts ``value`` for every tenant it is given, and records which columns it saw."""

    def __init__(self, name: str, value: float, peaks: dict[int, float] | None = None, fail: bool = False) -> None:
        self.name, self.value, self.peaks, self.fail = name, value, peaks, fail
        self.seen: list[list[str]] = []

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        self.seen.append(list(history.columns))
        if self.fail:
            raise RuntimeError("no whole window")
        n = history.shape[1]
        peaks = {k: np.full((n, len(Q)), v) for k, v in self.peaks.items()} if self.peaks else None
        return Forecast(tuple(history.columns), Q, np.full((n, horizon, len(Q)), self.value), history.index[-1], 60,
                        self.name, peaks=peaks)


def history(cols: list[str], n: int = 30) -> pd.DataFrame:
    idx = pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC", name="time")
    return pd.DataFrame(np.ones((n, len(cols))), index=idx, columns=cols)


def test_services_columns_go_to_the_services_model_and_the_order_is_kept():
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    fc = ServicesComposite(main, svc, ["s1", "s2"]).predict(history(["b1", "s2", "b2", "s1"]), 5)
    assert main.seen == [["b1", "b2"]] and svc.seen == [["s2", "s1"]]
    assert fc.tenants == ("b1", "s2", "b2", "s1") and fc.quantiles == Q and fc.step_s == 60
    assert fc.values[:, :, 0].max(axis=1).tolist() == [1.0, 7.0, 1.0, 7.0]
    assert fc.model == "main | services: svc"


def test_main_peaks_are_kept_and_a_service_reads_its_largest_step():
    main, svc = Const("main", 1.0, peaks={5: 3.0}), Const("svc", 7.0)
    fc = ServicesComposite(main, svc, ["s"]).predict(history(["s", "b"]), 5)
    assert fc.peak_over(5, 0.5).tolist() == [7.0, 3.0]


def test_a_service_missing_from_the_history_is_not_forecast_as_zero():
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    fc = ServicesComposite(main, svc, ["s", "gone"]).predict(history(["s", "b"]), 5)
    assert "gone" not in fc.tenants and "gone" not in fc.tenant_models
    young = ServicesComposite(main, svc, ["s", "gone"], services_min_history=100).predict(history(["s", "b"]), 5)
    assert young.tenant_models == {"s": "main"}        # the main model forecasts the services until it serves
    assert np.isnan(fc.peak_over(5, 0.5, tenants=["gone", "s"])[0])


def test_too_little_history_or_a_failing_services_model_hands_the_services_to_the_main_model():
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    comp = ServicesComposite(main, svc, ["s"], services_min_history=100)
    fc = comp.predict(history(["s", "b"]), 5)
    assert svc.seen == [] and fc.values[:, 0, 0].tolist() == [1.0, 1.0]
    assert "30 steps of history < 100" in comp.last_error
    broken = ServicesComposite(main, Const("svc", 7.0, fail=True), ["s"])
    fc = broken.predict(history(["s", "b"]), 5)
    assert fc.values[:, 0, 0].tolist() == [1.0, 1.0] and "no whole window" in broken.last_error


def test_merging_forecasts_of_other_quantiles_is_refused():
    h = history(["a", "b"])
    a = Const("a", 1.0).predict(h[["a"]], 3)
    b = Forecast(("b",), (0.5, 0.99), np.zeros((1, 3, 2)), h.index[-1], 60, "b")
    with pytest.raises(ValueError, match="quantiles"):
        merge(["a", "b"], a, b)


def test_without_services_in_the_history_only_the_main_model_runs_and_no_fallback_is_said():
    """No service column this cycle: the services' model is not asked (asked with no column it would fail and the
    API would say a fallback every cycle)."""
    main, svc = Const("main", 1.0), Const("svc", 7.0, fail=True)
    comp = ServicesComposite(main, svc, ["s"])
    fc = comp.predict(history(["a", "b"]), 5)
    assert svc.seen == [] and fc.tenants == ("a", "b") and comp.last_error is None


def test_the_services_model_runs_from_exactly_its_minimum_history_and_its_old_reason_is_cleared():
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    comp = ServicesComposite(main, svc, ["s"], services_min_history=40)
    comp.predict(history(["s", "b"], n=39), 5)
    assert svc.seen == [] and "39 steps of history < 40" in comp.last_error
    fc = comp.predict(history(["s", "b"], n=40), 5)
    assert svc.seen == [["s"]] and fc.values[:, 0, 0].tolist() == [7.0, 1.0]
    assert comp.last_error is None      # the API's fallback reason is this cycle's, not the young history's


def test_services_only_get_their_model_alone_and_no_main_forecast_means_none():
    """Every tenant a service: the main model is not asked. The main model planning on current demand only (no
    forecast): so do the services."""
    main, svc = Const("main", 1.0, fail=True), Const("svc", 7.0)
    fc = ServicesComposite(main, svc, ["s1", "s2"]).predict(history(["s2", "s1"]), 5)
    assert main.seen == [] and fc.tenants == ("s2", "s1") and fc.values[:, :, 0].max() == 7.0
    assert fc.tenant_models == {"s2": "svc", "s1": "svc"}      # the skill gate's evidence per service's model

    class NoForecast(Const):
        def predict(self, history, horizon):
            super().predict(history, horizon)
            return None

    assert ServicesComposite(NoForecast("none", 0.0), svc, ["s"]).predict(history(["s", "b"]), 5) is None
    young = ServicesComposite(NoForecast("none", 0.0), svc, ["s"], services_min_history=100)
    assert young.predict(history(["s", "b"]), 5) is None                  # before the services' model serves too


def test_the_composite_keeps_the_main_models_min_history():
    class Needs(Const):
        min_history = 123

    assert ServicesComposite(Needs("main", 1.0), Const("svc", 7.0), ["s"]).min_history == 123


def test_merge_keeps_the_shorter_horizon_its_first_steps_and_nan_where_no_model_forecasts():
    """A column neither model forecasts is missing (NaN), never zero load; the horizon is the shorter one, from the
    first step; the merge is issued at the later of the two."""
    h = history(["a", "s", "c"])
    values = np.arange(8, dtype=float).reshape(1, 8, 1) * np.ones((1, 8, 2))
    a = Forecast(("a",), Q, values, h.index[-1], 60, "m")
    s = Forecast(("s",), Q, np.full((1, 5, 2), 7.0), h.index[-2], 60, "v")
    fc = merge(["a", "s", "c"], a, s)
    assert fc.horizon == 5 and fc.values[0, :, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert fc.values[1, :, 0].tolist() == [7.0] * 5
    assert np.isnan(fc.values[2]).all()
    assert fc.issued_at == h.index[-1]


def test_merging_forecasts_at_other_steps_is_refused():
    h = history(["a", "b"])
    a = Const("a", 1.0).predict(h[["a"]], 3)
    b = Forecast(("b",), Q, np.zeros((1, 3, 2)), h.index[-1], 600, "b")
    with pytest.raises(ValueError, match="600 s steps"):
        merge(["a", "b"], a, b)


def test_on_a_mixed_fleet_a_services_typed_series_go_to_the_services_model():
    """On a mixed fleet the forecast's series are ``<tenant>@<spec>`` (daemon/policy/fleet.py): a service's typed
    series went to the main model, so its window model never served there. The last "@" splits (a tenant's name
    may hold one); another tenant whose name only starts like a service's stays with the main model."""
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    cols = ["b1@h100", "s1@h100", "s1@v100m16|v100m32", "a@b@*", "s10@h100"]
    fc = ServicesComposite(main, svc, ["s1", "a@b"]).predict(history(cols), 5)
    assert svc.seen == [["s1@h100", "s1@v100m16|v100m32", "a@b@*"]] and main.seen == [["b1@h100", "s10@h100"]]
    assert fc.tenants == tuple(cols)
    assert dict(fc.tenant_models) == {c: "svc" for c in ("s1@h100", "s1@v100m16|v100m32", "a@b@*")}
    assert model_of(fc, "s1@h100") == "svc" and model_of(fc, "a@b@*") == "svc" and model_of(fc, "s10@h100") == "main"


def test_on_a_one_model_cluster_a_tenant_named_like_a_services_typed_series_stays_with_the_main_model():
    """As daemon/policy/fleet.tenant_series reads series: a plain series wins, so a tenant named "s1@x" beside
    service s1 is its own tenant, not s1's typed series."""
    main, svc = Const("main", 1.0), Const("svc", 7.0)
    ServicesComposite(main, svc, ["s1"]).predict(history(["s1", "s1@x"]), 5)
    assert svc.seen == [["s1"]] and main.seen == [["s1@x"]]
