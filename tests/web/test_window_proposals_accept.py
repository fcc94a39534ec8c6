"""Accepting one proposed window does not take the others away while the proposals are computed again
(daemon/web/window_proposals.py).

Found on make run: after the accept button of tenant-0000-1315, the windows page said "computing from the
history" and tenant-0002-1315's accept answered 404 "no proposed window 'tenant-0002-1315' (the proposals moved
on)" for the minute the evidence's replay took, though the window it declares comes from the history alone."""

import datetime as dt
import threading

from daemon.config import Config
from daemon.web import window_proposals
from tests.support.services import wait_for


def _proposal(name, tenant):
    return {"name": name, "tenant": tenant, "window": {"name": name, "tenant": tenant, "gpus": 8, "every": "daily",
                                                         "at": "13:15", "duration_minutes": 60}}


def test_the_other_proposals_can_be_accepted_while_the_evidence_is_replayed_again(monkeypatch):
    release, calls = threading.Event(), []

    def compute(frame, cfg, declared, timezone):
        calls.append([w["name"] for w in declared])
        if len(calls) > 1:              # the second computation, after an accept: a replay still under way
            release.wait(60)
        return {"status": "ready", "timezone": timezone, "history_end": "2026-01-12 14:05:00+00:00",
                "computed_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                "proposals": [_proposal("a-1315", "a"), _proposal("b-1315", "b")]}

    monkeypatch.setattr(window_proposals, "compute", compute)
    declared: list[dict] = []
    props = window_proposals.WindowProposals(Config, lambda: list(declared), read=lambda cfg: None)
    try:
        assert props.get("UTC") == {"status": "computing"}
        wait_for(lambda: props.get("UTC")["status"] == "ready", what="the first proposals", timeout=30)
        declared.append(_proposal("a-1315", "a")["window"])       # a-1315 accepted: the windows in force changed
        assert props.get("UTC") == {"status": "computing"}        # the API says so (202)
        assert props.find("b-1315", "UTC") == _proposal("b-1315", "b")["window"]
        assert props.find("a-1315", "UTC") is None                # its tenant has a window now
        listed = props.latest("UTC")
        assert listed["recomputing"] and [p["name"] for p in listed["proposals"]] == ["b-1315"]
        assert props.latest("Europe/Paris")["status"] == "computing"   # never another time zone's
    finally:
        release.set()
    wait_for(lambda: props.get("UTC").get("status") == "ready" and "recomputing" not in props.latest("UTC"),
             what="the proposals computed again", timeout=30)
