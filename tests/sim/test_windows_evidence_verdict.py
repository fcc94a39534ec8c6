"""A proposed window's replayed evidence says whether it helps its tenant. On a user's 8-day history the proposer
offered 'llm-train-1300' whose replay left llm-train 5,060 GPU-minutes unmet with it against 3,296 without: the API
and the console gave the two numbers and an accept button, nothing said it made things worse."""

from types import SimpleNamespace

import pytest

from daemon.sim import windows_evidence


def _run(unmet: float):
    meter = SimpleNamespace(step_min=1.0, summary=lambda: {"preemptions": 3})
    return windows_evidence.WindowRun(meter, {"t": unmet}, {"t": 0.0}, None)


@pytest.mark.parametrize("without, with_, helps, words", [
    (3296.0, 5060.0, False, "leaves the tenant 1,764 GPU-minutes more unmet than without it in the replay: not "
                            "worth accepting as proposed"),
    (1000.0, 250.0, True, "cuts the tenant's unmet GPU-minutes by 75%"),
    (40.0, 40.0, False, "leaves the tenant's unmet GPU-minutes as they were: it only holds GPUs"),
    (0.0, 0.0, None, "the tenant had no unmet demand to cut in the replay"),
])
def test_each_proposals_evidence_says_whether_the_window_helps_its_tenant(monkeypatch, without, with_, helps, words):
    runs = iter([_run(without), _run(with_)])          # evidence replays without the windows, then with them
    monkeypatch.setattr(windows_evidence, "replay", lambda *a, **k: next(runs))
    monkeypatch.setattr(windows_evidence, "with_windows", lambda cfg, ws: cfg)
    ev = windows_evidence.evidence(None, None, [{"name": "t-1300", "tenant": "t"}], steps=1440)["t-1300"]
    assert ev["unmet_gpu_min_without"] == without and ev["unmet_gpu_min_with"] == with_
    assert ev["helps"] is helps and ev["verdict"] == words
