"""The windows bench's multi-seed view (bench/windows_bench.py --seeds, issue 39's windows target over several draws):
each seed's three conditions, the pooled cut of the summed unmet (not a mean of cuts), a seed with nothing to cut
skipped with why, its own JSON beside the per-seed ones, and the block docs/windows.md renders from it. No replay
runs here: the draws and their measures are stand-ins."""

from __future__ import annotations

import argparse
import json
import shutil
from types import SimpleNamespace

import pytest

from tests.conftest import REPO
from tests.support.bench_script import load_bench

TARGET = {"what": "the cut", "cut": 0.8}


@pytest.fixture
def bench(monkeypatch):
    return load_bench(monkeypatch, "windows_bench")


def _m(at_1400: float, normal: float, pre: int, idle: float = 0.0) -> dict:
    """What the bench's measure() gives, the keys the target reads."""
    return {"high_unmet_gpu_min_at_1400_tenants": at_1400, "normal_unmet_gpu_min": normal, "preemptions": pre,
            "held_idle_gpu_min": idle}


def test_each_seed_gets_its_three_conditions_and_the_pool_cuts_the_summed_unmet(bench):
    a = bench.seed_row(2, _m(100, 1000, 50, 10), _m(10, 900, 50, 40), TARGET)    # cut 90%, no more of either
    b = bench.seed_row(3, _m(900, 1000, 50, 20), _m(450, 1200, 49, 60), TARGET)  # cut 50%, normal +200
    assert (a["cut"], a["normal_unmet_delta_gpu_min"], a["preemptions_delta"]) == (0.9, -100, 0)
    assert a["conditions"] == {"cut": True, "normal_unmet": True, "preemptions": True, "all": True}
    assert b["conditions"] == {"cut": False, "normal_unmet": False, "preemptions": True, "all": False}
    assert (a["held_idle_gpu_min_without"], a["held_idle_gpu_min_with"]) == (10, 40)
    p = bench.pool([a, b], TARGET)
    # 1 - 460 / 1000, not the mean of 90% and 50%
    assert p["cut"] == pytest.approx(0.54)
    assert (p["normal_unmet_delta_gpu_min"], p["preemptions_delta"]) == (100, -1)
    assert (p["held_idle_gpu_min_without"], p["held_idle_gpu_min_with"]) == (30, 100)
    assert p["conditions"] == {"cut": False, "normal_unmet": False, "preemptions": True, "all": False}
    assert p["seeds_meeting"] == {"cut": 1, "normal_unmet": 1, "preemptions": 2, "all": 1}
    assert bench.pool([], TARGET)["cut"] is None


def test_a_seed_with_nothing_to_cut_is_skipped_with_why_and_the_per_seed_files_are_left(bench, monkeypatch, tmp_path):
    measured = {2: (_m(0, 500, 10), None), 3: (_m(80, 500, 10), _m(8, 400, 9)), 4: (_m(0, 500, 10), None)}
    peaked = {2: ["tenant-0001"], 3: ["tenant-0002"], 4: []}

    class Draw:   # a stand-in for one draw: its runs are the measures above, in order
        def __init__(self, seed, days, quick):
            self.seed, self.peaked_high, self.cfg, self.w = seed, peaked[seed], None, None
            self.choice, self.variants, self.runs = SimpleNamespace(name="naive"), {"high": [{"name": "x"}]}, 0

        def look(self, variant):
            return variant

        def run(self, strategy, ws, cfg, look=None):
            assert strategy == "predictive" and ws == ([] if self.runs == 0 else self.variants["high"])
            assert look == (None if self.runs == 0 else "high")   # the windowed run says why, step by step
            self.runs += 1
            return SimpleNamespace(meter=SimpleNamespace(step_min=1.0), m=measured[self.seed][self.runs - 1])

    monkeypatch.setattr(bench, "Draw", Draw)
    monkeypatch.setattr(bench, "measure", lambda run, w, peaked_high: run.m)
    monkeypatch.setattr(bench, "explain", lambda d, base_run, win_run, look: _why(open_=70))
    (tmp_path / "windows_synthetic.json").write_text("{}")
    bench.several(argparse.Namespace(seeds="2,3,4", days=1.0, quick_forecaster=True, out=tmp_path))
    d = json.loads((tmp_path / "windows_synthetic_seeds.json").read_text())
    assert (tmp_path / "windows_synthetic.json").read_text() == "{}"
    assert [r["seed"] for r in d["per_seed"]] == [3] and d["per_seed"][0]["cut"] == 0.9
    assert [(x["seed"], x["why"]) for x in d["skipped"]] == [
        (2, "its 14:00 tenants have no high-tier unmet without windows: nothing to cut"),
        (4, "no high-tier tenant has the 14:00 peak")]
    assert d["pool"]["seeds"] == 1 and d["pool"]["conditions"]["all"] is True and d["seeds"] == [2, 3, 4]
    assert d["per_seed"][0]["why"] == _why(open_=70)
    assert d["pool"]["why"]["left_gpu_min_by_place"]["with"]["open"] == 70


def _why(outside=0.0, lead=0.0, open_=0.0, firm=0.0, nodes=()) -> dict:
    """What the bench's explain() gives for one draw (the same places without and with windows)."""
    places = {"outside": outside, "lead": lead, "open": open_, "none": 0.0}
    return {"left_gpu_min_by_place": {"without": dict(places), "with": dict(places)},
            "while_window_holds_gpu_min_by_cause": {"others_firm": firm, "draining": 0.0},
            "while_window_holds_gpu_min_by_tenant": {}, "window_nodes": list(nodes)}


def _rendered(monkeypatch, tmp_path, name: str, d: dict, render) -> str:
    """A docs block rendered from `d` written as bench/out/`name` (a copy of bench/out beside it)."""
    from bench.render import common

    out = tmp_path / "out"
    shutil.copytree(REPO / "bench" / "out", out)
    (out / name).write_text(json.dumps(d))
    monkeypatch.setattr(common, "OUT", out)
    common.load.cache_clear()
    try:
        return render()
    finally:
        common.load.cache_clear()


def test_the_docs_block_gives_each_seed_the_pool_and_the_skipped(bench, monkeypatch, tmp_path):
    from bench.render import windows

    rows = [bench.seed_row(2, _m(100, 1000, 50, 10), _m(10, 900, 50, 40), TARGET) | {
                "tenants_with_1400_peak_high": ["tenant-0002"]},
            bench.seed_row(3, _m(900, 1000, 50, 20), _m(450, 1200, 49, 60), TARGET) | {
                "tenants_with_1400_peak_high": ["tenant-0000", "tenant-0003"]}]
    d = {"workload": "synthetic-40x1024", "seeds": [2, 3, 9], "measured_days": 1, "history_days": 7,
         "forecaster_choice": "quick (baselines only)", "compared": {"without": "none", "with": "windows"},
         "per_seed": rows, "skipped": [{"seed": 9, "why": "nothing to cut"}], "pool": bench.pool(rows, TARGET),
         "target": TARGET, "commit": "abc1234"}
    text = _rendered(monkeypatch, tmp_path, "windows_synthetic_seeds.json", d, windows.windows_synthetic_seeds)
    lines = text.splitlines()
    assert "| 2 | tenant-0002 | 100 | 10 | 90.0% | -100 | +0 | 10 / 40 | yes | yes | yes | yes |" in lines
    no = "| **no** | **no** | yes | **no** |"
    assert f"| 3 | tenant-0000 and tenant-0003 | 900 | 450 | 50.0% | +200 | -1 | 20 / 60 {no}" in lines
    assert f"| pooled (2 seeds) |  | 1,000 | 460 | 54.0% | +100 | -1 | 30 / 100 {no}" in lines
    assert ("- pooled over 2 seeds: **not met**: the 14:00 tenants' high-tier unmet cut by 54.0% (1 - the sum with "
            "windows / the sum without, target: cut >= 80%); normal-tier unmet +100 GPU-min, preemptions -1 "
            "(summed).") in lines
    assert ("- seeds meeting each condition: the cut 1 of 2, no more normal-tier unmet 1 of 2, no more preemptions "
            "2 of 2; all three 1 of 2.") in lines
    assert "- skipped: seed 9 (nothing to cut)." in lines


def test_leads_replay_each_seed_at_every_lead_and_pool_per_lead(bench, monkeypatch, tmp_path):
    """--seeds with --leads: per draw one run without windows, then one per lead with every proposal's
    reclaim_before set to it (nothing else changed), pooled per lead; the block shows each lead's pool."""
    proposed = [{"name": "w", "tenant": "tenant-0002", "gpus": 8, "reclaim_before_minutes": 30}]
    by_lead = {30: _m(50, 1000, 50, 40), 240: _m(10, 1300, 45, 400)}
    seen = []

    class Draw:
        def __init__(self, seed, days, quick):
            self.seed, self.peaked_high, self.cfg, self.w = seed, ["tenant-0002"], None, None
            self.variants = {"high": proposed}

        def run(self, strategy, ws, cfg, look=None):
            seen.append((self.seed, [x.get("reclaim_before_minutes") for x in ws]))
            m = _m(100, 1000, 50, 10) if not ws else by_lead[ws[0]["reclaim_before_minutes"]]
            return SimpleNamespace(m=m)

    monkeypatch.setattr(bench, "Draw", Draw)
    monkeypatch.setattr(bench, "measure", lambda run, w, peaked_high: run.m)
    bench.leads(argparse.Namespace(seeds="4,13", leads="240,30", days=1.0, quick_forecaster=True, out=tmp_path))
    assert seen == [(4, []), (4, [30]), (4, [240]), (13, []), (13, [30]), (13, [240])]
    assert proposed[0]["reclaim_before_minutes"] == 30          # the proposals themselves are left as they were
    d = json.loads((tmp_path / "windows_synthetic_leads.json").read_text())
    assert d["leads_minutes"] == [30, 240] and [x["lead_minutes"] for x in d["by_lead"]] == [30, 240]
    long = d["by_lead"][1]["pool"]
    assert (long["cut"], long["normal_unmet_delta_gpu_min"], long["preemptions_delta"]) == (0.9, 600, -10)
    assert long["conditions"] == {"cut": True, "normal_unmet": False, "preemptions": True, "all": False}
    for bad in ("0,30", "x"):
        with pytest.raises(SystemExit, match="--leads"):
            bench.leads(argparse.Namespace(seeds="4", leads=bad, days=1.0, quick_forecaster=True, out=tmp_path))

    from bench.render import windows
    d |= {"target": TARGET, "commit": "abc1234"}
    lines = _rendered(monkeypatch, tmp_path, "windows_synthetic_leads.json", d,
                      windows.windows_synthetic_leads).splitlines()
    assert "| 30 min | 50.0% | +0 | +0 | 20 / 80 | **not met** | 4: 50%, 13: 50% |" in lines
    assert "| 240 min | 90.0% | +600 | -10 | 20 / 800 | **not met** | 4: 90%, 13: 90% |" in lines


def test_the_docs_block_says_where_the_unmet_falls_and_why_from_each_seeds_why(bench, monkeypatch, tmp_path):
    """Issue 39: the seeds with the most unmet are cut least, and the block said why from no JSON. It renders each
    seed's why: where the 14:00 tenants' unmet falls against the windows, the causes while a window held, what the
    window's nodes carried when first held, and which windows no choice of nodes could have held for whole jobs."""
    from bench.render import windows

    lead = {"window": "t-1315", "tenant": "t", "at": "12:46", "phase": "lead", "window_gpus": 485, "job_gpus": 8,
            "held_gpus": 488, "held_nodes": 61, "held_nodes_with_others_firm": 27, "others_firm_on_held_gpus": 112,
            "low_on_held_gpus": 136, "its_jobs_fit_on_held_gpus": 272, "its_jobs_fit_in_cluster_gpus": 288,
            "nodes_free_of_others_firm_in_cluster": 36,
            "its_jobs_fit_elsewhere_gpus": {"pool": 16, "unheld": 0, "other_holds": 0},
            "others_firm_on_held_gpus_by_tier": {"normal": 112}, "others_firm_on_held_run_minutes_median": 271.0}
    opened = dict(lead, at="13:15", phase="open", its_jobs_fit_on_held_gpus=280, its_jobs_fit_in_cluster_gpus=296)
    rows = [bench.seed_row(13, _m(1000, 1000, 50), _m(900, 1000, 50), TARGET) | {
        "tenants_with_1400_peak_high": ["t"], "why": _why(outside=100, lead=200, open_=600, firm=750,
                                                          nodes=[lead, opened])}]
    d = {"workload": "synthetic-40x1024", "seeds": [13], "measured_days": 1, "history_days": 7,
         "forecaster_choice": "quick (baselines only)", "compared": {"without": "none", "with": "windows"},
         "per_seed": rows, "skipped": [], "pool": bench.pool(rows, TARGET), "target": TARGET, "commit": "abc1234"}
    lines = _rendered(monkeypatch, tmp_path, "windows_synthetic_seeds.json", d,
                      windows.windows_synthetic_seeds).splitlines()
    assert "| 13 | 100 / 200 / 600 | 100 / 200 / 600 | 750 / 0 / 0 / 0 / 0 |" in lines
    assert "| pooled (1 seeds) | 100 / 200 / 600 | 100 / 200 / 600 | 750 / 0 / 0 / 0 / 0 |" in lines
    assert ("| 13 | t-1315 | 485 | 8 | 12:46 | 488 | 27 of 61 (normal 112 GPUs; run 271 min, median) | 272 | 288 | "
            "16 / 0 / 0 | 280 / 296 |") in lines
    assert ("- pooled, of the 900 GPU-min left at the 14:00 tenants with the windows, 800 (88.9%) falls in a "
            "window's lead or while it is open, 100 outside the windows.") in lines
    assert ("- of the 750 GPU-min the 14:00 tenants queued while their window held, 750 (100.0%) waited for "
            "others' work that cannot be preempted on the window's nodes.") in lines
    assert any(x.endswith("held the window for its jobs then): seed 13 t-1315 (288 of 485).") for x in lines)
