"""[health] config: the exporter selector, partial action tables and the telemetry window's bound."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from daemon.config import Config


def test_the_default_queries_select_the_exporters_own_series():
    hc = Config().health
    assert hc.query("activity") == ('DCGM_FI_PROF_GR_ENGINE_ACTIVE{job="dcgm-exporter"} or '
                                    'DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"} / 100')
    assert all('{job="dcgm-exporter"}' in hc.query(f) for f in ("fb_used", "fb_free", "xid"))
    custom = Config(health={"exporter_selector": 'job="dcgm", cluster=~"eu-.*"'}).health
    assert custom.query("xid") == 'DCGM_FI_DEV_XID_ERRORS{job="dcgm", cluster=~"eu-.*"}'


@pytest.mark.security
@pytest.mark.parametrize("bad", ['job="x"} or vector(1) or up{a="b"', "job=dcgm", "", '{job="x"}', 'job="x" or 1'])
def test_an_exporter_selector_that_is_not_label_matchers_is_refused(bad):
    with pytest.raises(ValidationError, match="exporter_selector"):
        Config(health={"exporter_selector": bad})
