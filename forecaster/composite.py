"""Two forecasters behind one: the inference services' columns to the services' model, every other column to the
main model, one Forecast out.

Why: an inference service's load is a request rate with a daily cycle, best forecast from its window means
(forecaster.resampled.Resampled, e.g. the daily seasonal naive on 10-minute windows), while the batch tenants keep
the model chosen for them at the cycle's step. The policy reads one forecast, in the history's tenant order, so the
two are merged here (issue 40).

A service absent from the history is absent from the forecast (the policy reads it as no forecast, never as zero).
Where the services' model cannot forecast (less history than ``services_min_history``, a broken model), the main
model forecasts the services' columns too, and ``last_error`` says why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable

import numpy as np
import pandas as pd

from forecaster.types import Forecast

log = logging.getLogger("gpu_autoscaler.forecasting")


class ServicesComposite:
    """``services_model`` on the columns named in ``services``, ``main`` on the rest.

    Both must forecast the same quantiles (the config's). The merged forecast keeps the history's column order,
    the fine step of the history, and the main forecast's own peak quantiles for the main tenants; a service's peak
    over a window is the largest per-step quantile of its model's forecast (what ``Forecast.peak_over`` reads
    when no peak is carried)."""

    def __init__(self, main, services_model, services: Iterable[str], services_min_history: int = 0) -> None:
        self.main = main
        self.services_model = services_model
        self.services = frozenset(str(s) for s in services)
        self.services_min_history = int(services_min_history)   # fewer steps: the main model forecasts them
        self.name = f"{main.name} | services: {services_model.name}"
        self.min_history = int(getattr(main, "min_history", 0) or 0)
        self.last_error: str | None = None

    def split(self, columns) -> tuple[list, list]:
        """(the services' columns, the others), each in the history's order. A service's column is its name, or on
        a mixed fleet one of its typed series ``<tenant>@<spec>``, read as daemon/policy/fleet.tenant_series reads
        them (a type never holds "@", so the last one splits; a plain series wins, so on a one-model cluster a
        tenant named "a@b" is not service a's): typed series fell to the main model before, so a mixed fleet's
        services never got their window model."""
        plain = {str(c) for c in columns}

        def of_service(name: str) -> bool:
            if name in self.services:
                return True
            tenant = name.rsplit("@", 1)[0] if "@" in name else None
            return tenant in self.services and tenant not in plain

        svc = [c for c in columns if of_service(str(c))]
        return svc, [c for c in columns if not of_service(str(c))]

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast | None:
        """The merged forecast; its ``tenant_models`` names, for each service, the model that forecast it (the
        services' model, or the main one before it serves or when it fails), so the skill gate judges a service
        on that model's windows only (daemon/forecasting/quality.py)."""
        svc, rest = self.split(history.columns)
        if not svc:
            return self.main.predict(history, horizon)
        if len(history) < self.services_min_history:
            self.last_error = (f"{self.services_model.name}: {len(history)} steps of history < "
                               f"{self.services_min_history}; {self.main.name} forecasts the services until then")
            return _named(self.main.predict(history, horizon), svc)
        try:
            sfc = self.services_model.predict(history[svc], horizon)
            self.last_error = None
        except Exception as exc:  # too little history for a whole window, a broken model: the main model serves
            self.last_error = f"{self.services_model.name} failed on the services ({exc}); {self.main.name} used"
            log.warning("services' forecaster %s failed, using %s for the services: %s",
                        self.services_model.name, self.main.name, exc)
            return _named(self.main.predict(history, horizon), svc)
        if not rest:
            return _named(sfc, svc)
        mfc = self.main.predict(history[rest], horizon)
        if mfc is None:   # the main model plans on current demand only: so do the services
            return None
        return merge(history.columns, mfc, sfc)


def _named(fc: Forecast | None, services) -> Forecast | None:
    """``fc`` with each of ``services`` it forecasts named as forecast by its model (Forecast.tenant_models: the
    services only, so the skill gate starts a service's evidence anew when its model changes, never a batch
    tenant's when the main model's name does)."""
    if fc is None:
        return None
    have = set(fc.tenants)
    models = {**(fc.tenant_models or {}), **{str(t): fc.model for t in services if str(t) in have}}
    return dataclasses.replace(fc, tenant_models=models)


def merge(columns, main: Forecast, services: Forecast) -> Forecast:
    """One forecast of ``columns`` (in that order) from two forecasts of disjoint tenants: same quantiles and step
    (ValueError otherwise), the horizon the shorter of the two. A column neither forecasts is NaN. Peaks: where the
    main forecast carries a window's own peak quantiles, its tenants keep them and the services' tenants get their
    largest per-step quantile over that window."""
    if tuple(main.quantiles) != tuple(services.quantiles):
        raise ValueError(f"the services' forecast has quantiles {services.quantiles}, the main one "
                         f"{main.quantiles}: both must forecast forecaster.quantiles")
    if main.step_s != services.step_s:
        raise ValueError(f"the services' forecast is at {services.step_s} s steps, the main one at {main.step_s} s")
    tenants = tuple(str(c) for c in columns)
    h = min(main.horizon, services.horizon)
    values = np.full((len(tenants), h, len(main.quantiles)), np.nan)
    peaks = None
    if main.peaks:
        peaks = {k: np.full((len(tenants), len(main.quantiles)), np.nan) for k in main.peaks if int(k) <= h}
    for fc in (main, services):
        pos = {t: i for i, t in enumerate(fc.tenants)}
        rows = [(j, pos[t]) for j, t in enumerate(tenants) if t in pos]
        if not rows:
            continue
        dst, src = (np.array(x, dtype=np.int64) for x in zip(*rows))
        values[dst] = fc.values[src, :h, :]
        for k in peaks or {}:
            peaks[k][dst] = fc.peak_quantiles(k)[src]
    issued = max(main.issued_at, services.issued_at)
    return Forecast(tenants, tuple(main.quantiles), values, issued, main.step_s,
                    f"{main.model}{SERVICES_SEP}{services.model}", peaks=peaks or None,
                    tenant_models={t: services.model for t in services.tenants})


SERVICES_SEP = " | services: "   # a merged forecast's name: "<main model> | services: <services' model>"


def model_of(fc: Forecast, tenant: str) -> str:
    """The model that forecast ``tenant`` (a series name: the console asks per series, fleet.tenant_series): a
    service's is named in ``tenant_models``; any other tenant's is the main model, the first part of a merged
    forecast's name."""
    return (fc.tenant_models or {}).get(tenant) or fc.model.split(SERVICES_SEP, 1)[0]


SEASONAL_WINDOWS = "seasonal_naive_daily+conformal"   # the services' baseline, on their window means


def min_history_steps(window_s: int, step_s: int) -> int:
    """Steps of ``step_s`` a history needs before the daily seasonal naive on ``window_s`` windows sees a day back:
    a day of whole windows and one more (the lag of a day from the newest), and the window still filling."""
    per = int(window_s) // int(step_s)
    return (86400 // int(window_s) + 2) * per


def seasonal_windows(window_s: int, quantiles: tuple[float, ...], *, background: bool = False):
    """The daily seasonal naive (recalibrated) on ``window_s``-second window means, run at any step that divides
    ``window_s`` (Resampled). On ServeGen's 10-minute windows it closed 31-50% of the gap from reactive to the
    perfect forecast at 1-9 min cold starts where the one-minute choice closed 0-2% (docs/replay.md). Fresh per
    call: its recalibration and Resampled's last inner forecast are state. ``background``: its spreads are
    recomputed in a thread (the daemon), not in the forecast call (a replay, reproducible)."""
    from forecaster.resampled import Resampled
    from forecaster.selection import make_baseline

    return Resampled(make_baseline(SEASONAL_WINDOWS, 86400 // int(window_s), tuple(quantiles), refresh=10,
                                   background=background), int(window_s))
