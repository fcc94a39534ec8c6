"""The shipped recording rules pass promtool's checks and unit tests (idle, busy, stale, capacity)."""

import subprocess

from tests.conftest import REPO, need_binary

D = REPO / "deploy" / "prometheus"


def test_recording_rules_pass_promtool():
    need_binary("promtool")
    r = subprocess.run(["promtool", "check", "rules", "gpu-autoscaler-recording.yml"], cwd=D, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", "gpu-autoscaler-recording.test.yml"], cwd=D, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
