import json
import os
import subprocess
import sys

from tests.conftest import REPO
from tests.support.daemons import just_now


def cli_env() -> dict:
    """The environment with this checkout first on the path: `python -m daemon.cli` run from another folder
    imports this tree's daemon, not whichever one the virtualenv has installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def run_cli(*args, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, env=cli_env())


def test_run_sim_prints_one_line_per_cycle(tmp_path):
    r = run_cli("run", "--sim", "--cycles", "3", "--interval", "0.2", "--no-http", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "load=" in ln]
    assert len(lines) == 3
    assert all("reserved=" in ln and "level=" in ln for ln in lines)
    assert (tmp_path / "state" / "gpu-autoscaler.sqlite").exists()


def test_plan_json(tmp_path):
    r = run_cli("plan", "--sim", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["stale"] is False and plan["capacity"] == 1024
    assert len(plan["limits"]) == 40


def test_help_lists_only_real_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ("run", "plan", "retrain", "backtest", "simulate", "node-exporter"):
        assert cmd in r.stdout
    assert "TODO" not in r.stdout


def test_simulate_command_writes_report(tmp_path):
    r = run_cli("simulate", "--tenants", "8", "--gpus", "64", "--days", "0.05", "--out", str(tmp_path), cwd=tmp_path,
                timeout=300)
    assert r.returncode == 0, r.stderr
    assert "predictive" in r.stdout and "perfect" in r.stdout and "oracle" not in r.stdout
    assert (tmp_path / "synthetic-8x64.json").exists() and (tmp_path / "synthetic-8x64.png").exists()


def test_simulate_rejects_unknown_strategy(tmp_path):
    r = run_cli("simulate", "--strategies", "static,psychic", cwd=tmp_path)
    assert r.returncode == 2 and "psychic" in r.stderr


def test_retrain_on_a_bad_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "h.csv"
    bad.write_text("when,value\n1,2\n")
    r = run_cli("retrain", "--data", str(bad), "--model-dir", str(tmp_path / "m"), cwd=tmp_path)
    assert r.returncode == 1 and "needs a 'time' column" in r.stderr


def test_a_history_shorter_than_a_season_is_a_clear_error_for_retrain_and_backtest(tmp_path):
    import numpy as np
    import pandas as pd

    # the configured season (forecaster.season_steps, a day of 1-minute steps), not one shortened to fit the file
    for steps in (30, 1439):
        idx = pd.date_range("2026-01-01", periods=steps, freq="min", tz="UTC", name="time")
        short = tmp_path / "short.csv"
        pd.DataFrame({"time": idx, "a": np.arange(steps) + 1.0,
                      "b": np.arange(steps) % 7 + 1.0}).to_csv(short, index=False)
        for cmd in (("retrain", "--data", str(short), "--model-dir", str(tmp_path / "m")),
                    ("backtest", "--data", str(short), "--report-dir", str(tmp_path / "rep"))):
            r = run_cli(*cmd, cwd=tmp_path)
            assert r.returncode == 1 and f"{steps} steps is less than one season (1440 steps)" in r.stderr, r.stderr
            assert "Traceback" not in r.stderr
    assert not (tmp_path / "m" / "manifest.json").exists()


def test_backtest_command_scores_baselines_and_the_shipped_model(tmp_path):
    from daemon.sim.workloads import generate

    f = generate(3, 4 * 1440, 64, seed=5).demand
    p = tmp_path / "hist.csv"
    f.reset_index().to_csv(p, index=False)
    r = run_cli("backtest", "--data", str(p), "--report-dir", str(tmp_path / "rep"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "seasonal_naive_daily" in r.stdout and "holt_winters" in r.stdout and "lstm" in r.stdout
    assert (tmp_path / "rep" / "backtest.json").exists()


def test_check_config(tmp_path):
    ok = run_cli("--config", str(REPO / "deploy" / "config.example.toml"), "check-config", cwd=tmp_path)
    # /etc/gpu-autoscaler/webhook-token is absent here
    assert ok.returncode == 2 and "webhook_token_file" in ok.stderr
    good = tmp_path / "c.toml"
    good.write_text('[source]\nkind = "prometheus"\n[actuators]\nenabled = ["log", "redis"]\n')
    r = run_cli("--config", str(good), "check-config", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("ok: source=prometheus")
    assert "the webhook will refuse every alert (403)" in r.stderr
    bad = tmp_path / "b.toml"
    bad.write_text('[source]\nkind = "prometheus"\n[actuators]\nenabled = ["simulator"]\n')
    r = run_cli("--config", str(bad), "check-config", cwd=tmp_path)
    assert r.returncode == 2 and "needs source.kind" in r.stderr


def test_check_config_names_the_actuators_run_starts(tmp_path):
    """On the embedded simulator `run` always starts the simulated cluster's own actuator first; check-config named
    only actuators.enabled (['log'] where run said ['simulator', 'log'])."""
    from daemon.config import parse_config
    from daemon.service.wiring import actuator_names, build_runtime

    c = tmp_path / "c.toml"
    c.write_text(f'[actuators]\nenabled = ["log"]\n[server]\nenabled = false\n[state]\npath = '
                 f'{str(tmp_path / "s.sqlite")!r}\n')
    r = run_cli("--config", str(c), "check-config", cwd=tmp_path)
    assert r.returncode == 0 and "actuators=['simulator', 'log']" in r.stdout, (r.stdout, r.stderr)
    cfg = parse_config({"actuators": {"enabled": ["simulator", "log"]}, "server": {"enabled": False},
                        "state": {"path": str(tmp_path / "t.sqlite")}})
    rt = build_runtime(cfg, with_store=False)
    try:
        assert actuator_names(cfg) == [a.name for a in rt.actuators] == ["simulator", "log"]
    finally:
        rt.close()
    assert actuator_names(parse_config({"source": {"kind": "prometheus"}, "actuators": {"enabled": ["log"]}})) == [
        "log"]


def test_check_config_counts_the_tenants_the_simulator_makes(tmp_path):
    """On the simulated source check-config said tenants=0 (the [[tenants]] entries) where `make run` plans for its
    40 simulated tenants; the count is of the tenants a run plans for."""
    c = tmp_path / "c.toml"
    c.write_text(f'[server]\nenabled = false\n[state]\npath = {str(tmp_path / "s.sqlite")!r}\n')
    r = run_cli("--config", str(c), "check-config", cwd=tmp_path)
    assert r.returncode == 0 and " tenants=40 (simulated; 0 in [[tenants]]) " in r.stdout, (r.stdout, r.stderr)
    from daemon.cli import tenants_text
    from daemon.config import parse_config

    two = [{"name": "a", "tier": "high"}, {"name": "b"}]
    assert tenants_text(parse_config({"source": {"kind": "prometheus"}, "tenants": two})) == "2"


def test_check_config_checks_the_state_file(tmp_path):
    # state.path was not looked at: a start then failed on it, or restored junk without a word
    base = '[source]\nkind = "prometheus"\n[actuators]\nenabled = ["log"]\n[server]\nenabled = false\n'
    (tmp_path / "a-file").write_text("x")
    notdb = tmp_path / "notdb.sqlite"
    notdb.write_bytes(b"not a database " * 100)
    for state, message in [(tmp_path / "a-file" / "s.sqlite", f"{tmp_path / 'a-file'} is not a directory"),
                           (notdb, "not the daemon's SQLite store (file is not a database): move it aside")]:
        c = tmp_path / "c.toml"
        c.write_text(base + f"[state]\npath = {str(state)!r}\n")
        r = run_cli("--config", str(c), "check-config", cwd=tmp_path)
        assert r.returncode == 2, (state, r.stdout, r.stderr)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith(f"gpu-autoscaler: config error: state.path {state}: {message}"), r.stderr
    import sqlite3

    from daemon.state.store import StateStore

    junk = tmp_path / "junk.sqlite"
    StateStore(junk).close()
    with sqlite3.connect(junk) as db:
        db.execute("INSERT INTO kv VALUES('memory', '{\"rate_level\": \"x\"}', '')")
    c.write_text(base + f"[state]\npath = {str(junk)!r}\n")
    r = run_cli("--config", str(c), "check-config", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("ok: "), r.stderr
    assert f"warning: state.path {junk}: the saved policy memory ('memory') is unreadable (ValueError" in r.stderr
    assert "the daemon starts with a fresh one" in r.stderr


def _start(args, cwd):
    """`gpu-autoscaler ARGS` in the background; its stderr lines gathered in a list as they come."""
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", *args], cwd=cwd, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    return proc, lines


def _alert_post(name="GPUClusterLoadHigh"):
    return {"version": "4", "groupKey": "g", "status": "firing", "receiver": "r",
            "alerts": [{"status": "firing", "labels": {"alertname": name}, "startsAt": just_now()}]}


def test_embedded_simulator_prints_a_webhook_token_for_the_run(tmp_path):
    """`make run` (gpu-autoscaler run --sim) logged `ERROR ... webhook refuses every post` on a first run;
    now the embedded simulator gets a webhook token for the run, printed like the operator token."""
    import re

    import httpx

    from tests.conftest import free_port
    from tests.support.services import stop, wait_for

    port = free_port()
    proc, lines = _start(["run", "--sim", "--port", str(port), "--interval", "0.5"], tmp_path)
    try:
        def token():
            m = re.search(r"webhook token for this run: (\S+)", "".join(lines))
            return m.group(1) if m else None

        wait_for(token, what="the webhook token line", timeout=120)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{base}/healthz", timeout=1).status_code == 200, what="daemon", timeout=120)
        r = httpx.post(f"{base}/alerts", json=_alert_post(), headers={"Authorization": f"Bearer {token()}"})
        assert r.status_code == 200 and r.json()["actions"] == [{"action": "cycle_now", "alert": "GPUClusterLoadHigh"}]
        assert httpx.post(f"{base}/alerts", json=_alert_post()).status_code == 401
        assert httpx.post(f"{base}/alerts", json=_alert_post(),
                          headers={"Authorization": "Bearer not-the-token-0123456789"}).status_code == 401
    finally:
        stop(proc)
    err = "".join(lines)
    assert "webhook refuses every post" not in err and " ERROR " not in err, err
    assert "operator token for this run" in err


def test_a_real_source_still_refuses_webhooks_without_a_token(tmp_path):
    """Only the embedded simulator gets a made-up webhook token; a config with a real source keeps the refusal
    (and its start-up line shows the source's URL without its password)."""
    from tests.conftest import free_port

    closed = free_port()
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[source]\nkind = "prometheus"\n[source.prometheus]\nurl = "http://u:pw-s3cret-42@127.0.0.1:{closed}"\n'
                   'retries = 0\ntimeout_s = 1\n[forecaster]\nkind = "seasonal_naive"\n')
    r = run_cli("--config", str(cfg), "run", "--cycles", "1", "--interval", "0.2", "--port", str(free_port()),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "webhook refuses every post: no bearer token configured" in r.stderr
    assert "webhook token for this run" not in r.stderr
    assert f"source=prometheus (http://***@127.0.0.1:{closed})" in r.stderr
    assert "pw-s3cret-42" not in r.stderr + r.stdout


def test_the_start_line_names_the_forecaster_once_and_short(tmp_path):
    """The forecaster's whole note (a 400-character account of its scores) was printed twice at start-up:
    once logged, once in the start line. Now once, short; the whole note at debug level."""
    import shutil

    shutil.copytree(REPO / "models", tmp_path / "models")  # as `make run` in the checkout: the shipped model
    r = run_cli("run", "--sim", "--cycles", "1", "--interval", "0.2", "--no-http", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("forecaster: ") == 1, r.stderr
    start = next(ln for ln in r.stderr.splitlines() if ln.startswith("gpu-autoscaler: source="))
    assert len(start) < 200 and "forecaster: " in start and " (" not in start.split("forecaster: ", 1)[1], start
    dbg = run_cli("--log-level", "debug", "run", "--sim", "--cycles", "1", "--interval", "0.2", "--no-http",
                  cwd=tmp_path)
    assert dbg.returncode == 0, dbg.stderr
    note = [ln for ln in dbg.stderr.splitlines() if " DEBUG " in ln and "forecaster: " in ln]
    assert len(note) == 1 and "scored" in note[0] and len(note[0]) > 300, note


def test_each_run_of_the_simulated_cluster_starts_afresh_and_never_touches_a_real_clusters_store(tmp_path):
    """The simulator is a new cluster each run, its clock starting again at 13:30: a second `make run` restored the
    first run's plan and memory into it and kept its plans, events and shadow records beside the new ones under the
    same simulated times (the console's chart zigzagged between the runs, a tenant's events came twice)."""
    import sqlite3

    def ats(db):
        with sqlite3.connect(db) as c:
            return ([a for (a,) in c.execute("SELECT at FROM plans ORDER BY id")],
                    [a for (a,) in c.execute("SELECT at FROM shadow ORDER BY id")],
                    c.execute("SELECT COUNT(*) FROM events WHERE kind = 'plan_change'").fetchone()[0])

    runs = []
    for _ in range(2):
        r = run_cli("run", "--sim", "--cycles", "3", "--interval", "0.2", "--no-http", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        runs.append((r, ats(tmp_path / "state" / "gpu-autoscaler.sqlite")))
    (first, (plans1, shadow1, changes1)), (second, (plans2, shadow2, changes2)) = runs
    assert len(plans1) == 3 and plans2 == plans1 and shadow2 == shadow1 == plans1   # the second run's alone
    assert changes2 == changes1                         # the same simulated cluster: the same holds, none twice
    assert "restored last good plan" not in second.stderr
    assert "the previous run's plans, events, shadow records and operator changes (overrides, windows declared " \
           "through the API) are not carried over; they are kept in" in second.stderr
    assert ats(tmp_path / "state" / "gpu-autoscaler-previous.sqlite")[0] == plans1
    # `--sim` over a real cluster's config: its store is that cluster's, never read or moved
    real = tmp_path / "real" / "state.sqlite"
    real.parent.mkdir()
    real.write_bytes(b"the real cluster's store")
    cfg = tmp_path / "real.toml"
    cfg.write_text(f'[source]\nkind = "prometheus"\n[state]\npath = "{real}"\n[forecaster]\nkind = "seasonal_naive"\n')
    r = run_cli("--config", str(cfg), "run", "--sim", "--cycles", "2", "--interval", "0.2", "--no-http",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert real.read_bytes() == b"the real cluster's store"
    assert len(ats(real.with_name("state-sim.sqlite"))[0]) == 2


def test_a_second_simulated_run_on_a_live_runs_store_is_refused_and_moves_nothing(tmp_path):
    """A second `make run` while the first still runs moved the live run's database and WAL aside before the port
    clash stopped it: the first went on writing into the "previous" copy. Now the run holding the store's lock (a
    process here, as a running daemon holds it) keeps it: the second is one line and nothing is moved."""
    import subprocess
    import sys

    store = tmp_path / "state" / "gpu-autoscaler.sqlite"
    store.parent.mkdir()
    store.write_bytes(b"the live run's store")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()", f"{store}.lock"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        r = run_cli("run", "--sim", "--cycles", "1", "--interval", "0.2", "--no-http", cwd=tmp_path)
    finally:
        holder.communicate("", timeout=30)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "another run of the simulated cluster uses the state store" in lines[0], r.stderr
    assert store.read_bytes() == b"the live run's store"
    assert not store.with_name("gpu-autoscaler-previous.sqlite").exists()
    # once the other run has ended, the lock is free and a run starts afresh as before
    r = run_cli("run", "--sim", "--cycles", "1", "--interval", "0.2", "--no-http", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert store.with_name("gpu-autoscaler-previous.sqlite").read_bytes() == b"the live run's store"


def test_the_simulated_store_lock_is_held_once_per_process(tmp_path):
    """flock is per open file: a second lock of the same store by this process must not refuse its own run (one
    process asking twice, e.g. a run restarted in-process); another store is locked on its own."""
    from daemon.state import sim_store

    store = tmp_path / "state" / "a.sqlite"
    sim_store._lock(store)
    sim_store._lock(store)                     # the same process again: no StoreInUse
    other = tmp_path / "state" / "b.sqlite"
    sim_store._lock(other)
    assert {str(store), str(other)} <= set(sim_store._held)


def test_the_start_line_names_the_inference_services_model(tmp_path):
    """With an inference service in the config the start line named only the main forecaster (its note was cut at
    the first parenthesis), while check-config and /api/v1/plan named the services' own model too."""
    cfg = tmp_path / "svc.toml"
    cfg.write_text('[[tenants]]\nname = "tenant-0000"\ntier = "high"\n[tenants.inference]\ngpus_per_replica = 1\n'
                   'replica_rps = 5\ncold_start_s = 180\n')
    r = run_cli("--config", str(cfg), "run", "--sim", "--cycles", "1", "--interval", "0.2", "--no-http", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    start = next(ln for ln in r.stderr.splitlines() if ln.startswith("gpu-autoscaler: source="))
    assert "; services (1): seasonal_naive_144+conformal@600s interval=" in start, start
    assert len(start) < 250, start


def test_a_kubernetes_connection_that_cannot_be_set_up_names_its_key(tmp_path):
    """First-day walk (hday3): check-config said "ok" for a kubeconfig that is not there, and run then stopped with
    "cannot start: Invalid kube-config file. No configuration found."; the shipped ConfigMap's config run outside the
    cluster stopped with "cannot start: Service host/port is not set." Both now name the key and what to do
    (exit status 2, a config error); check-config catches the missing file before run."""
    base = (f'[source]\nkind = "prometheus"\n[actuators]\nenabled = ["log", "kubernetes"]\n[server]\nenabled = false\n'
            f'[state]\npath = {str(tmp_path / "s.sqlite")!r}\n')
    missing = tmp_path / "no.kubeconfig"
    c = tmp_path / "c.toml"
    c.write_text(base + f"[actuators.kubernetes]\nkubeconfig = {str(missing)!r}\n")
    r = run_cli("--config", str(c), "check-config", cwd=tmp_path)
    assert r.returncode == 2 and f"actuators.kubernetes.kubeconfig: {missing}: no such file" in r.stderr, r.stderr
    r = run_cli("--config", str(c), "run", "--cycles", "1", "--no-http", cwd=tmp_path)
    assert r.returncode == 2 and f"config error: actuators.kubernetes.kubeconfig {missing}: " in r.stderr, r.stderr
    c.write_text(base + "[actuators.kubernetes]\nin_cluster = true\n")
    env = {k: v for k, v in cli_env().items() if not k.startswith("KUBERNETES_SERVICE")}
    r = subprocess.run([sys.executable, "-m", "daemon.cli", "--config", str(c), "run", "--cycles", "1", "--no-http"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 2 and "actuators.kubernetes.in_cluster = true, but this process is not in a pod" in \
        r.stderr and "set actuators.kubernetes.kubeconfig instead" in r.stderr, r.stderr


def test_plan_says_what_each_dry_run_actuator_would_do_under_an_ha_config(tmp_path):
    """`plan` forces every actuator into dry run, but with [ha] on (the shipped Kubernetes config) its one cycle was a
    standby's, which never reaches the actuators: nothing of what they would do was said (first-day walk, hday3).
    Against a real Redis, the redis actuator's dry-run line is in plan's log now, and nothing is written."""
    import redis

    from tests.support.services import redis_server

    with redis_server(tmp_path) as (url, _):
        c = tmp_path / "c.toml"
        c.write_text(f'[actuators]\nenabled = ["log", "redis"]\n[actuators.redis]\nurl = "{url}"\n'
                     f'[ha]\nenabled = true\nbackend = "redis"\n[server]\nenabled = false\n')
        r = run_cli("--config", str(c), "plan", cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "dry run: redis would: set gpuas:limit:tenant-0000 rate=" in r.stderr, r.stderr[-2000:]
        assert "shadow record" not in r.stderr
        db = redis.Redis.from_url(url)
        assert db.keys("gpuas:limit:*") == [] and db.keys("*shadow*") == []     # nothing written, no record
