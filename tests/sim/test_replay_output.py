"""What a replay prints and draws (issue 37, items 8, 9 and 11): a table whose columns stay in line and are named
in a legend and in docs/replay.md, the comparison as lines rather than JSON, the summary first with the sweep's
table behind --table, one line where capacity rather than forecasting is short, and figures whose axes are
labelled, whose titles say durations as a person does and which say "no contention" where nothing was unmet."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from daemon.cli import cli
from daemon.sim import recommend as rec, report
from daemon.sim.replay import Meter

ROOT = Path(__file__).resolve().parents[2]
LONG = {"quantile": 0.9, "headroom": 0.05, "preempt_lead_steps": 60, "preempt_cost_aware": False}


def meter(strategy: str, knobs: dict, util: float, high: float, normal: float = 0.0) -> Meter:
    """One setting's meter over one minute: its utilization and each tier's unmet GPU-minutes."""
    m = Meter(strategy, knobs)
    m.util = [util]
    for t, v in (("high", high), ("normal", normal), ("low", 0.0)):
        m.wanted[t], m.served[t], m.unmet[t] = [10 * max(v, 100)], [10 * max(v, 100) - v], [v]
    return m


def summary(strategy: str, knobs: dict, util: float, high: float, normal: float = 0.0, pre: int = 0,
            by_spec: dict | None = None) -> dict:
    """One setting's summary as Meter.summary writes it (the fields the table, compare and recommend read)."""
    s = meter(strategy, knobs, util, high, normal).summary()
    s["preemptions"] = pre
    if by_spec is not None:
        s["by_spec"] = by_spec
    return s



def test_table_columns_stay_in_line_on_long_setting_names():
    long_ = Meter("predictive", LONG)
    long_.util = [0.5]
    short = Meter("static", {"reserve_share": 0.1})
    short.util = [0.5]
    lines = report.table([long_, short]).splitlines()
    assert len(long_.label) > 36
    # every value ends where its column's header ends, on every row
    edges = [m.end() for m in re.finditer(r"\S+", lines[1])]   # the unit row: one word per column
    for line in lines[2:]:
        ends = [m.end() for m in re.finditer(r"\S+", line)][1:]
        assert ends == edges, line


def test_the_legend_names_every_column_and_docs_list_them():
    lines = report.table([summary("reactive", {"headroom": 0.1}, 0.8, 100)], legend=True).splitlines()
    i = lines.index("columns:")
    legend = lines[i + 1:]
    assert [x.split()[0] for x in legend] == [c[0].split()[0] for c in report.COLUMNS]
    assert any(x.strip().startswith("idleQ") and "idle while queued" in x for x in legend)
    assert any(x.strip().startswith("forHi") and "for the high tier" in x for x in legend)
    doc = (ROOT / "docs" / "replay.md").read_text()
    for c in report.COLUMNS:
        assert f"`{c[0]}`" in doc, c[0]


def sweep_doc() -> dict:
    runs = [summary("static", {"reserve_share": 0.2}, 0.81, 300),
            summary("reactive", {"headroom": 0.1}, 0.80, 100, 50, 10),
            summary("predictive", {"quantile": 0.5, "headroom": 0.05}, 0.81, 40, 50, 10),
            summary("predictive", LONG, 0.83, 70, 30, 5),
            summary("perfect", {"headroom": 0.05}, 0.82, 0, 20, 4)]
    return {"workload": "hand", "runs": runs, "comparison": report.compare(runs)}


def test_a_sweep_prints_the_summary_first_and_its_table_on_request():
    from daemon.sim import terminal

    doc = sweep_doc()
    r = rec.recommend(doc)
    lines = terminal.replay_lines(doc, r, sweep=True, json_path="out.json")
    text = "\n".join(lines)
    assert lines[0] == "recommended: predictive(quantile=0.5,headroom=0.05)"
    # the recommended setting's figures against reactive's and static's, then why
    rows = {x.split()[0]: x.split() for x in lines[1:6]}
    assert rows["recommended"][1:3] == ["81.0%", "40"] and rows["reactive"][1:3] == ["80.0%", "100"]
    assert rows["static"][1:3] == ["81.0%", "300"] and lines[6].startswith("why: ")
    # each figure's unit under its head (the unmet and the work lost are GPU-minutes over the replayed window)
    assert lines[2].split() == ["%", "GPU-min", "GPU-min", "GPU-min", "jobs", "GPU-min"]
    heads = ("util", "high unmet", "normal unmet", "low unmet", "preemptions", "work lost")
    assert [lines[1].index(h) + len(h) for h in heads] == [m.end() for m in re.finditer(r"\S+", lines[2])]
    # the comparison as lines, not JSON; no table (a pointer to it instead), the snippet last
    assert "{" not in text and "comparison at equal utilization (80.0%, reactive's best point):" in lines
    assert any(re.fullmatch(r"\s+high-tier unmet, GPU-min\s+100\s+40\s+0", x) for x in lines)
    assert any(re.fullmatch(r"\s+hold flaps\s+0\s+0\s+0", x) for x in lines)   # the perfect forecast's too
    assert not any(x.startswith("setting ") for x in lines)
    assert "the table of all 5 settings: --table (--legend says what each column is), or out.json" in lines
    assert "\n".join(lines).endswith("[policy]\nquantile = 0.5\nheadroom = 0.05")
    # --table: the full table too; --legend: and what its columns are
    tab = terminal.replay_lines(doc, r, sweep=True, table=True)
    assert sum(x.startswith("setting ") for x in tab) == 1 and "columns:" not in "\n".join(tab)
    assert "columns:" in "\n".join(terminal.replay_lines(doc, r, sweep=True, legend=True))


SHORT_T4 = {"t4": {"demand_gpu_min": 90_000.0, "unmet_gpu_min": 52_000.0, "high_demand_gpu_min": 80_000.0,
                   "high_unmet_gpu_min": 29_140.0},
            "a100|t4": {"demand_gpu_min": 50_000.0, "unmet_gpu_min": 9_000.0, "high_demand_gpu_min": 0.0,
                        "high_unmet_gpu_min": 0.0}}


def test_capacity_not_forecasting_is_short_in_one_line():
    """Even the best perfect-forecast setting leaves high-tier demand on t4 unmet: the summary says so once, and
    leaves out the types where only lower tiers waited (a100|t4)."""
    from daemon.sim import shortage, terminal

    doc = sweep_doc()
    doc["runs"][-1]["by_spec"] = SHORT_T4
    doc["runs"].append(summary("perfect", {"headroom": 0.25}, 0.78, 5000, by_spec={
        k: {**v, "high_unmet_gpu_min": v["high_unmet_gpu_min"] + 100} for k, v in SHORT_T4.items()}))
    want = ("even the perfect forecast leaves 29,140 GPU-min of high-tier demand unmet on t4: capacity, not "
            "forecasting, is short")
    assert shortage.line(shortage.structural(doc["runs"])) == want
    r = rec.recommend(doc)
    assert r["capacity_short_line"] == want and rec.summary_lines(r)[-1] == want
    assert f"# {want}" in r["snippet"]
    assert terminal.replay_lines(doc, sweep=True)[0] == want   # without --recommend: first, too
    # one model (no types): the high tier as a whole, where every other setting left more unmet
    one = sweep_doc()
    one["runs"][-1]["tiers"]["high"]["unmet_gpu_min"] = 3000.0
    for r in one["runs"][:-1]:
        r["tiers"]["high"]["unmet_gpu_min"] += 3000.0
    assert shortage.line(shortage.structural(one["runs"])) == (
        "even the perfect forecast leaves 3,000 GPU-min of high-tier demand unmet: capacity, not forecasting, "
        "is short")
    for r in one["runs"][:-1]:
        r["tiers"]["high"]["unmet_gpu_min"] -= 3000.0
    # the perfect forecast serves the high tier (or leaves under 1% of its demand unmet): nothing is said
    assert shortage.structural(sweep_doc()["runs"]) == []
    one["runs"][-1]["tiers"]["high"]["unmet_gpu_min"] = 9.0   # of 1,000... no: 10 x 9 -> demand 1,000, 0.9%
    assert shortage.structural(one["runs"]) == []
    assert rec.recommend(sweep_doc())["capacity_short_line"] is None


@pytest.fixture
def figures(monkeypatch):
    """The figures pareto_figure draws, kept open (it closes them once saved) to read their text and ticks."""
    import matplotlib.pyplot as plt

    kept = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: kept.append(fig))
    yield kept
    for f in kept:
        close(f)


def labels(ax) -> list[str]:
    """The y tick labels drawn inside the axis' view."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_ylim())
    return [t.get_text() for t in ax.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]


def test_an_unmet_axis_spanning_less_than_a_decade_keeps_labelled_ticks(figures, tmp_path):
    runs = [meter("reactive", {"headroom": h}, 0.80 + h / 10, 3400 - 3000 * h, 12_000 - 5000 * h)
            for h in (0.0, 0.1, 0.2, 0.25)]
    runs += [meter("perfect", {"headroom": 0.1}, 0.8, 0, 300)]    # high tier: 0 to 3,400 (symlog, labelled)
    report.pareto_figure(runs[:4], tmp_path / "a.png", "t")
    high, normal = figures[0].axes
    for ax in (high, normal):   # 2,650..3,400 and 10,750..12,000: within a decade
        got = labels(ax)
        assert len(got) >= 3, got
        assert all(re.fullmatch(r"[0-9,.]+", x) for x in got), got
    report.pareto_figure(runs, tmp_path / "b.png", "t")
    high, normal = figures[1].axes
    assert len(labels(high)) >= 4 and len(labels(normal)) >= 4   # 0 to 3,400 and 300 to 12,000: over decades
    assert "0" in labels(high)


def test_simulate_titles_durations_humanly_and_says_no_contention(figures, tmp_path):
    """A short replay with no contention (8 tenants, 64 GPUs, 72 minutes): the title says "1 h 12 min" (not
    "0.05 days"), each panel says "no contention" instead of drawing a flat line on a +-0.05 axis, and the
    comparison prints as lines, not JSON."""
    r = CliRunner().invoke(cli, ["simulate", "--tenants", "8", "--gpus", "64", "--days", "0.05", "--out",
                                 str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    fig = figures[0]
    assert fig._suptitle.get_text() == "synthetic-8x64: 8 tenants, 64 GPUs, 1 h 12 min"
    for ax, tier in zip(fig.axes, ("high", "normal")):
        assert [t.get_text() for t in ax.texts] == [f"no contention: no setting left {tier}-tier demand unmet"]
        assert ax.get_ylim() == (-1, 1) and labels(ax) == ["0"]
    assert "comparison at equal utilization (" in r.output and '{"reactive_point"' not in r.output
    assert "setting " in r.output and "columns:" not in r.output   # not a sweep: the table; no legend unasked
    # but where to find it: the abbreviated heads (idleQ, forHi, preIdle) are not explained anywhere in the output
    assert "(--legend says what each column is)" in r.output.splitlines()


def test_simulate_legend_names_the_columns_under_the_table(tmp_path):
    r = CliRunner().invoke(cli, ["simulate", "--tenants", "8", "--gpus", "64", "--days", "0.02", "--strategies",
                                 "static,reactive", "--legend", "--out", str(tmp_path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "\ncolumns:\n" in out and re.search(r"\n  idleQ +GPU-min +idle while queued", out)
    assert out.index("setting ") < out.index("columns:")


def test_duration_text():
    assert report.duration_text(1439 / 1440) == "23 h 59 min"
    assert report.duration_text(1.0) == "1 day" and report.duration_text(2.25) == "2 days 6 h"
    assert report.duration_text(0.05) == "1 h 12 min" and report.duration_text(0.0) == "0 min"
    assert report.replay_title("w", 1, 1, 1.0) == "w: 1 tenant, 1 GPU, 1 day"
    assert (report.replay_title("w", 40, 6212, 1439 / 1440, "8-GPU nodes")
            == "w: 40 tenants, 6,212 GPUs, 23 h 59 min, 8-GPU nodes")


def test_a_sweep_prints_the_services_requests_of_the_settings_it_names_not_of_every_setting():
    """Before: `simulate --data` with a [req/s] column and --recommend printed the summary, then the pointer 'the
    table of all 95 settings: --table', then 95 rows of the services' requests, and the snippet only after them."""
    from daemon.sim import terminal

    doc = sweep_doc()
    doc["runs"].insert(1, summary("static", {"reserve_share": 0.4}, 0.70, 500))   # a setting no line names
    for k, s in enumerate(doc["runs"]):
        for tier in ("high", "normal", "low"):
            s["tiers"][tier].update(inf_requests=1000.0, inf_served=990.0 - k, inf_throttled=10.0 + k, inf_late=0.0,
                                    inf_gpu_min=5.0)
    doc["comparison"] = report.compare(doc["runs"])
    r = rec.recommend(doc)
    lines = terminal.replay_lines(doc, r, sweep=True)
    i = next(k for k, x in enumerate(lines) if x.startswith("inference requests per tier"))
    assert lines[i].endswith("the settings named above (all 6: --table):"), lines[i]
    shown = [x.split()[0] for x in lines[i + 1].splitlines()[2:]]
    named = {r["expected"]["label"], r["reactive"]["label"], r["static"]["label"],
             *(doc["comparison"][k] for k in ("reactive_point", "predictive_point", "perfect_point"))}
    assert set(shown) == named and "static(reserve_share=0.4)" not in shown, shown
    # --table: every setting, as the per-tier table
    full = terminal.replay_lines(doc, r, sweep=True, table=True)
    j = next(k for k, x in enumerate(full) if x.startswith("inference requests per tier"))
    assert full[j] == "inference requests per tier (arrived = served + throttled + late):"
    assert len(full[j + 1].splitlines()) == 2 + len(doc["runs"])


def test_a_replay_with_the_skill_gate_says_how_much_it_acted_on_the_forecast():
    """A config with policy.skill_gate.enabled printed the same table as one without: only the JSON's skill_gate
    said whether predictive acted on the forecast at all. Now one line per gated setting."""
    from daemon.sim import terminal

    doc = sweep_doc()
    doc["runs"][2]["skill_gate"] = {"read_tenants": 4, "read_tenant_steps_on_forecast": 30, "read_tenant_steps": 120,
                                    "all_tenant_steps_on_forecast": 90, "all_tenant_steps": 300}
    want = ("skill gate, predictive(quantile=0.5,headroom=0.05): acted on the forecast for 25.0% of the steps of "
            "the 4 tenants whose verdict the plan reads (the high tier); reactive for the rest")
    assert want in terminal.replay_lines(doc, rec.recommend(doc), sweep=True)
    assert want in terminal.replay_lines(doc, table=True, sweep=True)
    doc["runs"][2]["skill_gate"] = {"tenant_steps_on_forecast": 0, "tenant_steps": 300}   # an older JSON
    assert ("skill gate, predictive(quantile=0.5,headroom=0.05): acted on the forecast for 0.0% of the steps of "
            "all tenants; reactive for the rest") in terminal.replay_lines(doc, table=True)
    assert not any(x.startswith("skill gate") for x in terminal.replay_lines(sweep_doc(), table=True))
    # on a user's history the high tier was one tenant, on the forecast at every step: 'the 1 tenants ...;
    # reactive for the rest' (no rest)
    doc["runs"][2]["skill_gate"] = {"read_tenants": 1, "read_tenant_steps_on_forecast": 1440,
                                    "read_tenant_steps": 1440, "all_tenant_steps_on_forecast": 1440,
                                    "all_tenant_steps": 4320}
    assert ("skill gate, predictive(quantile=0.5,headroom=0.05): acted on the forecast for 100.0% of the steps of "
            "the 1 tenant whose verdict the plan reads (the high tier)") in terminal.replay_lines(doc, table=True)


def test_capacity_is_not_called_short_by_more_than_the_best_setting_replayed_left():
    """`simulate --from-source` on the embedded simulator: the perfect forecast left 3,897 GPU-min of high-tier demand
    unmet and predictive 1,865, and the line said "even the perfect forecast leaves 3,897 GPU-min ... capacity, not
    forecasting, is short" above a table where a forecast served 2,032 GPU-min more of it. The line now gives the
    least any setting left, and names that setting; nothing where one served it (below 1% of its demand)."""
    from daemon.sim import shortage

    doc = sweep_doc()
    doc["runs"][-1]["tiers"]["high"]["unmet_gpu_min"] = 3897.0
    for r in doc["runs"][:-1]:
        r["tiers"]["high"]["unmet_gpu_min"] = 5817.0 if r["strategy"] != "predictive" else 1865.0
        r["tiers"]["high"]["demand_gpu_min"] = doc["runs"][-1]["tiers"]["high"]["demand_gpu_min"]
    short = shortage.structural(doc["runs"])
    assert [(x["unmet_gpu_min"], x["strategy"]) for x in short] == [(1865.0, "predictive")]
    got = shortage.line(short)
    assert got.startswith("even the setting replayed that served the high tier best (predictive(") and \
        "leaves 1,865 GPU-min of its demand unmet, and the perfect forecast more: capacity" in got, got
    assert "3,897" not in got
    # a setting that served it all: nothing is short
    doc["runs"][2]["tiers"]["high"]["unmet_gpu_min"] = 0.0
    assert shortage.structural(doc["runs"]) == []



def test_the_comparison_gives_the_perfect_forecasts_low_tier_unmet_and_hold_flaps():
    # simulate --data on a user's history printed '-' under perfect for low-tier unmet and hold flaps, where its
    # run had both (the table above gave its low-tier unmet): read as 'not measured'
    runs = [summary("reactive", {"headroom": 0.1}, 0.88, 179.0), summary("predictive", {"quantile": 0.9}, 0.88, 84.0),
            summary("perfect", {"headroom": 0.0}, 0.88, 37.0)]
    for s, low, flaps in zip(runs, (8107.0, 8916.0, 8893.0), (677, 25, 3)):
        s["tiers"]["low"]["unmet_gpu_min"], s["hold_flaps"] = low, flaps
    lines = report.comparison_lines(report.compare(runs))
    low = next(x for x in lines if "low-tier unmet" in x)
    flaps = next(x for x in lines if "hold flaps" in x)
    assert low.split()[-3:] == ["8,107", "8,916", "8,893"] and flaps.split()[-3:] == ["677", "25", "3"], lines
