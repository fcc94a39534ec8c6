"""The shipped recording rules pass promtool's checks and unit tests (idle, busy, stale, capacity), and count only
the DCGM exporter's series: a tenant's pod scraped by another job, exposing the same names, adds no demand, no
capacity and no stale GPU (issue 36; the forged series are in gpu-autoscaler-recording.test.yml)."""

from tests.conftest import assert_promtool_rules


def test_recording_rules_pass_promtool():
    assert_promtool_rules("gpu-autoscaler-recording.yml", "gpu-autoscaler-recording.test.yml")
