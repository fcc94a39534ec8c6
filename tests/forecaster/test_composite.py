"""Two forecasters behind one (forecaster/composite.py): the services' columns to the services' model, the rest to
the main model, one forecast out in the history's order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecaster.composite import ServicesComposite, merge
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
    assert "gone" not in fc.tenants
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
