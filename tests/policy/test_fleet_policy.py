"""The policy on a mixed fleet (issue 24): holds per type, preemption only of GPUs of a type the protected job
accepts, a type no node has, the guarantee per type, typed forecast series."""

import numpy as np
import pandas as pd

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.fleet import series_name, split_series, tenant_values as _tenant_values
from daemon.policy.state import PRIORITY, UNHELD, ClusterState, Jobs, Nodes
from forecaster.types import Forecast

AT = pd.Timestamp("2026-01-06T13:50:00Z")
CFG = Config(policy={"preempt_budget_share": 1.0, "headroom": 0.0, "preempt_cost_aware": False,
                     "preempt_min_runtime_s": 0})


def typed_state(tiers, nodes, jobs_spec):
    """nodes: list of (name, type, gpus); jobs_spec: (tenant, gpus, priority, node or "", runtime_s, accepts)."""
    n = len(tiers)
    t = np.array([j[0] for j in jobs_spec], dtype=np.int64)
    g = np.array([j[1] for j in jobs_spec], dtype=np.int64)
    pr = np.array([PRIORITY[j[2]] for j in jobs_spec], dtype=np.int8)
    node = np.array([j[3] for j in jobs_spec], dtype=object)
    run = node != ""
    acc = np.empty(len(jobs_spec), dtype=object)
    acc[:] = [tuple(j[5]) for j in jobs_spec]
    jobs = Jobs(np.array([f"j{i}" for i in range(len(jobs_spec))], dtype=object), t, g, pr, run,
                np.array([j[4] for j in jobs_spec], dtype=float), np.zeros(len(jobs_spec)), node, accepts=acc)
    names = np.array([x[0] for x in nodes], dtype=object)
    cap = np.array([x[2] for x in nodes], dtype=np.int64)
    on = pd.Index(names).get_indexer(node[run])
    busy = np.bincount(on, weights=g[run], minlength=len(nodes)).astype(np.int64)
    nd = Nodes(names, cap, cap - busy, np.zeros(len(nodes), dtype=np.int64),
               np.full(len(nodes), UNHELD, dtype=np.int64), gpu_type=np.array([x[1] for x in nodes], dtype=object))
    used = np.bincount(t[run], weights=g[run], minlength=n).astype(float)
    pend = np.bincount(t[~run], weights=g[~run], minlength=n).astype(float)
    return ClusterState(AT, tuple(f"t{i}" for i in range(n)), tuple(tiers), int(cap.sum()), used, pend, jobs,
                        nodes=nd)


NODES = [("t4-0", "t4", 8), ("t4-1", "t4", 8), ("v100-0", "v100", 8), ("v100-1", "v100", 8)]


def test_a_hold_sits_on_the_type_the_tenant_accepts():
    s = typed_state(["high", "low"], NODES, [(0, 8, "high", "", 0, ("v100",)), (1, 4, "low", "t4-0", 60, ())])
    p = plan(None, s, PolicyMemory(), CFG)
    assert p.reservations == {"t0": 8}
    assert p.holds_by_type == {"t0": {"v100": 8}}
    assert sum(p.holds_by_type["t0"].values()) == p.reservations["t0"]
    assert p.capacity_by_type == {"t4": 16, "v100": 16}


def test_preemption_frees_only_gpus_of_a_type_the_waiting_job_accepts():
    # the cheapest low job (newest) runs on t4, which the high tenant's waiting 8-GPU job cannot use; the type-blind
    # rule would preempt it and the job would still wait. Every node is busy.
    jobs = [(0, 8, "high", "", 0, ("v100",)),
            (1, 8, "low", "t4-0", 60, ()), (1, 8, "low", "t4-1", 60, ()),
            (1, 8, "low", "v100-0", 7200, ()), (1, 8, "normal", "v100-1", 7200, ())]
    s = typed_state(["high", "low"], NODES, jobs)
    p = plan(None, s, PolicyMemory(), CFG)
    assert [x.job_id for x in p.preemptions] == ["j3"]          # the low job on a v100 node, whole node freed
    assert p.preemptions[0].node == "v100-0" and p.preemptions[0].for_tenant == "t0"
    # the same cluster read type-blind (no types): the cheapest job, on t4
    blind = typed_state(["high", "low"], NODES, jobs)
    import dataclasses
    blind = dataclasses.replace(blind, nodes=dataclasses.replace(blind.nodes, gpu_type=None),
                                jobs=dataclasses.replace(blind.jobs, accepts=None))
    assert plan(None, blind, PolicyMemory(), CFG).preemptions[0].node.startswith("t4")


def test_work_asking_for_a_type_no_node_has_is_told_and_preempts_nothing():
    jobs = [(0, 8, "high", "", 0, ("a100",)), (1, 8, "low", "t4-0", 60, ()), (1, 8, "low", "v100-0", 60, ()),
            (1, 8, "low", "t4-1", 60, ()), (1, 8, "low", "v100-1", 60, ())]
    s = typed_state(["high", "low"], NODES, jobs)
    p = plan(None, s, PolicyMemory(), CFG)
    assert p.preemptions == ()
    assert "t0" not in p.reservations and p.holds_by_type == {}
    assert any("no healthy node has" in line and "t0" in line for line in p.notes_by_type["a100"])


def test_preferred_types_are_held_first_then_the_next():
    # 12 GPUs each for a tenant that prefers v100 then t4 and one that takes only v100; v100 has 16 GPUs
    s = typed_state(["high", "high"], NODES, [(0, 4, "high", "", 0, ("v100", "t4"))] * 3
                    + [(1, 4, "high", "", 0, ("v100",))] * 3)
    p = plan(None, s, PolicyMemory(), CFG)
    # the tenant with one type to go to is held for first, the flexible one gets the rest of v100, then t4
    assert p.holds_by_type == {"t1": {"v100": 12}, "t0": {"v100": 4, "t4": 8}}
    assert p.reservations == {"t0": 12, "t1": 12}


def test_the_guarantee_is_a_share_of_each_type():
    cfg = Config(fleet={"types": ["t4", "v100"], "reserve_share": {"v100": 0.5}}, policy={"reserve_share": 0.25})
    s = typed_state(["high", "low"], NODES, [(1, 4, "low", "t4-0", 60, ())])
    p = plan(None, s, PolicyMemory(), cfg)
    assert p.high_pool_by_type == {"t4": 4, "v100": 8} and p.high_pool == 12


def test_a_one_model_cluster_has_no_typed_fields():
    import dataclasses
    s = typed_state(["high", "low"], NODES, [(0, 8, "high", "", 0, ()), (1, 4, "low", "t4-0", 60, ())])
    s = dataclasses.replace(s, nodes=dataclasses.replace(s.nodes, gpu_type=None),
                            jobs=dataclasses.replace(s.jobs, accepts=None))
    p = plan(None, s, PolicyMemory(), CFG)
    assert p.reservations == {"t0": 8}
    assert (p.holds_by_type, p.capacity_by_type, p.high_pool_by_type, p.notes_by_type) == ({}, {}, {}, {})


def test_typed_forecast_series_size_and_split_the_hold():
    s = typed_state(["high", "low"], NODES, [(1, 4, "low", "t4-0", 60, ())])
    names = (series_name("t0", ("v100",)), series_name("t0", ()), series_name("t1", ()))
    assert split_series(names[0]) == ("t0", ("v100",)) and split_series(names[1]) == ("t0", ())
    assert split_series("a@b@v100") == ("a@b", ("v100",)) and split_series("plain") == ("plain", None)
    v = np.repeat(np.array([6.0, 2.0, 4.0])[:, None, None], 30, axis=1)
    fc = Forecast(names, (0.5, 0.9), np.concatenate([v, v], axis=2), AT, 60, "test")
    p = plan(fc, s, PolicyMemory(), CFG)
    assert p.reservations["t0"] == 8                           # the typed series summed per tenant
    assert p.holds_by_type["t0"]["v100"] >= 6                  # the v100 series' share held on v100
    assert sum(p.holds_by_type["t0"].values()) == 8


def test_plan_round_trips_its_typed_fields():
    from daemon.policy.types import Plan
    s = typed_state(["high", "low"], NODES, [(0, 8, "high", "", 0, ("v100",)), (1, 4, "low", "t4-0", 60, ())])
    p = plan(None, s, PolicyMemory(), CFG)
    q = Plan.from_dict(p.to_dict())
    assert (q.holds_by_type, q.capacity_by_type, q.high_pool_by_type, q.notes_by_type) == \
        (p.holds_by_type, p.capacity_by_type, p.high_pool_by_type, p.notes_by_type)


def test_normal_work_is_kept_out_of_each_types_guarantee():
    # "20% of the GPUs for the high tier" means 20% of each type: the shared cap per type leaves it free of
    # non-preemptible normal work (or the high tier's holds there, when larger)
    cfg = Config(fleet={"types": ["t4", "v100"], "reserve_share": {"v100": 0.5}}, policy={"reserve_share": 0.25})
    s = typed_state(["high", "normal"], NODES, [(1, 4, "normal", "t4-0", 60, ())])
    assert plan(None, s, PolicyMemory(), cfg).shared_cap_by_type == {"t4": 12, "v100": 8}
    s = typed_state(["high", "normal"], NODES, [(0, 8, "high", "", 0, ("v100",))] * 3)
    p = plan(None, s, PolicyMemory(), cfg)
    assert p.holds_by_type == {"t0": {"v100": 16}} and p.shared_cap_by_type == {"t4": 12, "v100": 0}


def test_typed_series_sum_per_tenant_observed_only_and_nan_where_none_is():
    """The per-tenant forecast of typed series is the sum of its observed series, NaN only where every series of
    the tenant is NaN, and a series of a tenant the state does not know is left out."""
    v = np.array([[[1.0, 2.0]], [[np.nan, 3.0]], [[np.nan, np.nan]], [[5.0, 5.0]], [[7.0, 7.0]]])  # 5 x 1 x 2
    f = Forecast(tenants=("a@t4", "a@h100", "b@t4", "c@*", "zz@t4"), quantiles=(0.5, 0.9), values=v,
                 issued_at=None, step_s=60, model="m")
    got = _tenant_values(f, ("a", "b", "c", "d"))
    assert got[0, 0].tolist() == [1.0, 5.0]           # a: 1 + (missing), 2 + 3
    assert np.isnan(got[1]).all() and np.isnan(got[3]).all()  # b: every series NaN; d: no series
    assert got[2, 0].tolist() == [5.0, 5.0]
