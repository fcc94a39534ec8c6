"""The Helios tier mapping is the user's: `simulate --trace helios --high-vcs N / --high-vc NAME`."""

import json

import pytest

from daemon.sim.workloads import helios
from tests.conftest import SHARED_DATA
from tests.service.test_cli import run_cli


def _high(w):
    return {c.split("/")[0] for c, t in zip(w.demand.columns, w.tiers) if t == "high"}


def test_helios_high_tier_by_count_or_by_name():
    # quotas: vc6YE 208, vcvlY 96, then four VCs at 64 (vc3sl, vcLJZ, vcMod, vchbv): ties go by name
    assert _high(helios(SHARED_DATA, days=0.05, history_days=0.05, high_vcs=3)) == {"vc6YE", "vcvlY", "vc3sl"}
    w = helios(SHARED_DATA, days=0.05, history_days=0.05, high_vc_names=["vcJLV", "vc3sl"])
    assert _high(w) == {"vcJLV", "vc3sl"}
    for c, t in zip(w.demand.columns, w.tiers):     # the others: 8-GPU part normal, small-job part low
        if c.split("/")[0] not in {"vcJLV", "vc3sl"}:
            assert t == ("normal" if c.endswith("/8") else "low")
    assert _high(helios(SHARED_DATA, days=0.05, history_days=0.05, high_vcs=0)) == set()
    with pytest.raises(ValueError, match="unknown Helios VC vcNOPE"):
        helios(SHARED_DATA, days=0.05, history_days=0.05, high_vc_names=["vc6YE", "vcNOPE"])
    with pytest.raises(ValueError, match="high_vcs=17"):
        helios(SHARED_DATA, days=0.05, history_days=0.05, high_vcs=17)


def test_simulate_takes_the_helios_tier_mapping(tmp_path):
    r = run_cli("simulate", "--trace", "helios", "--days", "0.05", "--strategies", "static",
                "--high-vc", "vcJLV", "--high-vc", "vc3sl", "--data-dir", str(SHARED_DATA), "--out", str(tmp_path),
                cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "helios-earth-2020.json").read_text())
    assert got["high_tier"] == ["vc3sl/8", "vc3sl/s", "vcJLV/8", "vcJLV/s"]
    r = run_cli("simulate", "--trace", "helios", "--days", "0.05", "--strategies", "static", "--high-vcs", "1",
                "--data-dir", str(SHARED_DATA), "--out", str(tmp_path), cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "helios-earth-2020.json").read_text())
    assert got["high_tier"] == ["vc6YE/8", "vc6YE/s"]                     # the largest quota (208 GPUs)


def test_simulate_rejects_a_bad_helios_tier_mapping(tmp_path):
    r = run_cli("simulate", "--trace", "helios", "--high-vc", "vcNOPE", "--data-dir", str(SHARED_DATA), cwd=tmp_path)
    assert r.returncode == 2 and "unknown Helios VC vcNOPE" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("simulate", "--trace", "helios", "--high-vc", "vc6YE", "--high-vcs", "3", cwd=tmp_path)
    assert r.returncode == 2 and "give one" in r.stderr
    r = run_cli("simulate", "--trace", "synthetic", "--high-vcs", "3", cwd=tmp_path)
    assert r.returncode == 2 and "--trace helios" in r.stderr


def test_the_replay_bench_takes_the_same_mapping(monkeypatch):
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.support.bench_script import load_bench

    path = REPO / "bench" / "replay_bench.py"
    r = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--high-vcs" in r.stdout and "--high-vc VC" in r.stdout
    bench = load_bench(monkeypatch, "replay_bench")
    w, _ = bench.load("helios", 0.05, SHARED_DATA, high_vc_names=["vcJLV"])
    assert _high(w) == {"vcJLV"}
    assert _high(bench.load("helios", 0.05, SHARED_DATA, high_vcs=1)[0]) == {"vc6YE"}
    assert _high(bench.load("helios", 0.05, SHARED_DATA)[0]) == {"vc6YE", "vcvlY"}        # default: the 2 largest
