"""The mixed-fleet replay (issue 24): type-aware and type-blind plans on the same simulated fleet."""

from pathlib import Path

import pytest

from daemon.config import Config
from daemon.sim.fleet_replay import alibaba_fleet, at_equal_utilization, run_fleet, synthetic_fleet

DATA = Path("/work/shared/data")


def test_type_aware_holds_and_preemptions_never_sit_on_types_the_holder_cannot_use():
    fw = synthetic_fleet(tenants=12, days=0.05, history_days=0.2)
    cfg = Config()
    aware = run_fleet(fw, cfg, "aware", steps=60, check_invariants=True)
    blind = run_fleet(fw, cfg, "blind", steps=60, check_invariants=True)
    assert aware["held_unusable_gpu_min"] == 0 and aware["preempted_gpus_unusable_by_beneficiary"] == 0
    assert set(aware["types"]) == {"a100", "h100", "t4"} and aware["types"]["t4"]["capacity"] == 64
    for r in (aware, blind):
        assert 0 < r["utilization"] <= 1
        assert sum(v["demand_gpu_min"] for v in r["by_spec"].values()) == \
            pytest.approx(sum(v["demand_gpu_min"] for v in r["tiers"].values()))
    cmp = at_equal_utilization([aware, blind])
    assert cmp == {} or "overlap" in cmp or set(cmp) == {"utilization", "aware", "blind"}


@pytest.mark.skipif(not (DATA / "alibaba-gpu-2023" / "openb_pod_list_gpuspec33.csv").exists(),
                    reason="the Alibaba trace is not on this machine")
def test_alibaba_gpuspec33_keeps_the_node_lists_models_and_the_pods_constraints():
    fw = alibaba_fleet(DATA, days=0.2, history_days=0.1)
    assert set(fw.node_types) == {"a10", "g2", "g3", "p100", "t4", "v100m16", "v100m32"}
    assert ("v100m16", "v100m32") in fw.accepts and () in fw.accepts
    assert fw.w.capacity == int(fw.node_gpus.sum())
    r = run_fleet(fw, Config(), "aware", steps=30, check_invariants=True)
    assert r["held_unusable_gpu_min"] == 0
