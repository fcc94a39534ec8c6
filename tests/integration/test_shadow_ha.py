"""Shadow records under HA (issue #27): only the acting replica records, in the lease's Redis (a real
redis-server), so the report after a takeover holds the old leader's cycles and the new one's."""

import json
import subprocess
import sys

import pytest

from daemon.config import parse_config
from daemon.service.backend import DaemonBackend
from daemon.service.wiring import build_runtime
from tests.conftest import REPO

pytestmark = pytest.mark.services


def config(redis_url: str, rid: str, tmp) -> dict:
    return {"cluster": {"gpus": 256},
            "source": {"kind": "simulator", "simulator": {"tenants": 16, "warmup_steps": 1500}},
            "forecaster": {"kind": "seasonal_naive"},
            "actuators": {"dry_run": True, "enabled": ["log"]},
            "state": {"path": str(tmp / f"{rid}.sqlite")}, "server": {"enabled": False},
            "ha": {"enabled": True, "backend": "redis", "redis_url": redis_url, "replica_id": rid, "lease_ttl_s": 5}}


def test_only_the_leader_records_and_a_takeover_keeps_the_records(r, redis_url, tmp_path):
    a = build_runtime(parse_config(config(redis_url, "a", tmp_path)))
    b = build_runtime(parse_config(config(redis_url, "b", tmp_path)))
    try:
        assert a.lease.tick() and not b.lease.tick()        # a leads, b stands by
        for _ in range(3):
            a.runner.run_once()
            b.runner.run_once()                              # b plans too, but is not the one whose plan stands
        assert r.xlen("gpuas:shadow") == 3
        a.lease.stop(release=True)                           # a clean hand-over
        assert b.lease.tick()
        for _ in range(2):
            b.runner.run_once()
        # b's console and report read every leader's records: a's 3 and its own 2
        recs = DaemonBackend(b, health=lambda: {}, submit_alerts=None).shadow_records(None)
        assert len(recs) == 5 and [x["cycle"] for x in recs] == [1, 2, 3, 4, 5]
        # nothing in either replica's own SQLite file: the records are in the shared store only
        assert a.store.shadow_records() == [] and b.store.shadow_records() == []
    finally:
        a.close()
        b.close()
    cfg = tmp_path / "b.toml"
    cfg.write_text(f"""
[state]
path = "{tmp_path / 'b.sqlite'}"
[ha]
enabled = true
backend = "redis"
redis_url = "{redis_url}"
""")
    out = subprocess.run([sys.executable, "-m", "daemon.cli", "-c", str(cfg), "shadow-report", "--json"], cwd=REPO,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cycles"] == 5


@pytest.mark.security
def test_a_deposed_leader_cannot_append_shadow_records(r, redis_url, tmp_path):
    # a leads; its lease is taken over by b while a still believes it leads (a paused past its TTL, woken before
    # its lease thread noticed): a's record is refused by the fencing check in the same step as the append, so the
    # report does not count the period twice
    a = build_runtime(parse_config(config(redis_url, "a", tmp_path)))
    b = build_runtime(parse_config(config(redis_url, "b", tmp_path)))
    try:
        assert a.lease.tick() and not b.lease.tick()
        a.runner.run_once()
        assert r.xlen("gpuas:shadow") == 1
        r.delete("gpuas:leader")                            # a's lease lapsed while it was paused
        assert b.lease.tick() and b.lease.token > a.lease.token
        assert a.lease.is_leader()                          # a's own view has not caught up yet
        a.runner.run_once()                                 # a's cycle: it acts as leader, but writes no record
        b.runner.run_once()
        assert r.xlen("gpuas:shadow") == 2
        recs = DaemonBackend(b, health=lambda: {}, submit_alerts=None).shadow_records(None)
        assert [x["cycle"] for x in recs] == [1, 1]         # a's first cycle, b's first: nothing from a's second
    finally:
        a.close()
        b.close()


@pytest.mark.security
def test_the_shadow_stream_is_trimmed_by_age_too(r, redis_url, tmp_path):
    # records older than state.shadow_keep_days go at the next append, as in the SQLite store (a count alone let
    # large records pile up for months in the lease's Redis). Stream ids are Redis's clock in ms: entries
    # written "two days ago" and "an hour ago" are given those ids.
    from daemon.state.store import pack

    cfg = config(redis_url, "a", tmp_path)
    cfg["state"]["shadow_keep_days"] = 1.0
    a = build_runtime(parse_config(cfg))
    try:
        sec, usec = r.time()
        now_ms = sec * 1000 + usec // 1000
        old, recent = f"{now_ms - 2 * 86_400_000}-0", f"{now_ms - 3_600_000}-0"
        for sid in (old, recent):
            r.xadd("gpuas:shadow", {"r": pack({"cycle": 0, "seen_at": "2026-01-01T00:00:00Z"})}, id=sid)
        assert a.lease.tick()
        a.runner.run_once()
        ids = [x[0].decode() for x in r.xrange("gpuas:shadow")]
        assert len(ids) == 2 and ids[0] == recent, ids     # the two-day-old entry is gone, the recent one stays
    finally:
        a.close()
