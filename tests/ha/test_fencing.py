"""Fencing per command: a replica that loses its lease half-way through a batch sends nothing more.

One apply or failover can run for minutes (three Slurm commands with a 10 s timeout per preemption), far
longer than the lease's safety margin, so the token is checked right before every command that changes the
cluster, not once per batch. On Slurm this is a real redis-server lease and the real slurmctld, with the
Slurm commands behind a wrapper that logs every changing command and hands the lease to another holder
(a SET of the lease key in Redis) while the Nth one runs; on Kubernetes the official client's requests are
counted at the capture server.
"""

import time

import pytest
import redis

from daemon.actuators.k8s.actuator import KubernetesActuator
from daemon.actuators.k8s.workloads import workload_id
from daemon.actuators.slurm.actuator import SlurmActuator
from daemon.config import (
    Config,
    KubernetesActuatorConfig,
    SimulatorConfig,
    SlurmActuatorConfig,
    SourceConfig,
    TenantConfig,
)
from daemon.ha.fencing import FencedActuator
from daemon.ha.lease import RedisLease
from daemon.policy.types import Notification, Plan, PolicyMemory, Preemption
from tests.actuators.test_k8s_actuator import BASE, _capture_servers, pod, served  # noqa: F401 (autouse fixture)
from tests.actuators.test_k8s_kueue import FakeCluster, kueue, writes
from tests.support.services import slurm_cluster, slurm_run, wait_for

pytestmark = pytest.mark.security

LOW = [TenantConfig(name="team-low", tier="low", slurm_account="acct-low", k8s_namespace="batch")]


def plan_for(*pre, quotas=None, reservations=None, capacity=8):
    return Plan(at="2026-01-01T00:00:00+00:00", capacity=capacity, load=1.0, high_pool=2,
                reservations=reservations or {}, quotas=quotas or {}, limits={}, preemptions=tuple(pre),
                notifications=(), stale=False, forecast_model="x", notes=(), memory=PolicyMemory())


class CountingFence:
    """A lease's `fence` that allows the first `allow` checks and refuses every one after (the lease lost)."""

    def __init__(self, allow: int) -> None:
        self.allow = allow
        self.asked: list[str] = []

    def fence(self, what, jobs=()):
        self.asked.append(what)
        if len(self.asked) <= self.allow:
            return True, ""
        return False, "fencing token 7 is stale or about to expire"

    def term(self):
        return 7


# ---- Kubernetes: the official client's requests, counted -------------------------------------------------
def test_kubernetes_apply_sends_no_write_after_the_fence_refuses():
    routes = dict(BASE)
    routes[("PUT", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler")] = (200, {})
    routes[("GET", r"/api/v1/namespaces/batch/pods/train-2")] = (200, pod("batch", "train-2", "gpu-autoscaler-low"))
    routes[("POST", r"/api/v1/namespaces/batch/pods/train-2/eviction")] = (201, {})
    api, cap = served(routes)
    fence = CountingFence(allow=1 + 4)  # the wrapper's own check, then 3 PriorityClasses and the quota
    act = FencedActuator(KubernetesActuator(api, KubernetesActuatorConfig(), LOW, dry_run=False), fence)
    rep = act.apply(plan_for(Preemption("batch/train-1", "team-low", 8, "gpu-node-7", "peak ahead"),
                             Preemption("batch/train-2", "team-low", 8, "gpu-node-7", "peak ahead"),
                             quotas={"team-low": 40}))
    sent = [r for r in cap.sent if r["method"] != "GET"]
    assert [(r["method"], r["path"].rsplit("/", 1)[-1]) for r in sent] == [
        ("POST", "priorityclasses")] * 3 + [("PUT", "gpu-autoscaler")]
    assert rep.fenced and any(e.startswith("fenced: fencing token 7 is stale") for e in rep.errors), rep.errors
    assert fence.asked[5] == "kubernetes: evict batch/train-1" and len(fence.asked) == 6   # refused: nothing more
    assert act.refused == 1


def test_kubernetes_failover_evicts_nothing_after_the_fence_refuses():
    routes = dict(BASE)
    for p in ("train-2", "train-3"):
        routes[("GET", rf"/api/v1/namespaces/batch/pods/{p}")] = (200, pod("batch", p, "gpu-autoscaler-low"))
        routes[("POST", rf"/api/v1/namespaces/batch/pods/{p}/eviction")] = (201, {})
    api, cap = served(routes)
    act = FencedActuator(KubernetesActuator(api, KubernetesActuatorConfig(), LOW, dry_run=False), CountingFence(2))
    rep = act.requeue(["batch/train-1", "batch/train-2", "batch/train-3"], "node gpu-node-7 failed")
    evictions = [r["path"] for r in cap.sent if r["method"] == "POST"]
    assert evictions == ["/api/v1/namespaces/batch/pods/train-1/eviction"]
    assert rep.fenced and rep.actions == ["evict batch/train-1 (grace 30 s)"], rep
    assert not act.inner._retry                 # not retried by this replica either: it may not act
    cordon = act.fence_node("gpu-node-7", "GPUNodeDown alert")
    assert cordon.fenced and not [r for r in cap.sent if r["method"] == "PATCH"]


def test_kubernetes_quota_delete_is_fenced_too():
    """The daemon stops (release_holds) and deletes our quota in each tenant namespace: a replica whose lease is
    lost between the call's check and the DELETE sends no DELETE (another leader may have written that quota)."""
    ours = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {
        "name": "gpu-autoscaler", "namespace": "batch", "labels": {"app.kubernetes.io/managed-by": "gpu-autoscaler"}},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}}
    routes = dict(BASE)
    routes[("GET", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler")] = (200, ours)
    routes[("DELETE", r"/api/v1/namespaces/batch/resourcequotas/gpu-autoscaler")] = (200, {})
    api, cap = served(routes)
    fence = CountingFence(allow=1)  # the wrapper's own check of release_holds; the DELETE's is refused
    act = FencedActuator(KubernetesActuator(api, KubernetesActuatorConfig(), LOW, dry_run=False), fence)
    rep = act.release_holds()
    assert rep.fenced and fence.asked[-1] == "kubernetes: delete ResourceQuota batch/gpu-autoscaler"
    assert not [r for r in cap.sent if r["method"] == "DELETE"]
    fence.allow = 10
    assert act.release_holds().ok and [r["method"] for r in cap.sent if r["method"] == "DELETE"] == ["DELETE"]


def test_kubernetes_cordon_and_each_event_are_checked_right_before_they_are_sent():
    """Past the wrapper's check of the call, the cordon's PATCH and each Event's POST are checked again right
    before they are sent (a notify sends up to 200 Events): a lease lost in between sends nothing more."""
    routes = dict(BASE)
    routes[("PATCH", r"/api/v1/nodes/gpu-node-7")] = (200, {"apiVersion": "v1", "kind": "Node",
                                                         "metadata": {"name": "gpu-node-7"}})
    routes[("POST", r"/api/v1/namespaces/batch/events")] = (201, {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "batch"},
        "involvedObject": {"kind": "Namespace", "name": "batch", "namespace": "batch"}})
    api, cap = served(routes)
    fence = CountingFence(allow=1)
    act = FencedActuator(KubernetesActuator(api, KubernetesActuatorConfig(), LOW, dry_run=False), fence)
    rep = act.fence_node("gpu-node-7", "GPUNodeDown alert")
    assert rep.fenced and fence.asked == ["kubernetes: fence_node gpu-node-7 GPUNodeDown alert",
                                          "kubernetes: cordon gpu-node-7"]
    assert not [r for r in cap.sent if r["method"] == "PATCH"]
    fence.asked, fence.allow = [], 2   # the call's check and the first Event's
    notes = [Notification("team-low", "throttled", "limited"), Notification("team-low", "preempted", "job 1")]
    rep = act.notify(notes)
    assert rep.fenced and len(fence.asked) == 3
    assert [r["method"] for r in cap.sent if r["path"].endswith("/events")] == ["POST"]


def test_kueue_apply_stops_holding_nodes_and_writing_queues_after_the_fence_refuses():
    c = FakeCluster()
    c.run("batch", "low-1", "n1", 8, "gpu-autoscaler-low")
    inner, cap, c = kueue(c)
    fence = CountingFence(allow=1 + 1)                     # the wrapper's check, then one node patch
    act = FencedActuator(inner, fence)
    rep = act.apply(plan_for(Preemption("batch/low-1", "batchy", 8, "n1", "peak ahead"),
                             reservations={"team-high": 12}, quotas={"team-a": 30, "batchy": 30}, capacity=56))
    assert [(r["method"], r["path"]) for r in writes(cap)] == [("PATCH", "/api/v1/nodes/n1")]
    assert c.held() == {"n1": "team-high"} and not c.objs    # no queue, no second node, no eviction
    assert rep.fenced and any("stale" in e for e in rep.errors)


def test_kueue_objects_are_checked_one_by_one_right_before_they_are_written():
    """With nothing to hold, a plan's writes are the Kueue objects (flavors, queues, quotas), each checked right
    before it is sent: the lease lost after the first is written sends no second one."""
    inner, cap, c = kueue(FakeCluster())
    fence = CountingFence(allow=1 + 1)                     # the wrapper's check, then one Kueue object
    act = FencedActuator(inner, fence)
    rep = act.apply(plan_for(quotas={"team-a": 30, "batchy": 30}, capacity=56))
    assert rep.fenced and len(writes(cap)) == 1 and len(c.objs) == 1
    assert fence.asked[1].startswith("kueue: apply ") and len(fence.asked) == 3


def test_kueue_start_up_sweep_deletes_nothing_once_the_lease_is_lost():
    """The first apply deletes our Kueue objects the configuration no longer names (sweep): each DELETE is checked
    right before it is sent."""
    c = FakeCluster()
    c.objs[("localqueues", "batch", "gone")] = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                                                "metadata": {"name": "gone", "namespace": "batch",
                                                             "labels": {"app.kubernetes.io/managed-by":
                                                                        "gpu-autoscaler"}}}
    inner, cap, c = kueue(c)
    fence = CountingFence(allow=1)                          # the wrapper's check only
    rep = FencedActuator(inner, fence).apply(plan_for(quotas={"team-a": 30, "batchy": 30}, capacity=56))
    assert rep.fenced and writes(cap) == [] and ("localqueues", "batch", "gone") in c.objs
    assert fence.asked[1] == "kueue: delete LocalQueue batch/gone"


def test_kueue_workload_estimates_are_written_only_under_the_lease():
    """show_eta is no call the wrapper checks (an estimate is advice, sent every cycle): each Workload's patch is
    checked right before it is sent, so a replica that lost its lease annotates nothing."""
    from tests.actuators.test_k8s_workloads import NOW, T, wl

    inner, cap, _c = kueue(FakeCluster())
    act = FencedActuator(inner, CountingFence(allow=0))
    inner.workloads.jobs([wl("a", ns="research")], ("team-a",), now=NOW)
    rows = [{"job_id": workload_id("research", "a"), "p50_s": 600.0, "p90_s": None, "basis": "time limit"}]
    rep = act.show_eta(rows, T)
    assert rep.fenced and rep.actions == [] and writes(cap) == []
    assert act.refused == 1


# ---- Slurm: the real slurmctld, a real redis-server lease taken over mid-batch ---------------------------
@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster() as s:
        yield s


def takeover_bin(tmp_path, redis_url, after: int):
    """A bin_dir of the real Slurm commands whose `scontrol` (any but `show`) and `scancel` log each call to
    the returned file and, while the `after`-th such command runs, give the lease key to another holder in
    the real redis-server (as a replica that won the lease after this one paused would hold it)."""
    port = redis.Redis.from_url(redis_url).connection_pool.connection_kwargs["port"]
    bin_dir, log = tmp_path / "bin", tmp_path / "changing.log"
    bin_dir.mkdir()
    log.touch()
    for b in ("squeue", "sinfo", "sbatch"):
        (bin_dir / b).symlink_to(f"/usr/bin/{b}")
    for b in ("scontrol", "scancel"):
        (bin_dir / b).write_text(f"""#!/bin/sh
verb=
for a in "$@"; do case "$a" in -*) ;; *) verb=$a; break;; esac; done
if [ "{b}" = scancel ] || [ "$verb" != show ]; then
  echo "{b} $*" >> {log}
  if [ "$(wc -l < {log})" -ge {after} ]; then redis-cli -p {port} set gpuas:leader 'thief#0|999' > /dev/null; fi
fi
exec /usr/bin/{b} "$@"
""")
        (bin_dir / b).chmod(0o755)
    return bin_dir, log


def low_jobs(slurm, n=3):
    ids = [slurm_run(slurm["env"], "sbatch", "--parsable", "--partition=low", "--account=acct-low", "--gres=gpu:2",
                     "--requeue", "-o", "/dev/null", "--wrap", "sleep 600").strip() for _ in range(n)]
    wait_for(lambda: all(state(slurm, j) == "RUNNING" for j in ids), what="jobs running", timeout=60)
    return ids


def state(slurm, jid):
    return slurm_run(slurm["env"], "squeue", "-h", "-j", jid, "-o", "%T", check=False).strip()


def leading(redis_url):
    lease = RedisLease(redis.Redis.from_url(redis_url), replica_id="a", ttl_s=60)
    assert lease.tick()
    return lease


@pytest.mark.services
def test_slurm_apply_sends_no_command_after_the_lease_is_lost_mid_batch(slurm, r, redis_url, tmp_path):
    bin_dir, log = takeover_bin(tmp_path, redis_url, after=3)
    ids = low_jobs(slurm)
    try:
        lease = leading(redis_url)
        inner = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, holds=False), LOW,
                              dry_run=False)
        act = FencedActuator(inner, lease)
        t0 = time.monotonic()
        rep = act.apply(plan_for(*(Preemption(j, "team-low", 2, slurm["node"], "peak ahead") for j in ids)))
        # annotate + requeue of the first job, the annotation of the second (the lease goes while it runs):
        # its requeue, and everything for the third, is never sent
        assert log.read_text().splitlines() == [
            f"scontrol update JobId={ids[0]} AdminComment=gpu-autoscaler: peak ahead", f"scontrol requeue {ids[0]}",
            f"scontrol update JobId={ids[1]} AdminComment=gpu-autoscaler: peak ahead"]
        assert rep.fenced and any(e.startswith("fenced: fencing token 1 is stale") for e in rep.errors), rep.errors
        assert time.monotonic() - t0 < 30
        wait_for(lambda: state(slurm, ids[0]) == "PENDING", what="first job requeued", timeout=20)
        assert [state(slurm, j) for j in ids[1:]] == ["RUNNING", "RUNNING"]
        # every command that went out was checked and written to the ledger first; the refused one was not
        whats = [e["what"] for e in lease.ledger()]
        assert (whats[0].startswith("slurm: apply plan") and len(whats) == 4
                and whats[2] == f"slurm: scontrol requeue {ids[0]}")
    finally:
        slurm_run(slurm["env"], "scancel", *ids, check=False)


@pytest.mark.services
def test_slurm_failover_sends_no_command_after_the_lease_is_lost_mid_batch(slurm, r, redis_url, tmp_path):
    from daemon.service.loop import Daemon
    from daemon.service.wiring import build_runtime

    bin_dir, log = takeover_bin(tmp_path, redis_url, after=2)
    ids = low_jobs(slurm)
    node = slurm["node"]
    slurm_run(slurm["env"], "scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=test: GPU gone")
    cfg = Config(cluster={"gpus": 64},
                 source=SourceConfig(simulator=SimulatorConfig(seed=1, tenants=4, warmup_steps=50)),
                 state={"path": tmp_path / "s.sqlite"}, forecaster={"model_dir": tmp_path / "m"})
    d = Daemon(build_runtime(cfg), serve_http=False)
    try:
        lease = leading(redis_url)
        inner = SlurmActuator(SlurmActuatorConfig(slurm_conf=slurm["conf"], bin_dir=bin_dir, holds=False), LOW,
                              dry_run=False)
        d.runtime.actuators = [FencedActuator(inner, lease)]
        out = d.handle_node_down(node, time.perf_counter(), "GPUNodeDown")
        # two annotations went out (the lease goes while the second runs); no third, no requeue, no drain
        assert [ln.split(" AdminComment=")[0] for ln in log.read_text().splitlines()] == [
            f"scontrol update JobId={ids[0]}", f"scontrol update JobId={ids[1]}"]
        assert any(e.startswith("fenced:") for e in out["errors"]), out
        time.sleep(1)
        assert [state(slurm, j) for j in ids] == ["RUNNING"] * 3
        assert not inner._requeue_retry
    finally:
        d.runtime.close()
        slurm_run(slurm["env"], "scancel", *ids, check=False)
        slurm_run(slurm["env"], "scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
