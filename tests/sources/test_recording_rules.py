"""The shipped recording rules pass promtool's checks and unit tests (idle, busy, stale, capacity)."""

from tests.conftest import assert_promtool_rules


def test_recording_rules_pass_promtool():
    assert_promtool_rules("gpu-autoscaler-recording.yml", "gpu-autoscaler-recording.test.yml")
