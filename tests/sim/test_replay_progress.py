"""Long replays show progress where stderr is not a terminal (a log, a pipe): every phase named, with done/total
and an ETA, in plain lines; and the forecaster the own-cluster replay chose is one short line (issue 37, item 7)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from daemon.cli import cli
from tests.sim.test_own_replay import DAYS, WINDOW, long_case, the_case, write

PLAIN = re.compile(r"^replay own-history \(10 settings\)( \[[^\]]+\])?: (\d+)/(\d+) steps \(\d+%\), "
                   r"\d\d:\d\d elapsed, ETA (\?|\d\d:\d\d)$")


def run(tmp_path, *args: str, cols: dict | None = None):
    csv, toml = write(tmp_path, cols or the_case())
    r = CliRunner().invoke(cli, ["-c", str(toml), "simulate", "--data", str(csv), "--days", str(DAYS), "--tier",
                                 "lo=low", "--out", str(tmp_path / "o"), *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r, json.loads((tmp_path / "o" / "own-history.json").read_text())


def test_a_sweep_off_a_terminal_prints_named_phases_with_done_total_and_eta(tmp_path):
    # one process (worker processes report their steps in batches, so the lines would fall where polled)
    r, doc = run(tmp_path, "--strategies", "static,reactive", "--sweep", "--workers", "1")
    assert len(doc["runs"]) == 10   # static's 4 pool shares, reactive's 6 headrooms
    err = r.stderr.splitlines()
    assert not any("\r" in x for x in err)
    lines = [PLAIN.match(x) for x in err]
    counts = [int(m[2]) for m in lines if m]
    # one phase over the whole sweep (10 settings x the window's steps), from 0, at least every tenth, then done
    assert counts[0] == 0 and {int(m[3]) for m in lines if m} == {10 * WINDOW}
    assert counts == [k * WINDOW for k in range(10)]
    assert f"replay own-history (10 settings): done, {10 * WINDOW}/{10 * WINDOW} steps in " in r.stderr
    assert "writing the report and the figure: done in " in r.stderr


def test_the_forecaster_choice_is_one_short_line_and_its_details_go_to_the_json(tmp_path):
    r, doc = run(tmp_path, "--strategies", "reactive,predictive", "--quick-forecaster",
                 cols=long_case(500 + WINDOW))
    err = r.stderr.splitlines()
    assert "choosing the forecaster (quick: the baselines on the history's end)..." in err
    mine = [x for x in err if x.startswith("forecaster: ")]
    assert len(mine) == 1 and len(mine[0]) <= 160, mine
    # no line of the run is the old wall of scores (every candidate's wQL in one line)
    assert max(map(len, err)) <= 200, max(err, key=len)
    c = doc["forecaster_choice"]
    assert c["name"] == doc["forecaster"] and c["why"].startswith("quick (baselines only): ")
    assert c["runner_up"] in c["scores"] and c["runner_up"] != c["name"]
    won = min((v, k) for k, v in c["scores"].items() if v is not None)
    assert c["scores"][c["runner_up"]] >= won[0]
    assert c["margin"] == (c["scores"][c["runner_up"]] - won[0]) / abs(c["scores"][c["runner_up"]])
    assert mine[0] == (f"forecaster: {c['name']} (quick, baselines only); runner-up {c['runner_up']}, "
                       f"{c['margin']:+.1%} on wQL; details in the JSON's forecaster_choice")
