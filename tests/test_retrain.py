import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.retrain import read_history_file, retrain_on
from forecaster import registry, traces
from tests.conftest import SHARED_DATA
from tests.test_forecaster import periodic_frame


def small_cfg(min_improvement=0.0):
    return Config(cycle={"horizon_steps": 12, "history_steps": 400}, forecaster={"season_steps": 48},
                  retrain={"min_improvement": min_improvement, "epochs": 10})


def test_retrain_promotes_a_winner_and_keeps_it_against_a_loser(tmp_path):
    f = periodic_frame(n_tenants=8, steps=48 * 20, seed=1, noise=0.15)
    out = retrain_on(f, small_cfg(), model_dir=tmp_path, step_s=60, samples_per_epoch=4096, progress=False,
                     out_dir=tmp_path / "rep")
    assert out.promoted, out.message
    first = registry.read_manifest(tmp_path)["current"]
    assert first == out.version
    assert out.report["models"]["lstm"]["wql"] < out.report["models"]["seasonal_naive_daily"]["wql"]
    assert (tmp_path / "rep" / "retrain.png").exists()
    # a bar nobody can clear: the new version is written but the current one stays
    out2 = retrain_on(f, small_cfg(min_improvement=0.95), model_dir=tmp_path, step_s=60, samples_per_epoch=512,
                      epochs=1, progress=False)
    assert not out2.promoted and "not promoted" in out2.message
    m = registry.read_manifest(tmp_path)
    assert m["current"] == first and len(m["versions"]) == 2
    assert any("does not beat" in v.get("reason", "") for v in m["versions"] if v["version"] == out2.version)


def test_history_file_wide_and_long(tmp_path):
    f = periodic_frame(n_tenants=2, steps=100)
    wide = tmp_path / "wide.csv"
    f.reset_index().to_csv(wide, index=False)
    got = read_history_file(wide, 60)
    assert list(got.columns) == ["t0", "t1"] and len(got) == 100
    long = f.stack().rename("value").reset_index()
    lp = tmp_path / "long.csv"
    long.drop(index=[5]).to_csv(lp, index=False)       # one missing sample
    got = read_history_file(lp, 60)
    assert got.isna().sum().sum() == 1


def test_alibaba_demand_conserves_gpu_time():
    frame, tiers = traces.alibaba_demand(SHARED_DATA, step_s=300, last_days=None)
    pods = traces.alibaba_pods(SHARED_DATA)
    pods = pods[pods["gpus"] > 0]
    s = (pods["creation_time"] // 300).astype(int)
    e = np.maximum((pods["deletion_time"] // 300).astype(int), s + 1)
    expect = float((pods["gpus"] * (e - s)).sum())
    assert abs(frame.to_numpy().sum() - expect) / expect < 1e-3
    assert tiers["alibaba-LS"] == "high" and tiers["alibaba-BE"] == "low"


def test_azure_requests_count_every_row():
    frame = traces.azure_requests(SHARED_DATA, step_s=10)
    assert int(frame["azure-code"].sum()) == 8819 and int(frame["azure-conv"].sum()) == 19366
    assert isinstance(frame.index, pd.DatetimeIndex)
