"""The skill gate on an inference service scores the forecast the services' composite makes (issue 40, item 2).

Until the history holds a day of windows, the main model forecasts the services too (forecaster/composite.py);
then the services' own model does. The gate must judge a service on the model now forecasting it: windows the
main model forecast before the switch are another model's evidence, and in the daemon (ForecastQuality.observe)
and the replay (daemon/sim/skill_gate.py) alike they must not keep a skilful services' model reactive for the
next `policy.skill_gate.window` scored forecasts.
"""

import dataclasses

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

    def __init__(self, name: str, values, named=None) -> None:
        self.name, self.values, self.min_history = name, values, 0
        self.named = named or (lambda k: name)   # the forecast's model name at step k (a fallback renames it)

    def predict(self, history: pd.DataFrame, horizon: int) -> Forecast:
        k = len(history) - 1
        v = np.tile(np.asarray(self.values(k), dtype=float)[None, :horizon], (history.shape[1], 1))
        return Forecast(tuple(map(str, history.columns)), QS, np.stack([v, v * 1.01, v * 1.02], axis=2),
                        history.index[-1], 60, self.named(k))


def _setup():
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    demand = pd.DataFrame({"batch": np.full(N, 10.0), "svc": TRUE[:N]}, index=idx)
    # the main model holds for 200 GPUs always: far worse than reacting; the services' model sees the rises
    # (its forecasts' name changes at step 320, as an LSTM's falling back does: the batch tenant keeps its evidence)
    main = _Fixed("main", lambda k: np.full(H, 200.0), lambda k: "main" if k < 320 else "main's fallback")
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


def test_the_daemon_judges_a_service_on_its_own_model_from_the_switch_and_its_page_names_that_model(tmp_path):
    """The daemon on the embedded simulator, one tenant an inference service, its history a few steps short of
    the services' model's day of windows: from the cycle that model takes over, the gate counts only its
    windows for the service (the batch tenants keep every window), and the tenant's record and console page name
    the model that forecast that tenant, not the merged name of both."""
    from starlette.testclient import TestClient

    from daemon.config import SimulatorConfig, SourceConfig
    from daemon.service.wiring import build_runtime
    from daemon.web.app import build_app
    from forecaster.composite import min_history_steps
    from tests.support.daemons import OP, h
    from tests.support.web_backend import SnapshotBackend, with_tokens

    need = min_history_steps(600, 60)
    svc = "tenant-0000"
    cfg = Config(cluster={"gpus": 64}, cycle={"horizon_steps": 5},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=3, warmup_steps=need - 4)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none"},
                 tenants=[{"name": svc, "tier": "high",
                           "inference": {"gpus_per_replica": 1, "replica_rps": 5, "cold_start_s": 180}}],
                 policy={"skill_gate": {"enabled": True, "min_scored": 3, "window": 50}},
                 state={"path": tmp_path / "s.sqlite"})
    rt = build_runtime(cfg)
    try:
        cycle = rt.runner
        own = []   # per cycle: whether the services' model forecast the service
        for _ in range(16):
            p = cycle.run_once().plan
            fc = cycle.last_forecast
            own.append(" | services: " in fc.model)
        switch = own.index(True)
        assert 0 < switch and all(own[switch:]), own            # the main model first, then the services' own
        n = len(own) - switch - cfg.cycle.horizon_steps           # the services' model's forecasts matured
        scored = {t: v["scored"] for t, v in p.forecast_acting.items()}
        assert scored[svc] == n, (scored, switch)
        assert scored["tenant-0001"] == len(own) - cfg.cycle.horizon_steps, scored
        # the tenant's record and page name its own model
        snap = dataclasses.replace(cycle.snapshot, cfg=with_tokens(cycle.snapshot.cfg))
        client = TestClient(build_app(SnapshotBackend(snap)))
        main_model, svc_model = fc.model.split(" | services: ")
        assert client.get(f"/api/v1/tenants/{svc}", headers=h(OP)).json()["forecast"]["model"] == svc_model
        assert client.get("/api/v1/tenants/tenant-0001", headers=h(OP)).json()["forecast"]["model"] == main_model
        client.cookies.set("gpuas_token", OP)
        assert f"Forecast by {svc_model} from" in client.get(f"/ui/tenants/{svc}").text
    finally:
        rt.close()
