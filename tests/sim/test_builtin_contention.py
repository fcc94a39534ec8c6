"""A built-in trace's window whose demand never contends for GPUs is said to be one (found on a first day: `simulate
--days 0.25` replays the synthetic night, every strategy's every figure 0, with no word why, and `recommend` on its
JSON then recommended reactive "on this history"), as a replay of one's own history already says it."""

import json

from click.testing import CliRunner

from daemon.cli import cli


def test_a_synthetic_window_that_never_contends_is_said_and_recommend_refuses_it(tmp_path):
    r = CliRunner().invoke(cli, ["simulate", "--days", "0.05", "--strategies", "static,reactive", "--out",
                                 str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "synthetic-40x1024.json").read_text())
    assert all(x["tiers"][t]["unmet_gpu_min"] == 0 for x in doc["runs"] for t in ("high", "normal"))
    c = doc["contention"]
    assert c["contends"] is False and c["peak_gpus"] <= c["free_gpus"] == 1024 - 204
    assert "WARNING: synthetic-40x1024, 0.05 days replayed: demand never contends for GPUs" in r.output
    assert "Replay more --days or fewer --gpus" in r.output
    again = CliRunner().invoke(cli, ["recommend", str(tmp_path / "synthetic-40x1024.json")])
    assert again.exit_code == 1 and "demand never contends for GPUs" in again.output
    refused = CliRunner().invoke(cli, ["simulate", "--days", "0.05", "--recommend", "--out", str(tmp_path / "r")])
    assert refused.exit_code == 1 and "demand never contends for GPUs" in refused.output
    assert not (tmp_path / "r" / "synthetic-40x1024.json").exists()
