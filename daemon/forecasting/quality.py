"""Live forecast quality: past forecasts scored against what happened, exported, and a fallback when it degrades.

Each cycle the forecast just issued is kept (one every `stride` steps, so a 1,000-tenant cluster holds a few
MB), and every kept forecast whose horizon has fully elapsed in the history is scored: per tenant, the
pinball loss summed over its quantiles and steps (reported as a weighted quantile loss, divided by the
tenant's actual demand) and the share of actual steps at or under its p90. The last `window` scored
forecasts make the current scores (`ForecastQuality.current()`, the metrics below, `/plan`).

What the policy acts on is each tenant's peak over its two lead windows (`policy.lead_time_steps` for the hold,
`policy.preempt_lead_steps` for preemption), so each scored forecast is also scored there: the forecast's peak
quantiles (`Forecast.peak_over`) against the realised peak, as a weighted quantile loss of the peaks, and the
share of realised peaks at or under the p90 peak, overall, where the series moves and by tier
(`forecaster.metrics`: a window is scored where at least half its steps were seen; a missing step is never
read as zero).

Beside each lead window's forecast peak, the same window is scored for the skill gate (daemon/forecasting/skill.py):
the hold each rule would have made, at the policy's acting quantile (`act_quantile`, `policy.quantile`) against the
realised peak, by that quantile's pinball loss (an inference service of a tier in
`policy.skill_gate.service_quantile`: by that tier's quantile's, `score_quantile`). The forecast's hold is its peak
with the policy's headroom, never under the demand at the forecast's origin (what reservation.targets holds); the
reactive hold is that demand with the headroom. A window counts only where the realised peak, the forecast and the
origin's demand are all known, so both rules are scored on the same
windows (`skill()`).

When the cluster's p90 coverage stays outside [coverage_min, coverage_max] for `fallback_after_cycles`
cycles in a row, `fallback_due()` says so once: the cycle then replaces its forecaster with the best
baseline scored on the current history (StartupSelection), logs why, and `gpuas_forecast_quality_fallback`
goes to 1 (the shipped alert rule `GpuAutoscalerForecastFallback` fires on it). It stays on the baseline
until the model is reloaded (a retrain changes the manifest) or the daemon restarts.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Gauge

from daemon.policy.fleet import split_series
from forecaster.metrics import DEFAULT_PEAK_WINDOWS, PEAK_MIN_OBSERVED, moves, realised_peaks
from forecaster.types import Forecast

log = logging.getLogger("gpu_autoscaler.forecast_quality")


@dataclass
class Scored:
    """One forecast scored over its whole horizon."""

    issued_at: pd.Timestamp
    model: str
    tenants: tuple[str, ...]
    loss: np.ndarray      # [tenant] pinball summed over quantiles and steps
    demand: np.ndarray    # [tenant] sum of |actual| over the scored steps
    covered: np.ndarray   # [tenant] steps at or under p90
    steps: np.ndarray     # [tenant] scored steps (actual known)
    # [tenant, window, 6]: per lead window, the peak's pinball loss summed over quantiles, |realised peak|, p90
    # peak covered, scored (0/1), among windows where the series moves: covered, moving (0/1), and for the skill
    # gate the acting quantile's pinball loss of the forecast's hold, of the reactive hold, compared (0/1)
    peak: np.ndarray | None = None


PEAK_COLS = 9   # the columns of Scored.peak per lead window


@dataclass
class QualityScores:
    """What the console and /plan show: the live scores over the last `scored` forecasts."""

    model: str | None
    scored: int                          # forecasts in the window
    wql: float | None                    # cluster weighted quantile loss over the window
    coverage_p90: float | None           # share of actual steps at or under the p90 forecast
    out_of_bounds_cycles: int
    fallback: bool                       # live quality forced a fallback to the best baseline
    reason: str | None
    tenants: dict[str, dict[str, float | None]] = field(default_factory=dict)  # tenant -> wql, coverage_p90,
    # and per lead window <w>: peak_loss_<w>, peak_coverage_p90_<w>
    # lead window name ("lead", "preempt") -> {"steps", "loss", "coverage_p90", "coverage_p90_moving", "scored",
    # "moving", "by_tier": {tier: the same}}: the forecast peak over that window against the realised peak
    peak: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _nan_to_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


class ForecastQuality:
    def __init__(self, quantiles: tuple[float, ...], horizon: int, *, window: int = 60, coverage_min: float = 0.8,
                 coverage_max: float = 0.98, fallback_after_cycles: int = 10, min_scored: int = 10,
                 stride: int | None = None, registry: CollectorRegistry | None = None,
                 peak_windows: dict[str, int] | None = None, peak_min_observed: float = PEAK_MIN_OBSERVED,
                 act_quantile: float = 0.9, headroom: float = 0.05, skill_window: int = 600) -> None:
        """`peak_windows`: lead window name -> steps, the windows the policy reads the peak over (by default its
        default `lead_time_steps` and `preempt_lead_steps`; the daemon passes its configured ones).
        `act_quantile`, `headroom`: the policy's `quantile` and `headroom`, what the skill gate's holds are scored
        with, over the last `skill_window` scored forecasts (`policy.skill_gate.window`: longer than `window`, so
        that a daily rise the forecast saw stays in the gate's evidence until the next one)."""
        self.act_quantile, self.headroom = float(act_quantile), float(headroom)
        # tenant -> the quantile whose pinball loss scores its holds, where it is not act_quantile (the inference
        # services of the tiers in policy.skill_gate.service_quantile: skill.score_quantiles); a mixed fleet's
        # typed series are scored at their tenant's
        self.score_quantile: dict[str, float] = {}
        # the skill gate's evidence: per scored forecast, its tenants and [tenant, 3] (forecast hold loss, reactive
        # hold loss, compared), and their running sums per tenant tuple (added and evicted, never re-summed)
        self.skill_scored: deque[tuple[tuple[str, ...], np.ndarray]] = deque()
        self.skill_window = max(1, int(skill_window))
        self._skill_sum: dict[tuple[str, ...], list] = {}   # tenants -> [sum array, forecasts in it]
        # tenant -> the model its skill evidence is from, for the tenants a forecast names one for
        # (Forecast.tenant_models: the inference services); when it changes, that tenant's evidence starts anew
        self._skill_model: dict[str, str] = {}
        self.peak_windows = {k: max(1, min(int(v), horizon))
                             for k, v in (DEFAULT_PEAK_WINDOWS if peak_windows is None else peak_windows).items()}
        self.peak_min_observed = peak_min_observed
        self.tiers: dict[str, str] | None = None   # tenant -> tier, as the last observe() was told
        self.quantiles = tuple(quantiles)
        self.q = np.asarray(self.quantiles)
        self.i90 = int(np.argmin(np.abs(self.q - 0.9)))
        self.horizon = horizon
        self.window = window
        self.coverage_min, self.coverage_max = coverage_min, coverage_max
        self.fallback_after_cycles = fallback_after_cycles
        self.min_scored = min_scored
        self.stride = stride or max(1, horizon // 12)
        self.pending: deque[Forecast] = deque()
        self.scored: deque[Scored] = deque(maxlen=window)
        self.out_of_bounds_cycles = 0
        self.fallback = False
        self.reason: str | None = None
        self.model: str | None = None
        self._fired = False
        r = registry or CollectorRegistry()
        self.g_wql = Gauge("gpuas_forecast_wql", "Live weighted quantile loss of the forecasts scored in the window",
                           registry=r)
        self.g_cov = Gauge("gpuas_forecast_p90_coverage", "Live share of actual steps at or under the p90 forecast",
                           registry=r)
        self.g_scored = Gauge("gpuas_forecast_scored", "Forecasts scored in the live-quality window", registry=r)
        self.g_bad = Gauge("gpuas_forecast_coverage_out_of_bounds_cycles",
                           "Consecutive cycles with p90 coverage outside the configured bounds", registry=r)
        self.g_fallback = Gauge("gpuas_forecast_quality_fallback",
                                "1 when live forecast quality forced a fallback to the best baseline", registry=r)
        self.g_t_wql = Gauge("gpuas_forecast_tenant_wql", "Live weighted quantile loss per tenant", ["tenant"],
                             registry=r)
        self.g_t_cov = Gauge("gpuas_forecast_tenant_p90_coverage", "Live p90 coverage per tenant", ["tenant"],
                             registry=r)
        self.g_peak_loss = Gauge("gpuas_forecast_peak_loss", "Live weighted quantile loss of the forecast peak over "
                                 "a policy lead window against the realised peak (tier: all, or one tier)",
                                 ["window", "tier"], registry=r)
        self.g_peak_cov = Gauge("gpuas_forecast_peak_p90_coverage", "Live share of realised peaks over a policy "
                                "lead window at or under the forecast p90 peak", ["window", "tier"], registry=r)
        self.g_peak_cov_mv = Gauge("gpuas_forecast_peak_p90_coverage_moving", "Live share of realised peaks at or "
                                   "under the forecast p90 peak, among lead windows where the series moves",
                                   ["window", "tier"], registry=r)

    def forget(self, tenants: Iterable[str]) -> None:
        """Drop the per-tenant series (`gpuas_forecast_tenant_wql`, `..._p90_coverage`) of tenants gone for
        `cycle.forget_tenant_after_s`, with the daemon's other per-tenant series (daemon/service/telemetry.py)."""
        for t in tenants:
            self.g_t_wql.remove(t)
            self.g_t_cov.remove(t)

    # -- each cycle ---------------------------------------------------------------------------------------
    def observe(self, fc: Forecast | None, history: pd.DataFrame, tiers: dict[str, str] | None = None) -> None:
        """Score every kept forecast whose horizon has elapsed in `history`, then keep `fc` for later.

        `tiers` (tenant -> tier, e.g. from the cycle's cluster state): the peak scores are also given by tier; a
        tenant not in it counts as "normal" (the daemon's default tier)."""
        if tiers is not None:
            self.tiers = dict(tiers)
        self.track(fc, history)
        acc = self._totals()   # one pass over the window serves the judgement and the export
        self._judge(acc)
        self._export(acc)

    def track(self, fc: Forecast | None, history: pd.DataFrame | None) -> None:
        """Score every kept forecast whose horizon has elapsed in `history` (so never one whose windows end after
        its last row), then keep `fc`: `observe` without the judgement and the export (the replay's skill gate)."""
        if history is not None and len(history):
            self._score_matured(history)
        if fc is not None and fc.tenant_models:
            changed = [t for t, m in fc.tenant_models.items() if self._skill_model.get(t, m) != m]
            self._skill_model.update(fc.tenant_models)
            if changed:
                self._drop_skill(changed)
        if fc is not None and np.isfinite(fc.values).any():
            last = self.pending[-1].issued_at if self.pending else None
            if last is None or fc.issued_at >= last + pd.Timedelta(seconds=self.stride * fc.step_s):
                self.pending.append(fc)
            self.model = fc.model

    def _score_matured(self, history: pd.DataFrame) -> None:
        end = history.index[-1]
        while self.pending:
            fc = self.pending[0]
            step = pd.Timedelta(seconds=fc.step_s)
            if fc.issued_at + fc.horizon * step > end:
                break
            self.pending.popleft()
            times = pd.date_range(fc.issued_at + step, periods=fc.horizon, freq=step)
            if times[0] < history.index[0] or history.columns.intersection(fc.tenants).empty:
                continue
            act = history.reindex(index=times, columns=list(fc.tenants)).to_numpy(dtype=float).T  # [N, H]
            last = history.reindex(index=[fc.issued_at], columns=list(fc.tenants)).to_numpy(dtype=float)[0]
            sc = self.score(fc, act, last)
            self.scored.append(sc)
            self._add_skill(sc, fc.tenant_models)

    def _add_skill(self, sc: Scored, models: dict[str, str] | None = None) -> None:
        """Add one scored forecast to the skill gate's evidence; `models` (Forecast.tenant_models): a tenant
        forecast by another model than the one it is now judged on (a forecast made before the services' model
        took over, scored after) adds nothing."""
        if sc.peak is None or sc.peak.shape[2] != PEAK_COLS:
            return
        pk = sc.peak
        row = np.stack([pk[:, :, 6].sum(axis=1), pk[:, :, 7].sum(axis=1), pk[:, :, 8].min(axis=1)], axis=1)
        for i, t in enumerate(sc.tenants):
            if models and t in models and self._skill_model.get(t, models[t]) != models[t]:
                row[i] = 0.0
        self.skill_scored.append((sc.tenants, row))
        self._sum_skill(sc.tenants, row)
        while len(self.skill_scored) > self.skill_window:
            tenants, old = self.skill_scored.popleft()
            acc = self._skill_sum[tenants]
            acc[1] -= 1
            if acc[1] == 0:
                del self._skill_sum[tenants]
            else:
                acc[0] = np.maximum(acc[0] - old, 0.0)

    def _drop_skill(self, tenants: Iterable[str]) -> None:
        """Forget the skill evidence of `tenants` (another model forecasts them now): they plan reactively until
        min_scored windows of the new model are scored, as after `reset`."""
        drop = set(tenants)
        for names, row in self.skill_scored:
            for i, t in enumerate(names):
                if t in drop:
                    row[i] = 0.0
        self._skill_sum = {}
        for names, row in self.skill_scored:
            self._sum_skill(names, row)

    def _sum_skill(self, tenants: tuple[str, ...], row: np.ndarray) -> None:
        """Add one scored forecast's skill row to the running sum of the forecasts of these tenants."""
        acc = self._skill_sum.setdefault(tenants, [np.zeros_like(row), 0])
        acc[0] += row
        acc[1] += 1

    def score(self, fc: Forecast, actual: np.ndarray, last: np.ndarray | None = None) -> Scored:
        """Per-tenant pinball loss, demand, p90 hits and scored steps of one forecast against [tenant, h] actuals,
        and the same for its peak over each lead window; `last` [tenant]: the value at the forecast's origin (what
        says whether the series moved)."""
        pred = fc.values[:, : actual.shape[1], :]
        ok = np.isfinite(actual) & np.isfinite(pred).all(axis=2)
        a = np.where(ok, actual, 0.0)
        diff = a[:, :, None] - np.nan_to_num(pred)
        pin = np.maximum(self.q * diff, (self.q - 1) * diff).sum(axis=2)
        loss = np.where(ok, pin, 0.0).sum(axis=1)
        demand = np.where(ok, np.abs(a), 0.0).sum(axis=1)
        covered = (ok & (a <= np.nan_to_num(pred[:, :, self.i90], nan=-np.inf))).sum(axis=1)
        return Scored(fc.issued_at, fc.model, fc.tenants, loss, demand, covered.astype(float),
                      ok.sum(axis=1).astype(float), self._score_peaks(fc, actual, last))

    def _score_peaks(self, fc: Forecast, actual: np.ndarray, last: np.ndarray | None) -> np.ndarray:
        n = actual.shape[0]
        last = np.full(n, np.nan) if last is None else np.asarray(last, dtype=float)
        out = np.zeros((n, len(self.peak_windows), PEAK_COLS))
        qa = self.act_quantile
        react = last * (1.0 + self.headroom)            # the reactive hold: demand now with headroom
        qs = np.array([self.score_quantile.get(split_series(t)[0], qa) for t in fc.tenants]) \
            if self.score_quantile else np.full(n, qa)     # each tenant's holds are scored at this quantile
        for i, k in enumerate(self.peak_windows.values()):
            if k > actual.shape[1]:
                continue
            real = realised_peaks(actual, k, self.peak_min_observed)                          # [N]
            pred = np.stack([fc.peak_over(k, q) for q in self.quantiles], axis=1)           # [N, Q]
            ok = np.isfinite(real) & np.isfinite(pred).all(axis=1)
            a = np.where(ok, real, 0.0)
            diff = a[:, None] - np.nan_to_num(pred)
            pin = np.maximum(self.q * diff, (self.q - 1) * diff).sum(axis=1)
            cov = ok & (a <= np.nan_to_num(pred[:, self.i90], nan=-np.inf))
            mv = ok & moves(actual, last, k)
            # the skill gate: each rule's hold at the acting quantile, on windows where both are known
            hold = np.fmax(fc.peak_over(k, qa), last) * (1.0 + self.headroom)
            both = np.isfinite(real) & np.isfinite(hold) & np.isfinite(react)
            a2 = np.where(both, real, 0.0)
            gain_f, gain_r = a2 - np.where(both, hold, 0.0), a2 - np.where(both, react, 0.0)
            pin_f = np.where(both, np.maximum(qs * gain_f, (qs - 1) * gain_f), 0.0)
            pin_r = np.where(both, np.maximum(qs * gain_r, (qs - 1) * gain_r), 0.0)
            out[:, i] = np.stack([np.where(ok, pin, 0.0), np.abs(a), cov, ok, cov & mv, mv, pin_f, pin_r, both],
                                 axis=1)
        return out

    # -- judgement and the fallback ------------------------------------------------------------------------
    def _totals(self) -> dict[str, np.ndarray]:
        groups: dict[tuple[str, ...], np.ndarray] = {}   # forecasts over the same tenants add up as arrays
        width = 4 + PEAK_COLS * len(self.peak_windows)   # the step scores, then each lead window's peak scores
        for s in self.scored:
            g = groups.setdefault(s.tenants, np.zeros((len(s.tenants), width)))
            pk = s.peak if s.peak is not None and s.peak.shape[1:] == (len(self.peak_windows), PEAK_COLS) else \
                np.zeros((len(s.tenants), len(self.peak_windows), PEAK_COLS))
            g += np.concatenate([np.stack([s.loss, s.demand, s.covered, s.steps], axis=1),
                                 pk.reshape(len(s.tenants), -1)], axis=1)
        acc: dict[str, np.ndarray] = {}
        for tenants, g in groups.items():
            for i, t in enumerate(tenants):
                acc[t] = acc[t] + g[i] if t in acc else g[i].copy()
        return acc

    def _cluster(self, acc: dict[str, np.ndarray]) -> tuple[float, float]:
        if not acc:
            return float("nan"), float("nan")
        tot = np.sum(list(acc.values()), axis=0)
        wql = 2 * tot[0] / max(tot[1], 1e-9) / len(self.q) if tot[3] else float("nan")
        cov = tot[2] / tot[3] if tot[3] else float("nan")
        return wql, cov

    def _judge(self, acc: dict[str, np.ndarray]) -> None:
        _, cov = self._cluster(acc)
        if len(self.scored) < self.min_scored or not np.isfinite(cov):
            self.out_of_bounds_cycles = 0
            return
        if self.coverage_min <= cov <= self.coverage_max:
            self.out_of_bounds_cycles = 0
            return
        self.out_of_bounds_cycles += 1
        if self.out_of_bounds_cycles >= self.fallback_after_cycles and not self.fallback:
            self.fallback = True
            self.reason = (f"p90 coverage {cov:.2f} outside [{self.coverage_min:.2f}, {self.coverage_max:.2f}] for "
                           f"{self.out_of_bounds_cycles} cycles ({len(self.scored)} forecasts of {self.model} scored)")

    def fallback_due(self) -> str | None:
        """The reason, once, when the cycle should switch to the best baseline; None otherwise."""
        if self.fallback and not self._fired:
            self._fired = True
            return self.reason
        return None

    def reset(self, keep_fallback: bool = True) -> None:
        """A new forecaster is in charge: score it from scratch."""
        self.pending.clear()
        self.scored.clear()
        self.skill_scored.clear()   # a new forecaster shows its skill anew: its tenants plan reactively until then
        self._skill_sum.clear()
        self._skill_model.clear()
        self.out_of_bounds_cycles = 0
        if not keep_fallback:
            self.fallback, self._fired, self.reason = False, False, None
        self._export()

    # -- what others read ----------------------------------------------------------------------------------
    def _peak_of(self, rows: list[np.ndarray], i: int) -> dict:
        """Peak scores of lead window i from accumulated per-tenant rows."""
        c = np.sum([r[4 + PEAK_COLS * i: 4 + PEAK_COLS * (i + 1)] for r in rows], axis=0) if rows else \
            np.zeros(PEAK_COLS)
        loss, demand, covered, scored, mcov, moving = c[:6].tolist()
        return {"loss": _nan_to_none(2 * loss / demand / len(self.q)) if demand > 0 else None,
                "coverage_p90": _nan_to_none(covered / scored) if scored else None,
                "coverage_p90_moving": _nan_to_none(mcov / moving) if moving else None,
                "scored": int(scored), "moving": int(moving)}

    def skill(self) -> dict[str, tuple[float, float, int]]:
        """Per tenant (forecast series), over the last `skill_window` scored forecasts: the acting quantile's
        pinball loss of the forecast's hold and of the reactive hold, summed over the lead windows, and the
        forecasts both were scored on in every lead window: what the skill gate decides on."""
        out: dict[str, tuple[float, float, int]] = {}
        for tenants, (arr, _) in self._skill_sum.items():
            for t, (f, r, n) in zip(tenants, arr.tolist()):
                if t in out:
                    f0, r0, n0 = out[t]
                    out[t] = (f0 + f, r0 + r, n0 + int(round(n)))
                else:
                    out[t] = (f, r, int(round(n)))
        return out

    def peak_scores(self, acc: dict[str, np.ndarray]) -> dict[str, dict]:
        """Lead window name -> its live peak scores over the window of scored forecasts, and by tier."""
        out = {}
        for i, (name, k) in enumerate(self.peak_windows.items()):
            w = {"steps": k, **self._peak_of(list(acc.values()), i)}
            if self.tiers is not None:
                by: dict[str, list[np.ndarray]] = {}
                for t, v in acc.items():
                    by.setdefault(self.tiers.get(t, "normal"), []).append(v)
                w["by_tier"] = {tier: self._peak_of(rows, i) for tier, rows in sorted(by.items())}
            out[name] = w
        return out

    def current(self, acc: dict[str, np.ndarray] | None = None) -> QualityScores:
        acc = self._totals() if acc is None else acc
        wql, cov = self._cluster(acc)
        skill = self.skill()
        tenants = {}
        for t, v in acc.items():
            row = {"wql": _nan_to_none(2 * v[0] / v[1] / len(self.q)) if v[1] > 0 else None,
                   "coverage_p90": _nan_to_none(v[2] / v[3]) if v[3] else None}
            for i, name in enumerate(self.peak_windows):
                pk = self._peak_of([v], i)
                row[f"peak_loss_{name}"], row[f"peak_coverage_p90_{name}"] = pk["loss"], pk["coverage_p90"]
            f_loss, r_loss, n_cmp = skill.get(t, (0.0, 0.0, 0))
            row["hold_loss_forecast"] = f_loss if n_cmp else None   # the skill gate's scores (skill())
            row["hold_loss_reactive"] = r_loss if n_cmp else None
            row["hold_scored"] = n_cmp
            tenants[t] = row
        return QualityScores(self.model, len(self.scored), _nan_to_none(wql), _nan_to_none(cov),
                             self.out_of_bounds_cycles, self.fallback, self.reason, tenants, self.peak_scores(acc))

    def summary(self) -> dict | None:
        """The cluster-level scores for the console (no per-tenant rows); None before anything is scored."""
        cur = self.current()
        if cur.scored == 0:
            return None
        out = {"model": cur.model, "forecasts scored": cur.scored,
               "wQL": None if cur.wql is None else round(cur.wql, 4),
               "p90 coverage": None if cur.coverage_p90 is None else round(cur.coverage_p90, 3),
               "fallback to baseline": cur.fallback}
        for name, w in cur.peak.items():  # what the policy acts on: the peak over each lead window
            out[f"peak wQL ({name}, {w['steps']} steps)"] = None if w["loss"] is None else round(w["loss"], 4)
            out[f"peak p90 coverage ({name})"] = None if w["coverage_p90"] is None else round(w["coverage_p90"], 3)
        if cur.reason:
            out["reason"] = cur.reason
        return out

    def _export(self, acc: dict[str, np.ndarray] | None = None) -> None:
        cur = self.current(acc)
        self.g_wql.set(cur.wql if cur.wql is not None else float("nan"))
        self.g_cov.set(cur.coverage_p90 if cur.coverage_p90 is not None else float("nan"))
        self.g_scored.set(cur.scored)
        self.g_bad.set(self.out_of_bounds_cycles)
        self.g_fallback.set(1 if self.fallback else 0)
        nan = float("nan")
        for name, w in cur.peak.items():
            for tier, sc in [("all", w), *w.get("by_tier", {}).items()]:
                self.g_peak_loss.labels(name, tier).set(nan if sc["loss"] is None else sc["loss"])
                self.g_peak_cov.labels(name, tier).set(nan if sc["coverage_p90"] is None else sc["coverage_p90"])
                self.g_peak_cov_mv.labels(name, tier).set(nan if sc["coverage_p90_moving"] is None
                                                          else sc["coverage_p90_moving"])
        for t, v in cur.tenants.items():
            self.g_t_wql.labels(t).set(v["wql"] if v["wql"] is not None else float("nan"))
            self.g_t_cov.labels(t).set(v["coverage_p90"] if v["coverage_p90"] is not None else float("nan"))
