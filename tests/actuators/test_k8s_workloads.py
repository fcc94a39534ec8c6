"""Kueue Workloads as pending jobs for the start-time estimate, and the annotations written back
(daemon/actuators/k8s/workloads.py), on Workload objects as the API server returns them. On the real control plane
with Kueue: tests/k8s/test_kueue_workload_eta.py."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import pandas as pd
import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from daemon.actuators.k8s.kueue import KueueActuator, QueueUnreadable
from daemon.actuators.k8s.workloads import OURS, P50, P90, REASON, Malformed, Workloads, workload_gpus, workload_id
from daemon.config import KueueActuatorConfig, TenantConfig
from daemon.policy.state import PRIORITY, ClusterState, Jobs
from daemon.service.eta import with_queued

NOW = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.timezone.utc)
T = NOW.timestamp()


def wl(name, ns="ns-a", gpus="4", count=2, queue="q", pclass=None, admitted=False, notes=None, **spec):
    body = {"metadata": {"name": name, "namespace": ns, "uid": f"u-{name}", "creationTimestamp": "2026-01-05T09:50:00Z",
                         "annotations": notes or {}},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": count, "template": {"spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}},
                               {"name": "side", "resources": {}}]}}}], **spec},
            "status": {"admission": {"clusterQueue": "cq"}} if admitted else {}}
    if pclass:   # a pod PriorityClass, as the API serves v1beta2's priorityClassRef at v1beta1
        body["spec"]["priorityClassName"] = pclass
        body["spec"]["priorityClassSource"] = "scheduling.k8s.io/priorityclass"
    return body


def reader():
    return Workloads(None, {"ns-a": "team-a", "ns-b": "team-b"}, "nvidia.com/gpu", "q-low")


def test_waiting_workloads_are_pending_jobs_with_their_gpus_tier_and_wait():
    r = reader()
    jobs = r.jobs([wl("a"), wl("b", ns="ns-b", queue="q-low", count=1, gpus="8"),
                   wl("c", pclass="gpu-autoscaler-high"), wl("admitted", admitted=True),
                   wl("off", active=False), wl("other-ns", ns="kube-system"), wl("no-gpu", gpus="0")],
                  ("team-a", "team-b"), now=NOW)
    assert jobs.ids.tolist() == [workload_id("ns-a", "a"), workload_id("ns-b", "b"), workload_id("ns-a", "c")]
    assert jobs.ids[0] == "ns-a/workload/a"
    assert jobs.gpus.tolist() == [8, 8, 8]                         # count x the GPUs each pod asks for
    assert jobs.tenant.tolist() == [0, 1, 0]
    assert jobs.priority.tolist() == [PRIORITY["normal"], PRIORITY["low"], PRIORITY["high"]]
    assert jobs.wait_s.tolist() == [600.0] * 3 and not jobs.running.any()


@pytest.mark.parametrize("body, field", [
    ({"spec": {"queueName": "q"}}, "spec.podSets is missing or empty"),
    ({"spec": {"podSets": []}}, "spec.podSets is missing or empty"),
    ({"spec": {"podSets": [{"count": "two", "template": {"spec": {"containers": []}}}]}}, "spec.podSets[0].count"),
    ({"spec": {"podSets": [{"count": 1, "template": {}}]}}, "spec.podSets[0].template.spec.containers"),
    ({"spec": {"podSets": [{"count": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "lots"}}}]}}}]}}, "'lots', not a quantity"),
])
def test_a_malformed_workload_names_the_field(body, field):
    with pytest.raises(Malformed, match=field.replace("[", r"\[").replace("]", r"\]")):
        workload_gpus(body, "nvidia.com/gpu")


def test_a_malformed_workload_is_one_line_and_skipped_once(caplog):
    r = reader()
    bad = wl("bad")
    del bad["spec"]["podSets"]
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        jobs = r.jobs([bad, wl("good")], ("team-a",), now=NOW)
        assert jobs.ids.tolist() == [workload_id("ns-a", "good")]
    assert [x.getMessage() for x in caplog.records] == [
        "Kueue Workload ns-a/bad skipped (no demand, no start-time estimate): spec.podSets is missing or empty"]


def test_annotations_are_written_first_then_only_when_moved_5_minutes_and_cleared_once_admitted():
    r = reader()
    r.jobs([wl("a")], ("team-a",), now=NOW)
    rows = [{"job_id": workload_id("ns-a", "a"), "p50_s": 600.0, "p90_s": None, "basis": "time limit"}]
    assert r.changes(rows, T) == [("ns-a", "a", {P50: "2026-01-05T10:10:00Z", P90: None, REASON: "time limit"})]
    written = {P50: "2026-01-05T10:10:00Z", REASON: "time limit"}
    r.jobs([wl("a", notes=written)], ("team-a",), now=NOW)
    assert r.changes([{**rows[0], "p50_s": 840.0}], T) == []              # 4 minutes: not rewritten
    assert r.changes([{**rows[0], "p50_s": 900.0}], T)[0][2][P50] == "2026-01-05T10:15:00Z"
    assert r.changes([{**rows[0], "p90_s": 1200.0}], T)[0][2][P90] == "2026-01-05T10:20:00Z"   # became known
    # unknown at first: the reason is written all the same
    r.jobs([wl("u")], ("team-a",), now=NOW)
    unknown = [{"job_id": workload_id("ns-a", "u"), "p50_s": None, "p90_s": None, "basis": "unknown: no basis"}]
    assert r.changes(unknown, T) == [("ns-a", "u", {P50: None, P90: None, REASON: "unknown: no basis"})]
    b = wl("b", admitted=True)
    b["status"]["conditions"] = [{"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-05T10:07:00Z"}]
    r.jobs([wl("a", admitted=True, notes=written), b], ("team-a",), now=NOW)
    assert r.changes(rows, T) == [("ns-a", "a", dict.fromkeys(OURS))]     # b carries none of ours: left alone
    assert r.started == {workload_id("ns-a", "b"): T + 420}               # when b was admitted: its start


def test_queued_jobs_join_the_state_for_the_estimator_only():
    accepts = np.empty(1, dtype=object)
    accepts[0] = ("a100",)
    pods = Jobs(np.array(["ns-a/p"], dtype=object), np.array([0]), np.array([4]), np.array([1], dtype=np.int8),
                np.array([True]), np.array([60.0]), np.array([0.0]), np.array(["n1"], dtype=object), accepts=accepts)
    st = ClusterState(at=pd.Timestamp(NOW), tenants=("team-a",), tiers=("normal",), capacity=8,
                      used=np.array([4.0]), pending=np.array([0.0]), jobs=pods)
    q = reader().jobs([wl("a")], ("team-a",), now=NOW)
    out = with_queued(st, [q, Jobs.empty()])
    assert out.jobs.ids.tolist() == ["ns-a/p", "ns-a/workload/a"] and out.pending.tolist() == [8.0]
    assert out.jobs.accepts.tolist() == [("a100",), ()]                    # a Workload takes any type
    assert st.pending.tolist() == [0.0] and len(st.jobs) == 1              # the plan's state is not changed
    assert with_queued(st, [Jobs.empty()]) is st


def test_a_dry_run_reports_a_workloads_estimate_once_until_it_moves():
    r = reader()
    r.jobs([wl("a")], ("team-a",), now=NOW)
    rows = [{"job_id": workload_id("ns-a", "a"), "p50_s": 600.0, "p90_s": None, "basis": "time limit"}]
    assert len(r.changes(rows, T, dry_run=True)) == 1
    r.jobs([wl("a")], ("team-a",), now=NOW)                               # nothing was written on it
    assert r.changes(rows, T, dry_run=True) == []
    assert r.changes([{**rows[0], "p50_s": 900.0}], T, dry_run=True)[0][2][P50] == "2026-01-05T10:15:00Z"
    r.jobs([wl("a", admitted=True, notes={REASON: "x"})], ("team-a",), now=NOW)
    assert r.changes([], T, dry_run=True) == [("ns-a", "a", dict.fromkeys(OURS))]
    assert r.changes([], T, dry_run=True) == []


def test_a_workload_list_the_api_refuses_is_one_line():
    class Refusing:
        def list_cluster_custom_object(self, *a, **k):
            raise ApiException(status=403, reason="Forbidden")

    act = KueueActuator(k8s.ApiClient(), KueueActuatorConfig(),
                        [TenantConfig(name="team-a", tier="normal")])
    act.workloads.custom = Refusing()
    with pytest.raises(QueueUnreadable) as e:
        act.queued_jobs(("team-a",))
    assert str(e.value) == "cannot list Kueue Workloads (kueue.x-k8s.io/v1beta1): 403 Forbidden"


@pytest.mark.security
def test_a_tenants_huge_gpu_quantity_leaves_the_other_workloads_estimated():
    """`nvidia.com/gpu: 1e19` is a whole quantity the API server takes (tests/k8s/test_hostile_quantities.py): x 10
    pods it overflowed the Jobs' int64 column, the read raised, and no start estimate was made for any tenant while
    that Workload waited. Read now as MAX_POD_GPUS per pod (more than any node has); a quantity with a suffix (1Ki)
    is its number."""
    from daemon.actuators.k8s.objects import MAX_POD_GPUS

    jobs = reader().jobs([wl("huge", gpus="1e19", count=10), wl("b", ns="ns-b", count=1, gpus="8"),
                          wl("ki", gpus="1Ki", count=1)], ("team-a", "team-b"), now=NOW)
    assert jobs.ids.tolist() == ["ns-a/workload/huge", "ns-b/workload/b", "ns-a/workload/ki"]
    assert jobs.gpus.tolist() == [10 * MAX_POD_GPUS, 8, 1024]


@pytest.mark.security
def test_a_quantity_with_a_vast_exponent_is_bounded_before_it_becomes_an_integer():
    """`1e999999999` parses as a Decimal; the whole-count check's int() of it built a billion-digit integer (the
    cycle's estimate held up for minutes: over 300 s here). Compared with MAX_POD_GPUS first now."""
    from daemon.actuators.k8s.objects import MAX_POD_GPUS, gpu_quantity

    assert workload_gpus(wl("vast", gpus="1e999999999", count=1), "nvidia.com/gpu") == MAX_POD_GPUS
    assert gpu_quantity("1e999999999") == MAX_POD_GPUS and gpu_quantity("1e400") == MAX_POD_GPUS


def test_a_workloads_gpus_in_an_init_container_or_a_sidecar_count_as_kueue_counts_them():
    """Kueue admits a podSet on its pods' effective request (containers plus sidecars, or the largest init container
    with the sidecars before it): a Workload asking for its GPUs in a sidecar read as 0 GPUs, no pending job, so its
    wait was counted by no estimate of the others' jobs behind it."""
    body = wl("w", gpus="0", count=2)
    spec = body["spec"]["podSets"][0]["template"]["spec"]
    spec["initContainers"] = [
        {"name": "s", "restartPolicy": "Always", "resources": {"limits": {"nvidia.com/gpu": "3"}}},
        {"name": "i", "resources": {"limits": {"nvidia.com/gpu": "5"}}}]
    assert workload_gpus(body, "nvidia.com/gpu") == 2 * 8   # the init container (5) runs beside the sidecar (3)
    spec["initContainers"][1]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    assert workload_gpus(body, "nvidia.com/gpu") == 2 * 5   # containers 2 + sidecar 3 over the init's 1 + 3
    assert reader().jobs([body], ("team-a", "team-b"), NOW).gpus.tolist() == [10]


def sets(*shape: tuple[int, int]) -> dict:
    """A waiting Workload of podSets of (pods, GPUs per pod), in that order."""
    body = wl("x")
    pod = body["spec"]["podSets"][0]
    body["spec"]["podSets"] = [{**pod, "name": f"s{i}", "count": c, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(g)}}}]}}} for i, (c, g) in enumerate(shape)]
    body["metadata"]["name"] = "-".join(f"{c}x{g}" for c, g in shape)
    return body


def test_a_waiting_workloads_shape_is_its_pods_which_may_share_a_node():
    """A gang of 4 pods of 8 is 4 parts of 8 that may share nodes (Jobs.nodes_asked, packed), not one 32-GPU job
    on one node; one pod is a one-node job as before. A master of 8 beside 3 workers of 8: 4 of 8. Pods asking
    different GPUs: packed, largest first, into parts of the largest (a launcher of 8 and four workers of 1: two
    parts of 8, its GPUs 16); a podSet asking no GPU (an MPI launcher) needs no room."""
    jobs = reader().jobs([sets((4, 8)), sets((1, 8)), sets((1, 8), (3, 8)), sets((1, 8), (4, 1)),
                          sets((1, 0), (2, 4)), sets((1, 8), (2, 5), (1, 3))], ("team-a",), now=NOW)
    assert jobs.gpus.tolist() == [32, 8, 32, 16, 8, 24]
    assert jobs.nodes_asked.tolist() == [4, 1, 4, 2, 2, 3]
    assert jobs.packed.tolist() == [True, False, True, True, True, True]
    assert workload_gpus(sets((2, 4)), "nvidia.com/gpu") == 8


@pytest.mark.parametrize("shape, parts, size", [
    (((1, 8), (1, 6), (1, 2)), 2, 8),            # 8 | 6 + 2
    (((1, 2), (1, 6), (1, 1)), 2, 6),            # 6 | 2 + 1
    (((4, 1), (1, 6), (1, 3)), 3, 6),            # 13 GPUs: more than two parts of 6 hold
    (((5, 1), (1, 8), (2, 6)), 4, 8),            # 25 GPUs: more than three parts of 8 hold
    (((2, 1), (1, 6), (2, 8)), 3, 8),            # 8 | 8 | 6 + 1 + 1
    (((2, 4), (1, 7), (2, 2)), 3, 7),            # 7 | 4 + 2 | 4 + 2
    (((1, 4), (2, 1), (2, 3)), 3, 4),            # 4 | 3 + 1 | 3 + 1, the small pods listed before the 3s
    (((2, 4), (3, 6), (2, 3), (6, 16)), 8, 16),  # six of 16 | 6 + 6 + 4 | 6 + 4 + 3 + 3
    (((1, 3), (1, 13), (2, 1), (2, 2)), 2, 13),  # 13 | 3 + 1 + 1 + 2 + 2
], ids=lambda v: "+".join(f"{c}x{g}" for c, g in v) if isinstance(v, tuple) else str(v))
def test_pods_of_different_gpus_are_packed_into_as_few_parts_as_hold_them_on_shapes_worked_by_hand(shape, parts, size):
    """Each shape by hand (the comment: the parts, or why no fewer hold its pods): the packing puts every pod whole
    in a part of the largest pod's GPUs, and on these no more parts than needed. A part too many is a gang's GPUs
    over-asked (its estimate waits for room it does not need); one too few is room its pods do not fit in (an
    estimate too soon). Mutants of _parts that broke the order (as listed, smallest first, the roomiest part first),
    the room a part keeps (a part's rest dropped, a full part's room or a partial one's counted as a whole one's) or
    the pods a part takes (all of a room's parts, one part per room, a partial part with no room) each got one of
    these wrong, and none the shapes before."""
    from daemon.actuators.k8s.workloads import workload_shape

    assert workload_shape(sets(*shape), "nvidia.com/gpu") == (parts * size, parts, size)


def test_a_podset_of_no_pods_asks_no_room_and_is_no_malformed_workload():
    """Kueue 0.17's PodSet count has minimum 0 (a JobSet's replicated job scaled to none): a launcher podSet of 0
    pods of 8 beside 4 workers of 1 is 4 GPUs in 4 parts of 1, not parts of 8 (the absent launcher's size) and not
    a Workload skipped as malformed (no estimate)."""
    from daemon.actuators.k8s.workloads import workload_shape

    assert workload_shape(sets((0, 8), (4, 1)), "nvidia.com/gpu") == (4, 4, 1)
    jobs = reader().jobs([sets((0, 8), (4, 1))], ("team-a",), now=NOW)
    assert jobs.gpus.tolist() == [4] and jobs.nodes_asked.tolist() == [4] and jobs.packed.tolist() == [True]


def test_a_workload_priority_class_named_like_the_high_class_is_not_the_high_tier():
    """A normal tenant's Workload on a WorkloadPriorityClass named gpu-autoscaler-high (the admission rule refuses
    that name only as a pod PriorityClass, and no such WorkloadPriorityClass need exist) read as high-tier work,
    served in the estimate before every other tenant's; it is its queue's tier now. The pod class still counts."""
    r = reader()
    forged = wl("jump", pclass="gpu-autoscaler-high")
    forged["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    low = wl("low-jump", queue="q-low", pclass="gpu-autoscaler-high")
    low["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    jobs = r.jobs([forged, low, wl("real", pclass="gpu-autoscaler-high")], ("team-a",), now=NOW)
    assert jobs.priority.tolist() == [PRIORITY["normal"], PRIORITY["low"], PRIORITY["high"]]


def test_a_workload_kueue_will_never_admit_is_no_pending_job_and_loses_our_estimate():
    """A Workload without a queue (Kueue leaves it alone) or one Kueue found inadmissible (its LocalQueue missing or
    stopped, its ClusterQueue inactive) waits for no quota: read as pending, a tenant's such Workload of the whole
    cluster was served in the estimate ahead of later work, every other tenant's estimate after it. An estimate it
    carries from when it waited is cleared."""
    r = reader()
    noq = wl("no-queue", queue="")
    gone = wl("gone-queue", queue="nope", notes={P50: "2026-01-05T11:00:00Z", REASON: "x"})
    gone["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Inadmissible",
                                      "message": "LocalQueue nope doesn't exist"}]}
    waiting = wl("waits")
    waiting["status"] = {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                         "message": "couldn't assign flavors to pod set main: insufficient quota"}]}
    jobs = r.jobs([noq, gone, waiting], ("team-a",), now=NOW)
    assert jobs.ids.tolist() == [workload_id("ns-a", "waits")]
    assert r.changes([], T) == [("ns-a", "gone-queue", dict.fromkeys(OURS))]


def test_the_malformed_workloads_remembered_are_those_still_listed():
    """Each malformed Workload is said once while it is listed; one created and deleted every second (each under a
    new uid) was remembered for as long as the daemon ran."""
    r = reader()
    for i in range(50):
        bad = wl(f"bad-{i}")
        del bad["spec"]["podSets"]
        r.jobs([bad, wl("good")], ("team-a",), now=NOW)
    assert r._said == {"u-bad-49"}


@pytest.mark.security
def test_a_namespace_s_waiting_workloads_are_read_up_to_the_bound_longest_waiting_first(caplog):
    """A tenant's Workloads were all jobs of every estimate, each cycle, and all held at once from the list. Of one
    namespace at most max_per_namespace are read, the longest waiting; the rest are said in one line while their
    number stays; another tenant's are all read."""
    r = Workloads(None, {"ns-a": "team-a", "ns-b": "team-b"}, "nvidia.com/gpu", "q-low", max_per_namespace=3)
    many = [wl(f"w{i}") for i in range(6)]
    for i, w in enumerate(many):   # w0 made last, w5 first: w5, w4, w3 waited longest
        w["metadata"]["creationTimestamp"] = f"2026-01-05T09:{50 - i:02d}:00Z"
    caplog.set_level(logging.INFO, logger="gpu_autoscaler.actuator.kueue.workloads")
    for _ in range(2):
        jobs = r.jobs(iter([*many, wl("b", ns="ns-b")]), ("team-a", "team-b"), now=NOW)
        assert jobs.ids.tolist() == [workload_id("ns-a", f"w{i}") for i in (3, 4, 5)] + [workload_id("ns-b", "b")]
        assert set(r.queued) == set(jobs.ids.tolist())
    assert [x.getMessage() for x in caplog.records] == [
        "Kueue Workloads: 3 waiting in namespace ns-a past the 3 read for the start-time estimates (those Kueue "
        "serves first are read: priority, then the longest waiting; the rest have no estimate)"]


class Paged:
    """A Workload list served in pages of 50, the fourth refused (410), which counts the Workloads of earlier pages
    still alive each time a page is asked for (`alive`): held pages show there."""

    def __init__(self, ns: str = "ns-a") -> None:
        self.ns, self.pages, self.alive, self.refs = ns, [], [], []

    def list_cluster_custom_object(self, *a, _continue=None, **k):
        import gc
        import weakref

        class Doc(dict):   # a Workload as the client returns it, which a weak reference can watch
            pass
        gc.collect()
        self.alive.append(sum(ref() is not None for ref in self.refs))
        self.pages.append(_continue)
        if _continue == "3":
            raise ApiException(status=410, reason="Gone")
        items = [Doc(wl(f"p{_continue or 0}-{i}", ns=self.ns)) for i in range(50)]
        self.refs.extend(weakref.ref(x) for x in items)
        return {"items": items, "metadata": {"continue": str(int(_continue or 0) + 1)}}


def test_the_workloads_are_read_a_page_at_a_time():
    """The list was held whole (every page's Workloads, each up to the apiserver's object size) before one was read:
    now each page is read into the jobs as it comes and let go before the next is asked for. A page refused midway is
    the one line of a list refused."""
    act = KueueActuator(k8s.ApiClient(), KueueActuatorConfig(), [TenantConfig(name="team-a", tier="normal",
                                                                              k8s_namespace="ns-a")])
    act.workloads.custom = paged = Paged()
    with pytest.raises(QueueUnreadable, match="410 Gone"):
        act.queued_jobs(("team-a",))
    assert paged.pages == [None, "1", "2", "3"]
    assert paged.alive[1:] == [1, 1, 1]   # the Workload being read, not the pages before (old: 50, 100, 150)


@pytest.mark.security
def test_a_cycle_sends_at_most_max_patches_taking_the_namespaces_in_turn(monkeypatch):
    """A tenant's 10,000 new Workloads were 10,000 fenced patches in one cycle, the other tenants' estimates after
    them. With 4 a cycle: ns-b's one Workload is among the first 4 (the namespaces in turn), and ns-a's rest follow
    in later cycles, each once, in the scheduler's order (a dry run: what it said it would write)."""
    from daemon.actuators.k8s import workloads
    monkeypatch.setattr(workloads, "MAX_PATCHES", 4)
    r = reader()
    items = [wl(f"a{i}") for i in range(10)] + [wl("b", ns="ns-b")]
    r.jobs(items, ("team-a", "team-b"), now=NOW)
    rows = [{"job_id": workload_id(w["metadata"]["namespace"], w["metadata"]["name"]), "p50_s": 600.0,
             "p90_s": None, "basis": "time limit"} for w in items]
    sent = [[(ns, name) for ns, name, _ in r.changes(rows, T, dry_run=True)] for _ in range(4)]
    assert sent[0] == [("ns-a", "a0"), ("ns-b", "b"), ("ns-a", "a1"), ("ns-a", "a2")]
    assert sent[1] == [("ns-a", f"a{i}") for i in range(3, 7)]
    assert sent[2] == [("ns-a", f"a{i}") for i in range(7, 10)] and sent[3] == []
