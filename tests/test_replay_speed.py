"""The replay's speed-ups change no result: the same settings give the same report however they are run."""

from pathlib import Path

import numpy as np
import pytest

from daemon.config import Config
from daemon.sim.replay import run_replay
from daemon.sim.workloads import synthetic
from forecaster.registry import load_current

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = [("static", {}), ("reactive", {"headroom": 0.1}), ("predictive", {"quantile": 0.9}),
            ("predictive", {"quantile": 0.5, "headroom": 0.0}), ("perfect", {})]


def report(m) -> dict:
    """Everything a run measured, except how long it took."""
    s = m.summary()
    for k in ("wall_s", "decision_ms_mean", "decision_ms_p99"):
        s.pop(k)
    s["series"] = {name: {t: np.asarray(v).tolist() for t, v in getattr(m, name).items()}
                   for name in ("wanted", "served", "unmet")}
    s["waits"] = {t: np.concatenate(v).tolist() if v else [] for t, v in m.waits.items()}
    s["util"], s["high_reserved"], s["throttled"] = list(m.util), list(m.high_reserved), dict(m.throttled)
    return s


@pytest.fixture(scope="module")
def contended():
    return synthetic(tenants=16, gpus=192, days=0.2, seed=11, history_days=1.2, target_load=1.1)


def test_worker_processes_give_exactly_the_one_process_report(contended):
    model = load_current(ROOT / "models")  # the shipped LSTM: torch runs inside the forked workers too
    one = run_replay(contended, Config(), model, steps=120, settings=SETTINGS, forecast_every=5)
    two = run_replay(contended, Config(), model, steps=120, settings=SETTINGS, forecast_every=5, workers=2)
    assert [m.label for m in two] == [m.label for m in one]
    for a, b in zip(one, two):
        assert report(b) == report(a), a.label
    assert sum(m.summary()["preemptions"] for m in one) > 0  # the case exercises preemption
