"""The skill gate per GPU type on a mixed fleet (issue 40, item 2: "per tenant (and per GPU type)"): each typed
series (``tenant@spec``) is decided alone, and the plan acts on the forecast for the types whose series act only;
the tenant's other types are held for their demand now with headroom."""

import dataclasses

import numpy as np
import pandas as pd

from daemon.config import Config, SkillGateConfig
from daemon.forecasting.skill import acting_set, acting_tenants, decide, previous_of, restrict
from daemon.policy import PolicyMemory, plan
from daemon.sim.skill_gate import ReplayGate
from forecaster.baselines import SeasonalNaive
from forecaster.types import Forecast
from tests.policy.test_fleet_policy import typed_state

QS = (0.5, 0.9, 0.99)
G = SkillGateConfig(enabled=True, margin=0.1, hysteresis=0.05, min_scored=10)


def test_each_typed_series_of_a_tenant_is_decided_alone_with_its_own_hysteresis_and_min_scored():
    # a100: the forecast's holds lose 10% of the reactive ones' (skill); t4: 8x (bursts it cannot see)
    v = decide({"a@a100": (1.0, 10.0, 12), "a@t4": (8.0, 1.0, 12)}, ("a",), {}, G)["a"]
    assert v.acting and v.by_type["a100"].acting and not v.by_type["t4"].acting
    assert v.by_type["a100"].why.startswith("forecast: its holds lose 10%")
    assert v.by_type["t4"].why.startswith("reactive: the forecast's holds lose 800%")
    assert v.why == "forecast for a100; reactive for t4"
    assert acting_set({"a": v}) == frozenset({"a@a100"})     # the plan acts on the a100 forecast only
    assert acting_tenants(acting_set({"a": v})) == {"a"}
    assert v.to_dict()["by_type"]["t4"]["acting"] is False
    # hysteresis per series: t4 at 93% stays on the forecast where it was, a100's own previous is its own
    prev = previous_of({"a": v}) | {"a@t4": True}
    v2 = decide({"a@a100": (9.3, 10.0, 12), "a@t4": (9.3, 10.0, 12)}, ("a",), prev, G)["a"]
    assert v2.by_type["a100"].acting and v2.by_type["t4"].acting
    assert not decide({"a@a100": (9.3, 10.0, 12)}, ("a",), {}, G)["a"].acting   # not on before: needs <= 90%
    # min_scored per series: a type with too few scores is reactive whatever the other has shown
    v3 = decide({"a@a100": (1.0, 10.0, 12), "a@t4": (0.0, 9.0, 9)}, ("a",), {"a@t4": True}, G)["a"]
    assert v3.by_type["a100"].acting and not v3.by_type["t4"].acting
    assert v3.by_type["t4"].why == "reactive: 9 of 10 forecasts scored"
    # a one-model cluster: the tenant is its series, as before (no by_type)
    one = decide({"a": (1.0, 10.0, 12)}, ("a",), {}, G)["a"]
    assert one.acting and one.by_type is None and "by_type" not in one.to_dict()
    assert acting_set({"a": one}) == frozenset({"a"})


# two a100 and two t4 nodes of 8 GPUs; the high tenant t0 runs two 1-GPU jobs on each type (work that accepts
# that type only); low 2-GPU jobs fill the rest of every node
NODES = [("a100-0", "a100", 8), ("a100-1", "a100", 8), ("t4-0", "t4", 8), ("t4-1", "t4", 8)]
JOBS = ([(0, 1, "high", "a100-0", 600, ("a100",))] * 2 + [(0, 1, "high", "t4-0", 600, ("t4",))] * 2
        + [(1, 2, "low", "a100-0", 600, ())] * 3 + [(1, 2, "low", "a100-1", 600, ())] * 4
        + [(1, 2, "low", "t4-0", 600, ())] * 3 + [(1, 2, "low", "t4-1", 600, ())] * 4)
CFG = Config(policy={"headroom": 0.25, "hysteresis": 0.0, "pool_high_tier": False, "reserve_share": 0.0,
                     "preempt_budget_share": 1.0, "preempt_cost_aware": False, "preempt_min_runtime_s": 0})


def _forecast(state) -> Forecast:
    """t0's a100 and t4 work each forecast to rise from 2 to 8 GPUs; t1's to stay as it is."""
    v = np.array([8.0, 8.0, 28.0])[:, None, None] * np.ones((3, 60, len(QS)))
    return Forecast(("t0@a100", "t0@t4", "t1@*"), QS, v, state.at, 60, "m")


def test_the_plan_acts_on_the_forecast_for_the_type_whose_series_has_skill_only():
    s = typed_state(["high", "low"], NODES, JOBS)
    fc = _forecast(s)
    v = decide({"t0@a100": (1.0, 10.0, 12), "t0@t4": (8.0, 1.0, 12), "t1@*": (1.0, 1.0, 12)}, s.tenants, {}, G)
    acting = acting_set(v)
    assert acting == {"t0@a100"}
    p = plan(fc, s, PolicyMemory(), CFG, acting=acting)
    # a100: the forecast peak with headroom, ceil(8 x 1.25); t4: its demand now with headroom, ceil(2 x 1.25)
    assert p.holds_by_type["t0"] == {"a100": 10, "t4": 3}, p.holds_by_type
    assert any("1 GPU-type series of 1 tenant on the forecast planned on their demand now" in x for x in p.notes)
    # jobs are preempted for the a100 forecast, on a100 nodes only: nothing for the t4 forecast
    assert p.preemptions and {x.node.split("-")[0] for x in p.preemptions} == {"a100"}, p.preemptions
    # both series acting: both types held and cleared for their forecast (so the t4 line above is the gate's)
    both = plan(fc, s, PolicyMemory(), CFG, acting=frozenset({"t0@a100", "t0@t4"}))
    assert both.holds_by_type["t0"] == {"a100": 10, "t4": 10}
    assert {x.node.split("-")[0] for x in both.preemptions} == {"a100", "t4"}
    # neither: the tenant is reactive on both types, as a tenant the gate plans reactively on one model
    none = plan(fc, s, PolicyMemory(), CFG, acting=frozenset({"t1@*"}))
    assert none.holds_by_type["t0"] == {"a100": 3, "t4": 2} and none.preemptions == ()
    # a tenant's own name still means every series of its (the plan's callers that decide per tenant)
    assert plan(fc, s, PolicyMemory(), CFG, acting=frozenset({"t0"})).holds_by_type == both.holds_by_type


N, START, T = 700, 300, 500


def _trace(after: str) -> pd.DataFrame:
    """One tenant on two types: its a100 column an 8-GPU job for 15 of every 60 minutes (a seasonal forecast
    sees it), its t4 column 2 GPUs throughout; after step T its a100 job stays on for good ("on") or keeps its
    pattern ("same")."""
    t = np.arange(N)
    a100 = np.where(t % 60 >= 45, 8.0, 0.0)
    if after == "on":
        a100[T + 1:] = 8.0
    idx = pd.date_range("2026-01-01", periods=N, freq="min", tz="UTC")
    return pd.DataFrame({"c0": a100, "c1": np.full(N, 2.0)}, index=idx)


def _gate_run(demand: pd.DataFrame) -> list[frozenset[str]]:
    """The replay's gate at each step on a seasonal forecast of the a100 series and, for the t4 series, a forecast
    of a rise to 8 GPUs that never comes (no skill)."""
    names = ("a@a100", "a@t4")
    cfg = Config(policy={"headroom": 0.0, "skill_gate": {"enabled": True, "window": 30, "min_scored": 6}})
    gate = ReplayGate(cfg, demand, names)
    model = SeasonalNaive(60)
    out = []
    for k in range(START - 200, N - 1):
        fc = model.predict(demand.iloc[: k + 1], cfg.cycle.horizon_steps)
        v = fc.values.copy()
        v[1] = 8.0
        acting = gate.at(k, dataclasses.replace(fc, tenants=names, values=v), ("a",))
        for sc in gate.quality.scored:     # every forecast scored had its whole horizon by step k
            assert sc.issued_at + cfg.cycle.horizon_steps * pd.Timedelta(minutes=1) <= demand.index[k]
        out.append(acting)
    return out


def test_the_replays_gate_decides_per_series_and_never_reads_the_future():
    same, changed = _gate_run(_trace("same")), _gate_run(_trace("on"))
    upto = T - (START - 200) + 1          # decisions made at trace steps up to T
    assert same[:upto] == changed[:upto]
    assert same[upto:] != changed[upto:]  # the demand after T changes later decisions: there was a difference to see
    # per series: the a100 series acts on its forecast, the t4 series (bursts) does not
    assert "a@a100" in same[upto - 1] and "a@t4" not in same[upto - 1], same[upto - 1]


def _typed_verdicts(t4_scores=(8.0, 1.0, 12)) -> dict:
    v = decide({"t0@a100": (1.0, 10.0, 12), "t0@t4": t4_scores, "t1@*": (9.5, 10.0, 12)}, ("t0", "t1"), {}, G)
    return {t: x.to_dict() for t, x in v.items()}


def test_the_metric_has_a_series_per_type_the_tenant_has_and_drops_one_it_no_longer_has():
    import re

    from prometheus_client import generate_latest

    from daemon.service.telemetry import DaemonMetrics

    s = typed_state(["high", "low"], NODES, JOBS)
    p = plan(None, s, PolicyMemory(), CFG)
    m = DaemonMetrics()

    def series():
        text = generate_latest(m.registry).decode()
        return {(a, b): float(v) for b, a, v in
                re.findall(r'gpuas_forecast_acting\{gpu_type="([^"]*)",tenant="([^"]+)"\} (\S+)', text)}

    m.observe_plan(dataclasses.replace(p, forecast_acting=_typed_verdicts()), None, 10, False)
    assert series() == {("t0", "a100"): 1.0, ("t0", "t4"): 0.0, ("t1", "any"): 0.0}
    # t0 no longer asks for t4: its t4 series goes; the gate off: every series goes
    only = _typed_verdicts()
    only["t0"]["by_type"].pop("t4")
    m.observe_plan(dataclasses.replace(p, forecast_acting=only), None, 10, False)
    assert series() == {("t0", "a100"): 1.0, ("t1", "any"): 0.0}
    m.observe_plan(dataclasses.replace(p, forecast_acting={}), None, 10, False)
    assert series() == {}


def test_the_shadow_report_counts_each_tenants_series_on_the_forecast():
    from daemon.shadow.record import make_record, problem
    from daemon.shadow.report import shadow_report

    s = typed_state(["high", "low"], NODES, JOBS)
    recs = []
    for k, t4 in enumerate(((8.0, 1.0, 12), (1.0, 10.0, 12))):   # t4 reactive, then on the forecast too
        st = dataclasses.replace(s, at=s.at + pd.Timedelta(minutes=k))
        p = dataclasses.replace(plan(None, st, PolicyMemory(), CFG), forecast_acting=_typed_verdicts(t4))
        recs.append(make_record(p, st, None, None, CFG, k))
    assert all(problem(r) is None for r in recs)
    assert recs[0]["cols"]["gated_series"] == [2, 1] and recs[0]["cols"]["acting_series"] == [1, 0]
    t0 = shadow_report(recs)["tenants"]["t0"]
    assert (t0["gated_cycles"], t0["forecast_cycles"]) == (2, 2)                    # per tenant: any type acts
    assert (t0["gated_series_cycles"], t0["forecast_series_cycles"]) == (4, 3)     # per series: 1 of 2, then 2
    assert t0["acting_series_share"] == 0.75


def test_a_typed_series_hysteresis_reads_its_own_previous_not_its_tenants():
    # the tenant acts (for a100), its t4 series did not: t4 at 93% of the reactive loss has not earned the forecast
    # (needs <= 90%), whatever the tenant's own previous says
    prev = {"a": True, "a@a100": True, "a@t4": False}
    v = decide({"a@a100": (9.3, 10.0, 12), "a@t4": (9.3, 10.0, 12)}, ("a",), prev, G)["a"]
    assert v.by_type["a100"].acting and not v.by_type["t4"].acting
    assert acting_set({"a": v}) == frozenset({"a@a100"})


def test_the_any_type_series_acts_under_its_own_series_name():
    # work that runs on any type is the series "a@*": acting, that name is in the acting set (the plan looks it up)
    v = decide({"a@*": (1.0, 10.0, 12), "a@t4": (8.0, 1.0, 12)}, ("a",), {}, G)
    assert set(v["a"].by_type) == {"any", "t4"} and v["a"].by_type["any"].acting
    assert acting_set(v) == frozenset({"a@*"})
    assert previous_of(v)["a@*"] is True


def test_a_one_model_tenant_named_with_an_at_sign_is_scored_as_itself():
    # a tenant's name may hold "@" on a one-model cluster: its plain series is its own, not tenant "a" of type "b"
    v = decide({"a@b": (1.0, 10.0, 12)}, ("a@b",), {}, G)["a@b"]
    assert v.acting and v.by_type is None and v.scored == 12
    assert acting_tenants(acting_set({"a@b": v}), ("a@b",)) == {"a@b"}


def test_restricting_an_acting_set_to_some_tenants_keeps_their_typed_series():
    # the replay plans its inference services apart (daemon/sim/strategy.py): their acting typed series stay
    assert restrict(frozenset({"svc@a100", "svc@*", "b@t4", "c", "b"}), frozenset({"svc", "c"})) == {
        "svc@a100", "svc@*", "c"}

