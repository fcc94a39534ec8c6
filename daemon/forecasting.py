"""Picks the forecaster the config asks for, and falls back to a baseline when it cannot be used."""

from __future__ import annotations

import logging

import pandas as pd

from daemon.config import Config
from forecaster.baselines import Forecaster, HoltWinters, SeasonalNaive
from forecaster.types import Forecast

log = logging.getLogger("gpu_autoscaler.forecasting")


class WithFallback:
    """Use `primary`; if it fails or has too little history, use `fallback` and say why."""

    def __init__(self, primary: Forecaster, fallback: Forecaster, min_history: int = 0) -> None:
        self.primary = primary
        self.fallback = fallback
        self.min_history = min_history
        self.name = primary.name
        self.last_error: str | None = None

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        if len(history) < self.min_history:
            self.last_error = f"{self.primary.name}: {len(history)} steps of history < {self.min_history}"
            return self.fallback.predict(history, horizon)
        try:
            fc = self.primary.predict(history, horizon)
            self.last_error = None
            return fc
        except Exception as exc:  # a broken model must never stop the cycle
            self.last_error = f"{self.primary.name} failed: {exc}"
            log.warning("forecaster %s failed, using %s: %s", self.primary.name, self.fallback.name, exc)
            return self.fallback.predict(history, horizon)


def baseline(cfg: Config) -> Forecaster:
    return SeasonalNaive(cfg.forecaster.season_steps, cfg.forecaster.quantiles)


def build(cfg: Config) -> tuple[Forecaster, str]:
    """The forecaster for the daemon and a one-line note on what was chosen and why."""
    fc = cfg.forecaster
    base = baseline(cfg)
    if fc.kind == "seasonal_naive":
        return base, f"forecaster: {base.name}"
    if fc.kind == "ets":
        return WithFallback(HoltWinters(fc.season_steps, fc.quantiles), base), "forecaster: holt_winters"
    from forecaster.registry import ModelError, load_current

    try:
        model = load_current(fc.model_dir)
    except ModelError as exc:
        if fc.kind == "lstm":
            raise
        log.warning("no usable model in %s (%s); falling back to %s", fc.model_dir, exc, base.name)
        return base, f"forecaster: {base.name} (fallback: {exc})"
    return WithFallback(model, base, model.min_history), f"forecaster: {model.name} from {fc.model_dir}"
