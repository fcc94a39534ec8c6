"""The console's and the API's view of a mixed fleet (issue 24): capacity, held and in-use GPUs per type; a
tenant's page per type, with its own numbers only."""

import json

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.state import PRIORITY
from daemon.policy.types import OperatorInputs
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.cluster import SimCluster
from daemon.web import views
from daemon.web.auth import Principal
from daemon.web.backend import Snapshot

AT = pd.Timestamp("2026-01-06T13:50:00Z")
TENANTS = ("hi-v100", "lo-any", "hi-t4")


class _Overrides:
    def for_tenant(self, tenant):
        return {}

    def inputs(self):
        return OperatorInputs()

    def all(self):
        return {}


class _Backend:
    """What the views read besides the snapshot: no events, no plan history, no operator changes."""

    def events(self, limit=100, kind=None, tenant=None, before=None):
        return []

    def plan_history(self, limit):
        return []

    def health(self, detail=False):
        return {"status": "ok"}

    def overrides(self):
        return _Overrides()


def _snapshot(typed: bool = True) -> Snapshot:
    prio = np.array([PRIORITY["high"], PRIORITY["low"], PRIORITY["high"]], dtype=np.int8)
    kw = dict(node_types=["t4", "t4", "v100", "v100"], node_gpus=[4, 4, 8, 8],
              accepts=[("v100",), (), ("t4",)]) if typed else {}
    c = SimCluster(list(TENANTS), prio, 24, np.array([4, 2, 2]), **kw)
    c.step(np.array([8.0, 12.0, 2.0]))
    st = c.state(TENANTS, ("high", "low", "high"), AT, 60, node_name=lambda i: np.array([f"n{x}" for x in i]),
                 job_id=lambda i: np.array([f"sim-{x}" for x in i]))
    cfg = Config(fleet={"types": ["t4", "v100"], "reserve_share": {"v100": 0.5}} if typed else {})
    p = plan(None, st, PolicyMemory(), cfg)
    SimulatorActuator(c, TENANTS).apply(p)
    return Snapshot(cfg=cfg, plan=p, state=st, cycle=1)


def test_cluster_page_shows_each_type_capacity_guarantee_held_and_in_use():
    snap = _snapshot()
    rows = {r["type"]: r for r in views.cluster_view(snap, _Backend())["types"]}
    assert rows["t4"]["capacity"] == 8 and rows["v100"]["capacity"] == 16
    assert rows["v100"]["high_pool"] == 8                       # fleet.reserve_share.v100 = 50%
    assert rows["v100"]["held"] == snap.plan.holds_by_type["hi-v100"]["v100"] >= 8
    assert rows["t4"]["in_use"] + rows["v100"]["in_use"] == int(snap.state.used.sum())
    assert rows["t4"]["in_use"] >= 2                             # hi-t4 runs on t4 only
    assert all(r["notes"] for r in rows.values())
    json.dumps(views.plan_view(snap))                            # the API body carries the typed fields
    assert views.plan_view(snap)["holds_by_type"]["hi-v100"]["v100"] >= 8


def test_a_tenant_page_per_type_has_only_its_own_numbers():
    snap = _snapshot()
    me = Principal("t", "tenant", "hi-t4")
    page = views.tenant_view(snap, _Backend(), "hi-t4", me)
    assert {r["type"] for r in page["types"]} == {"t4"}         # it holds and runs on t4 only
    assert page["types"][0]["in_use"] == 2
    text = json.dumps(page)
    assert "hi-v100" not in text and "lo-any" not in text       # no other tenant's name or numbers
    other = views.tenant_view(snap, _Backend(), "hi-v100", Principal("op", "operator", None))
    assert {r["type"] for r in other["types"]} == {"v100"}


def test_a_one_model_cluster_shows_no_types():
    snap = _snapshot(typed=False)
    assert views.cluster_view(snap, _Backend())["types"] is None
    assert views.tenant_view(snap, _Backend(), "hi-t4", Principal("op", "operator", None))["types"] is None


# ---- issue 37: every per-tenant view sums a tenant's typed series (tenant@spec), as the policy does ----------

SERIES = ("hi-v100@v100", "lo-any@*", "lo-any@t4", "hi-t4@t4")   # lo-any has work of two accept sets


def _typed_forecast_and_history(snap: Snapshot) -> Snapshot:
    """`snap` with the forecast and history a mixed fleet's source gives: one series per tenant and accept set."""
    from forecaster.types import Forecast

    h = 4
    base = np.array([1.0, 2.0, 3.0, 4.0])[:, None]                       # per series
    p50 = base + np.arange(h)[None, :]                                   # [series, step]
    vals = np.stack([p50, p50 * 2], axis=2)                              # quantiles 0.5, 0.9
    vals[2, 1, :] = np.nan                                               # one unknown step of one series
    fc = Forecast(tenants=SERIES, quantiles=(0.5, 0.9), values=vals, issued_at=AT, step_s=60, model="m")
    idx = pd.date_range(end=AT, periods=5, freq="60s")
    hist = pd.DataFrame({s: np.arange(5, dtype=float) + k * 10 for k, s in enumerate(SERIES)}, index=idx)
    hist.iloc[0, 2] = np.nan                                             # lo-any@t4 unknown once: the sum is the rest
    import dataclasses

    return dataclasses.replace(snap, forecast=fc, history=hist)


def test_a_tenant_page_on_a_mixed_fleet_sums_its_typed_series():
    """Before: "forecast": null and "usage": null beside a full forecast_by_accepts (only plain names were read)."""
    snap = _typed_forecast_and_history(_snapshot())
    op = Principal("op", "operator", None)
    page = views.tenant_view(snap, _Backend(), "lo-any", op)
    assert page["forecast"] is not None and page["usage"] is not None
    assert page["forecast"]["p50"] == [2 + 3, 3, 4 + 5, 5 + 6]     # lo-any@* + lo-any@t4; step 1: @t4 unknown
    assert page["forecast"]["p90"] == [10, 6, 18, 22]
    assert page["usage"]["values"] == [10, 11 + 21, 12 + 22, 13 + 23, 14 + 24]
    assert set(page["forecast_by_accepts"]) == {"*", "t4"}
    one = views.tenant_view(snap, _Backend(), "hi-t4", op)
    assert one["forecast"]["p50"] == [4, 5, 6, 7] and one["usage"]["values"] == [30, 31, 32, 33, 34]
    json.dumps(page)


def test_api_and_console_tenant_page_on_a_mixed_fleet_show_the_forecast():
    from starlette.testclient import TestClient

    from daemon.web.app import build_app
    from tests.support.daemons import OP, h
    from tests.support.web_backend import SnapshotBackend, with_tokens

    snap = _typed_forecast_and_history(_snapshot())
    import dataclasses

    snap = dataclasses.replace(snap, cfg=with_tokens(snap.cfg))
    client = TestClient(build_app(SnapshotBackend(snap)))
    body = client.get("/api/v1/tenants/lo-any", headers=h(OP)).json()
    assert body["forecast"]["p50"][0] == 5 and body["usage"]["values"][-1] == 14 + 24
    client.cookies.set("gpuas_token", OP)
    page = client.get("/ui/tenants/lo-any")
    assert page.status_code == 200
    assert 'id="no-forecast"' not in page.text and "polyline" in page.text and 'class="s-p50"' in page.text


def test_the_forecasts_and_histories_times_are_iso_8601_as_every_other_time_of_the_api():
    """First-day walk (hday3): a tenant's forecast.issued_at read "2026-12-07 23:04:00+00:00" (str() of a pandas
    Timestamp, a space for the T) beside the plan's at "2026-12-07T23:04:00+00:00"."""
    import datetime as dt

    snap = _typed_forecast_and_history(_snapshot())
    page = views.tenant_view(snap, _Backend(), "lo-any", Principal("op", "operator", None))
    cluster = views.cluster_view(snap, _Backend())
    times = [page["forecast"]["issued_at"], page["usage"]["start"]] + \
        [v[k] for v in cluster.values() if isinstance(v, dict) for k in ("issued_at", "start") if k in v]
    assert len(times) == 4, times
    for t in times:
        assert "T" in t and dt.datetime.fromisoformat(t).tzinfo is not None, t
