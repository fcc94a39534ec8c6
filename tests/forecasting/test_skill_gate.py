"""The skill gate (issue 40, item 2): a tenant acts on the forecast only where its forecast has shown skill."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, ConfigError, SkillGateConfig, parse_config
from daemon.forecasting.quality import ForecastQuality
from daemon.forecasting.skill import acting_set, decide
from daemon.policy import PolicyMemory, plan
from forecaster.types import Forecast
from tests.policy.test_engine import make_state

QS = (0.5, 0.9, 0.99)
H = 6


def _scored(demand: dict[str, np.ndarray], forecast) -> ForecastQuality:
    """Every step's forecast (`forecast(k)` -> [tenant, H] values, the same for each quantile but scaled up a
    little for the higher ones) kept and scored by the daemon's scorer against `demand`."""
    idx = pd.date_range("2026-01-01", periods=len(next(iter(demand.values()))), freq="min", tz="UTC")
    hist = pd.DataFrame(demand, index=idx)
    names = tuple(demand)
    q = ForecastQuality(QS, H, stride=1, peak_windows={"lead": 4, "preempt": 2}, act_quantile=0.9, headroom=0.05)
    for k in range(len(idx)):
        v = np.asarray(forecast(k), dtype=float)
        fc = Forecast(names, QS, np.stack([v, v * 1.01, v * 1.02], axis=2), idx[k], 60, "m")
        q.observe(fc, hist.iloc[: k + 1])
    return q


def _rises(n=200):
    """A pattern the lead time can see: 10 GPUs, 30 for 5 steps every 20."""
    t = np.arange(n + H + 1)
    return np.where(t % 20 >= 15, 30.0, 10.0)


def test_a_tenant_whose_forecast_sees_its_rises_acts_on_it_one_without_skill_is_planned_reactively():
    d = _rises()
    n = len(d) - H - 1
    flat = np.full(len(d), 10.0)
    # "seen": forecast = the true future (its rises seen coming); "blind": forecast rises that never come
    q = _scored({"seen": d[:n], "blind": flat[:n]},
                lambda k: np.stack([d[k + 1: k + 1 + H], np.where((k + np.arange(H)) % 7 == 0, 30.0, 10.0)]))
    sk = q.skill()
    assert sk["seen"][2] >= 100 and sk["blind"][2] >= 100       # scored on the same windows, many of them
    assert sk["seen"][0] < 0.5 * sk["seen"][1]                  # the forecast's holds lose far less
    assert sk["blind"][0] > 2 * sk["blind"][1]                  # holding for rises that never come loses more
    gate = SkillGateConfig(enabled=True)
    v = decide(sk, ("t0", "seen", "blind"), {}, gate)
    assert v["seen"].acting and not v["blind"].acting and not v["t0"].acting   # t0: never scored
    assert "reactive: 0 of 10" in v["t0"].why and v["blind"].why.startswith("reactive: the forecast's holds lose")
    # the plan: both high tier with 10 GPUs in use, both forecast to peak at 30; only "seen" is held for it
    # (1-GPU jobs: holds come in whole jobs)
    st = make_state(["high", "high", "low"], [(0, 1, "high", True, 600, 0)] * 10 + [(1, 1, "high", True, 600, 0)] * 10
                    + [(2, 1, "low", True, 600, 0)] * 40, 80)
    st = dataclasses.replace(st, tenants=("seen", "blind", "lo"))
    fc = Forecast(("seen", "blind", "lo"), QS, np.broadcast_to(np.array([30.0, 30.0, 40.0])[:, None, None],
                                                             (3, 60, 3)).copy(), st.at, 60, "m")
    cfg = Config(policy={"pool_high_tier": False, "reserve_share": 0.0, "hysteresis": 0.0})
    p = plan(fc, st, PolicyMemory(), cfg, acting=acting_set(v))
    assert p.reservations["seen"] == 32          # ceil(30 x 1.05): the forecast peak with headroom
    assert p.reservations["blind"] == 11         # ceil(10 x 1.05): its demand now with headroom, as without one
    assert any("skill gate: 2 tenants planned reactively" in x for x in p.notes)
    # of them only the high tier's verdicts change the plan: "blind" (high) reactive, "lo" (low) changes nothing
    assert any(x.endswith("the high tier, whose holds and preemptions it decides: 1 of 2 on the forecast")
               for x in p.notes), p.notes
    # None (the gate off): every tenant acts on the forecast, as before
    off = plan(fc, st, PolicyMemory(), cfg)
    assert off.reservations["blind"] == 32 and not any("skill gate" in x for x in off.notes)


def test_a_reactive_tenants_forecast_drives_no_preemption():
    """A tenant the gate plans reactively is held its demand now with headroom, and jobs are preempted only for
    jobs, never for the headroom: its forecast rise (20 GPUs here, 10 in use) clears nothing; on the forecast, it
    does."""
    st = make_state(["high", "low"], [(0, 10, "high", True, 600, 0)] + [(1, 1, "low", True, 600, 0)] * 10, 20)
    fc = Forecast(("t0", "t1"), QS, np.broadcast_to(np.array([20.0, 10.0])[:, None, None], (2, 60, 3)).copy(),
                  st.at, 60, "m")
    cfg = Config(policy={"headroom": 0.5, "preempt_budget_share": 1.0, "preempt_cost_aware": False,
                         "pool_high_tier": False})
    assert plan(fc, st, PolicyMemory(), cfg, acting=frozenset()).preemptions == ()
    assert plan(fc, st, PolicyMemory(), cfg, acting=frozenset({"t0"})).preemptions


def test_min_scored_and_hysteresis():
    g = SkillGateConfig(enabled=True, margin=0.1, hysteresis=0.05, min_scored=10)
    # too few scored windows: reactive, however good the forecast looks
    assert not decide({"a": (0.0, 9.0, 9)}, ("a",), {"a": True}, g)["a"].acting
    # on only at <= 90% of the reactive loss; once on, off only above 95%
    assert not decide({"a": (9.2, 10.0, 10)}, ("a",), {}, g)["a"].acting
    assert decide({"a": (9.0, 10.0, 10)}, ("a",), {}, g)["a"].acting
    assert decide({"a": (9.5, 10.0, 10)}, ("a",), {"a": True}, g)["a"].acting
    assert not decide({"a": (9.6, 10.0, 10)}, ("a",), {"a": True}, g)["a"].acting
    # at the thresholds exactly (figures exact in binary): on at (1 - margin), still on at (1 - margin + hysteresis)
    g = SkillGateConfig(enabled=True, margin=0.25, hysteresis=0.25, min_scored=10)
    assert decide({"a": (7.5, 10.0, 10)}, ("a",), {}, g)["a"].acting
    assert decide({"a": (10.0, 10.0, 10)}, ("a",), {"a": True}, g)["a"].acting
    assert not decide({"a": (10.0, 10.0, 10)}, ("a",), {}, g)["a"].acting
    g = SkillGateConfig(enabled=True, margin=0.1, hysteresis=0.05, min_scored=10)
    # a mixed fleet's typed series of one tenant decide each alone (tests/forecasting/test_skill_gate_by_type.py);
    # the tenant's line sums their losses and acts where any type does
    v = decide({"a@h100": (1.0, 10.0, 12), "a@*": (8.0, 1.0, 10)}, ("a",), {}, g)["a"]
    assert v.acting and v.scored == 10 and v.forecast_loss == 9.0 and v.reactive_loss == 11.0
    assert v.by_type["h100"].acting and not v.by_type["any"].acting and v.why == "forecast for h100; reactive for any"


def test_the_gates_evidence_is_the_last_window_of_scored_forecasts_and_a_new_forecaster_starts_reactive():
    d = _rises()
    n = len(d) - H - 1
    q = _scored({"seen": d[:n]}, lambda k: d[None, k + 1: k + 1 + H])
    total = q.skill()["seen"][2]
    assert total == n - H        # every forecast whose horizon ended is scored
    q2 = ForecastQuality(QS, H, stride=1, peak_windows={"lead": 4, "preempt": 2}, skill_window=50)
    q2.scored, q2._skill_sum, q2.skill_scored = q.scored, {}, q2.skill_scored
    for s in q.scored:
        q2._add_skill(s)
    assert q2.skill()["seen"][2] == 50
    q.reset()
    assert q.skill() == {}


def test_the_config_is_checked():
    with pytest.raises(ConfigError, match="policy.skill_gate.min_scored = 700 is more than"):
        parse_config({"policy": {"skill_gate": {"enabled": True, "min_scored": 700}}})
    with pytest.raises(ConfigError, match="margin"):
        parse_config({"policy": {"skill_gate": {"margin": 1.5}}})
    assert Config().policy.skill_gate.enabled is False


def test_the_daemon_cycle_gates_each_tenant_and_shows_it_in_the_plan_api_console_and_metrics(tmp_path):
    import html
    import re

    from prometheus_client import generate_latest
    from starlette.testclient import TestClient

    from daemon.service.wiring import build_runtime
    from daemon.web.app import build_app
    from tests.support.daemons import OP, h
    from tests.support.web_backend import SnapshotBackend, gated_config, with_tokens

    rt = build_runtime(gated_config(tmp_path, tenants=6))
    try:
        first = rt.runner.run_once().plan
        # nothing scored yet: every tenant is planned reactively, and says why
        assert first.forecast_acting and all(not v["acting"] and v["why"] == "reactive: 0 of 3 forecasts scored"
                                             for v in first.forecast_acting.values())
        # and the plan is made so: the cycle gave plan() the gate's choice (a reactive tenant's forecast unread)
        assert any(x.startswith("skill gate: 6 tenants planned reactively") for x in first.notes), first.notes
        # and the note says why: none scored yet, not a forecast without skill (make run's first hour said that)
        assert any(x.startswith("skill gate: 6 tenants planned reactively (6 with fewer than 3 forecasts scored yet)")
                   for x in first.notes), first.notes
        for _ in range(14):
            p = rt.runner.run_once().plan
        assert set(p.forecast_acting) == set(rt.runner.last_state.tenants)
        assert all(v["scored"] >= 3 for v in p.forecast_acting.values())     # now decided on the scores
        off = sum(not v["acting"] for v in p.forecast_acting.values())
        said = [x for x in p.notes if x.startswith("skill gate: ")]
        assert (off == 0 and not said) or \
            said[0].startswith(f"skill gate: {off} tenant{'s' if off > 1 else ''} planned reactively ({off} whose "
                               "forecast has not shown skill)"), (off, said)
        assert all(v["why"].startswith("forecast: " if v["acting"] else "reactive: ")
                   for v in p.forecast_acting.values())
        text = generate_latest(rt.metrics.registry).decode()
        # a one-model cluster: one series per tenant, its gpu_type empty
        got = {m[0]: float(m[1])
               for m in re.findall(r'gpuas_forecast_acting\{gpu_type="",tenant="([^"]+)"\} (\S+)', text)}
        assert got == {t: float(v["acting"]) for t, v in p.forecast_acting.items()}
        rt.metrics.forget_tenants([], -1.0)   # every tenant gone: its series goes with the others
        assert "gpuas_forecast_acting{" not in generate_latest(rt.metrics.registry).decode()
        snap = dataclasses.replace(rt.runner.snapshot, cfg=with_tokens(rt.runner.snapshot.cfg))
        client = TestClient(build_app(SnapshotBackend(snap)))
        t = sorted(p.forecast_acting)[0]
        assert client.get("/api/v1/plan", headers=h(OP)).json()["forecast_acting"] == p.forecast_acting
        assert client.get(f"/api/v1/tenants/{t}", headers=h(OP)).json()["acting_on_forecast"] == p.forecast_acting[t]
        client.cookies.set("gpuas_token", OP)
        page = client.get(f"/ui/tenants/{t}").text
        yes = "yes" if p.forecast_acting[t]["acting"] else "no"
        assert f"Acting on forecast: {yes}" in page and p.forecast_acting[t]["why"].split(":")[0] in page
        # the list: /api/v1/tenants and the console's tenants table say it for every tenant
        rows = client.get("/api/v1/tenants", headers=h(OP)).json()["tenants"]
        assert {r["tenant"]: r["acting_on_forecast"] for r in rows} == p.forecast_acting
        table = client.get("/ui/tenants").text
        assert "<th>acting on forecast</th>" in table
        for name, v in p.forecast_acting.items():
            row = re.search(rf'<tr id="row-{name}">.*?</tr>', table, re.S).group(0)
            got = re.search(r'<td class="acting"><b>(yes|no)</b> <span class="muted">([^<]*)</span>', row).groups()
            assert (got[0], html.unescape(got[1])) == ("yes" if v["acting"] else "no", v["why"])
    finally:
        rt.close()


def test_the_daemon_cycle_gives_each_decision_the_one_before_it(tmp_path):
    """The cycle's gate has hysteresis: a tenant on the forecast stays on it while its loss is within (1 - margin +
    hysteresis) x the reactive loss, where a tenant not on it does not go on. Its scores here: a forecast that is
    the demand now, losing what the reactive hold loses (ratio 1.0, between 0.9 and 1.1)."""
    from daemon.config import SimulatorConfig, SourceConfig
    from daemon.forecasting.skill import Verdict
    from daemon.service.wiring import build_runtime

    cfg = Config(cluster={"gpus": 16}, cycle={"horizon_steps": 5, "history_steps": 100},
                 source=SourceConfig(simulator=SimulatorConfig(tenants=2, warmup_steps=120)),
                 forecaster={"season_steps": 60, "model_dir": tmp_path / "none"},
                 policy={"skill_gate": {"enabled": True, "min_scored": 3, "margin": 0.1, "hysteresis": 0.2}},
                 state={"path": tmp_path / "s.sqlite"})
    d = _rises()
    rt = build_runtime(cfg)
    try:
        cycle = rt.runner
        cycle.quality = _scored({"a": d}, lambda k: np.full((1, H), d[k]))
        f, r, _ = cycle.quality.skill()["a"]
        assert 0.9 < f / r <= 1.1
        assert cycle._skill_gate(("a",)) == frozenset()                        # not on it: stays reactive
        cycle.skill = {"a": Verdict(True, "forecast: its holds lose 80% of the reactive holds'")}
        assert cycle._skill_gate(("a",)) == frozenset({"a"})                   # on it: stays on it
        assert cycle._skill_gate(("a",)) == frozenset({"a"}) and "leaves at > 110%" in cycle.skill["a"].why
    finally:
        rt.close()


def test_the_shadow_report_counts_the_cycles_each_tenant_acted_on_the_forecast():
    from daemon.shadow.record import make_record, problem
    from daemon.shadow.report import shadow_report

    st = make_state(["high", "low"], [(0, 1, "high", True, 600, 0), (1, 1, "low", True, 600, 0)], 8)
    cfg = Config()
    recs = []
    for k, acting in enumerate(([True, False], [True, True], [False, False])):
        at = st.at + pd.Timedelta(minutes=k)
        s = dataclasses.replace(st, at=at)
        p = plan(None, s, PolicyMemory(), cfg)
        p = dataclasses.replace(p, forecast_acting={t: {"acting": a, "why": "x"} for t, a in zip(s.tenants, acting)})
        recs.append(make_record(p, s, None, None, cfg, k))
    off = make_record(plan(None, st, PolicyMemory(), cfg), dataclasses.replace(st, at=st.at + pd.Timedelta(minutes=3)),
                      None, None, cfg, 3)
    assert all(problem(r) is None for r in recs + [off]) and off["cols"]["acting"] == [-1, -1]   # gate off
    rep = shadow_report(recs + [off])
    from daemon.shadow.report import table

    t0, t1 = rep["tenants"]["t0"], rep["tenants"]["t1"]
    # the terminal table's last column (onFc): % of the gated cycles on the forecast
    rows = {line.split()[0]: line.split() for line in table(rep).splitlines() if line.startswith("t")}
    assert rows["t0"][-1] == "67" and rows["t1"][-1] == "33" and "onFc" in table(rep)
    assert (t0["gated_cycles"], t0["forecast_cycles"], t1["gated_cycles"], t1["forecast_cycles"]) == (3, 2, 3, 1)
    assert t0["acting_share"] == pytest.approx(2 / 3) and rep["tiers"]["high"]["forecast_cycles"] == 2
    bad = dict(recs[0], cols={**recs[0]["cols"], "acting": [1]})
    assert problem(bad) == "'cols.acting' is not one value per tenant (2)"


def test_a_tenant_whose_forecast_and_reactive_holds_both_lost_nothing_keeps_its_last_decision():
    """Both perfect: nothing to gain from the forecast and nothing to lose by reacting, so the gate neither turns a
    tenant on the forecast off (its plan would change for no evidence) nor turns a reactive one on."""
    g = SkillGateConfig(enabled=True, margin=0.1, hysteresis=0.05, min_scored=10)
    on = decide({"a": (0.0, 0.0, 10)}, ("a",), {"a": True}, g)["a"]
    off = decide({"a": (0.0, 0.0, 10)}, ("a",), {}, g)["a"]
    assert on.acting and on.why.endswith("kept on the forecast"), on
    assert not off.acting and off.why.endswith(": reactive"), off


def test_the_plans_note_counts_a_tenant_with_min_scored_forecasts_as_without_skill_not_as_too_few():
    """reactive_why splits the reactive tenants by why: a tenant with exactly min_scored forecasts scored has
    been judged (its forecast showed no skill); only one with fewer is waiting for scores."""
    from daemon.forecasting.skill import Verdict, reactive_why
    from daemon.policy.engine import GATE_WHY

    vs = {"few": Verdict(False, "r", scored=9), "judged": Verdict(False, "r", 9.0, 1.0, 10),
          "on": Verdict(True, "f", 1.0, 9.0, 10)}
    notes = reactive_why((f"skill gate: 2 tenants planned reactively ({GATE_WHY})", "other"), vs, 10)
    assert notes == ("skill gate: 2 tenants planned reactively (1 with fewer than 10 forecasts scored yet, 1 whose "
                     "forecast has not shown skill)", "other"), notes


def test_the_replay_gate_scores_a_mixed_fleets_typed_series_against_their_own_columns():
    """On a mixed fleet the trace's columns are the forecast's typed series (tenant@spec) under other names: the
    replay's gate reads the trace under the series' names, so each is scored and judged on its own."""
    from daemon.sim.skill_gate import ReplayGate

    d = _rises()
    n = len(d) - H - 1
    idx = pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC")
    demand = pd.DataFrame({"c0": d[:n], "c1": d[:n] / 2}, index=idx)
    names = ("a@h100", "a@a100")
    cfg = Config(policy={"lead_time_steps": 4, "preempt_lead_steps": 2, "skill_gate": {"enabled": True}})
    gate = ReplayGate(cfg, demand, names)
    for k in range(n):
        v = np.stack([d[k + 1: k + 1 + H], d[k + 1: k + 1 + H] / 2])
        acting = gate.at(k, Forecast(names, QS, np.stack([v, v * 1.01, v * 1.02], axis=2), idx[k], 60, "m"), ("a",))
    v = gate.verdicts["a"]
    # each typed series scored against its own column and decided alone: both see their rises, both act
    assert v.scored == n - H and set(v.by_type) == {"h100", "a100"}, v
    assert all(x.scored == n - H and x.acting for x in v.by_type.values()) and acting == set(names), v


def test_the_gates_evidence_scores_the_holds_the_plan_would_make_by_hand():
    """One forecast of 4 tenants, scored at p90 over a 4-step and a 2-step lead window (headroom 5%): the forecast's
    hold is max(forecast peak, demand now) x 1.05, the reactive hold demand now x 1.05, each lost at the pinball of
    the realised peak. rise: 10 now, 20 after, forecast 20: holds 21 and 10.5, lost 0.1 and 8.55 per window. flat:
    10 throughout, forecast 5: both hold 10.5, lost 0.05 per window. blind: demand now unknown: no reactive hold,
    not scored. gap: its first 2 steps unknown: scored in the 4-step window only, so not counted as scored (a
    forecast counts once scored in every lead window). A second forecast of rise alone (held 21 against 20 by both
    rules) adds to its evidence: 2 forecasts scored."""
    idx = pd.date_range("2026-01-01", periods=H + 2, freq="min", tz="UTC")
    hist = pd.DataFrame({"rise": [10.0] + [20.0] * (H + 1), "flat": [10.0] * (H + 2),
                         "blind": [np.nan] + [10.0] * (H + 1), "gap": [10.0, np.nan, np.nan] + [10.0] * (H - 1)},
                        index=idx)
    q = ForecastQuality(QS, H, stride=1, peak_windows={"lead": 4, "preempt": 2}, act_quantile=0.9, headroom=0.05)
    v = np.array([20.0, 5.0, 10.0, 10.0])[:, None, None] * np.ones((4, H, len(QS)))
    q.track(Forecast(tuple(hist.columns), QS, v, idx[0], 60, "m"), hist.iloc[:1])
    q.track(Forecast(("rise",), QS, np.full((1, H, len(QS)), 20.0), idx[1], 60, "m"), hist.iloc[:2])
    q.track(None, hist)
    sk = q.skill()
    assert sk["rise"] == (pytest.approx(2 * 0.1 + 2 * 0.1), pytest.approx(2 * 8.55 + 2 * 0.1), 2), sk
    assert sk["flat"] == (pytest.approx(0.1), pytest.approx(0.1), 1), sk
    assert sk["blind"] == (0.0, 0.0, 0) and sk["gap"][2] == 0, sk
