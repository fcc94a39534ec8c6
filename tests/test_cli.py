import json
import subprocess
import sys

from tests.conftest import REPO


def run_cli(*args, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "daemon.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO)


def test_run_sim_prints_one_line_per_cycle(tmp_path):
    r = run_cli("run", "--sim", "--cycles", "3", "--interval", "0.2", "--no-http", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "load=" in ln]
    assert len(lines) == 3
    assert all("reserved=" in ln and "level=" in ln for ln in lines)
    assert (tmp_path / "state" / "gpu-autoscaler.sqlite").exists()


def test_plan_json(tmp_path):
    r = run_cli("plan", "--sim", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["stale"] is False and plan["capacity"] == 1024
    assert len(plan["limits"]) == 40


def test_help_lists_only_real_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    assert "run" in r.stdout and "plan" in r.stdout
    assert "TODO" not in r.stdout
