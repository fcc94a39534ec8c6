"""The skill gate: per tenant, act on the forecast only where it has shown skill (issue 40, item 2).

A forecast has value where the demand has a pattern its lead time can see; where it has none, acting on it only
costs (holds held idle, jobs preempted for rises that do not come). So each tenant is planned on the forecast only
while, on the recent scored windows (ForecastQuality.skill: the acting quantile's pinball loss of each rule's hold
against the realised peak over the policy's lead windows), the forecast's hold loses at most (1 - margin) times
what the reactive hold (demand now with headroom) loses. It stays on the forecast until its loss exceeds
(1 - margin + hysteresis) times the reactive loss. A tenant with fewer than `min_scored` forecasts scored for both is
planned reactively: the safe side, as the policy is without a forecast.

`decide` is pure: scores and the previous decisions in, decisions out. The cycle keeps the decisions beside the
quality scorer (in memory); the replay runs the same function on the forecasts it has scored so far.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from daemon.config import SkillGateConfig
from daemon.policy.engine import GATE_WHY
from daemon.policy.fleet import split_series


@dataclass(frozen=True)
class Verdict:
    """One tenant's decision and why, as the plan, /api/v1, the console and the metric show it."""

    acting: bool
    why: str
    forecast_loss: float | None = None   # acting quantile's pinball loss of the forecast's holds (summed)
    reactive_loss: float | None = None   # the same of the reactive holds, on the same windows
    scored: int = 0                      # forecasts both were scored on (in every lead window)

    def to_dict(self) -> dict:
        return {"acting": self.acting, "why": self.why, "forecast_loss": self.forecast_loss,
                "reactive_loss": self.reactive_loss, "scored": self.scored}


def score_quantiles(services: Iterable[tuple[str, str]], gate: SkillGateConfig,
                    batch: Iterable[tuple[str, str]] = ()) -> dict[str, float]:
    """Tenant -> the quantile its holds are scored at (ForecastQuality.score_quantile), from `services` ((tenant,
    tier) of each inference service) and `gate.service_quantile`, and `batch` (the other tenants, likewise) and
    `gate.batch_quantile`: a service's shortfall refuses requests, so it weighs more than a batch tenant's, whose
    jobs wait, while a batch hold held idle keeps a lower tier's job waiting. A tenant of a tier not listed is not
    in it (scored at the acting quantile)."""
    out = {t: gate.batch_quantile[tier] for t, tier in batch if tier in gate.batch_quantile}
    out.update({t: gate.service_quantile[tier] for t, tier in services if tier in gate.service_quantile})
    return out


def per_tenant(scores: Mapping[str, tuple[float, float, int]]) -> dict[str, tuple[float, float, int]]:
    """Scores by forecast series summed per tenant: a mixed fleet's typed series of one tenant decide together
    (the fewest windows of any of its series count)."""
    out: dict[str, tuple[float, float, int]] = {}
    for name, (f, r, n) in scores.items():
        t = split_series(name)[0]
        if t in out:
            f0, r0, n0 = out[t]
            out[t] = (f0 + f, r0 + r, min(n0, n))
        else:
            out[t] = (f, r, n)
    return out


def decide(scores: Mapping[str, tuple[float, float, int]], tenants: Iterable[str], previous: Mapping[str, bool],
           gate: SkillGateConfig, scored_at: Mapping[str, float] | None = None,
           act_quantile: float | None = None) -> dict[str, Verdict]:
    """Per tenant of `tenants`: whether its plan acts on the forecast, from `scores` (tenant or typed series ->
    forecast hold loss, reactive hold loss, forecasts scored; ForecastQuality.skill) and `previous` (tenant ->
    acting at the last decision; absent: not acting). `scored_at` (tenant -> quantile, the tenants scored at
    another quantile than the acting one: score_quantiles) is named in the verdict's why, and beside it the acting
    quantile (`act_quantile`, policy.quantile) the forecast's holds are made at: a tenant with a plain daily pattern
    whose p90 holds lose at p50 (they stand above its demand all day, each idle GPU weighing one short) reads as
    such, not as a forecast that missed its pattern."""
    by = per_tenant(scores)
    scored_at = scored_at or {}
    out: dict[str, Verdict] = {}
    on_at, off_at = 1.0 - gate.margin, 1.0 - gate.margin + gate.hysteresis
    for t in tenants:
        f, r, n = by.get(t, (0.0, 0.0, 0))
        if n < gate.min_scored:
            out[t] = Verdict(False, f"reactive: {n} of {gate.min_scored} forecasts scored", None if n == 0 else f,
                             None if n == 0 else r, n)
            continue
        was = bool(previous.get(t, False))
        theirs = "the reactive holds'" + (f" at p{scored_at[t] * 100:g}" if t in scored_at else "")
        held = (f"p{act_quantile * 100:g} holds" if act_quantile is not None and t in scored_at
                and scored_at[t] != act_quantile else "holds")
        ratio = f / r if r > 0 else (0.0 if f <= 0 else float("inf"))
        if r <= 0 and f <= 0:   # both perfect: nothing to gain from the forecast, and nothing to lose by reacting
            acting, why = was, "forecast and reactive both lost nothing: " + ("kept on the forecast" if was
                                                                             else "reactive")
        elif was:
            acting = ratio <= off_at
            why = (f"forecast: its {held} lose {ratio:.0%} of {theirs} (leaves at > {off_at:.0%})"
                   if acting else f"reactive: the forecast's {held} lose {ratio:.0%} of {theirs} "
                   f"(> {off_at:.0%})")
        else:
            acting = ratio <= on_at
            why = (f"forecast: its {held} lose {ratio:.0%} of {theirs} (<= {on_at:.0%})" if acting
                   else f"reactive: the forecast's {held} lose {ratio:.0%} of {theirs} (needs "
                   f"<= {on_at:.0%})")
        out[t] = Verdict(acting, why, f, r, n)
    return out


def acting_set(verdicts: Mapping[str, Verdict]) -> frozenset[str]:
    """The tenants plan() acts on the forecast for."""
    return frozenset(t for t, v in verdicts.items() if v.acting)


def reactive_why(notes: tuple[str, ...], verdicts: Mapping[str, Verdict], min_scored: int) -> tuple[str, ...]:
    """The plan's notes with the skill gate's count of reactive tenants split by why (``GATE_WHY``, all the plan
    knows): how many have fewer than `min_scored` forecasts scored yet, and how many a forecast that has not shown
    skill. On the first cycles every tenant is of the first kind, and saying their forecast has shown no skill
    would send an operator looking for a bad model."""
    reactive = [v for v in verdicts.values() if not v.acting]
    few = sum(1 for v in reactive if v.scored < min_scored)
    parts = ([f"{few} with fewer than {min_scored} forecasts scored yet"] if few else []) + \
        ([f"{len(reactive) - few} whose forecast has not shown skill"] if len(reactive) > few else [])
    if not parts:
        return notes
    return tuple(n.replace(f"({GATE_WHY})", f"({', '.join(parts)})", 1) if n.startswith("skill gate: ") else n
                 for n in notes)
