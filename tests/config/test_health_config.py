"""[health] config: the exporter selector, partial action tables and the telemetry window's bound."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from daemon.config import Config


def test_the_default_queries_select_the_exporters_own_series():
    cfg = Config()
    hc, pc = cfg.health, cfg.source.prometheus
    assert pc.selects(hc.activity_query) == ('DCGM_FI_PROF_GR_ENGINE_ACTIVE{job="dcgm-exporter"} or '
                                             'DCGM_FI_DEV_GPU_UTIL{job="dcgm-exporter"} / 100')
    assert all('{job="dcgm-exporter"}' in pc.selects(getattr(hc, f"{f}_query")) for f in ("fb_used", "fb_free", "xid"))
    custom = Config(source={"prometheus": {"exporter_selector": 'job="dcgm", cluster=~"eu-.*"'}})
    got = custom.source.prometheus.selects(custom.health.xid_query)
    assert got == 'DCGM_FI_DEV_XID_ERRORS{job="dcgm", cluster=~"eu-.*"}'


def test_a_partial_action_table_keeps_the_defaults_for_the_other_tiers():
    from daemon.health.reclaim import HealthMemory, JobInfo, decide
    from daemon.health.types import Finding

    cfg = Config(health={"idle_actions": {"high": "requeue"}, "hung_actions": {"normal": "requeue"}})
    assert cfg.health.idle_actions == {"high": "requeue", "normal": "report", "low": "requeue"}
    assert cfg.health.hung_actions == {"high": "report", "normal": "requeue", "low": "requeue"}
    now = 1_800_000_000.0
    f = Finding("idle", "7", "slurm", None, ("n1:0",), now - 3600, now, 60.0, {}, "job 7 idle")
    d = decide([f], {"7": JobInfo("t", "normal", 1, True, 7200.0, ("n1",))}, cfg, HealthMemory(), now, 10.0, 1.0)
    assert d.outcomes[0].verdict == "report"


def test_a_telemetry_window_prometheus_cannot_return_is_refused_at_load():
    with pytest.raises(ValidationError, match="idle_action_minutes"):
        Config(source={"kind": "prometheus"}, health={"enabled": True, "idle_action_minutes": 1e7})
    with pytest.raises(ValidationError, match="11000"):
        Config(source={"kind": "prometheus"}, cycle={"resolution_s": 1},
               health={"enabled": True, "leak_window_minutes": 200})
    Config(source={"kind": "prometheus"}, health={"enabled": True, "idle_action_minutes": 10_000})  # 167 h at 60 s
