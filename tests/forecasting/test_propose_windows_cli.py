"""`propose-windows --data FILE`: the windows the daemon would propose, from a user's history file before it runs
(the console and the API propose them from the daemon's history store only, which a CSV never fills)."""

import tomllib

import numpy as np
import pandas as pd
from click.testing import CliRunner

from daemon.cli import cli
from daemon.config.windows import WindowConfig

CONFIG = """
[cluster]
gpus = 32
gpus_per_node = 8

[cycle]
resolution_s = 300

[forecaster]
season_steps = 288

[[tenants]]
name = "hi"
tier = "high"
job_gpus = 1

[[tenants]]
name = "lo"
tier = "low"
job_gpus = 1
"""


def _write(tmp_path, days: int):
    n = days * 288
    idx = pd.date_range("2026-11-01", periods=n, freq="5min", tz="UTC", name="time")
    rng = np.random.default_rng(3)
    minute = (idx.hour * 60 + idx.minute).to_numpy()
    hi = 4 + 12 * ((minute >= 14 * 60) & (minute < 16 * 60)) + rng.integers(0, 2, n)   # 12 more GPUs 14:00-16:00
    lo = 20 + rng.integers(0, 3, n)
    f = tmp_path / "h.csv"
    pd.DataFrame({"hi": hi, "lo": lo}, index=idx).reset_index().to_csv(f, index=False)
    c = tmp_path / "c.toml"
    c.write_text(CONFIG)
    return f, c


def test_a_daily_peak_in_a_history_file_is_proposed_with_its_evidence_and_a_config_snippet(tmp_path):
    f, c = _write(tmp_path, 8)
    r = CliRunner().invoke(cli, ["-c", str(c), "propose-windows", "--data", str(f)])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("  hi-"))
    assert "hi, " in line and "daily at 14:00 UTC" in line and "without" in line and "with" in line, line
    snippet = r.output[r.output.index("[[windows]]"):]
    doc = tomllib.loads(snippet)
    w = WindowConfig.model_validate(doc["windows"][0])     # pasted into the config, it is a valid window
    assert w.tenant == "hi" and w.at == "14:00" and w.every == "daily"


def test_a_history_shorter_than_the_days_a_peak_must_recur_on_says_so(tmp_path):
    f, c = _write(tmp_path, 3)
    r = CliRunner().invoke(cli, ["-c", str(c), "propose-windows", "--data", str(f)])
    assert r.exit_code == 0, r.output
    assert "the history holds 3.0 days: a peak is proposed when it came on 5 of the last 7 days" in r.output


def test_a_bad_time_zone_is_one_line(tmp_path):
    f, c = _write(tmp_path, 3)
    r = CliRunner().invoke(cli, ["-c", str(c), "propose-windows", "--data", str(f), "--timezone", "Mars/Olympus"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        "gpu-autoscaler: propose-windows: --timezone 'Mars/Olympus' is no time zone (e.g. UTC, Europe/Paris)"]
