"""An exporter silent past the missing query's 15 minutes reads as missing, not zero load (security read hsec8).

missing_query lists a tenant only while its GPUs were seen in the last 15 minutes; after that a node whose DCGM
exporter crashed has no series at all, and its tenants' GPUs would read 0 while the scheduler still runs their jobs
there. mark_silent: a node the scheduler lists up with running GPU jobs that counts fewer GPUs in an answer naming
nodes than those jobs hold (none: a silent exporter; some: a GPU's series lost) is silent, and each tenant running a
GPU job on it is unknown (NaN)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config
from daemon.policy.state import Jobs
from daemon.sources.prometheus import PrometheusSource
from daemon.sources.scheduler_bounds import bound_capacity, mark_silent
from tests.sources.test_scheduler_bounds import nodes

pytestmark = pytest.mark.security


def jobs(rows: list[tuple[int, int, bool, str]]) -> Jobs:
    """(tenant index, GPUs, running, node) per job."""
    n = len(rows)
    t, g, r, on = zip(*rows)
    return Jobs(ids=np.array([str(i) for i in range(n)], dtype=object), tenant=np.array(t, dtype=np.int64),
                gpus=np.array(g, dtype=np.int64), priority=np.ones(n, dtype=np.int8), running=np.array(r, bool),
                runtime_s=np.zeros(n), wait_s=np.zeros(n), node=np.array(on, dtype=object))


def by_node(**gpus: float) -> list[tuple[dict[str, str], float]]:
    return [({"Hostname": n}, v) for n, v in gpus.items()]


VIEW = nodes(n1=8, n2=8, n3=8)
# team 0 runs 8 GPUs on n2, whose exporter is silent; team 1 runs 2 on n1; team 2 runs 1 on n1 and 1 on n2
JOBS = jobs([(0, 8, True, "n2"), (1, 2, True, "n1"), (2, 1, True, "n1"), (2, 1, True, "n2")])


def test_a_tenant_running_on_a_node_absent_from_the_answer_is_missing_not_idle():
    used = np.array([0.0, 2.0, 1.0])   # what Prometheus says once missing_query forgot n2's GPUs
    out, silent = mark_silent(used, by_node(n1=8, n3=8), "Hostname", VIEW, JOBS)
    assert np.isnan(out[0]), "an 8-GPU job runs on n2, whose exporter says nothing: not 0 GPUs"
    assert np.isnan(out[2])            # a GPU on n2 too: its 1 GPU on n1 is not all it uses
    assert out[1] == 2 and silent == {"n2": (8, 8)}   # jobs of 8 + 1 GPUs, at most its 8
    assert used[0] == 0                # the caller's array is left as it was


def test_only_an_up_node_with_running_gpu_jobs_and_no_series_is_silent():
    """A node the scheduler has down (0 GPUs), one with only pending or GPU-less jobs, one in the answer: none is
    silent; an unknown tenant stays unknown."""
    view = nodes(n1=8, n2=0, n3=8, n4=8)
    js = jobs([(0, 4, True, "n2"), (1, 4, False, ""), (1, 0, True, "n3"), (2, 4, True, "n1")])
    used = np.array([0.0, 0.0, np.nan])
    out, silent = mark_silent(used, by_node(n1=8), "Hostname", view, js)
    assert out[:2].tolist() == [0, 0] and np.isnan(out[2]) and silent == {}


@pytest.mark.parametrize("answer", [[({}, 16.0)], by_node(**{"n1.example.org": 8, "n3.example.org": 8}), [],
                                    [({"Hostname": "n1"}, 8.0), ({}, 8.0)]],
                         ids=["names-no-node", "names-spelt-otherwise", "empty", "one-series-names-no-node"])
def test_an_answer_that_cannot_tell_a_silent_node_changes_nothing(answer):
    """The default count(...) names no node, FQDNs name none the scheduler lists: no way to tell, nothing new. Nor
    where one series names no node (an exporter without the Hostname label, counted under an empty one): the answer
    does not say nodes as bound_capacity reads them (a mutant judging on any series named raised KeyError)."""
    used = np.array([0.0, 2.0, 1.0])
    out, silent = mark_silent(used, answer, "Hostname", VIEW, JOBS)
    assert out.tolist() == used.tolist() and silent == {}


def test_without_a_node_view_nothing_changes():
    out, silent = mark_silent(np.array([0.0, 2.0, 1.0]), by_node(n1=8), "Hostname", None, JOBS)
    assert out.tolist() == [0, 2, 1] and silent == {}


def test_only_the_historys_last_step_of_a_silent_tenant_is_made_missing_every_type_of_it():
    """The last step is this cycle's `used`; the older steps stay as Prometheus says (which nodes the scheduler
    listed then is not known). On a mixed fleet each of the tenant's types is missing; the History's own frame
    (read-only) is not written to."""
    idx = pd.date_range("2026-12-07", periods=3, freq="60s", tz="UTC")
    vals = np.array([[8.0, 1.0, 2.0]] * 3)
    vals.flags.writeable = False
    hist = pd.DataFrame(vals, index=idx, columns=["a@h100", "a@a100", "b@h100"], copy=False)
    out = PrometheusSource._history_silent(hist, ["a", "a", "b"], ("a", "b"), np.array([True, False]), True)
    assert out.iloc[:-1].to_numpy().tolist() == [[8, 1, 2]] * 2
    assert np.isnan(out.iloc[-1, :2]).all() and out.iloc[-1, 2] == 2 and hist.iloc[-1, 0] == 8


def test_a_job_on_several_nodes_is_judged_on_each_of_them():
    """A Slurm job on n1 and n2 (its node column squeue's hostlist, its nodes in Jobs.on_nodes): n2 silent makes
    its tenant unknown, though the hostlist names no listed node."""
    js = jobs([(0, 16, True, "n[1-2]"), (1, 2, True, "n3")])
    js = Jobs(**{**js.__dict__, "on_nodes": np.array([("n1", "n2"), ()], dtype=object)})
    out, silent = mark_silent(np.array([8.0, 2.0]), by_node(n1=8, n3=8), "Hostname", VIEW, js)
    assert np.isnan(out[0]) and out[1] == 2 and silent == {"n2": (8, 8)}
    out, silent = mark_silent(np.array([16.0, 2.0]), by_node(n1=8, n2=8, n3=8), "Hostname", VIEW, js)
    assert out[0] == 16 and silent == {}


def test_a_node_counting_fewer_gpus_than_its_running_jobs_hold_makes_each_of_their_tenants_missing():
    """n2's exporter lost one GPU's series (8 in use, 7 reported): team 0's 1-GPU job sat on it and reads 0 once
    the missing query forgets it. Which job held the lost GPU is not known (no scheduler view names GPU indices),
    so team 1's 7 GPUs there are unknown too; team 2 on n1 is as read. n1's surplus (9 series on 8 GPUs) does not
    make up n2's loss."""
    js = jobs([(0, 1, True, "n2"), (1, 7, True, "n2"), (2, 2, True, "n1")])
    out, silent = mark_silent(np.array([0.0, 7.0, 2.0]), by_node(n1=9, n2=7, n3=8), "Hostname", VIEW, js)
    assert np.isnan(out[0]), "team 0's job runs on n2's lost GPU: not 0 GPUs"
    assert np.isnan(out[1]) and out[2] == 2 and silent == {"n2": (1, 8)}


def test_a_job_on_several_nodes_is_judged_at_its_share_on_a_node_that_lost_a_gpu():
    js = jobs([(0, 16, True, "n[1-2]"), (1, 2, True, "n3")])
    js = Jobs(**{**js.__dict__, "on_nodes": np.array([("n1", "n2"), ()], dtype=object)})
    out, silent = mark_silent(np.array([15.0, 2.0]), by_node(n1=8, n2=7, n3=8), "Hostname", VIEW, js)
    assert np.isnan(out[0]) and out[1] == 2 and silent == {"n2": (1, 8)}


def test_a_count_at_or_above_the_gpus_in_use_is_not_silent():
    """A MIG node whose exporter reports each instance (n1: 7 series per GPU, 56 for the 8 whole GPUs the scheduler
    lists) is neither silent nor extra capacity; a node with free GPUs may have lost a free one (n2: 4 in use, 7
    reported); 12 shard jobs on n3 each read as a GPU are at most its 8 GPUs, all reported."""
    js = jobs([(0, 1, True, "n1")] * 8 + [(1, 4, True, "n2")] + [(2, 1, True, "n3")] * 12)
    answer = by_node(n1=56, n2=7, n3=8)
    out, silent = mark_silent(np.array([8.0, 4.0, 8.0]), answer, "Hostname", VIEW, js)
    assert out.tolist() == [8, 4, 8] and silent == {}
    assert bound_capacity(answer, "Hostname", VIEW)[0] == 8 + 7 + 8


def test_the_silent_nodes_are_logged_once_per_change_of_their_unseen_gpus(caplog):
    """One line naming each node and its unseen GPUs; the same again, or only the GPUs in use there moving (a job
    starting beside the lost GPU), says nothing; a new loss says it again, and every node reporting once."""
    cfg = Config(source={"kind": "prometheus", "prometheus": {"url": "http://127.0.0.1:9"}}, tenants=[{"name": "a"}])
    src = PrometheusSource(cfg)
    with caplog.at_level(logging.INFO, logger="gpu_autoscaler.source.prometheus"):
        for silent in ({"n2": (1, 8)}, {"n2": (1, 8)}, {"n2": (1, 7)}, {"n2": (1, 8), "n3": (8, 8)},
                       {"n2": (1, 8), "n3": (8, 8)}, {}, {}):
            src._report_silent(silent)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert "1 GPU in use by running jobs on 1 node" in said[0] and "(n2: 1 of 8 unseen)" in said[0]
    assert "(n2: 1 of 8 unseen, n3: 8 of 8 unseen)" in said[1] and "missing, not idle" in said[1]
    assert "reports GPU series again" in said[2]


def test_the_first_node_listed_can_be_silent_and_a_job_on_a_node_the_view_lacks_is_judged_on_none():
    """n1, the scheduler's first node (index 0), is silent: its tenant is missing. Team 1's job runs on n9, a node
    the view does not list (Jobs.parts: -1): it is on no silent node, so its 2 GPUs stay as read (a job off the view
    is not read as on node 0; and node 0 is judged like any other)."""
    js = jobs([(0, 4, True, "n1"), (1, 2, True, "n9"), (2, 2, True, "n2")])
    out, silent = mark_silent(np.array([0.0, 2.0, 2.0]), by_node(n2=8, n3=8), "Hostname", VIEW, js)
    assert np.isnan(out[0]) and out[1:].tolist() == [2, 2] and silent == {"n1": (4, 4)}


def test_a_tenant_whose_job_on_a_silent_node_asks_no_gpu_stays_as_read():
    """Team 1 runs a CPU-only job (0 GPUs) beside team 0's 8 on silent n2, and 2 GPUs on n1: none of its GPUs can be
    unseen on n2, so its 2 stay as read (missing would keep its demand out of the plan for nothing)."""
    js = jobs([(0, 8, True, "n2"), (1, 0, True, "n2"), (1, 2, True, "n1")])
    out, silent = mark_silent(np.array([0.0, 2.0]), by_node(n1=8, n3=8), "Hostname", VIEW, js)
    assert np.isnan(out[0]) and out[1] == 2 and silent == {"n2": (8, 8)}


def test_an_answer_with_several_series_per_node_is_summed_per_node():
    """A capacity_query by node and GPU (`count by (Hostname, gpu) (...)`: a series per GPU) says n2's 8 GPUs in 8
    series: n2 reports 8, not 1, so nothing is silent; with one GPU's series gone, 1 of 8 is unseen."""
    per_gpu = [({"Hostname": n, "gpu": str(i)}, 1.0) for n in ("n1", "n2", "n3") for i in range(8)]
    out, silent = mark_silent(np.array([8.0, 2.0, 2.0]), per_gpu, "Hostname", VIEW, JOBS)
    assert out.tolist() == [8, 2, 2] and silent == {}
    lost = [s for s in per_gpu if s[0] != {"Hostname": "n2", "gpu": "3"}]
    out, silent = mark_silent(np.array([8.0, 2.0, 2.0]), lost, "Hostname", VIEW, JOBS)
    assert np.isnan(out[0]) and np.isnan(out[2]) and out[1] == 2 and silent == {"n2": (1, 8)}
