"""The replay's own knobs, which are not policy fields, and how the perfect forecast uses its own.

The strategies (`STRATEGIES`, daemon/sim/replay.py says what each one is); the perfect forecast's knobs (how many
steps of the true future it knows, the share of the rises in it that it sees, its inference services' rates only)
and predictive's (the skill gate's margin, a forecast for the services only); `perfect_knob_error`, which says why a
setting of them is invalid; and `seen_future`, the true future as a forecast that knows only part of it.
"""

from __future__ import annotations

import numpy as np

STRATEGIES = ("static", "reactive", "predictive", "perfect")
# the perfect forecast's knobs that are not policy fields: how many steps of the true future it knows, and the share
# of the rises in it that it sees (each rise of each tenant drawn once, the same draws for every setting)
FORESIGHT = "foresight_steps"
RISES_SEEN = "rises_seen"
RATES_ONLY = "rates_only"
PERFECT_KNOBS = (FORESIGHT, RISES_SEEN, RATES_ONLY)
RISES_SEED = 26
# predictive's replay knob that is not a flat policy field: the skill gate on (policy.skill_gate.enabled) at this
# policy.skill_gate.margin, so a sweep runs the gated and the ungated predictive beside each other on one forecast bank
GATE_MARGIN = "gate_margin"
# and "services": the plan acts on the forecast for the inference services only; the batch tenants are planned as
# the skill gate plans a tenant it does not trust (their holds the demand now, nothing preempted for their forecast)
FORECAST_FOR = "forecast_for"
REPLAY_KNOBS = (*PERFECT_KNOBS, GATE_MARGIN, FORECAST_FOR)


def perfect_knob_error(name: str, knobs: dict) -> str | None:
    """Why these knobs' replay part is invalid (None when it is valid): whole steps >= 0 for the foresight, a share
    in (0, 1] for the rises seen, and only on the perfect forecast; the gate's margin in [0, 1), only on
    predictive."""
    g = knobs.get(GATE_MARGIN)
    if GATE_MARGIN in knobs and name != "predictive":
        return f"{GATE_MARGIN}: the skill gate's margin acts on predictive's plans only, not {name}'s"
    if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g < 1):
        return f"{GATE_MARGIN} is the skill gate's margin in [0, 1), not {g!r}"
    if FORECAST_FOR in knobs and (name != "predictive" or knobs[FORECAST_FOR] != "services"):
        return f"{FORECAST_FOR}: 'services' on predictive only, not {knobs[FORECAST_FOR]!r} on {name}"
    given = [k for k in PERFECT_KNOBS if k in knobs]
    if not given:
        return None
    if name != "perfect":
        return f"{', '.join(given)}: the perfect forecast's knobs, not {name}'s"
    f = knobs.get(FORESIGHT)
    if f is not None and (isinstance(f, bool) or not isinstance(f, int) or f < 0):
        return f"{FORESIGHT} is a whole number of steps >= 0, not {f!r}"
    r = knobs.get(RISES_SEEN)
    if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r <= 1):
        return f"{RISES_SEEN} is a share in (0, 1], not {r!r}"
    if RATES_ONLY in knobs and not isinstance(knobs[RATES_ONLY], bool):
        return f"{RATES_ONLY} is true or false, not {knobs[RATES_ONLY]!r}"
    return None


def rises(values: np.ndarray) -> np.ndarray:
    """[step, series] bool: a rise, a step whose value is above the step before, both observed (a gap is none). The
    one definition the rises_seen knob counts and bench/rises_bench.py scores, so the two shares compare."""
    v = np.asarray(values, dtype=float)
    out = np.zeros(v.shape, dtype=bool)
    out[1:] = (v[1:] > v[:-1]) & np.isfinite(v[1:]) & np.isfinite(v[:-1])
    return out


def seen_future(fut: np.ndarray, now: np.ndarray, foresight: int | None, seen: np.ndarray | None) -> np.ndarray:
    """The true future ``fut`` [tenant, step] as a forecast that knows only part of it: ``foresight`` steps of it,
    the last repeated beyond (0: the demand now ``now``, repeated); with ``seen`` [tenant, step] (bool), a rise at a
    step where it is False is not seen coming, so it is met when it comes, as reactive meets it.

    With ``seen``, the path starts at the demand now and at each step adds the rise the true future makes there
    (from its last known level: a gap is not a step) if that rise is seen, and never exceeds the true future: a fall
    is seen down to the true level, and what an unseen rise would have added is never taken off twice (once the
    truth falls back, the path meets it). Every rise seen, it is the true future; a tenant whose demand now is
    unknown keeps its true future."""
    h = fut.shape[1]
    if seen is not None:
        out = np.full(fut.shape, np.nan)
        path = now.astype(float).copy()          # the forecast's level so far
        level = now.astype(float).copy()         # the true future's last known level
        for j in range(h):
            f = fut[:, j]
            known = np.isfinite(f) & np.isfinite(level)
            rise = np.where(known & seen[:, j], np.maximum(f - level, 0.0), 0.0)
            step = np.fmin(f, path + rise)       # NaN in the future: the path carries on past the gap
            path = np.where(known, step, path)
            out[:, j] = np.where(np.isfinite(f), path, np.nan)
            level = np.where(np.isfinite(f), f, level)
        fut = np.where(np.isfinite(now)[:, None], out, fut)
    if foresight is not None and foresight < h:
        last = fut[:, foresight - 1] if foresight else now
        fut = np.concatenate([fut[:, :foresight], np.repeat(last[:, None], h - foresight, axis=1)], axis=1)
    return fut

