import numpy as np

from daemon.config import Config, SimulatorConfig, SourceConfig
from daemon.service.wiring import build_runtime
from daemon.sources.base import SourceError


def sim_cfg(tmp_path, **policy):
    return Config(cluster={"gpus": 256}, policy=policy or {},
                  source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=1500)),
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"})


def test_one_full_cycle_produces_a_plan(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))
    res = rt.runner.run_once()
    assert res.outcome == "ok"
    p = res.plan
    assert p.capacity == 256 and 0 < p.load <= 1.0
    assert set(p.limits) == set(rt.sim.tenants)
    assert sum(p.reservations.values()) <= p.capacity
    high = [t for t, tier in zip(rt.sim.tenants, rt.sim.work.tiers) if tier == "high"]
    assert set(p.reservations) >= set(high)
    assert res.forecast is not None and res.forecast.values.shape == (20, 60, 3)
    assert [r.actuator for r in res.reports] == ["simulator", "log"]


def test_source_outage_keeps_last_plan_and_says_so(tmp_path, caplog):
    rt = build_runtime(sim_cfg(tmp_path))
    good = rt.runner.run_once().plan
    rt.sim.blackout = True
    res = rt.runner.run_once()
    assert res.outcome == "source_error"
    assert res.plan is good
    assert "keeping last good plan" in caplog.text
    assert rt.metrics.plan_stale._value.get() == 1
    assert rt.metrics.source_up._value.get() == 0


def test_state_survives_restart(tmp_path):
    cfg = sim_cfg(tmp_path)
    rt = build_runtime(cfg)
    for _ in range(3):
        plan = rt.runner.run_once().plan
    rt.close()
    rt2 = build_runtime(cfg)
    assert rt2.runner.last_plan is not None
    assert rt2.runner.last_plan.to_dict() == plan.to_dict()
    assert rt2.runner.memory == plan.memory


def test_broken_forecaster_falls_back(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))

    class Broken:
        name = "broken"

        def predict(self, history, horizon):
            raise RuntimeError("weights exploded")

    rt.runner.forecaster = Broken()
    res = rt.runner.run_once()
    assert res.outcome == "ok" and res.forecast.model.startswith("seasonal_naive")
    assert rt.metrics.fallback._value.get() == 1


def test_simulator_source_raises_source_error_in_blackout(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))
    rt.sim.blackout = True
    try:
        rt.sim.collect(10)
    except SourceError:
        pass
    else:
        raise AssertionError("blackout must raise SourceError")
    assert np.isfinite(rt.sim.snapshot().used).all()


def test_a_spread_refresh_found_due_starts_after_the_cycle_not_inside_its_forecast(tmp_path):
    """The forecast that finds a background spread refresh due must not share the cores with it for the rest of its
    cycle: the cycle starts it once its work is done (and never waits for it)."""
    from forecaster.calibration import SpreadRefresh

    rt = build_runtime(sim_cfg(tmp_path))

    class Spreading:
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name
            self.spread = SpreadRefresh(every=1, background=True)
            self.started_in_forecast: list[bool] = []

        def predict(self, history, horizon):
            fc = self.inner.predict(history, horizon)
            self.spread.get("k", lambda: len(history))
            self.started_in_forecast.append(self.spread._job is not None)
            return fc

    f = rt.runner.forecaster = Spreading(rt.runner.forecaster)
    assert rt.runner.run_once().outcome == "ok"            # the first spread: computed in the forecast call
    assert rt.runner.run_once().outcome == "ok"            # due: held through this cycle, started at its end
    assert f.started_in_forecast == [False, False] and not f.spread.pending and f.spread._job is not None
    f.spread._job[1].join(10)
    assert rt.runner.run_once().outcome == "ok" and f.spread.refreshes == 2


def test_a_cycle_exports_the_dra_gpus_the_kubernetes_view_read(tmp_path):
    """The DRA GPUs are on /metrics: supply, allocated, pending, and the pods whose
    requests are not judged; the series go when the view stops reading them."""
    from daemon.actuators.base import ActionReport
    from daemon.actuators.k8s.dra import DraGpus

    rt = build_runtime(sim_cfg(tmp_path))

    class Kube:
        name, dry_run = "kubernetes", True
        dra = DraGpus(supply={"n1": {"dra:gpu": 8}, "n2": {"dra:gpu": 4}}, used={"n1": 6},
                      pending={"a/p": 2, "b/q": 3}, tenant_of={"a/p": "a", "b/q": "b"}, uncounted={"b/all": "All"})

        def apply(self, plan):
            return ActionReport(self.name, True)

        def notify(self, notes):
            return ActionReport(self.name, True)

    kube = Kube()
    rt.runner.actuators.append(kube)
    assert rt.runner.run_once().outcome == "ok"
    reg = rt.metrics.registry
    got = {s: reg.get_sample_value("gpuas_dra_gpus", {"state": s}) for s in ("supply", "allocated", "pending")}
    assert got == {"supply": 12, "allocated": 6, "pending": 5} and reg.get_sample_value("gpuas_dra_uncounted_pods") == 1
    kube.dra = None
    assert rt.runner.run_once().outcome == "ok"
    assert reg.get_sample_value("gpuas_dra_gpus", {"state": "supply"}) is None


def test_a_dry_run_logs_what_each_actuator_would_do_once_when_it_first_appears(tmp_path, caplog):
    """The shipped configs say to turn dry_run off "once the logged decisions look right", but a dry-run actuator's
    report (the Kueue actuator's node holds and queues, the Kubernetes one's Events and PriorityClasses) was dropped:
    a first-day walk on a real control plane read nothing of the three nodes the plan would have tainted. Each action
    is said in one line per actuator the cycle it first appears, not again while it stays the same."""
    import logging

    from daemon.actuators.base import ActionReport

    class WouldHold:
        name, dry_run = "kueue", True

        def __init__(self) -> None:
            self.actions = ["hold gpu-1 (8 GPUs) for team-a", "apply ClusterQueue gpuas-high"]

        def apply(self, plan):
            return ActionReport(self.name, True, list(self.actions))

        def notify(self, notes):
            return ActionReport(self.name, True)

    rt = build_runtime(sim_cfg(tmp_path))
    act = WouldHold()
    rt.runner.actuators.append(act)
    said = []
    for actions in (act.actions, act.actions, [*act.actions, "hold gpu-2 (8 GPUs) for team-a"]):
        act.actions = actions
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gpu_autoscaler.cycle"):
            assert rt.runner.run_once().outcome == "ok"
        said.append([r.getMessage() for r in caplog.records if r.getMessage().startswith("dry run:")])
    assert said == [["dry run: kueue would: hold gpu-1 (8 GPUs) for team-a; apply ClusterQueue gpuas-high"], [],
                    ["dry run: kueue would: hold gpu-2 (8 GPUs) for team-a"]]
