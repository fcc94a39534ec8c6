import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.forecasting.retrain import DataError, read_history_file, retrain_on
from forecaster import registry, traces
from tests.conftest import SHARED_DATA
from tests.forecaster.test_models import periodic_frame


def small_cfg(min_improvement=0.0):
    return Config(cycle={"horizon_steps": 12, "history_steps": 400}, forecaster={"season_steps": 48},
                  retrain={"min_improvement": min_improvement, "epochs": 10})


def test_retrain_promotes_a_winner_and_keeps_it_against_a_loser(tmp_path):
    # Holt-Winters refits per tenant at every origin (two thirds of this test's time); `retrain` with it is
    # covered end to end by tests/service/test_cli.py
    f = periodic_frame(n_tenants=8, steps=48 * 20, seed=1, noise=0.15)
    out = retrain_on(f, small_cfg(), model_dir=tmp_path, step_s=60, samples_per_epoch=4096, progress=False,
                     out_dir=tmp_path / "rep", scored_on="simulator:default", with_ets=False)
    assert out.promoted, out.message
    first = registry.read_manifest(tmp_path)["current"]
    assert first == out.version and registry.read_in_use(tmp_path)["version"] == first
    assert out.report["models"]["lstm"]["wql"] < out.report["models"]["seasonal_naive_daily"]["wql"]
    assert (tmp_path / "rep" / "retrain.png").exists()
    # a bar nobody can clear: the new version is written but the current one stays
    out2 = retrain_on(f, small_cfg(min_improvement=0.95), model_dir=tmp_path, step_s=60, samples_per_epoch=512,
                      epochs=1, progress=False, scored_on="simulator:default", with_ets=False)
    assert not out2.promoted and "not promoted" in out2.message
    m = registry.read_manifest(tmp_path)
    assert m["current"] == first and len(m["versions"]) == 2
    assert "current" in out2.report["models"]              # the model in use was scored on the same window
    assert m["in_use"]["version"] == first and m["in_use"]["why"].startswith("current scored best")
    assert any("did not beat" in v.get("reason", "") for v in m["versions"] if v["version"] == out2.version)


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


# --- the model in use = the best scored on this cluster (#10.2) ---

import json  # noqa: E402

import pytest  # noqa: E402

from daemon.forecasting.choose import build, cluster_id  # noqa: E402
from daemon.forecasting.retrain import retrain_from_config  # noqa: E402
from forecaster.baselines import Naive, SeasonalNaive  # noqa: E402
from forecaster.selection import StartupSelection  # noqa: E402


def random_walks(n=4, steps=48 * 14, seed=0):
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
    v = 500 + np.cumsum(rng.normal(0, 5, size=(steps, n)), axis=0)
    return pd.DataFrame(np.maximum(v, 0), index=idx, columns=pd.Index([f"w{i}" for i in range(n)], name="tenant"))


def test_a_baseline_wins_where_the_lstm_does_not_and_the_daemon_uses_exactly_it(tmp_path):
    # random walks: the last value is the best forecast; a barely trained LSTM cannot beat it by 10% (blended with
    # the naive forecast, an LSTM that starts from the last value can edge it by luck on one held-out window)
    f = random_walks()
    cfg = small_cfg(min_improvement=0.1)
    out = retrain_on(f, cfg, model_dir=tmp_path, step_s=60, samples_per_epoch=128, epochs=1, progress=False,
                     scored_on=cluster_id(cfg), with_ets=False)
    m = registry.read_manifest(tmp_path)
    # naive, bare or recalibrated from its recent errors, its peak recalibrated on realised peaks or not
    name = m["in_use"]["name"]
    assert not out.promoted and m["in_use"]["kind"] == "baseline", out.message
    assert name in [b + p for b in ("naive", "naive+conformal") for p in ("", "+peak", "+peak_all")], out.message
    assert f"{name} scored best on simulator:default" in m["in_use"]["why"]
    assert m["current"] is None                           # the new LSTM is saved, not promoted
    fc, note = build(small_cfg().model_copy(
        update={"forecaster": cfg.forecaster.model_copy(update={"model_dir": tmp_path})}))
    inner = fc
    while hasattr(inner, "model"):                         # through the recalibrations to the baseline
        inner = inner.model
    assert fc.name == name and isinstance(inner, Naive) and f"{name} scored best" in note


def test_a_model_scored_elsewhere_is_not_used_here(tmp_path):
    shutil = __import__("shutil")
    from tests.conftest import REPO

    shutil.copytree(REPO / "models", tmp_path / "m")
    shipped = registry.read_in_use(tmp_path / "m")
    assert shipped["scored_on"] == "simulator:default" and shipped["kind"] == "lstm"
    sim = Config(forecaster={"model_dir": tmp_path / "m"})
    fc, _ = build(sim)
    assert fc.name == shipped["name"]                    # the simulator is where it was scored: used
    real = Config(source={"kind": "prometheus"}, forecaster={"model_dir": tmp_path / "m"})
    fc, note = build(real)
    assert isinstance(fc, StartupSelection) and "never on this cluster ('prometheus:default')" in note


def test_startup_selection_scores_the_baselines_on_the_history():
    sel = StartupSelection(48, (0.5, 0.9, 0.99))
    fc = sel.predict(random_walks(steps=48 * 4), 12)
    assert sel.chosen is not None and sel.chosen.name in ("naive", "naive+conformal") and fc.model == sel.chosen.name
    assert "naive+conformal" in sel.scores                 # each baseline also recalibrated from its recent errors
    assert min(sel.scores["naive"], sel.scores["naive+conformal"]) < sel.scores["seasonal_naive_daily"]
    assert f"{sel.chosen.name} scored best" in sel.why
    sel2 = StartupSelection(48, (0.5, 0.9, 0.99))
    sel2.predict(periodic_frame(n_tenants=4, steps=48 * 4, noise=0.01), 12)
    assert isinstance(getattr(sel2.chosen, "model", sel2.chosen), SeasonalNaive)
    assert sel2.chosen.name.startswith("seasonal_naive_48")
    # request counts around a steady rate: a smoothed level beats repeating the last (noisy) value
    rng = np.random.default_rng(4)
    counts = random_walks(steps=48 * 4)
    counts[:] = rng.poisson(30, size=counts.shape).astype(float)
    sel3 = StartupSelection(48, (0.5, 0.9, 0.99))
    sel3.predict(counts, 12)
    assert sel3.chosen.name.startswith("exp_smoothing"), sel3.why
    assert sel3.scores[sel3.chosen.name] < 0.85 * min(sel3.scores["naive"], sel3.scores["naive+conformal"])
    young = StartupSelection(48, (0.5, 0.9, 0.99))
    young.predict(random_walks(steps=60), 12)             # too short to score: interim forecast, retried later
    assert young.chosen is None and "not selected yet" in young.why


def test_the_history_a_refusal_says_is_needed_is_enough():
    """`simulate --data --quick-forecaster` on 1,800 steps said "need 1860"; 1,860 steps were refused again (the
    held-out end grows with the history: a fifth of it). The count said is now the fewest steps that choose."""
    import re

    season, horizon = 144, 6
    short = StartupSelection(season, (0.5, 0.9, 0.99))
    short.predict(random_walks(steps=170), horizon)
    need = int(re.search(r"need (\d+)", short.why).group(1))
    for steps, chooses in ((need - 1, False), (need, True)):
        sel = StartupSelection(season, (0.5, 0.9, 0.99))
        sel.predict(random_walks(steps=steps), horizon)
        assert (sel.chosen is not None) is chooses, (steps, sel.why)


def test_the_start_up_history_counts_from_its_first_sample(monkeypatch):
    """A daemon started on a Prometheus that began scraping recently reads a window of gaps ending in the little
    data there is (its history is as long as it keeps, not as long as the source has). The gaps counted as history:
    every cycle backtested the baselines on them (seconds a cycle at 40 tenants), and it chose once a season of data
    came, short of the count it says it needs. Now the gaps before the first sample do not count, and nothing is
    scored until that count of real steps is there."""
    import re

    from forecaster import backtest

    season, horizon = 144, 6
    short = StartupSelection(season, (0.5, 0.9, 0.99))
    short.predict(random_walks(steps=170), horizon)
    need = int(re.search(r"need (\d+)", short.why).group(1))
    walks = random_walks(steps=3 * season + need)
    real_run = backtest.run
    for steps, chooses in ((need - 1, False), (need, True)):
        f = walks.copy()
        f.iloc[: len(f) - steps] = np.nan                       # the source's first sample: `steps` from the end
        sel = StartupSelection(season, (0.5, 0.9, 0.99))
        scored = []
        monkeypatch.setattr(backtest, "run", lambda *a, **k: scored.append(1) or real_run(*a, **k))
        sel.predict(f, horizon)
        assert (sel.chosen is not None) is chooses, (steps, sel.why)
        assert bool(scored) is chooses, steps                   # nothing backtested before then
        if not chooses:
            assert f"{steps} steps of history, need {need}" in sel.why, sel.why
    gaps = StartupSelection(season, (0.5, 0.9, 0.99))
    gaps.predict(walks * np.nan, horizon)
    assert gaps.chosen is None and "0 steps of history" in gaps.why


def test_a_losing_lstm_is_said_not_to_beat_the_baseline_without_a_zero_margin(tmp_path):
    """With retrain.min_improvement = 0 (the default) `retrain` said "the new LSTM did not beat X by 0%"."""
    cfg = small_cfg(min_improvement=0.0)
    out = retrain_on(random_walks(), cfg, model_dir=tmp_path, step_s=60, samples_per_epoch=128, epochs=1,
                     progress=False, scored_on=cluster_id(cfg), with_ets=False, select_by="peak")
    assert "the new LSTM did not beat " in out.message, out.message     # a barely trained LSTM on random walks
    assert "by 0%" not in out.message

def test_step_or_horizon_mismatch_is_refused_and_never_promoted(tmp_path):
    f = periodic_frame(n_tenants=4, steps=48 * 14, seed=1)
    f5 = f.copy()
    f5.index = pd.date_range("2026-01-01", periods=len(f), freq="5min", tz="UTC", name="time")
    out = retrain_on(f5, small_cfg(), model_dir=tmp_path, step_s=300, samples_per_epoch=128, epochs=1,
                     progress=False, season=48, with_ets=False, scored_on="simulator:default")
    assert not out.promoted and "300 s steps" in out.message and "nothing promoted" in out.message
    m = registry.read_manifest(tmp_path)
    assert "in_use" not in m and m["current"] is None
    # a manifest naming a model at another step (edited by hand, or the config changed) is refused clearly
    m["in_use"] = {"kind": "baseline", "name": "naive", "scored_on": "simulator:default", "step_s": 300,
                   "horizon": 12, "season": 48}
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    fc, note = build(small_cfg().model_copy(
        update={"forecaster": small_cfg().forecaster.model_copy(update={"model_dir": tmp_path})}))
    assert isinstance(fc, StartupSelection) and "forecasts at 300 s steps but cycle.resolution_s is 60 s" in note


def test_retrain_on_a_file_writes_to_trained_not_models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = periodic_frame(n_tenants=3, steps=48 * 12, seed=2)
    p = tmp_path / "hist.csv"
    f.reset_index().to_csv(p, index=False)
    cfg = small_cfg().model_copy(
        update={"forecaster": small_cfg().forecaster.model_copy(update={"model_dir": tmp_path / "models"})})
    out = retrain_from_config(cfg, data=p, progress=False, epochs=1, samples_per_epoch=128)
    assert (tmp_path / "trained" / "manifest.json").exists() and not (tmp_path / "models").exists()
    assert out.in_use["scored_on"] == "file:hist.csv"
    with pytest.raises(Exception, match="this-cluster"):
        from click.testing import CliRunner

        from daemon.cli import cli

        r = CliRunner().invoke(cli, ["retrain", "--this-cluster"], catch_exceptions=False)
        raise RuntimeError(r.output)


def test_retrain_on_a_trace_writes_to_trained_and_scores_a_short_window_from_many_origins(tmp_path, monkeypatch):
    # --trace is not this cluster either: its models land in trained/, never in forecaster.model_dir
    monkeypatch.chdir(tmp_path)
    cfg = small_cfg().model_copy(
        update={"forecaster": small_cfg().forecaster.model_copy(update={"model_dir": tmp_path / "models"})})
    out = retrain_from_config(cfg, trace="azure", data_dir=SHARED_DATA, progress=False, epochs=1, samples_per_epoch=128)
    assert (tmp_path / "trained" / "manifest.json").exists() and not (tmp_path / "models").exists()
    assert out.in_use["scored_on"] == "trace:azure" and not out.promoted    # 10 s steps: the daemon runs 60 s
    # an hour of 10-second counts leaves a 58-step held-out window: a 12-step horizon fits 4 times without
    # overlap; origins closer together make the coverage more than a handful of forecasts
    rep = out.report
    assert rep["origins"] >= 12 and rep["stride"] < rep["horizon"] == 12, rep


def test_a_current_model_that_cannot_be_scored_here_is_named_with_the_reason(tmp_path):
    import shutil

    from tests.conftest import REPO

    shutil.copytree(REPO / "models", tmp_path / "m")       # the shipped model forecasts at 60 s steps
    f5 = periodic_frame(n_tenants=4, steps=48 * 14, seed=1)
    f5.index = pd.date_range("2026-01-01", periods=len(f5), freq="5min", tz="UTC", name="time")
    out = retrain_on(f5, small_cfg(), model_dir=tmp_path / "m", step_s=300, samples_per_epoch=128, epochs=1,
                     progress=False, season=48, with_ets=False, scored_on="file:h5.csv")
    assert "current" not in out.report["models"]
    assert "forecasts at 60 s steps, this history is 300 s" in out.report["not_scored"]["current"]


def test_helios_and_servegen_traces_load_as_tenant_frames():
    h = traces.helios_demand(SHARED_DATA, step_s=300)
    assert h.shape == (8928, 16) and not h.isna().any().any() and (h.to_numpy() >= 0).all()
    s = traces.servegen_rates(SHARED_DATA)
    assert s.shape == (2016, 43) and not s.isna().any().any()
    assert ((s == 0).to_numpy().mean()) > 0.3                 # idle windows are real zeros, not gaps


@pytest.mark.parametrize("column, message", [
    (["a", "b"] * 50, "column 'x' is not numeric"),
    ([1.0] * 50 + [-1.0] * 50, "column 'x' has negative values"),
    ([1.0] * 50 + [np.inf] * 50, "column 'x' has inf at 2026-01-01 00:50:00+00:00: GPU demand is a finite number"),
    ([1.0] * 50 + [1e308] * 50, "column 'x' has 1e+308 at 2026-01-01 00:50:00+00:00: more than 1e+09"),
])
def test_bad_history_columns_are_named(tmp_path, column, message):
    f = periodic_frame(n_tenants=1, steps=100)
    f["x"] = column
    p = tmp_path / "h.csv"
    f.reset_index().to_csv(p, index=False)
    with pytest.raises(DataError, match=__import__("re").escape(message)):
        read_history_file(p, 60)


def test_idle_history_columns_are_dropped_with_one_warning(tmp_path, caplog):
    # constant and empty columns were refused one at a time; they are dropped, all named in one warning
    f = periodic_frame(n_tenants=1, steps=100)
    f["x"], f["y"], f["z"] = 3.0, np.nan, 0.0
    p = tmp_path / "h.csv"
    f.reset_index().to_csv(p, index=False)
    with caplog.at_level("WARNING", logger="gpu_autoscaler.retrain"):
        out = read_history_file(p, 60)
    assert list(out.columns) == [c for c in f.columns if c not in ("x", "y", "z")]
    assert [r.getMessage() for r in caplog.records] == [
        f"{p}: 3 idle column(s) dropped, constant or with no value (nothing to forecast): x (3), y (empty), z (0)"]
    f[f.columns[0]] = 1.0
    f.reset_index().to_csv(p, index=False)
    with pytest.raises(DataError, match=r"every column is constant or empty \(4\)"):
        read_history_file(p, 60)


@pytest.mark.parametrize("spacing, message, fine_step, steps_there", [
    ("90s", "90 s apart, which does not divide evenly into the 60 s step", 180, 50),  # 90 s into 180 s steps
    ("300s", "300 s apart but the step is 60 s (cycle.resolution_s): set [cycle] resolution_s = 300", 300, 100),
])
def test_samples_spaced_unlike_the_step_are_refused(tmp_path, spacing, message, fine_step, steps_there):
    f = periodic_frame(n_tenants=2, steps=100)
    f.index = pd.date_range("2026-01-01", periods=100, freq=spacing, tz="UTC", name="time")
    p = tmp_path / "h.csv"
    f.reset_index().to_csv(p, index=False)
    with pytest.raises(DataError, match=__import__("re").escape(message)):
        read_history_file(p, 60)
    assert len(read_history_file(p, fine_step)) == steps_there


def test_five_minute_data_at_a_one_minute_step_is_told_so_plainly(tmp_path):
    # a week of 5-minute samples spans more steps of 60 s than the outlier bound allows: the spacing is what is
    # wrong, and the message says how to read it, not "a timestamp far from the others?"
    f = periodic_frame(n_tenants=2, steps=7 * 288)
    f.index = pd.date_range("2026-01-01", periods=len(f), freq="300s", tz="UTC", name="time")
    p = tmp_path / "h.csv"
    f.reset_index().to_csv(p, index=False)
    with pytest.raises(DataError) as err:
        read_history_file(p, 60)
    assert str(err.value) == (f"{p}: samples are 300 s apart but the step is 60 s (cycle.resolution_s): set [cycle] "
                              "resolution_s = 300 (and [forecaster] season_steps = 288 for a daily season) to read "
                              "this file at its own step, or give samples 60 s apart or closer")
    assert len(read_history_file(p, 300)) == len(f)


@pytest.mark.parametrize("unit, scale, fraction", [("s", 1, 0.0), ("s", 1, 0.25), ("ms", 10**3, 0.0),
                                                   ("us", 10**6, 0.0), ("ns", 10**9, 0.0)])
def test_epoch_numbers_in_time_are_read_in_the_unit_their_magnitude_names(tmp_path, unit, scale, fraction):
    # a Prometheus export gives epoch seconds; pandas alone read them as nanoseconds ("samples are 0 s apart")
    f = periodic_frame(n_tenants=2, steps=200)
    f.index = pd.date_range("2026-01-01", periods=200, freq="min", tz="UTC", name="time")
    iso = tmp_path / "iso.csv"
    f.reset_index().to_csv(iso, index=False)
    want = read_history_file(iso, 60)
    secs = ((f.index - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)).to_numpy()
    g = f.reset_index(drop=True)
    g.insert(0, "time", secs * scale + fraction if fraction else secs * scale)
    p = tmp_path / "epoch.csv"
    g.to_csv(p, index=False)
    got = read_history_file(p, 60)
    got.index = got.index.as_unit(want.index.unit)
    if fraction:  # 0.25 s into each minute: the same minutes
        got.index = got.index.floor("min")
    pd.testing.assert_frame_equal(got, want, check_freq=False)
    # numbers held as text (a parquet or JSON export may): the same unit by the same magnitude
    from daemon.forecasting.times import parse_times

    parsed, got_unit = parse_times(g["time"].astype(str))
    assert got_unit == unit and parsed.dt.floor("min").tolist() == list(f.index)


@pytest.mark.parametrize("times, message", [
    ("-60,0,60", "column 'time' has a negative number (-60)"),
    ("true,false,true", "column 'time' holds true/false, not times"),
    ("yesterday,today,tomorrow", "column 'time', data row 1: 'yesterday' is not a time (ISO 8601"),
    # one bad value among good ones: pandas' four-line advice on `format` named no row
    ("2026-01-04T13:30:00Z,2026-01-04T13:31:00Z,2026-01-04T13:32:00Z,soon,2026-01-04T13:34:00Z",
     "column 'time', data row 4: 'soon' is not a time (ISO 8601"),
])
def test_a_time_column_that_is_no_time_is_one_line(tmp_path, times, message):
    p = tmp_path / "h.csv"
    p.write_text("time,a\n" + "".join(f"{t},{k}\n" for k, t in enumerate(times.split(","))))
    import warnings

    with warnings.catch_warnings(), pytest.raises(DataError, match=__import__("re").escape(f"{p}: {message}")) as got:
        warnings.simplefilter("error")        # pandas' UserWarning on stderr was two more lines
        read_history_file(p, 60)
    assert "\n" not in str(got.value)


# --- select by the peak or by a replay (#26.4) ---

from daemon.forecasting.replay_select import ReplayCluster  # noqa: E402
from daemon.sim.workloads import generate  # noqa: E402


def _sim_cluster(high_share=0.25):
    w = generate(8, 48 * 10, 64, seed=3, high_share=high_share, step_s=60)
    cols = [str(c) for c in w.demand.columns]
    return w.demand, ReplayCluster(dict(zip(cols, w.tiers)), 64, 8, {c: int(g) for c, g in zip(cols, w.job_gpus)})


def _replay_cfg():
    cfg = small_cfg()
    return cfg.model_copy(update={"retrain": cfg.retrain.model_copy(update={"replay_candidates": 3,
                                                                          "peak_calibration": ["all"]})})


def test_selection_by_replay_is_deterministic_for_a_seed(tmp_path):
    demand, cluster = _sim_cluster()
    cfg = _replay_cfg()
    outs = [retrain_on(demand, cfg, model_dir=tmp_path / str(i), step_s=60, samples_per_epoch=512, epochs=1,
                       progress=False, with_ets=False, blend=False, seed=0, select_by="replay", cluster=cluster,
                       scored_on="simulator:default") for i in range(2)]
    a, b = (o.report for o in outs)
    assert a["select_by"] == "replay" and a["replay"] == b["replay"] and a["winner"] == b["winner"]
    costs = {k: v["cost"] for k, v in a["replay"].items() if k != "reactive"}
    assert len(costs) >= 3 and len(set(costs.values())) > 1          # the replay tells the candidates apart
    assert "reactive" in a["replay"] and a["replay"]["reactive"]["high_unmet_gpu_min"] >= 0
    # the winner is the cheapest replay among the best baseline, the best new LSTM (and a current model)
    assert a["winner"] in costs and costs[a["winner"]] == min(costs[a["best_baseline_selected"]],
                                                               costs[a["lstm_variant_selected"]])
    e = outs[0].in_use
    assert e["select_by"] == "replay" and e["replay"]["cost"] == costs[a["winner"]]
    assert e["peak_windows"] == {"lead": 10, "preempt": 3}
    assert e["peak_loss"] == a["models"][a["winner"]]["peak"]["loss"]
    assert set(e["peak"]["lead"]["by_tier"]) == {"high", "low", "normal"}


def test_a_window_without_contention_is_replayed_on_a_tight_cluster(tmp_path):
    """On Helios the held-out window before the bench's measured days never filled the 808 GPUs: every candidate's
    replay cost 0 and the choice fell to the order of the list. Such a window is replayed on its own p90 demand."""
    demand, cluster = _sim_cluster()
    roomy = ReplayCluster(cluster.tiers, 100_000, 8, cluster.job_gpus)
    out = retrain_on(demand, _replay_cfg(), model_dir=tmp_path, step_s=60, samples_per_epoch=256, epochs=1,
                     progress=False, with_ets=False, blend=False, seed=0, select_by="replay", cluster=roomy,
                     scored_on="simulator:default", promote=False)
    rep = out.report["replay"]
    assert all(row["tight"] for row in rep.values())
    caps = {row["capacity"] for row in rep.values()}
    cap = caps.pop()
    assert len(caps) == 0 and cap % 8 == 0 and cap <= demand.sum(axis=1).max() + 8
    assert rep["reactive"]["cost"] > 0                  # the tight replay has something to tell apart
    assert "no contention on the configured GPUs" in out.report["select_note"]
    # on the configured cluster the same window is not replayed tight
    out2 = retrain_on(demand, _replay_cfg(), model_dir=tmp_path / "b", step_s=60, samples_per_epoch=256, epochs=1,
                      progress=False, with_ets=False, blend=False, seed=0, select_by="replay", cluster=cluster,
                      scored_on="simulator:default", promote=False)
    assert not any(row["tight"] for row in out2.report["replay"].values())
    assert {row["capacity"] for row in out2.report["replay"].values()} == {64}


def test_equal_replay_costs_are_broken_by_the_peak_loss_not_the_list_order():
    from daemon.forecasting.retrain import choose_winner

    rank = {"naive": 0.0, "exp_smoothing": 0.0, "lstm": 0.0}
    peak = {"naive": 0.30, "exp_smoothing": 0.20, "lstm": 0.10}
    for eligible in (["naive", "exp_smoothing"], ["exp_smoothing", "naive"]):
        winner, best, lstm_best, _ = choose_winner(rank, eligible, ["lstm"], 0.02, tie=peak)
        assert (winner, best, lstm_best) == ("lstm", "exp_smoothing", "lstm")
    # a real difference in cost still decides, whatever the peak loss says
    winner, best, _, _ = choose_winner({"naive": 5.0, "exp_smoothing": 9.0, "lstm": 8.0}, ["naive", "exp_smoothing"],
                                       ["lstm"], 0.02, tie=peak)
    assert (winner, best) == ("naive", "naive")


def test_without_a_high_tier_a_replay_cannot_choose_and_the_peak_loss_does(tmp_path):
    demand, cluster = _sim_cluster(high_share=0.0)
    out = retrain_on(demand, _replay_cfg(), model_dir=tmp_path, step_s=60, samples_per_epoch=256, epochs=1,
                     progress=False, with_ets=False, blend=False, select_by="replay", cluster=cluster,
                     scored_on="simulator:default", promote=False)
    assert out.report["select_by"] == "peak" and out.report["replay"] is None
    assert "no tenant is in the high tier" in out.report["select_note"]
    peaks = {k: v["peak"]["loss"] for k, v in out.report["models"].items()}
    assert out.report["best_baseline_selected"] == min((k for k in peaks if not k.startswith("lstm")),
                                                       key=peaks.get)


def test_retrain_select_by_on_the_command_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from daemon.cli import cli

    monkeypatch.chdir(tmp_path)
    f = periodic_frame(n_tenants=3, steps=48 * 12, seed=2)
    f.reset_index().to_csv(tmp_path / "hist.csv", index=False)
    (tmp_path / "c.toml").write_text('[cycle]\nhorizon_steps = 12\nhistory_steps = 400\n'
                                     '[forecaster]\nseason_steps = 48\n[retrain]\nselect_by = "peak"\n')
    r = CliRunner().invoke(cli, ["-c", "c.toml", "retrain", "--data", "hist.csv", "--epochs", "1", "--quiet",
                                 "--select-by", "wql", "--model-dir", "m"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    e = registry.read_in_use(tmp_path / "m")
    assert e["select_by"] == "wql" and ", wQL: " in e["why"] and e["peak_loss"] is not None
    r = CliRunner().invoke(cli, ["-c", "c.toml", "retrain", "--select-by", "psychic"])
    assert r.exit_code == 2 and "psychic" in r.output


def test_the_public_traces_are_found_beside_the_checkout(monkeypatch):
    """Moving retrain into daemon/forecasting/ made the default point inside the checkout, so `simulate --trace
    helios` and the benches found no traces unless $GPU_AUTOSCALER_DATA was set."""
    from daemon.forecasting.retrain import default_data_dir
    from tests.conftest import REPO

    monkeypatch.delenv("GPU_AUTOSCALER_DATA", raising=False)
    assert default_data_dir() == REPO.parent / "shared" / "data"
