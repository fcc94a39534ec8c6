"""`bench/rises_bench.py`: what an alarm after each rise would have seen of the high tier's rises, the drain ahead."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO, SHARED_DATA
from tests.support.bench_script import load_bench

BENCH = REPO / "bench" / "rises_bench.py"


@pytest.fixture
def bench(monkeypatch):
    return load_bench(monkeypatch, "rises_bench")


def test_hand_computed_alarm_after_each_rise(bench):
    # rises at steps 2, 5 and 9; an alarm lasting 5 steps after each is on at steps 2 to 9. Seen 2 steps ahead: the
    # rise at 5 (alarm at 3) and at 9 (alarm at 7), not the first (no alarm at 0). Alarms with a rise in the next 2
    # steps, among those whose next 2 steps are in the trace (up to 7): at 3, 4 and 7 of 2..7
    v = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2, 3], dtype=float)[:, None]
    got = bench.after_rise_alarm(v, 0, 2, 5)
    assert got == {"rises": 3, "seen": 2, "steps": 10, "alarm_steps": 8, "alarm_steps_scored": 6, "true_alarms": 3}
    # scored from step 4 on: the rise at 2 is history (it still drives the alarm), the rises at 5 and 9 are scored
    got = bench.after_rise_alarm(v, 4, 2, 5)
    assert (got["rises"], got["seen"], got["steps"], got["alarm_steps"]) == (2, 2, 6, 6)


def test_the_alarm_lasts_exactly_its_steps_and_sees_exactly_the_drain_ahead(bench):
    # rises at 3 and 6; an alarm lasting 1 step is on at 3 and 6 only; seen 3 ahead: the rise at 6 (alarm at 3),
    # not 2 or 4 ahead
    v = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2], dtype=float)[:, None]
    got = bench.after_rise_alarm(v, 0, 3, 1)
    assert (got["rises"], got["seen"], got["alarm_steps"]) == (2, 1, 2)
    assert bench.after_rise_alarm(v, 0, 2, 1)["seen"] == 0 and bench.after_rise_alarm(v, 0, 4, 1)["seen"] == 0


def test_a_gap_is_not_a_rise_and_the_series_are_apart(bench):
    # a rise across a missing step is not counted; a rise in one series raises no alarm in another
    v = np.array([[0, 0], [np.nan, 0], [3, 0], [3, 0], [3, 4]], dtype=float)
    got = bench.after_rise_alarm(v, 0, 1, 3)
    assert got["rises"] == 1 and got["seen"] == 0 and got["alarm_steps"] == 1


@pytest.mark.skipif(not (SHARED_DATA / "helios-earth-2020").exists(), reason="needs ../shared/data")
def test_the_bench_writes_what_it_measured(tmp_path):
    subprocess.run([sys.executable, str(BENCH), "--cases", "helios", "--days", "0.5", "--out", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    d = json.loads((tmp_path / "rises.json").read_text())
    h = d["cases"]["helios"]
    assert h["drain_steps"] == 2 and h["high_tier"] and h["measured_steps"] == 720
    for a, r in h["by_after"].items():
        assert 0 <= r["seen"] <= r["rises"] and r["true_alarms"] <= r["alarm_steps_scored"] <= r["alarm_steps"]
    # an alarm that lasts longer sees at least as many rises, and alarms at least as often
    rs = [h["by_after"][str(a)] for a in d["after_steps"]]
    assert all(x["seen"] <= y["seen"] and x["alarm_steps"] <= y["alarm_steps"] for x, y in zip(rs, rs[1:]))
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([sys.executable, str(BENCH), "--cases", "nope", "--out", str(tmp_path)], check=True,
                       capture_output=True, timeout=120)
