"""Windows in the replay (issue 39, item 4): the replay hands cfg.windows to the plan and the window opens at the
trace's time (a day of 2020, far from the wall clock), so the tenant's daily peak is met at once with the window
and queued without it; the per-tenant meter counts the hold's idle GPU-minutes."""

import numpy as np
import pandas as pd

from daemon.config import parse_config
from daemon.sim.windows_evidence import TenantMeter, replay, with_windows
from daemon.sim.workloads import Workload

STEP = 60


def _workload() -> Workload:
    idx = pd.date_range("2020-03-02", periods=2 * 1440, freq="min", tz="UTC", name="time")
    minute = idx.hour * 60 + idx.minute
    batch = np.where((minute >= 14 * 60) & (minute < 15 * 60), 16.0, 0.0)
    frame = pd.DataFrame({"batch": batch, "lo": np.full(len(idx), 32.0)}, index=idx)
    return Workload("windows", frame, ("normal", "low"), np.array([8, 1]), 32, 1440)


def _cfg():
    return parse_config({"cluster": {"gpus": 32, "gpus_per_node": 8},
                         "tenants": [{"name": "batch", "tier": "normal"}, {"name": "lo", "tier": "low"}],
                         "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0}})


WINDOW = {"name": "eod", "tenant": "batch", "gpus": 16, "every": "daily", "at": "14:00", "timezone": "UTC",
          "duration_minutes": 60, "reclaim_before_minutes": 30}


def test_the_replay_opens_a_window_at_the_traces_time_and_meets_the_peak():
    w, cfg = _workload(), _cfg()
    without = replay(w, cfg, "reactive", steps=1440)
    with_ = replay(w, with_windows(cfg, [WINDOW]), "reactive", steps=1440)
    assert without.unmet_gpu_min["batch"] > 16 * 5          # reactive: the peak waits for the low work to drain
    assert with_.unmet_gpu_min["batch"] < without.unmet_gpu_min["batch"] / 5
    # the hold from 13:30 (and the drains ahead of it) leaves GPUs idle that the window's tenant does not use yet
    assert with_.held_idle_gpu_min["batch"] > without.held_idle_gpu_min["batch"]


def _on_slurm(cfg, reserved: str):
    return cfg.model_copy(update={"actuators": cfg.actuators.model_copy(update={
        "enabled": ["slurm"], "slurm": cfg.actuators.slurm.model_copy(update={"windows_reserved": reserved})})})


def test_replayed_as_slurm_a_windows_nodes_are_lent_to_no_one_after_it_until_the_next():
    """With the Slurm actuator in the config and windows_reserved = ahead the replay carries a window out as Slurm
    does (its reservation made ahead; tests/sim/test_windows_slurm_sim.py): the low work that the lead time drained
    off the window's two nodes cannot start there again after the window (15:00-24:00), where Kueue lends them
    back at once. With at_lead (the default) no reservation exists until the next lead time: lent back, as Kueue."""
    w, cfg = _workload(), _cfg()
    kueue = replay(w, with_windows(cfg, [WINDOW]), "reactive", steps=1440)
    slurm = replay(w, with_windows(_on_slurm(cfg, "ahead"), [WINDOW]), "reactive", steps=1440)
    assert slurm.unmet_gpu_min["lo"] >= kueue.unmet_gpu_min["lo"] + 16 * 60 * 8
    assert slurm.unmet_gpu_min["batch"] <= kueue.unmet_gpu_min["batch"] + 16     # the window itself is kept
    # the reserved nodes' free GPUs are kept for the window's tenant: held idle
    assert slurm.held_idle_gpu_min["batch"] >= kueue.held_idle_gpu_min["batch"] + 16 * 60 * 8
    at_lead = replay(w, with_windows(_on_slurm(cfg, "at_lead"), [WINDOW]), "reactive", steps=1440)
    assert at_lead.unmet_gpu_min["lo"] <= kueue.unmet_gpu_min["lo"] + 16 * 2 * 3     # at most its few minutes ahead
    assert at_lead.unmet_gpu_min["batch"] <= kueue.unmet_gpu_min["batch"] + 16
    assert at_lead.held_idle_gpu_min["batch"] <= kueue.held_idle_gpu_min["batch"] + 16 * 2 * 3


class _Holders(TenantMeter):
    """The nodes' holders as each plan of the replay found them, by HH:MM."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.holder: dict[str, np.ndarray] = {}

    def before_plan(self, c, k, state, measured):
        self.holder[str(state.at)[11:16]] = c.node_holder.copy()
        return super().before_plan(c, k, state, measured)


def test_replayed_as_slurm_a_pooled_tenants_window_is_not_handed_the_pools_nodes():
    """Two pooled high tenants (h runs 16 GPUs in the pool) and a low one on 4 nodes of 8; h's window of 8 GPUs at
    14:00. Kueue relabels a pool node where h runs for its window at the lead time (13:30); Slurm cannot make the
    window's reservation on the pool's UNLIMITED one (tests/actuators/test_slurm_windows.py): one outside it."""
    idx = pd.date_range("2020-03-02", periods=2 * 1440, freq="min", tz="UTC", name="time")
    frame = pd.DataFrame({"h": np.full(len(idx), 16.0), "h2": np.full(len(idx), 8.0), "lo": np.full(len(idx), 32.0)},
                         index=idx)
    w = Workload("pool", frame, ("high", "high", "low"), np.array([8, 8, 8]), 32, 1440)
    cfg = parse_config({"cluster": {"gpus": 32, "gpus_per_node": 8},
                        "tenants": [{"name": "h", "tier": "high"}, {"name": "h2", "tier": "high"},
                                    {"name": "lo", "tier": "low"}],
                        "policy": {"preempt_budget_share": 1.0, "preempt_min_runtime_s": 0}})
    window = {**WINDOW, "name": "h", "tenant": "h", "gpus": 8}
    pool = 3                                               # the pool's holder index (after the 3 tenants)
    for actuators, from_pool in ((["log"], True), (["slurm"], False)):
        c = cfg.model_copy(update={"actuators": cfg.actuators.model_copy(update={"enabled": actuators})})
        hook = _Holders(3)
        replay(w, with_windows(c, [window]), "reactive", steps=1440, hook=hook)
        mine = np.flatnonzero(hook.holder["13:35"] == 0)
        assert mine.size == 1, (actuators, hook.holder["13:35"])
        assert bool((hook.holder["13:30"][mine] == pool).all()) is from_pool, (actuators, hook.holder["13:30"])
