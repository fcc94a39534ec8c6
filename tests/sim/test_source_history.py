"""The embedded simulator feeds the daemon's history store as the Prometheus source does (`make run` showed no
window proposal: only Prometheus wrote the store, so the console and API said "the history store holds no demand
yet"). Cycles are driven one at a time (run_once), no loop runs."""

import numpy as np
import pytest

from daemon.config import Config
from daemon.forecasting.windows_proposed import propose, store_steps
from daemon.service.wiring import build_runtime
from daemon.sources.base import SourceError
from daemon.state.sim_store import fresh_sim_store
from daemon.web.window_proposals import read_store
from tests.support.peaked_sim import FLAT, PEAKED, peaked_simulator


def _cfg(tmp_path, **sim):
    return Config(cluster={"gpus": 256}, source={"simulator": {"seed": 3, "tenants": 16, **sim}},
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"kind": "seasonal_naive"})


def _played(sim, steps):
    return sim.work.demand.iloc[max(0, sim.pos - steps):sim.pos]


def test_the_simulated_daemon_writes_its_warm_up_and_each_cycle_to_the_history_store(tmp_path):
    cfg = _cfg(tmp_path)
    rt = build_runtime(cfg)
    try:
        want = store_steps(cfg)
        assert cfg.source.simulator.warmup_steps >= want == 8 * 1440   # the proposals' days, from the first cycle
        rt.runner.run_once()
        first = read_store(cfg)
        assert first is not None and len(first) == want and first.index[-1] == rt.sim.now
        assert list(first.columns) == list(rt.sim.tenants)
        np.testing.assert_array_equal(first.to_numpy(), _played(rt.sim, want).to_numpy())
        # the forecaster's history is still cycle.history_steps (the first plan reads 2 days, not 8)
        assert len(rt.runner.last_history) == cfg.cycle.history_steps
        rt.runner.run_once()
        second = read_store(cfg)
        assert second.index[-1] == rt.sim.now and len(second) == want
        np.testing.assert_array_equal(second.to_numpy(), _played(rt.sim, want).to_numpy())
        # a failed read changes nothing (as for Prometheus): the next good one covers it
        rt.sim.blackout = True
        with pytest.raises(SourceError):
            rt.sim.collect(cfg.cycle.history_steps)
        assert read_store(cfg).index[-1] == second.index[-1]
    finally:
        rt.close()


def test_the_window_proposals_find_a_simulated_1400_tenant_in_the_store(tmp_path):
    cfg = _cfg(tmp_path)
    with peaked_simulator():
        rt = build_runtime(cfg)
    try:
        assert list(rt.sim.tenants) == [PEAKED, FLAT]
        rt.runner.run_once()
        frame = read_store(cfg)
    finally:
        rt.close()
    [p] = propose(frame)
    assert p.tenant == PEAKED and p.every == "daily" and p.at in ("13:45", "14:00") and p.days_seen == 7
    assert 55 <= p.gpus <= 70


def test_a_simulated_run_starts_its_history_store_afresh_and_never_writes_a_real_clusters(tmp_path):
    """The history store is the simulated cluster's like the state store: the earlier run's is moved aside (its
    demand is another cluster's under the same simulated times), and `run --sim` over a real cluster's config that
    names `history.path` writes one beside it, never into it."""
    cfg = _cfg(tmp_path)
    hist = tmp_path / "state-history.sqlite"
    hist.write_bytes(b"the earlier run's history")
    out, _ = fresh_sim_store(cfg, "simulator")
    assert out.history.path is None and not hist.exists()
    assert (tmp_path / "state-history-previous.sqlite").read_bytes() == b"the earlier run's history"
    real = tmp_path / "real" / "history.sqlite"
    real.parent.mkdir()
    real.write_bytes(b"the real cluster's history")
    cfg = cfg.model_copy(update={"history": cfg.history.model_copy(update={"path": real}),
                                 "state": cfg.state.model_copy(update={"path": tmp_path / "real" / "state.sqlite"})})
    out, _ = fresh_sim_store(cfg, "prometheus")
    assert out.history.path == real.with_name("history-sim.sqlite")
    rt = build_runtime(out)
    try:
        rt.runner.run_once()
    finally:
        rt.close()
    assert real.read_bytes() == b"the real cluster's history"
    assert read_store(out) is not None and len(read_store(out)) == store_steps(out)


def test_history_keep_steps_sizes_the_store_apart_from_what_the_forecaster_reads(tmp_path):
    """A Prometheus daemon's store kept cycle.history_steps (2 days), fewer than the 5 of 7 days the window
    proposals need, and raising history_steps made the forecaster read 8 days every cycle: history.keep_steps sizes
    the store alone (never below history_steps); unset, Prometheus keeps history_steps and the simulator 8 days.
    A store too short for proposals says which key to set."""
    from daemon.config import Config
    from daemon.service.wiring import _history_store
    from daemon.web.window_proposals import compute

    def cfg(**history):
        return Config.model_validate({"source": {"kind": "prometheus"}, "state": {"path": str(tmp_path / "s.db")},
                                      "history": history})

    base = cfg()
    assert _history_store(base, True).steps == base.cycle.history_steps == 2880
    assert _history_store(cfg(keep_steps=11520), True).steps == 11520
    assert _history_store(cfg(keep_steps=60), True).steps == 2880      # never less than the forecaster reads
    assert store_steps(base) == 11520
    import pandas as pd

    two_days = pd.DataFrame({"t": 1.0}, index=pd.date_range("2026-01-01", periods=2880, freq="60s", tz="UTC"))
    why = compute(two_days, base, [], "UTC")["why"]
    assert "2.0 days" in why and "history.keep_steps = 11520" in why


def test_a_simulated_runs_fresh_store_line_says_the_operators_changes_are_not_carried_over(tmp_path):
    """make run, a floor and a window declared through the API, then a restart: both were gone, and the line said
    only that "the previous run's plans, events and shadow records are kept in ...", while docs/console-and-api.md
    says an operator's change survives a restart."""
    cfg = _cfg(tmp_path)
    cfg.state.path.write_bytes(b"the earlier run's store")
    _, line = fresh_sim_store(cfg, "simulator")
    assert "operator changes (overrides, windows declared through the API) are not carried over" in line
    assert str(cfg.state.path.with_name(f"{cfg.state.path.stem}-previous.sqlite")) in line
