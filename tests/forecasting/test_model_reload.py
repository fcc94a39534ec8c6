import shutil

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import REPO


def test_daemon_picks_up_a_promoted_model_at_the_next_cycle(tmp_path):
    models = tmp_path / "models"
    cfg = Config(cluster={"gpus": 128}, source=SourceConfig(simulator=SimulatorConfig(tenants=8, warmup_steps=1500)),
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": models})
    d = Daemon(build_runtime(cfg), serve_http=False)
    d.cycle()                                          # no model scored here: the best baseline on the history
    assert not d.last_result.forecast.model.startswith("lstm")
    d.cycle()
    assert not d.last_result.forecast.model.startswith("lstm")
    shutil.copytree(REPO / "models", models)           # a retrain elsewhere promoted a model
    d.cycle()
    assert d.last_result.forecast.model.startswith("lstm:")
    assert "lstm" in d.runtime.forecaster_note
    d.runtime.close()
