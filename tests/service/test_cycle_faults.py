"""What a cycle or a failover reports when part of it fails, and what a standby says it did."""

import time

from prometheus_client import generate_latest

from daemon.actuators.base import ActionReport
from daemon.actuators.log import LogActuator
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.service.test_cycle import sim_cfg


class FailingNotify(LogActuator):
    """A real LogActuator whose notify channel is down (a fault injected into one method)."""

    name = "flaky"

    def notify(self, notes):
        raise ConnectionError("notify channel down")


class FailingRequeue(LogActuator):
    name = "flaky"

    def __init__(self):
        super().__init__()
        self.told = []

    def requeue(self, job_ids, reason):
        raise ConnectionError("scheduler unreachable")

    def notify(self, notes):
        self.told.extend(notes)
        return ActionReport(self.name, True, [f"notify {n.tenant}" for n in notes])


def test_standby_keeping_the_last_plan_does_not_say_it_acted(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))
    rt.runner.may_act = lambda: False
    res = rt.runner.run_once()
    assert res.outcome == "ok" and not res.acted and res.reports == []
    rt.sim.blackout = True
    res = rt.runner.run_once()
    assert res.outcome == "source_error" and res.plan is not None and not res.acted
    rt.runner.may_act = None                               # the lease is back (or no HA): the kept plan is ours
    assert rt.runner.run_once().acted
    rt.close()


def test_a_failing_notify_keeps_the_apply_report(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))
    rt.runner.actuators.append(FailingNotify())
    res = rt.runner.run_once()
    assert res.plan.notifications                         # the first plan tells tenants something
    rep = next(r for r in res.reports if r.actuator == "flaky")
    assert rep.actions and any(a.startswith("reserve ") for a in rep.actions)   # what apply did is kept
    assert rep.errors == ["notify: notify channel down"]
    assert rt.metrics.actuator_errors.labels("flaky")._value.get() == 1
    assert all(r.ok for r in res.reports if r.actuator != "flaky")
    rt.close()


def test_a_failing_requeue_still_tells_the_tenants(tmp_path):
    rt = build_runtime(sim_cfg(tmp_path))
    d = Daemon(rt, serve_http=False)
    rt.runner.run_once()
    flaky = FailingRequeue()
    rt.actuators.append(flaky)
    c = rt.sim.cluster
    node = next(i for i in range(c.n_nodes) if ((c.j_node[: c.size] == i) & (c.j_state[: c.size] == 2)).any())
    on_node = [rt.sim.tenants[c.j_tenant[p]] for p in range(c.size) if c.j_node[p] == node and c.j_state[p] == 2]
    out = d.handle_node_down(rt.sim.node_name(node), time.perf_counter(), "GPUNodeDown")
    assert "flaky: requeue: scheduler unreachable" in out["errors"]
    assert {n.tenant for n in flaky.told} == set(on_node)
    for n in flaky.told:
        k = on_node.count(n.tenant)
        assert n.message.startswith(f"{k} job of yours on " if k == 1 else f"{k} jobs of yours on ")
    rt.close()


def test_forced_lstm_is_loaded_once_and_wrapped_once(tmp_path, monkeypatch):
    import shutil

    from daemon.config import Config
    from daemon.forecasting.choose import WithFallback, build
    from forecaster import registry, selection
    from tests.conftest import REPO

    shutil.copytree(REPO / "models", tmp_path / "m")
    loads = []
    real = registry.load_version
    for mod in (registry, selection):                 # counted wherever it is looked up
        monkeypatch.setattr(mod, "load_version", lambda d, v: loads.append(v) or real(d, v))
    for source in ("simulator", "prometheus"):       # in use here, and scored elsewhere (the newest promoted one)
        loads.clear()
        fc, _ = build(Config(source={"kind": source}, forecaster={"model_dir": tmp_path / "m", "kind": "lstm"}))
        assert len(loads) == 1, (source, loads)
        assert isinstance(fc, WithFallback) and not isinstance(fc.primary, WithFallback)


class RefusedEviction(LogActuator):
    """A real LogActuator whose cluster refuses one eviction (a PodDisruptionBudget's 429), as the kubernetes
    actuator reports it (tests/k8s/test_evictions.py shows that report on a real API server)."""

    name = "pdb"

    def apply(self, plan):
        rep = super().apply(plan)
        rep.errors.append("evict batch/train-1: 429 a PodDisruptionBudget refused it, retried next cycle")
        rep.not_freed.append("batch/train-1")
        return rep


def test_an_eviction_the_cluster_refused_is_counted_as_not_freed_and_said(tmp_path, caplog):
    rt = build_runtime(sim_cfg(tmp_path))
    rt.runner.actuators.append(RefusedEviction())
    with caplog.at_level("WARNING", logger="gpu_autoscaler"):
        rt.runner.run_once()
        rt.runner.run_once()
    assert rt.metrics.not_freed.labels("pdb")._value.get() == 2
    assert "actuator pdb: 1 eviction(s) refused, their GPUs not freed: batch/train-1" in caplog.text
    assert b'gpuas_evictions_refused_total{actuator="pdb"} 2.0' in generate_latest(rt.metrics.registry)
    rt.close()


class SqueueDown(LogActuator):
    """An actuator whose scheduler command failed with several lines of stderr, as squeue does with no slurmctld
    to find ("squeue: error: resolve_ctls_from_dns_srv: ...", "squeue: error: fetch_config: ...", "squeue: fatal:
    ...")."""

    name = "slurm"

    def apply(self, plan):
        return ActionReport(self.name, True, errors=[
            "hold: squeue: squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
            "squeue: error: fetch_config: DNS SRV lookup failed\nsqueue: fatal: Could not establish a configuration "
            "source"])


def test_an_actuator_error_of_several_lines_is_logged_as_one(tmp_path, caplog):
    import logging

    rt = build_runtime(sim_cfg(tmp_path))
    rt.runner.actuators.append(SqueueDown())
    with caplog.at_level(logging.ERROR, logger="gpu_autoscaler"):
        rt.runner.run_once()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("actuator slurm:")]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "Unknown host" in lines[0] and "Could not establish a configuration source" in lines[0]
    rt.close()
