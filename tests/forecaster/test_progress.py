"""Progress of long work (forecaster/progress.py): plain lines with the phase, done/total and ETA where stderr is
not a terminal, a tqdm bar where it is, and named phases without a count."""

from __future__ import annotations

import io
import re

import pytest

from forecaster import progress as prog

LINE = re.compile(r"^(?P<name>[^:]+): (?P<n>\d+)/(?P<total>\d+) steps \(\d+%\), \d\d:\d\d elapsed, ETA (\?|\d\d:\d\d)$")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(prog.time, "monotonic", c)
    return c


def test_off_a_terminal_it_prints_a_plain_line_at_start_every_tenth_and_a_done_line(clock):
    out = io.StringIO()
    with prog.Progress("replay own (3 settings)", 300, stream=out, every_s=1e9) as p:
        for _ in range(300):
            clock.t += 0.5
            p.update(1)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # the start, each tenth from 10% to 90% (the last is the done line), then done with the time taken
    assert len(lines) == 1 + 9 + 1, lines
    for x in lines[:-1]:
        m = LINE.match(x)
        assert m and m["name"] == "replay own (3 settings)" and m["total"] == "300", x
    assert [int(LINE.match(x)["n"]) for x in lines[:-1]] == [0, 30, 60, 90, 120, 150, 180, 210, 240, 270]
    # tqdm's ETA from the rate so far: at 30 of 300 after 15 s, 135 s are left
    assert lines[1].endswith("00:15 elapsed, ETA 02:15")
    assert lines[-1] == "replay own (3 settings): done, 300/300 steps in 02:30"


def test_off_a_terminal_a_slow_phase_prints_every_every_s_seconds_between_tenths(clock):
    out = io.StringIO()
    p = prog.Progress("training the LSTM", 1000, unit="batches", stream=out, every_s=30)
    for _ in range(50):   # 5% of the work in 5 minutes: no tenth crossed, one line per 30 s
        clock.t += 6
        p.update(1)
    p.set_phase("epoch 1/8")
    clock.t += 30
    p.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 10 + 1
    assert lines[-1].startswith("training the LSTM [epoch 1/8]: 51/1000 batches (5%), 05:30 elapsed, ETA ")


def test_on_a_terminal_it_is_a_tqdm_bar_and_no_plain_lines(clock):
    out = io.StringIO()
    with prog.Progress("replay own", 50, stream=out, tty=True) as p:
        for _ in range(50):
            p.update(1)
        p.note("epoch 1: train 0.1 val 0.2")
    text = out.getvalue()
    assert "\r" in text and "replay own" in text and "epoch 1: train 0.1 val 0.2" in text
    assert not any(LINE.match(x) for x in text.splitlines())


def test_a_quiet_progress_prints_nothing(clock):
    out = io.StringIO()
    with prog.Progress("x", 10, stream=out, enabled=False) as p:
        p.update(10)
        p.note("n")
    with prog.phase("y", stream=out, enabled=False):
        pass
    assert out.getvalue() == ""


def test_a_phase_without_a_count_names_its_start_and_its_time(clock):
    out = io.StringIO()
    with prog.phase("choosing the forecaster", stream=out):
        clock.t += 75
    assert out.getvalue().splitlines() == ["choosing the forecaster...", "choosing the forecaster: done in 01:15"]


def test_training_the_lstm_off_a_terminal_names_the_phase_and_each_epoch(capsys):
    # retrain and the own-cluster replay's forecaster choice train through this: a log sees the phase, its ETA and
    # each epoch's losses (tqdm alone printed nothing where stderr is not a terminal)
    from forecaster.train import train
    from tests.forecaster.test_lstm import SPEC, noisy_frame

    res = train(noisy_frame(), SPEC, epochs=2, samples_per_epoch=256, batch_size=64, seed=0, progress=True,
                patience=5)
    err = capsys.readouterr().err.splitlines()
    assert res.epochs_run == 2
    assert err[0] == "training the LSTM: 0/8 batches (0%), 00:00 elapsed, ETA ?"
    assert any(x.startswith("training the LSTM [epoch 2/2]: ") and "ETA" in x for x in err), err
    assert [x.split(":")[0] for x in err if x.startswith("epoch ")] == ["epoch 1", "epoch 2"]
    assert err[-1].startswith("training the LSTM: done, 8/8 batches in ")
