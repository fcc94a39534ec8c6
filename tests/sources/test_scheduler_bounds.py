"""The scheduler's view bounds what the metrics say (issue 36): nodes it does not list are not capacity, and a
tenant's demand above its own running jobs' GPUs is capped and reported, in the plan and the daemon's metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.policy.engine import plan
from daemon.policy.state import ClusterState, Jobs, Nodes
from daemon.policy.types import Plan, PolicyMemory
from daemon.service.telemetry import DaemonMetrics
from daemon.sources.scheduler_bounds import UNNAMED, bound_capacity, bound_demand, cap_demand, unlisted_line

pytestmark = pytest.mark.security


def nodes(**gpus: int) -> Nodes:
    n = len(gpus)
    return Nodes(names=np.array(list(gpus), dtype=object), gpus=np.array(list(gpus.values()), dtype=np.int64),
                 free=np.zeros(n, dtype=np.int64), draining=np.zeros(n, dtype=np.int64),
                 held_by=np.full(n, -1, dtype=np.int64))


def jobs(rows: list[tuple[int, int, bool]]) -> Jobs:
    """(tenant index, GPUs, running) per job."""
    t, g, r = (np.array(c) for c in zip(*rows)) if rows else (np.zeros(0, int),) * 3
    n = len(rows)
    return Jobs(ids=np.array([str(i) for i in range(n)], dtype=object), tenant=t.astype(np.int64),
                gpus=g.astype(np.int64), priority=np.ones(n, dtype=np.int8), running=r.astype(bool),
                runtime_s=np.zeros(n), wait_s=np.zeros(n), node=np.array(["n1"] * n, dtype=object))


def by_node(**gpus: float) -> list[tuple[dict[str, str], float]]:
    return [({"Hostname": n}, v) for n, v in gpus.items()]


def test_nodes_the_scheduler_does_not_list_are_not_capacity():
    cap, dropped = bound_capacity(by_node(n1=8, n2=8, **{f"forged-{i}": 80 for i in range(5)}), "Hostname",
                                  nodes(n1=8, n2=8))
    assert cap == 16 and dropped == {f"forged-{i}": 80 for i in range(5)}


def test_a_listed_node_counts_at_most_the_gpus_the_scheduler_gives_it():
    """Forged series may name a real node: it still holds only what the scheduler says (and a drained node, 0)."""
    cap, dropped = bound_capacity(by_node(n1=40, n2=8, n3=8), "Hostname", nodes(n1=8, n2=8, n3=0))
    assert cap == 16 and dropped == {"n1": 32, "n3": 8}


def test_fewer_gpus_than_the_scheduler_lists_stay_as_the_metrics_say():
    """An exporter that is down on a node: its GPUs are not reported healthy, the scheduler's count does not add
    them back."""
    assert bound_capacity(by_node(n1=8), "Hostname", nodes(n1=8, n2=8)) == (8, {})


def test_an_answer_without_node_names_is_bounded_by_the_schedulers_total():
    cap, dropped = bound_capacity([({}, 416.0)], "Hostname", nodes(n1=8, n2=8))
    assert cap == 16 and dropped == {UNNAMED: 400}
    assert bound_capacity([({}, 12.0)], "Hostname", nodes(n1=8, n2=8)) == (12, {})


def test_node_names_spelt_otherwise_fall_back_to_the_total_not_to_zero():
    """FQDN in the metrics, short names in Slurm: no name in common is a naming mismatch, not a cluster of 0."""
    cap, dropped = bound_capacity(by_node(**{"n1.example.org": 8, "n2.example.org": 8}), "Hostname",
                                  nodes(n1=8, n2=8))
    assert cap == 16 and dropped == {}


def test_without_a_scheduler_view_the_answer_is_summed_as_it_is():
    assert bound_capacity(by_node(n1=8, forged=200), "Hostname", None) == (208, {})


def test_demand_above_a_tenants_running_jobs_is_capped():
    used = np.array([202.0, 1.0, np.nan, 3.0])
    # team 0 runs 2 GPUs and queues 8 (pending work does not hold GPUs); team 1 runs 4 but reports 1 (a job just
    # started); team 2 is missing (unknown stays unknown); team 3 runs nothing on the scheduler
    capped, excess = cap_demand(used, jobs([(0, 2, True), (0, 8, False), (1, 4, True), (2, 1, True)]))
    assert capped[[0, 1, 3]].tolist() == [2, 1, 0] and np.isnan(capped[2])
    assert excess.tolist() == [200, 0, 0, 3]
    assert cap_demand(np.array([1.0, 2.0]), Jobs.empty())[1].tolist() == [1, 2]


def test_a_tenant_the_scheduler_view_does_not_cover_is_left_as_it_is():
    """A namespace that is no configured tenant: a Kubernetes view does not list its pods, so none listed is not
    proof of forging; the covered tenants are still capped."""
    capped, excess = cap_demand(np.array([5.0, 4.0]), jobs([(0, 2, True)]), covered=np.array([True, False]))
    assert capped.tolist() == [2, 4] and excess.tolist() == [3, 0]


def state(capped: dict[str, int], dropped: int) -> ClusterState:
    return ClusterState(at=pd.Timestamp("2026-01-01", tz="UTC"), tenants=("a", "b"), tiers=("high", "normal"),
                        capacity=16, used=np.array([2.0, 1.0]), pending=np.zeros(2), capped=capped,
                        capacity_dropped=dropped)


def test_the_plan_and_the_metrics_say_whose_demand_was_capped_and_what_capacity_was_dropped():
    cfg = Config(tenants=[{"name": "a", "tier": "high"}, {"name": "b"}])
    p = plan(None, state({"a": 200}, 400), PolicyMemory(), cfg)
    assert p.demand_capped == {"a": 200} and p.capacity_dropped == 400
    assert Plan.from_dict(p.to_dict()).demand_capped == {"a": 200}
    assert Plan.from_dict(p.to_dict()).capacity_dropped == 400
    m = DaemonMetrics()
    m.observe_plan(p, None, 1, False)
    assert m.registry.get_sample_value("gpuas_demand_capped_gpus") == 200
    assert m.registry.get_sample_value("gpuas_capacity_dropped_gpus") == 400
    m.observe_plan(plan(None, state({}, 0), PolicyMemory(), cfg), None, 1, False)
    assert m.registry.get_sample_value("gpuas_demand_capped_gpus") == 0


def test_on_a_view_listing_every_job_a_name_with_none_is_capped_and_named_apart_from_tenants():
    """squeue lists every job of the cluster: an account with GPUs in the metrics and no job there (x: another
    cluster's exporter, a stale series) runs none here, capped to 0 like a configured tenant with none (b), and said
    in one line with the key that leaves it out; a tenant's excess stays its own line (not in ``unlisted``)."""
    tenants = ("a", "b", "x")
    used, capped, stray, unlisted = bound_demand(np.array([3.0, 2.0, 8.0]), tenants, jobs([(0, 2, True)]),
                                                 np.ones(3, dtype=bool), {"a": "high", "b": "normal"})
    assert used.tolist() == [2, 0, 0] and capped == {"a": 1, "b": 2, "x": 8} and stray == {} and unlisted == {"x": 8}
    assert "(x) are not this cluster's load" in unlisted_line(unlisted)
    assert unlisted_line(unlisted).endswith("source.prometheus.exporter_selector")


def test_only_slurm_says_its_view_lists_every_job():
    from daemon.actuators.base import ListsClusterJobs
    from daemon.actuators.k8s.actuator import KubernetesActuator
    from daemon.actuators.k8s.kueue import KueueActuator
    from daemon.actuators.slurm.actuator import SlurmActuator
    from daemon.config import SlurmActuatorConfig

    assert SlurmActuator(SlurmActuatorConfig(), []).lists_every_job() is True
    assert KubernetesActuator.lists_every_job(None) is False and KueueActuator.lists_every_job(None) is False
    assert isinstance(SlurmActuator(SlurmActuatorConfig(), []), ListsClusterJobs)


def test_the_daemon_wires_slurms_whole_view_to_the_source():
    """build_runtime hands the lister's lists_every_job to the Prometheus source: Slurm's, not without a lister."""
    from daemon.service.wiring import build_runtime

    prom = {"kind": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}}
    slurm = build_runtime(Config(source=prom, actuators={"enabled": ["slurm"]}), with_store=False)
    alone = build_runtime(Config(source=prom, actuators={"enabled": []}), with_store=False)
    assert slurm.source.jobs_whole is True and alone.source.jobs_whole is False
