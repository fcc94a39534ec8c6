"""A reload swaps one config reference in, in one place (Daemon.use_config), between cycles: a cycle in flight
finishes on the config it started with, and the snapshot it publishes names that config."""

import threading

import pytest

from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.service.test_cycle import sim_cfg
from tests.web.test_snapshot import Paused


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(build_runtime(sim_cfg(tmp_path, reserve_share=0.1)), serve_http=False)
    d.config_path = tmp_path / "config.toml"
    yield d
    d.runtime.close()


def test_a_reload_waits_for_the_cycle_in_flight_and_swaps_one_reference(daemon):
    d = daemon
    d.config_path.write_text("[policy]\nreserve_share = 0.31\n")
    old = d.cfg
    d.cycle()
    paused = d.runtime.runner.forecaster = Paused(d.runtime.runner.forecaster)
    cycle = threading.Thread(target=d.cycle)
    cycle.start()
    done: list[bool] = []
    reload = threading.Thread(target=lambda: done.append(d.reload()))
    try:
        assert paused.entered.wait(60), "the cycle never reached its forecast"
        reload.start()
        reload.join(1.0)
        assert reload.is_alive() and d.cfg is old  # between cycles only: a cycle runs on one config throughout
    finally:
        paused.release.set()
        cycle.join(60)
        reload.join(60)
    assert done == [True]
    new = d.cfg
    assert new is not old and new.policy.reserve_share == 0.31
    assert d.runtime.cfg is new and d.runtime.runner.cfg is new  # one reference, read through by all three
    with pytest.raises(AttributeError):
        d.cfg = old  # no second way in (it used to leave the runtime and the runner on another config)
    assert d.backend.snapshot().cfg is old  # the cycle that was in flight ran on the old config, and says so
    d.cycle()
    assert d.backend.snapshot().cfg is new


def test_a_reload_whose_token_file_cannot_be_read_keeps_the_running_config(daemon, tmp_path):
    """The token-file check moved out of daemon/config/reload.py (pure) to the service's reload: a file the
    web layer could not read still refuses the whole reload."""
    d = daemon
    d.config_path.write_text("[policy]\nreserve_share = 0.31\n\n[[access.tokens]]\nname = \"ops\"\n"
                             f"role = \"operator\"\ntoken_file = \"{tmp_path / 'missing.token'}\"\n")
    old = d.cfg
    assert d.reload() is False and d.cfg is old and d.runtime.runner.cfg is old
    reg = d.runtime.metrics.registry
    assert reg.get_sample_value("gpuas_config_reloads_total", {"outcome": "error"}) == 1.0
    assert reg.get_sample_value("gpuas_config_reload_ok") == 0.0
