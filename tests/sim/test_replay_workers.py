"""A replay worker process that dies or hangs makes the replay fail on one line that names it and the setting it
ran; it is never waited on for ever (in CI a sweep's workers were once waited on past pytest's 300 s, where the
test takes 8 s). The worker is made to die or hang by replacing the setting's run in the parent: the fork
inherits it. The timeouts are what the old code failed by (multiprocessing.Pool waits for ever on a task whose
worker died); the new code answers within seconds."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch  # noqa: F401  (loaded before the fork, as with the LSTM: a worker does not spend the bound importing it)
from click.testing import CliRunner

import daemon.sim.replay as replay
from daemon.cli import cli
from daemon.config import Config
from daemon.sim.workloads import synthetic

SETTINGS = [("static", {}), ("reactive", {"headroom": 0.1}), ("reactive", {"headroom": 0.3})]


def failing(monkeypatch, how: str, victim) -> None:
    """The setting for which `victim(strategy, knobs)` holds exits the worker (`die`) or never returns (`hang`)."""
    real = replay.run_strategy

    def run(s, w, cfg, bank, **kw):
        if victim(s, kw.get("knobs") or {}):
            if how == "die":
                os._exit(3)
            time.sleep(3600)
        return real(s, w, cfg, bank, **kw)

    monkeypatch.setattr(replay, "run_strategy", run)


@pytest.fixture(scope="module")
def small():
    return synthetic(tenants=4, gpus=32, days=0.05, seed=3, history_days=0.1)


@pytest.mark.timeout(120)
def test_a_worker_that_dies_fails_the_replay_naming_it_and_its_setting(small, monkeypatch):
    failing(monkeypatch, "die", lambda s, k: k.get("headroom") == 0.3)
    with pytest.raises(RuntimeError) as e:
        replay.run_replay(small, Config(), None, steps=30, settings=SETTINGS, workers=2)
    assert type(e.value).__name__ == "ReplayWorkerError"
    msg = str(e.value)
    assert "\n" not in msg
    assert re.match(r"replay worker [12] of 2 \(pid \d+\) died \(exit code 3\) while running setting "
                    r"'reactive\(headroom=0\.3\)' \(its share: reactive\(headroom=0\.3\)\); "
                    r"[0-2]/3 settings were done$", msg), msg


@pytest.mark.timeout(120)
def test_a_worker_that_hangs_fails_the_replay_once_it_has_said_nothing_for_the_bound(small, monkeypatch):
    monkeypatch.setattr(replay, "WORKER_SILENT_S", 5.0, raising=False)
    failing(monkeypatch, "hang", lambda s, k: s == "static")
    with pytest.raises(RuntimeError) as e:
        replay.run_replay(small, Config(), None, steps=30, settings=SETTINGS, workers=2)
    assert re.match(r"replay worker [12] of 2 \(pid \d+\) said nothing for 5 s \(hung\?\) while running setting "
                    r"'static' \(its share: static\); [0-2]/3 settings were done$", str(e.value)), str(e.value)
    pid = int(re.search(r"pid (\d+)", str(e.value))[1])
    with pytest.raises(ProcessLookupError):  # stopped and reaped, not left sleeping
        os.kill(pid, 0)


@pytest.mark.timeout(180)
def test_simulate_with_workers_prints_the_line_not_a_traceback(tmp_path, monkeypatch):
    failing(monkeypatch, "die", lambda s, k: s == "reactive")
    r = CliRunner().invoke(cli, ["simulate", "--days", "0.02", "--strategies", "static,reactive", "--workers", "2",
                                 "--out", str(tmp_path)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    line = [x for x in r.output.splitlines() if x.startswith("gpu-autoscaler: ")]
    assert len(line) == 1 and re.match(r"gpu-autoscaler: replay worker [12] of 2 \(pid \d+\) died \(exit code 3\) "
                                       r"while running setting 'reactive' .*; --workers 1 runs every setting in "
                                       r"this process$", line[0]), r.output


class TwoArgError(Exception):
    """An exception that pickles but does not unpickle (its args are not its constructor's: as
    subprocess.TimeoutExpired's and many libraries' own)."""

    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} at {where}")


@pytest.mark.timeout(120)
def test_a_setting_error_the_parent_cannot_unpickle_is_still_said(small, monkeypatch):
    """A setting's error was sent to the parent as the exception itself: one that pickles but does not unpickle
    (TwoArgError(what, where) comes back as TwoArgError('... at 7') and fails) raised TypeError in the parent's
    recv, a traceback about __init__'s arguments, with the setting's error, its worker and its traceback lost. Now
    the worker sends the text of an error that does not come back whole."""
    real = replay.run_strategy

    def run(s, w, cfg, bank, **kw):
        if s == "static":
            raise TwoArgError("corrupt trace", 7)
        return real(s, w, cfg, bank, **kw)

    monkeypatch.setattr(replay, "run_strategy", run)
    with pytest.raises(RuntimeError) as e:
        replay.run_replay(small, Config(), None, steps=30, settings=SETTINGS, workers=2)
    assert str(e.value) == "TwoArgError: corrupt trace at 7", repr(e.value)
    assert "TwoArgError" in str(e.value.__cause__) and "in replay worker" in str(e.value.__cause__)
