"""A daemon on the embedded simulator for the HTTP tests: its configs, tokens and the webhook's payloads.

The fixtures that start one (`daemon`, `api`) are in tests/support/fixtures.py, loaded for every test.
"""

import datetime as dt
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from daemon.config import Config, ServerConfig, SimulatorConfig, SourceConfig

TOKEN = "s3cret-token"
OPERATOR = "operator-token-0123456789"


def sim_cfg(tmp_path, port, **server):
    return Config(cluster={"gpus": 256}, cycle={"interval_s": 0.5},
                  source=SourceConfig(simulator=SimulatorConfig(seed=3, tenants=16, warmup_steps=1500)),
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                  server=ServerConfig(port=port, webhook_token=TOKEN, max_body_bytes=4096, **server),
                  access={"tokens": [{"name": "ops", "role": "operator", "token": OPERATOR}]})


def just_now() -> str:
    """An alert's startsAt for now: the webhook refuses alerts older than failover.max_alert_age_s."""
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def payload(alerts, status="firing"):
    return {"version": "4", "groupKey": "{}:{alertname=\"GPUNodeDown\"}", "truncatedAlerts": 0, "status": status,
            "receiver": "gpu-autoscaler", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am:9093", "alerts": alerts}


def alert(name, status="firing", **labels):
    return {"status": status, "labels": {"alertname": name, **labels}, "annotations": {},
            "startsAt": just_now(), "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prom/graph", "fingerprint": "abc"}


@contextmanager
def between_cycles(d) -> Iterator[None]:
    """A running daemon's loop held between two cycles, for the length of the block: the runner's lock, which
    every cycle (scheduled or alert-triggered) takes for its whole run, and inside which alone the simulator
    steps and the plan is applied. What a test reads of the simulator or the runner in the block is what the
    daemon sees, and stays so until the block ends; the failover worker and the HTTP server take other locks,
    so an alert posted in the block is handled. Reading a live loop's state without it races the next cycle."""
    with d.runtime.runner.lock:
        yield


OP = "operator-token-0123456789"
T1 = "tenant-one-token-0123456789"
T2 = "tenant-two-token-0123456789"
TOKENS = [{"name": "ops", "role": "operator", "token": OP},
          {"name": "alice", "role": "tenant", "tenant": "tenant-0001", "token": T1},
          {"name": "bob", "role": "tenant", "tenant": "tenant-0002", "token": T2}]


def api_cfg(tmp_path, port, **extra):
    return Config(cluster={"gpus": 256}, cycle={"interval_s": 1.0},
                  source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 1500}},
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                  server={"port": port}, access={"tokens": TOKENS}, **extra)


def h(token):
    return {"Authorization": f"Bearer {token}"}


def tokens_toml() -> str:
    """TOKENS as the config file's [[access.tokens]] tables."""
    return "".join(f'[[access.tokens]]\nname = "{t["name"]}"\nrole = "{t["role"]}"\n'
                   + (f'tenant = "{t["tenant"]}"\n' if "tenant" in t else "") + f'token = "{t["token"]}"\n'
                   for t in TOKENS)



def ha_replica_toml(tmp_path: Path, name: str, port: int, ha: str, sections: str = "") -> Path:
    """The config file of one HA replica process on the simulator (tests/integration/test_ha_redis.py Replica):
    256 GPUs, 16 tenants, a cycle a second, its own state file, the operator token OP, lease_ttl_s 1.0. `ha`: the
    backend's [ha] keys (redis_url; or backend, namespace, lease_name); `sections`: whole tables before [ha]
    (the Kubernetes actuator's kubeconfig)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[cluster]
gpus = 256
[cycle]
interval_s = 1.0
[source]
kind = "simulator"
[source.simulator]
tenants = 16
warmup_steps = 1500
[forecaster]
kind = "seasonal_naive"
[server]
port = {port}
[state]
path = "{tmp_path / f'{name}.sqlite'}"
{sections}[ha]
enabled = true
{ha}replica_id = "{name}"
lease_ttl_s = 1.0
[[access.tokens]]
name = "ops"
role = "operator"
token = "{OP}"
""")
    return path

@contextmanager
def sim_process(tmp: Path, settings: str, ready: Callable[[str], bool], what: str, timeout: float = 150):
    """`gpu-autoscaler run --sim` as a process (the browser tests' daemon) on `settings` (TOML: everything but the
    server's port, the state path and the tokens, which are TOKENS), with its log in `tmp/daemon.log`. Yields
    its base URL once `ready(base)` holds; stops it after."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO, free_port
    from tests.support.services import stop, wait_for

    port = free_port()
    cfg = tmp / "config.toml"
    cfg.write_text(f'{settings}\n[server]\nport = {port}\n[state]\npath = "{tmp / "state.sqlite"}"\n{tokens_toml()}')
    log = open(tmp / "daemon.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "--config", str(cfg), "run", "--sim"], cwd=tmp,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def died() -> str | None:  # a port taken after the probe, a bad config: say so now, not as "not ready"
            if proc.poll() is None:
                return None
            return f"run --sim exited with {proc.returncode}; its log ends: {(tmp / 'daemon.log').read_text()[-2000:]}"

        wait_for(lambda: ready(base), what=what, timeout=timeout, dead=died)
        yield base
    finally:
        stop(proc)
        log.close()
