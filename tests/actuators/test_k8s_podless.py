"""Which admitted Kueue Workloads the daemon says hold quota with no pod (daemon/actuators/k8s/podless.py); the real
Kueue case (a Job whose pods cannot be made) is tests/k8s/test_kueue_podless.py."""

from __future__ import annotations

import logging

from daemon.actuators.k8s.podless import Podless

JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")


def _wl(name: str, owner: tuple[str, str] | None, admitted: bool = True) -> dict:
    refs = [{"apiVersion": owner[0], "kind": owner[1], "name": name, "uid": f"owner-{name}"}] if owner else []
    return {"metadata": {"namespace": "a", "name": name, "uid": f"wl-{name}", "ownerReferences": refs},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
            "status": {"admission": {"clusterQueue": "q"}} if admitted else {}}


def test_only_workloads_whose_pods_name_their_owner_are_judged_and_each_is_said_once_after_the_wait(caplog):
    """A batch Job's, a pod's, a JobSet's and an ownerless admitted Workload with no live pod are said, once each and
    only after `after_s`; a Job's whose pod lives, a JobSet's whose pods live (they name it by the jobset-uid label:
    workloads.pod_owners), one not admitted, and a RayJob's (its pods are its RayCluster's, which the daemon does not
    tie to it) are not. The first reading judged every owner: a RayJob's running gang said to hold its quota for
    nothing."""
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
    now = [0.0]
    seen = Podless({"a": "team-a"}, "nvidia.com/gpu", after_s=600, clock=lambda: now[0])
    items = [_wl("job", ("batch/v1", "Job")), _wl("pod", ("v1", "Pod")), _wl("bare", None),
             _wl("lives", ("batch/v1", "Job")), _wl("waits", ("batch/v1", "Job"), admitted=False),
             _wl("set", JOBSET), _wl("set-runs", JOBSET), _wl("ray", ("ray.io/v1", "RayJob"))]
    owners = {("a", "owner-lives"), ("a", "owner-set-runs"), ("b", "owner-set")}   # another namespace's: no match
    for t in (0.0, 599.0, 600.0, 1200.0):
        now[0] = t
        assert len(list(seen.watch(items, owners))) == len(items)
        if t < 600:
            assert not caplog.records, caplog.records
    said = sorted(r.getMessage().split(" is admitted")[0] for r in caplog.records)
    assert said == [f"Kueue Workload a/{w}" for w in ("bare", "job", "pod", "set")], said
