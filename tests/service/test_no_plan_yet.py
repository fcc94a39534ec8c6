"""A daemon whose source is down from its first cycle (the README's minimal config, no Prometheus reachable) has no
plan and no snapshot: it says so ("no good plan yet"), not that a last good plan is too old, and it makes up no
cluster. The README's config does not set cluster.gpus, so the capacity, the high tier's static pool and the other
tiers' quotas are unknown: the cycle line reads cap=?, not the default's 1024, and no actuator is given the plan
(sized from the default, it was a quota of 820 GPUs per non-high tenant for the Kubernetes actuator; sized 0, every
Kueue queue's quota 0). Where the config does say cluster.gpus, that is the static pool's basis, as before."""

import logging

from daemon.config import Config, ServerConfig, SimulatorConfig, SourceConfig
from daemon.service.loop import Daemon, summary_line
from daemon.service.wiring import build_runtime
from daemon.sources.base import SourceError


class Down:
    def collect(self, n):
        raise SourceError("prometheus http://prometheus.monitoring:9090: Name or service not known")


def daemon(tmp_path, **cluster) -> Daemon:
    cfg = Config(cluster=cluster, tenants=[{"name": "llm-serving", "tier": "high"},
                                           {"name": "research-batch", "tier": "low"}],
                 source=SourceConfig(simulator=SimulatorConfig(seed=5, tenants=4, warmup_steps=200)),
                 state={"path": tmp_path / "state.sqlite"}, forecaster={"model_dir": tmp_path / "models"},
                 server=ServerConfig(port=0, webhook_token="t0ken-for-tests-only"))
    d = Daemon(build_runtime(cfg), serve_http=False)
    d.runtime.runner.source = Down()
    return d


def test_a_source_down_from_the_start_makes_up_no_cluster_and_says_no_plan_yet(tmp_path, caplog):
    d = daemon(tmp_path, gpus_per_node=8)
    with caplog.at_level(logging.WARNING, logger="gpu_autoscaler"):
        d.cycle()
    res = d.last_result
    p = res.plan
    assert res.outcome == "source_error" and p.stale and p.preemptions == ()
    assert p.capacity == 0 and p.high_pool == 0 and p.quotas == {} and p.reservations == {}
    assert res.reports == []   # no actuator sees it (Kueue would read capacity 0 as every queue's quota 0)
    assert "no good plan yet" in p.notes[0] and "> max" not in p.notes[0], p.notes
    assert "1024" not in p.notes[0] and "204" not in p.notes[0], p.notes
    line = summary_line(res)
    assert " cap=? " in line and "cap=1024" not in line, line
    assert line.split()[1].endswith("+00:00") and len(line.split()[1]) == len("2026-12-07T16:23:15+00:00"), line
    reason = d.health()["reason"]
    assert "no good plan yet" in reason and "older than" not in reason, reason
    d.runtime.close()


def test_a_configured_cluster_size_still_gives_the_static_pool(tmp_path):
    d = daemon(tmp_path, gpus=256, gpus_per_node=8)
    d.cycle()
    p = d.last_result.plan
    assert p.capacity == 256 and p.high_pool == 51 and p.quotas == {"research-batch": 205}
    assert d.last_result.reports   # applied, as before
    assert "no good plan yet" in p.notes[0] and "51 GPUs for the high tier" in p.notes[0], p.notes
    d.runtime.close()


def test_metrics_before_any_snapshot_are_unknown_not_zero_load(tmp_path):
    """gpuas_cluster_load_ratio 0.0 reads as an idle cluster (missing data is never zero load): before the first
    snapshot the load, the capacity and the data's staleness are NaN, as the forecast's unscored figures are."""
    from prometheus_client import generate_latest

    d = daemon(tmp_path, gpus_per_node=8)
    d.cycle()
    text = generate_latest(d.runtime.metrics.registry).decode()
    for name in ("gpuas_cluster_load_ratio", "gpuas_cluster_capacity_gpus", "gpuas_data_staleness_seconds"):
        assert f"\n{name} NaN\n" in text, [ln for ln in text.splitlines() if ln.startswith(name)]
    assert "\ngpuas_source_up 0.0\n" in text
    d.runtime.close()
