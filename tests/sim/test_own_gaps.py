"""`simulate --data` tells the user what of the file it did not replay: minutes missing in the replayed window (the
simulator holds a tenant's jobs as they were through a gap, so those steps are not measured) and tenants the config
names that have no series in the file (a newcomer's misspelt or absent tenant); and, before it starts choosing, how
much more history --quick-forecaster's choice needs."""

import json

from tests.sim.test_own_replay import CONFIG, DAYS, simulate, the_case, write


def test_minutes_missing_in_the_replayed_window_are_said_with_the_longest_gap(tmp_path):
    csv, toml = write(tmp_path, the_case())
    lines = csv.read_text().splitlines()
    # the window is the file's last 200 minutes (rows 100-299); rows 200-229 (03:20 to 03:49) are gone
    csv.write_text("\n".join(lines[:1 + 200] + lines[1 + 230:]) + "\n")
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive", "--out",
                 str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    warn = [x for x in r.output.splitlines() if x.startswith("WARNING:") and "replayed steps" in x]
    assert len(warn) == 1, r.output
    assert "30 of the 200 replayed steps (15.0%) have no sample of 2 tenants (hi, lo; of every tenant: 30 steps, " \
           "the longest 30 from 2026-01-01 03:20:00+00:00)" in warn[0]
    assert "counts none of its demand unmet" in warn[0]
    doc = json.loads((tmp_path / "o" / "own-history.json").read_text())
    assert doc["gaps"]["steps"] == 30 and doc["gaps"]["longest_gap_steps"] == 30


def test_one_tenants_missing_value_is_said_in_the_singular_without_a_gap_of_every_tenant(tmp_path):
    cols = the_case()
    cols["lo"] = cols["lo"].copy()
    cols["lo"][250] = float("nan")          # 'n/a' in a spreadsheet: one value of one tenant
    csv, toml = write(tmp_path, cols)
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive", "--out",
                 str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "1 of the 200 replayed steps (0.5%) has no sample of 1 tenant (lo): through a gap" in r.output


def test_a_file_with_every_step_says_nothing_of_gaps(tmp_path):
    csv, toml = write(tmp_path, the_case())
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive", "--out",
                 str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "replayed steps" not in r.output and "no series in the file" not in r.output
    assert json.loads((tmp_path / "o" / "own-history.json").read_text())["gaps"] is None


def test_a_config_tenant_with_no_column_in_the_file_is_named(tmp_path):
    config = CONFIG + '\n[[tenants]]\nname = "ghost"\ntier = "high"\n'
    csv, toml = write(tmp_path, the_case(), config=config)
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--strategies", "reactive", "--tier", "gone=low",
                 "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    assert "2 tenants named in the config or flags have no series in the file, not replayed: ghost, gone" \
        in r.output
    doc = json.loads((tmp_path / "o" / "own-history.json").read_text())
    assert doc["tenants_not_in_data"] == ["ghost", "gone"]


def test_too_little_history_for_the_quick_choice_says_how_many_days_fewer_to_replay(tmp_path):
    # simulate --data on 3 days with --days 2 --quick-forecaster printed 'choosing the forecaster ...: done', then
    # 'the history before the window cannot choose a forecaster: not selected yet: 1440 steps of history, need 1874'
    csv, toml = write(tmp_path, the_case())
    r = simulate(toml, "--data", str(csv), "--days", str(DAYS), "--quick-forecaster", "--strategies",
                 "reactive,predictive", "--out", str(tmp_path / "o"))
    assert r.exit_code == 1
    # 100 steps before the 200 replayed; a season (100), the horizon (60) and a scored end of 240 are needed
    assert r.output.strip().splitlines()[-1] == (
        "gpu-autoscaler: simulate: --quick-forecaster chooses on the history before the window: it has 100 steps, "
        "the choice needs 400 (a season of 100, the 60-step horizon and the end the baselines are scored on): "
        "replay 0.21 days fewer (--days), or give 300 more steps of history")
    assert "choosing the forecaster" not in r.output
