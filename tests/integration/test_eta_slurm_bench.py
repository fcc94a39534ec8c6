"""`bench/eta_slurm_bench.py` on a real slurmctld (the backfill scheduler fills squeue --start's StartTime from time
limits): a job waiting behind a running one gets both estimates at the same cycle, the daemon's written into its
AdminComment beside Slurm's own (``slurm=``), and both are scored against its actual start. The committed
bench/out/eta_slurm.json has the same structure for every job it scores."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO
from tests.support.bench_script import load_bench
from tests.support.services import slurm_cluster

COMMENT = re.compile(r"gpu-autoscaler-eta: p50=\S+ p90=\S+ slurm=\d{4}-\d\d-\d\dT\d\d:\d\dZ")


@pytest.fixture
def bench(monkeypatch):
    return load_bench(monkeypatch, "eta_slurm_bench")


def _paired(job: dict) -> None:
    """Both estimates of one instant, the actual start, and the AdminComment with Slurm's beside the daemon's."""
    p = job["paired"]
    assert p["p50"] is not None and p["slurm"] is not None and p["at"] <= job["started"], job
    assert COMMENT.search(job["admin_comment"]), job["admin_comment"]


@pytest.mark.services
def test_a_waiting_job_gets_both_estimates_and_both_are_scored_against_its_start(bench):
    # one 8-GPU node: the first job runs 75 s (limit 2 min), the second waits for all 8 GPUs behind it
    specs = [{"gpus": 8, "limit_min": 2, "run_s": 75, "submit_s": 0},
             {"gpus": 8, "limit_min": 2, "run_s": 5, "submit_s": 5}]
    with slurm_cluster() as slurm:
        res = bench.run(slurm, specs, cycle_s=3.0, timeout_s=300.0)
    first, second = res["jobs"]
    assert first["started"] is not None and second["started"] is not None
    _paired(second)
    # Slurm's StartTime is the first job's limit run out: 2 minutes after it started
    assert second["paired"]["slurm"] == pytest.approx(first["started"] + 120.0, abs=2.0)
    s = res["scores"]
    assert s["jobs_scored"] == 1 and s["daemon_closer"] + s["slurm_closer"] + s["tied"] == 1
    assert s["slurm_median_abs_error_min"] == pytest.approx(abs(second["paired"]["slurm"] - second["started"]) / 60,
                                                            abs=0.01)


@pytest.mark.parametrize("name", ["eta_slurm.json", "eta_slurm_near_limit.json"])
def test_the_committed_bench_scores_only_jobs_with_both_estimates_and_the_comment_beside_slurms(name):
    d = json.loads((REPO / "bench" / "out" / name).read_text())
    scored = [j for j in d["jobs"] if "paired" in j and j.get("started") is not None]
    assert len(scored) == d["scores"]["jobs_scored"] > 0
    for j in scored:
        _paired(j)
