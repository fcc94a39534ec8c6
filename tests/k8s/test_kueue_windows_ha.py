"""A window's Kueue quota across an HA takeover (issue 39), on the real control plane with Kueue's manager and a real
redis-server lease: the quota one leader raised at the window's lead time is restored at the window's end by the
leader of then, whichever replica that is. A fresh replica that takes over writes every object it plans; a replica
that leads again after another one led (a leader paused past its lease, then elected again) must not skip the
write because it once sent the same spec itself: the other leader wrote another one since."""

import logging

import numpy as np
import pandas as pd
import pytest
import redis
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.kueue import KueueActuator
from daemon.config import KueueActuatorConfig, parse_config
from daemon.ha.fencing import FencedActuator
from daemon.ha.lease import RedisLease
from daemon.policy.engine import plan
from daemon.policy.state import ClusterState
from daemon.policy.types import PolicyMemory
from tests.support.k8s_cluster import kubeconfig
from tests.support.services import wait_for

pytestmark = [pytest.mark.xdist_group("k8s"), pytest.mark.services]


def _plans(tenants):
    """The plans before the window's lead time (13:00), in it (13:40) and after its end (15:10): the window holds
    8 GPUs for team-a from 13:30 to 15:00 UTC."""
    cfg = parse_config({"tenants": [t.model_dump() for t in tenants],
                        "windows": [{"name": "eod", "tenant": "team-a", "gpus": 8, "every": "daily", "at": "14:00",
                                     "timezone": "UTC", "duration_minutes": 60, "reclaim_before_minutes": 30}]})
    names = tuple(t.name for t in tenants)

    def at(hhmm):
        st = ClusterState(at=pd.Timestamp(f"2026-12-07T{hhmm}:00+00:00"), tenants=names,
                          tiers=tuple(t.tier for t in tenants), capacity=16, used=np.zeros(len(names)),
                          pending=np.zeros(len(names)))
        return plan(None, st, PolicyMemory(), cfg)

    before, during, after = at("13:00"), at("13:40"), at("15:10")
    assert "team-a" not in before.reservations and during.reservations["team-a"] == 8
    assert "team-a" not in after.reservations
    return before, during, after


def _replica(kueue, cfg, tenants, redis_url, name, api=None):
    """A replica: its own Kueue actuator (a new process: nothing sent yet), fenced by its own lease; `api`: its
    client (default the admin's)."""
    lease = RedisLease(redis.Redis.from_url(redis_url), replica_id=name, ttl_s=60)
    return lease, FencedActuator(KueueActuator(api or kueue.api(), cfg, tenants, dry_run=False), lease)


def _quota(kueue, act):
    cq = k8s.CustomObjectsApi(kueue.api()).get_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta1", "clusterqueues", act.tenant_queue("team-a"))
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    return int({f["name"]: f["resources"][0]["nominalQuota"] for f in flavors}[act.hold_flavor("team-a")])


def _held(kueue, nodes, act):
    core = k8s.CoreV1Api(kueue.api())
    return sorted(n for n in nodes if (core.read_node(n).metadata.labels or {}).get(act.cfg.hold_label) == "team-a")


def _cluster(kueue):
    """Two tenants (team-a with the window) and two 8-GPU nodes; the queues in a Cohort of their own (nothing of
    another test's), holds that shrink at once; and the plans before, in and after the window."""
    tenants, ns, nodes = kueue.tenants({"team-a": "normal", "team-high": "high"})
    uid = ns["team-a"][-8:]
    cfg = KueueActuatorConfig(queue_prefix=f"q{uid}", cohort=f"c{uid}", hold_shrink_delay_s=0)
    return tenants, nodes, cfg, _plans(tenants)


def _dies(r):
    """The leader dies without a clean stop (kill -9): its lease key lapses (deleted here, as its TTL would)."""
    r.delete("gpuas:leader")


def test_the_quota_a_dead_leader_raised_for_a_window_is_restored_at_its_end_by_the_new_leader(kueue, r, redis_url):
    tenants, nodes, cfg, (before, during, after) = _cluster(kueue)
    try:
        lease_a, a = _replica(kueue, cfg, tenants, redis_url, "a")
        assert lease_a.tick() and lease_a.token == 1
        assert a.apply(before).ok
        rep = a.apply(during)                                   # the lead time: the window's quota and nodes
        assert rep.ok, rep.errors
        assert _quota(kueue, a) == 8 and len(_held(kueue, nodes, a)) == 1
        _dies(r)
        lease_b, b = _replica(kueue, cfg, tenants, redis_url, "b")
        assert lease_b.tick() and lease_b.token == 2
        assert a.apply(after).fenced                            # the old leader's stale token is refused
        assert _quota(kueue, a) == 8
        rep = b.apply(after)                                    # the window's end, planned by the new leader
        assert rep.ok, rep.errors
        assert _quota(kueue, b) == 0 and _held(kueue, nodes, b) == []
        assert {e["token"] for e in lease_b.ledger() if e["holder"] == "b"} == {2}   # every write of b's fenced
    finally:
        kueue.delete_nodes(nodes)


def test_a_replica_leading_again_rewrites_the_quota_another_leader_changed_since_it_led(kueue, r, redis_url):
    """The stale-cache case: a sent the plan before the window (quota 0), lost the lease (paused), b raised the
    window's quota at its lead time and died in the window; a leads again at the window's end and plans quota 0,
    the spec it once sent. Before, a skipped that write (its record of what it sent said 0) and the window's
    quota stayed raised after the window, its nodes released: the tenant's queue kept 8 GPUs of quota on no node."""
    tenants, nodes, cfg, (before, during, after) = _cluster(kueue)
    try:
        lease_a, a = _replica(kueue, cfg, tenants, redis_url, "a")
        assert lease_a.tick()
        assert a.apply(before).ok and _quota(kueue, a) == 0
        _dies(r)                                                # a paused past its lease
        assert not lease_a.tick()                               # it notices: it stands by
        lease_b, b = _replica(kueue, cfg, tenants, redis_url, "b")
        assert lease_b.tick()
        assert b.apply(during).ok and _quota(kueue, b) == 8 and len(_held(kueue, nodes, b)) == 1
        _dies(r)                                                # b dies in the window
        assert lease_a.tick() and lease_a.token == 3            # a leads again
        rep = a.apply(after)
        assert rep.ok, rep.errors
        assert _held(kueue, nodes, a) == []
        assert _quota(kueue, a) == 0, "the window's quota stayed raised after the window's end"
    finally:
        kueue.delete_nodes(nodes)


@pytest.fixture
def limited(kueue, tmp_path):
    """(client, allow): a ServiceAccount's client that may write Kueue's objects, and read nodes and pods (and
    patch nodes) while allow(True); after allow(False) the API server's RBAC refuses its node reads (403), its
    Kueue writes still go through."""
    ns = kueue.namespace("sa")
    name = f"gpuas-test-replica-{ns[-8:]}"
    core, rbac = k8s.CoreV1Api(kueue.api()), k8s.RbacAuthorizationV1Api(kueue.api())

    def role(nodes: bool) -> dict:
        rules = [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["*"], "verbs": ["*"]}]
        if nodes:
            rules.append({"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "patch"]})
        return {"metadata": {"name": name}, "rules": rules}

    core.create_namespaced_service_account(ns, {"metadata": {"name": "replica"}})
    rbac.create_cluster_role(role(True))
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "replica", "namespace": ns}]})
    tok = core.create_namespaced_service_account_token("replica", ns, k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
    api = kueue.api(kubeconfig(tmp_path / "sa.kubeconfig", kueue.server, kueue.tmp / "ca.crt",
                               token=tok.status.token))

    def reads_nodes() -> bool:
        try:
            k8s.CoreV1Api(api).list_node(limit=1)
            return True
        except ApiException as exc:
            if exc.status != 403:
                raise
            return False

    def allow(on: bool) -> None:
        rbac.replace_cluster_role(name, role(on))
        wait_for(lambda: reads_nodes() == on, timeout=30, what=f"node reads {'allowed' if on else 'refused'}")

    try:
        wait_for(reads_nodes, timeout=30, what="the ServiceAccount's binding in force")
        yield api, allow
    finally:
        api.close()
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def _quotas(kueue, cfg) -> dict[str, dict]:
    """The spec of every ClusterQueue and Cohort of the test's tree (by name): the quotas."""
    custom = k8s.CustomObjectsApi(kueue.api())
    return {o["metadata"]["name"]: o["spec"] for plural in ("clusterqueues", "cohorts")
            for o in custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta1", plural)["items"]
            if o["metadata"]["name"].startswith(cfg.queue_prefix)}


def test_a_replica_leading_again_writes_no_quota_from_its_old_terms_holds(kueue, r, redis_url, limited, caplog):
    """a held team-a's window (8 GPUs on one node) in term 1, paused; b ended the window in term 2 (nodes and
    quota released) and died; a leads again in term 3 and cannot read the nodes (RBAC refuses). Before, a wrote the
    quotas from term 1's holds (team-a's hold quota 8 again, on no held node); now it writes no quota until it has
    read the nodes in this term, and says why once."""
    api, allow = limited
    tenants, nodes, cfg, (before, during, after) = _cluster(kueue)
    try:
        lease_a, a = _replica(kueue, cfg, tenants, redis_url, "a", api)
        assert lease_a.tick() and lease_a.token == 1
        rep = a.apply(during)
        assert rep.ok, rep.errors
        assert _quota(kueue, a) == 8 and len(_held(kueue, nodes, a)) == 1
        _dies(r)
        assert not lease_a.tick()
        lease_b, b = _replica(kueue, cfg, tenants, redis_url, "b")
        assert lease_b.tick() and lease_b.token == 2
        rep = b.apply(after)
        assert rep.ok, rep.errors
        assert _quota(kueue, b) == 0 and _held(kueue, nodes, b) == []
        _dies(r)
        allow(False)                                            # a's node reads are refused from now on
        assert lease_a.tick() and lease_a.token == 3
        quotas = _quotas(kueue, cfg)
        with caplog.at_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue"):
            for _ in range(2):
                rep = a.apply(after)
                assert any("cannot read nodes/pods: 403" in e for e in rep.errors), rep.errors
                assert _quota(kueue, a) == 0, "the quota was written from the holds of a's earlier term"
                assert _quotas(kueue, cfg) == quotas
        said = [rec.getMessage() for rec in caplog.records if "no ClusterQueue or Cohort quota" in rec.getMessage()]
        assert len(said) == 1 and "\n" not in said[0], said
        assert "since it began to lead (node holds: cannot read nodes/pods: 403 Forbidden)" in said[0]
        allow(True)                                             # read in this term: the quotas follow the nodes
        rep = a.apply(during)
        assert rep.ok, rep.errors
        assert _quota(kueue, a) == 8 and len(_held(kueue, nodes, a)) == 1
    finally:
        kueue.delete_nodes(nodes)


def test_a_new_process_that_cannot_read_the_nodes_writes_no_quota_from_none_held(kueue, r, redis_url, limited):
    """b holds team-a's window and dies; c, a new process, leads and cannot read the nodes. Before, c wrote the
    quotas as if nothing were held (team-a's hold quota 0 beside its held node, the unheld GPUs all the others');
    now the quotas b wrote stay until c has read the nodes."""
    api, allow = limited
    tenants, nodes, cfg, (before, during, after) = _cluster(kueue)
    try:
        lease_b, b = _replica(kueue, cfg, tenants, redis_url, "b")
        assert lease_b.tick()
        rep = b.apply(during)
        assert rep.ok, rep.errors
        assert _quota(kueue, b) == 8 and len(_held(kueue, nodes, b)) == 1
        _dies(r)
        allow(False)
        lease_c, c = _replica(kueue, cfg, tenants, redis_url, "c", api)
        assert lease_c.tick() and lease_c.token == 2
        quotas = _quotas(kueue, cfg)
        rep = c.apply(during)
        assert any("cannot read nodes/pods: 403" in e for e in rep.errors), rep.errors
        assert _quota(kueue, c) == 8, "a new process wrote team-a's hold quota from no held GPU"
        assert _quotas(kueue, cfg) == quotas and len(_held(kueue, nodes, c)) == 1
    finally:
        kueue.delete_nodes(nodes)
