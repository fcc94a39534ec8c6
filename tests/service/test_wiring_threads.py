"""forecaster.torch_threads sizes torch's intra-op pool when the runtime loads a torch model."""

import torch

from daemon.config import Config
from daemon.service.wiring import build_runtime


def test_runtime_sets_torch_threads():
    before = torch.get_num_threads()
    try:
        rt = build_runtime(Config(forecaster={"torch_threads": 1}), with_store=False)
        assert torch.get_num_threads() == 1
        rt.close()
        rt = build_runtime(Config(forecaster={"torch_threads": 2}), with_store=False)
        assert torch.get_num_threads() == 2
        rt.close()
    finally:
        torch.set_num_threads(before)


def test_a_scheduled_retrain_gives_the_cycle_its_threads_back(tmp_path, monkeypatch):
    """Training sets torch's pool for itself (up to 4 threads); the daemon's cycle gets torch_threads back."""
    import daemon.forecasting.retrain
    from daemon.service.loop import Daemon

    before = torch.get_num_threads()

    def training(*a, **k):
        torch.set_num_threads(3)
        raise RuntimeError("no history to train on")

    monkeypatch.setattr(daemon.forecasting.retrain, "retrain_from_config", training)
    try:
        d = Daemon(build_runtime(Config(forecaster={"torch_threads": 1}, state={"path": tmp_path / "s.sqlite"})),
                   serve_http=False)
        d.retrain()
        assert torch.get_num_threads() == 1
        d.runtime.close()
    finally:
        torch.set_num_threads(before)
