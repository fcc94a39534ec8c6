"""Forecasts per (tenant, accepted types) on a mixed fleet (issue 24): the retrain history of a fleet from
[fleet] pools is the typed series the simulated source reports, and retraining and the model selection score
those series with the same model families."""

from daemon.config import Config
from daemon.forecasting.retrain import retrain_on, simulator_history
from daemon.policy.fleet import split_series
from daemon.sim.source import SimulatedCluster

FLEET = {"types": ["h100", "a100", "t4"], "pools": [{"type": "h100", "nodes": 6}, {"type": "a100", "nodes": 8},
                                                     {"type": "t4", "nodes": 8, "gpus_per_node": 4}]}


def _cfg(**fleet):
    return Config(cycle={"horizon_steps": 12, "history_steps": 400}, forecaster={"season_steps": 48},
                  retrain={"min_improvement": 0.0, "epochs": 1}, source={"simulator": {"tenants": 8}}, **fleet)


def test_retrain_history_of_a_mixed_fleet_is_the_sources_typed_series_and_is_scored(tmp_path):
    cfg = _cfg(fleet=FLEET)
    f = simulator_history(cfg, days=0.7)
    assert tuple(f.columns) == SimulatedCluster(cfg, extra_steps=5).series      # the columns the cycle forecasts
    assert all(split_series(c)[1] is not None for c in f.columns)               # every one "tenant@spec"
    assert "tenant-0001@*" in f.columns                                          # any-type demand is its own series
    out = retrain_on(f, cfg, model_dir=tmp_path, step_s=60, samples_per_epoch=128, epochs=1, progress=False,
                     with_ets=False, scored_on="simulator:fleet")
    assert out.report["tenants"] == 8 and {"lstm", "naive"} <= set(out.report["models"])
    assert "scored best on simulator:fleet" in out.message


def test_a_one_model_clusters_retrain_history_keeps_plain_tenant_columns():
    f = simulator_history(_cfg(), days=0.1)
    assert all("@" not in c for c in f.columns) and f.columns[0] == "tenant-0000"
