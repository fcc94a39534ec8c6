"""`simulate --trace servegen` end to end, as a user runs it (the CLI in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA

SERVEGEN = SHARED_DATA / "servegen-2025" / "m-small"


def _simulate(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "daemon.cli", "simulate", "--data-dir", str(SHARED_DATA),
                           "--out", str(tmp_path), "--workers", "1", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not SERVEGEN.exists(), reason="ServeGen m-small not in ../shared/data")
def test_simulate_servegen_prints_the_requests_per_tier(tmp_path):
    r = _simulate(tmp_path, "--trace", "servegen", "--days", "0.25", "--cold-start", "5m",
                  "--scale-down-stabilization", "2m", "--strategies", "reactive,perfect", "--arrivals", "fitted")
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "inference requests per tier (arrived = served + throttled + late):" in out
    head = out[out.index("inference requests per tier"):].splitlines()[1]
    assert head.split()[:4] == ["setting", "hi", "req", "hi"] and "nrm thr%" in head
    doc = json.loads((tmp_path / "servegen-m-small-cold5m.json").read_text())
    assert doc["inference"]["cold_start_s"] == 300.0 and doc["inference"]["high_tier"]
    assert doc["inference"]["scale_down_stabilization_s"] == 120.0      # --scale-down-stabilization
    assert doc["inference"]["arrivals"] == "fitted"                       # --arrivals
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if ln.split()[:1] in (["reactive"], ["perfect"])}
    for run in doc["runs"]:
        for tier in ("high", "normal"):
            t = run["tiers"][tier]
            assert t["inf_requests"] > 0 and 0 <= t["inf_throttled"] <= t["inf_requests"]
            assert t["inf_served"] + t["inf_throttled"] + t["inf_late"] == pytest.approx(t["inf_requests"])
        # the printed row is the JSON's: the high tier's requests and throttled requests
        hi = run["tiers"]["high"]
        assert f"{hi['inf_requests']:,.0f}" in rows[run["strategy"]] and f"{hi['inf_throttled']:,.0f}" in \
            rows[run["strategy"]]
    by = {run["strategy"]: run["tiers"]["high"]["inf_throttled"] for run in doc["runs"]}
    assert by["perfect"] < by["reactive"]      # replicas placed a cold start ahead


@pytest.mark.parametrize("args,line", [
    (("--trace", "servegen", "--cold-start", "5"), "--cold-start '5': a duration with its unit"),
    (("--trace", "synthetic", "--cold-start", "5m"), "--cold-start is the inference services' cold start"),
    (("--trace", "servegen", "--scale-down-stabilization", "300"),
     "--scale-down-stabilization '300': a duration with its unit"),
    (("--trace", "helios", "--scale-down-stabilization", "5m"),
     "--scale-down-stabilization is the inference services' HPA window"),
    (("--trace", "helios", "--arrivals", "fitted"), "--arrivals is how the inference services' requests are drawn"),
])
def test_a_bad_cold_start_or_stabilization_is_one_line(args, line):
    from click.testing import CliRunner

    from daemon.cli import cli

    r = CliRunner().invoke(cli, ["simulate", *args])
    assert r.exit_code == 2 and line in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.skipif(not SERVEGEN.exists(), reason="ServeGen m-small not in ../shared/data")
def test_simulate_servegen_predictive_runs_the_services_on_their_window_model(tmp_path):
    # the product's forecaster (forecaster.services): the services on their 10-minute window means, batch on the
    # main model, as the daemon runs them
    r = _simulate(tmp_path, "--trace", "servegen", "--days", "0.05", "--cold-start", "5m",
                  "--strategies", "predictive")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "predictive: services (" in r.stderr
    doc = json.loads((tmp_path / "servegen-m-small-cold5m.json").read_text())
    assert doc["forecaster"].endswith(" | services: seasonal_naive_144+conformal@600s")
