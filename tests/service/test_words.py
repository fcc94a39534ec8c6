"""What a person reads (issue 37, item 13): counts agree with their nouns, the simulator's time is labelled as
such beside the wall-clock log lines, and a clean Ctrl-C is not a warning."""

import signal
import subprocess
import sys
import threading
import time

import numpy as np

from daemon.config import Config
from daemon.policy import PolicyMemory, plan
from daemon.policy.fleet import split_series
from daemon.service.cycle import CycleResult
from daemon.service.loop import summary_line
from daemon.sim.actuator import SimulatorActuator
from daemon.sim.source import SimulatedCluster
from daemon.text import agree, plural
from tests.policy.test_engine import flat_forecast, make_state
from tests.service.test_cli import cli_env


def test_plural_says_one_of_a_noun_and_many_of_it():
    assert [plural(n, "job") for n in (0, 1, 2)] == ["0 jobs", "1 job", "2 jobs"]
    assert plural(1.0, "GPU") == "1.0 GPU" and plural(3, "series", "series") == "3 series"
    assert plural(1500, "step", fmt=",") == "1,500 steps" and plural(1, "GPU", fmt=">3") == "  1 GPU"
    assert agree(1, "has", "have") == "has" and agree(2, "has", "have") == "have"


def test_the_cycle_line_and_the_notes_say_one_tenant_one_job_one_gpu():
    # one high tenant in 1-GPU jobs, forecast to need 2 more GPUs than the one free: one 1-GPU job is preempted
    s = make_state(["high", "low"], [(0, 1, "high", True, 3600, 0), (1, 1, "low", True, 3600, 0)], capacity=2)
    p = plan(flat_forecast(s.tenants, [2 / 1.1, 1]), s, PolicyMemory(),
             Config(policy={"headroom": 0.0, "preempt_budget_share": 1.0, "min_preempt_gpus": 1,
                            "preempt_cost_aware": False}))
    line = summary_line(CycleResult(p, "ok", 0.01, True))
    assert "(1 tenant)" in line and "tenants)" not in line
    assert line.startswith(p.at)                     # a real source's time is the snapshot's, as it was
    assert [x.reason for x in p.preemptions] and all("clear 1 GPU " in x.reason for x in p.preemptions)


def test_the_simulated_actuator_and_a_fleet_note_say_one_tenant_and_one_job():
    cfg = Config.model_validate({"source": {"simulator": {"tenants": 6, "seed": 3, "warmup_steps": 300,
                                                          "high_share": 0.2}},
                                 "fleet": {"types": ["a100"], "pools": [{"type": "a100", "nodes": 16}]}})
    sim = SimulatedCluster(cfg, extra_steps=5)
    got = sim.collect(cfg.cycle.history_steps)
    high = [t for t, tier in zip(sim.tenants, got.state.tiers) if tier == "high"]
    assert len(high) == 1
    # the one high tenant forecast well above what it runs: it alone is held for
    values = [60.0 if t in high else 0.0 for t in (split_series(c)[0] for c in got.history.columns)]
    fc = flat_forecast(tuple(got.history.columns), values)
    p = plan(fc, got.state, PolicyMemory(), cfg)
    assert "held for 1 tenant," in p.notes_by_type["a100"][0]
    rep = SimulatorActuator(sim.cluster, sim.tenants, node_index=sim.node_index, lock=sim.lock).apply(p)
    assert any(a.endswith("for 1 tenant") for a in rep.actions), rep.actions


def test_ctrl_c_stops_run_sim_cleanly_with_no_warning(tmp_path):
    """`make run`, then Ctrl-C: exit 0 and no WARNING line (the stop used to log the release of the scheduler's
    holds as a WARNING). The cycle line labels the simulated time."""
    conf = tmp_path / "c.toml"
    conf.write_text('[forecaster]\nkind = "seasonal_naive"\n')  # no start-up model choice (its own warnings)
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli", "--config", str(conf), "run", "--sim", "--no-http",
                             "--interval", "0.5"], cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    err: list[str] = []
    threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not any("load=" in ln for ln in out) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any("load=" in ln for ln in out), "".join(err)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)  # the reader threads drain the pipes
    assert rc == 0, "".join(err)
    assert [ln for ln in err if " WARNING " in ln or ln.startswith("WARNING")] == []
    assert any("stopping" in ln for ln in err)       # the stop was logged, as INFO
    cycle = next(ln for ln in out if "load=" in ln)
    assert cycle.startswith("sim 2026-01-") and "+00:00" not in cycle.split(" load=")[0]
    assert np.isfinite(float(cycle.split("load=")[1].split("%")[0]))
