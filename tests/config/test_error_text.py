"""A refused config or change reads as the validator's own sentence, without pydantic's "Value error, " in front
(found on a first day: a window added with at = 25:30 in the console answered "body: Value error, window 'w2': at =
'25:30' is not a time of day HH:MM", and check-config "windows.0: Value error, window 'x': ...")."""

import pytest

from daemon.config import ConfigError, parse_config
from daemon.state.overrides import BadChange, parse_window


def test_a_config_error_has_no_pydantic_prefix():
    bad = {"windows": [{"name": "x", "tenant": "t", "gpus": 8, "every": "daily", "at": "25:30",
                        "duration_minutes": 60}], "tenants": [{"name": "t"}]}
    with pytest.raises(ConfigError) as got:
        parse_config(bad, "c.toml")
    assert str(got.value) == "c.toml: windows.0: window 'x': at = '25:30' is not a time of day HH:MM"
    with pytest.raises(ConfigError) as got:
        parse_config({"server": {"metrics_token": "m" * 20, "metrics_token_file": "/x"}}, "c.toml")
    assert "Value error" not in str(got.value) and str(got.value).startswith("c.toml: server: give at most one of")


def test_an_api_change_refused_has_no_pydantic_prefix():
    with pytest.raises(BadChange) as got:
        parse_window("w2", {"tenant": "t", "gpus": 8, "every": "daily", "at": "25:30", "duration_minutes": 60})
    assert str(got.value).endswith("window 'w2': at = '25:30' is not a time of day HH:MM")
    assert "Value error" not in str(got.value)
    with pytest.raises(BadChange) as got:
        parse_window("w2", {"tenant": "t", "gpus": 8, "every": "daily", "at": "10:00", "timezone": "Mars/Base",
                            "duration_minutes": 60})
    assert "Value error" not in str(got.value) and "'Mars/Base' is not an IANA time zone" in str(got.value)
