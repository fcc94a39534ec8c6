"""The skill gate on an inference service scores the forecast the services' composite makes (issue 40, item 2).

Until the history holds a day of windows, the main model forecasts the services too (forecaster/composite.py);
then the services' own model does. The gate must judge a service on the model now forecasting it: windows the
main model forecast before the switch are another model's evidence, and in the daemon (ForecastQuality.observe)
and the replay (daemon/sim/skill_gate.py) alike they must not keep a skilful services' model reactive for the
next `policy.skill_gate.window` scored forecasts.
"""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.forecasting.quality import ForecastQuality
from daemon.forecasting.skill import decide
from daemon.sim.skill_gate import ReplayGate
from forecaster.composite import ServicesComposite
from forecaster.types import Forecast

QS = (0.5, 0.9, 0.99)
H = 6
N = 400          # trace steps
SWITCH = 250     # the services' model forecasts from this many steps of history on


def _pattern(n: int) -> np.ndarray:
    """A rise the lead time can see: 10, then 30 for 5 steps in every 20."""
    t = np.arange(n)
    return np.where(t % 20 >= 15, 30.0, 10.0)


TRUE = _pattern(N + H + 1)


class _Fixed:
    """A fake forecaster: every column forecast by ``values(k)`` (k: the history's last step), the higher
    quantiles a little above."""

    def __init__(self, name: str, values) -> None:
        self.name, self.values, self.min_history = name, values, 0

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        k = len(history) - 1
        v = np.tile(np.asarray(self.values(k), dtype=float)[None, :horizon], (history.shape[1], 1))
        return Forecast(tuple(map(str, history.columns)), QS, np.stack([v, v * 1.01, v * 1.02], axis=2),
                        history.index[-1], 60, self.name)


def _setup():
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    demand = pd.DataFrame({"batch": np.full(N, 10.0), "svc": TRUE[:N]}, index=idx)
    # the main model holds for 200 GPUs always: far worse than reacting; the services' model sees the rises
    main = _Fixed("main", lambda k: np.full(H, 200.0))
    seen = _Fixed("windows", lambda k: TRUE[k + 1: k + 1 + H])
    model = ServicesComposite(main, seen, ["svc"], services_min_history=SWITCH)
    cfg = Config(policy={"lead_time_steps": 4, "preempt_lead_steps": 2, "skill_gate": {"enabled": True}})
    return demand, model, cfg


def test_the_replay_gate_judges_a_service_on_the_services_model_once_it_forecasts_it():
    demand, model, cfg = _setup()
    gate = ReplayGate(cfg, demand)
    tenants = ("batch", "svc")
    for k in range(N):
        fc = model.predict(demand.iloc[: k + 1], H)
        acting = gate.at(k, fc, tenants)
    v = gate.verdicts["svc"]
    # only the services' model's windows: from its first forecast (step SWITCH - 1) to the last one matured
    assert v.scored == N - H - (SWITCH - 1), v
    assert v.forecast_loss < 0.5 * v.reactive_loss, v
    assert "svc" in acting and v.why.startswith("forecast:"), v
    assert "batch" not in acting          # the main model's 200 GPUs on a flat 10: no skill, and still scored
    assert gate.verdicts["batch"].scored == N - H


def test_the_daemons_scorer_gives_the_service_the_same_evidence_as_the_replay():
    demand, model, cfg = _setup()
    p = cfg.policy
    q = ForecastQuality(QS, H, stride=1, window=cfg.forecaster.quality.window,
                        peak_windows={"lead": p.lead_time_steps, "preempt": p.preempt_lead_steps},
                        act_quantile=p.quantile, headroom=p.headroom, skill_window=p.skill_gate.window)
    gate = ReplayGate(cfg, demand)
    for k in range(N):
        fc = model.predict(demand.iloc[: k + 1], H)
        q.observe(fc, demand.iloc[: k + 1])
        gate.at(k, fc, ("batch", "svc"))
    assert q.skill() == gate.quality.skill()
    v = decide(q.skill(), ("svc",), {}, p.skill_gate)["svc"]
    assert v.acting and v.scored == N - H - (SWITCH - 1), v
