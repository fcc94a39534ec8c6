"""Where the start estimate's error comes from (daemon/sim/eta_breakdown.py): the groups partition the scored jobs,
the counts are what the fates say, and hindsight is given exactly the ends and withdrawals that happened."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.config import Config
from daemon.sim.eta_breakdown import BreakdownHook, HindsightHook, _bucket, breakdown
from daemon.sim.eta_replay import run_eta
from daemon.sim.workloads import synthetic

STEPS = 480   # by then 25 of the 42 jobs that waited and started have a p50 (the run lengths are learned)


@pytest.fixture(scope="module")
def replayed():
    w = synthetic(tenants=12, gpus=128, days=0.5, seed=7, history_days=1.5, target_load=1.0)
    _, h = run_eta(w, Config(), steps=STEPS, hook_class=BreakdownHook)
    return w, h


def test_the_groups_partition_the_scored_jobs(replayed):
    _, h = replayed
    b = breakdown(h)
    assert b["jobs"] == h.score.summary()["p50_known"] > 0
    for key in ("by_tier", "by_gpus", "by_wait_min", "by_overtaken_by_later_arrivals", "by_jobs_ahead_withdrawn"):
        assert sum(g["jobs"] for g in b[key].values()) == b["jobs"], key
    assert 0 <= b["running_end_unknown_share"] <= 1


def test_the_counts_are_what_the_fates_say(replayed):
    """By hand from the fates: the jobs no later arrival overtook (none first seen after the estimate started by
    the job's start), the jobs with no job ahead that left unstarted, and the overtaking jobs in all."""
    _, h = replayed
    f = h.fates
    none_overtook = none_left = overtakers = 0
    for j, s in h.score.started.items():
        if h.score.made[j].p50 is None:
            continue
        k = h.context[j]["k"]
        n = sum(1 for o in f.started if o != j and f.seen[o] > k and f.started[o] <= s)
        overtakers += n
        none_overtook += n == 0
        none_left += not any(o not in f.started and f.ended.get(o, 1 << 60) <= s for o in h.context[j]["ahead"])
    b = breakdown(h)
    assert 0 < none_overtook < b["jobs"]      # both happen in this replay, so the check means something
    assert b["by_overtaken_by_later_arrivals"]["0"]["jobs"] == none_overtook
    assert b["by_jobs_ahead_withdrawn"].get("0", {"jobs": 0})["jobs"] == none_left
    assert sum(sum(by.values()) for by in b["overtaking_jobs_by_tier"].values()) == overtakers


def test_hindsight_is_given_the_true_ends_and_drops_the_jobs_that_never_start(replayed):
    w, h = replayed
    _, hh = run_eta(w, Config(), steps=STEPS, hook_class=HindsightHook, fates=h.fates,
                    known=frozenset({"ends", "withdrawals"}))
    # its estimates differ from the replay's own (it knows more), on the same jobs
    assert set(hh.score.started) == set(h.score.started)
    assert any(hh.score.made[j].p50 != h.score.made[j].p50 for j in h.score.started)


def test_buckets_by_hand():
    edges = (0, 5, 15, float("inf"))
    assert [_bucket(x, edges) for x in (0, 1, 5, 6, 15, 99)] == ["0", "0-5", "0-5", "5-15", "5-15", ">15"]
    assert np.isfinite(edges[1])


def test_hindsight_reads_no_history_for_a_job_already_running():
    """With the true ends known, a running job's end is its true end alone: the history says nothing of it (NaN),
    while a job not started yet keeps its tenant's usual run."""
    from daemon.policy.eta import RunLengths
    from daemon.sim.eta_breakdown import _NoRunningHistory

    rl = RunLengths(min_samples=1)
    for r in (100.0, 200.0, 300.0):
        rl.observe("t", r)
    got = _NoRunningHistory(rl).remaining_many("t", np.array([0.0, 50.0]), 0.5)
    assert got[0] == pytest.approx(200.0) and np.isnan(got[1])
    assert _NoRunningHistory(rl).remaining("t", 50.0, 0.5) is None
