"""README's results at a glance carries issue 40's skill-gate checks (synthetic, Helios, its unseen window, Alibaba:
predictive with the gate at reactive's utilization), read from the same JSON and margin rule as docs/forecasting.md
(bench/gate_docs.py). It had rows for the issue's ServeGen and SLO-sizing targets and none for these, so the one
target the gate misses (synthetic keeps 0% of the ungated high-tier gain, goal 80%) showed nowhere on the page."""

from __future__ import annotations

import sys

from bench.render import common, readme
from bench.render.common import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import gate_docs  # noqa: E402


def test_the_glance_has_the_skill_gate_row_with_each_traces_verdict_at_the_chosen_margin():
    files = {f: common.load(f) for _, f, _ in gate_docs.GATE_FILES if common.exists(f)}
    m = gate_docs.choose(files)
    assert files and m is not None
    rows = [r for r in readme.results().splitlines() if r.startswith("| [skill gate]")]
    assert len(rows) == 1, readme.results()
    row = rows[0]
    for case, f, role in gate_docs.GATE_FILES:
        c = files[f]["comparison"][gate_docs.variant(m)]
        met = sum(v is True for v in c["targets"].values())
        label = case + (" (unseen window)" if role == "unseen" else "")
        assert f"{label} {met} of {len(c['targets'])}" in row, row
    verdicts = row.rstrip(" |").rsplit("|", 1)[1].split(";")
    assert [v.strip() == "met" for v in verdicts] == [files[f]["comparison"][gate_docs.variant(m)]["all_met"]
                                                     for _, f, _ in gate_docs.GATE_FILES], row
