"""Recommended settings from a replay (issue #27): the setting on the predictive frontier that best meets the
objective, printed as a config snippet with its figures and reactive's and static's beside them."""

import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from daemon.cli import cli
from daemon.config import Config
from daemon.sim import recommend as rec
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]


def run(strategy: str, knobs: dict, util: float, high: float, normal: float, pre: int, low: float = 0.0) -> dict:
    label = f"{strategy}({','.join(f'{k}={v:g}' for k, v in knobs.items())})" if knobs else strategy
    tier = {"unmet_gpu_min": 0.0, "wait_p99_min": 0.0}
    return {"strategy": strategy, "knobs": knobs, "label": label, "utilization": util, "preemptions": pre,
            "work_lost_gpu_min": 10.0 * pre, "preempted_idle_gpu_min": 1.0 * pre,
            "tiers": {"high": {**tier, "unmet_gpu_min": high}, "normal": {**tier, "unmet_gpu_min": normal},
                      "low": {**tier, "unmet_gpu_min": low}}}


def replay(*runs: dict) -> dict:
    return {"workload": "hand", "runs": list(runs), "comparison": {"reactive_point": "reactive(headroom=0.1)"}}


REACTIVE = run("reactive", {"headroom": 0.1}, 0.80, 100, 50, 10)
STATIC = run("static", {"reserve_share": 0.2}, 0.81, 300, 20, 0)


def test_default_objective_least_high_unmet_within_reactives_normal_unmet_and_preemptions():
    a = run("predictive", {"quantile": 0.9, "headroom": 0.05}, 0.80, 10, 60, 8)    # least high unmet, normal worse
    b = run("predictive", {"quantile": 0.5, "headroom": 0.05}, 0.81, 40, 50, 10)   # meets both: the answer
    c = run("predictive", {"quantile": 0.5, "headroom": 0.0}, 0.83, 70, 30, 5)     # meets both, more high unmet
    d = run("predictive", {"quantile": 0.99, "headroom": 0.0}, 0.79, 50, 40, 9)    # dominated by b: not on frontier
    r = rec.recommend(replay(REACTIVE, STATIC, a, b, c, d))
    assert r["recommended"] == b["label"] and r["predictive_helps"]
    assert d["label"] not in r["predictive_frontier"] and set(r["feasible"]) == {b["label"], c["label"]}
    assert r["expected"]["high_unmet"] == 40 and r["reactive"]["high_unmet"] == 100
    assert r["static"]["label"] == STATIC["label"]
    # the snippet is valid TOML that the config accepts, with the chosen knobs
    doc = tomllib.loads(r["snippet"])
    assert doc == {"policy": {"quantile": 0.5, "headroom": 0.05}}
    Config(**doc)
    # another objective: fewest preemptions, high-tier unmet at most half of reactive's (normal unmet free)
    o = rec.objective("preemptions", ["high_unmet<=0.5*reactive"])
    assert rec.recommend(replay(REACTIVE, STATIC, a, b, c, d), o)["recommended"] == a["label"]
    o = rec.objective("preemptions", ["high_unmet<=0.8*reactive"])
    assert rec.recommend(replay(REACTIVE, STATIC, a, b, c, d), o)["recommended"] == c["label"]


def test_when_predictive_does_not_help_it_says_so_and_recommends_reactive():
    worse = run("predictive", {"quantile": 0.9, "headroom": 0.05}, 0.82, 10, 90, 30)  # breaks both constraints
    worse2 = run("predictive", {"quantile": 0.5, "headroom": 0.05}, 0.83, 20, 80, 20)  # the same (a sweep's)
    r = rec.recommend(replay(REACTIVE, STATIC, worse, worse2))
    assert not r["predictive_helps"] and r["recommended"] == REACTIVE["label"] and r["strategy"] == "reactive"
    assert "predictive does not help" in r["snippet"] and "predictive does not help" in rec.text(r)
    assert "none of the 2 predictive settings on its frontier meets" in r["why"]
    # reactive in the daemon: no forecast (forecaster.kind = "none"), reactive's headroom; a config that validates
    doc = tomllib.loads(r["snippet"])
    assert doc == {"forecaster": {"kind": "none"}, "policy": {"headroom": 0.1}}
    Config(**doc)
    assert r["expected"] == r["reactive"]


def test_a_replay_of_one_predictive_setting_is_no_ground_for_does_not_help():
    # recommend on simulate --data's JSON (each strategy once, no --sweep) said 'predictive does not help on this
    # history' from its one predictive setting, where simulate --recommend on the same data found one that beat
    # reactive: it now says only that the one setting did not, and what tries the others
    worse = run("predictive", {"quantile": 0.9, "headroom": 0.05}, 0.82, 10, 90, 30)
    r = rec.recommend(replay(REACTIVE, STATIC, worse))
    assert not r["predictive_helps"] and r["recommended"] == REACTIVE["label"] and r["predictive_settings"] == 1
    want = ("predictive did not beat reactive at the one predictive setting replayed, which does not say it cannot: "
            "simulate --sweep (or --recommend) tries each strategy's settings")
    assert rec.summary_lines(r)[0] == f"{want}; recommended: {REACTIVE['label']}"
    assert f"# {want}; recommended: reactive" in r["snippet"] and "does not help" not in rec.text(r)
    assert "none of the 1 predictive setting on its frontier meets" in r["why"]


def test_the_snippets_figures_say_their_units():
    """The snippet's comment said '(GPU-min)' over utilization, unmet, preemptions and work lost alike: 33
    preemptions read as 33 GPU-minutes. Preemptions are jobs, the others GPU-minutes (the table's units)."""
    b = run("predictive", {"quantile": 0.5, "headroom": 0.05}, 0.81, 40, 50, 10)
    r = rec.recommend(replay(REACTIVE, STATIC, b))
    lines = r["snippet"].splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("# expected over the replayed window"))
    assert lines[head] == "# expected over the replayed window (unmet and work lost in GPU-min):"
    for x in lines[head + 1: head + 4]:
        assert " preemptions     10 jobs  work lost      100" in x or " preemptions      0 jobs " in x, x


def test_the_daemon_runs_reactive_as_the_snippet_says(tmp_path):
    # forecaster.kind = "none": cycles plan on current demand only (no forecast), as the replay's reactive does
    from daemon.service.wiring import build_runtime

    rt = build_runtime(Config(forecaster={"kind": "none"}, state={"path": tmp_path / "s.sqlite"},
                              source={"simulator": {"tenants": 8}}, cluster={"gpus": 64}))
    try:
        for _ in range(2):
            res = rt.runner.run_once()
            assert res.outcome == "ok" and res.plan is not None and res.forecast is None
        assert rt.runner.snapshot.forecast is None and rt.forecaster_note.startswith("forecaster: none")
    finally:
        rt.close()


@pytest.mark.parametrize("bad", ["normal_unmet", "x<=reactive", "preemptions<=2*", "preemptions=3"])
def test_a_malformed_constraint_is_refused(bad):
    with pytest.raises(rec.ObjectiveError):
        rec.objective(None, [bad])


def figures_of(run: dict) -> dict:
    return {k: f(run) for k, f in rec.FIGURES.items()}


def check_figures_match(r: dict, doc: dict) -> None:
    by = {x["label"]: x for x in doc["runs"]}
    assert r["recommended"] in by
    chosen = by[r["recommended"]]
    assert {k: v for k, v in r["expected"].items() if k != "label"} == figures_of(chosen)
    assert {k: v for k, v in r["reactive"].items() if k != "label"} == figures_of(by[r["reactive"]["label"]])
    assert {k: v for k, v in r["static"].items() if k != "label"} == figures_of(by[r["static"]["label"]])
    assert r["reactive"]["label"] == doc["comparison"]["reactive_point"]
    snippet = tomllib.loads(r["snippet"])
    assert snippet.get("policy", {}) == chosen["knobs"]
    assert (snippet.get("forecaster") == {"kind": "none"}) == (chosen["strategy"] == "reactive")
    Config(**snippet)
    if r["predictive_helps"]:
        reactive = by[r["reactive"]["label"]]
        assert chosen["strategy"] == "predictive" and r["recommended"] in doc["frontiers"]["predictive"]
        assert chosen["tiers"]["high"]["unmet_gpu_min"] < reactive["tiers"]["high"]["unmet_gpu_min"]
        assert chosen["tiers"]["normal"]["unmet_gpu_min"] <= reactive["tiers"]["normal"]["unmet_gpu_min"]
        assert chosen["preemptions"] <= reactive["preemptions"]


def test_recommend_command_on_the_published_helios_replay():
    path = ROOT / "bench" / "out" / "replay_helios.json"
    out = CliRunner().invoke(cli, ["recommend", str(path), "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    check_figures_match(json.loads(out.output), json.loads(path.read_text()))


@pytest.mark.skipif(not (SHARED_DATA / "helios-earth-2020").is_dir(), reason="Helios trace not in ../shared/data")
def test_simulate_recommend_on_helios_names_a_setting_whose_figures_match_the_replay_json(tmp_path):
    out = tmp_path / "replay"
    r = CliRunner().invoke(cli, ["simulate", "--trace", "helios", "--days", "0.1", "--recommend", "--data-dir",
                                 str(SHARED_DATA), "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "helios-earth-2020.json").read_text())
    assert "recommended:" in r.output and "[policy]" in r.output
    check_figures_match(doc["recommendation"], doc)
    # the stored recommendation is what the pure function gives on the stored replay
    assert rec.recommend({k: v for k, v in doc.items() if k != "recommendation"}) == doc["recommendation"]


@pytest.mark.security
@pytest.mark.parametrize("text, where", [
    ("[]", "the document"),
    ('"x"', "the document"),
    ('{"runs": 5}', "runs"),
    ('{"runs": [null]}', "runs.0"),
    ('{"runs": [{"strategy": "reactive"}]}', "runs.0.label"),
    ('{"runs": [{"strategy": "reactive", "knobs": {}, "label": "r", "utilization": 0.8, "preemptions": 1, '
     '"work_lost_gpu_min": 0, "preempted_idle_gpu_min": 0, "tiers": {"high": {"unmet_gpu_min": 1}}}]}',
     "runs.0.tiers.normal"),
    ('{"runs": [], "comparison": []}', "comparison"),
    ("{not json", "not JSON"),
    ('{"runs": ' + "[" * 100_000 + "]" * 100_000 + "}", "not a replay: JSON nested too deeply"),  # RecursionError
])
def test_a_malformed_replay_json_is_one_line_and_exit_2(tmp_path, text, where):
    # a hand-edited, truncated or foreign JSON: one line naming the first bad field, exit 2 (bad input), never a
    # traceback out of the frontier
    f = tmp_path / "replay.json"
    f.write_text(text)
    r = CliRunner().invoke(cli, ["recommend", str(f)])
    lines = [x for x in r.output.strip().splitlines() if x]
    assert r.exit_code == 2, (r.output, repr(r.exception))
    assert len(lines) == 1 and lines[0].startswith(f"gpu-autoscaler: recommend: {f}: "), r.output
    assert where in lines[0], lines[0]


def _with_requests(r: dict, requests: float, throttled: float) -> dict:
    return {**r, "tiers": {**r["tiers"], "high": {**r["tiers"]["high"], "inf_requests": requests,
                                                  "inf_throttled": throttled}}}


def test_with_the_high_tiers_services_a_tie_on_high_unmet_is_decided_by_its_requests_throttled():
    """A user's own history with a high-tier service (--data, a [req/s] column): every setting left 0 high-tier
    GPU-minutes unmet, predictive throttled 0.139% of the service's requests and reactive 0.529%, and
    `--recommend` said "predictive does not help on this history" and recommended [forecaster] kind = "none". The
    high tier's requests throttled now decide a tie on its unmet GPUs, and the summary shows them."""
    r0 = _with_requests(run("reactive", {"headroom": 0.1}, 0.704, 0, 0, 0), 450_006, 2_380)
    st = _with_requests(run("static", {"reserve_share": 0.1}, 0.71, 0, 0, 0), 450_006, 2_380)
    p = _with_requests(run("predictive", {"quantile": 0.9, "headroom": 0.0}, 0.709, 0, 0, 0), 450_006, 624)
    # the same GPUs unmet at less utilization, more requests throttled: off the frontier
    q = _with_requests(run("predictive", {"quantile": 0.5, "headroom": 0.0}, 0.70, 0, 0, 0), 450_006, 900)
    r = rec.recommend(replay(r0, st, p, q))
    assert r["predictive_helps"] and r["recommended"] == p["label"], r["why"]
    assert "high_throttled 0.139% against reactive's 0 and high_throttled 0.529%" in r["why"], r["why"]
    assert r["objective"].endswith("then the least high_throttled (the share of the high tier's requests throttled)")
    lines = rec.summary_lines(r)
    assert "high thr" in lines[1] and "0.139%" in lines[3] and "0.529%" in lines[4], lines
    # where the throttled requests do not differ, the tie stays a tie: reactive, as before
    same = _with_requests(run("predictive", {"quantile": 0.9, "headroom": 0.0}, 0.709, 0, 0, 0), 450_006, 2_380)
    assert not rec.recommend(replay(r0, st, same))["predictive_helps"]
    # without services nothing changes: no column, no tie-break
    plain = rec.recommend(replay(REACTIVE, STATIC, run("predictive", {"quantile": 0.9}, 0.8, 100, 50, 10)))
    assert not plain["predictive_helps"] and "high thr" not in rec.summary_lines(plain)[1]
    assert "high_throttled" not in plain["objective"]


def test_recommend_on_a_min_gpus_report_says_what_it_is(tmp_path):
    """`simulate --data ... --min-gpus` writes reports/replay/own-<file>_min_gpus.json beside the replay's JSON; a
    day-one `recommend` on it said "the replay has no reactive setting: replay with --strategies including reactive"
    (exit 1), though reactive was sized in it: it has no runs, it is a report of another kind. Now one line says so,
    exit 2 (bad input), and which JSON recommend reads."""
    doc = {"workload": "own-hist", "steps": 1440, "gpus_per_node": 8, "own_nodes": 12,
           "slo": {"high": 0.001, "normal": 0.02}, "forecaster": "seasonal_naive_1440",
           "strategies": {"reactive": {"gpus": 88}, "predictive": {"gpus": 88}}, "savings": {}}
    f = tmp_path / "own-hist_min_gpus.json"
    f.write_text(json.dumps(doc))
    r = CliRunner().invoke(cli, ["recommend", str(f)])
    lines = [x for x in r.output.strip().splitlines() if x]
    assert r.exit_code == 2, (r.output, repr(r.exception))
    assert len(lines) == 1 and "--min-gpus" in lines[0] and "no reactive setting" not in lines[0], r.output
