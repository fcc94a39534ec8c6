"""Degraded is not dead: a source outage keeps the daemon up and the watchdog fed, /healthz says why, and a
last good plan older than cycle.max_plan_age_s gives way to the safe default (static pool, no preemptions)."""

import dataclasses

import httpx

from daemon.config import Config, ServerConfig, SimulatorConfig, SourceConfig
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import free_port
from tests.support.daemons import between_cycles
from tests.support.services import wait_for


def cfg_for(tmp_path, port=0, **cycle):
    return Config(cluster={"gpus": 256}, cycle={"interval_s": 0.3, **cycle},
                  source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=20, warmup_steps=1500)),
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                  server=ServerConfig(port=port, webhook_token="t0ken-for-tests-only"))


class Clock:
    def __init__(self, t=1_800_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


class Recorder:
    def __init__(self):
        self.sent = []

    def notify(self, msg):
        self.sent.append(msg)


def test_source_outage_is_degraded_not_dead(tmp_path):
    port = free_port()
    d = Daemon(build_runtime(cfg_for(tmp_path, port, max_plan_age_s=1.5)))
    d.notifier = Recorder()
    d.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{base}/healthz", timeout=1).json()["status"] == "ok", what="healthy")
        d.runtime.sim.blackout = True
        wait_for(lambda: d.health()["status"] == "degraded", what="degraded", timeout=10)
        before = (d.cycles_done, d.notifier.sent.count("WATCHDOG=1"))
        r = httpx.get(f"{base}/healthz", timeout=1)
        assert r.status_code == 200, r.text
        h = r.json()
        assert h["status"] == "degraded" and h["reason"].startswith("source unavailable (the error is in the daemon")
        assert d.health(detail=True)["reason"].startswith("source unavailable: simulated source blackout")
        # the outage outlives the plan's maximum age: the safe default takes over, and says so
        wait_for(lambda: d.health()["safe_default"], what="safe default", timeout=10)
        h = httpx.get(f"{base}/healthz", timeout=1).json()
        # (/healthz rounds the age to 0.1 s: a plan 1.52 s old, past the 1.5 s limit, reads 1.5)
        assert "safe default in force" in h["reason"] and h["plan_age_s"] >= 1.5
        m = httpx.get(f"{base}/metrics").text
        assert "gpuas_safe_default 1.0" in m and "gpuas_source_up 0.0" in m
        # holds released: read between cycles (the flag is up before the cycle that raised it applies the plan)
        with between_cycles(d):
            assert sum(d.runtime.sim.cluster.reservations) == 0
        # the loop kept running and kept feeding the watchdog all along
        assert d.cycles_done > before[0] and d.notifier.sent.count("WATCHDOG=1") > before[1]
        d.runtime.sim.blackout = False
        wait_for(lambda: d.health()["status"] == "ok", what="recovered", timeout=10)
        assert "gpuas_safe_default 0.0" in httpx.get(f"{base}/metrics").text
    finally:
        d.stop()


def test_plan_is_kept_up_to_max_age_then_safe_default(tmp_path, caplog):
    rt = build_runtime(cfg_for(tmp_path, max_plan_age_s=600))
    clock = rt.runner.clock = Clock()
    good = rt.runner.run_once().plan
    assert good.reservations and not good.safe_default
    rt.sim.blackout = True
    clock.t += 599
    res = rt.runner.run_once()
    assert res.outcome == "source_error" and res.plan is good          # within the age: last good plan
    clock.t += 2
    res = rt.runner.run_once()
    p = res.plan
    assert res.outcome == "source_error" and p.safe_default and p.stale
    assert p.reservations == {} and p.preemptions == () and p.high_pool == 51
    assert set(p.quotas.values()) == {256 - 51}
    assert ("safe default in force: no holds beyond the static pool (51 GPUs for the high tier), no preemptions"
            in p.notes[0])
    assert "safe default in force" in caplog.text
    assert [r.actuator for r in res.reports] == ["simulator", "log"]      # enforced, not only said
    assert rt.sim.cluster.reservations.sum() == 0
    assert rt.metrics.safe_default._value.get() == 1
    rt.sim.blackout = False
    res = rt.runner.run_once()
    assert res.outcome == "ok" and not res.plan.safe_default and rt.metrics.safe_default._value.get() == 0
    assert "safe default lifted" in caplog.text


def test_stale_data_past_max_age_gives_the_safe_default_too(tmp_path):
    rt = build_runtime(cfg_for(tmp_path, max_plan_age_s=600))
    clock = rt.runner.clock = Clock()
    rt.runner.run_once()
    src = rt.runner.source

    class Stale:
        def collect(self, n):
            c = src.collect(n)
            return dataclasses.replace(c, state=dataclasses.replace(c.state, staleness_s=1e6))

    rt.runner.source = Stale()
    clock.t += 300
    res = rt.runner.run_once()
    assert res.outcome == "stale" and not res.plan.safe_default and res.plan.reservations
    clock.t += 400
    res = rt.runner.run_once()
    assert res.outcome == "stale" and res.plan.safe_default and res.plan.reservations == {}
    assert not res.plan.preemptions


def test_restored_plan_has_a_maximum_age(tmp_path):
    cfg = cfg_for(tmp_path, max_plan_age_s=600)
    rt = build_runtime(cfg)
    rt.runner.clock = Clock(1_800_000_000.0)
    saved = rt.runner.run_once().plan
    rt.close()
    for later, safe in ((100, False), (601, True)):
        rt2 = build_runtime(cfg)
        rt2.runner.clock = Clock(1_800_000_000.0 + later)
        assert rt2.runner.plan_too_old() is safe
        rt2.sim.blackout = True
        res = rt2.runner.run_once()
        assert res.plan.safe_default is safe
        if not safe:
            assert res.plan.to_dict() == saved.to_dict()
        rt2.close()


def test_healthz_says_a_source_error_without_its_text(tmp_path, caplog):
    """/healthz is open: a source error quoting a scheduler's output (here the error parse_squeue raises on a cut
    squeue line, naming an account and a job) is said there without its text; the log line and the operator's
    view keep it."""
    import logging

    from starlette.testclient import TestClient

    from daemon.actuators.slurm.squeue import SlurmError, parse_squeue
    from daemon.sources.base import SourceError
    from daemon.web.app import build_app

    try:
        parse_squeue("4242|acct-secret-lab|normal|normal|PENDING\n")
    except SlurmError as exc:
        error = f"cannot read the scheduler's jobs: SlurmError: {exc}"

    class Broken:
        def collect(self, n):
            raise SourceError(error)

    d = Daemon(build_runtime(cfg_for(tmp_path)), serve_http=False)
    d.runtime.runner.source = Broken()
    with caplog.at_level(logging.ERROR, logger="gpu_autoscaler"):
        d.cycle()
    assert d.last_result.outcome == "source_error"
    lines = [r.getMessage() for r in caplog.records if "acct-secret-lab" in r.getMessage()]
    assert len(lines) == 1 and "4242" in lines[0] and "\n" not in lines[0], lines   # one clear log line
    with TestClient(build_app(d.backend)) as c:
        body = c.get("/healthz").text
    assert "source unavailable" in body and "acct-secret-lab" not in body and "4242" not in body, body
    assert "acct-secret-lab" in d.backend.health(detail=True)["reason"]   # the operator's views: the detail
