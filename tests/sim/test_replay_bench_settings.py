"""`bench/replay_bench.py --settings`: a what-if on chosen policy knobs, checked before anything is fitted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.support.bench_script import load_bench

BENCH = REPO / "bench" / "replay_bench.py"


@pytest.fixture
def bench(monkeypatch):
    return load_bench(monkeypatch, "replay_bench")


def test_settings_are_read_as_given_from_text_or_a_file(bench, tmp_path):
    given = [["reactive", {"headroom": 0.1}], ["predictive", {"quantile": 0.9, "preempt_lead_steps": 5}],
             ["perfect", {}]]
    want = [("reactive", {"headroom": 0.1}), ("predictive", {"quantile": 0.9, "preempt_lead_steps": 5}),
            ("perfect", {})]
    assert bench.parse_settings(json.dumps(given)) == want
    f = tmp_path / "s.json"
    f.write_text(json.dumps(given))
    assert bench.parse_settings(f"@{f}") == want


def test_what_runs_is_the_validated_value_not_the_text(bench):
    # a string the replay would trip on after the forecaster is fitted; a boolean is JSON's own (a quoted "false" is
    # refused below, as the config refuses it: it must not be read as true)
    got = bench.parse_settings('[["reactive", {"max_wait_steps": "240", "aging_cumulative": false, '
                               '"headroom": 0}]]')
    assert got == [("reactive", {"max_wait_steps": 240, "aging_cumulative": False, "headroom": 0.0})]
    assert type(got[0][1]["max_wait_steps"]) is int and type(got[0][1]["headroom"]) is float
    # the perfect forecast's foresight (a replay knob, not a policy field) rides along with its policy knobs
    got = bench.parse_settings('[["perfect", {"foresight_steps": 3, "rises_seen": 0.5, "headroom": "0.1"}]]')
    assert got == [("perfect", {"foresight_steps": 3, "rises_seen": 0.5, "headroom": 0.1})]


@pytest.mark.parametrize("text, says", [
    ("[]", "non-empty"),                                                          # not the whole sweep
    ('[["predictive", {"preempt_quantile": null}]]', "without a value"),
    ('[["reactive", {"headroom": 0.1, "hysteresis": 0.1}], ["reactive", {"hysteresis": 0.1, "headroom": 0.1}]]',
     "given twice"),
    ('[["reactive", {"headroom": 0.1}]], ["reactive", {"headroom": 0.1}]]', "not JSON"),
    ("@/nonexistent/what-if.json", "cannot read"),
    ('[["reactive", {"headroom": 0.1}]', "not JSON"),
    ('{"reactive": {}}', "JSON list"),
    ('[["oracle", {}]]', "each item is [strategy"),
    ('[["reactive", {"headrom": 0.1}]]', "['headrom'] are not policy knobs"),     # a typo is not the default
    ('[["predictive", {"quantile": 1.5}]]', "quantile"),                          # out of range
    ('[["reactive", {"aging_cumulative": "false"}]]', "must be true or false"),   # a boolean is not a string
    ('[["predictive", {"foresight_steps": 2}]]', "the perfect forecast's knob"),   # a predictive forecast has its own
    ('[["perfect", {"foresight_steps": -1}]]', "whole number of steps"),
    ('[["perfect", {"foresight_steps": "2"}]]', "whole number of steps"),        # not a policy field: not coerced
    ('[["perfect", {"foresight_steps": 2.5}]]', "whole number of steps"),
    ('[["perfect", {"rises_seen": 0}]]', "a share in (0, 1]"),
    ('[["reactive", {"rises_seen": 0.5}]]', "the perfect forecast's knob"),
])
def test_a_bad_setting_is_refused_with_what_is_wrong(bench, text, says):
    with pytest.raises(SystemExit) as exc:
        bench.parse_settings(text)
    assert says in str(exc.value)


def test_settings_need_a_suffix_and_run_only_what_is_given(tmp_path):
    s = '[["reactive", {"headroom": 0.1}], ["perfect", {"headroom": 0.05, "preempt_lead_steps": 5}]]'
    base = [sys.executable, str(BENCH), "--cases", "synthetic", "--days", "0.02", "--shipped-model", "--workers", "1",
            "--out", str(tmp_path), "--figures", str(tmp_path), "--settings", s]
    for extra in ([], ["--suffix", "_unseen"], ["--suffix", "_every5"], ["--suffix", "_x", "--also-every", "5"]):
        r = subprocess.run(base + extra, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert r.returncode == 1 and "--suffix of its own" in r.stderr, (extra, r.stderr[-500:])
    for extra in (["--cases", "synthetic,scale"], ["--worth-weights", "1,4"]):   # not silently ignored there
        r = subprocess.run(base + ["--suffix", "_x"] + extra, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert r.returncode == 1 and "sweep cases" in r.stderr, (extra, r.stderr[-500:])
    r = subprocess.run(base + ["--suffix", "_whatif"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads((tmp_path / "replay_synthetic_whatif.json").read_text())
    assert [x["label"] for x in d["runs"]] == ["reactive(headroom=0.1)",
                                              "perfect(headroom=0.05,preempt_lead_steps=5)"]
    assert not list(tmp_path.glob("*.png"))                   # a what-if draws no published figure
    assert "predictive_point" not in d["comparison"] and "not swept" in d["comparison"]["verdict"]


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "bench" / "whatif").glob("*.json")))
def test_the_committed_what_ifs_are_valid_settings(bench, name):
    got = bench.parse_settings(f"@{REPO / 'bench' / 'whatif' / name}")
    assert got and {s for s, _ in got} <= {"reactive", "predictive", "perfect"}
