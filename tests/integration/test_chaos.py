"""Chaos: real servers killed and restarted mid-cycle, a full disk, a wall-clock jump, fuzzed inputs.

Every case ends with: nothing committed lost, no preemption made on bad data, and a clear log line.
The module prints its figures (faults tried / survived, inputs fuzzed) at the end; the README quotes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings, strategies as st

from daemon.actuators.base import ActionReport
from daemon.config import Config, PrometheusConfig, SlurmActuatorConfig, SourceConfig, TenantConfig, parse_config
from daemon.forecasting.choose import build as build_forecaster
from daemon.policy.types import Plan, PolicyMemory, Preemption
from daemon.service.cycle import CycleRunner
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
from daemon.sources.pushgateway import PUSHED_METRIC
from daemon.state.store import StateStore
from tests.conftest import free_port, need_binary
from tests.support.actuators import QuietActuator
from tests.support.daemons import just_now
from tests.support.services import _http_server, redis_server, slurm_cluster, wait_for

pytestmark = [pytest.mark.chaos, pytest.mark.services]

FIGURES = {"faults_tried": 0, "faults_survived": 0, "inputs_fuzzed": 0, "cases": {}}
SMALL = {"cluster": {"gpus": 128}, "source": {"kind": "simulator", "simulator": {"tenants": 8, "warmup_steps": 1500}},
         "forecaster": {"kind": "seasonal_naive"}}


@contextlib.contextmanager
def fault(name: str):
    """Count one injected fault; it is survived when the block's checks all pass."""
    FIGURES["faults_tried"] += 1
    FIGURES["cases"][name] = "tried"
    yield
    FIGURES["faults_survived"] += 1
    FIGURES["cases"][name] = "survived"


@pytest.fixture(scope="module", autouse=True)
def figures(tmp_path_factory):
    yield
    out = Path(os.environ.get("GPUAS_CHAOS_REPORT", tmp_path_factory.getbasetemp() / "chaos-figures.json"))
    out.write_text(json.dumps(FIGURES, indent=1))
    print(f"\nchaos figures: {FIGURES['faults_tried']} faults tried, {FIGURES['faults_survived']} survived, "
          f"{FIGURES['inputs_fuzzed']} inputs fuzzed ({out})")


class Recorder(QuietActuator):
    """An actuator that remembers what it was asked to do (and when)."""

    name = "recorder"
    dry_run = False

    def __init__(self):
        self.applied: list[tuple[float, Plan]] = []

    def apply(self, plan):
        self.applied.append((time.time(), plan))
        return ActionReport(self.name, False, [f"apply {plan.at}"])


# ---- Prometheus killed and restarted while cycles run ---------------------------------------------------------

def _prometheus(tmp: Path, port: int, data: Path, targets: str):
    exe = need_binary("prometheus")
    cfg = tmp / "prometheus.yml"
    cfg.write_text(f"global:\n  scrape_interval: 1s\n  scrape_timeout: 500ms\nscrape_configs:\n"
                   f"  - job_name: dcgm-exporter\n    static_configs:\n      - targets: [{targets}]\n")
    return _http_server(tmp, "prometheus", [exe, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                                            f"--web.listen-address=127.0.0.1:{port}",
                                            "--storage.tsdb.retention.time=1d"], port)


def _cycles_in_background(runner: CycleRunner, pause: float = 0.05):
    results, halt = [], threading.Event()

    def loop():
        while not halt.is_set():
            started = time.time()
            results.append((started, runner.run_once()))  # (when the cycle started, what it did)
            halt.wait(pause)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return results, halt, th


def test_prometheus_killed_mid_cycles_then_restarted(tmp_path, caplog):
    from tests.integration.test_prometheus_scrape import exporter

    caplog.set_level(logging.INFO)
    node = exporter("node-a", [("team-a", 90), ("team-a", 0), ("team-b", 50), ("", 0)])
    port, data = free_port(), tmp_path / "tsdb"
    data.mkdir()
    targets = f"'127.0.0.1:{node.server_address[1]}'"
    cfg = Config(source=SourceConfig(kind="prometheus", prometheus=PrometheusConfig(
                     url=f"http://127.0.0.1:{port}", timeout_s=1, retries=0)),
                 cycle={"history_steps": 120, "resolution_s": 1, "horizon_steps": 5},
                 forecaster={"kind": "seasonal_naive", "season_steps": 10},
                 tenants=[{"name": "team-a"}, {"name": "team-b"}], state={"path": tmp_path / "state.sqlite"})
    rec = Recorder()
    fc, _ = build_forecaster(cfg)
    store = StateStore(cfg.state.path)
    runner = CycleRunner(cfg, PrometheusSource(cfg), fc, [rec], store)
    try:
        with fault("prometheus kill -9 mid-cycles + restart"):
            with _prometheus(tmp_path, port, data, targets) as (url, proc):
                wait_for(lambda: httpx.get(f"{url}/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_UTIL)"})
                         .json()["data"]["result"], what="scraped", timeout=30)
                time.sleep(3)
                first = runner.run_once()
                assert first.outcome == "ok", first.error
                results, halt, th = _cycles_in_background(runner)
                time.sleep(0.5)
                t_kill = time.time()
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                time.sleep(1.5)
                halt.set()
                th.join()
            good = runner.last_plan
            after = [(t, res) for t, res in results if t > t_kill]       # cycles started after the kill
            assert after and all(res.outcome == "source_error" for _, res in after)
            assert all(res.plan is good for _, res in after)              # the last good plan is kept
            assert not [p for t, p in rec.applied if t >= after[0][0]]    # nothing applied on no data
            assert "source unavailable" in caplog.text and "keeping last good plan" in caplog.text
            assert StateStore(cfg.state.path).load_plan().at == good.at   # committed plan intact on disk
            seen = [res for t, res in results if res.outcome == "ok"] or [first]
            pre = seen[-1].collected.history["team-a"].dropna()          # read from Prometheus before the kill
            assert len(pre) >= 2
            with _prometheus(tmp_path, port, data, targets) as (url, proc):
                wait_for(lambda: runner.run_once().outcome == "ok", what="cycles ok again", timeout=30, interval=0.5)
                hist = runner.last_history["team-a"]
            assert hist.reindex(pre.index).tolist() == pre.tolist()      # every sample read before is still there
    finally:
        node.shutdown()
        node.server_close()
        store.close()


# ---- Redis (limits + leader lease) killed and restarted -------------------------------------------------------

def test_redis_killed_mid_cycles_then_restarted(tmp_path, caplog):
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    caplog.set_level(logging.INFO)
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    cfg = parse_config({**SMALL, "server": {"enabled": False}, "state": {"path": str(tmp_path / "s.db")},
                        "actuators": {"enabled": ["redis"], "dry_run": False, "redis": {"url": url}},
                        "ha": {"enabled": True, "lease_ttl_s": 1.0, "replica_id": "solo"}})
    d = Daemon(build_runtime(cfg), serve_http=False)
    lease = d.runtime.lease
    try:
        with fault("redis kill -9 mid-cycles + restart (limits, lease, ledger)"):
            with redis_server(tmp_path, port, durable=True) as (_, proc):
                r = redis.Redis.from_url(url)
                assert lease.tick()
                for _ in range(3):
                    d.cycle()
                assert d.last_result.acted
                ledger_before, token_before = lease.ledger(), lease.token
                limits_before = sorted(r.keys("gpuas:limit:*"))
                assert ledger_before and limits_before
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                t0, during = time.monotonic(), []
                while time.monotonic() - t0 < 2.0:                    # past the lease's TTL
                    lease.tick()
                    d.cycle()
                    during.append(d.last_result)
                    time.sleep(0.1)
            # the daemon kept cycling; without Redis it could not confirm its lease, so it acted on nothing
            assert len(during) >= 10 and all(res.plan is not None for res in during)
            sim_reports = [rep for res in during for rep in res.reports if rep.actuator == "simulator"]
            assert all(not rep.ok for rep in sim_reports)
            assert not during[-1].acted and d.role() == "standby"
            assert "cannot check the fencing token in Redis" in caplog.text or "Redis unreachable" in caplog.text
            with redis_server(tmp_path, port, durable=True):
                wait_for(lambda: lease.tick(), what="lease again", timeout=10)
                d.cycle()
                assert d.last_result.acted and all(rep.ok for rep in d.last_result.reports)
                ledger_after = lease.ledger()
                assert ledger_after[:len(ledger_before)] == ledger_before  # appendfsync always: nothing lost
                assert lease.token > token_before
                assert sorted(r.keys("gpuas:limit:*")) == limits_before
    finally:
        lease.stop(release=False)
        d.runtime.close()


# ---- slurmctld killed and restarted ---------------------------------------------------------------------------

TENANTS = [TenantConfig(name="team-high", tier="high", slurm_account="acct-high"),
           TenantConfig(name="team-low", tier="low", slurm_account="acct-low")]


def _plan(reserve=0, *pre):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=8, load=1.0, high_pool=2,
                reservations={"team-high": reserve} if reserve else {}, quotas={}, limits={}, preemptions=tuple(pre),
                notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())


def test_slurmctld_killed_mid_apply_then_restarted():
    from daemon.actuators.slurm.actuator import SlurmActuator
    from daemon.actuators.slurm.holds import parse_reservations

    with slurm_cluster(nodes=("cn1", "cn2"), gpus=4) as s:
        env = s["env"]

        def sh(*args):
            return subprocess.run(list(args), env=env, capture_output=True, text=True).stdout

        def squeue():
            out = sh("squeue", "-h", "-o", "%i|%T")
            return dict(ln.split("|") for ln in out.splitlines())

        def holds():
            return [x for x in parse_reservations(sh("scontrol", "-o", "show", "reservation"))
                    if x.name.startswith("gpuas-hold")]

        ids = [sh("sbatch", "--parsable", "--partition=low", "--account=acct-low", "--gres=gpu:2", "--requeue",
                  "-o", "/dev/null", "--wrap", "sleep 600").strip().split(";")[0]]
        wait_for(lambda: all(squeue().get(j) == "RUNNING" for j in ids), what="jobs running", timeout=60)
        a = SlurmActuator(SlurmActuatorConfig(slurm_conf=s["conf"], bin_dir="/usr/bin", timeout_s=5), TENANTS,
                          dry_run=False)
        with fault("slurmctld kill -9 mid-apply + restart"):
            t_hold = time.time()
            assert a.apply(_plan(4)).ok
            assert len(holds()) == 1
            state = Path(s["dir"]) / "state"
            # what slurmctld itself has not written to StateSaveLocation yet, a kill -9 takes from it (its own
            # window, a few seconds): wait until the job and the hold are on its disk
            wait_for(lambda: all((state / f).exists() and (state / f).stat().st_mtime >= t_hold
                                 for f in ("resv_state", "job_state")), what="slurmctld state saved", timeout=30)
            ctld = s["procs"][0]
            ctld.send_signal(signal.SIGKILL)
            ctld.wait()
            rep = a.apply(_plan(8, Preemption(ids[0], "team-low", 2, "cn1", "peak ahead")))
            assert not rep.ok and rep.errors                               # refused, said so, did not crash
            req = a.requeue([ids[0]], "node failed")
            assert not req.ok
            outage_errors = rep.errors + req.errors
            s["procs"][0] = subprocess.Popen(["slurmctld", "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.STDOUT)
            wait_for(lambda: "UP" in sh("scontrol", "ping"), what="slurmctld back", timeout=60)
            wait_for(lambda: all(squeue().get(j) == "RUNNING" for j in ids), what="job still running", timeout=30)
            rep = a.apply(_plan(4))                                        # reconciled with what Slurm kept
            assert rep.ok, rep.errors
            assert len(holds()) == 1
            assert all(squeue().get(j) == "RUNNING" for j in ids)          # nothing preempted during the outage
            # what the cycle logs for these ("actuator slurm: ...") names the command and the cause
            said = " ".join(outage_errors)
            assert ("squeue" in said or "scontrol" in said) and ("timed out" in said or "contact" in said), said


# ---- SQLite on a full disk ------------------------------------------------------------------------------------

@contextlib.contextmanager
def _tiny_disk(where: Path, size: str = "384k"):
    where.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs for the full-disk case: {res.stderr.strip()} (CI runs as root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_sqlite_on_a_full_disk(tmp_path, caplog):
    from daemon.sim.actuator import SimulatorActuator
    from daemon.sim.source import SimulatedCluster

    caplog.set_level(logging.INFO)
    with _tiny_disk(tmp_path / "disk") as disk, fault("SQLite state on a full tmpfs"):
        cfg = parse_config({**SMALL, "state": {"path": str(disk / "state.sqlite")}})
        sim = SimulatedCluster(cfg)
        fc, _ = build_forecaster(cfg)
        store = StateStore(cfg.state.path)
        runner = CycleRunner(cfg, sim, fc, [SimulatorActuator(sim.cluster, sim.tenants, node_index=sim.node_index)],
                             store)
        for _ in range(3):
            assert runner.run_once().outcome == "ok"
        saved, last_at = store.plan_count(), store.load_plan().at
        filler = disk / "filler"
        f = open(filler, "wb")
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        with contextlib.suppress(OSError):
            f.close()
        results = [runner.run_once() for _ in range(5)]                   # the disk is full: cycles go on
        assert all(res.outcome == "ok" for res in results)
        assert "state not saved" in caplog.text and "full" in caplog.text
        assert store.plan_count() == saved and store.load_plan().at == last_at   # what was committed stays
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        filler.unlink()
        runner.run_once()
        assert store.plan_count() == saved + 1                             # space again: saving resumes
        store.close()


# ---- a wall-clock jump ----------------------------------------------------------------------------------------

def test_wall_clock_jump_back_and_forward(tmp_path, monkeypatch, caplog):
    """NTP steps the wall clock back an hour, then forward two: cycles keep their pace (no stall, no burst),
    no preemption burst, health stays ok. Injected clock: time.time() and APScheduler's datetime.now() are
    shifted in-process (libfaketime also shifts the monotonic waits Python's threads rely on)."""
    import apscheduler.schedulers.base as aps_base

    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    offset = [0.0]
    real_time = time.time

    class Shifted(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.now(tz) + dt.timedelta(seconds=offset[0])

    monkeypatch.setattr(aps_base, "datetime", Shifted)
    monkeypatch.setattr(time, "time", lambda: real_time() + offset[0])
    interval = 0.5
    cfg = parse_config({**SMALL, "server": {"enabled": False}, "state": {"path": str(tmp_path / "s.db")},
                        "cycle": {"interval_s": interval}})
    d = Daemon(build_runtime(cfg), serve_http=False)
    budget = cfg.policy.preempt_budget_jobs
    preempted = []
    d.on_cycle = lambda res: preempted.append(len(res.plan.preemptions) if res.plan else 0)
    with fault("wall clock stepped back 1 h, then forward 2 h"):
        d.start()
        try:
            wait_for(lambda: d.cycles_done >= 3, what="cycles", timeout=30)
            n0 = d.cycles_done
            offset[0] = -3600.0
            time.sleep(3.0)
            n1 = d.cycles_done
            offset[0] = +7200.0
            time.sleep(3.0)
            n2 = d.cycles_done
            health = d.health()
        finally:
            d.stop()
    per_window = 3.0 / interval
    assert n1 - n0 >= per_window / 2, f"cycles stalled after the clock went back: {n1 - n0} in 3 s"
    assert n2 - n1 >= per_window / 2, f"cycles stalled after the clock went forward: {n2 - n1} in 3 s"
    assert n2 - n1 <= per_window + 2, f"catch-up burst after the clock went forward: {n2 - n1} in 3 s"
    assert max(preempted) <= budget and health["status"] == "ok"


# ---- fuzzed webhook bodies ------------------------------------------------------------------------------------

TOKEN = "chaos-webhook-token-0123456789"
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids,
                                                                                    max_size=4), max_leaves=20)
node_names = st.one_of(st.text(max_size=30), st.sampled_from(["gpu[0001-1024]", "sim-node-0001,sim-node-0002", "*",
                                                              "sim-node-*", " sim-node-0001", "sim-node-99999",
                                                              "sim-node-0001 ", "", "sim-node-0001\n"]))


@st.composite
def alertmanager_bodies(draw):
    alert = {"status": draw(st.sampled_from(["firing", "resolved", "weird"])),
             "labels": {"alertname": draw(st.sampled_from(["GPUNodeDown", "GPUXidErrors", "Other", ""])),
                        draw(st.sampled_from(["node", "Hostname", "instance", "kubernetes_node"])): draw(node_names)},
             "startsAt": draw(st.sampled_from(["2026-01-01T00:00:00Z", "", "yesterday"]))}
    if draw(st.booleans()):
        alert["annotations"] = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2))
    body = {"version": draw(st.sampled_from(["4", "3", 4])), "status": "firing", "receiver": "gpuas",
            "groupKey": draw(st.text(max_size=10)), "alerts": [alert] * draw(st.integers(0, 3))}
    for k in draw(st.lists(st.sampled_from(list(body)), max_size=2)):
        body.pop(k, None)
    return json.dumps(body).encode()


webhook_bodies = st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()),
                           alertmanager_bodies())


def test_fuzzed_webhook_bodies_never_fence_a_node_or_crash(tmp_path, caplog):
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime
    from daemon.web.app import build_app

    cfg = parse_config({**SMALL, "server": {"webhook_token": TOKEN}, "state": {"path": str(tmp_path / "s.db")}})
    d = Daemon(build_runtime(cfg), serve_http=False)
    d.trigger_cycle = lambda: None
    d.cycle()
    known = d.runtime.sim.node_names()
    app = build_app(d.backend)
    seen: dict[int, int] = {}

    async def post(body, auth):
        headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://d") as c:
            return await c.post("/alerts", content=body, headers=headers)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(body=webhook_bodies, auth=st.booleans())
    def one(body, auth):
        try:
            text = json.loads(body)
        except Exception:
            text = None
        if isinstance(text, dict) and any(
                isinstance(a, dict) and isinstance(a.get("labels"), dict)
                and any(v in known for v in a["labels"].values() if isinstance(v, str))
                for a in (text.get("alerts") or []) if isinstance(text.get("alerts"), list)):
            return  # exactly a known node: a legitimate failover, checked separately below
        FIGURES["inputs_fuzzed"] += 1
        resp = asyncio.run(post(body, auth))
        seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
        assert resp.status_code in (200, 400, 401, 413), (resp.status_code, resp.text[:200])
        assert bool(d.runtime.sim.cluster.node_ok.all()), f"a node was fenced by {body[:200]!r}"

    with fault("fuzzed Alertmanager webhook bodies"):
        one()
        assert not d.runtime.store.events("node_down")
        assert seen.get(400) and seen.get(401)
        assert "webhook:" in caplog.text
        # the harness can see a failover: an exact, configured, firing alert for a known node does fence it
        good = json.dumps({"version": "4", "status": "firing", "receiver": "r", "groupKey": "g",
                           "alerts": [{"status": "firing", "labels": {"alertname": "GPUNodeDown",
                                                                      "node": "sim-node-0003"},
                                       "startsAt": just_now()}]}).encode()
        assert asyncio.run(post(good, True)).status_code == 200
        assert not d.runtime.sim.cluster.node_ok[3]
    d.runtime.close()


# ---- fuzzed Prometheus responses ------------------------------------------------------------------------------

NOW = 1_764_806_400
sample_values = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "1e400", "3", "0", "abc", "", "1_0"]),
                          st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-5, 10 ** 6).map(str),
                          st.integers(), st.none(), st.floats())
labels = st.one_of(st.just({"namespace": "team-a"}), st.dictionaries(st.sampled_from(["namespace", "x"]),
                                                                     st.one_of(st.text(max_size=8), st.integers()),
                                                                     max_size=2), st.none())


@st.composite
def prom_bodies(draw, kind):
    if draw(st.integers(0, 9)) == 0:                         # not an API answer at all
        return draw(st.one_of(st.binary(max_size=200),
                              st.just(b"<html><body>502 Bad Gateway</body></html>"),
                              json_values.map(lambda v: json.dumps(v).encode())))
    item = {"metric": draw(labels)}
    if kind == "vector":
        item["value"] = draw(st.one_of(st.tuples(st.sampled_from([NOW, str(NOW), None]), sample_values).map(list),
                                       sample_values))
    else:
        item["values"] = draw(st.lists(st.tuples(st.sampled_from([NOW - 60, NOW, "x"]), sample_values).map(list),
                                       max_size=3))
    for k in draw(st.lists(st.sampled_from(list(item)), max_size=1)):
        item.pop(k)
    data = {"resultType": draw(st.sampled_from([kind, "scalar", "string", "matrix", "vector"])),
            "result": draw(st.lists(st.just(item), max_size=3))}
    return json.dumps({"status": draw(st.sampled_from(["success", "error"])), "data": data}).encode()


def test_fuzzed_prometheus_answers_are_read_or_refused_never_guessed():
    answers = {"instant": b"", "range": b""}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self):
            u = urlparse(self.path)
            body = answers["range" if u.path.endswith("query_range") else "instant"]
            if PUSHED_METRIC in parse_qs(u.query).get("query", [""])[0]:   # no Pushgateway: the GPU reads are fuzzed
                body = json.dumps({"status": "success", "data": {
                    "resultType": "matrix" if u.path.endswith("query_range") else "vector", "result": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    cfg = Config(source=SourceConfig(kind="prometheus", prometheus=PrometheusConfig(
                     url=f"http://127.0.0.1:{srv.server_address[1]}", timeout_s=2, retries=0)),
                 cycle={"history_steps": 60}, tenants=[{"name": "team-a"}])
    src = PrometheusSource(cfg, clock=lambda: NOW + 1.0)
    outcomes = {"read": 0, "refused": 0}

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(instant=prom_bodies("vector"), rng=prom_bodies("matrix"))
    def one(instant, rng):
        FIGURES["inputs_fuzzed"] += 1
        answers["instant"], answers["range"] = instant, rng
        try:
            got = src.collect(60)
        except SourceError as exc:
            assert str(exc)
            outcomes["refused"] += 1
            return
        outcomes["read"] += 1
        st_ = got.state
        assert np.isfinite(st_.capacity) and st_.capacity >= 0
        used = np.asarray(st_.used, dtype=float)
        known = ~np.isnan(used)
        assert (used[known] >= 0).all() and np.isfinite(used[known]).all()
        vals = got.history.to_numpy(dtype=float)
        assert (vals[~np.isnan(vals)] >= 0).all() and np.isfinite(vals[~np.isnan(vals)]).all()

    try:
        with fault("fuzzed Prometheus API answers"):
            one()
            assert outcomes["refused"] > 0
    finally:
        srv.shutdown()
        srv.server_close()
