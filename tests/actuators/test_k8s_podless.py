"""Which admitted Kueue Workloads the daemon says hold quota with no pod (daemon/actuators/k8s/podless.py); the real
Kueue case (a Job whose pods cannot be made) is tests/k8s/test_kueue_podless.py."""

from __future__ import annotations

import logging

from daemon.actuators.k8s.podless import Podless


def _wl(name: str, owner: tuple[str, str] | None, admitted: bool = True) -> dict:
    refs = [{"apiVersion": owner[0], "kind": owner[1], "name": name, "uid": f"owner-{name}"}] if owner else []
    return {"metadata": {"namespace": "a", "name": name, "uid": f"wl-{name}", "ownerReferences": refs},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
            "status": {"admission": {"clusterQueue": "q"}} if admitted else {}}


def test_only_workloads_whose_pods_name_their_owner_are_judged_and_each_is_said_once_after_the_wait(caplog):
    """A batch Job's, a pod's and an ownerless admitted Workload with no live pod are said, once each and only after
    `after_s`; a Job's whose pod lives, one not admitted, and a JobSet's (its pods are its child Jobs', which the
    daemon does not tie to it) are not. The first reading judged the JobSet's too: its running gang said to hold its
    quota for nothing."""
    caplog.set_level(logging.WARNING, logger="gpu_autoscaler.actuator.kueue.workloads")
    now = [0.0]
    seen = Podless({"a": "team-a"}, "nvidia.com/gpu", after_s=600, clock=lambda: now[0])
    items = [_wl("job", ("batch/v1", "Job")), _wl("pod", ("v1", "Pod")), _wl("bare", None),
             _wl("lives", ("batch/v1", "Job")), _wl("waits", ("batch/v1", "Job"), admitted=False),
             _wl("set", ("jobset.x-k8s.io/v1alpha2", "JobSet"))]
    owners = {"owner-lives"}
    for t in (0.0, 599.0, 600.0, 1200.0):
        now[0] = t
        assert len(list(seen.watch(items, owners))) == len(items)
        if t < 600:
            assert not caplog.records, caplog.records
    said = sorted(r.getMessage().split(" is admitted")[0] for r in caplog.records)
    assert said == ["Kueue Workload a/bare", "Kueue Workload a/job", "Kueue Workload a/pod"], said
