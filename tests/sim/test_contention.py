"""Whether a replayed window's demand ever contends for GPUs (daemon/sim/contention.py), on hand-built windows."""

import numpy as np
import pandas as pd

from daemon.sim.contention import beside_pool, check, smallest_uncontended


def window(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    return pd.DataFrame(cols, index=pd.date_range("2026-01-01", periods=n, freq="min", tz="UTC"))


def test_the_peak_against_the_room_beside_the_pool():
    w = window(a=np.array([1.0, 5.0, 2.0]), b=np.array([1.0, 3.0, 0.0]))  # peak 8 at the second step
    assert beside_pool(16, 0.5) == 8 and beside_pool(10, 0.25) == 8        # 10 - floor(2.5)
    c = check(w, 16, 0.5, gpus_per_node=8)
    assert not c.contends and c.peak_gpus == 8 and c.free_gpus == 8 and c.peak_at == str(w.index[1])
    assert "set [cluster] gpus = 8" in c.message and "contention starts below 15" in c.message
    assert smallest_uncontended(8, 0.5) == 15 and smallest_uncontended(9, 0.5) == 17
    d = check(w, 15, 0.5, gpus_per_node=8)                                # 15 - 7 = 8 beside: still room
    assert not d.contends
    e = check(w, 14, 0.5, gpus_per_node=8)                                # 14 - 7 = 7 < 8
    assert e.contends and e.message is None


def test_on_a_fleet_one_type_can_contend_while_the_fleet_is_idle():
    # 100 GPUs: 10 t4, 90 a100, nothing pooled. A t4-only tenant at 12 contends (10 t4s) though 12 is far under
    # 100; the same 12 accepting either type does not
    w = window(x=np.array([4.0, 12.0, 6.0]), y=np.array([1.0, 2.0, 3.0]))
    gpus = {"t4": 10, "a100": 90}
    c = check(w, 100, 0.0, gpus_per_node=8, accepts=[("t4",), ()], type_gpus=gpus, capacity_key="fleet.pools")
    assert c.contends and c.where == "t4"
    c = check(w, 100, 0.0, gpus_per_node=8, accepts=[("t4", "a100"), ()], type_gpus=gpus,
              capacity_key="fleet.pools")
    assert not c.contends and "[fleet] pools' nodes" in c.message
    # two tenants each within their own type's GPUs, over the two types' GPUs together (Hall's condition)
    w = window(x=np.array([8.0]), y=np.array([8.0]), z=np.array([8.0]))
    c = check(w, 100, 0.0, gpus_per_node=8, accepts=[("t4",), ("v100",), ("t4", "v100")],
              type_gpus={"t4": 10, "v100": 10, "a100": 80})
    assert c.contends and c.where == "t4|v100"
