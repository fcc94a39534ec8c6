"""Picks the forecaster for this cluster: the model `retrain` scored best on it, or the best baseline at start-up.

- `forecaster.kind = "auto"` (default): the manifest's `in_use` entry, if it was scored on this cluster
  (`<source.kind>:<cluster.name>`, e.g. the shipped default is scored on "simulator:default") and fits the
  cycle's step and horizon; otherwise a StartupSelection scores the baselines on the first history read.
- "lstm": the in-use (or newest promoted) LSTM, and an error if there is none.
- "seasonal_naive" / "ets": that baseline, always.
- "none": no forecast; the policy plans on current demand only (reactive).

Inference services (tenants with a `[tenants.inference]` table) get their own model on their window means beside
whichever of these is chosen, unless forecaster.services.kind = "same" (daemon/forecasting/services.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

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


class NoForecast:
    """`forecaster.kind = "none"`: no forecast at all; the policy plans on current demand only (reactive: it holds
    what is asked now plus the headroom, and preempts only for work already waiting). For a cluster whose own
    replay shows the forecast does not help (`simulate --recommend`)."""

    name = "none"
    min_history = 0

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast | None:
        return None


def baseline(cfg: Config) -> Forecaster:
    return SeasonalNaive(cfg.forecaster.season_steps, cfg.forecaster.quantiles)


def cluster_id(cfg: Config) -> str:
    """What a model must have been scored on to be used here."""
    return f"{cfg.source.kind}:{cfg.cluster.name}"


def in_use(cfg: Config) -> tuple[Forecaster, dict]:
    """The manifest's in-use model for this cluster, ready to run; ModelError says why it cannot be used."""
    from forecaster import registry, selection

    fc = cfg.forecaster
    entry = registry.read_in_use(fc.model_dir)
    here = cluster_id(cfg)
    if entry is None:
        manifest = Path(fc.model_dir) / registry.MANIFEST
        if not manifest.exists():  # said as "no `in_use` in the manifest", a manifest that is not there at all
            where = "" if manifest.is_absolute() else f", relative to the working directory {Path.cwd()}"
            raise registry.ModelError(f"{fc.model_dir}: no model manifest ({manifest}{where}; "
                                      "forecaster.model_dir)")
        raise registry.ModelError(f"{fc.model_dir}: no model scored on any cluster yet (no `in_use` in the manifest)")
    if entry["scored_on"] != here:
        raise registry.ModelError(f"the model in use in {fc.model_dir} ({entry['name']}) was scored on "
                                  f"{entry['scored_on']!r}, never on this cluster ({here!r})")
    selection.check_runnable(entry, cfg.cycle.resolution_s, cfg.cycle.horizon_steps)
    scored = entry.get("peak_windows")
    wanted = {"lead": cfg.policy.lead_time_steps, "preempt": cfg.policy.preempt_lead_steps}
    if scored and {k: max(1, min(v, int(entry.get("horizon", v)))) for k, v in wanted.items()} != scored:
        # its peaks (a peak head, a peak calibration) are for the old windows: the policy falls back to the
        # largest per-step quantile over the new ones (Forecast.peak_over), which retrain did not score
        log.warning("the model in use (%s) was scored for lead windows %s, the policy now reads %s: retrain to "
                    "score and calibrate the peak over these", entry["name"], scored, wanted)
    model = selection.resolve(entry, fc.model_dir, tuple(fc.quantiles))
    if entry.get("kind") == "lstm":
        fb = selection.make_baseline(entry.get("fallback", "seasonal_naive_daily"),
                                     int(entry.get("season", fc.season_steps)),
                                     tuple(fc.quantiles), refresh=10, background=True)
        model = WithFallback(model, fb, model.min_history)
    return model, entry


def build(cfg: Config) -> tuple[Forecaster, str]:
    """The forecaster for the daemon and a one-line note on what was chosen and why: the main one (below), with the
    inference services' columns forecast by their own model on their window means (daemon/forecasting/services.py;
    forecaster.services.kind = "same" leaves them to the main one)."""
    from daemon.forecasting.services import service_tenants, with_services

    model, note = _main(cfg)
    model, svc_note = with_services(cfg, model, service_tenants(cfg), background=True)
    return model, f"{note}; {svc_note}" if svc_note else note


def _main(cfg: Config) -> tuple[Forecaster, str]:
    """The main forecaster (every tenant that is not an inference service) and why."""
    from forecaster import registry
    from forecaster.selection import StartupSelection

    fc = cfg.forecaster
    base = baseline(cfg)
    if fc.kind == "none":
        return NoForecast(), "forecaster: none (reactive: the policy plans on current demand only)"
    if fc.kind == "seasonal_naive":
        return base, f"forecaster: {base.name}"
    if fc.kind == "ets":
        return WithFallback(HoltWinters(fc.season_steps, fc.quantiles), base), "forecaster: holt_winters"
    if fc.kind == "lstm":
        try:
            model, entry = in_use(cfg)
        except registry.ModelError:
            model, entry = registry.load_current(fc.model_dir), {}
        if entry.get("kind", "lstm") != "lstm":
            model = registry.load_current(fc.model_dir)
        if not isinstance(model, WithFallback):
            model = WithFallback(model, base, model.min_history)
        return model, f"forecaster: {model.name} from {fc.model_dir}"
    try:
        model, entry = in_use(cfg)
    except registry.ModelError as exc:
        log.warning("%s; scoring the baselines on the start-up history instead", exc)
        return StartupSelection(fc.season_steps, tuple(fc.quantiles)), \
            f"forecaster: best baseline on the start-up history ({exc})"
    return model, f"forecaster: {model.name} from {fc.model_dir} ({entry.get('why', 'in use')})"
