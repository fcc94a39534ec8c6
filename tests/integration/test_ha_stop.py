"""HA: a clean stop of the leader keeps the scheduler's holds while another replica is alive to take over (a
rolling restart must not free held nodes for backfill); the last replica still releases them.

Two in-process daemons on a real redis-server, each driving its own simulated cluster plus a recording
actuator with the HoldsCapacity capability (fenced like every actuator under HA), so each call of
`release_holds` on the scheduler is counted, and it is in the fencing ledger too.
"""

import logging

import pytest

from daemon.actuators.base import ActionReport, HoldsCapacity
from daemon.config import parse_config
from daemon.ha.fencing import fence_all
from daemon.ha.lease import RedisLease
from daemon.service.loop import Daemon
from daemon.service.wiring import build_runtime
from tests.support.actuators import QuietActuator
from tests.support.services import wait_for

pytestmark = pytest.mark.services

SMALL = {"cluster": {"gpus": 128}, "source": {"kind": "simulator", "simulator": {"tenants": 8, "warmup_steps": 600}},
         "forecaster": {"kind": "seasonal_naive"}, "cycle": {"interval_s": 0.5}}


class RecordingHolds(QuietActuator):
    """An actuator that holds capacity on a scheduler: it records every release_holds."""

    name = "recording-holds"
    dry_run = False

    def __init__(self) -> None:
        self.released = 0

    def release_holds(self):
        self.released += 1
        return ActionReport(self.name, False, actions=["released every hold"])


def _daemon(tmp_path, redis_url, name):
    cfg = parse_config({**SMALL, "server": {"enabled": False}, "state": {"path": str(tmp_path / f"{name}.db")},
                        "ha": {"enabled": True, "redis_url": redis_url, "replica_id": name, "lease_ttl_s": 2}})
    rt = build_runtime(cfg)
    rec = RecordingHolds()
    rt.actuators += fence_all([rec], rt.lease)
    assert isinstance(rt.actuators[-1], HoldsCapacity)
    return Daemon(rt, serve_http=False), rec


def _released_in_ledger(r):
    return [(e["holder"], e["what"]) for e in RedisLease(r, replica_id="reader").ledger()
            if "release_holds" in e["what"]]


def test_leader_stop_keeps_holds_while_a_standby_runs_and_the_last_replica_releases(r, redis_url, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gpu_autoscaler.service")  # a clean stop says so at INFO
    lead, lead_rec = _daemon(tmp_path, redis_url, "lead")
    standby, standby_rec = _daemon(tmp_path, redis_url, "standby")
    started = []
    try:
        lead.start()
        started.append(lead)
        wait_for(lambda: lead.role() == "leader" and lead.cycles_done >= 1, what="lead leading", timeout=60)
        standby.start()
        started.append(standby)
        wait_for(lambda: standby.cycles_done >= 1, what="standby planning", timeout=60)
        assert standby.role() == "standby"

        lead.stop()                      # a rolling restart: the leader goes, the standby is alive
        started.remove(lead)
        assert lead_rec.released == 0
        assert standby.runtime.lease.peers() == []           # the stopped leader's beat went with it
        assert _released_in_ledger(r) == []
        kept = [m.getMessage() for m in caplog.records if "scheduler holds" in m.getMessage()]
        assert kept == ["stopping: keeping scheduler holds: HA: replica standby is alive and takes the lease over"]

        # the standby takes over at once (the lease was released) and, now the last replica, releases on stop
        wait_for(lambda: standby.role() == "leader", what="standby taking over", timeout=10)
        standby.stop()
        started.remove(standby)
        assert standby_rec.released == 1
        assert _released_in_ledger(r) == [("standby", "recording-holds: release_holds")]
        last = [m.getMessage() for m in caplog.records if "scheduler holds" in m.getMessage()][-1]
        assert last == "stopping: releasing scheduler holds: HA: no other replica is alive, this is the last one"
        assert {m.levelname for m in caplog.records if "scheduler holds" in m.getMessage()} == {"INFO"}
    finally:
        for d in started:
            d.stop()


def test_leader_stop_keeps_holds_when_it_cannot_tell_whether_it_is_the_last(tmp_path, caplog):
    """Not knowing is not 'last': with the lease's Redis gone, the holds are kept for whichever replica leads
    next (and not merely refused by the fence, which cannot check the token either)."""
    from tests.support.services import redis_server

    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.service")
    with redis_server(tmp_path) as (url, proc):
        lead, rec = _daemon(tmp_path, url, "lead")
        assert lead.runtime.lease.tick() and lead.role() == "leader"
        proc.kill()
        proc.wait()
        lead.stop()
    said = [m.getMessage() for m in caplog.records if "scheduler holds" in m.getMessage()]
    assert [m.levelname for m in caplog.records if "scheduler holds" in m.getMessage()] == ["WARNING"]
    assert len(said) == 1 and said[0].startswith("stopping: keeping scheduler holds: HA: cannot tell from Redis "
                                                 "whether another replica is alive")
    assert rec.released == 0
