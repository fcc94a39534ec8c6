"""retrain --data and backtest --data read a history file's columns in their units as simulate --data does: a
`[req/s]` column (or a `[tenants.inference]` tenant's) is the tenant's GPU need (need_frame), named by the tenant.

Before, both scored `svc[req/s]` as a tenant of that name whose GPUs were the requests/s: the model was chosen on a
series the daemon never forecasts."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from daemon.cli import cli
from daemon.config import Config
from daemon.forecasting.retrain import DataError, load_history, retrain_from_config
from daemon.forecasting.units import InferenceSpec, need_frame
from tests.forecaster.test_models import periodic_frame

SPEC = {"gpus_per_replica": 2, "replica_rps": 4.0, "cold_start_s": 120}
TOML = ('[cycle]\nhorizon_steps = 12\nhistory_steps = 400\n[forecaster]\nseason_steps = 48\nmodel_dir = "none"\n'
        '[[tenants]]\nname = "svc"\ntier = "high"\n')
INFERENCE = '[tenants.inference]\ngpus_per_replica = 2\nreplica_rps = 4.0\ncold_start_s = 120\n'


def _files(tmp_path):
    """A history with a GPU tenant and a service's requests/s (`svc[req/s]`), and the same history with the
    service's GPU need, computed by need_frame, as a plain GPU column `svc`."""
    f = periodic_frame(n_tenants=2, steps=48 * 12, seed=3)
    rates = (f["t1"] * 3.7).rename("svc")
    need = need_frame(rates.to_frame(), {"svc": InferenceSpec(**SPEC)})["svc"]
    f.drop(columns="t1").assign(**{"svc[req/s]": rates}).reset_index().to_csv(tmp_path / "rates.csv", index=False)
    f.drop(columns="t1").assign(svc=need).reset_index().to_csv(tmp_path / "need.csv", index=False)
    return rates, need


def _cfg(tmp_path, inference=True) -> Config:
    return Config(cycle={"horizon_steps": 12, "history_steps": 400},
                  forecaster={"season_steps": 48, "model_dir": str(tmp_path / "none")},
                  tenants=[{"name": "svc", "tier": "high", **({"inference": SPEC} if inference else {})}])


def test_a_req_s_column_is_read_as_the_tenants_gpu_need(tmp_path):
    rates, need = _files(tmp_path)
    frame, step_s = load_history(_cfg(tmp_path), data=tmp_path / "rates.csv")
    assert step_s == 60 and list(frame.columns) == ["t0", "svc"]
    np.testing.assert_allclose(frame["svc"].to_numpy(), need.to_numpy())
    assert not np.allclose(frame["svc"].to_numpy(), rates.to_numpy())  # GPUs, not requests/s


def test_a_plain_column_of_an_inference_tenant_is_its_rate_too(tmp_path):
    _, need = _files(tmp_path)
    pd.read_csv(tmp_path / "rates.csv").rename(columns={"svc[req/s]": "svc"}).to_csv(tmp_path / "plain.csv",
                                                                                    index=False)
    frame, _ = load_history(_cfg(tmp_path), data=tmp_path / "plain.csv")
    np.testing.assert_allclose(frame["svc"].to_numpy(), need.to_numpy())


def test_backtest_scores_the_services_gpu_need(tmp_path, monkeypatch):
    """The backtest of the rates file is the backtest of the file holding the need as GPUs: the same scores."""
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rates.toml").write_text(TOML + INFERENCE)
    (tmp_path / "need.toml").write_text(TOML)  # a plain column of a [tenants.inference] tenant would be its rate
    reports = {}
    for name in ("rates", "need"):
        r = CliRunner().invoke(cli, ["-c", f"{name}.toml", "backtest", "--data", f"{name}.csv", "--report-dir", name])
        assert r.exit_code == 0, r.output
        reports[name] = json.loads((tmp_path / name / "backtest.json").read_text())
    wql = {n: {m: v["wql"] for m, v in rep["models"].items()} for n, rep in reports.items()}
    assert wql["rates"] and wql["rates"] == pytest.approx(wql["need"])


def test_retrain_scores_the_services_gpu_need(tmp_path):
    """retrain on the rates file scores the baselines on the need: the scores retrain gives the need file."""
    _files(tmp_path)
    outs = {name: retrain_from_config(_cfg(tmp_path, inference=name == "rates"), data=tmp_path / f"{name}.csv",
                                      epochs=1, progress=False, samples_per_epoch=256, model_dir=tmp_path / f"m-{name}",
                                      out_dir=tmp_path / f"r-{name}", select_by="wql")
            for name in ("rates", "need")}
    base = {n: {m: v["wql"] for m, v in o.report["models"].items() if not m.startswith("lstm")}
            for n, o in outs.items()}
    assert base["rates"] and base["rates"] == pytest.approx(base["need"])


def test_a_req_s_column_without_a_replica_spec_is_one_line(tmp_path, monkeypatch):
    _files(tmp_path)
    with pytest.raises(DataError, match=r"column 'svc\[req/s\]' is requests/s, but the config gives svc no "
                                        r"replica spec: add a \[tenants.inference\] table"):
        load_history(_cfg(tmp_path, inference=False), data=tmp_path / "rates.csv")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text(TOML)
    for cmd in (["backtest"], ["retrain", "--quiet", "--epochs", "1"]):
        r = CliRunner().invoke(cli, ["-c", "c.toml", *cmd, "--data", "rates.csv"])
        assert r.exit_code == 1 and "add a [tenants.inference] table" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output, r.output
