"""The skill gate in the replay: the daemon's own rule (daemon/forecasting/skill.py) on the forecasts scored so far.

At step k the forecast made then is kept, and every kept forecast whose whole horizon has passed by step k is
scored against the trace up to step k, by the daemon's scorer (ForecastQuality), never against a later step: the
gate at step k reads no demand after it. The tenants whose forecasts have shown skill are then the ones the
predictive strategy's plan acts on the forecast for; the others are planned reactively, as in the daemon. On a
mixed fleet each typed series (``tenant@spec``) is scored and decided alone, as in the daemon.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from daemon.config import Config
from daemon.forecasting.quality import ForecastQuality
from daemon.forecasting.skill import Verdict, acting_set, decide, previous_of, score_quantiles
from forecaster.types import Forecast


class ReplayGate:
    def __init__(self, cfg: Config, demand: pd.DataFrame, series: tuple[str, ...] | None = None,
                 services: Iterable[tuple[str, str]] = (), batch: Iterable[tuple[str, str]] = ()) -> None:
        """`demand`: the trace (one column per tenant); `series`: the forecast's series names of those columns, in
        their order, where they differ (a mixed fleet's ``tenant@spec``); `services`: (tenant, tier) of the
        workload's inference services, and `batch` the same of its other tenants, scored as the daemon scores its own
        (score_quantiles)."""
        self.cfg = cfg
        self.scored_at = score_quantiles(services, cfg.policy.skill_gate, batch)
        self.history = demand if series is None else demand.set_axis(list(series), axis=1)
        self.quality: ForecastQuality | None = None
        self.verdicts: dict[str, Verdict] = {}
        self._newest = None   # the newest scored forecast the verdicts were decided on

    def at(self, k: int, fc: Forecast | None, tenants: tuple[str, ...]) -> frozenset[str]:
        """The tenants acting on the forecast at trace step `k` (0-based row of the trace), `fc` the forecast made
        at that step; on a mixed fleet the typed series (``tenant@spec``) acting, each decided alone
        (skill.acting_set)."""
        if self.quality is None and fc is not None:
            q, pc = self.cfg.forecaster.quality, self.cfg.policy
            self.quality = ForecastQuality(fc.quantiles, fc.horizon, window=q.window, min_scored=q.min_scored,
                                           peak_windows={"lead": pc.lead_time_steps, "preempt": pc.preempt_lead_steps},
                                           peak_min_observed=q.peak_min_observed, act_quantile=pc.quantile,
                                           headroom=pc.headroom, skill_window=pc.skill_gate.window)
            self.quality.score_quantile = dict(self.scored_at)
        if self.quality is not None:
            self.quality.track(fc, self.history.iloc[: k + 1])
            newest = self.quality.scored[-1] if self.quality.scored else None
            if newest is not self._newest or not self.verdicts:   # the scores changed (or the first step)
                self._newest = newest
                self.verdicts = decide(self.quality.skill(), tenants, previous_of(self.verdicts),
                                       self.cfg.policy.skill_gate,
                                       self.scored_at, self.cfg.policy.quantile)
        elif not self.verdicts:
            self.verdicts = decide({}, tenants, {}, self.cfg.policy.skill_gate)
        return acting_set(self.verdicts)
