"""policy.replica_quantile (issue 40): the forecast quantile the predictive replica autoscaler scales to, apart
from the hold's policy.quantile."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from daemon.config import Config
from daemon.sim.cluster import SimCluster
from daemon.sim.inference import InferenceSpec, need_frame
from daemon.sim.replay import inference_run
from daemon.sim.workloads import Workload
from forecaster.types import Forecast

N, H = 30, 20


def _asked(cfg: Config) -> float:
    """The GPUs one 1-GPU-replica service (3-min cold start) asks for at step 10, its need now 2 GPUs, on a
    constructed forecast whose peak over the lead is 4 GPUs at p50, 12 at p90 and 20 at p99."""
    idx = pd.date_range("2026-01-05", periods=N, freq="min", tz="UTC", name="time")
    rates = pd.DataFrame({"svc": np.full(N, 20.0)}, index=idx)
    specs = {"svc": InferenceSpec(1, 10.0, 180.0, headroom=0.0)}
    w = Workload("quantile-test", need_frame(rates, specs), ("high",), np.array([1]), 64, 5, inference=specs,
                 rates=rates)
    c = SimCluster(["svc"], np.array([2]), 64, np.array([1]))
    run = inference_run(w, cfg, "predictive", ("svc",), 60, c)
    values = np.stack([np.full(H, v) for v in (4.0, 12.0, 20.0)], axis=-1)[None]
    fc = Forecast(("svc",), (0.5, 0.9, 0.99), values, idx[9], 60, "constructed")
    return float(run.wanted(10, w.demand.to_numpy(dtype=float), fc)[0])


def test_the_key_sets_the_replicas_the_predictive_autoscaler_asks_for():
    assert _asked(Config()) == 12.0                                         # none: policy.quantile, p90
    assert _asked(Config(policy={"replica_quantile": 0.5})) == 4.0
    assert _asked(Config(policy={"replica_quantile": 0.99})) == 20.0
    # the hold's quantile alone no longer moves the autoscaler once the key is set
    assert _asked(Config(policy={"quantile": 0.5, "replica_quantile": 0.9})) == 12.0


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1])
def test_a_quantile_outside_zero_one_is_refused(bad):
    with pytest.raises(ValidationError, match="replica_quantile"):
        Config(policy={"replica_quantile": bad})


def _asked_per_tier(cfg: Config) -> dict[str, float]:
    """The GPUs two 1-GPU-replica services (3-min cold start), one high-tier and one normal-tier, ask for at step 10,
    their need now 2 GPUs each, on a constructed forecast whose p90 peak over the lead is 12 GPUs."""
    idx = pd.date_range("2026-01-05", periods=N, freq="min", tz="UTC", name="time")
    rates = pd.DataFrame({"hi": np.full(N, 20.0), "nrm": np.full(N, 20.0)}, index=idx)
    specs = {c: InferenceSpec(1, 10.0, 180.0, headroom=0.0) for c in rates.columns}
    w = Workload("ahead-test", need_frame(rates, specs), ("high", "normal"), np.array([1, 1]), 64, 5,
                 inference=specs, rates=rates)
    c = SimCluster(["hi", "nrm"], np.array([2, 1]), 64, np.array([1, 1]))
    run = inference_run(w, cfg, "predictive", ("hi", "nrm"), 60, c)
    values = np.stack([np.full((2, H), v) for v in (4.0, 12.0, 20.0)], axis=-1)
    fc = Forecast(("hi", "nrm"), (0.5, 0.9, 0.99), values, idx[9], 60, "constructed")
    return dict(zip(("hi", "nrm"), run.wanted(10, w.demand.to_numpy(dtype=float), fc).tolist()))


def test_only_the_tiers_named_start_replicas_ahead():
    assert _asked_per_tier(Config()) == {"hi": 12.0, "nrm": 12.0}                # default: every tier
    # policy.replica_ahead_tiers = [high]: the normal-tier service scales on its need now (2), as reactive
    assert _asked_per_tier(Config(policy={"replica_ahead_tiers": ["high"]})) == {"hi": 12.0, "nrm": 2.0}
    assert _asked_per_tier(Config(policy={"replica_ahead_tiers": []})) == {"hi": 2.0, "nrm": 2.0}
