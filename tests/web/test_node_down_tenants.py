"""The events page names the tenants a node failure hit (daemon/web/console/templates/events.html).

Found on make run: a GPUNodeDown alert posted to /alerts requeued tenant-0035's sim-699, and the operator's events
page listed it with an empty tenant column: the event names its tenants in `tenants` (a failure can hit several),
and the column read only `tenant`."""

import re

import numpy as np
import pandas as pd
from starlette.testclient import TestClient

from daemon.config import Config
from daemon.policy.state import ClusterState
from daemon.web.app import build_app
from daemon.web.backend import Snapshot
from tests.support.daemons import OP, T1
from tests.support.web_backend import SnapshotBackend, with_tokens

ROW = {"id": 90, "at": "2026-12-07T10:45:04+00:00", "kind": "node_down", "node": "sim-node-0005",
       "jobs": ["sim-699", "sim-700"], "tenants": ["tenant-0001", "tenant-0035"],
       "by_tenant": {"tenant-0001": ["sim-700"], "tenant-0035": ["sim-699"]}, "seconds": 0.0118, "errors": []}


class _Backend(SnapshotBackend):
    def events(self, limit=100, kind=None, tenant=None, before=None):
        return [ROW] if tenant in (None, *ROW["tenants"]) else []


def _client(token):
    cfg = with_tokens(Config(cluster={"gpus": 64}))
    st = ClusterState(pd.Timestamp("2026-01-12T13:36:00Z"), ("tenant-0001", "tenant-0035"), ("low", "low"), 64,
                      np.zeros(2), np.zeros(2))
    client = TestClient(build_app(_Backend(Snapshot(cfg=cfg, plan=None, state=st, cycle=1))))
    client.cookies.set("gpuas_token", token)
    return client


def _tenant_cells(page):
    """The tenant column of each event row."""
    rows = re.findall(r'<tr class="ev-[^"]*">(.*?)</tr>', page, re.S)
    return [re.sub(r"<[^>]+>", "", re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[3]).strip() for r in rows]


def test_the_events_page_names_the_tenants_a_node_failure_hit():
    page = _client(OP).get("/ui/events").text
    assert _tenant_cells(page) == ["tenant-0001, tenant-0035"], _tenant_cells(page)
    assert 'href="/ui/tenants/tenant-0035"' in page
    mine = _client(T1).get("/ui/events").text                   # a tenant: its own name only
    assert _tenant_cells(mine) == ["tenant-0001"] and "tenant-0035" not in mine
