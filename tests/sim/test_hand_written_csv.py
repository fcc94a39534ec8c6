"""A history CSV as a person writes it by hand (docs/own-cluster.md): `simulate --data` reads the names they meant,
and a mistake in the file is one line naming it (the reader is retrain's and backtest's too)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daemon.forecasting.errors import DataError
from daemon.forecasting.retrain import read_history_file
from tests.sim.test_own_replay import CONFIG, DAYS, N, simulate, the_case, write

LOW = '\n[[tenants]]\nname = "lo"\ntier = "low"\njob_gpus = 1\n'


def _rewrite(csv, change) -> None:
    """The file with `change(line)` applied to each of its lines (header included)."""
    csv.write_text("\n".join(change(line) for line in csv.read_text().splitlines()) + "\n")


def test_a_space_after_each_comma_names_the_configs_tenants(tmp_path):
    # `time, hi, lo`: the tenants were ` hi` and ` lo`, which no [[tenants]] entry named, so the high tenant and
    # the low one were both replayed as tier normal with 1-GPU jobs (one warning line, a replay of another cluster)
    csv, toml = write(tmp_path, the_case(), config=CONFIG + LOW)
    _rewrite(csv, lambda line: line.replace(",", ", "))
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive", "--out",
                 str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "o" / "own-history.json").read_text())
    assert doc["tenants_unnamed"] == [] and doc["high_tier"] == ["hi"]
    assert doc["tiers"] == {"high": 1, "normal": 0, "low": 1}


def test_spaces_around_names_and_a_spreadsheets_marks_are_not_part_of_the_names(tmp_path):
    csv, _ = write(tmp_path, the_case())
    lines = csv.read_text().splitlines()
    # a byte-order mark (Excel's "CSV UTF-8"), a space before a comma, and a comma ending every line
    csv.write_bytes(b"\xef\xbb\xbf" + "\n".join([lines[0].replace(",", " ,") + ","]
                                                + [x + "," for x in lines[1:]]).encode() + b"\n")
    got = read_history_file(csv, 60)
    assert list(got.columns) == ["hi", "lo"] and len(got) == N
    assert got["hi"].iloc[-1] == 8.0


@pytest.mark.parametrize("case, change, message", [
    ("a pandas index written by to_csv", lambda i, line: ("" if i == 0 else str(i - 1)) + "," + line,
     "column 1 of the header has no name but holds values: name its tenant, or drop the column (an index "
     "written by pandas' to_csv: write with index=False)"),
    ("a column with no name", lambda i, line: line.replace(",lo", ",") if i == 0 else line,
     "column 3 of the header has no name but holds values"),
    ("separated by semicolons", lambda i, line: line.replace(",", ";"),
     "needs a 'time' column; the header has 'time;hi;lo' (a CSV's columns are separated by commas)"),
    ("the time column named otherwise", lambda i, line: line.replace("time", "timestamp") if i == 0 else line,
     "needs a 'time' column; the header has 'timestamp', 'hi', 'lo'"),
    ("a row with a field too many", lambda i, line: line + ",3" if i == 120 else line,
     "cannot read history: Error tokenizing data. C error: Expected 3 fields in line 121, saw 4"),
    # every line a value past the header: pandas took the times as the index, shifted each column one to the left
    ("a value past the header on every line", lambda i, line: line + ",1" if i else line,
     "line 2 has 4 fields, the header names 3 columns: a value past the header's last column belongs to no column"),
    # a blank first line: the names were not stripped, so `lo` and `lo ` were two tenants
    ("a name given twice below a blank line", lambda i, line: "\n" + line + ",lo " if i == 0 else line + ",1",
     "the header names column 'lo' twice"),
    ("commas only", lambda i, line: ",,", "needs a 'time' column; the header has no names"),
])
def test_a_mistake_in_a_hand_written_csv_is_one_line(tmp_path, case, change, message):
    csv, toml = write(tmp_path, the_case(), config=CONFIG + LOW)
    lines = csv.read_text().splitlines()
    csv.write_text("\n".join(change(i, line) for i, line in enumerate(lines)) + "\n")
    with pytest.raises(DataError) as got:
        read_history_file(csv, 60)
    assert message in str(got.value) and "\n" not in str(got.value), (case, str(got.value))
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive")
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, (case, r.output)
    assert message in r.output, (case, r.output)


def test_a_comma_ending_every_line_but_the_headers_shifts_no_column(tmp_path):
    # pandas read the data lines' extra (empty) field as a sign that the first column is the index: the times
    # became the index and `time` held hi's demand, read as seconds of 1970; hi held lo's, lo was empty
    csv, _ = write(tmp_path, the_case())
    _rewrite(csv, lambda line: line if line.startswith("time") else line + ",")
    got = read_history_file(csv, 60)
    (tmp_path / "plain").mkdir()
    want = read_history_file(write(tmp_path / "plain", the_case())[0], 60)
    assert list(got.columns) == ["hi", "lo"] and got.index[0].year > 2000
    assert got.equals(want)


def test_an_unnamed_column_with_no_value_is_dropped_quietly(tmp_path):
    csv, _ = write(tmp_path, {**the_case(), "x": np.full(N, np.nan)})
    _rewrite(csv, lambda line: line.replace(",x", ","))
    assert list(read_history_file(csv, 60).columns) == ["hi", "lo"]


def test_tenants_the_config_does_not_name_are_said_once_all_counted(tmp_path):
    # the command as a user runs it (its own logging): the list came twice, a log WARNING ("1 tenants not named")
    # and the command's own line; and the command's line named six with no word of the rest
    import subprocess
    import sys

    from tests.conftest import REPO

    extra = {f"x{k}": np.r_[np.zeros(N - 10), np.full(10, 1.0 + k % 2)] for k in range(7)}
    csv, toml = write(tmp_path, {**the_case(), **extra})
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(toml), "simulate", "--data", str(csv), "--days",
                        str(DAYS), "--strategies", "reactive", "--quick-forecaster", "--workers", "1",
                        "--out", str(tmp_path / "o")], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "not named in the config" in line]
    assert said == ["8 tenants not named in the config or flags are replayed as tier normal with 1-GPU jobs: "
                    "lo, x0, x1, x2, x3, x4 (+2 more)"], r.stderr
