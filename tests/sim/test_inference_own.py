"""`simulate --data FILE` with an inference service's requests/s: the unit in the header (`svc[req/s]`) or a
`[tenants.inference]` table in the config; a rate column without a replica spec, or an unknown unit, is one line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from daemon.config import load_config
from daemon.forecasting.retrain import DataError
from daemon.sim import own
from tests.sim.test_own_replay import CONFIG, N, simulate, write

WINDOW_DAYS = 200 / 1440
SERVICE = """
[[tenants]]
name = "svc"
tier = "high"

[tenants.inference]
gpus_per_replica = 2
replica_rps = 10
cold_start_s = 180
headroom = 0.0
"""
LOW = '\n[[tenants]]\nname = "lo"\ntier = "low"\n'


def _cols() -> dict:
    # the service: 5 req/s, rising to 35 req/s at minute 220 (120 into the window); preemptible batch beside it
    svc = np.r_[np.full(220, 5.0), np.full(N - 220, 35.0)]
    return {"lo": np.r_[9.0, np.full(N - 1, 10.0)], "svc[req/s]": svc}


def test_a_req_per_s_column_replays_as_a_service_with_its_requests_counted(tmp_path):
    csv, toml = write(tmp_path, _cols(), config=CONFIG + SERVICE + LOW)
    r = simulate(toml, "--data", str(csv), "--days", f"{WINDOW_DAYS}", "--strategies", "reactive,perfect",
                 "--out", str(tmp_path / "out"), "--workers", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "out" / "own-history.json").read_text())
    assert doc["inference"]["svc"]["gpus_per_replica"] == 2
    runs = {x["strategy"]: x["tiers"]["high"] for x in doc["runs"]}
    # the window is minutes 100..299 of the file: 120 at 5 req/s and 80 at 35 req/s
    arrived = (120 * 5 + 80 * 35) * 60.0
    for t in runs.values():
        assert t["inf_requests"] == pytest.approx(arrived)
        assert t["inf_served"] + t["inf_throttled"] + t["inf_late"] == pytest.approx(arrived)
    # reactive: the rise is seen a minute late and the 3 new replicas (6 GPUs) must first displace the low
    # tenant's work; perfect has them placed and warm before it
    assert runs["reactive"]["inf_throttled"] > 0
    assert runs["perfect"]["inf_throttled"] < runs["reactive"]["inf_throttled"]
    assert "inference requests per tier" in r.output


def test_a_service_named_in_the_config_needs_no_unit(tmp_path):
    cols = _cols()
    cols["svc"] = cols.pop("svc[req/s]")
    csv, toml = write(tmp_path, cols, config=CONFIG + SERVICE + LOW)
    cfg = load_config(toml)
    w, notes = own.own_workload(own.read_file(csv, cfg), cfg, days=WINDOW_DAYS, step_s=60, where=str(csv))
    assert set(w.inference) == {"svc"} and w.job_gpus[list(w.demand.columns).index("svc")] == 2
    # need at the previous minute's rate: 35 req/s -> 4 replicas of 10 -> 8 GPUs, from minute 221
    assert w.demand["svc"].iloc[220] == 2.0 and w.demand["svc"].iloc[221] == 8.0
    assert w.rates["svc"].iloc[221] == 35.0 and notes["inference"]["svc"]["cold_start_s"] == 180.0


@pytest.mark.parametrize("header,config,line", [
    ("svc[req/s]", CONFIG, "column 'svc[req/s]' is requests/s, but the config gives svc no replica spec"),
    ("svc[tok/s]", CONFIG + SERVICE, "column 'svc[tok/s]': unknown unit 'tok/s'"),
])
def test_a_rate_column_the_replay_cannot_read_is_one_line(tmp_path, header, config, line):
    cols = _cols()
    cols[header] = cols.pop("svc[req/s]")
    csv, toml = write(tmp_path, cols, config=config + LOW)
    cfg = load_config(toml)
    with pytest.raises(DataError) as e:
        own.own_workload(own.read_file(csv, cfg), cfg, days=WINDOW_DAYS, step_s=60, where=str(csv))
    assert line in str(e.value) and "\n" not in str(e.value)
    r = simulate(toml, "--data", str(csv), "--days", f"{WINDOW_DAYS}", "--strategies", "reactive")
    assert r.exit_code == 1 and line in r.output and len(r.output.strip().splitlines()) == 1


def test_split_unit():
    assert own.split_unit("svc-a[req/s]") == ("svc-a", "req/s")
    assert own.split_unit("svc-a") == ("svc-a", None)
    assert own.split_unit("a[b]c") == ("a[b]c", None)
    assert pd.Index(["x[GPU]"]).map(lambda c: own.split_unit(c)[0]).tolist() == ["x"]


def _refused_line(tmp_path, cols: dict, config: str, header: list[str] | None = None) -> str:
    """The one line `simulate --data` and own_workload refuse the file with (`header`: the CSV's own header, for
    names a dict cannot hold twice)."""
    csv, toml = write(tmp_path, cols, config=config)
    if header is not None:
        lines = csv.read_text().splitlines()
        csv.write_text("\n".join([",".join(["time", *header]), *lines[1:]]) + "\n")
    r = simulate(toml, "--data", str(csv), "--days", f"{WINDOW_DAYS}", "--strategies", "reactive")
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
    return r.output.strip()


def test_an_infinite_rate_or_a_tenant_in_two_columns_is_one_line(tmp_path):
    # an infinite rate was replayed as served (its need NaN, missing), where a frame came from elsewhere than the
    # file reader (which refuses it first): one line naming the column and the time
    cols = _cols()
    cols["svc[req/s]"][250] = np.inf
    assert "column 'svc[req/s]' has inf at" in _refused_line(tmp_path, cols, CONFIG + SERVICE + LOW)
    cfg = load_config(write(tmp_path, _cols(), config=CONFIG + SERVICE + LOW)[1])
    frame = pd.DataFrame(cols, index=pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC", name="time"))
    with pytest.raises(DataError, match=r"column 'svc\[req/s\]' at 2026-01-01 04:10:00\+00:00: inf requests/s, "
                                        "not a finite number"):
        own.own_workload(frame, cfg, days=WINDOW_DAYS, step_s=60, where="frame")
    # `svc` and `svc[req/s]` (or `lo` and `lo[GPU]`) were two columns of one tenant, both replayed
    cols = _cols() | {"svc": np.full(N, 3.0)}
    assert "columns 'svc[req/s]' and 'svc' are both tenant 'svc'" in _refused_line(tmp_path, cols,
                                                                                  CONFIG + SERVICE + LOW)
    cols = _cols() | {"lo[GPU]": np.r_[1.0, np.full(N - 1, 2.0)]}
    assert "columns 'lo' and 'lo[GPU]' are both tenant 'lo'" in _refused_line(tmp_path, cols,
                                                                              CONFIG + SERVICE + LOW)


def test_a_csv_header_naming_a_column_twice_is_one_line(tmp_path):
    # pandas reads a second `lo` as `lo.1`, a tenant of its own the replay would add (tier normal)
    cols = _cols() | {"lo2": np.r_[2.0, np.full(N - 1, 3.0)]}
    out = _refused_line(tmp_path, cols, CONFIG + SERVICE + LOW, header=["lo", "svc[req/s]", "lo"])
    assert "history.csv: the header names column 'lo' twice" in out, out
