"""A Prometheus nobody can reach (the README's minimal config on a machine without it): the daemon's log says so in
one line per cycle, its own `source unavailable: ...`, not that line beside urllib3's 'Retrying (Retry(total=1, ...))'
warning for each retry of the request. At --log-level debug the retries are still logged."""

import logging

import pytest

from daemon.cli import _setup_logging
from daemon.config import Config, PrometheusConfig, SourceConfig
from daemon.sources.base import SourceError
from daemon.sources.prometheus import PrometheusSource
from tests.conftest import free_port


@pytest.fixture
def urllib3_level():
    lg = logging.getLogger("urllib3.connectionpool")
    before = lg.level
    yield lg
    lg.setLevel(before)


def test_an_unreachable_prometheus_is_one_line_not_one_per_retry(caplog, urllib3_level):
    _setup_logging("info")
    url = f"http://127.0.0.1:{free_port()}"   # nothing listens there
    cfg = Config(source=SourceConfig(kind="prometheus", prometheus=PrometheusConfig(url=url, retries=2,
                                                                                    timeout_s=2)),
                 cycle={"history_steps": 60}, tenants=[{"name": "team-a"}])
    with caplog.at_level(logging.INFO):
        with pytest.raises(SourceError):
            PrometheusSource(cfg).collect(60)
    retries = [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")]
    assert retries == [], retries
    _setup_logging("debug")
    assert urllib3_level.isEnabledFor(logging.DEBUG)
