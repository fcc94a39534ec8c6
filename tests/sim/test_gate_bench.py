"""The skill gate's replay bench (issue 40, item 2): `gate_margin` as a replay knob, the comparison of each gated
variant at reactive's best point (daemon/sim/report.py gate_compare), the margin's choice in the docs
(bench/gate_docs.py) and `--choice-from`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from daemon.sim import report
from daemon.sim.replay import GATE_MARGIN, perfect_knob_error
from tests.conftest import REPO
from tests.sim import test_replay_bench_settings as settings_tests

BENCH = REPO / "bench" / "replay_bench.py"
bench = settings_tests.bench   # the fixture: the bench as a module, as the --settings tests load it


def _run(strategy: str, util: float, high: float, normal: float, low: float, pre: int, **knobs) -> dict:
    label = f"{strategy}({','.join(f'{k}={v}' for k, v in knobs.items())})"
    return {"strategy": strategy, "knobs": knobs, "label": label, "utilization": util, "preemptions": pre,
            "preemptions_for": {"high": 0}, "work_lost_gpu_min": 0.0, "preempted_idle_gpu_min": 0.0,
            "tiers": {"high": {"unmet_gpu_min": high}, "normal": {"unmet_gpu_min": normal},
                      "low": {"unmet_gpu_min": low}}}


def test_the_gate_margin_is_a_replay_knob_of_predictive_only(bench):
    assert bench.parse_settings('[["predictive", {"quantile": 0.9, "gate_margin": 0.2}]]') == [
        ("predictive", {"quantile": 0.9, GATE_MARGIN: 0.2})]
    assert "acts on predictive's plans only" in perfect_knob_error("reactive", {GATE_MARGIN: 0.1})
    for bad in (1.0, -0.1, "0.1", True):
        assert "margin in [0, 1)" in perfect_knob_error("predictive", {GATE_MARGIN: bad})
    sweep = bench.gate_sweep([0.1, 0.3])
    pred = [k for s, k in sweep if s == "predictive"]
    ungated = [k for k in pred if GATE_MARGIN not in k]
    assert [k for s, k in sweep if s == "reactive"] == [{"headroom": h} for h in bench.GATE_HEADROOMS]
    for m in (0.1, 0.3):   # every ungated setting once more at each margin, nothing else
        assert [{a: b for a, b in k.items() if a != GATE_MARGIN} for k in pred if k.get(GATE_MARGIN) == m] == ungated


def test_gate_quantiles_add_predictive_points_each_ungated_and_gated(bench, monkeypatch, capsys):
    """--gate-quantiles 0.5,0.9: each quantile over the six headrooms, ungated and at every margin (on synthetic
    only a p50 point reaches reactive's utilization, where the gain kept is measured); refused without margins."""
    sweep = bench.gate_sweep([0.1], None, (0.5, 0.9))
    pred = [k for s, k in sweep if s == "predictive"]
    ungated = [k for k in pred if GATE_MARGIN not in k]
    assert ungated == [{"quantile": q, "headroom": h} for q in (0.5, 0.9) for h in bench.GATE_HEADROOMS]
    assert [{a: b for a, b in k.items() if a != GATE_MARGIN} for k in pred if GATE_MARGIN in k] == ungated
    assert bench.gate_sweep([0.1]) == bench.gate_sweep([0.1], None, (0.9,))   # the default: the policy's p90
    for argv in (["--gate-quantiles", "0.5"], ["--gate-margins", "0.1", "--suffix", "_g", "--gate-quantiles", "1.5"],
                 ["--gate-margins", "0.1", "--suffix", "_g", "--gate-quantiles", "p50"]):
        monkeypatch.setattr(sys, "argv", ["replay_bench.py", *argv])
        with pytest.raises(SystemExit) as e:
            bench.main()
        assert "--gate-quantiles" in str(e.value)


def test_each_gated_variant_is_compared_at_reactives_best_point_with_the_gain_it_keeps(bench):
    import targets  # bench/ is on sys.path while the fixture holds it

    tg = targets.REPLAY_GATED_BY_CASE["synthetic"]
    runs = [_run("reactive", 0.90, 400, 1000, 5000, 100, headroom=0.15),
            _run("reactive", 0.80, 100, 500, 2000, 50, headroom=0.4),
            _run("predictive", 0.898, 100, 1000, 5000, 150, quantile=0.9),            # gains 300, too many preemptions
            _run("predictive", 0.70, 0, 0, 0, 0, quantile=0.5),                        # below reactive's utilization
            _run("predictive", 0.899, 160, 1040, 5200, 108, quantile=0.9, gate_margin=0.1),   # keeps 240 of 300
            _run("predictive", 0.899, 200, 1000, 5000, 100, quantile=0.9, gate_margin=0.3)]   # keeps 200 of 300
    out = report.gate_compare(runs, [0.1, 0.3], tg)
    assert set(out) == {"ungated", "gate_margin=0.1", "gate_margin=0.3"}
    assert out["ungated"]["reactive_point"] == "reactive(headroom=0.15)"
    assert out["ungated"]["targets"]["preemptions_110pct"] is False and "keeps_gain" not in out["ungated"]["targets"]
    a, b = out["gate_margin=0.1"], out["gate_margin=0.3"]
    assert a["predictive_point"] == "predictive(quantile=0.9,gate_margin=0.1)"
    assert a["high_gain_kept"] == pytest.approx(0.8) and a["all_met"] is True
    assert b["high_gain_kept"] == pytest.approx(2 / 3) and b["targets"]["keeps_gain"] is False
    assert b["all_met"] is False and sum(v is False for v in b["targets"].values()) == 1
    json.dumps(out)   # written into the bench JSON as is


def test_the_docs_choose_the_margin_on_the_choice_windows_only():
    sys.path.insert(0, str(REPO / "bench"))
    import gate_docs
    import targets

    def case(name: str, by_margin: dict[float, tuple]) -> dict:
        tg = targets.REPLAY_GATED
        runs = [_run("reactive", 0.9, 100, 1000, 1000, 100, headroom=0.15),
                _run("predictive", 0.9, 100, 1000, 1000, 100, quantile=0.9)]
        runs += [_run("predictive", 0.9, *v, quantile=0.9, gate_margin=m) for m, v in by_margin.items()]
        return {"case": name, "targets": tg, "gate_margins": list(by_margin),
                "comparison": report.gate_compare(runs, list(by_margin), tg)}

    ok, bad = (100, 1000, 1000, 100), (100, 1200, 1000, 100)   # the second: normal tier 20% over
    files = {"replay_synthetic_gate.json": case("synthetic", {0.1: ok, 0.3: ok}),
             "replay_helios_gate.json": case("helios", {0.1: bad, 0.3: ok}),
             # the unseen window would pick 0.1: it has no say
             "replay_helios_gate_unseen.json": case("helios", {0.1: ok, 0.3: bad})}
    assert gate_docs.choose(files) == 0.3
    files["replay_helios_gate.json"] = case("helios", {0.1: ok, 0.3: ok})
    assert gate_docs.choose(files) == 0.1                      # a tie: the smaller margin


def test_the_docs_say_which_margins_meet_every_measured_check_and_none_when_none_does():
    sys.path.insert(0, str(REPO / "bench"))
    import gate_docs
    import targets

    tg = targets.REPLAY_GATED_BY_CASE["synthetic"]   # with the gain kept, not measured without an ungated twin
    runs = [_run("reactive", 0.9, 100, 1000, 1000, 100, headroom=0.15),
            _run("predictive", 0.7, 0, 0, 0, 0, quantile=0.9),                          # no ungated twin
            _run("predictive", 0.9, 90, 1200, 1000, 100, quantile=0.9, gate_margin=0.1),   # normal 20% over
            _run("predictive", 0.9, 101, 1000, 1000, 100, quantile=0.9, gate_margin=0.2)]  # high 1% over
    d = {"targets": tg, "gate_margins": [0.1, 0.2], "comparison": report.gate_compare(runs, [0.1, 0.2], tg)}
    assert gate_docs.meeting_measured(d) == ("Margins tried (0.1, 0.2) whose point meets every check measured "
                                             f"({tg['keeps_gain']['what']}: not measured, left aside): **none**.")
    runs.append(_run("predictive", 0.9, 100, 1000, 1000, 100, quantile=0.9, gate_margin=0.3))
    d = {"targets": tg, "gate_margins": [0.1, 0.2, 0.3],
         "comparison": report.gate_compare(runs, [0.1, 0.2, 0.3], tg)}
    assert gate_docs.meeting_measured(d).endswith("left aside): 0.3.")


def test_the_docs_show_the_share_of_the_tenants_the_plan_reads_and_an_old_jsons_as_of_all_tenants():
    sys.path.insert(0, str(REPO / "bench"))
    import gate_docs

    def pct(x: float, d: int) -> str:
        return f"{100 * x:.{d}f}%"

    new = {"read_tenants": 4, "read_tenant_steps": 400, "read_tenant_steps_on_forecast": 100,
           "all_tenant_steps": 4000, "all_tenant_steps_on_forecast": 1600}
    assert gate_docs.on_forecast(new, pct) == "25%"
    # a JSON from before the split: its only count is of all tenants, and it says so
    assert gate_docs.on_forecast({"tenant_steps": 4000, "tenant_steps_on_forecast": 1600}, pct) == "40% of all tenants"
    assert gate_docs.on_forecast(None, pct) == "all (ungated)"
    assert gate_docs.on_forecast({**new, "read_tenants": 0, "read_tenant_steps": 0,
                                  "read_tenant_steps_on_forecast": 0}, pct) == "none read"


def test_choice_from_another_history_or_an_lstm_is_refused_in_one_line(tmp_path):
    base = [sys.executable, str(BENCH), "--cases", "synthetic", "--days", "0.02", "--workers", "1", "--out",
            str(tmp_path), "--figures", str(tmp_path), "--gate-margins", "0.1", "--suffix", "_g"]
    for src, says in (("replay_helios.json", "its case is 'helios', this run's 'synthetic'"),
                      ("replay_synthetic.json", "an LSTM fitted in that run and not kept")):
        r = subprocess.run(base + ["--choice-from", str(REPO / "bench" / "out" / src)], capture_output=True,
                           text=True, timeout=300, cwd=REPO)
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr[-800:]
    r = subprocess.run(base[:-4] + ["--gate-margins", "0.1,1.5", "--suffix", "_g"], capture_output=True, text=True,
                       timeout=300, cwd=REPO)
    assert r.returncode == 1 and "each margin is in [0, 1)" in r.stderr and "Traceback" not in r.stderr
