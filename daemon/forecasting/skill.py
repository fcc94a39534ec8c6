"""The skill gate: per tenant, act on the forecast only where it has shown skill (issue 40, item 2).

A forecast has value where the demand has a pattern its lead time can see; where it has none, acting on it only
costs (holds held idle, jobs preempted for rises that do not come). So each tenant is planned on the forecast only
while, on the recent scored windows (ForecastQuality.skill: the acting quantile's pinball loss of each rule's hold
against the realised peak over the policy's lead windows), the forecast's hold loses at most (1 - margin) times
what the reactive hold (demand now with headroom) loses. It stays on the forecast until its loss exceeds
(1 - margin + hysteresis) times the reactive loss. A tenant with fewer than `min_scored` forecasts scored for both is
planned reactively: the safe side, as the policy is without a forecast.

On a mixed fleet the forecast's series are typed (``tenant@spec``, daemon/policy/fleet.py) and each series decides
alone, with its own hysteresis and `min_scored`: a tenant whose a100 demand has a daily pattern its forecast sees
and whose t4 demand is bursts acts on the forecast for its a100 work only. Its verdict then lists one per type
(``Verdict.by_type``) and says in one line which types act; `acting_set` names the acting series, so the plan holds
and preempts on the forecast for those and on the demand now for the tenant's other types.

`decide` is pure: scores and the previous decisions in, decisions out. The cycle keeps the decisions beside the
quality scorer (in memory); the replay runs the same function on the forecasts it has scored so far.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from daemon.config import SkillGateConfig
from daemon.policy.engine import GATE_WHY
from daemon.policy.fleet import ANY_SPEC, SERIES_SEP, split_series


@dataclass(frozen=True)
class Verdict:
    """One tenant's decision and why, as the plan, /api/v1, the console and the metric show it."""

    acting: bool
    why: str
    forecast_loss: float | None = None   # acting quantile's pinball loss of the forecast's holds (summed)
    reactive_loss: float | None = None   # the same of the reactive holds, on the same windows
    scored: int = 0                      # forecasts both were scored on (in every lead window)
    # a mixed fleet's tenant: its typed series' own verdicts, by type spec ("a100", "v100m16|v100m32", "any"), the
    # tenant's `acting` true when any of them acts; None for a plain tenant series (a one-model cluster's)
    by_type: Mapping[str, "Verdict"] | None = None

    def to_dict(self) -> dict:
        out = {"acting": self.acting, "why": self.why, "forecast_loss": self.forecast_loss,
               "reactive_loss": self.reactive_loss, "scored": self.scored}
        if self.by_type is not None:
            out["by_type"] = {k: v.to_dict() for k, v in self.by_type.items()}
        return out


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


def type_label(spec: tuple[str, ...]) -> str:
    """How a typed series' set of types is named in a verdict, the API and the metric: "a100", "v100m16|v100m32",
    or "any" (work that runs on any type)."""
    return "|".join(spec) or "any"


def by_tenant(scores: Mapping[str, tuple[float, float, int]], plain: Collection[str] = ()
              ) -> dict[str, dict[str | None, tuple[float, float, int]]]:
    """Scores by forecast series grouped per tenant: tenant -> type label (None for a plain tenant series) ->
    scores. A mixed fleet's typed series of one tenant stay apart: each decides alone. A name in `plain` (the
    tenants) is a tenant's plain series, "@" or not (a one-model cluster's tenant may be named "a@b")."""
    out: dict[str, dict[str | None, tuple[float, float, int]]] = {}
    for name, sc in scores.items():
        t, spec = _series(name, plain)
        out.setdefault(t, {})[None if spec is None else type_label(spec)] = sc
    return out


def _series(name: str, plain: Collection[str]) -> tuple[str, tuple[str, ...] | None]:
    """(tenant, type spec or None) of a forecast series name; a name in `plain` (the tenants) is a tenant's own
    series, "@" or not (a one-model cluster's tenant may be named "a@b")."""
    return (name, None) if name in plain else split_series(name)


def series_of(tenant: str, label: str | None) -> str:
    """The forecast series name of a tenant's verdict for one type label (None: the tenant's plain series)."""
    if label is None:
        return tenant
    return f"{tenant}{SERIES_SEP}{ANY_SPEC if label == 'any' else label}"


def decide(scores: Mapping[str, tuple[float, float, int]], tenants: Iterable[str], previous: Mapping[str, bool],
           gate: SkillGateConfig, scored_at: Mapping[str, float] | None = None,
           act_quantile: float | None = None) -> dict[str, Verdict]:
    """Per tenant of `tenants`: whether its plan acts on the forecast, from `scores` (tenant or typed series ->
    forecast hold loss, reactive hold loss, forecasts scored; ForecastQuality.skill) and `previous` (tenant or
    typed series -> acting at the last decision; absent: not acting; ``previous_of``). A tenant with typed series
    gets one verdict per series (``Verdict.by_type``), each with its own hysteresis and `min_scored`, and acts on
    the forecast for those that pass. `scored_at` (tenant -> quantile, the tenants scored at
    another quantile than the acting one: score_quantiles) is named in the verdict's why, and beside it the acting
    quantile (`act_quantile`, policy.quantile) the forecast's holds are made at: a tenant with a plain daily pattern
    whose p90 holds lose at p50 (they stand above its demand all day, each idle GPU weighing one short) reads as
    such, not as a forecast that missed its pattern."""
    tenants = tuple(tenants)
    groups = by_tenant(scores, frozenset(tenants))
    scored_at = scored_at or {}
    out: dict[str, Verdict] = {}
    for t in tenants:
        mine = groups.get(t, {})
        typed = {k: v for k, v in mine.items() if k is not None}
        if not typed or None in mine:   # a plain tenant series (or none scored yet): one verdict, as on one model
            out[t] = _one(mine.get(None, (0.0, 0.0, 0)), bool(previous.get(t, False)), gate, scored_at.get(t),
                          act_quantile)
            continue
        each = {k: _one(typed[k], bool(previous.get(series_of(t, k), False)), gate, scored_at.get(t), act_quantile)
                for k in sorted(typed)}
        out[t] = _summary(each)
    return out


def _one(score: tuple[float, float, int], was: bool, gate: SkillGateConfig, at: float | None,
         act_quantile: float | None) -> Verdict:
    """One series' verdict (a tenant's, or one type's of a mixed fleet's tenant)."""
    f, r, n = score
    if n < gate.min_scored:
        return Verdict(False, f"reactive: {n} of {gate.min_scored} forecasts scored", None if n == 0 else f,
                       None if n == 0 else r, n)
    on_at, off_at = 1.0 - gate.margin, 1.0 - gate.margin + gate.hysteresis
    theirs = "the reactive holds'" + (f" at p{at * 100:g}" if at is not None else "")
    held = (f"p{act_quantile * 100:g} holds" if act_quantile is not None and at is not None
            and at != act_quantile else "holds")
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
    return Verdict(acting, why, f, r, n)


def _summary(each: dict[str, Verdict]) -> Verdict:
    """A mixed fleet's tenant: acting when any of its types acts; its why names which (each type's own why is in
    ``by_type``); the losses summed, the fewest scored of any type. One type: that type's verdict."""
    if len(each) == 1:
        v = next(iter(each.values()))
        return dataclasses.replace(v, by_type=each)
    on = [k for k, v in each.items() if v.acting]
    off = [k for k, v in each.items() if not v.acting]
    why = ("forecast for " + ", ".join(on) + ("; reactive for " + ", ".join(off) if off else "") if on
           else "reactive for " + ", ".join(off))
    losses = [v for v in each.values() if v.forecast_loss is not None]
    return Verdict(bool(on), why, sum(v.forecast_loss for v in losses) if losses else None,   # type: ignore[misc]
                   sum(v.reactive_loss for v in losses) if losses else None,   # type: ignore[misc]
                   min(v.scored for v in each.values()), each)


def acting_set(verdicts: Mapping[str, Verdict]) -> frozenset[str]:
    """The names plan() acts on the forecast for: a plain tenant's name, a mixed fleet's acting typed series
    (``tenant@spec``; the plan holds the tenant's other types on their demand now)."""
    out: set[str] = set()
    for t, v in verdicts.items():
        if v.by_type is None:
            if v.acting:
                out.add(t)
        else:
            out.update(series_of(t, k) for k, x in v.by_type.items() if x.acting)
    return frozenset(out)


def previous_of(verdicts: Mapping[str, Verdict]) -> dict[str, bool]:
    """The `previous` of the next ``decide``: each tenant's, and each typed series' by its series name."""
    out: dict[str, bool] = {}
    for t, v in verdicts.items():
        out[t] = v.acting
        for k, x in (v.by_type or {}).items():
            out[series_of(t, k)] = x.acting
    return out


def acting_tenants(acting: Iterable[str], plain: Collection[str] = ()) -> frozenset[str]:
    """The tenants of an acting set (``acting_set``): those acting on the forecast for at least one type. A name
    in `plain` (the tenants) is a tenant's own, "@" or not."""
    return frozenset(_series(a, plain)[0] for a in acting)


def restrict(acting: frozenset[str], tenants: frozenset[str]) -> frozenset[str]:
    """The names of `acting` (tenants or typed series) whose tenant is in `tenants`."""
    return frozenset(a for a in acting if _series(a, tenants)[0] in tenants)


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
