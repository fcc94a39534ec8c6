"""A daemon that forecasts with a baseline never imports torch.

The daemon reads the model manifest at start-up on every forecaster kind (daemon/forecasting/choose.py); the
registry imported torch with it, about 450 MiB of RSS (bench/cycle_bench.py's child: 88 -> 552 MiB at import), in a
daemon that runs a baseline (forecaster.kind = "auto" on a cluster no model was scored on, or a baseline kind) and
never touches a network. Checked in a fresh interpreter, where nothing imported torch before."""

import os
import subprocess
import sys

from tests.conftest import REPO

CHILD = """
import sys
import numpy as np
import pandas as pd
from daemon.config import parse_config
from daemon.service.wiring import build_runtime

cfg = parse_config({"cluster": {"gpus": 64}, "tenants": [{"name": "a"}, {"name": "b"}],
                    "source": {"kind": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}},
                    "actuators": {"enabled": ["log"], "dry_run": True},
                    "forecaster": {"kind": sys.argv[1], "model_dir": sys.argv[2]}}, "test")
rt = build_runtime(cfg, with_store=False)
h = pd.DataFrame(np.arange(6000.0).reshape(3000, 2) % 7, columns=["a", "b"],
                 index=pd.date_range("2026-01-01", periods=3000, freq="60s", tz="UTC"))
fc = rt.runner.forecaster.predict(h, 60)
rt.close()
print(rt.forecaster_note)
print("torch imported" if "torch" in sys.modules else "no torch", fc.values.shape)
"""


def run(kind: str) -> str:
    p = subprocess.run([sys.executable, "-c", CHILD, kind, str(REPO / "models")], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_a_daemon_that_picks_a_baseline_at_start_up_does_not_import_torch():
    # the shipped model was scored on simulator:default, never on this Prometheus cluster: auto scores the
    # baselines on the start-up history (StartupSelection) and forecasts with the best one
    out = run("auto")
    assert "best baseline on the start-up history" in out
    assert "no torch (2, 60, 3)" in out, out


def test_a_daemon_on_a_baseline_kind_does_not_import_torch():
    assert "no torch (2, 60, 3)" in run("seasonal_naive")
