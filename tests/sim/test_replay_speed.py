"""The replay's speed-ups change no result: the same settings give the same report however they are run."""

import json

import numpy as np
import pytest

from daemon.config import Config
from daemon.sim.cluster import lexorder
from daemon.sim.replay import ForecastBank, run_replay, run_strategy
from daemon.sim.workloads import synthetic
from forecaster.baselines import SeasonalNaive
from forecaster.registry import load_current
from tests.conftest import REPO
from tests.support.torch_threads import torch_thread_calls

ROOT = REPO
SETTINGS = [("static", {}), ("reactive", {"headroom": 0.1}), ("predictive", {"quantile": 0.9}),
            ("predictive", {"quantile": 0.5, "headroom": 0.0}), ("perfect", {})]


def report(m) -> dict:
    """Everything a run measured, except how long it took."""
    s = m.summary()
    for k in ("wall_s", "cpu_s", "decision_ms_mean", "decision_ms_p99"):
        s.pop(k)
    s["series"] = {name: {t: np.asarray(v).tolist() for t, v in getattr(m, name).items()}
                   for name in ("wanted", "served", "unmet")}
    s["waits"] = {t: np.concatenate(v).tolist() if v else [] for t, v in m.waits.items()}
    s["util"], s["high_reserved"], s["throttled"] = list(m.util), list(m.high_reserved), dict(m.throttled)
    return s


CONTENDED = dict(tenants=16, gpus=192, days=0.2, seed=11, history_days=1.2, target_load=1.1)


@pytest.fixture(scope="module")
def contended():
    return synthetic(**CONTENDED)


def reference(w, model, settings, every, steps):
    """The straightforward way: one setting after the other, in this process, each with its own bank that makes
    every forecast when it is first asked for (no background thread) and keeps them all."""
    cfg = Config()
    out = []
    for s, knobs in settings:
        bank = ForecastBank(model, w.demand, every, cfg.cycle.horizon_steps, cfg.cycle.history_steps) \
            if s == "predictive" else None
        out.append(run_strategy(s, w, cfg, bank, steps=steps, knobs=knobs))
    return out


FORKED = """
import json, sys
from daemon.config import Config
from daemon.sim.replay import run_replay
from forecaster.registry import load_current
from tests.sim.test_replay_speed import CONTENDED, ROOT, SETTINGS, report, synthetic
w = synthetic(**CONTENDED)
runs = run_replay(w, Config(), load_current(ROOT / "models"), steps=120, settings=SETTINGS, forecast_every=5, workers=2)
json.dump([[m.label, report(m)] for m in runs], sys.stdout)
"""


def forked_in_a_fresh_process() -> list:
    """The two worker processes' reports, forked from a process of its own, as `simulate --sweep` forks them: a
    fork copies every lock held by any thread of the forking process, and a pytest worker carries the threads of
    every test it ran before (a Kubernetes view retrying a stopped API server): forked from there, a child once
    hung 300 s on such a lock (CI at a7f4daa)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_worker_processes_and_prefetched_forecasts_give_exactly_the_reference_report(contended):
    model = load_current(ROOT / "models")  # the shipped LSTM: torch runs inside the forked workers too
    ref = reference(contended, model, SETTINGS, 5, 120)
    one = run_replay(contended, Config(), model, steps=120, settings=SETTINGS, forecast_every=5)
    two = forked_in_a_fresh_process()
    single = run_replay(contended, Config(), model, steps=120, settings=SETTINGS[2:3], forecast_every=5)
    assert [m.label for m in one] == [label for label, _ in two] == [m.label for m in ref]
    for r, a, (_, b) in zip(ref, one, two):
        assert report(a) == report(r), r.label
        assert b == json.loads(json.dumps(report(r))), r.label
    assert report(single[0]) == report(ref[2])  # one predictive setting: the bank keeps only its newest
    assert sum(m.summary()["preemptions"] for m in ref) > 0  # the case exercises preemption


def test_bank_keeps_only_the_newest_forecast_unless_asked_to_keep():
    w = synthetic(tenants=4, gpus=32, days=0.05, seed=3, history_days=1.0)
    keep = ForecastBank(SeasonalNaive(1440), w.demand, 5, 60, 2880)
    one = ForecastBank(SeasonalNaive(1440), w.demand, 5, 60, 2880, keep=False, prefetch=True, stop=w.start + 30)
    for k in range(w.start, w.start + 30):
        a, b = keep.at(k), one.at(k)
        assert np.array_equal(a.values, b.values, equal_nan=True) and a.issued_at == b.issued_at
    one.close()
    assert len(keep.made) == 6 and len(one.made) == 1


def test_simulator_gives_exactly_the_digests_it_gave_before_its_speedups():
    # tests/support/sim_golden.py: demand with gaps, holds, preemptions, node failures; digests pinned from the
    # simulator as it was before the speed-ups (regenerate only for a deliberate change of the physics)
    from tests.support.sim_golden import FIXTURE, drive

    want = json.loads(FIXTURE.read_text())
    got = json.loads(json.dumps(drive()))
    first = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert first is None, f"step {first}: {got[first]} != {want[first]}"
    assert len(got) == len(want)


def test_lexorder_is_lexsort():
    rng = np.random.default_rng(1)
    for n in (0, 1, 7, 500, 5000):
        small = rng.integers(0, 3, n).astype(np.int8)
        wide = rng.integers(-(1 << 40), 1 << 40, n)                 # too wide for the radix path
        step = rng.integers(0, 300, n)                              # many ties
        flag = rng.uniform(size=n) < 0.5
        flt = rng.integers(0, 50, n).astype(float)
        for keys in ((step, small), (wide, step), (flag,), (step, flag, small), (flt, step), (-step, small)):
            assert np.array_equal(lexorder(*keys), np.lexsort(keys)), (n, [k.dtype for k in keys])


def test_the_prefetch_thread_forecasts_with_the_callers_torch_thread_count(monkeypatch):
    """torch's thread count is per thread: the bank's prefetch thread ran the LSTM with one OpenMP thread per core
    whatever the replay worker had set (456 ms a forecast instead of 34 on a busy 2-core box), and every predictive
    step waited on it: `simulate --trace helios --days 2 --sweep` was at 2% after 17 minutes, ETA 18 hours. The
    thread now sets the count of the thread that hands it the work before it forecasts."""
    with torch_thread_calls(monkeypatch, start=1) as calls:
        w = synthetic(10, 160, 1, seed=3)
        bank = ForecastBank(SeasonalNaive(1440), w.demand, 5, 60, 2880, keep=False, prefetch=True, stop=w.start + 30)
        for k in range(w.start, w.start + 30):
            bank.at(k)
        bank.close()
    made_there = [n for name, n in calls if name.startswith("forecast-prefetch")]
    assert made_there and set(made_there) == {1}
