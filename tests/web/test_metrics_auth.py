"""/metrics behind a token: `server.metrics_token(_file)`, scraped by a real Prometheus with the shipped job.

/metrics names every tenant with its holds, limits, forecasts and preemptions; without the setting it stays
open, as before.
"""

import subprocess

import httpx
import pytest
import yaml

from daemon.config import Config, ConfigError, parse_config
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.conftest import REPO, free_port, need_binary
from tests.support.services import prometheus_server, wait_for

pytestmark = [pytest.mark.security, pytest.mark.timeout(180)]

METRICS = "metrics-token-0123456789abcdef"


def cfg(tmp_path, port, **server):
    return Config(cluster={"gpus": 256}, cycle={"interval_s": 0.5},
                  source={"simulator": {"seed": 3, "tenants": 16, "warmup_steps": 1500}},
                  state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                  server={"port": port, "webhook_token": "webhook-token-0123456789", **server})


@pytest.fixture
def daemon_with_token(tmp_path):
    f = tmp_path / "metrics-token"
    f.write_text(METRICS + "\n")
    port = free_port()
    d = Daemon(build_runtime(cfg(tmp_path, port, metrics_token_file=str(f))))
    d.start()
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: d.cycles_done >= 1, what="a cycle", timeout=60)
    yield d, base, f
    d.stop()


def test_metrics_answers_only_with_the_token(daemon_with_token):
    _, base, _ = daemon_with_token
    r = httpx.get(f"{base}/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "tenant-0" not in r.text and "gpuas_" not in r.text
    for bad in ("Bearer wrong-token-0123456789abc", f"Bearer {METRICS[:-1]}", f"Bearer {METRICS}x", f"Basic {METRICS}",
                METRICS, "Bearer"):
        assert httpx.get(f"{base}/metrics", headers={"Authorization": bad}).status_code == 401, bad
    for good in (f"Bearer {METRICS}", f"bearer {METRICS}", f"BEARER  {METRICS}"):
        r = httpx.get(f"{base}/metrics", headers={"Authorization": good})
        assert r.status_code == 200 and 'gpuas_reservation_gpus{tenant="tenant-0' in r.text, good
    assert httpx.get(f"{base}/healthz").status_code == 200  # the liveness probe stays open


@pytest.mark.parametrize("server, message", [
    ({"metrics_token": "short"}, "server.metrics_token: String should have at least 16 characters"),
    ({"metrics_token": METRICS, "metrics_token_file": "/x"}, "server: give at most one of metrics_token"),
    ({"webhook_token": METRICS, "webhook_token_file": "/x"}, "server: give at most one of webhook_token"),
])
def test_bad_metrics_token_config_names_the_key(server, message):
    with pytest.raises(ConfigError, match=f"config: {message}"):
        parse_config({"server": server})


def test_an_unreadable_or_short_metrics_token_file_stops_the_start(tmp_path):
    short = tmp_path / "short"
    short.write_text("abc\n")
    for path, why in ((tmp_path / "missing", "cannot read"), (short, "fewer than 16")):
        c = parse_config({"server": {"metrics_token_file": str(path)}})
        with pytest.raises(ConfigError, match=f"server.metrics_token_file: .*{why}"):
            c.server.metrics_secret()


@pytest.mark.services
def test_a_real_prometheus_scrapes_with_the_shipped_job_and_is_refused_without_it(daemon_with_token, tmp_path):
    """The shipped scrape job (deploy/prometheus/gpu-autoscaler-scrape.yml), its target and credentials file
    pointed at this daemon: its scrapes succeed; the same job without the `authorization` block gets 401."""
    need_binary("prometheus")
    _, base, token_file = daemon_with_token
    shipped = yaml.safe_load((REPO / "deploy/prometheus/gpu-autoscaler-scrape.yml").read_text())
    job = shipped["scrape_configs"][0]
    assert job["authorization"]["credentials_file"] == "/etc/gpu-autoscaler/metrics-token"
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [base.removeprefix("http://")]}]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    bare = {k: v for k, v in job.items() if k != "authorization"}
    bare["job_name"] = "without-token"
    config = yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": [job, bare]})
    need_binary("promtool")
    (tmp_path / "check.yml").write_text(config)
    chk = subprocess.run(["promtool", "check", "config", str(tmp_path / "check.yml")], capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    with prometheus_server(tmp_path, config) as (prom, _):
        def targets():
            active = httpx.get(f"{prom}/api/v1/targets", timeout=2).json()["data"]["activeTargets"]
            return {t["labels"]["job"]: t for t in active}

        def both_scraped():
            seen = targets()  # one read: two reads could see one target scraped, then two with one still unknown
            return seen if len(seen) == 2 and all(t["health"] != "unknown" for t in seen.values()) else None

        wait_for(both_scraped, what="both jobs scraped", timeout=60)
        got = both_scraped() or targets()
        assert got["gpu-autoscaler"]["health"] == "up", got["gpu-autoscaler"]["lastError"]
        assert got["without-token"]["health"] == "down" and "401" in got["without-token"]["lastError"]
        wait_for(lambda: httpx.get(f"{prom}/api/v1/query", params={"query": "gpuas_reservation_gpus"}).json()
                 ["data"]["result"], what="tenant series scraped", timeout=30)
