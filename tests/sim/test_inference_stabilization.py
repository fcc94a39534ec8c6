"""The services' autoscalers keep an HPA's scale-down stabilization (InferenceSpec.scale_down_stabilization_s,
daemon/sim/inference.py): the replica count is the max of the recommendations over the window, scale-up at once.
Without it a burst's replicas left the next quiet minute and the next burst was throttled a cold start long."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from daemon.config import Config, ConfigError, load_config
from daemon.sim.inference import Autoscaler, InferenceSpec, need_frame
from daemon.sim.replay import run_strategy
from daemon.sim.workloads import Workload

STEP_S = 60


def _spec(stab_s: float) -> InferenceSpec:
    return InferenceSpec(1, 10.0, 180.0, headroom=0.0, scale_down_stabilization_s=stab_s)


def _asked(strategy: str, need: np.ndarray, stab_s: float) -> list[float]:
    """What one service's autoscaler asks for at every step of `need` (GPUs), asked in step order."""
    a = Autoscaler(strategy, np.array([0]), [_spec(stab_s)], STEP_S, drain_steps=0, quantile=0.5)
    demand = need.reshape(-1, 1).astype(float)
    return [float(a.wanted(k, demand, None)[0]) for k in range(len(need))]


def test_replicas_stay_the_window_after_a_burst_then_drop_hand_computed():
    """Need 1, a burst of 4 at step 3, a burst of 3 at step 10, else 1. With 300 s at 60 s steps the window is
    5 steps: 4 at steps 3..7 (recommended at 3, still inside at 7), 1 at 8 and 9, 3 at 10..14, 1 from 15. With 0
    (and with 60 s, one step: the HPA keeps only recommendations newer than the window) the count is the need."""
    need = np.array([1, 1, 1, 4, 1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1], dtype=float)
    assert _asked("reactive", need, 300.0) == [1, 1, 1, 4, 4, 4, 4, 4, 1, 1, 3, 3, 3, 3, 3, 1, 1]
    assert _asked("reactive", need, 0.0) == need.tolist()          # the old behaviour, unchanged
    assert _asked("reactive", need, 60.0) == need.tolist()
    assert _asked("reactive", need, 301.0) == [1, 1, 1, 4, 4, 4, 4, 4, 4, 1, 3, 3, 3, 3, 3, 3, 1]  # 6 steps
    # perfect: its recommendation (the true peak over cold start 3 steps ahead: 4 from step 0) is stabilized alike
    assert _asked("perfect", need, 0.0) == [4, 4, 4, 4, 1, 1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1]
    assert _asked("perfect", need, 300.0) == [4, 4, 4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 1, 1]


def test_a_missing_recommendation_is_skipped_not_zero():
    """A step with no need (missing data) neither lowers the count nor counts as 0; all missing stays missing."""
    assert _asked("reactive", np.array([2.0, np.nan, 1.0]), 300.0) == [2, 2, 2]
    got = _asked("reactive", np.array([np.nan, np.nan]), 300.0)
    assert all(np.isnan(got))


def _bursts(n: int, at: tuple[int, ...]) -> pd.DataFrame:
    idx = pd.date_range("2026-01-05", periods=n, freq=f"{STEP_S}s", tz="UTC", name="time")
    r = np.full(n, 10.0)
    r[list(at)] = 20.0
    return pd.DataFrame({"svc": r}, index=idx)


def _run(stab_s: float, strategy: str = "reactive"):
    rates = _bursts(40, (15, 19))
    specs = {"svc": _spec(stab_s)}
    w = Workload("stab-test", need_frame(rates, specs), ("high",), np.array([1]), 32, 10, inference=specs,
                 rates=rates)
    return run_strategy(strategy, w, Config(), steps=30)


def test_a_second_burst_inside_the_window_is_served_hand_computed():
    """10 req/s (one replica of 10 req/s, no headroom, cold start 3 steps), 20 req/s at steps 15 and 19 only.
    The HPA sees each burst a step late: a second replica placed at 16 (ready at 19). Each burst meets one ready
    replica the first time: 600 of its 1,200 requests throttled (the bucket holds no tokens: the base rate fills
    it exactly). With 300 s the replica placed at 16 is kept to step 20 and serves the second burst at 19 (the
    recommendation of 2 made at 20 keeps it to 24): 600 throttled in all, replicas 30 + 9 GPU-minutes. Scaling
    down at once (0 s) drops it at 17, so the second burst is throttled as the first: 1,200, with 30 + 2."""
    kept, dropped = _run(300.0), _run(0.0)
    assert kept.inf_requests["high"] == dropped.inf_requests["high"] == (28 * 10 + 2 * 20) * 60.0
    assert kept.inf_throttled["high"] == 600.0 and dropped.inf_throttled["high"] == 1200.0
    assert kept.inf_late["high"] == dropped.inf_late["high"] == 0.0
    assert kept.summary()["tiers"]["high"]["inf_gpu_min"] == 39
    assert dropped.summary()["tiers"]["high"]["inf_gpu_min"] == 32


@pytest.mark.parametrize("stab_s", [0.0, 300.0, 900.0])
@pytest.mark.parametrize("strategy", ["reactive", "perfect"])
def test_throttled_never_exceeds_arrivals_at_any_window(stab_s, strategy):
    """Bursty arrivals for a high and a normal service: per tier served + throttled + late == arrivals and
    0 <= throttled <= arrivals, whatever the window; a longer window never throttles more here (it only keeps
    replicas longer)."""
    n, start = 200, 40
    rng = np.random.default_rng(5)
    idx = pd.date_range("2026-01-05", periods=n, freq=f"{STEP_S}s", tz="UTC", name="time")
    rates = pd.DataFrame({c: rng.gamma(0.5, 20.0, n) for c in ("hi", "lo")}, index=idx)
    runs = {}
    for s in sorted({0.0, stab_s}):
        specs = {c: InferenceSpec(1, 4.0, 120.0, headroom=0.2, scale_down_stabilization_s=s) for c in rates.columns}
        w = Workload("stab-any", need_frame(rates, specs), ("high", "normal"), np.array([1, 1]), 256, start,
                     inference=specs, rates=rates)
        runs[s] = m = run_strategy(strategy, w, Config(), steps=n - start)
        for tier, col in (("high", "hi"), ("normal", "lo")):
            assert m.inf_requests[tier] == pytest.approx(rates[col].iloc[start:].sum() * STEP_S)
            total = m.inf_served[tier] + m.inf_throttled[tier] + m.inf_late[tier]
            assert total == pytest.approx(m.inf_requests[tier], rel=1e-12)
            assert 0 <= m.inf_throttled[tier] <= m.inf_requests[tier]
    if stab_s > 0 and strategy == "reactive":
        assert runs[stab_s].inf_throttled["high"] < runs[0.0].inf_throttled["high"]


def test_a_negative_window_is_refused():
    with pytest.raises(ValueError, match="scale_down_stabilization_s >= 0"):
        InferenceSpec(1, 10.0, 60.0, scale_down_stabilization_s=-1.0)


def test_the_config_sets_the_window_and_refuses_a_negative_one_in_one_line(tmp_path):
    body = "[[tenants]]\nname = \"svc\"\n[tenants.inference]\ngpus_per_replica = 1\nreplica_rps = 5\n" \
           "cold_start_s = 60\n"
    p = tmp_path / "c.toml"
    p.write_text(body)
    assert load_config(p).tenants[0].inference.scale_down_stabilization_s == 300.0   # an HPA's default
    p.write_text(body + "scale_down_stabilization_s = 900\n")
    assert load_config(p).tenants[0].inference.scale_down_stabilization_s == 900.0
    p.write_text(body + "scale_down_stabilization_s = -5\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "scale_down_stabilization_s" in str(e.value) and "\n" not in str(e.value)
