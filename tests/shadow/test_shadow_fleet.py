"""The shadow record and report on a mixed fleet (issue 37): the source's series are per tenant and accept set
(``tenant@spec``), and every per-tenant figure of a record is the sum of the tenant's series, as the policy reads
them. Before, a record looked up plain tenant names: every tenant's `seen` and forecast were unknown, and the
report gave avoided 0 and coverage_next_scored 0 for everyone."""

import numpy as np

from daemon.config import Config
from daemon.policy import fleet
from daemon.service.wiring import build_runtime
from daemon.shadow.record import tenants as tenant_rows
from daemon.shadow.report import shadow_report

FLEET = {"types": ["h100", "a100", "t4"], "reserve_share": {"h100": 0.3},
         "pools": [{"type": "h100", "nodes": 6}, {"type": "a100", "nodes": 8},
                   {"type": "t4", "nodes": 8, "gpus_per_node": 4}]}


def test_dry_run_records_on_a_mixed_fleet_carry_each_tenants_summed_demand_and_forecast(tmp_path):
    cfg = Config.model_validate({
        "source": {"simulator": {"tenants": 12, "seed": 3, "warmup_steps": 1500, "target_load": 1.1,
                                 "high_share": 0.25}},
        "forecaster": {"kind": "seasonal_naive", "model_dir": str(tmp_path / "models")}, "fleet": FLEET,
        "actuators": {"dry_run": True}, "state": {"path": str(tmp_path / "state.sqlite")}})
    rt = build_runtime(cfg)
    for _ in range(12):
        res = rt.runner.run_once()
        assert res.outcome == "ok"
    assert all(fleet.SERIES_SEP in c for c in res.collected.history.columns)   # a typed cluster indeed
    records = rt.store.shadow_records()
    assert len(records) == 12
    last = tenant_rows(records[-1])
    owner = [fleet.split_series(c)[0] for c in res.collected.history.columns]
    demand = res.collected.history.iloc[-1].groupby(owner).sum(min_count=1)     # per tenant, by hand
    f = res.forecast
    nxt = f.values[:, 0, f.quantile_index(cfg.policy.quantile)]
    fc = [np.nansum([v for s, v in zip(f.tenants, nxt) if fleet.split_series(s)[0] == name]) for name in last]
    for k, (name, row) in enumerate(last.items()):
        assert row["seen"] is not None and row["fc_next"] is not None and row["fc_peak"] is not None, name
        assert row["seen"] == round(float(demand[name]), 3)                     # the sum of its typed series
        assert np.isclose(row["fc_next"], fc[k], atol=1e-3)
    rep = shadow_report(records)
    scored = [a["coverage_next_scored"] for a in rep["tenants"].values()]
    assert min(scored) == 11                         # every decision but the last is scored one step later
    held = [a for a in rep["tenants"].values() if a["hold_cycles"]]
    assert held and sum(a["waits_avoided_gpu_min"] for a in rep["tenants"].values()) > 0
