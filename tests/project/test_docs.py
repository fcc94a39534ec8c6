"""The docs carry the benches' numbers and nothing typed: every table of measured numbers in README.md and
docs/*.md is rendered by bench/render_docs.py from the committed JSON in bench/out/, between
`<!-- generated:NAME -->` markers, and "met" is computed from the goals in that JSON. These tests fail when a
rendered block is stale (someone edited a number by hand, or a bench's JSON changed without a re-render), when
the markers do not pair up, and when a relative link points nowhere. No bench runs here: reading the JSON and
importing the config models takes well under a second.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("render_docs", REPO / "bench" / "render_docs.py")
render_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_docs)

DOCS = render_docs.doc_files(REPO)


def copy_docs(tmp_path: Path) -> Path:
    """README.md and docs/*.md in a scratch root, so a test can spoil them without touching the checkout."""
    (tmp_path / "docs").mkdir()
    for p in DOCS:
        shutil.copy(p, tmp_path / p.relative_to(REPO))
    return tmp_path


def test_every_rendered_block_matches_the_committed_json():
    problems = render_docs.run(REPO, check=True)
    assert problems == [], "\n".join(problems) + "\nrun: python bench/render_docs.py"


def test_the_check_fails_on_a_number_edited_by_hand(tmp_path):
    root = copy_docs(tmp_path)
    page = root / "docs" / "benchmarks.md"
    text = page.read_text()
    start = text.index("<!-- generated:policy -->")
    end = text.index("<!-- /generated:policy -->")
    block = text[start:end]
    digit = re.search(r"\d", block[len("<!-- generated:policy -->"):])
    assert digit, "the policy block holds numbers"
    i = start + len("<!-- generated:policy -->") + digit.start()
    page.write_text(text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:])
    problems = render_docs.run(root, check=True)
    assert problems == ["docs/benchmarks.md: generated:policy is stale (run: python bench/render_docs.py)"]
    # and rendering puts the measured number back
    assert render_docs.run(root) == []
    assert page.read_text() == (REPO / "docs" / "benchmarks.md").read_text()


def test_met_is_computed_from_the_goal_in_the_json(tmp_path, monkeypatch):
    """Tighten a goal in a copy of the JSON: the verdict the docs show changes with it, so it was never typed."""
    out = tmp_path / "out"
    shutil.copytree(REPO / "bench" / "out", out)
    d = json.loads((out / "failover.json").read_text())
    measured = d["via_alertmanager"]["receipt_to_requeued_s"]
    d["targets"]["via_alertmanager_5s"]["value"] = measured / 2
    (out / "failover.json").write_text(json.dumps(d))
    monkeypatch.setattr(render_docs.common, "OUT", out)   # load, exists and out_glob read it there
    render_docs.load.cache_clear()
    try:
        assert "**not met**" in render_docs.BLOCKS["failover"]()
        problems = render_docs.run(REPO, check=True)
    finally:
        render_docs.load.cache_clear()
    assert "docs/benchmarks.md: generated:failover is stale (run: python bench/render_docs.py)" in problems
    assert "README.md: generated:results-at-a-glance is stale (run: python bench/render_docs.py)" in problems


def test_a_sizing_target_names_the_perfect_forecasts_saving_from_the_json(tmp_path, monkeypatch):
    """Beside each sizing target the docs say what the perfect forecast saved on the same run, read from the JSON:
    a goal above it is out of any forecast's reach, and says so only then."""
    out = tmp_path / "out"
    shutil.copytree(REPO / "bench" / "out", out)
    d = json.loads((out / "sizing_synthetic.json").read_text())
    static = d["strategies"]["static"]["gpus"]
    monkeypatch.setattr(render_docs.common, "OUT", out)
    render_docs.load.cache_clear()
    try:
        for perfect, reach in ((static, True), (static // 2, False)):
            d["strategies"]["perfect"]["gpus"] = perfect
            (out / "sizing_synthetic.json").write_text(json.dumps(d))
            render_docs.load.cache_clear()
            lines = render_docs.BLOCKS["replay-sizing"]().splitlines()
            at = next(i for i, x in enumerate(lines) if x.startswith("- **synthetic**"))
            line = next(x for x in lines[at:] if x.startswith("  - target:"))
            assert f"the perfect forecast saves {1 - perfect / static:.1%} of static's" in line
            assert ("no forecast can meet it" in line) is reach
    finally:
        render_docs.load.cache_clear()


def test_the_sizing_tables_binding_part_counts_the_high_tiers_throttled_requests():
    """"Nearest its limit" names the SLO part a smaller cluster breaks first; on a trace with services that is
    often the high tier's throttled requests (ServeGen: 0.083% of 0.1% where the normal tier is at 0.04% of 2%),
    which it once left out and named the normal tier."""
    binding = render_docs.replay_sizing._binding
    slo = {"high": 0.001, "normal": 0.02, "high_requests": 0.001}
    z = {"high_unmet_share": 0.0, "normal_unmet_share": 0.0004, "high_throttled_share": 0.00083}
    assert binding(z, slo) == "high requests"
    assert binding({**z, "high_throttled_share": None}, slo) == "normal"      # a batch-only trace
    assert binding({**z, "high_unmet_share": 0.00095}, slo) == "high"


@pytest.mark.parametrize("text, error", [
    ("a\n<!-- generated:policy -->\nx\n", "never closed"),
    ("<!-- /generated:policy -->\n", "was not opened"),
    ("<!-- generated:policy -->\n<!-- generated:failover -->\n<!-- /generated:failover -->\n"
     "<!-- /generated:policy -->\n", "opens inside"),
    ("<!-- generated:policy -->\n<!-- /generated:failover -->\n", "closes generated:policy"),
    ("see <!-- generated:policy -->\n<!-- /generated:policy -->\n", "line of its own"),
])
def test_malformed_markers_are_refused(text, error):
    with pytest.raises(render_docs.DocError, match=error):
        render_docs.blocks_in(text, "page.md")


def test_markers_in_the_docs_pair_up_and_name_known_blocks():
    seen = []
    for p in DOCS:
        for name, start, end in render_docs.blocks_in(p.read_text(), str(p)):
            assert name in render_docs.BLOCKS, f"{p}: generated:{name}"
            assert start <= end
            seen.append(name)
    assert sorted(seen) == sorted(render_docs.BLOCKS), "each block appears exactly once"


def test_an_unknown_block_name_is_reported(tmp_path):
    root = copy_docs(tmp_path)
    page = root / "docs" / "security.md"
    page.write_text(page.read_text() + "\n<!-- generated:no-such-block -->\n<!-- /generated:no-such-block -->\n")
    assert render_docs.run(root, check=True) == [
        "docs/security.md: generated:no-such-block is not a block bench/render_docs.py knows"]


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without code blocks and code spans, where brackets and parentheses are not links."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_every_relative_link_points_to_an_existing_file_and_heading():
    bad = []
    for p in DOCS:
        for target in LINK.findall(prose(p.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (p.parent / file).resolve() if file else p
            if not dest.exists():
                bad.append(f"{p.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{p.relative_to(REPO)}: {target} (no such heading)")
    assert bad == [], "\n".join(bad)


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n\n[a](missing.md) [b](#title) [c](#nowhere)\n")
    targets = LINK.findall(page.read_text())
    assert targets == ["missing.md", "#title", "#nowhere"]
    assert not (tmp_path / "missing.md").exists()
    assert "title" in anchors(page) and "nowhere" not in anchors(page)


def test_goals_in_the_json_give_the_verdicts_the_benches_computed():
    """The goals added to the JSON agree with what each bench decided when it ran (a typo in a goal shows here)."""
    for case in ("synthetic", "helios"):
        d = render_docs.replay(case)
        assert render_docs.replay_verdicts(d) == d["comparison"]["targets"], case
    ft = render_docs.load("forecast_traces.json")
    names = {"lstm_15pct_better": "target_15pct_better", "lstm_within_2pct": "target_within_2pct",
             "pick_p90_coverage": "target_coverage_087_093"}
    for trace, t in ft["traces"].items():
        for goal, flag in names.items():
            assert render_docs.met(ft["targets"][goal], t) == t[flag], (trace, goal)
    ha = render_docs.load("ha-takeover.json")
    assert render_docs.met(ha["targets"]["takeover_2_intervals"], ha) == (
        ha["within_two_intervals"] == len(ha["rounds"]))


def test_the_results_at_a_glance_give_the_windows_target_beside_the_etas():
    """Issue 39 has two targets: README's results at a glance gave the start-time estimate's and not the windows'.
    Its row reads the seeds' pooled run (docs/windows.md's verdict): each condition's verdict from the JSON."""
    glance = render_docs.BLOCKS["results-at-a-glance"]()
    line = next((x for x in glance.splitlines() if x.startswith("| [recurring windows]")), None)
    assert line is not None, glance
    p = render_docs.load("windows_synthetic_seeds.json")["pool"]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert f"{p['cut']:.1%}" in cells[1] and f"{p['normal_unmet_delta_gpu_min']:+,.0f}" in cells[1]
    c = p["conditions"]
    assert cells[3] == "; ".join("met" if c[k] else "**not met**" for k in ("cut", "normal_unmet", "preemptions"))


def test_the_etas_scores_at_fixed_times_after_are_rendered_with_their_verdicts(tmp_path, monkeypatch):
    """Issue 39 asks the estimate's error at the start of the wait and at fixed times after: docs/eta.md renders
    the JSON's at_ages per trace, with the goals applied (and the p50s measured beside), and says so where a JSON
    has none."""
    out = tmp_path / "out"
    shutil.copytree(REPO / "bench" / "out", out)
    d = json.loads((out / "eta_helios.json").read_text())
    d["eta"]["at_ages"] = {"10": {"jobs_waited_and_started": 40, "median_wait_min": 30.0,
                                  "p50_median_abs_error_min": 6.0, "naive_median_abs_error_min": 24.0,
                                  "error_vs_naive": 0.25, "p90_coverage": 0.8, "p50_aged_blend_error_vs_naive": 0.3,
                                  "p50_scaled_error_vs_naive": 0.9}}
    (out / "eta_helios.json").write_text(json.dumps(d))
    e = json.loads((out / "eta_helios_second.json").read_text())
    e["eta"].pop("at_ages", None)
    (out / "eta_helios_second.json").write_text(json.dumps(e))
    monkeypatch.setattr(render_docs.common, "OUT", out)
    render_docs.load.cache_clear()
    try:
        text = render_docs.BLOCKS["eta-later"]()
    finally:
        render_docs.load.cache_clear()
    # beside the served p50's ratio, the two measured and not served: blended by its age's weight, scaled by its ratio
    assert "| helios | 10 min | 40 | 30.0 | 6.0 | 24.0 | 0.25 | 0.30 | 0.90 | 80.0% |" in text
    assert "- helios, 10 min after: p90 covers 85-95% of actual starts (in 0.85-0.95): 80.0%, **not met**; " \
           "median abs error <= half the naive estimate's (<= 0.5): 0.25, met." in text
    assert "- helios, second window: not measured at fixed times after" in text


def _toml_keys(d: dict, leaves: set[str], prefix: str = "") -> set[str]:
    """The dotted keys a TOML file sets; a table that is itself one key (a mapping such as priority_by_partition)
    counts as that key."""
    keys = set()
    for k, v in d.items():
        if f"{prefix}{k}" in leaves:
            keys.add(f"{prefix}{k}")
        elif isinstance(v, dict):
            keys |= _toml_keys(v, leaves, f"{prefix}{k}.")
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                keys |= _toml_keys(item, leaves, f"{prefix}{k}[].")
        else:
            keys.add(f"{prefix}{k}")
    return keys


def test_the_config_table_has_every_key_of_the_example_config():
    example = tomllib.loads((REPO / "deploy" / "config.example.toml").read_text())
    documented = {k for k, *_ in render_docs.config_keys()}
    assert _toml_keys(example, documented) - documented == set()
    assert "policy.reserve_share" in documented and "tenants[].name" in documented
