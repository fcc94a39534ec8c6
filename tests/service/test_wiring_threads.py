"""forecaster.torch_threads sizes torch's intra-op pool when the runtime loads a torch model."""

import torch

from daemon.config import Config
from daemon.service.wiring import build_runtime
from tests.support.torch_threads import torch_thread_calls


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


def test_the_cycles_thread_forecasts_with_torch_threads(tmp_path, monkeypatch):
    """torch's thread count is per thread: build_runtime set forecaster.torch_threads in the thread that built the
    runtime, and the cycles ran in the daemon's "cycles" thread with one OpenMP thread per core (an LSTM forecast
    in such a thread: 456 ms instead of 34 on a busy 2-core box). Each cycle sets it where it runs."""
    from daemon.service.loop import Daemon

    with torch_thread_calls(monkeypatch) as calls:
        cfg = Config(forecaster={"torch_threads": 1}, state={"path": tmp_path / "s.sqlite"},
                     cycle={"interval_s": 0.05})
        d = Daemon(build_runtime(cfg), serve_http=False, max_cycles=2)
        d.start()
        assert d.stopped.wait(60)
        d.stop()
        d.runtime.close()
    assert ("cycles", 1) in calls
