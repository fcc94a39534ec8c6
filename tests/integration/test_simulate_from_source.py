"""`simulate --from-source` against a real Prometheus 2.x backfilled with promtool (issue #27): the replay is the
stored history's, exactly: the same figures as the replay of a file holding the same numbers."""

import json
import time

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from daemon.cli import cli
from tests.conftest import free_port
from tests.support.services import backfilled_prometheus

pytestmark = pytest.mark.services

MINUTES = 300
WINDOW = 200
T0 = (int(time.time()) // 3600 - 8) * 3600        # 8 hours ago, on the hour
END = T0 + 60 * (MINUTES - 1)                      # the last stored minute


def demand(m: int) -> dict:
    """GPUs each tenant asks for at minute m: the high tenant one 8-GPU job every other 40 minutes; the low
    tenant 10-16 one-GPU jobs."""
    return {"hi": 8.0 if (m // 40) % 2 else 0.0, "lo": 10.0 + m % 7}


def openmetrics() -> str:
    lines = ["# TYPE gpuas_test_demand gauge"]
    for m in range(MINUTES):
        for t, v in demand(m).items():
            lines.append(f'gpuas_test_demand{{namespace="{t}"}} {v:g} {T0 + 60 * m}')
    lines.append("# TYPE gpuas_test_gpus gauge")
    lines += [f"gpuas_test_gpus 16 {T0 + 60 * m}" for m in range(MINUTES)]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with backfilled_prometheus(tmp_path_factory.mktemp("prom"), openmetrics()) as (url, proc):
        yield url


COMMON = """
[cluster]
gpus = 16
gpus_per_node = 8

[forecaster]
season_steps = 100

[policy]
headroom = 0.0
preempt_budget_share = 0.5

[[tenants]]
name = "hi"
tier = "high"
job_gpus = 8

[[tenants]]
name = "lo"
tier = "low"
job_gpus = 1
"""


def source_config(url: str) -> str:
    return COMMON + f"""
[source]
kind = "prometheus"

[source.prometheus]
url = "{url}"
timeout_s = 5
retries = 0
demand_query = "sum by (namespace) (gpuas_test_demand)"
capacity_query = "sum(gpuas_test_gpus)"
missing_query = "sum by (namespace) (gpuas_test_missing)"
"""


def comparable(s: dict) -> dict:
    return {k: v for k, v in s.items() if k not in ("wall_s", "cpu_s", "decision_ms_mean", "decision_ms_p99")}


def invoke(toml, *args):
    return CliRunner().invoke(cli, ["-c", str(toml), "simulate", *args, "--strategies", "static,reactive,perfect"])


def replayed_from_a_file(tmp_path) -> dict:
    """The same numbers as the source holds (demand, every minute), in a CSV file replayed with --data over the
    same window: the report the source's replay must match, setting by setting."""
    rows = [{"time": pd.Timestamp(T0 + 60 * m, unit="s", tz="UTC").isoformat(), **demand(m)} for m in range(MINUTES)]
    csv = tmp_path / "same.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    plain = tmp_path / "plain.toml"
    plain.write_text(COMMON)
    r = invoke(plain, "--data", str(csv), "--days", str(WINDOW / 1440), "--out", str(tmp_path / "file"))
    assert r.exit_code == 0, r.output
    return json.loads((tmp_path / "file" / "own-same.json").read_text())


def test_from_source_replays_exactly_the_stored_history(prom, tmp_path):
    toml = tmp_path / "prom.toml"
    toml.write_text(source_config(prom))
    until = pd.Timestamp(END + 20, unit="s", tz="UTC").isoformat()
    r = invoke(toml, "--from-source", "--days", str(WINDOW / 1440), "--history-days", str((MINUTES - WINDOW) / 1440),
               "--until", until, "--out", str(tmp_path / "src"))
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "src" / "own-source.json").read_text())
    assert got["source"] == "source prometheus" and got["steps"] == WINDOW
    assert got["window"] == [str(pd.Timestamp(END - 60 * (WINDOW - 1), unit="s", tz="UTC")),
                             str(pd.Timestamp(END, unit="s", tz="UTC"))]
    assert got["history_steps_before"] == MINUTES - WINDOW
    # the same numbers in a file, replayed with --data: the same figures, setting by setting
    want = replayed_from_a_file(tmp_path)
    assert [x["label"] for x in got["runs"]] == [x["label"] for x in want["runs"]] == ["static", "reactive", "perfect"]
    for a, b in zip(got["runs"], want["runs"]):
        assert comparable(a) == comparable(b), a["label"]
    # and the figures are the history's, not empty: the high tier asked for GPUs in the window
    assert got["runs"][0]["tiers"]["high"]["demand_gpu_min"] == sum(
        demand(m)["hi"] for m in range(MINUTES - WINDOW, MINUTES))
    assert got["runs"][1]["preemptions"] > 0


def test_a_source_that_cannot_serve_the_days_asked_is_one_line(prom, tmp_path):
    toml = tmp_path / "prom.toml"
    toml.write_text(source_config(prom))
    until = pd.Timestamp(END + 20, unit="s", tz="UTC").isoformat()
    r = invoke(toml, "--from-source", "--days", str(WINDOW / 1440), "--history-days", "1", "--until", until)
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "source prometheus: cannot serve" in lines[0], r.output
    assert f"its history starts at {pd.Timestamp(T0, unit='s', tz='UTC')}" in lines[0]


def test_an_unreachable_prometheus_is_one_line(tmp_path):
    toml = tmp_path / "prom.toml"
    toml.write_text(source_config(f"http://127.0.0.1:{free_port()}"))
    r = invoke(toml, "--from-source", "--days", "0.1")
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-autoscaler: simulate: source prometheus:"), r.output


def test_from_source_with_the_embedded_simulator(tmp_path):
    # no config: the embedded simulator is the source; its tenants are the simulator's (tiers and job sizes, as
    # `run --sim` plans them), the flags over them: "what if tenant-0000 were low, tenant-0004 high"
    r = CliRunner().invoke(cli, ["simulate", "--from-source", "--days", "0.5", "--history-days", "1",
                                 "--tier", "tenant-0000=low", "--tier", "tenant-0004=high", "--strategies",
                                 "reactive", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "own-source.json").read_text())
    assert sorted(doc["high_tier"]) == ["tenant-0001", "tenant-0002", "tenant-0003", "tenant-0004"]
    assert doc["steps"] == 720 and doc["tenants_unnamed"] == []
    assert np.isfinite(doc["runs"][0]["utilization"])


def test_from_source_with_the_embedded_simulator_and_a_config_naming_no_tenant(tmp_path):
    """Found on a first day: `simulate --from-source` with a config whose source is the simulator and no [[tenants]]
    was refused ("no tenant the config knows: the file has tenant-0000, ..."), while `run --sim` on the same
    config plans those tenants with the simulator's tiers."""
    cfg = tmp_path / "sim.toml"
    cfg.write_text('[source]\nkind = "simulator"\n')
    r = CliRunner().invoke(cli, ["-c", str(cfg), "simulate", "--from-source", "--days", "0.25", "--history-days",
                                 "1", "--strategies", "reactive", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "own-source.json").read_text())
    assert sorted(doc["high_tier"]) == ["tenant-0000", "tenant-0001", "tenant-0002", "tenant-0003"]


def test_from_source_reads_the_daemons_history_store_when_it_holds_the_window(tmp_path):
    # the daemon's rolling history store (what the daemon read from Prometheus, kept on disk) holds the whole
    # window up to --until: it is replayed and Prometheus is never asked (here: nothing listens at its URL)
    from daemon.sources.history import History

    state = tmp_path / "state" / "gpu.sqlite"
    h = History(60, MINUTES, state.with_name("gpu-history.sqlite"))

    def fetch(start_s, end_s, tenants):
        idx = pd.date_range(pd.Timestamp(start_s, unit="s", tz="UTC"), pd.Timestamp(end_s, unit="s", tz="UTC"),
                            freq="60s", name="time")
        return pd.DataFrame([demand(int((t.timestamp() - T0) // 60)) for t in idx], index=idx)

    h.update(fetch, END + 1)
    h.close()
    toml = tmp_path / "store.toml"
    toml.write_text(source_config(f"http://127.0.0.1:{free_port()}") + f'\n[state]\npath = "{state}"\n')
    until = pd.Timestamp(END + 20, unit="s", tz="UTC").isoformat()
    r = invoke(toml, "--from-source", "--days", str(WINDOW / 1440), "--history-days", str((MINUTES - WINDOW) / 1440),
               "--until", until, "--out", str(tmp_path / "src"))
    assert r.exit_code == 0, r.output
    got = json.loads((tmp_path / "src" / "own-source.json").read_text())
    assert got["source"].startswith("history store ") and got["steps"] == WINDOW
    want = replayed_from_a_file(tmp_path)
    for a, b in zip(got["runs"], want["runs"]):
        assert comparable(a) == comparable(b), a["label"]
    # asked for more than the store holds: Prometheus is asked, and (unreachable here) that is one line
    r = invoke(toml, "--from-source", "--days", str(WINDOW / 1440), "--history-days", "1", "--until", until)
    assert r.exit_code == 1 and r.output.strip().startswith("gpu-autoscaler: simulate: source prometheus:"), r.output
